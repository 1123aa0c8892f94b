"""``mfm sweep``: many runs (methods x seeds, and mfm ablations) in parallel processes, one
progress display.

Each run is its own ``mfm run`` process writing ``OUT/<task>_<method>[-<ablation>]_s<seed>``
(its output goes to ``OUT/<name>.log``). A run whose manifest says finished is skipped; one
that crashes (non-zero exit, killed, or over its time limit) is marked crashed in its
manifest and the others go on. A folder left by an unfinished run is skipped, or with
``retry`` moved to ``OUT/.failed/`` and run again.

Where a job's process runs is the backend's business (:class:`Backend`): a child of this
process (:class:`LocalProcess`, the default) or a Ray task on a cluster
(:class:`mfm.sweep_ray.RayBackend`, which runs the same command line as a child of the
worker). The rule above lives in :func:`run_sweep` alone, for every backend.
"""
from __future__ import annotations

import dataclasses
import shutil
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, TextIO

from mfm.memory.appendlog import now_iso, write_atomic
from mfm.objectstore import (cache_root, is_empty, join, move_tree, name_of, parent_of, read_bytes, url_hash,
                             write_bytes)
from mfm.schema import RunManifest, parse_manifest, read_manifest


@dataclass(frozen=True)
class Job:
    """One run of the sweep."""

    task: str
    method: str
    seed: int
    out: Path | str
    """The run folder, or its URL in object storage (``s3://...``, ``mfm.objectstore``)."""
    steps: int | None = None
    extra: tuple[str, ...] = ()
    ablations: tuple[str, ...] = ()
    fixed_clock: bool = True
    area: int | None = None
    inherit: str | None = None
    """The run whose memory this run starts with (``mfm run --inherit``)."""

    @property
    def remote(self) -> bool:
        return isinstance(self.out, str)

    @property
    def name(self) -> str:
        return name_of(self.out) if isinstance(self.out, str) else self.out.name

    @property
    def log(self) -> Path:
        """Where the run's output goes: ``OUT/<name>.log``, beside its folder; for a run in
        object storage a local file, uploaded there (:attr:`log_url`) when the run ends."""
        if isinstance(self.out, str):
            return cache_root() / "sweeps" / url_hash(parent_of(self.out)) / f"{self.name}.log"
        return self.out.parent / f"{self.name}.log"

    @property
    def log_url(self) -> str:
        """``OUT/<name>.log`` of a run in object storage."""
        return join(parent_of(str(self.out)), f"{self.name}.log")

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "mfm.cli", "run", "--task", self.task, "--method", self.method,
               "--seed", str(self.seed), "--out", str(self.out), "--quiet"]
        for a in self.ablations:
            cmd += ["--ablation", a]
        if self.steps:
            cmd += ["--steps", str(self.steps)]
        if self.fixed_clock:
            cmd.append("--fixed-clock")
        if self.area is not None:
            cmd += ["--area", str(self.area)]
        if self.inherit is not None:
            cmd += ["--inherit", self.inherit]
        return cmd + list(self.extra)


def job_name(task: str, method: str, seed: int, ablations: tuple[str, ...] = (), area: int | None = None,
             inherit: str | None = None) -> str:
    """The run folder name: ``task_method[-ablation...]_sSEED[_aN][_from-RUN]`` (as
    ``RunConfig.run_name``)."""
    return (f"{task}_{'-'.join([method, *ablations])}_s{seed}" + ("" if area is None else f"_a{area}")
            + ("" if inherit is None else f"_from-{Path(inherit).name}"))


def plan(task: str, methods: list[str], seeds: list[int], out: Path | str, steps: int | None = None,
         extra: tuple[str, ...] = (), ablations: list[str] | tuple[str, ...] = (),
         fixed_clock: bool = True, area: int | None = None, inherit: str | None = None) -> list[Job]:
    """Every (method, seed) job, then every (mfm + one ablation, seed) job, in a stable order
    (seeds interleaved, so that a partial sweep has every method on the first seeds).
    ``inherit``: the run each job inherits memory from, ``{seed}`` replaced by the job's seed."""
    def at(name: str) -> Path | str:
        return join(out, name) if isinstance(out, str) else out / name

    def job(method: str, s: int, abl: tuple[str, ...]) -> Job:
        src = None if inherit is None else inherit.format(seed=s)
        return Job(task, method, s, at(job_name(task, method, s, abl, area, src)), steps, extra, abl, fixed_clock,
                   area, src)

    return [job(m, s, ()) for s in seeds for m in methods] + [job("mfm", s, (a,)) for s in seeds for a in ablations]


def state(job: Job) -> tuple[str, int, int]:
    """(status, last step, milestones reached) of a job's run directory, from its manifest."""
    m = _manifest(job)
    if m is None:
        return ("pending" if _empty(job) else "unreadable", 0, 0)
    return m.status, m.last_step, len(m.milestones)


def _manifest(job: Job) -> RunManifest | None:
    if isinstance(job.out, str):
        raw = read_bytes(join(job.out, "run.json"))
        return None if raw is None else parse_manifest(raw)[0]
    return read_manifest(job.out)[0]


def _empty(job: Job) -> bool:
    """Whether a job's run folder holds nothing (or is not there)."""
    if isinstance(job.out, str):
        return is_empty(job.out)
    return not job.out.exists() or not any(job.out.iterdir())


def mark_crashed(job: Job, reason: str) -> None:
    """Record in a run's manifest that its process died without closing it."""
    m = _manifest(job)
    if m is not None and m.status == "running":
        m = dataclasses.replace(m, status="crashed", end_reason=reason, ended_at=now_iso())
        data = (m.to_json() + "\n").encode("utf-8")
        if isinstance(job.out, str):
            write_bytes(join(job.out, "run.json"), data)
        else:
            write_atomic(job.out / "run.json", data)


def _set_aside(job: Job) -> Path | str:
    """Move an unfinished run's folder (and log) to ``OUT/.failed/NAME.K``; return where."""
    if isinstance(job.out, str):
        base_url = join(parent_of(job.out), ".failed")
        k = 1
        while not is_empty(join(base_url, f"{job.name}.{k}")):
            k += 1
        move_tree(job.out, join(base_url, f"{job.name}.{k}"))
        log = read_bytes(job.log_url)
        if log is not None:
            write_bytes(join(base_url, f"{job.name}.{k}.log"), log)
        return join(base_url, f"{job.name}.{k}")
    base = job.out.parent / ".failed"
    base.mkdir(exist_ok=True)
    k = 1
    while (base / f"{job.name}.{k}").exists():
        k += 1
    dest = base / f"{job.name}.{k}"
    shutil.move(str(job.out), str(dest))
    if job.log.exists():
        shutil.move(str(job.log), str(dest) + ".log")
    return dest


class Launch(Protocol):
    """A job's ``mfm run`` process, wherever a backend started it."""

    started: bool
    """Whether the process is under way (a queued Ray task is not yet): its time limit counts from then."""

    def poll(self) -> tuple[int, str] | None:
        """None while it runs; then (exit code, why it ended, for a crashed run's manifest)."""

    def kill(self) -> int:
        """End it now and wait for it; its exit code."""

    def close(self) -> None:
        """Release what the driver holds for it (its log file)."""


Backend = Callable[[Job], Launch]
"""Starts a job's ``mfm run`` process somewhere (its run folder's parent exists)."""


class LocalProcess:
    """The default backend: the job's ``mfm run`` as a child process of this one."""

    started = True

    def __init__(self, job: Job) -> None:
        self.log = open(job.log, "w", encoding="utf-8")
        self.log.write("$ " + shlex.join(job.command()) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(job.command(), stdout=self.log, stderr=subprocess.STDOUT)

    def poll(self) -> tuple[int, str] | None:
        code = self.proc.poll()
        return None if code is None else (code, f"process exited with code {code}")

    def kill(self) -> int:
        self.proc.kill()
        return self.proc.wait()

    def close(self) -> None:
        self.log.close()


def run_sweep(jobs: list[Job], parallel: int = 2, stream: TextIO = sys.stderr, poll: float = 1.0,
              retry: bool = False, timeout: float | None = None, backend: Backend = LocalProcess) -> dict[str, str]:
    """Run the jobs, ``parallel`` at a time, each started by ``backend``. Returns each job's
    final status.

    Finished runs are skipped. A folder left by an unfinished run is skipped, or with
    ``retry`` set aside and run again. A job running longer than ``timeout`` seconds (from
    when its process is under way) is killed and recorded as crashed, as is one whose
    process ends with a non-zero code or whose backend lost it."""
    todo = []
    final: dict[str, str] = {}
    for j in jobs:
        st = state(j)[0]
        if st == "finished":
            final[j.name] = "skipped (finished)"
        elif not _empty(j):
            if retry:
                _set_aside(j)
                todo.append(j)
            else:
                final[j.name] = f"skipped ({st}: folder not empty; --retry to run it again)"
        else:
            todo.append(j)
    running: dict[str, tuple[Job, Launch]] = {}
    started: dict[str, float] = {}
    t0 = last_print = time.monotonic()
    tty = stream.isatty()
    while todo or running:
        while todo and len(running) < parallel:
            j = todo.pop(0)
            (j.log if j.remote else j.out).parent.mkdir(parents=True, exist_ok=True)
            running[j.name] = (j, backend(j))
            if running[j.name][1].started:
                started[j.name] = time.monotonic()
        time.sleep(poll)
        changed = False
        for name, (j, launch) in list(running.items()):
            end = launch.poll()
            if end is None and name not in started and launch.started:
                started[name] = time.monotonic()
            over = (end is None and timeout is not None and name in started
                    and time.monotonic() - started[name] > timeout)
            if over:
                code, why = launch.kill(), f"killed after {timeout:g} s"
            elif end is None:
                continue
            else:
                code, why = end
            changed = True
            launch.close()
            if j.remote and j.log.is_file():
                write_bytes(j.log_url, j.log.read_bytes())
            if code != 0:
                mark_crashed(j, why)
            final[name] = state(j)[0] if code == 0 else f"crashed ({why}; see {j.name}.log)"
            del running[name]
        if not tty and not changed and time.monotonic() - last_print < 30:
            continue
        last_print = time.monotonic()
        parts = [f"{j.name}: {s[1]} steps, {s[2]} ms" for j, _ in running.values() for s in [state(j)]]
        line = f"[{time.monotonic() - t0:6.0f}s] done {len(final)}/{len(jobs)}  " + "  |  ".join(parts)
        stream.write(("\r" + line[:200].ljust(200)) if tty else line + "\n")
        stream.flush()
    if tty:
        stream.write("\n")
    return final
