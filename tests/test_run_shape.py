"""The running side says what it imports (issue 62): in grader/run/ and the job's and frames'
contract, no import inside a function but torch's (2 to 3.5 s, paid only by a job with a PyTorch
baseline). Their size is ruff's and review's to hold (issue 72), not a count of lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AREA = [*sorted((ROOT / "grader" / "run").rglob("*.py")),
        *(ROOT / "grader" / p for p in ("core/backend.py", "core/contract.py", "core/frames.py", "analysis/sass.py",
                                        "analysis/explain.py", "analysis/launches.py", "toolchain/gpuinfo.py",
                                        "toolchain/tools.py"))]
PAID = ("torch",)       # the imports a start-up figure shows are worth keeping inside a function


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


def test_no_import_inside_a_function_but_torchs():
    assert [f for p in AREA for f in imports_in_functions(p)] == []


def test_the_rule_finds_a_planted_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("try:\n    import nvidia\nexcept ImportError:\n    nvidia = None\n\n\n"
                       "def f():\n    import torch\n    import torch.nn.functional as F\n"
                       "    from grader.core import stats\n    return stats\n")
    assert imports_in_functions(planted) == ["planted.py:10: grader.core"]
