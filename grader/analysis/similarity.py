"""Which submissions of a class share their kernel's code once names, literals, comments, spacing
and the order of the functions are set aside: token winnowing, as MOSS and JPlag do it.

Each file is read through the grader's own scan (core/source.py: comments and strings blanked,
the file's object-like macros expanded, newlines kept so every token keeps its line), preprocessor
lines dropped, and cut into tokens: a keyword, a CUDA builtin (threadIdx, __syncthreads, erff,
float4, ...) and an operator stay themselves; every other name is one class (I), every number
another (N), a string a third (S); qualifiers a copy adds or drops without changing the code
(const, __restrict__, inline, static) are left out. The tokens are cut into the file's top-level
units (a function, a struct, a declaration; a namespace or extern "C" block is looked through), and
each unit's k-grams (K tokens) are hashed; a window of W consecutive hashes keeps its smallest
(winnowing): two files that share a run of K + W - 1 tokens surely share a kept hash. As no k-gram
crosses a unit's edge, the order of the functions changes nothing.

A hash the exercise's own files hold (its reference, any code the course hands out: `given`) is
removed from every file, so the skeleton everyone starts from is no match; so is a hash held by
more than COMMON_SHARE of the class (and by more than COMMON_AT_LEAST files): the idiom every
kernel writes (`blockIdx.x * blockDim.x + threadIdx.x`) is not a sign of copying.

A pair's score is the mean of the two shares, of each file's hashes, that the other holds (JPlag's
average similarity: a small file wholly inside a larger one is not a copy of it by itself; a copy
with some code added stays above the threshold); jaccard is beside it. A file with fewer than
MIN_HASHES hashes left is too small to compare. Each pair carries its matching regions: the shared
hashes' tokens joined into runs, as line ranges of each file and their text, for a side-by-side view.

compare() is the whole of it, on (name, bytes) pairs: `grader batch` calls it through
batch/similarity.py, and the course server's instructor page may call it the same way.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from grader.core.backend import CUDA_RUNTIME  # the language every submission is written in
from grader.core.source import blank_comments_and_strings, expand_object_macros

K = 12                  # tokens in a k-gram: shorter runs are no evidence
W = 4                   # the winnowing window: a shared run of K + W - 1 tokens is surely seen
MIN_HASHES = 8          # a file with fewer hashes left (after the given code) is not compared
COMMON_SHARE = 0.4      # a hash in more than this share of the class ...
COMMON_AT_LEAST = 10    # ... and in more than this many files is the class's idiom, not a copy
DEFAULT_THRESHOLD = 0.75  # a pair at or above this score is named (measured: docs/instructors.md)
SHOWN_WIDTH = 160       # a region's line is cut there in the side-by-side view
GIVEN_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")

KEPT = frozenset("""
alignas alignof asm auto bool break case catch char class constexpr continue decltype default delete do double
else enum explicit extern false float for friend goto if int long namespace new noexcept nullptr operator private
protected public return short signed sizeof static_assert static_cast reinterpret_cast const_cast dynamic_cast
struct switch template this throw true try typedef typename union unsigned using virtual void while
size_t ptrdiff_t int64_t uint64_t int32_t uint32_t std
__global__ __device__ __host__ __shared__ __constant__ __managed__ __launch_bounds__ __noinline__
threadIdx blockIdx blockDim gridDim warpSize dim3 __syncthreads __syncwarp __threadfence
float2 float4 int2 int4 half __half __half2 __ldg __ldcs __ldcg __stcs __fmaf_rn __fdividef __frcp_rn
__shfl_sync __shfl_down_sync __shfl_xor_sync __shfl_up_sync atomicAdd atomicMax atomicMin atomicCAS
erf erff erfc erfcf tanh tanhf exp expf __expf exp2f log logf sqrt sqrtf rsqrtf fma fmaf fmaxf fminf max min
normcdf normcdff sin sinf cos cosf __sinf __cosf sincosf pow powf fabsf abs
""".split()) | frozenset(CUDA_RUNTIME.tokens)
_DROPPED = frozenset({"const", "__restrict__", "__restrict", "restrict", "inline", "__forceinline__",
                      "__inline__", "static", "volatile", "register"})
_MEMBERS = frozenset("xyzw")            # threadIdx.x, a float4's .w: the member is the meaning
_TOKEN = re.compile(r"""
    (?P<name>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w'.])*)
  | (?P<string>"[^"\n]*"?|'[^'\n]*'?)
  | (?P<op><<<|>>>|<<=|>>=|->|\+\+|--|<<|>>|&&|\|\||::|\.\.\.|[-+*/%&|^!=<>]=|[^\s\w])
""", re.VERBOSE)
_DIRECTIVE_LINE = re.compile(r"^[ \t]*#(?:\\\n|[^\n])*", re.MULTILINE)
_MOD = (1 << 61) - 1
_BASE = 1_000_003


@dataclass(frozen=True)
class Token:
    kind: str           # what is compared: the keyword, the operator, or I, N, S
    line: int           # 1-based, in the student's file


@dataclass
class Fingerprint:
    """A file's kept hashes, each with the token indexes its k-grams start at (a hash kept at two
    places has both), and the file's tokens and lines (for a region's lines and text)."""

    name: str
    tokens: list[Token]
    hashes: dict[int, list[int]]
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Region:
    """A run of matching code: 1-based inclusive line ranges in each file, and their text."""

    a_lines: tuple[int, int]
    b_lines: tuple[int, int]
    a_text: str
    b_text: str
    tokens: int                  # tokens the run covers in the first file


@dataclass(frozen=True)
class Pair:
    """Two submissions whose code matches: a (named first) and b, the score (the mean of the shares
    of each one's hashes the other holds, 0 to 1), jaccard, shared (hashes in both), whether their bytes are the same, and
    the matching regions, largest first."""

    a: str
    b: str
    score: float
    jaccard: float
    shared: int
    identical: bool
    regions: tuple[Region, ...]

    def other(self, name: str) -> str:
        return self.b if name == self.a else self.a


@dataclass(frozen=True)
class Similarity:
    """A class's pairs at or above threshold, best first; closest: each named student's best pair
    among those not byte-identical (identical files are named apart, as before); too_small: the
    files with too little code of their own to compare."""

    threshold: float
    pairs: tuple[Pair, ...]
    closest: dict[str, Pair]
    too_small: tuple[str, ...] = ()
    compared: int = 0

    def closest_text(self, name: str) -> str:
        """"bob (0.93)": the student's closest match at or above the threshold, or ""."""
        p = self.closest.get(name)
        return f"{p.other(name)} ({p.score:.2f})" if p is not None else ""


def tokens(data: bytes | str) -> list[Token]:
    """The file's tokens as compared, each with its line."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    code = expand_object_macros(blank_comments_and_strings(text.replace("\r\n", "\n")))
    code = _DIRECTIVE_LINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)
    out: list[Token] = []
    line = 1
    at = 0
    for m in _TOKEN.finditer(code):
        line += code.count("\n", at, m.start())
        at = m.start()
        kind = m.lastgroup
        word = m.group()
        if kind == "name":
            if word in _DROPPED:
                continue
            after_member = out and out[-1].kind in (".", "->")
            word = word if (word in KEPT and not after_member) or (after_member and word in _MEMBERS) else "I"
        elif kind == "number":
            word = "N"
        elif kind == "string":
            word = "S"
        out.append(Token(word, line))
    return out


def units(toks: list[Token]) -> list[range]:
    """The token index ranges of the file's top-level units: each function, struct or declaration
    up to its closing brace or semicolon; `namespace X {` and `extern "C" {` are looked through."""
    out: list[range] = []
    start = 0
    depth = 0
    through: list[int] = []             # the depths at which a looked-through block opened
    for i, t in enumerate(toks):
        if t.kind == "{":
            head = [x.kind for x in toks[start:i]]
            if depth == 0 and (head[:1] == ["namespace"] or head == ["extern", "S"]):
                through.append(depth)
                start = i + 1
                continue
            depth += 1
        elif t.kind == "}":
            if depth == 0 and through:
                through.pop()
                start = i + 1
                continue
            depth = max(0, depth - 1)
            if depth == 0:
                if i + 1 < len(toks) and toks[i + 1].kind == ";":
                    continue                    # struct S { ... };: the semicolon ends it
                out.append(range(start, i + 1))
                start = i + 1
        elif t.kind == ";" and depth == 0:
            out.append(range(start, i + 1))
            start = i + 1
    if start < len(toks):
        out.append(range(start, len(toks)))
    return out


@functools.cache
def _kind_hash(kind: str) -> int:
    """A token's number in the rolling hash: the same in every process (crc32, not hash())."""
    return zlib.crc32(kind.encode()) + 1


def kgram_hashes(toks: list[Token], k: int = K) -> list[tuple[int, int]]:
    """(hash, start) of every k-gram inside one unit, unit by unit."""
    out = []
    top = pow(_BASE, k - 1, _MOD)
    for u in units(toks):
        if len(u) < k:
            continue
        ids = [_kind_hash(toks[i].kind) for i in u]
        h = 0
        for x in ids[:k]:
            h = (h * _BASE + x) % _MOD
        out.append((h, u.start))
        for j in range(k, len(ids)):
            h = ((h - ids[j - k] * top) * _BASE + ids[j]) % _MOD
            out.append((h, u.start + j - k + 1))
    return out


def winnow(grams: list[tuple[int, int]], w: int = W) -> dict[int, list[int]]:
    """The kept hashes: in each window of w consecutive k-grams the smallest (the rightmost of
    equals), with where its k-grams start."""
    picked = set(grams) if len(grams) <= w else {
        min(reversed(grams[j : j + w]), key=lambda g: g[0]) for j in range(len(grams) - w + 1)}
    kept: dict[int, list[int]] = {}
    for h, at in sorted(picked, key=lambda g: g[1]):
        kept.setdefault(h, []).append(at)
    return kept


def fingerprint(name: str, data: bytes | str) -> Fingerprint:
    toks = tokens(data)
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return Fingerprint(name, toks, winnow(kgram_hashes(toks)), text.replace("\r\n", "\n").split("\n"))


def given_hashes(given: Iterable[bytes | str]) -> set[int]:
    """Every k-gram hash of the exercise's own files (not only the kept ones: a student's window
    may keep a hash the reference's did not)."""
    out: set[int] = set()
    for data in given:
        out.update(h for h, _ in kgram_hashes(tokens(data)))
    return out


def given_files(folder: Path) -> list[bytes]:
    """The code files under an exercise's folder (its reference, any skeleton beside it)."""
    if not folder.is_dir():
        return []
    return [p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix in GIVEN_SUFFIXES]


def compare(sources: Sequence[tuple[str, bytes | str]], *, given: Iterable[bytes | str] = (),
            threshold: float = DEFAULT_THRESHOLD) -> Similarity:
    """The pairs of sources (name, the file's bytes) whose score is at or above threshold, best
    first, each with its regions; given: the exercise's own files, whose code is no match."""
    prints = [fingerprint(name, data) for name, data in sources]
    raw = {fp.name: data for fp, (_, data) in zip(prints, sources)}
    holders = _holders(prints, given_hashes(given))
    small = {i for i, fp in enumerate(prints) if len(fp.hashes) < MIN_HASHES}
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for who in holders.values():
        for i, j in combinations(who, 2):
            counts[i, j] += 1
    pairs = []
    for (i, j), shared in counts.items():
        if i in small or j in small:
            continue
        pair = _pair(prints[i], prints[j], shared, raw, threshold)
        if pair is not None:
            pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, -p.jaccard, p.a, p.b))
    closest: dict[str, Pair] = {}
    for p in pairs:
        if not p.identical:
            closest.setdefault(p.a, p)
            closest.setdefault(p.b, p)
    return Similarity(threshold, tuple(pairs), closest, tuple(sorted(prints[i].name for i in small)), len(prints))


def _holders(prints: list[Fingerprint], skeleton: set[int]) -> dict[int, list[int]]:
    """Which fingerprints hold each hash, with the given files' hashes and those too common to say
    anything (held by more than COMMON_SHARE of the class) dropped from the fingerprints too."""
    for fp in prints:
        fp.hashes = {h: at for h, at in fp.hashes.items() if h not in skeleton}
    holders: dict[int, list[int]] = defaultdict(list)
    for i, fp in enumerate(prints):
        for h in fp.hashes:
            holders[h].append(i)
    common = max(COMMON_AT_LEAST, int(COMMON_SHARE * len(prints)))
    for h, who in list(holders.items()):
        if len(who) > common:
            del holders[h]
            for i in who:
                del prints[i].hashes[h]
    return holders


def _pair(a: Fingerprint, b: Fingerprint, shared: int, raw: dict[str, bytes | str], threshold: float) -> Pair | None:
    """Two fingerprints sharing `shared` hashes as a pair, with its regions, where their score
    reaches the threshold (else None)."""
    score = (shared / len(a.hashes) + shared / len(b.hashes)) / 2
    if score < threshold:
        return None
    jaccard = shared / (len(a.hashes) + len(b.hashes) - shared)
    same = _as_bytes(raw[a.name]) == _as_bytes(raw[b.name])
    return Pair(a.name, b.name, round(score, 4), round(jaccard, 4), shared, same, tuple(regions(a, b)))


def _as_bytes(data: bytes | str) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


def regions(a: Fingerprint, b: Fingerprint, *, k: int = K, gap: int = W + K) -> list[Region]:
    """The runs of matching tokens: each shared hash's k-gram in a and in b, joined to the next
    where both files go on within gap tokens of it, as line ranges, largest first. A hash b holds
    at several places goes with the one that carries the run on (else the first)."""
    at_b = {h: b.hashes[h] for h in a.hashes.keys() & b.hashes.keys()}
    matches = sorted((pa, h) for h in at_b for pa in a.hashes[h])
    runs: list[list[int]] = []                  # [a_start, a_end, b_start, b_end) in tokens

    def carried(n: int, q: int) -> int:
        """How many of the next few matches go on from b's place q as a's go on from matches[n]."""
        pa = matches[n][0]
        return sum(any(q <= q2 <= q + (pa2 - pa) + gap for q2 in at_b[h2]) for pa2, h2 in matches[n + 1 : n + 7])

    for n, (pa, h) in enumerate(matches):
        r = runs[-1] if runs else None
        if r is not None and pa <= r[1] + gap:
            pb = next((q for q in at_b[h] if r[2] - gap <= q <= r[3] + gap), None)
            if pb is not None:
                r[1] = max(r[1], pa + k)
                r[2] = min(r[2], pb)
                r[3] = max(r[3], pb + k)
                continue
        pb = max(at_b[h], key=lambda q: carried(n, q)) if len(at_b[h]) > 1 else at_b[h][0]
        runs.append([pa, pa + k, pb, pb + k])
    out = []
    for a0, a1, b0, b1 in runs:
        la = (a.tokens[a0].line, a.tokens[min(a1, len(a.tokens)) - 1].line)
        lb = (b.tokens[b0].line, b.tokens[min(b1, len(b.tokens)) - 1].line)
        out.append(Region(la, lb, _shown(a.lines[la[0] - 1 : la[1]]), _shown(b.lines[lb[0] - 1 : lb[1]]), a1 - a0))
    out.sort(key=lambda r: (-r.tokens, r.a_lines))
    return out


def _shown(lines: list[str]) -> str:
    return "\n".join(line if len(line) <= SHOWN_WIDTH else line[:SHOWN_WIDTH] + " ..." for line in lines)
