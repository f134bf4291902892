"""The C signatures an exercise declares: its kernel's and its optional launcher's.

The harness is generated from them (each parameter gets a tensor's pointer or a dimension's
value, cast to its declared type), and a student's kernel is compared with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.backend import CUDA_RUNTIME  # the language kernels and rubrics are written in, for every backend

_QUALIFIERS = re.compile(r"\b(__restrict__|__restrict|restrict)\b")
_INTEGER = re.compile(r"\b(size_t|int|unsigned|long|short|int64_t|uint64_t|int32_t|uint32_t|ptrdiff_t|char)\b")
_HEAD = re.compile(r"^\s*((?:__global__|__host__|extern\s+\"C\"|static|inline)\s+)*(?P<ret>[\w:]+)\s+(?P<name>\w+)\s*\(")


@dataclass(frozen=True)
class Param:
    ctype: str          # the type as declared, restrict qualifiers dropped: "const float*", "size_t"
    name: str

    @property
    def pointer(self) -> bool:
        return "*" in self.ctype

    @property
    def const_data(self) -> bool:
        """A pointer to const data (an input)."""
        return self.pointer and re.search(r"\bconst\b", self.ctype.split("*")[0]) is not None

    @property
    def element(self) -> str:
        """The pointee's type for a pointer ('float'), else the type without const."""
        base = self.ctype.split("*")[0] if self.pointer else self.ctype
        return " ".join(w for w in base.split() if w not in ("const", "volatile"))

    @property
    def integer(self) -> bool:
        return not self.pointer and _INTEGER.search(self.ctype) is not None

    @property
    def stream(self) -> bool:
        return self.ctype.strip() == CUDA_RUNTIME.stream


@dataclass(frozen=True)
class Signature:
    text: str
    returns: str
    name: str
    params: tuple[Param, ...]

    def declaration(self) -> str:
        """A plain C++ declaration (no __global__), for the harness."""
        return f"{self.returns} {self.name}({', '.join(f'{p.ctype} {p.name}' for p in self.params)});"


def split_params(inside: str) -> list[str]:
    """A parameter list split at its top-level commas, each part's whitespace collapsed."""
    parts, depth, cur = [], 0, []
    for ch in inside:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return [" ".join(p.split()) for p in parts]


def parse_param(text: str) -> Param:
    clean = " ".join(_QUALIFIERS.sub(" ", text).split())
    array = re.match(r"^(?P<type>.*\S)\s*\b(?P<name>\w+)\s*\[[^\]]*\]$", clean)
    if array:                                   # `const float x[]`, `float out[N]`: a pointer, as C reads it
        clean = f"{array.group('type')}* {array.group('name')}"
    m = re.match(r"^(?P<type>.*?[\s*&])(?P<name>\w+)$", clean)
    if not m or not m.group("type").strip():
        raise ValueError(f"cannot read the parameter {text!r} (write a type and a name)")
    ctype = re.sub(r"\s*\*\s*", "* ", m.group("type")).strip()
    return Param(ctype.replace("* *", "**"), m.group("name"))


def parse_signature(text: str) -> Signature:
    """'__global__ void k(const float* x, size_t n)' -> Signature; ValueError says what is wrong."""
    m = _HEAD.match(text)
    close = text.rfind(")")
    if not m or close < m.end():
        raise ValueError(f"not a C function signature: {text!r} (expected `void name(type name, ...)`)")
    inside = text[m.end(): close]
    params = () if inside.strip() in ("", "void") else tuple(parse_param(p) for p in split_params(inside))
    return Signature(text=" ".join(text.split()), returns=m.group("ret"), name=m.group("name"), params=params)
