"""Frames between the grading child and the parent, over a private pipe.

A frame is: a prefix (header length and payload length, little-endian uint32,
then a 32-byte HMAC-SHA256), a JSON header, then raw payload bytes (an output
tensor's float32 data). The MAC covers the frame's sequence number, the
payload's length and the header, under a key the parent draws for each job
and hands the child on its stdin. Student code runs in the child and can
write to the pipe: any byte it adds breaks the stream at that point, and the
parent reports the channel as tampered with instead of believing it.

JSON and raw floats only: the parent never unpickles anything a process
that loaded student code produced.

Large payloads (the timed shape's outputs, 64 MB each) do not go through the
pipe: the parent hands the child a memory file (memfd, sealed against shrinking),
the child copies the outputs into it, and the frame's header names where
("shared": [offset, length]); the parent reads them there in place.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import hmac
import json
import mmap
import os
import struct
from dataclasses import dataclass

from grader.core.frames import decode, encode

_PREFIX = struct.Struct("<II32s")
MAX_HEADER = 16 << 20          # a recording (recorder.MAX_RECORDED_BYTES, in hex) fits
# The recorder's exit when its launcher called what only the GPU answers (recorder.cpp.j2's kNeedsGpuExit,
# toolchain/hostlibs.py's stand-in driver): here, where both sides read it, so that the grader's side
# (run/replaying.py) imports none of the child's modules (recorder, its CUDA backend) to know it.
NEEDS_GPU_EXIT = 96
TAMPERED = "something other than the grader wrote to its result channel (a frame failed authentication)"


@dataclass
class Frame:
    header: dict
    payload: bytes | memoryview

    @property
    def data(self):
        """The typed frame the header holds (contract.py), or None for an unknown or malformed one."""
        return decode(self.header)


GO = b"g"       # the byte a gated child waits for on stdin, after its job's line (sandbox.Worker.run)


def new_key() -> bytes:
    return os.urandom(32)


def _mac(key: bytes, seq: int, head: bytes, payload_len: int) -> bytes:
    return hmac.new(key, struct.pack("<QI", seq, payload_len) + head, hashlib.sha256).digest()


class Channel:
    """The child's end: numbers and signs each frame it sends."""

    def __init__(self, fd: int, key: bytes):
        self.fd, self._key, self._seq = fd, key, 0

    def send(self, frame, payload: bytes | memoryview = b"", shared: tuple[int, int] | None = None) -> None:
        """Send a frame (a contract.py dataclass, or its header as a dict) and its payload, or
        where its payload lies in the shared area (offset, length)."""
        header = frame if isinstance(frame, dict) else encode(frame)
        if shared is not None:
            header = {**header, "shared": list(shared)}
        head = json.dumps(header).encode()
        view = memoryview(payload).cast("B")
        prefix = _PREFIX.pack(len(head), len(view), _mac(self._key, self._seq, head, len(view)))
        self._seq += 1
        out = memoryview(prefix + head)
        while out:
            out = out[os.write(self.fd, out):]
        while view:
            view = view[os.write(self.fd, view):]


_PARTIAL = "the result stream ended inside a frame"


def _header_at(view: memoryview, pos: int, seq: int, key: bytes) -> tuple[bytes, int] | str:
    """The frame starting at pos, read as far as its header: (header bytes, payload length), or
    _PARTIAL while its prefix or header has not all arrived, or TAMPERED when it is not the
    frame the child signed as number seq. The payload is not looked at."""
    if len(view) - pos < _PREFIX.size:
        return _PARTIAL
    hlen, plen, mac = _PREFIX.unpack_from(view, pos)
    if hlen > MAX_HEADER:
        return TAMPERED
    start = pos + _PREFIX.size
    if len(view) < start + hlen:
        return _PARTIAL
    head = bytes(view[start:start + hlen])
    if not hmac.compare_digest(mac, _mac(key, seq, head, plen)):
        return TAMPERED
    return head, plen


class StreamCheck:
    """The parent's running check of the result stream as it arrives: once a complete frame fails
    authentication, the stream is forged and nothing the child sends after it can count, so the
    parent stops the child there rather than waiting for its time limit. Only the prefixes and
    headers are read (a payload is skipped, never hashed twice)."""

    def __init__(self, key: bytes):
        self._key, self._pos, self._seq = key, 0, 0
        self.problem: str | None = None

    def feed(self, buffer: bytes | bytearray) -> str | None:
        """Advance over every frame whose header is now in buffer (the whole stream so far);
        TAMPERED once one is forged, else None."""
        view = memoryview(buffer)
        while self.problem is None:
            found = _header_at(view, self._pos, self._seq, self._key)
            if found == _PARTIAL:
                break
            if found == TAMPERED:
                self.problem = TAMPERED
                break
            head, plen = found
            self._pos, self._seq = self._pos + _PREFIX.size + len(head) + plen, self._seq + 1
        return self.problem


def parse(buffer: bytes | bytearray, key: bytes) -> tuple[list[Frame], str | None]:
    """All authentic frames in buffer, in order, and a problem if it ends in a partial, malformed
    or forged one (everything after that point is ignored)."""
    frames: list[Frame] = []
    pos, view, seq = 0, memoryview(buffer), 0
    while pos < len(view):
        found = _header_at(view, pos, seq, key)
        if isinstance(found, str):
            return frames, found
        head, plen = found
        end = pos + _PREFIX.size + len(head) + plen
        if end > len(view):
            return frames, _PARTIAL
        try:
            header = json.loads(head)
        except (ValueError, RecursionError):        # a header nested past the parser's depth is forged too
            return frames, TAMPERED
        if not isinstance(header, dict):
            return frames, TAMPERED
        frames.append(Frame(header, bytes(view[end - plen: end])))
        pos, seq = end, seq + 1
    return frames, None


def ends_with_done(buffer: bytes | bytearray, key: bytes) -> bool:
    """Whether buffer holds only authentic, whole frames and its last is the done frame (the
    child has sent everything it will)."""
    frames, problem = parse(buffer, key)
    return problem is None and bool(frames) and frames[-1].header.get("type") == "done"


# -- the shared area -----------------------------------------------------------

_F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
_F_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 0x0002)


def shared_area() -> int | None:
    """The parent's end: an empty memory file that nobody can shrink once the parent has sized
    it (sparse: only what is written takes memory), so reading it can never fault; None where
    the system has no memfd."""
    if not hasattr(os, "memfd_create"):
        return None
    try:
        return os.memfd_create("grader-outputs", os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 2))
    except OSError:
        return None


def size_shared_area(fd: int, nbytes: int) -> bool:
    """Size the area and seal it against shrinking; False when that failed (use the pipe)."""
    try:
        os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, _F_ADD_SEALS, _F_SEAL_SHRINK)
        return True
    except OSError:
        return False


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class SharedWriter:
    """The child's end: hands out room in the shared area, front to back, each piece mapped on its
    own and populated at once (page by page, the faults cost more than the copy). Room may be
    mapped ahead (reserve_ahead: before the measuring process's gate, outside the GPU's lane), and
    is then handed out by the first reserve of the same size."""

    def __init__(self, fd: int, nbytes: int):
        self.fd, self.size, self.used = fd, nbytes, 0
        self._maps: list[mmap.mmap] = []
        self._ahead: list[tuple[int, int, int]] = []        # (bytes, offset, address), mapped, not yet handed out
        self._mapped_ahead = False

    def reserve_ahead(self, nbytes: int) -> tuple[int, int] | None:
        """Map nbytes of room now, for a later reserve(nbytes): (offset, address), or None."""
        room = self._map(nbytes)
        if room is not None:
            self._ahead.append((nbytes, *room))
            self._mapped_ahead = True
        return room

    def ahead(self) -> bool:
        """Whether room was mapped ahead (handed out or not)."""
        return self._mapped_ahead

    def reserve(self, nbytes: int) -> tuple[int, int] | None:
        """(offset in the area, address here) of nbytes of room, or None when the area is full."""
        for i, (size, at, address) in enumerate(self._ahead):
            if size == nbytes:
                del self._ahead[i]
                return at, address
        return self._map(nbytes)

    def _map(self, nbytes: int) -> tuple[int, int] | None:
        at = -(-self.used // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY
        if nbytes <= 0 or at + nbytes > self.size:
            return None
        try:
            window = mmap.mmap(self.fd, nbytes, mmap.MAP_SHARED | _POPULATE, mmap.PROT_READ | mmap.PROT_WRITE,
                               offset=at)
        except (OSError, ValueError):
            return None                         # the pipe, then
        self._maps.append(window)
        self.used = at + nbytes
        return at, ctypes.addressof(ctypes.c_char.from_buffer(window))


def resolve_shared(frames: list[Frame], fd: int | None, nbytes: int) -> tuple[mmap.mmap | None, str | None]:
    """The parent's end, once the child is gone: each frame that names the shared area gets its
    payload from there (a view, not a copy). Returns the mapping (keep it while the payloads are
    read) and a problem when a frame points outside the area."""
    if fd is None or not any("shared" in f.header for f in frames):
        return None, None
    spans = []
    for f in frames:
        where = f.header.pop("shared", None)
        if where is None:
            continue
        if (not isinstance(where, list) or len(where) != 2 or not all(isinstance(v, int) for v in where)
                or where[0] < 0 or where[1] < 0 or where[0] + where[1] > nbytes):
            return None, TAMPERED
        spans.append((f, where[0], where[1]))
    used = max(at + n for _, at, n in spans)
    if used == 0:
        return None, None
    area = mmap.mmap(fd, used, mmap.MAP_SHARED | _POPULATE, mmap.PROT_READ)
    view = memoryview(area)
    for f, at, n in spans:
        f.payload = view[at: at + n]
    return area, None
