"""The child's timing method on a recording backend (no GPU): what it launches, on which buffers."""

import pytest

from grader.run.child import timing
from grader.run.child.backends import Region
from grader.core.contract import TimingJob
from grader.core.errors import RubricError
from grader.exercises.rubric import load_rubric


class Recorder:
    """Enough of a backend for the floor's copies: allocations are numbered, copies recorded."""

    def __init__(self):
        self.next_ptr, self.copies, self.fills = 0x1000, [], []

    def alloc(self, floats, name):
        self.next_ptr += 4 * floats + 256
        return Region(self.next_ptr, floats)

    def fill(self, region, bits):
        self.fills.append((region.ptr, bits))

    def copy(self, kind, src, dst):
        self.copies.append((kind, src.ptr, dst.ptr))

        class Ok:
            ok = True
        return Ok()


def job(floor_buffers):
    return TimingJob(floor=["memcpy", "vec4"], informational_floor="scalar", copy_floats=1024, warmup=1,
                     min_samples=10, max_samples=10, target_half_width=0.01, budget_s=1, hard_budget_s=1,
                     slow_launch_s=1, chain=False, floor_buffers=floor_buffers)


def test_each_floor_copy_rotates_over_its_buffer_pairs():
    backend = Recorder()
    copies, flush = timing._floor_copies(backend, job(4), {"l2_bytes": 8 << 20})
    assert set(copies) == {"memcpy", "vec4", "scalar"}
    for _ in range(8):
        copies["memcpy"]()
    pairs = [(s, d) for kind, s, d in backend.copies if kind == "memcpy"]
    assert len(set(pairs)) == 4 and pairs[:4] == pairs[4:]         # every pair, in turn
    assert len({p for pair in pairs for p in pair}) == 8               # no buffer shared by two pairs
    sources = {s for s, _ in pairs}
    assert {ptr for ptr, _ in backend.fills} >= sources                # every source filled (with 1.0)
    assert flush.ptr not in sources and flush.floats == 2 * (8 << 20) // 4


def test_one_pair_when_asked_for_one():
    backend = Recorder()
    copies, _ = timing._floor_copies(backend, job(1), {"l2_bytes": 8 << 20})
    for _ in range(3):
        copies["vec4"]()
    assert len({(s, d) for _, s, d in backend.copies}) == 1


def test_floor_buffers_is_checked(tmp_path):
    from tests.test_rubric import BASE

    p = tmp_path / "r.yaml"
    p.write_text(BASE + "  floor_buffers: 0\n")
    with pytest.raises(RubricError, match="timing.floor_buffers"):
        load_rubric(p)
    p.write_text(BASE + "  floor_buffers: 3\n")
    assert load_rubric(p).timing.floor_buffers == 3
