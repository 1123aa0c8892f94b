"""A/B of a page's click between checkouts, beside the bare Streamlit app, in one sitting.

    python -m bench.ab ROOT RUN --page timeline --arm before=/tmp/wt_before --arm after=. \\
        [--from turns --query turn=3000] [--rounds 6 --clicks 4] [--busy 6] [--no-bare]

Each ``--arm`` is a checkout (``NAME=PATH``; ``NAME=PATH@VAR=VALUE`` also sets a variable in
that server's environment, e.g. ``ABL=nochart,canvas`` for a checkout patched to read it)
served as ``mfm dashboard`` serves it (``bench.browser.serve``), in a tab of its own opened
at the ``--from`` page (default: Runs) with ``runs=RUN`` and ``--query`` (Turns at a turn
sets the time cursor, so that the Timeline opens an episode).
Then, ``--rounds`` times, each arm in turn (the order reversed every other round, so that
no arm always follows another) clicks ``--clicks`` times from ``--from`` to ``--page`` and
back in the sidebar; the bare app (``bench/bare_app.py``) is one more arm, clicking from its
first page to its second. Each click is timed from the pointerdown to drawn, as
``bench.browser`` defines it (tables, charts and images included). Two clicks per arm
before the rounds warm the servers' caches and the browser's.

Prints a line per round (the medians so far, the load) and per arm: the median click with
its quartiles, the median time to the script's end (``script``), and the ratio to the bare
app's median. ``--busy N``: then N more clicks per arm under a Chromium trace, each giving
the time the page's main thread was busy within the click (the top-level tasks of the
renderer's main thread between the pointerdown and drawn): a steadier figure than the
wall clock when the page is bound by that thread, and a tracing click is not timed.

Why a separate script: a change that gains 0.02-0.05 s on a page is within the noise of
two ``bench.browser`` sittings, since the bare app's click itself moves by 0.03 s between
sittings; alternating arms in one sitting is what separates them (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import parse_qsl

from bench import browser as bb


def parse_arm(text: str) -> tuple[str, Path, dict[str, str]]:
    """``NAME=PATH`` or ``NAME=PATH@VAR=VALUE``: the arm's name, checkout and added environment."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"an arm is NAME=PATH or NAME=PATH@VAR=VALUE, not {text!r}")
    path, _, assignment = rest.partition("@")
    env = {}
    if assignment:
        var, sep, value = assignment.partition("=")
        if not sep or not var:
            raise ValueError(f"{text!r}: after @ comes VAR=VALUE")
        env[var] = value
    repo = Path(path).resolve()
    if not (repo / "dashboard" / "app.py").is_file():
        raise ValueError(f"{text!r}: {repo} is not a checkout of mfm (no dashboard/app.py)")
    return name, repo, env


def main_thread_busy_ms(trace: bytes, click_ms: float) -> float:
    """The time (ms) the renderer's main thread spent in top-level tasks from the click's
    pointerdown (the last one the Chromium ``trace`` holds) to ``click_ms`` later (drawn)."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    main = {k for k, v in names.items() if v == "CrRendererMain"}
    mine = [e for e in events if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X" and "dur" in e]
    down = [e["ts"] for e in mine if e.get("name") == "EventDispatch"
            and e.get("args", {}).get("data", {}).get("type") == "pointerdown"]
    if not down:
        raise RuntimeError("the trace holds no pointerdown on the page's main thread")
    t0 = max(down)
    t1 = t0 + click_ms * 1000
    return sum(min(e["ts"] + e["dur"], t1) - max(e["ts"], t0) for e in mine
               if e["name"] == "RunTask" and e["ts"] < t1 and e["ts"] + e["dur"] > t0) / 1000


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run(root: Path, key: str, page: str, arms: list[tuple[str, Path, dict[str, str]]], first: str = "runs",
        query: dict[str, str] | None = None, rounds: int = 6, clicks: int = 4, busy: int = 0,
        bare: bool = True, log=print) -> dict[str, dict[str, float]]:
    """The A/B of the module docstring; per arm (and ``bare``): ``click_s`` (median),
    ``q1_s``, ``q3_s``, ``script_s``, ``n``, ``x_bare`` and, with ``busy``, ``busy_ms``."""
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {}
    scripts: dict[str, list[float]] = {}
    busy_ms: dict[str, list[float]] = {}
    with sync_playwright() as pw, ExitStack() as stack:
        browser = pw.chromium.launch(executable_path=bb.CHROMIUM, args=bb.ARGS)
        stack.callback(browser.close)
        tabs: dict[str, tuple[object, str, str]] = {}

        def tab(name: str, base: str, url_page: str, params: dict[str, str], there: str, home: str) -> None:
            ctx = browser.new_context(viewport=bb.VIEWPORT)
            ctx.add_init_script(bb.WATCH)
            pg = ctx.new_page()
            bb.open_by_url(pg, bb.page_url(base, url_page, params))
            tabs[name] = (pg, there, home)

        for name, repo, env in arms:
            base = stack.enter_context(bb.serve(root, repo=repo, env=env))
            tab(name, base, first, {"runs": key, **(query or {})}, page, first)
        if bare:
            base = stack.enter_context(bb.serve(root, app=bb.BARE_APP))
            tab(bb.BARE, base, bb.BARE, {}, "two", "one")
        names = list(tabs)
        for name in names:
            times[name], scripts[name] = [], []
            pg, there, home = tabs[name]
            for _ in range(2):
                bb.open_by_click(pg, there)
                bb.open_by_click(pg, home)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                pg, there, home = tabs[name]
                for _ in range(clicks):
                    m = bb.open_by_click(pg, there)
                    if m["errors"]:
                        raise RuntimeError(f"{name}: {m['errors']}")
                    times[name].append(m["ms"] / 1000)
                    scripts[name].append((m["script_ms"] or 0.0) / 1000)
                    bb.open_by_click(pg, home)
            log(f"round {r + 1}: " + ", ".join(f"{n} {_median(times[n]):.3f} s" for n in names)
                + f"; load {os.getloadavg()[0]:.1f}")
        for name in names if busy else ():
            pg, there, home = tabs[name]
            busy_ms[name] = []
            for _ in range(busy):
                browser.start_tracing(page=pg, categories=["toplevel", "devtools.timeline",
                                                            "disabled-by-default-devtools.timeline"])
                try:
                    m = bb.open_by_click(pg, there)
                finally:
                    trace = browser.stop_tracing()
                busy_ms[name].append(main_thread_busy_ms(trace, m["ms"]))
                bb.open_by_click(pg, home)
    out: dict[str, dict[str, float]] = {}
    for name in times:
        xs = sorted(times[name])
        out[name] = {"click_s": _median(xs), "q1_s": xs[len(xs) // 4], "q3_s": xs[(3 * len(xs)) // 4],
                     "script_s": _median(scripts[name]), "n": len(xs)}
        if name in busy_ms:
            out[name]["busy_ms"] = _median(busy_ms[name])
    if bare:
        for name in out:
            out[name]["x_bare"] = out[name]["click_s"] / out[bb.BARE]["click_s"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path)
    p.add_argument("run", help="the run's folder under ROOT")
    p.add_argument("--page", required=True, choices=[x for x in bb.PAGES if x != "runs"])
    p.add_argument("--arm", action="append", required=True, metavar="NAME=PATH[@VAR=VALUE]",
                   help="a checkout to serve (repeat for each arm)")
    p.add_argument("--from", dest="first", default="runs", choices=bb.PAGES, help="the page clicked from")
    p.add_argument("--query", default="", help="more URL parameters of the --from page, as a query string")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--clicks", type=int, default=4, help="clicks per arm and round")
    p.add_argument("--busy", type=int, default=0, help="traced clicks per arm (main-thread busy time)")
    p.add_argument("--no-bare", action="store_true")
    a = p.parse_args()
    try:
        arms = [parse_arm(x) for x in a.arm]
    except ValueError as e:
        p.error(str(e))
    if len({n for n, _, _ in arms}) < len(arms) or any(n == bb.BARE for n, _, _ in arms):
        p.error(f"arm names must differ from each other and from {bb.BARE!r}")
    out = run(a.root.resolve(), a.run, a.page, arms, a.first, dict(parse_qsl(a.query)), a.rounds, a.clicks, a.busy,
              not a.no_bare, log=lambda s: print(s, file=sys.stderr, flush=True))
    for name, r in out.items():
        print(f"{name:>16}  click {r['click_s']:.3f} s (q1 {r['q1_s']:.3f}, q3 {r['q3_s']:.3f}, n {r['n']})"
              f"  script {r['script_s']:.3f} s" + (f"  {r['x_bare']:.2f}x bare" if "x_bare" in r else "")
              + (f"  main thread busy {r['busy_ms']:.0f} ms" if "busy_ms" in r else ""))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
