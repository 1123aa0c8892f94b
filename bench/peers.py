"""mfm side by side with TensorBoard and Rerun on the same run (issue 24).

    pip install tensorboardX==2.6.5 tensorboard==2.21.0 rerun-sdk==0.41.0   # this benchmark only
    python -m bench.peers RUN_DIR [--frames 300] [--repeats 3] [--work DIR] [--keep]
    python -m bench.peers RUN_DIR --only disk          # where mfm's disk bytes go; packed copies

The peers are not dependencies of mfm: install them only to run this benchmark.

``peers`` (the default group) copies the run's content (every step's frame, its vitals
and position, each episode's summary text at its last step) into a TensorBoard log
(tensorboardX: image, scalar and text summaries) and into two Rerun recordings (.rrd: raw
``rr.Image`` and PNG ``rr.EncodedImage``), then measures each store in fresh processes
(imports excluded), ``--repeats`` times: the time to open it (mfm: the run with every
table and its problem list, with the table cache filled by an earlier open and with the
cache off; TensorBoard: ``EventAccumulator.Reload`` keeping every event; Rerun: every chunk
of the file read into Arrow record batches), peak memory after the open (VmHWM), and one
random frame (p50, p95) over ``--frames`` random steps: for mfm cold (its episode not read
yet: the decoded-strip cache emptied before each, untimed) and warm (the next frame of the
episode just read); for the peers the same two reads (everything is in memory after their
open). Bytes per step: file contents and allocated on disk (``st_blocks * 512``),
files only and with the folders. The OS page cache is warm for every store alike.

``disk`` measures where the run's allocated bytes go (per kind of file, block rounding,
folders), what the run takes packed by ``mfm pack`` (``mfm.memory.packed``: one stored
``episodes.zip``) and what other layouts would take (a zip or a tar per 1,000 episodes, a
tar per run, a zip per episode, one record file per episode), and how fast mfm's own
reader opens the packed copy and reads its frames against the run as written (fresh
processes, the same random frames; a zip per episode read by a plain reader).

Prints one JSON object per group and a Markdown table. The temporary copies are removed
unless ``--keep``.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from mfm.memory.packed import pack_run

INSTALL = "pip install tensorboardX==2.6.5 tensorboard==2.21.0 rerun-sdk==0.41.0"
"""The peers, pinned to the versions measured; installed for this benchmark only."""

KINDS = ("mfm", "mfm-nocache", "tensorboard", "rerun-raw", "rerun-png")
BLOCK = 4096


def need_peers() -> None:
    """Exit with the install command if a peer is missing."""
    missing = []
    for mod in ("tensorboardX", "tensorboard", "rerun"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        sys.exit(f"bench.peers: {', '.join(missing)} not installed; the peers are not mfm dependencies, "
                 f"install them for this benchmark only:\n    {INSTALL}")


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM) in MB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# --- the run's content --------------------------------------------------------------------

def run_content(run: Path) -> Iterator[tuple[int, np.ndarray, dict[str, float], str | None]]:
    """(step, frame, scalars, text) for every step with a frame, in step order: scalars are
    the vitals and the position; text the summary of the episode ending at that step."""
    from loaders import open_run
    from mfm.memory.retrieval import episode_frame

    r = open_run(run)
    steps = r.steps()
    cols = ("health", "food", "drink", "energy", "x", "y")
    by_step = {int(s): i for i, s in enumerate(steps["step"].to_numpy())}
    values = {c: steps[c].to_numpy(dtype=float) for c in cols}
    for ref in sorted(r.index.rows, key=lambda e: (e.first_step, e.id)):
        for i in range(ref.frames):
            step = ref.first_step + 1 + i
            row = by_step.get(step)
            scalars = {c: float(values[c][row]) for c in cols} if row is not None else {}
            text = ref.summary if i == ref.frames - 1 else None
            yield step, episode_frame(run, ref, i), scalars, text


def png_bytes(frame: np.ndarray) -> bytes:
    """A frame as PNG (Pillow's defaults, as tensorboardX encodes its images)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


def export(run: Path, work: Path) -> dict[str, Any]:
    """Write the run's content into ``work/tb`` (TensorBoard), ``work/raw.rrd`` and
    ``work/png.rrd`` (Rerun); returns the seconds each writer took and the step count."""
    import rerun as rr
    from tensorboardX import SummaryWriter

    tb = SummaryWriter(str(work / "tb"))
    recs = {}
    for name in ("raw", "png"):
        rec = rr.RecordingStream("mfm-peers", recording_id=f"{run.name}-{name}")
        rec.save(str(work / f"{name}.rrd"))
        recs[name] = rec
    spent = {"tensorboard": 0.0, "rerun-raw": 0.0, "rerun-png": 0.0}
    n = 0
    for step, frame, scalars, text in run_content(run):
        n += 1
        t = time.perf_counter()
        tb.add_image("frame", frame, step, dataformats="HWC")
        for k, v in scalars.items():
            tb.add_scalar(f"{'position' if k in ('x', 'y') else 'vitals'}/{k}", v, step)
        if text is not None:
            tb.add_text("episode", text, step)
        t1 = time.perf_counter()
        spent["tensorboard"] += t1 - t
        for name, rec in recs.items():
            t = time.perf_counter()
            rec.set_time("step", sequence=step)
            image = rr.Image(frame) if name == "raw" else rr.EncodedImage(contents=png_bytes(frame),
                                                                           media_type="image/png")
            rec.log("frame", image)
            for k, v in scalars.items():
                rec.log(f"{'position' if k in ('x', 'y') else 'vitals'}/{k}", rr.Scalars(v))
            if text is not None:
                rec.log("episode", rr.TextDocument(text))
            spent[f"rerun-{name}"] += time.perf_counter() - t
    t = time.perf_counter()
    tb.close()
    spent["tensorboard"] += time.perf_counter() - t
    for name, rec in recs.items():
        t = time.perf_counter()
        rec.flush()
        rec.disconnect()
        spent[f"rerun-{name}"] += time.perf_counter() - t
    return {"steps": n, "write_s": spent}


# --- readers, each in a fresh process -------------------------------------------------------

def open_mfm(path: Path) -> Callable[[int], np.ndarray]:
    """Open an mfm run as the dashboard does (every table, its problem list)."""
    from bench.opentime import TABLES
    from loaders import open_run

    r = open_run(path)
    for name in TABLES:
        r.table(name)
    len(r.problems)
    return r.frame


def open_tensorboard(path: Path) -> Callable[[int], np.ndarray]:
    """Load every event of a TensorBoard log (no sampling) and index the images by step."""
    from PIL import Image
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(path), size_guidance={ea.IMAGES: 0, ea.SCALARS: 0, ea.TENSORS: 0,
                                                         ea.HISTOGRAMS: 0, ea.COMPRESSED_HISTOGRAMS: 0,
                                                         ea.AUDIO: 0})
    acc.Reload()
    images = {e.step: e.encoded_image_string for e in acc.Images("frame")}

    def frame(step: int) -> np.ndarray:
        with Image.open(io.BytesIO(images[step])) as im:
            return np.asarray(im.convert("RGB"))
    return frame


def open_rerun(path: Path) -> Callable[[int], np.ndarray]:
    """Read every chunk of an .rrd file into Arrow record batches and index the frames by step
    (raw ``Image:buffer`` or ``EncodedImage:blob``)."""
    import rerun.chunk as rc
    from PIL import Image

    batches = [c.to_record_batch() for c in rc.RrdReader(str(path)).store().stream().to_chunks()]
    where: dict[int, tuple[np.ndarray, int, int, tuple[int, int] | None]] = {}
    for b in batches:
        if b.schema.metadata.get(b"rerun:entity_path") != b"/frame":
            continue
        names = b.schema.names
        raw = "Image:buffer" in names
        col = b.column(names.index("Image:buffer" if raw else "EncodedImage:blob"))
        shape = None
        if raw:
            fmt = b.column(names.index("Image:format")).flatten()
            shape = (fmt.field("height")[0].as_py(), fmt.field("width")[0].as_py())
        blobs = col.flatten()
        offsets = np.asarray(blobs.offsets)
        offsets = offsets - offsets[0]
        data = np.asarray(blobs.flatten())
        for row, step in enumerate(b.column(names.index("step")).to_numpy()):
            where[int(step)] = (data, int(offsets[row]), int(offsets[row + 1]), shape)

    def frame(step: int) -> np.ndarray:
        data, a, z, shape = where[step]
        if shape is not None:
            return data[a:z].reshape(shape[0], shape[1], 3)
        with Image.open(io.BytesIO(data[a:z].tobytes())) as im:
            return np.asarray(im.convert("RGB"))
    return frame


def open_zip(path: Path) -> Callable[[int], np.ndarray]:
    """A reader of frames from a run whose ``episodes/`` is packed in ``episodes.zip``
    (uncompressed: the central directory read once) or into ``episodes/ep_N.zip`` (each
    opened when read); each strip read and decoded on demand, no cache."""
    from PIL import Image

    from mfm.schema import FRAMES_PER_CHUNK, frame_chunk

    per_episode = not (path / "episodes.zip").exists()
    zf = None if per_episode else zipfile.ZipFile(path / "episodes.zip")
    members = {} if zf is None else {i.filename: i for i in zf.infolist()}
    eps = []
    with open(path / "index.jsonl", "rb") as f:
        for line in f:
            e = json.loads(line)
            if e.get("frames"):
                eps.append((e["first_step"], e["frames"], e["path"]))
    eps.sort()
    firsts = np.array([e[0] for e in eps])

    def frame(step: int) -> np.ndarray:
        first, n, ep = eps[int(np.searchsorted(firsts, step, side="left")) - 1]
        i = step - first - 1
        chunk, row = frame_chunk(ep, i)
        if zf is None:
            with zipfile.ZipFile(path / f"{ep}.zip") as one:
                data = one.read(chunk)
        else:
            data = zf.read(members[chunk])
        with Image.open(io.BytesIO(data)) as im:
            strip = np.asarray(im.convert("RGB"))
        rows = min(FRAMES_PER_CHUNK, n - (i - row))
        h = strip.shape[0] // rows
        return strip[row * h:(row + 1) * h]
    return frame


OPENERS: dict[str, Callable[[Path], Callable[[int], np.ndarray]]] = {
    "mfm": open_mfm, "mfm-nocache": open_mfm, "tensorboard": open_tensorboard, "rerun-raw": open_rerun,
    "rerun-png": open_rerun, "mfm-zip": open_zip}


def _imports(kind: str) -> None:
    """Import what the reader needs before the clock starts."""
    import PIL.Image  # noqa: F401
    if kind.startswith("mfm"):
        import loaders  # noqa: F401
        import mfm.memory.retrieval  # noqa: F401
    elif kind == "tensorboard":
        from tensorboard.backend.event_processing import event_accumulator  # noqa: F401
    else:
        import rerun.chunk  # noqa: F401


def _percentiles(lat: list[float]) -> dict[str, float]:
    return {"p50_ms": 1000 * statistics.median(lat), "p95_ms": 1000 * float(np.percentile(lat, 95))}


def _nothing() -> None:
    """What a reader without a decode cache forgets."""


def measure(kind: str, path: Path, pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """In this (fresh) process: open ``path`` as ``kind``, then for each pair time the first
    step (cold: for mfm, the decoded-strip cache emptied before, untimed, so its episode was
    not read yet), then the second (its episode just read: warm)."""
    t = time.perf_counter()
    _imports(kind)
    imported = time.perf_counter() - t
    t = time.perf_counter()
    frame = OPENERS[kind](path)
    opened = time.perf_counter() - t
    hwm = peak_mb()
    out: dict[str, Any] = {"import_s": imported, "open_s": opened, "peak_mb_after_open": hwm}
    if pairs:
        forget: Callable[[], None] = _nothing
        if kind in ("mfm", "mfm-nocache"):
            from mfm.memory.retrieval import forget_decoded as forget
        lat: dict[str, list[float]] = {"cold": [], "warm": []}
        for pair in pairs:
            forget()
            for label, step in zip(("cold", "warm"), pair):
                t = time.perf_counter()
                f = frame(step)
                lat[label].append(time.perf_counter() - t)
                assert f.shape[-1] == 3
        out.update({label: _percentiles(v) for label, v in lat.items()})
        out["peak_mb_after_frames"] = peak_mb()
    return out


def _child(kind: str, path: Path, pairs: list[tuple[int, int]], env: dict[str, str] | None = None) -> dict:
    """:func:`measure` in a fresh interpreter."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(pairs, f)
    try:
        out = subprocess.check_output([sys.executable, "-m", "bench.peers", "--measure", kind, str(path), f.name],
                                      text=True, cwd=repo, env=dict(os.environ, **(env or {})))
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def pick_pairs(run: Path, n: int, seed: int = 0) -> list[tuple[int, int]]:
    """``n`` random steps with a frame (uniform over steps, as in ``bench.bench``'s frames
    figure), each with another step of its episode: the next frame, the same one if the
    episode has one frame."""
    rows = [json.loads(line) for line in (run / "index.jsonl").read_text(encoding="utf-8").splitlines() if line]
    eps = sorted((r["first_step"], r["frames"]) for r in rows if r.get("frames"))
    firsts = np.array([e[0] for e in eps])
    steps = np.concatenate([np.arange(f + 1, f + 1 + k) for f, k in eps])
    out = []
    for s in np.random.default_rng(seed).choice(steps, size=min(n, len(steps)), replace=False):
        first, k = eps[int(np.searchsorted(firsts, s, side="left")) - 1]
        out.append((int(s), first + 1 + (int(s) - first) % k))
    return out


# --- bytes ------------------------------------------------------------------------------------

def sizes(path: Path) -> dict[str, int]:
    """File contents, allocated bytes of the files, allocated bytes with the folders, and
    the numbers of files and folders under ``path`` (a file or a folder)."""
    if path.is_file():
        st = path.stat()
        return {"content": st.st_size, "allocated_files": st.st_blocks * 512,
                "allocated": st.st_blocks * 512, "files": 1, "folders": 0}
    content = alloc = dirs_alloc = files = folders = 0
    for root, dirs, names in os.walk(path):
        folders += 1
        dirs_alloc += os.stat(root).st_blocks * 512
        for name in names:
            st = os.stat(os.path.join(root, name))
            content += st.st_size
            alloc += st.st_blocks * 512
            files += 1
    return {"content": content, "allocated_files": alloc, "allocated": alloc + dirs_alloc, "files": files,
            "folders": folders}


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench_peers(run: Path, work: Path, frames: int = 300, repeats: int = 3) -> dict[str, Any]:
    """Export the run to the peers under ``work`` and measure the five readers."""
    need_peers()
    steps = json.loads((run / "run.json").read_text(encoding="utf-8"))["last_step"]
    t = time.perf_counter()
    written = export(run, work)
    written["export_s"] = time.perf_counter() - t
    paths = {"mfm": run, "mfm-nocache": run, "tensorboard": work / "tb", "rerun-raw": work / "raw.rrd",
             "rerun-png": work / "png.rrd"}
    pairs = pick_pairs(run, frames)
    cache = work / "mfmcache"
    envs = {"mfm": {"MFM_CACHE_DIR": str(cache)}, "mfm-nocache": {"MFM_CACHE_DIR": "off"}}
    _child("mfm", run, [], envs["mfm"])
    results: dict[str, list[dict]] = {k: [] for k in KINDS}
    for _ in range(repeats):
        for kind in KINDS:
            results[kind].append(_child(kind, paths[kind], [] if kind == "mfm-nocache" else pairs, envs.get(kind)))
    out: dict[str, Any] = {"steps": steps, "frames": len(pairs), "repeats": repeats, "written": written}
    for kind in KINDS:
        rs = results[kind]
        row: dict[str, Any] = {"open_s": _stats([r["open_s"] for r in rs]),
                               "import_s": _stats([r["import_s"] for r in rs]),
                               "peak_mb_after_open": _stats([r["peak_mb_after_open"] for r in rs])}
        for label in ("cold", "warm"):
            if label in rs[0]:
                row[label] = {q: _stats([r[label][q] for r in rs]) for q in ("p50_ms", "p95_ms")}
        if kind != "mfm-nocache":
            row["bytes"] = sizes(paths[kind])
            row["per_step"] = {k: row["bytes"][k] / steps for k in ("content", "allocated_files", "allocated")}
        out[kind] = row
    return out


def table(res: dict[str, Any]) -> str:
    """The measured figures as a Markdown table (medians; spread in brackets)."""
    def s(x: dict[str, float], fmt: str) -> str:
        return f"{x['median']:{fmt}} ({x['min']:{fmt}}–{x['max']:{fmt}})"
    m, cols = res["mfm"], ("tensorboard", "rerun-raw", "rerun-png")
    lines = ["| measure | mfm | TensorBoard | Rerun raw | Rerun PNG |", "|---|---|---|---|---|"]
    lines.append("| open, fresh process (s) | " + s(m["open_s"], ".3f") + " cache / "
                 + s(res["mfm-nocache"]["open_s"], ".2f") + " no cache | "
                 + " | ".join(s(res[k]["open_s"], ".2f") for k in cols) + " |")
    for label, name in (("cold", "first read"), ("warm", "second read")):
        lines.append(f"| one random frame, p50 / p95 (ms), {label} (mfm) / {name} (peers) | "
                     + " | ".join(f"{s(res[k][label]['p50_ms'], '.3f')} / {res[k][label]['p95_ms']['median']:.3f}"
                                  for k in ("mfm", *cols)) + " |")
    for key, name in (("content", "file contents"), ("allocated_files", "allocated, files"),
                      ("allocated", "allocated, files and folders")):
        lines.append(f"| bytes per step, {name} (KB) | "
                     + " | ".join(f"{res[k]['per_step'][key] / 1000:.2f}" for k in ("mfm", *cols)) + " |")
    lines.append("| peak memory after open (MB) | " + s(m["peak_mb_after_open"], ".0f") + " | "
                 + " | ".join(s(res[k]["peak_mb_after_open"], ".0f") for k in cols) + " |")
    return "\n".join(lines)


# --- disk ---------------------------------------------------------------------------------

def _kind_of(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] != "episodes" or len(parts) < 3:
        return "tables and manifest" if len(parts) == 1 else parts[0] + "/"
    return "frames/*.webp" if parts[-2] == "frames" else "/".join(parts[2:])


def breakdown(run: Path) -> dict[str, dict[str, int]]:
    """Per kind of file: count, content and allocated bytes; the folders apart."""
    out: dict[str, dict[str, int]] = {}
    for root, _, names in os.walk(run):
        rel_root = os.path.relpath(root, run)
        d = out.setdefault("folders", {"count": 0, "content": 0, "allocated": 0})
        d["count"] += 1
        d["allocated"] += os.stat(root).st_blocks * 512
        for name in names:
            rel = name if rel_root == "." else f"{rel_root}/{name}"
            st = os.stat(os.path.join(root, name))
            d = out.setdefault(_kind_of(rel), {"count": 0, "content": 0, "allocated": 0})
            d["count"] += 1
            d["content"] += st.st_size
            d["allocated"] += st.st_blocks * 512
    return out


def one_record_file(run: Path) -> int:
    """Allocated bytes if each episode kept its three record files as one file and its strips
    beside it in its one folder (4 KiB blocks, one block per folder), the rest as it is."""
    total = 0
    for ep in os.scandir(run / "episodes"):
        records = sum(os.stat(os.path.join(ep.path, rel)).st_size
                      for rel in ("action.json", "outcome.json", "state/state.json")
                      if os.path.exists(os.path.join(ep.path, rel)))
        total += BLOCK + -(-records // BLOCK) * BLOCK
        for sub in ("frames", "observation"):
            if os.path.isdir(os.path.join(ep.path, sub)):
                total += sum(os.stat(f.path).st_blocks * 512 for f in os.scandir(os.path.join(ep.path, sub)))
    return total


def pack(run: Path, out: Path, how: str, per: int | None = None) -> list[Path]:
    """Copy ``run`` to ``out`` with ``episodes/`` packed uncompressed into one ``how``
    (zip or tar) file, or one per ``per`` episodes (``per=1``: ``episodes/ep_N.zip``, the
    episode's files under their usual names); the rest as it is."""
    shutil.copytree(run, out, ignore=lambda d, names: ["episodes"] if Path(d) == run else [])
    eps = sorted(p.name for p in (run / "episodes").iterdir())
    groups = [eps] if per is None else [eps[i:i + per] for i in range(0, len(eps), per)]
    if per == 1:
        (out / "episodes").mkdir()
    files = []
    for g, names in enumerate(groups):
        dest = out / (f"episodes.{how}" if per is None else f"episodes/{names[0]}.{how}" if per == 1
                      else f"episodes_{g:03d}.{how}")
        if how == "zip":
            with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zf:
                for name in names:
                    for root, _, fs in os.walk(run / "episodes" / name):
                        for f in sorted(fs):
                            p = Path(root) / f
                            zf.write(p, p.relative_to(run).as_posix())
        else:
            with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tf:
                for name in names:
                    tf.add(run / "episodes" / name, f"episodes/{name}")
        files.append(dest)
    return files


def bench_disk(run: Path, work: Path, frames: int = 300, repeats: int = 3) -> dict[str, Any]:
    """Where the run's allocated bytes go, and what packed copies would take and cost."""
    steps = json.loads((run / "run.json").read_text(encoding="utf-8"))["last_step"]
    out: dict[str, Any] = {"steps": steps, "as_is": sizes(run), "breakdown": breakdown(run)}
    out["one_record_file_allocated"] = one_record_file(run) + sum(
        os.stat(p).st_blocks * 512 for p in run.iterdir() if p.is_file()) + BLOCK * 2
    for how, per in (("zip", 1000), ("zip", 1), ("tar", None), ("tar", 1000)):
        dest = work / f"packed_{how}_{per or 'all'}"
        t = time.perf_counter()
        pack(run, dest, how, per)
        out[f"{how}_{per or 'all'}"] = dict(sizes(dest), pack_s=time.perf_counter() - t)
    packed = work / "mfm_pack"
    shutil.copytree(run, packed, copy_function=os.link)
    t = time.perf_counter()
    pack_run(packed)
    out["mfm_pack"] = dict(sizes(packed), pack_s=time.perf_counter() - t)
    t = time.perf_counter()
    with tarfile.open(work / "packed_tar_all" / "episodes.tar") as tf:
        tf.getmembers()
    out["tar_scan_s"] = time.perf_counter() - t
    pairs = pick_pairs(run, frames)
    for name, kind, where in (("mfm_pack_reader", "mfm", packed), ("mfm_reader", "mfm", run),
                              ("zip_per_episode_reader", "mfm-zip", work / "packed_zip_1")):
        rs = [_child(kind, where, pairs) for _ in range(repeats)]
        out[name] = {"open_s": _stats([r["open_s"] for r in rs]),
                     "cold_p50_ms": _stats([r["cold"]["p50_ms"] for r in rs]),
                     "cold_p95_ms": _stats([r["cold"]["p95_ms"] for r in rs]),
                     "warm_p50_ms": _stats([r["warm"]["p50_ms"] for r in rs])}
    for key in [k for k in out if k.startswith(("zip_", "tar_", "mfm_pack")) and isinstance(out[k], dict) and "allocated" in out[k]]:
        out[key]["allocated_per_step"] = out[key]["allocated"] / steps
    out["as_is"]["allocated_per_step"] = out["as_is"]["allocated"] / steps
    out["as_is"]["allocated_files_per_step"] = out["as_is"]["allocated_files"] / steps
    out["as_is"]["content_per_step"] = out["as_is"]["content"] / steps
    out["one_record_file_per_step"] = out["one_record_file_allocated"] / steps
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--measure":
        kind, path, pairs_file = argv[1], Path(argv[2]), argv[3]
        pairs = [tuple(p) for p in json.loads(Path(pairs_file).read_text())]
        print(json.dumps(measure(kind, path, pairs)))
        return
    ap = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="peers,disk")
    ap.add_argument("--work", type=Path, default=None, help="folder for the copies (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the copies")
    a = ap.parse_args(argv)
    groups = a.only.split(",")
    if "peers" in groups:
        need_peers()
    work = Path(tempfile.mkdtemp(prefix="mfm-peers-", dir=a.work))
    try:
        if "peers" in groups:
            res = bench_peers(a.run.resolve(), work, a.frames, a.repeats)
            print(json.dumps({"peers": res}))
            print(table(res))
        if "disk" in groups:
            print(json.dumps({"disk": bench_disk(a.run.resolve(), work, a.frames, a.repeats)}))
    finally:
        if a.keep:
            print(f"copies kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
