"""Benchmarks at paper scale. Each figure is printed with, where it applies, a naive
baseline measured in the same run and the ratio between them.

    python -m bench.bench --run DIR          # an existing 36k-step run (python -m bench.synth DIR)
    python -m bench.bench --smoke            # small sizes, generated in a temp folder (CI)
    python -m bench.bench --run DIR --only open,pages

Figures: (1) open a run and build every table and its problem list, cold (fresh process,
imports excluded: first open ever, cache off, first open after the cache was filled when the
run closed, and reopened with the table cache filled) and warm, against pandas
``read_json(lines=True)`` of the same files, and what filling the cache at close costs;
(2) the runs table and milestones summary over a sweep of hard-linked copies of the run,
and the Runs page on it (AppTest), with peak memory; (3) random frame fetch latency against
decoding a single-frame PNG per step; (4) index queries at N episodes, p50 and p95;
(5) recording overhead: the scripted agent (``mfm run``) with recording on against a
no-op recorder (``bench.nullrec``), several interleaved repeats, and the bytes per step
it stores; (6) storage bytes per step of the run; (7) each dashboard page's script time
on the run (AppTest, fresh process per page), cold and warm, with the data points its
charts send and peak memory; (8) ``browser``: the dashboard served for real and driven by headless
Chromium (``bench.browser``), at 36k and 360k steps (``--browser-sizes``): per page the
time from the click, the URL in a new tab or the first visit after the server starts to
the page fully drawn, its tables included, median and p95, with the tables, charts and
images it drew, each beside the same figure of a bare Streamlit app (``bench/bare_app.py``:
one chart, one image) measured in the same sitting, alternated with the pages, as a ratio,
and the machine's load; the Runs page on the sweep, one frame step on the Timeline;
(9) ``peers`` (asked for by name): ``bench.peers`` on the run, TensorBoard and Rerun beside
mfm in the same sitting (install them first: ``bench.peers.INSTALL``).
Every figure uses a table cache (``MFM_CACHE_DIR``) in a temporary folder, removed
at the end, never the user's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.opentime import TABLES

GROUPS = ("open", "sweep", "frames", "index", "recording", "storage", "pages", "browser", "peers")


def _timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _open_fresh(run: Path, cache: str) -> dict:
    """One cold open in a fresh interpreter (imports excluded) with ``MFM_CACHE_DIR=cache``."""
    out = subprocess.check_output([sys.executable, "-m", "bench.opentime", str(run)], text=True,
                                  env=dict(os.environ, MFM_CACHE_DIR=cache))
    return json.loads(out.strip().splitlines()[-1])


FILL_CODE = """
import json, sys, time
import mfm.agent.runner
t = time.perf_counter()
from loaders.cachedread import fill_closed_run
t1 = time.perf_counter()
filled = fill_closed_run(sys.argv[1])
print(json.dumps({"import_s": t1 - t, "fill_s": time.perf_counter() - t1, "filled": filled}))
"""
"""What ``mfm run`` adds when it closes a run: importing the loaders (the agent's modules are
already loaded) and :func:`loaders.cachedread.fill_closed_run`."""

AGENT_STEPS_PER_S = 143.0
"""The scripted agent's steps/s with recording on (figure 5 in docs/benchmarks.md: the faster
of its two medians, 143 and 117, so the fill's share of a run is not understated): what
filling the cache at close adds is given as a share of the agent's time for as many steps
as the run measured has."""


def _fill_fresh(run: Path, cache: str) -> dict:
    """Fill the table cache ``cache`` for ``run`` in a fresh interpreter, as ``mfm run`` does
    when it closes a run; seconds importing the loaders and filling."""
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.check_output([sys.executable, "-c", FILL_CODE, str(run)], text=True, cwd=repo,
                                  env=dict(os.environ, MFM_CACHE_DIR=cache))
    got = json.loads(out.strip().splitlines()[-1])
    if not got["filled"]:
        raise AssertionError(f"{run}: the cache was not filled (run.json does not say closed?)")
    return got


def _steps(run: Path) -> int:
    """The run's env steps (its manifest's last step)."""
    from mfm.schema import read_manifest

    m, _ = read_manifest(run)
    return max(1, m.last_step if m else 1)


def _naive(run: Path) -> float:
    """pandas ``read_json(lines=True)`` of every non-empty JSONL file of the run, best of 3."""
    import pandas as pd

    def read() -> None:
        for f in run.glob("*.jsonl"):
            if f.stat().st_size:
                pd.read_json(f, lines=True)

    return _timed(read, repeat=3)


def bench_open(run: Path, repeat: int = 5) -> dict:
    """(1) Open the run and build every table and its problem list (tables and files) in a
    fresh process (imports excluded), against pandas ``read_json(lines=True)`` of the same
    files: first open ever (empty table cache: parse, check and fill the cache), first open
    after the run closed (the cache filled by :func:`loaders.cachedread.fill_closed_run` in
    another fresh process, as ``mfm run`` does at the end), cache off, reopen (a fresh
    process, the cache filled by an earlier open: what reopening the dashboard costs), warm
    (the same process again). The first two alternate in order, ``repeat`` times each. The
    baseline is taken before and after them (best of 3 each; the ratios use the faster). The
    SQL views (built only when the SQL page asks) are timed apart. The cache lives in a
    temporary folder, never the user's."""
    tmp = Path(tempfile.mkdtemp())
    before = os.environ.get("MFM_CACHE_DIR")
    base_before = _naive(run)
    try:
        first, closed, fills, filled = [], [], [], []
        for i in range(repeat):
            for what in (("first", "closed") if i % 2 == 0 else ("closed", "first")):
                if what == "first":
                    first.append(_open_fresh(run, str(tmp / f"first{i}")))
                else:
                    fills.append(_fill_fresh(run, str(tmp / f"closed{i}")))
                    filled.append(len(list((tmp / f"closed{i}").glob("*.mfmc"))))
                    closed.append(_open_fresh(run, str(tmp / f"closed{i}")))
        entries = [p.stat().st_size for p in (tmp / "first0").glob("*.mfmc")]
        off = [_open_fresh(run, "off") for _ in range(3)]
        reopen = [_open_fresh(run, str(tmp / "first0")) for _ in range(repeat)]
        os.environ["MFM_CACHE_DIR"] = str(tmp / "first0")
        from loaders import open_run

        open_run(run)
        warm = _timed(lambda: [open_run(run).table(n) for n in TABLES], repeat=5)
    finally:
        if before is None:
            os.environ.pop("MFM_CACHE_DIR", None)
        else:
            os.environ["MFM_CACHE_DIR"] = before
        shutil.rmtree(tmp)
    base_after = _naive(run)
    base = min(base_before, base_after)
    out: dict = {"cache_entries": len(entries), "cache_mb": sum(entries) / 1e6,
                 "cache_entries_filled_at_close": min(filled)}
    for label, runs in (("first_open", first), ("after_close", closed), ("cache_off", off), ("reopen", reopen)):
        times = sorted(r["open_s"] for r in runs)
        out.update({f"{label}_median_s": statistics.median(times), f"{label}_min_s": times[0],
                    f"{label}_max_s": times[-1]})
    out["sql_views_median_s"] = statistics.median(r["sql_s"] for r in first + closed + off + reopen)
    fill = sorted(r["fill_s"] for r in fills)
    at_close = statistics.median(r["import_s"] + r["fill_s"] for r in fills)
    out.update({"fill_at_close_median_s": statistics.median(fill), "fill_at_close_min_s": fill[0],
                "fill_at_close_max_s": fill[-1],
                "fill_import_loaders_median_s": statistics.median(r["import_s"] for r in fills),
                "fill_with_import_pct_of_agent_run": 100 * at_close / (_steps(run) / AGENT_STEPS_PER_S)})
    out.update({"open_warm_s": warm, "naive_before_s": base_before, "naive_after_s": base_after,
                "naive_read_json_s": base,
                "speedup_first_open": base / out["first_open_median_s"],
                "speedup_first_open_min": base / out["first_open_max_s"],
                "speedup_first_open_max": base / out["first_open_min_s"],
                "speedup_after_close": base / out["after_close_median_s"],
                "speedup_after_close_min": base / out["after_close_max_s"],
                "speedup_after_close_max": base / out["after_close_min_s"],
                "speedup_reopen": base / out["reopen_median_s"],
                "speedup_reopen_with_sql": base / statistics.median(r["open_s"] + r["sql_s"] for r in reopen)})
    return out


def bench_frames(run: Path, n: int = 300) -> dict:
    """(3) Random frame fetch latency (cold cache) against one PNG per step."""
    from loaders import open_run
    from mfm.memory import retrieval

    r = open_run(run)
    steps = r.steps()["step"].to_numpy()
    rng = np.random.default_rng(0)
    pick = rng.choice(steps, size=min(n, len(steps)), replace=False)
    retrieval.forget_written()
    retrieval.forget_decoded()
    lat = []
    for s in pick:
        t = time.perf_counter()
        r.frame(int(s))
        lat.append(time.perf_counter() - t)
        retrieval.forget_decoded()
    from PIL import Image

    tmp = Path(tempfile.mkdtemp())
    singles = []
    for i, s in enumerate(pick[:50]):
        p = tmp / f"{i}.png"
        Image.fromarray(r.frame(int(s))).save(p)
        singles.append(p)
    base = []
    for p in singles:
        t = time.perf_counter()
        np.asarray(Image.open(p).convert("RGB"))
        base.append(time.perf_counter() - t)
    shutil.rmtree(tmp)
    return {"frame_p50_ms": 1000 * statistics.median(lat), "frame_p95_ms": 1000 * float(np.percentile(lat, 95)),
            "single_png_p50_ms": 1000 * statistics.median(base)}


def bench_index(n: int = 100_000, queries: int = 200) -> dict:
    """(4) Index queries (text + predicate + radius + as-of-step) over n episodes."""
    from mfm.memory import EpisodeIndex, IndexQuery
    from mfm.schema import IndexRow

    rng = np.random.default_rng(0)
    words = ["wood", "stone", "iron", "coal", "diamond", "table", "water", "zombie", "cow", "lava"]
    atoms = ["go_to", "collect", "explore", "place", "craft"]
    rows = []
    step = 0
    for i in range(n):
        length = int(rng.integers(1, 20))
        rows.append(IndexRow(id=f"ep_{i:06d}", kind="episode", action_kind=atoms[i % 5], first_step=step,
                             last_step=step + length, summary=f"{atoms[i % 5]} {words[int(rng.integers(0, 10))]} "
                             f"-> {length} steps", tags=("inventory_changed",) if i % 3 else (),
                             x=float(rng.integers(0, 64)), y=float(rng.integers(0, 64)), path="", image=None,
                             life=i * 5 // n))
        step += length
    index = EpisodeIndex(rows)
    index.query(IndexQuery(limit=1))
    lat = []
    for q in range(queries):
        query = IndexQuery(text=words[q % 10], action_kind=atoms[q % 5], near=(float(q % 64), 32.0), radius=8,
                           as_of_step=int(step * (q + 1) / queries), limit=20)
        t = time.perf_counter()
        index.query(query)
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    for q in range(20):
        [r for r in rows if words[q % 10] in r.summary and r.action_kind == atoms[q % 5]
         and (r.x - q % 64) ** 2 + (r.y - 32) ** 2 <= 64 and r.last_step <= step]
    naive = (time.perf_counter() - t) / 20
    return {"episodes": n, "query_p50_ms": 1000 * statistics.median(lat),
            "query_p95_ms": 1000 * float(np.percentile(lat, 95)), "naive_scan_ms": 1000 * naive}


def bench_recording(steps: int = 3000, repeats: int = 5) -> dict:
    """(5) Steps/s of the scripted agent with recording on and through the no-op recorder,
    ``repeats`` pairs after one warm-up pair, the order inside a pair alternating (off-on,
    on-off, ...) so that a machine slowing down or speeding up over the minutes counts
    against neither mode; median and spread of the pairs' overhead, and the overhead of the
    median steps/s, in wall time and in CPU time (the agent's process, all threads, and its
    committer process: the committer's work counts even when a spare core hides it)."""
    from bench.nullrec import play

    tmp = Path(tempfile.mkdtemp())
    on, off, over, over_cpu, cpu = [], [], [], [], {True: [], False: []}
    played = None
    for i in range(repeats + 1):
        got = {}
        for mode in ((False, True) if i % 2 == 0 else (True, False)):
            got[mode] = play(tmp / f"{'on' if mode else 'off'}{i}", steps, 0, on=mode)
        (t_off, cpu_off, n, s_off), (t_on, cpu_on, n_on, s_on) = got[False], got[True]
        if (n, s_off) != (n_on, s_on):
            raise AssertionError(f"the two modes played differently: {s_off} vs {s_on}")
        played = n
        if i:
            off.append(n / t_off)
            on.append(n / t_on)
            over.append(100 * (t_on - t_off) / t_off)
            over_cpu.append(100 * (cpu_on - cpu_off) / cpu_off)
            cpu[True].append(cpu_on)
            cpu[False].append(cpu_off)
    size, _ = _dir_bytes(tmp / f"on{repeats}")
    frames = sum(p.stat().st_size for p in (tmp / f"on{repeats}").glob("episodes/*/frames/*"))
    shutil.rmtree(tmp)
    return {"steps": played, "repeats": repeats, "steps_per_s_off_median": statistics.median(off),
            "steps_per_s_on_median": statistics.median(on), "overhead_pct_median": statistics.median(over),
            "overhead_pct_min": min(over), "overhead_pct_max": max(over),
            "overhead_pct_of_medians": 100 * (statistics.median(off) / statistics.median(on) - 1),
            "cpu_overhead_pct_of_medians": 100 * (statistics.median(cpu[True]) / statistics.median(cpu[False]) - 1),
            "cpu_overhead_pct_median": statistics.median(over_cpu), "cpu_overhead_pct_min": min(over_cpu),
            "cpu_overhead_pct_max": max(over_cpu),
            "agent_bytes_per_step": size / played, "agent_frame_bytes_per_step": frames / played}


def _dir_bytes(d: Path) -> tuple[int, int]:
    """(apparent bytes, bytes allocated on disk)."""
    apparent = allocated = 0
    for root, _, files in os.walk(d):
        for f in files:
            st = os.stat(os.path.join(root, f))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def bench_storage(run: Path) -> dict:
    """(6) Storage per env step, frames included."""
    from mfm.schema import read_manifest

    m, _ = read_manifest(run)
    steps = max(1, m.last_step if m else 1)
    apparent, allocated = _dir_bytes(run)
    frames = sum(p.stat().st_size for p in run.glob("episodes/*/frames/*"))
    return {"bytes_per_step": apparent / steps, "disk_bytes_per_step": allocated / steps,
            "frame_bytes_per_step": frames / steps}


def make_sweep(run: Path, out: Path, n: int) -> Path:
    """``n`` hard-linked copies of ``run`` under ``out``, each with its own manifest (run id,
    method, seed), as a sweep of runs looks to the dashboard."""
    from mfm.schema import MANIFEST

    methods = ("direct", "pro-long", "vista", "mfm")
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
    for i in range(n):
        d = out / f"run_{i:02d}"
        shutil.copytree(run, d, copy_function=os.link, ignore=shutil.ignore_patterns(MANIFEST))
        m = dict(manifest, run_id=d.name, method=methods[i % 4], seed=i)
        (d / MANIFEST).write_text(json.dumps(m) + "\n", encoding="utf-8")
    return out


def _fresh(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter (cwd: the repository); it prints one JSON object."""
    return _fresh_argv(["-c", code, *args])


def _page_times(root: Path, page: str, *runs: str) -> dict:
    """:func:`bench.apptimes.page_times` of one page in a fresh interpreter."""
    return _fresh_argv(["-m", "bench.apptimes", str(root), page, *runs])


def _fresh_argv(argv: list[str]) -> dict:
    repo = Path(__file__).resolve().parent.parent
    return json.loads(subprocess.check_output([sys.executable, *argv], text=True, cwd=repo,
                                              stderr=subprocess.DEVNULL).strip().splitlines()[-1])


SWEEP_CODE = """
import json, sys, time
from pathlib import Path
from bench.apptimes import peak_rss_mb
from loaders import open_runs
from loaders.runs_summary import milestone_steps, runs_overview
root = Path(sys.argv[1])
t = time.perf_counter()
runs = open_runs(root)
table = runs_overview(runs, root, check=sys.argv[2] == "check")
ms = milestone_steps(runs, root)
print(json.dumps({"s": time.perf_counter() - t, "runs": len(table), "milestone_rows": len(ms),
                  "rss_mb": peak_rss_mb()}))
"""


def bench_sweep(run: Path, n: int, check: bool) -> dict:
    """(2) The Runs page's tables over ``n`` copies of the run: manifests only (what the page
    does), every run read (``check``: the damage check on request; a first time, filling the
    table cache, and again in a new process), and the page itself."""
    tmp = Path(tempfile.mkdtemp())
    try:
        root = make_sweep(run, tmp / "sweep", n)
        quick = _fresh(SWEEP_CODE, str(root), "quick")
        out = {"runs": quick["runs"], "runs_table_milestones_s": quick["s"], "loaders_peak_rss_mb": quick["rss_mb"]}
        page = _page_times(root, "runs")
        out.update({"runs_page_cold_s": page["cold_s"], "runs_page_warm_s": page["warm_s"],
                    "runs_page_peak_rss_mb": page["peak_rss_mb"], "runs_page_errors": len(page["errors"])})
        if check:
            full = _fresh(SWEEP_CODE, str(root), "check")
            again = _fresh(SWEEP_CODE, str(root), "check")
            out.update({"every_run_read_s": full["s"], "every_run_read_peak_rss_mb": full["rss_mb"],
                        "every_run_read_again_s": again["s"], "every_run_read_again_peak_rss_mb": again["rss_mb"]})
        return out
    finally:
        shutil.rmtree(tmp)


def bench_pages(run: Path) -> dict:
    """(7) Each page's script time on ``run`` through AppTest, one fresh process per page."""
    from dashboard.ui import PAGE_SPECS

    tmp = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(run, tmp / run.name, copy_function=os.link)
        out: dict = {}
        for page in PAGE_SPECS:
            r = _page_times(tmp, page, run.name)
            out[f"{page}_cold_s"] = r["cold_s"]
            out[f"{page}_warm_s"] = r["warm_s"]
            out[f"{page}_chart_points"] = r["chart_points"]
            out[f"{page}_peak_rss_mb"] = r["peak_rss_mb"]
            if r["errors"]:
                out[f"{page}_errors"] = "; ".join(r["errors"])[:200]
        return out
    finally:
        shutil.rmtree(tmp)


NOTES: list[str] = []
"""Text a group adds after the figures (the browser group's tables)."""


def _label(steps: int) -> str:
    """``36k``, ``360k``, ``600``: a run's size as the browser figures name it."""
    return f"{steps // 1000}k" if steps >= 1000 and steps % 1000 == 0 else str(steps)


def browser_runs(a: argparse.Namespace, run: Path | None) -> list[Path]:
    """The runs the browser group measures: the smoke run; else the synthetic runs of
    ``--browser-sizes`` (default 36k and 360k steps, written once under ``--browser-out`` by
    ``bench.scaling.ensure_run`` and reused), or ``--run`` alone when it is given and
    ``--browser-sizes`` is not."""
    if a.smoke or (run is not None and a.browser_sizes is None):
        return [run]
    from bench.scaling import ensure_run

    a.browser_out.mkdir(parents=True, exist_ok=True)
    pool: list = []
    return [ensure_run(a.browser_out, int(n), False, pool) for n in (a.browser_sizes or "36000,360000").split(",")]


def bench_browser(runs: list[Path], sweep: int, smoke: bool, repeats: int = 10, first: int = 3) -> dict:
    """(8) :func:`bench.browser.measure` on each run (every page and the bare Streamlit app,
    alternated: ``first`` rounds of first visits, each on a new server, ``repeats`` warm
    opens by URL and as many by sidebar click, 20 frame steps), keys prefixed by the run's
    size (``36k_``); then the Runs page on ``sweep`` hard-linked copies of the first run (as
    the dashboard opens: no run chosen). Each size's table (per page: tables, charts and
    images drawn; click, link and first visit with their ratio to the bare app; the load)
    goes to :data:`NOTES`. With ``smoke``: every page opened once by URL and once by click,
    unwarmed, the first visit of the Runs page and the bare app only, 3 frame steps (CI:
    that it runs, not the figures)."""
    from bench.browser import measure, table

    size = dict(repeats=1, first=1, steps=3, first_pages=("runs",), warmup=False) if smoke else \
        dict(repeats=repeats, first=first, steps=20)
    out: dict = {}
    tmp = Path(tempfile.mkdtemp())
    try:
        for run in runs:
            label = _label(_steps(run))
            if [p.name for p in run.parent.iterdir()] == [run.name]:
                root = run.parent  # the run alone in its folder (bench.scaling's layout)
            else:
                root = tmp / label
                shutil.copytree(run, root / run.name, copy_function=os.link)
            got = measure(root, run.name, **size)
            out.update({f"{label}_{k}": v for k, v in got.items()})
            NOTES.append(table(got, f"**{label} steps** ({run}), {time.strftime('%H:%M', time.gmtime())} UTC; "))
        root = make_sweep(runs[0], tmp / "sweep", sweep)
        label = f"sweep{sweep}"
        got = measure(root, None, pages=("runs",), **dict(size, steps=0))
        out.update({f"{label}_{k}": v for k, v in got.items()})
        NOTES.append(table(got, f"**Runs page on the {sweep}-run sweep**; "))
        return out
    finally:
        shutil.rmtree(tmp)


def bench_peers(run: Path, frames: int, repeats: int) -> dict:
    """(9) ``peers``: :func:`bench.peers.bench_peers` on ``run``, so that the peer rows
    (TensorBoard, Rerun: open in a fresh process, one random frame, bytes per step, peak
    memory) come from the same sitting as mfm's figures; the peers are not mfm dependencies
    (``bench.peers.INSTALL``). Medians (min, max) of ``repeats`` fresh processes each; the
    Markdown table goes to :data:`NOTES`."""
    from bench import peers

    peers.need_peers()
    work = Path(tempfile.mkdtemp(prefix="mfm-peers-"))
    try:
        res = peers.bench_peers(run, work, frames, repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict = {"steps": res["steps"], "frames": res["frames"]}
    for kind in peers.KINDS:
        row = res[kind]
        for k in ("median", "min", "max"):
            out[f"{kind}_open_s_{k}"] = row["open_s"][k]
        out[f"{kind}_peak_mb_after_open"] = row["peak_mb_after_open"]["median"]
        for label in ("cold", "warm"):
            if label in row:
                out[f"{kind}_{label}_p50_ms"] = row[label]["p50_ms"]["median"]
        if "per_step" in row:
            out[f"{kind}_bytes_per_step"] = row["per_step"]["content"]
    out["mfm_open_x_faster_than_rerun_raw"] = res["rerun-raw"]["open_s"]["median"] / res["mfm"]["open_s"]["median"]
    out["mfm_open_x_faster_than_tensorboard"] = (res["tensorboard"]["open_s"]["median"]
                                                 / res["mfm"]["open_s"]["median"])
    NOTES.append(f"**peers** ({run}), load {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n\n" + peers.table(res))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="a large run to measure (see bench.synth)")
    p.add_argument("--smoke", action="store_true", help="small sizes, for CI")
    p.add_argument("--only", default=",".join(g for g in GROUPS if g != "peers"),
                   help=f"comma-separated groups of {', '.join(GROUPS)} (default: all but peers, whose "
                        "packages are not mfm dependencies)")
    p.add_argument("--sweep", type=int, help="runs in the sweep of (2) and (8) (default 48; 3 with --smoke)")
    p.add_argument("--agent-steps", type=int, help="env steps per agent run for (5) (default 3000; 200 with --smoke)")
    p.add_argument("--repeats", type=int, help="agent run pairs for (5) (default 5; 1 with --smoke)")
    p.add_argument("--browser-repeats", type=int, default=10,
                   help="warm opens per page and way for (8) (default 10; 1 with --smoke)")
    p.add_argument("--first-visits", type=int, default=3,
                   help="first visits per page for (8), each on a new server (default 3; 1 with --smoke)")
    p.add_argument("--browser-sizes", help="env steps of the synthetic runs (8) measures (default 36000,360000; "
                                           "with --run and without this option: that run)")
    p.add_argument("--browser-out", type=Path, default=Path(tempfile.gettempdir()) / "mfm_scaling",
                   help="where (8) writes its synthetic runs and reuses them (default: bench.scaling's folder)")
    a = p.parse_args()
    only = set(a.only.split(","))
    if only - set(GROUPS):
        p.error(f"unknown group(s) {', '.join(sorted(only - set(GROUPS)))}")
    tmp = None
    run = a.run
    cache = tempfile.mkdtemp()
    os.environ["MFM_CACHE_DIR"] = cache
    if a.smoke or (run is None and only - {"index", "recording", "browser"}):
        from bench.synth import make_run

        tmp = Path(tempfile.mkdtemp())
        run = make_run(tmp / "smoke", steps=600 if a.smoke else 36_000, seed=0)
    run = run.resolve() if run is not None else None
    jobs = {
        "open": lambda: bench_open(run),
        "sweep": lambda: bench_sweep(run, a.sweep or (3 if a.smoke else 48), check=True),
        "frames": lambda: bench_frames(run, 50 if a.smoke else 300),
        "index": lambda: bench_index(2_000 if a.smoke else 100_000, 50 if a.smoke else 200),
        "recording": lambda: bench_recording(a.agent_steps or (200 if a.smoke else 3000),
                                             a.repeats or (1 if a.smoke else 5)),
        "storage": lambda: bench_storage(run),
        "pages": lambda: bench_pages(run),
        "browser": lambda: bench_browser(browser_runs(a, run), a.sweep or (3 if a.smoke else 48), a.smoke,
                                         1 if a.smoke else a.browser_repeats, 1 if a.smoke else a.first_visits),
        "peers": lambda: bench_peers(run, 20 if a.smoke else 300, 1 if a.smoke else 3),
    }
    print(f"# run: {run} ({'smoke' if a.smoke else 'full'}), {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    for group in GROUPS:
        if group not in only:
            continue
        for k, v in jobs[group]().items():
            print(f"{group:10s} {k:32s} {v:12.3f}" if isinstance(v, float) else f"{group:10s} {k:32s} {v:>12}",
                  flush=True)
    for note in NOTES:
        print("\n" + note, flush=True)
    if tmp:
        shutil.rmtree(tmp)
    shutil.rmtree(cache)


if __name__ == "__main__":
    main()
