"""The exercise and its grading rules, loaded from YAML into typed objects.

Every key has a type, a default where one makes sense, and a description
(``doc``). An unknown key, a wrong type or a missing required key raises
RubricError naming the file, the dotted key and its line.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from grader.errors import RubricError
from grader.locations import rubrics_dir

DEFAULT_RUBRIC = rubrics_dir() / "bias_gelu_fused.yaml"

# The diagnosis codes the grader can emit; the rubric's feedback must explain each.
DIAGNOSIS_CODES = (
    "tanh_gelu",
    "bias_missing",
    "bias_by_row",
    "bias_after_gelu",
    "unwritten_rows",
    "unwritten_cols",
    "unwritten_elements",
    "writes_past_output",
    "writes_before_output",
    "reads_past_input",
    "order_dependent",
    "nan_output",
    "near_miss",
    "wrong_values",
    "launch_error",
)
TIER_NAMES = ("gold", "silver", "below")
FLOOR_KINDS = ("copy_scalar", "copy_vec4", "memcpy")


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class Shape:
    rows: int = _doc("Rows of the row-major input.")
    cols: int = _doc("Columns; the bias has this many floats.")

    def __str__(self) -> str:
        return f"{self.rows} x {self.cols}"


@dataclass(frozen=True)
class Kernel:
    name: str = _doc("Name of the __global__ function the submission must define.", default="biasGeluFused")
    signature: str = _doc(
        "The required signature, shown to students.",
        default="__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, "
        "float* __restrict__ out, size_t cols)",
    )
    launcher: str = _doc("Optional host launcher the grader calls instead of the default launch.", default="launchBiasGeluFused")
    block_threads: int = _doc("Threads per block of the default launch: grid ((cols + T - 1) / T, rows).", default=256)


@dataclass(frozen=True)
class Tolerance:
    rtol: float = _doc("Relative tolerance against the float64 reference.", default=1e-5)
    atol: float = _doc("Absolute tolerance against the float64 reference.", default=1e-6)


@dataclass(frozen=True)
class Checks:
    lesson_shape: Shape = _doc("The lesson's ragged shape, run with the lesson's input pattern.", default=Shape(101, 97))
    chain: bool = _doc("Also check submission + reference addResidual against the float64 chain.", default=True)
    shapes: list[Shape] = _doc(
        "Ragged shapes run with fresh random inputs from every seed.",
        default_factory=lambda: [Shape(1, 1), Shape(1, 1025), Shape(7, 4099), Shape(129, 257)],
    )
    seeds: list[int] = _doc("Seeds for the random inputs.", default_factory=lambda: [1, 2, 3])
    guard_floats: int = _doc("Floats of guard region on each side of the output, filled with a pattern.", default=4096)


@dataclass(frozen=True)
class Timing:
    shape: Shape = _doc("The timed shape.", default=Shape(16384, 1024))
    floats_per_element: float = _doc("Byte model of the submission: floats moved per element (x in, out out).", default=2.0)
    chain_floats_per_element: float = _doc("Byte model of the chain: submission (2) + addResidual (3).", default=5.0)
    floor: list[str] = _doc(
        "Copies measured in the same process; the floor is the fastest. "
        "copy_scalar: the lesson's one-float-per-thread copy; copy_vec4: 16 bytes per thread; memcpy: cudaMemcpyAsync.",
        default_factory=lambda: list(FLOOR_KINDS),
    )
    informational_floor: str = _doc("The copy also reported as information (the lesson's).", default="copy_scalar")
    warmup: int = _doc("Untimed launches of each kernel before sampling.", default=5)
    min_samples: int = _doc("Samples of each kernel before the stopping rule is consulted.", default=50)
    max_samples: int = _doc("Samples of each kernel at most.", default=2000)
    target_half_width: float = _doc("Stop once the 95% interval of the fraction is this narrow (relative half-width).", default=0.005)
    budget_s: float = _doc("Stop once this much wall time was spent sampling (after min_samples).", default=3.0)
    hard_budget_s: float = _doc(
        "Stop even before min_samples once this much wall time was spent: a very slow kernel (far below any "
        "tier) is then graded on the rounds it got.", default=10.0)
    slow_launch_s: float = _doc(
        "If one launch of the submission at the timed shape takes longer than this, it is graded from that one "
        "launch (its output verified, one sample of each copy) instead of sampled.", default=2.0)
    input_sets: int = _doc("Input sets the timed launches rotate over; each set's output is verified.", default=2)
    bootstrap: int = _doc("Bootstrap resamples for the interval.", default=1000)


@dataclass(frozen=True)
class Tiers:
    gold: float = _doc("Fraction of the floor at or above which the tier is gold.", default=0.90)
    silver: float = _doc("Fraction of the floor at or above which the tier is silver.", default=0.75)
    borderline_policy: Literal["median", "lower", "upper"] = _doc(
        "When the interval straddles a threshold: grade the median, the interval's lower or its upper end.",
        default="median",
    )
    exceeds_floor_tier: Literal["silver", "below"] = _doc(
        "Tier of a kernel measured faster than the copy floor beyond the noise (never gold).", default="below"
    )


@dataclass(frozen=True)
class Limits:
    time_limit_s: float = _doc("Wall time allowed for one submission's child process.", default=60.0)
    output_cap_bytes: int = _doc("Bytes of the child's stdout and of its stderr kept (half head, half tail).", default=16384)
    host_memory_mib: int = _doc(
        "Host memory (MiB of private writable memory, RLIMIT_DATA) the child may take beyond what the grader "
        "itself holds once loaded (torch, the CUDA context); past it allocations fail and the run is reported "
        "as using too much host memory.", default=2048)
    device_heap_mib: int = _doc(
        "Size of the device heap that in-kernel malloc draws from (cudaLimitMallocHeapSize), MiB; the CPU "
        "emulator's device malloc has the same cap.", default=8)
    static_device_mib: int = _doc(
        "Static __device__ memory (global arrays) a submission may declare, MiB; more is refused before it "
        "runs, since it takes GPU memory the next grader on the same GPU needs.", default=64)
    build_time_s: float = _doc("Wall time one build (nvcc or g++) may take before it is a compile_error.", default=120.0)
    build_memory_mib: int = _doc("Address space each compiler process may take, MiB (RLIMIT_AS).", default=8192)
    cache_max_mib: int = _doc(
        "Size of the build cache, MiB, beyond which the least recently used builds are pruned after a grade "
        "(GRADER_CACHE_MAX_MIB overrides it).", default=2048)
    require_seccomp: bool = _doc(
        "Refuse to grade (infrastructure_error) where the system-call filter cannot be installed, instead of "
        "grading with the protections that remain (which result.json lists under sandbox).", default=False)
    drop_privileges: bool = _doc("When the grader runs as root, the child drops to uid 65534 before loading "
                                 "the submission.", default=True)


@dataclass(frozen=True)
class Emulator:
    verify_timed_shape: bool = _doc("Also verify the timed shape on the CPU emulator.", default=True)
    reverse_order_check: bool = _doc("Run each check again in reverse block and thread order and compare.", default=True)


FINDING_FACTS = ("global_loads", "max_load_bytes", "min_load_bytes", "global_stores", "max_store_bytes", "div64",
                 "double_ops", "local_ops", "barriers", "shared_ops", "registers", "spill_bytes",
                 # from the launches the run saw (none for `grader explain`, which runs nothing)
                 "threads_per_block", "blocks", "blocks_per_sm", "occupancy", "gpu_fill", "launch_configs")


@dataclass(frozen=True)
class Condition:
    fact: str = _doc(f"A fact read from the compiled kernel: {', '.join(FINDING_FACTS)}.")
    op: Literal["<", "<=", "==", "!=", ">=", ">"] = _doc("How the fact compares with value.")
    value: float = _doc("The number the fact is compared with.")


@dataclass(frozen=True)
class FindingRule:
    code: str = _doc("Identifier of the finding (in result.json and the manifest).")
    when: list[Condition] = _doc("Conditions that must all hold for the finding to be reported.")
    message: str = _doc("What the compiled code shows, with {kernel}, {evidence} (an instruction), {where} "
                        "(', line N' of the student's file, when known), {line} and any fact in braces.")
    advice: str = _doc("What to do about it.")
    measured: str = _doc(
        "Appended when the run was timed on a GPU: the cost measured in the same run, with {gpu}, "
        "{copy_scalar}, {copy_vec4}, {memcpy} (each copy's fraction of the floor) and {fraction}.", default="")
    scope: Literal["kernel", "submission"] = _doc(
        "kernel: judged for each launched kernel; submission: on the launched kernels together (sums of counts, "
        "the widest load), so that a scalar fallback beside a vectorised path is not a finding.", default="kernel")


@dataclass(frozen=True)
class Points:
    correct: float = _doc("Points for a correct kernel (every check passes), in Classroom, Gradescope, "
                          "PrairieLearn and the gradebook.", default=60.0)
    tiers: dict[str, float] = _doc(
        "Points for each tier on top of correctness (gold, silver, below). Only a correct kernel gets a tier, "
        "and only on a GPU: on the emulator these points are not awarded and the feedback says why.",
        default_factory=lambda: {"gold": 40.0, "silver": 25.0, "below": 10.0})

    @property
    def maximum(self) -> float:
        return self.correct + max(self.tiers.values(), default=0.0)


@dataclass(frozen=True)
class Feedback:
    tiers: dict[str, str] = _doc("What to tell a student at each tier (gold, silver, below).", default_factory=dict)
    diagnosis: dict[str, str] = _doc("How to fix each diagnosed mistake, by diagnosis code.", default_factory=dict)
    no_gpu: str = _doc("What the report says when performance could not be graded.", default="Performance is graded only on a GPU.")


@dataclass(frozen=True)
class Rubric:
    exercise: str = _doc("Identifier of the exercise.")
    title: str = _doc("Title shown in reports.")
    kernel: Kernel = _doc("What the submission must define.", default=Kernel())
    tolerance: Tolerance = _doc("Correctness tolerance.", default=Tolerance())
    checks: Checks = _doc("Correctness cases.", default=Checks())
    timing: Timing = _doc("How performance is measured.", default=Timing())
    tiers: Tiers = _doc("Tier thresholds and policy.", default=Tiers())
    limits: Limits = _doc("Resource limits of the child process.", default=Limits())
    emulator: Emulator = _doc("CPU emulation settings.", default=Emulator())
    feedback: Feedback = _doc("Feedback text.", default=Feedback())
    points: Points = _doc("How a result becomes points on grading platforms.", default=Points())
    findings: list[FindingRule] = _doc("What the compiled code (SASS) can show about a kernel's speed, as rules "
                                       "over facts read from it.", default_factory=list)
    path: str = field(default="", metadata={"doc": "Where this rubric was loaded from (set by the loader).", "internal": True})


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_rubric(path: str | Path | None = None) -> Rubric:
    """Load and validate a rubric file (the default exercise when path is None)."""
    p = Path(path) if path is not None else DEFAULT_RUBRIC
    shown = str(path) if path is not None else str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RubricError(shown, "<file>", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(shown, "<file>", f"cannot read it: {exc}") from None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise RubricError(shown, "<file>", f"not valid YAML: {getattr(exc, 'problem', exc)}",
                          line + 1 if line is not None else None) from None
    if node is None:
        raise RubricError(shown, "<file>", "the file is empty")
    rubric = _build(Rubric, node, "", shown)
    rubric = dataclasses.replace(rubric, path=shown)
    _check_semantics(rubric, shown)
    return rubric


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _build(cls: type, node: yaml.Node, prefix: str, path: str) -> Any:
    if not isinstance(node, yaml.MappingNode):
        raise RubricError(path, prefix or "<top>", "expected a mapping of keys", _line(node))
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = key_node.value
        dotted = f"{prefix}.{key}" if prefix else key
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise RubricError(path, dotted, f"unknown key (known here: {known})", _line(key_node))
        values[key] = _convert(hints[key], value_node, dotted, path)
    for name, f in fields.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            dotted = f"{prefix}.{name}" if prefix else name
            raise RubricError(path, dotted, f"missing (required: {f.metadata['doc']})", _line(node))
    return cls(**values)


def _convert(tp: Any, node: yaml.Node, dotted: str, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Shape:
        return _shape(node, dotted, path)
    if dataclasses.is_dataclass(tp):
        return _build(tp, node, dotted, path)
    if origin is list:
        if not isinstance(node, yaml.SequenceNode):
            raise RubricError(path, dotted, "expected a list", _line(node))
        (item,) = typing.get_args(tp)
        return [_convert(item, n, f"{dotted}[{i}]", path) for i, n in enumerate(node.value)]
    if origin is dict:
        if not isinstance(node, yaml.MappingNode):
            raise RubricError(path, dotted, "expected a mapping", _line(node))
        _, vt = typing.get_args(tp)
        return {k.value: _convert(vt, v, f"{dotted}.{k.value}", path) for k, v in node.value}
    if origin is Literal:
        choices = typing.get_args(tp)
        if not isinstance(node, yaml.ScalarNode) or node.value not in choices:
            raise RubricError(path, dotted, f"expected one of {', '.join(choices)}", _line(node))
        return node.value
    if not isinstance(node, yaml.ScalarNode):
        raise RubricError(path, dotted, f"expected a {tp.__name__}, got a {'list' if isinstance(node, yaml.SequenceNode) else 'mapping'}", _line(node))
    value = yaml.safe_load(node.value) if node.style is None else node.value
    if tp is bool:
        if not isinstance(value, bool):
            raise RubricError(path, dotted, f"expected true or false, got {node.value!r}", _line(node))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RubricError(path, dotted, f"expected an integer, got {node.value!r}", _line(node))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RubricError(path, dotted, f"expected a number, got {node.value!r}", _line(node))
        return float(value)
    if tp is str:
        return node.value
    raise RubricError(path, dotted, f"unsupported type {tp}", _line(node))  # pragma: no cover - schema bug


def _shape(node: yaml.Node, dotted: str, path: str) -> Shape:
    # A shape may be written [rows, cols] or {rows: R, cols: C}.
    if isinstance(node, yaml.SequenceNode):
        if len(node.value) != 2:
            raise RubricError(path, dotted, "a shape is [rows, cols]", _line(node))
        rows = _convert(int, node.value[0], dotted + "[0]", path)
        cols = _convert(int, node.value[1], dotted + "[1]", path)
        return Shape(rows, cols)
    return _build(Shape, node, dotted, path)


def _check_semantics(r: Rubric, path: str) -> None:
    def bad(key: str, problem: str) -> None:
        raise RubricError(path, key, problem)

    shapes = [("checks.lesson_shape", r.checks.lesson_shape), ("timing.shape", r.timing.shape)]
    shapes += [(f"checks.shapes[{i}]", s) for i, s in enumerate(r.checks.shapes)]
    for key, s in shapes:
        if s.rows < 1 or s.cols < 1:
            bad(key, f"rows and cols must be at least 1, got {s}")
        if s.rows > 65535:
            bad(key, f"rows become gridDim.y, which is at most 65535; got {s.rows}")
    if not 0 < r.tiers.silver < r.tiers.gold:
        bad("tiers", f"need 0 < silver < gold, got silver {r.tiers.silver} and gold {r.tiers.gold}")
    for i, kind in enumerate(r.timing.floor):
        if kind not in FLOOR_KINDS:
            bad(f"timing.floor[{i}]", f"unknown copy {kind!r} (known: {', '.join(FLOOR_KINDS)})")
    if not r.timing.floor:
        bad("timing.floor", "name at least one copy")
    if r.timing.informational_floor not in FLOOR_KINDS:
        bad("timing.informational_floor", f"unknown copy {r.timing.informational_floor!r}")
    if r.timing.min_samples < 10 or r.timing.max_samples < r.timing.min_samples:
        bad("timing.min_samples", "need 10 <= min_samples <= max_samples")
    if r.timing.hard_budget_s < r.timing.budget_s:
        bad("timing.hard_budget_s", "must be at least timing.budget_s")
    if r.timing.input_sets < 1:
        bad("timing.input_sets", "at least 1")
    if r.kernel.block_threads < 1 or r.kernel.block_threads > 1024:
        bad("kernel.block_threads", "between 1 and 1024")
    if not r.checks.seeds:
        bad("checks.seeds", "name at least one seed")
    for code in r.feedback.diagnosis:
        if code not in DIAGNOSIS_CODES:
            bad(f"feedback.diagnosis.{code}", f"unknown diagnosis code (known: {', '.join(DIAGNOSIS_CODES)})")
    for tier in r.feedback.tiers:
        if tier not in TIER_NAMES:
            bad(f"feedback.tiers.{tier}", f"unknown tier (known: {', '.join(TIER_NAMES)})")
    if r.limits.time_limit_s <= 0:
        bad("limits.time_limit_s", "must be positive")
    for tier, pts in r.points.tiers.items():
        if tier not in TIER_NAMES:
            bad(f"points.tiers.{tier}", f"unknown tier (known: {', '.join(TIER_NAMES)})")
        if pts < 0:
            bad(f"points.tiers.{tier}", "points cannot be negative")
    if r.points.correct < 0:
        bad("points.correct", "points cannot be negative")
    for i, rule in enumerate(r.findings):
        for j, c in enumerate(rule.when):
            if c.fact not in FINDING_FACTS:
                bad(f"findings[{i}].when[{j}].fact", f"unknown fact {c.fact!r} (known: {', '.join(FINDING_FACTS)})")
        if not rule.when:
            bad(f"findings[{i}].when", "name at least one condition")


def describe(cls: type = Rubric, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, description) for every key, for the README and `grader rubric-keys`."""
    rows = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            rows.append((key, "", f.metadata["doc"]))
            rows.extend(describe(tp, key))
            continue
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is list else None
        if item is not None and dataclasses.is_dataclass(item):        # a list of records: each record's keys
            default = f"{len(f.default_factory())} entries" if f.default_factory is not dataclasses.MISSING else ""
            rows.append((key, default, f.metadata["doc"]))
            rows.extend(describe(item, f"{key}[]"))
            continue
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        rows.append((key, default, f.metadata["doc"]))
    return rows
