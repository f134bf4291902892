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
    slack = ctypes.string_at(end, alloc_end - backend.PAGE - end)     # up to the guard page
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
