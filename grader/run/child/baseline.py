"""The rubric's PyTorch baseline in a child: the exercise's expression over a case's device buffers.

Only here does a child use torch (the worker imports it before the wall for a job with a
baseline); below both the backends and the timing, which use it.
"""

from __future__ import annotations


class _CudaArray:
    """A backend's Region (backends.py) as torch sees device memory it does not own (__cuda_array_interface__, version 3)."""

    def __init__(self, region):
        shape = region.shape or (region.floats,)
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<f4", "data": (region.ptr or 0, False),
                                         "version": 3, "strides": None, "stream": None}


def as_torch(views: dict) -> dict:
    import torch  # noqa: PLC0415 - torch's import takes 2 to 3.5 s: only a job with a PyTorch baseline pays it

    return {name: torch.as_tensor(_CudaArray(r), device="cuda") for name, r in views.items()}


def torch_baseline(expression: str):
    """The rubric's PyTorch expression of the inputs, as a function of a case's views (trusted:
    the exercise's own text, evaluated by the grader, not the student's code). Only here does the
    child use torch, which the worker imported before the wall for a job with a baseline."""
    import torch  # noqa: PLC0415 - as in as_torch: only a job with a baseline imports torch
    import torch.nn.functional as F  # noqa: PLC0415

    if torch.cuda.current_stream().cuda_stream != 0:
        raise RuntimeError("timing expects the legacy default stream (torch built with per-thread default streams?)")
    code = compile(expression, "<timing.baseline>", "eval")
    cache: dict = {}

    def run(views: dict):
        key = tuple(sorted((k, v.ptr) for k, v in views.items()))
        if key not in cache:
            cache.clear()
            cache[key] = as_torch(views)
        return eval(code, {"torch": torch, "F": F}, dict(cache[key]))  # noqa: S307
    return run
