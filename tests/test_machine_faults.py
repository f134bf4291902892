"""A fault of the machine is never a student's grade (issue 33): the compilers' temporary folder,
a corrupt cache, the grader's own files broken, two batches on one folder, a Slurm queue that
stalls. Each with the real fault where this machine can make it (a read-only or full tmpfs needs
root, as CI has; a missing folder, truncated or overwritten files and a held lock need nothing)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core import sealed
from grader.toolchain.build import machine_fault
from grader.exercises import load_exercise
from grader.grade.pipeline import grade_submission
from conftest import SUBMISSIONS, run_grader

ROOT = Path(__file__).resolve().parent.parent
CORRECT = ROOT / "submissions" / "bias_gelu_fused" / "float4_launcher.cu"


@contextlib.contextmanager
def _tmpfs(path: Path, options: str):
    """A tmpfs mounted at path for the test (root only), unmounted however the test ends."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# -- the compilers' temporary folder -------------------------------------------------------------

def _cold_submit(tmp_path: Path, tmpdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_grader("submit", str(CORRECT), "--backend", "emulator", "--report-dir", str(tmp_path / "report"), *extra,
                      env={"TMPDIR": str(tmpdir), "GRADER_CACHE_DIR": str(tmp_path / "cold-cache")})


def _says_the_machine(r: subprocess.CompletedProcess, folder: Path) -> None:
    assert r.returncode == 4, r.stdout + r.stderr
    assert "COULD NOT BE GRADED ON THIS MACHINE" in r.stdout, r.stdout
    assert "DID NOT COMPILE" not in r.stdout
    assert str(folder) in r.stdout and "TMPDIR" in r.stdout


def test_a_missing_temporary_folder_is_the_machine_not_a_compile_error(tmp_path):
    missing = tmp_path / "no-such-folder"
    r = _cold_submit(tmp_path, missing)
    _says_the_machine(r, missing)
    doc = json.loads((tmp_path / "report" / "result.json").read_text())
    assert doc["status"] == "infrastructure_error"


def test_a_read_only_temporary_folder_is_the_machine(tmp_path):
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        _says_the_machine(_cold_submit(tmp_path, ro), ro)


def test_a_full_temporary_folder_is_the_machine(tmp_path):
    with _tmpfs(tmp_path / "full", "size=256k") as full:
        fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)     # filled to the last block
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        os.close(fd)
        r = _cold_submit(tmp_path, full)
        _says_the_machine(r, full)
        assert "No space left" in r.stdout


def test_a_batch_with_a_broken_temporary_folder_exits_4_and_keeps_nothing(tmp_path):
    """Every student infrastructure_error and exit 4; a rerun with a good folder grades them all
    (nothing "kept from the last run")."""
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("ann", "bob"):
        (folder / f"{name}.cu").write_text(CORRECT.read_text())
    args = ["batch", str(folder), "--backend", "emulator", "--report-dir", str(tmp_path / "out")]
    cache = {"GRADER_CACHE_DIR": str(tmp_path / "cache")}
    bad = run_grader(*args, env={**cache, "TMPDIR": str(tmp_path / "missing")})
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert "could not be graded on this machine" in bad.stderr and "ann" in bad.stderr
    rows = (tmp_path / "out" / "summary.csv").read_text()
    assert rows.count("infrastructure_error") == 2 and "compile_error" not in rows
    good = run_grader(*args, env={**cache, "TMPDIR": str(tmp_path)})
    assert good.returncode == 0, good.stdout + good.stderr
    assert "kept" not in good.stdout
    assert (tmp_path / "out" / "summary.csv").read_text().count("graded") == 2


def test_the_tools_own_lines_name_the_machine_and_a_students_text_never_does():
    """machine_fault reads nvcc's and g++'s own lines (the real messages of a broken TMPDIR, a
    full disk, the process and file limits); a diagnostic of the student's file, and the source
    it echoes, can say anything (#error Too many open files) and is never read as the machine."""
    real = {
        "nvcc fatal   : Could not open output file '/tmp/ro/tmpxft_00003340_0000000a'": "TMPDIR",
        "nvcc fatal   : Failed to preprocess host compiler properties.": "TMPDIR",
        "g++: fatal error: cannot create temporary file in /tmp/ro/: Read-only file system": "TMPDIR",
        "cc1plus: fatal error: cannot create temporary file in /tmp/x: No space left on device": "TMPDIR",
        "/usr/bin/ld: final link failed: No space left on device": "disk is full",
        "nvcc fatal   : Could not fork: Resource temporarily unavailable": "ulimit -u",
        "g++: fatal error: cannot execute 'cc1plus': Too many open files": "ulimit -n",
        "g++: fatal error: Killed signal terminated program cc1plus": "(cc1plus) was killed",
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)": "(cicc) was killed",
    }
    for line, says in real.items():
        fault = machine_fault("some output\n" + line + "\n")
        assert fault and says in fault, (line, fault)
    student = [
        'submission.cu(3): error: #error directive: "Too many open files"',
        "submission.cu:3:2: error: #error No space left on device",
        "    3 | #error Could not open output file '/tmp/tmpxft_1'",
        '  static_assert(false, "Resource temporarily unavailable");',
        'harness.cu(40): error: identifier "vfork" is undefined',
        'submission.cu:9:2: error: #error Killed signal terminated program cc1plus',
    ]
    assert machine_fault("\n".join(student)) is None


# -- the cache verifies what it reuses -------------------------------------------------------------

def _warm(tmp_path: Path) -> tuple[dict, subprocess.CompletedProcess]:
    env = {"GRADER_CACHE_DIR": str(tmp_path / "cache")}
    first = run_grader("submit", str(CORRECT), "--backend", "emulator", "--report-dir", str(tmp_path / "r1"), env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    return env, first


def _again(tmp_path: Path, env: dict, name: str = "r2") -> subprocess.CompletedProcess:
    r = run_grader("submit", str(CORRECT), "--backend", "emulator", "--report-dir", str(tmp_path / name), env=env)
    assert r.returncode == 0 and "CORRECT" in r.stdout, r.stdout + r.stderr
    return r


def test_a_truncated_reference_library_is_rebuilt_not_a_crash(tmp_path):
    env, _ = _warm(tmp_path)
    ref = next((tmp_path / "cache").glob("ref-*/lib.so"))
    with open(ref, "r+b") as f:
        f.truncate(1000)
    r = _again(tmp_path, env)
    assert "failed its check" in r.stderr and "lib.so is 1000 bytes" in r.stderr
    assert ref.stat().st_size > 1000 and not sealed.check(ref, full=True)
    assert "failed its check" not in _again(tmp_path, env, "r3").stderr           # healed once, for good


def test_a_truncated_submission_library_and_a_garbage_build_record_are_rebuilt(tmp_path):
    env, _ = _warm(tmp_path)
    subs = sorted((tmp_path / "cache").glob("sub-*"))
    with open(subs[0] / "lib.so", "r+b") as f:
        f.truncate(4096)
    for s in subs[1:]:
        (s / "build.json").write_text("{garbage")
    r = _again(tmp_path, env)
    assert r.stderr.count("failed its check") == len(subs), r.stderr


def test_the_guard_library_overwritten_is_rebuilt(tmp_path):
    env, _ = _warm(tmp_path)
    guard = next((tmp_path / "cache").glob("guard-*/libgrader_guard.so"))
    data = bytearray(guard.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = os.urandom(64)
    guard.write_bytes(bytes(data))
    r = _again(tmp_path, env)
    assert "sandbox filter library failed its check" in r.stderr


def test_inputs_overwritten_with_bytes_of_the_right_size_are_drawn_again(tmp_path):
    """Before: INCORRECT 1 of 18, silently, every time. The seal's digest tells them apart."""
    env, _ = _warm(tmp_path)
    files = sorted((tmp_path / "cache").glob("in-*/inputs.f32"))
    assert files
    for p in files:
        p.write_bytes(os.urandom(p.stat().st_size))
    r = _again(tmp_path, env)
    assert r.stderr.count("does not hold the bytes it was written with") == len(files), r.stderr
    assert "18 of 18" in r.stdout


def test_a_seal_vouches_only_for_the_bytes_it_was_written_with(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc" * 1000)
    assert "no valid seal" in sealed.check(p)
    sealed.seal(p)
    assert sealed.check(p) == "" and sealed.check(p, full=True) == ""
    os.utime(p, ns=(1, 1))                                  # touched, same bytes: still intact, re-stamped
    assert sealed.check(p) == ""
    p.write_bytes(b"abd" * 1000)                            # same size, other bytes
    assert "does not hold the bytes" in sealed.check(p)
    p.write_bytes(b"abc")
    assert "3 bytes, 3000 when it was written" in sealed.check(p)


# -- the grader's own files, read as untrusted -----------------------------------------------------

def test_broken_bytes_in_attempts_jsonl_are_skipped(tmp_path):
    env, _ = _warm(tmp_path)
    attempts = tmp_path / "cache" / "attempts.jsonl"
    with open(attempts, "ab") as f:
        f.write(b"\xff\xfe not utf-8 \x80\n[1, 2]\n\"a string\"\n{\"file\": 5}\n{garbage")
    r = _again(tmp_path, env)
    assert "Traceback" not in r.stderr
    assert "since " in r.stderr                                      # the earlier attempt is still read
    lines = attempts.read_bytes().splitlines()
    assert json.loads(lines[-1])["file"].endswith("float4_launcher.cu")   # on a line of its own


def _one_student_class(tmp_path: Path) -> tuple[list[str], dict]:
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "ann.cu").write_text(CORRECT.read_text())
    (folder / "bob.cu").write_text(CORRECT.read_text())
    return (["batch", str(folder), "--backend", "emulator", "--report-dir", str(tmp_path / "out")],
            {"GRADER_CACHE_DIR": str(tmp_path / "cache")})


def test_a_batch_reads_its_own_files_as_untrusted(tmp_path):
    """Garbage appended to results.jsonl, a student's result.json emptied and another's made
    garbage: the rerun has no traceback, keeps what it can, and rewrites the broken reports."""
    args, env = _one_student_class(tmp_path)
    assert run_grader(*args, env=env).returncode == 0
    out = tmp_path / "out"
    with open(out / "results.jsonl", "ab") as f:
        f.write(b"\xff\x00garbage")
    (out / "ann" / "result.json").write_text("")
    (out / "bob" / "result.json").write_text("{garbage")
    r = run_grader(*args, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    for student in ("ann", "bob"):
        assert json.loads((out / student / "result.json").read_text())["status"] == "graded"
    rows = [ln for ln in (out / "results.jsonl").read_bytes().splitlines() if ln.startswith(b"{")]
    assert len(rows) == 2                                    # kept, not graded again


def test_two_batches_on_one_report_folder_do_not_both_run(tmp_path):
    from grader.batch.store import BatchBusy, holding

    args, env = _one_student_class(tmp_path)
    with holding(tmp_path / "out", "a test holding the folder"):
        r = run_grader(*args, env=env)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "being written by another batch" in r.stderr and f"pid {os.getpid()}" in r.stderr
        with pytest.raises(BatchBusy):
            with holding(tmp_path / "out"):
                pass
    assert not (tmp_path / "out" / "results.jsonl").exists()
    assert run_grader(*args, env=env).returncode == 0            # released: the next batch runs
    leftovers = [p.name for p in (tmp_path / "out").rglob(".*.tmp")]
    assert leftovers == []


def test_the_class_tables_are_replaced_not_rewritten_in_place(tmp_path):
    args, env = _one_student_class(tmp_path)
    assert run_grader(*args, env=env).returncode == 0
    out = tmp_path / "out"
    before = {n: (out / n).stat().st_ino for n in ("summary.csv", "gradebook.csv", "class.html", "junit.xml")}
    (tmp_path / "class" / "bob.cu").write_text(CORRECT.read_text() + "\n// edited\n")
    assert run_grader(*args, env=env).returncode == 0
    after = {n: (out / n).stat().st_ino for n in before}
    assert all(before[n] != after[n] for n in before), (before, after)     # a new file renamed into place


def test_a_thread_the_process_limit_refuses_is_the_machine_with_the_limit_named(monkeypatch, tmp_path):
    """`ulimit -u 10` as a user (root is not held to it, so the test raises what Python raises
    then): RuntimeError("can't start new thread") ends the grade as infrastructure_error naming
    `ulimit -u` and its value, never "internal error"."""
    from grader.grade import children

    def refused(self, shared):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(children.GradeRun, "start", refused)
    result = grade_submission(SUBMISSIONS / "scalar_2d.cu", rubric=load_exercise("bias_gelu_fused"), backend="emulator")
    assert result.status == "infrastructure_error" and "ulimit -u" in result.message
    assert "internal error" not in result.message


@pytest.mark.parametrize("said", [
    "numpy/random/_generator.cpython-311-x86_64-linux-gnu.so: failed to map segment from shared object",
    "libfoo.so: cannot allocate memory"])
def test_an_extension_module_the_loader_cannot_map_is_the_machines_memory(monkeypatch, said):
    """Under `ulimit -v 600000` the address space ran out as often in the loader's mmap, importing
    numpy's random module (ImportError: failed to map segment), as in an allocation (MemoryError):
    the same limit, named; never an internal error (.ci/run at 3734d17)."""
    from grader.grade import children, faults

    def unmapped(self, shared):
        raise ImportError(said)

    monkeypatch.setattr(children.GradeRun, "start", unmapped)
    monkeypatch.setattr(faults, "memory_limit", lambda: "the address-space limit (`ulimit -v`, now 600000 KiB)")
    result = grade_submission(SUBMISSIONS / "scalar_2d.cu", rubric=load_exercise("bias_gelu_fused"), backend="emulator")
    assert result.status == "infrastructure_error" and result.message.startswith("the address-space limit")
    monkeypatch.setattr(faults, "memory_limit", lambda: None)
    result = grade_submission(SUBMISSIONS / "scalar_2d.cu", rubric=load_exercise("bias_gelu_fused"), backend="emulator")
    assert "ran out of memory" in result.message and "internal error" not in result.message
    assert faults.machine_limit(ImportError("No module named 'numpy'")) is None      # a missing module is ours


def test_an_open_files_limit_too_low_says_which_and_how_far_to_raise_it(tmp_path):
    """A real `ulimit -n` (enforced for root too), low enough that a grade runs out: exit 4 with the
    limit and its value named, never an internal error (40 was enough warm, 32 not, by hand)."""
    import subprocess
    import sys

    proc = subprocess.run(["bash", "-c", f"ulimit -n 16; exec {sys.executable} -m grader submit "
                           f"{SUBMISSIONS / 'scalar_2d.cu'} --backend emulator --no-report"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "ulimit -n" in proc.stdout and "now 16" in proc.stdout and "internal error" not in proc.stdout


def test_a_full_disk_said_in_a_headers_diagnostic_is_the_machine_and_a_students_error_is_not(tmp_path):
    """nvcc says a full TMPDIR as a diagnostic of a toolkit header, which machine_fault skips (a
    diagnostic can hold any text a student wrote): disk_fault reads it only outside the build's folder,
    where no student's file lies."""
    from grader.toolchain.build import disk_fault

    build = tmp_path / "cache" / "key"
    build.mkdir(parents=True)
    nvcc = ("/usr/local/cuda/include/sm_32_intrinsics.h(403): catastrophic error: error while writing generated C++ "
            "file: No space left on device\n1 catastrophic error detected in the compilation of \"main.cu\".")
    said = disk_fault(nvcc, build)
    assert said is not None and "No space left on device" in said and "TMPDIR" in said
    student = f"{build}/submission.cu(3): catastrophic error: #error No space left on device\n"
    assert disk_fault(student, build) is None


def test_a_tmpdir_too_small_for_nvcc_is_the_machine_and_never_kept(tmp_path):
    """A real 2 MiB TMPDIR: nvcc runs out of room part way (the issue's case: both students got
    compile_error, kept by the rerun). Now infrastructure_error, exit 4, naming the folder."""
    with _tmpfs(tmp_path / "small", "size=2m") as small:
        r = _cold_submit(tmp_path, small)
        assert "compile_error" not in r.stdout, r.stdout + r.stderr
        if os.geteuid() == 0 and not (os.stat(tmp_path).st_mode & 0o001):
            # as root, a TMPDIR that nobody cannot enter holds no build: the builds' rooms (and the children's
            # folders) go where nobody can, so nvcc never writes into the small one and the grade goes on
            assert r.returncode == 0, r.stdout + r.stderr
        else:
            assert r.returncode == 4 and "TMPDIR" in (r.stdout + r.stderr), r.stdout + r.stderr


@pytest.mark.parametrize("limit, value, words", [
    (resource.RLIMIT_AS, 600_000 * 1024, "`ulimit -v`, now 600000 KiB"),       # numpy's MemoryError
    (resource.RLIMIT_AS, 860_000 * 1024, "`ulimit -v`, now 860000 KiB"),       # a thread's stack: EAGAIN
    (resource.RLIMIT_FSIZE, 1000 * 1024, "`ulimit -f`, now 1000 KiB"),
    (resource.RLIMIT_CPU, 3, "`ulimit -t`, now 3 s"),
])
def test_a_limit_the_shell_sets_is_named_with_its_value_and_fix_never_an_internal_error(tmp_path, limit, value, words):
    """The real limit, set in the grader's process before it starts (as `ulimit` in its shell would):
    infrastructure_error, exit 4, naming the limit, its value and `unlimited`; no traceback. At
    `ulimit -v 600000` the message was "internal error in the grader (please report it): MemoryError",
    at 860000 it told the user to raise `ulimit -u`, at `ulimit -t 3` the grader was killed (137)."""
    def limited() -> None:
        resource.setrlimit(limit, (value, value))

    r = subprocess.run([sys.executable, "-m", "grader", "submit", str(CORRECT), "--backend", "emulator",
                        "--report-dir", str(tmp_path / "report")], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, preexec_fn=limited,
                       env={**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"})
    said = r.stdout + r.stderr
    assert r.returncode == 4, said
    assert words in said and "unlimited" in said, said
    assert "internal error" not in said and "Traceback" not in said, said


def test_a_toolchain_that_builds_nothing_is_the_machine_not_the_students_compile_error(tmp_path):
    """A failed build is the student's only when the machine can build: a g++ that dies on every file
    (here a stand-in first on PATH that answers --version and then segfaults, as a broken install
    does) fails the known-good file too, so the grade is infrastructure_error, exit 4, never kept;
    with the real g++ the same submission's own error stays its compile_error."""
    fake = tmp_path / "bin"
    fake.mkdir()
    real = shutil.which("g++")
    (fake / "g++").write_text(f'#!/bin/sh\ncase "$1" in --version|-dumpversion) exec {real} "$@";; esac\n'
                              'echo "g++: internal compiler error: Segmentation fault signal terminated program cc1plus" >&2\n'
                              'exit 1\n')
    (fake / "g++").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "GRADER_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    r = run_grader("submit", str(CORRECT), "--backend", "emulator", "--report-dir", str(tmp_path / "report"), env=env)
    said = r.stdout + r.stderr
    assert r.returncode == 4, said
    # the known-good file fails behind the same wall (the stand-in's folder, private to root, is not one
    # nobody can reach where the grader is root: then the build's wall says it could not start it)
    assert "known to build fails here too" in said or "could not be started behind the build's wall" in said, said
    assert "compile_error" not in said.lower().replace(" ", "_"), said
    broken = tmp_path / "broken.cu"
    broken.write_text(CORRECT.read_text().replace("}", "", 1))
    own = run_grader("submit", str(broken), "--backend", "emulator", "--report-dir", str(tmp_path / "report2"),
                     env={"GRADER_CACHE_DIR": str(tmp_path / "cache2")})
    assert own.returncode != 4, own.stdout + own.stderr


@pytest.mark.parametrize("broken", ["a file", "a folder nothing can be made in"])
def test_a_cache_folder_that_cannot_hold_the_build_is_the_machine_with_its_fix_never_an_internal_error(tmp_path, broken):
    """GRADER_CACHE_DIR naming a file, or a folder no folder can be made in (/proc/self), failed the
    grade as 'internal error in the grader (please report it)': it is the machine's, said with the fix."""
    cache = tmp_path / "cache-file" if broken == "a file" else Path("/proc/self")
    if broken == "a file":
        cache.write_text("not a folder")
    r = run_grader("submit", str(CORRECT), "--backend", "emulator", "--no-report", env={"GRADER_CACHE_DIR": str(cache)})
    out = " ".join(r.stdout.split())
    assert r.returncode == 4, r.stdout + r.stderr
    assert "COULD NOT BE GRADED ON THIS MACHINE" in out and "internal error" not in out
    assert f"cache at {cache}" in out and "set GRADER_CACHE_DIR" in out


@pytest.mark.parametrize("kib", [600_000, 1_999_999, 2_000_000, 3_000_000])
@pytest.mark.parametrize("which, flag", [(resource.RLIMIT_AS, "-v"), (resource.RLIMIT_DATA, "-d")])
def test_the_memory_advice_names_a_figure_above_the_limit_set(monkeypatch, kib, which, flag):
    """`ulimit -v 2000000` (or 3000000) and out of memory: the advice asked to raise the limit to
    2000000, the value already set or below it; it now names a figure above the limit set."""
    import re

    from grader.grade import faults

    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda w: (kib * 1024, resource.RLIM_INFINITY) if w == which
                        else (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
                        if w in (resource.RLIMIT_AS, resource.RLIMIT_DATA) else real(w))
    said = faults.memory_limit()
    assert f"`ulimit {flag}`, now {kib} KiB" in said
    assert int(re.search(r"or at least (\d+)\)", said).group(1)) > kib, said
