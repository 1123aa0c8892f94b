"""Time of opening one run in this (fresh) process, imports excluded.

    python -m bench.opentime RUN

Prints one JSON object: ``open_s``, opening the run and building every table and its
problem list (tables and files), and ``sql_s``, building the SQL views afterwards (only the
SQL page asks for them). The table cache used is the one ``MFM_CACHE_DIR`` names.
"""
from __future__ import annotations

import json
import sys
import time

from loaders import open_run

TABLES = ("episodes", "steps", "turns", "grid", "milestones", "lives", "memory_writes")
"""The tables the dashboard pages read."""


def open_times(run: str) -> dict:
    """Seconds to open ``run`` with every table, and to build its SQL views after that."""
    t = time.perf_counter()
    r = open_run(run)
    for name in TABLES:
        r.table(name)
    len(r.problems)
    opened = time.perf_counter() - t
    t = time.perf_counter()
    r.sql("select count(*) from steps").fetchall()
    return {"open_s": opened, "sql_s": time.perf_counter() - t}


if __name__ == "__main__":
    print(json.dumps(open_times(sys.argv[1])))
