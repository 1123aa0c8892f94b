"""Every dashboard page renders foreign runs in place: the MFM export and a Crafter recording."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import open_app, record_crafter, shared_export, use_root


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("foreign")
    record_crafter(r / "rec", seed=2, policy_seed=1, length=120)
    return r


@pytest.fixture(autouse=True)
def fresh(monkeypatch, root: Path) -> None:
    use_root(monkeypatch, root)


def run_key(root: Path, which: str) -> str:
    """The key of the recording, or of the shared export (copied into the root on first use;
    :func:`conftest.shared_export` skips, or fails in CI, when it is missing)."""
    if which == "recording":
        return f"rec/{sorted((root / 'rec').glob('*.npz'))[0].name}"
    if not (root / "mfm_export").is_dir():
        shutil.copytree(shared_export(), root / "mfm_export")
    return "mfm_export"


@pytest.mark.parametrize("page", [None, "timeline", "frames", "grid"])
@pytest.mark.parametrize("which", ["recording", "export"])
def test_every_page_renders_foreign_runs(root: Path, page: str | None, which: str) -> None:
    key = run_key(root, which)
    extra = {"frames": f"{key}:ep_000002,{key}:ep_000003"} if page == "frames" else {}
    at = open_app(page, runs=key, run=key, **extra)
    shown = "\n".join(str(e.value) for e in (*at.markdown, *at.caption, *at.title, *at.info, *at.warning,
                                              *at.error))
    if page == "frames":
        assert ("not included" in shown) == (which == "export"), shown[-800:]
    elif page:
        assert key.split("/")[-1] in shown
    if page == "timeline" and which == "recording":
        assert "has no turns" in shown and "no agent-written memory" in shown
