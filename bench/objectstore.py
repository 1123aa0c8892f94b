"""Object storage against a local disk (issues 22 and 48): listing a sweep, opening a run and
reading frames from a real S3-compatible server on loopback (moto's standalone server),
against the same files on disk, each in a fresh process; the requests each one sends to the
server, counted (``mfm.objectstore.counting``), beside its time.

    python -m bench.objectstore --run DIR [--sweep 48,480] [--repeats 3] [--frames 30]

Buckets: ``bench-sweep-N`` hold N copies of the run's top-level files but its tables
(``run.json``, ``lives.jsonl``, ``logs.txt``, ``mine/``: a listing reads no other table),
each copy registered in the folder's manifest as a closing run registers itself, the
manifest checked against a listing just before each figure (as a reader that may write
leaves it); ``bench-one`` the whole run (its episode files too),
uploaded as files (no columnar copy) for the JSONL rows, then given its columnar copy;
``bench-pack`` the run packed (``mfm pack``: one ``episodes.zip``) with its top-level files.
Separate buckets, because moto scans every key of a bucket for each listing. The disk side
of a sweep is hard-linked copies of the run without its episode folders, which a listing
does not read (``bench.bench.make_sweep``). Figures: median and
range over the repeats; requests: those of the last repeat (they do not vary).

Cold: an empty mirror and table cache; again: a new process, the mirror and table cache
filled. Frames are random steps, so the prefetch of neighbouring strips is turned off
(``MFM_PREFETCH=0``), and readers do not write back (``MFM_WRITE_BACK=0``) but the first. "First reader": no manifest in the bucket yet (it lists every run folder, then writes
the manifest back).
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
from loaders.runs_summary import milestone_steps, runs_overview
from mfm.objectstore import counting
place, what = sys.argv[1], sys.argv[2]
t = time.perf_counter()
with counting() as req:
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
        before = req.total
        run.frame(steps[0])
        first = (time.perf_counter() - t, req.total - before)
        lat, per = [], []
        for s in steps[1:]:
            t1, n1 = time.perf_counter(), req.total
            run.frame(s)
            lat.append(time.perf_counter() - t1)
            per.append(req.total - n1)
        lat.sort()
        per.sort()
        out = {"n": len(lat), "p50_ms": 1000 * lat[len(lat) // 2], "max_ms": 1000 * lat[-1],
               "first_ms": 1000 * first[0], "first_requests": first[1], "requests_p50": per[len(per) // 2],
               "requests_max": per[-1]}
out.update(s=time.perf_counter() - t, rss_mb=peak_rss_mb(), requests=req.total, kinds=dict(req))
print(json.dumps(out))
"""
LEFT_OUT = ("steps.jsonl", "turns.jsonl", "grid.jsonl", "seen.jsonl", "milestones.jsonl", "memory_writes.jsonl",
            "index.jsonl", "episodes", "episodes.zip")
"""Not in the sweep buckets: what a listing never reads."""


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


def _columns_of(run: Path, url: str) -> bytes:
    """The run's columnar copy, made for its files as uploaded to ``url``."""
    from loaders.columns import build
    from mfm.objectstore import list_folder, stamp_of

    listing, _ = list_folder(url)
    data = build(run, {n: stamp_of(i) for n, i in listing.items()})
    assert data is not None
    return data


def _upload_sweep(fs, run: Path, bucket: str, n: int) -> tuple[str, dict]:
    """``n`` copies of the run's top-level files but its tables under ``bucket/sweep/run_K``,
    each with its own ``run.json`` (run id, method, seed, as ``bench.bench.make_sweep``);
    the root URL, and the folder's manifest with an entry per copy."""
    from loaders.columns import etag_of
    from mfm.objectstore import empty_root_manifest, list_folder, manifest_entry

    methods = ("direct", "pro-long", "vista", "mfm")
    manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
    fs.mkdir(bucket)
    tops = [p for p in sorted(run.iterdir()) if p.name not in LEFT_OUT and p.name != "run.json"]
    entries = {}
    episodes = (run / "index.jsonl").read_bytes().count(b"\n")
    for k in range(n):
        name = f"run_{k:02d}"
        dest = f"{bucket}/sweep/{name}"
        for p in tops:
            fs.put(str(p), f"{dest}/{p.name}", recursive=p.is_dir())
        own = (json.dumps(dict(manifest, run_id=name, method=methods[k % 4], seed=k)) + "\n").encode()
        fs.pipe_file(f"{dest}/run.json", own)
        if k == 0:
            listing, folders = list_folder(f"s3://{dest}")
        here = dict(listing, **{"run.json": {"size": len(own), "ETag": etag_of(own)}})
        entries[name] = manifest_entry(own, (run / "lives.jsonl").read_bytes(), here, folders, episodes)
    return f"s3://{bucket}/sweep", dict(empty_root_manifest(), runs=entries, folders=[])


def _tops(run: Path, out: Path) -> Path:
    """A copy of the run without its episodes (hard links): all a listing reads on disk."""
    shutil.copytree(run, out, copy_function=os.link, ignore=lambda d, names: ["episodes"] if Path(d) == run else [])
    return out


def _put_manifest(fs, url: str, doc: dict) -> None:
    """The folder's manifest, as checked against a listing just now."""
    import gzip

    from mfm.objectstore import ROOT_MANIFEST

    now = time.time()
    fs.pipe_file(f"{url[5:]}/{ROOT_MANIFEST}", gzip.compress(json.dumps(dict(doc, checked=now, updated=now),
                                                                         sort_keys=True).encode()))


def bench_objectstore(run: Path, sweeps: tuple[int, ...] = (48,), repeats: int = 3, frames: int = 30) -> dict:
    """Listing sweeps of each size, opening one run, and ``frames`` random frames: disk
    against S3, with the requests of each."""
    from bench.bench import make_sweep
    from mfm.memory.packed import pack_run
    from mfm.objectstore import COLUMNS, ROOT_MANIFEST

    tmp = Path(tempfile.mkdtemp())
    proc, s3env = s3_server(tmp / "moto.log")
    try:
        env = dict(os.environ, **s3env)
        os.environ.update(s3env)
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        t = time.perf_counter()
        fs.mkdir("bench-one")
        fs.put(str(run), "bench-one/run", recursive=True)
        one = "s3://bench-one/run"
        columns = _columns_of(run, one)
        packed_run = tmp / "packed" / "run"
        shutil.copytree(run, packed_run, copy_function=os.link)
        pack_run(packed_run)
        fs.mkdir("bench-pack")
        for p in packed_run.iterdir():
            if p.name != "episodes":
                fs.put(str(p), f"bench-pack/run/{p.name}", recursive=p.is_dir())
        fs.pipe_file(f"bench-pack/run/{COLUMNS}", _columns_of(packed_run, "s3://bench-pack/run"))
        roots = {n: _upload_sweep(fs, run, f"bench-sweep-{n}", n) for n in sweeps}
        tops = _tops(run, tmp / "tops" / run.name)
        disks = {n: make_sweep(tops, tmp / f"sweep{n}", n) for n in sweeps}
        upload_s = time.perf_counter() - t
        rows: dict[str, list[float]] = {}
        req: dict[str, object] = {}

        def keep(name: str, got: dict, value: str = "s") -> None:
            rows.setdefault(name, []).append(got[value])
            req[name] = got["requests"] if value == "s" else got["requests_p50"]
            if value != "s":
                req[name + " (first frame)"] = got["first_requests"]

        for rep in range(repeats):
            e = dict(env, MFM_CACHE_DIR=str(tmp / f"cache{rep}"), MFM_WRITE_BACK="0", MFM_PREFETCH="0")
            for n, (url, doc) in roots.items():
                keep(f"list{n}_disk_s", _fresh(e, str(disks[n]), "list"))
                fs.invalidate_cache()
                if fs.exists(f"{url[5:]}/{ROOT_MANIFEST}"):
                    fs.rm(f"{url[5:]}/{ROOT_MANIFEST}")
                first = dict(e, MFM_CACHE_DIR=str(tmp / f"first{n}_{rep}"), MFM_WRITE_BACK="1")
                keep(f"list{n}_s3_first_reader_s", _fresh(first, url, "list"))
                _put_manifest(fs, url, doc)
                keep(f"list{n}_s3_cold_s", _fresh(e, url, "list"))
                keep(f"list{n}_s3_again_s", _fresh(e, url, "list"))
            keep("open_disk_first_s", _fresh(e, str(run), "open"))
            keep("open_disk_again_s", _fresh(e, str(run), "open"))
            keep("frame_disk_p50_ms", _fresh(e, str(run), str(frames)), "p50_ms")
            fs.invalidate_cache()
            if fs.exists(f"bench-one/run/{COLUMNS}"):
                fs.rm(f"bench-one/run/{COLUMNS}")
            j = dict(e, MFM_CACHE_DIR=str(tmp / f"jsonl{rep}"))
            keep("open_s3_jsonl_cold_s", _fresh(j, one, "open"))
            keep("open_s3_jsonl_again_s", _fresh(j, one, "open"))
            fs.pipe_file(f"bench-one/run/{COLUMNS}", columns)
            keep("open_s3_cold_s", _fresh(e, one, "open"))
            keep("open_s3_again_s", _fresh(e, one, "open"))
            keep("frame_s3_cold_p50_ms", _fresh(e, one, str(frames)), "p50_ms")
            keep("frame_s3_again_p50_ms", _fresh(e, one, str(frames)), "p50_ms")
            keep("frame_pack_cold_p50_ms", _fresh(e, "s3://bench-pack/run", str(frames)), "p50_ms")
            keep("frame_pack_again_p50_ms", _fresh(e, "s3://bench-pack/run", str(frames)), "p50_ms")
        out: dict = {"sweeps": ",".join(map(str, sweeps)), "repeats": repeats, "upload_s": upload_s}
        for k, v in rows.items():
            out[k] = _spread(v)
        for k, v in req.items():
            out[f"requests: {k}"] = float(v)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="the run to copy (default: a 600-step synthetic run)")
    p.add_argument("--sweep", default="48", help="sweep sizes, comma-separated (e.g. 48,480)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--frames", type=int, default=30)
    a = p.parse_args()
    tmp = None
    run = a.run
    if run is None:
        from bench.synth import make_run

        tmp = Path(tempfile.mkdtemp())
        run = make_run(tmp / "smoke", steps=600, seed=0)
    print(f"# run: {run.resolve()}, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    sizes = tuple(int(x) for x in a.sweep.split(","))
    for k, v in bench_objectstore(run.resolve(), sizes, a.repeats, a.frames).items():
        print(f"s3         {k:40s} {v:>24}" if isinstance(v, str) else f"s3         {k:40s} {v:24.3f}", flush=True)
    if tmp:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
