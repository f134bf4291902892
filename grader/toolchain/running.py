"""Running a build within its limits and behind its wall: wall time and memory for every compiler
process, each build in a process group of its own that ends with the grader, and, when a build runs
out of time or memory, which compiler stage it was in (cicc, ptxas, ...), said in the student's terms.

The wall (core/fswall.py, Landlock): every build runs in a folder of its own (`Room`, made fresh
beside the children's folders, removed after), and ninja, every compiler, assembler and linker it
starts may open nothing but
- read-only: the system's folders, nothing of its own PID namespace's /proc, the toolchain's own
  folders (`tools.toolchain_folders`: the CUDA toolkit with its headers, thrust and CUB, the host
  compiler, ninja) and what the build names besides (the emulator's shim headers);
- read and write: the room (the build's files, its outputs, and `tmp/`, its TMPDIR and HOME, where
  nvcc writes its intermediates), and the device files every program may use (/dev/null, ...).
Nothing else: not the class folder, not another build in the cache, not a report folder, not /root or
a home folder, whatever the source says (`%:include`, a spliced `#include`, `.incbin` in pasted asm):
a compiler that reaches for such a file is told it cannot open it, and the student sees that error.
What the build prints is read as it comes and kept to its first OUTPUT_CAP_CHARS a stream, the rest
counted (BoundedOutput: a file that includes itself under #error printed hundreds of megabytes).
Where the grader runs as root, the build runs as nobody as well (core/folders.py's NOBODY), as the
children do. Its environment is the contract's (core/environment.py), never the grader's; its root
and its PID namespace are its own (core/view.View, mounted beside the room: VIEW_SUFFIX), entered
with the rest of its contract by the launcher (core/view.Entry). Where the kernel has no Landlock
the build runs without the wall, says so
(`Ran.confined`), and a rubric that requires the wall (limits.require_read_wall) is refused first.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import re
import resource
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from grader.core import cgroups, folders, fswall, processes
from grader.core.environment import contract_environment
from grader.core.errors import InfrastructureError
from grader.core.limits import clamp
from grader.core.view import Entry, View
from grader.toolchain import hostlibs, tools


@dataclass(frozen=True)
class BuildLimits:
    """What one compile may take: wall time, memory (the whole build's, in its control group, and
    the address space of each compiler process), the size of each file it writes (file_mib), and
    whether a build without its file-system wall (no Landlock) is refused (limits.require_read_wall)."""

    time_s: float = 120.0
    memory_mib: int = 8192
    require_wall: bool = False
    file_mib: int = 256


# The processes and threads one build may have at once (its control group's pids.max, or RLIMIT_NPROC
# over nobody's processes where none can be made): ninja, nvcc and its stages, ptxas's threads need a
# few dozen.
BUILD_PIDS = 256


@dataclass(frozen=True)
class Room:
    """A build's own folder (path), where everything it writes goes, and what else its compilers may
    read (read: folders or files beyond the system's and the toolchain's)."""

    path: Path
    read: tuple[str, ...] = ()

    @property
    def scratch(self) -> Path:
        """The compilers' temporary folder (TMPDIR), inside the room."""
        return self.path / "tmp"

    @property
    def view(self) -> str:
        """The empty folder beside the room that its build's own root is mounted on (VIEW_SUFFIX)."""
        return str(self.path) + VIEW_SUFFIX


# The empty folder a build's own root is mounted on: beside its room, named after it (so that a killed
# grader's is swept with the rooms: core/folders.PREFIXES), never inside it. Landlock follows a path
# up through the mount a file is reached by: beneath the room, which the build may write, everything
# the view holds (/proc/<pid> of every process among it) was readable and writable to the build.
VIEW_SUFFIX = "-view"


@contextlib.contextmanager
def build_room(*, read: tuple[str, ...] = ()) -> Iterator[Room]:
    """A fresh room for one build (core/folders.py's own_folder, with its tmp/), removed when the
    block ends. A room that cannot be made is the machine's fault, said with the fix."""
    folders.sweep_stale_folders_once()
    base = room_base()
    try:
        path = Path(folders.own_folder("grader-build-", base))
        (path / "tmp").mkdir()
        os.mkdir(str(path) + VIEW_SUFFIX, 0o755)     # where the build's own root is mounted (core/view.View)
        if os.geteuid() == 0:
            os.chown(path / "tmp", folders.NOBODY, folders.NOBODY)
    except OSError as exc:
        raise InfrastructureError(
            f"a build's folder could not be made in {base} ({exc.strerror or exc}): set "
            "TMPDIR to a writable folder with free space that others can enter, and grade again. Nothing was "
            "compiled; no student is graded for this.") from None
    try:
        yield Room(path, read)
    finally:
        folders.remove_tree(str(path))
        with contextlib.suppress(OSError):
            os.rmdir(str(path) + VIEW_SUFFIX)


def scratch_folder() -> Path:
    """The temporary folder the grader was given: $TMPDIR, else /tmp (toolchain/faults.py probes it
    before a build, so that a broken one is the machine's fault, never a student's compile error)."""
    return Path(os.environ.get("TMPDIR") or "/tmp")


def room_base() -> str:
    """Where builds' rooms go: the temporary folder, unless the grader runs as root and nobody, who
    runs the build, cannot enter it (a TMPDIR under a private folder, as `mktemp -d` makes): then
    where the children's folders go instead (core/folders.py's child_folder_base)."""
    folder = str(scratch_folder())
    if os.geteuid() != 0 or folders.others_can_enter(folder):
        return folder
    fallback, _ = folders.child_folder_base()
    return fallback or folder


@dataclass(frozen=True)
class Ran:
    """What one walled command gave: its process (returncode, stdout, stderr), why a limit stopped
    it ("" where none did), and whether its wall was up (the wall's detail)."""

    proc: subprocess.CompletedProcess
    over: str = ""
    confined: bool = False
    wall: str = ""
    wall_ms: float = 0.0
    held: str = ""              # how its memory, processes and files were bounded (build_limits_held)
    timed_out: bool = False     # stopped at its wall-time limit (over says so, naming the stage)


def wall_rules(room: Room) -> fswall.Rules:
    """What the compilers of a build in room may open (the module's docstring)."""
    return fswall.base_rules().plus(read=(*tools.toolchain_folders(), *room.read), write=(str(room.path),))


def build_environment(room: Room) -> dict[str, str]:
    """The whole environment of a build's ninja and compilers (core/environment.py): the toolchain's
    folders on PATH, the room's tmp/ as HOME and TMPDIR; nothing else of the grader's."""
    return contract_environment(home=str(room.scratch), path=tools.search_path())


# A build runs at this much lower priority: in a batch the compiles of the next students took the
# cores from the measuring process in the GPU's lane (its sampling took 0.23 s instead of 0.09 s
# on a 16-core H200 host), and in a lone grade from the children's start.
BUILD_NICE = 5


# What each compiler process is doing, for a build that ran out of time or memory.
_STAGES = {"cicc": "cicc, CUDA's optimiser (a huge unrolled loop or a template explosion?)",
           "ptxas": "ptxas, which assembles the GPU code (a huge unrolled loop?)",
           "cudafe++": "cudafe++, CUDA's front end (deeply nested templates?)",
           "cc1plus": "the host C++ compiler (deeply nested templates or a huge function?)",
           "nvlink": "nvlink", "fatbinary": "fatbinary", "as": "the host assembler (a file-scope asm?)",
           "ld": "the linker"}

# How a compiler driver names the program that failed: gcc's "signal terminated program as",
# nvcc's "'ptxas' died due to signal 25", collect2's "ld terminated with signal 25", "cc1plus: out of memory".
_DIED = re.compile(r"terminated program (\S+)|'([^']+)' died|(\S+) terminated with signal|^(\S+?): out of memory", re.MULTILINE)


def _stage_said(text: str, trigger: re.Pattern) -> str:
    """The stage a build's output names on the lines that say why it stopped (trigger): the program
    the driver says died, else a stage's name as a word of those lines. Never a name elsewhere in the
    log (nvcc's -Xptxas, ptxas's own info lines, "ld" inside "build"), nor "as", an English word too."""
    said = [line for line in text.splitlines() if trigger.search(line)]
    for line in said:
        for m in _DIED.finditer(line):
            name = os.path.basename(next(g for g in m.groups() if g))
            if name in _STAGES:
                return _STAGES[name]
    for line in said:
        for key, name in _STAGES.items():
            if key != "as" and re.search(rf"(?<![\w+-]){re.escape(key)}(?![\w+-])", line):
                return name
    return ""


def run_limited(args: list[str], limits: BuildLimits, room: Room) -> Ran:
    """Run a build command in room, behind its wall, in its own process group, under a time limit and
    a per-process memory cap (RLIMIT_AS, inherited by every compiler it starts); as nobody where the
    grader is root. Ran.over says why a limit stopped it."""
    clock = time.perf_counter()
    rules = wall_rules(room)
    ruleset = fswall.Ruleset(rules)
    view = View(rules, room.view, str(room.path))
    wall_ms = (time.perf_counter() - clock) * 1000
    if not ruleset.ready and limits.require_wall:
        ruleset.close()
        raise InfrastructureError(f"the build would run without its file-system wall ({ruleset.problem}), and the "
                                  "rubric requires it (limits.require_read_wall): grade on Linux 5.13 or later with "
                                  "Landlock enabled, or set require_read_wall to false. Nothing was compiled.")
    seen = os.pipe()                                  # what the view's entry said, back from the child

    env = build_environment(room)
    group = cgroups.make(memory_bytes=limits.memory_mib << 20, pids=BUILD_PIDS, what="build")
    nproc = None if group is not None else processes.tasks_of_user(_build_uid()) + BUILD_PIDS
    try:
        # no input: nothing a compiler is asked to read can wait on the grader's terminal
        entry = _entry(limits, view, ruleset, seen[1], group, nproc)
        proc = subprocess.Popen(entry.command(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", cwd=room.path, env=env,
                                pass_fds=entry.fds)
    except (OSError, subprocess.SubprocessError) as exc:
        ruleset.close()
        _close(seen)
        if group is not None:
            group.remove()
        raise InfrastructureError(_not_started(args, exc)) from None
    os.close(seen[1])
    with os.fdopen(seen[0], "rb") as f:
        said = f.read(500).decode(errors="replace")
    root_detail, pids_detail = View.said(said)
    processes.started(proc.pid, proc)
    if View.failed(said):                             # the launcher could not go on to the command
        proc.communicate()
        processes.ended(proc.pid)
        ruleset.close()
        if group is not None:
            group.remove()
        raise InfrastructureError(_not_started(args, View.failed(said)))
    try:
        done, over = _wait_build(proc, args, limits, group)
        timed_out = bool(over) and done.returncode == _TIMED_OUT
    finally:
        processes.ended(proc.pid)
        if proc.poll() is None:                       # interrupted while it ran
            end_build(proc)
        ruleset.close()
        if group is not None:
            group.remove()                            # and whatever of the build outlived ninja
    wall = f"Landlock ABI {ruleset.abi}" if not ruleset.problem else f"no Landlock: {ruleset.problem}"
    return Ran(done, over, confined=ruleset.abi > 0 and not ruleset.problem, wall=f"{wall}; {root_detail}; {pids_detail}",
               wall_ms=round(wall_ms, 3), held=build_limits_held(limits, group.version if group else None, nproc),
               timed_out=timed_out)


def build_limits_held(limits: BuildLimits, version: str | None, nproc: int | None = None) -> str:
    """How a build is bounded, in result.json's words (sandbox.limits's "builds"): version, its
    control group's kind ('cgroup v1'), or None where it has none (then RLIMIT_NPROC, nproc)."""
    files = f"each file {limits.file_mib} MiB (RLIMIT_FSIZE)"
    each = f"each process {limits.memory_mib} MiB of address space (RLIMIT_AS)"
    if version is not None:
        return (f"{version}: {limits.memory_mib} MiB of memory and {BUILD_PIDS} processes and threads for the whole "
                f"build, its CPU time read whole; {each}; {files}")
    return (f"{each}; RLIMIT_NPROC{f' {nproc}' if nproc else ''} over every process of its user (no control group "
            f"could be made here); {files}")


def builds_held(limits: BuildLimits) -> str:
    """How a build under limits is bounded on this machine (build_limits_held)."""
    return build_limits_held(limits, cgroups.available())


def _build_uid() -> int:
    """The user a build runs as: nobody where the grader is root."""
    return folders.NOBODY if os.geteuid() == 0 else os.geteuid()


def _not_started(args: list[str], why: object) -> str:
    return (f"{Path(args[0]).name} could not be started behind the build's wall ({why}): check it runs "
            f"(`{Path(args[0]).name} --version`) and that TMPDIR is a folder others can enter. Nothing was "
            "compiled; no student is graded for this.")


def _entry(limits: BuildLimits, view: View, ruleset: fswall.Ruleset, said_to: int,
           group: cgroups.Group | None, nproc: int | None) -> Entry:
    """What the build's first process has done before the command runs (core/view.Entry, by the
    launcher: no Python between fork and exec): a session, a priority and a control group of its own
    (group: the whole build's memory and processes; else nproc, RLIMIT_NPROC), the memory and
    file-size caps (a larger file: SIGXFSZ in the compiler that writes it), the view's root (what it
    said written to said_to), nobody where the grader is root, the death signal (the grader killed:
    ninja ends its compilers), and the wall."""
    caps = [(resource.RLIMIT_AS, limits.memory_mib << 20), (resource.RLIMIT_FSIZE, limits.file_mib << 20)]
    if nproc is not None:
        caps.append((resource.RLIMIT_NPROC, nproc))
    root = os.geteuid() == 0
    launcher = hostlibs.build_launcher()
    if launcher is None:
        raise OSError("no C compiler (cc or gcc) to build the grader's launcher (grader/core/view.c): install gcc")
    return Entry(str(launcher), groups=group.procs if group is not None else (), nice=BUILD_NICE,
                 limits=tuple((kind, *clamp(kind, value)) for kind, value in caps), view=view, said_to=said_to,
                 user=(folders.NOBODY, folders.NOBODY) if root else None, death_signal=signal.SIGTERM,
                 ruleset_fd=ruleset.fd if ruleset.ready else -1)


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# What the grader keeps of each of a build's streams (stdout, stderr): its first this many characters,
# then a line saying how much was cut. A file that includes itself under #error with a long line made
# hundreds of megabytes of messages (issue 70); what a student reads of them is bounded again
# downstream (outcome.py), this bounds what the grader holds at all.
OUTPUT_CAP_CHARS = 1 << 20


class BoundedOutput:
    """A process's stdout and stderr read to their end (so that it never blocks on a full pipe), each
    kept to its first cap characters, and the rest counted and dropped: communicate() without the
    memory. wait() is communicate's (raises subprocess.TimeoutExpired; may be called again after).
    Both are read in the calling thread as they come (poll), decoded as the process's text streams
    are (newlines translated, undecodable bytes replaced): no reader threads to start a build."""

    def __init__(self, proc: subprocess.Popen, cap: int = OUTPUT_CAP_CHARS):
        self.proc, self.cap = proc, cap
        self.kept: dict[str, list[str]] = {}
        self.cut: dict[str, int] = {}
        self._held: dict[str, int] = {}
        self._open: dict[int, tuple[str, io.IncrementalNewlineDecoder, object]] = {}
        self._poll = select.poll()
        for name, stream in (("out", proc.stdout), ("err", proc.stderr)):
            if stream is not None:
                decoder = codecs.getincrementaldecoder(getattr(stream, "encoding", None) or "utf-8")(errors="replace")
                self._open[stream.fileno()] = (name, io.IncrementalNewlineDecoder(decoder, translate=True), stream)
                self.kept[name], self.cut[name], self._held[name] = [], 0, 0
                self._poll.register(stream.fileno(), select.POLLIN)

    def _keep(self, name: str, text: str) -> None:
        room = self.cap - self._held[name]
        if room > 0:
            self.kept[name].append(text[:room])
            self._held[name] += min(room, len(text))
        self.cut[name] += max(0, len(text) - max(room, 0))

    def _read(self, fd: int) -> None:
        name, decoder, stream = self._open[fd]
        chunk = os.read(fd, 1 << 16)
        self._keep(name, decoder.decode(chunk, final=not chunk))
        if not chunk:                                  # its end
            self._poll.unregister(fd)
            del self._open[fd]
            stream.close()

    def wait(self, timeout: float | None = None) -> tuple[str, str]:
        """(stdout, stderr) once both have ended and the process has, within timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._open:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
            for fd, _ in self._poll.poll(None if left is None else int(left * 1000) + 1):
                self._read(fd)
        _exited(self.proc, None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self._text("out"), self._text("err")

    def _text(self, name: str) -> str:
        text = "".join(self.kept.get(name, []))
        cut = self.cut.get(name, 0)
        return text + (f"\n[the compiler printed {cut} more characters here; the grader kept the first {self.cap}]\n"
                       if cut else "")


def _exited(proc: subprocess.Popen, timeout: float | None) -> None:
    """proc.wait(timeout), woken by the process's end (a pidfd) rather than Popen.wait's polling, which
    sleeps 0.5 ms, then 1, 2, 4... between looks: a build's ninja that ended 1 ms after its output did
    was seen 2.5 ms late, more than the rest of its contract costs."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):                  # before Linux 5.3, or reaped already
        proc.wait(timeout)
        return
    try:
        waiting = select.poll()
        waiting.register(fd, select.POLLIN)
        if not waiting.poll(None if timeout is None else int(timeout * 1000) + 1):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    proc.wait()


_TIMED_OUT = -9          # the returncode _wait_build gives a build it stopped at its time limit


def _wait_build(proc: subprocess.Popen, args: list[str], limits: BuildLimits,
                group: cgroups.Group | None = None) -> tuple[subprocess.CompletedProcess, str]:
    output = BoundedOutput(proc)                    # read as it comes, never more than its cap held
    try:
        out, err = output.wait(timeout=limits.time_s)
    except subprocess.TimeoutExpired:
        stage = _running_stage(proc.pid)
        starved = _starved(build_cpu_seconds(proc.pid, group), limits)
        end_build(proc)
        out, err = output.wait()
        if starved:
            raise InfrastructureError(starved) from None        # the machine's fault, not the build's timeout
        why = (f"the build took longer than its limit of {limits.time_s:g} s"
               + (f", while running {stage}" if stage else "") + "; simplify the code (fewer unrolled iterations, "
               "fewer template instances) and submit again")
        return subprocess.CompletedProcess(args, _TIMED_OUT, out, err), why
    text = out + err
    # (a compiler killed by a signal from outside, "Killed signal terminated program", is the machine's:
    # faults.machine_fault; the limit here makes an allocation fail, and the compiler says so, or the
    # build's control group, at its memory limit, killed one: the build's, its oom_kill count says)
    killed_at_limit = group is not None and group.memory_kills() > 0
    if proc.returncode != 0 and (killed_at_limit or _OUT_OF_MEMORY.search(text)):
        stage = _stage_said(text, _OUT_OF_MEMORY)
        why = (f"the build ran out of its memory limit of {limits.memory_mib} MiB"
               + (f" in {stage}" if stage else "") + "; simplify the code and submit again")
        return subprocess.CompletedProcess(args, proc.returncode, out, err), why
    if proc.returncode != 0 and _FILE_TOO_LARGE.search(text):
        stage = _stage_said(text, _FILE_TOO_LARGE)
        why = (f"the build wrote a file larger than its limit of {limits.file_mib} MiB (limits.build_file_mib)"
               + (f", in {stage}" if stage else "") + "; a large initialised array (static or __device__) is "
               "written whole into the object file: fill it at run time instead, and submit again")
        return subprocess.CompletedProcess(args, proc.returncode, out, err), why
    return subprocess.CompletedProcess(args, proc.returncode, out, err), ""


# A compiler, assembler or linker stopped at the file-size limit (RLIMIT_FSIZE): SIGXFSZ (signal 25) as
# g++, collect2, nvcc and ninja say it, or EFBIG where the signal is ignored.
_FILE_TOO_LARGE = re.compile(r"File size limit exceeded|signal 25\b|File too large", re.I)
_OUT_OF_MEMORY = re.compile(r"out of memory|cannot allocate memory|std::bad_alloc|virtual memory exhausted", re.IGNORECASE)


def build_cpu_seconds(sid: int, group: cgroups.Group | None) -> float | None:
    """The CPU time of the whole build: its control group's (every process that ran in it), else every
    process of its session (ninja puts each compiler in a process group of its own, in its session)."""
    cpu = group.cpu_seconds() if group is not None else None
    return cpu if cpu is not None else processes.session_cpu_seconds(sid)


# A build past its wall-time limit that got less than this share of it in CPU time, on a machine whose
# load leaves each runnable process less than this share of a core, waited for the machine, not for its
# code (a load just above the cores, as any batch makes, explains a small shortfall, never half).
_STARVED_SHARE = 0.5


def _starved(cpu: float | None, limits: BuildLimits) -> str:
    """Why a build that ran out of wall time is the machine's (its compilers got less than
    _STARVED_SHARE of the limit in CPU time while the machine's load gave each runnable process less
    than _STARVED_SHARE of a core), or "" where the time went to the code. cpu: the whole build's
    (build_cpu_seconds)."""
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if cpu is None or cpu >= _STARVED_SHARE * limits.time_s or cores / max(load, 1e-9) >= _STARVED_SHARE:
        return ""
    return (f"the build ran past its limit of {limits.time_s:g} s of wall time having had only {cpu:.1f} s of CPU: "
            f"this machine was too busy (load {load:.1f} on {cores} cores), not the code. Grade it again with fewer "
            "grades at once (`--jobs`) or on a quieter machine; no student is graded for this.")


def end_build(proc: subprocess.Popen) -> None:
    """Stop a build: ninja runs each command in a process group of its own and, on SIGTERM, ends
    them; then SIGKILL for ninja's own group."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _running_stage(sid: int) -> str:
    """The compiler stage running in a build's session (the deepest one found: ninja runs each
    compiler in a process group of its own, in its session)."""
    found = ""
    for _, comm, _ in processes.in_session(sid):
        if comm in _STAGES and (not found or list(_STAGES).index(comm) < list(_STAGES).index(found)):
            found = comm
    return _STAGES.get(found, "")
