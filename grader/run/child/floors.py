"""The timing's building blocks, shared by the submission's timing (timing.py), `grader calibrate`
and the PyTorch baseline: the floor's copies and the buffers they rotate over, the L2's flush,
one launch between two events (timed), and a fixed number of interleaved rounds (fixed_rounds);
and `grader calibrate`'s run itself (run_calibration).

Imports only core/ and run/ (the child's buffers and backends).
"""

from __future__ import annotations

import itertools

from grader.core.contract import CalibrationFrame, CaseJob, FloorPlacement, Job, TimingJob
from grader.run.child.backends import Region
from grader.run.child.buffers import allocate


def timed(backend, fn, start: int, end: int) -> None:
    """fn between two events recorded on the legacy default stream."""
    backend.record(start)
    fn()
    backend.record(end)


def check(outcome) -> None:
    """A launch that failed stops the timing: the child reports it as a fatal frame."""
    if not outcome.ok:
        raise RuntimeError(outcome.error)


def floor_copies(backend, cfg: TimingJob, sets: list[CaseJob] = (), allocated: list = ()) -> "Copies":
    """The copies the floor is measured with (cfg.floor and the informational one), each a launch
    of cfg.copy_floats floats, each launch on the next of its source and destination pairs: with
    FloorPlacement.OWN, cfg.floor_buffers pairs of its own; with SUBMISSION, each timed set's
    largest input into its largest output (the rubric checked that both hold copy_floats), the
    memory the submission's launches use."""
    n = cfg.copy_floats
    if cfg.floor_placement is FloorPlacement.SUBMISSION:
        # The sources are the sets' inputs, checksummed as such; the destinations are outputs,
        # poisoned before each of the submission's launches: nothing more for Untouched to watch.
        pairs, own = [_largest_pair(cj, views, n) for cj, (views, _) in zip(sets, allocated, strict=False)], []
    else:
        own = []
        for i in range(max(cfg.floor_buffers, 1)):
            src, dst = backend.alloc(n, f"copy source {i}"), backend.alloc(n, f"copy destination {i}")
            backend.fill(src, 0x3F800000)               # 1.0 (a copy's time does not depend on the values)
            own.append((src, dst))
        pairs = own

    def rotating(kind: str):
        turn = itertools.count()
        return lambda: check(backend.copy(kind, *pairs[next(turn) % len(pairs)]))

    copies = Copies({kind: rotating(kind) for kind in dict.fromkeys(cfg.floor + [cfg.informational_floor])})
    copies.pairs = own
    return copies


def l2_flush(backend, device: dict) -> Region:
    """The buffer written before every timed launch to flush the L2 (twice its size)."""
    return backend.alloc(max(2 * device["l2_bytes"] // 4, 1 << 20), "L2 flush")


def _largest_pair(cj: CaseJob, views: dict[str, Region], n: int) -> tuple[Region, Region]:
    """A timed set's largest input and largest output (chain tensors aside), n floats of each."""
    def largest(role: str) -> Region:
        b = max((b for b in cj.buffers if b.role == role and not b.chain), key=lambda b: b.floats)
        if b.floats < n:
            raise RuntimeError(f"timing.floor_placement: {b.name} holds {b.floats} floats, the copy needs {n}")
        return views[b.name].part(0, n)
    return largest("in"), largest("out")


class Copies(dict):
    """The floor's copies by kind, with the buffer pairs of their own they rotate over (none when
    they copy the submission's buffers)."""

    pairs: list = []


def fixed_rounds(backend, variants: dict, *, rounds: int, warmup: int, before) -> dict[str, list[float]]:
    """Milliseconds of each variant, one sample a round.

    Stopping rule: `warmup` untimed rounds, then exactly `rounds` timed ones. Each round runs
    every variant once, in order (interleaved, so a drift of clocks touches them alike), with
    before(name, round) outside its pair of events on the legacy default stream.
    """
    samples: dict[str, list[float]] = {name: [] for name in variants}
    events = {name: (backend.event(), backend.event()) for name in variants}
    for round_ in range(warmup + rounds):
        for name, fn in variants.items():
            before(name, round_)
            timed(backend, fn, *events[name])
        sync = backend.synchronize()
        if not sync.ok:
            raise RuntimeError(sync.error)
        if round_ >= warmup:
            for name, (start, end) in events.items():
                samples[name].append(backend.elapsed_ms(start, end))
    return samples


def run_calibration(backend, job: Job, files, sender) -> None:
    """`grader calibrate`: the exercise's reference runs and the copies at the timed shape.

    Stopping rule: a fixed number of rounds (job.calibration_rounds) after three warm-up rounds,
    every run and copy once a round, interleaved, the L2 flushed before each, one event pair each.
    """

    cfg: TimingJob = job.timing
    views, _ = allocate(backend, job.timed_cases[0], 0, files)
    device = backend.device()
    variants, flush = floor_copies(backend, cfg), l2_flush(backend, device)
    for run in job.calibrate:
        variants[run.name] = (lambda steps: (lambda: [check(backend.reference_call(s, views)) for s in steps]))(run.steps)
    backend.reset_persisting_l2()
    samples = fixed_rounds(backend, variants, rounds=job.calibration_rounds, warmup=3,
                            before=lambda name, round_: backend.fill(flush, round_ + 1))
    sender.channel.send(CalibrationFrame(samples, device))
