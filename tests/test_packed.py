"""The packed copy of a closed run (``episodes.zip``, ``mfm pack``): what it holds is read
back as the folders held it, checked against the original run's raw files."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import REPO
from loaders.run import open_run
from mfm.boundary import UnsafePath
from mfm.memory import packed
from mfm.memory.packed import PACK, PackError, pack_run, unpack_run
from mfm.memory.retrieval import FrameError, forget_decoded
from mfm.validate import validate
from raw import jsonl, stored_frame

SAMPLES = REPO / "sample_runs"
RUNS = ["diamond_mfm_s2", "reach-1000_mfm_s0"]


@pytest.fixture(autouse=True)
def cold() -> None:
    forget_decoded()
    packed.forget()


def packed_copy(tmp_path: Path, name: str) -> Path:
    run = tmp_path / name
    shutil.copytree(SAMPLES / name, run)
    assert pack_run(run).done
    return run


def same_tree(a: Path, b: Path) -> bool:
    """Every file of ``a`` is in ``b`` with the same bytes, and no other."""
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


@pytest.mark.parametrize("name", RUNS)
def test_a_packed_run_reads_every_frame_and_record_as_its_files(tmp_path: Path, name: str) -> None:
    original = SAMPLES / name
    run = packed_copy(tmp_path, name)
    assert not (run / "episodes").exists() and (run / PACK).is_file()
    with zipfile.ZipFile(run / PACK) as z:
        names = {i.filename for i in z.infolist()}
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    assert names == {p.relative_to(original).as_posix() for p in (original / "episodes").rglob("*") if p.is_file()}
    r = open_run(run)
    assert not r.problems
    index = jsonl(original / "index.jsonl")
    last = index[-1]["first_step"] + index[-1]["frames"]
    for step in sorted({1, 2, last // 3, last // 2, last - 1, last}):
        assert np.array_equal(r.frame(step), stored_frame(original, step)), step
    for row in index[:: max(1, len(index) // 25)]:
        rec = r.episode_record(row["id"])
        for got, rel in ((rec.state, "state/state.json"), (rec.action, "action.json"), (rec.outcome, "outcome.json")):
            assert got == json.loads((original / row["path"] / rel).read_text(encoding="utf-8"))
        if row.get("image"):
            want = np.asarray(Image.open(original / row["image"]).convert("RGB"))
            assert np.array_equal(r.observation(row["id"]), want)


def test_validate_with_frames_is_clean_on_a_packed_run_and_unpack_restores_every_byte(tmp_path: Path) -> None:
    run = packed_copy(tmp_path, RUNS[0])
    c = validate(run, frames=True)
    assert not c.problems, c.problems
    before = validate(SAMPLES / RUNS[0], frames=True)
    assert {k: len(v) for k, v in c.tables.items()} == {k: len(v) for k, v in before.tables.items()}
    assert not pack_run(run).done
    report = unpack_run(run)
    assert report.done and report.files == len([p for p in (run / "episodes").rglob("*") if p.is_file()])
    assert not (run / PACK).exists()
    assert same_tree(SAMPLES / RUNS[0], run)
    assert not unpack_run(run).done


def test_a_pack_stopped_while_it_removed_folders_reads_the_same_and_is_finished_by_packing_again(
        tmp_path: Path) -> None:
    original = SAMPLES / RUNS[0]
    run = packed_copy(tmp_path, RUNS[0])
    kept = sorted((original / "episodes").iterdir())[::3]
    for d in kept:
        shutil.copytree(d, run / "episodes" / d.name)
    (run / packed.PARTIAL).write_bytes(b"PK\x03\x04 cut short")
    r = open_run(run)
    assert not r.problems
    last = jsonl(original / "index.jsonl")[-1]
    assert np.array_equal(r.frame(last["first_step"] + 1), stored_frame(original, last["first_step"] + 1))
    assert pack_run(run).done
    assert not (run / "episodes").exists() and not (run / packed.PARTIAL).exists()
    unpack_run(run)
    assert same_tree(original, run)


def test_only_a_closed_run_is_packed(tmp_path: Path) -> None:
    run = tmp_path / "live"
    shutil.copytree(SAMPLES / RUNS[0], run)
    m = json.loads((run / "run.json").read_text(encoding="utf-8"))
    (run / "run.json").write_text(json.dumps({**m, "status": "running"}), encoding="utf-8")
    with pytest.raises(PackError, match=r"live/run.json: status 'running'"):
        pack_run(run)
    assert (run / "episodes").is_dir() and not (run / PACK).exists()


def test_a_symlink_under_episodes_is_not_packed(tmp_path: Path) -> None:
    run = tmp_path / "linked"
    shutil.copytree(SAMPLES / RUNS[0], run)
    first = sorted((run / "episodes").iterdir())[0]
    (first / "secret.json").symlink_to("/etc/hostname")
    with pytest.raises(PackError, match="secret.json: not a regular file"):
        pack_run(run)
    assert not (run / PACK).exists() and not (run / packed.PARTIAL).exists()
    assert (run / "episodes").is_dir()


def damaged(run: Path, how: str) -> None:
    """Damage the pack of ``run`` in one of the ways a copy or a disk can."""
    data = bytearray((run / PACK).read_bytes())
    if how == "truncated":
        (run / PACK).write_bytes(bytes(data[: len(data) // 2]))
    elif how == "flipped":
        with zipfile.ZipFile(run / PACK) as z:
            info = next(i for i in z.infolist() if i.filename.endswith(".webp"))
        at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.compress_size // 2
        data[at] ^= 0xFF
        (run / PACK).write_bytes(bytes(data))


def test_a_truncated_pack_is_reported_by_name_and_the_run_still_opens(tmp_path: Path) -> None:
    run = packed_copy(tmp_path, RUNS[0])
    damaged(run, "truncated")
    c = validate(run)
    assert any(p.file == PACK and "not a readable zip" in p.message for p in c.problems), c.problems
    assert any("episode folder" in p.message and "is missing" in p.message for p in c.problems)
    r = open_run(run)
    assert len(r.records("index.jsonl")) == len(jsonl(SAMPLES / RUNS[0] / "index.jsonl"))
    with pytest.raises(FrameError, match=PACK):
        r.frame(5)


def test_a_flipped_byte_in_a_packed_strip_is_caught_by_its_crc(tmp_path: Path) -> None:
    run = packed_copy(tmp_path, RUNS[0])
    damaged(run, "flipped")
    with zipfile.ZipFile(run / PACK) as z:
        bad = next(i.filename for i in z.infolist() if i.filename.endswith(".webp"))
    c = validate(run, frames=True)
    assert any(bad in p.file + p.message and "CRC" in p.message for p in c.problems), c.problems


def test_a_pack_that_leads_outside_the_run_is_refused(tmp_path: Path) -> None:
    run = packed_copy(tmp_path, RUNS[0])
    outside = tmp_path / "elsewhere.zip"
    (run / PACK).rename(outside)
    (run / PACK).symlink_to(outside)
    c = validate(run)
    assert any(p.file == PACK and "outside" in p.message for p in c.problems), c.problems
    with pytest.raises(UnsafePath, match=f"'{PACK}' leads outside"):
        open_run(run).frame(5)


@pytest.mark.parametrize("name", ["../escape.txt", "/abs.txt", "mine/GUIDE.md"])
def test_unpack_refuses_a_member_outside_episodes_before_writing_anything(tmp_path: Path, name: str) -> None:
    run = packed_copy(tmp_path, RUNS[0])
    with zipfile.ZipFile(run / PACK, "a") as z:
        z.writestr(name, b"x")
    packed.forget()
    with pytest.raises(PackError, match="not a plain path under episodes/"):
        unpack_run(run)
    assert not (run / "episodes").exists() and not (tmp_path / "escape.txt").exists()


def test_a_member_larger_than_the_limit_is_not_inflated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = packed_copy(tmp_path, RUNS[0])
    ref = jsonl(run / "index.jsonl")[3]
    with zipfile.ZipFile(run / PACK) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    rel = f"{ref['path']}/outcome.json"
    members[rel] = b" " * 5_000_000 + members[rel]
    with zipfile.ZipFile(run / PACK, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for k, v in members.items():
            z.writestr(k, v)
    monkeypatch.setattr(packed, "MAX_MEMBER_BYTES", 1_000_000)
    with pytest.raises(PackError, match="larger than 1000000 bytes"):
        packed.member(run, rel)
    assert open_run(run).episode_record(ref["id"]).outcome is None
    assert open_run(run).episode_record(ref["id"]).action is not None


def test_mfm_pack_command_packs_reports_and_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    run = tmp_path / "r"
    shutil.copytree(SAMPLES / RUNS[0], run)
    mfm = [sys.executable, "-m", "mfm.cli"]
    out = subprocess.run([*mfm, "pack", str(run), str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 1
    assert f"{tmp_path}: not a run directory" in out.stderr
    assert f"{run}: packed;" in out.stdout and "MB allocated" in out.stdout
    assert (run / PACK).is_file()
    out = subprocess.run([*mfm, "pack", "--unpack", str(run)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and f"{run}: unpacked;" in out.stdout
    assert same_tree(SAMPLES / RUNS[0], run)


def test_a_packed_run_in_a_bucket_validates_as_on_disk_and_shows_its_frames(s3, tmp_path: Path) -> None:
    """A packed run uploaded whole: opening it fetches ``episodes.zip`` with the tables, its
    frames are the original strips' pixels, and ``mfm validate --frames`` of the bucket
    prints what it prints for the folder."""
    from loaders.run import find_runs

    run = packed_copy(tmp_path, RUNS[0])
    s3.mkdir("packed")
    s3.put(str(run), "packed/root/run", recursive=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    disk = subprocess.run([sys.executable, "-m", "mfm.cli", "validate", str(run), "--frames"], capture_output=True,
                          text=True, env=env)
    remote = subprocess.run([sys.executable, "-m", "mfm.cli", "validate", "s3://packed/root/run", "--frames"],
                            capture_output=True, text=True, env=env)
    assert remote.returncode == disk.returncode == 0, remote.stderr
    assert remote.stdout.replace("s3://packed/root/run", "RUN") == disk.stdout.replace(str(run), "RUN")
    mirrored = open_run(find_runs("s3://packed/root")[0])
    assert not mirrored.problems, mirrored.problems
    step = jsonl(run / "index.jsonl")[-1]["first_step"] + 1
    assert np.array_equal(mirrored.frame(step), stored_frame(SAMPLES / RUNS[0], step))


def test_the_frames_page_on_a_packed_run_counts_the_pixels_of_the_original_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The world-aligned comparison of two frames, served from a packed run, reports the
    changed pixels computed here from the original run's strips."""
    from conftest import open_app, texts, use_root
    from test_frame_compare import move_pair, raw_aligned, raw_frame, raw_position, raw_valid

    root = tmp_path / "root"
    root.mkdir()
    packed_copy(root, RUNS[0])
    use_root(monkeypatch, root)
    s, t = move_pair()
    at = open_app("frames", runs=RUNS[0], frames=f"{RUNS[0]}:{s},{RUNS[0]}:{t}", diff="1", align="1", thr="8")
    a, b = raw_frame(s), raw_frame(t)
    (xa, ya), (xb, yb) = raw_position(s), raw_position(t)
    changed = np.abs(a.astype(int) - raw_aligned(b, xa - xb, ya - yb).astype(int)).max(axis=-1) > 8
    assert f"{int((changed & raw_valid(a, xa - xb, ya - yb)).sum())} px changed by more than 8 levels" in texts(at)
