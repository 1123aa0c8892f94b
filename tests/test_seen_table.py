"""``seen.jsonl`` (format 1.2): the loaders' ``seen`` table, read only when asked for,
``mfm validate``'s checks of it, and runs of format 1.1 (no such file) reading as before."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import loaders.cachedread
from loaders import open_run
from loaders.run import TABLE_NAMES
from mfm.cli import main
from mfm.objectstore import TABLE_ORDER
from mfm.validate import validate

from conftest import REPO
from raw import jsonl

SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"
FIELDS = ["episode", "life", "first_step", "last_step", "material", "cells"]
BAD = b'{"episode": "ep_000002", "life": 0, "first_step": 5, "last_step": 9, "material": "tree", "cells": [[1]]}\n'


def copy_sample(tmp_path: Path, name: str = "run") -> Path:
    """A copy of the sample without its ``seen.jsonl``: the tests write the seen rows they check."""
    run = tmp_path / name
    shutil.copytree(SAMPLE, run)
    (run / "seen.jsonl").unlink(missing_ok=True)
    return run


def as_format_1_1(run: Path) -> None:
    """Make ``run`` (without ``seen.jsonl``) a run of format 1.1 in its manifest too."""
    manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
    (run / "run.json").write_text(json.dumps(dict(manifest, schema_version="1.1")) + "\n", encoding="utf-8")


def seen_rows(run: Path) -> list[dict]:
    """Hand-written seen rows for the first indexed episodes, as the writer would put them."""
    rows = []
    for r, material in zip(jsonl(run / "index.jsonl")[1:5], ("tree", "water", "stone", "tree")):
        x, y = int(r["x"]), int(r["y"])
        rows.append({"episode": r["id"], "life": r["life"], "first_step": r["first_step"],
                     "last_step": r["last_step"], "material": material,
                     "cells": [[x + 1, y], [x - 2, y + 3], [x, y - 1]]})
    return rows


def append(run: Path, lines: list[bytes]) -> None:
    with open(run / "seen.jsonl", "ab") as f:
        f.writelines(lines)


def encoded(rows: list[dict]) -> list[bytes]:
    return [json.dumps(r).encode() + b"\n" for r in rows]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The table files the loaders read, in order."""
    names: list[str] = []
    plain = loaders.cachedread.read_one_table_cached

    def counted(path: Path, name: str, final: bool = False):
        names.append(name)
        return plain(path, name, final)

    monkeypatch.setattr(loaders.cachedread, "read_one_table_cached", counted)
    return names


def test_the_seen_table_holds_the_rows_of_the_file_read_when_asked(tmp_path, reads):
    run_dir = copy_sample(tmp_path)
    rows = seen_rows(run_dir)
    lines = encoded(rows)
    append(run_dir, lines[:2] + [BAD] + lines[2:])
    expected = [json.loads(line) for line in (run_dir / "seen.jsonl").read_bytes().splitlines()
                if json.loads(line)["cells"] != [[1]]]
    assert expected == rows

    run = open_run(run_dir)
    run.episodes(), run.steps(), run.grid()
    assert "seen.jsonl" not in reads, "opening a run and reading its other tables does not read seen.jsonl"
    assert not [p for p in run.problems if p.file == "seen.jsonl"]
    seen = run.seen()
    assert reads.count("seen.jsonl") == 1
    assert list(seen.columns) == FIELDS
    got = [dict(r, cells=json.loads(r["cells"])) for r in seen.to_dict("records")]
    assert got == expected
    bad = [p for p in run.problems if p.file == "seen.jsonl"]
    assert [(p.line, p.severity) for p in bad] == [(3, "error")] and "cells must be" in bad[0].message
    assert run.table("seen") is seen and reads.count("seen.jsonl") == 1, "read once"

    by_material = dict(run.sql("select material, count(*) from seen group by 1").fetchall())
    assert by_material == dict(pd.Series([r["material"] for r in expected]).value_counts())
    cells = run.sql("select sum(json_array_length(cells)) from seen").fetchall()[0][0]
    assert cells == sum(len(r["cells"]) for r in expected)


def test_validate_names_the_bad_line(tmp_path, capsys):
    run_dir = copy_sample(tmp_path)
    lines = encoded(seen_rows(run_dir))
    append(run_dir, lines[:1] + [b"not json at all\n"] + lines[1:] + [BAD])
    for c in (validate(run_dir), loaders.cachedread.validate(run_dir)):
        bad = [(p.line, p.severity) for p in c.problems if p.file == "seen.jsonl"]
        assert bad == [(2, "error"), (len(lines) + 2, "error")], c.problems
        assert len(c.tables["seen.jsonl"]) == len(lines)
    assert main(["validate", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert f"{run_dir}/seen.jsonl:2: error: not valid JSON" in out
    assert f"{run_dir}/seen.jsonl:{len(lines) + 2}: error: cells must be [x, y] pairs" in out


def test_a_row_of_an_unknown_episode_is_reported(tmp_path):
    run_dir = copy_sample(tmp_path)
    index = (run_dir / "index.jsonl").read_bytes().splitlines(keepends=True)
    gone = json.loads(index[3])
    (run_dir / "index.jsonl").write_bytes(b"".join(index[:3] + index[4:]))
    last = json.loads(index[-1])
    tail = dict(episode=f"ep_{int(last['id'][3:]) + 1:06d}", life=last["life"], first_step=last["last_step"],
                last_step=last["last_step"] + 4, material="stone", cells=[[10, 10]])
    rows = [dict(episode=gone["id"], life=gone["life"], first_step=gone["first_step"], last_step=gone["last_step"],
                 material="tree", cells=[[5, 6]]),
            tail,
            dict(seen_rows(run_dir)[0], cells=[[3, 4], [64, 2], [-1, 7]])]
    append(run_dir, encoded(rows))
    c = validate(run_dir)
    seen = [(p.line, p.severity, p.message) for p in c.problems if p.file == "seen.jsonl"]
    assert seen == [
        (1, "error", f"episode {gone['id']} is not in index.jsonl"),
        (2, "warning", f"episode {tail['episode']} is not in index.jsonl yet (being committed when the run stopped)"),
        (3, "warning", "tree: 2 cell(s) outside the 64x64 world, e.g. [64, 2]"),
    ]
    assert len(c.tables["seen.jsonl"]) == 3, "the rows stay"
    run = open_run(run_dir)
    assert len(run.seen()) == 3
    assert [(p.line, p.severity) for p in run.problems if p.file == "seen.jsonl"] == [(1, "error"), (2, "warning"),
                                                                                       (3, "warning")]


def test_a_run_without_seen_rows_opens_unchanged(tmp_path, reads):
    """A 1.1 run (no seen.jsonl): nothing more is read or reported, its other tables are those
    of the same run with seen rows, and its ``seen`` table is empty."""
    plain_dir = copy_sample(tmp_path, "plain")
    as_format_1_1(plain_dir)
    with_dir = copy_sample(tmp_path, "with")
    append(with_dir, encoded(seen_rows(with_dir)))
    before = sorted(p.relative_to(plain_dir).as_posix() for p in plain_dir.rglob("*"))
    plain, with_seen = open_run(plain_dir), open_run(with_dir)
    assert plain.problems == [] and validate(plain_dir).problems == []
    for name in TABLE_NAMES.values():
        if name != "seen":
            pd.testing.assert_frame_equal(plain.table(name), with_seen.table(name), check_exact=True)
    assert "seen.jsonl" not in reads
    empty = plain.seen()
    assert empty.empty and list(empty.columns) == FIELDS
    assert plain.problems == []
    assert plain.sql("select count(*) from seen").fetchall() == [(0,)]
    assert sorted(p.relative_to(plain_dir).as_posix() for p in plain_dir.rglob("*")) == before, "nothing written"
    assert main(["validate", str(plain_dir)]) == 0


def test_seen_rows_reach_the_bucket_before_the_index():
    assert TABLE_ORDER.index("seen.jsonl") < TABLE_ORDER.index("index.jsonl")
    assert TABLE_ORDER.index("grid.jsonl") < TABLE_ORDER.index("index.jsonl")


def test_a_run_in_a_bucket_fetches_seen_rows_only_when_asked(s3, tmp_path, monkeypatch):
    """The reader leaves seen.jsonl in the bucket until a page asks for it. (Writing the columnar
    copy back, which needs every table, would fetch it on its own thread: turned off here.)"""
    from loaders.run import find_runs

    monkeypatch.setenv("MFM_WRITE_BACK", "0")
    run_dir = copy_sample(tmp_path)
    rows = seen_rows(run_dir)
    append(run_dir, encoded(rows))
    s3.mkdir("seen")
    s3.put(str(run_dir), f"seen/root/{run_dir.name}", recursive=True)
    mirror = find_runs("s3://seen/root")[0]
    run = open_run(mirror)
    run.episodes()
    assert not (mirror / "seen.jsonl").exists(), "opening the run does not fetch seen.jsonl"
    assert [dict(r, cells=json.loads(r["cells"])) for r in run.seen().to_dict("records")] == rows
    assert (mirror / "seen.jsonl").read_bytes() == (run_dir / "seen.jsonl").read_bytes()


def test_a_running_run_keeps_its_seen_table_up_to_date_once_asked(tmp_path):
    from loaders.run import open_run

    run_dir = copy_sample(tmp_path)
    m = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    (run_dir / "run.json").write_text(json.dumps(dict(m, status="running")) + "\n", encoding="utf-8")
    rows = seen_rows(run_dir)
    append(run_dir, encoded(rows[:2]))
    first = open_run(run_dir)
    first.episodes()
    assert "seen.jsonl" not in first.source.parses, "not read before it is asked for"
    assert len(first.seen()) == 2
    append(run_dir, encoded(rows[2:]))
    second = open_run(run_dir)
    assert second is not first
    assert [json.loads(c) for c in second.seen()["cells"]] == [r["cells"] for r in rows]
    assert second.source.parses["seen.jsonl"] == 2, "each version's source counts the parses since the first"
