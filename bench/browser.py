"""What the user feels in the browser: the dashboard served for real (``mfm dashboard ROOT
--port P``), driven by headless Chromium through Playwright.

    python -m bench.browser ROOT RUN [--pages timeline,frames] [--repeats 10] [--first 3] [--steps 20]
                            [--logs DIR] [--no-bare]

Prints one JSON object, and on stderr the per-page table (:func:`table`); ``bench.bench
--only browser`` prints the same figures as lines, then the table. With ``--logs DIR``,
every measure goes to ``DIR/measures.jsonl`` with ``waits``: the last reasons the page was
not yet drawn, each with its time since the action (ms).

**Drawn** (one definition, the only one). A page is *drawn* at the first animation frame
(``requestAnimationFrame``, the browser's clock) at which all of these hold, and keep
holding for :data:`QUIET_MS` with no new script run starting and no element of the main
area repainting:

1. the script is idle: Streamlit has run the page's script since the action (the app's
   root element, ``[data-testid="stApp"]``, has had its ``data-test-script-state``
   attribute, the frontend's own script-run state, leave ``notRunning`` after the action,
   or, since a run of a few ms can start and end within one frame and React then renders
   only its end, the server has sent a websocket message since), and the attribute is
   ``notRunning`` now (a script that reruns itself, e.g. to sync the URL, is waited for:
   the quiet window restarts when a run starts);
2. nothing says it is still working: no running-status widget (``stStatusWidget``), no
   skeleton (``stSkeleton``: an element whose code is still loading), no element marked
   stale (``data-stale="true"``);
3. every element of the main area (``stMain``) that is shown (``checkVisibility``: not in
   a closed expander, whose content the browser skips, nor in a hidden tab) has mounted and painted: every data table (``st.dataframe``:
   ``stDataFrame``, a Glide data grid drawn on a canvas it mounts late) has its grid canvas
   (``data-grid-canvas``) present, with a nonzero backing store and the pixel size Glide
   gives it when it draws; every Vega-Lite chart (``stVegaLiteChart``, Altair) its
   rendered marks with a nonzero box: ``svg.marks`` with its groups, or a ``canvas.marks``
   that Vega has drawn into; and every other canvas shown (a component's, such as a page's
   own drawing) has been drawn into too: a 2D-context draw call on it seen (Vega creates
   its canvas, with its size, before its first draw, Streamlit itself switches a chart of
   over 2,000 rows a layer to the canvas renderer, and a component may draw late; the
   canvases within a data table, Glide's, are judged as above);
   every Plotly chart its ``.main-svg``; every ``<img>`` is ``complete`` (fetched and
   decoded, or failed: a broken image, ``naturalWidth`` 0, is reported as an error of the
   page);
4. the main area has stopped repainting: a change to a grid canvas's size, to a Vega
   chart's SVG or a draw call on a canvas of the main area outside a data table (marks
   redrawn, e.g. when a chart's data arrive after the first empty render), a grid canvas
   added, or an image's ``load`` restarts the quiet window. Draws on Glide's own canvases
   (within ``stDataFrame``) and on canvases not in the page (the buffers Glide, or any
   script, draws into off the document) do not. What Glide writes *inside* a grid canvas (its accessibility table, fallback content that is
   never painted, ~300 ms after the grid is drawn) is not a repaint and does not count.

The time reported is that frame's time minus the action's: the navigation start for a
page opened by its URL (``performance.timeOrigin``: request, HTML, scripts, the websocket,
the script run, the drawing), or the ``pointerdown``/``keydown`` event's time for a click
or a key (recorded by a capturing listener installed before the page's own scripts).
With each time, what was waited for: the shown ``tables`` (``stDataFrame``, ``stTable``),
``charts`` (Vega-Lite, Plotly) and ``images`` at the drawn frame, and when the last grid
canvas, chart and image changed (``tables_ms``, ``charts_ms``, ``images_ms``; never after
the drawn time).

**Measures**, per page of :data:`PAGES` (the run given in the URL as ``runs=RUN``, as a
link from the Runs page opens it), and for the bare Streamlit app (``bench/bare_app.py``:
two pages, each one Altair chart and one image) in the same sitting, alternated with the
pages (A/B: a bare measure after each page's), so that every figure has the framework's
floor beside it (``*_x_bare``: the page's median over the bare app's, same kind):

- ``first``: the first visit after the server starts: a new server process (its Python
  imports included: what ``mfm dashboard`` then a first click costs; the bare app started
  the same way, ``dashboard.serve --no-warm``: the same libraries imported before its
  health check answers, no start-up visits), a new browser context (empty HTTP cache), the page opened by
  its URL as soon as the server's health check answers (``--first-after S``: S seconds
  later, as a person who starts the server and then clicks its URL; the server makes its
  start-up visits, ``dashboard.warmup``, only when no browser has connected for 2 s). The
  table cache (``MFM_CACHE_DIR``) is filled beforehand by one open of the run, as after
  any earlier dashboard session. In each round every page, then the bare app.
- ``link``: the same URL opened again in a new tab of the same browser, the server warm
  (a new Streamlit session: the page's ``st.cache_data`` entries and the opened run shared).
- ``click``: the page's link in the sidebar clicked from the Runs page, in one session
  (what moving between pages costs); the runs chosen stay (``dashboard.ui`` keeps them).
  For the Runs page itself: its link clicked from each of the other pages. The bare app:
  its second page's link clicked from its first, and back.

and the **frame step**: the Timeline page on an episode with enough frames, the step slider
focused, ``ArrowRight`` pressed: the time from the keydown to the first animation frame
at which the scrubber's frame image has a new ``src`` and is loaded (``step``), and to the
page fully drawn as above (``step_drawn``). The scrubber steps in the browser
(``dashboard.scrubber``) and tells the server the step only once the user pauses, so a
step involves no script run; the bare app's frame is an ``st.image`` redrawn by a run
(its steps alternate with the Timeline's).

The machine's load (``os.getloadavg()``, one minute) is read before each measure and
reported beside each figure (``*_load_min``, ``*_load_max``); after the warm visits, the
warm dashboard server's resident memory (``server_main_rss_mb``, its peak ``server_hwm_mb``,
and ``server_rss_mb`` with its worker processes).

Besides, for each measurement, when the script finished (``script``: the action to the
last ``notRunning``) so that the time splits into the server's part (sending the action,
running the script, sending the elements) and the browser's (rendering and painting);
for a URL, also the navigation timing (``dom``: DOMContentLoaded) and when the first
script run started (``connect``: static files, scripts, websocket).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlencode

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("MFM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1440, "height": 1000}
PAGES = ("runs", "search", "notes", "timeline", "turns", "failures", "frames", "grid", "retargeting",
         "steps_per_turn", "memory", "provenance", "progress", "echo", "sql")
"""Every page of the dashboard (``dashboard.ui.PAGE_SPECS``), in its sidebar's order."""
BARE = "bare"
"""The bare Streamlit app's name among the measured pages."""
BARE_APP = REPO / "bench" / "bare_app.py"
KINDS = ("first", "link", "click")
QUIET_MS = 300
"""How long the drawn state must hold, with no script run starting and nothing repainting, to count."""
TIMEOUT_S = 120.0
SLIDER = "Step (scrub the episode's frames)"

WATCH = """
(() => {
  const m = window.__mfm = {states: [], last: null, key: null, click: null, msg: null,
                            table: null, chart: null, img: null};
  const rec = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    const s = app ? app.getAttribute('data-test-script-state') : null;
    if (s !== m.last) { m.last = s; m.states.push([s, performance.now()]); }
  };
  new MutationObserver(rec).observe(document, {subtree: true, childList: true, attributes: true,
                                               attributeFilter: ['data-test-script-state']});
  new MutationObserver((changes) => {
    const now = performance.now();
    for (const c of changes) {
      const t = c.target.nodeType === 1 ? c.target : c.target.parentElement;
      if (!t || !t.closest) continue;
      const grid = 'canvas[data-testid="data-grid-canvas"]';
      if (c.type === 'attributes' && t.matches(grid)) m.table = now;
      else if (c.type === 'childList' && !t.matches(grid)
               && [...c.addedNodes].some((n) => n.nodeType === 1 && (n.matches(grid) || n.querySelector(grid)))) m.table = now;
      else if (t.closest('[data-testid="stVegaLiteChart"] svg.marks')) m.chart = now;
    }
  }).observe(document, {subtree: true, childList: true, attributes: true,
                        attributeFilter: ['style', 'width', 'height', 'd', 'transform', 'points']});
  const C2D = CanvasRenderingContext2D.prototype;
  for (const name of ['fill', 'stroke', 'fillRect', 'strokeRect', 'fillText', 'drawImage']) {
    const draw = C2D[name];
    C2D[name] = function (...args) {
      const c = this.canvas;
      if (c && c.closest) {
        c.__mfmDrawn = true;
        if (c.isConnected && c.closest('[data-testid="stMain"]') && !c.closest('[data-testid="stDataFrame"]'))
          m.chart = performance.now();
      }
      return draw.apply(this, args);
    };
  }
  document.addEventListener('load', (e) => { if (e.target && e.target.tagName === 'IMG') m.img = performance.now(); }, true);
  const WS = window.WebSocket;
  window.WebSocket = class extends WS {
    constructor(...args) { super(...args); this.addEventListener('message', () => { m.msg = performance.now(); }); }
  };
  addEventListener('keydown', () => { m.key = performance.now(); }, true);
  addEventListener('pointerdown', () => { m.click = performance.now(); }, true);
})();
"""
"""Installed before the page's scripts: the script-run states with their times, the time of
the last websocket message from the server, of the last keydown and pointerdown, and of the
last change to a data grid's canvas, to a Vega chart's SVG marks or draw call on any other
canvas (which it flags as drawn), and of the last image loaded."""

PAINTED = """
() => {
  const app = document.querySelector('[data-testid="stApp"]');
  const state = app ? app.getAttribute('data-test-script-state') : null;
  if (state !== 'notRunning') return 'script state ' + state;
  const busy = document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-stale="true"]');
  if (busy) return 'busy: ' + (busy.getAttribute('data-testid') || 'stale element');
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main) return 'no main area';
  const shown = (e) => e.checkVisibility({visibilityProperty: true});
  for (const d of main.querySelectorAll('[data-testid="stDataFrame"]')) {
    if (!shown(d)) continue;
    const c = d.querySelector('canvas[data-testid="data-grid-canvas"]');
    if (!c) return 'a data table not mounted';
    if (!c.style.width || c.width === 0 || c.height === 0) return 'a data table not drawn';
  }
  for (const c of main.querySelectorAll('[data-testid="stVegaLiteChart"]')) {
    if (!shown(c)) continue;
    const k = c.querySelector('svg.marks, canvas.marks');
    if (!k || (k.tagName === 'svg' ? !k.querySelector('g') : !k.__mfmDrawn)) return 'a Vega-Lite chart not drawn';
    const r = k.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return 'a Vega-Lite chart of no size';
  }
  for (const c of main.querySelectorAll('canvas'))
    if (!c.closest('[data-testid="stDataFrame"]') && shown(c) && !c.__mfmDrawn) return 'a canvas not drawn';
  for (const c of main.querySelectorAll('[data-testid="stPlotlyChart"]'))
    if (shown(c) && !c.querySelector('.main-svg')) return 'a Plotly chart not drawn';
  for (const i of main.querySelectorAll('img'))
    if (shown(i) && !i.complete) return 'an image not loaded: ' + i.src.slice(0, 80);
  return '';
}
"""
"""'' when the page is painted (conditions 1-3 of the module docstring), else why not."""

COUNT = """
() => {
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main) return {tables: 0, grids: 0, charts: 0, images: 0};
  const n = (sel) => [...main.querySelectorAll(sel)].filter((e) => e.checkVisibility({visibilityProperty: true})).length;
  return {tables: n('[data-testid="stDataFrame"], [data-testid="stTable"]'), grids: n('[data-testid="stDataFrame"]'),
          charts: n('[data-testid="stVegaLiteChart"], [data-testid="stPlotlyChart"]'), images: n('img')};
}
"""
"""The shown tables (``grids``: those of them that are Glide data grids, drawn on a canvas),
charts and images of the main area (what a drawn page waited for)."""

ARM = """
({event, quiet, timeout, needRun, image, old}) => {
  const m = window.__mfm;
  const painted = %s;
  const count = %s;
  const ranAfter = (t0) => m.states.some(([s, t]) => s !== 'notRunning' && s !== 'initial' && s !== null && t >= t0);
  const changed = () => Math.max(m.table ?? -1, m.chart ?? -1, m.img ?? -1);
  const armed = performance.now();
  m.result = new Promise((resolve) => {
    let ok = null;
    let why = null;
    let frame = null;
    const waits = [];
    const tick = () => {
      const now = performance.now();
      const since = event === null ? 0 : (m[event] !== null && m[event] >= armed ? m[event] : null);
      if (since !== null && image && frame === null) {
        const i = document.querySelector(image);
        if (i && i.src !== old && i.complete && i.naturalWidth > 0) frame = now;
      }
      if (since !== null && (!image || frame !== null)) {
        const answered = ranAfter(since) || (m.msg !== null && m.msg >= since);
        const p = painted();
        const reason = !needRun || answered ? (p || (ok === null ? '' : ranAfter(ok) ? 'a new script run'
                                                     : changed() >= ok ? 'repainting' : '')) : 'no script run yet';
        if (reason !== why) { why = reason; waits.push([now - since, reason]); }
        if ((!needRun || answered) && p === '') {
          if (ok === null || ranAfter(ok) || changed() >= ok) ok = now;
          else if (now - ok >= quiet) {
            const done = m.states.filter(([s, t]) => s === 'notRunning' && t >= since).map(([s, t]) => t);
            const run = m.states.filter(([s, t]) => s !== 'notRunning' && s !== 'initial' && s !== null && t >= since);
            const after = (t) => (t !== null && t >= since ? t : null);
            resolve({since, drawn: ok, frame, script: done.length ? done[done.length - 1] : null,
                     started: run.length ? run[0][1] : null, runs: run.length, ...count(),
                     table: after(m.table), chart: after(m.chart), img: after(m.img), waits: waits.slice(-12)});
            return;
          }
        } else ok = null;
      }
      if (now - armed > timeout) {
        resolve({timeout: true, since, frame, states: m.states.slice(-8), painted: painted()});
        return;
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}
""" % (PAINTED.strip(), COUNT.strip())
"""Started before the action (a page opened by its URL: from the init script, at the
document's start), so that the first frame after the action is seen, however slow the
round trip from this process to the browser: watches every animation frame, from the
action (``event``: the last ``click`` or ``key`` after arming; None: the navigation start)
until drawn (module docstring), or with ``image`` until that image has a new ``src``
(not ``old``), loaded, and then drawn; ``window.__mfm.result`` is its promise."""

WATCH = WATCH.replace("})();", "  m.arm = %s;\n  m.arm({event: null, quiet: %d, timeout: %d, needRun: true});\n})();"
                      % (ARM.strip(), QUIET_MS, TIMEOUT_S * 1000), 1)

PRELOAD = True
"""Start the dashboard through ``dashboard.serve`` (as ``mfm dashboard`` does); False: plain ``streamlit run``."""
WARM = True
"""Let ``dashboard.serve`` make its start-up visits (``dashboard.warmup``); False: ``--no-warm``."""

BIG_IMAGE = '[data-testid="stMain"] [data-testid="stColumn"] [data-testid="stImage"] img'
"""The frame of the bare app (an ``st.image`` in a column)."""
SCRUB_IMAGE = "img.mfm-scrub-frame"
"""The frame of the Timeline's scrubber (``dashboard.scrubber``)."""

SERVERS: dict[str, int] = {}
"""The process id of each server :func:`serve` is running, by its URL."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(root: Path, log: Path | None = None, app: Path | None = None, repo: Path = REPO,
          env: dict[str, str] | None = None) -> Iterator[str]:
    """The dashboard on ``root`` as ``mfm dashboard ROOT --port P`` starts it (the same
    ``python -m dashboard.serve dashboard/app.py`` command line and environment; with
    ``--no-preload``, plain ``streamlit run`` as before the preload), or ``APP`` (the bare
    app) by the same command with no start-up visits (``--no-warm``: the same libraries
    imported before the server starts, so that a first visit compares the pages, not the
    imports), on a free port, with Streamlit's file watcher off (others editing the checkout
    during a benchmark made the frontend show "source file changed" for good, which is not
    what a user sees); waits until its health check answers, yields its URL, and stops the
    server's process group afterwards. ``repo``: the checkout whose dashboard is served (an
    A/B of two checkouts, ``bench.ab``); ``env``: variables added to the server's environment."""
    port = free_port()
    out = open(log, "w") if log else subprocess.DEVNULL
    how = (["dashboard.serve", *([] if WARM and app is None else ["--no-warm"])] if PRELOAD
           else ["streamlit", "run"])
    cmd = [sys.executable, "-m", *how, str(app or repo / "dashboard" / "app.py"),
           "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--client.showErrorDetails", "type", "--server.fileWatcherType", "none"]
    if app is None:
        cmd += ["--", "--root", str(root)]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=repo,
                            env=dict(os.environ, MFM_RUNS_ROOT=str(root), **(env or {})))
    base = f"http://127.0.0.1:{port}"
    SERVERS[base] = proc.pid
    try:
        deadline = time.time() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited ({proc.returncode}); log: {log}")
            try:
                with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"the server did not start in 180 s; log: {log}")
            time.sleep(0.1)
        yield base
    finally:
        SERVERS.pop(base, None)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log:
            out.close()


def server_memory_mb(base: str) -> dict[str, float]:
    """Resident memory of the server at ``base`` (:func:`serve`), in MB: VmRSS summed over its
    process group (the server and its SQL worker processes) now, the server process's own
    VmRSS now and its peak (VmHWM)."""
    pid = SERVERS[base]
    rss = main = hwm = 0.0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pid:  # the process group id
                continue
            for line in (d / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) / 1024
                    main = int(line.split()[1]) / 1024 if int(d.name) == pid else main
                elif line.startswith("VmHWM:") and int(d.name) == pid:
                    hwm = int(line.split()[1]) / 1024
        except (OSError, ValueError, IndexError):
            continue
    return {"server_rss_mb": rss, "server_main_rss_mb": main, "server_hwm_mb": hwm}


def page_url(base: str, page: str, params: dict[str, str]) -> str:
    return f"{base}/{'' if page in ('runs', BARE) else page}" + (f"?{urlencode(params)}" if params else "")


def _try(raw: list, errors: list, what: str, fn: Callable[[], dict]) -> bool:
    """Append ``fn()`` to ``raw``, with the machine's load (one-minute average) read just
    before; a failure (not drawn in time, a lost element) is kept in ``errors`` and
    reported, and the benchmark goes on with the other measurements."""
    load = os.getloadavg()[0]
    try:
        raw.append(dict(fn(), load=load))
        return True
    except Exception as e:  # noqa: BLE001 - any failure of one measurement is reported, not fatal
        errors.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
        print(f"bench.browser: {errors[-1]}", file=sys.stderr, flush=True)
        return False


def _arm(pg, event: str, need_run: bool = True, image: str | None = None, old: str | None = None) -> None:
    """Start watching ``pg``'s frames (:data:`ARM`) before the action ``event`` (``click``,
    ``key``); ``need_run`` False: the caller waits for a new frame ``image`` (not ``old``)
    instead, so condition 1 needs no script run observed (a run of a few ms can start and
    end within one frame, and React then renders only its end)."""
    pg.evaluate("(a) => { window.__mfm.arm(a); }", {"event": event, "quiet": QUIET_MS, "timeout": TIMEOUT_S * 1000,
                                                    "needRun": need_run, "image": image, "old": old})


def _wait_drawn(pg, what: str) -> dict:
    """Wait for the watch started by :func:`_arm` (or, for a URL, by the init script) to
    see the page drawn (module docstring)."""
    r = pg.evaluate("() => window.__mfm.result")
    if r.get("timeout"):
        if r.get("since") is None:
            raise RuntimeError(f"{what}: the action was not seen in {TIMEOUT_S:.0f} s")
        if "frame" in r and r["frame"] is None and what == "frame step":
            raise RuntimeError(f"the frame did not change in {TIMEOUT_S:.0f} s after ArrowRight")
        raise RuntimeError(f"{what}: not drawn in {TIMEOUT_S:.0f} s (last script states {r['states']}, "
                           f"not painted: {r['painted'] or 'it is'})")
    return r


def _errors(pg) -> list[str]:
    """The page's Streamlit exceptions, and its broken images."""
    broken = pg.evaluate("""() => [...document.querySelectorAll('[data-testid="stMain"] img')]
                                  .filter(i => i.complete && i.naturalWidth === 0).length""")
    return ([e[:200] for e in pg.locator('[data-testid="stException"]').all_inner_texts()]
            + ([f"{broken} broken image(s)"] if broken else []))


def _figure(r: dict, t0: float) -> dict:
    """What :func:`_wait_drawn` saw, as times (ms) since the action at ``t0``."""
    rel = (lambda t: None if t is None else t - t0)
    return {"ms": r["drawn"] - t0, "script_ms": rel(r["script"]), "script_runs": r["runs"],
            "tables": r["tables"], "grids": r["grids"], "charts": r["charts"], "images": r["images"],
            "tables_ms": rel(r["table"]), "charts_ms": rel(r["chart"]), "images_ms": rel(r["img"]),
            "waits": [[round(t, 1), why] for t, why in r["waits"]]}


def open_by_url(pg, url: str) -> dict:
    """Open ``url`` in ``pg``; the navigation start to drawn, and its parts (ms)."""
    pg.bring_to_front()
    pg.goto(url, wait_until="commit")
    r = _wait_drawn(pg, url)
    nav = pg.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                      " return n ? n.domContentLoadedEventEnd : null; }")
    return {**_figure(r, 0.0), "connect_ms": r["started"], "dom_ms": nav, "errors": _errors(pg)}


def open_by_click(pg, page: str) -> dict:
    """Click ``page``'s link in the sidebar (``runs`` or the bare app's ``one``: the app's
    default page); the pointerdown to drawn (ms)."""
    pg.bring_to_front()  # a tab behind another gets its frames and timers once a second
    path = "" if page in ("runs", "one") else page
    link = pg.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').first
    if not link.count():  # the sidebar shows the first pages, the others after "View more"
        pg.locator('[data-testid="stSidebarNavViewButton"]').click()
    _arm(pg, "click")
    link.click()
    r = _wait_drawn(pg, f"click {page}")
    return {**_figure(r, r["since"]), "errors": _errors(pg)}


def frame_steps(pg, n: int, label: str = SLIDER, image: str = SCRUB_IMAGE) -> list[dict]:
    """``n`` presses of ArrowRight on the Timeline's step slider (the slider ``label``; the
    page drawn before each); per press, the keydown to the new frame (the ``image``
    selector) painted and to the page drawn (ms)."""
    pg.bring_to_front()
    slider = pg.get_by_role("slider", name=label)
    out = []
    for _ in range(n):
        slider.focus()
        old = pg.locator(image).first.get_attribute("src")
        _arm(pg, "key", need_run=False, image=image, old=old)
        pg.keyboard.press("ArrowRight")
        r = _wait_drawn(pg, "frame step")
        t0 = r["since"]
        out.append({"ms": r["frame"] - t0, "drawn_ms": r["drawn"] - t0,
                    "script_ms": r["script"] - t0 if r["script"] else None, "load": os.getloadavg()[0]})
    return out


def _stats(prefix: str, xs: list[float], scale: float = 1000.0, full: bool = True) -> dict:
    """Median, and with ``full`` p95 (linear interpolation), min and max, in seconds
    (``scale`` ms per unit)."""
    xs = [x / scale for x in xs if x is not None]
    if not xs:
        return {}
    out = {f"{prefix}_median": statistics.median(xs)}
    if full:
        out.update({f"{prefix}_p95": float(np.percentile(xs, 95)), f"{prefix}_min": min(xs), f"{prefix}_max": max(xs)})
    return out


def _load(prefix: str, ms: list[dict]) -> dict:
    """The load (one-minute average) read before the measures ``ms``: min and max."""
    loads = [m["load"] for m in ms if m.get("load") is not None]
    return {f"{prefix}_load_min": min(loads), f"{prefix}_load_max": max(loads)} if loads else {}


def pick_episode(run: Path, frames: int) -> tuple[str, int]:
    """An episode near the middle of ``run`` with at least ``frames`` frames (else the
    longest), and its first step."""
    from loaders import open_run

    e = open_run(run).episodes()
    e = e[e["frames"] > 0].reset_index(drop=True)
    ok = e[e["frames"] >= frames]
    if len(ok):
        row = ok.iloc[int(np.argmin(np.abs(ok["first_step"].to_numpy() - e["first_step"].median())))]
    else:
        row = e.loc[e["frames"].idxmax()]
    return str(row["id"]), int(row["first_step"])


def page_params(run: Path | None, key: str | None) -> dict[str, dict[str, str]]:
    """The URL parameters each page is opened with: the run (none when ``key`` is None:
    the Runs page as the dashboard opens); for Frames two frames to compare (a quarter and
    half-way through the run)."""
    if key is None:
        return {p: {} for p in PAGES}
    from loaders import open_run

    steps = open_run(run).steps()["step"].to_numpy()
    a, b = int(steps[len(steps) // 4]), int(steps[len(steps) // 2])
    out = {p: {"runs": key} for p in PAGES}
    out["frames"] = {"runs": key, "frames": f"{key}:{a},{key}:{b}"}
    return out


def _fill_table_cache(run: Path) -> None:
    subprocess.run([sys.executable, "-m", "bench.opentime", str(run)], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def measure(root: Path, key: str | None, pages: tuple[str, ...] = PAGES, repeats: int = 10, first: int = 3,
            steps: int = 20, log_dir: Path | None = None, first_pages: tuple[str, ...] | None = None,
            warmup: bool = True, first_after: float = 0.0, bare: bool = True) -> dict:
    """The figures of the module docstring for the run ``root/key``: ``first`` rounds of first
    visits (each on a new server, opened ``first_after`` seconds after its health check
    answers) of each page of ``first_pages`` (default: ``pages``) and of the bare app; after
    one unmeasured visit of each page (``warmup``), ``repeats`` opens by URL and by sidebar
    click of each page on a warm server, each followed by the bare app's; and ``steps`` frame
    steps (0: none), alternating with the bare app's. Seconds, except the frame step's ms.
    ``key`` None: the pages opened with no run chosen (the Runs page of a sweep). ``bare``
    False: no bare app (no ratios)."""
    from playwright.sync_api import sync_playwright

    run = root / key if key else None
    if run:
        _fill_table_cache(run)
    params = dict(page_params(run, key), **{BARE: {}})
    names = (*pages, *((BARE,) if bare else ()))
    raw: dict[str, dict[str, list]] = {p: {"first": [], "link": [], "click": [], "errors": []} for p in names}
    out: dict = {}
    log = (lambda name: log_dir / f"{name}.log") if log_dir else (lambda name: None)

    def note(page: str, kind: str) -> None:
        if log_dir and page in raw and raw[page][kind]:
            with open(log_dir / "measures.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"page": page, "kind": kind, **raw[page][kind][-1]}) + "\n")

    def visit(ctx, base: str, page: str, kind: str, what: str) -> None:
        pg = ctx.new_page()
        _try(raw[page][kind], raw[page]["errors"], what, lambda: open_by_url(pg, page_url(base, page, params[page])))
        note(page, kind)
        pg.close()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            firsts = pages if first_pages is None else first_pages
            for i in range(first):
                for page in (*firsts, *((BARE,) if bare and firsts else ())):
                    with serve(root, log(f"first_{page}_{i}"), app=BARE_APP if page == BARE else None) as base:
                        time.sleep(first_after)
                        ctx = browser.new_context(viewport=VIEWPORT)
                        ctx.add_init_script(WATCH)
                        visit(ctx, base, page, "first", f"first visit {i}")
                        ctx.close()
            with serve(root, log("warm")) as base, \
                    (serve(root, log("bare"), app=BARE_APP) if bare else nullcontext(None)) as bare_base:
                where = {**{p: base for p in PAGES}, BARE: bare_base}
                ctx = browser.new_context(viewport=VIEWPORT)
                ctx.add_init_script(WATCH)
                for page in names if warmup else ():  # the server's caches, the browser's files
                    pg = ctx.new_page()
                    _try([], raw[page]["errors"], "warm-up",
                         lambda: open_by_url(pg, page_url(where[page], page, params[page])))
                    pg.close()
                for i in range(repeats):
                    for page in pages:
                        visit(ctx, base, page, "link", f"link {i}")
                        if bare:
                            visit(ctx, bare_base, BARE, "link", f"link {i}")
                tabs: dict[str, object] = {}

                def tab(app: str):
                    """The tab moving between the pages of ``app`` (opened at its first page)."""
                    if tabs.get(app) is None:
                        tabs[app] = ctx.new_page()
                        open_by_url(tabs[app], page_url(where[app], app, params[app]))
                    return tabs[app]

                def there_and_back(app: str, page: str, home: str, back: list, errors: list, i: int) -> None:
                    """Click ``page`` from ``home`` and back in ``app``'s tab; a lost navigation
                    closes the tab (a new one next time: one loss does not spoil the rest)."""
                    pg = tab(app)
                    ok = _try(raw[app if app == BARE else page]["click"], errors, f"click {i}",
                              lambda: open_by_click(pg, page))
                    note(app if app == BARE else page, "click")
                    if ok and _try(back, errors, f"back {i}", lambda: open_by_click(pg, home)):
                        note(app if app == BARE else "runs", "click")
                    else:
                        pg.close()
                        tabs[app] = None

                for i in range(repeats):  # from the Runs page to the page and back, in one tab
                    for page in pages:
                        if page == "runs":
                            continue
                        back = raw["runs"]["click"] if "runs" in raw else []  # the Runs page's own click figure
                        there_and_back("runs", page, "runs", back, raw[page]["errors"], i)
                        if bare:
                            there_and_back(BARE, "two", "one", raw[BARE]["click"], raw[BARE]["errors"], i)
                for pg in tabs.values():
                    if pg is not None:
                        pg.close()
                out.update(server_memory_mb(base))
                if steps and run:
                    ep, first_step = pick_episode(run, steps + 2)
                    pg = ctx.new_page()
                    open_by_url(pg, page_url(base, "timeline", {"runs": key, "ep": ep, "step": str(first_step + 1)}))
                    bpg = None
                    if bare:
                        bpg = ctx.new_page()
                        open_by_url(bpg, page_url(bare_base, BARE, {}))
                    st: list[dict] = []
                    bst: list[dict] = []
                    for _ in range(steps):  # alternating: one step of the Timeline, one of the bare app
                        st += frame_steps(pg, 1)
                        if bpg is not None:
                            bst += frame_steps(bpg, 1, label="Step", image=BIG_IMAGE)
                    out.update(_stats("frame_step_ms", [s["ms"] for s in st], 1.0))
                    out.update(_stats("frame_step_drawn_ms", [s["drawn_ms"] for s in st], 1.0))
                    out.update(_stats("frame_step_script_ms", [s["script_ms"] for s in st], 1.0, full=False))
                    out.update(_load("frame_step", st))
                    out["frame_step_episode"] = ep
                    if bst:
                        out.update(_stats("bare_frame_step_ms", [s["ms"] for s in bst], 1.0))
                        out.update(_stats("bare_frame_step_drawn_ms", [s["drawn_ms"] for s in bst], 1.0, full=False))
                        out["frame_step_x_bare"] = out["frame_step_ms_median"] / out["bare_frame_step_ms_median"]
                    pg.close()
                    if bpg is not None:
                        bpg.close()
                ctx.close()
        finally:
            browser.close()
    loads = [m["load"] for r in raw.values() for kind in KINDS for m in r[kind]]
    if loads:
        out.update({"load_min": min(loads), "load_max": max(loads)})
    for page in names:
        r = raw[page]
        for kind in KINDS:
            if r[kind]:
                out.update(_stats(f"{page}_{kind}_s", [m["ms"] for m in r[kind]]))
                out.update(_stats(f"{page}_{kind}_script_s", [m["script_ms"] for m in r[kind]], full=False))
                out.update(_load(f"{page}_{kind}", r[kind]))
                if page != BARE and bare and raw[BARE][kind]:
                    out[f"{page}_{kind}_x_bare"] = (out[f"{page}_{kind}_s_median"]
                                                    / statistics.median(m["ms"] / 1000 for m in raw[BARE][kind]))
        out.update(_stats(f"{page}_first_connect_s", [m["connect_ms"] for m in r["first"]], full=False))
        out.update(_stats(f"{page}_link_connect_s", [m["connect_ms"] for m in r["link"]], full=False))
        seen = [m for kind in KINDS for m in r[kind]]
        for what in ("tables", "charts", "images"):
            if seen:
                out[f"{page}_{what}"] = max(m[what] for m in seen)
        errors = sorted({e for m in seen for e in m["errors"]}) + r["errors"]
        if errors:
            out[f"{page}_errors"] = "; ".join(errors)[:300]
    return out


def _cell(out: dict, page: str, kind: str) -> str:
    """One cell of :func:`table`: median (p95) seconds and the ratio to the bare app."""
    m = out.get(f"{page}_{kind}_s_median")
    if m is None:
        return ""
    x = out.get(f"{page}_{kind}_x_bare")
    return f"{m:.2f} ({out[f'{page}_{kind}_s_p95']:.2f})" + (f" {x:.1f}×" if x is not None else "")


def table(out: dict, title: str = "") -> str:
    """The figures of :func:`measure` as a Markdown table: per page, median (p95) seconds and
    the ratio to the bare app's median, for a click, a link and a first visit, what the page
    drew (tables / charts / images), and the load during each kind of measure."""
    names = [p for p in (*PAGES, BARE) if any(f"{p}_{k}_s_median" in out for k in KINDS)]
    loads = ", ".join(f"{k} {min(out[f'{p}_{k}_load_min'] for p in names if f'{p}_{k}_load_min' in out):.1f}–"
                      f"{max(out[f'{p}_{k}_load_max'] for p in names if f'{p}_{k}_load_max' in out):.1f}"
                      for k in ("click", "link", "first") if any(f"{p}_{k}_load_min" in out for p in names))
    lines = [f"{title}load (one-minute average) {out.get('load_min', 0):.1f}–{out.get('load_max', 0):.1f}"
             + (f" ({loads})" if loads else ""),
             "", "| page | tables / charts / images | click (× bare) | link (× bare) | first visit (× bare) |",
             "| --- | --- | --- | --- | --- |"]
    for p in names:
        drawn = "/".join(str(out.get(f"{p}_{w}", "")) for w in ("tables", "charts", "images"))
        lines.append(f"| {'bare Streamlit app' if p == BARE else p} | {drawn} | "
                     + " | ".join(_cell(out, p, k) for k in ("click", "link", "first")) + " |")
    if "frame_step_ms_median" in out:
        lines += ["", f"frame step {out['frame_step_ms_median']:.1f} ms (p95 {out['frame_step_ms_p95']:.1f})"
                  + (f", bare app {out['bare_frame_step_ms_median']:.1f} ms, {out['frame_step_x_bare']:.2f}× bare"
                     if "frame_step_x_bare" in out else "")]
    if "server_rss_mb" in out:
        lines.append(f"warm server after every page: {out['server_main_rss_mb']:.0f} MB resident "
                     f"(peak {out['server_hwm_mb']:.0f} MB; {out['server_rss_mb']:.0f} MB with its worker processes)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path)
    p.add_argument("run", help="the run's folder under ROOT ('-': none, the pages as the dashboard opens)")
    p.add_argument("--pages", default=",".join(PAGES))
    p.add_argument("--repeats", type=int, default=10, help="warm opens per page and way (default 10)")
    p.add_argument("--first", type=int, default=3, help="first visits per page, each on a new server (default 3)")
    p.add_argument("--steps", type=int, default=20, help="frame steps (default 20; 0: none)")
    p.add_argument("--first-pages", help="the pages visited first (default: --pages)")
    p.add_argument("--logs", type=Path, help="a folder for the servers' logs and every measure (measures.jsonl)")
    p.add_argument("--no-bare", action="store_true", help="leave out the bare Streamlit app (bench/bare_app.py)")
    p.add_argument("--no-preload", action="store_true",
                   help="start the dashboard with plain `streamlit run` (as before dashboard.serve)")
    p.add_argument("--no-warm", action="store_true", help="start the dashboard without its start-up visits")
    p.add_argument("--first-after", type=float, default=0.0,
                   help="seconds between a new server's health check and its first visit (default 0)")
    a = p.parse_args()
    global PRELOAD, WARM
    PRELOAD, WARM = not a.no_preload, not a.no_warm
    pages = tuple(a.pages.split(","))
    if set(pages) - set(PAGES):
        p.error(f"unknown page(s) {', '.join(sorted(set(pages) - set(PAGES)))}")
    if a.logs:
        a.logs.mkdir(parents=True, exist_ok=True)
    out = measure(a.root.resolve(), None if a.run == "-" else a.run, pages, a.repeats, a.first, a.steps, a.logs,
                  tuple(a.first_pages.split(",")) if a.first_pages else None, first_after=a.first_after,
                  bare=not a.no_bare)
    print(json.dumps(out))
    print(table(out), file=sys.stderr)


if __name__ == "__main__":
    main()
