"""The exercise and its grading rules, loaded from YAML into the typed objects of schema.py.

Every key has a type, a default where one makes sense, and a description
(``doc``). An unknown key, a wrong type or a missing required key raises
RubricError naming the file, the dotted key and its line (fromyaml.py); then the rubric is
checked as a whole (its expressions, signatures, cases and launch: semantics.py). The schema's
names, and what semantics.py works out from a rubric, are importable from here, the rubric's one
front door.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from grader.core.errors import RubricError, UsageError
from grader.exercises.fromyaml import LOADER, build
from grader.exercises.schema import (  # noqa: F401 - the schema's names, from the rubric's front door
    CORE_CODES,
    DEFAULT_RUBRIC,
    FINDING_FACTS,
    FLOOR_KINDS,
    TIER_NAMES,
    Calibrate,
    CalibrationRun,
    CaseSpec,
    Chain,
    Checks,
    Condition,
    Emulator,
    Feedback,
    FindingRule,
    Kernel,
    Limits,
    Points,
    Rubric,
    Step,
    Tensor,
    Tiers,
    Timing,
    Tolerance,
    describe,
)
from grader.exercises.semantics import check_semantics, default_launch, diagnosis_codes, dims_values  # noqa: F401


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
        node = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise RubricError(shown, "<file>", f"not valid YAML: {getattr(exc, 'problem', exc)}",
                          line + 1 if line is not None else None) from None
    if node is None:
        raise RubricError(shown, "<file>", "the file is empty")
    rubric = build(Rubric, node, "", shown)
    rubric = dataclasses.replace(rubric, path=shown)
    check_semantics(rubric, shown)
    return rubric


__all__ = ['CORE_CODES', 'Calibrate', 'CalibrationRun', 'CaseSpec', 'Chain', 'Checks', 'Condition',
           'DEFAULT_RUBRIC', 'Emulator', 'FINDING_FACTS', 'FLOOR_KINDS', 'Feedback', 'FindingRule',
           'Kernel', 'Limits', 'Points', 'Rubric', 'Step', 'TIER_NAMES', 'Tensor', 'Tiers', 'Timing',
           'Tolerance', 'describe', 'load_rubric', 'diagnosis_codes', 'dims_values', 'default_launch']
