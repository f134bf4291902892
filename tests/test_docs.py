"""docs/: the generated pages are current, and every page the README points at exists."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_generated_docs_restate_the_data_they_come_from():
    """docs/samples.md (the manifests), docs/rubric-keys.md (the rubric schema), docs/cli.md (the
    commands): `scripts/docs.py --check` fails when one of them was not regenerated."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs.py"), "--check"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_a_stale_page_is_named(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    import docs

    monkeypatch.setattr(docs, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "samples.md").write_text("old\n")
    monkeypatch.setattr(docs, "FILES", {"docs/samples.md": lambda: "new\n"})
    monkeypatch.setattr(docs, "SECTIONS", {})
    monkeypatch.setattr(sys, "argv", ["docs.py", "--check"])
    assert docs.main() == 1
    # a table inside a hand-written page: stale, then regenerated in place
    (tmp_path / "docs" / "samples.md").write_text("new\n")
    (tmp_path / "docs" / "page.md").write_text("<!-- generated: t (x) -->\nold\n<!-- end generated: t -->\n")
    monkeypatch.setattr(docs, "SECTIONS", {"docs/page.md": {"t": lambda: "fresh"}})
    assert docs.main() == 1
    monkeypatch.setattr(sys, "argv", ["docs.py"])
    assert docs.main() == 0 and "\nfresh\n" in (tmp_path / "docs" / "page.md").read_text()
    monkeypatch.setattr(sys, "argv", ["docs.py", "--check"])
    assert docs.main() == 0


def test_the_figures_page_is_the_benchmarks_rows(tmp_path, monkeypatch):
    """docs/figures.md restates docs/figures/*.json (scripts/benchmark.py --out): each run's machine
    and every row, its verdict from the row's own pass or miss."""
    import json

    sys.path.insert(0, str(ROOT / "scripts"))
    import docs

    monkeypatch.setattr(docs, "ROOT", tmp_path)
    assert "No run of the current code is recorded yet." in docs.figures_md()
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    (tmp_path / "docs" / "figures" / "nvidia-h200.json").write_text(json.dumps({
        "machine": {"gpu": "NVIDIA H200", "cores": 16, "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0"},
        "backend": "cuda", "kind": "submit", "figures": {},
        "rows": [["submit warm, median of 3", "1.62 s", "<= 2.0 s", True], ["  phases", "build_s 0.1", "", None],
                 ["float4: median fraction, tier", "0.941 {'silver'}", ">= 0.95, gold", False]]}))
    page = docs.figures_md()
    assert "## submit on NVIDIA H200, 16 cores, driver 580.159.04, CUDA 13.0, torch 2.11.0" in page
    assert "| submit warm, median of 3 | 1.62 s | <= 2.0 s | pass |" in page
    assert "| phases | build_s 0.1 |  |  |" in page
    assert "| float4: median fraction, tier | 0.941 {'silver'} | >= 0.95, gold | MISS |" in page
    # `grader calibrate --json-out`: the table the command prints, from the same dataclasses
    from grader.grade.calibration import Calibration, Row, render, write_json

    cal = Calibration("bias_gelu_fused", "t", {"rows": 16384, "cols": 1024}, {"name": "NVIDIA H200"}, "copy_vec4",
                      {"gold": 0.9, "silver": 0.75}, [Row("copy_vec4", "", 134217728, 0.0358, 3748.3, 1.0, True),
                                                      Row("biasGeluFused", "2 floats", 134217728, 0.0604, 2221.6, 0.593)])
    write_json([cal], tmp_path / "docs" / "figures" / "nvidia-h200-calibrate.json")
    page = docs.figures_md()
    assert "## `grader calibrate` on NVIDIA H200 (nvidia-h200-calibrate.json)" in page and render(cal).rstrip() in page


def test_every_link_in_the_readme_and_docs_leads_to_a_file():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")) or target.endswith(".svg"):
                continue
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_a_samples_run_is_kept_as_its_outcomes_and_fractions(tmp_path, monkeypatch):
    """`scripts/docs.py --record-samples` keeps of `grader samples --json-out` only what figures.md
    shows: each sample's outcome, and the fraction of the correct ones (an incorrect kernel's speed
    means nothing)."""
    import json

    sys.path.insert(0, str(ROOT / "scripts"))
    import docs

    device = {"name": "NVIDIA H200", "cuda_runtime": "13.0", "before": {"driver_version": "580.159.04"}}
    results = {
        "fast.cu": {"exercise": "gelu_sum", "backend": "cuda", "status": "graded", "correct": True, "tier": "silver",
                    "fraction": 0.7512, "fraction_ci": [0.749, 0.753], "device": device, "cases": [{"big": 1}]},
        "wrong.cu": {"exercise": "gelu_sum", "backend": "cuda", "status": "graded", "correct": False, "tier": None,
                     "fraction": 0.83, "fraction_ci": [0.8, 0.9], "device": device},
        "evil.cu": {"exercise": "gelu_sum", "backend": "cuda", "status": "rejected", "correct": None, "tier": None,
                    "fraction": None, "fraction_ci": None, "device": device},
    }
    (tmp_path / "samples.json").write_text(json.dumps(results))
    kept = docs.record_samples(tmp_path / "samples.json", tmp_path / "docs" / "figures")
    assert kept.name == "nvidia-h200-samples-gelu_sum.json" and "cases" not in kept.read_text()
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    page = docs.figures_md()
    assert "## `grader samples` of gelu_sum on NVIDIA H200, driver 580.159.04, CUDA 13.0" in page
    assert "| fast.cu | correct, silver | 0.751 (0.749 to 0.753) |" in page
    assert "| wrong.cu | incorrect |  |" in page and "| evil.cu | rejected |  |" in page


def test_a_generated_section_is_rewritten_in_place_and_a_missing_one_is_named():
    import pytest

    sys.path.insert(0, str(ROOT / "scripts"))
    import docs

    page = "intro\n<!-- generated: t (from x) -->\nold rows\n<!-- end generated: t -->\nprose after\n"
    assert docs.with_sections(page, {"t": lambda: "| new |"}, "p.md") == (
        "intro\n<!-- generated: t (from x) -->\n| new |\n<!-- end generated: t -->\nprose after\n")
    with pytest.raises(SystemExit, match="p.md: no generated section 'u'"):
        docs.with_sections(page, {"u": lambda: ""}, "p.md")


def test_the_readme_names_the_cpu_torch_command_and_what_the_tests_need():
    """Issue 64: a new user without a GPU copies the CPU build's command whole; the tests' tools are
    named with where .ci/run gets them; nvcc's 1 s is said to be the warm figure."""
    readme = (ROOT / "README.md").read_text()
    flat = " ".join(readme.split())
    assert "python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme
    for tool in ("g++", "nvcc", "Slurm", "munge", "Chromium", "`.ci/run`", "apt-get"):
        assert tool in flat, tool
    assert "about 1 s once the build cache is warm" in flat and "first grade" in flat
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pip install -q --no-cache-dir torch==2.13.0" in ci and "slurm-wlm munge" in ci and "chromium" in ci
