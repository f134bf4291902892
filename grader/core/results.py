"""What grading produces: small typed objects, and result.json built from them.

A student's failure is a Result with a status, never an exception.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from grader.core.contract import ChildSandbox
from grader.core.errors import Exit
from grader.core.outcomes import Outcome, Tier, outcome_word
from grader.core.typed import from_data

SCHEMA = "grader.result/2"    # 2: the parts typed (sass out of build, device.compiler, null when not reached)
STATUSES = tuple(Outcome)       # the outcomes a Result may have (grader/core/outcomes.py)


@dataclass
class CaseResult:
    name: str                               # the case as the rubric names it
    shape: list[int]                        # its dimensions' values
    pattern: str                            # its inputs: random, lesson, or an exercise's pattern
    seed: int                               # the generator's seed (a private run's is its own)
    passed: bool | None            # None: not run (an earlier case stopped the process)
    bad: int = 0                            # elements wrong
    total: int = 0                          # elements checked
    unwritten: int = 0                      # elements never written (still the poison)
    first_mismatch: dict | None = None      # at, got, want
    max_abs_error: float | None = None      # against the float64 reference
    max_rel_error: float | None = None
    note: str = ""                          # why not run, or what stopped it
    kind: str = "check"            # check | chain | timed


LEGEND_TEXT = "green: right; red: wrong; grey: never written (darker: more of the cell)"


@dataclass
class MapGrid:
    """Cells over a window of a 2-D slice: each cell's share of wrong and of never-written
    elements, in tenths (a digit per cell; 1 at least where there is any, 9 where all are)."""

    row0: int                      # the window's first row and column, in elements
    col0: int
    cell_rows: int                 # elements a cell covers, down and across
    cell_cols: int
    wrong: list[str]               # a string per row of cells, a digit per cell
    unwritten: list[str]

    def cells(self) -> int:
        return sum(len(row) for row in self.wrong)


@dataclass
class MistakeMap:
    """Where a failed check's output went wrong (built by verdict/maps.py, drawn by the reports):
    the whole slice (downsampled when large) and, where that is downsampled, the elements around
    the first wrong one at full size."""

    case: str
    tensor: str
    rows_axis: str                 # the dimension down the map ("" for a 1-D output)
    cols_axis: str                 # the dimension across it
    rows: int                      # the slice's extent down and across, in elements
    cols: int
    at: str                        # the other dimensions' indices ("batch 0, heads 2"; "" for 2-D)
    whole: MapGrid
    zoom: MapGrid | None = None
    before: int = 0                # floats written just before the output (its guard region)
    after: int = 0                 # ... and past its end


@dataclass
class DiagnosisEntry:
    code: str                               # the rubric's diagnosis code (tanh_gelu, bias_by_row, ...)
    message: str                            # what the outputs show
    advice: str                             # the rubric's advice for it
    case: str = ""                          # the first case that showed it


@dataclass
class SourceNote:
    """A problem at a place in the student's file (a compile error, a refusal, a blocked call):
    what CI annotations point at. line is None when there is no single line to blame."""

    file: str
    line: int | None
    title: str
    message: str


@dataclass
class Stop:
    """Why a grade ends before it is graded (a status other than graded, in the student's terms),
    as the step that found it returns it; the pipeline ends the Result with it (Result.end)."""

    status: Outcome
    message: str
    notes: list[SourceNote] = field(default_factory=list)    # where in the file, for CI annotations
    flags: list[str] = field(default_factory=list)


@dataclass
class FindingEntry:
    """What the compiled code shows about speed (a rubric finding that holds), with evidence."""

    code: str
    kernel: str
    message: str
    advice: str
    evidence: list[str] = field(default_factory=list)     # "line 9: LDG.E R4, desc[UR6][R6.64]"
    source: str = "code"                # code (the compiled kernel, its launches) or counters (Nsight Compute)


@dataclass
class Launch:
    """One kernel's launches in one configuration, as the submission made them (the timed
    launches, or the largest check's without a timing)."""

    kernel: str                        # as the student wrote it
    mangled: str
    grid: list[int]
    block: list[int]
    shared_bytes: int                  # dynamic shared memory asked for at launch
    launches: int                      # how many launches had this configuration
    registers: int | None = None       # per thread, from ptxas
    blocks_per_sm: int | None = None   # blocks resident on one SM at once
    occupancy: float | None = None     # resident warps / the SM's maximum
    occupancy_source: str | None = None   # "runtime" (the GPU's occupancy API) or "computed" (from ptxas)
    timed_shape: bool = False          # launched at the timed shape (else at the largest check's)


@dataclass
class CopyTiming:
    kind: str
    median_ms: float
    gbps: float
    bytes_moved: int = 0               # what the copy reads and writes (timing.copy_floats x 8)


@dataclass
class BaselineTiming:
    """The submission against the exercise's PyTorch expression, in the same process, at one shape."""

    shape: list[int]
    submission_ms: float
    baseline_ms: float
    speedup: float                     # baseline_ms / submission_ms: above 1, the submission is faster


@dataclass
class TimingResult:
    shape: list[int]                   # the timed dimensions' values
    kernel: str                        # the exercise's kernel, for tables
    byte_model: str                    # the byte model in words
    bytes_moved: int                        # by the byte model at the timed shape
    samples: int                            # rounds timed (A B A B against the floor copies)
    stop_reason: str    # converged, tier_settled, budget, hard_budget, max_samples, too_slow (run/child/timing.py)
    seconds: float                          # the timing's wall time
    submission_ms: float                    # median of the rounds
    submission_gbps: float
    floor_kind: str                         # the fastest copy, the floor
    floor_gbps: float
    copies: list[CopyTiming]                # every copy timed beside the submission
    fraction: float                         # floor time / submission time (from the rounds' medians)
    fraction_ci: list[float]                # bootstrap 95% interval
    informational_kind: str                 # a second copy, for comparison only
    informational_fraction: float
    chain_ms: float | None                  # the lesson's chain (this kernel then the next), where the exercise has one
    chain_gbps: float | None
    chain_bytes: int | None = None
    chain_title: str = ""
    baseline: str = ""                 # the PyTorch expression timed against the submission
    baselines: list[BaselineTiming] = field(default_factory=list)   # at the timed shape first
    baseline_max_abs_diff: float | None = None   # submission's output against PyTorch's, on the device
    holds_timed_out: int = 0           # batches of rounds whose stream hold ended by its timeout (rubric timing.hold_rounds)


@dataclass
class KernelCounters:
    """What the hardware counted for one kernel of the timed call, read by Nsight Compute (each
    field named after the ncu metric it comes from, run/profiling.py's METRICS)."""

    kernel: str                             # as the student wrote it
    mangled: str
    grid: list[int]
    block: list[int]
    duration_us: float                      # gpu__time_duration.sum (ncu locks the clocks to base)
    dram_pct: float                         # dram__throughput: share of the DRAM's peak, %
    dram_gbps: float                        # dram__bytes.sum.per_second
    dram_bytes: int                         # dram__bytes_read.sum + dram__bytes_write.sum
    load_sectors_per_request: float | None  # l1tex__t_sectors / l1tex__t_requests, global loads (None: no load)
    store_sectors_per_request: float | None
    load_ideal: float | None = None         # sectors per request of a warp reading consecutively at the widest load
    store_ideal: float | None = None
    achieved_occupancy_pct: float | None = None     # sm__warps_active.avg.pct_of_peak_sustained_active
    theoretical_occupancy_pct: float | None = None  # sm__maximum_warps_per_active_cycle_pct
    l2_hit_pct: float | None = None                 # lts__t_sector_hit_rate.pct


@dataclass
class CountersSummary:
    """The counters' pass (grader submit --counters): the timed call replayed once under Nsight
    Compute, in a process that runs none of the submission's host code. It never changes the
    fraction or the tier; where it could not run, problem says why and kernels is empty."""

    tool: str = ""                          # ncu's version line
    kernels: list[KernelCounters] = field(default_factory=list)
    model_bytes: int | None = None          # the byte model at the timed shape
    dram_over_model: float | None = None    # the kernels' DRAM bytes over the byte model's
    seconds: float = 0.0                    # the pass's wall time
    problem: str = ""                       # why there are no counters ("" when there are)


@dataclass
class BuildSummary:
    """The submission's build, as result.json's `build` (grade/steps.py)."""

    ok: bool = False
    cached: bool = False               # the library came from the build cache
    seconds: float = 0.0
    compiler: str = ""                 # the compiler's version line
    resources: list[dict] = field(default_factory=list)   # per kernel: registers, spills, shared memory (ptxas)
    messages: list[dict] = field(default_factory=list)    # the compiler's errors and warnings, located
    reads_confined: bool = False       # its compilers ran behind the build's file-system wall (Landlock)
    wall: str = ""                     # that wall's detail: "Landlock ABI 7; its own root", or why not


@dataclass
class SassSummary:
    """What the submission's compiled code shows, kernel by kernel (the findings step)."""

    kernels: dict = field(default_factory=dict)   # kernel -> its facts (analysis/sass.py), `launched` among them
    unavailable: str = ""              # why there are none: the tool is missing, the object unreadable


@dataclass
class DeviceSummary:
    """The machine a grade ran on (the pipeline): the GPU as its timing read it, the children's GPU,
    the GPU's state before and after, and the compiler."""

    name: str = ""                     # the GPU's name ("" without a timing)
    capability: str = ""
    sms: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    cuda_runtime: str = ""
    gpu: str | None = None             # the CUDA_VISIBLE_DEVICES entry the children saw
    before: dict | None = None         # nvidia-smi's reading before the grade and after it (gpuinfo.py)
    after: dict | None = None
    compiler: str = ""                 # nvcc's version line, or the host compiler's (the emulator)


@dataclass
class PrivateInputs:
    """Where a GPU grade's random cases came from (exercises/pool.py)."""

    private: bool = True
    drawn_ahead: bool = False          # by the detached process, before this grade started
    batch: bool = False                # one store for a whole batch (or `grader samples`)
    about: str = ("random cases drawn from a seed chosen for this run, never shown to a process that runs "
                  "the submission's code")


@dataclass
class SandboxSummary(ChildSandbox):
    """The protections in force: what the judged child reports (ChildSandbox, claimed), and what the
    parent saw and measured itself."""

    peak_rss_mib: int | None = None    # the child's peak resident memory (the parent's wait4)
    audit: dict = field(default_factory=dict)            # audit mode: system call -> times seen
    audit_open_paths: list[str] = field(default_factory=list)
    inputs: PrivateInputs | None = None
    recorder: ChildSandbox | None = None   # a GPU grade's recording child (the measuring one is the above)
    lowered_limits: dict = field(default_factory=dict)   # limit -> what was wanted and what an inherited limit left
    adapted: list[str] = field(default_factory=list)     # what the grader changed to fit this machine, and why
    root: str = ""     # the emulator's child: "its own root" (a path outside it does not exist), or why not; "": none tried
    limits: dict = field(default_factory=dict)   # what bounds the child's processes, files and CPU, and a build's
    #                                              (its memory: host_memory_how): a control group or an rlimit, the values
    environment: list[str] = field(default_factory=list)   # the names of the child's variables (core/environment.py)
    etc: str = ""      # what of /etc the builds and the children may read (core/fswall.etc_view)
    pids: str = ""     # the emulator's child: "its own PID namespace" (its /proc shows its own processes alone), or why not

    def unconfined_reads(self) -> str:
        """Why a child that ran submission code read unconfined (this, the judged child, or on a GPU the
        recorder, where the host code runs), or "" when each was behind the file-system wall."""
        for child in (self, self.recorder):
            if child is not None and not child.reads_confined:
                return child.reads_detail or "the child did not say"
        return ""


@dataclass
class OutputSummary:
    """What the submission printed (the recorder's host code, then the measuring process's device
    printf), head and tail kept under the rubric's cap."""

    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    dropped_bytes: int = 0


@dataclass
class FloorSummary:
    """The copy floor the fraction is of (the timing's verdict)."""

    kind: str
    gbps: float
    copies: dict = field(default_factory=dict)    # copy kind -> GB/s


@dataclass
class Result:
    exercise: str                           # the rubric's exercise name
    submission: dict                        # path and sha256 of the file graded
    backend: str                            # cuda or emulator
    status: Outcome                         # graded, compile_error, rejected, crashed, timeout, infrastructure_error
    grader_version: str                     # the grader that wrote this
    correct: bool | None = None             # every check passed (None: not graded)
    tier: Tier | None = None                # gold, silver, below (None: not timed, or not correct)
    borderline: bool = False                # the 95% interval reaches a tier line's band (tiers.borderline_band)
    fraction: float | None = None           # of the copy floor (timing.fraction)
    fraction_ci: list[float] | None = None  # its 95% interval, [low, high]
    gbps: float | None = None               # the submission's effective bandwidth at the timed shape
    floor: FloorSummary | None = None       # what the fraction is of
    cases: list[CaseResult] = field(default_factory=list) # every check, the chain and the timed sets' verification
    diagnosis: list[DiagnosisEntry] = field(default_factory=list) # what the wrong outputs look like, named
    flags: list[str] = field(default_factory=list) # exceeds_copy_floor, too_slow_to_time, screened_out, blocked_by_sandbox, ...
    device: DeviceSummary = field(default_factory=DeviceSummary) # the machine
    message: str = ""                  # the one-paragraph verdict for anything not graded
    feedback: str = ""                 # the rubric's text for the tier, or why no tier
    build: BuildSummary | None = None       # the submission's build (None: not built)
    sass: SassSummary | None = None         # what its compiled code shows (graded kernels only)
    timing: TimingResult | None = None      # the measurement (a correct kernel on a GPU)
    output: OutputSummary = field(default_factory=OutputSummary) # what the submission printed
    phases: dict[str, float] = field(default_factory=dict) # wall seconds: build, children, checking (docs/benchmarks.md)
    sandbox: SandboxSummary | None = None                     # None: no child said what was in force
    notes: list[SourceNote] = field(default_factory=list)   # where in the file it went wrong, when known
    findings: list[FindingEntry] = field(default_factory=list)   # what the compiled code shows about speed
    launches: list[Launch] = field(default_factory=list)   # the configuration each kernel got, its occupancy
    launches_timed_shape: bool = True       # the launches are the timed shape's (else the largest check's)
    counters: CountersSummary | None = None  # what the hardware counted (None: not asked for)
    maps: list[MistakeMap] = field(default_factory=list)   # where each failed check's output went wrong
    seconds: float = 0.0                    # the whole grade's wall time
    schema: str = SCHEMA                    # grader.result/2

    @property
    def graded(self) -> bool:
        """The checks ran (correct or not): the grade did not end before them."""
        return self.status == Outcome.GRADED

    @property
    def word(self) -> str:
        """The grade in one word (core/outcomes.outcome_word): the tier, correct, incorrect, or why not graded."""
        return outcome_word(self.status, self.correct, self.tier)

    @property
    def status_text(self) -> str:
        """The status in words: graded, did not compile, timed out, ..."""
        return Outcome(self.status).text

    @property
    def compile_errors(self) -> list:
        """The compiler's messages of a grade that ended at the build (none for any other)."""
        return self.build.messages if self.status == Outcome.COMPILE_ERROR and self.build is not None else []

    def stop(self, status: Outcome, message: str) -> None:
        """Mark this result as not graded (compile error, rejected, crashed, timeout...), saying why."""
        self.status = Outcome(status)          # an unknown status is a ValueError
        self.message = message
        self.correct = None

    def end(self, stop: Stop) -> None:
        """End this result with what a step found (its status, message, notes and flags)."""
        self.stop(stop.status, stop.message)
        self.notes += stop.notes
        self.flags += [f for f in stop.flags if f not in self.flags]

    @property
    def exit_code(self) -> int:
        if self.status == Outcome.GRADED:
            return Exit.CORRECT if self.correct else Exit.INCORRECT
        if self.status == Outcome.INFRASTRUCTURE_ERROR:
            return Exit.INFRASTRUCTURE
        return Exit.NOT_GRADABLE

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        ordered = {"schema": data.pop("schema")}
        ordered.update(data)
        return ordered


def result_from_json(data: dict[str, Any]) -> Result:
    """A Result read back from its result.json document (what a resumed batch reuses)."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document (schema {data.get('schema')!r})")
    return from_data(Result, data)
