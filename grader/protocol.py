"""Frames between the grading child and the parent, over a private pipe.

A frame is: 8 bytes (header length, payload length, little-endian uint32),
a JSON header, then raw payload bytes (an output tensor's float32 data).
JSON and raw floats only: the parent never unpickles anything a process
that loaded student code produced.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

_PREFIX = struct.Struct("<II")
MAX_HEADER = 1 << 20


@dataclass
class Frame:
    header: dict
    payload: bytes


def send(fd: int, header: dict, payload: bytes | memoryview = b"") -> None:
    head = json.dumps(header).encode()
    view = memoryview(_PREFIX.pack(len(head), len(payload)) + head)
    while view:
        view = view[os.write(fd, view):]
    view = memoryview(payload).cast("B")
    while view:
        view = view[os.write(fd, view):]


def parse(buffer: bytes | bytearray) -> tuple[list[Frame], str | None]:
    """All complete frames in buffer, and a problem if it ends in a partial or malformed one."""
    frames, pos, view = [], 0, memoryview(buffer)
    while pos < len(view):
        if len(view) - pos < _PREFIX.size:
            return frames, "the result stream ended inside a frame"
        hlen, plen = _PREFIX.unpack_from(view, pos)
        if hlen > MAX_HEADER:
            return frames, "the result stream is malformed"
        end = pos + _PREFIX.size + hlen + plen
        if end > len(view):
            return frames, "the result stream ended inside a frame"
        try:
            header = json.loads(bytes(view[pos + _PREFIX.size : pos + _PREFIX.size + hlen]))
        except ValueError:
            return frames, "the result stream is malformed"
        if not isinstance(header, dict):
            return frames, "the result stream is malformed"
        frames.append(Frame(header, bytes(view[pos + _PREFIX.size + hlen : end])))
        pos = end
    return frames, None
