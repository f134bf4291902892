"""The emulator's buffers: the same bytes whether a large one takes huge pages or is populated."""

import ctypes
import struct

import pytest

from grader.core.backend import EMULATOR
from grader.toolchain.build import build_reference
from grader.run.child import emulator
from grader.run.child.emulator import EmulatorBackend
from grader.core.contract import GUARD_BITS, POISON_BITS


@pytest.fixture(scope="module")
def reference_lib():
    return str(build_reference(backend=EMULATOR).library)


@pytest.mark.parametrize("huge", [True, False])
def test_a_large_input_and_output_hold_their_bytes_and_guards(reference_lib, huge):
    backend = EmulatorBackend(reference_lib)
    backend._huge_pages = huge
    floats = (5 << 20) // 4 + 3                     # over HUGE_FROM, not a whole number of pages
    data = (ctypes.c_float * floats)(*range(floats))
    region = backend.input(ctypes.addressof(data), floats, (floats,), "x")
    assert ctypes.string_at(region.ptr, region.nbytes) == bytes(data)
    _, _, start, end, alloc_end = backend.regions[-1]
    slack = ctypes.string_at(end, alloc_end - backend.GUARD_MAX - end)     # up to the guard (a large buffer's)
    assert slack and set(struct.unpack(f"<{len(slack) // 4}I", slack)) == {0x7FC00000}
    full, view = backend.output(floats, 16, "out")
    assert set(struct.unpack(f"<{view.floats}I", backend.read(view))) == {POISON_BITS}
    words = struct.unpack(f"<{full.floats}I", backend.read(full))
    assert set(words[:16]) == set(words[-16:]) == {GUARD_BITS}


def test_huge_pages_are_asked_for_only_where_the_system_offers_them(monkeypatch, tmp_path):
    setting = tmp_path / "enabled"
    monkeypatch.setattr(emulator, "open", lambda *a, **k: open(setting), raising=False)
    setting.write_text("always madvise [never]\n")
    assert emulator._transparent_huge_pages() is False
    setting.write_text("always [madvise] never\n")
    assert emulator._transparent_huge_pages() is True


def _protection(address: int) -> str:
    """The permissions of the mapping that holds address in this process, '' where none does."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return perms
    return ""


@pytest.mark.parametrize("rows, cols", [(7, 4099), (1, 1025), (101, 97), (16384, 1024)])
def test_a_read_a_few_rows_past_an_input_faults_in_its_own_guard_and_is_said_of_it(reference_lib, rows, cols):
    """A tile of rows read past the end (a row guard missing) reads a row apart: 8 rows past a 7 x 4099
    input is 16 KiB past it. The guard after each input is as long as the input (1 MiB at most), so
    the first such read faults inside the input's own guard and is said of it ("past the end of x"),
    whatever the process mapped beside it; with a page of guard it fell beside, and the same file was
    sometimes a wild pointer (a crash), sometimes a read past x, as the mappings fell."""
    from grader.run.child.backends import _FaultInfo

    backend = EmulatorBackend(reference_lib)
    floats = rows * cols
    data = (ctypes.c_float * floats)()
    region = backend.input(ctypes.addressof(data), floats, (rows, cols), "x")
    backend.input(ctypes.addressof(data), cols, (cols,), "bias")            # another buffer beside it
    for past_rows in (1, 8, 15):
        address = region.ptr + 4 * (floats + past_rows * cols)
        if past_rows * cols * 4 > min(backend.GUARD_MAX, 4 * floats):
            continue                                                         # past the guard's promise
        fault = backend._describe_fault(_FaultInfo(signal=11, address=address))
        assert (fault.buffer, fault.where) == ("x", "past"), (past_rows, fault.buffer, fault.where)
        assert fault.element == floats + past_rows * cols
        if address >= region.ptr + region.nbytes + 4096:                    # beyond the readable slack
            assert _protection(address) == "---p", (past_rows, _protection(address))
    before = backend._describe_fault(_FaultInfo(signal=11, address=region.ptr - 4 * cols))
    assert (before.buffer, before.where) == ("x", "before")
