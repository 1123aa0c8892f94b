"""Progress of a long command, one line that fits the terminal.

In a terminal the line is a tqdm bar redrawn in place, trimmed to the terminal's width (so an
80-column terminal shows one line updating, never a wrapped one). Anywhere else (a CI log, a
file, a pipe) a plain line is written when the count changes, at most every ``every`` seconds
(``MFM_PROGRESS_SECONDS``, 30 by default), and once at the end, so a log holds a short
readable history instead of carriage returns. A ``quiet_start`` line (the counted library
loops of :func:`task`) writes its first plain line only after ``every`` seconds, and its last
only if it wrote one: a command that ends quickly adds nothing to its output.

Units are words (``runs``, ``steps``, ``frame strips``); the detail after the count says what
is in flight in words too (``3,000 steps, 6 milestones``), never an abbreviation that reads as
a unit of time.

Library loops that can take long (packing, importing, decoding frames, measuring runs, drawing
figures) count their work with :func:`task` or :func:`counted`. They show nothing unless a
command of the command line is running (:func:`command`, which ``mfm.cli.main`` holds around
every subcommand), so the same functions called from the dashboard or a notebook stay silent.
Only the outermost counted loop shows a line; loops inside it count silently.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from types import TracebackType
from typing import Callable, Iterable, Iterator, Sized, TextIO, TypeVar

T = TypeVar("T")


class Progress:
    """A count towards ``total`` (None when unknown) of ``unit``, shown on ``stream``.

    Use as a context manager; :meth:`update` adds to the count and sets the detail text."""

    def __init__(self, desc: str, total: int | None, unit: str, stream: TextIO | None = None,
                 every: float | None = None, enabled: bool = True, quiet_start: bool = False) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.every = plain_seconds() if every is None else every
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and total != 0
        self.count = 0
        self.detail = ""
        self.quiet_start = quiet_start
        self.lines = 0
        """Plain lines written so far."""
        self._started = time.monotonic()
        self._last_line = self._started if quiet_start else float("-inf")
        self._bar = None
        if self.enabled and _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", file=self.stream, dynamic_ncols=True,
                             leave=True, bar_format=_BAR if total else _COUNTER)

    def update(self, n: int = 0, detail: str | None = None) -> None:
        """Add ``n`` to the count and, when given, replace the detail text."""
        self.count += n
        changed = bool(n) or (detail is not None and detail != self.detail)
        if detail is not None:
            self.detail = detail
        if not self.enabled:
            return
        if self._bar is not None:
            if detail is not None:
                self._bar.set_postfix_str(detail, refresh=False)
            self._bar.update(n)
            if not n:
                self._bar.refresh()
            return
        now = time.monotonic()
        if changed and now - self._last_line >= self.every:
            self._write_line(now)

    def close(self, failed: bool = False) -> None:
        """The final line, in a terminal and out of one; when the work ``failed`` (an error
        message follows), the terminal's line is cleared and no plain line is added."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.leave = not failed
            self._bar.close()
            self._bar = None
        elif not failed and (self.lines or not self.quiet_start):
            self._write_line(time.monotonic())

    def _write_line(self, now: float) -> None:
        self._last_line = now
        self.lines += 1
        of = f"/{self.total:,}" if self.total is not None else ""
        tail = f": {self.detail}" if self.detail else ""
        self.stream.write(f"{self.desc}: {self.count:,}{of} {self.unit} after {now - self._started:.0f} s{tail}\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close(failed=kind is not None)


def plain_seconds() -> float:
    """Seconds between two plain progress lines: ``MFM_PROGRESS_SECONDS``, else 30."""
    try:
        return max(0.0, float(os.environ.get("MFM_PROGRESS_SECONDS", "") or 30.0))
    except ValueError:
        return 30.0


_BAR = "{desc}: {n_fmt}/{total_fmt}{unit} |{bar}| {elapsed}, {remaining} left{postfix}"
_COUNTER = "{desc}: {n_fmt}{unit} {elapsed}{postfix}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_lock = threading.Lock()
_command: str | None = None
"""The name of the command-line command running now (its progress lines start with it)."""
_busy = False
"""Whether a task holds the progress line now (tasks inside it count silently)."""
_shown: Progress | None = None
"""The line of the task holding it, when one is shown."""


@contextmanager
def command(name: str, enabled: bool = True) -> Iterator[None]:
    """Let the tasks (:func:`task`) run inside the block show progress, named ``name`` (``mfm
    pack`` shows ``pack: ...``); ``enabled`` False (``mfm -q``) keeps them silent."""
    global _command
    previous = _command
    _command = name if enabled else None
    try:
        yield
    finally:
        _command = previous


@contextmanager
def task(unit: str, total: int | None = None) -> Iterator[Callable[[int, str | None], None]]:
    """A counted piece of work: yields ``tick(n, detail)``, which adds ``n`` ``unit`` done and
    names what was done last. It shows a :class:`Progress` line only inside :func:`command`
    and only for the outermost task; anywhere else ``tick`` does nothing. Also a decorator
    (``@task("figures written")``), the function's body then counting with :func:`tick`."""
    global _busy, _shown
    with _lock:
        mine = _command is not None and not _busy
        if mine:
            _busy = True
    if not mine:
        yield _ignore
        return
    try:
        with Progress(str(_command), total, unit, quiet_start=True) as bar:
            _shown = bar

            def tick_bar(n: int = 1, detail: str | None = None) -> None:
                with _lock:
                    bar.update(n, detail)

            yield tick_bar
    finally:
        with _lock:
            _busy, _shown = False, None


def tick(unit: str, n: int = 1, detail: str | None = None) -> None:
    """Add ``n`` ``unit`` done to the shown task when it counts ``unit`` (one that a function
    decorated with :func:`task` opened); nothing otherwise."""
    with _lock:
        if _shown is not None and _shown.unit == unit:
            _shown.update(n, detail)


def counted(items: Iterable[T], unit: str, total: int | None = None,
            detail: Callable[[T], str] | None = None) -> Iterator[T]:
    """The items of ``items``, each counted as one ``unit`` once the loop body has done it
    (:func:`task`); ``total`` defaults to ``len(items)`` when it has one, and ``detail`` names
    the item done last."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with task(unit, total) as tick_item:
        for item in items:
            yield item
            tick_item(1, detail(item) if detail is not None else None)


def _ignore(n: int = 1, detail: str | None = None) -> None:
    """The tick of a task that shows nothing."""
