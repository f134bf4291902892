"""The grader's domain errors.

A student's mistake is never one of these: a kernel that does not compile,
computes the wrong thing, faults or hangs is a *result* (see results.py).
These are problems with the grader's inputs or its machine, and the CLI
turns each into an exit code (grader/cli/common.fail); nothing in the library exits.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """Every exit code of the command line, in one table (docs/instructors.md, "Exit codes")."""

    CORRECT = 0              # graded and correct (and any command that did what it was asked)
    INCORRECT = 1            # graded and incorrect; `grader samples`: a sample missed its outcome
    USAGE = 2                # a usage or rubric error
    NOT_GRADABLE = 3         # compile_error, rejected, crashed, timeout; `grader explain`: could not build
    INFRASTRUCTURE = 4       # the machine: no nvcc or g++, no GPU, a full disk
    INTERRUPTED = 130        # Ctrl-C or SIGTERM (128 + SIGINT, as shells report it)


class GraderError(Exception):
    """Base of every error the grader raises on purpose."""

    exit_code = Exit.INFRASTRUCTURE


class UsageError(GraderError):
    """The command was asked for something it cannot do (a missing file)."""

    exit_code = Exit.USAGE


class RubricError(UsageError):
    """A rubric file is malformed; the message names the file and the key."""

    def __init__(self, path: str, key: str, problem: str, line: int | None = None):
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: key '{key}': {problem}")
        self.path, self.key, self.problem, self.line = path, key, problem, line


class InfrastructureError(GraderError):
    """The machine lacks what grading needs (nvcc, a GPU, a C++ compiler)."""

    exit_code = Exit.INFRASTRUCTURE


class ExerciseError(UsageError):
    """An exercise's reference (reference/<exercise>/) is missing or does not keep its contract;
    the message names the file and what to fix."""
