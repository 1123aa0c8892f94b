"""Every dashboard page renders foreign runs in place: the MFM export and a Crafter recording."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import EXPORT, open_app, record_crafter, use_root



@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("foreign")
    if (EXPORT / "data.json").is_file():
        shutil.copytree(EXPORT, r / "mfm_export")
    record_crafter(r / "rec", seed=2, policy_seed=1, length=120)
    return r


@pytest.fixture(autouse=True)
def fresh(monkeypatch, root: Path) -> None:
    use_root(monkeypatch, root)


def keys(root: Path) -> list[str]:
    out = [f"rec/{p.name}" for p in sorted((root / "rec").glob("*.npz"))]
    if (root / "mfm_export").is_dir():
        out.append("mfm_export")
    return out


@pytest.mark.parametrize("page", [None, "timeline", "frames", "grid"])
@pytest.mark.parametrize("which", ["recording", "export"])
def test_every_page_renders_foreign_runs(root: Path, page: str | None, which: str) -> None:
    ks = [k for k in keys(root) if k.startswith("rec/") == (which == "recording")]
    if not ks:
        pytest.skip("the shared MFM export is not available")
    extra = {"frames": f"{ks[0]}:ep_000002,{ks[0]}:ep_000003"} if page == "frames" else {}
    at = open_app(page, runs=ks[0], run=ks[0], **extra)
    shown = "\n".join(str(e.value) for e in (*at.markdown, *at.caption, *at.title, *at.info, *at.warning,
                                              *at.error))
    if page == "frames":
        assert ("not included" in shown) == (which == "export"), shown[-800:]
    elif page:
        assert ks[0].split("/")[-1] in shown
    if page == "timeline" and which == "recording":
        assert "has no turns" in shown and "no agent-written memory" in shown
