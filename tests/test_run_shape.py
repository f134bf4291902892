"""The running side's modules stay small and say what they import (issue 62): grader/run/ and the
job's and frames' contract each under 400 lines, the child's main under 60, and no import inside
a function but torch's (2 to 3.5 s, paid only by a job with a PyTorch baseline)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AREA = [*sorted((ROOT / "grader" / "run").rglob("*.py")),
        *(ROOT / "grader" / p for p in ("core/backend.py", "core/contract.py", "core/frames.py", "analysis/sass.py",
                                        "analysis/explain.py", "analysis/launches.py", "toolchain/gpuinfo.py",
                                        "toolchain/tools.py"))]
PAID = ("torch",)       # the imports a start-up figure shows are worth keeping inside a function


def too_long(paths: list[Path], limit: int = 400) -> list[str]:
    return [f"{p.name}: {n} lines" for p in paths if (n := len(p.read_text().splitlines())) > limit]


def imports_in_functions(path: Path) -> list[str]:
    """Each import inside a function (not one at the module's top, or in its top-level try or if)
    that is not of a PAID module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    names = [a.name for a in inner.names] if isinstance(inner, ast.Import) else [inner.module or ""]
                    if not all(any(n == p or n.startswith(p + ".") for p in PAID) for n in names):
                        found.append(f"{path.name}:{inner.lineno}: {', '.join(names)}")
    return sorted(set(found))


def test_the_running_sides_modules_are_under_400_lines():
    assert too_long(AREA) == []


def test_the_childs_main_is_under_60_lines():
    tree = ast.parse((ROOT / "grader" / "run" / "child" / "worker.py").read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert main.end_lineno - main.lineno + 1 < 60


def test_no_import_inside_a_function_but_torchs():
    assert [f for p in AREA for f in imports_in_functions(p)] == []


def test_the_rules_find_a_planted_import_and_a_long_module(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("try:\n    import nvidia\nexcept ImportError:\n    nvidia = None\n\n\n"
                       "def f():\n    import torch\n    import torch.nn.functional as F\n"
                       "    from grader.core import stats\n    return stats\n" + "\n" * 400)
    assert imports_in_functions(planted) == ["planted.py:10: grader.core"]
    assert too_long([planted]) == ["planted.py: 411 lines"]
