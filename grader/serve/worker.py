"""The course server's grading worker: `python -m grader.serve.worker COURSE --exercise NAME`.

A process of its own, started (and restarted when it dies) by the server, never grading in the
server's process. It dies with the server: the server starts it with PR_SET_PDEATHSIG (SIGKILL),
and its grades' children get the same from it (core/processes.py), so a `kill -9` of the server
leaves no grade running. One worker per course at a time: it holds an exclusive lock on
COURSE/.grader-worker.lock, taken before anything else (a new one waits for the old one's end).

Its loop: uploads a dead worker left `grading` go back to `queued`; then, again and again, it
claims a wave (store.claim_wave: every claimable upload, one per student, in the queue's order)
and grades the wave as `grader batch` grades a class (batch/grading.grade_entries: the same
backend resolution, jobs, lanes and walls), each upload from its bytes in the store, held under
its uploaded name (no file written; a --slurm wave's are copied into a private staging folder that
its nodes read). Each grade's phases go into the store as events as they come; each grade's
documents (report/files.Rendered: result.json's text and the reports, made once in memory, no file
written or read back) are stored in the transaction that marks the upload done, as soon as that
grade ends: the store is a sink of the grade, as a batch's report folder is. A grade the machine
failed (infrastructure_error) is queued again, at most MAX_TRIES grades in all; the last one's
result is stored, saying it was the machine's. On a GPU each wave's private cases are drawn before
it comes (DrawnAhead), while the worker waits.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader import __version__
from grader.batch.cluster import SlurmOptions
from grader.batch.grading import class_machine, grade_entries
from grader.batch.inputs import Entry
from grader.batch.request import ClassRequest
from grader.batch.slurm import grade_on_slurm
from grader.core import processes
from grader.core.handin import SourceFile, held
from grader.core.outcomes import Outcome
from grader.core.progress import phase_of
from grader.core.results import Result
from grader.exercises import load_exercise
from grader.exercises.pool import STALE_S, SharedStore, class_store
from grader.report.files import Rendered
from grader.serve.store import Claimed, Store, StoredGrade

WORKER_LOCK = ".grader-worker.lock"
MAX_TRIES = 3          # grades of one upload the machine may fail before its fault is the result
POLL_S = 0.05          # how often an idle worker looks for queued uploads


def staged_name(name: str) -> str:
    """An upload's file name as the grade sees it: the name's last part, only letters, digits, '.',
    '_' and '-', ending in .cu (kernel.cu where nothing is left)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", name.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")
    if not base.endswith(".cu"):
        base = (base or "kernel") + ".cu"
    return base if base != ".cu" else "kernel.cu"


def _entry(claimed: Claimed) -> Entry:
    """The upload as the batch's Entry: its bytes (as stored), held (core/handin.held: the grade
    reads the bytes, never a file) under the name the student gave the file, so that the result,
    its notes, its compiler messages and its reports name the student's own file, as a local grade
    names the path it was given (no file is written for it). The Entry's student is the
    upload's id. Its digest is the one the store took when the upload was accepted (one sha256 an
    upload)."""
    shown = held(Path(claimed.name), claimed.data)
    source = SourceFile(shown, claimed.data, claimed.sha256, len(claimed.data))
    return Entry(claimed.id, source.path, source=source)


def grade_wave(store: Store, wave: list[Claimed], *, request, machine, shared: SharedStore | None = None) -> None:
    """Grade a wave of claimed uploads as a class (grade_entries, on the machine and with the
    request's jobs decided once: batch/grading.class_machine), storing each grade's documents as it
    ends (the store the one sink: no folder written, no report folder, no results.jsonl). shared:
    the wave's store of private cases, drawn ahead (DrawnAhead); the caller closes it."""
    entries = [_entry(c) for c in wave]
    by_id = {c.id: c for c in wave}
    last: dict[str, str] = {}

    def said(entry, line: str) -> None:
        phase = phase_of(line)
        if phase is not None and last.get(entry.student) != phase.value:      # two builds: one "building"
            last[entry.student] = phase.value
            store.add_event(entry.student, "phase", {"phase": phase.value})

    def progress(g, _done: int, _total: int) -> None:
        _keep(store, g, by_id[g.entry.student], g.documents)

    wave_request = dataclasses.replace(request, report_dir=None, jobs=min(request.jobs, len(entries)))
    grade_entries(entries, wave_request, machine=machine, progress=progress, said=said, shared=shared)


class DrawnAhead:
    """The next wave's store of private cases (a GPU's: exercises/pool.class_store), drawn in a thread
    of the worker's once a wave is done, while it waits for the next uploads: the first grade of a
    wave no longer draws them before its build (on the H100, a lone upload waited 2.5 to 2.9 s from
    "queued" to "building" for that draw). Each wave still has a secret of its own, as each batch
    does. Nothing where the backend's cases are public (the emulator's)."""

    # A store kept longer than this is drawn again: the cache's sweep (exercises/pool.runs_folder)
    # removes a run's folder an hour old, which a server idle that long would otherwise find gone.
    KEEP_S = STALE_S / 2

    def __init__(self, rubric, private_cases: bool):
        self._rubric, self._private = rubric, private_cases
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draw-ahead")
        self._next: Future | None = None

    def start(self) -> None:
        if self._private and self._next is None:
            self._next = self._pool.submit(self._draw)

    def _draw(self) -> tuple[SharedStore, float]:
        shared = class_store(self._rubric)
        try:
            shared.get()                        # the draw itself: the private cases written, their answers with them
        except BaseException:
            shared.close()
            raise
        return shared, time.monotonic()

    def take(self) -> SharedStore | None:
        """The store drawn for this wave (waiting for the draw where it is not done yet), or None
        (public cases, a draw that failed, or one kept past KEEP_S: the wave's first grade then
        draws, as a batch's does)."""
        future, self._next = self._next, None
        if future is None:
            return None
        try:
            shared, drawn_at = future.result()
        except Exception:  # noqa: BLE001 - the wave draws its own, and a fault there is the grade's to report
            return None
        if time.monotonic() - drawn_at > self.KEEP_S:
            shared.close()
            return None
        return shared

    def close(self) -> None:
        """The worker's end: the store drawn for a wave that never came is closed (its private folder
        removed), the draw under way waited for first."""
        future, self._next = self._next, None
        if future is not None:
            try:
                future.result()[0].close()
            except Exception:  # noqa: BLE001 - a draw that failed left nothing
                pass
        self._pool.shutdown(wait=True)


def _grade_wave_on_slurm(store: Store, wave: list[Claimed], *, request, work: Path, options) -> None:
    """The wave as a class folder (<upload id>/<its file name>: each upload's bytes) graded by a job
    array (batch/slurm.grade_on_slurm; the course folder must be one every node sees), each result
    (the merged outcome's, in memory) stored with its documents when the array is done. No phase
    comes back from the nodes: the watchers hear "cluster"."""
    staging = Path(tempfile.mkdtemp(prefix="wave-", dir=work))
    try:
        folder = staging / "in"
        folder.mkdir()
        for c in wave:
            (folder / c.id).mkdir()
            (folder / c.id / staged_name(c.name)).write_bytes(c.data)
            store.add_event(c.id, "phase", {"phase": "cluster"})
        by_id = {c.id: c for c in wave}
        outcome = grade_on_slurm(dataclasses.replace(request, directory=folder, report_dir=staging / "out"),
                                 options=options)
        for g in outcome.graded:
            if g.entry.student in by_id and g.result is not None:
                _keep(store, g, by_id.pop(g.entry.student), Rendered(g.result, request.rubric))
        for c in by_id.values():                # a task that failed: the machine's, graded again
            _not_graded(store, c, request, "its Slurm task did not finish (the array's logs are in the wave's "
                        "report folder, removed with it: `grader batch --slurm` on the same file says more)")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _not_graded(store: Store, claimed: Claimed, request, why: str) -> None:
    """An upload whose grade never came back: queued again while tries are left, else stored as the
    machine's fault (a result.json of status infrastructure_error saying why, and its reports), so
    that no upload stays `grading`."""
    if claimed.tries < MAX_TRIES:
        store.retry(claimed.id, why)
        return
    rubric = request.rubric if request is not None else None
    failed = Result(exercise=rubric.exercise if rubric is not None else store.setting("exercise") or "",
                    submission={"path": claimed.name, "sha256": claimed.sha256},
                    backend=str(request.backend) if request is not None else "", status=Outcome.INFRASTRUCTURE_ERROR,
                    grader_version=__version__, message=f"the course server could not grade this upload after "
                                                        f"{claimed.tries} tries: {why}")
    if rubric is None:
        rubric = load_exercise(failed.exercise)
    store.finish(claimed.id, StoredGrade.of(Rendered(failed, rubric)))


def _keep(store: Store, g, claimed: Claimed, documents: Rendered | None) -> None:
    """One grade's end: its documents (the grade's Rendered, from memory) stored and the upload done,
    or, where the machine failed it and tries are left, the upload queued again."""
    r = g.result
    if r is None:                            # no grade (the batch's entry problem): the machine's doing
        _not_graded(store, claimed, None, g.entry.detail or "not graded")
        return
    if r.status == Outcome.INFRASTRUCTURE_ERROR and claimed.tries < MAX_TRIES:
        store.retry(claimed.id, f"the machine failed the grade ({(r.message.strip().splitlines() or [''])[0][:200]}); "
                                f"grading it again, try {claimed.tries + 1} of {MAX_TRIES}")
        return
    store.finish(claimed.id, StoredGrade.of(documents))


@dataclass(frozen=True)
class Grading:
    """How the worker grades (`grader serve`'s options): the exercise, the backend and the jobs as
    `grader batch` takes them, and, with slurm (batch/cluster.SlurmOptions), each wave a job array."""
    exercise: str
    backend: str = "auto"
    jobs: int | None = None
    slurm: object | None = None


def run(folder: Path, grading: Grading, *, once: bool = False, parent: int | None = None) -> None:
    """The worker's loop (once: until the queue is empty, for a test; parent: the server's process
    id, whose end ends the worker)."""
    folder = Path(folder)
    if parent is not None:
        processes.set_death_signal(signal.SIGKILL)      # the server's end is ours, even by kill -9
        if os.getppid() != parent:                      # it ended before that was set
            return
    lock = os.open(folder / WORKER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)         # the previous worker's end (the kernel drops a dead one's lock)
    try:
        os.ftruncate(lock, 0)
        os.pwrite(lock, f"pid {os.getpid()}\n".encode(), 0)
        _work(folder, grading, once=once, parent=parent)
    finally:
        os.close(lock)                       # the next worker's turn (this process's, too, with once)


def _work(folder: Path, grading: Grading, *, once: bool, parent: int | None) -> None:
    """The worker's loop, its lock held (run)."""
    store = Store(folder)
    # The backend ("auto" resolved), the GPUs and the jobs decided once, as a batch decides them for a class
    # (on Slurm, grade_on_slurm decides the backend by what the array asks for, as `grader batch --slurm`).
    request = ClassRequest(folder, load_exercise(grading.exercise), grading.backend, jobs=grading.jobs)
    machine, request = class_machine(request) if grading.slurm is None else (None, request)
    work = folder / ".grader-serve"
    work.mkdir(mode=0o700, exist_ok=True)
    for old in work.glob("wave-*"):           # a dead worker's staging
        shutil.rmtree(old, ignore_errors=True)
    store.requeue_stale()
    ahead = DrawnAhead(request.rubric, machine is not None and machine.backend.private_cases)
    ahead.start()
    try:
        while True:
            if parent is not None and os.getppid() != parent:   # the server is gone (PR_SET_PDEATHSIG ends us too)
                processes.end_all()
                return
            wave = store.claim_wave()
            if not wave:
                if once:
                    return
                time.sleep(POLL_S)
                continue
            if grading.slurm is not None:           # as `grader batch --slurm` grades a class
                _grade_wave_on_slurm(store, wave, request=request, work=work, options=grading.slurm)
                continue
            shared = ahead.take()
            try:
                grade_wave(store, wave, request=request, machine=machine, shared=shared)
            finally:
                if shared is not None:
                    shared.close()
                ahead.start()                       # the next wave's, while this worker waits for it
    finally:
        ahead.close()                               # a wave's store drawn for nothing: its folder removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.serve.worker", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--exercise", required=True)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--parent", type=int, default=None)
    parser.add_argument("--slurm", default=None, help="batch/cluster.SlurmOptions as JSON")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    slurm = None
    if args.slurm is not None:

        slurm = SlurmOptions(**json.loads(args.slurm))
    try:
        run(args.folder, Grading(args.exercise, args.backend, args.jobs, slurm), once=args.once, parent=args.parent)
    except KeyboardInterrupt:

        processes.end_all()
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
