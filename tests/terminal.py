"""A command run on a real pseudo-terminal of a given size, its screen read back through a
terminal emulator (pyte): what a user of an 80-column terminal sees."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
from pathlib import Path

import pyte


def screen_of(argv: list[str], columns: int = 80, rows: int = 24, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> tuple[pyte.Screen, bytes]:
    """Run ``argv`` on a pseudo-terminal of ``columns`` x ``rows``; the emulated screen at
    its end and every byte it wrote."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, **(env or {}), "COLUMNS": str(columns), "LINES": str(rows)}
    proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True, cwd=cwd)
    os.close(follower)
    raw = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower side closed: the process ended
                break
            if not chunk:
                break
            raw += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=600)
    os.close(leader)
    screen = pyte.Screen(columns, rows)
    pyte.ByteStream(screen).feed(bytes(raw))
    return screen, bytes(raw)


def drawn_lines(raw: bytes) -> list[str]:
    """Every line the terminal was given to draw, split at carriage returns and newlines."""
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r").decode("utf-8", "replace").split("\r")
