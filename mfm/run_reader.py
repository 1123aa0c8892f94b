"""Read a run directory tolerantly: every valid record of its tables, and each problem with file:line.

:func:`read_run` is the one tolerant reading path: the loaders use it too, so the dashboard
and ``mfm validate`` (:mod:`mfm.validate`, which adds the checks of the run's other files)
report the same problems for the same files. Pure Python (and numpy): the loaders plug their
fast reader and their cache in through ``read`` (``loaders.cachedread``).

A fast reader may hand over a table as columns (:attr:`TableRead.columns`). The core asks
such a table for one thing only, a column by its name (:class:`ColumnTable`), and turns that
column into plain values with numpy (:func:`column`, :func:`last_value`): a mapping of
column names to numpy arrays or lists serves as well as the loaders' pandas DataFrame.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mfm.boundary import UnsafePath, inside
from mfm.memory.agent_memory import replay
from mfm.schema import (INHERITED, MANIFEST, TABLES, Problem, RunManifest, SeenRow, StepRow, iter_jsonl,
                        read_manifest, read_table)


class ColumnTable(Protocol):
    """What the core asks of a table a fast reader read as columns: the column of a name,
    one value per valid row in row order, as anything :func:`numpy.asarray` takes (a numpy
    array, a list, a pandas Series). A ``dict`` of such columns is one; so is a pandas
    DataFrame (the loaders'). Its number of rows is that of its line numbers
    (:attr:`TableRead.lines`)."""

    def __getitem__(self, name: str) -> Any:
        """The column called ``name``."""
        ...


def column(table: ColumnTable, name: str) -> list[Any]:
    """One column of a table read as columns, as plain Python values in row order."""
    return np.asarray(table[name]).tolist()


def last_value(table: ColumnTable, name: str) -> Any:
    """The value of column ``name`` in the table's last row."""
    return np.asarray(table[name])[-1]


@dataclass
class RunContents:
    """Everything valid read from a run directory, and what was wrong."""

    dir: Path
    manifest: RunManifest | None
    tables: dict[str, Sequence[Any]] = field(default_factory=dict)
    lines: dict[str, Sequence[int]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    columns: dict[str, ColumnTable] = field(default_factory=dict)
    """Tables a fast reader read as columns (:class:`ColumnTable`; the loaders keep pandas
    DataFrames here, from ``loaders.cachedread``); their records are built only if asked for."""

    @property
    def errors(self) -> list[Problem]:
        """The problems of severity ``error``."""
        return [p for p in self.problems if p.severity == "error"]


def looks_like_run(path: Path) -> bool:
    """A folder holding a manifest or an episode index."""
    return (path / MANIFEST).is_file() or (path / "index.jsonl").is_file()


@dataclass(frozen=True)
class TableRead:
    """One table file read: its valid records, their line numbers and the problems found;
    ``columns`` (:class:`ColumnTable`) when a fast reader read it (then there are no problems)."""

    records: Sequence[Any]
    lines: Sequence[int]
    problems: tuple[Problem, ...]
    columns: ColumnTable | None = None


def read_one_table(path: Path, name: str) -> TableRead:
    """One table file of a run, read line by line by the tolerant reader."""
    rows, probs = read_table(path, TABLES[name])
    return TableRead([r for _, r in rows], [n for n, _ in rows], tuple(probs))


LAZY_TABLES = ("seen.jsonl",)
"""Tables the loaders read only when one is asked for (:func:`read_lazy_table`): large, and
needed by few views. ``mfm validate`` reads them with the rest."""


def read_run(run_dir: Path, after_index: Callable[[RunContents], None] | None = None,
             read: Callable[[Path, str], TableRead] = read_one_table, lazy: bool = False,
             manifest: tuple[RunManifest | None, list[Problem]] | None = None) -> RunContents:
    """Read every table of a run, keeping valid rows and reporting the rest. Never raises.

    ``after_index`` is called once the episode index is read and de-duplicated, before the
    other tables (so checks that need only the index can start early). ``read`` reads one
    table file (a caller may read large files faster or serve unchanged ones from a cache).
    ``lazy``: leave out the tables of :data:`LAZY_TABLES` (read later by :func:`read_lazy_table`).
    ``manifest``: ``run.json`` as the caller already read it (:func:`mfm.schema.read_manifest`),
    so that it is read once."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return RunContents(run_dir, None, problems=[Problem(str(run_dir), 0, "not a folder")])
    if not any(run_dir.iterdir()):
        return RunContents(run_dir, None, problems=[Problem(str(run_dir), 0, "empty folder: no run here")])
    if not looks_like_run(run_dir):
        return RunContents(run_dir, None, problems=[
            Problem(str(run_dir), 0, "not a run: neither run.json nor index.jsonl is here")])
    got, problems = read_manifest(run_dir) if manifest is None else manifest
    out = RunContents(run_dir, got, problems=list(problems))
    for name in TABLES:
        if not (lazy and name in LAZY_TABLES):
            _add_table(out, name, read(run_dir / name, name))
        if name == "index.jsonl" and after_index:
            after_index(out)
    for name, check in TABLE_CHECKS.items():
        if name in out.tables:
            check(out)
    return out


def read_lazy_table(c: RunContents, name: str, read: Callable[[Path, str], TableRead] = read_one_table) -> None:
    """Read a table that :func:`read_run` left out (``lazy``) into ``c``, with its checks;
    its problems join ``c.problems``."""
    _add_table(c, name, read(c.dir / name, name))
    check = TABLE_CHECKS.get(name)
    if check is not None:
        check(c)


def _add_table(c: RunContents, name: str, t: TableRead) -> None:
    """Put one table read into ``c`` (the index de-duplicated)."""
    c.problems += t.problems
    if t.columns is not None:
        c.columns[name] = t.columns
        c.tables[name], c.lines[name] = t.records, t.lines
    else:
        c.tables[name], c.lines[name] = list(t.records), list(t.lines)
        if name == "index.jsonl":
            _dedupe_index(c)


def _dedupe_index(c: RunContents) -> None:
    """Keep the first row of each episode id in the index; each later one is an error at its line."""
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


def episode_ids(c: RunContents) -> list[str]:
    """The indexed episode ids (from columns when the index was read as columns)."""
    cols = c.columns.get("index.jsonl")
    return column(cols, "id") if cols is not None else [r.id for r in c.tables["index.jsonl"]]


def _check_steps_order(c: RunContents) -> None:
    """Steps must rise: a row whose step is not above the one before is an error, skipped
    (a table read as columns was vouched for in order by its reader)."""
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
    broken: set[str] = set()
    for n, (w, _, _, error, hash_ok) in zip(c.lines["memory_writes.jsonl"],
                                            replay(c.tables["memory_writes.jsonl"], strict=True)):
        if error is None and hash_ok:
            broken.discard(w.path)
            continue
        if w.path not in broken:
            reason = error if error is not None else "content does not match its sha256"
            c.problems.append(Problem("memory_writes.jsonl", n,
                                      f"{w.path}: version {w.seq} cannot be rebuilt ({reason})"))
        broken.add(w.path)
    _check_inherited_sources(c)


def _check_inherited_sources(c: RunContents) -> None:
    """Sources naming an inherited episode (``inherited:ep_…``) need the run's copy of the
    inherited run (``inherited/``, an error without it) and an episode of that name in the
    copy's index (a warning: the provenance link is dangling). One problem per episode."""
    named = [(n, s) for n, w in zip(c.lines["memory_writes.jsonl"], c.tables["memory_writes.jsonl"])
             for s in w.sources if s.startswith(f"{INHERITED}:")]
    if not named:
        return
    try:
        index = inside(c.dir, f"{INHERITED}/index.jsonl")
    except UnsafePath:
        index = None
    if index is None or not index.is_file():
        n, s = named[0]
        c.problems.append(Problem("memory_writes.jsonl", n, f"source {s} names an inherited episode, but the run "
                                                            f"has no {INHERITED}/index.jsonl inside it"))
        return
    known = set()
    for _, obj, _ in iter_jsonl(index, f"{INHERITED}/index.jsonl"):
        if isinstance(obj, dict):
            known.add(obj.get("id"))
    reported = set()
    for n, s in named:
        if s.split(":", 1)[1] not in known and s not in reported:
            reported.add(s)
            c.problems.append(Problem("memory_writes.jsonl", n, f"source {s} is not in {INHERITED}/index.jsonl",
                                      "warning"))


def _check_seen(c: RunContents) -> None:
    """Each ``seen.jsonl`` row names an indexed episode (one after the last indexed episode is
    the one being committed when the run stopped: a warning; one problem per episode, at its
    first line) and, in a Crafter run (the
    manifest says so), cells inside the world (its ``config.area``, else 64x64; a warning). The rows stay."""
    rows: list[SeenRow] = c.tables["seen.jsonl"]
    if not rows:
        return
    indexed = set(episode_ids(c))
    last = max((int(e[3:]) for e in indexed), default=-1)
    crafter = c.manifest is not None and c.manifest.env == "crafter"
    area = (0, 0)
    if crafter:
        from mfm.envs.rules import AREA  # here: importing mfm.envs loads the game, which no other check needs

        side = (c.manifest.config or {}).get("area")
        area = (side, side) if isinstance(side, int) and not isinstance(side, bool) else AREA
    unknown: set[str] = set()
    for n, r in zip(c.lines["seen.jsonl"], rows):
        if r.episode not in indexed and r.episode not in unknown:
            unknown.add(r.episode)
            if int(r.episode[3:]) > last:
                c.problems.append(Problem("seen.jsonl", n, f"episode {r.episode} is not in index.jsonl yet (being "
                                                            "committed when the run stopped)", "warning"))
            else:
                c.problems.append(Problem("seen.jsonl", n, f"episode {r.episode} is not in index.jsonl"))
        if crafter:
            outside = [xy for xy in r.cells if not (0 <= xy[0] < area[0] and 0 <= xy[1] < area[1])]
            if outside:
                c.problems.append(Problem("seen.jsonl", n, f"{r.material}: {len(outside)} cell(s) outside the "
                                                           f"{area[0]}x{area[1]} world, e.g. {outside[0]}", "warning"))


TABLE_CHECKS: dict[str, Callable[[RunContents], None]] = {
    "steps.jsonl": _check_steps_order,
    "memory_writes.jsonl": _check_memory_history,
    "seen.jsonl": _check_seen,
}
"""Checks of a table against itself or the index, run in this order once it is read."""
