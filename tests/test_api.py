"""The core's Python API (``import mfm``): cheap to import, and a run played through it is the
run ``mfm run`` writes, read back here from its raw files."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mfm

REPO = Path(__file__).resolve().parents[1]


def test_import_mfm_loads_no_game_and_no_extra() -> None:
    code = ("import sys, mfm; heavy = [m for m in ('mfm.agent.runner', 'crafter', 'numpy', 'pandas', 'duckdb') "
            "if m in sys.modules]; print(','.join(heavy))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert got.stdout.strip() == ""


def test_the_public_names_are_listed_and_an_unknown_one_says_so() -> None:
    assert set(dir(mfm)) == set(mfm.__all__) and {"play", "RunConfig", "validate_run", "SCHEMA_VERSION"} <= set(dir(mfm))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mfm.nope  # noqa: B018


def test_a_run_played_through_the_api_is_a_finished_valid_run(tmp_path: Path) -> None:
    out = mfm.play(mfm.RunConfig(task="diamond", method="mfm", seed=1, steps=40, out=tmp_path / "r", fixed_clock=True))
    assert out == tmp_path / "r"
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "finished" and manifest["last_step"] == 40
    assert manifest["schema_version"] == mfm.SCHEMA_VERSION
    lines = (out / "index.jsonl").read_text().splitlines()
    assert len(lines) >= 2 and all(json.loads(line)["last_step"] <= 40 for line in lines)
    importlib.import_module("mfm.validate")  # a submodule loaded must not shadow the API's function
    assert mfm.validate_run(out).problems == []
