"""What the user feels in the browser: the dashboard served for real (``mfm dashboard ROOT
--port P``), driven by headless Chromium through Playwright.

    python -m bench.browser ROOT RUN [--pages timeline,frames] [--repeats 10] [--first 3] [--steps 20]

Prints one JSON object (``bench.bench --only browser`` prints the same figures as lines).

**Drawn.** A page is *drawn* at the first animation frame (``requestAnimationFrame``, the
browser's clock) at which all of these hold, and keep holding for :data:`QUIET_MS` with
no new script run starting:

1. Streamlit has run the page's script since the action: the app's root element
   (``[data-testid="stApp"]``) has had its ``data-test-script-state`` attribute (the
   frontend's own script-run state) leave ``notRunning`` after the action, or (a run of a
   few ms can start and end within one frame, and React then renders only its end) the
   server has sent a websocket message since; and the attribute is ``notRunning`` now (a
   script that reruns itself, e.g. to sync the URL, is waited for: the quiet window
   restarts when a run starts);
2. nothing says it is still working: no running-status widget (``stStatusWidget``), no
   skeleton (``stSkeleton``), no element marked stale (``data-stale="true"``);
3. what it shows is painted: every Plotly chart (``stPlotlyChart``) has its ``.main-svg``,
   every Vega-Lite chart (``stVegaLiteChart``, Altair) its rendered marks (``.marks``),
   every ``<img>`` in the main area is ``complete`` (fetched and decoded, or failed: a
   broken image, ``naturalWidth`` 0, is reported as an error of the page). Data frames are not waited for: Glide draws them on a canvas
   it mounts lazily (one of the SQL page's never mounted its grid in a headless tab).

The time reported is that frame's time minus the action's: the navigation start for a
page opened by its URL (``performance.timeOrigin``: request, HTML, scripts, the websocket,
the script run, the drawing), or the ``pointerdown``/``keydown`` event's time for a click
or a key (recorded by a capturing listener installed before the page's own scripts).

**Measures**, per page of :data:`PAGES` (the run given in the URL as ``runs=RUN``, as a
link from the Runs page opens it):

- ``first``: the first visit after the server starts: a new server process (its Python
  imports included: what ``mfm dashboard`` then a first click costs), a new browser
  context (empty HTTP cache), the page opened by its URL as soon as the server's health
  check answers (``--first-after S``: S seconds later, as a person who starts the server and
  then clicks its URL; the server makes its start-up visits, ``dashboard.warmup``, only
  when no browser has connected for 2 s). The table cache (``MFM_CACHE_DIR``) is filled
  beforehand by one open of the run, as after any earlier dashboard session.
- ``link``: the same URL opened again in a new tab of the same browser, the server warm
  (a new Streamlit session: the page's ``st.cache_data`` entries and the opened run shared).
- ``click``: the page's link in the sidebar clicked from the Runs page, in one session
  (what moving between pages costs); the runs chosen stay (``dashboard.ui`` keeps them).
  For the Runs page itself: its link clicked from each of the other pages.

and the **frame step**: the Timeline page on an episode with enough frames, the step slider
focused, ``ArrowRight`` pressed: the time from the keydown to the first animation frame
at which the scrubber's frame image has a new ``src`` and is loaded (``step``), and to the
page fully drawn as above (``step_drawn``). The scrubber steps in the browser
(``dashboard.scrubber``) and tells the server the step only once the user pauses, so a
step involves no script run; the baseline app's frame is an ``st.image`` redrawn by a run.

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
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlencode

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("MFM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1440, "height": 1000}
PAGES = ("runs", "timeline", "frames", "grid", "retargeting", "steps_per_turn", "memory", "provenance", "progress",
         "echo", "sql")
QUIET_MS = 300
"""How long the drawn state must hold, with no script run starting, to count."""
TIMEOUT_S = 120.0
SLIDER = "Step (scrub the episode's frames)"

WATCH = """
(() => {
  const m = window.__mfm = {states: [], last: null, key: null, click: null, msg: null};
  const rec = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    const s = app ? app.getAttribute('data-test-script-state') : null;
    if (s !== m.last) { m.last = s; m.states.push([s, performance.now()]); }
  };
  new MutationObserver(rec).observe(document, {subtree: true, childList: true, attributes: true,
                                               attributeFilter: ['data-test-script-state']});
  const WS = window.WebSocket;
  window.WebSocket = class extends WS {
    constructor(...args) { super(...args); this.addEventListener('message', () => { m.msg = performance.now(); }); }
  };
  addEventListener('keydown', () => { m.key = performance.now(); }, true);
  addEventListener('pointerdown', () => { m.click = performance.now(); }, true);
})();
"""
"""Installed before the page's scripts: the script-run states with their times, the time of
the last websocket message from the server, of the last keydown and of the last pointerdown."""

PAINTED = """
() => {
  const app = document.querySelector('[data-testid="stApp"]');
  const state = app ? app.getAttribute('data-test-script-state') : null;
  if (state !== 'notRunning') return 'script state ' + state;
  const busy = document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-stale="true"]');
  if (busy) return 'busy: ' + (busy.getAttribute('data-testid') || 'stale element');
  for (const c of document.querySelectorAll('[data-testid="stPlotlyChart"]'))
    if (!c.querySelector('.main-svg')) return 'a Plotly chart not drawn';
  for (const c of document.querySelectorAll('[data-testid="stVegaLiteChart"]'))
    if (!c.querySelector('svg.marks g, canvas.marks')) return 'a Vega-Lite chart not drawn';
  for (const i of document.querySelectorAll('[data-testid="stMain"] img'))
    if (!i.complete) return 'an image not loaded: ' + i.src.slice(0, 80);
  return '';
}
"""
"""'' when the page is painted (conditions 1-3 of the module docstring), else why not."""

DRAWN = """
async ({since, quiet, timeout, needRun}) => {
  const m = window.__mfm;
  const painted = %s;
  const ranAfter = (t0) => m.states.some(([s, t]) => s !== 'notRunning' && s !== 'initial' && s !== null && t >= t0);
  const start = performance.now();
  return await new Promise((resolve) => {
    let ok = null;
    const tick = () => {
      const now = performance.now();
      const answered = ranAfter(since) || (m.msg !== null && m.msg >= since);
      if ((!needRun || answered) && painted() === '') {
        if (ok === null || ranAfter(ok)) ok = now;
        else if (now - ok >= quiet) {
          const done = m.states.filter(([s, t]) => s === 'notRunning' && t >= since).map(([s, t]) => t);
          const run = m.states.filter(([s, t]) => s !== 'notRunning' && s !== 'initial' && s !== null && t >= since);
          resolve({drawn: ok, script: done.length ? done[done.length - 1] : null,
                   started: run.length ? run[0][1] : null, runs: run.length});
          return;
        }
      } else ok = null;
      if (now - start > timeout) {
        resolve({timeout: true, states: m.states.slice(-8), painted: painted()});
        return;
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}
""" % PAINTED.strip()

PRELOAD = True
"""Start the dashboard through ``dashboard.serve`` (as ``mfm dashboard`` does); False: plain ``streamlit run``."""
WARM = True
"""Let ``dashboard.serve`` make its start-up visits (``dashboard.warmup``); False: ``--no-warm``."""

BIG_IMAGE = '[data-testid="stMain"] [data-testid="stColumn"] [data-testid="stImage"] img'
"""The frame of the bare-Streamlit baseline app (an ``st.image`` in a column)."""
SCRUB_IMAGE = "img.mfm-scrub-frame"
"""The frame of the Timeline's scrubber (``dashboard.scrubber``)."""

NEW_FRAME = """
async ({old, timeout, image}) => {
  const start = performance.now();
  return await new Promise((resolve) => {
    const tick = () => {
      const i = document.querySelector(image);
      if (i && i.src !== old && i.complete && i.naturalWidth > 0) { resolve({t: performance.now(), src: i.src}); return; }
      if (performance.now() - start > timeout) { resolve({timeout: true}); return; }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(root: Path, log: Path | None = None, app: Path | None = None) -> Iterator[str]:
    """The dashboard on ``root`` as ``mfm dashboard ROOT --port P`` starts it (the same
    ``python -m dashboard.serve dashboard/app.py`` command line and environment; with
    ``--no-preload``, plain ``streamlit run`` as before the preload), or ``streamlit run APP``, on a free port, with Streamlit's file watcher off (others editing the checkout
    during a benchmark made the frontend show "source file changed" for good, which is not
    what a user sees); waits until its health check answers, yields its URL, and stops the
    server's process group afterwards."""
    port = free_port()
    out = open(log, "w") if log else subprocess.DEVNULL
    how = ["dashboard.serve", *([] if WARM else ["--no-warm"])] if app is None and PRELOAD else ["streamlit", "run"]
    cmd = [sys.executable, "-m", *how, str(app or REPO / "dashboard" / "app.py"),
           "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--client.showErrorDetails", "type", "--server.fileWatcherType", "none"]
    if app is None:
        cmd += ["--", "--root", str(root)]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO,
                            env=dict(os.environ, MFM_RUNS_ROOT=str(root)))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the dashboard exited ({proc.returncode}); log: {log}")
            try:
                with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"the dashboard did not start in 180 s; log: {log}")
            time.sleep(0.1)
        yield base
    finally:
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


def page_url(base: str, page: str, params: dict[str, str]) -> str:
    return f"{base}/{'' if page == 'runs' else page}" + (f"?{urlencode(params)}" if params else "")


def _try(raw: list, errors: list, what: str, fn) -> bool:
    """Append ``fn()`` to ``raw``; a failure (not drawn in time, a lost element) is kept in
    ``errors`` and reported, and the benchmark goes on with the other measurements."""
    try:
        raw.append(fn())
        return True
    except Exception as e:  # noqa: BLE001 - any failure of one measurement is reported, not fatal
        errors.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
        print(f"bench.browser: {errors[-1]}", file=sys.stderr, flush=True)
        return False


def _wait_drawn(pg, since: float, what: str, need_run: bool = True) -> dict:
    """Wait until drawn (module docstring); ``need_run`` False: the caller has seen the
    action's effect already (a new frame), so condition 1 needs no script run observed
    (a run of a few ms can start and end within one frame, and React then renders only
    its end)."""
    r = pg.evaluate(DRAWN, {"since": since, "quiet": QUIET_MS, "timeout": TIMEOUT_S * 1000, "needRun": need_run})
    if r.get("timeout"):
        raise RuntimeError(f"{what}: not drawn in {TIMEOUT_S:.0f} s (last script states {r['states']}, "
                           f"not painted: {r['painted'] or 'it is'})")
    return r


def _errors(pg) -> list[str]:
    """The page's Streamlit exceptions, and its broken images."""
    broken = pg.evaluate("""() => [...document.querySelectorAll('[data-testid="stMain"] img')]
                                  .filter(i => i.complete && i.naturalWidth === 0).length""")
    return ([e[:200] for e in pg.locator('[data-testid="stException"]').all_inner_texts()]
            + ([f"{broken} broken image(s)"] if broken else []))


def open_by_url(pg, url: str) -> dict:
    """Open ``url`` in ``pg``; the navigation start to drawn, and its parts (ms)."""
    pg.goto(url, wait_until="commit")
    r = _wait_drawn(pg, 0.0, url)
    nav = pg.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                      " return n ? n.domContentLoadedEventEnd : null; }")
    return {"ms": r["drawn"], "script_ms": r["script"], "connect_ms": r["started"], "dom_ms": nav,
            "script_runs": r["runs"], "errors": _errors(pg)}


def open_by_click(pg, page: str) -> dict:
    """Click ``page``'s link in the sidebar; the pointerdown to drawn (ms)."""
    path = "" if page == "runs" else page
    link = pg.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').first
    if not link.count():  # the sidebar shows the first pages, the others after "View more"
        pg.locator('[data-testid="stSidebarNavViewButton"]').click()
    link.click()
    t0 = pg.evaluate("() => window.__mfm.click")
    r = _wait_drawn(pg, t0, f"click {page}")
    return {"ms": r["drawn"] - t0, "script_ms": r["script"] - t0 if r["script"] else None,
            "script_runs": r["runs"], "errors": _errors(pg)}


def frame_steps(pg, n: int, label: str = SLIDER, image: str = SCRUB_IMAGE) -> list[dict]:
    """``n`` presses of ArrowRight on the Timeline's step slider (the slider ``label``; the
    page drawn before each); per press, the keydown to the new frame (the ``image``
    selector) painted and to the page drawn (ms)."""
    slider = pg.get_by_role("slider", name=label)
    out = []
    for _ in range(n):
        slider.focus()
        old = pg.locator(image).first.get_attribute("src")
        pg.keyboard.press("ArrowRight")
        t0 = pg.evaluate("() => window.__mfm.key")
        f = pg.evaluate(NEW_FRAME, {"old": old, "timeout": TIMEOUT_S * 1000, "image": image})
        if f.get("timeout"):
            raise RuntimeError(f"the frame did not change in {TIMEOUT_S:.0f} s after ArrowRight")
        r = _wait_drawn(pg, t0, "frame step", need_run=False)
        out.append({"ms": f["t"] - t0, "drawn_ms": max(r["drawn"], f["t"]) - t0,
                    "script_ms": r["script"] - t0 if r["script"] else None})
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


BASELINE_APP = """
import numpy as np
import streamlit as st

st.set_page_config(layout="wide")
step = st.slider("Step", 0, 10_000, 0)
rng = np.random.default_rng(step)
frame = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
big = frame.repeat(5, axis=0).repeat(5, axis=1)
a, b = st.columns([2, 3])
a.image(big, width=320, caption=f"step {step}", output_format="PNG")
b.markdown(f"**Step {step}**")
"""
"""The floor under every figure: a Streamlit app that does nothing but show a slider and a
320-pixel frame image (random pixels, PNG) in columns, as the Timeline shows its frame."""


def baseline(repeats: int = 10, steps: int = 20, log_dir: Path | None = None) -> dict:
    """:data:`BASELINE_APP` served by ``streamlit run``: opened by URL ``repeats`` times (one
    warm-up visit first) and ``steps`` frame steps, measured as the dashboard's pages."""
    import tempfile

    from playwright.sync_api import sync_playwright

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        app = Path(tmp) / "baseline_app.py"
        app.write_text(BASELINE_APP, encoding="utf-8")
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            with serve(Path(tmp), log_dir / "baseline.log" if log_dir else None, app=app) as base:
                ctx = browser.new_context(viewport=VIEWPORT)
                ctx.add_init_script(WATCH)
                links = []
                for i in range(repeats + 1):
                    pg = ctx.new_page()
                    links.append(open_by_url(pg, base + "/"))
                    if i < repeats:
                        pg.close()
                out.update(_stats("baseline_link_s", [m["ms"] for m in links[1:]]))
                out.update(_stats("baseline_link_connect_s", [m["connect_ms"] for m in links[1:]], full=False))
                if steps:
                    st = frame_steps(pg, steps, label="Step", image=BIG_IMAGE)
                    out.update(_stats("baseline_frame_step_ms", [s["ms"] for s in st], 1.0))
                    out.update(_stats("baseline_frame_step_drawn_ms", [s["drawn_ms"] for s in st], 1.0, full=False))
                ctx.close()
        finally:
            browser.close()
    return out


def _fill_table_cache(run: Path) -> None:
    subprocess.run([sys.executable, "-m", "bench.opentime", str(run)], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def measure(root: Path, key: str | None, pages: tuple[str, ...] = PAGES, repeats: int = 10, first: int = 3,
            steps: int = 20, log_dir: Path | None = None, first_pages: tuple[str, ...] | None = None,
            warmup: bool = True, first_after: float = 0.0) -> dict:
    """The figures of the module docstring for the run ``root/key``: ``first`` first visits
    (each on a new server, opened ``first_after`` seconds after its health check answers) of
    each page of ``first_pages`` (default: ``pages``), after one
    unmeasured visit of each page (``warmup``) ``repeats`` opens by URL and by sidebar click
    of each page on a warm server, and ``steps`` frame steps (0: none). Seconds, except the
    frame step's ms. ``key`` None: the pages opened with no run chosen (the Runs page of a
    sweep)."""
    from playwright.sync_api import sync_playwright

    run = root / key if key else None
    if run:
        _fill_table_cache(run)
    params = page_params(run, key)
    raw: dict[str, dict[str, list]] = {p: {"first": [], "link": [], "click": [], "errors": []} for p in pages}
    out: dict = {}
    log = (lambda name: log_dir / f"{name}.log") if log_dir else (lambda name: None)

    def note(page: str, kind: str) -> None:
        if log_dir and raw[page][kind]:
            with open(log_dir / "measures.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"page": page, "kind": kind, **raw[page][kind][-1]}) + "\n")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for i in range(first):
                for page in (pages if first_pages is None else first_pages):
                    with serve(root, log(f"first_{page}_{i}")) as base:
                        time.sleep(first_after)
                        ctx = browser.new_context(viewport=VIEWPORT)
                        ctx.add_init_script(WATCH)
                        _try(raw[page]["first"], raw[page]["errors"], f"first visit {i}",
                             lambda: open_by_url(ctx.new_page(), page_url(base, page, params[page])))
                        note(page, "first")
                        ctx.close()
            with serve(root, log("warm")) as base:
                ctx = browser.new_context(viewport=VIEWPORT)
                ctx.add_init_script(WATCH)
                for page in pages if warmup else ():  # the server's caches, the browser's files
                    pg = ctx.new_page()
                    _try([], raw[page]["errors"], "warm-up", lambda: open_by_url(pg, page_url(base, page, params[page])))
                    pg.close()
                for i in range(repeats):
                    for page in pages:
                        pg = ctx.new_page()
                        _try(raw[page]["link"], raw[page]["errors"], f"link {i}",
                             lambda: open_by_url(pg, page_url(base, page, params[page])))
                        note(page, "link")
                        pg.close()
                pg = None
                for i in range(repeats):  # from the Runs page to the page and back, in one tab
                    for page in pages:
                        if page == "runs":
                            continue
                        if pg is None:
                            pg = ctx.new_page()
                            open_by_url(pg, page_url(base, "runs", params["runs"]))
                        ok = _try(raw[page]["click"], raw[page]["errors"], f"click {i}", lambda: open_by_click(pg, page))
                        note(page, "click")
                        back = raw["runs"]["click"] if "runs" in raw else []  # the Runs page's own click figure
                        if not (ok and _try(back, raw[page]["errors"], f"back {i}", lambda: open_by_click(pg, "runs"))):
                            pg.close()  # a new tab: one lost navigation does not spoil the rest
                            pg = None
                if pg is not None:
                    pg.close()
                if steps and run:
                    ep, first_step = pick_episode(run, steps + 2)
                    pg = ctx.new_page()
                    open_by_url(pg, page_url(base, "timeline", {"runs": key, "ep": ep, "step": str(first_step + 1)}))
                    st = frame_steps(pg, steps)
                    out.update(_stats("frame_step_ms", [s["ms"] for s in st], 1.0))
                    out.update(_stats("frame_step_drawn_ms", [s["drawn_ms"] for s in st], 1.0))
                    out.update(_stats("frame_step_script_ms", [s["script_ms"] for s in st], 1.0, full=False))
                    out["frame_step_episode"] = ep
                    pg.close()
                ctx.close()
        finally:
            browser.close()
    for page in pages:
        r = raw[page]
        for kind in ("first", "link", "click"):
            if r[kind]:
                out.update(_stats(f"{page}_{kind}_s", [m["ms"] for m in r[kind]]))
                out.update(_stats(f"{page}_{kind}_script_s", [m["script_ms"] for m in r[kind]], full=False))
        out.update(_stats(f"{page}_first_connect_s", [m["connect_ms"] for m in r["first"]], full=False))
        out.update(_stats(f"{page}_link_connect_s", [m["connect_ms"] for m in r["link"]], full=False))
        errors = sorted({e for kind in ("first", "link", "click") for m in r[kind] for e in m["errors"]}) + r["errors"]
        if errors:
            out[f"{page}_errors"] = "; ".join(errors)[:300]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path)
    p.add_argument("run", help="the run's folder under ROOT ('-': none, the pages as the dashboard opens)")
    p.add_argument("--pages", default=",".join(PAGES))
    p.add_argument("--repeats", type=int, default=10, help="warm opens per page and way (default 10)")
    p.add_argument("--first", type=int, default=3, help="first visits per page, each on a new server (default 3)")
    p.add_argument("--steps", type=int, default=20, help="frame steps (default 20; 0: none)")
    p.add_argument("--first-pages", help="the pages visited first (default: --pages)")
    p.add_argument("--logs", type=Path, help="a folder for the servers' logs")
    p.add_argument("--baseline", action="store_true", help="also measure the bare Streamlit app (baseline())")
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
                  tuple(a.first_pages.split(",")) if a.first_pages else None, first_after=a.first_after)
    if a.baseline:
        out.update(baseline(a.repeats, a.steps, a.logs))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
