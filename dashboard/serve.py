"""How ``mfm dashboard`` runs Streamlit: ``python -m dashboard.serve [--no-warm] APP
[streamlit run options] -- [app args]`` imports the libraries and loaders the pages use, then
starts ``streamlit run`` in the same process. Streamlit runs each page's script in a thread of
this process, so the first visit after a start no longer pays for those imports (2-3 s on
a loaded 2-core machine; docs/benchmarks.md, "first visit").

Only libraries, ``loaders`` and the dashboard's modules that do not use Streamlit are
imported here: ``dashboard.ui`` and ``dashboard.scrubber`` register Streamlit caches and a
component, which belongs to a script run.

It also turns off Streamlit's full garbage collection after every script run
(``runner.postScriptGC``, on by default) unless the command line sets it: with a large run
open, the collector walks every object the loaded tables hold, holding the GIL: ~0.2 s
after each script run with a 360,000-step run open, and page changes in the browser took up
to twice as long (docs/benchmarks.md, "The collector after every script run"). Python's own
collector runs less often (:data:`GC_THRESHOLDS`), and what the preload imported is frozen
out of its walks (``gc.freeze``): reading a 360,000-step run made 709 collections that took
0.81 s of a 3.2 s open; with these thresholds, 20 taking 0.10 s.

Unless ``--no-warm`` is given, the server visits its own pages with the newest run open
when no browser has connected in the first 2 s (``dashboard.warmup``), so that a browser
arriving later finds that run's views built, and starts the SQL page's warm worker process
(``loaders.usersql.warm``), so that the first query does not wait for its interpreter.

``mfm dashboard`` does not run this module in its own process: :func:`supervise` starts it in
a process group of its own (the server, its SQL workers) and, when ``mfm dashboard`` is told to
stop (SIGTERM, SIGINT, SIGHUP), stops that whole group and waits for it, so no server is left
serving with nobody to stop it. Importing this module imports nothing heavy.
"""
from __future__ import annotations

import gc
import importlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType

PRELOAD = ("pandas", "pyarrow", "duckdb", "numpy", "PIL.Image", "altair",
           "loaders.run", "loaders.lookups", "loaders.timeline_data", "loaders.spatial_data", "loaders.agent_calls", "loaders.chart_data", "loaders.turns", "loaders.failures",
           "loaders.provenance", "loaders.analysis_pages", "loaders.frame_compare", "loaders.scrubber",
           "loaders.usersql", "loaders.echo", "loaders.live", "loaders.search",
           "dashboard.core", "dashboard.theme", "dashboard.safe_text", "dashboard.vega_charts", "dashboard.figures",
           "streamlit.emojis", "streamlit.material_icon_names",
           "narwhals._pandas_like.namespace", "narwhals._interchange.dataframe", "narwhals.stable.v1._namespace",
           "pyarrow.pandas_compat", "pyarrow.vendored.version", "duckdb.filesystem", "duckdb.bytes_io_wrapper",
           "fsspec.implementations.memory", "encodings.cp437", "configparser",
           "pandas.core.methods.to_dict", "pandas.core.reshape.reshape", "pandas.io.formats.csvs",
           "pandas.io.formats.string", "pandas.io.formats.style", "pandas.io.formats.style_render")
"""Imported before the server starts: what the pages import (heaviest first), and what the
libraries import on their first use, which the first visitor would otherwise wait for:
``streamlit.emojis`` (0.57 s: Streamlit compiles its emoji catalogue the first time an
alert's text is not ASCII), Altair's dataframe layer (narwhals), pandas' and pyarrow's
conversions, DuckDB's reader of bytes already read (with fsspec), and the code page a zip's
member names are decoded with (a packed run). ``tests/test_serve.py`` checks that no page
imports a library module first."""
GC_THRESHOLDS = (20_000, 20, 20)
"""Python's collector thresholds in the server (its default: 700, 10, 10): a youngest
generation of 20,000 objects, the older two collected every 20 collections of the one
below. Loading a run allocates millions of objects that live as long as it is open; with
the default, each load paid for hundreds of collections walking them."""
OPTIONS = {"--runner.postScriptGC": "false"}
"""``streamlit run`` options put after the app's path unless the command line names them."""


def preload() -> None:
    """Import :data:`PRELOAD` (a module that fails to import is left for the page to report),
    then register Pillow's image plugins, which it does on the first image it encodes, and
    mark Streamlit's one-time "not started with streamlit run" check as done."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if "PIL.Image" in sys.modules:
        sys.modules["PIL.Image"].init()
    dg = sys.modules.get("streamlit.delta_generator")
    if dg is not None and hasattr(dg, "_use_warning_has_been_displayed"):
        # Streamlit checks once per process, on the first element a page sends, whether it
        # was started from a REPL, with inspect.stack() (reading the source of every frame:
        # 0.09 s of a first visit); the server runs under ``streamlit run``: never a REPL.
        dg._use_warning_has_been_displayed = True


def run_args(argv: list[str]) -> list[str]:
    """``streamlit run``'s arguments: ``argv`` (the app's path first) with :data:`OPTIONS`
    after the path, except an option the part before ``--`` already names."""
    if not argv:
        return argv
    ours = argv[:argv.index("--")] if "--" in argv else argv
    extra = [a for name, value in OPTIONS.items()
             if not any(o == name or o.startswith(name + "=") for o in ours) for a in (name, value)]
    return [argv[0], *extra, *argv[1:]]


def main(argv: list[str] | None = None) -> None:
    """Set the collector (:data:`GC_THRESHOLDS`), preload and freeze what it imported, start
    the start-up visits (``dashboard.warmup``) unless ``argv`` (this process's arguments by
    default) begins with ``--no-warm``, then ``streamlit run`` with the rest of ``argv`` and
    :data:`OPTIONS`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    warm = not (argv and argv[0] == "--no-warm")
    if not warm:
        argv.pop(0)
    gc.set_threshold(*GC_THRESHOLDS)
    preload()
    gc.freeze()
    from streamlit.web.cli import main as streamlit_main

    if warm and argv:
        from dashboard import warmup
        from loaders import usersql

        usersql.warm()
        warmup.start(argv[argv.index("--") + 1:] if "--" in argv else [])
    sys.argv = ["streamlit", "run", *run_args(argv)]
    streamlit_main()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What makes :func:`supervise` stop the server."""
GRACE_S = 10.0
"""How long the server's process group has to stop after SIGTERM before it is killed."""


def supervise(cmd: list[str], env: dict[str, str] | None = None, grace_s: float = GRACE_S) -> int:
    """Run ``cmd`` (the server) in a new process group and wait for it; on SIGTERM, SIGINT or
    SIGHUP send SIGTERM to the group. Whatever ended the server, the rest of its group is
    stopped too (SIGTERM, then SIGKILL after ``grace_s``) before this returns: the server's
    exit code, or 128 plus the signal that stopped it."""
    received: list[int] = []
    started: list[subprocess.Popen] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if started:
            _signal_group(started[0].pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        raise
    started.append(proc)
    if received:
        _signal_group(proc.pid, signal.SIGTERM)
    try:
        code = _wait(proc, received, grace_s)
    finally:
        stop_group(proc.pid, grace_s)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 + received[0] if received else code


def _wait(proc: subprocess.Popen, received: list[int], grace_s: float) -> int:
    """``proc``'s exit code; once a stop signal was ``received``, it has ``grace_s`` to exit
    before it is killed (with its group)."""
    stopping_since: float | None = None
    while True:
        try:
            return proc.wait(0.2)
        except subprocess.TimeoutExpired:
            if received and stopping_since is None:
                stopping_since = time.monotonic()
            if stopping_since is not None and time.monotonic() - stopping_since > grace_s:
                _signal_group(proc.pid, signal.SIGKILL)
                return proc.wait()


def stop_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """End every process of group ``pgid``: SIGTERM, then SIGKILL to what is left after
    ``grace_s``; returns once none is left (or a last SIGKILL was sent)."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    end = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.05)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to group ``pgid``; whether the group still had a process."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` holds a process that is not a zombie (an exited child that no one
    has waited for yet counts as gone); without ``/proc``, whether it holds any process."""
    if not os.path.isdir("/proc/self"):
        return _signal_group(pgid, 0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


if __name__ == "__main__":
    main()
