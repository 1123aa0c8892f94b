"""Open MFM run directories as DuckDB relations and pandas frames, with lazy frame access.

No Streamlit here: a notebook gets the same tables the dashboard pages use.

    from loaders import open_run
    run = open_run("sample_runs/diamond_mfm_s2")
    run.episodes()                      # pandas DataFrame, one row per episode
    run.sql("select action_kind, count(*) from episodes group by 1").df()
    run.frame(120)                      # HxWx3 uint8 frame of env step 120
    run.problems                        # what was wrong with the files, file:line each
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Sequence, TypeVar

import duckdb
import numpy as np
import pandas as pd

from loaders.formats import detect, source_for
from loaders.remote.listing import mirror_root
from loaders.remote.mirror import is_mirrored, mirrored_url, run_identity
from loaders.remote.sync import sync_run
from loaders.records import COPY_ON_WRITE, FILE_OF, TABLE_NAMES, table_frame
from loaders.cachedread import LazyRecords
from loaders.registry import RunRegistry
from loaders.sources import DirSource, LiveSource, Source
from loaders.sqlsafety import duckdb_config
from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError
from mfm.objectstore import is_url
from mfm.schema import MANIFEST, TABLES, IndexRow, LifeEvent, Problem, RunManifest, open_file, read_table
from mfm.run_reader import LAZY_TABLES, RunContents, read_lazy_table

T = TypeVar("T")

STALE_SECONDS = 300
"""A run whose manifest still says running but whose files have not changed for this long
is shown as crashed (its writer is gone)."""

_log = logging.getLogger(__name__)


def signature(run_dir: Path) -> tuple:
    """Sizes and modification times of a run's files: changes whenever the run is written."""
    out = []
    names = (MANIFEST, *TABLES, "data.json") if run_dir.is_dir() else ("",)
    for name in names:
        try:
            st = os.stat(run_dir / name if name else run_dir)
            out.append((name, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((name, -1, 0))
    return tuple(out)


class Run:
    """One run, in any supported format, read tolerantly. Tables are built on first use."""

    def __init__(self, path: Path, source: Source, sig: tuple) -> None:
        self.path = Path(path)
        self.source = source
        self.named: str | None = None
        """The name :func:`open_runs` gave the run to keep names unique within a root."""
        self._contents: RunContents | None = None
        self._manifest: RunManifest | None = None
        self.signature = sig
        self._lock = threading.RLock()
        self._frames: dict[str, pd.DataFrame] = {}
        self._counts: tuple[int, int, int] | None = None
        self._derived: dict[str, Any] = {}
        self.grew: Callable[[Run], None] | None = None
        """Called after the run read or built more (its contents, a lazy table, a DataFrame):
        the registry holding it counts its bytes again (``loaders.registry``)."""

    @property
    def name(self) -> str:
        """The run's folder name (for a run in object storage, the last segment of its URL),
        qualified by its folder under the root when :func:`open_runs` found two of one name."""
        if self.named is not None:
            return self.named
        ident = run_identity(self.path)
        return ident.rstrip("/").rsplit("/", 1)[-1] if is_url(ident) else self.path.name

    @property
    def format(self) -> str:
        """``mfm``, ``mfm-original``, ``mfm-export`` or ``crafter-recorder``."""
        return self.source.format

    @property
    def is_3d(self) -> bool:
        """Positions have a height: the horizontal plane is (x, z), as in Minecraft."""
        return any(r.z is not None for r in self.records("index.jsonl")[:50])

    @property
    def _c(self) -> RunContents:
        """Everything in the run, read on first use."""
        if self._contents is not None:
            return self._contents
        with self._lock:
            if self._contents is None:
                try:
                    contents = self.source.contents()
                except Exception as e:  # noqa: BLE001 - one unreadable run must not take down a page of runs
                    why = str(e).replace(str(self.path), self.path.name)
                    contents = RunContents(self.path, None, problems=[
                        Problem(self.path.name, 0, f"could not be read: {type(e).__name__}: {why}")])
                self._contents = contents
        self._grow()
        return self._contents

    def _grow(self) -> None:
        if self.grew is not None:
            self.grew(self)

    def load(self) -> Run:
        """Read the run's tables now (else they are read on first use); returns the run."""
        self._c  # noqa: B018 - read on first use
        return self

    @property
    def loaded(self) -> bool:
        """Whether the run's tables have been read (and so its problems are known)."""
        return self._contents is not None

    @property
    def manifest(self) -> RunManifest | None:
        """The manifest, read alone when the tables are not needed yet (once per version: the
        tables' read takes the same one, ``DirSource.manifest_read``)."""
        if self._contents is None:
            if self._manifest is None and isinstance(self.source, DirSource) and self.source.format == "mfm":
                self._manifest = self.source.manifest_read()[0]
            if self._manifest is not None:
                return self._manifest
        return self._c.manifest

    @property
    def problems(self) -> list[Problem]:
        """Everything wrong with the files, each with file and line."""
        return self._c.problems

    @property
    def status(self) -> str:
        """running, finished, interrupted or crashed (a running run gone quiet counts as crashed)."""
        m = self.manifest
        if m is None:
            return "unknown"
        if m.status == "running":
            newest = max((t for _, _, t in self.signature), default=0) / 1e9
            if time.time() - newest > STALE_SECONDS:
                return "crashed"
        return m.status

    def records(self, file: str) -> list:
        """Valid records of one table (see ``mfm.schema.TABLES``). A lazy table
        (``mfm.run_reader.LAZY_TABLES``: ``seen.jsonl``) is read the first time it is asked
        for; its problems then join :attr:`problems`."""
        c = self._c
        if file in LAZY_TABLES and file not in c.tables:
            with self._lock:
                if file not in c.tables and c.tables:
                    read_lazy_table(c, file, self.source.read_table)
            self._grow()
        return c.tables.get(file, [])

    def table(self, name: str) -> pd.DataFrame:
        """A table by its view name (episodes, steps, turns, grid, milestones, lives,
        memory_writes, seen)."""
        df = self._frames.get(name)
        if df is not None:
            return df
        with self._lock:
            if name not in self._frames:
                file = FILE_OF[name]
                records = self.records(file)
                fast = self._c.columns.get(file)
                df = fast.copy(deep=not COPY_ON_WRITE) if fast is not None else table_frame(records, TABLES[file])
                if name == "grid" and len(df):
                    df["x"] = [c[0] for c in df["cell"]]
                    df["y"] = [c[1] for c in df["cell"]]
                    df["z"] = [c[2] if len(c) > 2 else None for c in df["cell"]]
                self._frames[name] = df
            df = self._frames[name]
        self._grow()
        return df

    def reuse_frames(self, prev: Run, files: Iterable[str]) -> list[str]:
        """Take over ``prev``'s DataFrames of the tables read from ``files``: table files the
        caller knows this version read from the same parse as ``prev`` (a run being written:
        ``loaders.sources.LiveSource``), so the very objects are kept instead of being built
        again. Returns the view names taken over."""
        same = set(files)
        with prev._lock:
            theirs = dict(prev._frames)
        with self._lock:
            taken = [name for name, df in theirs.items() if FILE_OF[name] in same and name not in self._frames]
            for name in taken:
                self._frames[name] = theirs[name]
        if taken:
            self._grow()
        return taken

    def nbytes(self) -> int:
        """An estimate of the bytes this run holds: the DataFrames built and the columns read
        (``DataFrame.memory_usage(deep=False)``: an object column counts its pointers, not the
        strings they point to), and records built one object per row (the size of the first
        record, the object and its fields shallowly, times their number). Nothing before the
        tables are read; the values of :meth:`derived` are not counted. Takes no lock."""
        c = self._contents
        if c is None:
            return 0
        frames = dict(self._frames)
        total = 0
        for file, records in list(c.tables.items()):
            df = frames.get(TABLE_NAMES.get(file, ""))
            cols = c.columns.get(file)
            if df is not None:
                total += _frame_bytes(df)
            if cols is not None and (df is None or not COPY_ON_WRITE):
                total += _frame_bytes(cols)
            if not isinstance(records, LazyRecords) or records.built:
                total += _records_bytes(records)
        return total

    def episodes(self) -> pd.DataFrame:
        return self.table("episodes")

    def steps(self) -> pd.DataFrame:
        return self.table("steps")

    def turns(self) -> pd.DataFrame:
        return self.table("turns")

    def grid(self) -> pd.DataFrame:
        return self.table("grid")

    def milestones(self) -> pd.DataFrame:
        return self.table("milestones")

    def lives(self) -> pd.DataFrame:
        return self.table("lives")

    def memory_writes(self) -> pd.DataFrame:
        return self.table("memory_writes")

    def seen(self) -> pd.DataFrame:
        """What each episode's frames showed, one row per episode and material (format 1.2;
        empty for older runs); ``cells`` is JSON text, ``[[x, y], ...]``."""
        return self.table("seen")

    def connect(self, folder: str | None = None, **settings: str | int | bool) -> duckdb.DuckDBPyConnection:
        """A new in-memory DuckDB with one view per table (the DataFrames, registered without a
        copy), locked down (``loaders.sqlsafety.duckdb_config``: no file system, network, extension
        or Python-variable access, configuration locked; DuckDB's files in ``folder``, default a
        private folder of this process, never ``<cwd>/.tmp``), with ``settings`` such as memory_limit."""
        con = duckdb.connect(":memory:", config=duckdb_config(folder, **settings))
        for name in TABLE_NAMES.values():
            con.register(name, self.table(name))
        return con

    @cached_property
    def db(self) -> duckdb.DuckDBPyConnection:
        """The connection of :meth:`sql`, shared by its callers and built on first use."""
        return self.connect()

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run SQL over this run's views, for notebooks: any statement, on the shared :attr:`db`, with
        no time limit. SQL from the dashboard goes through ``loaders.usersql.run_user_query`` instead."""
        with self._lock:
            return self.db.sql(query)

    @cached_property
    def index(self) -> EpisodeIndex:
        """The episode index, for queries with the memory core's predicates."""
        return EpisodeIndex(self.records("index.jsonl"))

    def episode(self, ep_id: str) -> IndexRow | None:
        """The index row of one of the run's own episodes (None for an ``inherited:`` id: see
        :func:`loaders.inherited.locate`)."""
        return self.index.get(ep_id)

    def derived(self, key: str, build: Callable[[Run], T]) -> T:
        """A value computed from this version of the run (``build(self)``) once, under ``key``: the
        one memo of what the layers above compute from a run (a new version of the run's files is a
        new :class:`Run`, so nothing here goes stale)."""
        with self._lock:
            if key not in self._derived:
                self._derived[key] = build(self)
            return self._derived[key]

    def frame(self, step: int) -> np.ndarray:
        """The frame of env step ``step``; raises FrameError naming the file if unreadable."""
        return self.source.step_frame(self.index, step)

    def _ref(self, ep_id: str) -> IndexRow:
        ref = self.episode(ep_id)
        if ref is None:
            raise KeyError(f"{self.name}: no episode {ep_id}")
        return ref

    def observation(self, ep_id: str) -> np.ndarray:
        """The frame recorded when an episode ended; FrameError if it cannot be read."""
        try:
            return self.source.observation(self._ref(ep_id))
        except KeyError as e:
            raise FrameError(str(e)) from None

    def episode_record(self, ep_id: str) -> EpisodeRecord:
        """An episode's state, action and outcome records (None where not recorded)."""
        return self.source.episode_record(self._ref(ep_id))

    def summary(self) -> dict[str, Any]:
        """One row for the runs table. Cheap for a run not opened yet: the manifest, the lives
        file and a line count of the index (counted once per version of the run's files);
        ``problems`` is None until the run is read."""
        m = self.manifest
        quick = not self.loaded and self._manifest is not None
        if quick:
            if self._counts is None:
                lives = [e for _, e in read_table(self.path / "lives.jsonl", LifeEvent)[0]]
                self._counts = (1 + sum(e.event == "respawn" for e in lives), sum(e.event == "death" for e in lives),
                                getattr(self.source, "episode_count", lambda: _count_lines(self.path / "index.jsonl"))())
            n_lives, deaths, episodes = self._counts
        else:
            lives = self.records("lives.jsonl")
            n_lives, deaths = 1 + sum(e.event == "respawn" for e in lives), sum(e.event == "death" for e in lives)
            episodes = len(self.records("index.jsonl"))
        order = list(m.milestone_order) if m else []
        reached = m.milestones if m else {}
        return {
            "run": self.name, "path": str(self.path), "format": self.format, "task": m.task if m else None,
            "method": m.method if m else None, "ablations": ",".join(m.ablations) if m else "",
            "seed": m.seed if m else None, "steps": m.last_step if m else None,
            "budget": m.step_budget if m else None, "lives": n_lives, "deaths": deaths, "milestones": len(reached),
            "milestones_total": len(order), "status": self.status, "episodes": episodes,
            "problems": None if quick else len(self.problems),
        }

    def __repr__(self) -> str:
        """One line: name, method, task, seed, status, steps, milestones (and the run it inherited)."""
        m = self.manifest
        if m is None:
            return f"<Run {self.name} ({self.format}): no manifest>"
        method = "+".join([m.method, *m.ablations])
        got = sum(1 for n in m.milestone_order if n in m.milestones)
        came = inherited_record(m)
        return (f"<Run {self.name}: {method} on {m.task}, seed {m.seed}, {m.status} at step {m.last_step}/"
                f"{m.step_budget}, {got}/{len(m.milestone_order)} milestones, {m.lives} lives"
                + (f", inherited memory of {came.get('run')}" if came else "") + ">")

    html: ClassVar[Callable[[Run], str] | None] = None
    """How a run draws itself in Jupyter: set by :mod:`loaders.display` (``run_html``), which sits
    above this module; ``import loaders`` imports it."""

    def _repr_html_(self) -> str | None:
        return Run.html(self) if Run.html is not None else None


def inherited_record(m: RunManifest | None) -> dict[str, Any] | None:
    """What a run inherited, as its manifest records it (``config.inherited``: run, task, method,
    steps, status, milestones); None when it inherited nothing."""
    got = m.config.get("inherited") if m is not None and isinstance(m.config, dict) else None
    return got if isinstance(got, dict) else None


def _frame_bytes(df: pd.DataFrame) -> int:
    return int(df.memory_usage(index=True, deep=False).sum())


def _records_bytes(records: Sequence[Any]) -> int:
    """Records one object per row: the first one's size (the object and its fields, shallow)
    times their number, plus the list."""
    n = len(records)
    if n == 0:
        return 0
    first = records[0]
    one = sys.getsizeof(first) + sum(sys.getsizeof(getattr(first, f.name)) for f in dataclasses.fields(first))
    return n * one + (sys.getsizeof(records) if isinstance(records, list) else 8 * n)


def _count_lines(path: Path) -> int:
    """Complete lines of a file, without parsing them."""
    try:
        with open_file(path, path.name) as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def build_run(path: Path, sig: tuple, prev: Run | None) -> Run:
    """The Run of the version ``sig`` of the run at ``path`` (how :data:`REGISTRY` builds one).
    A run folder of our format whose manifest says ``running`` is read through
    :class:`~loaders.sources.LiveSource`: the tables whose file did not change since ``prev``
    (a running version too) keep their records and their DataFrame objects. Any other run is
    read afresh with every check. ``run.json`` is read once here, for the status, the manifest
    and the tables."""
    source = source_for(path)
    if type(source) is DirSource and source.format == "mfm":
        got = source.manifest_read()
        if got[0] is not None and got[0].status == "running":
            before = prev.source if prev is not None and isinstance(prev.source, LiveSource) else None
            live = LiveSource(path, before, got)
            run = Run(path, live, sig)
            if before is not None and prev is not None:
                then, now = before.stats(), run.load().source.stats()
                run.reuse_frames(prev, [f for f, st in now.items() if then.get(f) == st])
            return run
    return Run(path, source, sig)


REGISTRY: RunRegistry[Run] = RunRegistry(build_run)
"""The runs this process has open (``loaders.registry`` lists every cache layer and why)."""


def open_run(path: str | Path) -> Run:
    """Open a run (held in :data:`REGISTRY`; read again when any of its files changed, a run
    being written only in the tables that changed). Never raises on bad content: what was
    wrong is in ``run.problems``."""
    p = local_path(path)
    if is_mirrored(p):
        sync_run(p)
    return REGISTRY.get(p, signature(p))


def local_path(place: str | Path) -> Path:
    """The folder to read for a run or runs root: itself, or for a URL of object storage
    (``s3://...``) its local mirror, the listing brought up to date (``loaders.remote``)."""
    if is_url(place):
        return mirror_root(str(place))
    p = Path(place).resolve()
    url = mirrored_url(p)
    if url is not None:
        mirror_root(url)
    return p


def find_runs(root: str | Path, max_depth: int = 6) -> list[Path]:
    """Every run under ``root`` (nested folders too, any supported format), sorted; symlinks
    are not followed. A Crafter recorder folder gives one run per recorded episode file.
    ``root`` may be a URL of object storage: the runs of its local mirror are returned."""
    root = local_path(root)
    found: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        fmt = detect(d)
        if fmt == "crafter-recorder":
            found.extend(sorted(p for p in d.glob("*.npz") if not p.is_symlink()))
            return
        if fmt is not None:
            found.append(d)
            return
        if depth >= max_depth:
            return
        try:
            children = sorted(c for c in d.iterdir() if c.is_dir() and not c.is_symlink())
        except OSError:
            return
        for c in children:
            if not c.name.startswith("."):
                walk(c, depth + 1)

    walk(root, 0)
    return found


def open_runs(root: str | Path | Sequence[str | Path]) -> list[Run]:
    """Open every run under ``root`` (or under each of several runs roots and runs), each
    run once however it was named (``run_identity``: ``x``, ``./x``, ``x/``, a symlink to
    ``x``, ``s3://b/root/`` and ``s3://b/root``), in the order first found."""
    places = [root] if isinstance(root, (str, Path)) else list(root)
    found: dict[str, tuple[Path, str]] = {}
    for place in places:
        top = local_path(place)
        for p in find_runs(place):
            rel = p.resolve().relative_to(top.resolve()).as_posix() if top.resolve() in p.resolve().parents else ""
            found.setdefault(run_identity(p), (p, rel))
    runs = [open_run(p) for p, _ in found.values()]
    _unique_names(runs, [rel for _, rel in found.values()], ", ".join(map(str, places)))
    return runs


def _unique_names(runs: list[Run], rels: list[str], where: str) -> None:
    """Name each run by its folder name; where two share one (runs of two sweeps under one
    root), by its folder under the root instead (``sweep_a/diamond_mfm_s0``), with a warning.
    Runs whose ``run.json`` are equal (a copied run folder) keep their own names, with a
    warning that they may be one run twice."""
    for r in runs:
        r.named = None
    by_name: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        by_name.setdefault(r.name, []).append(i)
    taken = {name for name, idx in by_name.items() if len(idx) == 1}
    for name, idx in by_name.items():
        if len(idx) < 2:
            continue
        for i in idx:
            qualified = rels[i] or name
            k = 2
            while qualified in taken:
                qualified, k = f"{rels[i] or name} ({k})", k + 1
            runs[i].named = qualified
            taken.add(qualified)
        _warn_once(f"{where}: {len(idx)} runs named {name}: named by their folders: "
                   + ", ".join(runs[i].name for i in idx))
    by_id: dict[str, list[Run]] = {}
    for r in runs:
        m = r.manifest if r.format == "mfm" else None  # a manifest read alone (other formats infer theirs)
        if m is not None:
            by_id.setdefault(m.run_id, []).append(r)
    for run_id, same in by_id.items():
        twins = [r for r in same if sum(r.manifest == o.manifest for o in same) > 1]
        if twins:
            _warn_once(f"{where}: {len(twins)} runs have equal run.json (run_id {run_id}; copies of one run?), each "
                       "counted: " + ", ".join(r.name for r in twins))


_warned: set[str] = set()


def _warn_once(text: str) -> None:
    """A logging warning, once per process for one text (a page or report opens a root often)."""
    if text not in _warned:
        _warned.add(text)
        _log.warning("%s", text)


def runs_table(runs: list[Run]) -> pd.DataFrame:
    """One summary row per run, for comparison."""
    return pd.DataFrame([r.summary() for r in runs])
