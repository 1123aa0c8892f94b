"""``mfm sweep --backend ray`` (issue 22) on a real local Ray cluster of 2 CPUs, with real
``mfm run`` processes: a small sweep finishes and ``mfm results`` reads it, a rerun skips the
finished runs, and a run killed mid-way (its ``mfm run`` process, or the Ray worker running
it) is left crashed, with no process still writing into it, and ``--retry`` replaces it with a
finished one. No mocks; the time limits below are only guards against a hang."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from mfm.cli import main
from mfm.schema import SWEEPS
from mfm.sweep import LOCK_NAME

GUARD = 900.0
"""Seconds after which a sweep is taken to hang (each takes well under a minute here)."""


def sweep(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mfm.cli", "sweep", "--backend", "ray", "--jobs", "2", "--seeds", "0",
            "--methods", "direct,mfm", "--out", str(out), *args]


def finish(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=GUARD)


def statuses(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)


def manifest(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def processes_writing(run: Path) -> list[int]:
    """Pids of the ``mfm run`` processes (found by command line) writing into ``run``."""
    pids = []
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mfm.cli" in argv and b"run" in argv and str(run).encode() in argv:
            pids.append(int(p.name))
    return pids


def parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


def kill_worker(child: int, sweep_proc: subprocess.Popen) -> str:
    """Kill the Ray worker whose child is the ``mfm run`` process ``child``; the sweep's output
    once it has ended."""
    worker = parent(child)
    assert (Path("/proc") / str(worker) / "cmdline").read_bytes().startswith(b"ray::")
    os.kill(worker, signal.SIGKILL)
    return sweep_proc.communicate(timeout=GUARD)[0]


def ray_test(test):
    """Marks a test that starts a local Ray cluster: slow, and run only with the ray extra, on Linux."""
    test = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc")(test)
    test = pytest.mark.skipif(find_spec("ray") is None, reason="needs the ray extra")(test)
    return pytest.mark.slow(test)


def test_without_the_extra_the_ray_backend_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    """Not slow: no Ray is started."""
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["sweep", "--backend", "ray", "--out", str(tmp_path / "S")]) == 2
    assert capsys.readouterr() == ("", 'mfm sweep: needs the ray extra: pip install "mfm[ray]"\n')
    assert main(["sweep", "--address", "auto", "--out", str(tmp_path / "S")]) == 2
    assert capsys.readouterr() == ("", "mfm sweep: --address needs --backend ray\n")
    assert not (tmp_path / "S").exists()


def under_way(run: Path, sweep_proc: subprocess.Popen) -> int:
    """Wait until ``run`` has recorded steps; the pid of its ``mfm run`` process."""
    hang = time.monotonic() + GUARD
    while time.monotonic() < hang and sweep_proc.poll() is None:
        pids = processes_writing(run)
        if pids and (run / "run.json").exists() and manifest(run)["last_step"] > 0:
            assert len(pids) == 1
            return pids[0]
        time.sleep(0.2)
    pytest.fail(f"{run.name} never got under way: {sweep_proc.poll()=}")


@ray_test
def test_a_ray_sweep_finishes_reads_and_skips_finished_runs(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    first = finish(sweep(out, "--steps", "100"))
    assert first.returncode == 0, first.stderr
    assert statuses(first.stdout) == {"diamond_direct_s0": "finished", "diamond_mfm_s0": "finished"}
    for name in ("diamond_direct_s0", "diamond_mfm_s0"):
        m = manifest(out / name)
        assert m["status"] == "finished" and m["last_step"] == 100
        log = (out / f"{name}.log").read_text()
        assert log.startswith("$ ") and f"--out {out / name} " in log and "# ray task on " in log
    assert "sweep: 2/2 runs" in first.stderr
    results = finish([sys.executable, "-m", "mfm.cli", "results", str(out)])
    assert results.returncode == 0 and "2 runs" in results.stdout
    assert "| direct | 1 |" in results.stdout and "| mfm | 1 |" in results.stdout

    def runs_files() -> dict[Path, int]:
        """Every file of the runs and their logs (not the sweep's own lock and record, which
        each sweep writes)."""
        return {p: p.stat().st_mtime_ns for p in out.rglob("*")
                if p.is_file() and p.name not in (LOCK_NAME, SWEEPS)}

    before = runs_files()
    again = finish(sweep(out, "--steps", "100"))
    assert again.returncode == 0, again.stderr
    assert statuses(again.stdout) == {"diamond_direct_s0": "skipped (finished)",
                                      "diamond_mfm_s0": "skipped (finished)"}
    assert runs_files() == before
    assert len((out / SWEEPS).read_text().splitlines()) == 2  # each sweep recorded


@ray_test
def test_killed_runs_are_left_crashed_and_retried(tmp_path: Path) -> None:
    """One job's ``mfm run`` process is killed, the other's Ray worker: both runs are left
    crashed (manifest and sweep output), no process goes on writing into either, a rerun
    without ``--retry`` leaves them alone, and one with it sets them aside under
    ``.failed/`` and replaces them with finished runs."""
    out = tmp_path / "sweep"
    direct, mfm = out / "diamond_direct_s0", out / "diamond_mfm_s0"
    err = open(tmp_path / "sweep.err", "w")
    proc = subprocess.Popen(sweep(out, "--steps", "100000"), stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        os.kill(under_way(direct, proc), signal.SIGKILL)
        stdout = kill_worker(under_way(mfm, proc), proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    got = statuses(stdout)
    assert proc.returncode == 1, (tmp_path / "sweep.err").read_text()
    assert got["diamond_direct_s0"].startswith("crashed (process exited with code -9; see diamond_direct_s0.log")
    assert got["diamond_mfm_s0"].startswith("crashed (ray task failed: ")
    assert processes_writing(direct) == processes_writing(mfm) == []
    for run in (direct, mfm):
        m = manifest(run)
        assert m["status"] == "crashed" and 0 < m["last_step"] < 100000, m
    assert manifest(direct)["end_reason"] == "process exited with code -9"

    left = finish(sweep(out, "--steps", "100"))
    assert left.returncode == 0, left.stderr
    assert all(v.startswith("skipped (crashed: folder not empty") for v in statuses(left.stdout).values())

    retried = finish(sweep(out, "--steps", "100", "--retry"))
    assert retried.returncode == 0, retried.stderr
    assert statuses(retried.stdout) == {"diamond_direct_s0": "finished", "diamond_mfm_s0": "finished"}
    for run in (direct, mfm):
        assert manifest(run)["status"] == "finished" and manifest(run)["last_step"] == 100
        aside = out / ".failed" / f"{run.name}.1"
        assert json.loads((aside / "run.json").read_text())["status"] == "crashed"
        assert Path(f"{aside}.log").exists()


@ray_test
def test_a_run_over_its_time_limit_is_cancelled_and_left_crashed(tmp_path: Path) -> None:
    """``--timeout`` cancels the Ray task, which kills its ``mfm run`` process: the run is
    left crashed and nothing goes on writing into it. (The run would take minutes; on a
    machine so loaded that it has not written its manifest within the limit, there is no
    manifest to mark and only the rest is checked.)"""
    out = tmp_path / "sweep"
    got = finish([sys.executable, "-m", "mfm.cli", "sweep", "--backend", "ray", "--jobs", "1", "--seeds", "0",
                  "--methods", "direct", "--steps", "100000", "--timeout", "4", "--out", str(out)])
    assert got.returncode == 1, got.stderr
    assert statuses(got.stdout) == {"diamond_direct_s0": "crashed (killed after 4 s; see diamond_direct_s0.log)"}
    if (out / "diamond_direct_s0" / "run.json").exists():
        m = manifest(out / "diamond_direct_s0")
        assert m["status"] == "crashed" and m["end_reason"] == "killed after 4 s" and m["last_step"] < 100000
    assert processes_writing(out / "diamond_direct_s0") == []


@ray_test
def test_a_ray_sweep_into_a_bucket_survives_a_killed_worker(s3, tmp_path: Path) -> None:
    """The sweep's runs in object storage (a real S3-compatible server on loopback): a killed
    Ray worker leaves its run crashed in the bucket (manifest and log), ``--retry`` sets it
    aside under ``.failed/`` in the bucket and replaces it with a finished run."""
    s3.mkdir("raysweep")
    out = "s3://raysweep/sw"
    err = open(tmp_path / "sweep.err", "w")
    env = dict(os.environ, MFM_SYNC_SECONDS="0.5")
    argv = sweep(out, "--steps", "100000", "--methods", "mfm")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env)

    def bucket_manifest() -> dict | None:
        s3.invalidate_cache()
        try:
            return json.loads(s3.cat_file("raysweep/sw/diamond_mfm_s0/run.json"))
        except FileNotFoundError:
            return None

    try:
        hang = time.monotonic() + GUARD
        while not ((m := bucket_manifest()) and m["last_step"] > 0):
            assert time.monotonic() < hang and proc.poll() is None, (tmp_path / "sweep.err").read_text()
            time.sleep(0.3)
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                and b"s3://raysweep/sw/diamond_mfm_s0\0" in _cmdline(p) and b"mfm.cli\0run\0" in _cmdline(p)]
        stdout = kill_worker(pids[0], proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and statuses(stdout)["diamond_mfm_s0"].startswith("crashed (ray task failed: ")
    m = bucket_manifest()
    assert m["status"] == "crashed" and 0 < m["last_step"] < 100000
    assert s3.cat_file("raysweep/sw/diamond_mfm_s0.log").startswith(b"$ ")

    retried = finish(sweep(out, "--steps", "100", "--methods", "mfm", "--retry"))
    assert retried.returncode == 0, retried.stderr
    assert statuses(retried.stdout) == {"diamond_mfm_s0": "finished"}
    m = bucket_manifest()
    assert m["status"] == "finished" and m["last_step"] == 100
    aside = json.loads(s3.cat_file("raysweep/sw/.failed/diamond_mfm_s0.1/run.json"))
    assert aside["status"] == "crashed"
    assert s3.exists("raysweep/sw/.failed/diamond_mfm_s0.1.log")


def _cmdline(p: Path) -> bytes:
    """A process's command line (NUL-separated), empty if it is gone."""
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""
