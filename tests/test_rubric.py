import dataclasses
import typing

import pytest

from grader.errors import RubricError
from grader.rubric import DIAGNOSIS_CODES, Rubric, Shape, describe, load_rubric


def test_default_rubric_holds_the_lesson_numbers(rubric):
    assert rubric.checks.lesson_shape == Shape(101, 97)
    assert rubric.timing.shape == Shape(16384, 1024)
    assert (rubric.tolerance.rtol, rubric.tolerance.atol) == (1e-5, 1e-6)
    assert (rubric.tiers.gold, rubric.tiers.silver) == (0.90, 0.75)
    assert rubric.timing.floats_per_element == 2
    assert {(s.rows, s.cols) for s in rubric.checks.shapes} >= {(1, 1), (1, 1025), (7, 4099), (129, 257)}


def test_every_diagnosis_code_has_feedback(rubric):
    assert set(rubric.feedback.diagnosis) == set(DIAGNOSIS_CODES)


def write(tmp_path, text):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return p


BASE = "exercise: e\ntitle: t\n"


def test_unknown_key_names_file_key_and_line(tmp_path):
    p = write(tmp_path, BASE + "timing:\n  shape: [4, 4]\n  floats_per_elem: 2\n")
    with pytest.raises(RubricError) as err:
        load_rubric(p)
    assert err.value.key == "timing.floats_per_elem"
    assert err.value.line == 5
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


def test_shape_forms_and_defaults(tmp_path):
    r = load_rubric(write(tmp_path, BASE + "checks:\n  shapes: [[2, 3], {rows: 4, cols: 5}]\n"))
    assert r.checks.shapes == [Shape(2, 3), Shape(4, 5)]
    assert r.timing == Rubric(exercise="e", title="t").timing


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(RubricError, match="no such file"):
        load_rubric(tmp_path / "nope.yaml")
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
    assert "timing.slow_launch_s" in described and "checks.lesson_shape.rows" in described
    assert "findings[].when[].fact" in described and "limits.host_memory_mib" in described
