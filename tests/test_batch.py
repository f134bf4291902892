"""Batch grading as instructors run it: layouts, roster, resume, interruption, the CSVs and exit codes."""

import csv
import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.core.backend import CUDA, EMULATOR
from grader.grade.machine import Machine
import grader.grade.pipeline
from grader.batch import find_submissions, grade_folder
from grader.cli import cli
from grader.core.results import CaseResult, Result


def _tree(root, files: dict[str, str]):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_layouts_flat_files_and_per_student_folders(tmp_path):
    _tree(tmp_path, {"zoe.cu": "a", "alice/kernel.cu": "b", "bob/src/deep/kernel.cu": "c", "bob/.git/x.cu": "hidden",
                     "carol/a.cu": "d", "carol/b.cu": "e", "dan/README.md": "no code", ".hidden/x.cu": "skip"})
    entries = {e.student: e for e in find_submissions(tmp_path)}
    assert sorted(entries) == ["alice", "bob", "carol", "dan", "zoe"]
    assert entries["zoe"].path.name == "zoe.cu" and not entries["zoe"].problem
    assert entries["bob"].path == tmp_path / "bob/src/deep/kernel.cu"          # .git is not a submission
    assert entries["carol"].problem == "ambiguous" and "a.cu, b.cu" in entries["carol"].detail
    assert "--file" in entries["carol"].detail
    assert entries["dan"].problem == "missing" and entries["dan"].path is None


def test_file_names_the_submission_in_each_folder(tmp_path):
    _tree(tmp_path, {"carol/kernel.cu": "k", "carol/scratch.cu": "s", "eve/sub/kernel.cu": "k",
                     "fay/other.cu": "o", "gus/x/kernel.cu": "1", "gus/y/kernel.cu": "2"})
    entries = {e.student: e for e in find_submissions(tmp_path, file_name="kernel.cu")}
    assert entries["carol"].path.name == "kernel.cu" and not entries["carol"].problem
    assert entries["eve"].path == tmp_path / "eve/sub/kernel.cu"
    assert entries["fay"].problem == "missing" and "no kernel.cu" in entries["fay"].detail
    assert entries["gus"].problem == "ambiguous"


def test_a_classroom_roster_names_students_and_lists_the_missing(tmp_path):
    root = _tree(tmp_path / "subs", {"day96-alice-gh/kernel.cu": "a", "day96-bobby/kernel.cu": "b",
                                     "day96-stranger/kernel.cu": "s"})
    roster = tmp_path / "roster.csv"
    roster.write_text('"identifier","github_username","github_id","name"\n'
                      '"alice@uni.edu","alice-gh","1","Alice"\n"bob@uni.edu","bobby","2","Bob"\n'
                      '"cleo@uni.edu","","","Cleo"\n')
    entries = {e.student: e for e in find_submissions(root, roster=roster)}
    assert entries["alice@uni.edu"].path == root / "day96-alice-gh/kernel.cu"
    assert entries["bob@uni.edu"].path.parent.name == "day96-bobby"
    assert entries["cleo@uni.edu"].problem == "missing"
    assert "not on the roster" in entries["day96-stranger"].detail and entries["day96-stranger"].path


def test_a_roster_without_an_identifier_column_is_a_usage_error(tmp_path):
    _tree(tmp_path, {"a/k.cu": "x", "r.csv": "who,when\nx,y\n"})
    r = CliRunner().invoke(cli, ["batch", str(tmp_path), "--roster", str(tmp_path / "r.csv")])
    assert r.exit_code == 2 and "identifier column" in r.output


class FakeGrader:
    """grade_submission stood in for: a correct result per file, a count of calls, and a way to
    interrupt (Ctrl-C) or fail as the machine would."""

    def __init__(self, monkeypatch, interrupt_at=None, infrastructure=(), sleep=0.0):
        self.calls = []
        self.exercises = set()
        self.devices = {}
        self.threads = {}
        self.sleep = sleep
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.interrupt_at = interrupt_at
        self.infrastructure = set(infrastructure)
        monkeypatch.setattr(grader.grade.pipeline, "grade", self)

    def __call__(self, request, *, inputs=None, progress=None):
        path, rubric = request.path, request.rubric
        device, emulator_threads = request.options.device, request.options.emulator_threads
        with self.lock:
            self.calls.append(path.name)
            self.exercises.add(rubric.exercise)
            self.devices[path.stem] = device
            self.threads[path.stem] = emulator_threads
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            interrupt = self.interrupt_at is not None and len(self.calls) == self.interrupt_at
        time.sleep(self.sleep)
        with self.lock:
            self.running -= 1
        if interrupt:
            raise KeyboardInterrupt
        r = Result(exercise=rubric.exercise, submission={"path": str(path), "sha256": "0" * 64}, backend="emulator", status="graded",
                   grader_version="t", correct=True, seconds=0.5,
                   cases=[CaseResult("c", [1, 1], "random", 0, True, total=1, max_abs_error=0.0, max_rel_error=0.0)])
        if path.stem in self.infrastructure:
            r.stop("infrastructure_error", "the GPU fell off the bus\nsecond line")
        return r


def _class(tmp_path, n=4):
    return _tree(tmp_path / "class", {f"s{i}.cu": f"// {i}\n" for i in range(n)})


def test_a_rerun_grades_only_what_changed(tmp_path, monkeypatch, rubric):
    folder, out = _class(tmp_path), tmp_path / "out"
    fake = FakeGrader(monkeypatch)
    first = grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out)
    assert len(fake.calls) == 4 and not any(g.reused for g in first.graded)
    fake.calls.clear()
    (folder / "s2.cu").write_text("// changed\n")
    second = grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out)
    assert fake.calls == ["s2.cu"]
    assert [g.reused for g in second.graded] == [True, True, False, True]
    fake.calls.clear()
    grade_folder(folder, rubric=rubric, backend="cuda", report_dir=out)       # another backend: all again
    assert len(fake.calls) == 4


def test_an_interruption_keeps_what_was_done_and_exits_130(tmp_path, monkeypatch):
    folder, out = _class(tmp_path), tmp_path / "out"
    fake = FakeGrader(monkeypatch, interrupt_at=3)
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--backend", "emulator", "--jobs", "1"])
    assert r.exit_code == 130, r.output
    assert "2 submission(s) not graded" in r.output
    rows = list(csv.DictReader((out / "summary.csv").open(newline="")))
    # the whole class, always: the students not reached are said as such (they were left out)
    assert [(row["student"], row["status"]) for row in rows] == [("s0", "graded"), ("s1", "graded"),
                                                                 ("s2", "not_graded"), ("s3", "not_graded")]
    assert "run the same command again" in rows[2]["message"]
    assert len(list(csv.DictReader((out / "gradebook.csv").open(newline="")))) == 4
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    fake.calls.clear()
    fake.interrupt_at = None
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--backend", "emulator"])
    assert r.exit_code == 0 and sorted(fake.calls) == ["s2.cu", "s3.cu"]
    assert len(list(csv.DictReader((out / "summary.csv").open(newline="")))) == 4
    # results.jsonl holds one line a student, the current one, once a batch has finished
    assert sorted(json.loads(line)["student"] for line in (out / "results.jsonl").read_text().splitlines()) == \
        ["s0", "s1", "s2", "s3"]


def test_a_line_cut_short_is_graded_again(tmp_path, monkeypatch, rubric):
    folder, out = _class(tmp_path, 2), tmp_path / "out"
    fake = FakeGrader(monkeypatch)
    grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out)
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    cut = json.loads(lines[1])["student"]
    fake.calls.clear()
    grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out)
    assert fake.calls == [f"{cut}.cu"]


def test_infrastructure_failures_exit_4_and_the_csv_is_plain(tmp_path, monkeypatch):
    folder, out = _class(tmp_path, 3), tmp_path / "out"
    FakeGrader(monkeypatch, infrastructure={"s1"})
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--backend", "emulator"])
    assert r.exit_code == 4 and "s1" in r.output
    raw = (out / "summary.csv").read_bytes()
    assert b"\r\n" not in raw
    rows = {row["student"]: row for row in csv.DictReader((out / "summary.csv").open(newline=""))}
    assert rows["s0"]["correct"] == "true" and rows["s0"]["borderline"] == "false" and rows["s0"]["backend"] == "emulator"
    assert rows["s1"]["message"] == "the GPU fell off the bus / second line"       # the whole message, one line
    book = {row["student"]: row for row in csv.DictReader((out / "gradebook.csv").open(newline=""))}
    assert book["s0"]["points"] != "0" and book["s1"]["points"] == "0" and book["s1"]["max_points"] == book["s0"]["max_points"]
    assert book["s0"]["tier"] == "" and book["s0"]["tier_note"] == "not timed (emulator): no tier yet"
    assert book["s1"]["tier"] == "" and book["s1"]["tier_note"] == ""


def test_a_missing_submission_is_a_row_not_a_failure(tmp_path, monkeypatch):
    folder = _tree(tmp_path / "class", {"alice/kernel.cu": "// a\n", "bob/notes.txt": "forgot"})
    out = tmp_path / "out"
    FakeGrader(monkeypatch)
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out)])
    assert r.exit_code == 0, r.output
    rows = {row["student"]: row for row in csv.DictReader((out / "summary.csv").open(newline=""))}
    assert rows["bob"]["status"] == "missing" and "no .cu file" in rows["bob"]["message"]
    assert (out / "alice" / "result.json").is_file() and not (out / "bob").exists()
    stored = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [s["student"] for s in stored] == ["alice"]


def test_submissions_overlap_in_flight_and_keep_their_order(tmp_path, monkeypatch, rubric):
    folder = _class(tmp_path, 6)
    fake = FakeGrader(monkeypatch, sleep=0.3)
    outcome = grade_folder(folder, rubric=rubric, backend="cuda", report_dir=tmp_path / "out", jobs=3)
    assert fake.most_at_once >= 2
    assert [g.entry.student for g in outcome.graded] == [f"s{i}" for i in range(6)]
    assert all(d is not None for d in fake.devices.values())      # every cuda grade names its GPU


def test_emulator_children_in_flight_share_the_cores(tmp_path, monkeypatch, rubric):
    """Each emulated child spreads a large launch over its threads: a batch of several at once
    gives each its share of the cores, a lone one (jobs=1) every core."""
    from grader.core.limits import usable_cores

    fake = FakeGrader(monkeypatch)
    grade_folder(_class(tmp_path, 4), rubric=rubric, backend="emulator", report_dir=None, jobs=2)
    assert set(fake.threads.values()) == {max(1, usable_cores() // 2)}
    fake = FakeGrader(monkeypatch)
    grade_folder(_class(tmp_path / "one", 2), rubric=rubric, backend="emulator", report_dir=None, jobs=1)
    assert set(fake.threads.values()) == {0}


@pytest.mark.parametrize("cores, lanes, jobs", [(16, 1, 15), (32, 2, 31), (20, 1, 16), (8, 2, 7), (1, 1, 1), (64, 8, 63)])
def test_a_batch_keeps_a_few_submissions_in_flight_for_each_gpu(cores, lanes, jobs, monkeypatch):
    import grader.batch.grading as batch_grading

    monkeypatch.setattr(batch_grading, "usable_cores", lambda: cores)
    assert batch_grading.default_jobs(CUDA, lanes=lanes) == jobs
    assert batch_grading.default_jobs(EMULATOR) == cores


def test_gpus_are_given_round_robin(tmp_path, monkeypatch, rubric):
    from grader.batch.request import ClassRequest
    from grader.batch.grading import grade_entries
    from grader.batch.inputs import find_submissions

    fake = FakeGrader(monkeypatch)
    entries = find_submissions(_class(tmp_path, 4))
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=None, jobs=2), machine=Machine(CUDA, {}, ("0", "1")))
    assert fake.devices == {"s0": "0", "s1": "1", "s2": "0", "s3": "1"}


def test_a_batch_in_flight_hands_the_interpreter_on_often_and_restores_it(tmp_path, monkeypatch, rubric):
    """Grades in flight share one interpreter lock: while the batch runs, a thread that wakes
    (the lane's grade, on its children's frames) waits at most half a millisecond for it, not 5."""
    import sys

    from grader.batch.request import ClassRequest
    from grader.batch.grading import SWITCH_INTERVAL_S, grade_entries
    from grader.batch.inputs import find_submissions

    seen = []
    fake = FakeGrader(monkeypatch)

    def watching(*a, **k):
        seen.append(sys.getswitchinterval())
        return fake(*a, **k)
    monkeypatch.setattr(grader.grade.pipeline, "grade", watching)
    before = sys.getswitchinterval()
    entries = find_submissions(_class(tmp_path, 3))
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=None, jobs=2), machine=Machine(CUDA, {}, ("0",)))
    assert seen and all(abs(v - SWITCH_INTERVAL_S) < 1e-9 for v in seen)
    assert sys.getswitchinterval() == before
    seen.clear()
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=None, jobs=1), machine=Machine(CUDA, {}, ("0",)))
    assert seen and all(v == before for v in seen)            # one at a time: nothing to hand on to


def test_a_gpu_lane_is_held_by_one_grader_at_a_time(tmp_path, monkeypatch):
    """Threads here, but the lock is a file lock: another process's grader waits the same way. Counted,
    not timed: how many are inside GPU 0's lane at once, and GPU 1's lane taken while GPU 0's is held."""
    from grader.run import lanes

    monkeypatch.setenv("GRADER_LOCK_DIR", str(tmp_path))
    count = threading.Lock()
    inside, most = {"0": 0, "1": 0}, {"0": 0, "1": 0}
    gpu1_in = threading.Event()

    def hold(device, until=None):
        with lanes.gpu_lane(device):
            with count:
                inside[device] += 1
                most[device] = max(most[device], inside[device])
            if device == "1":
                gpu1_in.set()
            if until is not None:
                until.wait(timeout=120)                                 # a hang's guard
            time.sleep(0.05)                                           # room for a second holder to get in wrongly
            with count:
                inside[device] -= 1

    first = threading.Thread(target=hold, args=("0", gpu1_in))         # holds GPU 0 until GPU 1 is taken
    first.start()
    while not most["0"]:
        time.sleep(0.01)
    threads = [*(threading.Thread(target=hold, args=("0",)) for _ in range(2)), threading.Thread(target=hold, args=("1",))]
    for t in threads:
        t.start()
    for t in [first, *threads]:
        t.join()
    assert most == {"0": 1, "1": 1}                                    # never two at once on GPU 0
    assert gpu1_in.is_set()                                            # GPU 1 did not wait for GPU 0's queue


def test_a_lone_submit_and_a_batch_share_the_lane(tmp_path, monkeypatch):
    """A grader in another process holding GPU 0's lane makes this one wait for it."""
    import subprocess
    import sys

    from grader.run import lanes

    monkeypatch.setenv("GRADER_LOCK_DIR", str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from grader.run import lanes\n"
                               "with lanes.gpu_lane('0'):\n    print('held', flush=True); sys.stdin.readline()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**__import__('os').environ})
    assert holder.stdout.readline().strip() == "held"
    order = []

    def take():
        with lanes.gpu_lane("0") as lane:
            order.append(("taken", lane.waited > 0))

    taker = threading.Thread(target=take)
    taker.start()
    taker.join(timeout=0.5)                   # time for a lane that does not hold to be taken (a miss, never a false alarm)
    order.append("released")
    holder.stdin.write("\n")
    holder.stdin.flush()
    taker.join(timeout=120)                   # a hang's guard
    holder.wait(timeout=120)
    assert order == ["released", ("taken", True)]                      # taken only once the other process let go


def test_a_lane_released_early_lets_the_next_grader_in(tmp_path, monkeypatch):
    """The grader hands the lane on once the child has sent everything, before it has exited."""
    from grader.run import lanes

    monkeypatch.setenv("GRADER_LOCK_DIR", str(tmp_path))
    got = []
    first_block = ["running"]
    with lanes.gpu_lane("0") as lane:
        lane.release()
        def take():
            with lanes.gpu_lane("0"):
                got.append(first_block[0])
        t = threading.Thread(target=take)
        t.start()
        t.join(timeout=120)                         # a hang's guard
        assert got == ["running"]                   # taken while the first block still runs
    first_block[0] = "ended"
    t.join(timeout=120)
    assert got == ["running"]
    lane.release()                                   # a second release is harmless


def test_shards_split_the_class_and_merge_puts_it_back(tmp_path, monkeypatch):
    folder = _tree(tmp_path / "class", {**{f"s{i}/kernel.cu": f"// {i}\n" for i in range(5)}, "ghost/notes.txt": "-"})
    fake = FakeGrader(monkeypatch)
    outs = []
    for k in (1, 2):
        out = tmp_path / f"shard{k}"
        r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--shard", f"{k}/2",
                                     "--backend", "emulator"])
        assert r.exit_code == 0, r.output
        outs.append(out)
    assert sorted(fake.calls) == sorted(["kernel.cu"] * 5) and len(fake.calls) == 5      # each graded once
    shard_students = [{row["student"] for row in csv.DictReader((o / "summary.csv").open(newline=""))} for o in outs]
    assert not shard_students[0] & shard_students[1]
    merged = tmp_path / "all"
    r = CliRunner().invoke(cli, ["merge", str(merged), *map(str, outs)])
    assert r.exit_code == 0, r.output
    rows = {row["student"]: row for row in csv.DictReader((merged / "summary.csv").open(newline=""))}
    assert sorted(rows) == ["ghost", "s0", "s1", "s2", "s3", "s4"]
    assert rows["ghost"]["status"] == "missing" and rows["s3"]["correct"] == "true"
    assert len(list(csv.DictReader((merged / "gradebook.csv").open(newline="")))) == 6
    assert (merged / "s4" / "gradescope.json").is_file() and (merged / "junit.xml").is_file()


@pytest.mark.parametrize("bad", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_a_bad_shard_is_a_usage_error(bad, tmp_path):
    _tree(tmp_path, {"a.cu": "x"})
    r = CliRunner().invoke(cli, ["batch", str(tmp_path), "--shard", bad])
    assert r.exit_code == 2 and "K/N" in r.output


def test_merge_of_a_folder_that_is_not_a_report_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(cli, ["merge", str(tmp_path / "out"), str(tmp_path)])
    assert r.exit_code == 2 and "results.jsonl" in r.output


def test_the_class_report_counts_tiers_bins_fractions_and_names_students(tmp_path, rubric):
    from pathlib import Path

    from grader.batch.classreport import BIN, write_class_report
    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry
    from grader.core.results import DeviceSummary, DiagnosisEntry, FindingEntry, FloorSummary

    def graded(name, **kw):
        r = Result(exercise="e", submission={"path": name, "sha256": "0" * 64}, backend="cuda", status="graded",
                   grader_version="t", device=DeviceSummary(name="NVIDIA H200"),
                   floor=FloorSummary("copy_vec4", 3700.0), **kw)
        return Graded(Entry(name, Path(name + ".cu")), r)

    compile_error = graded("carl")
    compile_error.result.stop("compile_error", "k.cu:3: error: expected ';'\nmore")
    g = [graded("ann", correct=True, tier="gold", fraction=0.96), graded("bo", correct=True, tier="below", fraction=0.58,
                                                                        findings=[FindingEntry("scalar_loads", "k", "m", "a")]),
         graded("<script>x", correct=True, tier="below", fraction=0.59),
         graded("dee", correct=False, fraction=0.6, diagnosis=[DiagnosisEntry("tanh_gelu", "m", "a")]),
         compile_error, Graded(Entry("eve", None, "missing", "eve/ holds no .cu file"), None)]
    s = write_class_report(g, rubric, tmp_path / "class.html")
    assert dict(s.by_outcome) == {"gold": 1, "below": 2, "incorrect": 1, "compile_error": 1, "missing": 1}
    bar = s.bars[int(0.58 / BIN)]
    assert bar.count == 2 and set(bar.students) == {"bo", "<script>x"}
    assert [(m.code, m.students) for m in s.insights.mistakes] == [("tanh_gelu", ["dee"])]
    assert [(f.code, f.students, f.median_with, f.median_without) for f in s.insights.findings] == [
        ("scalar_loads", ["bo"], 0.58, 0.775)]          # bo's 0.58 against ann's 0.96 and 0.59's median
    assert json.loads((tmp_path / "insights.json").read_text())["findings"][0]["example"]["student"] == "bo"
    assert s.floors == [("NVIDIA H200", 3700.0)]
    assert ("carl", "compile_error", "k.cu:3: error: expected ';'") in s.not_graded
    page = (tmp_path / "class.html").read_text()
    assert "<script>x" not in page and "&lt;script&gt;x" in page          # names are escaped
    assert 'class="compile-error"' in page                                            # a class name each
    assert "gold 0.9" in page and "silver 0.75" in page


def test_the_class_report_names_every_student_in_a_sortable_table_linked_to_their_reports(tmp_path):
    """Every student a row (by name): outcome, tier, fraction (a correct kernel's only), what was
    named; the name links to the student's report.html where the batch wrote one; each column
    sorts by the value in its cells' data-value (the outcome by its rank, best first)."""
    import re
    from pathlib import Path

    from grader.batch.classreport import write_class_report
    from grader.batch.grading import Graded
    from grader.batch.inputs import Entry
    from grader.exercises import load_exercise
    from grader.core.results import DiagnosisEntry

    def graded(name, **kw):
        r = Result(exercise="e", submission={"path": name, "sha256": "0" * 64}, backend="cuda", status="graded",
                   grader_version="t", **kw)
        return Graded(Entry(name, Path(name + ".cu")), r)

    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "report.html").write_text("<html></html>")
    g = [graded("zed", correct=True, tier="below", fraction=0.59),
         graded("ann", correct=True, tier="gold", fraction=0.95),
         graded("dee", correct=False, fraction=0.7, diagnosis=[DiagnosisEntry("bias_missing", "m", "a")]),
         Graded(Entry("eve", None, "missing", "eve/ holds no .cu file"), None)]
    s = write_class_report(g, load_exercise("bias_gelu_fused"), tmp_path / "class.html")
    assert [r.student for r in s.rows] == ["ann", "dee", "eve", "zed"]
    by = {r.student: r for r in s.rows}
    assert (by["ann"].outcome, by["ann"].tier, by["ann"].fraction, by["ann"].report) == ("gold", "gold", 0.95,
                                                                                        "ann/report.html")
    assert by["dee"].fraction is None and by["dee"].named == "bias_missing" and by["dee"].report == ""
    assert by["ann"].rank < by["zed"].rank < by["dee"].rank < by["eve"].rank
    page = (tmp_path / "class.html").read_text()
    table = page.split('<table id="students">')[1].split("</table>")[0]
    assert '<a href="ann/report.html">ann</a>' in table and "<a " not in table.split("zed")[0].split("ann</a>")[1]
    assert re.findall(r'<th data-type="(\w+)">(\w+)</th>', table) == [
        ("text", "student"), ("num", "outcome"), ("num", "tier"), ("num", "fraction"), ("text", "diagnosis")]
    assert 'data-value="0.95" class="num">0.950</td>' in table and 'data-value="-1" class="num">-</td>' in table
    assert 'addEventListener("click"' in page


def test_a_batch_writes_the_class_report(tmp_path, monkeypatch):
    folder, out = _class(tmp_path, 2), tmp_path / "out"
    FakeGrader(monkeypatch)
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(out), "--backend", "emulator"])
    page = (out / "class.html").read_text()
    assert r.exit_code == 0 and "2 students" in page and "correct</td><td>2" in page


def test_a_class_is_graded_against_the_exercise_most_files_define(tmp_path, monkeypatch):
    rope = "__global__ void ropeHalfSplit(const float* in, const float* c, const float* s, float* out, size_t pairs, " \
           "int halfDim, int heads, int seq) {}\n"
    folder = _tree(tmp_path / "class", {"a.cu": rope, "b.cu": rope, "c.cu": "__global__ void ropeHalfSpilt() {}\n",
                                        "d.cu": "__global__ void biasGeluFused(float* o) {}\n", "e.cu": "// empty\n"})
    fake = FakeGrader(monkeypatch)
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(tmp_path / "out"), "--backend", "emulator"])
    assert r.exit_code == 0, r.output
    assert fake.exercises == {"rope_half_split"} and len(fake.calls) == 5
    fake.exercises.clear()
    r = CliRunner().invoke(cli, ["batch", str(folder), "--report-dir", str(tmp_path / "out2"), "--backend", "emulator",
                                 "--exercise", "bias_gelu_fused"])
    assert r.exit_code == 0 and fake.exercises == {"bias_gelu_fused"}


def test_a_stored_result_of_the_older_schema_is_graded_again_not_misread(tmp_path):
    """results.jsonl from before grader.result/2 (build.sass, device.nvcc): the student is graded
    again, and the lines of the current schema are kept."""
    import json

    from grader.batch.store import ResultStore
    from grader.core.results import SCHEMA, Result

    new = Result(exercise="e", submission={"path": "b.cu"}, backend="emulator", status="graded",
                 grader_version="0", correct=True)
    old = dict(new.to_json(), schema="grader.result/1", build={"ok": True, "sass": "unavailable: no nvdisasm"},
               device={"nvcc": "release 13.0"})
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"student": "ann", "file": "a.cu", "key": "k1", "result": old}) + "\n"
                    + json.dumps({"student": "bob", "file": "b.cu", "key": "k2", "result": new.to_json()}) + "\n")
    store = ResultStore(path)
    assert store.reusable("ann", "k1") is None
    kept = store.reusable("bob", "k2")
    assert kept is not None and kept.schema == SCHEMA and kept.correct is True


def test_results_jsonl_holds_one_current_line_a_student_after_new_versions(tmp_path, monkeypatch, rubric):
    """Three runs over versions of the files left 18 lines for 6 students, none saying which was current;
    a finished batch now leaves one line a student, its latest."""
    folder, out = _class(tmp_path, 3), tmp_path / "out"
    FakeGrader(monkeypatch)
    for version in range(3):
        for f in folder.glob("*.cu"):
            f.write_text(f"// version {version}\n" + f.read_text())
        grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out)
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(row["student"] for row in lines) == ["s0", "s1", "s2"]


def test_a_grade_is_serialised_once_and_results_jsonl_written_once(tmp_path, monkeypatch, rubric):
    """A batch's sinks (the report folder, Gradescope's file, results.jsonl) take one value a grade
    (report/files.Rendered): Result.to_json runs once a grade, and a fresh batch's results.jsonl is
    its lines appended as grades end, not written again at the end (it held every line twice over)."""
    from grader.batch import store as batch_store
    from grader.core import atomic

    folder, out = _class(tmp_path, 3), tmp_path / "out"
    FakeGrader(monkeypatch)
    serialised, rewrites = [], []
    to_json, replace_text = Result.to_json, atomic.replace_text
    monkeypatch.setattr(Result, "to_json", lambda self: serialised.append(self) or to_json(self))
    monkeypatch.setattr(batch_store.atomic, "replace_text",
                        lambda path, text, *a, **k: rewrites.append(path.name) or replace_text(path, text, *a, **k))
    heard = []
    first = grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out,
                         progress=lambda g, _done, _total: heard.append(g.documents))
    assert len(serialised) == 3 and "results.jsonl" not in rewrites
    assert len((out / "results.jsonl").read_text().splitlines()) == 3
    assert [g.documents for g in first.graded] == [None] * 3        # handed to the sinks, not kept to the end
    stored = {row["student"]: row["result"] for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    for documents in heard:                     # each sink took the one document
        student = Path(documents.result.submission["path"]).stem
        assert json.loads((out / student / "result.json").read_text()) == stored[student] == documents.document
    serialised.clear()
    (folder / "s1.cu").write_text("// changed\n")
    grade_folder(folder, rubric=rubric, backend="emulator", report_dir=out)
    assert len(serialised) == 1                 # the one graded again; the kept lines are not serialised again
    assert rewrites.count("results.jsonl") == 1 and len((out / "results.jsonl").read_text().splitlines()) == 3


def test_an_incorrect_students_summary_row_says_where_it_first_went_wrong(tmp_path, rubric):
    from grader.batch.outputs import incorrect_text
    from grader.core.results import CaseResult, Result

    r = Result(exercise="e", submission={}, backend="emulator", status="graded", grader_version="0", correct=False)
    r.cases = [CaseResult("one", [1], "random", 1, True),
               CaseResult("lesson 101x97", [101, 97], "lesson", None, False, 8888, 9797, 0,
                          {"at": "out[row 0][col 0]", "got": -2.61515379e-06, "want": -2.77718745e-09})]
    assert incorrect_text(r) == ("lesson 101x97: first bad element out[row 0][col 0]: got -2.61515379e-06, "
                                 "want -2.77718745e-09; 8888 of 9797 wrong")
    r.correct = True
    assert incorrect_text(r) == ""


def test_the_jobs_help_says_the_default_in_flight():
    """`grader batch --help` (and docs/cli.md from it) states PER_LANE, written there by hand."""
    import grader.batch.grading as batch_grading
    from grader.cli.instructor import batch

    jobs = next(p for p in batch.params if p.name == "jobs")
    assert f"up to {batch_grading.PER_LANE} for each visible GPU" in jobs.help


def test_a_csv_cell_of_several_lines_is_one_line():
    from grader.batch.outputs import one_line

    assert one_line("k.cu(3): error: expected ';'\n    int x = 1\n            ^\n\n1 error") == \
        "k.cu(3): error: expected ';' / int x = 1 / 1 error"
    assert one_line("one line, kept as it is  ") == "one line, kept as it is  "


def test_a_class_store_drawn_by_the_caller_is_the_one_every_grade_gets_and_stays_open(tmp_path, monkeypatch, rubric):
    """grade_entries(shared=...): the course server's worker draws a wave's private cases before the
    wave comes (serve/worker.DrawnAhead); every grade of the wave gets that store, and it is the
    caller's to close. Without one, a store is made for the class and closed at its end."""
    import grader.batch.grading as batch_grading
    from grader.batch.request import ClassRequest
    from grader.batch.grading import grade_entries
    from grader.batch.inputs import find_submissions

    fake = FakeGrader(monkeypatch)
    given = []
    real = fake.__call__
    monkeypatch.setattr(grader.grade.pipeline, "grade", lambda request, *, inputs=None, progress=None:
                        (given.append(inputs), real(request, inputs=inputs, progress=progress))[1])

    class Drawn:
        closed = 0

        def close(self):
            Drawn.closed += 1

    drawn = Drawn()
    entries = find_submissions(_class(tmp_path, 3))
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=None, jobs=2),
                  machine=Machine(CUDA, {}, ("0",)), shared=drawn)
    assert given == [drawn] * 3 and Drawn.closed == 0
    made = []
    monkeypatch.setattr(batch_grading, "class_store", lambda rubric: made.append(Drawn()) or made[-1])
    given.clear()
    grade_entries(entries, ClassRequest(tmp_path, rubric, CUDA, report_dir=None, jobs=1), machine=Machine(CUDA, {}, ("0",)))
    assert len(made) == 1 and given == made * 3 and Drawn.closed == 1
