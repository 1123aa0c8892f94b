"""Check a run directory against the format spec; report each problem with file:line.

:func:`read_run` is the one tolerant reading path: the loaders use it too, so the
dashboard and ``mfm validate`` report the same problems for the same files.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from mfm import fastread, tablecache
from mfm.fastread import read_arrow
from mfm.memory.agent_memory import apply_diff, sha256
from mfm.boundary import UnsafePath, inside
from mfm.memory.retrieval import FrameError, check_end_frame, decode_png, ends_in_strip
from mfm.schema import (FRAMES_PER_CHUNK, LOGS, MANIFEST, TABLES, IndexRow, MemoryWrite, Problem, RunManifest,
                        StepRow, frame_chunk, read_manifest, read_table)


@dataclass
class RunContents:
    """Everything valid read from a run directory, and what was wrong."""

    dir: Path
    manifest: RunManifest | None
    tables: dict[str, Sequence[Any]] = field(default_factory=dict)
    lines: dict[str, Sequence[int]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    columns: dict[str, pd.DataFrame] = field(default_factory=dict)
    """Tables read by the fast path, as columns (their records are built only if asked for)."""

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


FAST_TABLES = {"index.jsonl": (None, "id"), "steps.jsonl": ("step", None), "grid.jsonl": (None, None),
               "turns.jsonl": (None, None)}
"""Large tables worth the fast path: the column each must be ordered by, the column whose
values must all differ (duplicate episode ids go to the tolerant reader, which reports them)."""


class LazyRecords(Sequence):
    """Records of a table read as columns; built the first time one is asked for."""

    def __init__(self, df: pd.DataFrame, rtype: type) -> None:
        self.df = df
        self.rtype = rtype
        self._rows: list | None = None

    def __len__(self) -> int:
        return len(self.df)

    def _build(self) -> list:
        if self._rows is None:
            kinds = self.rtype.KINDS
            cols = {c: self.df[c].tolist() for c in self.df.columns}
            conv = {c: _converter(kinds[c]) for c in cols}
            self._rows = [self.rtype(**{c: conv[c](cols[c][i]) for c in cols}) for i in range(len(self.df))]
        return self._rows

    def __getitem__(self, i):
        return self._build()[i]

    def __iter__(self):
        return iter(self._build())


def _converter(kind: str):
    """Turn a column value back into the record's field value."""
    base = kind.rstrip("?")

    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA

    if base in ("dict", "counts"):
        return lambda v: None if missing(v) else json.loads(v)
    if base == "list":
        return lambda v: None if missing(v) else tuple(json.loads(v))
    if base in ("strs", "cell", "vec2"):
        return lambda v: None if v is None else tuple(v.tolist() if hasattr(v, "tolist") else v)
    if base == "int":
        return lambda v: None if missing(v) else int(v)
    return lambda v: None if missing(v) else v


def looks_like_run(path: Path) -> bool:
    """A folder holding a manifest or an episode index."""
    return (path / MANIFEST).is_file() or (path / "index.jsonl").is_file()


@dataclass(frozen=True)
class TableRead:
    """One table file read: its valid records, their line numbers and the problems found;
    ``columns`` when the fast path read it (then there are no problems)."""

    records: Sequence[Any]
    lines: Sequence[int]
    problems: tuple[Problem, ...]
    columns: pd.DataFrame | None = None


def read_one_table(path: Path, name: str) -> TableRead:
    """One table file of a run: the fast one-pass reader when it can vouch for every line,
    else the tolerant line-by-line reader."""
    return _read_one(path, name)[0]


def _read_one(path: Path, name: str) -> tuple[TableRead, pa.Table | None]:
    """:func:`read_one_table`, and the Arrow table behind the columns (fast path only)."""
    rtype = TABLES[name]
    t = read_arrow(path, rtype, *FAST_TABLES[name]) if name in FAST_TABLES else None
    if t is not None:
        df = t.to_pandas()
        return TableRead(LazyRecords(df, rtype), range(1, len(df) + 1), (), df), t
    rows, probs = read_table(path, rtype)
    return TableRead([r for _, r in rows], [n for n, _ in rows], tuple(probs)), None


CACHE_MIN_BYTES = 16 * 1024
"""Smaller table files are read faster than a cache entry is checked; they are not cached."""


def read_one_table_cached(path: Path, name: str) -> TableRead:
    """:func:`read_one_table` through ``mfm.tablecache``: the same result, served from the
    cache while the file's stat is unchanged. Tables the fast path vouched for are kept as
    Arrow columns; tables read line by line as their records, line numbers and problems."""
    st = tablecache.stamp(path)
    if st is None or st[0] < CACHE_MIN_BYTES or tablecache.cache_dir() is None:
        return read_one_table(path, name)
    rtype = TABLES[name]
    where = os.path.abspath(path)
    key = [*st, name, fastread.MIN_BYTES]
    hit = tablecache.load("table", where, key)
    if hit is not None:
        try:
            return _decode_table(hit[0], hit[1], rtype)
        except Exception:  # noqa: BLE001 - a bad entry is a miss, whatever is wrong with it
            pass
    read, arrow = _read_one(path, name)
    if not tablecache.racy(st) and tablecache.stamp(path) == st:
        try:
            payload = tablecache.arrow_bytes(arrow) if arrow is not None else _encode_records(read, rtype)
        except (TypeError, ValueError, pa.ArrowException):
            return read
        tablecache.store("table", where, key, "arrow" if arrow is not None else "json", payload)
    return read


_TUPLE_KINDS = ("strs", "list", "cell", "vec2")


def _encode_records(t: TableRead, rtype: type) -> bytes:
    """Records (exactly: ints, floats, key order, tuples), line numbers and problems as JSON."""
    names = [f.name for f in dataclasses.fields(rtype)]
    rows = [[n, *(list(v) if isinstance(v, tuple) else v for v in (getattr(r, f) for f in names))]
            for n, r in zip(t.lines, t.records)]
    return b'{"rows":' + json.dumps(rows, separators=(",", ":")).encode() + b',"problems":' + _problems_json(
        t.problems) + b"}"


def _decode_table(kind: str, payload: memoryview, rtype: type) -> TableRead:
    names = [f.name for f in dataclasses.fields(rtype)]
    if kind == "arrow":
        t = tablecache.arrow_table(payload)
        if t.column_names != names:
            raise ValueError("columns differ")
        df = t.to_pandas()
        return TableRead(LazyRecords(df, rtype), range(1, len(df) + 1), (), df)
    if kind != "json":
        raise ValueError(kind)
    doc = json.loads(bytes(payload))
    tuples = [i for i, n in enumerate(names) if rtype.KINDS[n].rstrip("?") in _TUPLE_KINDS]
    records, lines = [], []
    for row in doc["rows"]:
        if len(row) != len(names) + 1:
            raise ValueError("row length")
        values = row[1:]
        for i in tuples:
            if values[i] is not None:
                values[i] = tuple(values[i])
        records.append(rtype(*values))
        lines.append(int(row[0]))
    return TableRead(records, lines, tuple(_problems(doc["problems"])))


def read_run(run_dir: Path, after_index: Callable[[RunContents], None] | None = None,
             read: Callable[[Path, str], TableRead] = read_one_table) -> RunContents:
    """Read every table of a run, keeping valid rows and reporting the rest. Never raises.

    ``after_index`` is called once the episode index is read and de-duplicated, before the
    other tables (so checks that need only the index can start early). ``read`` reads one
    table file (a caller may serve unchanged files from its own cache)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return RunContents(run_dir, None, problems=[Problem(str(run_dir), 0, "not a folder")])
    if not any(run_dir.iterdir()):
        return RunContents(run_dir, None, problems=[Problem(str(run_dir), 0, "empty folder: no run here")])
    if not looks_like_run(run_dir):
        return RunContents(run_dir, None, problems=[
            Problem(str(run_dir), 0, "not a run: neither run.json nor index.jsonl is here")])
    manifest, problems = read_manifest(run_dir)
    out = RunContents(run_dir, manifest, problems=problems)
    for name in TABLES:
        t = read(run_dir / name, name)
        out.problems += t.problems
        if t.columns is not None:
            out.columns[name] = t.columns
            out.tables[name], out.lines[name] = t.records, t.lines
        else:
            out.tables[name], out.lines[name] = list(t.records), list(t.lines)
            if name == "index.jsonl":
                _dedupe_index(out)
        if name == "index.jsonl" and after_index:
            after_index(out)
    _check_steps_order(out)
    _check_memory_history(out)
    return out


def _dedupe_index(c: RunContents) -> None:
    seen: set[str] = set()
    rows, lines = [], []
    for n, r in zip(c.lines["index.jsonl"], c.tables["index.jsonl"]):
        if r.id in seen:
            c.problems.append(Problem("index.jsonl", n, f"duplicate episode id {r.id}, later row skipped"))
            continue
        seen.add(r.id)
        rows.append(r)
        lines.append(n)
    c.tables["index.jsonl"], c.lines["index.jsonl"] = rows, lines


def _check_steps_order(c: RunContents) -> None:
    if "steps.jsonl" in c.columns:
        return
    last = -1
    rows: list[StepRow] = []
    lines = []
    for n, r in zip(c.lines["steps.jsonl"], c.tables["steps.jsonl"]):
        if r.step <= last:
            c.problems.append(Problem("steps.jsonl", n, f"step {r.step} out of order (after step {last}), skipped"))
            continue
        last = r.step
        rows.append(r)
        lines.append(n)
    c.tables["steps.jsonl"], c.lines["steps.jsonl"] = rows, lines


def _check_memory_history(c: RunContents) -> None:
    """Every write must rebuild to its recorded hash; a broken one is reported once per file."""
    text: dict[str, str | None] = {}
    broken: set[str] = set()
    for n, w in zip(c.lines["memory_writes.jsonl"], c.tables["memory_writes.jsonl"]):
        w: MemoryWrite
        if w.op == "delete":
            text[w.path] = None
            broken.discard(w.path)
            continue
        try:
            new = w.snapshot if w.snapshot is not None else apply_diff(text.get(w.path) or "", w.diff or ())
        except ValueError as e:
            new = None
            reason = str(e)
        else:
            reason = "content does not match its sha256"
        if new is not None and sha256(new) == w.sha256:
            text[w.path] = new
            broken.discard(w.path)
        else:
            text[w.path] = None
            if w.path not in broken:
                c.problems.append(Problem("memory_writes.jsonl", n,
                                          f"{w.path}: version {w.seq} cannot be rebuilt ({reason})"))
            broken.add(w.path)


def validate(run_dir: Path, frames: bool = False, cache: bool = False) -> RunContents:
    """:func:`read_run` plus file checks: episode folders, frames, orphans, the manifest.

    The file checks (a few stat calls per episode) run on a second thread while the other
    tables are parsed; their problems follow the tables' problems, as if run after them.

    ``cache``: serve unchanged tables and file checks from ``mfm.tablecache`` (the loaders
    do; ``mfm validate`` does not: it reads and stats everything, every time). A cached file
    check is reused while ``index.jsonl`` and the ``episodes/`` folder keep their stat, so
    it cannot see a file deleted or added inside an episode folder after it was cached."""
    run_dir = Path(run_dir)
    checks: list[Future] = []
    pool = ThreadPoolExecutor(max_workers=1)
    before = _files_key(run_dir) if cache else None

    def index_read(c: RunContents) -> None:
        # the index just read is the one of this key only if its stat did not move meanwhile
        key = before if before is not None and _files_key(run_dir) == before else None
        if key is not None:
            hit = tablecache.load("files", os.path.abspath(run_dir), key)
            if hit is not None:
                try:
                    done: Future = Future()
                    done.set_result(_problems(json.loads(bytes(hit[1]))))
                except (ValueError, TypeError):
                    pass
                else:
                    checks.append(done)
                    return
        refs = _episode_refs(c)
        if key is not None and not all(path.rpartition("/")[0] == "episodes" for _, _, path, _, _ in refs):
            key = None
        checks.append(pool.submit(_file_problems_cached, run_dir, refs, key))

    try:
        c = read_run(run_dir, after_index=index_read, read=read_one_table_cached if cache else read_one_table)
        if c.manifest is None and not c.tables:
            return c
        index: list[IndexRow] = c.tables["index.jsonl"]
        file_problems = [p for f in checks for p in f.result()]
    finally:
        pool.shutdown(wait=True)
    if frames:
        for n, r in zip(c.lines["index.jsonl"], index):
            _check_frames(c, run_dir, n, r)
    c.problems += file_problems
    if c.manifest is not None:
        steps = c.tables["steps.jsonl"]
        last = int(c.columns["steps.jsonl"]["step"].iloc[-1]) if "steps.jsonl" in c.columns else (
            steps[-1].step if steps else 0)
        if last > c.manifest.step_budget:
            c.problems.append(Problem("steps.jsonl", c.lines["steps.jsonl"][-1],
                                      f"step {last} exceeds the budget {c.manifest.step_budget}", "warning"))
    if not (run_dir / LOGS).exists() and index:
        c.problems.append(Problem(LOGS, 0, "missing (the human-readable log)", "warning"))
    return c


def _episode_refs(c: RunContents) -> list[tuple[int, str, str, str | None, int]]:
    """(line, id, path, image, frames) of each indexed episode, from columns when the index
    was read as columns (no records built)."""
    df = c.columns.get("index.jsonl")
    if df is not None:
        images = [v if isinstance(v, str) else None for v in df["image"].tolist()]
        return list(zip(c.lines["index.jsonl"], df["id"].tolist(), df["path"].tolist(), images, df["frames"].tolist()))
    return [(n, r.id, r.path, r.image, r.frames) for n, r in zip(c.lines["index.jsonl"], c.tables["index.jsonl"])]


def _files_key(run_dir: Path) -> list | None:
    """What a cached file check depends on: the stat of the index and of ``episodes/``
    (whose modification time changes when an episode folder is added, removed or renamed;
    not when a file inside one is)."""
    index, episodes = tablecache.stamp(run_dir / "index.jsonl"), tablecache.stamp(run_dir / "episodes")
    if index is None or episodes is None or tablecache.cache_dir() is None:
        return None
    return [index, episodes]


def _file_problems_cached(run_dir: Path, refs: list[tuple[int, str, str, str | None, int]],
                          key: list | None) -> list[Problem]:
    """:func:`_file_problems`, kept in the cache under ``key`` (None: not kept) if nothing
    it depends on changed while it ran."""
    out = _file_problems(run_dir, refs)
    if key is not None and _files_key(run_dir) == key and not any(tablecache.racy(k) for k in key):
        tablecache.store("files", os.path.abspath(run_dir), key, "json", _problems_json(out))
    return out


def _problems_json(problems: Sequence[Problem]) -> bytes:
    return json.dumps([[p.file, p.line, p.message, p.severity] for p in problems], separators=(",", ":")).encode()


def _problems(items: list) -> list[Problem]:
    """Problems from :func:`_problems_json`'s lists (raises on anything else)."""
    return [Problem(str(f), int(n), str(m), str(s)) for f, n, m, s in items]


def _file_problems(run_dir: Path, refs: list[tuple[int, str, str, str | None, int]]) -> list[Problem]:
    """Missing episode folders, record files and frame strips, files that lead outside the
    run through a symlink, and folders no index row names.

    One directory listing of ``episodes/`` and plain ``os.lstat`` calls on path strings (a
    pathlib object per file costs more than the system call); only a symlink met on the way
    is resolved (``mfm.boundary.inside``)."""
    out: list[Problem] = []
    root = str(run_dir) + os.sep
    try:
        entries = {e.name: e.is_symlink() for e in os.scandir(root + "episodes") if e.is_dir()}
    except OSError:
        entries = {}
    indexed = set()

    def kind(rel: str, linked: bool) -> str:
        """``file``, ``missing``, ``outside`` or ``other`` (not a regular file)."""
        try:
            mode = os.lstat(root + rel).st_mode
        except (OSError, ValueError):
            return "missing"
        if linked or stat.S_ISLNK(mode):
            try:
                mode = os.stat(inside(run_dir, rel)).st_mode
            except UnsafePath:
                return "outside"
            except OSError:
                return "missing"
        return "file" if stat.S_ISREG(mode) else "other"

    def linked_dir(rel: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(root + rel).st_mode)
        except (OSError, ValueError):
            return False

    for n, ep, path, image, count in refs:
        indexed.add(path)
        parent, _, name = path.rpartition("/")
        if (parent != "episodes" or name not in entries) and not (run_dir / path).is_dir():
            out.append(Problem("index.jsonl", n, f"{ep}: episode folder {path} is missing"))
            continue
        folder_linked = entries.get(name, True) if parent == "episodes" else True
        sub = {d: folder_linked or linked_dir(f"{path}/{d}") for d in ("state", "frames", "observation")}
        for rel in (f"{path}/action.json", f"{path}/outcome.json", f"{path}/state/state.json") + (
                (image,) if image else ()):
            linked = folder_linked or not rel.startswith(path + "/") or any(
                v and rel.startswith(f"{path}/{d}/") for d, v in sub.items())
            found = kind(rel, linked)
            if found == "outside":
                out.append(Problem("index.jsonl", n, f"{ep}: {_rel(run_dir, rel)} leads outside the run "
                                                     "(through a symlink), refused"))
            elif found != "file":
                out.append(Problem("index.jsonl", n, f"{ep}: {_rel(run_dir, rel)} is missing", "warning"))
        for k in range(-(-count // FRAMES_PER_CHUNK)):
            rel = frame_chunk(path, k * FRAMES_PER_CHUNK)[0]
            found = kind(rel, sub["frames"])
            if found == "outside":
                out.append(Problem("index.jsonl", n, f"{ep}: frame strip {_rel(run_dir, rel)} leads outside the "
                                                     "run (through a symlink), refused"))
            elif found != "file":
                out.append(Problem("index.jsonl", n, f"{ep}: frame strip {_rel(run_dir, rel)} is missing"))
    for name in sorted(entries):
        if name.startswith("ep_") and f"episodes/{name}" not in indexed:
            out.append(Problem(f"episodes/{name}", 0, "episode folder not in index.jsonl (in flight when the run "
                                                       "stopped)", "warning"))
    return out


def _rel(run_dir: Path, rel: str) -> str:
    """A path as the problems name it: relative to the run, normalised (as given if it is not)."""
    try:
        return str((run_dir / rel).relative_to(run_dir))
    except ValueError:
        return rel


def _check_frames(c: RunContents, run_dir: Path, n: int, r: IndexRow) -> None:
    """Decode every frame strip and the observation image an index row names (one at a
    time, not cached: memory stays at one image), reporting each that cannot be read."""
    for k in range(-(-r.frames // FRAMES_PER_CHUNK)):
        rel = frame_chunk(r.path, k * FRAMES_PER_CHUNK)[0]
        strip = _decode(c, run_dir, rel, n)
        if strip is None:
            continue
        count = min(FRAMES_PER_CHUNK, r.frames - k * FRAMES_PER_CHUNK)
        if strip.shape[0] != count * strip.shape[1]:
            c.problems.append(Problem(rel, 0, f"holds {strip.shape[0] / strip.shape[1]:g} frames, index.jsonl:{n} "
                                              f"says {count}"))
        elif ends_in_strip(r) and (k + 1) * FRAMES_PER_CHUNK >= r.frames:
            try:
                check_end_frame(r, strip[-strip.shape[1]:])
            except FrameError as e:
                c.problems.append(Problem(rel, 0, f"{e} (index.jsonl:{n})"))
    if r.image:
        _decode(c, run_dir, r.image, n)


def _decode(c: RunContents, run_dir: Path, rel: str, n: int) -> np.ndarray | None:
    """One image of the run, decoded through the read boundary; None (and a problem, unless
    the file is missing: the file checks report that) when it cannot be."""
    try:
        return decode_png(inside(run_dir, rel), rel)
    except UnsafePath as e:
        c.problems.append(Problem("index.jsonl", n, str(e)))
    except FrameError as e:
        if not str(e).endswith(": missing"):
            c.problems.append(Problem(rel, 0, str(e).split(": ", 1)[-1]))
    return None
