import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "submissions" / "bias_gelu_fused"


def sample_folders() -> list[Path]:
    """submissions/<exercise>/ for every exercise that has samples."""
    return sorted(p for p in (ROOT / "submissions").iterdir() if (p / "manifest.yaml").is_file())


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU: run scripts/gpu-check on a GPU machine")
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
