"""grader/core/blocks.py: elementwise work in blocks over a shared pool of daemon threads."""

import os
import threading

import numpy as np
import pytest

from grader.core import blocks


def test_elementwise_matches_the_whole_array_pass_bit_for_bit():
    v = np.random.default_rng(0).uniform(-5, 5, size=(3, blocks.BLOCK + 17)).astype(np.float32)
    got = blocks.elementwise(lambda b: np.exp(b) * 0.5 + np.sin(b), v)
    want = np.exp(v.astype(np.float64)) * 0.5 + np.sin(v.astype(np.float64))
    assert got.shape == v.shape and got.dtype == np.float64
    assert np.array_equal(got, want)


def test_every_block_is_visited_once_and_an_empty_array_is_none():
    seen = []
    lock = threading.Lock()

    def note(span):
        with lock:
            seen.append((span.start, span.stop))

    blocks.each_block(3 * blocks.BLOCK + 1, note)
    assert sorted(seen) == [(0, blocks.BLOCK), (blocks.BLOCK, 2 * blocks.BLOCK),
                            (2 * blocks.BLOCK, 3 * blocks.BLOCK), (3 * blocks.BLOCK, 3 * blocks.BLOCK + 1)]
    blocks.each_block(0, lambda span: pytest.fail("no block of nothing"))
    assert blocks.elementwise(np.abs, np.zeros((0, 4))).shape == (0, 4)


def test_a_blocks_error_reaches_the_caller():
    def boom(span):
        if span.start:
            raise ValueError(f"block at {span.start}")

    with pytest.raises(ValueError, match="block at"):
        blocks.each_block(2 * blocks.BLOCK, boom)


def test_a_call_from_inside_the_pool_runs_inline_instead_of_waiting_on_itself():
    out = {}

    def outer(span):
        out[span.start] = blocks.elementwise(np.negative, np.ones(2 * blocks.BLOCK)).sum()

    blocks.each_block(blocks.THREADS * 2 * blocks.BLOCK, outer)       # every pool thread nests a call
    assert set(out.values()) == {-2.0 * blocks.BLOCK}


def test_calls_made_at_once_share_the_pool_of_daemon_threads():
    v = np.ones(4 * blocks.BLOCK)
    callers = [threading.Thread(target=blocks.elementwise, args=(np.sqrt, v)) for _ in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    pool = [t for t in threading.enumerate() if t.name.startswith("blocks-")]
    assert pool and len(pool) <= min(blocks.THREADS, os.cpu_count() or 1)
    assert all(t.daemon for t in pool)          # they never hold up the command's exit (cli._leave)


def test_a_forked_child_starts_its_own_threads():
    blocks.elementwise(np.sqrt, np.ones(2 * blocks.BLOCK))      # the parent's pool exists
    pid = os.fork()
    if pid == 0:
        import signal

        signal.alarm(20)                    # a pool that never started would hang the child: end it
        try:
            ok = blocks.elementwise(np.sqrt, np.full(2 * blocks.BLOCK, 4.0)).max() == 2.0
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_hashes_drawn_in_blocks_are_the_generators_bits_in_order():
    """exercises/draws.py draws each block from Philox advanced to the block's start: the values
    are those of one pass over the stream (inputs drawn before and after blocks agree)."""
    from grader.exercises import draws

    for n in (1, 5, 2 * blocks.BLOCK + 3, 3 * blocks.BLOCK):
        one_pass = np.random.Philox(key=draws._key(11, 2)).random_raw((n + 1) // 2).view(np.uint32)[:n]
        assert np.array_equal(draws.hashes(n, 11, 2), one_pass)
    h = draws.hashes(2 * blocks.BLOCK + 1, 3, 0)
    assert np.array_equal(draws.unit(h), (h >> 8).astype(np.float32) * np.float32(2.0 ** -24))


def test_urgent_blocks_go_before_a_backlog_of_ordinary_ones():
    """A correct output's float32 pass (urgent) is not held behind another grade's float64 pass
    queued first in the shared pool: it ends while most of that backlog still waits."""
    import threading
    import time

    from grader.core import blocks

    done_slow, order = [], []
    gate = threading.Event()

    def slow(span: slice) -> None:
        gate.wait(5)
        time.sleep(0.01)
        done_slow.append(span.start)

    def quick(span: slice) -> None:
        order.append(len(done_slow))

    backlog = threading.Thread(target=blocks.each_block, args=(64 * blocks.BLOCK, slow))
    backlog.start()
    time.sleep(0.2)                                  # every slow block queued (the pool's threads held at the gate)
    urgent = threading.Thread(target=blocks.each_block, args=(4 * blocks.BLOCK, quick), kwargs={"urgent": True})
    urgent.start()
    time.sleep(0.2)
    gate.set()
    urgent.join(10)
    backlog.join(30)
    assert len(order) == 4 and max(order) < 64 - blocks.THREADS    # before the backlog had drained
