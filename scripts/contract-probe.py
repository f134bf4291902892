#!/usr/bin/env python3
"""What the process contract can use on this machine (docs/design.md's contract table): whether a
cgroup v2 subtree is writable here (memory.max, pids.max), what a CUDA context takes of the address
space (so an RLIMIT_AS cap can be sized), and what setting one up costs. Prints one JSON object."""
from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import time


def _own(controller: str) -> str | None:
    """The folder of this process's cgroup for a v1 controller, or the v2 one ('' controller)."""
    for line in open("/proc/self/cgroup"):
        _, names, path = line.rstrip("\n").split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            root = "/sys/fs/cgroup/unified" if controller == "" and os.path.isdir("/sys/fs/cgroup/unified") else (
                "/sys/fs/cgroup" if controller == "" else f"/sys/fs/cgroup/{controller}")
            return root + path.rstrip("/")
    return None


def _try(folder: str, files: dict) -> dict:
    out: dict = {"folder": folder}
    t0 = time.perf_counter()
    probe = folder + "/grader-probe"
    try:
        os.mkdir(probe)
    except OSError as e:
        return {**out, "mkdir": repr(e)}
    for f, v in files.items():
        try:
            with open(os.path.join(probe, f), "w") as fh:
                fh.write(v)
            out[f] = "ok"
        except OSError as e:
            out[f] = repr(e)
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    try:
        with open(probe + "/cgroup.procs", "w") as fh:
            fh.write(str(p.pid))
        out["attach"] = "ok"
    except OSError as e:
        out["attach"] = repr(e)
    p.wait()
    out["setup_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    time.sleep(0.05)
    try:
        os.rmdir(probe)
    except OSError as e:
        out["rmdir"] = repr(e)
    return out


def cgroup_facts() -> dict:
    out: dict = {"self": open("/proc/self/cgroup").read().strip(),
                 "mounts": [l.strip() for l in open("/proc/self/mounts") if "cgroup" in l]}
    v2 = _own("")
    if v2 and os.path.exists(v2 + "/cgroup.controllers"):
        out["v2_controllers"] = open(v2 + "/cgroup.controllers").read().strip()
        out["v2_subtree"] = open(v2 + "/cgroup.subtree_control").read().strip()
        out["v2"] = _try(v2, {"memory.max": str(512 << 20), "pids.max": "64"})
    for ctl, files in (("memory", {"memory.limit_in_bytes": str(512 << 20)}), ("pids", {"pids.max": "64"})):
        own = _own(ctl)
        if own and os.path.isdir(own):
            out[ctl] = _try(own, files)
    return out


CUDA = r"""
import ctypes, os, resource, sys, time
cap = int(sys.argv[1])
if cap:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
t0 = time.perf_counter()
lib = ctypes.CDLL("libcuda.so.1")
r = lib.cuInit(0)
dev = ctypes.c_int(); ctx = ctypes.c_void_p()
r2 = lib.cuDeviceGet(ctypes.byref(dev), 0) if r == 0 else -1
r3 = lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) if r2 == 0 else -1
r4 = lib.cuCtxSetCurrent(ctx) if r3 == 0 else -1
ptr = ctypes.c_uint64()
r5 = lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)) if r4 == 0 else -1
ms = (time.perf_counter() - t0) * 1000
st = {l.split(':')[0]: l.split(':')[1].strip() for l in open('/proc/self/status') if l.startswith('Vm')}
print({"cap_gib": cap / 2**30, "cuInit": r, "ctx": r3, "alloc": r5, "ms": round(ms, 1), **st})
"""


def cuda_facts() -> list:
    rows = []
    for gib in (0, 4, 8, 16, 32, 64, 128, 256):
        p = subprocess.run([sys.executable, "-c", CUDA, str(gib << 30)], capture_output=True, text=True, timeout=120)
        rows.append((p.stdout or p.stderr).strip()[-600:])
    return rows


if __name__ == "__main__":
    facts = {"uid": os.getuid(), "cgroup": cgroup_facts()}
    if "--cuda" in sys.argv:
        facts["cuda"] = cuda_facts()
    print(json.dumps(facts, indent=1))
