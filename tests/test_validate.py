"""``mfm validate`` and the tolerant readers on damaged copies of a real written run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfm.cli import main
from mfm.schema import SCHEMA_VERSION
from loaders.cachedread import validate

from conftest import WrittenRun


def _damage(run: WrittenRun, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run.dir, copy)
    return copy


def test_truncated_mid_line_validates_with_a_warning(written_run: WrittenRun, tmp_path: Path, capsys):
    run = _damage(written_run, tmp_path)
    p = run / "index.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    c = validate(run)
    assert c.errors == []
    warn = [x for x in c.problems if x.file == "index.jsonl"]
    assert len(warn) == 1 and warn[0].line == len(lines) and "truncated" in warn[0].message
    assert len(c.tables["index.jsonl"]) == len(lines) - 1
    assert main(["validate", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"index.jsonl:{len(lines)}: warning: truncated" in out and ": valid:" in out


@pytest.mark.parametrize("file, line_no, garbage, message", [
    ("steps.jsonl", 3, b"this is not json\n", "not valid JSON"),
    ("grid.jsonl", 2, b'{"cell": [1], "kind": "walked", "step": 1}\n', "cell must be"),
    ("index.jsonl", 2, b'{"id": "ep_000001", "kind": "episode"}\n', "missing field"),
    ("turns.jsonl", 1, b"\xff\xfe\x00garbage\n", "not UTF-8"),
    ("grid.jsonl", 4, b'{"cell": [1e300, 2], "kind": "walked", "step": 1}\n', "finite and within"),
    ("steps.jsonl", 2, b'{"step": NaN}\n', "must be"),
])
def test_a_bad_line_in_the_middle_is_an_error_at_its_line(written_run, tmp_path, capsys, file, line_no, garbage,
                                                          message):
    run = _damage(written_run, tmp_path)
    p = run / file
    lines = p.read_bytes().splitlines(keepends=True)
    before = len(lines)
    lines.insert(line_no - 1, garbage)
    p.write_bytes(b"".join(lines))
    c = validate(run)
    bad = [x for x in c.problems if x.file == file]
    assert len(bad) == 1 and bad[0].line == line_no and bad[0].severity == "error", c.problems
    assert message in bad[0].message
    assert len(c.tables[file]) == before, "every valid row is kept"
    assert main(["validate", str(run)]) == 1
    assert f"{file}:{line_no}: error:" in capsys.readouterr().out


def test_future_schema_version_is_refused_clearly(written_run, tmp_path):
    run = _damage(written_run, tmp_path)
    m = json.loads((run / "run.json").read_text())
    m["schema_version"] = "2.0"
    (run / "run.json").write_text(json.dumps(m))
    c = validate(run)
    assert c.manifest is None
    assert any(p.file == "run.json" and "newer than this mfm reads" in p.message for p in c.errors)
    m["schema_version"] = "1.7"
    (run / "run.json").write_text(json.dumps(m))
    c = validate(run)
    assert c.manifest is not None and any(f"newer than {SCHEMA_VERSION}" in p.message for p in c.problems)


def test_duplicate_ids_out_of_order_steps_and_orphans(written_run, tmp_path):
    run = _damage(written_run, tmp_path)
    idx = (run / "index.jsonl").read_text().splitlines(keepends=True)
    (run / "index.jsonl").write_text("".join(idx + [idx[3]]))
    steps = (run / "steps.jsonl").read_text().splitlines(keepends=True)
    steps[5], steps[6] = steps[6], steps[5]
    (run / "steps.jsonl").write_text("".join(steps))
    (run / "episodes/ep_009999").mkdir()
    c = validate(run)
    msgs = {(p.file, p.line): p.message for p in c.problems}
    assert "duplicate episode id" in msgs[("index.jsonl", len(idx) + 1)]
    assert "out of order" in msgs[("steps.jsonl", 7)]
    assert "not in index.jsonl" in msgs[("episodes/ep_009999", 0)]


def test_missing_frame_strip_and_corrupt_png(written_run, tmp_path):
    run = _damage(written_run, tmp_path)
    ep1, ep2 = written_run.episodes[1], written_run.episodes[2]
    (run / ep1.path / "frames/00000.webp").unlink()
    (run / ep2.path / "frames/00000.webp").write_bytes(b"RIFF....WEBPnot really")
    c = validate(run, frames=True)
    assert any("frame strip" in p.message and "missing" in p.message for p in c.errors)
    assert any(p.file == f"{ep2.path}/frames/00000.webp" and "not a readable image" in p.message for p in c.errors)


def test_memory_history_damage_is_reported(written_run, tmp_path):
    run = _damage(written_run, tmp_path)
    p = run / "memory_writes.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    rows[3]["sha256"] = "0" * 64
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = validate(run)
    assert [(x.file, x.line) for x in c.errors] == [("memory_writes.jsonl", 4)]


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "empty folder"),
    (lambda d: (d / "notes.txt").write_text("hi"), "not a run"),
])
def test_folders_that_are_not_runs(tmp_path, setup, message, capsys):
    d = tmp_path / "x"
    d.mkdir()
    setup(d)
    c = validate(d)
    assert any(message in p.message for p in c.errors)
    assert main(["validate", str(d)]) == 1


def test_fast_path_reads_what_the_tolerant_reader_reads(written_run, tmp_path, monkeypatch):
    import loaders.fastread
    from loaders.fastread import read_columns
    from mfm.schema import GridRow, IndexRow, StepRow, TurnRow, read_table

    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    for name, rtype, order in (("steps.jsonl", StepRow, "step"), ("grid.jsonl", GridRow, None),
                               ("index.jsonl", IndexRow, None), ("turns.jsonl", TurnRow, None)):
        df = read_columns(written_run.dir / name, rtype, order)
        assert df is not None, name
        c = validate(written_run.dir)
        assert name in c.columns
        slow = [r for _, r in read_table(written_run.dir / name, rtype)[0]]
        assert list(c.tables[name]) == slow


@pytest.mark.parametrize("damage", [
    lambda ls: ls[:3] + [b'{"step": "7"}\n'] + ls[3:],
    lambda ls: ls[:5] + [ls[4]] + ls[5:],
    lambda ls: ls[:-1] + [ls[-1][:20]],
    lambda ls: ls[:2] + [ls[2].replace(b'"episode":"', b'"episode":1,"x":"')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"life":0', b'"life":0.5')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"life":0', b'"life":true')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"life":0', b'"life":-1')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"inventory":{', b'"inventory":{"zz":null,')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"inventory":{', b'"inventory":{"zz":1.5,')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"facing":[', b'"facing":[7,')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"unlocked":[', b'"unlocked":[null,')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"x":', b'"x":1e9,"y0":')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"action":"', b'"action":"\xff')] + ls[3:],
])
def test_fast_path_falls_back_on_any_damage(written_run, tmp_path, monkeypatch, damage):
    import loaders.fastread

    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = _damage(written_run, tmp_path)
    p = run / "steps.jsonl"
    p.write_bytes(b"".join(damage(p.read_bytes().splitlines(keepends=True))))
    c = validate(run)
    assert "steps.jsonl" not in c.columns
    assert [x for x in c.problems if x.file == "steps.jsonl"], "the tolerant reader reports the damage"


@pytest.mark.parametrize("damage", [lambda ls: ls[:3] + [b"\n"] + ls[3:], lambda ls: [b"\n"] + ls])
def test_empty_lines_are_left_to_the_tolerant_reader(written_run, tmp_path, monkeypatch, damage):
    """An empty line is no damage (the tolerant reader skips it) but the columnar reader,
    which counts rows by newlines, declines the file: the rows are the tolerant reader's."""
    import loaders.fastread
    from mfm.schema import StepRow, read_table

    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = _damage(written_run, tmp_path)
    p = run / "steps.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(damage(lines)))
    c = validate(run)
    assert "steps.jsonl" not in c.columns
    assert list(c.tables["steps.jsonl"]) == [r for _, r in read_table(p, StepRow)[0]]
    assert len(c.tables["steps.jsonl"]) == len(lines)


@pytest.mark.parametrize("damage", [
    lambda ls: ls[:2] + [ls[1]] + ls[2:],
    lambda ls: ls[:2] + [ls[2].replace(b'"id":"ep_', b'"id":"episode_')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"frames":', b'"frames":99')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"kind":"episode"', b'"kind":"other"')] + ls[3:],
    lambda ls: ls[:2] + [ls[2].replace(b'"tags":[', b'"tags":[3,')] + ls[3:],
])
def test_index_fast_path_falls_back_on_any_damage(written_run, tmp_path, monkeypatch, damage):
    _check_fallback(written_run, tmp_path, monkeypatch, "index.jsonl", damage)


@pytest.mark.parametrize("damage", [
    lambda ls: ls[:1] + [ls[1].replace(b'"calls":[', b'"calls":[{"tool":"fly"},')] + ls[2:],
    lambda ls: ls[:1] + [ls[1].replace(b'"targets":[', b'"targets":[{"kind":"go_to","x":"1","y":2},')] + ls[2:],
    lambda ls: ls[:1] + [ls[1].replace(b'"targets":[', b'"targets":[{"kind":"jump","x":1,"y":2},')] + ls[2:],
    lambda ls: ls[:1] + [ls[1].replace(b'"episodes":[', b'"episodes":[7,')] + ls[2:],
])
def test_turns_fast_path_falls_back_on_any_damage(written_run, tmp_path, monkeypatch, damage):
    _check_fallback(written_run, tmp_path, monkeypatch, "turns.jsonl", damage)


def _check_fallback(written_run, tmp_path, monkeypatch, name, damage):
    import loaders.fastread

    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = _damage(written_run, tmp_path)
    p = run / name
    before = p.read_bytes()
    p.write_bytes(b"".join(damage(before.splitlines(keepends=True))))
    assert p.read_bytes() != before, "the damage applies"
    c = validate(run)
    assert name not in c.columns
    assert [x for x in c.problems if x.file == name], "the tolerant reader reports the damage"


def test_an_enormous_line_is_skipped_not_loaded(written_run, tmp_path):
    from mfm.schema import MAX_LINE_BYTES

    run = _damage(written_run, tmp_path)
    p = run / "grid.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    huge = b'{"cell": [1, 2], "kind": "walked", "step": 1, "item": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n'
    p.write_bytes(b"".join(lines[:2] + [huge] + lines[2:]))
    c = validate(run)
    bad = [x for x in c.problems if x.file == "grid.jsonl"]
    assert [(x.line, x.severity) for x in bad] == [(3, "error")] and "longer than" in bad[0].message
    assert len(c.tables["grid.jsonl"]) == len(lines)


def test_an_enormous_valid_line_is_not_taken_by_the_fast_path(written_run, tmp_path):
    from mfm.schema import MAX_LINE_BYTES

    run = _damage(written_run, tmp_path)
    p = run / "steps.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"action":"', b'"action":"' + b"x" * (MAX_LINE_BYTES + 10))
    p.write_bytes(b"".join(lines))
    c = validate(run)
    assert "steps.jsonl" not in c.columns
    assert [(x.line, "longer than" in x.message) for x in c.problems if x.file == "steps.jsonl"] == [(2, True)]


def test_missing_and_empty_tables_are_an_empty_run_not_an_error(written_run, tmp_path):
    run = _damage(written_run, tmp_path)
    (run / "grid.jsonl").unlink()
    (run / "turns.jsonl").write_bytes(b"")
    c = validate(run)
    assert c.errors == [] and c.tables["grid.jsonl"] == [] and c.tables["turns.jsonl"] == []


def test_the_core_takes_columns_as_plain_arrays_not_only_dataframes(written_run, tmp_path):
    """The core reader asks a table read as columns only for a column by its name
    (``mfm.run_reader.ColumnTable``): a reader handing over a ``dict`` of numpy arrays (no
    pandas) gives the same problems and records as the tolerant reader, through every check
    that reads columns (a seen row naming no indexed episode, the step budget, a missing
    episode folder)."""
    import dataclasses

    import numpy as np

    import mfm.validate
    from mfm.run_reader import TableRead, read_one_table, read_run

    run = _damage(written_run, tmp_path)
    manifest = json.loads((run / "run.json").read_text())
    manifest["step_budget"] = 7
    (run / "run.json").write_text(json.dumps(manifest))
    with (run / "seen.jsonl").open("a") as f:
        f.write(json.dumps({"episode": "ep_000002", "life": 0, "first_step": 1, "last_step": 5,
                            "material": "tree", "cells": [[1, 2]]}) + "\n")
        f.write(json.dumps({"episode": "ep_000090", "life": 0, "first_step": 1, "last_step": 5,
                            "material": "tree", "cells": [[1, 2]]}) + "\n")
    shutil.rmtree(run / json.loads((run / "index.jsonl").read_text().splitlines()[4])["path"])
    as_columns = ("index.jsonl", "steps.jsonl", "seen.jsonl")

    def arrays(path: Path, name: str) -> TableRead:
        t = read_one_table(path, name)
        if name not in as_columns or t.problems or not t.records:
            return t
        fields = [f.name for f in dataclasses.fields(type(t.records[0]))]
        cols = {k: np.array([getattr(r, k) for r in t.records], dtype=object) for k in fields}
        return TableRead(t.records, t.lines, (), cols)

    plain = mfm.validate.validate(run)
    fast = mfm.validate.validate(run, read=arrays)
    assert sorted(fast.columns) == sorted(as_columns) and all(type(c) is dict for c in fast.columns.values())
    assert fast.problems == plain.problems
    messages = " | ".join(p.message for p in plain.problems)
    assert "exceeds the budget 7" in messages and "ep_000090 is not in index.jsonl" in messages
    assert "is missing" in messages
    assert {k: list(v) for k, v in fast.tables.items()} == {k: list(v) for k, v in plain.tables.items()}
    assert read_run(run, read=arrays).problems == read_run(run).problems
