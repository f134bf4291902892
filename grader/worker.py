"""The child process: loads the submission, runs the cases (and the timing), sends the outputs.

Started by sandbox.Worker as `python -m grader.worker FD BACKEND`; it imports
torch (and creates its CUDA context) at once, then reads the job as JSON on
stdin. It computes no reference and judges nothing: it sends each output
back on the pipe FD and the parent decides.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

T0 = time.perf_counter()

import torch  # noqa: E402 - after T0, so the child's start-up time includes the import

from grader import protocol  # noqa: E402
from grader.backends import tensor_bytes  # noqa: E402
from grader.cases import Case, make_inputs  # noqa: E402


def run_case(backend, case: Case, pad: int, reverse_check: bool, fd: int) -> bool:
    """Run one case; send its output. Returns False when the process cannot go on."""
    x_cpu, bias_cpu, r_cpu = make_inputs(case, backend.generate_on)
    n = case.elements
    x = backend.input(x_cpu, "x")
    bias = backend.input(bias_cpu, "bias")
    full, out = backend.output(n, pad, "out")
    header = {"type": "case", "case": case.name}
    outcome = backend.launch_submission(x, bias, out, case.rows, case.cols)
    if outcome.ok:
        outcome = backend.synchronize()
    if not outcome.ok:
        protocol.send(fd, {**header, "ok": False, "error": outcome.error, "fault": outcome.fault, "fatal": outcome.fatal})
        # A sticky CUDA error, or a fault outside every buffer (a wild pointer), ends the run.
        return not outcome.fatal and not (outcome.fault and outcome.fault.get("buffer") is None)
    header.update(ok=True)
    if reverse_check:
        # The same launch with blocks and threads in reverse order (CPU emulator only): any
        # difference, bit for bit, is a race or a missing barrier.
        full2, out2 = backend.output(n, pad, "out")
        backend.set_reverse(True)
        second = backend.launch_submission(x, bias, out2, case.rows, case.cols)
        backend.set_reverse(False)
        if second.ok:
            differs = int((full.view(torch.int32) != full2.view(torch.int32)).sum())
            header["reverse_differs"] = differs > 0
            header["reverse_diff_count"] = differs
        else:
            header["reverse_error"] = second.error
            header["reverse_fault"] = second.fault
    payload = tensor_bytes(full)
    if case.chain and r_cpu is not None:
        r = backend.input(r_cpu, "r")
        chain_out_full, chain_out = backend.output(n, 0, "chain")
        res = backend.reference("add_residual", out, r, chain_out, n=n)
        res = backend.synchronize() if res.ok else res
        if res.ok:
            header["chain_bytes"] = n * 4
            payload += tensor_bytes(chain_out)
    header["full_floats"] = n + 2 * pad
    protocol.send(fd, header, payload)
    backend.release_inputs()
    return True


def preload(backend: str) -> None:
    """What every job needs, done before the job arrives (the parent is still building)."""
    if backend == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")        # the context, now rather than at the first check


def main() -> int:
    fd = int(sys.argv[1])
    if len(sys.argv) > 2:
        try:
            preload(sys.argv[2])
        except Exception:  # noqa: BLE001 - the job's own load reports the failure
            pass
    t_ready = time.perf_counter() - T0
    job = json.load(sys.stdin)
    t_job = time.perf_counter() - T0
    try:
        if job["backend"] == "cuda":
            from grader.backends import CudaBackend as B
        else:
            from grader.backends import EmulatorBackend as B
        backend = B(job["library"], job["reference_library"])
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported, not raised
        protocol.send(fd, {"type": "fatal", "stage": "load", "error": f"{type(exc).__name__}: {exc}"})
        return 0
    protocol.send(fd, {"type": "hello", "backend": backend.name, "pid": os.getpid(), "t": time.perf_counter() - T0,
                       "ready_t": t_ready, "job_t": t_job})
    pad = job["guard_floats"]
    for raw in job["cases"]:
        case = Case(**raw)
        try:
            go_on = run_case(backend, case, pad, job.get("reverse_check", False), fd)
        except Exception as exc:  # noqa: BLE001
            protocol.send(fd, {"type": "fatal", "stage": case.name, "error": f"{type(exc).__name__}: {exc}",
                               "trace": traceback.format_exc(limit=4)})
            return 0
        if not go_on:
            return 0
    timing = job.get("timing")
    if timing:
        from grader.timing import run_timing

        try:
            run_timing(backend, timing, [Case(**c) for c in job["timed_cases"]], pad, fd)
        except Exception as exc:  # noqa: BLE001
            protocol.send(fd, {"type": "fatal", "stage": "timing", "error": f"{type(exc).__name__}: {exc}",
                               "trace": traceback.format_exc(limit=4)})
            return 0
    elif job.get("verify_cases"):
        for raw in job["verify_cases"]:
            if not run_case(backend, Case(**raw), pad, False, fd):
                return 0
    protocol.send(fd, {"type": "done", "t": time.perf_counter() - T0})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)          # skip the interpreter's teardown (torch's takes about half a second)
