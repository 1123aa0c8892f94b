"""Object storage against a local disk (issue 22): listing a sweep, opening a run and
reading frames from a real S3-compatible server on loopback (moto's standalone server),
against the same files on disk, each in a fresh process, alternating.

    python -m bench.objectstore --run DIR [--sweep 48] [--repeats 3] [--frames 30]

One bucket holds ``--sweep`` copies of the run's top-level files (manifest, tables, logs,
``mine/``): what listing and opening read, since episodes are fetched on demand; another
one copy with its episode folders for opening and the frame reads (two buckets, because
moto's in-memory listing scans every key of a bucket for each request). The disk side is hard-linked copies of
the whole run (``bench.bench.make_sweep``). Figures: median and range over the repeats; the
ratio is S3 over disk.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CODE = """
import json, sys, time
t0 = time.perf_counter()
from bench.apptimes import peak_rss_mb
from loaders.run import find_runs, local_path, open_run, open_runs
from loaders.run_pages import milestone_steps, runs_overview
place, what = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if what == "list":
    runs = open_runs(place)
    root = local_path(place)
    table = runs_overview(runs, root, check=False)
    milestone_steps(runs, root)
    out = {"n": len(table)}
elif what == "open":
    run = open_run(place)
    out = {"n": len(run.episodes()) + len(run.steps()) + len(run.turns())}
else:
    import random
    run = open_run(place)
    steps = random.Random(0).sample(range(1, run.manifest.last_step), int(what))
    t = time.perf_counter()
    lat = []
    for s in steps:
        t1 = time.perf_counter()
        run.frame(s)
        lat.append(time.perf_counter() - t1)
    lat.sort()
    out = {"n": len(lat), "p50_ms": 1000 * lat[len(lat) // 2], "max_ms": 1000 * lat[-1]}
out.update(s=time.perf_counter() - t, rss_mb=peak_rss_mb())
print(json.dumps(out))
"""


def s3_server(log: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """moto's standalone S3 server on a free loopback port, its output to ``log``, once it
    answers; (the process, the AWS variables that point clients at it). Also the tests' server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, env
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"moto server did not start (its output: {log})")


def _fresh(env: dict[str, str], *args: str) -> dict:
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.check_output([sys.executable, "-c", CODE, *args], text=True, cwd=repo, env=env,
                                  stderr=subprocess.DEVNULL)
    return json.loads(out.strip().splitlines()[-1])


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def bench_objectstore(run: Path, n: int = 48, repeats: int = 3, frames: int = 30) -> dict:
    """Listing ``n`` runs, opening one, and ``frames`` random frames: disk against S3."""
    from bench.bench import make_sweep

    tmp = Path(tempfile.mkdtemp())
    proc, s3env = s3_server(tmp / "moto.log")
    try:
        env = dict(os.environ, **s3env)
        os.environ.update(s3env)
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        fs.mkdir("bench-sweep")
        fs.mkdir("bench-one")
        disk = make_sweep(run, tmp / "sweep", n)
        t = time.perf_counter()
        tops = [p for p in run.iterdir() if p.name != "episodes"]
        for d in sorted(disk.iterdir()):
            for p in tops:
                src = d / p.name
                fs.put(str(src), f"bench-sweep/sweep/{d.name}/{p.name}", recursive=src.is_dir())
        fs.put(str(run), "bench-one/run", recursive=True)
        upload_s = time.perf_counter() - t
        url, one = "s3://bench-sweep/sweep", "s3://bench-one/run"
        rows: dict[str, list[float]] = {}
        extra: dict[str, float] = {}
        for rep in range(repeats):
            cache = tmp / f"cache{rep}"
            e = dict(env, MFM_CACHE_DIR=str(cache))
            order = ("disk", "s3") if rep % 2 == 0 else ("s3", "disk")
            for side in order:
                if side == "disk":
                    rows.setdefault("list_disk_s", []).append(_fresh(e, str(disk), "list")["s"])
                    rows.setdefault("open_disk_first_s", []).append(_fresh(e, str(run), "open")["s"])
                    rows.setdefault("open_disk_again_s", []).append(_fresh(e, str(run), "open")["s"])
                    f = _fresh(e, str(run), str(frames))
                    rows.setdefault("frame_disk_p50_ms", []).append(f["p50_ms"])
                else:
                    cold = _fresh(e, url, "list")
                    rows.setdefault("list_s3_cold_s", []).append(cold["s"])
                    rows.setdefault("list_s3_again_s", []).append(_fresh(e, url, "list")["s"])
                    rows.setdefault("open_s3_cold_s", []).append(_fresh(e, one, "open")["s"])
                    rows.setdefault("open_s3_again_s", []).append(_fresh(e, one, "open")["s"])
                    f = _fresh(e, one, str(frames))
                    rows.setdefault("frame_s3_cold_p50_ms", []).append(f["p50_ms"])
                    f = _fresh(e, one, str(frames))
                    rows.setdefault("frame_s3_again_p50_ms", []).append(f["p50_ms"])
                    extra["listed_runs"] = cold["n"]
        out: dict = {"runs": n, "repeats": repeats, "upload_s": upload_s, **extra}
        for k, v in rows.items():
            out[k] = _spread(v)
        med = {k: statistics.median(v) for k, v in rows.items()}
        out["list_ratio_cold"] = med["list_s3_cold_s"] / med["list_disk_s"]
        out["list_ratio_again"] = med["list_s3_again_s"] / med["list_disk_s"]
        out["open_ratio_cold"] = med["open_s3_cold_s"] / med["open_disk_first_s"]
        out["open_ratio_again"] = med["open_s3_again_s"] / med["open_disk_again_s"]
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="the run to copy (default: a 600-step synthetic run)")
    p.add_argument("--sweep", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--frames", type=int, default=30)
    a = p.parse_args()
    tmp = None
    run = a.run
    if run is None:
        from bench.synth import make_run

        tmp = Path(tempfile.mkdtemp())
        run = make_run(tmp / "smoke", steps=600, seed=0)
    print(f"# run: {run.resolve()}, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores", flush=True)
    for k, v in bench_objectstore(run.resolve(), a.sweep, a.repeats, a.frames).items():
        print(f"s3         {k:32s} {v:>24}" if isinstance(v, str) else f"s3         {k:32s} {v:24.3f}", flush=True)
    if tmp:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
