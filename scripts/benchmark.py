#!/usr/bin/env python3
"""The grader's own benchmark, run on a GPU machine (scripts/gpu-check runs it).

Measures what issue "grader submit" promises, each through the real CLI as a user runs it:
- the feedback loop: wall time of `grader submit` with an empty cache, after an edit (cold: the
  submission rebuilt) and unchanged (warm, median of 5), with their phases (the goals are the
  constants below: issue 35's; `--backend emulator`: a correct and an incorrect file, warm);
- the spread of the fraction over five runs of the same submission (max minus min);
- the floor against the faster of cudaMemcpyAsync and the 16-byte copy in the same run;
- the float4 sample's fraction and tier, and the scalar sample's fraction against the lesson's copy.
With --batch N it measures `grader batch` instead (with --scale M, then a batch of M against it): N generated submissions (copies of correct and
incorrect samples, each made distinct so that each compiles), submissions per minute, where the
time goes, and each kernel's fraction in the batch against the median of three lone grades of it
(a batch of one job: one at a time, nothing else building), with each run's submission time and
floor bandwidth, to tell which side moved.
Writes a JSON document (--out: the machine, the figures, the table's rows) and prints a table last;
scripts/gpu-check keeps it under $OUT/figures/, to be committed as docs/figures/*.json (docs/figures.md
is generated from them by scripts/docs.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def submit(path: str, cache: str, backend: str = "cuda", *, draw_ahead: bool = True,
           wait: bool = False, launch: list[str] | None = None, extra: list[str] = ()) -> tuple[float, dict]:
    """One `grader submit` as a student runs it; with wait, on a GPU, then the time a student spends
    reading the result, until the next run's private cases are drawn ahead (grader/exercises/pool.py):
    the first folder ready (drawn_ahead_after_s), and the drawing process ended (drawing_done_after_s:
    it keeps pool.READY_DEPTH folders, and a grade started before then runs beside its numpy)."""
    env = dict(os.environ, GRADER_CACHE_DIR=cache, PYTHONPATH=str(ROOT), GRADER_DRAW_AHEAD="1" if draw_ahead else "0")
    start = time.perf_counter()
    # launch: how python starts the command (scripts/warm-check.py's --trace-exit wraps it)
    proc = subprocess.run([sys.executable, *(launch or ["-m", "grader"]), "submit", path, "--backend", backend,
                           "--format", "json", "-q", *extra], capture_output=True, text=True, env=env, cwd=ROOT)
    wall, ended = time.perf_counter() - start, time.time()
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"grader submit {path} printed no JSON (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    doc["wall_s"] = wall
    traced = [ln for ln in proc.stderr.splitlines() if ln.startswith("trace-exit: ")]
    if traced:
        doc["trace_exit"] = json.loads(traced[-1].removeprefix("trace-exit: "))
        # from the command's exit (its last line) to its end as this process sees it (the pipes closed)
        doc["trace_exit"]["exit_to_end"] = round(ended - doc["trace_exit"].pop("left_at"), 3)
    if backend == "cuda" and draw_ahead and wait:
        doc["drawn_ahead_after_s"] = _drawn_ahead(Path(cache))
        doc["drawing_done_after_s"] = round(doc["drawn_ahead_after_s"] + _drawing_done(), 2)
    print(f"  {path}: {wall:.2f} s, {doc.get('status')}, fraction {doc.get('fraction')}", file=sys.stderr, flush=True)
    return wall, doc


def _drawn_ahead(cache: Path, limit_s: float = 60.0) -> float:
    """Seconds until a ready folder of the next run's cases exists (at most limit_s)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if any((cache / "runs").glob("ready-*")):
            break
        time.sleep(0.1)
    return round(time.perf_counter() - start, 2)


def _drawing_done(limit_s: float = 60.0) -> float:
    """Seconds until no process draws cases ahead (`python -m grader.exercises.pool`; at most limit_s)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        drawing = False
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and b"grader.exercises.pool" in (entry / "cmdline").read_bytes():
                    drawing = True
                    break
            except OSError:
                continue
        if not drawing:
            break
        time.sleep(0.05)
    return time.perf_counter() - start


# What a generated class is made of: correct kernels of several speeds, and incorrect ones.
BATCH_MIX = ("float4_launcher.cu", "scalar_2d.cu", "flat_index_mod.cu", "template_aligned_dispatch.cu",
             "launch_bounds_ldg.cu", "double_math.cu", "small_blocks.cu", "tanh_gelu.cu", "missing_bias.cu",
             "compile_error.cu")


LONE_RUNS = 3      # lone runs of each kernel of the mix: the noise a batch is held to
# The goals (issue 74's Numbers: an H100 or H200, and the 2-core CPU machine for the emulator).
WARM_S, FIRST_S, COLD_S = 0.7, 2.0, 3.0          # `grader submit`, wall: warm (median), empty cache, edited
WARM_MAX_S = 1.0                                 # no warm grade over this, in twenty in a row (warm-check.py)
BATCH_100_S, SCALE_RATIO = 25.0, 3.0             # a batch of 100; a batch of 300 against it
MEDIAN_MOVE = 0.003                              # a kernel's median fraction in the batch against its lone median
SPREAD = 0.005                                   # a sample's fraction over 5 warm grades, (max - min) / mean
EMULATOR_CORRECT_S, EMULATOR_INCORRECT_S = 0.6, 1.5


def _class_of(folder: Path, n: int, copies: int = 1) -> None:
    """n generated submissions of the mix (each distinct, so each compiles), each copied `copies` times."""
    folder.mkdir()
    for i in range(n):
        sample = BATCH_MIX[i % len(BATCH_MIX)]
        text = (ROOT / "submissions" / "bias_gelu_fused" / sample).read_text()
        for k in range(copies):
            name = f"student{i:03d}_{Path(sample).stem}.cu" if copies == 1 else f"run{k}_{Path(sample).stem}.cu"
            (folder / name).write_text(f"// student {i} copy {k}\n" + text)


def _batch(folder: Path, out: Path, cache: Path, backend: str, jobs: int | None) -> tuple[float, list, list, dict]:
    """`grader batch` of folder: its wall time, results.jsonl, summary.csv and when its grades ended."""
    env = dict(os.environ, GRADER_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "grader", "batch", str(folder), "--backend", backend, "--report-dir", str(out)]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    start = time.perf_counter()
    # Each "grader: k/N student: status" line is stamped as it comes: when the first grade ended,
    # when the last did, and what followed it (the class's tables and report) tell a start or a
    # tail that grows with the class from a middle that does.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    watch = ProcessWatch(proc.pid)
    watch.start()
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    err, done_at = [], []
    for line in proc.stderr:
        err.append(line)
        if line.startswith("grader: ") and "/" in line.split(" ", 2)[1]:
            done_at.append(time.perf_counter() - start)
    proc.wait()
    reader.join()
    wall = time.perf_counter() - start
    watched = watch.stop()
    if proc.returncode != 0:
        raise SystemExit(f"grader batch exited {proc.returncode}:\n{''.join(err)[-3000:]}")
    results = [json.loads(line)["result"] for line in (out / "results.jsonl").read_text().splitlines()]
    timeline = {"first_done_s": done_at[0] if done_at else None, "last_done_s": done_at[-1] if done_at else None,
                "after_last_s": wall - done_at[-1] if done_at else None, **watched}
    print(f"  batch of {len(results)} ({jobs or 'default'} jobs): {wall:.1f} s ({timeline})", file=sys.stderr, flush=True)
    return wall, results, list(csv.DictReader((out / "summary.csv").open(newline=""))), timeline


def bench_batch(n: int, backend: str, jobs: int | None, lone_runs: int = LONE_RUNS,
                scale: int = 0) -> tuple[dict, list]:
    """A batch of n (and its phases, and each kernel's fraction against lone grades of it); with
    scale, then a batch of `scale` submissions, and its wall time against the first's."""
    figures, rows = _bench_batch(n, backend, jobs, lone_runs)
    if scale:
        with tempfile.TemporaryDirectory(prefix="grader-bench-scale-") as tmp:
            tmp = Path(tmp)
            _class_of(tmp / "class", scale)
            wall, results, summary, timeline = _batch(tmp / "class", tmp / "out", tmp / "cache", backend, jobs)
        ratio = wall / figures["wall_s"]
        # the same phases as the first batch's, to tell which step grew with the class
        figures["scale"] = {"n": scale, "wall_s": wall, "ratio": ratio, "phases_mean": _phases_mean(results),
                            "timeline": timeline,
                            "lane_busy": _lane_busy(results, wall), "lane_gaps": _lane_gaps(results),
                            "lane_starved": _lane_starved(results),
                            "statuses": {s: sum(1 for r in summary if r["status"] == s) for s in {r["status"] for r in summary}}}
        rows.append((f"batch of {scale} ({backend})", f"{wall:.1f} s, {60 * scale / wall:.0f}/min, the GPU's lane busy "
                     f"{100 * figures['scale']['lane_busy']:.0f}% (batch of {n}: {100 * figures['lane_busy']:.0f}%)", "", None))
        for size, g in ((n, figures["lane_gaps"]), (scale, figures["scale"]["lane_gaps"])):
            if g:
                rows.append((f"batch of {size}: the lane idle between a release and a waiting grade's take",
                             f"{g['handoffs']} hand-offs, median {1000 * g['median_s']:.0f} ms, 90th percentile "
                             f"{1000 * g['p90_s']:.0f} ms, largest {1000 * g['max_s']:.0f} ms, {g['sum_s']:.1f} s in all",
                             "", None))
        for size, g in ((n, figures.get("lane_starved")), (scale, figures["scale"]["lane_starved"])):
            if g:
                rows.append((f"batch of {size}: the lane idle with no grade waiting for it",
                             f"{g['releases']} releases, {g['sum_s']:.1f} s in all (first tenth {g['start_s']:.1f}, "
                             f"middle {g['middle_s']:.1f}, last tenth {g['end_s']:.1f})", "", None))
        t0, t1 = figures["timeline"], figures["scale"]["timeline"]
        if t0.get("parent_cpu_cores") is not None and t1.get("parent_cpu_cores") is not None:
            rows.append((f"batch of {scale} against {n}: the batch process's CPU (cores, mean / 90th percentile "
                         "of 1 s), every core's busy share, its memory (resident / shared, most)",
                         f"{t1['parent_cpu_cores']:.2f} / {t1['parent_cpu_cores_p90']} cores, {100 * t1['machine_busy']:.0f}%, "
                         f"{t1['rss_max_mib']} / {t1['shmem_max_mib']} MiB against {t0['parent_cpu_cores']:.2f} / "
                         f"{t0['parent_cpu_cores_p90']} cores, {100 * t0['machine_busy']:.0f}%, {t0['rss_max_mib']} / "
                         f"{t0['shmem_max_mib']} MiB", "", None))
        if t0["first_done_s"] is not None and t1["first_done_s"] is not None:
            rows.append((f"batch of {scale} against {n}: first grade done, last, after it",
                         f"{t1['first_done_s']:.1f} / {t1['last_done_s']:.1f} / {t1['after_last_s']:.1f} s against "
                         f"{t0['first_done_s']:.1f} / {t0['last_done_s']:.1f} / {t0['after_last_s']:.1f} s", "", None))
        grew = {k: v - figures["phases_mean"][k] for k, v in figures["scale"]["phases_mean"].items()
                if k in figures["phases_mean"] and abs(v - figures["phases_mean"][k]) >= 0.01}
        rows.append((f"mean phases per submission, batch of {scale} against {n}",
                     ", ".join(f"{k} {v:+.2f}" for k, v in sorted(grew.items(), key=lambda kv: -abs(kv[1]))) or "the same", "", None))
        rows.append((f"batch of {scale} / batch of {n}", f"{ratio:.2f}", f"<= {SCALE_RATIO * scale / 300:.1f}",
                     ratio <= SCALE_RATIO * scale / 300 if n == 100 else None))
    return figures, rows


def _bench_batch(n: int, backend: str, jobs: int | None, lone_runs: int) -> tuple[dict, list]:
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="grader-bench-batch-") as tmp:
        tmp = Path(tmp)
        _class_of(tmp / "class", n)
        wall, results, summary, timeline = _batch(tmp / "class", tmp / "out", tmp / "cache", backend, jobs)
        # Each distinct kernel graded alone (one at a time, nothing else building: a batch of one
        # job), LONE_RUNS times, against its fractions in the batch; the submission's time and the
        # floor's bandwidth of every run, to tell which side moved.
        lone, lone_timings, batch_timings = {}, {}, {}
        for r in results:
            if r.get("timing"):
                batch_timings.setdefault(_sample_of(r["submission"]["path"]), []).append(_timing_brief(r["timing"]))
        if backend == "cuda" and lone_runs:
            _class_of(tmp / "lone", len(BATCH_MIX), copies=lone_runs)
            _, alone, _, _ = _batch(tmp / "lone", tmp / "lone-out", tmp / "cache", backend, 1)
            for doc in alone:
                stem = _sample_of(doc["submission"]["path"])
                if doc.get("timing"):
                    lone_timings.setdefault(stem, []).append(_timing_brief(doc["timing"]))
            for stem, runs in lone_timings.items():
                lone[stem] = statistics.median_low([t["fraction"] for t in runs])
        moved, by_kernel, in_batch = [], {}, {}
        for row in summary:
            stem = _sample_of(row["file"])
            if row["fraction"]:
                in_batch.setdefault(stem, []).append(float(row["fraction"]))
            if row["fraction"] and lone.get(stem):
                move = abs(float(row["fraction"]) - lone[stem]) / lone[stem]
                moved.append(move)
                by_kernel[stem] = max(by_kernel.get(stem, 0.0), move)
        figures = {"n": n, "wall_s": wall, "per_minute": 60 * n / wall, "jobs": jobs,
                   "phases_mean": _phases_mean(results), "lane_busy": _lane_busy(results, wall), "timeline": timeline,
                   "lane_gaps": _lane_gaps(results), "lane_starved": _lane_starved(results),
                   "statuses": {s: sum(1 for r in summary if r["status"] == s) for s in {r["status"] for r in summary}},
                   "lone_fractions": lone, "batch_fractions": in_batch,      # is a move a bias or noise?
                   "lone_timings": lone_timings, "batch_timings": batch_timings,
                   "largest_move": max(moved, default=0.0), "largest_move_by_kernel": by_kernel,
                   # batches of rounds whose held stream let go by its timeout (the host blocked before releasing)
                   "holds_timed_out": sum(t["holds_timed_out"] for ts in batch_timings.values() for t in ts)}
        target = BATCH_100_S * n / 100
        rows.append((f"batch of {n} ({backend})", f"{wall:.1f} s, {60 * n / wall:.0f}/min",
                     f"<= {target:.0f} s (100 in {BATCH_100_S:.0f} s)", wall <= target if backend == "cuda" else None))
        rows.append(("mean phases per submission", ", ".join(f"{k} {v:.2f}" for k, v in figures["phases_mean"].items()),
                     "", None))
        # Each kernel's median fraction inside the batch against its median alone: a bias the batch
        # puts on a kernel shows there; a single grade's move is noise as much as bias (the
        # largest single move is said beside it, for what it is).
        median_moves = {stem: abs(statistics.median(in_batch[stem]) - lone[stem]) / lone[stem]
                        for stem in in_batch if lone.get(stem)}
        figures["median_move_by_kernel"] = median_moves
        for stem in sorted(median_moves):
            fr = in_batch[stem]
            rows.append((f"  {stem}: alone (median of {len(lone_timings.get(stem, []))}) vs batch (median of {len(fr)})",
                         f"{lone[stem]:.3f} vs {statistics.median(fr):.3f} ({min(fr):.3f} to {max(fr):.3f}): "
                         f"{100 * median_moves[stem]:.2f}%", "", None))
        if median_moves:
            rows.append(("largest median fraction move, batch vs alone", f"{100 * max(median_moves.values()):.2f}%",
                         f"<= {100 * MEDIAN_MOVE:.1f}%", max(median_moves.values()) <= MEDIAN_MOVE))
        if moved:
            rows.append(("largest single grade's move, batch vs lone median", f"{100 * max(moved):.2f}%", "", None))
        # Fairness: every grade, in the batch and alone, got a tier its sample's manifest allows on a GPU
        # (float4_launcher.cu gold each time, not only in `grader samples`).
        if backend == "cuda":
            wrong = _tiers_not_allowed(results) + _tiers_not_allowed(alone if lone_runs else [])
            figures["tiers_not_allowed"] = wrong
            graded = sum(1 for r in results if r.get("tier")) + sum(1 for r in (alone if lone_runs else []) if r.get("tier"))
            rows.append(("tiers the samples' manifest allows, batch and alone", f"{graded - len(wrong)} of {graded}"
                         + (f": {'; '.join(wrong[:4])}" if wrong else ""), "all", not wrong))
    return figures, rows


def _phases_mean(results: list[dict]) -> dict[str, float]:
    """Each phase's mean over the submissions that have it (the child's stages split out)."""
    phases: dict[str, list[float]] = {}
    for r in results:
        for k, v in r["phases"].items():
            if k.endswith("_s"):
                phases.setdefault(k, []).append(v)
        for k, v in child_stages(r["phases"]).items():
            phases.setdefault(f"child {k}", []).append(v)
        if isinstance(r.get("seconds"), (int, float)):
            # the grade's time in none of the steps above (its start, SASS, the result's assembly)
            listed = sum(r["phases"].get(k, 0.0) for k in ("probe_s", *_GRADE_STEPS))     # a batch probes inside it
            phases.setdefault("grade rest", []).append(r["seconds"] - listed)
    return {k: sum(v) / len(v) for k, v in phases.items()}


# A GPU grade's steps one after another, in their order (child_s holds the lane's time; `grader
# submit` probes before its grade, a batch's grade inside it)
_GRADE_STEPS = ("build_s", "inputs_wait_s", "child_start_wait_s", "offline_record_s", "gpu_recorder_wait_s",
                "lane_wait_s", "child_s", "check_s")


def _lane_gaps(results: list[dict]) -> dict:
    """The lane's hand-offs: from one grade's release of the lane to the next one's take (the
    phases' lane_taken_at and lane_released_at, on the wall clock), where the next one had been
    waiting for it already (its lane_wait_s reaches back past the release): the lane idle while a
    grade waited for it, which is the batch's own overhead, not a want of work."""
    held = sorted((r["phases"]["lane_taken_at"], r["phases"]["lane_released_at"], r["phases"].get("lane_wait_s", 0.0))
                  for r in results if "lane_taken_at" in r["phases"] and "lane_released_at" in r["phases"])
    gaps = [nxt[0] - cur[1] for cur, nxt in zip(held, held[1:]) if nxt[0] - nxt[2] <= cur[1]]
    if not gaps:
        return {}
    gaps.sort()
    return {"handoffs": len(gaps), "median_s": statistics.median(gaps), "p90_s": gaps[int(0.9 * (len(gaps) - 1))],
            "max_s": gaps[-1], "sum_s": sum(gaps)}


def _lane_starved(results: list[dict]) -> dict:
    """The lane idle with no grade waiting for it: from a release to the moment the next grade
    asked for the lane (its take less its lane_wait_s), where that came after the release. The
    want of work, by where in the batch it fell (its first tenth, the middle, its last tenth)."""
    held = sorted((r["phases"]["lane_taken_at"], r["phases"]["lane_released_at"], r["phases"].get("lane_wait_s", 0.0))
                  for r in results if "lane_taken_at" in r["phases"] and "lane_released_at" in r["phases"])
    if len(held) < 2:
        return {}
    first, last = held[0][0], held[-1][1]
    out = {"releases": 0, "sum_s": 0.0, "start_s": 0.0, "middle_s": 0.0, "end_s": 0.0}
    for cur, nxt in zip(held, held[1:]):
        asked = nxt[0] - nxt[2]
        if asked <= cur[1]:
            continue
        idle = asked - cur[1]
        out["releases"] += 1
        out["sum_s"] += idle
        where = (cur[1] - first) / max(last - first, 1e-9)
        out["start_s" if where < 0.1 else "end_s" if where > 0.9 else "middle_s"] += idle
    return out


class ProcessWatch:
    """A batch's process and the machine, sampled every quarter second while it runs (Linux /proc):
    the CPU the process used (in cores: above 1 is its threads and the builds it waits on are not
    counted, only its own), the share of every core the machine used, and the most resident and
    shared memory the process held (the children's outputs it maps)."""

    def __init__(self, pid: int, every_s: float = 0.25):
        self.pid, self.every_s = pid, every_s
        self._stop = threading.Event()
        self._rows: list[tuple[float, float, float, float, float, float]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _sample(self) -> tuple[float, float, float, float, float, float] | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            with open("/proc/stat") as f:
                cpu = [int(v) for v in f.readline().split()[1:]]
            busy, total = sum(cpu) - cpu[3] - (cpu[4] if len(cpu) > 4 else 0), sum(cpu)
            mem = {}
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("VmRSS", "RssShmem"):
                        mem[key] = int(value.split()[0]) / 1024
        except (OSError, ValueError, IndexError):
            return None
        return time.perf_counter(), own, busy, total, mem.get("VmRSS", 0.0), mem.get("RssShmem", 0.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            row = self._sample()
            if row is not None:
                self._rows.append(row)
            self._stop.wait(self.every_s)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        rows = self._rows
        if len(rows) < 3:
            return {}
        secs = rows[-1][0] - rows[0][0]
        windows = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(rows[::4], rows[4::4]) if b[0] > a[0]]
        return {"parent_cpu_cores": round((rows[-1][1] - rows[0][1]) / secs, 2),
                "parent_cpu_cores_p90": round(sorted(windows)[int(0.9 * (len(windows) - 1))], 2) if windows else None,
                "machine_busy": round((rows[-1][2] - rows[0][2]) / max(rows[-1][3] - rows[0][3], 1), 2),
                "rss_max_mib": round(max(r[4] for r in rows)), "shmem_max_mib": round(max(r[5] for r in rows))}


def _lane_busy(results: list[dict], wall: float) -> float:
    """The share of the batch's wall time the GPU's lane held a submission (one lane: the rest is
    the lane waiting for builds and recordings, or the start and the end)."""
    return sum(r["phases"].get("lane_s", 0.0) for r in results) / wall


def _tiers_not_allowed(results: list[dict]) -> list[str]:
    """The grades whose tier the manifest of bias_gelu_fused's samples does not allow on a GPU."""
    sys.path.insert(0, str(ROOT))
    from grader.batch.manifest import load_manifest
    from grader.core.backend import CUDA
    from grader.exercises import load_exercise

    allowed = {e.file.removesuffix(".cu"): e.tiers for e in
               load_manifest(ROOT / "submissions/bias_gelu_fused/manifest.yaml", CUDA, load_exercise("bias_gelu_fused"))}
    wrong = []
    for r in results:
        stem = _sample_of(r["submission"]["path"])
        if r.get("tier") and allowed.get(stem) and r["tier"] not in allowed[stem]:
            wrong.append(f"{stem} {r['tier']} at {r.get('fraction')}, allowed {' or '.join(allowed[stem])}")
    return wrong




def _sample_of(path: str) -> str:
    """The sample a generated submission copies: student007_scalar_2d.cu -> scalar_2d."""
    return Path(path).stem.partition("_")[2]


def _timing_brief(t: dict) -> dict:
    """What one run's timing says of each side of its fraction."""
    return {"fraction": round(t["fraction"], 4), "submission_ms": round(t["submission_ms"], 5),
            "floor_gbps": round(t["floor_gbps"], 1), "samples": t["samples"], "stop": t["stop_reason"],
            "holds_timed_out": t.get("holds_timed_out", 0)}


def _edited(path: str, k: int) -> str:
    """A copy of the sample with one comment changed: what a student's next edit looks like to the build."""
    text = (ROOT / path).read_text()
    out = Path(tempfile.gettempdir()) / f"grader-bench-edit-{os.getpid()}-{k}" / Path(path).name
    out.parent.mkdir(exist_ok=True)
    out.write_text(f"// edit {k} {time.time()}\n" + text)
    return str(out)


def child_stages(p: dict) -> dict[str, float]:
    """The child's run (phases' child_s) split by the times its frames carry: loading the
    libraries behind the wall, the wait for the recorder's end beyond that (gate), the checks, the
    timing's sampling, the timed sets' outputs, and the
    rest (handing the job over, the exit, the parent reading the last frames); on a GPU the recorder's
    run likewise (offline_record_s, before the lane; record_s, in it, where the launcher needed the
    GPU), apart from the rest."""
    need = ("child_job_t", "child_hello_t", "child_checks_t", "child_done_t", "child_s")
    if not all(k in p for k in need):
        return {}
    sampled = p.get("child_sampled_t", p["child_checks_t"])
    loaded = p.get("child_loaded_t", p["child_hello_t"])
    stages = {"load": loaded - p["child_job_t"], "gate": p["child_hello_t"] - loaded,
              "checks": p["child_checks_t"] - p["child_hello_t"],
              "sampling": sampled - p["child_checks_t"], "outputs": p["child_done_t"] - sampled}
    rec = ("recorder_job_t", "recorder_hello_t", "recorder_checks_t", "recorder_done_t")
    if all(k in p for k in rec):         # the recorder's run (record_s): its load, its calls, the rest
        recorded = p.get("recorder_sampled_t", p["recorder_checks_t"])
        stages.update({"record_load": p["recorder_hello_t"] - p["recorder_job_t"],
                       "record_checks": p["recorder_checks_t"] - p["recorder_hello_t"],
                       "record_timing": recorded - p["recorder_checks_t"],
                       "record_send": p["recorder_done_t"] - recorded,
                       "record_rest": p.get("record_s", p.get("offline_record_s", 0.0))
                       - (p["recorder_done_t"] - p["recorder_job_t"])})
    # The recording made without a GPU: the measuring process's gate held the lane's wait too,
    # which child_s leaves out.
    held = p.get("lane_wait_s", 0.0) if "offline_record_s" in p and "record_s" not in p else 0.0
    stages["rest"] = p["child_s"] + held - (p["child_done_t"] - p["child_job_t"]) - p.get("record_s", 0.0)
    return stages


def _phases(doc: dict) -> str:
    p = doc.get("phases", {})
    keys = ("probe_s", "build_s", "inputs_wait_s", "child_start_wait_s", "offline_record_s", "gpu_recorder_wait_s",
            "lane_wait_s", "lane_s", "record_s", "gate_wait_s", "child_s", "check_s")
    stages = " ".join(f"{k} {v:.2f}" for k, v in child_stages(p).items())
    # When torch was imported and the answers were ready (seconds into the grade; only a grade
    # that computed answers has them): what a first grade's check waits for.
    clocks = " ".join(f"{k.removesuffix('_t')} at {p[k]:.2f}" for k in ("reference_loaded_t", "answers_ready_t") if k in p)
    # The command's own start (result.phases' cli_to_*: seconds from the process's start) and what
    # the wall held after the grade (the reports, the attempt kept, the exit), where the run says.
    start = ""
    if "cli_to_grade_s" in p:
        start = (f" | start: to early {p['cli_to_early_s']:.2f}, to grade {p['cli_to_grade_s']:.2f}"
                 + (f", after the grade {doc['wall_s'] - p['cli_to_grade_s'] - doc['seconds']:.2f}"
                    if "wall_s" in doc else ""))
    return (" ".join(f"{k.removesuffix('_s')} {p[k]:.2f}" for k in keys if k in p)
            + f" | in-process {doc['seconds']:.2f}" + start + (f" | {clocks}" if clocks else "")
            + (f" | child: {stages}" if stages else ""))


def wall_parts(doc: dict) -> list[tuple[str, float]]:
    """wall_split's parts, (name, seconds) in their order, which add up to the wall; none where the
    run did not say its start."""
    p = doc.get("phases", {})
    if "cli_to_grade_s" not in p or "wall_s" not in doc:
        return []
    inside = [(k.removesuffix("_s"), p[k]) for k in _GRADE_STEPS if k in p]
    return [("start to children", p["cli_to_early_s"]), ("to grade", p["cli_to_grade_s"] - p["cli_to_early_s"]),
            *inside, ("grade rest", doc["seconds"] - sum(v for _, v in inside)),
            ("after the grade", doc["wall_s"] - p["cli_to_grade_s"] - doc["seconds"])]


def wall_split(doc: dict) -> str:
    """Where one `grader submit`'s wall time went, from its process's start to its exit, in the
    order it happened: the command's start (to the children's early start, then to the grade), the
    grade's steps one after another (what is left of the grade is the rest: the verdict's wait on
    the SASS, the result's making), and what followed the grade (reports, the attempt kept, the exit);
    where the measuring process had a head start (grader/entry.py), when it was started."""
    p = doc.get("phases", {})
    parts = wall_parts(doc)
    if not parts:
        return ""
    head = [("(measuring process started at", p["cli_to_measurer_s"])] if "cli_to_measurer_s" in p else []
    said = " + ".join(f"{name} {v:.2f}" for name, v in parts) + f" = {doc['wall_s']:.2f} s"
    return said + "".join(f" {name} {v:.2f} s, its head start)" for name, v in head)


def feedback_loop(cache: str, backend: str, figures: dict, rows: list, runs: int = 3, warm_runs: int = 5) -> dict:
    """The student's loop (issue: fast feedback): the first submit on a machine (empty cache), a
    changed file (its build not cached, the reference library cached: median of `runs`), and the
    same file again (warm: median of `warm_runs`), with the phases result.json reports; on the
    emulator also an incorrect file, warm."""
    sample = "submissions/bias_gelu_fused/float4_launcher.cu"
    first_s, first = submit(sample, cache, backend, wait=True)
    colds = [submit(_edited(sample, k), cache, backend, wait=True) for k in range(runs)]
    warms = [submit(sample, cache, backend, wait=True) for _ in range(warm_runs)]
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    cold, warm = median([w for w, _ in colds]), median([w for w, _ in warms])
    if backend == "cuda":           # a grade at once after another, the drawing ahead still running beside it
        hurried = []
        for _ in range(runs + 1):               # the first follows a finished drawing: not counted
            wall, _doc = submit(sample, cache, backend)
            hurried.append(wall)
            _drawn_ahead(Path(cache))           # the next one finds a folder ready, and the drawing still running
        hurried = hurried[1:]
        _drawing_done()
        figures.update(warm_hurried_s=hurried)
        rows.append((f"submit warm at once after the last (its drawing ahead still running), median of {runs}",
                     f"{median(hurried):.2f} s", "", None))
    if backend == "cuda":           # a grade right after another: nothing drawn ahead, it draws its own
        for ready in (Path(cache) / "runs").glob("ready-*"):
            shutil.rmtree(ready, ignore_errors=True)
        own = [submit(sample, cache, backend, draw_ahead=False) for _ in range(runs)]
        figures.update(warm_own_draw_s=[w for w, _ in own], drawn_ahead_after_s=[d.get("drawn_ahead_after_s")
                                                                                for _, d in warms])
        rows.append((f"submit warm, drawing its own private cases, median of {runs}",
                     f"{median([w for w, _ in own]):.2f} s", "", None))
        rows.append(("  next run's cases drawn ahead after (s)",
                     " ".join(str(d.get("drawn_ahead_after_s")) for _, d in warms), "", None))
        rows.append(("  drawing ahead ended after (s)",
                     " ".join(str(d.get("drawing_done_after_s")) for _, d in warms), "", None))
    figures.update(first_s=first_s, cold_s=[w for w, _ in colds], warm_s=[w for w, _ in warms],
                   cold_phases=[d.get("phases") for _, d in colds], warm_phases=[d.get("phases") for _, d in warms],
                   device=first.get("device", {}), cpus=os.cpu_count())
    on_gpu = backend == "cuda"
    limit_warm, limit_cold = (WARM_S, COLD_S) if on_gpu else (EMULATOR_CORRECT_S, COLD_S)
    rows.append(("submit, empty cache (first on a machine)", f"{first_s:.2f} s", f"<= {FIRST_S} s" if on_gpu else "",
                 first_s <= FIRST_S if on_gpu else None))
    rows.append(("  phases", _phases(first), "", None))
    rows.append((f"submit cold (edited file), median of {runs}", f"{cold:.2f} s", f"<= {limit_cold:.1f} s"
                 if backend == "cuda" else "", cold <= limit_cold if backend == "cuda" else None))
    rows.append(("  phases (median run)", _phases(sorted(colds, key=lambda r: r[0])[runs // 2][1]), "", None))
    rows.append((f"submit warm{' (the last drawing ahead ended)' if on_gpu else ''}, median of {warm_runs}",
                 f"{warm:.2f} s", f"<= {limit_warm:.1f} s", warm <= limit_warm))
    median_warm = sorted(warms, key=lambda r: r[0])[warm_runs // 2][1]
    rows.append(("  phases (median run)", _phases(median_warm), "", None))
    rows.append(("  wall, start to exit (median run)", wall_split(median_warm), "", None))
    if not on_gpu:                  # an incorrect kernel's grade explains its mismatches: its own figure
        bad = "submissions/bias_gelu_fused/missing_bias.cu"
        submit(bad, cache, backend)
        wrong = [submit(bad, cache, backend) for _ in range(warm_runs)]
        figures.update(incorrect_s=[w for w, _ in wrong])
        rows.append((f"submit warm, incorrect (missing_bias.cu), median of {warm_runs}",
                     f"{median([w for w, _ in wrong]):.2f} s", f"<= {EMULATOR_INCORRECT_S:.1f} s",
                     median([w for w, _ in wrong]) <= EMULATOR_INCORRECT_S))
    return first


BUILD_WALL_RUNS = 40
BUILD_WALL_TARGET_MS = 5.0       # issue 65: the build wall's cost, under 5 ms a build


def build_wall(figures: dict, rows: list, runs: int = BUILD_WALL_RUNS) -> None:
    """What the build's wall costs a build: `true` run through toolchain/running.py's run_limited (a
    room's Landlock ruleset, its own root in a mount namespace, nobody as root) against the same
    limits with both taken out, the median of runs each, alternating; and the grader's share (the
    ruleset and the view's plan). A build runs one to three such commands (compile, link, the
    alone-compile after a failure)."""
    import statistics

    sys.path.insert(0, str(ROOT))
    from grader.core import fswall, view
    from grader.toolchain import running

    walled, bare, grader_ms = [], [], []
    with running.build_room() as room:
        running.run_limited(["true"], running.BuildLimits(), room)           # the toolchain found, once
        enter, restrict = view.View.enter, fswall.Ruleset.restrict
        for _ in range(runs):
            t = time.perf_counter()
            ran = running.run_limited(["true"], running.BuildLimits(), room)
            walled.append((time.perf_counter() - t) * 1000)
            grader_ms.append(ran.wall_ms)
            view.View.enter, fswall.Ruleset.restrict = (lambda self, uid, gid: ""), (lambda self: 0)
            try:
                t = time.perf_counter()
                running.run_limited(["true"], running.BuildLimits(), room)
                bare.append((time.perf_counter() - t) * 1000)
            finally:
                view.View.enter, fswall.Ruleset.restrict = enter, restrict
    cost = statistics.median(walled) - statistics.median(bare)
    figures["build_wall"] = {"walled_ms": statistics.median(walled), "bare_ms": statistics.median(bare),
                             "cost_ms": cost, "grader_ms": statistics.median(grader_ms), "wall": ran.wall,
                             "runs": runs}
    rows.append(("build wall: cost a command (median)", f"{cost:.2f} ms ({ran.wall})",
                 f"< {BUILD_WALL_TARGET_MS:g} ms a build", cost < BUILD_WALL_TARGET_MS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--runs", type=int, default=5, help="runs of each submission for the spread")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--batch", type=int, default=0, metavar="N", help="time `grader batch` on N generated submissions")
    ap.add_argument("--jobs", type=int, default=None, help="--jobs for the batch (default: the batch's own)")
    ap.add_argument("--scale", type=int, default=0, metavar="M",
                    help="with --batch, then a batch of M, and its wall time against the first's")
    ap.add_argument("--lone-runs", type=int, default=LONE_RUNS,
                    help="lone grades of each kernel of the batch's mix, to compare fractions with (0: none)")
    ap.add_argument("--targets", type=Path, default=None, metavar="FOLDER",
                    help="print every figure with a target from FOLDER/*.json (gpu-check's figures) and exit")
    args = ap.parse_args()
    if args.targets:
        return print_targets(args.targets)
    # As an installed grader runs: pip compiles the package's bytecode at install time, which a
    # machine that sets PYTHONDONTWRITEBYTECODE (the H200 host does) would otherwise compile on
    # every start of the CLI and of every child.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "grader")], stdout=subprocess.DEVNULL, check=False)
    if args.batch:
        figures, rows = bench_batch(args.batch, args.backend, args.jobs, args.lone_runs, args.scale)
        return _finish(args, figures, rows)

    rows = []
    figures: dict = {"backend": args.backend}
    build_wall(figures, rows)
    # The drawing ahead a grade leaves running writes into the cache: waited for before it goes.
    with tempfile.TemporaryDirectory(prefix="grader-bench-cache-", ignore_cleanup_errors=True) as cache:
        first = feedback_loop(cache, args.backend, figures, rows)
        if args.backend != "cuda":
            figures["status"] = first["status"]
        else:
            # the three shapes of a timed kernel (float4; scalar, with a device helper; a templated dispatch)
            for sample in ("float4_launcher.cu", "scalar_2d.cu", "device_helper.cu", "template_aligned_dispatch.cu"):
                docs = [submit(f"submissions/bias_gelu_fused/{sample}", cache)[1] for _ in range(args.runs)]
                fr = [d["fraction"] for d in docs]
                if None in fr:              # not graded (a refusal, an error): said, not averaged
                    raise SystemExit(f"{sample} was not timed: {[d['status'] for d in docs]}: {docs[0].get('message', '')[:800]}")
                spread = (max(fr) - min(fr)) / (sum(fr) / len(fr))
                figures[sample] = {
                    "fractions": fr, "spread": spread, "tiers": [d["tier"] for d in docs],
                    "informational": [d["timing"]["informational_fraction"] for d in docs],
                    "gbps": [d["gbps"] for d in docs], "floor": [d["floor"] for d in docs],
                    "ci": [d["fraction_ci"] for d in docs], "samples": [d["timing"]["samples"] for d in docs],
                    "stop": [d["timing"]["stop_reason"] for d in docs],
                }
                rows.append((f"{sample}: fraction over {args.runs} runs", " ".join(f"{f:.3f}" for f in fr),
                             f"spread <= {100 * SPREAD:.1f}%", spread <= SPREAD))
                rows.append((f"{sample}: spread", f"{100 * spread:.2f}%", "", None))
                floors = [d["floor"] for d in docs]
                gaps = [f["gbps"] / max(f["copies"].get("memcpy", 0), f["copies"].get("copy_vec4", 0)) for f in floors]
                rows.append((f"{sample}: floor / max(memcpy, vec4)", " ".join(f"{g:.3f}" for g in gaps),
                             "within 2%", all(abs(g - 1) <= 0.02 for g in gaps)))
            _drawing_done()
            f4 = figures["float4_launcher.cu"]
            rows.append(("float4: median fraction, tier", f"{sorted(f4['fractions'])[len(f4['fractions']) // 2]:.3f} "
                         f"{set(f4['tiers'])}", ">= 0.95, gold",
                         min(f4["fractions"]) >= 0.95 and set(f4["tiers"]) == {"gold"}))
            sc = figures["scalar_2d.cu"]
            info = sorted(sc["informational"])[len(sc["informational"]) // 2]
            rows.append(("scalar: fraction of the lesson's copy", f"{info:.3f}", "about 0.90 (measurements.md)",
                         abs(info - 0.90) <= 0.03))
            fl = first["floor"]["copies"]
            rows.append(("copies GB/s (first run)", ", ".join(f"{k} {v:.0f}" for k, v in fl.items()), "", None))
    return _finish(args, figures, rows)


def commit() -> str:
    """The commit the figures were measured at: GRADER_COMMIT where the caller names it (a copy of the
    tree without its .git, as a device call gets), else `git rev-parse HEAD`, else "unknown"."""
    if os.environ.get("GRADER_COMMIT"):
        return os.environ["GRADER_COMMIT"]
    try:
        got = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return got.stdout.strip() if got.returncode == 0 and got.stdout.strip() else "unknown"


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the architecture where it does not say."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.machine() or "unknown CPU"


def machine(backend: str = "cuda") -> dict:
    """What the figures were measured on and at: the commit, the device that measured them (the GPU
    on cuda, the CPU on the emulator), the GPU (the grader's own nvidia-smi reading), the CPU
    cores, CUDA and torch."""
    sys.path.insert(0, str(ROOT))
    from grader.toolchain.gpuinfo import snapshot

    gpu = snapshot()
    on_gpu = backend not in ("emulator", "cpu")
    device = gpu.get("name", "") if on_gpu else f"{cpu_name()} ({os.cpu_count()} cores)"
    info: dict = {"commit": commit(), "device": device or "unknown", "cores": os.cpu_count(),
                  "gpu": gpu.get("name", ""), "driver": gpu.get("driver_version", "")}
    try:
        import torch

        info["torch"], info["cuda"] = torch.__version__, torch.version.cuda or ""
    except ImportError:
        pass
    return info


def print_targets(folder: Path) -> int:
    """Every figure the JSON files under folder hold a target for, each against it, with where it was
    measured (scripts/gpu-check prints it last); 1 if one misses."""
    table = []
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        m = doc.get("machine", {})
        at = f"{path.name} ({str(m.get('commit', 'unknown'))[:10]}, {m.get('device') or m.get('gpu') or 'unnamed device'})"
        table += [(at, name.strip(), str(value), target, ok) for name, value, target, ok in doc.get("rows", [])
                  if ok is not None]
    if not table:
        print(f"no figure with a target under {folder}")
        return 0
    for at in dict.fromkeys(t[0] for t in table):
        print(f"\n{at}")
        for _, name, value, target, ok in (t for t in table if t[0] == at):
            print(f"  {'PASS' if ok else 'MISS'}  {name}: {value[:120]}  (target {target})")
    missed = sum(1 for *_, ok in table if not ok)
    print(f"\n{len(table) - missed} of {len(table)} figures meet their target")
    return 1 if missed else 0


def _finish(args, figures: dict, rows: list) -> int:
    if args.out:
        kind = f"batch of {args.batch}" if args.batch else "submit"
        args.out.write_text(json.dumps({"machine": machine(args.backend), "backend": args.backend, "kind": kind,
                                        "figures": figures, "rows": [list(r) for r in rows]}, indent=1))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'figure':<{width}}  {'measured':<34} {'target':<30} verdict")
    for name, value, target, ok in rows:
        verdict = "" if ok is None else ("PASS" if ok else "MISS")
        print(f"{name:<{width}}  {value:<34} {target:<30} {verdict}")
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
