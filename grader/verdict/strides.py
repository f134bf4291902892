"""A row stride held in a name followed to what it is computed from: a variable's assignment, a
kernel parameter through its launch's argument, a struct's field, a host dim3's x (verdict/causes.py
names it where it is the launch's padded width). Object-like macros are expanded by the caller."""

from __future__ import annotations

import re

from grader.core.emulation import device_bodies
from grader.verdict.cexpr import bracketed, evaluate, split_args

# A stride held in a name is followed to what it is computed from (a variable, a kernel's parameter
# through its launch's argument, a struct's field, a host dim3's x), then evaluated at a row length
# of PROBE: a row stride that is the launch's padded width (gridDim.x * blockDim.x, (cols + 255) /
# 256 * 256) comes out as another length.

PROBE = 1000


_LAUNCH_PROBE = {"blockDim_x": 256, "blockDim_y": 1, "blockDim_z": 1, "gridDim_x": 4, "gridDim_y": 1003, "gridDim_z": 1}


def _definition(name: str, text: str) -> str | None:
    """What name is assigned (its last assignment), a field's (`.ld = ...`, `->ld = ...`), a host
    dim3's x or y (`dim3 grid(a, b)`), or a kernel parameter's launch argument."""
    field_ = re.fullmatch(r"(\w+)\s*(?:\.|->)\s*(\w+)", name)
    if field_:
        obj, f = field_.groups()
        if f in ("x", "y", "z"):
            m = re.search(rf"\bdim3\s+{re.escape(obj)}\s*[({{]", text)
            if m:
                inner, _ = bracketed(text, m.end() - 1) if text[m.end() - 1] == "(" else (
                    text[m.end():text.find("}", m.end())], 0)
                args = split_args(inner)
                k = "xyz".index(f)
                return args[k] if k < len(args) else "1"
        found = re.findall(rf"(?:\.|->)\s*{re.escape(f)}\s*=(?!=)\s*([^;,}}]+)", text)
        return found[-1] if found else None
    found = re.findall(rf"(?<![\w.>])(?:const\s+)?(?:[\w:]+\s+)?{re.escape(name)}\s*=(?!=)\s*([^;]+);", text)
    if found:
        return found[-1]
    for start, _body in device_bodies(text):
        params = _param_names(start, text)
        if name not in params:
            continue
        kernel = re.search(r"(\w+)\s*\($", text[:text.rfind("(", 0, text.rfind(")", 0, start) + 1) + 1])
        if kernel is None:
            continue
        launch = re.search(rf"\b{re.escape(kernel.group(1))}\s*<<<[^;]*?>>>\s*\(", text)
        if launch is None:
            continue
        args = split_args(bracketed(text, launch.end() - 1)[0])
        k = params.index(name)
        return args[k] if k < len(args) else None
    return None


def _param_names(body_start: int, code: str) -> list[str]:
    close = code.rfind(")", 0, body_start)
    depth, i = 0, close
    while i >= 0:
        depth += {")": 1, "(": -1}.get(code[i], 0)
        if depth == 0:
            break
        i -= 1
    out = []
    for p in split_args(code[i + 1:close]):
        m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*$", p)
        out.append(m.group(1) if m else "")
    return out


def launch_width(by: str, text: str, *, row_length: str, dims: tuple[str, ...]) -> tuple[str, int] | None:
    """(what by is computed from, its value) where the stride named by resolves, through its
    definitions (a few deep), to a length other than the row's at PROBE: the launch's padded width.
    None where it is the row's length (in floats or in 2- or 4-float vectors) or cannot be followed."""
    env = dict(_LAUNCH_PROBE)
    env.update({d: PROBE + 3 for d in dims if d != row_length})
    env[row_length] = PROBE
    expr, seen = by, set()
    for _ in range(5):
        names = [n for n in dict.fromkeys(re.findall(r"(?<![\w.])[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*)?", expr))
                 if not re.fullmatch(r"(?:blockDim|gridDim)\s*\.\s*[xyz]", n) and n not in env
                 and n not in ("sizeof", "static_cast", "size_t", "int", "unsigned", "long", "min", "max")]
        if not names:
            break
        progressed = False
        for n in names:
            if n in seen:
                continue
            d = _definition(n, text)
            seen.add(n)
            if d is not None and d.strip() != n:
                expr = re.sub(rf"(?<![\w.>]){re.escape(n)}(?![\w])", f"({d.strip()})", expr)
                progressed = True
        if not progressed:
            break
    value = evaluate(expr, env)
    if value is None or value in (PROBE, PROBE // 2, PROBE // 4):
        return None
    if not re.search(rf"\b(?:gridDim|blockDim|{re.escape(row_length)})\b", expr):
        return None             # a constant step (a chunk of rows), not a width computed from the launch or the row
    shown = re.sub(r"\s+", " ", expr).strip()
    while shown.startswith("(") and bracketed(shown, 0)[1] == len(shown):      # one pair around it all
        shown = shown[1:-1].strip()
    return shown, value
