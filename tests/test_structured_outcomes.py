"""Structured outcomes (format 1.3): what an episode called and how it ended are fields of its
index row and its ``outcome.json``; the Failures table reads those fields, never the summary
prose (a test rewrites every summary and sees the table unchanged); runs older than 1.3 (the
sample runs of format 1.2) still read through the summary fallback and agree with their raw
``action.json`` and ``outcome.json``; ``mfm validate --frames`` checks the new fields."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from raw import episode_json

from loaders import failures as fl
from loaders.run import open_run
from mfm.agent.config import RunConfig
from mfm.agent.runner import Runner
from mfm.validate import validate

SAMPLES = REPO / "sample_runs"
CELL = re.compile(r"\(-?\d+, -?\d+\)")
MATERIAL_ARGS = ("material", "item", "name", "target", "what", "tool")
"""The documented rule (docs/run-format.md, index.jsonl ``material``): the first of these
arguments a call has names its material."""
COMPARED = ["episode", "life", "step", "action", "material", "target_x", "target_y", "outcome", "cause"]


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path.is_file() else []


def version(run_dir: Path) -> tuple[int, int]:
    major, minor = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["schema_version"].split(".")
    return int(major), int(minor)


def expected_failures(run_dir: Path) -> list[tuple]:
    """The Failures rows (:data:`COMPARED`) as the run's raw files say, read here without the
    loaders: the failed or interrupted episodes of ``index.jsonl`` and the deaths of
    ``lives.jsonl`` with the episodes they ended. A run of format 1.3 or later: from the index
    row's fields (which its ``outcome.json`` must repeat); an older one: from the episode's
    ``action.json`` arguments and ``outcome.json`` reason."""
    index = jsonl(run_dir / "index.jsonl")
    ids = {r["id"] for r in index}
    deaths = {e["episode"]: e for e in jsonl(run_dir / "lives.jsonl") if e["event"] == "death"}
    assert set(deaths) <= ids, "every death names an indexed episode"
    fields = version(run_dir) >= (1, 3)
    rows = []
    for r in index:
        death = deaths.get(r["id"])
        if r.get("outcome") not in ("failed", "interrupted") and death is None:
            continue
        action = episode_json(run_dir, f"{r['path']}/action.json")
        outcome = episode_json(run_dir, f"{r['path']}/outcome.json")
        if fields:
            assert (outcome["action"], outcome["label"], outcome.get("material"), outcome.get("target"),
                    outcome["reason"], outcome["args"]) == (r["action_kind"], r["outcome"], r.get("material"),
                                                            r.get("target"), r["reason"], action["args"])
            name, material, target, reason = r["action_kind"], r.get("material"), r.get("target"), r["reason"]
        else:
            args = action["args"]
            name = action.get("atom") or action.get("procedure")
            material = next((args[k] for k in MATERIAL_ARGS if k in args), None)
            target = [args["x"], args["y"]] if "x" in args and "y" in args else None
            reason = outcome["reason"]
        cause = f"died ({death['cause']})" if death else CELL.sub("(x, y)", reason).strip()
        rows.append((r["id"], r["life"], death["step"] if death else r["last_step"], name, material or "",
                     *(target or (None, None)), "death" if death else r["outcome"], cause))
    return sorted(rows, key=lambda t: (t[2], t[1], t[0]))


def table_rows(df: pd.DataFrame) -> list[tuple]:
    """The compared columns of a failures table, gaps as None, in (step, life, episode) order."""
    rows = [tuple(None if pd.isna(v) else v.item() if hasattr(v, "item") else v for v in row)
            for row in df[COMPARED].itertuples(index=False)]
    return sorted(rows, key=lambda t: (t[2], t[1], t[0]))


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the agent that fails often: ``direct`` on the diamond task, seed 3, 300
    steps, fixed clock (two deaths to zombies, interrupted collects and explores)."""
    out = tmp_path_factory.mktemp("structured") / "diamond_direct_s3"
    Runner(RunConfig(task="diamond", method="direct", seed=3, steps=300, out=out, fixed_clock=True)).run()
    return out


@pytest.mark.slow
def test_failures_are_the_structured_fields(played: Path) -> None:
    """(a) The Failures rows of a 1.3 run equal a reader of its index rows' fields, which each
    episode's outcome.json repeats (with the call's arguments as action.json holds them)."""
    assert version(played) >= (1, 3)
    want = expected_failures(played)
    assert len(want) >= 5 and any(t[7] == "death" for t in want), want
    assert any(t[4] and t[5] is not None for t in want), "some failure names a material and a cell"
    df = fl.failures(open_run(played))
    assert table_rows(df) == want


@pytest.mark.slow
def test_rewording_every_summary_changes_no_failure(played: Path, tmp_path: Path) -> None:
    """(b) Every summary of the run rewritten (index.jsonl and the log's [ACTION] lines) to a
    text that still looks like a call but names another action, material, cell and reason:
    the Failures table is unchanged but for the summary it shows."""
    before = fl.failures(open_run(played))
    run = tmp_path / played.name
    shutil.copytree(played, run)
    nonsense = "fly(material=cheese, x=1, y=2) -> failed: the moon; 0 steps, 0 new cells"
    index = jsonl(run / "index.jsonl")
    (run / "index.jsonl").write_text("".join(json.dumps({**r, "summary": nonsense}) + "\n" for r in index),
                                     encoding="utf-8")
    log = (run / "logs.txt").read_text(encoding="utf-8")
    reworded = re.sub(r"^\[ACTION\] .*$", f"[ACTION] {nonsense}", log, flags=re.MULTILINE)
    assert reworded != log
    (run / "logs.txt").write_text(reworded, encoding="utf-8")
    after = fl.failures(open_run(run))
    assert set(after["summary"]) == {nonsense}
    pd.testing.assert_frame_equal(after.drop(columns="summary"), before.drop(columns="summary"))
    assert table_rows(after) == expected_failures(run)
    assert fl.parse_call(nonsense)[0] == "fly", "the nonsense would have been read by the summary fallback"


def sample_run_dirs() -> list[Path]:
    return sorted(p.parent for p in SAMPLES.rglob("run.json") if "inherited" not in p.relative_to(SAMPLES).parts)


@pytest.mark.parametrize("run_dir", sample_run_dirs(), ids=lambda p: p.relative_to(SAMPLES).as_posix())
def test_sample_runs_failures_agree_with_their_raw_records(run_dir: Path) -> None:
    """(c) On every sample run the Failures rows equal the reader of the raw files: the fields
    for a run of 1.3 or later; for an older run (read through the summary fallback) its
    episodes' action.json arguments and outcome.json reasons."""
    run = open_run(run_dir)
    assert fl.outcome_fields(run) == (version(run_dir) >= (1, 3))
    assert table_rows(fl.failures(run)) == expected_failures(run_dir)


@pytest.mark.slow
def test_validate_checks_the_structured_fields(played: Path, tmp_path: Path) -> None:
    """``mfm validate``: the run as written is valid with ``--frames``; an index row whose
    ``target`` is not a cell is an error at its line (the row is skipped, so its episode's
    seen.jsonl rows name an unindexed episode); an outcome.json that disagrees with its index
    row, or whose ``args`` is not an object, is an error naming the file (``--frames``)."""
    assert validate(played, frames=True).problems == []
    run = tmp_path / played.name
    shutil.copytree(played, run)
    index = jsonl(run / "index.jsonl")
    n = next(i for i, r in enumerate(index) if r.get("target"))
    m = next(i for i, r in enumerate(index) if r.get("material") and i != n)
    k = next(i for i, r in enumerate(index) if r["kind"] == "episode" and i not in (n, m))
    index[n]["target"] = "north"
    (run / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in index), encoding="utf-8")
    path = run / index[m]["path"] / "outcome.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "material": "cheese"}), encoding="utf-8")
    bad_args = run / index[k]["path"] / "outcome.json"
    bad_args.write_text(json.dumps({**json.loads(bad_args.read_text()), "args": [1, 2]}), encoding="utf-8")
    c = validate(run, frames=True)
    found = {(p.file, p.line, p.severity): p.message for p in c.problems}
    assert ("index.jsonl", n + 1, "error") in found and "target" in found[("index.jsonl", n + 1, "error")]
    msg = found[(f"{index[m]['path']}/outcome.json", 0, "error")]
    assert "'cheese'" in msg and f"index.jsonl:{m + 1}" in msg and repr(index[m]["material"]) in msg
    assert "args must be an object" in found[(f"{index[k]['path']}/outcome.json", 0, "error")]
    skipped = index[n]["id"]
    assert sorted(p.file for p in c.errors) == sorted(["index.jsonl", f"{index[m]['path']}/outcome.json",
                                                       f"{index[k]['path']}/outcome.json", "seen.jsonl"]), c.problems
    assert any(p.file == "seen.jsonl" and skipped in p.message for p in c.errors), "the skipped row's seen rows"
    assert [p for p in validate(run).problems if p.file.endswith("outcome.json")] == [], \
        "outcome.json is read only with --frames"
