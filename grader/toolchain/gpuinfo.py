"""What the parent knows about the GPU without creating a CUDA context: nvidia-smi, else the
driver's device queries (through ctypes: never torch, whose import takes seconds).

The probe is the GPU backend's (GPU: the one `--backend auto` picks where a GPU is visible); the
variable that hides its devices, its device files, its driver library and its architectures' names
are that Backend's fields (core/backend.py). tests/conftest.py decides "GPU present" through
gpu_present(), as the grader does.
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import threading

from grader.core.backend import AUTO, CUDA, EMULATOR, Backend, named
from grader.toolchain import tools

GPU = CUDA          # the backend `--backend auto` picks where a GPU is visible; this module probes its GPU

_FIELDS = ("name", "compute_cap", "clocks.sm", "clocks.mem", "clocks.max.sm", "driver_version", "temperature.gpu")


def snapshot() -> dict:
    """One nvidia-smi reading of the first visible GPU; {} when there is none."""
    exe = tools.locate("nvidia-smi")
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


class _Nvml:
    """The NVIDIA management library, loaded once per process (ctypes; nvidia-smi is a front end to
    it): a reading through it takes microseconds once initialised, where nvidia-smi's own start
    took 0.2 s of a warm grade's check on an H100 host, run while the measuring process's CUDA
    context was being torn down. NVML counts its initialisations: each hold() is one, each
    release() ends one, and the library lets go of the GPU (its device files closed, 0.05 to 0.23 s
    on the H100 host) when the count is back at none."""

    _lock = threading.RLock()           # warm_reading holds it around hold(), which takes it too
    _lib: ctypes.CDLL | None = None
    _tried = False
    _warm = False                       # warm_reading's one hold, until release_reading

    @classmethod
    def lib(cls) -> ctypes.CDLL | None:
        """The library, loaded (not initialised) once."""
        with cls._lock:
            if not cls._tried:
                cls._tried = True
                try:
                    lib = ctypes.CDLL("libnvidia-ml.so.1")
                except OSError:
                    lib = None
                if lib is not None and hasattr(lib, "nvmlInit_v2") and hasattr(lib, "nvmlShutdown"):
                    cls._lib = lib                              # both there, or no NVML
            return cls._lib

    @classmethod
    def hold(cls) -> ctypes.CDLL | None:
        """The library, initialised once more (release() ends it), or None."""
        lib = cls.lib()
        return lib if lib is not None and lib.nvmlInit_v2() == 0 else None

    @classmethod
    def release(cls) -> None:
        if cls._lib is not None:
            cls._lib.nvmlShutdown()


def warm_reading() -> bool:
    """Initialise NVML now (beside a build), so that the reading after the timing is quick: one hold
    for the process, however many grades ask (a batch's keep it to the end, as the GPU stays
    initialised between its students); True where it is held."""
    with _Nvml._lock:
        if not _Nvml._warm:
            _Nvml._warm = _Nvml.hold() is not None
        return _Nvml._warm


def release_reading() -> None:
    """Let go of warm_reading's hold (a process's one grade, `grader submit`, once its reading is
    taken): NVML closes its device files now, beside the verdict, not at the process's exit (which
    took 0.05 to 0.23 s past a warm grade's last line on the H100 host)."""
    with _Nvml._lock:
        held, _Nvml._warm = _Nvml._warm, False
    if held:
        _Nvml.release()


def reading(device: str | None = None) -> dict:
    """The GPU's state now, as snapshot() gives it (the same keys and text), through NVML where it
    loads, else through nvidia-smi. device: the CUDA_VISIBLE_DEVICES entry the children saw (an
    index or a UUID); the first GPU when None."""
    lib = _Nvml.hold()
    if lib is None:
        return snapshot()
    try:
        return _read(lib, device)
    finally:
        _Nvml.release()


def _read(lib: ctypes.CDLL, device: str | None) -> dict:
    handle = ctypes.c_void_p()
    device = (device or "0").strip()
    found = (lib.nvmlDeviceGetHandleByIndex_v2(int(device), ctypes.byref(handle)) if device.isdigit()
             else lib.nvmlDeviceGetHandleByUUID(device.encode(), ctypes.byref(handle)))
    if found != 0:
        return snapshot()
    name, driver = ctypes.create_string_buffer(96), ctypes.create_string_buffer(80)
    major, minor, sm, mem, max_sm, temp = (ctypes.c_int() for _ in range(6))
    # NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2; NVML_TEMPERATURE_GPU = 0
    codes = (lib.nvmlDeviceGetName(handle, name, 96), lib.nvmlSystemGetDriverVersion(driver, 80),
             lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)),
             lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(sm)), lib.nvmlDeviceGetClockInfo(handle, 2, ctypes.byref(mem)),
             lib.nvmlDeviceGetMaxClockInfo(handle, 1, ctypes.byref(max_sm)),
             lib.nvmlDeviceGetTemperature(handle, 0, ctypes.byref(temp)))
    if any(codes):
        return snapshot()
    return dict(zip(_FIELDS, (name.value.decode(errors="replace"), f"{major.value}.{minor.value}", str(sm.value),
                              str(mem.value), str(max_sm.value), driver.value.decode(errors="replace"), str(temp.value))))


def every_gpu_hidden() -> bool:
    """The GPU backend's visible-devices variable (CUDA_VISIBLE_DEVICES) set to hide every GPU ("" or -1)."""
    return os.environ.get(GPU.visible_devices, None) in ("", "-1")


def device_file_present() -> bool:
    """A device file of the GPU backend (/dev/nvidia*), and not every GPU hidden: a listing of /dev, no
    driver call (a guess that the probe confirms or not; grade/launcher.Launcher.for_command acts on it)."""
    return not every_gpu_hidden() and any(glob.glob(glob.escape(f) + "*") for f in GPU.device_files)


def probe() -> dict | None:
    """A first look at the GPU: nvidia-smi's reading, {} for a GPU only torch sees, None for none.

    nvidia-smi answers without creating a CUDA context in this process (the parent never
    needs one); where it is absent the driver is asked how many devices it sees (cuInit
    creates no context either).
    """
    if every_gpu_hidden():
        return None
    if tools.locate("nvidia-smi"):
        return snapshot() or None
    return {} if _driver_capability() is not None else None


def _driver_capability() -> tuple[int, int] | None:
    """The first visible device's compute capability from the CUDA driver; None without one."""
    try:
        cu = ctypes.CDLL(GPU.driver_library)
    except OSError:
        return None
    count, dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if cu.cuInit(0) != 0 or cu.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return None
    if cu.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        return None
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
    if cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) or cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev):
        return None
    return major.value, minor.value


def cuda_available() -> bool:
    return probe() is not None


def gpu_present() -> bool:
    """Whether this machine grades on a GPU: what `--backend auto` decides (resolve_backend), through
    the same probe. tests/conftest.py and scripts/gpu-check ask this, so the tests see the GPU the
    grader sees (no torch needed)."""
    return resolve_backend(AUTO).on_gpu


def resolve_backend(backend: str | Backend, *, has_gpu: bool | None = None) -> Backend:
    """The Backend a run uses: 'auto' is CUDA where a GPU is visible, else the emulator (the one
    place 'auto' is decided; has_gpu: a probe already made). A name or a Backend is taken as it is."""
    if backend != AUTO:
        return named(backend)
    return GPU if (cuda_available() if has_gpu is None else has_gpu) else EMULATOR


def arch(reading: dict | None = None) -> str:
    """sm_XY of the first GPU, from a reading when one is at hand."""
    cap = (reading if reading is not None else snapshot()).get("compute_cap")
    if cap:
        major, _, minor = cap.partition(".")
        return GPU.arch_of(major, minor)
    cap = _driver_capability()
    if cap is None:
        raise RuntimeError("no CUDA device visible: cannot tell its architecture")
    return GPU.arch_of(*cap)


def indices() -> list[str]:
    """nvidia-smi's index of every GPU on the machine; [] without nvidia-smi."""
    exe = tools.locate("nvidia-smi")
    if exe is None:
        return []
    try:
        proc = subprocess.run([exe, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip().isdigit()] if proc.returncode == 0 else []
