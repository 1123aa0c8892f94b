"""Records as columns: a run's typed records (``mfm.schema``) turned into pandas tables, and the
names of those tables. The bottom of ``loaders``: imports nothing of it."""
from __future__ import annotations

import dataclasses
import json

import pandas as pd

TABLE_NAMES = {
    "index.jsonl": "episodes", "steps.jsonl": "steps", "turns.jsonl": "turns", "grid.jsonl": "grid",
    "milestones.jsonl": "milestones", "lives.jsonl": "lives", "memory_writes.jsonl": "memory_writes",
    "seen.jsonl": "seen",
}

FILE_OF = {v: k for k, v in TABLE_NAMES.items()}


_SORTED_JSON = json.JSONEncoder(sort_keys=True)
"""``json.dumps(v, sort_keys=True)`` without building an encoder per value."""


def _column(values: list, kind: str) -> list:
    """One column of a table: string lists stay lists, objects and lists of objects become
    JSON text (so every row of a column has the same type)."""
    if kind in ("dict", "counts", "list"):
        enc = _SORTED_JSON.encode
        return [None if v is None else enc(list(v) if isinstance(v, tuple) else v) for v in values]
    if kind in ("strs", "cell", "vec2"):
        return [None if v is None else list(v) for v in values]
    return values


COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3 or pd.options.mode.copy_on_write is True
"""pandas copies a shared column before changing it (always since pandas 3): a table handed out
can then be a shallow copy of the columns behind its records, which nothing done to the table
changes (a deep copy took 0.15 s at 360k steps)."""


def table_frame(records: list, rtype: type) -> pd.DataFrame:
    """A DataFrame with one column per record field, in field order."""
    cols = [f.name for f in dataclasses.fields(rtype)]
    if not records:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    return pd.DataFrame({c: _column([getattr(r, c) for r in records], rtype.KINDS[c].rstrip("?")) for c in cols},
                        columns=cols)
