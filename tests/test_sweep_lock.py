"""One sweep at a time per output folder, and progress that fits an 80-column terminal.

Two real ``mfm sweep`` processes are started on one folder: the second refuses with one line
naming the first, and the first's runs and logs come out whole. The progress line is read
through a real pseudo-terminal of 80 columns and a terminal emulator (pyte)."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mfm.progress import Progress
from mfm.schema import read_manifest
from mfm.sweep import LOCK_NAME, SweepBusy, sweep_lock
from terminal import screen_of

SWEEP = [sys.executable, "-m", "mfm.cli", "sweep", "--task", "diamond", "--methods", "direct", "--jobs", "1"]


def _wait_for_holder(lock: Path, proc: subprocess.Popen) -> dict:
    """The holder record the sweep writes into its lock once it holds it."""
    while proc.poll() is None:
        if lock.is_file() and lock.read_text():
            return json.loads(lock.read_text())
        time.sleep(0.05)
    raise AssertionError(f"the sweep ended before it took its lock: {proc.returncode}")


def test_a_held_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    with sweep_lock(tmp_path, "mfm sweep --out here"):
        with pytest.raises(SweepBusy) as e, sweep_lock(tmp_path):
            pass
        assert f"pid {os.getpid()}" in str(e.value) and "mfm sweep --out here" in str(e.value)
    with sweep_lock(tmp_path):  # released at the end of the block
        pass


def test_the_lock_of_a_killed_sweep_is_taken_over(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from mfm.sweep import sweep_lock\n"
        "with sweep_lock(Path(sys.argv[1]), 'dead one'):\n    print('held', flush=True); time.sleep(600)"),
        str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(SweepBusy, match=f"pid {holder.pid}"), sweep_lock(tmp_path):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == holder.pid  # left behind by the dead sweep
    with sweep_lock(tmp_path, "new one"):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_a_lock_file_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    out = tmp_path / "runs"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(outside)
    with pytest.raises(OSError), sweep_lock(out):
        pass
    assert outside.read_text() == "keep me"


def test_a_second_sweep_into_the_same_folder_refuses_and_the_first_finishes_whole(tmp_path: Path) -> None:
    out = tmp_path / "race"
    cmd = SWEEP + ["--seeds", "0", "--steps", "300", "--out", str(out)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder = _wait_for_holder(out / LOCK_NAME, first)
    assert holder["pid"] == first.pid
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out1, err1 = first.communicate(timeout=600)
    assert first.returncode == 0, err1
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mfm sweep: ") and f"pid {first.pid}" in lines[0], second.stderr
    assert "Traceback" not in second.stderr + second.stdout
    run = out / "diamond_direct_s0"
    manifest = read_manifest(run)[0]
    assert manifest is not None and manifest.status == "finished" and manifest.last_step == 300
    log = (out / "diamond_direct_s0.log").read_text()
    assert log.startswith("$ ") and log.count("$ ") == 1 and "Traceback" not in log
    assert "diamond_direct_s0: finished" in out1


def test_the_sweep_progress_is_one_line_updated_in_place_in_80_columns(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    screen, raw = screen_of(SWEEP + ["--seeds", "0,1", "--steps", "400", "--out", str(out)])
    progress = [row for row in screen.display if row.startswith("sweep:")]
    assert len(progress) == 1, screen.display
    assert "2/2 runs" in progress[0]
    redraws = raw.split(b"\n")[0].count(b"\r")
    assert redraws >= 2, raw[:400]  # the line was drawn more than once, in place
    for drawn in raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r").split(b"\r"):
        text = drawn.decode("utf-8", "replace")
        assert len(text.rstrip()) <= 80 or "\x1b" in text, text
    assert " ms" not in raw.decode("utf-8", "replace")


def test_out_of_a_terminal_progress_is_plain_lines_with_units_in_words() -> None:
    stream = io.StringIO()
    with Progress("frames", 3, "frame strips", stream=stream, every=0) as bar:
        for _ in range(3):
            bar.update(1, "ep_000001")
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[-1].startswith("frames: 3/3 frame strips after ") and lines[-1].endswith(": ep_000001")
    assert len(lines) == 4  # three updates and the closing line


def test_progress_quiet_when_disabled() -> None:
    stream = io.StringIO()
    with Progress("x", 2, "runs", stream=stream, enabled=False) as bar:
        bar.update(2)
    assert stream.getvalue() == ""
