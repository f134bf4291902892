"""Grading a class: every student's submission in turn, each result stored as it completes.

Each student is graded from the bytes read when the class was listed (Entry.source, read once:
batch/inputs.py): the store's key, the build and the reports take them, and nothing here opens a
student's path, so a file changed, swapped for a link or deleted while the batch runs is graded as
it was listed."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from grader.analysis.similarity import Similarity
from grader.batch.inputs import Entry, Problem
from grader.batch.request import ClassRequest
from grader.batch.store import STORE_NAME, ResultStore, grade_key, rubric_bytes
from grader.core import processes
from grader.core.backend import Backend
from grader.core.limits import usable_cores
from grader.core.outcomes import Outcome
from grader.core.results import Result, result_from_json
from grader.exercises.pool import SharedStore, class_store
from grader.exercises.rubric import Rubric
from grader.grade import pipeline
from grader.grade.machine import Machine, decide
from grader.grade.request import GradeOptions, GradeRequest
from grader.platforms.delivery import GRADESCOPE_FILE, Delivery, deliver
from grader.report.files import Rendered

if TYPE_CHECKING:
    from grader.batch.insights import ClassInsights


@dataclass
class Graded:
    entry: Entry
    result: Result | None          # None: no submission to grade (entry.problem says why)
    reused: bool = False           # taken from an earlier run's results.jsonl, unchanged since
    # The result's documents (report/files.Rendered: each made once, when a sink first asks), what
    # every sink of the grade takes: the report folder, results.jsonl, the caller's progress (the
    # course server's store). Handed to progress only: the BatchOutcome's rows hold none (a class's
    # reports are not kept in memory to its end). None without a result.
    documents: Rendered | None = None


@dataclass
class BatchOutcome:
    graded: list[Graded] = field(default_factory=list)
    interrupted: bool = False      # Ctrl-C: the rows so far, the rest not graded
    not_reached: int = 0           # submissions an interruption left ungraded
    insights: ClassInsights | None = None   # the class's (insights.json), where its report was written
    similarity: Similarity | None = None  # the class's similar kernels (batch/similarity.py)

    @property
    def infrastructure_failures(self) -> list[Graded]:
        """The students the machine failed: a result saying so, or an entry (a class folder gone)."""
        return [g for g in self.graded if g.result is not None and g.result.status == Outcome.INFRASTRUCTURE_ERROR]


Progress = Callable[[Graded, int, int], None]     # (the one just done, how many done, how many in all)
Said = Callable[[Entry, str], None]               # (the entry, a progress line of its grade)


# In flight for each GPU lane: enough that its lane stays busy while the others build and record.
# Measured on one H200 (16 cores; scripts/benchmark.py --batch 100), with the recorder outside the
# lane (its lane_s 0.39 to 0.42 s a student): 61.2 s at 8, 45.2 s at 12, each kernel's median
# fraction the same within 0.7% (inside its run-to-run range; docs/figures/nvidia-h200-batch*.json).
# At 12 on an H100 host the lane was busy 71% of a batch of 100 (44.1 s): each submission holds its
# place for its build (2.3 s), recording (0.2 s) and check (0.6 s) as well as its 0.35 s in the lane,
# and twelve places did not keep the lane fed; 16 gives one per core, less the timing's own.
PER_LANE = 16
# With several grades in flight in this one process, the grade that holds a GPU's lane wakes on
# each of its children's frames and then waits for the interpreter's lock, which a thread doing
# pure-Python work (a report, SASS) gives up only every switch interval (5 ms by default): at the
# hand-offs (the recorder done, the measuring process's job, its end) the lane sat idle for that.
SWITCH_INTERVAL_S = 0.0005


# A batch prunes the build cache at most this often after its grades, and once at its end: each
# prune sizes every build in the cache, and after each grade of a class of 300 (each one a build)
# that grew with the class.
CACHE_PRUNE_EVERY_S = 60.0


def default_jobs(backend: Backend, lanes: int = 1) -> int:
    """How many submissions are in flight at once: on GPUs, PER_LANE for each of the lanes, enough
    to keep every lane busy while others compile and start (at most the cores, less one for the
    timing's own thread); on the emulator, where each child is all CPU, one per core."""
    cores = usable_cores()
    return max(1, min(PER_LANE * max(1, lanes), cores - 1)) if backend.on_gpu else max(1, cores)


def class_machine(request: ClassRequest) -> tuple[Machine, ClassRequest]:
    """The machine a class is graded on, decided once (grade/machine.decide: one probe, "auto"
    resolved, the GPUs listed), and the request with what that settles: the backend, and the jobs
    where the instructor named none (default_jobs: a few per GPU lane, one per core on the emulator)."""
    machine = decide(request.backend, every_gpu=True)
    jobs = request.jobs
    if jobs is None:
        jobs = default_jobs(machine.backend, lanes=len(machine.devices)) if machine.backend.on_gpu \
            else default_jobs(machine.backend)
    return machine, request.resolved(backend=machine.backend, jobs=jobs)


def grade_entries(entries: list[Entry], request: ClassRequest, *, machine: Machine, progress: Progress | None = None,
                  said: Said | None = None, shared: SharedStore | None = None) -> BatchOutcome:
    """Grade each entry as request says on machine (decided once for the class: class_machine;
    reusing an unchanged stored result); with its report_dir, write each one's reports into
    report_dir/<student>/ and keep every result in report_dir/results.jsonl.

    request.jobs submissions are in flight at once (None: one): their compiles and child start-ups
    overlap, and each one's checks and timing wait for its GPU's lane (lanes.py), given round-robin
    over the machine's GPUs, each grade with its own GPU's reading. Ctrl-C stops the batch: what was done is kept,
    submissions not yet started are not graded, and the outcome says interrupted. With
    request.counters, a kept result without counters is graded again for them. said(entry, line) hears
    each grade's progress lines (core/progress.py: a line that starts a phase names it). shared: the
    class's store of private cases (exercises/pool.class_store) where the caller drew it ahead (the
    course server's worker draws each wave's while it waits for uploads), and closes it; None: one
    is made here, drawn by the first grade that needs it, and closed at the end."""
    backend, jobs, report_dir = machine.backend, request.jobs or 1, request.report_dir
    run = _ClassRun(request.rubric, machine, report_dir, jobs,
                    ResultStore(report_dir / STORE_NAME) if report_dir is not None else None,
                    counters=request.counters, said=said)
    outcome = BatchOutcome()
    done_by_index: dict[int, Graded] = {}
    processes.reopen()

    def finished(index: int, g: Graded | None) -> None:
        if g is None:
            return
        done_by_index[index] = dataclasses.replace(g, documents=None)     # the sinks have taken them
        if progress:
            progress(g, len(done_by_index), len(entries))

    try:
        if backend.private_cases and any(e.source is not None and not e.problem for e in entries):
            run.shared = shared if shared is not None else class_store(request.rubric)
        _in_flight(run, entries, jobs, finished)
    except KeyboardInterrupt:
        # SIGINT, or SIGTERM (the CLI turns it into the same): the grades in flight are stopped,
        # their builds and children ended, and none of them is stored (a rerun grades them).
        outcome.interrupted = True
        run.stopping.set()
        processes.end_all()
    finally:
        if run.shared is not None and run.shared is not shared:
            run.shared.close()
        pipeline.keep_cache_in_bounds(request.rubric)            # what the grades' own prunes, a minute apart, left over
    outcome.not_reached = len(entries) - len(done_by_index)
    # The whole class, always: a student an interruption left ungraded is the earlier run's result where
    # one is kept for the same file, else a row saying so (the CSVs held only the students done in this run).
    outcome.graded = [done_by_index[i] if i in done_by_index else run.not_reached(entry)
                      for i, entry in enumerate(entries)]
    if run.store is not None and not outcome.interrupted:
        run.store.compact()
    return outcome


def _in_flight(run: "_ClassRun", entries: list[Entry], jobs: int, finished: Callable[[int, "Graded | None"], None]) -> None:
    """Grade every entry, jobs at once (a pool of threads, the interpreter handed on more often
    while it runs), telling finished(index, graded) as each ends, in the order they end."""
    if jobs <= 1:
        for i, entry in enumerate(entries):
            finished(i, run.one(i, entry))
        return
    pool = ThreadPoolExecutor(max_workers=jobs)
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(switch_interval, SWITCH_INTERVAL_S))
    try:
        futures = {pool.submit(run.one, i, entry): i for i, entry in enumerate(entries)}
        for future in as_completed(futures):
            finished(futures[future], future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        sys.setswitchinterval(switch_interval)


@dataclass
class _ClassRun:
    """What every grade of one batch shares: the rubric, the backend, where results go and are kept,
    the GPUs, and the store of private cases (drawn once for the class)."""

    rubric: Rubric
    machine: Machine
    report_dir: Path | None
    jobs: int
    store: object | None                    # batch/store.ResultStore
    shared: object | None = None            # exercises/pool.SharedStore, on a GPU
    counters: bool = False                  # each correct, timed kernel's counters' pass (--counters)

    @property
    def backend(self) -> Backend:
        return self.machine.backend
    stopping: threading.Event = field(default_factory=threading.Event)     # set by an interruption
    said: Said | None = None                # hears each grade's progress lines (grade_entries)

    @functools.cached_property
    def rubric_text(self) -> bytes | None:
        """The rubric's text, for the store's keys: read once for the class, not once a student."""
        return rubric_bytes(self.rubric)

    def key(self, entry: Entry) -> str:
        """The store's key of an entry's source (the bytes read at the listing)."""
        assert entry.source is not None
        return grade_key(entry.source, self.rubric_text, self.backend)

    def not_reached(self, entry: Entry) -> Graded:
        """The row of a student an interruption left ungraded in this run."""
        if entry.source is not None and not entry.problem and self.store is not None:
            kept = self.store.reusable(entry.student, self.key(entry))
            if kept is not None:
                return Graded(entry, kept, reused=True)
        if entry.problem:
            return Graded(entry, None)
        return Graded(dataclasses.replace(entry, problem=Problem.NOT_GRADED, detail="not graded in this run (it was "
                                          "interrupted first): run the same command again to grade it"), None)

    def one(self, index: int, entry: Entry) -> Graded | None:
        """Grade one entry from its source (the bytes read when the class was listed), or reuse its
        stored result; None when the batch is stopping (nothing finishing after an interruption is
        kept)."""
        if self.stopping.is_set():
            return None
        if entry.source is None or entry.problem:
            return Graded(entry, None)
        key = self.key(entry)
        kept = self.store.reusable(entry.student, key) if self.store else None
        if kept is not None and self.counters and self.backend.on_gpu and kept.correct and kept.counters is None:
            kept = None                       # kept from a run without --counters: graded again for them
        if kept is not None:
            documents = Rendered(kept, self.rubric)
            if self.report_dir is not None and not _reports_intact(self.report_dir / entry.student):
                self.deliver(entry, documents)                      # emptied, broken, removed: written again
            return Graded(entry, kept, reused=True, documents=documents)

        options = GradeOptions(
            device=self.machine.device(index),
            # the cores shared among the children
            emulator_threads=max(1, usable_cores() // self.jobs) if not self.backend.on_gpu and self.jobs > 1 else 0,
            counters=self.counters, cache_prune_every_s=CACHE_PRUNE_EVERY_S)
        said = self.said
        result = pipeline.grade(GradeRequest(entry.source.path, self.rubric, self.machine, options, source=entry.source),
                       inputs=self.shared, progress=(lambda line: said(entry, line)) if said is not None else None)
        if self.stopping.is_set():          # interrupted while it ran: its result is not a grade
            return None
        documents = Rendered(result, self.rubric)       # the one value every sink of this grade takes
        if self.report_dir is not None:
            self.deliver(entry, documents)
        if self.store is not None:
            self.store.add(entry.student, entry.path, key, result, documents.document)
        return Graded(entry, result, documents=documents)

    def deliver(self, entry: Entry, documents: Rendered) -> None:
        """The student's reports and Gradescope file into report_dir/<student>/ (platforms/delivery.py),
        from the grade's documents; a folder that cannot be written is the machine's, raised."""
        done = deliver(documents.result, self.rubric, rendered=documents,
                       to=Delivery(report_dir=self.report_dir / entry.student, gradescope_file=True))
        if done.report_error is not None:
            raise done.report_error


def _reports_intact(folder: Path) -> bool:
    """Whether a kept result's report folder still holds its report and a result.json that reads
    as a result (the folder's files are read as untrusted: anything else, and they are rewritten)."""
    try:
        result_from_json(json.loads((folder / "result.json").read_bytes().decode("utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return all((folder / name).is_file() for name in ("report.md", "report.html", GRADESCOPE_FILE))
