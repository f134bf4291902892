"""Timing the submission against the copy floors, on the GPU, in the child.

Method (the parent turns the samples into medians, a fraction and its interval):
- the timed shape, inputs in `input_sets` sets; the submission's launches rotate
  over them, each set writing its own output, poisoned before every launch;
- the launcher's workspace (what it allocated with cudaMalloc) is poisoned, the static
  __device__ variables put back to their loaded and uploaded values, and (where the device code
  calls malloc) the device heap's free memory poisoned and counted, before every call, outside
  the events (backend.prepare_call), so no call can serve what an earlier one left there;
- the floor's copies rotate over `floor_buffers` source and destination pairs of their own, or
  (floor_placement: submission) over each timed set's input and output: where a buffer lies
  in device memory moves a copy's bandwidth by up to 1-2% from one process to the next (a
  batch on an H200), and one pair made that the floor's noise; on the submission's own
  buffers the same placement moves both sides of the fraction;
- before every timed launch the L2 is flushed by writing a buffer of twice its size;
- persisting L2 lines are reset before the warm-up and again before sampling;
- each sample is one launch between two CUDA events recorded on the legacy default
  stream, which waits for work on every blocking stream: a kernel launched on another
  stream (screening refuses stream creation anyway) is still inside the timed region;
- rounds interleave the kernels (submission, the copies, the chain), A B A B, so a
  clock or thermal drift touches them alike and the samples can be paired;
- after the last round, each set's output is sent back for verification;
- the grader's buffers a kernel must not change (every set's inputs, the copies' buffers) are
  checksummed before and after, and each set's output after every timed launch, so that a launch
  that did less than the others (a launcher that skips calls) shows.

In the recording child (backend.measures is False) the same code runs over stand-in buffers, and
the sampling runs to max_samples rounds without the stopping rule: the recording then holds every
call the measuring process can make, in its order.
"""

from __future__ import annotations

import dataclasses
import time

from grader.core.contract import BaselineTimingFrame, CaseFrame, CaseJob, FloorPlacement, Job, TimingFrame
from grader.core.stats import fraction_interval, median
from grader.run import protocol
from grader.run.child.backends import Region
from grader.run.child.baseline import as_torch
from grader.run.child.buffers import allocate, output_meta
from grader.run.child.floors import check, fixed_rounds, floor_copies, l2_flush, timed
from grader.run.child.watch import OutputSums, Untouched

BATCH = 10    # rounds between two looks at the stopping rule
VERIFY_CALLS = 4        # untimed calls of each set after the sampling, each output checksummed


def run_timing(backend, job: Job, files, sender) -> float:
    """Time the submission against the floor copies (and the chain, and the baseline); send the
    samples, then each timed set's output. Returns when the sampling ended (time.perf_counter)."""
    t = _Timing(backend, job, files)
    backend.reset_persisting_l2()
    probe_ms = t.probe()
    if probe_ms / 1000 > t.cfg.slow_launch_s:
        return t.too_slow_to_sample(probe_ms, sender)
    t.warm_up()
    samples, stop_reason, seconds = t.sample()
    t.verify_calls()
    baseline_gap = (_baseline_gap(t.baseline, t.sets[0], t.allocated[0][0])
                    if t.baseline and backend.measures else None)
    sender.channel.send(TimingFrame(samples, stop_reason, seconds, t.device, backend.launch_log(),
                                    baseline_max_abs_diff=baseline_gap, clobbered=t.guarded.changed(),
                                    output_checksums=t.sums.read(), heap_kept_bytes=backend.heap_kept_bytes(),
                                    holds_timed_out=t.holds_timed_out))
    if t.baseline is not None:
        for cj in job.baseline_cases:
            _time_against_baseline(t, cj, files, sender.channel)
    sampled = time.perf_counter()
    # Each set's last output: the parent verifies the timed shape with it.
    for cj, (_, fulls), outs in zip(t.sets, t.allocated, t.outputs, strict=False):
        _send_outputs(backend, sender, cj, fulls, outs, t.pad)
    return sampled


def settled(interval, lines: list[float], half_width: float) -> bool:
    """Whether an interval of the fraction is narrow enough (half_width) and lies clear of every
    line: the tier (gold, silver, below, or past the floor) is then the same for its median and
    both its ends, so more rounds could not change it. An interval within half_width of the floor
    (1.0) is never settled: how near the floor a kernel comes is what its student reads, and
    stopping there once clear of 1.0 kept exactly the runs that strayed furthest from it (an
    H100: 0.991 beside seven runs within 0.996 to 1.001), so it is sampled to target_half_width."""
    near_floor = interval.low - half_width <= 1.0 <= interval.high + half_width
    return bool(half_width) and interval.half_width <= half_width and not near_floor and \
        not any(interval.low <= line <= interval.high for line in lines)


class _Timing:
    """One timing's buffers and the variants timed in each round: the submission (rotating over
    the timed sets), the floor's copies, the chain and the PyTorch baseline where there are."""

    def __init__(self, backend, job: Job, files):
        self.backend, self.cfg = backend, job.timing
        self.sets, self.pad = job.timed_cases, job.guard_floats
        self.allocated = [allocate(backend, cj, self.pad, files) for cj in self.sets]    # (views, fulls) per set
        self.device = backend.device()
        copies, self.flush = floor_copies(backend, self.cfg, self.sets, self.allocated), l2_flush(backend, self.device)
        self.outputs = [[b for b in cj.buffers if b.role == "out" and not b.chain] for cj in self.sets]
        self.turn = 0                               # the submission's launches so far: the next set is turn % sets
        self.holds_timed_out = 0                    # batches whose hold ended by its timeout (backend.hold)
        self.hold_failed = False                    # a hold timed out: the batches after it run unheld
        self.variants = {"submission": self.submission, **copies}
        if self.cfg.chain and self.sets[0].chain is not None:
            self.variants["chain"] = self.chain
        self.baseline = backend.baseline(self.cfg.baseline) if self.cfg.baseline else None
        self.guarded = Untouched(backend, self.sets, self.allocated, copies)
        self.sums = OutputSums(backend, self.sets, self.allocated, self.outputs,
                                self.cfg.warmup + self.cfg.max_samples + VERIFY_CALLS + 2)
        if self.baseline is not None:
            self.variants["baseline"] = lambda: self.baseline(self.allocated[0][0])
        # The recorder's rounds call only the variants that call the launcher: the others run the
        # grader's own kernels, which it would not run anyway (it ran 2000 rounds of all of them).
        self.round_variants = (self.variants if backend.measures else
                               {k: f for k, f in self.variants.items() if k in ("submission", "chain")})

    def submission(self) -> None:
        k = self.turn % len(self.sets)
        self.turn += 1
        check(self.backend.launch_submission(self.sets[k].launch, self.allocated[k][0]))

    def chain(self) -> None:
        check(self.backend.launch_submission(self.sets[0].launch, self.allocated[0][0]))
        check(self.backend.reference_call(self.sets[0].chain, self.allocated[0][0]))

    def last_set(self) -> int:
        """The set the submission's last launch wrote."""
        return (self.turn - 1) % len(self.sets)

    def before(self, name: str) -> None:
        """Outside the events: the next set's outputs poisoned (the submission), the L2 flushed."""
        if name == "submission":
            k = self.turn % len(self.sets)
            for b in self.outputs[k]:
                self.backend.reinit(self.allocated[k][0][b.name], b.init)
        if name in ("submission", "chain"):
            self.backend.prepare_call()             # the launcher's workspace poisoned: no memo survives a call
        self.backend.fill(self.flush, time.perf_counter_ns() % 1000 + 1)

    def _synchronize(self) -> None:
        sync = self.backend.synchronize()
        if not sync.ok:
            raise RuntimeError(sync.error)

    def probe(self) -> float:
        """One launch on set 0, timed: a kernel far too slow to sample (a printf from every
        thread, say) is graded from this launch alone."""
        self.probe_events = (self.backend.event(), self.backend.event())
        self.before("submission")
        self.backend.reset_launch_log()
        timed(self.backend, self.submission, *self.probe_events)
        self._synchronize()
        probe_ms = self.backend.elapsed_ms(*self.probe_events)
        self.sums.take(0)
        return probe_ms

    def too_slow_to_sample(self, probe_ms: float, sender) -> float:
        """One sample of each copy, set 0's output verified, the other sets skipped. Set 0's output
        is sent as the probe left it: copies that write the submission's outputs
        (FloorPlacement.SUBMISSION) run here on a pair of their own instead."""
        backend = self.backend
        samples = {"submission": [probe_ms]}
        variants = self.variants
        if self.cfg.floor_placement is FloorPlacement.SUBMISSION:
            own = dataclasses.replace(self.cfg, floor_placement=FloorPlacement.OWN, floor_buffers=1)
            variants = {**variants, **floor_copies(backend, own)}
        for name, fn in variants.items():
            if name in ("submission", "chain"):
                continue
            self.before(name)
            timed(backend, fn, *self.probe_events)
            backend.synchronize()
            samples[name] = [backend.elapsed_ms(*self.probe_events)]
        sender.channel.send(TimingFrame(samples, "too_slow", probe_ms / 1000, self.device, backend.launch_log(),
                                        [c.name for c in self.sets[1:]], clobbered=self.guarded.changed(),
                                        output_checksums=self.sums.read()))
        sampled = time.perf_counter()
        _send_outputs(backend, sender, self.sets[0], self.allocated[0][1], self.outputs[0], self.pad)
        return sampled

    def warm_up(self) -> None:
        """cfg.warmup untimed rounds (module load, first touch, clocks), or fewer once half the
        budget is spent: a very slow kernel is warm after one round. The recorder (backend.measures
        False) takes every one: its time is the launcher's host code, not the kernel's, and a warm-up
        it cut short would leave the recording short of calls the measuring process makes."""
        warm_until = time.perf_counter() + self.cfg.budget_s / 2 if self.backend.measures else float("inf")
        for _ in range(self.cfg.warmup):
            for name, fn in self.round_variants.items():
                self.before(name)
                fn()
                if name == "submission":
                    self.sums.take(self.last_set())
            self._synchronize()
            if time.perf_counter() > warm_until:
                break

    def sample(self) -> tuple[dict[str, list[float]], str, float]:
        """The timed rounds, BATCH at a time: (samples per variant, why sampling stopped, seconds).

        Stopping rule: at least min_samples rounds; then stop as soon as the 95% interval of the
        fraction is within target_half_width of its median, or within tier_half_width and clear of
        every tier line (and of the floor: the tier is settled whatever more rounds would say), or
        the time budget is spent, or max_samples rounds were taken. A kernel so slow that hard_budget_s passes first stops there,
        with the rounds it got. The recorder (backend.measures False) takes every round the
        sampling may take."""
        backend, cfg = self.backend, self.cfg
        samples: dict[str, list[float]] = {name: [] for name in self.variants}
        events = {name: [(backend.event(), backend.event()) for _ in range(BATCH)] for name in self.variants}
        backend.reset_persisting_l2()
        backend.reset_launch_log()                       # the launches of the samples: what the report shows
        started = time.perf_counter()
        stop_reason = "max_samples"
        while len(samples["submission"]) < cfg.max_samples:
            rounds = self._rounds(events, started)
            for name in self.variants:
                samples[name].extend(backend.elapsed_ms(s, e) for s, e in events[name][:rounds])
            elapsed = time.perf_counter() - started
            if not backend.measures:
                continue
            if elapsed >= cfg.hard_budget_s:
                stop_reason = "hard_budget"
                break
            if len(samples["submission"]) < cfg.min_samples:
                continue
            best = min(cfg.floor, key=lambda k: median(samples[k]))
            interval = fraction_interval(samples[best], samples["submission"], resamples=200)
            if interval.half_width <= cfg.target_half_width:
                stop_reason = "converged"
                break
            if settled(interval, cfg.tier_lines, cfg.tier_half_width):
                stop_reason = "tier_settled"
                break
            if elapsed >= cfg.budget_s:
                stop_reason = "budget"
                break
        return samples, stop_reason, time.perf_counter() - started

    def _rounds(self, events: dict, started: float) -> int:
        """Up to BATCH rounds, every variant once a round between its events (A B A B), some
        sampled rounds' outputs checksummed; the rounds run."""
        rounds = 0
        held = self.backend.measures and self.cfg.hold_rounds and not self.hold_failed
        if held and not self.backend.hold():    # the GPU starts the batch once all of it is enqueued
            held, self.hold_failed = False, True
        try:
            for i in range(BATCH):
                for name, fn in self.round_variants.items():
                    self.before(name)
                    timed(self.backend, fn, *events[name][i])
                    if name == "submission" and self.sums.now():
                        self.sums.take(self.last_set())
                rounds += 1
                if self.backend.measures and time.perf_counter() - started >= self.cfg.hard_budget_s:
                    break
        finally:
            if held:
                self.backend.release()
        self._synchronize()
        if held:
            # Exact once the stream is drained. A hold that ended by its timeout means something in
            # a call waited on the stream (a copy from pageable memory the driver stages, the device
            # heap's poisoning): the rest of the sampling runs unheld, at most one timeout lost.
            total = self.backend.release()
            self.hold_failed = total > self.holds_timed_out
            self.holds_timed_out = total
        return rounds

    def verify_calls(self) -> None:
        """A few more calls of every set, untimed, each output checksummed: with the sampled
        rounds' checks, a launcher that does less on some calls shows, whichever calls those are."""
        for _ in range(VERIFY_CALLS):
            for _ in self.sets:
                self.before("submission")
                self.submission()
                self.sums.take(self.last_set())


def _baseline_gap(baseline, cj: CaseJob, views: dict[str, Region]) -> float:
    """The largest difference between the submission's output (set 0's last) and PyTorch's."""
    out = next(b for b in cj.buffers if b.role == "out" and not b.chain)
    theirs = baseline(views).float().reshape(-1)
    ours = as_torch({out.name: views[out.name]})[out.name].reshape(-1)
    return float((ours - theirs).abs().max()) if theirs.numel() else 0.0


def _time_against_baseline(t: _Timing, cj: CaseJob, files, channel: protocol.Channel) -> None:
    """The submission and the PyTorch baseline at one more shape: a fixed number of interleaved
    rounds (the timing's baseline_rounds), the L2 flushed before each launch (with the timing's
    flush buffer), the output reset before each of the submission's."""
    backend, baseline = t.backend, t.baseline
    views, _ = allocate(backend, cj, t.pad, files)
    outs = [b for b in cj.buffers if b.role == "out" and not b.chain]

    def submission():
        outcome = backend.launch_submission(cj.launch, views)
        if not outcome.ok:
            raise RuntimeError(outcome.error)

    def before(name: str, round_: int) -> None:
        for b in outs:
            backend.reinit(views[b.name], b.init)
        if name == "submission":
            backend.prepare_call()
        backend.fill(t.flush, round_ + 1)

    samples = fixed_rounds(backend, {"submission": submission, "baseline": lambda: baseline(views)},
                            rounds=t.cfg.baseline_rounds, warmup=5, before=before)
    channel.send(BaselineTimingFrame(cj.name, samples))


def _send_outputs(backend, sender, cj: CaseJob, fulls: dict, outs: list, pad: int) -> None:

    sent = {b.name: fulls[b.name] for b in outs}
    sender.send(backend, CaseFrame(cj.name, ok=True, outputs=output_meta(sent, pad)), list(sent.values()))
