"""The held-out sweeps' compact record (results/heldout/): a run folder cut down to run.json,
milestones and lives, plus the measures of its full folder, gives the comparison tables the
full folder gives, including those that need the turns."""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from loaders import compare
from loaders import paper_measures as pm

SAMPLE = REPO / "sample_runs" / "reach-1000_mfm_s0"
SCRIPT = REPO / "results" / "heldout" / "save_measures.py"
KEPT = ("run.json", "milestones.jsonl", "lives.jsonl")


def _compact(full: Path, into: Path) -> Path:
    """The compact record of a run folder, as results/heldout/ keeps it (no measures yet)."""
    record = into / full.name
    record.mkdir(parents=True)
    for name in KEPT:
        if (full / name).is_file():
            shutil.copy2(full / name, record / name)
    return record


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("heldout")
    full = base / "full" / SAMPLE.name
    shutil.copytree(SAMPLE, full)
    _compact(full, base / "record")
    done = subprocess.run([sys.executable, str(SCRIPT), str(full.parent), "--into", str(base / "record")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "1 measures.json written" in done.stderr
    return full.parent, base / "record"


def _fields(m: pm.RunMeasures) -> dict:
    return {k: v for k, v in dataclasses.asdict(m).items() if k != "identity"}


def test_a_compact_record_measures_as_its_full_folder(both: tuple[Path, Path]) -> None:
    full, record = both
    whole, kept = compare.measures(full), compare.measures(record)
    assert len(whole) == len(kept) == 1
    assert whole[0].turns > 0 and whole[0].ages, "the sample run has turns and retrievals to keep"
    assert _fields(kept[0]) == _fields(whole[0])
    assert kept[0].identity != whole[0].identity
    for table in (pm.reach_success_table, pm.retarget_table, pm.interaction_table, pm.milestone_table):
        assert table(kept).equals(table(whole)), table.__name__


def test_without_its_measures_a_compact_record_has_no_turns(both: tuple[Path, Path], tmp_path: Path) -> None:
    """The measures are what keeps the turns' tables: a record without them counts no turns."""
    record = _compact(both[0] / SAMPLE.name, tmp_path)
    (m,) = compare.measures(record.parent)
    assert m.turns == 0 and not m.ages


@pytest.mark.parametrize("text", ["{", "[]", '{"turns": 3}', json.dumps({"retarget": {"no_such_count": 1}})])
def test_a_damaged_measures_file_is_named_and_the_record_measured_from_its_files(
        both: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str) -> None:
    record = _compact(both[0] / SAMPLE.name, tmp_path)
    (record / pm.MEASURES).write_text(text, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="loaders.paper_measures"):
        (m,) = compare.measures(record.parent)
    assert m.turns == 0 and m.name == SAMPLE.name
    assert any(str(record / pm.MEASURES) in r.getMessage() and "not read" in r.getMessage() for r in caplog.records)


def test_a_folder_with_its_turns_is_measured_from_them(both: tuple[Path, Path], tmp_path: Path) -> None:
    """A measures file beside the turns is ignored: the run's own files are the truth."""
    run = tmp_path / SAMPLE.name
    shutil.copytree(both[0] / SAMPLE.name, run)
    (run / pm.MEASURES).write_text(json.dumps({"turns": -1}), encoding="utf-8")
    (m,) = compare.measures(tmp_path)
    assert _fields(m) == _fields(compare.measures(both[0])[0])


def test_the_reach_table_says_how_each_diamond_was_recalled() -> None:
    """On the held-out reach-3000 record: per method, the successes whose winning recall (the
    last recall of the diamond at or before its step, from each ``measures.json`` read with
    json) learned the place from frames, the log or a note, and those with no recall."""
    record = REPO / "results" / "heldout" / "map"
    want: dict[str, list[int]] = {}
    for f in sorted(record.glob("reach-3000_*/measures.json")):
        m = json.loads(f.read_text())
        if m["diamond_step"] is None or m["status"] not in pm.TRIALS:
            continue
        wins = [r for r in m["recalls"] if r.get("name") == "diamond" and r["step"] <= m["diamond_step"]]
        via = wins[-1]["via"] if wins else None
        counts = want.setdefault(m["method"], [0, 0, 0, 0])
        counts[("frames", "log", "notes", None).index(via)] += 1
    assert {"mfm", "vista", "pro-long"} <= set(want) and any(c[1] for c in want.values())
    table = pm.reach_success_table(compare.measures(record))
    rows = table[table["task"] == "reach-3000"]
    got = {m: [int(r["by_frames"]), int(r["by_log"]), int(r["by_notes"]), int(r["by_sight"])]
           for m, r in zip(rows["method"], rows.to_dict("records"))}
    assert {m: c for m, c in got.items() if m in want} == want


def test_the_diamond_table_counts_each_method_s_diamonds_from_the_record() -> None:
    """On the held-out diamond record: per method, the seeds, the runs whose ``run.json``
    (read with json) has the diamond among its milestones, and their mean step; the Wilson
    interval around that rate; no reach run in this table and no diamond run in the reach one."""
    record = REPO / "results" / "heldout" / "map"
    steps: dict[str, list[int | None]] = {}
    for f in sorted(record.glob("diamond_*/run.json")):
        run = json.loads(f.read_text())
        steps.setdefault(run["method"], []).append(run["milestones"].get("collect_diamond"))
    assert set(steps) == {"direct", "pro-long", "vista", "mfm"}
    ms = compare.measures(record)
    table = pm.diamond_success_table(ms)
    assert set(table["task"]) == {"diamond"} and "diamond" not in set(pm.reach_success_table(ms)["task"])
    for row in table.to_dict("records"):
        got = [s for s in steps[row["method"]] if s is not None]
        assert (row["seeds"], row["successes"]) == (len(steps[row["method"]]), len(got))
        assert row["steps_mean"] == pytest.approx(sum(got) / len(got))
        assert row["rate_lo"] < len(got) / row["seeds"] < row["rate_hi"]
        assert (row["rate_lo"], row["rate_hi"]) == pm.wilson(len(got), row["seeds"])
