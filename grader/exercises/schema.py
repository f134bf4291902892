"""The rubric's schema: every key as a typed field with its description (``doc``) and default.

The dataclasses here are what a rubric YAML becomes (rubric.py loads and checks it); describe()
lists every key for docs/rubric-keys.md and `grader rubric-keys`. Nothing here reads a file.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Literal

from grader.core.exprs import Expr
from grader.core.limits import OUTPUT_CAP_BYTES, TIME_LIMIT_S
from grader.core.locations import DEFAULT_EXERCISE, rubrics_dir
from grader.core.outcomes import Tier
from grader.core.signature import Signature, parse_signature
from grader.core.typed import doc_field as _doc
from grader.core.typed import type_hints

DEFAULT_RUBRIC = rubrics_dir() / f"{DEFAULT_EXERCISE}.yaml"

# The diagnosis codes the core emits for any exercise; an exercise adds its mistakes (the codes of
# its hypotheses) and unwritten_<dim> for each dimension of an output. The rubric's feedback
# explains each.
CORE_CODES = (
    "unwritten_elements",
    "writes_past_output",
    "writes_before_output",
    "reads_past_input",
    "row_stride",
    "col_stride",
    "order_dependent",
    "nan_output",
    "near_miss",
    "wrong_values",
    "launch_error",
    "writes_into_input",
    "timed_outputs_differ",
    "guard_past_end",           # verdict/causes.py: the student's own line, read from the source
    "guard_stops_short",
    "race_lost_update",
    "race_missing_barrier",
    "unzeroed_workspace",       # verdict/workspace.py: memory of the student's own that nothing resets
    "stale_workspace",
    "grid_rounds_down",         # verdict/coverage.py: the launch that leaves elements unwritten
    "no_launch",
    "block_too_small",
    "tail_start",
    "shifted_index",            # verdict/causes.py: a loop numbered from 1, one access not shifted back
    "partial_warp_reduce",      # verdict/causes.py: a warp's shuffle reduction starting below 16
    "reads_unwritten_shared",   # verdict/diagnosis.py: outputs carrying the emulator's fill of shared memory
)
TIER_NAMES = tuple(Tier)         # gold, silver, below (grader/core/outcomes.py)
FLOOR_KINDS = ("copy_scalar", "copy_vec4", "memcpy")


@dataclass(frozen=True)
class Tensor:
    name: str = _doc("The tensor's name; a kernel or launcher parameter of this name is given its pointer.")
    shape: list[Expr] = _doc("Its shape, outermost first, as expressions of the dimensions: [rows, cols].")
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
    grid: list[Expr] = _doc("The default launch's grid (x, y, z), as expressions of the dimensions.",
                            default_factory=lambda: [Expr("1")])
    block: list[Expr] = _doc("The default launch's block (x, y, z).", default_factory=lambda: [Expr("256")])
    launcher: str = _doc("Signature of the optional host launcher the grader calls instead of the default launch "
                         "(its last parameter is the cudaStream_t to launch on); empty: none.", default="")
    name_required: bool = _doc(
        "Whether the exercise asks for the kernel by its name even from a file with the launcher (the course page "
        "names it). false: a file that defines the launcher is graded whatever its kernels are called, so code "
        "brought from elsewhere needs only a launcher; a file without the launcher always needs the kernel, by "
        "name, since the default launch calls it.", default=False)

    # Parsed once, on first use (the loader's check is the first), and kept: every step that needs a
    # parameter list or a type asks these, none parses the rubric's text again.
    @functools.cached_property
    def parsed(self) -> Signature:
        """The kernel's signature, parsed."""
        return parse_signature(self.signature)

    @functools.cached_property
    def parsed_launcher(self) -> Signature | None:
        """The launcher's signature, parsed (None: the exercise has no launcher)."""
        return parse_signature(self.launcher) if self.launcher else None

    @property
    def launcher_name(self) -> str:
        return self.parsed_launcher.name if self.parsed_launcher else ""


@dataclass(frozen=True)
class Tolerance:
    rtol: float = _doc("Relative tolerance against the float64 reference.", default=1e-5)
    atol: float = _doc("Absolute tolerance against the float64 reference.", default=1e-6)
    scale: Expr = _doc("Both tolerances are multiplied by this expression of the case's dimensions (for a "
                       "reduction, the error grows with its length: `sqrt(R)`).", default=Expr("1"))


@dataclass(frozen=True)
class Variant:
    code: str = _doc("The diagnosis code this mistake is named by (feedback.diagnosis explains its fix).")
    output: str = _doc(
        "What a kernel with this mistake writes to the output, an array expression (docs/exercises.md): numpy "
        "arithmetic over the input tensors (float64), the dimensions, `answer` (the reference's answer for the "
        "output), the terms, the fitted parameter and functions such as gelu_erf, erf, tanh, sum(a, axis), "
        "reshape, concat, interleave, arange: `gelu_erf(x)`, `k * answer`, `sum(gelu_erf(x), 1)`.")
    fit: dict[str, list[float]] = _doc(
        "At most one parameter the output expression names, with its bounds [low, high]: fitted to the student's "
        "output (least squares in closed form where the output is linear in it, else a bounded 1-D search) before "
        "the variant is compared: `{k: [-8, 8]}`.", default_factory=dict)
    defined: str = _doc("Where the variant is defined, a boolean array expression broadcast to the output's "
                        "shape, without the fitted parameter (empty: everywhere): `arange(rows)[:, None] < cols`.",
                        default="")
    says: str = _doc("What the output shows, for the diagnosis' message, with the fitted parameter in braces: "
                     "`every output is {k:.3f} times the answer` (empty: a count of the elements it explains).",
                     default="")
    meanings: dict[str, str] = _doc(
        "Fitted values that mean a known slip, each with what it means: a fit within 0.1% of one adds it to the "
        "message (`2: the 0.5 is missing` says `every output is 2.000 times the answer: the 0.5 is missing`).",
        default_factory=dict)
    at: list[str] = _doc(
        "Where the student's line for this mistake is, tried in order (the first found is cited in the message): "
        "a function's name, the line of its call (`erff`, `expf`, `pow`); `store`, the line writing the output; "
        "`accumulate`, the line adding into a sum; `seed`, the line starting that sum; `table`, the line reading "
        "a cos/sin table; `position`, the line computing the table's row; `rotation`, the line using both "
        "values read from the tables. Empty: `store`.", default_factory=list)


@dataclass(frozen=True)
class Hypotheses:
    terms: dict[str, str] = _doc(
        "Named array expressions the variants share, in order (each may use the ones above it): "
        "`v: x + bias`.", default_factory=dict)
    variants: list[Variant] = _doc(
        "The mistakes students make in the exercise's formula, in the order they are tried: a wrong output that "
        "matches one (98% of the elements it defines, within 4 times the tolerance, and more than the right "
        "answer matches) is named by its code.", default_factory=list)


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
    args: list[Expr | str] = _doc("Its arguments: tensor names (pointers) and expressions (values).",
                                  default_factory=list)
    output: str = _doc("The tensor it writes, compared with the reference's value of the same name.", default="")


@dataclass(frozen=True)
class Step:
    kernel: str = _doc("A reference kernel: reference/<exercise>/kernels.cu exports grader_ref_<kernel>.")
    args: list[Expr | str] = _doc("Its arguments: tensor names (pointers) and expressions (values).")


@dataclass(frozen=True)
class CalibrationRun:
    name: str = _doc("What the run is called in the table (`staged: addBiasRow, geluErf, addResidual`).")
    steps: list[Step] = _doc("The reference kernels launched, in order, as one timed sample.")
    bytes: Expr = _doc("Its byte model: bytes the steps must move at the timed shape, an expression.")
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
    bytes: Expr = _doc("The byte model: bytes the kernel must move at the timed shape, an expression of the "
                      "dimensions. The fraction compares its bandwidth with the floor's.")
    byte_model: str = _doc("The byte model in words, for reports.", default="")
    chain_bytes: Expr = _doc("The chain's byte model (empty: the chain is not timed).", default=Expr(""))
    copy_floats: Expr = _doc("Floats each floor copy reads and writes (its bytes: 8 per float).")
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
    target_half_width: float = _doc("Stop once the 95% interval of the fraction is this narrow (relative half-width).",
                                    default=0.005)
    tier_half_width: float = _doc(
        "Stop sooner, once the 95% interval is at most this narrow (relative half-width) and lies clear of every "
        "tier line, and further than this from the floor (1.0): more rounds could not change the tier under any "
        "borderline_policy (a kernel near the floor is sampled to target_half_width). "
        "0: only target_half_width stops the sampling early.", default=0.01)
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
    floor_placement: Literal["own", "submission"] = _doc(
        "Where the floor's copies read and write. own: floor_buffers pairs of buffers of their own. submission: "
        "each timed input set's largest input tensor into its largest output tensor (copy_floats of each), the "
        "device memory the submission's own launches use, so that where those buffers lie moves the floor and "
        "the submission alike and the fraction keeps still from one process to the next; it needs an input and "
        "an output tensor of at least copy_floats floats at the timed shape (chain tensors aside).", default="own")
    hold_rounds: bool = _doc(
        "Enqueue each batch of timed rounds behind a one-thread kernel that holds the stream, then release it: "
        "every region's start event and launch are queued before the GPU reaches them, so no sample counts the "
        "host's time to launch (on a busy host, as beside a batch's builds and checks, the first sample after each "
        "synchronisation did). A hold lets go by itself after 50 ms; once one did (a call waited on the stream: a copy "
        "from pageable memory, the device heap's poisoning), the rest of the sampling runs unheld. false: the rounds "
        "run as they are enqueued.", default=True)
    bootstrap: int = _doc("Bootstrap resamples for the interval.", default=1000)


@dataclass(frozen=True)
class Tiers:
    gold: float = _doc("Fraction of the floor at or above which the tier is gold.", default=0.90)
    silver: float = _doc("Fraction of the floor at or above which the tier is silver.", default=0.75)
    borderline_policy: Literal["benefit", "median", "lower", "upper"] = _doc(
        "How a kernel near a tier's line is graded. benefit: from the interval, in the student's favour and the "
        "same every run: a kernel whose interval's upper end reaches within borderline_band of a line gets that "
        "line's tier, wherever in the band its median falls. median, lower, upper: the median, the interval's "
        "lower or its upper end against the line itself (a kernel on the line then changes tier from run to run: "
        "its interval moves by about 0.5% between grades, a copy's speed by up to 2.7% between processes).",
        default="median",
    )
    borderline_band: float = _doc(
        "Width of the band below each tier's line, as a share of the line (0.03: from 0.97 x the line), within "
        "which an interval counts as on the line: borderline in the result, and given the line's tier under the "
        "benefit policy. Wider than what moves between processes (a copy's placement, up to 2.7%), so a kernel "
        "whose true fraction is on the line is never graded below it.", default=0.03)
    exceeds_floor_tier: Literal["silver", "below"] = _doc(
        "Tier of a kernel measured faster than the copy floor beyond the noise (never gold).", default="below"
    )
    exceeds_floor_margin: float = _doc(
        "How far above the floor (1.0) the fraction's whole interval must lie for the kernel to count as faster "
        "than it (exceeds_floor_tier). The interval is one process's rounds; where that process's buffers lie in "
        "device memory moves a copy's bandwidth by up to 2.7% from one process to the next, which the interval "
        "does not see, and a correct kernel that moves what a copy moves measured 1.006 (interval clear of 1.0) "
        "in one grade of a batch on an H100.", default=0.03)

    def decision_lines(self) -> list[float]:
        """The fractions where the tier changes under borderline_policy: each line, or under benefit
        the bottom of its band (the timing child stops sampling only once its interval is clear of them)."""
        scale = 1.0 - self.borderline_band if self.borderline_policy == "benefit" else 1.0
        return [self.silver * scale, self.gold * scale]


@dataclass(frozen=True)
class Limits:
    time_limit_s: float = _doc("Wall time allowed for one submission's child process.", default=TIME_LIMIT_S)
    output_cap_bytes: int = _doc("Bytes of the child's stdout and of its stderr kept (half head, half tail).",
                                 default=OUTPUT_CAP_BYTES)
    host_memory_mib: int = _doc(
        "Host memory (MiB) the child may take beyond what the grader itself holds once loaded (torch, the CUDA context, "
        "the outputs' shared area), counted whole where the machine gives the grader a control group (shared mappings, "
        "a memfd, /dev/shm), else by RLIMIT_AS where the child holds no CUDA context, else private memory alone "
        "(RLIMIT_DATA; result.json's sandbox.host_memory_how says which); past it the run is reported.", default=2048)
    device_heap_mib: int = _doc(
        "Size of the device heap that in-kernel malloc draws from (cudaLimitMallocHeapSize), MiB; the CPU "
        "emulator's device malloc has the same cap.", default=8)
    static_device_mib: int = _doc(
        "Static __device__ memory (global arrays) a submission may declare, MiB; more is refused before it "
        "runs, since it takes GPU memory the next grader on the same GPU needs.", default=64)
    workspace_mib: int = _doc(
        "Device memory a launcher may allocate for itself (cudaMalloc, cudaMallocAsync, thrust's and CUB's "
        "temporary storage), MiB, over all its calls: the grader gives it buffers of those sizes, poisoned before "
        "every call; more is refused, naming the limit.", default=256)
    build_time_s: float = _doc("Wall time one build (nvcc or g++) may take; past it the build is the student's "
                               "timeout, naming the compiler stage it was in (the machine's only where the build had "
                               "too little CPU on a busy machine).", default=120.0)
    build_memory_mib: int = _doc("Memory a build may take, MiB: the whole build's (its control group, every compiler "
                                 "counted, where the machine gives one) and the address space of each compiler "
                                 "process (RLIMIT_AS).", default=8192)
    build_file_mib: int = _doc("Size of each file a build may write, MiB (RLIMIT_FSIZE), and of its outputs together "
                               "before they are kept in the cache: a large initialised array is written whole into "
                               "the object file; more is the student's compile_error naming this key.", default=256)
    cache_max_mib: int = _doc(
        "Size of the build cache, MiB, beyond which the least recently used builds are pruned after a grade "
        "(GRADER_CACHE_MAX_MIB overrides it).", default=2048)
    require_seccomp: bool = _doc(
        "Refuse to grade (infrastructure_error) where the system-call filter cannot be installed, instead of "
        "grading with the protections that remain (which result.json lists under sandbox).", default=False)
    require_read_wall: bool = _doc(
        "Refuse to grade (infrastructure_error) where the file-system wall (Landlock: the child reads only "
        "what its grade needs, never the class folder, a report or the cache) cannot be put up, instead of "
        "grading with reads unconfined (result.json's sandbox.reads_confined says which).", default=False)
    drop_privileges: bool = _doc("When the grader runs as root, the child drops to uid 65534 before loading "
                                 "the submission.", default=True)


@dataclass(frozen=True)
class Emulator:
    verify_timed_shape: bool = _doc("Also verify the timed shape on the CPU emulator.", default=True)
    reverse_order_check: bool = _doc("Run each check again in reverse block and thread order and compare.", default=True)


# What Nsight Compute counted, as findings' facts (analysis/findings.py's with_counters): sectors
# per request and their excess over a warp reading consecutively at the kernel's widest access,
# achieved occupancy (and over the theoretical), DRAM throughput, L2 hits, and the timed call's
# DRAM bytes over the byte model's.
COUNTER_FACTS = ("load_sectors_per_request", "store_sectors_per_request", "load_sector_excess",
                 "store_sector_excess", "achieved_occupancy_pct", "achieved_occupancy_ratio", "dram_pct", "l2_hit_pct",
                 "dram_over_model")
FINDING_FACTS = ("global_loads", "max_load_bytes", "min_load_bytes", "global_stores", "max_store_bytes", "div64",
                 "double_ops", "local_ops", "barriers", "shared_ops", "registers", "spill_bytes",
                 # from the launches the run saw (none for `grader explain`, which runs nothing)
                 "threads_per_block", "blocks", "blocks_per_sm", "occupancy", "gpu_fill", "launch_configs",
                 # from the hardware's counters (grader submit --counters: Nsight Compute on the timed call)
                 *COUNTER_FACTS)


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
    diagnosis: dict[str, str] = _doc("How to fix each diagnosed mistake, by diagnosis code. Code in backticks is code "
                                     "to add: where the student's file already holds it, that sentence is replaced by "
                                     "one saying so, with the line.", default_factory=dict)
    no_gpu: str = _doc("What the report says when performance could not be graded.",
                       default="Performance is graded only on a GPU.")


@dataclass(frozen=True, kw_only=True)
class Rubric:
    exercise: str = _doc("Identifier of the exercise; its reference lives in reference/<exercise>/.")
    title: str = _doc("Title shown in reports.")
    dims: dict[str, str] = _doc("The named dimensions, each with what it is (shown to students).")
    tensors: list[Tensor] = _doc("The kernel's tensors, inputs and outputs.")
    derived: dict[str, Expr] = _doc("Values computed from the dimensions (`n: rows * cols`), usable wherever a "
                                   "dimension is.", default_factory=dict)
    hypotheses: Hypotheses = _doc("The exercise's usual mistakes, each a variant of the reference the grader "
                                  "computes on the case's inputs: what names a wrong output's cause.",
                                  default=Hypotheses())
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

    @property
    def mistakes(self) -> tuple[str, ...]:
        """The codes of the exercise's hypotheses, in the order they are tried."""
        return tuple(v.code for v in self.hypotheses.variants)


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
