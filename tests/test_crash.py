"""A run killed with SIGKILL at random moments always reopens and validates, losing at most
the episode in flight (its committer process writes the episodes it was handed, then exits:
the checks start once it has)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaders import open_run
from mfm.validate import validate


def _state(pid: str) -> str:
    """The state letter of a process: ``Z`` once it has exited (reaped or not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


@pytest.mark.parametrize("kill_after", [random.Random(7).uniform(0.0, 4.0) for _ in range(4)])
def test_sigkill_at_a_random_moment(tmp_path: Path, kill_after: float):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "mfm.cli", "run", "--task", "diamond", "--seed", "1",
                             "--steps", "4000", "--out", str(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "index.jsonl").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(kill_after)
    if proc.poll() is not None:
        pytest.skip("the run finished before it could be killed")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    committers = children.read_text().split() if children.exists() else []
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in committers):
        time.sleep(0.01)
    c = validate(out, frames=True)
    assert c.errors == [], [str(p) for p in c.errors]
    index = c.tables["index.jsonl"]
    assert index, "at least the initial episode was committed"
    folders = sorted(p.name for p in (out / "episodes").iterdir())
    indexed = {r.id for r in index}
    orphans = [f for f in folders if f not in indexed]
    assert len(orphans) <= 1 and all(f > max(indexed) for f in orphans), orphans
    steps = c.tables["steps.jsonl"]
    last = index[-1].last_step
    assert not steps or steps[-1].step >= last
    assert {s.step for s in steps if s.step <= last} == set(range(1, last + 1)), "no committed step is lost"
    run = open_run(out)
    assert run.status == "running"
    assert len(run.episodes()) == len(index)
    run.frame(last) if last else run.observation(index[0].id)
