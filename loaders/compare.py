"""The comparison tables of a sweep (paper Tables 2 and 4, appendix A.4, Figure 6), as markdown.

    mfm results DIR                     # or: python -m loaders.compare DIR
    mfm results DIR --task diamond

Every run under DIR is read (``loaders.open_runs``) and measured with ``loaders.paper_measures``;
the definitions are in that module's docstring.
"""
from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

from loaders import paired, paper_tables
from loaders.escape import md_code, md_text
from loaders.paper_measures import RunMeasures, measure
from loaders.run import open_runs
from mfm.progress import counted


def measures(root: Path, task: str | None = None) -> list[RunMeasures]:
    """The measures of every run under ``root`` (of ``task`` if given) that has a manifest."""
    out = []
    for run in counted(open_runs(root), "runs measured"):
        if run.manifest is None or (task is not None and run.manifest.task != task):
            continue
        out.append(measure(run))
    return out


def report(root: Path, task: str | None = None, against: Path | None = None) -> str:
    """All tables, methods first, then the mfm ablations (with the full mfm for reference), as
    Markdown in which every text from a run shows literally (:mod:`loaders.escape`). With
    ``against`` (another folder of runs: the same sweep with another perception, say), first
    each method of ``root`` paired with itself there over the seeds both ran (:class:`LookupError`
    when ``against`` holds no run of ``task``)."""
    ms = measures(root, task)
    if not ms:
        return ""
    there = measures(against, task) if against is not None else []
    if against is not None and not there:
        raise LookupError(f"no runs under {against}" + (f" of task {task}" if task else ""))
    budgets = sorted({m.budget for m in ms})
    parts = [f"Runs under {md_code(root)} ({len(ms)} runs; step budget {', '.join(map(str, budgets))}; "
             f"{date.today().isoformat()}).", ""]
    not_done = [f"{md_text(m.name)} ({md_text(m.status)})" for m in ms if m.status != "finished"]
    if not_done:
        parts += [f"Not finished: {', '.join(not_done)}.", ""]
    blocks = paired.sections(root, ms, task)
    if against is not None:
        title = (f"Each method here against itself under {md_code(against)} (the same seeds; success: exact "
                 "McNemar; steps: a failure at its budget)")
        blocks.insert(0, (title, paired.between_markdown(ms, there)))
    for title, block in blocks:
        text = md_text(block) if isinstance(block, str) else \
            paper_tables.to_markdown(block) if not block.empty else "(none)"
        parts += [f"### {title}", "", text, ""]
    for _, title, table in paper_tables.tables(ms):
        parts += [f"### {title}", "", paper_tables.to_markdown(table), ""]
    if not any(name == "reach" for name, _, _ in paper_tables.tables(ms)):
        parts += ["### How far back retrieval reaches (age of retrieved episodes)", "",
                  "(no run searched or inspected an episode)", ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--task", default=None)
    args = ap.parse_args(argv)
    text = report(Path(args.root), args.task)
    print(text or f"no runs under {args.root}")
    return 0 if text else 1


if __name__ == "__main__":
    sys.exit(main())
