"""The Ray backend of ``mfm sweep`` (``--backend ray``, the ``ray`` extra): each job is a Ray
task (one CPU) that runs the job's ``mfm run`` command line as a child process of the worker,
so a killed task, worker or node leaves what a killed local process leaves: a run folder whose
manifest says running, which :func:`mfm.sweep.run_sweep` marks crashed and ``--retry`` sets
aside and runs again. Ray never retries a task itself (``max_retries=0``): the sweep's rule
decides.

The run folders and logs are written by the workers at the driver's absolute ``OUT`` path:
on a cluster of several machines that path must be a shared filesystem, the same on every
node (docs/scale.md). Ray is imported only when a :class:`RayBackend` is made (the core
installs without it; ``.importlinter`` core-no-extras). A job here is an
:class:`mfm.sweep.Job`, used by its ``out``, ``log`` and ``command()`` only (this module
sits beside ``mfm.sweep``, in the same layer, and does not import it).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from mfm.objectstore import exists, is_url, write_bytes

DIE_WITH_PARENT = ("import ctypes, os, signal, sys\n"
                   "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
                   "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"
                   "os.execv(sys.argv[2], sys.argv[2:])\n")
"""Run before the job's command (then replaced by it, same pid, same command line) on Linux:
the kernel kills the process when the worker that started it dies, however it dies, so no
``mfm run`` goes on writing into a run the sweep has marked crashed."""


def run_on_worker(cmd: list[str], out: str, log: str, log_url: str | None = None) -> int:
    """The Ray task: run one job's ``mfm run`` command line as a child of this worker, its
    output to ``log``; return its exit code. The command's Python is this node's. For a run
    in object storage (``out`` a URL) the log is also put at ``log_url``, when the run starts
    and when it ends, so a driver on another node sees it."""
    cmd = [sys.executable, *cmd[1:]]
    Path(log if is_url(out) else out).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.write(f"# ray task on {socket.gethostname()}, worker pid {os.getpid()}\n")
        f.flush()
        if log_url:
            write_bytes(log_url, Path(log).read_bytes())
        argv = [cmd[0], "-c", DIE_WITH_PARENT, str(os.getpid()), *cmd] if sys.platform.startswith("linux") else cmd
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            while True:  # short waits: Ray's cancel (KeyboardInterrupt) lands between them
                try:
                    return proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
        finally:  # cancelled (KeyboardInterrupt in this thread): the run ends with the task
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if log_url:
                f.flush()
                write_bytes(log_url, Path(log).read_bytes())


class RayTask:
    """One job submitted to Ray (the :class:`mfm.sweep.Launch` of this backend)."""

    def __init__(self, ray: Any, remote: Any, job: Any) -> None:
        self.ray = ray
        self.log = Path(job.log).absolute()
        self.log.unlink(missing_ok=True)  # the task writes it first: its presence means under way
        self.log_url = job.log_url if job.remote else None
        out = job.out if job.remote else Path(job.out).absolute()
        cmd = dataclasses.replace(job, out=out).command()
        self.ref = remote.options(name=f"mfm run {job.name}").remote(cmd, str(out), str(self.log), self.log_url)

    @property
    def started(self) -> bool:
        return self.log.exists() or (self.log_url is not None and exists(self.log_url))

    def poll(self) -> tuple[int, str] | None:
        if not self.ray.wait([self.ref], timeout=0)[0]:
            return None
        try:
            code = self.ray.get(self.ref)
        except self.ray.exceptions.TaskCancelledError:
            return -1, "ray task cancelled"
        except self.ray.exceptions.RayError as e:  # its worker or node died, or the task failed to start
            return -1, f"ray task failed: {type(e).__name__}"
        return code, f"process exited with code {code}"

    def kill(self) -> int:
        self.ray.cancel(self.ref)  # KeyboardInterrupt in the task: it kills its child and returns
        if not self.ray.wait([self.ref], timeout=60)[0]:
            self.ray.cancel(self.ref, force=True)  # kills the worker, and with it the child
            self.ray.wait([self.ref])
        end = self.poll()
        return end[0] if end else -1

    def close(self) -> None:
        pass


class RayBackend:
    """Starts each job as a Ray task of one CPU. ``address``: a running cluster
    (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``); None starts a local cluster in
    this process with ``num_cpus`` CPUs (default: all), which ends with :meth:`close`."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        import ray

        if address is None:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        self.ray = ray
        self.remote = ray.remote(num_cpus=1, max_retries=0)(run_on_worker)

    @property
    def cpus(self) -> int:
        """CPUs of the cluster: how many jobs can run at once."""
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    def __call__(self, job: Any) -> RayTask:
        return RayTask(self.ray, self.remote, job)

    def close(self) -> None:
        self.ray.shutdown()
