"""Runs in a bucket in few requests (issue 48), counted against a real S3-compatible server on
loopback (moto's standalone server, conftest's ``s3``), through real s3fs: every request
counted here went over HTTP. The request counter is botocore's own ``before-send`` event, so
a request the code makes some other way would still be counted.

The runs are small synthetic ones (``bench.synth``): what is counted does not depend on a
run's length or a root's number of runs (one listing page holds 1,000 keys), which the
benchmark (``bench.objectstore``) measures at 36k steps and 480 runs. Expected values come
from the run's files on disk read by ``tests/raw.py``, never from the code under test."""
from __future__ import annotations

import gzip
import json
import random
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from raw import jsonl, stored_frame

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from mfm.objectstore import (COLUMNS, ROOT_MANIFEST, counting, get_object, list_folder, put_object,
                             register_run, update_root_manifest, upload_tree)


def put_run(run: Path, url: str) -> int:
    """Upload a closed run as ``mfm run`` and ``mfm import`` do: its files, its columnar copy
    (``loaders.columns.build``, which the command line hands the uploader) and its entry in
    its folder's manifest."""
    from loaders.columns import build

    return upload_tree(run, url, make_copy=build)


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed synthetic run of 400 steps (frames from a short real Crafter walk)."""
    from bench.synth import frame_pool, make_run

    return make_run(tmp_path_factory.mktemp("synth") / "run", steps=400, seed=3, frames=frame_pool(3, 40))


@pytest.fixture
def fresh_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new, empty mirror for this test (a cold reader)."""
    monkeypatch.setenv("MFM_REMOTE_DIR", str(tmp_path / "mirror"))
    return tmp_path / "mirror"


def cold(monkeypatch: pytest.MonkeyPatch, where: Path) -> None:
    """Start again as a new reader: another empty mirror, nothing remembered in memory."""
    from loaders.remote import listing, mirror, packs

    monkeypatch.setenv("MFM_REMOTE_DIR", str(where))
    mirror._seen.clear()
    listing._entries.clear()
    listing._listings.clear()
    packs._packs.clear()


def keys(n) -> list[str]:
    """What each request counted asked for, in order: ``bucket/key`` (a listing: ``bucket?prefix``)."""
    from urllib.parse import unquote

    out = []
    for _, what in n.made:
        path = what.split(" ", 1)[1].split("/", 3)[-1]
        bucket, _, query = path.partition("?")
        prefix = [q[len("prefix="):] for q in query.split("&") if q.startswith("prefix=")]
        out.append(f"{bucket}?{unquote(prefix[0])}" if prefix else unquote(bucket))
    return out


def test_the_counter_counts_each_request_by_kind(s3, tmp_path: Path) -> None:
    """One PUT, one GET, one ranged GET, one listing: four requests, each of its kind."""
    s3.mkdir("count")
    data = bytes(range(256)) * 10
    with counting() as n:
        put_object("s3://count/a/x.bin", data)
        whole = get_object("s3://count/a/x.bin")
        part = get_object("s3://count/a/x.bin", start=100, end=110)
        files, _ = list_folder("s3://count/a")
    assert dict(n) == {"PUT": 1, "GET": 2, "LIST": 1} and n.total == 4
    assert whole[0] == data and part[0] == data[100:110] and part[2] == len(data)
    assert files["x.bin"]["size"] == len(data)
    assert get_object("s3://count/a/none") is None


def test_a_cold_open_reads_one_listing_and_the_columnar_copy(s3, synth: Path, fresh_mirror: Path) -> None:
    """A run closed into a bucket has its columnar copy beside it; a cold open asks for the
    run folder's listing and that one object for its tables (no JSONL table is fetched), and
    its tables and problems are those of the same run read from disk."""
    from loaders.run import open_run

    s3.mkdir("cold")
    put_run(synth, "s3://cold/root/r")
    s3.invalidate_cache()
    assert s3.exists(f"cold/root/r/{COLUMNS}")
    with counting() as n:
        run = open_run("s3://cold/root/r")
        tables = {name: len(run.table(name)) for name in ("episodes", "steps", "turns", "grid", "milestones",
                                                          "lives", "memory_writes")}
        problems = [str(p) for p in run.problems]
    got = keys(n)
    tables_asked = [k for k in got if k.endswith((".jsonl", COLUMNS)) or "?" in k]
    assert n["LIST"] == 1 and len(tables_asked) <= 3, got
    assert set(got) <= {"cold/root/r/run.json", "cold/root/r/" + ROOT_MANIFEST, *tables_asked}, got
    assert not [k for k in got if k.endswith(".jsonl") and not k.endswith("lives.jsonl")], got
    assert tables == {"episodes": len(jsonl(synth / "index.jsonl")), "steps": len(jsonl(synth / "steps.jsonl")),
                      "turns": len(jsonl(synth / "turns.jsonl")), "grid": len(jsonl(synth / "grid.jsonl")),
                      "milestones": len(jsonl(synth / "milestones.jsonl")),
                      "lives": len(jsonl(synth / "lives.jsonl")),
                      "memory_writes": len(jsonl(synth / "memory_writes.jsonl"))}
    assert run.steps()["step"].tolist() == [r["step"] for r in jsonl(synth / "steps.jsonl")]
    assert problems == [str(p) for p in open_run(synth).problems]
    assert (run.path / "logs.txt").read_bytes() == (synth / "logs.txt").read_bytes()
    for p in (synth / "mine").rglob("*"):
        if p.is_file():
            assert (run.path / p.relative_to(synth)).read_bytes() == p.read_bytes()


def test_a_table_changed_since_the_copy_is_read_from_its_jsonl(s3, synth: Path, fresh_mirror: Path) -> None:
    """The copy is not trusted blindly: a table rewritten in the bucket after the copy was
    made (another size and ETag) is fetched and parsed; the others still come from the copy."""
    from loaders.run import open_run

    s3.mkdir("stale")
    put_run(synth, "s3://stale/r")
    lines = (synth / "steps.jsonl").read_bytes().splitlines(keepends=True)
    s3.pipe_file("stale/r/steps.jsonl", b"".join(lines[:-5]))
    with counting() as n:
        run = open_run("s3://stale/r")
        steps = run.steps()
        episodes = run.episodes()
    asked = [k for k in keys(n) if k.endswith(".jsonl")]
    assert "stale/r/steps.jsonl" in asked and "stale/r/index.jsonl" not in asked
    assert steps["step"].tolist() == [json.loads(x)["step"] for x in lines[:-5]]
    assert len(episodes) == len(jsonl(synth / "index.jsonl"))


def test_a_run_without_its_copy_opens_and_the_reader_writes_it_back(s3, synth: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A run uploaded by other means (no copy) opens from its JSONL; a reader allowed to
    write leaves the copy beside it (a reader with ``MFM_WRITE_BACK=0`` does not), and the
    next cold reader reads the copy instead of the tables."""
    from loaders import tablecache
    from loaders.run import open_run

    s3.mkdir("back")
    s3.put(str(synth), "back/r", recursive=True)
    cold(monkeypatch, tmp_path / "m0")
    monkeypatch.setenv("MFM_WRITE_BACK", "0")
    assert len(open_run("s3://back/r").steps()) == len(jsonl(synth / "steps.jsonl"))
    tablecache.wait()
    s3.invalidate_cache()
    assert not s3.exists(f"back/r/{COLUMNS}")
    monkeypatch.delenv("MFM_WRITE_BACK")
    cold(monkeypatch, tmp_path / "m1")
    assert len(open_run("s3://back/r").steps()) == len(jsonl(synth / "steps.jsonl"))
    tablecache.wait()
    s3.invalidate_cache()
    assert s3.exists(f"back/r/{COLUMNS}")
    cold(monkeypatch, tmp_path / "m2")
    with counting() as n:
        run = open_run("s3://back/r")
        assert run.turns()["turn"].tolist() == [r["turn"] for r in jsonl(synth / "turns.jsonl")]
        assert [str(p) for p in run.problems] == [str(p) for p in open_run(synth).problems]
    assert not [k for k in keys(n) if k.endswith(".jsonl") and not k.endswith("lives.jsonl")], n.made


def test_the_runs_page_costs_a_handful_of_requests_whatever_the_number_of_runs(
        s3, synth: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs closed into one folder each put their entry into its manifest; the Runs page of
    that folder (``open_runs``, ``runs_overview``, ``milestone_steps``) then costs the same few
    requests for 3 runs and for 12: the manifest, a listing to check it (it was never
    checked), the manifest written back with the check's time; and one request once checked.
    The page shows every run as its ``run.json`` in the bucket says."""
    from loaders.run import local_path, open_runs
    from loaders.runs_summary import milestone_steps, runs_overview

    s3.mkdir("page")
    counts = []
    for n_runs, root in ((3, "page/small"), (12, "page/big")):
        for i in range(n_runs):
            put_run(synth, f"s3://{root}/run_{i:02d}")
        for k in range(2):
            cold(monkeypatch, tmp_path / f"{root.replace('/', '_')}_{k}")
            with counting() as n:
                runs = open_runs(f"s3://{root}")
                table = runs_overview(runs, local_path(f"s3://{root}"), check=False)
                milestone_steps(runs, local_path(f"s3://{root}"))
            counts.append(dict(n))
            s3.invalidate_cache()
            want = {k.rsplit("/", 2)[1]: json.loads(s3.cat_file(k)) for k in s3.glob(f"{root}/*/run.json")}
            assert sorted(table["key"]) == sorted(want) and len(want) == n_runs
            for row in table.to_dict("records"):
                assert row["steps"] == want[row["key"]]["last_step"]
                assert row["status"] == want[row["key"]]["status"]
                assert row["deaths"] == sum(e["event"] == "death" for e in jsonl(synth / "lives.jsonl"))
    assert counts[0] == counts[2] and counts[1] == counts[3], counts
    assert sum(counts[0].values()) <= 5 and counts[1] == {"GET": 1}, counts


def test_a_run_missing_from_a_checked_manifest_is_found_at_the_next_check(
        s3, synth: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest checked less than the bound ago is trusted; a run uploaded without an entry
    appears once the check is older than the bound (here 0 s)."""
    from loaders.run import find_runs

    s3.mkdir("check")
    put_run(synth, "s3://check/root/a")
    cold(monkeypatch, tmp_path / "m0")
    assert [p.name for p in find_runs("s3://check/root")] == ["a"]
    s3.put(str(synth), "check/root/b", recursive=True)
    cold(monkeypatch, tmp_path / "m1")
    assert [p.name for p in find_runs("s3://check/root")] == ["a"]
    monkeypatch.setenv("MFM_MANIFEST_CHECK_SECONDS", "0")
    cold(monkeypatch, tmp_path / "m2")
    assert [p.name for p in find_runs("s3://check/root")] == ["a", "b"]
    doc = json.loads(gzip.decompress(s3.cat_file(f"check/root/{ROOT_MANIFEST}")))
    assert sorted(doc["runs"]) == ["a", "b"]


def test_runs_closing_at_once_keep_each_others_entries(s3, synth: Path) -> None:
    """Two writers updating one manifest at the same moment, many times (a conditional PUT on
    the ETag read, re-read on a lost race): no entry is lost."""
    s3.mkdir("race")
    barrier = threading.Barrier(2)
    failed = []

    def writer(tag: str) -> None:
        for i in range(8):
            barrier.wait()

            def change(doc: dict, key: str = f"{tag}{i}") -> dict:
                doc["runs"][key] = {"status": "finished"}
                return doc

            if not update_root_manifest("s3://race/root", change):
                failed.append((tag, i))

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = json.loads(gzip.decompress(s3.cat_file(f"race/root/{ROOT_MANIFEST}")))
    assert not failed and sorted(doc["runs"]) == sorted(f"{t}{i}" for t in "ab" for i in range(8))
    put_run(synth, "s3://race/root/real")
    assert register_run("s3://race/root/real")
    doc = json.loads(gzip.decompress(s3.cat_file(f"race/root/{ROOT_MANIFEST}")))
    assert len(doc["runs"]) == 17 and doc["runs"]["real"]["manifest"] == (synth / "run.json").read_text()


def test_a_frame_of_a_packed_run_costs_one_request(s3, synth: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed run in a bucket: its ``episodes.zip`` is not fetched whole (the end read to
    find its directory is made smaller than the zip here); the directory is read once by
    range and kept in the mirror, then each frame is one ranged GET, and is the frame the
    unpacked run's strip holds on disk. A new process reading the same mirror reuses the
    directory: one request for its first frame too."""
    from loaders.run import open_run
    from mfm.memory import packed

    monkeypatch.setenv("MFM_PREFETCH", "0")
    run = tmp_path / "packed"
    shutil.copytree(synth, run)
    packed.pack_run(run)
    size = (run / packed.PACK).stat().st_size
    monkeypatch.setattr(packed.RangeFile, "TAIL_BYTES", 66_000)
    assert size > 2 * 66_000
    s3.mkdir("packs")
    put_run(run, "s3://packs/r")
    rows = [r for r in jsonl(synth / "index.jsonl") if r.get("frames")]
    steps = random.Random(0).sample([s for r in rows for s in range(r["first_step"] + 1, r["last_step"] + 1)], 10)
    for k, some in enumerate((steps[:5], steps[5:])):
        cold(monkeypatch, tmp_path / "m")
        r = open_run("s3://packs/r")
        assert not r.problems, r.problems
        if k == 0:
            with counting() as first:
                assert np.array_equal(r.frame(some[0]), stored_frame(synth, some[0]))
            assert set(first) == {"GET"} and first["GET"] <= 3, first.made
            some = some[1:]
        for s in some:
            with counting() as n:
                assert np.array_equal(r.frame(s), stored_frame(synth, s))
            assert dict(n) in ({"GET": 1}, {}), (s, n.made)
            assert all(what.endswith("/packs/r/episodes.zip") for _, what in n.made)
    assert not any(p.name == packed.PACK for p in (tmp_path / "m").rglob("*"))


def test_the_neighbouring_episodes_strips_are_prefetched(s3, synth: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Showing a frame brings, in the background, the strips a step to either side of its
    episode shows; the frame a step past the episode's end is then served with no request."""
    from loaders.remote import prefetch
    from loaders.run import open_run
    from mfm.memory import packed

    run = tmp_path / "packed"
    shutil.copytree(synth, run)
    packed.pack_run(run)
    s3.mkdir("prefetch")
    put_run(run, "s3://prefetch/r")
    cold(monkeypatch, tmp_path / "m")
    r = open_run("s3://prefetch/r")
    rows = [x for x in jsonl(synth / "index.jsonl") if x.get("frames")]
    mid = next(i for i in range(1, len(rows) - 1) if rows[i + 1]["first_step"] == rows[i]["last_step"]
               and rows[i - 1]["last_step"] == rows[i]["first_step"])
    here, after, before = rows[mid], rows[mid + 1], rows[mid - 1]
    r.frame(here["first_step"] + 1)
    prefetch.prefetch_wait()
    monkeypatch.setenv("MFM_PREFETCH", "0")
    for step in (after["first_step"] + 1, before["last_step"]):
        with counting() as n:
            assert np.array_equal(r.frame(step), stored_frame(synth, step))
        assert n.total == 0, n.made
    with counting() as n:
        far = rows[mid + 3]["first_step"] + 1
        assert np.array_equal(r.frame(far), stored_frame(synth, far))
    assert n.total == 1, "a strip not prefetched is one request"
