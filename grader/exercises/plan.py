"""An exercise's cases, resolved into what the child runs: buffers, arguments, launches.

A case is a point in the exercise's dimensions with an input generator and a seed; its
inputs are a pure function of those (and of the reference's source), so the parent draws
them once, keeps them on disk (data.py) and both sides read the same bytes.

A private case (a GPU run's random checks and timed sets) also carries the run's secret: its
generator seed mixes the rubric's seed with 64 bits drawn for this run alone, which no process
running student code is ever given. Its inputs lie in the run's own folder and its answers
never touch the disk (data.py), so there is nothing to recognise, regenerate or read back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grader.core import exprs
from grader.core.contract import Arg, Buffer, Call, CaseJob
from grader.exercises.rubric import Rubric, Tensor, default_launch, dims_values


@dataclass(frozen=True)
class Case:
    name: str
    dims: dict
    inputs: str                  # the generator
    seed: int = 0
    chain: bool = False          # also run the chain after the submission
    timed: bool = False          # an input set of the timed shape (verified after timing)
    secret: int | None = None    # the run's secret (a private case), else None: the seed alone

    @property
    def shape_text(self) -> str:
        return shape_text(self.dims)

    @property
    def private(self) -> bool:
        return self.secret is not None

    @property
    def draw_seed(self) -> int:
        """The seed the generator is given: the rubric's, or mixed with the run's secret."""
        return self.seed if self.secret is None else (self.secret << 32) + self.seed


def shape_text(dims: dict) -> str:
    """101x97: the dimensions' values, as case names write them."""
    return "x".join(str(v) for v in dims.values())


def plan_cases(rubric: Rubric, *, secret: int | None = None) -> list[Case]:
    """The correctness cases, in the order they run; with a secret, the seeded ones are private
    (a generator without a seed is the same for everyone, and has nothing to hide)."""
    cases = []
    for spec in rubric.checks.cases:
        dims = {d: spec.dims[d] for d in rubric.dims}
        shape = shape_text(dims)
        if spec.seeded:
            cases += [Case(f"{spec.inputs} {shape} seed {s}", dims, spec.inputs, s, spec.chain, secret=secret)
                      for s in rubric.checks.seeds]
        else:
            cases.append(Case(f"{spec.inputs} {shape}", dims, spec.inputs, 0, spec.chain))
    return cases


def timed_cases(rubric: Rubric, *, chain: bool = False, secret: int | None = None) -> list[Case]:
    """One case per input set the timed launches rotate over (random inputs, seeds 1000 on;
    private with a secret)."""
    dims = {d: rubric.timing.dims[d] for d in rubric.dims}
    return [Case(f"timed {shape_text(dims)} set {k}", dims, "random", 1000 + k, chain=chain, timed=True,
                 secret=secret)
            for k in range(rubric.timing.input_sets)]


def run_cases(rubric: Rubric, *, timed: bool, secret: int | None = None) -> list[Case]:
    """Every case whose output the child sends back: the checks, then the timed sets (timed: the
    backend times, Backend.times; else the first set verified, when the rubric asks for it); with a
    secret, the random ones private."""
    cases = plan_cases(rubric, secret=secret)
    if timed:
        return cases + timed_cases(rubric, chain=bool(rubric.chain.kernel and rubric.timing.chain_bytes),
                                   secret=secret)
    return cases + (timed_cases(rubric, secret=secret)[:1] if rubric.emulator.verify_timed_shape else [])


def baseline_cases(rubric: Rubric) -> list[Case]:
    """The shapes where the submission is timed against the PyTorch baseline only (not verified)."""
    cases = []
    for k, spec in enumerate(rubric.timing.baseline_dims):
        dims = {d: spec[d] for d in rubric.dims}
        cases.append(Case(f"baseline {shape_text(dims)}", dims, "random", 2000 + k, timed=True))
    return cases


def tensors_of(rubric: Rubric, case: Case) -> list[Tensor]:
    """The case's tensors: the chain's only when it runs the chain."""
    return [t for t in rubric.tensors if case.chain or not t.chain]


def shape_of(tensor: Tensor, values: dict) -> tuple[int, ...]:
    return tuple(exprs.evaluate(e, values) for e in tensor.shape)


def buffer_of(t: Tensor, values: dict, file: str = "", offset: int = 0) -> Buffer:
    """A tensor at these dimensions, as the child allocates it."""
    shape = list(shape_of(t, values))
    return Buffer(t.name, math.prod(shape), role=t.role, shape=shape, init=t.init, file=file, offset=offset,
                  chain=t.chain)


def _call(params, values: dict, tensors: set[str]) -> list[Arg]:
    return [Arg(tensor=p.name) if p.name in tensors else Arg(value=int(values[p.name])) for p in params]


def case_job(rubric: Rubric, case: Case, *, has_launcher: bool, files: dict[str, tuple[str, int]]) -> CaseJob:
    """The child's instructions for a case; files maps each input to (file, byte offset)."""
    values = dims_values(rubric, case.dims)
    present = tensors_of(rubric, case)
    buffers = [buffer_of(t, values, *(files.get(t.name, ("", 0)) if t.role == "in" else ("", 0))) for t in present]
    names = {t.name for t in present}
    if has_launcher:
        params = rubric.kernel.parsed_launcher.params[:-1]
        launch = Call(_call(params, values, names), key=case.name)
    else:
        grid, block = default_launch(rubric, values)
        launch = Call(_call(rubric.kernel.parsed.params, values, names), grid=grid, block=block,
                      key=case.name)
    chain = None
    if case.chain and rubric.chain.kernel:
        chain = Call([Arg(tensor=a) if a in names else Arg(value=int(exprs.evaluate(a, values)))
                      for a in rubric.chain.args], kernel=rubric.chain.kernel)
    return CaseJob(case.name, buffers, launch, chain, case.timed)
