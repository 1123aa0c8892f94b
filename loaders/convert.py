"""``mfm import``: write any readable run (foreign formats included) out in our run format.

Lossless for what both formats share: every valid record is written as it was read, each
episode's state/action/outcome records as they were, its final frame and, where the source
has them, its per-step frames. What the source lacks stays absent (and ``mfm validate``
says so as warnings). What the source holds that is wrong was left out when it was read;
its problems are listed in the written manifest (``config.imported_from``).

Everything is read through the run's source (files a run names stay inside it:
``mfm.boundary``) and written under DEST only, into folders that did not exist or were empty.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from loaders.formats import detect
from loaders.run import Run, find_runs, open_run
from mfm.boundary import UnsafePath, inside
from mfm.memory.agent_memory import rebuild
from mfm.memory.appendlog import AppendLog, write_atomic
from mfm.memory.episode_store import dump_json, encode_png, write_strips
from mfm.memory.retrieval import FrameError
from mfm.memory.run_writer import LOG_RULE
from mfm.progress import counted
from mfm.schema import LOGS, MANIFEST, TABLES, IndexRow, Problem, plain_relative

MAX_LISTED = 200
"""Source problems listed in the imported run's manifest at most (all are counted)."""


def import_runs(src: Path, dest: Path) -> list[Path]:
    """Convert the run at ``src`` (or every run of a Crafter recorder folder) into ``dest``.
    Returns the run directories written. Nothing is written if ``src`` holds no run, a run
    in it has nothing readable (ValueError naming its problems) or a target folder is not
    empty (FileExistsError)."""
    src, dest = Path(src), Path(dest)
    fmt = detect(src)
    if fmt is None:
        raise ValueError(f"{src}: no run in a format mfm reads (our runs, MFM runs or exports, Crafter recordings)")
    if src.is_dir() and fmt == "crafter-recorder":
        targets = [(open_run(p), dest / _folder(p)) for p in find_runs(src)]
    else:
        targets = [(open_run(src), dest)]
    unreadable = [why for run, _ in targets if (why := _unreadable(run))]
    if unreadable:
        raise ValueError("; ".join(unreadable))
    for _, d in targets:
        _check_empty(d)
    return [convert(run, d) for run, d in targets]


def _folder(recording: Path) -> str:
    """The folder name a recording is imported under: its file name without ``.npz``."""
    name = recording.stem
    if not plain_relative(name) or "/" in name or name == ".":
        raise ValueError(f"{_text(recording.name)}: its name cannot name a folder; rename it to import it")
    return name


def _unreadable(run: Run) -> str | None:
    """Why nothing of ``run`` can be imported (its first errors), or None."""
    errors = [p for p in run.problems if p.severity == "error"]
    if not errors or any(run.records(name) for name in TABLES):
        return None
    return f"{_text(run.name)}: nothing readable: " + "; ".join(_text(str(p)) for p in errors[:3])


def _check_empty(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest} is not an empty folder; import into a new folder")


def _text(s: str) -> str:
    """``s`` with what UTF-8 cannot hold (lone surrogates, as from undecodable file names) escaped."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def convert(run: Run, dest: Path) -> Path:
    """Write one opened run into the empty folder ``dest`` in our format."""
    _check_empty(dest)
    dest.mkdir(parents=True, exist_ok=True)
    problems = list(run.problems)
    index = [_episode(run, ref, dest, problems) for ref in counted(run.records("index.jsonl"), "episodes copied")]
    tables = {name: list(run.records(name)) for name in TABLES}
    tables["index.jsonl"] = index
    for name, rows in tables.items():
        log = AppendLog(dest / name)
        log.append(rows)
        log.flush()
    writes = tables["memory_writes.jsonl"]
    for path in dict.fromkeys(w.path for w in writes):
        try:
            text = rebuild(writes, path)
            if text is not None:
                write_atomic(inside(dest, path), text.encode("utf-8"))
        except (ValueError, OSError) as e:
            problems.append(Problem(_text(path), 0, f"not written: {e}"))
    log_text = getattr(run.source, "log_text", lambda: None)() or "".join(
        f"{LOG_RULE}\nAction {i} | Step {r.last_step} | Life {r.life} | {r.id}\n\n[ACTION] {r.summary}\n"
        for i, r in enumerate(index))
    (dest / LOGS).write_text(log_text, encoding="utf-8")
    m = run.manifest
    if m is not None:
        imported = {"format": run.format, "path": _text(str(run.path)), "problem_count": len(problems),
                    "problems": [_text(str(p)) for p in problems[:MAX_LISTED]]}
        m = dataclasses.replace(m, config=dict(m.config, imported_from=imported))
        write_atomic(dest / MANIFEST, (m.to_json() + "\n").encode("utf-8"))
    return dest


def _episode(run: Run, ref: IndexRow, dest: Path, problems: list[Problem]) -> IndexRow:
    """Write one episode's folder; return its index row with our paths. What cannot be
    copied is added to ``problems``."""
    path = f"episodes/{ref.id}"
    base = dest / path
    base.mkdir(parents=True, exist_ok=True)
    try:
        rec = run.episode_record(ref.id)
        records = (("state/state.json", rec.state), ("action.json", rec.action), ("outcome.json", rec.outcome))
    except UnsafePath as e:
        problems.append(Problem(path, 0, f"records not copied: {e}"))
        records = ()
    for rel, obj in records:
        if obj is None:
            continue
        try:
            data = dump_json(obj)
        except ValueError as e:
            problems.append(Problem(f"{path}/{rel}", 0, f"not copied: {e}"))
            continue
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    image = None
    try:
        obs = run.observation(ref.id)
    except FrameError:
        pass
    except UnsafePath as e:
        problems.append(Problem(path, 0, f"observation not copied: {e}"))
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
        except UnsafePath as e:
            problems.append(Problem(path, 0, f"frames not copied: {e}"))
            frames = []
        write_strips(dest, path, frames)
    return dataclasses.replace(ref, path=path, image=image, frames=len(frames))
