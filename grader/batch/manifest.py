"""Sample submissions and the outcome each must get (submissions/<exercise>/manifest.yaml)."""

from __future__ import annotations

import dataclasses
import tempfile
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grader.batch.grading import default_jobs
from grader.core.backend import Backend, named
from grader.core.errors import RubricError
from grader.core.outcomes import Outcome, Tier
from grader.core.results import STATUSES, Result
from grader.exercises.pool import class_store
from grader.exercises.rubric import TIER_NAMES, Rubric, diagnosis_codes
from grader.grade.machine import decide
from grader.grade.pipeline import grade
from grader.grade.request import GradeOptions, GradeRequest
from grader.run.groups import collecting, leftover_processes

_KEYS = {"about", "status", "correct", "diagnosis", "tier", "time_limit_s", "gpu", "emulator", "attack",
         "output_capped", "generate_bytes", "must_not_create", "flags", "message_contains", "build_time_s", "why",
         "max_host_memory_mib", "findings", "counter_findings", "twin"}
_OVERRIDABLE = {"status", "correct", "diagnosis", "tier", "time_limit_s", "flags", "message_contains", "why", "twin"}
# An attack with a twin (its honest kernel, graded in the same run) buys nothing when its fraction is
# no more than the twin's by this much: two lone runs of one kernel differ by 1 to 2% on an H200.
TWIN_NOISE = 0.05


@dataclass
class Expectation:
    file: str
    about: str = ""
    status: Outcome = Outcome.GRADED
    correct: bool | None = None
    diagnosis: list[str] = field(default_factory=list)
    # the tier it must get; a list where its kernel sits at a tier line on some card (a scalar kernel:
    # 0.60 of the floor on an H200, 0.755 on an H100, where silver starts at 0.75)
    tier: Tier | list[Tier] | None = None
    # an attack's honest kernel (a sample file): its fraction may not exceed the twin's, measured in
    # the same run, by more than TWIN_NOISE, whatever tier that is on this card
    twin: str | None = None
    time_limit_s: float | None = None
    attack: bool = False
    output_capped: bool = False
    generate_bytes: int | None = None
    must_not_create: str | None = None
    flags: list[str] = field(default_factory=list)      # flags that must all be set
    message_contains: str | None = None                 # text the result's message must hold
    build_time_s: float | None = None                   # a shorter build time limit for this sample
    max_host_memory_mib: int | None = None              # the child's peak resident memory must stay below
    findings: list[str] | None = None                   # the findings from the compiled code, exactly
    # the findings from the hardware's counters, exactly: the sample is graded with counters on a GPU,
    # and where the counters could not be read (result.counters.problem) that is the problem reported
    counter_findings: list[str] | None = None
    why: str = ""                                       # what decides the outcome (docs/samples.md shows it)

    @property
    def tiers(self) -> list[str]:
        """The tiers it may get (none: any)."""
        return [] if self.tier is None else [self.tier] if isinstance(self.tier, str) else list(self.tier)


@dataclass
class SampleOutcome:
    expectation: Expectation
    result: Result
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


SECTIONS = ("gpu", "emulator")      # a manifest entry's overrides for a GPU run and for the emulator's


def load_manifest(path: Path, backend: Backend, rubric: Rubric) -> list[Expectation]:
    """Expectations for backend, with that backend's overrides applied (a manifest's `gpu:` or
    `emulator:` section); every diagnosis named must be one the rubric's exercise can give."""
    section = SECTIONS[0] if backend.on_gpu else SECTIONS[1]
    known = diagnosis_codes(rubric)
    shown = str(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RubricError(shown, "<file>", f"cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise RubricError(shown, "<top>", "expected a mapping of file name to expected outcome")
    out = []
    for name, entry in data.items():
        exp = _expectation(shown, name, entry, section)
        _check_names(shown, exp, known)
        if exp.twin is not None and exp.twin not in data:
            raise RubricError(shown, f"{name}.twin", f"{exp.twin!r} is not a sample of this manifest")
        if exp.generate_bytes is None and not (path.parent / name).is_file():
            raise RubricError(shown, name, "no such sample file next to the manifest")
        out.append(exp)
    return out


def _expectation(shown: str, name: str, entry, section: str) -> Expectation:
    """One entry of the manifest, its keys known, with its section's overrides applied."""
    if not isinstance(entry, dict):
        raise RubricError(shown, name, "expected a mapping")
    for key in entry:
        if key not in _KEYS:
            raise RubricError(shown, f"{name}.{key}", f"unknown key (known: {', '.join(sorted(_KEYS))})")
    merged = {k: v for k, v in entry.items() if k not in SECTIONS}
    override = entry.get(section) or {}
    for key in override:
        if key not in _OVERRIDABLE:
            raise RubricError(shown, f"{name}.{section}.{key}", "cannot be overridden")
    merged.update(override)
    return Expectation(file=name, **merged)


def _check_names(shown: str, exp: Expectation, known: tuple[str, ...]) -> None:
    """The status, the diagnosis codes and the tiers an entry names are ones a grade can carry."""
    if exp.status not in STATUSES:
        raise RubricError(shown, f"{exp.file}.status", f"unknown status {exp.status!r}")
    for code in exp.diagnosis:
        if code not in known:
            raise RubricError(shown, f"{exp.file}.diagnosis", f"unknown diagnosis code {code!r}")
    for tier in exp.tiers:
        if tier not in TIER_NAMES:
            raise RubricError(shown, f"{exp.file}.tier", f"unknown tier {tier!r}")


def _first_line(message: str) -> str:
    """A result's message as a mismatch quotes it: its first line, whole (a compiler's quoted source
    and caret lines after it are the report's)."""
    return (message.strip().splitlines() or [""])[0]


def judge(exp: Expectation, result: Result, twin: Result | None = None) -> list[str]:
    """What differs between the expected and the actual outcome (empty when it matches). twin: the
    result of the attack's honest kernel in the same run, where the manifest names one."""
    return [*_outcome_problems(exp, result), *_speed_problems(exp, result, twin), *_effect_problems(exp, result),
            *_finding_problems(exp, result), *_memory_problems(exp, result)]


def _outcome_problems(exp: Expectation, result: Result) -> list[str]:
    """The status, whether it is correct, and the diagnosis codes it must carry."""
    problems = []
    if result.status != exp.status:
        problems.append(f"status {getattr(result.status, 'value', result.status)}, expected "
                        f"{getattr(exp.status, 'value', exp.status)}" +
                        (f" ({_first_line(result.message)})" if result.message.strip() else ""))
    if exp.correct is not None and result.correct is not exp.correct:
        problems.append(f"correct {result.correct}, expected {exp.correct}")
    codes = {d.code for d in result.diagnosis}
    for code in exp.diagnosis:
        if code not in codes:
            problems.append(f"diagnosis {code} missing (got {sorted(codes) or 'none'})")
    return problems


def _speed_problems(exp: Expectation, result: Result, twin: Result | None) -> list[str]:
    """The tier, an attack held to its honest twin (or kept from silver and gold), gold under the floor."""
    problems = []
    timed = named(result.backend).times
    if exp.tiers and timed and result.tier not in exp.tiers:
        problems.append(f"tier {result.tier}, expected {' or '.join(exp.tiers)} (fraction {result.fraction})")
    if exp.attack and timed and twin is not None and result.fraction is not None:
        if twin.fraction is None:
            problems.append(f"its honest twin {exp.twin} was not timed ({twin.status}): nothing to hold it to")
        elif result.fraction > twin.fraction * (1 + TWIN_NOISE):
            problems.append(f"an attack bought speed: fraction {result.fraction:.3f} against its honest twin "
                            f"{exp.twin}'s {twin.fraction:.3f}")
    elif exp.attack and not set(exp.tiers) & {Tier.SILVER, Tier.GOLD} and result.tier in (Tier.SILVER, Tier.GOLD):
        problems.append(f"an attack bought {result.tier} (fraction {result.fraction})")
    if result.tier == Tier.GOLD and "exceeds_copy_floor" in result.flags:
        problems.append("gold despite exceeds_copy_floor")
    return problems


def _effect_problems(exp: Expectation, result: Result) -> list[str]:
    """The output capped, no file the payload would create, the flags set, the message's text."""
    problems = []
    if exp.output_capped and not result.output.dropped_bytes:
        problems.append(f"output not capped ({result.output.stdout_bytes} bytes kept)")
    if exp.must_not_create and Path(exp.must_not_create).exists():
        problems.append(f"SIDE EFFECT: {exp.must_not_create} exists: the payload ran")
    for flag in exp.flags:
        if flag not in result.flags:
            problems.append(f"flag {flag} missing (got {result.flags or 'none'})")
    if exp.message_contains and exp.message_contains not in result.message:
        problems.append(f"message lacks {exp.message_contains!r}: {_first_line(result.message)!r}")
    return problems


def _finding_problems(exp: Expectation, result: Result) -> list[str]:
    """The findings from the counters (on a GPU) and from the compiled code, exactly."""
    problems = []
    if exp.counter_findings is not None and named(result.backend).on_gpu and result.status == Outcome.GRADED:
        counted = result.counters
        if counted is None or not counted.kernels:
            problems.append(f"no counters: {counted.problem if counted else 'not read'}")
        else:
            got = sorted({f.code for f in result.findings if f.source == "counters"})
            if got != sorted(exp.counter_findings):
                problems.append(f"counter findings {got or 'none'}, expected {sorted(exp.counter_findings) or 'none'}")
    if exp.findings is not None:
        got = sorted({f.code for f in result.findings if f.source != "counters"})
        if got != sorted(exp.findings):
            why = result.sass.unavailable if result.sass is not None else ""
            problems.append(f"findings {got or 'none'}, expected {sorted(exp.findings) or 'none'} {why}".strip())
    return problems


def _memory_problems(exp: Expectation, result: Result) -> list[str]:
    """The child's peak resident memory under the entry's bound."""
    peak = result.sandbox.peak_rss_mib if result.sandbox is not None else None
    if exp.max_host_memory_mib is not None and peak is not None and peak > exp.max_host_memory_mib:
        return [f"the child peaked at {peak} MiB of host memory, over {exp.max_host_memory_mib}"]
    return []


def run_samples(directory: Path, *, rubric: Rubric, backend: Backend | str, only: list[str] | None = None,
                progress=None, jobs: int | None = None) -> list[SampleOutcome]:
    """Grade the samples the manifest lists (only: those files) and judge each against its entry,
    in the manifest's order. jobs: how many are graded at once (as a batch grades a class: their
    builds overlap, each GPU timing waits for its lane); by default the batch's number on a GPU and
    one on the emulator, whose grades take every core. Each is judged once it and its twin (an
    attack's honest kernel, graded in the same run) are graded, and said then."""
    machine = decide(backend)                   # once, for every sample
    concrete = machine.backend
    if jobs is None:
        jobs = default_jobs(concrete) if concrete.on_gpu else 1
    # On a GPU, one store of private cases for the whole run, drawn by its first grade (as a
    # batch does): every sample is graded on the same secret inputs, none drawing its own.
    shared = class_store(rubric) if concrete.private_cases else None
    try:
        expectations = load_manifest(directory / "manifest.yaml", concrete, rubric)
        by_file = {e.file: e for e in expectations}
        chosen = [e for e in expectations if not only or e.file in only]
        twin_of = {e.file: e.twin for e in chosen if e.twin is not None and concrete.times}
        # A twin --only left out is graded too, for the comparison, and not reported.
        graded_files = [e.file for e in chosen] + sorted({t for t in twin_of.values()} - {e.file for e in chosen})
        graded: dict[str, _Graded] = {}
        outcomes: dict[str, SampleOutcome] = {}

        def judge_ready() -> None:
            for e in chosen:
                if e.file in outcomes or e.file not in graded:
                    continue
                twin = twin_of.get(e.file)
                if twin is not None and twin not in graded:
                    continue
                outcomes[e.file] = _judged(e, graded[e.file], graded[twin].result if twin else None, progress)

        if jobs <= 1:
            for file in sorted(graded_files, key=lambda f: f not in twin_of.values()):     # twins first
                graded[file] = _grade_sample(directory, by_file[file], rubric, machine, shared)
                judge_ready()
        else:
            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="sample") as pool:
                running = {pool.submit(_grade_sample, directory, by_file[f], rubric, machine, shared): f
                           for f in graded_files}
                while running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        graded[running.pop(future)] = future.result()
                    judge_ready()
    finally:
        if shared is not None:
            shared.close()
    return [outcomes[e.file] for e in chosen]


@dataclass
class _Graded:
    """One sample's grade, and the processes its grade left behind (its own, among every grade's)."""

    result: Result
    left: list[int]


def _grade_sample(directory: Path, exp, rubric: Rubric, machine, shared) -> _Graded:
    """Grade one sample as its manifest entry says (its limits, its generated file)."""
    r = rubric
    if exp.time_limit_s is not None:
        r = dataclasses.replace(r, limits=dataclasses.replace(r.limits, time_limit_s=exp.time_limit_s))
    if exp.build_time_s is not None:
        r = dataclasses.replace(r, limits=dataclasses.replace(r.limits, build_time_s=exp.build_time_s))
    if exp.must_not_create:
        Path(exp.must_not_create).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="grader-sample-") as scratch, collecting() as mine:
        path = directory / exp.file
        if exp.generate_bytes is not None:
            path = Path(scratch) / exp.file
            line = b"// generated filler: this sample is a source file far over the size limit\n"
            path.write_bytes(line * (exp.generate_bytes // len(line) + 1))
        options = GradeOptions(counters=exp.counter_findings is not None and machine.backend.on_gpu)
        result = grade(GradeRequest(path, r, machine, options), inputs=shared)
    return _Graded(result, leftover_processes(mine))


def _judged(exp, graded: _Graded, twin: Result | None, progress) -> "SampleOutcome":
    """A sample's grade judged against its manifest entry (and its twin's), said as it is judged."""
    result = graded.result
    problems = judge(exp, result, twin)
    if graded.left:
        problems.append(f"left grading processes behind: {graded.left}")
    if progress:                # a line as each sample ends: a run cut short still says how far it got
        fraction = f", fraction {result.fraction:.3f}" if result.fraction is not None else ""
        progress(f"{exp.file}: {result.status}{fraction}, {result.seconds:.1f} s: "
                 + ("ok" if not problems else "; ".join(problems)))
    return SampleOutcome(exp, result, problems)
