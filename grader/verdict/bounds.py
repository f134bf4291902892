"""An access past a buffer attributed to the index that ran past: which thread made it, what each
index in its subscript held there, which of them is out of its dimension's range, and the guard
that would have stopped it (`row < rows`), or the comparison that lets it through.

The evidence: the emulator's fault (core/frames.Fault: the buffer, the element the address falls
on, the faulting thread's block and thread, the launch's shape) and the line the fault's address
maps to. The kernel's own statements (object-like macros expanded, comments blanked: the code the
compiler sees) are evaluated for that thread, with the case's dimensions for the parameters named
as the rubric names them: a small integer evaluator of C's + - * / % << >> and min/max, nothing
else. Where a subscript cannot be evaluated, or its value does not land on the faulting element,
nothing is claimed (None): the caller says what the fault alone shows.

On a GPU no address comes back (an illegal address ends the context): `attribute_anywhere` looks
for the same evidence from the source and the launch's shape, trying the last block and thread
along each axis, and names an access only where its index provably lands past its buffer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.frames import Fault
from grader.core.scan import expand_object_macros
from grader.core.source import Submission
from grader.verdict.causes import Cause, index_names, quoted
from grader.verdict.cexpr import evaluate, uncast
from grader.verdict.hostlaunch import kernel_values
from grader.verdict.kernelread import (
    ASSIGN,
    Kernel,
    Thread,
    accesses,
    added_terms,
    comparisons,
    corners,
    derived_from,
    environments,
    kernels,
    line_in,
    name_of,
    product_factors,
    runs,
)


@dataclass(frozen=True)
class _Hit:
    kernel: Kernel
    pointer: str                # the subscripted name
    subscript: str
    offset: int                 # of the access, in the body
    env: dict
    index: int                  # the subscript's value
    width: int                  # floats an element of the pointer's type holds
    given: tuple = ()           # parameters named as a dimension the launch gives another value


def attribute(sub: Submission, fault: Fault, *, line: int | None, shape: list[str], dims: dict[str, int]) -> Cause | None:
    """The access behind fault (an access past fault.buffer by the thread it names) and the index
    that ran past, with the guard to write; None where the thread's subscripts do not evaluate to
    the faulting element. shape: the buffer's dimensions as the rubric names them; dims: the case's."""
    if fault.buffer is None or fault.thread is None or fault.element is None:
        return None
    thread = _thread_of(fault)
    code = expand_object_macros(sub.code)
    for tries in ((line,), (None,)) if line is not None else ((None,),):
        found = sorted(accesses(code, tries[0]), key=lambda a: a[1] != fault.buffer)   # the buffer's own name first
        for k, pointer, subscript, offset, at_line, width, _ in found:
            params, _, given = kernel_values(code, name_of(code, k), k, dims, {})
            for env in environments(k, offset, thread, params):
                index = evaluate(subscript, env)
                if index is None or not (index * width <= fault.element < (index + 1) * width):
                    continue
                hit = _Hit(k, pointer, subscript, offset, env, index, width, tuple(given))
                return _said(sub, hit, fault, at_line, shape, dims)
    return None


def _thread_of(fault: Fault) -> Thread:
    return Thread(tuple(fault.block), tuple(fault.thread), tuple(fault.block_dim), tuple(fault.grid_dim))


def _said(sub: Submission, hit: _Hit, fault: Fault, line: int, shape: list[str], dims: dict[str, int]) -> Cause:
    code, thread = expand_object_macros(sub.code), _thread_of(fault)
    verb = "wrote" if fault.is_write == 1 else "read"
    code_name = "writes_past_output" if verb == "wrote" and fault.where == "past" else (
        "writes_before_output" if verb == "wrote" else "reads_past_input")
    body, env = hit.kernel.body, hit.env
    names = index_names(body)
    used = [n for n in dict.fromkeys(re.findall(r"(?<![\w.])[A-Za-z_]\w*(?:\.[xyz])?",
                                                 hit.subscript + " " + _expanded(hit)))
            if n in names or re.fullmatch(r"(?:threadIdx|blockIdx)\.[xyz]", n) and n in hit.subscript]
    values = ", ".join(f"{n} = {env.get(n.replace('.', '_'))}" for n in used if env.get(n.replace(".", "_")) is not None)
    last = hit.index * hit.width + hit.width - 1
    where = (f"element {hit.index} of {hit.pointer}"
             + (f" (floats {hit.index * hit.width}..{last} of {fault.buffer})" if hit.width > 1 else ""))
    size = _size_said(fault, shape, dims, hit.width)
    past = "past the end of" if fault.where == "past" else "before the start of"
    head = (f"line {line}: `{quoted(sub, line)}` {verb} {past} {fault.buffer}: {thread.said()} has "
            f"{values or hit.subscript + ' = ' + str(hit.index)}, so `{hit.pointer}[{hit.subscript.strip()}]` is "
            f"{where}, and {fault.buffer} holds {size}")
    if hit.given:
        p, arg, v = hit.given[0]
        launch = re.search(rf"\b{re.escape(name_of(code, hit.kernel))}\s*<<<", code)
        ll = code.count("\n", 0, launch.start()) + 1 if launch else line
        return Cause(code_name, line, f"{head}. The kernel's {p} is {v} here: the launch (line {ll}: "
                                      f"`{quoted(sub, ll)}`) passes `{arg}` for it, but the exercise's {p} is "
                                      f"{dims[p]}: pass that")
    ran, bound = _ran_past(hit, shape, dims, fault.floats)
    if ran is None:
        stride = _wrong_row_step(hit, shape, dims)
        return Cause(code_name, line, f"{head}. {stride}" if stride else head)
    name, value, limit_name, limit = ran, env.get(ran.replace(".", "_")), bound[0], bound[1]
    guards = [(n, b, off) for n, b, off in comparisons(body, derived_from(body, name)) if off < hit.offset]
    own = [g for g in guards if g[0] == name]
    right = [g for g in own if evaluate(g[1], env) == limit or re.sub(r"\s+", "", g[1]) == limit_name]
    if right:
        return Cause(code_name, line, head)          # compared with its bound: a guard off by one says the rest
    others = _other_guards(body, hit, names, name)
    row_use = re.search(rf"(?<![\w.]){re.escape(name)}\s*\)?\s*\*\s*[A-Za-z_(]", body) if len(shape) == 1 else None
    if len(shape) == 1 and (row_use is not None or own):
        # a 1-D buffer (the bias: one value a column) indexed by what runs over something else: no guard fixes it
        at = row_use.start() if row_use is not None else own[0][2]
        ul = line_in(code, hit.kernel, at)
        what = "counts rows" if row_use is not None else f"runs up to `{own[0][1]}`"
        text = (f"{head}. {name} is {value} there: it {what} (line {ul}: `{quoted(sub, ul)}`), and "
                f"{fault.buffer} has one value per {_singular(shape[0])}: index it with what stays below "
                f"{shape[0]} (the column, where it is the bias)")
        return Cause(code_name, line, text)
    if own:
        g = own[0]
        gl = line_in(code, hit.kernel, g[2])
        held = evaluate(g[1], env)
        text = (f"{head}. {name} is {value} there, past {limit_name} - 1 = {limit - 1}: it is compared only with "
                f"`{g[1]}` (line {gl})" + (f", which is {held} here" if held is not None else "") +
                f", never with {limit_name}. {MISSING}{name} < {limit_name}: compare {name} with {limit_name}")
        return Cause(code_name, line, text, f"{name} < {limit_name}")
    also = (f" (line {others[0][1]} compares only `{others[0][0]}`)" if others else "")
    fix = f"{name} < {limit_name}"
    combined = f"`if ({name} < {limit_name} && {others[0][0]})`" if others and "<" in others[0][0] else f"`{fix}`"
    text = (f"{head}. {name} is {value} there, past {limit_name} - 1 = {limit - 1}, and nothing compares {name} "
            f"with {limit_name}{also}: the last blocks' extra threads along it run past the end. {MISSING}"
            f"{fix}: write {combined}")
    return Cause(code_name, line, text, fix)


MISSING = "The missing guard is "


def named_fix(diagnosis: list) -> str:
    """The guard the first diagnosis (DiagnosisEntry) that names one names as missing, or ""."""
    for d in diagnosis:
        m = re.search(re.escape(MISSING) + r"([^:]+):", d.message)
        if m:
            return m.group(1).strip()
    return ""


def _singular(dim: str) -> str:
    return {"cols": "column", "rows": "row"}.get(dim, dim[:-1] if dim.endswith("s") and len(dim) > 2 else dim)


def _other_guards(body: str, hit: _Hit, names: set[str], ran: str) -> list[tuple[str, int]]:
    """The comparisons before the access of the subscript's other indices: ('col < cols', line)."""
    out = []
    for n in dict.fromkeys(re.findall(r"(?<![\w.])[A-Za-z_]\w*", _expanded(hit))):
        if n == ran or n not in names:
            continue
        for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\s*(?:<=?|>=?)(?![<>])\s*[A-Za-z_0-9][\w.]*(?:\s*[*/]\s*[\w.]+)*",
                             body[:hit.offset]):
            out.append((re.sub(r"\s+", " ", m.group(0)).strip(), _line_in_body(hit.kernel, m.start())))
    return out


def _line_in_body(k: Kernel, off: int) -> int:
    return k.first_line + k.body.count("\n", 0, off)


def _size_said(fault: Fault, shape: list[str], dims: dict[str, int], width: int) -> str:
    values = [dims.get(d) for d in shape]
    if len(shape) >= 2 and None not in values:
        text = " x ".join(f"{v} ({d})" for d, v in zip(shape, values)) + f" = {fault.floats} floats"
    else:
        text = f"{fault.floats} floats" + (f" ({shape[0]})" if len(shape) == 1 else "")
    return text + (f", {fault.floats // width} as {width}-float vectors" if width > 1 else "")


def _expanded(hit: _Hit) -> str:
    """The subscript, a flat index held in a name replaced by what it was assigned, casts dropped."""
    subscript = hit.subscript.strip()
    if re.fullmatch(r"[A-Za-z_]\w*", subscript):
        held = [m.group(2) for m in ASSIGN.finditer(hit.kernel.body[:hit.offset]) if m.group(1) == subscript]
        if held:
            subscript = held[-1]
    return uncast(subscript)


def _one_and_the_rest(term: str) -> list[tuple[str, str]]:
    """A product's factors, each with the product of the others (`pos * 2 * half` -> ('pos', '2 * half'),
    ...): the index and what it steps by, whichever way round it is written."""
    fs = product_factors(term)
    if len(fs) < 2:
        return []
    return [(f.strip("() "), " * ".join(g for k, g in enumerate(fs) if k != i)) for i, f in enumerate(fs)]


def _wrong_row_step(hit: _Hit, shape: list[str], dims: dict[str, int]) -> str:
    """A row index within its range stepped by another length than the buffer's rows are apart
    (`cosTab[pos * headDim + j]`, the table's rows halfDim apart): said, with the index to write."""
    values = [dims.get(d) for d in shape]
    if len(shape) != 2 or None in values:
        return ""
    rows, cols = values
    row_len = cols // hit.width if hit.width > 1 else cols
    for t in added_terms(_expanded(hit)):
        for a, b in _one_and_the_rest(t):
            v, step = hit.env.get(a.replace(".", "_")), evaluate(b, hit.env)
            if v is not None and 0 <= v < rows and step is not None and step != row_len and \
                    re.fullmatch(r"[A-Za-z_]\w*", a):
                return (f"{a} is {v} there, within {shape[0]}, but it steps by {b.strip()} = {step}, and "
                        f"{hit.pointer}'s rows are {shape[1]} = {row_len} apart: write {a} * {shape[1]}")
    return ""


def _ran_past(hit: _Hit, shape: list[str], dims: dict[str, int], floats: int):
    """The index in the subscript that ran past its range, and that range's (name, value): the
    row's (a name times the row's length) against the first dimension, the one left against the
    last; a 1-D buffer's single index against its length. None where no one index is out."""
    env, names = hit.env, index_names(hit.kernel.body)
    values = [dims.get(d) for d in shape]
    terms = added_terms(_expanded(hit))
    if len(shape) == 2 and None not in values:
        rows, cols = values
        row_len = cols // hit.width if hit.width > 1 else cols
        for t in terms:
            for a, b in _one_and_the_rest(t):
                if re.fullmatch(r"[A-Za-z_]\w*(?:\.[xyz])?", a) and evaluate(b, env) == row_len:
                    v = env.get(a.replace(".", "_"))
                    if v is not None and v >= rows:
                        return a, (shape[0], rows)
        lone = [t.strip("() ") for t in terms if re.fullmatch(r"\(?\s*[A-Za-z_]\w*(?:\.[xyz])?\s*\)?", t)]
        for a in lone if len(terms) > 1 else []:
            v = env.get(a.replace(".", "_"))
            if v is not None and v >= row_len and a in names:
                return a, (shape[1] + (f" / {hit.width}" if hit.width > 1 else ""), row_len)
        return None, None
    terms = added_terms(uncast(hit.subscript)) if len(shape) < 2 else terms
    if len(terms) == 1 and re.fullmatch(r"[A-Za-z_]\w*(?:\.[xyz])?", terms[0]):
        a = terms[0]
        length = floats // hit.width
        name = (shape[0] if len(shape) == 1 else "the length") + (f" / {hit.width}" if hit.width > 1 else "")
        if env.get(a.replace(".", "_"), -1) >= length:
            return a, (name, length)
    return None, None


def attribute_anywhere(sub: Submission, *, launches: list, buffers: dict[str, tuple[list[str], int]],
                       dims: dict[str, int]) -> Cause | None:
    """Where no address came back (a GPU's illegal address): an access of a grader's buffer in a
    launched kernel whose index, for a thread at a corner of the launch (the first or last block
    and thread along each axis) that the ifs around it let through, lands past the buffer's end or
    before its start. launches: the case's launch log (kernel, grid, block); buffers: each tensor's
    (shape, floats) at the case's dims. None where none provably does."""
    code = expand_object_macros(sub.code)
    by_name = {name_of(code, k): k for k in kernels(code)}
    for rec in launches:
        name = next((n for n in by_name if n and (rec.kernel == n or re.search(rf"\d{re.escape(n)}\w", rec.kernel or "")
                                                  or f"{len(n)}{n}" in (rec.kernel or ""))), None)
        if name is None and len(by_name) == 1:
            name = next(iter(by_name))
        if name is None:
            continue
        k = by_name[name]
        params, tensors, given = kernel_values(code, name, k, dims, buffers)
        for _, pointer, subscript, offset, at_line, width, write in accesses(code, None, only=k):
            if pointer not in tensors:
                continue
            tensor = tensors[pointer]
            shape, floats = buffers[tensor]
            for thread in corners(rec.grid, rec.block):
                for env in environments(k, offset, thread, params, ends_only=True):
                    index = evaluate(subscript, env)
                    if index is None or 0 <= index * width < floats or runs(k.body, offset, env) is not True:
                        continue
                    fault = Fault(signal=11, is_write=1 if write else 0, buffer=tensor,
                                  where="past" if index >= 0 else "before", element=index * width, floats=floats,
                                  shape=list(shape), block=list(thread.block), thread=list(thread.thread),
                                  block_dim=list(thread.block_dim), grid_dim=list(thread.grid_dim))
                    return _said(sub, _Hit(k, pointer, subscript, offset, env, index, width, tuple(given)), fault,
                                 at_line, shape, dims)
    return None
