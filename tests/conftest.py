import os
from pathlib import Path

import pytest

from grader.toolchain import gpuinfo

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "submissions" / "bias_gelu_fused"


def sample_folders() -> list[Path]:
    """submissions/<exercise>/ for every exercise that has samples."""
    return sorted(p for p in (ROOT / "submissions").iterdir() if (p / "manifest.yaml").is_file())


# "GPU present" as the grader decides it for `--backend auto` (toolchain/gpuinfo.py's probe: the
# management tool, else the driver), so a GPU host without torch runs its GPU tests too.
HAS_GPU = gpuinfo.gpu_present()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a GPU (the grader's probe, toolchain/gpuinfo.py, saw none): run "
                                   "scripts/gpu-check on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _build_cache(tmp_path_factory):
    """One build cache for the whole run, never the user's."""
    if "GRADER_TEST_KEEP_CACHE" not in os.environ:
        os.environ["GRADER_CACHE_DIR"] = str(tmp_path_factory.mktemp("grader-cache"))
    # `grader submit` writes its reports beside the file by default: never into submissions/ here
    os.environ["GRADER_REPORTS_ROOT"] = str(tmp_path_factory.mktemp("grader-reports"))
    yield


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
