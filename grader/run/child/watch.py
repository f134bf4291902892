"""What the timing watches besides the time (timing.py): the grader's buffers no kernel may change
(Untouched), and each timed set's output after sampled launches (OutputSums), so that a kernel
that stashes work in memory it was not given, or a launcher that does less on some calls, shows.
"""

from __future__ import annotations

import ctypes

from grader.core.contract import CaseJob
from grader.run.child.backends import Region

# A sampled round's output is checksummed with this chance, the rounds drawn from the measuring
# process's own seed (never shown to the recorder): a checksum after every timed launch, though
# outside the events, made the samples noisy enough on an H200 that the sampling ran to its
# budget (3 s) instead of converging in 0.1 s.
SAMPLED_SUMS = 1 / 16


class Untouched:
    """The grader's buffers no kernel may change during the timing: every set's inputs and the
    copies' sources, checksummed now and compared by changed(); each copy's destination must then
    hold its source's words (the copies wrote it last, unless a kernel did)."""

    def __init__(self, backend, sets: list[CaseJob], allocated, copies: dict):
        self.backend = backend
        self.named = [(f"{b.name} ({cj.name})", views[b.name]) for cj, (views, _) in zip(sets, allocated, strict=False)
                      for b in cj.buffers if b.role == "in" and b.floats]
        self.pairs = copies.pairs
        self.before = backend.checksums([r for _, r in self.named] + [src for src, _ in self.pairs])

    def changed(self) -> list[str]:
        sync = self.backend.synchronize()
        if not sync.ok:
            return []
        srcs = [src for src, _ in self.pairs]
        now = self.backend.checksums([r for _, r in self.named] + srcs + [dst for _, dst in self.pairs])
        n = len(self.named)
        changed = [name for (name, _), a, b in zip(self.named, self.before, now, strict=False) if a != b]
        pairs = len(self.pairs)
        for i in range(pairs):
            if self.before[n + i] != now[n + i]:
                changed.append(f"the floor copy's source buffer {i}")
            elif now[n + pairs + i] != now[n + i]:
                changed.append(f"the floor copy's destination buffer {i}")
        return changed


class OutputSums:
    """Each timed set's outputs (guards included) checksummed after every timed launch of the set,
    into device memory (read once at the end): the parent checks that every launch left the same
    output as the one it verifies."""

    def __init__(self, backend, sets: list[CaseJob], allocated, outputs, most: int):
        self.backend = backend
        self.fulls = [[(b.name, fulls[b.name]) for b in outs] for (_, fulls), outs in zip(allocated, outputs, strict=False)]
        self.names = [cj.name for cj in sets]
        self.most = most
        self.slots = [[backend.kept(2 * most) for _ in outs] for outs in self.fulls]
        self.count = [0] * len(sets)
        self.chooser = backend.chooser()

    def now(self) -> bool:
        """Whether to checksum this sampled round's output (SAMPLED_SUMS of them, unpredictably)."""
        return self.chooser is not None and self.chooser.random() < SAMPLED_SUMS

    def take(self, k: int) -> None:
        if self.count[k] >= self.most:
            return
        for (_, full), slots in zip(self.fulls[k], self.slots[k], strict=False):
            self.backend.checksum_into(full, slots, self.count[k])
        self.count[k] += 1

    def read(self) -> dict:
        if not self.backend.measures:
            return {}
        out: dict = {}
        for name, fulls, slots, count in zip(self.names, self.fulls, self.slots, self.count, strict=False):
            per = {}
            for (output, _), slot in zip(fulls, slots, strict=False):
                host = ctypes.create_string_buffer(8 * count)
                self.backend.read_into(Region(slot.ptr, 2 * count), ctypes.addressof(host))
                per[output] = list(memoryview(host.raw).cast("Q"))
            out[name] = per
        return out
