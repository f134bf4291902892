"""A one-node Slurm cluster on localhost for the tests: its own munge key, slurm.conf, state and
spool folders under a temporary folder; munged, slurmctld and slurmd started as processes of this
test run and stopped by process id. Needs Debian's slurm-wlm and munge (`.ci/run` installs them).

    with OneNodeCluster(tmp_path) as cluster:    # SLURM_CONF set for sbatch, squeue, sinfo, scancel
        ...
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OneNodeCluster:
    def __init__(self, root: Path, *, cpus: int | None = None, memory_mib: int = 2048):
        self.root = root
        self.cpus = cpus or os.cpu_count() or 1
        self.memory_mib = memory_mib
        self.host = socket.gethostname()
        self.conf = root / "slurm.conf"
        self._procs: list[subprocess.Popen] = []
        self._env_before: dict[str, str | None] = {}

    def __enter__(self) -> "OneNodeCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        r = self.root
        for d in ("munge", "state", "spool", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = r / "munge" / "munge.socket"
        self._spawn([_tool("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={socket_path}",
                     f"--pid-file={r / 'munge' / 'munged.pid'}", f"--log-file={r / 'log' / 'munged.log'}",
                     f"--seed-file={r / 'munge' / 'seed'}"], "munged")
        self._wait(lambda: socket_path.exists(), "munged's socket")
        self.conf.write_text(f"""ClusterName=graderci
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=5
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mib} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self._env_before = {"SLURM_CONF": os.environ.get("SLURM_CONF")}
        os.environ["SLURM_CONF"] = str(self.conf)
        self._spawn([_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(lambda: self._run("sinfo", "-h", "-o", "%P").returncode == 0, "slurmctld to answer")
        self._spawn([_tool("slurmd"), "-D", "-f", str(self.conf), "-N", self.host], "slurmd")
        self._wait(lambda: self._run("sinfo", "-h", "-N", "-o", "%T").stdout.strip().rstrip("*") in ("idle", "mixed"),
                   "the node to be idle", timeout=60)

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([_tool(args[0]), *args[1:]], capture_output=True, text=True, timeout=30)

    def _spawn(self, args: list[str], name: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        self._procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait(self, ready, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}) while waiting for {what}: "
                                       + self.logs())
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: " + self.logs())
            time.sleep(0.2)

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-1500:])
        return "\n".join(out)

    def stop(self) -> None:
        """Stop every daemon by its process id (slurmd first), then restore SLURM_CONF."""
        for p in reversed(self._procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self._procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._procs.clear()
        for k, v in self._env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._env_before = {}
