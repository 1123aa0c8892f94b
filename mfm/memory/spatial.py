"""Spatial memory: the append-only grid of interacted cells (walked, placed, opened, ...)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from mfm.memory.appendlog import AppendLog, LoggedRows
from mfm.schema import GridRow, Problem, read_table


class SpatialGrid(LoggedRows):
    """Every interacted cell in the order it happened; the file is never rewritten.

    The latest row of a cell wins when asking what a cell *is* (:meth:`cell_kinds`), but
    all rows stay, so the grid as of any step can be asked for.
    """

    def __init__(self, rows: Iterable[GridRow] = (), log: AppendLog | None = None) -> None:
        super().__init__(rows, log)
        self._cols: dict[str, np.ndarray] | None = None

    @classmethod
    def open(cls, run_dir: Path, writable: bool = False) -> tuple["SpatialGrid", list[Problem]]:
        """Load ``grid.jsonl`` of a run (tolerating damage); optionally for appending."""
        path = run_dir / "grid.jsonl"
        rows, problems = read_table(path, GridRow)
        return cls((r for _, r in rows), AppendLog(path) if writable else None), problems

    def _changed(self) -> None:
        self._cols = None

    def _columns(self) -> dict[str, np.ndarray]:
        if self._cols is None:
            n = len(self.rows)
            self._cols = {
                "x": np.fromiter((r.cell[0] for r in self.rows), np.int64, n),
                "y": np.fromiter((r.cell[1] for r in self.rows), np.int64, n),
                "step": np.fromiter((r.step for r in self.rows), np.int64, n),
                "life": np.fromiter((r.life for r in self.rows), np.int64, n),
            }
        return self._cols

    def query(self, *, box: tuple[int, int, int, int] | None = None, near: tuple[float, float] | None = None,
              radius: float | None = None, kinds: Iterable[str] | None = None,
              steps: tuple[int, int] | None = None, life: int | None = None,
              as_of_step: int | None = None) -> list[GridRow]:
        """Rows matching every predicate given. ``box`` is inclusive (x0, y0, x1, y1)."""
        c = self._columns()
        m = np.ones(len(self.rows), bool)
        if box is not None:
            x0, y0, x1, y1 = box
            m &= (c["x"] >= x0) & (c["x"] <= x1) & (c["y"] >= y0) & (c["y"] <= y1)
        if near is not None and radius is not None:
            m &= (c["x"] - near[0]) ** 2 + (c["y"] - near[1]) ** 2 <= radius * radius
        if steps is not None:
            m &= (c["step"] >= steps[0]) & (c["step"] <= steps[1])
        if as_of_step is not None:
            m &= c["step"] <= as_of_step
        if life is not None:
            m &= c["life"] == life
        rows = [self.rows[i] for i in np.flatnonzero(m)]
        if kinds is not None:
            want = set(kinds)
            rows = [r for r in rows if r.kind in want]
        return rows

    def cell_kinds(self, as_of_step: int | None = None) -> dict[tuple[int, int], str]:
        """The latest kind recorded for each (x, y) cell."""
        out: dict[tuple[int, int], str] = {}
        for r in self.rows:
            if as_of_step is None or r.step <= as_of_step:
                out[(r.cell[0], r.cell[1])] = r.kind
        return out

    def cells(self, kinds: Iterable[str], as_of_step: int | None = None) -> set[tuple[int, int]]:
        """Cells ever recorded with one of ``kinds`` (e.g. every hazard ever met)."""
        want = set(kinds)
        return {(r.cell[0], r.cell[1]) for r in self.rows
                if r.kind in want and (as_of_step is None or r.step <= as_of_step)}
