"""The episode index: one searchable row per finished episode, queried by cues.

Queries return references (index rows); the caller then loads the records and frames it
wants (``mfm.memory.retrieval``). Columns are kept as numpy arrays, rebuilt lazily after
appends, so predicate queries stay fast at 100k episodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from mfm.memory.appendlog import AppendLog, LoggedRows
from mfm.schema import IndexRow, Problem, SeenRow, read_table


@dataclass(frozen=True, slots=True)
class IndexQuery:
    """Predicates of an index search; every one given must hold (AND).

    ``text``: every word appears in the summary, action kind, tags, events or note
    (case-insensitive). ``tags``: the row has all of them. ``near`` + ``radius``: Euclidean
    distance of the recorded position on the (x, y) plane. ``as_of_step``: only episodes
    finished by then (``last_step <= as_of_step``), i.e. what the agent could know.
    """

    text: str | None = None
    tags: tuple[str, ...] = ()
    action_kind: str | None = None
    kind: str | None = None
    outcome: str | None = None
    life: int | None = None
    steps: tuple[int, int] | None = None
    near: tuple[float, float] | None = None
    radius: float | None = None
    as_of_step: int | None = None
    limit: int | None = None
    newest_first: bool = True


class EpisodeIndex(LoggedRows):
    """In-memory index over ``index.jsonl``; appends go to the file and to memory."""

    def __init__(self, rows: Iterable[IndexRow] = (), log: AppendLog | None = None) -> None:
        super().__init__(rows, log)
        self._cols: dict[str, np.ndarray] | None = None
        self._text: list[str] | None = None
        self._by_id = {r.id: i for i, r in enumerate(self.rows)}

    @classmethod
    def open(cls, run_dir: Path, writable: bool = False) -> tuple["EpisodeIndex", list[Problem]]:
        """Load ``index.jsonl`` of a run (tolerating damage); optionally for appending."""
        path = run_dir / "index.jsonl"
        rows, problems = read_table(path, IndexRow)
        log = AppendLog(path) if writable else None
        return cls((r for _, r in rows), log), problems

    def append(self, row: IndexRow) -> None:
        """Add a finished episode (written on the next :meth:`flush`)."""
        if row.id in self._by_id:
            raise ValueError(f"episode {row.id} is already indexed")
        self._by_id[row.id] = len(self.rows)
        super().append(row)

    def _changed(self) -> None:
        self._cols = None
        self._text = None

    def get(self, ep_id: str) -> IndexRow | None:
        i = self._by_id.get(ep_id)
        return None if i is None else self.rows[i]

    def _columns(self) -> dict[str, np.ndarray]:
        if self._cols is None:
            rows = self.rows
            nan = float("nan")
            self._cols = {
                "first": np.fromiter((r.first_step for r in rows), np.int64, len(rows)),
                "last": np.fromiter((r.last_step for r in rows), np.int64, len(rows)),
                "life": np.fromiter((r.life for r in rows), np.int64, len(rows)),
                "x": np.fromiter((nan if r.x is None else r.x for r in rows), np.float64, len(rows)),
                "y": np.fromiter((nan if r.y is None else r.y for r in rows), np.float64, len(rows)),
            }
        return self._cols

    def _texts(self) -> list[str]:
        if self._text is None:
            self._text = [
                " ".join((r.summary, r.action_kind or "", " ".join(r.tags), " ".join(r.events), r.note or "")).lower()
                for r in self.rows
            ]
        return self._text

    def query(self, q: IndexQuery | None = None, **kw) -> list[IndexRow]:
        """Rows matching every predicate, newest first unless ``newest_first=False``."""
        q = q or IndexQuery(**kw)
        c = self._columns()
        mask = np.ones(len(self.rows), bool)
        if q.as_of_step is not None:
            mask &= c["last"] <= q.as_of_step
        if q.steps is not None:
            lo, hi = q.steps
            mask &= (c["last"] >= lo) & (c["first"] <= hi)
        if q.life is not None:
            mask &= c["life"] == q.life
        if q.near is not None:
            radius = float("inf") if q.radius is None else q.radius
            d2 = (c["x"] - q.near[0]) ** 2 + (c["y"] - q.near[1]) ** 2
            mask &= d2 <= radius * radius
        idx: Sequence[int] = np.flatnonzero(mask).tolist()
        rows = self.rows
        if q.kind is not None:
            idx = [i for i in idx if rows[i].kind == q.kind]
        if q.action_kind is not None:
            idx = [i for i in idx if rows[i].action_kind == q.action_kind]
        if q.outcome is not None:
            idx = [i for i in idx if rows[i].outcome == q.outcome]
        if q.tags:
            want = set(q.tags)
            idx = [i for i in idx if want.issubset(rows[i].tags)]
        if q.text:
            words = q.text.lower().split()
            texts = self._texts()
            idx = [i for i in idx if all(w in texts[i] for w in words)]
        if q.newest_first:
            idx = list(reversed(idx))
        if q.limit is not None:
            idx = idx[: q.limit]
        return [rows[i] for i in idx]

    def episode_at(self, step: int) -> IndexRow | None:
        """The episode whose frames hold env step ``step`` (first_step < step <= last_step)."""
        c = self._columns()
        hits = np.flatnonzero((c["first"] < step) & (c["last"] >= step))
        for i in hits[::-1]:
            if self.rows[i].frames:
                return self.rows[i]
        return None


@dataclass(frozen=True, slots=True)
class ContentHit:
    """A cell an episode's frames showed holding ``material``: the latest such episode (as
    of the query) and the first step the cell was ever seen with it."""

    material: str
    cell: tuple[int, int]
    episode: str
    last_step: int
    first_seen: int


def nearest_first(hits: Iterable[ContentHit], near: tuple[float, float]) -> list[ContentHit]:
    """Hits ordered by L1 distance of their cell from ``near`` (ties by cell)."""
    return sorted(hits, key=lambda h: (abs(h.cell[0] - near[0]) + abs(h.cell[1] - near[1]), h.cell))


class ContentIndex(LoggedRows):
    """The content half of the episode index (``seen.jsonl``): what each episode's frames
    showed, by material and world cell, searchable over the whole history (no recency
    window). Appends go to the file and to memory; lookups are kept per material and cell."""

    def __init__(self, rows: Iterable[SeenRow] = (), log: AppendLog | None = None) -> None:
        self._cells: dict[str, dict[tuple[int, int], list[int]]] = {}
        super().__init__((), log)
        for r in rows:
            self.rows.append(r)
            self._note(len(self.rows) - 1)

    @classmethod
    def open(cls, run_dir: Path, writable: bool = False) -> tuple["ContentIndex", list[Problem]]:
        """Load ``seen.jsonl`` of a run (none for format 1.1; damage tolerated)."""
        path = run_dir / "seen.jsonl"
        rows, problems = read_table(path, SeenRow) if path.exists() else ([], [])
        return cls((r for _, r in rows), AppendLog(path) if writable else None), problems

    def _note(self, i: int) -> None:
        r = self.rows[i]
        cells = self._cells.setdefault(r.material, {})
        for x, y in r.cells:
            cells.setdefault((int(x), int(y)), []).append(i)

    def append(self, row: SeenRow) -> None:
        """Add an episode's row for one material (written on the next :meth:`flush`)."""
        super().append(row)
        self._note(len(self.rows) - 1)

    def materials(self) -> list[str]:
        """The materials any episode showed."""
        return sorted(self._cells)

    def find(self, material: str, *, near: tuple[float, float] | None = None, radius: float | None = None,
             as_of_step: int | None = None, limit: int | None = None) -> list[ContentHit]:
        """Cells that showed ``material`` in episodes finished by ``as_of_step`` (all, if
        None), within ``radius`` of ``near``; nearest first when ``near`` is given, else the
        most recently seen first (ties by cell)."""
        hits = []
        for cell, rows in self._cells.get(material, {}).items():
            if near is not None and radius is not None and \
                    (cell[0] - near[0]) ** 2 + (cell[1] - near[1]) ** 2 > radius * radius:
                continue
            seen = [self.rows[i] for i in rows if as_of_step is None or self.rows[i].last_step <= as_of_step]
            if seen:
                hits.append(ContentHit(material, cell, seen[-1].episode, seen[-1].last_step, seen[0].first_step))
        if near is not None:
            hits = nearest_first(hits, near)
        else:
            hits.sort(key=lambda h: (-h.last_step, h.cell))
        return hits[:limit] if limit is not None else hits
