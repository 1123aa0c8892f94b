"""Writes that fail on a real full (or read-only, or immutable) file system: a tmpfs mounted for
the test. Nothing is half-written, the run closes as crashed when run.json can still be
written, and ``mfm run`` says so in one line."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from mfm.memory import RunWriter
from mfm.memory.appendlog import WriteError, append_bytes, write_atomic, write_in_place
from mfm.memory.run_writer import MANIFEST_ROOM
from mfm.schema import StepRow
from mfm.validate import validate
from conftest import REPO, manifest


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``where`` for the block; skips the test if this
    machine does not let us mount one (it needs root and mount rights)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a real full disk) needs Linux and root")
    where.mkdir(parents=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                           capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command to mount a small tmpfs (a real full disk)")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a real full disk): {r.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "1m") as d:
        yield d


def fill(disk: Path, leave: int = 0) -> None:
    """Write a ballast file until the file system is full, then free ``leave`` bytes of it."""
    ballast = disk / "ballast"
    with open(ballast, "ab", buffering=0) as f:
        with pytest.raises(OSError) as full:
            while True:
                f.write(bytes(1 << 16))
    assert full.value.errno == errno.ENOSPC
    os.truncate(ballast, max(ballast.stat().st_size - leave, 0))


def _names(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_write_atomic_leaves_the_file_and_no_temporary_copy_when_the_disk_is_full(disk: Path) -> None:
    path = disk / "run.json"
    path.write_bytes(b'{"status":"running"}\n')
    fill(disk)
    with pytest.raises(WriteError) as e:
        write_atomic(path, b'{"status":"crashed"}' + b" " * 10_000 + b"\n")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert e.value.describe(disk) == "disk full (ENOSPC) while writing run.json"
    assert path.read_bytes() == b'{"status":"running"}\n'
    assert _names(disk) == ["ballast", "run.json"]


def test_an_append_that_fails_part_way_is_cut_back_to_whole_lines(disk: Path) -> None:
    path = disk / "steps.jsonl"
    append_bytes(path, b'{"step":1}\n')
    fill(disk, leave=8192)
    lines = b"".join(b'{"step":%d,"pad":"%s"}\n' % (i, b"x" * 3000) for i in range(2, 8))
    with pytest.raises(WriteError) as e:
        append_bytes(path, lines)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert path.read_bytes() == b'{"step":1}\n'
    os.truncate(disk / "ballast", 0)
    append_bytes(path, lines)
    assert path.read_bytes() == b'{"step":1}\n' + lines


def test_write_in_place_keeps_the_length_on_a_full_disk_and_refuses_what_does_not_fit(disk: Path) -> None:
    path = disk / "run.json"
    old = b'{"status":"running","end_reason":null}' + b" " * 40 + b"\n"
    path.write_bytes(old)
    fill(disk)
    new = b'{"status":"crashed","end_reason":"disk full"}\n'
    with pytest.raises(WriteError):
        write_atomic(path, new)
    write_in_place(path, new)
    assert len(path.read_bytes()) == len(old) and path.read_bytes().endswith(b" \n")
    assert json.loads(path.read_bytes()) == {"status": "crashed", "end_reason": "disk full"}
    with pytest.raises(WriteError) as e:
        write_in_place(path, b'{"too":"long"}' + b" " * len(old) + b"\n")
    assert e.value.errno == errno.ENOSPC
    assert json.loads(path.read_bytes())["status"] == "crashed"
    assert _names(disk) == ["ballast", "run.json"]


def _episode(w: RunWriter, n: int) -> None:
    rng = np.random.default_rng(n)
    rec = w.begin_episode(kind="episode", life=0, turn=n, action_kind="go_to", first_step=n * 4,
                          action={"atom": "go_to"})
    for k in range(4):
        rec.add_step(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
                     StepRow(step=n * 4 + k + 1, life=0, episode=rec.id, action="noop", x=n, y=k, facing=(0, 1),
                             health=9, food=9, drink=9, energy=9, inventory={}, reward=0.0))
    w.end_episode(rec, observation=rec.frames[-1], state={"n": n}, outcome={}, summary=f"episode {n}", tags=[],
                  events=[], x=n, y=0, outcome_label="done")


def _writer(disk: Path, episodes: int = 3) -> RunWriter:
    """A run on ``disk`` with ``episodes`` committed episodes."""
    w = RunWriter(disk / "run", manifest(), background_commit=True)
    for n in range(episodes):
        _episode(w, n)
    w.wait()
    return w


def _check_intact(run: Path, copy: Path, episodes: int) -> None:
    """The run, copied off the test's disk, validates with no error and keeps its committed
    episodes; at most one episode was in flight (its folder and its ``seen.jsonl`` rows may be
    there without its index row)."""
    shutil.copytree(run, copy)
    c = validate(copy, frames=True)
    assert c.errors == [], [str(p) for p in c.errors]
    assert [r.id for r in c.tables["index.jsonl"]][:episodes] == [f"ep_{n:06d}" for n in range(episodes)]
    in_flight = {p.file.split("/")[-1] if p.file.startswith("episodes/") else p.message.split()[1] for p in c.problems}
    assert len(in_flight) <= 1 and all("not in index.jsonl" in p.message for p in c.problems), \
        [str(p) for p in c.problems]
    assert [p for p in _names(run) if ".tmp" in p] == []


def test_a_run_whose_disk_fills_up_closes_as_crashed_in_place(disk: Path, tmp_path: Path) -> None:
    w = _writer(disk)
    fill(disk)
    with pytest.raises(WriteError) as e:
        _episode(w, 3)
        w.wait()
    reason = e.value.describe(w.dir)
    assert reason == "disk full (ENOSPC) while writing episodes/ep_000003"
    with pytest.raises(WriteError) as again:
        w.close("crashed", reason)
    assert again.value.filename == str(w.dir / "run.json")
    assert w.status_on_disk == "crashed"
    on_disk = json.loads((w.dir / "run.json").read_bytes())
    assert (on_disk["status"], on_disk["end_reason"]) == ("crashed", reason) and on_disk["ended_at"]
    _check_intact(w.dir, tmp_path / "copy", 3)


def test_closing_as_finished_on_a_full_disk_closes_as_crashed_and_raises(disk: Path, tmp_path: Path) -> None:
    w = _writer(disk)
    fill(disk)
    with pytest.raises(WriteError) as e:
        w.close("finished", "budget", config={"agent_summary": {"turns": 3}})
    assert e.value.filename == str(w.dir / "run.json")
    on_disk = json.loads((w.dir / "run.json").read_bytes())
    assert on_disk["status"] == "crashed" and on_disk["end_reason"] == "disk full (ENOSPC) while writing run.json"
    assert on_disk["config"] == {"agent_summary": {"turns": 3}}
    _check_intact(w.dir, tmp_path / "copy", 3)


def test_an_end_reason_too_long_for_run_json_is_cut_to_fit(disk: Path) -> None:
    w = _writer(disk, episodes=1)
    size = (w.dir / "run.json").stat().st_size
    fill(disk)
    reason = "disk full (ENOSPC) while writing " + "x" * (2 * MANIFEST_ROOM)
    with pytest.raises(WriteError):
        w.close("crashed", reason, config={"agent_summary": {"notes": "y" * MANIFEST_ROOM}})
    raw = (w.dir / "run.json").read_bytes()
    on_disk = json.loads(raw)
    assert len(raw) == size and on_disk["status"] == "crashed"
    assert reason.startswith(on_disk["end_reason"]) and on_disk["end_reason"].startswith("disk full (ENOSPC)")


def _read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def _immutable(folder: Path) -> None:
    r = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"chattr +i (a real EPERM) does not work here: {r.stderr.strip()}")


@pytest.mark.parametrize("how", ["read-only", "immutable"])
def test_other_write_errors_get_the_same_treatment(disk: Path, tmp_path: Path, how: str) -> None:
    w = _writer(disk)
    if how == "read-only":
        _read_only(disk)
    else:
        _immutable(w.dir / "episodes")
    try:
        with pytest.raises(WriteError) as e:
            _episode(w, 3)
            w.wait()
        reason = e.value.describe(w.dir)
        if how == "read-only":
            with pytest.raises(WriteError, match="Read-only file system"):
                w.close("crashed", reason)
        else:
            w.close("crashed", reason)
    finally:
        if how == "immutable":
            subprocess.run(["chattr", "-i", str(w.dir / "episodes")], check=True)
    if how == "read-only":
        assert reason.startswith("read-only file system (EROFS) while writing ")
        assert w.status_on_disk == "running" and json.loads((w.dir / "run.json").read_bytes())["status"] == "running"
    else:
        assert reason == "operation not permitted (EPERM) while writing episodes/ep_000003"
        assert w.status_on_disk == "crashed"
        assert json.loads((w.dir / "run.json").read_bytes())["end_reason"] == reason
    _check_intact(w.dir, tmp_path / "copy", 3)


def _mfm_run(out: Path, steps: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mfm.cli", "run", "--task", "diamond", "--seed", "0",
                             "--steps", str(steps), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _said(stderr: str) -> list[str]:
    """The lines ``mfm run`` printed to stderr, without its progress lines."""
    assert "Traceback" not in stderr, stderr
    return [x for x in stderr.splitlines() if x.strip() and not x.startswith("run: ")]


def test_mfm_run_on_a_disk_that_fills_up(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "8m") as d:
        fill(d, leave=1_500_000)
        out = d / "run"
        proc = _mfm_run(out, 2000)
        _, err = proc.communicate(timeout=600)
        raw = (out / "run.json").read_bytes()
        assert shutil.disk_usage(d).free < 256 * 1024, "the run was closed on a full disk"
        _check_intact(out, tmp_path / "copy", 1)
    assert proc.returncode == 1
    said = _said(err)
    assert len(said) == 1 and said[0].startswith(f"mfm run: disk full (ENOSPC) while writing {out}/"), said
    assert "run closed as crashed at step" in said[0] and said[0].endswith("earlier episodes are intact")
    on_disk = json.loads(raw)
    assert on_disk["status"] == "crashed" and on_disk["end_reason"].startswith("disk full (ENOSPC) while writing")
    assert 0 < on_disk["last_step"] < 2000
    c = validate(tmp_path / "copy")
    steps, last = c.tables["steps.jsonl"], c.tables["index.jsonl"][-1].last_step
    assert {s.step for s in steps if s.step <= last} == set(range(1, last + 1)), "no committed step is lost"


def test_mfm_run_on_a_disk_made_read_only_while_it_runs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "64m") as d:
        out = d / "run"
        proc = _mfm_run(out, 4000)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and (
                not (out / "index.jsonl").exists() or len((out / "index.jsonl").read_bytes().splitlines()) < 20):
            time.sleep(0.05)
        for _ in range(100):
            if proc.poll() is not None or subprocess.run(["mount", "-o", "remount,ro", str(d)],
                                                         capture_output=True).returncode == 0:
                break
            time.sleep(0.02)
        _, err = proc.communicate(timeout=600)
        raw = (out / "run.json").read_bytes()
        _check_intact(out, tmp_path / "copy", 20)
    assert proc.returncode == 1, err
    said = _said(err)
    assert len(said) == 1 and said[0].startswith(f"mfm run: read-only file system (EROFS) while writing {out}/"), said
    assert "run.json could not be updated (it still says running)" in said[0]
    assert json.loads(raw)["status"] == "running"


def test_mfm_echo_run_on_a_disk_that_fills_up(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "2m") as d:
        r = subprocess.run([sys.executable, "-m", "mfm.cli", "echo", "run", "--configs", "passive", "--seeds", "0",
                            "--episodes", "30", "--jobs", "1", "--out", str(d / "echo"), "--no-report"],
                           capture_output=True, text=True, cwd=REPO, timeout=600)
        on_disk = json.loads((d / "echo" / "passive_s0" / "run.json").read_bytes())
        leftovers = [p for p in _names(d) if ".tmp" in p]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert [x for x in r.stderr.splitlines() if x.strip()] == [x for x in r.stderr.splitlines()
                                                            if x.startswith("mfm echo run: disk full (ENOSPC)")]
    assert on_disk["status"] == "crashed" and on_disk["end_reason"].startswith("disk full (ENOSPC) while writing ")
    assert leftovers == []
