"""Keep, beside each run's compact record, what the comparison tables measure from its full folder.

    python results/heldout/save_measures.py RUNS_DIR [RUNS_DIR ...] --into results/heldout/map [--record]

For every finished run folder under each RUNS_DIR that has a compact record under ``--into``,
writes ``measures.json``: :class:`loaders.paper_measures.RunMeasures` of the full run as JSON
(turns, tool calls, retargeting counts, retrieval ages, recalls with their ages and lives).
Those need the run's ``turns.jsonl`` and ``index.jsonl``, which the compact record leaves out
(they are large); the full folders may not outlive the machine that played them. With
``--record``, a finished run without a compact record gets one first (:data:`RECORD`).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from loaders.paper_measures import MEASURES, measure, measures_doc
from loaders.run import open_run

RECORD = ("run.json", "milestones.jsonl", "lives.jsonl")
"""The files of a finished run that its compact record keeps (those the run has)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--into", type=Path, required=True)
    ap.add_argument("--record", action="store_true", help="make the compact record of a finished run that has none")
    args = ap.parse_args(argv)
    written = 0
    for root in args.runs:
        for run_dir in sorted(p for p in root.iterdir() if (p / "run.json").is_file()):
            record = args.into / run_dir.name
            out = record / MEASURES
            if out.is_file() or not (record.is_dir() or args.record):
                continue
            run = open_run(run_dir)
            if run.status != "finished":
                continue
            if not record.is_dir():
                record.mkdir(parents=True)
                for name in RECORD:
                    if (run_dir / name).is_file():
                        shutil.copy2(run_dir / name, record / name)
            out.write_text(json.dumps(measures_doc(measure(run), str(run_dir)), sort_keys=True) + "\n",
                           encoding="utf-8")
            written += 1
    print(f"save_measures: {written} measures.json written under {args.into}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
