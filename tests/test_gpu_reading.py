"""The GPU's reading after the timing (result.json's device.after): through NVML where it loads,
with nvidia-smi's keys and text, and nvidia-smi's own reading wherever NVML cannot answer."""

from __future__ import annotations

import pytest

from grader.toolchain import gpuinfo


class FakeNvml:
    """libnvidia-ml's calls as ctypes makes them: out-parameters by reference, buffers by value."""

    def __init__(self, fail: str = ""):
        self.fail, self.asked = fail, []

    def _done(self, name: str) -> int:
        return 999 if name == self.fail else 0

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        self.asked.append(("index", index))
        handle._obj.value = 7
        return self._done("index")

    def nvmlDeviceGetHandleByUUID(self, uuid, handle):
        self.asked.append(("uuid", uuid))
        handle._obj.value = 7
        return self._done("uuid")

    def nvmlDeviceGetName(self, handle, buf, size):
        buf.value = b"NVIDIA H200"
        return self._done("name")

    def nvmlSystemGetDriverVersion(self, buf, size):
        buf.value = b"580.159.04"
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        major._obj.value, minor._obj.value = 9, 0
        return 0

    def nvmlDeviceGetClockInfo(self, handle, which, mhz):
        mhz._obj.value = {1: 1980, 2: 3201}[which]
        return self._done("clock")

    def nvmlDeviceGetMaxClockInfo(self, handle, which, mhz):
        mhz._obj.value = 1980
        return 0

    def nvmlDeviceGetTemperature(self, handle, sensor, degrees):
        degrees._obj.value = 41
        return 0


@pytest.fixture
def nvml(monkeypatch):
    def use(lib):
        monkeypatch.setattr(gpuinfo._Nvml, "_lib", lib)
        monkeypatch.setattr(gpuinfo._Nvml, "_tried", True)
        monkeypatch.setattr(gpuinfo, "snapshot", lambda: {"from": "nvidia-smi"})
        return lib
    return use


def test_an_nvml_reading_has_nvidia_smis_keys_and_text(nvml):
    lib = nvml(FakeNvml())
    got = gpuinfo.reading("1")
    assert got == {"name": "NVIDIA H200", "compute_cap": "9.0", "clocks.sm": "1980", "clocks.mem": "3201",
                   "clocks.max.sm": "1980", "driver_version": "580.159.04", "temperature.gpu": "41"}
    assert list(got) == list(gpuinfo._FIELDS)
    assert lib.asked == [("index", 1)]                 # the GPU the children saw, not always the first


def test_a_gpu_named_by_uuid_is_read_by_its_uuid(nvml):
    lib = nvml(FakeNvml())
    assert gpuinfo.reading("GPU-1234abcd")["name"] == "NVIDIA H200"
    assert lib.asked == [("uuid", b"GPU-1234abcd")]


@pytest.mark.parametrize("fail", ["index", "uuid", "name", "clock"])
def test_where_nvml_cannot_answer_nvidia_smi_is_read_instead(nvml, fail):
    nvml(FakeNvml(fail=fail))
    assert gpuinfo.reading("GPU-x" if fail == "uuid" else "0") == {"from": "nvidia-smi"}


def test_without_nvml_the_reading_is_nvidia_smis(nvml):
    nvml(None)
    assert gpuinfo.reading() == {"from": "nvidia-smi"}


class CountingNvml(FakeNvml):
    """NVML's count of initialisations: the library lets go of the GPU when it is back at none."""

    def __init__(self):
        super().__init__()
        self.holds = self.most = 0

    def nvmlInit_v2(self):
        self.holds += 1
        self.most = max(self.most, self.holds)
        return 0

    def nvmlShutdown(self):
        assert self.holds > 0, "NVML shut down more often than it was initialised"
        self.holds -= 1
        return 0


def test_a_reading_holds_nvml_only_while_it_reads(nvml):
    lib = nvml(CountingNvml())
    gpuinfo.reading("0")
    assert lib.holds == 0 and lib.most == 1


def test_the_warm_hold_makes_the_reading_quick_and_is_let_go_of_after_it(nvml, monkeypatch):
    """warm_reading's hold keeps NVML initialised across the reading (no second start in the lane's
    hand-on): one hold for the process however many grades ask (a batch's), and release_reading ends
    it: nothing is left for the process's exit to close."""
    lib = nvml(CountingNvml())
    monkeypatch.setattr(gpuinfo._Nvml, "_warm", False)
    assert gpuinfo.warm_reading() and gpuinfo.warm_reading()
    assert lib.holds == 1
    gpuinfo.reading("0")
    assert lib.holds == 1 and lib.most == 2
    gpuinfo.release_reading()
    gpuinfo.release_reading()                        # a second time: nothing more to let go of
    assert lib.holds == 0


def _run(rubric, one_grade: bool):
    from grader.grade.children import GradeRun
    from grader.grade.request import GradeOptions, GradeRequest

    from grader.core.backend import EMULATOR
    from grader.grade.machine import Machine

    return GradeRun(GradeRequest("x.cu", rubric, Machine(EMULATOR), GradeOptions(one_grade=one_grade)), reading=None,
                    say=lambda m: None)


def _joined():
    import threading

    for t in threading.enumerate():
        if t.name == "nvml-release":
            t.join(5)


def test_a_process_s_one_grade_lets_go_of_nvml_and_a_batch_s_grade_does_not(nvml, rubric, monkeypatch):
    from concurrent.futures import Future

    lib = nvml(CountingNvml())
    monkeypatch.setattr(gpuinfo._Nvml, "_warm", False)
    for one_grade, left in ((True, 0), (False, 1)):
        run = _run(rubric, one_grade)
        run._nvml = Future()
        run._nvml.set_result(gpuinfo.warm_reading())
        run.close()                              # ended before its reading: let go of (in a thread) or kept
        _joined()
        assert lib.holds == left, one_grade
    gpuinfo.release_reading()
    run = _run(rubric, True)
    run._nvml = Future()
    run._nvml.set_result(gpuinfo.warm_reading())
    reading = Future()
    reading.set_result(gpuinfo.reading("0"))
    run._let_go_of_nvml(reading)
    run._let_go_of_nvml(reading)
    assert lib.holds == 0
