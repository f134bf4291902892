"""The package's imports go downward only and form no circle (issue: a house the next engineer
can walk).

LAYERS is the package map of docs/architecture.md, bottom first: a module may import its own
package and the packages below it, never one above (a test fails on an upward import, naming
both modules), and every module of grader/ sits in one of them.

Every import of one grader module by another, at the top of a file or inside a function, is an
edge; a strongly connected set of two or more modules is a circle. KNOWN lists the circles not
yet taken apart, so a new one fails here; taking one apart must remove it from KNOWN (the test
also fails on a known circle that is gone).
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "grader"

# None left: rubric.py parses with grader/core/signature.py and grader/core/exprs.py, which sit below both
# the rubric and the exercises that load it.
KNOWN: list[set[str]] = []


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for p in PACKAGE.rglob("*.py"):
        name = ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = p

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, p in modules.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grader"):
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("grader")]
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r and r != m and not m.startswith(r + "."):      # a module's own package runs first anyway
                    graph[m].add(r)
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_circle_but_the_known_ones():
    found = circles(import_graph())
    new = [c for c in found if c not in KNOWN]
    gone = [c for c in KNOWN if c not in found]
    assert not new, f"a new import circle: {new} (import downward only; see tests/test_layers.py)"
    assert not gone, f"{gone} is no longer a circle: remove it from KNOWN"


LAYERS = ["grader.core", "grader.exercises", "grader.toolchain", "grader.run", "grader.analysis", "grader.verdict",
          "grader.grade", "grader.report", "grader.platforms", "grader.batch", "grader.serve", "grader.cli"]
TOP = {"grader", "grader.__main__", "grader.entry"}   # the package's own __init__ (a version), `python -m grader` and the command's entry


def layer_of(module: str) -> int | None:
    for i, package in enumerate(LAYERS):
        if module == package or module.startswith(package + "."):
            return i
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for m, targets in graph.items():
        for t in targets:
            lm, lt = layer_of(m), layer_of(t)
            if lm is not None and lt is not None and lt > lm:
                found.append(f"{m} imports {t}, a layer above it")
    return sorted(found)


def test_every_module_sits_in_a_layer():
    assert sorted(m for m in import_graph() if layer_of(m) is None and m not in TOP) == []


def test_imports_go_downward_only():
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_found():
    assert upward_imports({"grader.core.errors": {"grader.grade.pipeline"}, "grader.grade.pipeline": {"grader.core.errors"}}) \
        == ["grader.core.errors imports grader.grade.pipeline, a layer above it"]


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_only_the_pipeline_writes_a_result():
    """A step returns what it built (a Stop, a Verdict, a BuildSummary...) and grade/pipeline.py puts
    it into the Result: no other module assigns a Result's field, adds to one, or stops it. A
    variable holding a Result is called result or r throughout."""
    import dataclasses

    from grader.core.results import Result

    fields = {f.name for f in dataclasses.fields(Result)}
    allowed = {PACKAGE / "grade" / "pipeline.py", PACKAGE / "core" / "results.py"}
    found = []
    for p in PACKAGE.rglob("*.py"):
        if p in allowed:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if f.attr in ("stop", "end") and isinstance(f.value, ast.Name) and f.value.id in ("result", "r"):
                    found.append(f"{p.relative_to(PACKAGE)}:{node.lineno}: {f.value.id}.{f.attr}()")
                if (f.attr in ("append", "extend", "update", "setdefault") and isinstance(f.value, ast.Attribute)
                        and isinstance(f.value.value, ast.Name) and f.value.value.id in ("result", "r")
                        and f.value.attr in fields):
                    targets = [f.value]
            for t in targets:
                while isinstance(t, (ast.Subscript, ast.Attribute)) and not (
                        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)):
                    t = t.value
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("result", "r")
                        and t.attr in fields):
                    found.append(f"{p.relative_to(PACKAGE)}:{node.lineno}: writes {t.value.id}.{t.attr}")
    assert not found, "\n".join(found)


def test_every_tool_is_looked_up_in_one_place():
    """toolchain/tools.py finds every external tool (nvcc where the user said the toolkit is, the
    rest on PATH); nothing else asks shutil.which, so two lookups can never disagree again."""
    found = []
    for p in PACKAGE.rglob("*.py"):
        if p == PACKAGE / "toolchain" / "tools.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "which" and isinstance(node.value, ast.Name)
                    and node.value.id == "shutil"):
                found.append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, "shutil.which outside toolchain/tools.py: " + ", ".join(found)


def test_the_default_exercise_is_named_once_and_no_exercise_elsewhere():
    """An exercise is data: the package names no exercise but the default one, in one place
    (core/locations.py), which picks what a command grades when none is named."""
    from grader.core.locations import DEFAULT_EXERCISE

    names = [p.stem for p in (PACKAGE.parent / "rubrics").glob("*.yaml")]
    assert DEFAULT_EXERCISE in names and len(names) >= 3
    found = [f"{p.relative_to(PACKAGE)}: {n}" for p in PACKAGE.rglob("*.py") for n in names if n in p.read_text()]
    assert found == ["core/locations.py: " + DEFAULT_EXERCISE], found


# Where a backend may be named: its own definitions, the resolver of "auto", the command line.
BACKEND_HOMES = {PACKAGE / "core" / "backend.py", PACKAGE / "toolchain" / "gpuinfo.py"}
BACKEND_NAMES = {"cuda", "emulator"}


def backend_namings(path: Path, names: set[str] = BACKEND_NAMES, what: str = "a backend's name") -> list[str]:
    """Where a module names a backend: an import of CUDA or EMULATOR, or a comparison with a
    backend's name ('== "cuda"', 'in ("emulator", ...)'). A torch device string is not a comparison.
    With other names, where it compares with one of those (a tool's name, an outcome's string)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "grader.core.backend" and names is BACKEND_NAMES:
            found += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if a.name in ("CUDA", "EMULATOR")]
        elif isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    found.append(f"{path.name}:{node.lineno} compares with {what}")
    return found


# A backend's capability is a field of its Toolchain (core/backend.py), never its compiler's or a
# tool's name used as a switch: only the module that finds the tools (toolchain/tools.py) names them.
TOOL_NAMES = {"nvcc", "g++", "gcc", "clang", "clang++", "hipcc", "ncu", "cuobjdump", "nvdisasm", "rocprof"}
TOOL_HOMES = {PACKAGE / "toolchain" / "tools.py", PACKAGE / "core" / "backend.py"}


def test_no_module_switches_on_a_compiler_or_tool_name():
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p not in TOOL_HOMES:
            found += backend_namings(p, TOOL_NAMES, "a tool's name")
    assert found == []


def test_outcomes_and_tiers_are_compared_as_members():
    """An outcome and a tier are types (core/outcomes.py): no module compares a Result's status or
    tier with its string."""
    from grader.core.outcomes import Outcome, Tier

    names = {str(m) for m in [*Outcome, *Tier]} - {"timeout"}     # "timeout" also names subprocess's argument
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.name != "outcomes.py":
            found += backend_namings(p, names, "an outcome's or a tier's string")
    assert found == []


def test_the_naming_rule_finds_a_tool_and_an_outcome(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('if toolchain == "g++":\n    pass\nok = r.status != "graded"\nok = tier in ("gold", "x")\n')
    assert backend_namings(bad, TOOL_NAMES, "t") == ["bad.py:1 compares with t"]
    assert backend_namings(bad, {"graded", "gold"}, "o") == ["bad.py:3 compares with o", "bad.py:4 compares with o"]


def test_no_module_outside_the_backends_own_names_a_backend():
    """issue 34: a choice made once is an object passed down. Outside core/backend.py,
    toolchain/gpuinfo.py (which decides "auto") and the command line, no module imports CUDA or
    EMULATOR or compares a backend's name: each asks the Backend it was handed."""
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p in BACKEND_HOMES or p.parent == PACKAGE / "cli":
            continue
        found += backend_namings(p)
    assert found == []


def test_the_backend_naming_rule_finds_a_comparison_and_an_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('from grader.core.backend import CUDA, Backend\nif job.backend == "cuda":\n    pass\n'
                   'ok = x in ("emulator", "y")\ntorch.empty(1, device="cuda")\n')
    assert backend_namings(bad) == ["bad.py:1 imports CUDA", "bad.py:2 compares with a backend's name",
                                    "bad.py:4 compares with a backend's name"]


def test_a_docstring_that_says_what_its_module_imports_is_true():
    """A module's docstring that lists what it imports ("Imports nothing of the grader's.",
    "Imports only core/.") is checked against its imports, so it cannot go stale."""
    import re

    graph = import_graph()
    checked = 0
    for p in PACKAGE.rglob("*.py"):
        name = ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        doc = ast.get_docstring(ast.parse(p.read_text())) or ""
        said = re.search(r"Imports (nothing of the grader's|only ([a-z/, ]+?))\.", doc)
        if not said:
            continue
        checked += 1
        allowed = [f"grader.{x.strip(' /')}" for x in re.split(r",| and ", said.group(2))] if said.group(2) else []
        wrong = sorted(t for t in graph[name] if not any(t == a or t.startswith(a + ".") for a in allowed))
        assert wrong == [], f"{name}'s docstring says '{said.group(0)}' but it imports {wrong}"
    assert checked >= 2


# The library's functions with more than six parameters, each with why (issue 48: a grade is one
# request object, and no function past the command line takes its settings one by one).
MANY_PARAMETERS = {
}


def _many_parameters(root: Path) -> dict[str, int]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel.startswith("grader/cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                if len(names) > 6:
                    found[f"{rel}:{node.name}"] = len(names)
    return found


def test_no_function_past_the_command_line_takes_more_than_six_parameters_but_those_that_say_why():
    import grader

    found = _many_parameters(Path(grader.__file__).parent)
    assert set(found) <= set(MANY_PARAMETERS), {k: v for k, v in found.items() if k not in MANY_PARAMETERS}
    assert set(MANY_PARAMETERS) <= set(found), "a function on the list no longer needs its place there"


def test_the_parameter_rule_finds_a_long_signature(tmp_path):
    pkg = tmp_path / "grader"
    (pkg / "grade").mkdir(parents=True)
    (pkg / "grade" / "x.py").write_text("def f(a, b, c, *, d, e, f, g):\n    pass\n")
    (pkg / "cli").mkdir()
    (pkg / "cli" / "y.py").write_text("def g(a, b, c, d, e, f, g, h):\n    pass\n")
    assert _many_parameters(pkg) == {"grader/grade/x.py:f": 7}
