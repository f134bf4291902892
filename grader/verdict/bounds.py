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

import itertools
import re
from dataclasses import dataclass

from grader.core.emulation import device_bodies
from grader.core.frames import Fault
from grader.core.scan import expand_object_macros
from grader.core.source import Submission
from grader.verdict.causes import Cause, index_names, quoted
from grader.verdict.cexpr import bracketed as _bracketed, evaluate, split_args, truth, uncast

_ASSIGN = re.compile(r"(?<![\w.\]])([A-Za-z_]\w*)\s*=(?!=)\s*([^;{}]*);")
_SUBSCRIPT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\[")
_WIDTH = {"float4": 4, "float2": 2, "int4": 4, "int2": 2, "uint4": 4, "uint2": 2, "double2": 4, "double": 2}


@dataclass(frozen=True)
class Thread:
    """A thread of a launch: its block and thread, the launch's grid and block."""

    block: tuple[int, int, int]
    thread: tuple[int, int, int]
    block_dim: tuple[int, int, int]
    grid_dim: tuple[int, int, int]

    def said(self) -> str:
        def xyz(v: tuple[int, ...]) -> str:
            used = [str(c) for c in v[:max(1, max((k + 1 for k, c in enumerate(v) if c), default=1))]]
            return f"({', '.join(used)})" if len(used) > 1 else used[0]
        return f"thread {xyz(self.thread)} of block {xyz(self.block)}"

    def env(self) -> dict[str, int]:
        out = {}
        for name, v in (("threadIdx", self.thread), ("blockIdx", self.block), ("blockDim", self.block_dim),
                        ("gridDim", self.grid_dim)):
            out.update({f"{name}_{a}": int(c) for a, c in zip("xyz", v)})
        return out


def _terms(expr: str) -> list[str]:
    """expr's terms added at its top level (`row * cols + col` -> ['row * cols', 'col'])."""
    out, depth, last = [], 0, 0
    for i, ch in enumerate(expr):
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        if depth == 0 and ch in "+-" and i > last and expr[i - 1] not in "*/%(<>" and not expr[last:i].strip() == "":
            out.append(expr[last:i])
            last = i + 1
    out.append(expr[last:])
    return [t.strip() for t in out if t.strip()]


def _factors(term: str) -> list[str]:
    out, depth, last = [], 0, 0
    for i, ch in enumerate(term):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch == "*":
            out.append(term[last:i])
            last = i + 1
    out.append(term[last:])
    return [f.strip() for f in out]


@dataclass
class _Kernel:
    start: int                  # the body's offset in the code
    first_line: int
    body: str
    params: dict[str, str]      # a parameter's name: its declaration


def _kernels(code: str) -> list[_Kernel]:
    out = []
    for start, body in device_bodies(code):
        close = code.rfind(")", 0, start)
        depth, i = 0, close
        while i >= 0:
            depth += {")": 1, "(": -1}.get(code[i], 0)
            if depth == 0:
                break
            i -= 1
        params = {}
        for p in code[i + 1:close].split(","):
            m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*$", p.strip())
            if m:
                params[m.group(1)] = p.strip()
        out.append(_Kernel(start, code.count("\n", 0, start) + 1, body, params))
    return out


def _environment(k: _Kernel, upto: int, thread: Thread, dims: dict[str, int],
                 loop: tuple[str, int] | None = None) -> dict[str, int]:
    """The names' values for thread at offset upto of k's body: the parameters named as the
    exercise's dimensions, then each assignment before upto in order (a loop's variable fixed)."""
    env = thread.env()
    for p in k.params:
        if p in dims:
            env[p] = dims[p]
    for m in _ASSIGN.finditer(k.body[:upto]):
        name = m.group(1)
        if loop is not None and name == loop[0]:
            env[name] = loop[1]
            continue
        v = evaluate(m.group(2), env)
        if v is None:
            env.pop(name, None)
        else:
            env[name] = v
    if loop is not None:
        env[loop[0]] = loop[1]
    return env


def _enclosing_loop(body: str, at: int) -> tuple[str, str, str, str] | None:
    """The innermost for loop whose body holds offset at: (variable, first value, condition, step)."""
    found = None
    for m in re.finditer(r"\bfor\s*\(", body[:at]):
        head, end = _bracketed(body, m.end() - 1)
        parts = head.split(";")
        if len(parts) != 3:
            continue
        init = re.match(r"\s*(?:[\w:<>]+\s+)*([A-Za-z_]\w*)\s*=\s*(.*)$", parts[0], re.S)
        if init is None:
            continue
        rest = body[end:]
        brace = re.match(r"\s*\{", rest)
        if brace:
            _, close = _body_span(body, end + brace.end() - 1)
            inside = close > at
        else:
            inside = body.find(";", end) >= at
        if inside:
            found = (init.group(1), init.group(2), parts[1], parts[2])
    return found


def _body_span(body: str, open_at: int) -> tuple[int, int]:
    depth, i = 0, open_at
    while i < len(body):
        depth += {"{": 1, "}": -1}.get(body[i], 0)
        if depth == 0:
            return open_at, i
        i += 1
    return open_at, len(body)


def _loop_values(loop: tuple[str, str, str, str], env: dict[str, int], limit: int = 4096) -> list[int]:
    """The values a loop's variable takes for this thread, up to limit of them."""
    var, first, cond, step = loop
    v = evaluate(first, env)
    if v is None:
        return []
    m = re.fullmatch(rf"\s*{re.escape(var)}\s*(<=?)\s*(.+?)\s*", cond)
    bound = evaluate(m.group(2), env) if m else None
    s = re.fullmatch(rf"\s*(?:\+\+\s*{re.escape(var)}|{re.escape(var)}\s*\+\+|{re.escape(var)}\s*\+=\s*(.+?))\s*", step)
    by = 1 if s and s.group(1) is None else (evaluate(s.group(1), env) if s else None)
    if bound is None or not by or by < 0:
        return [v]
    out = []
    while (v < bound or (m.group(1) == "<=" and v == bound)) and len(out) < limit:
        out.append(v)
        v += by
    return out


def _comparisons(body: str, names: set[str]) -> list[tuple[str, str, int]]:
    """The comparisons in body of any of names with a bound: (name, bound's text, offset)."""
    out = []
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    if not alt:
        return out
    bound = r"([^;&|?(){}]*(?:\([^()]*\)[^;&|?(){}]*)*)"
    for m in re.finditer(rf"(?<![\w.])({alt})\s*(?:<=?|>=?|!=)(?![<>])\s*{bound}", body):
        out.append((m.group(1), m.group(2).strip(), m.start()))
    for m in re.finditer(rf"{bound}(?<![<>])(?:<=?|>=?)\s*({alt})(?![\w.(\[])", body):
        if m.group(1).strip():
            out.append((m.group(2), m.group(1).strip().split("(")[-1].strip(), m.start()))
    return out


def _derived_from(body: str, name: str) -> set[str]:
    """name and the names assigned from it (to a fixed point)."""
    names, assigned = {name}, [(m.group(1), m.group(2)) for m in _ASSIGN.finditer(body)]
    changed = True
    while changed:
        changed = False
        for n, expr in assigned:
            if n not in names and any(re.search(rf"(?<![\w.]){re.escape(x)}\b", expr) for x in names):
                names.add(n)
                changed = True
    return names


@dataclass(frozen=True)
class _Hit:
    kernel: _Kernel
    pointer: str                # the subscripted name
    subscript: str
    offset: int                 # of the access, in the body
    env: dict
    index: int                  # the subscript's value
    width: int                  # floats an element of the pointer's type holds
    given: tuple = ()           # parameters named as a dimension the launch gives another value


def _accesses(sub_code: str, line: int | None, only: _Kernel | None = None):
    """Each subscript of a pointer parameter in device code (on line, where it is known; in only,
    where given): (kernel, pointer, subscript, offset in the body, line, floats an element holds,
    whether it is written)."""
    for k in [only] if only is not None else _kernels(sub_code):
        for m in _SUBSCRIPT.finditer(k.body):
            if m.group(1) not in k.params or "*" not in k.params[m.group(1)] and "[" not in k.params[m.group(1)]:
                continue
            at_line = k.first_line + k.body.count("\n", 0, m.start())
            if line is not None and at_line != line:
                continue
            subscript, end = _bracketed(k.body, m.end() - 1)
            decl = k.params[m.group(1)]
            width = next((w for t, w in _WIDTH.items() if re.search(rf"\b{t}\b", decl)), 1)
            written = re.match(r"\s*(?:\.\s*[xyzw]\s*)?=(?!=)", k.body[end:]) is not None
            yield k, m.group(1), subscript, m.start(), at_line, width, written


def attribute(sub: Submission, fault: Fault, *, line: int | None, shape: list[str], dims: dict[str, int]) -> Cause | None:
    """The access behind fault (an access past fault.buffer by the thread it names) and the index
    that ran past, with the guard to write; None where the thread's subscripts do not evaluate to
    the faulting element. shape: the buffer's dimensions as the rubric names them; dims: the case's."""
    if fault.buffer is None or fault.thread is None or fault.element is None:
        return None
    thread = _thread_of(fault)
    code = expand_object_macros(sub.code)
    for tries in ((line,), (None,)) if line is not None else ((None,),):
        found = sorted(_accesses(code, tries[0]), key=lambda a: a[1] != fault.buffer)   # the buffer's own name first
        for k, pointer, subscript, offset, at_line, width, _ in found:
            params, _, given = _kernel_values(code, _name_of(code, k), k, dims, {})
            for env in _environments(k, offset, thread, params):
                index = evaluate(subscript, env)
                if index is None or not (index * width <= fault.element < (index + 1) * width):
                    continue
                hit = _Hit(k, pointer, subscript, offset, env, index, width, tuple(given))
                return _said(sub, hit, fault, at_line, shape, dims)
    return None


def _thread_of(fault: Fault) -> Thread:
    return Thread(tuple(fault.block), tuple(fault.thread), tuple(fault.block_dim), tuple(fault.grid_dim))


def _environments(k: _Kernel, offset: int, thread: Thread, dims: dict[str, int], ends_only: bool = False):
    """The names' values for thread at offset: once, or once for each value of the loop around it
    (ends_only: its first two and last two)."""
    env = _environment(k, offset, thread, dims)
    loop = _enclosing_loop(k.body, offset)
    if loop is None:
        yield env
        return
    values = _loop_values(loop, env)
    for v in (values[:2] + values[2:][-2:] if ends_only else values):
        yield _environment(k, offset, thread, dims, (loop[0], v))


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
    where = (f"element {hit.index} of {hit.pointer}" + (f" (floats {hit.index * hit.width}..{hit.index * hit.width + hit.width - 1}"
             f" of {fault.buffer})" if hit.width > 1 else ""))
    size = _size_said(fault, shape, dims, hit.width)
    head = (f"line {line}: `{quoted(sub, line)}` {verb} past the end of {fault.buffer}: {thread.said()} has "
            f"{values or hit.subscript + ' = ' + str(hit.index)}, so `{hit.pointer}[{hit.subscript.strip()}]` is "
            f"{where}, and {fault.buffer} holds {size}")
    if hit.given:
        p, arg, v = hit.given[0]
        launch = re.search(rf"\b{re.escape(_name_of(code, hit.kernel))}\s*<<<", code)
        ll = code.count("\n", 0, launch.start()) + 1 if launch else line
        return Cause(code_name, line, f"{head}. The kernel's {p} is {v} here: the launch (line {ll}: "
                                      f"`{quoted(sub, ll)}`) passes `{arg}` for it, but the exercise's {p} is {dims[p]}: pass that")
    ran, bound = _ran_past(hit, shape, dims, fault.floats)
    if ran is None:
        stride = _wrong_row_step(hit, shape, dims)
        return Cause(code_name, line, f"{head}. {stride}" if stride else head)
    name, value, limit_name, limit = ran, env.get(ran.replace(".", "_")), bound[0], bound[1]
    guards = [(n, b, off) for n, b, off in _comparisons(body, _derived_from(body, name)) if off < hit.offset]
    own = [g for g in guards if g[0] == name]
    right = [g for g in own if evaluate(g[1], env) == limit or re.sub(r"\s+", "", g[1]) == limit_name]
    if right:
        return Cause(code_name, line, head)          # compared with its bound: a guard off by one says the rest
    others = _other_guards(body, hit, names, name)
    row_use = re.search(rf"(?<![\w.]){re.escape(name)}\s*\)?\s*\*\s*[A-Za-z_(]", body) if len(shape) == 1 else None
    if row_use is not None:
        # a 1-D buffer (the bias: one value a column) indexed by what steps the rows
        ul = _line_in(code, hit.kernel, row_use.start())
        text = (f"{head}. {name} is {value} there: it counts rows (line {ul}: `{quoted(sub, ul)}`), and "
                f"{fault.buffer} has one value per {_singular(shape[0])}: index it by the column, "
                f"as the output's element is")
        return Cause(code_name, line, text)
    if own:
        g = own[0]
        gl = _line_in(code, hit.kernel, g[2])
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


def named_fix(message: str) -> str:
    """The guard a diagnosis's message names as missing (attribute's words), or ""."""
    m = re.search(re.escape(MISSING) + r"([^:]+):", message)
    return m.group(1).strip() if m else ""


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


def _line_in_body(k: _Kernel, off: int) -> int:
    return k.first_line + k.body.count("\n", 0, off)


def _line_in(code: str, k: _Kernel, off: int) -> int:
    return code.count("\n", 0, k.start + off) + 1


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
        held = [m.group(2) for m in _ASSIGN.finditer(hit.kernel.body[:hit.offset]) if m.group(1) == subscript]
        if held:
            subscript = held[-1]
    return uncast(subscript)


def _wrong_row_step(hit: _Hit, shape: list[str], dims: dict[str, int]) -> str:
    """A row index within its range stepped by another length than the buffer's rows are apart
    (`cosTab[pos * headDim + j]`, the table's rows halfDim apart): said, with the index to write."""
    values = [dims.get(d) for d in shape]
    if len(shape) != 2 or None in values:
        return ""
    rows, cols = values
    row_len = cols // hit.width if hit.width > 1 else cols
    for t in _terms(_expanded(hit)):
        fs = _factors(t)
        if len(fs) != 2:
            continue
        for a, b in (fs, fs[::-1]):
            a = a.strip("() ")
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
    terms = _terms(_expanded(hit))
    if len(shape) == 2 and None not in values:
        rows, cols = values
        row_len = cols // hit.width if hit.width > 1 else cols
        for t in terms:
            fs = _factors(t)
            if len(fs) != 2:
                continue
            for a, b in (fs, fs[::-1]):
                a = a.strip("() ")
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
    terms = _terms(uncast(hit.subscript)) if len(shape) < 2 else terms
    if len(terms) == 1 and re.fullmatch(r"[A-Za-z_]\w*(?:\.[xyz])?", terms[0]):
        a = terms[0]
        length = floats // hit.width
        name = (shape[0] if len(shape) == 1 else "the length") + (f" / {hit.width}" if hit.width > 1 else "")
        if env.get(a.replace(".", "_"), -1) >= length:
            return a, (name, length)
    return None, None


# ---------------------------------------------------------------------------
# A GPU's illegal address: no address comes back, so the access is looked for
# ---------------------------------------------------------------------------

def _runs(body: str, offset: int, env: dict[str, int]) -> bool | None:
    """Whether the statement at offset runs for env's thread, by the ifs around it and the early
    returns before it (None: a condition that cannot be evaluated)."""
    for m in re.finditer(r"\bif\s*\(", body[:offset]):
        cond, end = _bracketed(body, m.end() - 1)
        after = body[end:]
        ret = re.match(r"\s*(?:return\s*;|\{\s*return\s*;\s*\})", after)
        block = _enclosing_block(body, m.start())
        if ret is not None:
            if not block[0] <= offset <= block[1]:
                continue                    # a return in a block the access is not in
            t = truth(cond, env)
            if t is None or t:
                return None if t is None else False
            continue
        brace = re.match(r"\s*\{", after)
        if brace:
            lo, hi = _body_span(body, end + brace.end() - 1)
        else:
            lo, hi = end, body.find(";", end)
        if lo <= offset <= hi:
            t = truth(cond, env)
            if not t:
                return t
    return True


def _enclosing_block(body: str, at: int) -> tuple[int, int]:
    depth, i = 0, at
    while i > 0:
        i -= 1
        depth += {"}": 1, "{": -1}.get(body[i], 0)
        if depth < 0:
            return _body_span(body, i)
    return 0, len(body)


def _corners(grid: list[int], block: list[int]) -> list[Thread]:
    """The first and last block and thread along each axis of a launch: where an index is at its
    least and its most for an index that grows with them."""
    g = (tuple(grid) + (1, 1, 1))[:3]
    b = (tuple(block) + (1, 1, 1))[:3]
    ends = [sorted({0, n - 1}) for n in g] + [sorted({0, n - 1}) for n in b]
    return [Thread((bx, by, bz), (tx, ty, tz), b, g) for bx, by, bz, tx, ty, tz in itertools.product(*ends)]


def _launches_of(code: str, name: str) -> list[list[str]]:
    """The arguments of each launch of the kernel name in code (`name<<<...>>>(args)`)."""
    out = []
    for m in re.finditer(rf"\b{re.escape(name)}\s*<<<[^;]*?>>>\s*\(", code):
        out.append(split_args(_bracketed(code, m.end() - 1)[0]))
    return out


def _host_env(code: str, dims: dict[str, int], upto: int) -> dict[str, int]:
    """The host's names before offset upto: the dimensions, then every assignment in order."""
    env = dict(dims)
    for m in _ASSIGN.finditer(code[:upto]):
        v = evaluate(m.group(2), env)
        if v is not None:
            env[m.group(1)] = v
    return env


def attribute_anywhere(sub: Submission, *, launches: list, buffers: dict[str, tuple[list[str], int]],
                       dims: dict[str, int]) -> Cause | None:
    """Where no address came back (a GPU's illegal address): an access of a grader's buffer in a
    launched kernel whose index, for a thread at a corner of the launch (the first or last block
    and thread along each axis) that the ifs around it let through, lands past the buffer's end or
    before its start. launches: the case's launch log (kernel, grid, block); buffers: each tensor's
    (shape, floats) at the case's dims. None where none provably does."""
    code = expand_object_macros(sub.code)
    kernels = {_name_of(code, k): k for k in _kernels(code)}
    for rec in launches:
        name = next((n for n in kernels if n and (rec.kernel == n or re.search(rf"\d{re.escape(n)}\w", rec.kernel or "")
                                                  or f"{len(n)}{n}" in (rec.kernel or ""))), None)
        if name is None and len(kernels) == 1:
            name = next(iter(kernels))
        if name is None:
            continue
        k = kernels[name]
        params, tensors, given = _kernel_values(code, name, k, dims, buffers)
        for _, pointer, subscript, offset, at_line, width, write in _accesses(code, None, only=k):
            if pointer not in tensors:
                continue
            tensor = tensors[pointer]
            shape, floats = buffers[tensor]
            for thread in _corners(rec.grid, rec.block):
                for env in _environments(k, offset, thread, params, ends_only=True):
                    index = evaluate(subscript, env)
                    if index is None or 0 <= index * width < floats or _runs(k.body, offset, env) is not True:
                        continue
                    fault = Fault(signal=11, is_write=1 if write else 0, buffer=tensor,
                                  where="past" if index >= 0 else "before", element=index * width, floats=floats,
                                  shape=list(shape), block=list(thread.block), thread=list(thread.thread),
                                  block_dim=list(thread.block_dim), grid_dim=list(thread.grid_dim))
                    return _said(sub, _Hit(k, pointer, subscript, offset, env, index, width, tuple(given)), fault,
                                 at_line, shape, dims)
    return None


def _name_of(code: str, k: _Kernel) -> str:
    head = code[:code.rfind("(", 0, code.rfind(")", 0, k.start) + 1)]
    m = re.search(r"([A-Za-z_]\w*)\s*(?:<[^<>]*>)?\s*$", head)
    return m.group(1) if m else ""


def _kernel_values(code: str, name: str, k: _Kernel, dims: dict[str, int],
                   buffers: dict) -> tuple[dict[str, int], dict[str, str], list[tuple[str, str, int]]]:
    """A launched kernel's scalar parameters' values, its pointers' tensors, and the parameters
    named as a dimension that the launch gives another value ((parameter, argument, value)): through
    the launcher's arguments (a tensor's name with a cast, a dimension, a host variable), else by the
    parameter's own name (the default launch passes each tensor and dimension by name)."""
    values = {p: dims[p] for p in k.params if p in dims}
    tensors = {p: p for p in k.params if p in buffers}
    given: list[tuple[str, str, int]] = []
    for args in _launches_of(code, name)[:1]:
        at = code.find(f"{name}")
        env = _host_env(code, dims, code.find("<<<", at) if at >= 0 else len(code))
        for p, a in zip(k.params, args):
            bare = re.sub(r"^\(\s*(?:const\s+)?\w+\s*\*\s*\)\s*|^(?:reinterpret_cast|static_cast)\s*<[^<>]*>\s*",
                          "", a.strip()).strip("() ")
            if bare in buffers:
                tensors[p] = bare
                continue
            v = evaluate(a, env)
            if v is None:
                continue
            if p in dims and v != dims[p]:
                given.append((p, a.strip(), v))
            values[p] = v
    return values, tensors, given
