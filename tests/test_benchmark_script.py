"""scripts/benchmark.py's reading of a batch's results (what the device run's rows are made of)."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import benchmark  # noqa: E402


def held(taken, released, waited):
    return {"phases": {"lane_taken_at": taken, "lane_released_at": released, "lane_wait_s": waited}}


def test_the_lanes_idle_hand_offs_count_only_grades_that_were_waiting():
    results = [held(10.0, 10.3, 2.0),
               held(10.45, 10.8, 1.0),          # waiting since 9.45: 0.15 s idle after the first's release
               held(10.82, 11.1, 0.5),          # 0.02 s
               held(12.0, 12.3, 0.1),           # came at 11.9, after the release at 11.1: no hand-off
               {"phases": {"lane_wait_s": 0.0}}]    # the emulator, or a build that failed: no lane
    gaps = benchmark._lane_gaps(results)
    assert gaps["handoffs"] == 2
    assert abs(gaps["sum_s"] - 0.17) < 1e-9 and abs(gaps["max_s"] - 0.15) < 1e-9
    assert benchmark._lane_gaps([held(1.0, 2.0, 0.0)]) == {}


def test_the_lanes_busy_share_and_the_mean_phases():
    results = [{"phases": {"lane_s": 0.3, "build_s": 1.0}}, {"phases": {"lane_s": 0.5, "build_s": 3.0}},
               {"phases": {"build_s": 2.0, "lane_taken_at": 5.0}}]
    assert abs(benchmark._lane_busy(results, 4.0) - 0.2) < 1e-9
    assert benchmark._phases_mean(results) == {"lane_s": 0.4, "build_s": 2.0}     # each over the grades that have it


def test_the_lane_starved_is_the_idle_before_a_grade_asked_for_it_by_where_in_the_batch():
    results = [held(10.0, 10.3, 2.0),
               held(10.45, 10.8, 1.0),          # waiting already: a hand-off, not starved
               held(12.0, 12.3, 0.1),           # asked at 11.9: 1.1 s starved, in the batch's first tenth
               held(30.0, 30.3, 0.5)]           # asked at 29.5: 17.2 s starved after the release at 12.3, the middle
    starved = benchmark._lane_starved(results)
    assert starved["releases"] == 2
    assert abs(starved["sum_s"] - 18.3) < 1e-9 and abs(starved["start_s"] - 1.1) < 1e-9
    assert abs(starved["middle_s"] - 17.2) < 1e-9 and starved["end_s"] == 0
    assert benchmark._lane_starved([held(1.0, 2.0, 0.0)]) == {}


def test_the_process_watch_reads_a_running_process_cpu_and_memory():
    import subprocess
    import time

    def cpu_s(pid: int) -> float:            # the process's own clock: user + system time
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    proc = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"])
    time.sleep(0.2)
    before, t0 = cpu_s(proc.pid), time.monotonic()
    watch = benchmark.ProcessWatch(proc.pid, every_s=0.05)
    watch.start()
    time.sleep(1.0)
    got = watch.stop()
    after, t1 = cpu_s(proc.pid), time.monotonic()
    proc.kill()
    proc.wait()
    # what the watch read is the process's CPU over the window, however busy the machine (no share asserted:
    # a loaded CI runner gave a busy thread 0.16 of a core)
    assert 0 < got["parent_cpu_cores"] <= 1.1, got          # one thread never holds more than a core
    assert abs(got["parent_cpu_cores"] - (after - before) / (t1 - t0)) < 0.3, (got, after - before, t1 - t0)
    assert got["rss_max_mib"] > 1 and 0 < got["machine_busy"] <= 1


def test_the_grades_time_in_none_of_its_steps_is_its_rest():
    results = [{"seconds": 3.0, "phases": {"probe_s": 0.1, "build_s": 2.0, "lane_wait_s": 0.3, "child_s": 0.4,
                                           "check_s": 0.05, "lane_s": 0.35}}]
    assert abs(benchmark._phases_mean(results)["grade rest"] - 0.15) < 1e-9     # lane_s lies inside child_s


def test_warm_check_times_steps_that_exist():
    """scripts/warm-check.py's tracer wraps the grade's steps by name (the attempt kept, the reports,
    the document, the cache's bound, the drawing ahead): each must still be where it names it, or
    the GPU stage fails after the grade (it did once the delivery moved out of cli/student.py)."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("warm_check", Path(benchmark.__file__).with_name("warm-check.py"))
    warm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warm)
    names = {}
    for line in warm.TRACER.splitlines():
        m = re.match(r"from (\S+) import (.+)$", line.strip())
        if m and m.group(1).startswith("grader"):
            for name in (n.strip() for n in m.group(2).split(",")):
                module = importlib.import_module(m.group(1))
                names[name] = getattr(module, name, None) or importlib.import_module(f"{m.group(1)}.{name}")
    wrapped = re.findall(r'^timed\((\w+), "(\w+)"', warm.TRACER, flags=re.M)
    assert len(wrapped) >= 5, wrapped
    for owner, attr in wrapped:
        assert hasattr(names[owner], attr), f"warm-check.py times {owner}.{attr}, which no longer exists"


def _serve_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("serve_bench", Path(benchmark.__file__).with_name("serve-bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_serve_benchmarks_rows_hold_each_figure_to_the_issues_target():
    """scripts/serve-bench.py's rows (docs/figures.md renders them): each target met or missed from
    the figure itself; a restart that lost an upload or stored one twice is a miss."""
    rows = _serve_bench().rows
    out = {"n": 4, "watchers": 50, "gap_s": 5, "upload_to_first_event_ms": [5.0, 250.0], "upload_to_building_ms": [90.0],
           "burst_server_s": 10.0, "burst_batch_s": 10.0, "burst_ratio": 1.0, "watch_status_p99_ms": 12.0,
           "watch_status_p50_ms": 2.0, "watch_server_cpu_cores": 0.1,
           "kill9": {"done_before_kill": 1, "graded": 4, "uploads": 4, "most_results_of_one": 1}}
    verdicts = {r[0].split(" ")[0] + " " + r[0].split(" ")[-1]: r[3] for r in rows(out)}
    assert [r[3] for r in rows(out)] == [False, None, True, True, True, True], verdicts    # 250 ms: over 200
    out["upload_to_first_event_ms"] = [5.0, 40.0]
    out["kill9"]["most_results_of_one"] = 2
    out["burst_ratio"] = 1.2
    assert [r[3] for r in rows(out)] == [True, None, False, True, True, False]
    assert [r[3] for r in rows({"n": 4, "upload_to_building_ms": [None]})] == [None] * 6     # nothing measured: no verdict
    assert rows({"upload_to_building_ms": [None, 80.0]})[1][1] == "80 to 80 ms"


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), Path(benchmark.__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_figure_says_the_commit_and_the_device_it_was_measured_on(tmp_path, monkeypatch):
    """benchmark.machine, which every figure JSON's "machine" is (benchmark, warm-check, spread-check,
    serve-bench, tier-runs, the samples' record): the commit from git, from GRADER_COMMIT where a copy
    of the tree has no .git, else "unknown"; the device that measured (the CPU on the emulator)."""
    import subprocess

    monkeypatch.delenv("GRADER_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=benchmark.ROOT, capture_output=True, text=True).stdout.strip()
    on_cpu = benchmark.machine("emulator")
    assert on_cpu["commit"] == (head or "unknown")          # a checkout's HEAD; "unknown" in a copy without .git
    assert on_cpu["device"].startswith(benchmark.cpu_name()) and f"{os.cpu_count()} cores" in on_cpu["device"]
    monkeypatch.setattr(benchmark, "ROOT", tmp_path)          # a copy of the tree without its .git
    assert benchmark.commit() == "unknown"
    monkeypatch.setenv("GRADER_COMMIT", "abc1234")
    assert benchmark.machine("emulator")["commit"] == "abc1234"
    for name in ("warm-check", "spread-check", "tier-runs", "serve-bench"):     # each writes machine() into its JSON
        assert "benchmark.machine(" in Path(benchmark.__file__).with_name(f"{name}.py").read_text(), name


def _doc(wall, start, phases, fraction=None, tier=None):
    return {"wall_s": wall, "seconds": sum(phases.values()) + 0.05, "fraction": fraction, "tier": tier,
            "phases": {"cli_to_early_s": start, "cli_to_grade_s": start + 0.1, **phases}}


def test_the_warm_series_says_the_median_the_largest_and_which_phase_a_slow_grade_spent():
    warm = _script("warm-check")
    fast = {"build_s": 0.1, "child_s": 0.2, "check_s": 0.05}
    slow = {"build_s": 0.1, "child_s": 1.2, "check_s": 0.05}
    runs = [(0.6, _doc(0.6, 0.1, fast, 0.9990, "gold")), (0.62, _doc(0.62, 0.1, fast, 0.9985, "gold")),
            (1.6, _doc(1.6, 0.1, slow, 0.9995, "gold")), (0.61, _doc(0.61, 0.1, fast, 0.9991, "gold"))]
    figures, rows = warm.series(runs)
    assert figures["max_s"] == 1.6 and figures["over_max"] == 1 and abs(figures["median_s"] - 0.615) < 1e-9
    assert figures["phases"]["child"] == [0.2, 0.2, 1.2, 0.2]           # the slow one's second is in its child
    by_name = {r[0]: r for r in rows}
    assert by_name["warm submit, median of 4"][3] is True                # 0.615 <= 0.7
    assert by_name["warm submit, largest of 4"][3] is False              # 1.6 > 1.0
    assert by_name["  child: median / largest"][1] == "0.20 / 1.20 s"
    runs[2][1]["phases"].update(child_job_t=0.1, child_hello_t=0.2, child_checks_t=0.3, child_sampled_t=1.2,
                                child_done_t=1.25, child_s=1.2)
    figures, rows = warm.series(runs)
    assert figures["phases"]["child sampling"] == pytest.approx([0.9]) and "child sampling 0.90" in rows[2][1]    # inside the child
    assert [r[0] for r in rows[:4]] == [f"warm grade {i}" for i in range(1, 5)]
    assert by_name["fraction over the 4 grades"][3] is True
    on_cpu = {r[0]: r for r in warm.series(runs, "emulator")[1]}
    assert on_cpu["warm submit, median of 4"][3] is False                # the emulator's target: 0.6 s
    assert on_cpu["warm submit, largest of 4"][3] is None


def test_the_targets_table_holds_every_figure_with_a_target(tmp_path, capsys):
    import json

    rows = [["warm submit, median of 20", "0.65 s", "<= 0.7 s", True], ["a note", "x", "", None],
            ["batch of 100 (cuda)", "30.1 s", "<= 25 s", False]]
    (tmp_path / "h100-warm.json").write_text(json.dumps(
        {"machine": {"commit": "0123456789abcdef", "device": "NVIDIA H100 80GB HBM3"}, "rows": rows}))
    assert benchmark.print_targets(tmp_path) == 1
    said = capsys.readouterr().out
    assert "0123456789" in said and "NVIDIA H100" in said and "a note" not in said
    assert "PASS  warm submit, median of 20" in said and "MISS  batch of 100" in said and "1 of 2 figures" in said


def test_tier_runs_names_each_sample_whose_tier_changed():
    tiers = _script("tier-runs")
    run = lambda tier, fr, line=False: {"tier": tier, "fraction": fr, "fraction_ci": None, "borderline": line}  # noqa: E731
    seen = {"a.cu": [run("silver", 0.7506, True), run("below", 0.7470, True)],
            "b.cu": [run("gold", 0.95), run("gold", 0.951)]}
    rows = tiers.rows_of("gelu_sum", seen)
    assert rows[0][1].startswith("1 of 2: a.cu below/silver (0.7470 to 0.7506)") and rows[0][3] is False
    assert rows[1][1].startswith("a.cu") and "b.cu" not in rows[1][1]
    seen["a.cu"] = [run("silver", 0.7506, True)] * 2
    assert tiers.rows_of("gelu_sum", seen)[0][3] is True


def test_the_samples_record_says_its_commit_and_device_and_figures_md_shows_them(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("GRADER_COMMIT", "feedc0ffee1234")
    sys.path.insert(0, str(benchmark.ROOT / "scripts"))
    import docs

    doc = {"a.cu": {"status": "graded", "correct": True, "tier": "silver", "fraction": 0.75, "fraction_ci": [0.74, 0.76],
                    "exercise": "gelu_sum", "backend": "cuda",
                    "device": {"name": "NVIDIA H200", "before": {"driver_version": "580"}, "cuda_runtime": "13.0"}}}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    kept = json.loads(docs.record_samples(tmp_path / "s.json", tmp_path / "figs").read_text())
    assert kept["machine"]["commit"] == "feedc0ffee1234" and kept["machine"]["device"] == "NVIDIA H200"
    assert docs._measured_at(kept["machine"]) == ["Measured at feedc0ffee12 on NVIDIA H200.\n"]
    assert docs._measured_at({"gpu": "an older record"}) == []
