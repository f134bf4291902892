import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.toolchain import gpuinfo

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "submissions" / "bias_gelu_fused"


def run_grader(*args: str, env: dict | None = None, timeout: float = 600, **run) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` as a new process, from the checkout: for a test about the command itself
    (its exit code, what it prints, its process); a test of what a grade holds calls the library. The
    process has this run's environment (its warm build cache, tests/conftest.py's _build_cache) with
    env over it; stdout and stderr come back as text (run's keywords, e.g. stderr=STDOUT, say otherwise)."""
    if "stdout" not in run and "stderr" not in run:
        run["capture_output"] = True
    run.setdefault("cwd", ROOT)
    return subprocess.run([sys.executable, "-m", "grader", *args], text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **run)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER_LIFE_S = 600          # a server left behind ends by itself


class Launched:
    """A real server started as a process of its own, for the tests about the server (its sockets,
    its processes, a kill -9; a page's handler logic needs none: Starlette's TestClient renders it in
    process, as tests/test_course_pages.py does): argv under `timeout` in a session of its own, its
    output in log, ready once port takes a connection. stop() ends its process group."""

    def __init__(self, argv: list[str], *, port: int, log: Path):
        self.port, self.log = port, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(["timeout", str(SERVER_LIFE_S), *argv], stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 120                           # a hang's guard
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError("the server did not start: " + log.read_text()) from None
                time.sleep(0.1)

    def pid(self) -> int:
        """The server's own process id (timeout's child)."""
        return int(Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def sample_folders() -> list[Path]:
    """submissions/<exercise>/ for every exercise that has samples."""
    return sorted(p for p in (ROOT / "submissions").iterdir() if (p / "manifest.yaml").is_file())


# "GPU present" as the grader decides it for `--backend auto` (toolchain/gpuinfo.py's probe: the
# management tool, else the driver), so a GPU host without torch runs its GPU tests too.
HAS_GPU = gpuinfo.gpu_present()


@pytest.hookimpl(tryfirst=True)         # before pytest-xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        _keep_together(item)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a GPU (the grader's probe, toolchain/gpuinfo.py, saw none): run "
                                   "scripts/gpu-check on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _keep_together(item) -> None:
    """The README runs the suite on pytest-xdist's workers with `--dist loadgroup`: a test that uses
    a fixture made once a module (a class graded, a server, tests/test_slurm.py's cluster, whose
    tests run in order and stop its daemons) runs on the worker that holds its module's other such
    tests, so the fixture is made once, not once a worker. Every other test goes where a worker is free."""
    defs = getattr(item, "_fixtureinfo", None)
    shared = defs is not None and any(d.scope in ("module", "class", "package")
                                      for name in item.fixturenames for d in defs.name2fixturedefs.get(name, ()))
    if shared and getattr(item, "module", None) is not None:
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def _run_folder(tmp_path_factory) -> Path:
    """This run's folder for what its workers share: pytest's base folder, or under pytest-xdist the
    folder above each worker's own (popen-gw0, popen-gw1, ...)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _build_cache(tmp_path_factory):
    """One warm build cache for the whole run and all its workers (the cache's entries are written
    whole and locked, as for a server's grades in parallel), never the user's: a test starting
    `python -m grader` passes it on through the environment. A test about the cache itself takes
    its own (`@pytest.mark.own_cache`)."""
    if "GRADER_TEST_KEEP_CACHE" not in os.environ:
        os.environ["GRADER_CACHE_DIR"] = str(_run_folder(tmp_path_factory) / "grader-cache")
    # `grader submit` writes its reports beside the file by default: never into submissions/ here
    os.environ["GRADER_REPORTS_ROOT"] = str(tmp_path_factory.mktemp("grader-reports"))
    yield


@pytest.fixture(autouse=True)
def _own_cache(request, tmp_path_factory):
    """A test marked own_cache (it reads what the cache holds) gets an empty cache of its own, so that
    the shared cache's other users, on this worker or another, neither add to it nor see its entries."""
    if request.node.get_closest_marker("own_cache") is None:
        yield
        return
    mp = pytest.MonkeyPatch()
    mp.setenv("GRADER_CACHE_DIR", str(tmp_path_factory.mktemp("own-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def rubric():
    from grader.exercises.rubric import load_rubric

    return load_rubric()


@pytest.fixture(scope="session")
def bias_gelu(rubric):
    """The bias_gelu_fused exercise's reference.py, as a module."""
    from grader.exercises import load_reference

    return load_reference(rubric).module


@pytest.fixture
def write_cu(tmp_path):
    def write(text: str, name: str = "k.cu") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write
