"""Visits made by the server itself after it starts, so that a browser arriving later finds
the newest run's views built (docs/benchmarks.md, "The server visits its pages at start").

A first visit after ``mfm dashboard`` builds everything while the visitor waits: the run's
tables, its episodes, the chart's data and the chart (0.5-1.2 s of the Timeline's 2.7-3.3 s
at 36,000 steps; the whole first open of a 360,000-step run).

:func:`start` resolves the runs root and finds its newest run in a thread of its own while
Streamlit starts (a root in object storage is listed there, not before the server), and opens
that run at once (:func:`prepare`: its tables, index and what every page of it reads first),
without waiting: a browser that arrives then spends its first second loading the app, while
the server has nothing else to do, and its page finds the run read. Once the
runtime has run for :data:`IDLE_S` seconds with no browser connected, it visits the Runs page
and then the pages of :data:`PAGES` with that run open (``?runs=KEY``), one after the other.
Each visit is a Streamlit session of its own, made the way a browser's is
(``Runtime.connect_session``, then a script run requested with the page's URL path and query
string), whose output is discarded but for the exceptions a page shows, and closed once its
script has finished. The scripts are the pages' own, so what they compute (the opened run,
``st.cache_data`` and ``st.cache_resource`` entries) is what a browser's visit then finds.
Nothing of the run directory is executed and only the runs root is read, as for any visit.

The wait and the stop are for the browser: on a 2-core machine, visits made while a browser
loads the app slowed its first page by 0.3-0.6 s (Chromium and the server share the cores),
more than they saved. So no visit starts once a browser has connected: the visits stop at the
first page boundary after one connects, and none are made when one connects within
:data:`IDLE_S` of the start (the visitor's own script runs fill the caches then). A browser
asking for the page being visited waits for its cache entries instead of building them twice.

Streamlit's runtime is reached through ``Runtime.instance()`` and its event loop; a Streamlit
without what this needs makes :func:`start` print one line and do nothing else.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from dashboard.core import run_key, runs_root
from loaders import agent_calls, cursor
from loaders.run import Run, find_runs, open_run
from mfm.schema import MANIFEST

PAGES = ("timeline", "grid", "provenance", "frames")
"""The pages visited with the newest run open, after the Runs page: those the Runs page links
a run to, and the provenance graph, in the order a visitor most likely opens them."""
IDLE_S = 2.0
"""Seconds the runtime must have run with no browser connected before the visits start."""
START_WAIT_S = 120.0
"""How long to wait for Streamlit's runtime to start before giving up the visits."""
VISIT_LIMIT_S = 300.0
"""The longest one visit may take before the next is made (its script keeps running)."""


def _written(path: Path) -> int:
    """When a run was last written: its manifest's modification time, else its own (a
    foreign run's file or folder); -1 when it cannot be read."""
    try:
        return os.stat(path / MANIFEST if (path / MANIFEST).is_file() else path).st_mtime_ns
    except OSError:
        return -1


def newest_run(root: Path) -> Path | None:
    """The run under ``root`` written last (ties go to the later path), or None when there is none."""
    runs = find_runs(root)
    return max(runs, key=lambda p: (_written(p), str(p))) if runs else None


def plan(root: Path, run: Path | None) -> list[tuple[str, str]]:
    """The visits, as (page url path, query string): the Runs page as the dashboard opens
    (``""``), then :data:`PAGES` with ``run`` (the newest under ``root``) open."""
    visits = [("", "")]
    if run is not None:
        visits += [(page, urlencode({"runs": run_key(root, run)})) for page in PAGES]
    return visits


TABLES = ("episodes", "steps", "turns", "lives", "milestones", "memory_writes")
"""The tables :func:`prepare` reads: those the sidebar and most pages ask for."""


def prepare(path: Path) -> Run:
    """Open the run at ``path`` in the process's registry of runs (``loaders.run.open_run``,
    which the pages use) and read what every page of it asks for first: its records and
    :data:`TABLES`, its episode index, what the sidebar's cursor works out per life
    (``loaders.cursor``: each life's steps and turns) and its searches and inspections
    (``loaders.agent_calls.run_tool_calls``): 1.1 s at 360,000 steps (0.2 s at 36,000), done
    while a first browser loads the app (~1 s) instead of after it."""
    run = open_run(path).load()
    run.index  # noqa: B018 - built on first use
    for name in TABLES:
        run.table(name)
    cursor.turns_of(run, 0)  # any life: the first ask sorts the turns of every life
    cursor.life_bounds(run, 0)  # likewise each life's first and last step
    agent_calls.run_tool_calls(run)
    return run


class _Discard:
    """A session client that drops what the script sends (a visit has no browser), but for
    the messages of exceptions the page showed, kept in ``errors``."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def write_forward_msg(self, msg: Any) -> None:
        """Drop ``msg``; keep an exception's type and message."""
        if msg.WhichOneof("type") == "delta" and msg.delta.WhichOneof("type") == "new_element" \
                and msg.delta.new_element.WhichOneof("type") == "exception":
            e = msg.delta.new_element.exception
            self.errors.append(f"{e.type}: {e.message}")

    @property
    def client_context(self) -> None:
        """No connection: no headers, cookies or address."""
        return None


async def visit(runtime: Any, page: str, query: str, limit: float = VISIT_LIMIT_S) -> list[str]:
    """Open a session on ``runtime``, run ``page``'s script with ``query`` as its URL's query
    string, wait until the run has finished (at most ``limit`` seconds), close the session.
    Return the exceptions the page showed. Runs on the runtime's event loop."""
    from streamlit.proto.ClientState_pb2 import ClientState

    client = _Discard()
    sid = runtime.connect_session(client=client, user_info={})
    try:
        runtime.mark_session_nonresumable(sid)
        session = runtime.get_app_session(sid)
        session.track_settling()
        session.set_run_on_save(False)
        session.request_rerun(ClientState(query_string=query, page_name=page))
        await asyncio.wait_for(session.wait_until_settled(), limit)
    finally:
        runtime.close_session(sid)
    return client.errors


def browser_connected(runtime: Any) -> bool:
    """Whether a session other than a visit's is connected (call between visits)."""
    from streamlit.runtime import RuntimeState

    return runtime.state == RuntimeState.ONE_OR_MORE_SESSIONS_CONNECTED


async def visit_all(runtime: Any, visits: list[tuple[str, str]], idle: float = IDLE_S
                    ) -> list[tuple[str, float, list[str]]]:
    """After ``idle`` seconds, make ``visits`` in order until a browser connects; return
    (page, seconds, exceptions shown) per visit made."""
    done: list[tuple[str, float, list[str]]] = []
    await asyncio.sleep(idle)
    for page, query in visits:
        if browser_connected(runtime):
            break
        t = time.perf_counter()
        errors = await visit(runtime, page, query)
        done.append((page or "runs", time.perf_counter() - t, errors))
    return done


def start_drawer() -> float:
    """Draw a one-point chart in the server (``dashboard.vega_charts.svg``), so that its engine
    (vl-convert's JavaScript runtime, 0.4 s to start in a process) is running before a page
    draws a chart there (Retargeting's rates and map); the seconds it took."""
    from dashboard.vega_charts import svg

    t = time.perf_counter()
    svg({"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}})
    return time.perf_counter() - t


def _runtime(deadline: float) -> Any:
    """Streamlit's runtime once it has started (None if it has not by ``deadline``)."""
    from streamlit.runtime import Runtime, RuntimeState

    while time.monotonic() < deadline:
        if Runtime.exists():
            rt = Runtime.instance()
            if rt.state in (RuntimeState.NO_SESSIONS_CONNECTED, RuntimeState.ONE_OR_MORE_SESSIONS_CONNECTED):
                return rt
        time.sleep(0.02)
    return None


def _say(text: str) -> None:
    print(f"mfm dashboard: {text}", file=sys.stderr, flush=True)


def _work(app_args: list[str]) -> None:
    """The thread :func:`start` runs: find the runs root and plan, wait for the runtime,
    visit, report one line."""
    t0 = time.perf_counter()
    try:
        root = runs_root(app_args)
        newest = newest_run(root)
        opened = ""
        if newest is not None:
            prepare(newest)
            opened = f"; {newest.name} opened {time.perf_counter() - t0:.2f} s after the server's start"
        opened += f"; the server's chart drawer started in {start_drawer():.2f} s"
        visits = plan(root, newest)
        rt = _runtime(time.monotonic() + START_WAIT_S)
        if rt is None:
            _say("no start-up visits: Streamlit's runtime did not start")
            return
        loop = rt._get_async_objs().eventloop
        done = asyncio.run_coroutine_threadsafe(visit_all(rt, visits), loop).result()
    except concurrent.futures.CancelledError:  # the server stopped during the visits
        return
    except Exception as e:  # a visit must never take the server down
        _say(f"start-up visits stopped: {type(e).__name__}: {e}")
        return
    made = ", ".join(f"{page} {s:.2f} s" + (f" ({'; '.join(errors)})" if errors else "") for page, s, errors in done)
    left = len(visits) - len(done)
    target = parse_qs(visits[1][1])["runs"][0] if len(visits) > 1 else "no run"
    _say(f"start-up visits ({target}): {made or 'none'}"
         + (f"; {left} left: a browser connected" if left else "")
         + f" ({time.perf_counter() - t0:.2f} s after the server's start{opened})")


def start(app_args: list[str]) -> threading.Thread:
    """Make the start-up visits in a daemon thread (started here); ``app_args``: the app's
    arguments (after ``--``), which name the runs root as the app reads them
    (:func:`dashboard.core.runs_root`)."""
    thread = threading.Thread(target=_work, args=(list(app_args),), name="mfm-warmup", daemon=True)
    thread.start()
    return thread
