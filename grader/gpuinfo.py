"""What the parent knows about the GPU without creating a CUDA context: nvidia-smi."""

from __future__ import annotations

import os
import shutil
import subprocess

_FIELDS = ("name", "compute_cap", "clocks.sm", "clocks.mem", "clocks.max.sm", "driver_version", "temperature.gpu")


def snapshot() -> dict:
    """One nvidia-smi reading of the first visible GPU; {} when there is none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        proc = subprocess.run([exe, f"--query-gpu={','.join(_FIELDS)}", "--format=csv,noheader,nounits", "-i", "0"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    values = [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(_FIELDS, values))


def probe() -> dict | None:
    """A first look at the GPU: nvidia-smi's reading, {} for a GPU only torch sees, None for none.

    nvidia-smi answers without creating a CUDA context in this process (the parent never
    needs one); torch is asked only where nvidia-smi is absent.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return None
    if shutil.which("nvidia-smi"):
        return snapshot() or None
    import torch

    try:
        return {} if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a broken driver is "no GPU"
        return None


def cuda_available() -> bool:
    return probe() is not None


def arch(reading: dict | None = None) -> str:
    """sm_XY of the first GPU, from a reading when one is at hand."""
    cap = (reading if reading is not None else snapshot()).get("compute_cap")
    if cap:
        major, _, minor = cap.partition(".")
        return f"sm_{major}{minor}"
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def indices() -> list[str]:
    """nvidia-smi's index of every GPU on the machine; [] without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        proc = subprocess.run([exe, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip().isdigit()] if proc.returncode == 0 else []
