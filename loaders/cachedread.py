"""How the loaders read a run for :func:`mfm.validate.validate`: large clean tables through
the fast path (``loaders.fastread``, kept as columns) and, when asked, unchanged tables and
file checks served from the derived table cache (``loaders.tablecache``).

The records, line numbers and problems are exactly those of the core's tolerant reader: the
fast path only vouches that a file has no problem, and the cache only replays what was read.
:func:`fill_closed_run` fills the cache for a run its writer has just closed, so that the
first open of that run is served from the cache.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

import mfm.validate as core
from loaders import fastread, tablecache
from mfm.memory.packed import PACK
from mfm.schema import CLOSED_STATUSES, TABLES, Problem, RunManifest, read_manifest
from mfm.run_reader import RunContents, TableRead, read_one_table
from mfm.validate import EpisodeRef, FileCheck

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

    @property
    def built(self) -> bool:
        """Whether the records of every row have been built (and so are held beside the columns)."""
        return self._rows is not None

    def _make(self, df: pd.DataFrame) -> list:
        """The records of ``df``'s rows, built a column at a time (the fields in order)."""
        kinds = self.rtype.KINDS
        names = [f.name for f in dataclasses.fields(self.rtype)]
        return list(map(self.rtype, *(_field_values(df[c], kinds[c]) for c in names)))

    def _build(self) -> list:
        if self._rows is None:
            self._rows = self._make(self.df)
        return self._rows

    def __getitem__(self, i: int | slice) -> Any:
        """One record, or a list of them for a slice (a slice asked for before the rest is
        built alone: ``Run.is_3d`` reads 50 of a 360k run's 30,000 episodes, which took 1 s
        of the Grid's first visit when it built them all)."""
        if self._rows is None and isinstance(i, slice):
            return self._make(self.df.iloc[i])
        return self._build()[i]

    def __iter__(self) -> Iterator:
        return iter(self._build())


def _converter(kind: str) -> Callable[[Any], Any]:
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


def _field_values(col: pd.Series, kind: str) -> list:
    """A column's values as the record's field values (as :func:`_converter` makes them one
    by one): numbers and complete text columns as they are, JSON text parsed as one array
    (one call of the decoder instead of one per row), the rest value by value."""
    base = kind.rstrip("?")
    values = col.tolist()
    gaps = col.isna().to_numpy()
    if col.dtype.kind in "iu" or (base in ("num", "str") and not gaps.any()):
        return values
    if base in ("dict", "counts", "list"):
        texts = ["null" if gap else v for v, gap in zip(values, gaps)] if gaps.any() else values
        try:
            parsed = json.loads("[" + ",".join(texts) + "]")
        except (TypeError, ValueError):
            parsed = None
        if isinstance(parsed, list) and len(parsed) == len(values):
            return [None if p is None else tuple(p) for p in parsed] if base == "list" else parsed
    return list(map(_converter(kind), values))


def read_one_table_fast(path: Path, name: str) -> TableRead:
    """One table file of a run: the fast one-pass reader when it can vouch for every line,
    else the core's tolerant line-by-line reader."""
    return _read_one(path, name)[0]


def _read_one(path: Path, name: str) -> tuple[TableRead, pa.Table | None]:
    """:func:`read_one_table_fast`, and the Arrow table behind the columns (fast path only)."""
    rtype = TABLES[name]
    t = fastread.read_arrow(path, rtype, *FAST_TABLES[name]) if name in FAST_TABLES and _worth_fast(path) else None
    if t is not None:
        df = t.to_pandas()
        return TableRead(LazyRecords(df, rtype), range(1, len(df) + 1), (), df), t
    return read_one_table(path, name), None


def _worth_fast(path: Path) -> bool:
    """Whether the fast path may read ``path``: a regular file (a FIFO, device or link is left
    to the tolerant reader, which reports it without opening it) of at least
    ``fastread.MIN_BYTES`` (the fast path refuses smaller files; reading one's bytes first
    would open the file twice, once here and once by the tolerant reader). One ``lstat``,
    before anything is opened."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size >= fastread.MIN_BYTES


CACHE_MIN_BYTES = 16 * 1024
"""Smaller table files are read faster than a cache entry is checked; they are not cached."""


def read_one_table_cached(path: Path, name: str, final: bool = False) -> TableRead:
    """:func:`read_one_table_fast` through ``loaders.tablecache``: the same result, served
    from the cache while the file's stat is unchanged. Tables the fast path vouched for are
    kept as Arrow columns; tables read line by line as their records, line numbers and problems.
    ``final``: the file's writer is done with it, so it is cached even if it was modified less
    than ``tablecache.RACY_SECONDS`` ago (:func:`fill_closed_run` says when that is sound).
    An Arrow entry made on an open is written in the background (``tablecache.store_later``):
    the caller has its table before the entry is encoded and written."""
    st = tablecache.stamp(path)
    if st is None or st[0] < CACHE_MIN_BYTES or tablecache.cache_dir() is None:
        return read_one_table_fast(path, name)
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
    if (final or not tablecache.racy(st)) and tablecache.stamp(path) == st:
        if arrow is not None and not final:
            tablecache.store_later("table", where, key, "arrow", lambda: tablecache.arrow_bytes(arrow))
            return read
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


def _problems_json(problems: Sequence[Problem]) -> bytes:
    return json.dumps([[p.file, p.line, p.message, p.severity] for p in problems], separators=(",", ":")).encode()


def _problems(items: list) -> list[Problem]:
    """Problems from :func:`_problems_json`'s lists (raises on anything else)."""
    return [Problem(str(f), int(n), str(m), str(s)) for f, n, m, s in items]


def _files_key(run_dir: Path) -> list | None:
    """What a cached file check depends on: the stat of the index, of ``episodes/`` (whose
    modification time changes when an episode folder is added, removed or renamed; not when
    a file inside one is) and of the run's pack (``episodes.zip``), one of the two there."""
    index, episodes = tablecache.stamp(run_dir / "index.jsonl"), tablecache.stamp(run_dir / "episodes")
    pack = tablecache.stamp(run_dir / PACK)
    if index is None or (episodes is None and pack is None) or tablecache.cache_dir() is None:
        return None
    return [index, episodes, pack]


class CachedFileCheck(FileCheck):
    """The file checks kept in the table cache, reused while ``index.jsonl`` and the
    ``episodes/`` folder keep the stat they had before the index was read (``key``; so a
    file deleted or added inside an episode folder after the check was cached is not seen).
    ``final``: as for :func:`read_one_table_cached`, the run's writer is done."""

    def __init__(self, run_dir: Path, final: bool = False) -> None:
        super().__init__(run_dir)
        self.key = _files_key(run_dir)
        self.final = final

    def known(self) -> list[Problem] | None:
        # the index just read is the one of this key only if its stat did not move meanwhile
        if self.key is not None and _files_key(self.run_dir) != self.key:
            self.key = None
        hit = tablecache.load("files", os.path.abspath(self.run_dir), self.key) if self.key is not None else None
        if hit is None:
            return None
        try:
            return _problems(json.loads(bytes(hit[1])))
        except (ValueError, TypeError):
            return None

    def run(self, refs: list[EpisodeRef]) -> list[Problem]:
        """The checks, kept in the cache if every episode folder is under ``episodes/`` and
        nothing they depend on changed while they ran."""
        key = self.key if all(path.rpartition("/")[0] == "episodes" for _, _, path, _, _ in refs) else None
        out = super().run(refs)
        if key is not None and _files_key(self.run_dir) == key and (
                self.final or not any(tablecache.racy(k) for k in key if k is not None)):
            tablecache.store("files", os.path.abspath(self.run_dir), key, "json", _problems_json(out))
        return out


def validate(run_dir: Path, frames: bool = False, cache: bool = False, final: bool = False,
             lazy: bool = False, manifest: tuple[RunManifest | None, list[Problem]] | None = None) -> RunContents:
    """:func:`mfm.validate.validate` with the fast path: the same problems, records and line
    numbers, large clean tables kept as columns (``RunContents.columns``). ``cache``: serve
    unchanged tables and file checks from ``loaders.tablecache`` (the loaders do; ``mfm
    validate`` does not: it reads and stats everything, every time). ``final`` (with
    ``cache``): the run's writer is done, cache files modified just now too
    (:func:`fill_closed_run`). ``lazy``: leave out ``mfm.run_reader.LAZY_TABLES`` (the loaders
    read them when asked, through :func:`read_one_table_cached`). ``manifest``: ``run.json``
    as the caller already read it for this version of the run (``mfm.schema.read_manifest``),
    so that it is not read again."""
    if not cache:
        return core.validate(run_dir, frames, read=read_one_table_fast, files=FileCheck, lazy=lazy, manifest=manifest)
    return core.validate(run_dir, frames, read=functools.partial(read_one_table_cached, final=final),
                         files=functools.partial(CachedFileCheck, final=final), lazy=lazy, manifest=manifest)


def fill_closed_run(run_dir: str | Path) -> bool:
    """Fill the table cache for a run that its writer has just closed, exactly as the first
    open of the run would (:class:`loaders.run.Run` reads through ``validate(..., cache=True)``
    on the resolved path, which is what is done here), and its lazy tables as asking for them
    would, so that the first open, in the dashboard or a notebook, is served from the cache.
    Nothing is written into the run folder. True if the cache was filled; False, doing
    nothing, if the cache is off or ``run.json`` does not say the run was closed, or if
    reading failed (the first open then reads the run as usual: the cache is derived, so a
    failure here never matters more than that).

    Why files modified just now may be cached here. The cache refuses a file modified less
    than ``tablecache.RACY_SECONDS`` ago because a second write in the same timestamp tick
    as the stat taken for the key could change the file and leave that stat (size, times,
    inode, device) as it was, so the entry would be used for content it does not hold. A
    write in any later tick changes the modification and change times: a miss. Once the
    writer has closed the run (every table flushed, the committer process done, then
    ``run.json`` replaced with a final status: ``RunWriter.close``), it writes none of these
    files again, and no other writer writes into a run (``RunWriter`` refuses a folder that is
    not empty). What is left is another program rewriting a table within the tick of the
    writer's last write, after this read: outside the run format, and even then a rewrite
    through a new file (a new inode) is a miss. So this is sound when called after the
    writer is done, which ``run.json`` saying a closed status means (checked here: a run
    still ``running`` is not filled; its first open caches what is settled by then)."""
    if tablecache.cache_dir() is None:
        return False
    try:
        run = Path(run_dir).resolve()
        manifest = read_manifest(run)[0]
        if manifest is None or manifest.status not in CLOSED_STATUSES:
            return False
        validate(run, cache=True, final=True)
    except Exception:  # noqa: BLE001 - the cache is derived; the first open reads the run instead
        return False
    return True
