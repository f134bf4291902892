"""How the child sends a case's outputs back: through the shared area where there is room
(the timed sets' outputs, mapped ahead of the gate), else in the frame's payload on the pipe; the
recorder's sender, which has nothing to send; the counters' channel, which may not be passed on.

Imports only run/ and core/ (the protocol, the job, the child backends' Region).
"""

from __future__ import annotations

from grader.core.contract import Job
from grader.run import protocol
from grader.run.child.backends import Region

SHARED_FROM = 1 << 20       # payloads this large go through the shared area; smaller ones, the pipe


class _Discard:
    def send(self, *_args, **_kw) -> None:
        pass


class Unheard:
    """The counters' channel: ncu, its parent, may not pass the result descriptor on, and what
    the process counts reaches the grader through ncu's log, not frames; a frame that cannot be
    sent is dropped."""

    def __init__(self, channel):
        self.channel = channel

    def send(self, *args, **kw) -> None:
        try:
            self.channel.send(*args, **kw)
        except OSError:
            pass


class NullSender:
    """The recorder's: it has no outputs to send (its buffers are stand-ins), only the recording."""

    channel = _Discard()

    def send(self, backend, frame, regions) -> None:
        pass


class Sender:
    """Sends frames with outputs: their bytes (guards included, one output after another) copied
    into the shared area where there is room, else in the frame's payload on the pipe."""

    def __init__(self, channel: protocol.Channel, shared: protocol.SharedWriter | None):
        self.channel, self.shared = channel, shared

    def prepare(self, job: Job) -> None:
        """Before the gate, outside the GPU's lane: the room for each timed set's outputs mapped and
        populated now, where the preload has not done it already (the timing's last step mapped it:
        most of the 0.09 s its outputs took of the measuring process's 0.33 s in the lane, on an
        H100 host). It is page-locked when the outputs are sent, in the lane: registering host
        memory maps it into the GPU's page tables, which a timing beside it would feel."""
        if self.shared is not None and not self.shared.ahead():
            map_ahead(self.shared, job.timed_output_bytes())

    def send(self, backend, frame, regions: list[Region]) -> None:
        total = sum(r.nbytes for r in regions)
        room = self.shared.reserve(total) if self.shared is not None and total >= SHARED_FROM else None
        if room is None:
            self.channel.send(frame, b"".join(backend.read(r) for r in regions))
            return
        at, address = room
        backend.pin_host(address, total)        # a timed output's copy through pinned memory: a 15th of the time
        for r in regions:
            backend.read_into(r, address)
            address += r.nbytes
        self.channel.send(frame, shared=(at, total))


def map_ahead(shared: protocol.SharedWriter, sizes: list[int]) -> None:
    """Room for sends of these sizes (those large enough for the shared area) mapped and populated
    ahead in shared."""
    for n in sizes:
        if n >= SHARED_FROM:
            shared.reserve_ahead(n)

