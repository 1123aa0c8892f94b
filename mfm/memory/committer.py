"""The committer: a child process that writes finished episodes while the agent plays.

A running agent hands each finished episode (its records, frame strips, end observation and
index line) to the committer and goes on at once; the committer encodes and writes the
files, then appends the index line (the commit marker), and answers, in order, that the
episode is on disk or why not (``mfm.memory.episode_store.EpisodeStore``).

Why a process and not a thread (docs/benchmarks.md, figure 5, "The committer"): a thread of
the agent's process needs the GIL back after every system call and every encoder call, and
while the agent's thread runs Python it waits up to the interpreter's switch interval (5 ms)
each time. An episode's commit makes a dozen such calls, so the thread fell behind an agent
that plays an episode in ~20 ms, and the agent waited for it: 1.8-2.2 s of 3,000 steps
(~9 s). A process has its own interpreter; the agent's side is one message per episode.

The child is ``python -c`` on this module (not ``multiprocessing``: its start methods either
fork a process whose other threads may hold locks, or import the caller's main script
again). It ignores SIGINT (Ctrl-C stops the agent, which then closes the run and waits for
the episodes out), writes every episode it was sent even when the agent's process died (it
exits at the end of its socket), and after a failed episode writes no more: it answers
each later one with an error, so at most one episode is left half-written. Jobs are the
arguments of ``write_episode_files``; answers ``None`` or the exception.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mfm.memory.appendlog import WriteError

Job = tuple[str, list[tuple[str, Any]], list[tuple[str, Any]], Any]
"""(episode folder, [(record path, body)], [(strip file, pixels)], observation pixels or None)."""
STOP_SECONDS = 120.0
"""How long :meth:`Committer.close` waits for the child to exit before killing it."""
_ROOT = str(Path(__file__).resolve().parents[2])


class Committer:
    """The agent's side of one committer process (started here)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        """The run folder (named by the errors raised when the child is gone)."""
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from mfm.memory.committer import serve; serve(int(sys.argv[1]))",
                 str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, job: Job) -> None:
        """Hand one episode to the child; WriteError if it is gone."""
        try:
            self._conn.send(job)
        except OSError as e:
            raise self._gone(e) from None

    def ready(self) -> bool:
        """Whether an answer is waiting to be taken."""
        try:
            return self._conn.poll(0)
        except (EOFError, OSError):
            return True

    def result(self) -> None:
        """Wait for the answer about the oldest episode sent and not answered yet; raise its
        error (or WriteError if the child is gone)."""
        try:
            answer = self._conn.recv()
        except (EOFError, OSError) as e:
            raise self._gone(e) from None
        if answer is not None:
            raise answer

    def close(self) -> None:
        """Let the child finish and exit (killed after :data:`STOP_SECONDS`)."""
        try:
            self._conn.close()
        finally:
            try:
                self._proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _gone(self, cause: BaseException) -> WriteError:
        code = self._proc.poll()
        why = f"exited with code {code}" if code is not None else f"stopped answering ({cause})"
        return WriteError(errno.EPIPE, f"the committer process {why}; the episodes it held are not on disk",
                          str(self.folder))


def serve(fd: int) -> None:
    """The child's loop: write each job's files, answer None or the exception, until end of file."""
    from mfm.memory.episode_store import write_episode_files

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    failed: BaseException | None = None
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        answer: BaseException | None = None
        if failed is not None:
            answer = WriteError(errno.ECANCELED, f"not written: an earlier episode could not be ({failed})", job[0])
        else:
            try:
                write_episode_files(*job)
            except BaseException as e:
                answer = failed = e
        try:
            conn.send(answer)
        except (OSError, ValueError):
            return
        except Exception as e:
            conn.send(WriteError(errno.EIO, f"{type(answer).__name__}: {answer} ({e})", job[0]))
