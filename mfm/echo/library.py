"""The CSD library: an append-only ``csd.jsonl`` in the run directory, latest version wins.

Each line is a whole CSD; a later line with the same id is a newer version (after an
attempt, a vectoriser change…). Retrieval returns the top-K most similar descriptors with
their per-axis evidence (Echo's R(x, M, T)).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from mfm.echo.csd import AXES, CSD
from mfm.echo.vectorize import Vectorizer, axis_similarity, vectorize
from mfm.memory.appendlog import append_bytes
from mfm.schema import Problem, iter_jsonl

CSD_FILE = "csd.jsonl"


@dataclass(frozen=True)
class Match:
    """A retrieved exemplar: its total similarity and the evidence per axis."""

    csd: CSD
    score: float
    per_axis: dict[str, float]


class CSDLibrary:
    """Descriptors of every learned (or induced) task, kept with their history."""

    def __init__(self, vectorizer: Vectorizer | None, path: Path | None = None) -> None:
        self.vec = vectorizer
        self.path = path
        self.latest: dict[str, CSD] = {}
        self.history: list[CSD] = []

    @classmethod
    def open(cls, run_dir: Path, vectorizer: Vectorizer | None, writable: bool = False
             ) -> tuple["CSDLibrary", list[Problem]]:
        """Load ``csd.jsonl`` of a run (tolerating damage)."""
        lib = cls(vectorizer, run_dir / CSD_FILE if writable else None)
        problems = []
        for n, obj, problem in iter_jsonl(run_dir / CSD_FILE):
            if problem:
                problems.append(problem)
                continue
            try:
                lib._remember(CSD.from_dict(obj))
            except (ValueError, TypeError) as e:
                problems.append(Problem(CSD_FILE, n, f"{e}, skipped"))
        return lib, problems

    def _remember(self, csd: CSD) -> None:
        self.latest[csd.id] = csd
        self.history.append(csd)

    def put(self, csd: CSD) -> CSD:
        """Add or update a descriptor (vectorised here); appended to the file at once."""
        if not csd.vectors or csd.meta.get("vectorizer") != self.vec.name:
            csd = vectorize(csd, self.vec)
        self._remember(csd)
        if self.path is not None:
            append_bytes(self.path, (csd.to_json() + "\n").encode("utf-8"))
        return csd

    def get(self, csd_id: str) -> CSD | None:
        return self.latest.get(csd_id)

    def __iter__(self):
        return iter(self.latest.values())

    def __len__(self) -> int:
        return len(self.latest)

    def similar(self, query: CSD, k: int = 4, axes: Sequence[str] = AXES, statuses: Iterable[str] = ("verified",),
                exclude: Iterable[str] = ()) -> list[Match]:
        """Top-``k`` descriptors by mean similarity over ``axes``, with per-axis evidence."""
        if not query.vectors:
            query = vectorize(query, self.vec)
        allowed = set(statuses)
        skip = set(exclude) | {query.id}
        out = []
        for c in self.latest.values():
            if c.id in skip or c.status not in allowed:
                continue
            per = axis_similarity(query, c, AXES)
            score = sum(per[a] for a in axes) / max(1, len(axes))
            out.append(Match(c, score, per))
        out.sort(key=lambda m: (-m.score, m.csd.id))
        return out[:k]

    def representative(self, exclude: Iterable[str] = ()) -> CSD | None:
        """The task to generalise from: the most successful verified one, the most recently
        learned on ties (``exclude``: those already generalised from)."""
        order = {c.id: i for i, c in enumerate(self.history)}
        skip = set(exclude)
        verified = [c for c in self.latest.values() if c.status == "verified" and c.id not in skip]
        return max(verified, key=lambda c: (c.successes, order[c.id]), default=None)
