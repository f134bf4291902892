"""Record, then replay: how the GPU's measurements stay out of reach of the submission's host code.

A submission is kernels plus an optional launcher that only decides launch configurations. On
the GPU it runs in two processes:

1. The recorder loads the submission's library (inside the wall) and calls the launcher for every
   call the measuring process will make, in the same order (the same worker code drives it, over
   a backend whose buffers are stand-ins: addresses in STAND_IN_WINDOW that hold nothing). The
   harness's launch entry points record each launch (kernel, grid, block, shared memory, the
   parameter buffer, the stream, the thread) and run nothing. What comes back is a Recording:
   claimed data.
2. The measuring process never loads the submission's library. It loads the library's device code
   (its fatbinaries, read by the parent) with the driver, checks the recording against it
   (check_recording: every kernel exists, every parameter buffer has the kernel's size, every
   address points into a buffer given to that call), and replays each call's launches on the
   grader's stream, with each stand-in address relocated to the grader's own buffer.

Whatever the recorder missed or was made to forge (a launch through a driver function found at
run time, a thread, a rewritten frame) either never runs or runs in the open: the replay's
outputs are then wrong, or its time honest. This module is the part of that both children share:
the stand-in addresses and the relocation. What refuses a recording before anything is replayed
is the parent's (grader/run/replaying.py).
"""

from __future__ import annotations

from dataclasses import dataclass


# Stand-in buffers live here: far above any integer a launcher passes, below where the CUDA driver
# maps device memory on Linux x86-64, each in a slot of its own, 2 MiB aligned (as cudaMalloc's
# buffers are at least 256-byte aligned: a launcher that checks alignment decides the same way).
STAND_IN_BASE = 0x7E00_0000_0000
STAND_IN_SPAN = 1 << 40
STAND_IN_SLOT = 256 << 20
# An address this close to a buffer (before it, or past its end) still belongs to it: a launcher
# may pass `out - 1` or `x + rows * cols` with a kernel that only reads what it should.
SLACK = 64 << 10


def in_stand_in_window(value: int) -> bool:
    return STAND_IN_BASE <= value < STAND_IN_BASE + STAND_IN_SPAN


class StandIns:
    """The recorder's allocator: an address for every buffer, none of it memory."""

    def __init__(self) -> None:
        self._next = STAND_IN_BASE

    def take(self, nbytes: int) -> int:
        at = self._next
        slots = max(1, -(-(nbytes + 2 * SLACK) // STAND_IN_SLOT))
        self._next += slots * STAND_IN_SLOT
        if self._next >= STAND_IN_BASE + STAND_IN_SPAN:        # a job never needs 4096 slots; wrap all the same
            self._next = STAND_IN_BASE
        return at + SLACK


class Refused(Exception):
    """A recording the replay will not run; the message is in the student's terms."""


@dataclass(frozen=True)
class Param:
    offset: int
    size: int


def relocate(args: bytes, params: list[Param], stand_ins: dict[str, tuple[int, int]],
             real: dict[str, int], *, kernel: str, case: str) -> bytes:
    """args (a parameter buffer the recorder saw) with every address of a stand-in buffer replaced
    by the same place in the grader's buffer of that tensor.

    stand_ins maps a tensor to (stand-in address, bytes) as the launcher was given it, real to the
    grader's address of the same tensor. Every 8-byte-aligned word of every parameter is looked at
    (a pointer may sit inside a struct); a word in the stand-in window that lies in none of the
    call's buffers is refused: it is a pointer kept from another call, or made up."""
    out = bytearray(args)
    spans = sorted((addr, addr + nbytes, name) for name, (addr, nbytes) in stand_ins.items())
    for index, p in enumerate(params):
        first = p.offset + (-p.offset % 8)
        for at in range(first, p.offset + p.size - 7, 8):
            word = int.from_bytes(out[at: at + 8], "little")
            if not in_stand_in_window(word):
                continue
            owner = next(((lo, name) for lo, hi, name in spans if lo - SLACK <= word <= hi + SLACK), None)
            if owner is None:
                raise Refused(
                    f"argument {index + 1} of {kernel} (in the call for {case}) holds an address that lies in none "
                    f"of the buffers the grader passed to that call ({', '.join(sorted(stand_ins))}). Pass the "
                    "pointers your launcher is given, or pointers into them; a pointer kept from an earlier call "
                    "is not valid in the next one.")
            lo, name = owner
            if name not in real:
                raise Refused(f"argument {index + 1} of {kernel} (in the call for {case}) points into {name}, "
                              "which the grader did not pass to that call.")
            out[at: at + 8] = (real[name] + (word - lo)).to_bytes(8, "little", signed=False)
    return bytes(out)


def recording_stand_ins(given: dict, sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """A call's stand-in buffers as relocate() takes them: tensor -> (address, bytes), the bytes
    the measuring process's own (a recording names addresses only)."""
    return {name: (int(address), int(sizes.get(name, 0))) for name, address in given.items()}


def call_sizes(cases) -> dict[str, dict[str, int]]:
    """For each case job's call key, the bytes of each tensor it passes."""
    return {cj.launch.key: {b.name: 4 * b.floats for b in cj.buffers} for cj in cases}
