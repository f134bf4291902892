"""The child process: loads the submission, runs the cases (and the timing), sends the outputs.

Started by sandbox.Worker as `python -m grader.child.worker RESULT_FD GUARD_FD BACKEND READY_FD`;
it imports torch (and creates its CUDA context) at once, writes a byte on READY_FD, then reads
the job as JSON on stdin. The order after that is the point of this module:

1. load the grader's reference kernels and everything else the grader needs;
2. limits: the device heap, a host-memory cap measured from here, privileges dropped
   when running as root;
3. the wall: the seccomp filter of guard.c, on every thread;
4. only then the submission's library (its static initialisers run inside the wall).

It computes no reference and judges nothing: it sends each output back on the
authenticated result channel and the parent decides.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback

T0 = time.perf_counter()

import torch  # noqa: E402 - after T0, so the child's start-up time includes the import

from grader import protocol  # noqa: E402
from grader.cases import Case, make_inputs  # noqa: E402
from grader.child import guard  # noqa: E402
from grader.child.backends import tensor_bytes  # noqa: E402

NOBODY = 65534


def run_case(backend, case: Case, pad: int, reverse_check: bool, channel: protocol.Channel) -> bool:
    """Run one case; send its output. Returns False when the process cannot go on."""
    x_cpu, bias_cpu, r_cpu = make_inputs(case, backend.generate_on)
    n = case.elements
    x = backend.input(x_cpu, "x")
    bias = backend.input(bias_cpu, "bias")
    full, out = backend.output(n, pad, "out")
    header = {"type": "case", "case": case.name}
    backend.reset_launch_log()
    outcome = backend.launch_submission(x, bias, out, case.rows, case.cols)
    if outcome.ok:
        outcome = backend.synchronize()
    header["launches"] = backend.launch_log()
    if not outcome.ok:
        channel.send({**header, "ok": False, "error": outcome.error, "fault": outcome.fault, "fatal": outcome.fatal})
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
    channel.send(header, payload)
    backend.release_inputs()
    return True


def preload(backend: str) -> None:
    """What every job needs, done before the job arrives (the parent is still building)."""
    if backend == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")        # the context, now rather than at the first check
    # Everything the grader imports later, imported now: after the wall nothing may be
    # written (no .pyc), and after privileges are dropped the package may be unreadable.
    import grader.child.timing  # noqa: F401
    import grader.stats  # noqa: F401


def _vm_data_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def apply_limits(backend, limits: dict) -> dict:
    """The device heap, the host-memory cap and the drop of privileges; what took effect.

    The host cap is RLIMIT_DATA (private writable memory), set to what this process holds
    now plus the allowance: CUDA reserves far more address space than it uses, so a cap on
    the address space itself would break it, and the grader's own baseline (torch, the CUDA
    context) is not the submission's to pay for.
    """
    report: dict = {}
    heap = limits.get("device_heap_bytes")
    if heap:
        code = backend.set_device_heap(heap)
        report["device_heap_bytes"] = heap if code == 0 else None
    cap_mib = limits.get("host_memory_mib")
    base = _vm_data_bytes()
    if cap_mib and base is not None:
        cap = base + cap_mib * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
            report["host_memory_mib"] = cap_mib
            report["host_memory_base_mib"] = round(base / 2**20)
        except (ValueError, OSError) as exc:
            report["host_memory_mib"] = None
            report["host_memory_problem"] = str(exc)
    if os.geteuid() == 0:
        if limits.get("drop_privileges", True):
            try:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                report["privileges"] = f"dropped from root to uid {NOBODY}"
            except OSError as exc:
                report["privileges"] = f"root (could not drop: {exc})"
        else:
            report["privileges"] = "root (drop_privileges is off)"
    else:
        report["privileges"] = f"unprivileged uid {os.geteuid()}"
    return report


def main() -> int:
    result_fd, guard_fd = int(sys.argv[1]), int(sys.argv[2])
    backend_name = sys.argv[3]
    try:
        preload(backend_name)
    except Exception:  # noqa: BLE001 - the job's own load reports the failure
        pass
    t_ready = time.perf_counter() - T0
    if len(sys.argv) > 4:                   # tell the parent: ready (it takes the GPU's lane now)
        ready_fd = int(sys.argv[4])
        try:
            os.write(ready_fd, b"1")
        except OSError:
            pass
        os.close(ready_fd)
    job = json.load(sys.stdin)
    channel = protocol.Channel(result_fd, bytes.fromhex(job.pop("key")))
    t_job = time.perf_counter() - T0
    try:
        if job["backend"] == "cuda":
            from grader.child.backends import CudaBackend as B
        else:
            from grader.child.backends import EmulatorBackend as B
        backend = B(job["reference_library"])
        wall = guard.Guard(job.get("guard_library"))
        sandbox = apply_limits(backend, job.get("limits", {}))
        # Imports so far may cache their bytecode (torch's saves seconds a run); inside the
        # wall a .pyc write would be a blocked call, so a late import only reads.
        sys.dont_write_bytecode = True
        status = wall.install(mode=guard.AUDIT if job.get("guard_mode") == "audit" else guard.ENFORCE,
                              report_fd=guard_fd)
        sandbox.update(seccomp=status.seccomp, seccomp_detail=status.detail,
                       filter_instructions=status.filter_instructions, filter_install_ms=status.install_ms)
        if backend.name == "cuda":
            sandbox["gpu_memory_free_bytes"], sandbox["gpu_memory_total_bytes"] = torch.cuda.mem_get_info()
        sandbox["rss_at_load_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        t_load = time.perf_counter()
        backend.load_submission(job["library"])
        sandbox["submission_load_ms"] = round((time.perf_counter() - t_load) * 1000, 3)
    except Exception as exc:  # noqa: BLE001 - any failure to load is reported, not raised
        channel.send({"type": "fatal", "stage": "load", "error": f"{type(exc).__name__}: {exc}"})
        return 0
    channel.send({"type": "hello", "backend": backend.name, "pid": os.getpid(), "t": time.perf_counter() - T0,
                  "ready_t": t_ready, "job_t": t_job, "sandbox": sandbox})
    pad = job["guard_floats"]
    for raw in job["cases"]:
        case = Case(**raw)
        try:
            go_on = run_case(backend, case, pad, job.get("reverse_check", False), channel)
        except Exception as exc:  # noqa: BLE001
            channel.send({"type": "fatal", "stage": case.name, "error": f"{type(exc).__name__}: {exc}",
                          "trace": traceback.format_exc(limit=4)})
            return 0
        if not go_on:
            return 0
    timing = job.get("timing")
    if timing:
        from grader.child.timing import run_timing

        try:
            run_timing(backend, timing, [Case(**c) for c in job["timed_cases"]], pad, channel)
        except Exception as exc:  # noqa: BLE001
            channel.send({"type": "fatal", "stage": "timing", "error": f"{type(exc).__name__}: {exc}",
                          "trace": traceback.format_exc(limit=4)})
            return 0
    elif job.get("verify_cases"):
        for raw in job["verify_cases"]:
            if not run_case(backend, Case(**raw), pad, False, channel):
                return 0
    channel.send({"type": "done", "t": time.perf_counter() - T0})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)          # skip the interpreter's teardown (torch's takes about half a second)
