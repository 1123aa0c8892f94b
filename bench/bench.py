"""Benchmarks at paper scale. Each figure is printed with, where it applies, a naive
baseline measured in the same run and the ratio between them.

    python -m bench.bench --run DIR          # an existing 36k-step run (python -m bench.synth DIR)
    python -m bench.bench --smoke            # small sizes, generated in a temp folder (CI)

Figures: (1) open a run and build every table, cold and warm, against pandas
``read_json(lines=True)`` of the same files; (3) random frame fetch latency against decoding
a single-frame PNG per step; (4) index queries at N episodes, p50 and p95; (5) recording
overhead, steps/s with and without the memory core; (6) storage bytes per step.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TABLES = ("episodes", "steps", "turns", "grid", "milestones", "lives", "memory_writes")


def _timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_open(run: Path) -> dict:
    """(1) Cold open in a fresh process (imports excluded), warm open, and the naive baseline."""
    code = ("import time,sys; from loaders import open_run; t=time.perf_counter(); r=open_run(sys.argv[1]); "
            f"[r.table(n) for n in {TABLES!r}]; r.sql('select count(*) from steps').fetchall(); "
            "print(time.perf_counter()-t)")
    cold = min(float(subprocess.check_output([sys.executable, "-c", code, str(run)], text=True)) for _ in range(3))
    from loaders import open_run

    open_run(run)
    warm = _timed(lambda: [open_run(run).table(n) for n in TABLES], repeat=5)
    import pandas as pd

    def naive() -> None:
        for f in run.glob("*.jsonl"):
            if f.stat().st_size:
                pd.read_json(f, lines=True)

    base = _timed(naive, repeat=3)
    return {"open_cold_s": cold, "open_warm_s": warm, "naive_read_json_s": base, "speedup_cold": base / cold}


def bench_frames(run: Path, n: int = 300) -> dict:
    """(3) Random frame fetch latency (cold cache) against one PNG per step."""
    from loaders import open_run
    from mfm.memory import retrieval

    r = open_run(run)
    steps = r.steps()["step"].to_numpy()
    rng = np.random.default_rng(0)
    pick = rng.choice(steps, size=min(n, len(steps)), replace=False)
    retrieval._read_png_cached.cache_clear()
    lat = []
    for s in pick:
        t = time.perf_counter()
        r.frame(int(s))
        lat.append(time.perf_counter() - t)
        retrieval._read_png_cached.cache_clear()
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


def bench_recording(steps: int = 3000) -> dict:
    """(5) Steps/s of a random walk in the real game, without and with the memory core."""
    from bench.synth import make_run
    from mfm.envs import CrafterHarness

    def play() -> None:
        env = CrafterHarness(0)
        env.reset()
        rng = np.random.default_rng(0)
        for _ in range(steps):
            if env.step(("move_left", "move_right", "move_up", "move_down")[int(rng.integers(0, 4))]).died:
                env.respawn()

    off = _timed(play)
    tmp = Path(tempfile.mkdtemp())
    on = _timed(lambda: make_run(tmp / "r", steps=steps, seed=0, task="diamond"))
    size = _dir_bytes(tmp / "r")
    shutil.rmtree(tmp)
    return {"steps": steps, "steps_per_s_off": steps / off, "steps_per_s_on": steps / on,
            "overhead_pct": 100 * (on - off) / off, "bytes_per_step_small_run": size[0] / steps}


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="a large run to measure (see bench.synth)")
    p.add_argument("--smoke", action="store_true", help="small sizes, for CI")
    a = p.parse_args()
    tmp = None
    run = a.run
    if a.smoke or run is None:
        from bench.synth import make_run

        tmp = Path(tempfile.mkdtemp())
        run = make_run(tmp / "smoke", steps=600 if a.smoke else 36_000, seed=0)
    results = {
        "open": bench_open(run),
        "frames": bench_frames(run, 50 if a.smoke else 300),
        "index": bench_index(2_000 if a.smoke else 100_000, 50 if a.smoke else 200),
        "recording": bench_recording(300 if a.smoke else 3000),
        "storage": bench_storage(run),
    }
    print(f"# run: {run} ({'smoke' if a.smoke else 'full'}), {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    for group, figures in results.items():
        for k, v in figures.items():
            print(f"{group:10s} {k:28s} {v:12.3f}" if isinstance(v, float) else f"{group:10s} {k:28s} {v:>12}")
    if tmp:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
