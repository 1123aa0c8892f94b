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
import fcntl
import json
import logging
import os
import shutil
import shlex
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol, TextIO

from mfm.agent.modes import ARMS, allowed
from mfm.memory.appendlog import now_iso, write_atomic
from mfm.objectstore import (cache_root, is_empty, join, move_tree, name_of, parent_of, read_bytes, url_hash,
                             write_bytes)
from mfm.progress import Progress
from mfm.schema import SWEEPS, RunManifest, parse_manifest, read_manifest

log = logging.getLogger(__name__)

LOCK_NAME = ".mfm-sweep.lock"
"""The lock file of a sweep's output folder (:func:`sweep_lock`)."""


class SweepBusy(RuntimeError):
    """Another live sweep holds the output folder's lock; the message names it."""


def lock_path(out: Path | str) -> Path:
    """Where the lock of the sweep writing ``out`` lives: ``OUT/.mfm-sweep.lock``; for an output
    in object storage, a local file named by the URL's hash (sweeps on this machine only)."""
    if isinstance(out, str):
        return cache_root() / "sweeps" / url_hash(out.rstrip("/")) / LOCK_NAME
    return out / LOCK_NAME


@contextmanager
def sweep_lock(out: Path | str, command: str = "") -> Iterator[Path]:
    """Hold the lock of the sweep writing ``out`` for the ``with`` block, or raise
    :class:`SweepBusy` naming the sweep that holds it (its pid, host, start and command).

    The lock is the kernel's (``flock``) on a file that also records its holder: it is
    released when its holder exits, however it exits, so a lock left by a dead sweep is
    simply taken over, with no staleness rule to get wrong."""
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepBusy(f"{out} is being written by another sweep ({_holder(fd)}); wait for it to end or "
                            "stop it, then run this sweep again (finished runs are skipped)") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": now_iso(),
                                 "command": command}).encode("utf-8") + b"\n")
        yield path
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """Who holds a busy lock, from what its holder wrote."""
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return (f"pid {int(info['pid'])} on {str(info['host'])[:80]} since {str(info['started'])[:40]}"
                + (f": {str(info['command'])[:200]}" if info.get("command") else ""))
    except (OSError, ValueError, KeyError, TypeError):
        return "its holder not yet recorded"


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




def source_commit() -> tuple[str | None, bool]:
    """The git commit of the checkout this package runs from and whether its files differ
    from it; (None, False) outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return None, False
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None, False
    return head.stdout.strip(), bool(status.stdout.strip())


def record_sweep(out: Path | str, command: str, jobs: list[Job]) -> None:
    """Append to ``OUT/sweeps.jsonl`` when a sweep started, its command, its runs and the commit
    it ran from (``mfm results`` prints them beside the tables); in object storage the object
    is written again with the line added (the sweep holds the output's lock meanwhile)."""
    commit, dirty = source_commit()
    rec = {"started": now_iso(), "command": command, "commit": commit, "dirty": dirty, "runs": [j.name for j in jobs]}
    line = (json.dumps(rec) + "\n").encode("utf-8")
    if isinstance(out, str):
        write_bytes(join(out, SWEEPS), (read_bytes(join(out, SWEEPS)) or b"") + line)
        return
    out.mkdir(parents=True, exist_ok=True)
    with open(out / SWEEPS, "ab") as f:
        f.write(line)


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
    (seeds interleaved, so that a partial sweep has every method on the first seeds). An arm
    every method with notes may take (:data:`mfm.agent.modes.ARMS`, ``no-budget``) is run for
    each such method of ``methods`` (for mfm if there is none).
    ``inherit``: the run each job inherits memory from, ``{seed}`` replaced by the job's seed."""
    def at(name: str) -> Path | str:
        return join(out, name) if isinstance(out, str) else out / name

    def job(method: str, s: int, abl: tuple[str, ...]) -> Job:
        src = None if inherit is None else inherit.format(seed=s)
        return Job(task, method, s, at(job_name(task, method, s, abl, area, src)), steps, extra, abl, fixed_clock,
                   area, src)

    def takers(a: str) -> list[str]:
        return [m for m in methods if a in ARMS and allowed(m, a)] or ["mfm"]

    return [job(m, s, ()) for s in seeds for m in methods] + [job(m, s, (a,)) for s in seeds for a in ablations
                                                              for m in takers(a)]


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
    with Progress("sweep", len(jobs), "runs", stream=stream) as bar:
        bar.update(len(final))
        while todo or running:
            while todo and len(running) < parallel:
                j = todo.pop(0)
                (j.log if j.remote else j.out).parent.mkdir(parents=True, exist_ok=True)
                running[j.name] = (j, backend(j))
                log.info("%s: started (%s)", j.name, j.log)
                if running[j.name][1].started:
                    started[j.name] = time.monotonic()
            time.sleep(poll)
            ended = 0
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
                ended += 1
                launch.close()
                if j.remote and j.log.is_file():
                    write_bytes(j.log_url, j.log.read_bytes())
                if code != 0:
                    mark_crashed(j, why)
                final[name] = state(j)[0] if code == 0 else f"crashed ({why}; see {j.name}.log)"
                log.info("%s: %s", name, final[name])
                del running[name]
            bar.update(ended, "; ".join(_in_flight(j) for j, _ in running.values()))
    return final


def _in_flight(job: Job) -> str:
    """A running job in words: its name, steps played and milestones reached."""
    _, steps, milestones = state(job)
    return f"{job.name} {steps:,} steps, {milestones} milestone{'' if milestones == 1 else 's'}"
