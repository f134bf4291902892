"""A static __device__ workspace nothing resets (issue 71): each call adds its sums onto the last
call's. The emulator caught it (its variables are the library's statics, kept from call to call:
the check's reverse-order second run saw the first run's sums), while the H100 graded it correct:
the measuring process put every __device__ variable back to its loaded value before every call,
the check's second run included, and ran that second run only for an exercise whose sums may run
in any order. Now a GPU check runs every case twice, and the second run finds the variables as the
first left them, as two calls in use do (the timing still puts them back before each call, so no
memo of an earlier call pays). A correct kernel that keeps a static workspace and zeroes it at
every call is unaffected (tests/data/fairness/gelu_sum/device_workspace_zeroed_each_call.cu).
"""

from __future__ import annotations

import pytest
from test_replay import _Fake, _job

from grader.run.child import worker
from grader.run.child.measurer import ReplayBackend


class _Prepared(_Fake):
    """The fake GPU, noting each call's key with how it was prepared."""

    def __init__(self):
        super().__init__(measures=True)
        self.prepared: list[bool] = []

    def prepare_call(self, again: bool = False) -> None:
        self.prepared.append(again)


@pytest.mark.parametrize("exercise", ["bias_gelu_fused", "rope_half_split", "gelu_sum"])
def test_a_gpu_check_runs_every_case_twice_the_second_after_the_first_as_it_left_the_variables(exercise):
    job = _job(exercise)
    fake = _Prepared()
    for cj in job.cases:
        worker.run_case(fake, cj, job, worker.InputFiles([]), worker.NullSender(), False)
    assert fake.calls == [k for cj in job.cases for k in (cj.launch.key, cj.launch.key)]
    assert fake.prepared == [False, True] * len(job.cases)


class _Lib:
    def __init__(self):
        self.copies: list[tuple[int, int, int]] = []

    def cuMemcpyDtoDAsync_v2(self, dst, src, nbytes, stream):  # noqa: N802 - the driver's name
        self.copies.append((dst, src, nbytes))
        return 0


class _Driver:
    def __init__(self):
        self.lib = _Lib()


def test_the_measurer_puts_the_variables_back_before_a_call_and_not_before_its_second_run():
    replay = ReplayBackend.__new__(ReplayBackend)          # no GPU here: only what prepare_call reads
    replay._workspace, replay._heap = {}, False
    replay._kept = {0x1000: (0x2000, 64)}                  # a variable at 0x1000, its loaded copy at 0x2000
    replay.driver = _Driver()
    replay.prepare_call()
    assert replay.driver.lib.copies == [(0x1000, 0x2000, 64)]
    replay.prepare_call(again=True)
    assert replay.driver.lib.copies == [(0x1000, 0x2000, 64)]      # the second run sees what the first left
