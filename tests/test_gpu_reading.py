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
