"""What grading produces: small typed objects, and result.json built from them.

A student's failure is a Result with a status, never an exception.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from grader.core.errors import Exit
from grader.core.typed import from_data

SCHEMA = "grader.result/1"
STATUSES = ("graded", "compile_error", "rejected", "crashed", "timeout", "infrastructure_error")
# Each status in words, for reports and platforms.
STATUS_TEXT = {
    "graded": "graded",
    "compile_error": "did not compile",
    "rejected": "not accepted for grading",
    "crashed": "crashed",
    "timeout": "timed out",
    "infrastructure_error": "could not be graded on this machine",
}



@dataclass
class CaseResult:
    name: str
    shape: list[int]
    pattern: str
    seed: int
    passed: bool | None            # None: not run (an earlier case stopped the process)
    bad: int = 0
    total: int = 0
    unwritten: int = 0
    first_mismatch: dict | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    note: str = ""
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
    code: str
    message: str
    advice: str
    case: str = ""


@dataclass
class SourceNote:
    """A problem at a place in the student's file (a compile error, a refusal, a blocked call):
    what CI annotations point at. line is None when there is no single line to blame."""

    file: str
    line: int | None
    title: str
    message: str


@dataclass
class FindingEntry:
    """What the compiled code shows about speed (a rubric finding that holds), with evidence."""

    code: str
    kernel: str
    message: str
    advice: str
    evidence: list[str] = field(default_factory=list)     # "line 9: LDG.E R4, desc[UR6][R6.64]"


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
    bytes_moved: int
    samples: int
    stop_reason: str
    seconds: float
    submission_ms: float
    submission_gbps: float
    floor_kind: str
    floor_gbps: float
    copies: list[CopyTiming]
    fraction: float
    fraction_ci: list[float]
    informational_kind: str
    informational_fraction: float
    chain_ms: float | None
    chain_gbps: float | None
    chain_bytes: int | None = None
    chain_title: str = ""
    baseline: str = ""                 # the PyTorch expression timed against the submission
    baselines: list[BaselineTiming] = field(default_factory=list)   # at the timed shape first
    baseline_max_abs_diff: float | None = None   # submission's output against PyTorch's, on the device


@dataclass
class Result:
    exercise: str
    submission: dict
    backend: str
    status: str
    grader_version: str
    correct: bool | None = None
    tier: str | None = None
    borderline: bool = False
    fraction: float | None = None
    fraction_ci: list[float] | None = None
    gbps: float | None = None
    floor: dict | None = None
    cases: list[CaseResult] = field(default_factory=list)
    diagnosis: list[DiagnosisEntry] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    device: dict = field(default_factory=dict)
    message: str = ""                  # the one-paragraph verdict for anything not graded
    feedback: str = ""                 # the rubric's text for the tier, or why no tier
    build: dict = field(default_factory=dict)
    timing: TimingResult | None = None
    output: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)     # wall seconds of build, child run, checking
    sandbox: dict = field(default_factory=dict)    # the protections in force in the child (seccomp, limits...)
    notes: list[SourceNote] = field(default_factory=list)   # where in the file it went wrong, when known
    findings: list[FindingEntry] = field(default_factory=list)   # what the compiled code shows about speed
    launches: list[Launch] = field(default_factory=list)   # the configuration each kernel got, its occupancy
    maps: list[MistakeMap] = field(default_factory=list)   # where each failed check's output went wrong
    seconds: float = 0.0
    schema: str = SCHEMA

    def stop(self, status: str, message: str) -> None:
        """Mark this result as not graded (compile error, rejected, crashed, timeout...), saying why."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self.status = status
        self.message = message
        self.correct = None

    @property
    def exit_code(self) -> int:
        if self.status == "graded":
            return Exit.CORRECT if self.correct else Exit.INCORRECT
        if self.status == "infrastructure_error":
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
