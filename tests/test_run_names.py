"""Run names unique within a runs root (issue 46): runs of one folder name in two sweeps
under one root, and a copied run folder, are each counted once under a name of their own,
with a warning, in the loaders and in ``mfm results``. (Runs in a bucket: tests/test_store_errors.py.)"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SAMPLE = REPO / "sample_runs" / "diamond_direct_s3_1600steps"


def mfm(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mfm.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def test_runs_on_disk_with_one_folder_name_or_copied_are_kept_apart(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Two sweeps under one root with a run of one name, and a copied run folder: each run
    counted once under a name of its own, with a warning for each clash."""
    from loaders.run import open_runs

    root = tmp_path / "root"
    for where in (f"sweep_a/{SAMPLE.name}", f"sweep_b/{SAMPLE.name}", "copy_of_it"):
        shutil.copytree(SAMPLE, root / where)
    with caplog.at_level("WARNING", logger="loaders.run"):
        runs = open_runs(root)
    names = [r.name for r in runs]
    assert sorted(names) == sorted(["copy_of_it", f"sweep_a/{SAMPLE.name}", f"sweep_b/{SAMPLE.name}"])
    assert {r.path.resolve() for r in runs} == {(root / n).resolve() for n in names}
    assert any("equal run.json" in m and "copy_of_it" in m for m in caplog.messages)
    got = mfm("results", str(root), cwd=tmp_path)
    assert got.returncode == 0 and "(3 runs;" in got.stdout
    assert "2 runs named" in got.stderr and "equal run.json" in got.stderr
