"""The README's test command runs on pytest-xdist's workers with `--dist loadgroup`, and
tests/conftest.py puts a module's tests that share a module-scoped fixture (a class graded once, a
server, the Slurm cluster) in one group, so the fixture is made once a run, not once a worker. Two
things broke that silently and doubled the suite's costliest set-ups: conftest's hook ran after
pytest-xdist's, which reads the groups into the node ids; and pytest 9.2 keeps a node's id where
pytest-xdist 3.8 cannot add the group (pyproject.toml holds pytest below 9.2). This runs a module of
that shape on two workers and counts how often its fixture was made."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

MODULE = '''
import os
import pytest

@pytest.fixture(scope="module")
def made():
    with open(os.environ["MADE_LOG"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
    return True

@pytest.mark.parametrize("n", range(8))
def test_shares(made, n):
    assert made

@pytest.mark.parametrize("n", range(8))
def test_alone(n):
    pass
'''


def test_a_modules_shared_fixture_is_made_once_on_two_workers(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    (tests / "test_shape.py").write_text(MODULE)
    log = tmp_path / "made.log"
    env = {"MADE_LOG": str(log), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                          "--rootdir", str(tmp_path), str(tests / "test_shape.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "16 passed" in out.stdout, out.stdout[-2000:]
    made = log.read_text().split()
    assert len(made) == 1, f"the module's fixture was made on {made}: its tests were not kept on one worker"
