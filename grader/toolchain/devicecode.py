"""What the parent reads from a built library's device code, before any process that runs the
submission's host code has seen it: the fatbinaries in its .nv_fatbin section (device_code, what
the measuring process loads with the driver), each kernel's parameter layout from their cubins
(kernel_parameters, for the recorder without a GPU), and from the object's ELF (cuobjdump -elf)
its __device__ variables and whether it calls the device heap's malloc.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from pathlib import Path

from grader.core import sealed
from grader.core.errors import InfrastructureError
from grader.core.objmemo import read_beside
from grader.toolchain import tools

FATBIN_MAGIC = 0xBA55ED50


def device_variables(obj: Path) -> list[str]:
    """The device names of the submission's __device__ and __constant__ variables (the OBJECT
    symbols of its device code, read with cuobjdump -elf from the parent's own build output): the
    measuring process restores each to its last host-written value before every call, so nothing a
    kernel leaves in static memory reaches the next call. [] where cuobjdump is missing."""
    return _device_symbols(obj)["variables"]


def uses_device_heap(obj: Path) -> bool:
    """Whether the submission's device code calls malloc (an extern FUNC symbol in its ELF): the
    measuring process then poisons the device heap's free memory before every call and counts what
    a call kept, as it does for the workspace. False where cuobjdump is missing."""
    return _device_symbols(obj)["heap"]


def _device_symbols(obj: Path) -> dict:
    tool = tools.locate("cuobjdump")
    if tool is None:
        return {"variables": [], "heap": False}

    def read() -> dict:
        done = subprocess.run([tool, "-elf", str(obj)], capture_output=True, text=True)
        symbols = elf_symbols(done.stdout)
        names = [name for name, kind in symbols if kind == "OBJECT" and not name.startswith(".")]
        heap = any(kind == "FUNC" and name in ("malloc", "__nv_aligned_device_malloc") for name, kind in symbols)
        return {"variables": list(dict.fromkeys(names)), "heap": heap}

    return read_beside(obj, "device_symbols", read)


_SYMBOL_TYPES = {1: "OBJECT", 2: "FUNC"}        # an ELF symbol's info byte, its low four bits (STT_*)


def elf_symbols(listing: str) -> list[tuple[str, str]]:
    """(name, OBJECT or FUNC) of each row of the symbol tables in `cuobjdump -elf`'s listing. Its
    releases print a row two ways: with the type named (13.5: `0x15 0 0 FUNC GLOBAL DEFAULT - 0
    malloc`), or as numbers (13.0: `0x15 0 0 0x12 0 0 malloc`, the type in the info byte's low bits)."""
    out = []
    for line in listing.splitlines():
        cols = line.split()
        if len(cols) < 7 or not cols[0].startswith("0x"):
            continue
        named = next((c for c in cols[3:5] if c in ("OBJECT", "FUNC")), None)
        if named:
            out.append((cols[-1], named))
        elif len(cols) == 7 and all(_is_number(c) for c in cols[:6]):
            kind = _SYMBOL_TYPES.get(int(cols[3], 16) & 0xF)
            if kind:
                out.append((cols[-1], kind))
    return out


def _is_number(text: str) -> bool:
    try:
        int(text, 16)
        return True
    except ValueError:
        return False


def device_code(library: Path) -> list[Path]:
    """The fatbinaries in a built library's .nv_fatbin section, each written to a file beside it
    (once): what the measuring process loads with the driver instead of the library itself.

    Read here, in the parent, from the build's own output, before any process that runs the
    submission's host code has seen the library. It holds one (a library linked with nvcc's device
    link step holds two: an empty one, then the submission's); every one is kept, and the measuring
    process looks kernels up in all of them."""
    kept = sorted(library.parent.glob("device-*.fatbin"))
    if kept and not any(sealed.check(p, full=True) for p in kept):
        return kept
    data = library.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise InfrastructureError(f"{library} is not a 64-bit ELF library: its device code cannot be read")
    blob = next((body for name, body in _elf_sections(data) if name == b".nv_fatbin"), b"")
    pieces, at = [], 0
    while at + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != FATBIN_MAGIC:
            at += 8                                   # padding between two fatbinaries
            continue
        pieces.append(blob[at: at + header + size])
        at += header + size
    if not pieces:
        raise InfrastructureError(f"{library} holds no device code (.nv_fatbin): was it built by nvcc?")
    paths = []
    for i, piece in enumerate(pieces):
        path = library.parent / f"device-{i}.fatbin"
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(piece)
        os.replace(tmp, path)
        sealed.seal(path, hashlib.sha256(piece).hexdigest())
        paths.append(path)
    return paths


_ELF_ENTRY = 2                   # a fatbinary entry holding a cubin (1: PTX)
_EIATTR_KPARAM_INFO, _EIATTR_PARAM_CBANK = 0x17, 0x0A     # a cubin's .nv.info.<kernel> attributes
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


def _elf_sections(data: bytes) -> list[tuple[bytes, bytes]]:
    """(name, bytes) of each section of a 64-bit little-endian ELF image."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_offset = sections[names_at][4]
    out = []
    for s in sections:
        start = names_offset + s[0]
        out.append((data[start: data.index(b"\0", start)], data[s[4]: s[4] + s[5]]))
    return out


def _nv_info_layout(blob: bytes) -> list[list[int]] | None:
    """A kernel's parameters as [offset, size] in their order, from its .nv.info section's
    KPARAM_INFO records; None where they do not add up to its parameter bank's size."""
    params: dict[int, list[int]] = {}
    bank = None
    at = 0
    while at + 2 <= len(blob):
        fmt, attr = blob[at], blob[at + 1]
        at += 2
        if fmt == _EIFMT_SVAL:
            size = struct.unpack_from("<H", blob, at)[0]
            value = blob[at + 2: at + 2 + size]
            at += 2 + size
            if attr == _EIATTR_KPARAM_INFO and len(value) >= 12:
                _index, ordinal, offset, flags = struct.unpack_from("<IHHI", value)
                params[ordinal] = [offset, (flags >> 18) & 0x3FFF]
            elif attr == _EIATTR_PARAM_CBANK and len(value) >= 8:
                bank = struct.unpack_from("<IHH", value)[2]
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            at += 2                                 # a record of four bytes in all (a byte, a half-word or nothing)
        else:
            return None                             # a record this reader does not know: nothing trusted
    layout = [params[i] for i in sorted(params)]
    if sorted(params) != list(range(len(params))):
        return None
    total = max((o + n for o, n in layout), default=0)
    return layout if total == (bank or 0) else None


def kernel_parameters(fatbins: list[Path]) -> dict[str, list[list[int]]]:
    """Each kernel's parameters, [offset, size] in order, by its device name, read from the cubins
    in the build's fatbinaries (device_code): what the recorder without a GPU copies a launch's
    parameters by (the driver's cuKernelGetParamInfo gives the one on the GPU). A kernel whose
    records do not add up, or that two cubins lay out differently, or in a compressed cubin, is
    left out: its launch is recorded on the GPU instead."""
    found: dict[str, list[list[int]] | None] = {}
    for path in fatbins:
        blob = path.read_bytes()
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, 0)
        at = header
        while magic == FATBIN_MAGIC and at + 16 <= min(len(blob), header + size):
            kind, _v, entry_header, payload = struct.unpack_from("<HHII", blob, at)
            cubin = blob[at + entry_header: at + entry_header + payload]
            at += entry_header + payload
            if kind != _ELF_ENTRY or cubin[:4] != b"\x7fELF" or len(cubin) < 64 or cubin[4] != 2:
                continue
            try:
                sections = _elf_sections(cubin)
            except (struct.error, ValueError, IndexError):
                continue
            for name, data in sections:
                if name.startswith(b".nv.info.") and len(name) > 9:
                    kernel = name[9:].decode(errors="replace")
                    layout = _nv_info_layout(data)
                    if kernel in found and found[kernel] != layout:
                        layout = None
                    found[kernel] = layout
    return {k: v for k, v in found.items() if v is not None}
