"""``mfm import``: write any readable run (foreign formats included) out in our run format.

Lossless for what both formats share: every valid record is written as it was read, each
episode's state/action/outcome records as they were, its final frame and, where the source
has them, its per-step frames. What the source lacks stays absent (and ``mfm validate``
says so as warnings).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from loaders.formats import detect
from loaders.run import Run, find_runs, open_run
from mfm.memory.agent_memory import rebuild
from mfm.memory.appendlog import AppendLog, write_atomic
from mfm.memory.episode_store import dump_json, encode_png, write_strips
from mfm.memory.retrieval import FrameError
from mfm.memory.run_writer import LOG_RULE
from mfm.schema import LOGS, MANIFEST, TABLES, IndexRow


def import_runs(src: Path, dest: Path) -> list[Path]:
    """Convert the run at ``src`` (or every run of a Crafter recorder folder) into ``dest``.
    Returns the run directories written."""
    src, dest = Path(src), Path(dest)
    if detect(src) is None:
        raise ValueError(f"{src}: no run in a format mfm reads (our runs, MFM runs or exports, Crafter recordings)")
    if src.is_dir() and detect(src) == "crafter-recorder":
        return [convert(open_run(p), dest / p.stem) for p in find_runs(src)]
    return [convert(open_run(src), dest)]


def convert(run: Run, dest: Path) -> Path:
    """Write one opened run into the empty folder ``dest`` in our format."""
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty; import into a new folder")
    dest.mkdir(parents=True, exist_ok=True)
    index: list[IndexRow] = []
    for ref in run.records("index.jsonl"):
        index.append(_episode(run, ref, dest))
    tables = {name: list(run.records(name)) for name in TABLES}
    tables["index.jsonl"] = index
    for name, rows in tables.items():
        log = AppendLog(dest / name)
        log.append(rows)
        log.flush()
    writes = tables["memory_writes.jsonl"]
    for path in dict.fromkeys(w.path for w in writes):
        text = rebuild(writes, path)
        if text is not None:
            write_atomic(dest / path, text.encode("utf-8"))
    log_text = getattr(run.source, "log_text", lambda: None)() or "".join(
        f"{LOG_RULE}\nAction {i} | Step {r.last_step} | Life {r.life} | {r.id}\n\n[ACTION] {r.summary}\n"
        for i, r in enumerate(index))
    (dest / LOGS).write_text(log_text, encoding="utf-8")
    m = run.manifest
    if m is not None:
        config = dict(m.config, imported_from={"format": run.format, "path": str(run.path)})
        m = dataclasses.replace(m, config=config)
        write_atomic(dest / MANIFEST, (m.to_json() + "\n").encode("utf-8"))
    return dest


def _episode(run: Run, ref: IndexRow, dest: Path) -> IndexRow:
    """Write one episode's folder; return its index row with our paths."""
    path = f"episodes/{ref.id}"
    base = dest / path
    base.mkdir(parents=True, exist_ok=True)
    rec = run.episode_record(ref.id)
    for rel, obj in (("state/state.json", rec.state), ("action.json", rec.action), ("outcome.json", rec.outcome)):
        if obj is not None:
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_bytes(dump_json(obj))
    image = None
    try:
        obs = run.observation(ref.id)
    except FrameError:
        pass
    else:
        (base / "observation").mkdir(parents=True, exist_ok=True)
        (base / "observation" / "image.png").write_bytes(encode_png(obs))
        image = f"{path}/observation/image.png"
    frames = []
    if ref.frames:
        try:
            frames = [run.frame(s) for s in range(ref.first_step + 1, ref.first_step + 1 + ref.frames)]
        except FrameError:
            frames = []
        write_strips(dest, path, frames)
    return dataclasses.replace(ref, path=path, image=image, frames=len(frames))
