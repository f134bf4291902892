"""The small things a new instructor and their students met following the docs word for word: the
tokens' folder, the server's synopsis and --help, a file of another exercise, a chain not run after
an out-of-bounds launch, `grader samples` at 80 columns, gradescope.json's images, the README."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys

from click.testing import CliRunner
from conftest import ROOT, SUBMISSIONS

from grader.cli import cli
from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission


def test_tokens_make_the_course_folder_private(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("identifier\nann\nbob\n")
    folder = tmp_path / "not" / "yet"
    out = CliRunner().invoke(cli, ["serve", "tokens", str(roster), "--folder", str(folder)])     # in process
    assert out.exit_code == 0, out.stderr
    assert [line.split(",")[0] for line in out.stdout.split()] == ["identifier", "ann", "bob", "@instructor"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and (folder / "grader.sqlite").is_file()


def test_the_synopsis_and_help_say_what_the_server_takes():
    from grader.cli.serve import serve, start

    docs = (ROOT / "docs" / "serve.md").read_text()
    synopsis = docs.split("```sh\n", 1)[1].split("```", 1)[0]
    assert "grader serve course/ --exercise" in synopsis
    per_hour = next(p for p in start.params if p.name == "per_hour").default
    assert f"[--per-hour {per_hour}]" in synopsis
    shown = CliRunner().invoke(serve, ["course/", "--help"], prog_name="grader serve").output
    assert shown.startswith("Usage: grader serve FOLDER --exercise NAME [OPTIONS]"), shown[:200]
    assert "grader serve start" not in shown


def test_a_file_of_another_exercise_is_told_which_exercise_it_belongs_to():
    rubric = load_exercise("bias_gelu_fused")
    r = grade_submission(ROOT / "submissions" / "gelu_sum" / "float4_launcher.cu", rubric=rubric, backend="emulator")
    assert r.status == "rejected"
    assert "is a gelu_sum file (it defines launchGeluSum, that exercise's launcher)" in r.message, r.message
    assert "--exercise gelu_sum" in r.message and "Without a launcher" not in r.message
    # a misspelt kernel of this exercise is still told its own name
    misnamed = grade_submission(SUBMISSIONS / "misnamed_kernel.cu", rubric=rubric, backend="emulator")
    assert "should it be named 'biasGeluFused'" in misnamed.message and "gelu_sum" not in misnamed.message


def test_a_chain_not_run_after_an_out_of_bounds_launch_says_so():
    r = grade_submission(SUBMISSIONS / "missing_guard.cu", rubric=load_exercise("bias_gelu_fused"), backend="emulator")
    chains = [c.note for c in r.cases if c.kind == "chain" and c.note.startswith("not run")]
    assert chains and all("read past the end of bias at missing_guard.cu:9" in n for n in chains), chains
    assert not any("launch in this check failed" in n for n in chains)


def test_grader_samples_fits_80_columns_and_says_each_mismatch_whole(tmp_path):
    folder = tmp_path / "bias_gelu_fused"
    folder.mkdir()
    long_name = "python_capi_replay_outputs_x.cu"          # as long as the samples' longest names
    shutil.copy(ROOT / "submissions" / "gelu_sum" / "float4_launcher.cu", folder / long_name)
    (folder / "manifest.yaml").write_text(f"{long_name}:\n  status: graded\n  correct: true\n")
    out = subprocess.run([sys.executable, "-m", "grader", "samples", str(folder), "--backend", "emulator"],
                         capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(line for line in lines if len(line) > 80)
    assert any(long_name in line for line in lines if "│" in line)       # the name whole in the table
    said = " ".join(line.strip() for line in lines if "│" not in line and not line.startswith(("┏", "┃", "┡", "└")))
    assert f"{long_name}: status rejected, expected graded" in said
    # the message quoted whole: up to its end, not cut mid-sentence
    assert f"`grader submit {long_name} --exercise gelu_sum`)" in said, said


def test_gradescope_json_links_no_image_file_gradescope_will_not_have(tmp_path):
    from grader.platforms import gradescope
    from grader.platforms.scoring import score
    from grader.report.files import render_markdown

    rubric = load_exercise("bias_gelu_fused")
    r = grade_submission(SUBMISSIONS / "tanh_gelu.cu", rubric=rubric, backend="emulator")
    markdown = render_markdown(r, rubric)
    assert re.search(r"\]\(map-\d+\.svg\)", markdown)            # report.md beside its map files
    doc = gradescope.results(r, score(r, rubric), markdown)
    assert ".svg" not in doc["output"] and "](map-" not in doc["output"]
    assert "report.html" in doc["output"] and json.dumps(doc)


def test_the_readme_names_no_issue():
    assert not re.search(r"\bissues? #?\d+", (ROOT / "README.md").read_text(), re.IGNORECASE)
