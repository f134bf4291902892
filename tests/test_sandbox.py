import os

from grader import protocol
from grader.sandbox import CappedOutput


def test_capped_output_keeps_head_and_tail():
    c = CappedOutput(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        c.feed(chunk)
    assert c.total == 26 and bytes(c.head) == b"abcde" and bytes(c.tail) == b"vwxyz" and c.dropped == 16
    assert "16 bytes dropped" in c.text()


def test_frames_round_trip_and_partial_frames_are_reported():
    r, w = os.pipe()
    protocol.send(w, {"type": "case", "n": 1}, b"\x00\x01\x02\x03")
    protocol.send(w, {"type": "done"})
    os.close(w)
    data = os.read(r, 1 << 16)
    os.close(r)
    frames, problem = protocol.parse(data)
    assert problem is None and [f.header["type"] for f in frames] == ["case", "done"]
    assert frames[0].payload == b"\x00\x01\x02\x03"
    frames, problem = protocol.parse(data[:-3])
    assert len(frames) == 1 and "ended inside a frame" in problem
    frames, problem = protocol.parse(b"\xff\xff\xff\x7f\x00\x00\x00\x00")
    assert frames == [] and problem


def test_leftover_processes_sees_a_workers_group_until_it_is_cancelled():
    from grader.sandbox import Worker, leftover_processes

    w = Worker(backend="emulator", output_cap=64, cpu_limit_s=10)
    try:
        assert w.proc.pid in leftover_processes()
    finally:
        w.cancel()
    assert w.proc.pid not in leftover_processes()
