"""docs/: the generated pages are current, and every page the README points at exists."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_generated_docs_restate_the_data_they_come_from():
    """docs/samples.md (the manifests), docs/rubric-keys.md (the rubric schema), docs/cli.md (the
    commands): `scripts/docs.py --check` fails when one of them was not regenerated."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs.py"), "--check"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_a_stale_page_is_named(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    import docs

    monkeypatch.setattr(docs, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "samples.md").write_text("old\n")
    monkeypatch.setattr(docs, "FILES", {"docs/samples.md": lambda: "new\n"})
    monkeypatch.setattr(sys, "argv", ["docs.py", "--check"])
    assert docs.main() == 1


def test_every_link_in_the_readme_and_docs_leads_to_a_file():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")) or target.endswith(".svg"):
                continue
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
