"""Elementwise numpy work on large arrays, a block at a time, spread over a few threads.

numpy releases the interpreter lock inside each operation, so threads help, but only while each
operation is long against the lock's hand-off: on the H200's host (16 cores) the GELU of the timed
shape's 16M values took 1.7 s on one thread, 2.1 to 3.0 s in 64K-value blocks on 16 threads a call
(six calls at once: the lock, not the cores, was the limit), and 0.64 s in 256K-value blocks on
8 threads. Every call shares one pool of at most THREADS threads, so calls made at once (a run's
cases are drawn and answered side by side) queue their blocks instead of multiplying threads.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from concurrent.futures import Future
from typing import Callable

import numpy as np

BLOCK = 1 << 18             # values a block: each operation is long against the lock's hand-off
THREADS = 8                 # the pool's size at most (fewer on a machine with fewer cores)

_lock = threading.Lock()
_queue: queue.PriorityQueue = queue.PriorityQueue()     # (priority, order, work): urgent work first
_order = itertools.count()
_threads: list[threading.Thread] = []
_mine = threading.local()   # set in the pool's threads: a call from one of them runs inline


def _start_pool() -> None:
    """The shared threads, started on first use. Daemons: idle between calls, they never hold up
    the command's exit (cli._leave waits for every other thread)."""
    with _lock:
        while len(_threads) < max(1, min(THREADS, os.cpu_count() or 1)):
            t = threading.Thread(target=_work, name=f"blocks-{len(_threads)}", daemon=True)
            t.start()
            _threads.append(t)


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: start new ones there on first use."""
    global _lock, _queue
    _lock, _queue = threading.Lock(), queue.PriorityQueue()
    _threads.clear()


os.register_at_fork(after_in_child=_forget_pool)


def _work() -> None:
    _mine.inside = True
    while True:
        _, _, (fn, span, done) = _queue.get()
        if not done.set_running_or_notify_cancel():
            continue
        try:
            fn(span)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
            done.set_exception(exc)
        else:
            done.set_result(None)


def each_block(size: int, fn: Callable[[slice], None], *, urgent: bool = False) -> None:
    """fn(slice) for every BLOCK-long slice of range(size), in the shared pool (inline for one
    block, or when called from the pool itself: a block waiting on blocks would wait forever).
    urgent: the blocks go before every waiting block that is not (a correct output's float32
    pass, a few milliseconds, is not held behind another grade's float64 pass over a wrong
    timed shape, a second of the pool's: in a batch, where the pool is every grade's)."""
    spans = [slice(start, min(start + BLOCK, size)) for start in range(0, size, BLOCK)]
    if len(spans) <= 1 or getattr(_mine, "inside", False):
        for span in spans:
            fn(span)
        return
    _start_pool()
    waiting = []
    for span in spans:
        done: Future = Future()
        _queue.put((0 if urgent else 1, next(_order), (fn, span, done)))
        waiting.append(done)
    for done in waiting:
        done.result()


def elementwise(fn: Callable[[np.ndarray], np.ndarray], v: np.ndarray, dtype=np.float64) -> np.ndarray:
    """fn (elementwise: out[i] depends on v[i] alone) of v as dtype, computed block by block."""
    return mapped(fn, np.asarray(v, dtype=dtype), dtype)


def mapped(fn: Callable[[np.ndarray], np.ndarray], v: np.ndarray, out_dtype) -> np.ndarray:
    """fn of v block by block (fn elementwise), into a new array of v's shape and out_dtype."""
    flat = np.ascontiguousarray(v).reshape(-1)
    out = np.empty(flat.shape, dtype=out_dtype)

    def one(span: slice) -> None:
        out[span] = fn(flat[span])

    each_block(flat.size, one)
    return out.reshape(np.shape(v))
