"""The child's timing method on a recording backend (no GPU): what it launches, on which buffers."""

import pytest

from grader.run.child import floors
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
    copies = floors.floor_copies(backend, job(4))
    flush = floors.l2_flush(backend, {"l2_bytes": 8 << 20})
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
    copies = floors.floor_copies(backend, job(1))
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


def _set(name, x_floats, out_floats, chain_floats=0):
    from grader.core.contract import Buffer, Call, CaseJob

    bufs = [Buffer("x", x_floats, role="in", shape=[x_floats]), Buffer("small", 3, role="in", shape=[3]),
            Buffer("out", out_floats, role="out", shape=[out_floats])]
    if chain_floats:       # the chain's tensors are larger here: they must not be taken
        bufs += [Buffer("r", chain_floats, role="in", shape=[chain_floats], chain=True),
                 Buffer("chain", chain_floats, role="out", shape=[chain_floats], chain=True)]
    return CaseJob(name, bufs, Call("k", []), timed=True)


def test_floor_on_the_submissions_buffers_copies_each_sets_input_into_its_output():
    from grader.core.contract import FloorPlacement

    backend = Recorder()
    sets = [_set("timed 0", 2048, 1024, chain_floats=4096), _set("timed 1", 2048, 1024)]
    allocated = [({b.name: backend.alloc(b.floats, b.name) for b in cj.buffers}, {}) for cj in sets]
    allocs_before = backend.next_ptr
    cfg = job(4)
    cfg.floor_placement = FloorPlacement.SUBMISSION
    copies = floors.floor_copies(backend, cfg, sets, allocated)
    assert backend.next_ptr == allocs_before                # nothing allocated
    assert copies.pairs == []                       # nothing of the floor's own for Untouched to watch
    for _ in range(4):
        copies["vec4"]()
    pairs = [(s, d) for _, s, d in backend.copies]
    want = [(views["x"].ptr, views["out"].ptr) for views, _ in allocated]
    assert pairs == want + want                     # set 0's x into its out, then set 1's, in turn
    assert not backend.fills                        # the inputs keep the values drawn for them


def test_the_submissions_buffers_copy_copy_floats_and_no_more():
    from grader.core.contract import FloorPlacement

    class Sized(Recorder):
        def copy(self, kind, src, dst):
            self.copies.append((src.floats, dst.floats))
            return super().copy(kind, src, dst)

    backend = Sized()
    sets = [_set("timed 0", 4096, 2048)]
    allocated = [({b.name: backend.alloc(b.floats, b.name) for b in cj.buffers}, {}) for cj in sets]
    cfg = job(1)
    cfg.floor_placement = FloorPlacement.SUBMISSION
    copies = floors.floor_copies(backend, cfg, sets, allocated)
    copies["memcpy"]()
    assert backend.copies[0] == (1024, 1024)        # copy_floats, though x holds 4096 and out 2048
    cfg.copy_floats = 4096                          # more than the output holds: said, never a short copy
    with pytest.raises(RuntimeError, match="out holds 2048 floats, the copy needs 4096"):
        floors.floor_copies(backend, cfg, sets, allocated)


def test_floor_placement_is_checked_against_the_tensors(tmp_path):
    from tests.test_rubric import BASE
    from grader.core.contract import FloorPlacement
    from grader.grade.jobs import _timing_job

    p = tmp_path / "r.yaml"
    p.write_text(BASE)
    assert _timing_job(load_rubric(p)).floor_placement is FloorPlacement.OWN
    p.write_text(BASE + "  floor_placement: submission\n")
    assert _timing_job(load_rubric(p)).floor_placement is FloorPlacement.SUBMISSION
    p.write_text(BASE.replace("copy_floats: n", "copy_floats: 2 * n") + "  floor_placement: submission\n")
    with pytest.raises(RubricError, match=r"timing.floor_placement.*2048.*input tensor holds 1024 and the largest "
                                          r"output tensor holds 1024"):
        load_rubric(p)
    p.write_text(BASE + "  floor_placement: nearby\n")
    with pytest.raises(RubricError, match="timing.floor_placement"):
        load_rubric(p)
