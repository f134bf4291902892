"""An exercise's cases, resolved into what the child runs: buffers, arguments, launches.

A case is a point in the exercise's dimensions with an input generator and a seed; its
inputs are a pure function of those (and of the reference's source), so the parent draws
them once, keeps them on disk (data.py) and both sides read the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.contract import Arg, Buffer, Call, CaseJob
from grader.exercises import exprs
from grader.exercises.signature import parse_signature
from grader.rubric import Rubric, Tensor, dims_values


@dataclass(frozen=True)
class Case:
    name: str
    dims: dict
    inputs: str                  # the generator
    seed: int = 0
    chain: bool = False          # also run the chain after the submission
    timed: bool = False          # an input set of the timed shape (verified after timing)

    @property
    def shape_text(self) -> str:
        return "x".join(str(v) for v in self.dims.values())


def plan_cases(rubric: Rubric) -> list[Case]:
    """The correctness cases, in the order they run."""
    cases = []
    for spec in rubric.checks.cases:
        dims = {d: spec.dims[d] for d in rubric.dims}
        shape = "x".join(str(v) for v in dims.values())
        if spec.seeded:
            cases += [Case(f"{spec.inputs} {shape} seed {s}", dims, spec.inputs, s, spec.chain)
                      for s in rubric.checks.seeds]
        else:
            cases.append(Case(f"{spec.inputs} {shape}", dims, spec.inputs, 0, spec.chain))
    return cases


def timed_cases(rubric: Rubric, *, chain: bool = False) -> list[Case]:
    """One case per input set the timed launches rotate over (random inputs, seeds 1000 on)."""
    dims = {d: rubric.timing.dims[d] for d in rubric.dims}
    shape = "x".join(str(v) for v in dims.values())
    return [Case(f"timed {shape} set {k}", dims, "random", 1000 + k, chain=chain, timed=True)
            for k in range(rubric.timing.input_sets)]


def baseline_cases(rubric: Rubric) -> list[Case]:
    """The shapes where the submission is timed against the PyTorch baseline only (not verified)."""
    cases = []
    for k, spec in enumerate(rubric.timing.baseline_dims):
        dims = {d: spec[d] for d in rubric.dims}
        cases.append(Case(f"baseline {'x'.join(str(v) for v in dims.values())}", dims, "random", 2000 + k, timed=True))
    return cases


def tensors_of(rubric: Rubric, case: Case) -> list[Tensor]:
    """The case's tensors: the chain's only when it runs the chain."""
    return [t for t in rubric.tensors if case.chain or not t.chain]


def shape_of(tensor: Tensor, values: dict) -> tuple[int, ...]:
    return tuple(exprs.evaluate(e, values) for e in tensor.shape)


def _call(params, values: dict, tensors: set[str]) -> list[Arg]:
    return [Arg(tensor=p.name) if p.name in tensors else Arg(value=int(values[p.name])) for p in params]


def case_job(rubric: Rubric, case: Case, *, has_launcher: bool, files: dict[str, tuple[str, int]]) -> CaseJob:
    """The child's instructions for a case; files maps each input to (file, byte offset)."""
    values = dims_values(rubric, case.dims)
    present = tensors_of(rubric, case)
    buffers = []
    for t in present:
        shape = list(shape_of(t, values))
        floats = 1
        for n in shape:
            floats *= n
        where = files.get(t.name, ("", 0)) if t.role == "in" else ("", 0)
        buffers.append(Buffer(t.name, floats, role=t.role, shape=shape, init=t.init, file=where[0], offset=where[1],
                              chain=t.chain))
    names = {t.name for t in present}
    if has_launcher:
        params = parse_signature(rubric.kernel.launcher).params[:-1]
        launch = Call(_call(params, values, names))
    else:
        params = parse_signature(rubric.kernel.signature).params
        pad3 = lambda v: (v + [1, 1, 1])[:3]  # noqa: E731
        launch = Call(_call(params, values, names),
                      grid=pad3([exprs.evaluate(e, values) for e in rubric.kernel.grid]),
                      block=pad3([exprs.evaluate(e, values) for e in rubric.kernel.block]))
    chain = None
    if case.chain and rubric.chain.kernel:
        chain = Call([Arg(tensor=a) if a in names else Arg(value=int(exprs.evaluate(a, values)))
                      for a in rubric.chain.args], kernel=rubric.chain.kernel)
    return CaseJob(case.name, buffers, launch, chain, case.timed)
