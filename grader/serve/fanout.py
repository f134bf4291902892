"""The events' fan-out of a running course server: one task reads the store's new events every
FANOUT_S and puts each into the queues of the connections watching its upload (and the
instructor's class page), so many watchers cost one query a tick, not one each. A watcher that
does not read is dropped (DROPPED), so memory stays bounded; a revoked token makes every stream
check its own (RECHECK).
"""

from __future__ import annotations

import asyncio

from grader.serve.store import Store

FANOUT_S = 0.1              # how often the fan-out reads new events
WATCHER_QUEUE = 1000        # events waiting for one watcher that does not read: beyond, it is dropped
RECHECK = "recheck"         # put into every watcher's queue when a token was revoked: each checks its own
DROPPED = "dropped"         # put into a watcher's queue that overflowed: its stream ends (EventSource reconnects)


class Fanout:
    """New events from the store, to the queues watching them (one reader for every watcher)."""

    def __init__(self, store: Store):
        self.store = store
        self.cursor = store.last_event()
        self.revoked = store.revocations()
        self.uploads: dict[str, set[asyncio.Queue]] = {}
        self.everyone: set[asyncio.Queue] = set()        # the instructor's class pages

    def watch(self, upload: str | None) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(WATCHER_QUEUE)
        (self.everyone if upload is None else self.uploads.setdefault(upload, set())).add(q)
        return q

    def unwatch(self, upload: str | None, q: asyncio.Queue) -> None:
        if upload is None:
            self.everyone.discard(q)
            return
        watchers = self.uploads.get(upload)
        if watchers is not None:
            watchers.discard(q)
            if not watchers:
                del self.uploads[upload]

    def _put(self, upload: str | None, q: asyncio.Queue, item) -> None:
        """An event (or RECHECK) to one watcher; a watcher that does not read (its queue full) is
        dropped: its queue emptied, DROPPED its last item, so memory stays bounded."""
        try:
            q.put_nowait(item)
        except asyncio.QueueFull:
            self.unwatch(upload, q)
            while not q.empty():
                q.get_nowait()
            q.put_nowait(DROPPED)

    def tick(self) -> None:
        revoked = self.store.revocations()
        if revoked != self.revoked:               # a token was revoked: every stream checks its own now
            self.revoked = revoked
            for upload, watchers in list(self.uploads.items()):
                for q in list(watchers):
                    self._put(upload, q, RECHECK)
            for q in list(self.everyone):
                self._put(None, q, RECHECK)
        for r in self.store.events(after=self.cursor, limit=10000):
            self.cursor = r["seq"]
            for q in list(self.uploads.get(r["upload"], ())):
                self._put(r["upload"], q, r)
            for q in list(self.everyone):
                self._put(None, q, r)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FANOUT_S)
            if self.uploads or self.everyone:
                self.tick()
            else:
                self.cursor = self.store.last_event()
                self.revoked = self.store.revocations()
