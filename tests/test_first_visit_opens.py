"""A first visit of the Timeline opens each file of the run it needs once (issue 45).

Every way Python opens a file (``open``, ``io.open`` behind ``Path.open`` and
``Path.read_bytes``, ``os.open`` behind ``mfm.schema.open_file``) is wrapped while the real
dashboard (Streamlit's AppTest) draws the page for a copy of a sample run that no registry
holds, with the derived table cache off, so every table is read from the run's own files."""
from __future__ import annotations

import builtins
import io
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import APP, REPO, components, use_root
from streamlit.testing.v1 import AppTest

from loaders.run import REGISTRY

SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"


class Opens:
    """The files under ``folder`` opened (successfully) while it is installed, counted."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder.resolve()) + os.sep
        self.count: Counter[str] = Counter()

    def _note(self, file: object) -> None:
        try:
            name = os.fsdecode(os.fspath(file))  # type: ignore[arg-type]
        except TypeError:
            return  # a file descriptor
        full = os.path.abspath(name)
        if full.startswith(self.folder):
            self.count[full[len(self.folder):]] += 1

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_open, real_os_open = builtins.open, os.open

        def wrapped_open(file, *args, **kwargs):
            f = real_open(file, *args, **kwargs)
            self._note(file)
            return f

        def wrapped_os_open(path, *args, **kwargs):
            fd = real_os_open(path, *args, **kwargs)
            self._note(path)
            return fd

        monkeypatch.setattr(builtins, "open", wrapped_open)
        monkeypatch.setattr(io, "open", wrapped_open)
        monkeypatch.setattr(os, "open", wrapped_os_open)


@pytest.fixture
def fresh_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the sample run under a new runs root, no run held, the table cache off."""
    root = tmp_path / "root"
    shutil.copytree(SAMPLE, root / SAMPLE.name)
    monkeypatch.setenv("MFM_CACHE_DIR", "off")
    use_root(monkeypatch, root)
    REGISTRY.clear()
    return root / SAMPLE.name


def visit(opens: Opens, *pages: str) -> AppTest:
    """Draw ``pages`` (files of pages/ without ``.py``) in turn for the run, the first one
    straight from its URL, with the opens counted."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["runs"] = SAMPLE.name
    with pytest.MonkeyPatch.context() as mp:
        opens.install(mp)
        for page in pages:
            at.switch_page(f"../pages/{page}.py")
            at.run()
            assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_first_timeline_visit_opens_each_file_once(fresh_run: Path) -> None:
    opens = Opens(fresh_run)
    at = visit(opens, "timeline")
    assert components(at, "mfm_timeline_lanes"), "the Timeline drew its chart"
    assert {"run.json", "index.jsonl", "steps.jsonl", "grid.jsonl"} <= set(opens.count), opens.count
    assert {f: n for f, n in opens.count.items() if n > 1} == {}, opens.count


def test_the_runs_page_then_the_timeline_open_each_file_once(fresh_run: Path) -> None:
    opens = Opens(fresh_run)
    visit(opens, "runs", "timeline")
    assert {"run.json", "index.jsonl", "lives.jsonl"} <= set(opens.count), opens.count
    assert {f: n for f, n in opens.count.items() if n > 1} == {}, opens.count
