"""``mfm sweep``: many runs (methods x seeds) in parallel processes, one progress display.

Each run is its own ``mfm run`` process writing ``OUT/<task>_<method>_s<seed>``. A run whose
manifest says finished is skipped; one that crashes (non-zero exit, or killed) is marked
crashed in its manifest and the others go on.
"""
from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mfm.memory.appendlog import now_iso, write_atomic
from mfm.schema import read_manifest


@dataclass(frozen=True)
class Job:
    """One run of the sweep."""

    task: str
    method: str
    seed: int
    out: Path
    steps: int | None = None
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.out.name

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "mfm.cli", "run", "--task", self.task, "--method", self.method,
               "--seed", str(self.seed), "--out", str(self.out)]
        if self.steps:
            cmd += ["--steps", str(self.steps)]
        return cmd + list(self.extra)


def plan(task: str, methods: list[str], seeds: list[int], out: Path, steps: int | None = None,
         extra: tuple[str, ...] = ()) -> list[Job]:
    """Every (method, seed) job, in a stable order."""
    return [Job(task, m, s, out / f"{task}_{m}_s{s}", steps, extra) for m in methods for s in seeds]


def state(job: Job) -> tuple[str, int, int]:
    """(status, last step, milestones reached) of a job's run directory, from its manifest."""
    m, _ = read_manifest(job.out)
    if m is None:
        return ("pending" if not job.out.exists() else "unreadable", 0, 0)
    return m.status, m.last_step, len(m.milestones)


def mark_crashed(job: Job, reason: str) -> None:
    """Record in a run's manifest that its process died without closing it."""
    m, _ = read_manifest(job.out)
    if m is not None and m.status == "running":
        m = dataclasses.replace(m, status="crashed", end_reason=reason, ended_at=now_iso())
        write_atomic(job.out / "run.json", (m.to_json() + "\n").encode("utf-8"))


def run_sweep(jobs: list[Job], parallel: int = 2, stream: TextIO = sys.stderr, poll: float = 1.0,
              fresh: bool = False) -> dict[str, str]:
    """Run the jobs, ``parallel`` at a time. Returns each job's final status."""
    todo = []
    final: dict[str, str] = {}
    for j in jobs:
        st = state(j)[0]
        if st == "finished" and not fresh:
            final[j.name] = "skipped (finished)"
        elif j.out.exists() and any(j.out.iterdir()):
            final[j.name] = f"skipped ({st}: folder not empty; remove it to run again)"
        else:
            todo.append(j)
    running: dict[str, tuple[Job, subprocess.Popen, TextIO]] = {}
    t0 = last_print = time.monotonic()
    tty = stream.isatty()
    while todo or running:
        while todo and len(running) < parallel:
            j = todo.pop(0)
            j.out.parent.mkdir(parents=True, exist_ok=True)
            log = open(j.out.parent / f"{j.name}.log", "w", encoding="utf-8")
            log.write("$ " + shlex.join(j.command()) + "\n")
            log.flush()
            running[j.name] = (j, subprocess.Popen(j.command(), stdout=log, stderr=subprocess.STDOUT), log)
        time.sleep(poll)
        changed = False
        for name, (j, proc, log) in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            changed = True
            log.close()
            if code != 0:
                mark_crashed(j, f"process exited with code {code}")
            final[name] = state(j)[0] if code == 0 else f"crashed (exit {code}; see {j.name}.log)"
            del running[name]
        if not tty and not changed and time.monotonic() - last_print < 30:
            continue
        last_print = time.monotonic()
        parts = [f"{j.name}: {s[1]} steps, {s[2]} ms" for j, _, _ in running.values() for s in [state(j)]]
        line = f"[{time.monotonic() - t0:6.0f}s] done {len(final)}/{len(jobs)}  " + "  |  ".join(parts)
        stream.write(("\r" + line[:200].ljust(200)) if tty else line + "\n")
        stream.flush()
    if tty:
        stream.write("\n")
    return final
