"""Play the same runs from two source trees and compare their folders file by file.

    python -m bench.same_runs OLD_SRC NEW_SRC OUT [--side old|new|both] [--keep] [--wide] [--only NAME ...]

A check that a change of code changed no behaviour: each run of :data:`RUNS` is played with
``--fixed-clock`` once with ``OLD_SRC`` first on the import path (into ``OUT_old/NAME``) and
once with ``NEW_SRC`` (``OUT_new/NAME``); then every file of the two folders is compared byte
for byte, except ``run.json``, which is compared as JSON without :data:`SKIPPED` (the command
line names the output folder). Prints one line per run and exits 1 if any run differs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

RUNS: dict[str, list[str]] = {
    "mfm": ["--task", "diamond", "--method", "mfm", "--seed", "3", "--steps", "1500"],
    "vista": ["--task", "diamond", "--method", "vista", "--seed", "3", "--steps", "1500"],
    "pro-long": ["--task", "diamond", "--method", "pro-long", "--seed", "3", "--steps", "1500"],
    "direct": ["--task", "diamond", "--method", "direct", "--seed", "3", "--steps", "1500"],
    "no-index": ["--task", "diamond", "--method", "mfm", "--ablation", "no-index", "--seed", "3", "--steps", "1500"],
    "no-frames": ["--task", "diamond", "--method", "mfm", "--ablation", "no-frames", "--seed", "3", "--steps", "1500"],
    "reach-1000": ["--task", "reach-1000", "--method", "mfm", "--seed", "0"],
}
"""The runs played from each tree (name: the ``mfm run`` arguments besides the clock and folder)."""
WIDE: dict[str, list[str]] = {
    **{f"{m}-s{s}": ["--task", "diamond", "--method", m, "--seed", str(s), "--steps", "3000"]
       for m in ("mfm", "vista", "pro-long", "direct") for s in (0, 1, 2, 4)},
    **{f"{a}-s0": ["--task", "diamond", "--method", "mfm", "--ablation", a, "--seed", "0", "--steps", "3000"]
       for a in ("no-content", "no-procedures", "no-consolidation", "no-budget", "no-index", "no-frames")},
    "all-mfm-s0": ["--task", "all", "--method", "mfm", "--seed", "0", "--steps", "3000"],
    "all-pro-long-s1": ["--task", "all", "--method", "pro-long", "--seed", "1", "--steps", "3000"],
    "reach-kit-mfm-s0": ["--task", "reach-kit-10000", "--method", "mfm", "--seed", "0", "--steps", "3000"],
    "reach-3000-vista-s1": ["--task", "reach-3000", "--method", "vista", "--seed", "1", "--steps", "4000"],
}
"""More runs (``--wide``): other seeds, longer budgets, the other ablations, the ``all`` task, kit and reach tasks."""
SKIPPED = ("command", "commit", "started_at", "ended_at")
"""``run.json`` fields left out of the comparison."""


def play(src: Path, args: list[str], out: Path) -> None:
    """Play one run into ``out`` (emptied first) with ``src`` first on the import path
    (``python -m`` puts the working directory there)."""
    if out.exists():
        shutil.rmtree(out)
    cmd = ["nice", sys.executable, "-m", "mfm.cli", "run", *args, "--fixed-clock", "--quiet", "--out", str(out)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run(cmd, cwd=src, env=env, check=True, stdout=subprocess.DEVNULL)


def folder(out: Path, side: str) -> Path:
    """Where the runs of one side go: ``OUT_old`` or ``OUT_new``."""
    return out.resolve().with_name(f"{out.name}_{side}")


def finished(run: Path) -> bool:
    """Whether ``run`` holds a run that ended (its ``run.json`` has ``ended_at``)."""
    try:
        return bool(json.loads((run / "run.json").read_text()).get("ended_at"))
    except (OSError, ValueError):
        return False


def differences(a: Path, b: Path) -> list[str]:
    """The relative paths whose contents differ between run folders ``a`` and ``b`` (or exist in one only)."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    out = [f"only in {a}: {p}" for p in sorted(files_a - files_b)] + [f"only in {b}: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if rel == Path("run.json"):
            ja, jb = (json.loads((d / rel).read_text()) for d in (a, b))
            if {k: v for k, v in ja.items() if k not in SKIPPED} != {k: v for k, v in jb.items() if k not in SKIPPED}:
                out.append(str(rel))
        elif (a / rel).read_bytes() != (b / rel).read_bytes():
            out.append(str(rel))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--side", choices=("old", "new", "both"), default="both", help="which trees to play from")
    ap.add_argument("--keep", action="store_true", help="do not play again a run whose folder holds a finished run.json")
    ap.add_argument("--wide", action="store_true", help="also the runs of WIDE")
    ap.add_argument("--only", nargs="*", help="these runs only (names of RUNS or WIDE)")
    ns = ap.parse_args(argv)
    runs = {**RUNS, **WIDE} if ns.wide or ns.only else RUNS
    names = ns.only or list(runs)
    unknown = [n for n in names if n not in runs]
    if unknown:
        ap.error(f"no run named {', '.join(unknown)} (known: {', '.join(runs)})")
    bad = 0
    for name in names:
        a, b = folder(ns.out, "old") / name, folder(ns.out, "new") / name
        for side, src, run in (("old", ns.old, a), ("new", ns.new, b)):
            if ns.side in (side, "both") and not (ns.keep and finished(run)):
                play(src.resolve(), runs[name], run)
        if not finished(a) or not finished(b):
            print(f"{name}: not played on both sides", flush=True)
            bad += 1
            continue
        diff = differences(a, b)
        files = sum(1 for p in a.rglob("*") if p.is_file())
        print(f"{name}: {'same' if not diff else 'DIFFERENT'} ({files} files)" + "".join(f"\n  {d}" for d in diff),
              flush=True)
        bad += bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
