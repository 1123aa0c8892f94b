"""Scaling curves (issue 24): how opening a run, each dashboard page and peak memory grow
with the run's length, and how the Runs page grows with the number of runs.

    python -m bench.scaling --sizes 36000,120000,360000 --sweeps 48,480 [--out DIR] [--repeats 3]

For each size, a synthetic run of that many env steps (``bench.synth.make_run`` with a pool
of 2,000 real Crafter frames, as ``bench.synth --sweep`` writes its runs: ~10x faster than
playing the game for every step; ``--game`` plays it) at ``OUT/size_NNNNNN/steps_NNNNNN``,
reused when a finished run of that size is there already. Then, every measurement in a
fresh process (imports excluded from the times), ``--repeats`` times each:

- ``first_open``: open the run and build every table and its problem list
  (``bench.opentime.TABLES``) with an empty table cache; ``reopen``: the same with the
  cache filled by the first open (what reopening the dashboard costs); ``after_close``: the
  first open of a run whose cache was filled when it closed (``bench.bench.FILL_CODE``:
  ``loaders.cachedread.fill_closed_run`` in another fresh process, as ``mfm run`` does),
  with the fill's own time; peak RSS of each;
- each dashboard page's first script run (``cold``: the run opened by the page, the table
  cache filled) and rerun (``warm``) through ``bench.apptimes`` (AppTest, as the ``pages``
  group of ``bench.bench``), the data points its charts send and the process's peak RSS
  (VmHWM).

For each sweep size N: N runs under ``OUT/sweep_NNN`` made from the smallest size's run, each
with its own manifest (run id, method, seed) and hard links to the run's top-level files
only (manifest, tables, logs, ``mine/``): the Runs page reads manifests and line counts,
nothing under ``episodes/``, and linking every file of a 36k-step run (14,474) 480 times
would be ~7 million links. Measured: the Runs page's tables as ``bench.bench.SWEEP_CODE``
computes them (``open_runs`` + ``runs_overview(check=False)`` + ``milestone_steps``) and
the Runs page through ``bench.apptimes``.

Prints one line per figure (median, min, max of the repeats); ``--json`` also writes them
all to a file. Table caches live in a temporary folder, removed at the end.
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

from bench.bench import FILL_CODE, SWEEP_CODE

REPO = Path(__file__).resolve().parent.parent
BYTES_PER_STEP = 5_200
"""Disk a synthetic run takes per env step (~180 MB for 36k steps, 4 KiB blocks), to check
free space before writing one."""

OPEN_CODE = """
import json, sys, time
from bench.apptimes import peak_rss_mb
from bench.opentime import open_times
out = open_times(sys.argv[1])
out["rss_mb"] = peak_rss_mb()
print(json.dumps(out))
"""
"""``bench.opentime`` with the process's peak resident memory."""


def _fresh(argv: list[str], cache: Path) -> dict:
    """Run ``python argv`` in a fresh interpreter (cwd: the repository) with the table cache
    ``cache``; it prints one JSON object last."""
    out = subprocess.check_output([sys.executable, *argv], text=True, cwd=REPO, stderr=subprocess.DEVNULL,
                                  env=dict(os.environ, MFM_CACHE_DIR=str(cache)))
    return json.loads(out.strip().splitlines()[-1])


def _finished(run: Path, steps: int) -> bool:
    """Whether ``run`` is a finished run of ``steps`` env steps."""
    try:
        m = json.loads((run / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return m.get("status") == "finished" and m.get("last_step") == steps


def ensure_run(out: Path, steps: int, game: bool, pool: list) -> Path:
    """The synthetic run of ``steps`` steps under ``out`` (written unless a finished one is
    there). ``pool``: a one-item list caching the frame pool between calls."""
    from bench.synth import frame_pool, make_run

    run = out / f"size_{steps:06d}" / f"steps_{steps:06d}"
    if _finished(run, steps):
        print(f"# reusing {run}", flush=True)
        return run
    free = shutil.disk_usage(out).free
    if free < 1.3 * BYTES_PER_STEP * steps:
        need = BYTES_PER_STEP * steps / 1e9
        raise SystemExit(f"{out}: {free / 1e9:.1f} GB free, a {steps}-step run needs ~{need:.1f} GB")
    if run.exists():
        shutil.rmtree(run)
    run.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if game:
        make_run(run, steps, 0)
    else:
        if not pool:
            pool.append(frame_pool(0))
        make_run(run, steps, 0, frames=pool[0])
    print(f"# wrote {run} in {time.perf_counter() - t:.0f} s", flush=True)
    return run


def _steps_of(run: Path) -> int:
    """A synthetic run's env steps, from its folder name (``steps_NNNNNN``)."""
    return int(run.name.split("_")[-1])


def make_light_sweep(run: Path, out: Path, n: int) -> Path:
    """``n`` runs under ``out``, each its own manifest (run id, method, seed) and hard links
    to ``run``'s top-level files and ``mine/`` (not ``episodes/``); reused when complete."""
    methods = ("direct", "pro-long", "vista", "mfm")
    manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
    done = out / ".complete"
    if done.exists() and done.read_text(encoding="utf-8") == f"{run} {n}":
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for i in range(n):
        d = out / f"run_{i:03d}"
        d.mkdir()
        for f in run.iterdir():
            if f.name == "run.json" or f.name == "episodes":
                continue
            if f.is_dir():
                shutil.copytree(f, d / f.name, copy_function=os.link)
            else:
                os.link(f, d / f.name)
        m = dict(manifest, run_id=d.name, method=methods[i % 4], seed=i)
        (d / "run.json").write_text(json.dumps(m) + "\n", encoding="utf-8")
    done.write_text(f"{run} {n}", encoding="utf-8")
    return out


def _spread(values: list[float]) -> dict:
    """Median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _emit(group: str, key: str, values: list[float], figures: dict) -> None:
    """Print one figure (median, min-max, n) and keep it in ``figures``."""
    s = _spread(values)
    figures.setdefault(group, {})[key] = dict(s, n=len(values), values=values)
    print(f"{group:14s} {key:36s} {s['median']:10.3f}   ({s['min']:.3f}-{s['max']:.3f}, n={len(values)})", flush=True)


def _note(group: str, key: str, value: object, figures: dict) -> None:
    figures.setdefault(group, {})[key] = value
    print(f"{group:14s} {key:36s} {value!s:>10}", flush=True)


def bench_size(run: Path, pages: list[str], repeats: int, cache_root: Path, figures: dict,
               opens: bool = True) -> None:
    """Open, reopen and every page of ``pages`` on ``run``, each in fresh processes (without
    ``opens``: the pages only, after one unreported open that fills the table cache)."""
    group = run.name
    _note(group, "load_average_start", " ".join(f"{x:.1f}" for x in os.getloadavg()), figures)
    if not opens:
        _fresh(["-c", OPEN_CODE, str(run)], cache_root / f"{group}_first0")
    first, reopen, fills, closed = [], [], [], []
    for i in range(repeats if opens else 0):
        cache = cache_root / f"{group}_first{i}"
        first.append(_fresh(["-c", OPEN_CODE, str(run)], cache))
        reopen.append(_fresh(["-c", OPEN_CODE, str(run)], cache))
        cache = cache_root / f"{group}_closed{i}"
        fills.append(_fresh(["-c", FILL_CODE, str(run)], cache))
        closed.append(_fresh(["-c", OPEN_CODE, str(run)], cache))
    if opens:
        _emit(group, "first_open_s", [r["open_s"] for r in first], figures)
        _emit(group, "first_open_peak_rss_mb", [r["rss_mb"] for r in first], figures)
        _emit(group, "reopen_s", [r["open_s"] for r in reopen], figures)
        _emit(group, "reopen_peak_rss_mb", [r["rss_mb"] for r in reopen], figures)
        _emit(group, "after_close_s", [r["open_s"] for r in closed], figures)
        _emit(group, "after_close_peak_rss_mb", [r["rss_mb"] for r in closed], figures)
        _emit(group, "fill_at_close_s", [r["fill_s"] for r in fills], figures)
        _emit(group, "sql_views_s", [r["sql_s"] for r in first + reopen], figures)
    cache = cache_root / f"{group}_first0"
    for page in pages:
        got = [_fresh(["-m", "bench.apptimes", str(run.parent), page, run.name], cache) for _ in range(repeats)]
        _emit(group, f"{page}_cold_s", [g["cold_s"] for g in got], figures)
        _emit(group, f"{page}_warm_s", [g["warm_s"] for g in got], figures)
        _emit(group, f"{page}_peak_rss_mb", [g["peak_rss_mb"] for g in got], figures)
        _note(group, f"{page}_chart_points", got[-1]["chart_points"], figures)
        errors = sorted({e for g in got for e in g["errors"]})
        if errors:
            _note(group, f"{page}_errors", "; ".join(errors)[:200], figures)
    _note(group, "load_average_end", " ".join(f"{x:.1f}" for x in os.getloadavg()), figures)


def bench_sweep(root: Path, repeats: int, cache_root: Path, figures: dict) -> None:
    """The Runs page's tables and the Runs page on the sweep ``root``, fresh processes."""
    group = root.name
    _note(group, "load_average_start", " ".join(f"{x:.1f}" for x in os.getloadavg()), figures)
    cache = cache_root / group
    tables = [_fresh(["-c", SWEEP_CODE, str(root), "quick"], cache) for _ in range(repeats)]
    _note(group, "runs", tables[0]["runs"], figures)
    _emit(group, "runs_table_milestones_s", [t["s"] for t in tables], figures)
    _emit(group, "runs_table_peak_rss_mb", [t["rss_mb"] for t in tables], figures)
    page = [_fresh(["-m", "bench.apptimes", str(root), "runs"], cache) for _ in range(repeats)]
    _emit(group, "runs_page_cold_s", [p["cold_s"] for p in page], figures)
    _emit(group, "runs_page_warm_s", [p["warm_s"] for p in page], figures)
    _emit(group, "runs_page_peak_rss_mb", [p["peak_rss_mb"] for p in page], figures)
    errors = sorted({e for p in page for e in p["errors"]})
    if errors:
        _note(group, "runs_page_errors", "; ".join(errors)[:200], figures)
    _note(group, "load_average_end", " ".join(f"{x:.1f}" for x in os.getloadavg()), figures)


def main() -> None:
    from dashboard.ui import PAGE_SPECS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="36000,120000,360000", help="env steps of the runs (comma-separated)")
    p.add_argument("--sweeps", default="48,480", help="runs in the sweeps (comma-separated; '' for none)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mfm_scaling",
                   help="where the synthetic runs and sweeps are written and reused")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per figure (default 3)")
    p.add_argument("--pages", default=",".join(PAGE_SPECS), help="the pages to time (default: all)")
    p.add_argument("--no-open", action="store_true", help="leave out the open figures (the pages only)")
    p.add_argument("--game", action="store_true", help="play the real game for every step's frame (slow)")
    p.add_argument("--json", type=Path, help="also write every figure to this file")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",") if s]
    sweeps = [int(s) for s in a.sweeps.split(",") if s]
    pages = [x for x in a.pages.split(",") if x]
    if set(pages) - set(PAGE_SPECS):
        p.error(f"unknown page(s) {', '.join(sorted(set(pages) - set(PAGE_SPECS)))}")
    a.out.mkdir(parents=True, exist_ok=True)
    print(f"# bench.scaling {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, {os.cpu_count()} cores, "
          f"python {sys.version.split()[0]}, out {a.out} ({shutil.disk_usage(a.out).free / 1e9:.0f} GB free)",
          flush=True)
    pool: list = []
    runs = [ensure_run(a.out, n, a.game, pool) for n in sizes]
    figures: dict = {}
    cache_root = Path(tempfile.mkdtemp(prefix="mfm_scaling_cache_"))
    try:
        for run in runs:
            bench_size(run, pages, a.repeats, cache_root, figures, opens=not a.no_open)
        for n in sweeps:
            root = make_light_sweep(min(runs, key=_steps_of), a.out / f"sweep_{n:03d}", n)
            bench_sweep(root, a.repeats, cache_root, figures)
    finally:
        shutil.rmtree(cache_root)
    print(f"# done {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC", flush=True)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
