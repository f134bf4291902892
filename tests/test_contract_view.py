"""What a process touching a submission can see (issue 70): its environment, its view, its /proc.

Canary variables stand for what a grader's and a course server's environment hold (a GRADER_TOKEN,
a cloud key, a CI token; the grader's own PYTHONPATH and VIRTUAL_ENV, which name its folders): each
value a C identifier of its own, so that it survives every tokenizer that quotes it. They must reach
no build output, no child and no report, through each route a student's text has:

- the build's environment itself (what `env` run as a build prints: core/environment.py's contract);
- the assembler's `.include` of /proc/self/environ, /proc/thread-self/environ, the grader's and
  another process's /proc/<pid>/environ and cmdline, /proc/1's, /proc/self/mountinfo, followed by an
  expression no assembler can resolve (`GRADER_TOKEN - bw_nowhere`), which prints the variable's
  value in the compile error (the issue's attack), in a file-scope asm built by token pasting;
- the preprocessor's `__has_include` of the same paths (whether the build may open them at all);
- `grader submit` end to end (nvcc, g++, the screen, the child, report.md/report.html/result.json,
  the command's output), with the canaries in the grader's own environment, of a build attack and of
  a launcher on the emulator that prints its own `environ`, `getenv` of each canary's name, and what
  it reads of /proc/self/environ, /proc/<ppid>/environ and cmdline (the grader) and /proc/1/cmdline.

Each read of another process's /proc is aimed at a sentinel: a process of the build's own user (as
another build, or the grader where it is not root, would be) holding canaries in its command line
and its environment.
"""

from __future__ import annotations

import json
import os
import secrets as random_bits
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_grader
from test_build_wall import CAT, _build, _c, attack, needs_nvcc
from test_wall import KERNEL
from grader.core import fswall
from grader.core.folders import NOBODY
from grader.toolchain.running import BuildLimits, build_room, run_limited

needs_landlock = pytest.mark.skipif(fswall.landlock_abi() <= 0, reason="this kernel has no Landlock")
BACKENDS = ["emulator", pytest.param("cuda", marks=needs_nvcc)]

# What a build's environment may hold (core/environment.py): names only, values checked below.
CONTRACT_NAMES = {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH"}


@pytest.fixture
def canaries(monkeypatch) -> dict[str, str]:
    """Canary variables set in this process's (the grader's) environment: name -> the value a leak
    would show. PYTHONPATH and VIRTUAL_ENV keep what they had and gain a canary folder."""
    token = random_bits.token_hex(5)
    values = {"GRADER_TOKEN": f"CANARY_token_{token}", "AWS_SECRET_ACCESS_KEY": f"CANARY_aws_{token}",
              "GITHUB_TOKEN": f"CANARY_gh_{token}", "GRADER_SERVE_SECRET": f"CANARY_serve_{token}"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    folder = f"/nonexistent/CANARY_pythonpath_{token}"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), folder) if p))
    monkeypatch.setenv("VIRTUAL_ENV", f"/nonexistent/CANARY_venv_{token}")
    return {**values, "PYTHONPATH": folder, "VIRTUAL_ENV": f"CANARY_venv_{token}"}


def _found(canaries: dict[str, str], data: bytes | str) -> list[str]:
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")
    return [name for name, value in canaries.items() if value.encode() in raw]


@pytest.fixture
def sentinel(canaries):
    """Another process of the build's user (nobody where this test runs as root, as the builds and
    children then do; else this user): canaries in its command line and its environment. Yields its
    pid and the canaries it holds."""
    token = random_bits.token_hex(5)
    held = {"sentinel GRADER_TOKEN": f"CANARY_sentinel_env_{token}", "sentinel argv": f"CANARY_sentinel_argv_{token}"}

    def as_builds_user() -> None:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)

    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 600; :", held["sentinel argv"]],
                            env={"GRADER_TOKEN": held["sentinel GRADER_TOKEN"], "PATH": "/usr/bin:/bin"},
                            preexec_fn=as_builds_user, cwd="/")
    try:
        yield proc.pid, held
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------------
# The build's environment
# ---------------------------------------------------------------------------------------------------

def test_a_builds_processes_get_the_contracts_environment_and_nothing_of_the_graders(canaries):
    """`env` run as a build (run_limited: as ninja and every compiler are) prints the contract's
    variables alone: the toolchain's PATH, a fixed locale, the room as HOME and TMPDIR; no canary."""
    with build_room() as room:
        ran = run_limited(["/usr/bin/env"], BuildLimits(time_s=60), room)
        scratch = str(room.scratch)
    assert ran.proc.returncode == 0, ran.proc.stderr
    env = dict(line.split("=", 1) for line in ran.proc.stdout.splitlines() if "=" in line)
    assert _found(canaries, ran.proc.stdout) == [], ran.proc.stdout
    assert set(env) <= CONTRACT_NAMES, sorted(set(env) - CONTRACT_NAMES)
    assert env["HOME"] == env["TMPDIR"] == scratch and env["LC_ALL"] == "C.UTF-8", env
    assert all(os.path.isabs(p) for p in env["PATH"].split(os.pathsep)), env["PATH"]


# ---------------------------------------------------------------------------------------------------
# The build's view: /proc through the assembler and the preprocessor
# ---------------------------------------------------------------------------------------------------

def _targets(pid: int) -> list[str]:
    """The /proc files a build aims at: its own, the grader's (this process), the sentinel's, /proc/1's."""
    grader = os.getpid()
    return ["/proc/self/environ", "/proc/thread-self/environ", "/proc/self/cmdline", "/proc/self/mountinfo",
            "/proc/mounts", f"/proc/{pid}/environ", f"/proc/{pid}/cmdline", f"/proc/self/root/proc/{pid}/environ",
            f"/proc/{grader}/environ", f"/proc/{grader}/cmdline", "/proc/1/cmdline", "/proc/1/environ"]


def _include_then_resolve(paths: list[str]) -> str:
    """File-scope asm, its name pasted: each path .include'd, then GRADER_TOKEN (which an environ
    defines as a symbol) in an expression no assembler resolves: as prints its value in the error."""
    text = "".join(f'.include "{p}"\n' for p in paths) + ".long GRADER_TOKEN - bw_nowhere\n"
    return CAT + f"BW_CAT(__as, m__)({_c(text)});\n"


def _everything(build) -> bytes:
    said = "\n".join([build.log, build.alone_log, *(m.text for m in build.messages),
                      *(m.text for m in build.alone_messages)]).encode("utf-8", "surrogateescape")
    for built in (build.library, build.object):
        if built is not None and Path(built).exists():
            said += Path(built).read_bytes()
    return said


def _attack_source(payload: str) -> str:
    return attack([]).replace(KERNEL, payload + KERNEL, 1)


@needs_landlock
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_assembler_includes_no_proc_file_of_the_build_the_grader_or_another_process(
        backend, canaries, sentinel, rubric, tmp_path):
    """Every target .include'd in one file-scope asm (as goes on past a file it cannot open): no
    canary in the log, the messages or the bytes built, and each target named as not opened."""
    pid, held = sentinel
    targets = _targets(pid)
    build = _build(tmp_path / "include.cu", _attack_source(_include_then_resolve(targets)), rubric, backend)
    found = _found({**canaries, **held}, _everything(build))
    assert found == [], f"the build printed {found}:\n{build.log[-3000:]}"
    opened = [t for t in targets if f"can't open {t} for reading" not in build.log]
    assert opened == [], f"the assembler opened {opened}:\n{build.log[-3000:]}"


def test_control_the_same_include_prints_a_canary_from_a_file_the_build_may_read(canaries, rubric, tmp_path):
    """The detector works: the same asm .include'ing the build's own copy of its source (in its room,
    readable by design), which defines GRADER_TOKEN as a canary on a line the compiler skips (#if 0;
    the assembler reads # lines as comments), prints the canary in the compile error."""
    marker = canaries["GRADER_TOKEN"]
    source = f"#if 0\nGRADER_TOKEN={marker}\n#endif\n" + _attack_source(_include_then_resolve(["submission.cu"]))
    build = _build(tmp_path / "control.cu", source, rubric, "emulator")
    assert f"can't resolve {marker}" in build.log, build.log[-3000:]


def _tell(p: str) -> str:
    """A symbol bw_tell0 whose value says whether __has_include found p."""
    return (f'#if __has_include("{p}")\n#define BW_TELL0 "BW_TELL_PRESENT"\n#else\n#define BW_TELL0 "BW_TELL_ABSENT"\n'
            '#endif\nextern "C" __attribute__((used)) const char bw_tell0[] = BW_TELL0;\n')


ON_NVCC = ("/proc/self/environ", "/proc/{sentinel}/environ", "/proc/1/cmdline")


@needs_landlock
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_preprocessor_opens_no_proc_file_of_a_process(backend, sentinel, rubric, tmp_path):
    """__has_include of each target (it opens the file: a file it may not open is a fatal error), one
    build each: none is found and opened, the build's own included; the build's own copy of its
    source (submission.cu, in its room) is, the control."""
    pid, _ = sentinel
    targets = _targets(pid) if backend == "emulator" else [t.format(sentinel=pid) for t in ON_NVCC]
    seen = {}
    for n, target in enumerate([*targets, "submission.cu"]):
        build = _build(tmp_path / f"tell{n}.cu", _attack_source(_tell(target)), rubric, backend)
        library = Path(build.library).read_bytes() if build.ok else b""
        seen[target] = "opened" if b"BW_TELL_PRESENT" in library else "absent" if build.ok else \
            "refused" if target in build.log and ("Permission denied" in build.log or "No such file" in build.log) \
            else build.log[-500:]
    assert seen == {**{t: seen[t] if seen[t] in ("absent", "refused") else "absent or refused" for t in targets},
                    "submission.cu": "opened"}, seen


# ---------------------------------------------------------------------------------------------------
# End to end: `grader submit` with the canaries in the grader's own environment
# ---------------------------------------------------------------------------------------------------

def _submit(path: Path, report: Path) -> subprocess.CompletedProcess:
    """`grader submit` on the emulator, run with this environment (the canaries in it from its start,
    so that the grader's own /proc/<pid>/environ holds them too)."""
    proc = run_grader("submit", str(path), "--backend", "emulator", "--report-dir", str(report))
    assert proc.returncode in (0, 1, 3), (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert (report / "result.json").is_file(), proc.stdout[-2000:]
    return proc


def _leaks(canaries: dict[str, str], proc: subprocess.CompletedProcess, report: Path) -> list[str]:
    leaks = [f"{p.name} holds {found}" for p in sorted(report.rglob("*")) if p.is_file()
             for found in [_found(canaries, p.read_bytes())] if found]
    leaks += [f"the command's {stream} holds {found}" for stream, text in (("stdout", proc.stdout),
                                                                            ("stderr", proc.stderr))
              for found in [_found(canaries, text)] if found]
    return leaks


@needs_landlock
def test_grader_submit_of_a_build_that_includes_proc_files_shows_no_canary(canaries, tmp_path):
    """The issue's attack, graded: the build .include's its own environ, /proc/1's, then resolves
    GRADER_TOKEN; a compile error that names none of the canaries, in no report and no output."""
    path = tmp_path / "kernel.cu"
    path.write_text(_attack_source(_include_then_resolve(
        ["/proc/self/environ", "/proc/thread-self/environ", "/proc/1/environ", "/proc/1/cmdline"])))
    report = tmp_path / "report"
    proc = _submit(path, report)
    assert _leaks(canaries, proc, report) == []
    result = json.loads((report / "result.json").read_text())
    assert result["status"] == "compile_error", (result["status"], result.get("message"))
    assert "can't open /proc/self/environ" in json.dumps(result), result.get("message")


def _reversed(values) -> str:
    return ", ".join('"' + v[::-1] + '"' for v in values)


CHILD_PEEK = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <fcntl.h>
#include <unistd.h>
extern char** environ;
static const char* BW_NEEDLES[] = {@NEEDLES@};
static const char* BW_NAMES[] = {@NAMES@};
static void bw_scan(const char* what) {
    int f = open(what, O_RDONLY);
    if (f < 0) { printf("DENIED %s\n", what); return; }
    static char b[1 << 20];
    ssize_t k = 0, r;
    while (k < (ssize_t)sizeof b && (r = read(f, b + k, sizeof b - k)) > 0) k += r;
    close(f);
    printf("READ %s: %zd bytes\n", what, k);
    for (const char* n : BW_NEEDLES) {
        std::string t(n), w(t.rbegin(), t.rend());
        if (memmem(b, (size_t)k, w.data(), w.size())) printf("FOUND a canary in %s\n", what);
    }
}
static void bw_peek() {
    for (char** e = environ; *e; e++) printf("ENV %s\n", *e);
    for (const char* n : BW_NAMES) { const char* v = getenv(n); printf("GETENV %s=%s\n", n, v ? v : "(none)"); }
    char p[64];
    bw_scan("/proc/self/environ");
    snprintf(p, sizeof p, "/proc/%d/environ", (int)getppid()); bw_scan(p);
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)getppid()); bw_scan(p);
    bw_scan("/proc/1/environ");
    bw_scan("/proc/1/cmdline");
    fflush(stdout);
}
"""


@needs_landlock
def test_grader_submit_of_a_launcher_that_reads_its_environment_shows_no_canary(canaries, tmp_path):
    """A launcher on the emulator (the child) prints its whole environ, getenv of each canary's name,
    and scans its own /proc/self/environ, its parent's (the grader's) environ and cmdline, and
    /proc/1's for the canaries (written backwards into the source): graded correct, no canary found
    and none in any report or output; its environ is the contract's (HOME its own folder)."""
    values = list(canaries.values())
    names = ", ".join(f'"{n}"' for n in canaries)
    peek = CHILD_PEEK.replace("@NEEDLES@", _reversed(values)).replace("@NAMES@", names)
    source = attack([]).replace(KERNEL, peek + KERNEL, 1).replace("once = true;", "once = true; bw_peek();", 1)
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    report = tmp_path / "report"
    proc = _submit(path, report)
    result = json.loads((report / "result.json").read_text())
    assert result["status"] == "graded" and result["correct"] is True, (result["status"], result.get("message"))
    out = result["output"]["stdout"]
    assert "ENV HOME=" in out and "/proc/self/environ\n" in out, out        # the scan ran
    assert "FOUND" not in out, out
    assert _leaks(canaries, proc, report) == []
    env = dict(line[4:].split("=", 1) for line in out.splitlines() if line.startswith("ENV "))
    assert set(env) <= CONTRACT_NAMES | {"PYTHONPATH", "PYTHONUNBUFFERED", "OPENBLAS_NUM_THREADS"}, sorted(env)


# ---------------------------------------------------------------------------------------------------
# Where the grader cannot drop to another user: of /etc only what the tools need
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def own_private_etc_file():
    """A 0600 file under /etc of the user the builds and children run as, holding a canary (the TLS
    key docs/serve.md's example kept there): as root the builds and children run as nobody, so the
    file is nobody's; a grader that is not root is simulated (fswall._STARTED_AS) by the test.
    Needs root, to write under /etc."""
    if os.geteuid() != 0 or not os.access("/etc", os.W_OK):
        pytest.skip("planting a file under /etc needs root")
    token = random_bits.token_hex(5)
    path = Path(f"/etc/grader-contract-{token}.key")
    path.write_text(f"GRADER_TOKEN=CANARY_etc_{token}\n")
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o600)
    try:
        yield path, f"CANARY_etc_{token}"
    finally:
        path.unlink()


def _as_the_graders_own_user(monkeypatch) -> None:
    """The grader as an ordinary user: the builds and the children run as that user (here nobody, who
    owns the planted file), who cannot be dropped to another (core/fswall.drops_to_another_user)."""
    monkeypatch.setattr(fswall, "_STARTED_AS", NOBODY)
    assert not fswall.drops_to_another_user()


@needs_landlock
def test_a_build_as_the_graders_own_user_reads_no_private_file_under_etc(own_private_etc_file, monkeypatch, rubric,
                                                                         tmp_path):
    """The file .include'd (then GRADER_TOKEN resolved, which it defines) and tested by __has_include:
    not opened, its canary nowhere. The control: the same .include as root (the build as nobody, /etc
    whole) opens it, since it is nobody's, which shows what keeps it out is the narrowed /etc."""
    path, canary = own_private_etc_file
    _as_the_graders_own_user(monkeypatch)
    build = _build(tmp_path / "etc.cu", _attack_source(_include_then_resolve([str(path)])), rubric, "emulator")
    assert canary not in _everything(build).decode("utf-8", "replace"), build.log[-2000:]
    assert f"can't open {path} for reading" in build.log, build.log[-2000:]
    tell = _build(tmp_path / "etc-tell.cu", _attack_source(_tell(str(path))), rubric, "emulator")
    assert not (tell.ok and b"BW_TELL_PRESENT" in Path(tell.library).read_bytes()), tell.log[-2000:]
    monkeypatch.undo()
    control = _build(tmp_path / "etc-control.cu", _attack_source(_include_then_resolve([str(path)])), rubric,
                     "emulator")
    assert f"can't resolve {canary}" in control.log, control.log[-2000:]


ETC_PEEK = r"""
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>
static void bw_peek() {
    char b[256] = {0};
    int f = open("@PATH@", O_RDONLY);
    if (f < 0) { printf("DENIED etc file\n"); return; }
    ssize_t k = read(f, b, sizeof b - 1);
    close(f);
    printf("READ etc file %zd: %s\n", k, b);
}
"""


@needs_landlock
def test_a_launcher_as_the_graders_own_user_reads_no_private_file_under_etc(own_private_etc_file, monkeypatch, rubric,
                                                                            write_cu):
    """The child on the emulator opens the file: denied (its view holds only what the tools need of
    /etc), the grade correct, result.json's sandbox and the notices saying what of /etc it could read."""
    from grader.grade.pipeline import grade_submission
    from grader.report.files import notices, render_text

    path, canary = own_private_etc_file
    _as_the_graders_own_user(monkeypatch)
    peek = ETC_PEEK.replace("@PATH@", str(path))
    source = attack([]).replace(KERNEL, peek + KERNEL, 1).replace("once = true;", "once = true; bw_peek();", 1)
    result = grade_submission(write_cu(source), rubric=rubric, backend="emulator")
    assert result.status == "graded" and result.correct, result.message
    assert "DENIED etc file" in result.output.stdout and canary not in result.output.stdout, result.output.stdout
    assert result.sandbox.etc.startswith("of /etc only"), result.sandbox.etc
    assert any("grader's own user" in n for n in notices(result)), notices(result)
    screen = render_text(result, rubric, colour=False).splitlines()       # the first screen: a line of its own
    assert any(line.replace("[yellow]", "", 1).startswith("note: The build and the submission's code ran as the grader's own user")
               for line in screen[:8]), screen[:8]


# ---------------------------------------------------------------------------------------------------
# A PID namespace of its own: a build's and the emulator child's /proc shows their own processes
# ---------------------------------------------------------------------------------------------------

def _processes_naming(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_build_sees_no_process_of_the_grader_and_leaves_none_behind():
    """A build's command names the grader's pid (kill -0: no such process in its world, where the
    grader's own numbers do not exist) and starts a process in the background that outlives it: that
    one ends with the build (its namespace's first process ends when the build's does, and every
    process left in the namespace with it), and the build's wall says it had its own PID namespace."""
    marker = f"bw-orphan-{random_bits.token_hex(5)}"
    script = (f"kill -0 {os.getpid()} 2>&1; echo pid=$$; "
              f"/bin/sh -c 'sleep 600; : {marker}' >/dev/null 2>&1 &")
    with build_room() as room:
        ran = run_limited(["/bin/sh", "-c", script], BuildLimits(time_s=60), room)
    left = _processes_naming(marker)
    for pid in left:
        os.kill(pid, 9)
    assert ran.over == "" and ran.proc.returncode == 0, (ran.over, ran.proc.stdout, ran.proc.stderr)
    assert "No such process" in ran.proc.stdout, ran.proc.stdout
    assert "pid=2\n" in ran.proc.stdout, ran.proc.stdout           # pid 1 is the namespace's first process
    assert left == [], f"the build left {left} running"
    assert ran.wall.endswith("its own PID namespace"), ran.wall


PID_PEEK = r"""
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <unistd.h>
static void bw_peek() {
    int r = kill(@GRADER@, 0);
    printf("KILL0 %d errno=%d pid=%d ppid=%d\n", r, r ? errno : 0, (int)getpid(), (int)getppid());
}
"""


@needs_landlock
def test_a_launcher_on_the_emulator_sees_no_process_of_the_grader(rubric, write_cu):
    """kill(grader, 0) from the launcher: no such process (ESRCH), where it answered EPERM (there, not
    its to signal); its parent is its namespace's first process; sandbox.pids says so."""
    from grader.grade.pipeline import grade_submission

    peek = PID_PEEK.replace("@GRADER@", str(os.getpid()))
    source = attack([]).replace(KERNEL, peek + KERNEL, 1).replace("once = true;", "once = true; bw_peek();", 1)
    result = grade_submission(write_cu(source), rubric=rubric, backend="emulator")
    assert result.status == "graded" and result.correct, result.message
    line = next(ln for ln in result.output.stdout.splitlines() if ln.startswith("KILL0 "))
    assert line.startswith("KILL0 -1 errno=3 ") and line.endswith(" ppid=1"), line
    assert result.sandbox.pids == "its own PID namespace", result.sandbox.pids


# ---------------------------------------------------------------------------------------------------
# The launcher (core/view.c) that enters a build's contract: no Python between fork and exec
# ---------------------------------------------------------------------------------------------------

def test_a_build_runs_no_python_between_fork_and_exec(monkeypatch):
    """The build's contract is entered by the launcher after exec (core/view.Entry), never by a
    preexec_fn, which makes subprocess fork the grader's whole memory (and the PID namespace's two
    Python forks after it): what the contract costs a process, counted in the calls, not timed."""
    from grader.toolchain import hostlibs, running

    launcher = hostlibs.build_launcher()            # built beforehand (its compiler is a process too)
    started = []
    real = running.subprocess.Popen

    def popen(args, **kwargs):
        started.append((list(args), kwargs.get("preexec_fn")))
        return real(args, **kwargs)

    monkeypatch.setattr(running.subprocess, "Popen", popen)
    with build_room() as room:
        ran = run_limited(["/bin/sh", "-c", "echo pid=$$"], BuildLimits(time_s=60), room)
    assert ran.proc.returncode == 0 and "pid=2\n" in ran.proc.stdout, (ran.proc.stdout, ran.proc.stderr)
    assert [(args[0], preexec) for args, preexec in started] == [(str(launcher), None)]
    assert started[0][0][-4:] == ["--", "/bin/sh", "-c", "echo pid=$$"]


def test_a_build_killed_by_a_signal_is_seen_killed_by_it_and_a_command_not_there_is_the_machines():
    """The launcher, outside the build's PID namespace, ends as the build's process ended (killed by
    the same signal: SIGXFSZ, a compiler past its file-size limit, is read so); a command that cannot
    be started behind the wall is the machine's fault (InfrastructureError), never a compile error."""
    from grader.core.errors import InfrastructureError

    with build_room() as room:
        ran = run_limited(["/bin/sh", "-c", "kill -XFSZ $$"], BuildLimits(time_s=60), room)
        assert ran.proc.returncode == -25, (ran.proc.returncode, ran.proc.stderr)
        with pytest.raises(InfrastructureError, match="could not be started behind the build's wall"):
            run_limited(["/no/such/compiler", "--version"], BuildLimits(time_s=60), room)


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="plays an ordinary user (nobody) with the system's Python, which needs root")
def test_a_build_started_by_an_ordinary_user_has_its_own_root_and_process_numbers():
    """The grader as an ordinary user (nobody, for real): the launcher enters a user namespace of its
    own mapping the user to itself, then the view and the PID namespace, as root's builds do."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="contract-nobody-", dir="/tmp"))   # not TMPDIR: CI's is under a 0700 folder
    os.chown(home, NOBODY, NOBODY)
    script = ("from grader.toolchain.running import BuildLimits, build_room, run_limited\n"
              "with build_room() as room:\n"
              "    ran = run_limited(['/bin/sh', '-c', 'echo pid=$$; id -u; ls /root 2>&1; true'],\n"
              "                      BuildLimits(time_s=60), room)\n"
              "import json; print(json.dumps([ran.proc.returncode, ran.proc.stdout, ran.wall]))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GRADER_CACHE_DIR": str(home / "cache"),
           "TMPDIR": str(home), "HOME": str(home)}
    out = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", SYSTEM_PYTHON,
                          "-c", script], capture_output=True, text=True, env=env, timeout=120, check=False)
    shutil.rmtree(home, ignore_errors=True)
    if "ModuleNotFoundError" in out.stderr:
        pytest.skip(f"the system's Python lacks what the grader imports: {out.stderr.splitlines()[-1]}")
    assert out.returncode == 0, out.stderr[-2000:]
    code, stdout, wall = json.loads(out.stdout.strip().rsplit("\n", 1)[-1])
    assert code == 0 and stdout.startswith(f"pid=2\n{NOBODY}\n"), (out.stdout, out.stderr[-2000:])
    assert "No such file or directory" in stdout, stdout            # /root is not in its view at all
    assert wall.endswith("its own root; its own PID namespace"), wall


@pytest.mark.own_cache
def test_the_launcher_pruned_from_the_cache_under_a_long_lived_grader_is_built_again():
    """A server or a suite's worker found the launcher once a process; the cache's pruning removed it
    as unused ten minutes later and every build then failed as the machine's fault ('could not be
    used (No such file or directory: .../grader-launcher)'). Each look marks it used, and one
    found missing is built again."""
    import shutil

    from grader.toolchain import hostlibs

    first = hostlibs.build_launcher()
    if first is None:
        pytest.skip("no C compiler")
    shutil.rmtree(first.parent)                     # what prune() does to an entry it sees unused
    again = hostlibs.build_launcher()
    assert again == first and again.exists()
    os.utime(again.parent, (0, 0))                  # long unused ...
    hostlibs.build_launcher()
    assert again.parent.stat().st_mtime > 0         # ... until looked up again
