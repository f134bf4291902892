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
from typing import Any, Callable, Literal

import yaml

from grader.core.errors import RubricError, UsageError
from grader.core.locations import rubrics_dir
from grader.core.typed import type_hints

DEFAULT_RUBRIC = rubrics_dir() / "bias_gelu_fused.yaml"

# The diagnosis codes the core emits for any exercise; an exercise adds its mistakes (codes its
# reference models) and unwritten_<dim> for each dimension of an output. The rubric's feedback
# explains each.
CORE_CODES = (
    "unwritten_elements",
    "writes_past_output",
    "writes_before_output",
    "reads_past_input",
    "order_dependent",
    "nan_output",
    "near_miss",
    "wrong_values",
    "launch_error",
    "writes_into_input",
    "timed_outputs_differ",
)
TIER_NAMES = ("gold", "silver", "below")
FLOOR_KINDS = ("copy_scalar", "copy_vec4", "memcpy")


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class Tensor:
    name: str = _doc("The tensor's name; a kernel or launcher parameter of this name is given its pointer.")
    shape: list[str] = _doc("Its shape, outermost first, as expressions of the dimensions: [rows, cols].")
    role: Literal["in", "out"] = _doc("in: drawn by the reference's input generator; out: written by the kernel "
                                      "and compared with the reference's value of the same name.", default="in")
    dtype: Literal["float32"] = _doc("Element type.", default="float32")
    init: Literal["poison", "zero"] = _doc(
        "How an output starts: poison (a NaN no arithmetic produces, so an unwritten element shows) or zero (for "
        "kernels that accumulate, with atomicAdd say).", default="poison")
    chain: bool = _doc("Exists only in cases that run the chain (the `chain` key).", default=False)


@dataclass(frozen=True)
class Kernel:
    name: str = _doc("Name of the __global__ function the submission must define.")
    signature: str = _doc("Its required signature, shown to students; each parameter is given the tensor or the "
                          "dimension (or derived value) of its name.")
    grid: list[str] = _doc("The default launch's grid (x, y, z), as expressions of the dimensions.",
                           default_factory=lambda: ["1"])
    block: list[str] = _doc("The default launch's block (x, y, z).", default_factory=lambda: ["256"])
    launcher: str = _doc("Signature of the optional host launcher the grader calls instead of the default launch "
                         "(its last parameter is the cudaStream_t to launch on); empty: none.", default="")

    @property
    def launcher_name(self) -> str:
        from grader.core.signature import parse_signature

        return parse_signature(self.launcher).name if self.launcher else ""


@dataclass(frozen=True)
class Tolerance:
    rtol: float = _doc("Relative tolerance against the float64 reference.", default=1e-5)
    atol: float = _doc("Absolute tolerance against the float64 reference.", default=1e-6)
    scale: str = _doc("Both tolerances are multiplied by this expression of the case's dimensions (for a "
                      "reduction, the error grows with its length: `sqrt(R)`).", default="1")


@dataclass(frozen=True)
class CaseSpec:
    dims: dict[str, int] = _doc("The value of every dimension.")
    inputs: str = _doc("The reference's input generator (reference.py's GENERATORS) to draw the inputs with.",
                       default="random")
    seeded: bool = _doc("Run once for every seed in checks.seeds (false: once, the generator is deterministic).",
                        default=True)
    chain: bool = _doc("Also run the chain (the `chain` key) after the submission.", default=False)


@dataclass(frozen=True)
class Checks:
    cases: list[CaseSpec] = _doc("The correctness cases, in the order they run (the first that fails names the "
                                 "mistake). Ragged sizes catch missing guards.")
    seeds: list[int] = _doc("Seeds for the seeded cases' inputs.", default_factory=lambda: [1, 2, 3])
    guard_floats: int = _doc("Floats of guard region on each side of every output, filled with a pattern.",
                             default=4096)
    order_exact: bool = _doc(
        "The emulator's run in reverse block and thread order must give the same bits (false: the same values "
        "within the tolerance, for kernels that sum in any order, such as with atomics).", default=True)


@dataclass(frozen=True)
class Chain:
    title: str = _doc("What the chain is called in reports (`biasGeluFused + addResidual`).", default="")
    kernel: str = _doc("A reference kernel run after the submission on the same buffers: "
                       "reference/<exercise>/kernels.cu exports it as grader_ref_<kernel>.", default="")
    args: list[str] = _doc("Its arguments: tensor names (pointers) and expressions (values).", default_factory=list)
    output: str = _doc("The tensor it writes, compared with the reference's value of the same name.", default="")


@dataclass(frozen=True)
class Step:
    kernel: str = _doc("A reference kernel: reference/<exercise>/kernels.cu exports grader_ref_<kernel>.")
    args: list[str] = _doc("Its arguments: tensor names (pointers) and expressions (values).")


@dataclass(frozen=True)
class CalibrationRun:
    name: str = _doc("What the run is called in the table (`staged: addBiasRow, geluErf, addResidual`).")
    steps: list[Step] = _doc("The reference kernels launched, in order, as one timed sample.")
    bytes: str = _doc("Its byte model: bytes the steps must move at the timed shape, an expression.")
    note: str = _doc("The byte model in words, printed above the run's row.", default="")


@dataclass(frozen=True)
class Calibrate:
    scratch: list[Tensor] = _doc("Buffers the runs use besides the exercise's tensors (intermediates).",
                                 default_factory=list)
    runs: list[CalibrationRun] = _doc("What `grader calibrate` times at the timed shape beside the copies: the "
                                      "lesson's own kernels.", default_factory=list)
    rounds: int = _doc("Timed rounds of every run and copy (the median is reported).", default=50)


@dataclass(frozen=True, kw_only=True)
class Timing:
    dims: dict[str, int] = _doc("The timed shape: the value of every dimension.")
    bytes: str = _doc("The byte model: bytes the kernel must move at the timed shape, an expression of the "
                      "dimensions. The fraction compares its bandwidth with the floor's.")
    byte_model: str = _doc("The byte model in words, for reports.", default="")
    chain_bytes: str = _doc("The chain's byte model (empty: the chain is not timed).", default="")
    copy_floats: str = _doc("Floats each floor copy reads and writes (its bytes: 8 per float).")
    floor: list[str] = _doc(
        "Copies measured in the same process; the floor is the fastest. "
        "copy_scalar: the lesson's one-float-per-thread copy; copy_vec4: 16 bytes per thread; memcpy: cudaMemcpyAsync.",
        default_factory=lambda: list(FLOOR_KINDS),
    )
    informational_floor: str = _doc("The copy also reported as information (the lesson's).", default="copy_scalar")
    baseline: str = _doc(
        "A PyTorch expression of the input tensors (torch and F = torch.nn.functional in scope), timed in the same "
        "process as the submission and reported as its speedup over PyTorch; its output is compared with the "
        "submission's on the device. Empty: none.", default="")
    baseline_dims: list[dict[str, int]] = _doc(
        "More shapes where the submission and the baseline are timed against each other (a tiny one, where "
        "launch latency decides), by a fixed number of rounds.", default_factory=list)
    baseline_rounds: int = _doc("Rounds at each of baseline_dims.", default=200)
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
    floor_buffers: int = _doc(
        "Buffer pairs each floor copy rotates over: where a buffer lies in device memory moves a copy's "
        "bandwidth by up to 1-2% (seen on an H200 when other processes held memory), so the floor is taken "
        "over several placements, as the submission's launches are over input_sets.", default=4)
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


@dataclass(frozen=True, kw_only=True)
class Rubric:
    exercise: str = _doc("Identifier of the exercise; its reference lives in reference/<exercise>/.")
    title: str = _doc("Title shown in reports.")
    dims: dict[str, str] = _doc("The named dimensions, each with what it is (shown to students).")
    tensors: list[Tensor] = _doc("The kernel's tensors, inputs and outputs.")
    derived: dict[str, str] = _doc("Values computed from the dimensions (`n: rows * cols`), usable wherever a "
                                   "dimension is.", default_factory=dict)
    mistakes: list[str] = _doc("The mistakes the reference models, by diagnosis code, in the order they are tried: "
                               "reference.py's MISTAKES gives what each would output.", default_factory=list)
    chain: Chain = _doc("An optional reference kernel run after the submission (the lesson's fusion chain).",
                        default=Chain())
    calibrate: Calibrate = _doc("The lesson's reference kernels `grader calibrate` times on this GPU, so an "
                                "instructor sees where the tier lines sit before a class submits.",
                                default=Calibrate())
    kernel: Kernel = _doc("What the submission must define and how it is launched.")
    checks: Checks = _doc("Correctness cases.")
    timing: Timing = _doc("How performance is measured.")
    tolerance: Tolerance = _doc("Correctness tolerance.", default=Tolerance())
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


# libyaml's safe loader where PyYAML has it (ten times faster: every submit reads the rubrics)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_rubric(path: str | Path | None = None) -> Rubric:
    """Load and validate a rubric file (the default exercise when path is None)."""
    p = Path(path) if path is not None else DEFAULT_RUBRIC
    shown = str(path) if path is not None else str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise UsageError(f"rubric file not found: {shown}"
                         + (" (a folder; name the rubric's .yaml)" if p.is_dir() else "")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(shown, "<file>", f"cannot read it: {exc}") from None
    try:
        node = yaml.compose(text, Loader=_LOADER)
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
    hints = type_hints(cls)
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
    value = yaml.load(node.value, Loader=_LOADER) if not node.style else node.value  # noqa: S506 - a safe loader
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


def _check_semantics(r: Rubric, path: str) -> None:
    def bad(key: str, problem: str) -> None:
        raise RubricError(path, key, problem)

    _check_exercise(r, bad)
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
    if not 1 <= r.timing.floor_buffers <= 16:
        bad("timing.floor_buffers", "need 1 <= floor_buffers <= 16")
    if not r.checks.seeds:
        bad("checks.seeds", "name at least one seed")
    known = diagnosis_codes(r)
    for code in r.feedback.diagnosis:
        if code not in known:
            bad(f"feedback.diagnosis.{code}", f"unknown diagnosis code (known: {', '.join(known)})")
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


def diagnosis_codes(r: Rubric) -> tuple[str, ...]:
    """Every code a grade against this exercise can carry."""
    axes = [f"unwritten_{d}" for t in r.tensors if t.role == "out" and len(t.shape) >= 2 for d in t.shape
            if d in r.dims]
    return tuple(dict.fromkeys([*r.mistakes, *axes, *CORE_CODES]))


def _check_exercise(r: Rubric, bad: Callable[[str, str], None]) -> None:
    """The exercise's contract: every name resolves, every case gives a launchable grid."""
    from grader.core import exprs
    from grader.core.signature import parse_signature

    if not r.dims:
        bad("dims", "name at least one dimension")
    names = set(r.dims)
    for key, text in r.derived.items():
        _expr_ok(f"derived.{key}", text, names, bad)
        names.add(key)
    tensors = {t.name: t for t in r.tensors}
    if len(tensors) != len(r.tensors):
        bad("tensors", "two tensors have the same name")
    if not any(t.role == "out" and not t.chain for t in r.tensors):
        bad("tensors", "name at least one output (role: out)")
    for i, t in enumerate(r.tensors):
        if not t.shape:
            bad(f"tensors[{i}].shape", "give at least one dimension")
        for j, e in enumerate(t.shape):
            _expr_ok(f"tensors[{i}].shape[{j}]", e, names, bad)
    try:
        sig = parse_signature(r.kernel.signature)
    except ValueError as exc:
        bad("kernel.signature", str(exc))
    if sig.name != r.kernel.name:
        bad("kernel.signature", f"declares {sig.name!r}, but kernel.name is {r.kernel.name!r}")
    _params_ok("kernel.signature", sig.params, tensors, names, bad)
    if r.kernel.launcher:
        try:
            launcher = parse_signature(r.kernel.launcher)
        except ValueError as exc:
            bad("kernel.launcher", str(exc))
        if not launcher.params or not launcher.params[-1].stream:
            bad("kernel.launcher", "the last parameter must be `cudaStream_t stream` (the stream to launch on)")
        _params_ok("kernel.launcher", launcher.params[:-1], tensors, names, bad)
    for key, dims in (("kernel.grid", r.kernel.grid), ("kernel.block", r.kernel.block)):
        if not 1 <= len(dims) <= 3:
            bad(key, "give 1 to 3 expressions (x, y, z)")
        for j, e in enumerate(dims):
            _expr_ok(f"{key}[{j}]", e, names, bad)
    if r.chain.kernel:
        for j, a in enumerate(r.chain.args):
            if a not in tensors:
                _expr_ok(f"chain.args[{j}]", a, names, bad)
        if r.chain.output not in tensors or tensors[r.chain.output].role != "out":
            bad("chain.output", f"name an output tensor (got {r.chain.output!r})")
    if not r.checks.cases:
        bad("checks.cases", "give at least one case")
    generators = set()
    for i, case in enumerate(r.checks.cases):
        _case_ok(f"checks.cases[{i}]", case.dims, r, bad)
        generators.add(case.inputs)
        if case.chain and not r.chain.kernel:
            bad(f"checks.cases[{i}].chain", "the exercise has no chain (the `chain` key)")
    _case_ok("timing.dims", r.timing.dims, r, bad)
    every = dict(tensors)
    for i, t in enumerate(r.calibrate.scratch):
        if t.name in every:
            bad(f"calibrate.scratch[{i}].name", f"{t.name!r} is already a tensor")
        for j, e in enumerate(t.shape):
            _expr_ok(f"calibrate.scratch[{i}].shape[{j}]", e, names, bad)
        every[t.name] = t
    for i, run in enumerate(r.calibrate.runs):
        _expr_ok(f"calibrate.runs[{i}].bytes", run.bytes, names, bad)
        if not run.steps:
            bad(f"calibrate.runs[{i}].steps", "give at least one step")
        for j, step in enumerate(run.steps):
            for k, a in enumerate(step.args):
                if a not in every:
                    _expr_ok(f"calibrate.runs[{i}].steps[{j}].args[{k}]", a, names, bad)
    for key in ("bytes", "copy_floats") + (("chain_bytes",) if r.timing.chain_bytes else ()):
        _expr_ok(f"timing.{key}", getattr(r.timing, key), names, bad)
    _expr_ok("tolerance.scale", r.tolerance.scale, names, bad)
    if r.timing.baseline:
        try:
            compile(r.timing.baseline, "timing.baseline", "eval")
        except SyntaxError as exc:
            bad("timing.baseline", f"not a Python expression: {exc.msg}")
    elif r.timing.baseline_dims:
        bad("timing.baseline_dims", "needs timing.baseline")
    for i, dims in enumerate(r.timing.baseline_dims):
        _case_ok(f"timing.baseline_dims[{i}]", dims, r, bad)
    values = dims_values(r, r.timing.dims)
    if exprs.evaluate(r.timing.copy_floats, values) < 1:
        bad("timing.copy_floats", "must be at least 1 at the timed shape")


def _expr_ok(key: str, text: str, names: set[str], bad: Callable[[str, str], None]) -> None:
    from grader.core import exprs

    try:
        unknown = exprs.names(text) - names
    except exprs.ExprError as exc:
        bad(key, str(exc))
    if unknown:
        bad(key, f"unknown name {sorted(unknown)[0]!r} in {text!r} (known: {', '.join(sorted(names))})")


def _params_ok(key: str, params, tensors: dict, names: set[str], bad: Callable[[str, str], None]) -> None:
    for p in params:
        if p.pointer:
            if p.name not in tensors:
                bad(key, f"parameter {p.name!r} is a pointer but no tensor has that name "
                         f"(tensors: {', '.join(tensors)})")
            if tensors[p.name].role == "out" and p.const_data:
                bad(key, f"parameter {p.name!r} is an output: it cannot point to const")
        elif p.name not in names:
            bad(key, f"parameter {p.name!r} is neither a tensor, a dimension nor a derived value")


def dims_values(r: Rubric, dims: dict[str, int]) -> dict[str, int]:
    """The dimensions of a case with the derived values added."""
    from grader.core import exprs

    values = dict(dims)
    for key, text in r.derived.items():
        values[key] = exprs.evaluate(text, values)
    return values


def default_launch(r: Rubric, values: dict[str, int]) -> tuple[list[int], list[int]]:
    """The default launch's grid and block at these dimensions, each padded to (x, y, z) with 1."""
    from grader.core import exprs

    def three(exprs_: list[str]) -> list[int]:
        return ([int(exprs.evaluate(e, values)) for e in exprs_] + [1, 1, 1])[:3]

    return three(r.kernel.grid), three(r.kernel.block)


def _case_ok(key: str, dims: dict[str, int], r: Rubric, bad: Callable[[str, str], None]) -> None:
    missing = [d for d in r.dims if d not in dims]
    extra = [d for d in dims if d not in r.dims]
    if missing or extra:
        bad(key, f"give every dimension and no other ({', '.join(r.dims)})" +
            (f"; missing {', '.join(missing)}" if missing else f"; unknown {', '.join(extra)}"))
    if any(v < 1 for v in dims.values()):
        bad(key, "every dimension must be at least 1")
    grid, block = default_launch(r, dims_values(r, dims))
    limits = (2**31 - 1, 65535, 65535)
    for axis, (g, top) in enumerate(zip(grid, limits)):
        if not 1 <= g <= top:
            bad(key, f"the default launch's grid is {grid}: gridDim.{'xyz'[axis]} must be 1 to {top}")
    threads = 1
    for b in block:
        threads *= b
    if not 1 <= threads <= 1024:
        bad(key, f"the default launch's block is {block}: 1 to 1024 threads")


def describe(cls: type = Rubric, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, description) for every key, for docs/rubric-keys.md (scripts/docs.py) and `grader rubric-keys`."""
    rows = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = type_hints(cls)[f.name]
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
