"""Runs roots in object storage (issue 22): a real S3-compatible server on loopback (moto's
standalone server, started here as a process), real s3fs, the real CLI and dashboard. No
mock of the S3 client: every object goes over HTTP. The bucket's contents are read back
with fsspec directly and compared with what the same commands write on disk."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mfm.objectstore import COLUMNS, ROOT_MANIFEST
from mfm.sweep import LOCK_NAME
from raw import jsonl, stored_frame

pytest.importorskip("s3fs")
pytest.importorskip("moto")

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_runs" / "diamond_mfm_s2"
GUARD = 600.0
"""Seconds after which a command is taken to hang (each takes seconds here)."""


def bucket(fs, name: str) -> str:
    """A new empty bucket for one test."""
    fs.mkdir(name)
    return name


def mfm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mfm.cli", *args], capture_output=True, text=True, timeout=GUARD,
                          env=env)


def objects(fs, prefix: str) -> dict[str, bytes]:
    """Every object under a prefix, by key relative to it."""
    fs.invalidate_cache()
    return {k[len(prefix) + 1:]: fs.cat_file(k) for k in fs.find(prefix)}


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def same_run(got: dict[str, bytes], disk: dict[str, bytes]) -> list[str]:
    """Files that differ, ``run.json`` compared without the command line (it names ``--out``)."""
    def manifest(raw: bytes) -> dict:
        return {k: v for k, v in json.loads(raw).items() if k != "command"}

    return [k for k in disk if k not in got or (manifest(got[k]) != manifest(disk[k]) if k == "run.json"
                                                 else got[k] != disk[k])]


def mirror_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_a_run_written_to_a_bucket_is_the_run_written_to_disk(s3, tmp_path: Path) -> None:
    """``mfm run --out s3://...`` leaves in the bucket, byte for byte, what the same run leaves
    on disk, and removes its staging copy."""
    b = bucket(s3, "write-run")
    args = ["run", "--method", "mfm", "--seed", "1", "--steps", "150", "--fixed-clock", "--quiet"]
    local = mfm(*args, "--out", str(tmp_path / "r"))
    remote = mfm(*args, "--out", f"s3://{b}/runs/r")
    assert local.returncode == 0 and remote.returncode == 0, (local.stderr, remote.stderr)
    disk, got = files(tmp_path / "r"), objects(s3, f"{b}/runs/r")
    assert len(disk) > 50 and got.keys() - {COLUMNS} == disk.keys() and COLUMNS in got, "the columnar copy beside it"
    assert same_run(got, disk) == []
    staged = Path(os.environ["MFM_CACHE_DIR"]) / "staging"
    assert not any(p.name == "r" for p in staged.rglob("r")), "the staging copy is removed after the upload"
    again = mfm(*args, "--out", f"s3://{b}/runs/r")
    assert again.returncode == 2 and "already holds files" in again.stderr


@pytest.mark.slow
def test_a_killed_run_leaves_a_bucket_that_opens(s3, tmp_path: Path) -> None:
    """A run killed mid-way (SIGKILL) while it syncs every 0.3 s: every index row in the
    bucket names an episode folder that is there, the run opens with no error, and the
    staging copy on disk keeps everything (and uploads with ``mfm import``)."""
    from loaders.run import open_run

    b = bucket(s3, "killed")
    url = f"s3://{b}/runs/k"
    env = dict(os.environ, MFM_SYNC_SECONDS="0.3")
    proc = subprocess.Popen([sys.executable, "-m", "mfm.cli", "run", "--method", "mfm", "--seed", "2", "--steps",
                             "20000", "--quiet", "--out", url], env=env)
    deadline = time.monotonic() + GUARD
    while True:
        s3.invalidate_cache()
        if s3.exists(f"{b}/runs/k/index.jsonl") and s3.cat_file(f"{b}/runs/k/index.jsonl").count(b"\n") >= 40:
            break
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    got = objects(s3, f"{b}/runs/k")
    rows = [json.loads(line) for line in got["index.jsonl"].decode().splitlines()]
    folders = {k.rsplit("/", 1)[0].split("/state")[0].split("/frames")[0].split("/observation")[0]
               for k in got if k.startswith("episodes/")}
    assert len(rows) >= 40 and {r["path"] for r in rows} <= folders
    assert json.loads(got["run.json"])["status"] == "running"
    run = open_run(url)
    assert [p for p in run.problems if p.severity == "error"] == []
    assert len(run.episodes()) == len(rows)
    staged = [p for p in (Path(os.environ["MFM_CACHE_DIR"]) / "staging").rglob("k") if (p / "run.json").is_file()]
    assert len(staged) == 1 and len(jsonl(staged[0] / "index.jsonl")) >= len(rows)
    up = mfm("import", str(staged[0]), f"s3://{b}/runs/k-recovered")
    assert up.returncode == 0, up.stderr
    assert len(objects(s3, f"{b}/runs/k-recovered")["index.jsonl"].splitlines()) == len(jsonl(staged[0] / "index.jsonl"))


def test_listing_fetches_manifests_and_a_frame_fetches_its_episode(s3, tmp_path: Path) -> None:
    """Listing a root in a bucket fetches each run's manifest and lives table only; opening a
    run fetches its tables, not its episodes; a frame fetches the one episode folder holding
    it, and is the frame stored in the run's strip (decoded from the sample on disk)."""
    from loaders.run import find_runs, open_run

    b = bucket(s3, "lazy")
    s3.put(str(SAMPLE), f"{b}/root/sweep/{SAMPLE.name}", recursive=True)
    found = find_runs(f"s3://{b}/root")
    assert [p.relative_to(p.parents[1]).as_posix() for p in found] == [f"sweep/{SAMPLE.name}"]
    run_dir = found[0]
    assert {f for f in mirror_files(run_dir) if not f.startswith(".")} == {"run.json", "lives.jsonl"}
    run = open_run(run_dir)
    assert len(run.episodes()) == len(jsonl(SAMPLE / "index.jsonl"))
    assert not (run_dir / "episodes").exists() or not any((run_dir / "episodes").iterdir())
    rows = jsonl(SAMPLE / "index.jsonl")
    step = next(r["first_step"] + 2 for r in rows if r.get("frames", 0) >= 3)
    assert np.array_equal(run.frame(step), stored_frame(SAMPLE, step))
    fetched = sorted(p.name for p in (run_dir / "episodes").iterdir())
    holder = next(r for r in rows if r.get("frames", 0) and r["first_step"] < step <= r["last_step"])
    assert fetched == [holder["path"].split("/")[1]]
    assert files(run_dir / holder["path"]) == files(SAMPLE / holder["path"])


@pytest.mark.slow
def test_validate_reads_a_bucket_as_it_reads_a_disk(s3, tmp_path: Path) -> None:
    """``mfm validate s3://...`` prints what ``mfm validate`` prints for the same files on disk,
    for a clean run and for one with a cut index line and a frame strip gone."""
    import shutil

    b = bucket(s3, "validate")
    damaged = tmp_path / "d"
    shutil.copytree(SAMPLE, damaged)
    lines = (damaged / "index.jsonl").read_bytes().splitlines(keepends=True)
    lines[7] = lines[7][:40] + b"\n"
    (damaged / "index.jsonl").write_bytes(b"".join(lines))
    strip = sorted((damaged / "episodes").glob("*/frames/*.webp"))[3]
    strip.unlink()
    for name, folder in (("clean", SAMPLE), ("d", damaged)):
        s3.put(str(folder), f"{b}/{name}", recursive=True)
        disk = mfm("validate", str(folder), "--frames")
        remote = mfm("validate", f"s3://{b}/{name}", "--frames")
        assert remote.returncode == disk.returncode, remote.stderr
        assert remote.stdout.replace(f"s3://{b}/{name}", "RUN") == disk.stdout.replace(str(folder), "RUN")
    assert "frame strip" in disk.stdout and "index.jsonl:8" in disk.stdout


def test_keys_that_climb_out_stay_out_of_the_mirror(s3, tmp_path: Path) -> None:
    """Object keys holding ``..`` segments (possible in S3) never become files outside the
    mirror: listing, opening and reading a frame of such a run write only under it."""
    from loaders.remote.mirror import mirror_dir
    from loaders.run import find_runs, open_run

    b = bucket(s3, "hostile")
    s3.put(str(SAMPLE), f"{b}/root/ok", recursive=True)
    s3.pipe_file(f"{b}/root/ok/mine/../../../../escaped.txt", b"x")
    s3.pipe_file(f"{b}/root/ok/episodes/ep_000001/../../../../escaped2.txt", b"x")
    cache = Path(os.environ["MFM_CACHE_DIR"])
    before = {p for p in cache.parent.rglob("escaped*")}
    runs = find_runs(f"s3://{b}/root")
    run = open_run(runs[0])
    run.frame(5)
    run.episode_record("ep_000001")
    assert {p for p in cache.parent.rglob("escaped*")} == before
    assert all(mirror_dir(f"s3://{b}/root") in p.parents for p in runs)


def test_the_dashboard_opens_a_bucket(s3, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard (AppTest) on an ``s3://`` root: the Runs page lists the bucket's runs (by
    a raw listing), and the Timeline and Frames pages draw one of them."""
    from conftest import open_app, texts, use_root
    from loaders.remote.mirror import mirror_dir

    b = bucket(s3, "dash")
    for name in ("a/diamond_mfm_s2", "b/diamond_direct_s2_2500steps"):
        s3.put(str(REPO / "sample_runs" / name.split("/")[1]), f"{b}/root/{name}", recursive=True)
    s3.invalidate_cache()
    listed = sorted(k[len(f"{b}/root/"):].rsplit("/", 1)[0] for k in s3.glob(f"{b}/root/*/*/run.json"))
    use_root(monkeypatch, f"s3://{b}/root")
    at = open_app()
    table = at.dataframe[0].value
    assert sorted(table["key"]) == listed
    assert f"s3://{b}/root" in texts(at)
    key = "a/diamond_mfm_s2"
    tl = open_app("timeline", runs=key)
    assert "diamond · mfm · seed 2" in texts(tl)
    fr = open_app("frames", runs=key, frames=f"{key}:120")
    assert len(fr.get("vega_lite_chart")) == 1
    holder = next(r for r in jsonl(SAMPLE / "index.jsonl") if r.get("frames") and r["first_step"] < 120 <= r["last_step"])
    fetched = mirror_dir(f"s3://{b}/root") / key / holder["path"]
    assert files(fetched) == files(SAMPLE / holder["path"])


@pytest.mark.slow
def test_a_sweep_writes_into_a_bucket_and_resumes_from_it(s3, tmp_path: Path) -> None:
    """``mfm sweep --out s3://...`` (local processes): runs and logs land in the bucket,
    ``mfm results`` and ``mfm figures`` read them as they read the same sweep on disk (the
    same tables, the same data behind every figure), and a rerun skips them."""
    b = bucket(s3, "sweep")
    args = ["sweep", "--methods", "direct,mfm", "--seeds", "0", "--steps", "120", "--jobs", "2"]
    remote = mfm(*args, "--out", f"s3://{b}/sw")
    disk = mfm(*args, "--out", str(tmp_path / "sw"))
    assert remote.returncode == 0 and disk.returncode == 0, remote.stderr
    s3.invalidate_cache()
    on_disk = sorted(p.name for p in (tmp_path / "sw").iterdir() if p.name != LOCK_NAME)  # the lock stays local
    assert sorted(k.rsplit("/", 1)[1] for k in s3.ls(f"{b}/sw") if not k.endswith(ROOT_MANIFEST)) == on_disk
    assert "sweeps.jsonl" in on_disk
    for name in ("diamond_direct_s0", "diamond_mfm_s0"):
        got, disk = objects(s3, f"{b}/sw/{name}"), files(tmp_path / "sw" / name)
        assert got.keys() - {COLUMNS} == disk.keys() and same_run(got, disk) == []
    got = mfm("results", f"s3://{b}/sw")
    want = mfm("results", str(tmp_path / "sw"))
    assert got.stdout.replace(f"s3://{b}/sw", "ROOT") == want.stdout.replace(str(tmp_path / "sw"), "ROOT")
    again = mfm(*args, "--out", f"s3://{b}/sw")
    assert "diamond_mfm_s0: skipped (finished)" in again.stdout
    for where, out in ((f"s3://{b}/sw", tmp_path / "figs_s3"), (str(tmp_path / "sw"), tmp_path / "figs_disk")):
        made = mfm("figures", where, "--out", str(out))
        assert made.returncode == 0, made.stderr
    csvs = {p.relative_to(tmp_path / "figs_disk").as_posix() for p in (tmp_path / "figs_disk").rglob("*.csv")}
    assert csvs and csvs == {p.relative_to(tmp_path / "figs_s3").as_posix() for p in (tmp_path / "figs_s3").rglob("*.csv")}
    for rel in csvs:
        assert (tmp_path / "figs_s3" / rel).read_text() == (tmp_path / "figs_disk" / rel).read_text(), rel


def test_without_the_extra_a_url_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                             tmp_path: Path) -> None:
    """No server needed: every command given an ``s3://`` place says which extra it needs."""
    from mfm.cli import main

    monkeypatch.setitem(sys.modules, "s3fs", None)
    for argv in (["run", "--out", "s3://b/r"], ["sweep", "--out", "s3://b/s"], ["validate", "s3://b/r"],
                 ["import", str(SAMPLE), "s3://b/r"], ["results", "s3://b"], ["dashboard", "s3://b"],
                 ["figures", "s3://b", "--out", str(tmp_path / "f")]):
        assert main(argv) == 2
        assert capsys.readouterr() == ("", f'mfm {argv[0]}: needs the s3 extra: pip install "mfm[s3]"\n')


def test_file_checks_are_kept_until_the_bucket_index_changes(s3, tmp_path: Path) -> None:
    """The file checks of a run in a bucket list its episodes once: a new process reopening
    it reuses them while ``index.jsonl`` in the bucket is the same, and checks again when a
    row is added there (here one naming an episode folder that is not in the bucket)."""
    b = bucket(s3, "checks")
    s3.put(str(SAMPLE), f"{b}/r", recursive=True)
    code = ("import sys; from loaders.run import open_run; r = open_run(sys.argv[1]); "
            "print('\\n'.join(str(p) for p in r.problems))")

    def problems() -> list[str]:
        out = subprocess.run([sys.executable, "-c", code, f"s3://{b}/r"], capture_output=True, text=True,
                             timeout=GUARD, cwd=REPO)
        assert out.returncode == 0, out.stderr
        return [line for line in out.stdout.splitlines() if line]

    assert problems() == []
    rows = jsonl(SAMPLE / "index.jsonl")
    extra = dict(rows[-1], id="ep_999999", path="episodes/ep_999999", first_step=rows[-1]["last_step"],
                 last_step=rows[-1]["last_step"] + 1, image=None, frames=1)
    s3.pipe_file(f"{b}/r/index.jsonl", (SAMPLE / "index.jsonl").read_bytes() + (json.dumps(extra) + "\n").encode())
    again = problems()
    assert any("ep_999999: episode folder episodes/ep_999999 is missing" in p for p in again), again
