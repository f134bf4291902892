"""The house's flow (issue 62), counted: one `grader submit` decides its machine once, reads its
file once and renders each report once; one `grader batch` of N walks the class folder once,
reads each file once, hashes each once, and probes the GPU at most once for the whole class.
The share of imports made inside functions is held here too (each says why: ruff's PLC0415 wants a
`# noqa: PLC0415  (why)` on its line); the rest of the package's shape (complexity, arguments, import
order) is ruff's, configured in pyproject.toml and run by .ci/run, never a count of lines."""

import ast
import collections
import hashlib
from pathlib import Path

from click.testing import CliRunner

from grader.cli import cli

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "grader"
SAMPLES = ROOT / "submissions" / "bias_gelu_fused"


class Counts:
    """Calls of the functions the flow must make once, by name."""

    def __init__(self, monkeypatch):
        import grader.core.handin as handin
        import grader.report.files as files
        from grader.batch import inputs
        from grader.toolchain import gpuinfo

        self.calls: collections.Counter = collections.Counter()
        self.reads: collections.Counter = collections.Counter()
        self.renders: collections.Counter = collections.Counter()
        self.hashed: collections.Counter = collections.Counter()
        self._wrap(monkeypatch, gpuinfo, "probe")
        self._wrap(monkeypatch, gpuinfo, "resolve_backend")
        self._wrap(monkeypatch, inputs, "_found")
        from grader.core import source

        real_blank = source.blank_comments_and_strings

        def blank(text):
            if text.startswith("// house sample"):
                self.calls["scan " + text.splitlines()[0]] += 1
            return real_blank(text)
        monkeypatch.setattr(source, "blank_comments_and_strings", blank)

        real_read = handin.read_descriptor

        def read_descriptor(fd, shown, **kw):
            out = real_read(fd, shown, **kw)
            self.reads[Path(shown).name] += 1
            if hasattr(out, "data"):
                self.hashed[out.sha256] += 0            # seen; the hashes themselves are counted below
            return out
        monkeypatch.setattr(handin, "read_descriptor", read_descriptor)

        real_render = files.render

        def render(template, **kw):
            self.renders[template] += 1
            return real_render(template, **kw)
        monkeypatch.setattr(files, "render", render)

        real_sha256 = hashlib.sha256

        def sha256(data=b"", **kw):
            if isinstance(data, (bytes, bytearray)) and data.startswith(b"// house sample"):
                self.hashed[real_sha256(data).hexdigest()] += 1
            return real_sha256(data, **kw)
        monkeypatch.setattr(hashlib, "sha256", sha256)

    def _wrap(self, monkeypatch, module, name):
        real = getattr(module, name)

        def counted(*a, **k):
            self.calls[name] += 1
            return real(*a, **k)
        monkeypatch.setattr(module, name, counted)


def _sample(text_head: str) -> str:
    return text_head + "\n" + (SAMPLES / "row_major_threads.cu").read_text()


def test_one_submit_decides_the_machine_once_reads_the_file_once_and_renders_each_report_once(tmp_path, monkeypatch):
    counts = Counts(monkeypatch)
    mine = tmp_path / "mine.cu"
    mine.write_text(_sample("// house sample: a submit"))
    r = CliRunner().invoke(cli, ["submit", str(mine), "--report-dir", str(tmp_path / "out"), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert counts.calls["probe"] <= 1 and counts.calls["resolve_backend"] == 1, counts.calls
    assert counts.reads["mine.cu"] == 1, counts.reads
    assert counts.calls["scan // house sample: a submit"] == 1, counts.calls      # the exercise's choice and the grade
    assert set(counts.hashed.values()) == {1}, counts.hashed             # the bytes hashed once
    # report.md, report.html and the --format markdown document: each template rendered once
    assert counts.renders["report.md.j2"] == 1 and counts.renders["report.html.j2"] == 1, counts.renders
    assert (tmp_path / "out" / "report.md").read_text() in r.output       # the document is the report's text


def test_one_batch_walks_the_class_once_reads_and_hashes_each_file_once_and_probes_at_most_once(tmp_path, monkeypatch):
    counts = Counts(monkeypatch)
    folder = tmp_path / "class"
    folder.mkdir()
    n = 3
    for i in range(n):
        (folder / f"s{i}.cu").write_text(_sample(f"// house sample: student {i}"))
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(tmp_path / "out"), "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert counts.calls["_found"] == 1, counts.calls                      # the folder walked once
    assert counts.calls["probe"] <= 1 and counts.calls["resolve_backend"] == 1, counts.calls
    assert [counts.reads[f"s{i}.cu"] for i in range(n)] == [1] * n, counts.reads
    assert [counts.calls[f"scan // house sample: student {i}"] for i in range(n)] == [1] * n, counts.calls
    assert sorted(counts.hashed.values()) == [1] * n, counts.hashed
    assert counts.renders["report.md.j2"] == n and counts.renders["report.html.j2"] == n, counts.renders
    assert all((tmp_path / "out" / f"s{i}" / "gradescope.json").is_file() for i in range(n))


def test_each_grade_of_a_batch_reads_its_own_gpu_and_nothing_probes(monkeypatch):
    """A student timed on GPU 3 gets GPU 3's reading beside its timing, read through NVML when its
    grade starts; the machine's decision probed once, and a grade probes nothing."""
    from grader.core.backend import CUDA, EMULATOR
    from grader.grade.machine import Machine
    from grader.toolchain import gpuinfo

    read, probed = [], []
    monkeypatch.setattr(gpuinfo, "reading", lambda device=None: read.append(device) or {"name": f"GPU {device}"})
    monkeypatch.setattr(gpuinfo, "probe", lambda: probed.append(1) or {})
    machine = Machine(CUDA, {"name": "GPU 0 at the decision"}, ("0", "3"))
    assert machine.reading_of("3") == {"name": "GPU 3"} and machine.reading_of(machine.device(1)) == {"name": "GPU 3"}
    assert machine.reading_of(None) == {"name": "GPU 0"} and read == ["3", "3", "0"] and probed == []
    monkeypatch.setattr(gpuinfo, "reading", lambda device=None: {})          # NVML answers nothing
    assert machine.reading_of("3") == {"name": "GPU 0 at the decision"}
    assert Machine(EMULATOR).reading_of("0") is None and Machine(CUDA).reading_of("0") is None    # no GPU seen


# --- the package's shape ---------------------------------------------------------------------------

def function_imports(root: Path = PACKAGE) -> tuple[list[str], int]:
    """Every import inside a function (as file:line), and the package's count of imports."""
    inside, total = [], 0
    for p in sorted(root.rglob("*.py")):
        tree = ast.parse(p.read_text())

        def walk(node, in_function):
            nonlocal total
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    total += 1
                    if in_function:
                        inside.append(f"{p.relative_to(root.parent)}:{child.lineno}")
                walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
        walk(tree, False)
    return inside, total


def test_at_most_one_import_in_twenty_sits_inside_a_function():
    inside, total = function_imports()
    assert len(inside) <= 0.05 * total, f"{len(inside)} of {total} imports inside functions: {inside[:20]}"


def test_the_import_count_finds_an_import_inside_a_function(tmp_path):
    pkg = tmp_path / "grader"
    pkg.mkdir()
    (pkg / "m.py").write_text("import os\n\ndef f():\n    import json\n    return json, os\n")
    assert function_imports(pkg) == (["grader/m.py:4"], 2)
