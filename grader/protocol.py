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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from dataclasses import dataclass

_PREFIX = struct.Struct("<II32s")
MAX_HEADER = 1 << 20
TAMPERED = "something other than the grader wrote to its result channel (a frame failed authentication)"


@dataclass
class Frame:
    header: dict
    payload: bytes

    @property
    def data(self):
        """The typed frame the header holds (contract.py), or None for an unknown or malformed one."""
        from grader.contract import decode

        return decode(self.header)


def new_key() -> bytes:
    return os.urandom(32)


def _mac(key: bytes, seq: int, head: bytes, payload_len: int) -> bytes:
    return hmac.new(key, struct.pack("<QI", seq, payload_len) + head, hashlib.sha256).digest()


class Channel:
    """The child's end: numbers and signs each frame it sends."""

    def __init__(self, fd: int, key: bytes):
        self.fd, self._key, self._seq = fd, key, 0

    def send(self, frame, payload: bytes | memoryview = b"") -> None:
        """Send a frame (a contract.py dataclass, or its header as a dict) and its payload."""
        from grader.contract import encode

        head = json.dumps(frame if isinstance(frame, dict) else encode(frame)).encode()
        view = memoryview(payload).cast("B")
        prefix = _PREFIX.pack(len(head), len(view), _mac(self._key, self._seq, head, len(view)))
        self._seq += 1
        out = memoryview(prefix + head)
        while out:
            out = out[os.write(self.fd, out):]
        while view:
            view = view[os.write(self.fd, view):]


def parse(buffer: bytes | bytearray, key: bytes) -> tuple[list[Frame], str | None]:
    """All authentic frames in buffer, in order, and a problem if it ends in a partial, malformed
    or forged one (everything after that point is ignored)."""
    frames: list[Frame] = []
    pos, view, seq = 0, memoryview(buffer), 0
    while pos < len(view):
        if len(view) - pos < _PREFIX.size:
            return frames, "the result stream ended inside a frame"
        hlen, plen, mac = _PREFIX.unpack_from(view, pos)
        if hlen > MAX_HEADER:
            return frames, TAMPERED
        end = pos + _PREFIX.size + hlen + plen
        if end > len(view):
            return frames, "the result stream ended inside a frame"
        head = bytes(view[pos + _PREFIX.size : pos + _PREFIX.size + hlen])
        if not hmac.compare_digest(mac, _mac(key, seq, head, plen)):
            return frames, TAMPERED
        try:
            header = json.loads(head)
        except ValueError:
            return frames, TAMPERED
        if not isinstance(header, dict):
            return frames, TAMPERED
        frames.append(Frame(header, bytes(view[pos + _PREFIX.size + hlen : end])))
        pos, seq = end, seq + 1
    return frames, None
