"""Every external tool the grader runs, found in one place.

locate(name) is where a tool is, or None; require(name) is where it is, or an InfrastructureError
that says how to install it; version(name) is its first meaningful `--version` line. A CUDA tool
(nvcc, cuobjdump, nvdisasm, ncu) is looked for where the user said the toolkit is first ($CUDA_HOME,
then $CUDA_PATH), then on PATH, then in /usr/local/cuda, then in NVIDIA's pip wheels; any other
tool on PATH. So a machine with nvcc only under $CUDA_HOME grades on it everywhere, the builds and
the emulator's CUDA check alike.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from grader.core.errors import InfrastructureError

try:
    import nvidia  # the nvidia-cuda-* wheels install into this namespace package (0.1 ms to import)
except ImportError:
    nvidia = None

CUDA_TOOLS = ("nvcc", "cuobjdump", "nvdisasm", "ncu")

INSTALL_HINTS = {
    "nvcc": "install the CUDA toolkit and put its bin/ on PATH (or set CUDA_HOME)",
    "g++": "install g++ (apt-get install g++)",
    "ninja": "pip install ninja",
    "ncu": "install Nsight Compute (it comes with the CUDA toolkit, in its bin/) or put ncu on PATH",
    "nm": "install binutils; screening reads the compiled submission with it",
    "readelf": "install binutils; screening reads the compiled submission with it",
}


def _in_wheels(name: str) -> str | None:
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob(f"*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def locate(name: str) -> str | None:
    """Where the tool is (see the module's docstring for the order), or None."""
    if name not in CUDA_TOOLS:
        return shutil.which(name)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and os.access(Path(home) / "bin" / name, os.X_OK):
            return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if found:
        return found
    if os.access(Path("/usr/local/cuda/bin") / name, os.X_OK):
        return f"/usr/local/cuda/bin/{name}"
    return _in_wheels(name)


def require(name: str) -> str:
    """The tool's path; InfrastructureError saying how to install it when it is missing."""
    found = locate(name)
    if found is None:
        raise InfrastructureError(f"'{name}' was not found on PATH: {INSTALL_HINTS.get(name, 'install it')}.")
    return found


@functools.lru_cache(maxsize=None)
def version(name: str) -> str:
    """First meaningful line of `name --version` (nvcc's release line); raises when the tool is missing."""
    out = subprocess.run([require(name), "--version"], capture_output=True, text=True).stdout
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if name == "nvcc":
        return next((ln.strip() for ln in lines if "release" in ln), lines[-1] if lines else "nvcc")
    if name == "ncu":                   # "Version 2025.3.1.0 (build 36398880) (public-release)"
        found = next((ln.split()[1] for ln in lines if ln.startswith("Version") and len(ln.split()) > 1), "")
        return f"Nsight Compute {found}" if found else "ncu"
    return lines[0].strip() if lines else name


# The tools a build may run besides its compiler: nvcc's host compiler and binutils, found on PATH.
_HOST_TOOLS = ("gcc", "g++", "cc", "c++", "as", "ld")


def search_path() -> tuple[str, ...]:
    """The folders a build's PATH holds before the system's (core/environment.py): where nvcc, the
    host compiler and binutils, and ninja were found (nvcc runs its host compiler by name)."""
    found = (locate(name) for name in ("nvcc", *_HOST_TOOLS, "ninja"))
    return tuple(dict.fromkeys(os.path.dirname(p) for p in found if p))


@functools.lru_cache(maxsize=None)
def toolchain_folders() -> tuple[str, ...]:
    """What a build's wall lets its compilers read besides the system's folders (toolchain/running.py):
    the CUDA toolkit's folder (nvcc's, and $CUDA_HOME's; every folder of the `nvidia` wheels where
    nvcc came from one), the host compiler's and binutils' installation folders where they lie
    outside the system's, and the ninja binary itself. Each found, never guessed: a tool missing
    here adds nothing."""
    found: list[str] = []

    homes = {os.path.realpath(os.path.expanduser("~")), "/root", "/home"}

    def prefix(tool: str | None) -> None:
        """The installation folder of <prefix>/bin/<tool>; the file alone where that folder would be
        a home folder (or /), whose other files are nobody's business."""
        if tool:
            real = os.path.realpath(tool)
            bin_dir = os.path.dirname(real)
            top = os.path.dirname(bin_dir)
            home_like = top in homes or os.path.dirname(top) == "/home" or top == "/"
            found.append(real if os.path.basename(bin_dir) != "bin" or home_like else top)

    for name in ("nvcc", *_HOST_TOOLS):
        prefix(locate(name))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.isdir(home):
            found.append(os.path.realpath(home))
    nvcc = locate("nvcc")
    if nvcc and "/nvidia/" in os.path.realpath(nvcc):
        # the nvidia-cuda-* wheels: nvcc's headers and libraries lie in the sibling packages
        found += [os.path.realpath(p) for p in getattr(nvidia, "__path__", [])]
    ninja = locate("ninja")
    if ninja:
        found.append(os.path.realpath(ninja))
    out: list[str] = []
    for path in found:
        if path in ("/", "") or any(path == o or path.startswith(o.rstrip("/") + "/") for o in out):
            continue
        out = [o for o in out if not o.startswith(path.rstrip("/") + "/")] + [path]
    return tuple(out)
