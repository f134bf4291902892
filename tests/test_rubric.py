import dataclasses
import typing

import pytest

from grader.core.errors import RubricError
from grader.exercises.rubric import Rubric, describe, diagnosis_codes, load_rubric


def test_default_rubric_holds_the_lesson_numbers(rubric):
    assert rubric.checks.cases[0].dims == {"rows": 101, "cols": 97} and rubric.checks.cases[0].inputs == "lesson"
    assert rubric.timing.dims == {"rows": 16384, "cols": 1024}
    assert (rubric.tolerance.rtol, rubric.tolerance.atol) == (1e-5, 1e-6)
    assert (rubric.tiers.gold, rubric.tiers.silver) == (0.90, 0.75)
    assert rubric.timing.bytes.replace(" ", "") == "2*4*rows*cols"
    assert {tuple(c.dims.values()) for c in rubric.checks.cases} >= {(1, 1), (1, 1025), (7, 4099), (129, 257)}


def test_every_diagnosis_code_has_feedback(rubric):
    assert set(rubric.feedback.diagnosis) == set(diagnosis_codes(rubric))


def write(tmp_path, text):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return p


BASE = """exercise: e
title: t
dims: {n: "elements"}
tensors:
  - {name: x, shape: [n]}
  - {name: y, shape: [n], role: out}
kernel:
  name: k
  signature: "__global__ void k(const float* x, float* y, int n)"
  grid: ["(n + 255) / 256"]
checks:
  cases: [{dims: {n: 7}}]
timing:
  dims: {n: 1024}
  bytes: 8 * n
  copy_floats: n
"""


def test_a_minimal_exercise_loads(tmp_path):
    r = load_rubric(write(tmp_path, BASE))
    assert r.kernel.block == ["256"] and r.tensors[1].init == "poison"
    assert diagnosis_codes(r)[0] == "unwritten_elements"          # a 1-D output has no slices to name


def test_unknown_key_names_file_key_and_line(tmp_path):
    p = write(tmp_path, BASE + "emulator:\n  verify_timed: true\n")
    with pytest.raises(RubricError) as err:
        load_rubric(p)
    assert err.value.key == "emulator.verify_timed"
    assert err.value.line == BASE.count("\n") + 2
    assert str(p) in str(err.value) and "unknown key" in str(err.value)


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(RubricError, match=r"key 'tiers.gold': expected a number, got 'high'"):
        load_rubric(write(tmp_path, BASE + "tiers:\n  gold: high\n"))


def test_missing_required_key(tmp_path):
    with pytest.raises(RubricError, match=r"key 'title': missing"):
        load_rubric(write(tmp_path, "exercise: e\n"))


def test_thresholds_must_be_ordered(tmp_path):
    with pytest.raises(RubricError, match="silver < gold"):
        load_rubric(write(tmp_path, BASE + "tiers:\n  gold: 0.7\n  silver: 0.8\n"))


def test_policy_is_one_of_the_choices(tmp_path):
    with pytest.raises(RubricError, match="tiers.borderline_policy"):
        load_rubric(write(tmp_path, BASE + "tiers:\n  borderline_policy: coin\n"))


def test_unknown_feedback_code_rejected(tmp_path):
    with pytest.raises(RubricError, match="feedback.diagnosis.typo"):
        load_rubric(write(tmp_path, BASE + "feedback:\n  diagnosis:\n    typo: x\n"))


@pytest.mark.parametrize("change,key,words", [
    (("[n]}\n  - {name: y", "[m]}\n  - {name: y"), "tensors[0].shape[0]", "unknown name 'm'"),
    (("int n)", "int count)"), "kernel.signature", "neither a tensor, a dimension"),
    (("float* y, int", "const float* y, int"), "kernel.signature", "cannot point to const"),
    (("name: k\n", "name: kk\n"), "kernel.signature", "declares 'k'"),
    (("{n: 7}", "{m: 7}"), "checks.cases[0]", "missing n"),
    (("{n: 7}", "{n: 0}"), "checks.cases[0]", "at least 1"),
    (('grid: ["(n + 255) / 256"]', 'grid: ["1", "n * 100"]'), "timing.dims", "gridDim.y must be 1 to 65535"),
    (("bytes: 8 * n", "bytes: 8 * n +"), "timing.bytes", "not an arithmetic expression"),
    (("bytes: 8 * n", "bytes: pow(n, 2)"), "timing.bytes", "unknown function"),
    (("bytes: 8 * n", "bytes: __import__('os')"), "timing.bytes", "only numbers"),
    (("  - {name: y, shape: [n], role: out}\n", ""), "tensors", "at least one output"),
    # bounded arithmetic: each of these ran for minutes, or without end, before the bounds
    (('grid: ["(n + 255) / 256"]', 'grid: ["(n + 255) / 256 + 0 * 9 ** 9 ** 9 ** 9"]'), "kernel.grid",
     "an exponent of 387420489"),
    (("bytes: 8 * n", "bytes: 8 * n * 10 ** 18"), "timing.bytes", "past 9.22e+18"),
    (("bytes: 8 * n", "bytes: 8 * n + " + " + ".join(["1"] * 120)), "timing.bytes", "longer than 200 terms"),
])
def test_the_exercise_contract_is_checked_where_it_is_written(tmp_path, change, key, words):
    text = BASE.replace(*change)
    assert text != BASE
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == key and words in err.value.problem, str(err.value)


def test_a_launcher_must_end_with_the_stream(tmp_path):
    text = BASE.replace('  grid: ["(n + 255) / 256"]\n', '  launcher: "void launchK(const float* x, float* y, int n)"\n')
    with pytest.raises(RubricError, match="cudaStream_t stream"):
        load_rubric(write(tmp_path, text))


def test_missing_file_and_bad_yaml(tmp_path):
    from grader.core.errors import UsageError

    with pytest.raises(UsageError, match=f"^rubric file not found: {tmp_path / 'nope.yaml'}$"):
        load_rubric(tmp_path / "nope.yaml")
    with pytest.raises(UsageError, match="rubric file not found: .*a folder"):
        load_rubric(tmp_path)
    with pytest.raises(RubricError, match="not valid YAML"):
        load_rubric(write(tmp_path, "exercise: [\n"))


def test_every_key_is_described():
    def keys(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.metadata.get("internal"):
                yield prefix + f.name
                if dataclasses.is_dataclass(hints[f.name]):
                    yield from keys(hints[f.name], prefix + f.name + ".")
                item = typing.get_args(hints[f.name])[0] if typing.get_origin(hints[f.name]) is list else None
                if item is not None and dataclasses.is_dataclass(item):
                    yield from keys(item, prefix + f.name + "[].")

    described = {k: doc for k, _, doc in describe()}
    assert set(keys(Rubric)) == set(described)
    assert all(described.values())
    assert "timing.slow_launch_s" in described and "checks.cases[].dims" in described
    assert "findings[].when[].fact" in described and "limits.host_memory_mib" in described


def test_a_baseline_is_a_python_expression_and_its_shapes_are_checked(tmp_path):
    with pytest.raises(RubricError, match=r"timing.baseline': not a Python expression"):
        load_rubric(write(tmp_path, BASE.replace("  copy_floats: n\n", '  copy_floats: n\n  baseline: "F.gelu(x"\n')))
    with pytest.raises(RubricError, match=r"timing.baseline_dims': needs timing.baseline"):
        load_rubric(write(tmp_path, BASE.replace("  copy_floats: n\n", "  copy_floats: n\n  baseline_dims: [{n: 3}]\n")))
    with pytest.raises(RubricError, match=r"timing.baseline_dims\[0\]'.*missing n"):
        load_rubric(write(tmp_path, BASE.replace("  copy_floats: n\n",
                                                 '  copy_floats: n\n  baseline: "x * 2"\n  baseline_dims: [{m: 3}]\n')))
    ok = load_rubric(write(tmp_path, BASE.replace("  copy_floats: n\n", '  copy_floats: n\n  baseline: "x * 2"\n')))
    assert ok.timing.baseline == "x * 2"


def test_the_kernels_signatures_are_parsed_once_and_kept():
    """The rubric carries its parsed signatures (schema.Kernel.parsed, parsed_launcher): every step
    asks them, none parses the rubric's text again."""
    from pathlib import Path

    from grader.exercises import load_exercise

    r = load_exercise("bias_gelu_fused")
    assert r.kernel.parsed is r.kernel.parsed and r.kernel.parsed.name == "biasGeluFused"
    assert r.kernel.parsed_launcher.params[-1].stream and r.kernel.launcher_name == "launchBiasGeluFused"
    package = Path(__file__).resolve().parent.parent / "grader"
    callers = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                     if "parse_signature(" in p.read_text() and p.name not in ("signature.py",))
    assert callers == ["exercises/schema.py"]


@pytest.mark.parametrize("exercise", ["bias_gelu_fused", "rope_half_split", "gelu_sum"])
def test_every_expression_is_parsed_when_the_rubric_is_loaded_and_never_again(exercise, monkeypatch):
    """The loader turns each expression into an Expr carrying its tree; planning the cases, their
    shapes, the launch, the byte model and the tolerance then parse nothing."""
    import dataclasses

    from grader.core import exprs
    from grader.exercises import load_exercise
    from grader.exercises.plan import run_cases, shape_of, tensors_of
    from grader.exercises.rubric import default_launch, dims_values

    r = load_exercise(exercise)
    assert isinstance(r.timing.bytes, exprs.Expr) and all(isinstance(d, exprs.Expr) for t in r.tensors for d in t.shape)
    assert all(isinstance(v, exprs.Expr) for v in r.derived.values()) and isinstance(r.tolerance.scale, exprs.Expr)

    def parsed_again(text):
        raise AssertionError(f"{text!r} parsed after the rubric was loaded")

    monkeypatch.setattr(exprs, "_parse", parsed_again)
    for case in run_cases(r, timed=True, secret=12345):
        values = dims_values(r, case.dims)
        [shape_of(t, values) for t in tensors_of(r, case)]
        default_launch(r, values)
        exprs.evaluate(r.tolerance.scale, values, integer=False)
    timed = dims_values(r, r.timing.dims)
    exprs.evaluate(r.timing.bytes, timed) and exprs.evaluate(r.timing.copy_floats, timed)
    assert dataclasses.replace(r).timing.bytes.tree is r.timing.bytes.tree


def test_a_bad_expression_is_named_with_its_line(tmp_path):
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, BASE.replace("bytes: 8 * n", "bytes: 8 * n +")))
    assert err.value.key == "timing.bytes" and err.value.line is not None and "not an arithmetic expression" in str(err.value)


@pytest.mark.parametrize("extra, key, words", [
    ("tolerance:\n  rtol: -1.0e-5\n", "tolerance.rtol", "cannot be negative"),
    ("tolerance:\n  atol: -1\n", "tolerance.atol", "cannot be negative"),
    ("tiers:\n  exceeds_floor_margin: -0.01\n", "tiers.exceeds_floor_margin", "cannot be negative"),
    ("tiers:\n  gold: 1.5\n", "tiers.gold", "gold <= 1"),
    ("tiers:\n  silver: 0\n", "tiers", "0 < silver"),
    ("limits:\n  workspace_mib: -1\n", "limits.workspace_mib", "cannot be negative"),
    ("limits:\n  static_device_mib: -5\n", "limits.static_device_mib", "cannot be negative"),
    ("tiers:\n  gold: 0.9\n  gold: 0.95\n", "tiers.gold", "given twice (first on line"),
    ("points:\n  correct: 1\npoints:\n  correct: 2\n", "points", "given twice"),
])
def test_values_that_would_fail_correct_kernels_or_hide_a_typo_are_refused_by_key(tmp_path, extra, key, words):
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, BASE + extra))
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_a_negative_guard_is_refused_by_key(tmp_path):
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, BASE.replace("cases: [{dims: {n: 7}}]", "cases: [{dims: {n: 7}}]\n  guard_floats: -5")))
    assert err.value.key == "checks.guard_floats"


def test_a_misspelt_mistake_is_named_where_it_is_misspelt(tmp_path):
    text = BASE + ("hypotheses:\n  variants:\n    - {code: tanh_gelux, output: answer}\n"
                   "feedback:\n  diagnosis:\n    tanh_gelu: the tanh form\n")
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == "hypotheses.variants[0].code" and "did you mean 'tanh_gelu'" in str(err.value)


def test_a_number_written_without_a_dot_is_a_number(tmp_path):
    """YAML 1.1 reads `rtol: 1e-5` as text; an instructor means 1e-5 (the error said 'expected a
    number, got 1e-5'). Quoted, or not a finite number, it is still refused, naming the key."""
    r = load_rubric(write(tmp_path, BASE + "tolerance:\n  rtol: 1e-5\n  atol: 2E-6\n"))
    assert (r.tolerance.rtol, r.tolerance.atol) == (1e-5, 2e-6)
    for bad in ('"1e-5"', "nan", "tight"):
        with pytest.raises(RubricError, match="tolerance.rtol"):
            load_rubric(write(tmp_path, BASE + f"tolerance:\n  rtol: {bad}\n"))


def test_an_error_found_after_parsing_names_its_line(tmp_path):
    """Errors of meaning (a bound passed, a negative tolerance) named the file and key but no line."""
    text = BASE.replace('grid: ["(n + 255) / 256"]', 'grid: ["(n + 255) / 256 + 0 * 9 ** 9 ** 9 ** 9"]')
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    grid_line = next(i for i, line in enumerate(text.splitlines(), 1) if "grid:" in line)
    assert err.value.key == "kernel.grid" and err.value.line == grid_line, str(err.value)
    assert f":{grid_line}: key 'kernel.grid'" in str(err.value)


# ---------------------------------------------------------------------------
# Non-finite numbers: `rtol: .nan` was accepted and failed every check of a correct kernel
# ---------------------------------------------------------------------------

SENTINEL = "999.25"          # a finite number written where the non-finite one goes, then replaced


def _float_keys(cls=Rubric, prefix=""):
    """Every float key of the schema that a record (not a list of records) holds: a tolerance, a
    scale, a fraction, a threshold, a limit, points."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        tp = hints[f.name]
        if tp is float:
            yield prefix + f.name
        elif dataclasses.is_dataclass(tp):
            yield from _float_keys(tp, prefix + f.name + ".")


FLOAT_KEYS = sorted(_float_keys())
FINDING = ("findings:\n  - code: c\n    when: [{fact: registers, op: '>', value: %s}]\n"
           "    message: m\n    advice: a\n")


def _with_value(key: str, value: str) -> str:
    """BASE with `value` written, unquoted, at the dotted key (inside the mapping BASE already has)."""
    import yaml

    data = yaml.safe_load(BASE)
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = float(SENTINEL)
    text = yaml.safe_dump(data, sort_keys=False)
    assert text.count(SENTINEL) == 1
    return text.replace(SENTINEL, value)


def _line_of(text: str, value: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if value in line)


def test_every_float_key_of_the_schema_is_found(tmp_path):
    assert {"tolerance.rtol", "tolerance.atol", "tiers.gold", "tiers.silver", "tiers.exceeds_floor_margin",
            "timing.target_half_width", "timing.budget_s", "limits.time_limit_s", "points.correct"} <= set(FLOAT_KEYS)
    for key in FLOAT_KEYS:                        # the helper writes each where the loader reads it
        value = {"tiers.gold": "0.95", "tiers.silver": "0.5", "timing.hard_budget_s": "12.5",
                 "tiers.borderline_band": "0.02"}.get(key, "2.5")
        assert load_rubric(write(tmp_path, _with_value(key, value)))


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_no_float_key_takes_a_non_finite_number(tmp_path, key, value):
    text = _with_value(key, value)
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == key and "finite number" in err.value.problem, str(err.value)
    assert err.value.line == _line_of(text, value), str(err.value)


@pytest.mark.parametrize("value", [".nan", ".NaN", ".NAN", "nan", "NaN", ".inf", ".Inf", "+.inf", "-.Inf", "-.INF",
                                   "inf", "-inf", "Infinity", "1e999", "-1e999", "1.0e+999", "1" * 400])
@pytest.mark.parametrize("key", ["tolerance.rtol", "tolerance.atol"])
def test_a_non_finite_tolerance_is_refused_naming_key_and_line(tmp_path, key, value):
    """The shapes an instructor writes: YAML's .nan and .inf in any case, the words Python reads,
    and numbers past any float (1e999, which YAML 1.1 reads as text and Python as inf)."""
    text = _with_value(key, value)
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == key and "finite number" in err.value.problem, str(err.value)
    assert err.value.line == _line_of(text, value) and f":{err.value.line}: key '{key}'" in str(err.value)


@pytest.mark.parametrize("value", ['"nan"', "'inf'", '"1e999"'])
def test_a_quoted_non_finite_tolerance_is_text_and_refused(tmp_path, value):
    text = _with_value("tolerance.rtol", value)
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == "tolerance.rtol" and "expected a number" in err.value.problem
    assert err.value.line == _line_of(text, value)


@pytest.mark.parametrize("where, key", [
    (FINDING % "%s", "findings[0].when[0].value"),
    ("points:\n  tiers: {gold: 40, silver: %s, below: 10}\n", "points.tiers.silver"),
])
@pytest.mark.parametrize("value", [".nan", "-.Inf", "1e999"])
def test_a_non_finite_number_in_a_list_or_a_mapping_is_refused(tmp_path, where, key, value):
    text = BASE + where % value
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == key and "finite number" in err.value.problem, str(err.value)
    assert err.value.line == _line_of(text, value)


def test_finite_tolerances_still_load(tmp_path):
    r = load_rubric(write(tmp_path, _with_value("tolerance.rtol", "2e-5")))
    assert r.tolerance.rtol == 2e-5
    r = load_rubric(write(tmp_path, BASE + FINDING % "-1.5e3"))
    assert r.findings[0].when[0].value == -1500.0


@pytest.mark.parametrize("scale, words", [
    ("1e999", "Python reads it as inf"),              # a constant Python reads as inf
    ("-1e999 * n", "Python reads it as inf"),
    ("1e300 / 1e-300", "past 9.22e+18"),             # a quotient past any size
    ("sqrt(0 - n)", "math domain error"),
    ("0", "must be above 0"),
    ("n - n", "must be above 0"),
    ("1 - n", "must be above 0"),                    # negative at the case n: 7
])
def test_a_tolerance_scale_that_is_not_finite_and_positive_is_refused(tmp_path, scale, words):
    text = BASE + f"tolerance:\n  scale: {scale}\n"
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == "tolerance.scale" and words in err.value.problem, str(err.value)
    assert err.value.line == _line_of(text, "scale:")


def test_a_finite_scale_still_loads(tmp_path):
    r = load_rubric(write(tmp_path, BASE + "tolerance:\n  scale: sqrt(n) * 1e-1\n"))
    assert r.tolerance.scale == "sqrt(n) * 1e-1"


# ---------------------------------------------------------------------------
# Expressions bounded before Python's parser: 100,000 signs ended in a MemoryError traceback
# ---------------------------------------------------------------------------

DEEP = {
    "100,000 unary minus signs": "-" * 100_000 + "n",
    "100,000 signs with spaces": "- " * 100_000 + "n",
    "100,000 unary plus signs": "+" * 100_000 + "n",
    "100,000 brackets": "(" * 100_000 + "n" + ")" * 100_000,
    "50,000 signed brackets": "-(" * 50_000 + "n" + ")" * 50_000,
    "a long sum": " + ".join(["n"] * 20_000),
    "400 signs": "-" * 400 + "n",                     # short enough for Python's parser: the depth bound
    "40 brackets": "(" * 40 + "n" + ")" * 40,
    "40 right-nested powers": "n" + " ** 1" * 40,
}


@pytest.mark.parametrize("name", sorted(DEEP))
@pytest.mark.parametrize("key", ["timing.bytes", "tolerance.scale", "derived.m"])
def test_a_deep_or_long_expression_is_a_rubric_error_naming_key_and_line(tmp_path, key, name):
    expression = DEEP[name]
    if key == "timing.bytes":
        text = BASE.replace("bytes: 8 * n", f'bytes: "{expression}"')
    elif key == "tolerance.scale":
        text = BASE + f'tolerance:\n  scale: "{expression}"\n'
    else:
        text = BASE + f'derived:\n  m: "{expression}"\n'
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == key, str(err.value)
    assert err.value.line == _line_of(text, expression[:20]), str(err.value)
    assert len(str(err.value)) < 400, "the message quotes the start of the expression, not all of it"


def test_the_expression_bounds_are_generous_for_what_a_rubric_writes(tmp_path):
    from grader.core import exprs

    written = "2 * 4 * batch * seq * heads * headDim"            # the shipped rubrics' longest
    assert exprs.evaluate(written, dict(batch=2, seq=3, heads=4, headDim=5)) == 960
    nested = "-(" * 10 + "n" + ")" * 10
    assert exprs.evaluate(nested, {"n": 3}) == 3
    assert exprs.evaluate(" + ".join(["n"] * 30), {"n": 1}) == 30
    assert len(written) * 10 < exprs.MAX_LENGTH and exprs.MAX_DEPTH >= 30


@pytest.mark.parametrize("raised", [RecursionError, MemoryError, SyntaxError, ValueError])
def test_what_pythons_parser_raises_is_an_expr_error(monkeypatch, raised):
    from grader.core import exprs

    def parse(*args, **kwargs):
        raise raised("the parser gave up")

    monkeypatch.setattr(exprs.ast, "parse", parse)
    with pytest.raises(exprs.ExprError, match="not an arithmetic expression"):
        exprs.Expr(f"n + {raised.__name__.lower()}")


@pytest.mark.parametrize("text", ["sqrt(0 - 1)", "ceil_div(n, 0)", "min()", "sqrt(1, 2)", "1e200 * 1e200",
                                  "n / 1e-300 / 1e-300", "1e999 - 1e999", "n\0"])
def test_an_expression_that_cannot_be_evaluated_is_an_expr_error(text):
    from grader.core import exprs

    with pytest.raises(exprs.ExprError):
        exprs.evaluate(text, {"n": 7}, integer=False)


def test_a_baseline_python_cannot_parse_is_a_rubric_error(tmp_path):
    text = BASE.replace("  copy_floats: n\n", '  copy_floats: n\n  baseline: "' + "-" * 100_000 + 'x"\n')
    with pytest.raises(RubricError) as err:
        load_rubric(write(tmp_path, text))
    assert err.value.key == "timing.baseline" and "not a Python expression" in err.value.problem
    assert err.value.line == _line_of(text, "baseline:")
