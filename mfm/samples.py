"""Regenerate the sample runs, byte-identical when nothing changed.

    python -m mfm.samples            # writes every run of SAMPLES and ECHO_SAMPLES under sample_runs/
    python -m mfm.samples --check    # regenerate elsewhere and compare every byte
    python -m mfm.samples --only echo [--check]   # the Echo learner samples alone

It sits above both the agent and the Echo learner (it runs the two), so neither imports it.

``diamond_mfm_s2`` is a full MFM diamond run (12,000-step budget; it ends at the diamond, at
env step 1,286). The other methods run on the same seed (2) with a reduced budget of 2,500 env
steps, named ``diamond_METHOD_s2_2500steps``, so that sample_runs/ stays small; MFM needs no
copy with that budget, since its run ends well inside it (the game is the same, step for step).
``reach-1000_mfm_s0`` is a temporal-reach run (``mfm.envs.reach``): the diamond seen in the
first frame, sealed until step 1,000, evicted from the budgeted GUIDE.md meanwhile, and found
again from the frames of an episode 963 steps old (the index searched by what frames showed).

``diamond_direct_s3_1600steps`` and ``diamond_vista_s1_1900steps`` are there for the failure
views: lives that end during a collect with the damage in the episode before (Direct, seed 3,
13 lives), and a life whose failed actions have several causes, one naming a cell (VISTA, seed
1, life 11); budgets cut just past those cases keep sample_runs/ small. Since the baselines got the paper's affordances (issue 44), the seed-2 runs die too rarely
to show these. These two are packed (``episodes.zip``, :mod:`mfm.memory.packed`), so the
samples also show a packed run, and sample_runs/ stays under its disk budget; their files get
one fixed time and mode first, so the pack is byte-identical too.

``echo/ical_s5`` and ``echo/passive_s5`` are Echo learner runs (``mfm echo run``) of the
same seed with a reduced number of Echo episodes, for the Echo page; they are a separate
step (``--only echo``) so that regenerating them leaves the diamond samples alone.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mfm.agent.config import RunConfig
from mfm.agent.runner import Runner
from mfm.echo.agent import run_learner
from mfm.memory.packed import pack_run

COMPARISON_SEED, COMPARISON_STEPS = 2, 2500
SAMPLES: tuple[tuple[str, str, str, int, int | None], ...] = (
    ("diamond_mfm_s2", "diamond", "mfm", 2, None),
    *((f"diamond_{m}_s{COMPARISON_SEED}_{COMPARISON_STEPS}steps", "diamond", m, COMPARISON_SEED, COMPARISON_STEPS)
      for m in ("direct", "pro-long", "vista")),
    ("reach-1000_mfm_s0", "reach-1000", "mfm", 0, None),
    ("diamond_direct_s3_1600steps", "diamond", "direct", 3, 1600),
    ("diamond_vista_s1_1900steps", "diamond", "vista", 1, 1900),
)
"""(folder, task, method, seed, step budget or None for the task's)."""
PACKED = ("diamond_direct_s3_1600steps", "diamond_vista_s1_1900steps")
"""Sample runs kept packed (``episodes.zip``)."""
PACKED_TIME = (2026, 1, 1, 0, 0, 0)
"""The local time every packed member carries (a zip stores a member's time)."""
COMMAND = "python -m mfm.samples"
ECHO_SEED, ECHO_EPISODES = 5, 12
ECHO_SAMPLES: tuple[tuple[str, str, int, int], ...] = tuple(
    (f"echo/{c}_s{ECHO_SEED}", c, ECHO_SEED, ECHO_EPISODES) for c in ("ical", "passive"))
"""(folder, Echo configuration, seed, Echo episodes); the learner always uses the fixed clock."""
GROUPS = ("all", "diamond", "echo")


def generate(root: Path, quiet: bool = False, only: str = "all") -> list[Path]:
    """Write every sample run of the group ``only`` under ``root`` (replacing old copies)
    with the fixed clock."""
    out = []
    for name, task, method, seed, steps in SAMPLES if only in ("all", "diamond") else ():
        final = root / name
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            work = Path(tmp) / name
            config = RunConfig(task=task, method=method, seed=seed, steps=steps, out=work, fixed_clock=True)
            Runner(config, command=f"{COMMAND}  # {name}", progress=not quiet).run()
            if name in PACKED:
                pack_fixed(work)
            if final.exists():
                shutil.rmtree(final)
            shutil.move(str(work), str(final))
        out.append(final)
    for name, config, seed, episodes in ECHO_SAMPLES if only in ("all", "echo") else ():
        final = root / name
        final.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
            work = Path(tmp) / final.name
            run_learner(config, seed, work, episodes=episodes, command=f"{COMMAND} --only echo  # {name}")
            if final.exists():
                shutil.rmtree(final)
            shutil.move(str(work), str(final))
        out.append(final)
    return out


def pack_fixed(run: Path) -> None:
    """Pack ``run`` with every episode file given :data:`PACKED_TIME` and mode 0644 first,
    so the pack's bytes depend on the files' contents alone."""
    when = time.mktime((*PACKED_TIME, 0, 0, -1))
    for f in (run / "episodes").rglob("*"):
        if f.is_file():
            f.chmod(0o644)
            os.utime(f, (when, when))
    pack_run(run)


def names(only: str) -> list[str]:
    """Folders of the sample runs in group ``only``."""
    return [n for n, *_ in SAMPLES if only in ("all", "diamond")] + \
        [n for n, *_ in ECHO_SAMPLES if only in ("all", "echo")]


def same_tree(a: Path, b: Path) -> list[str]:
    """Relative paths whose bytes differ (or exist on one side only)."""
    diff = []
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    diff += [str(p) for p in sorted(files_a ^ files_b)]
    diff += [str(p) for p in sorted(files_a & files_b) if not filecmp.cmp(a / p, b / p, shallow=False)]
    return diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="sample_runs")
    ap.add_argument("--check", action="store_true", help="regenerate in a temp folder and diff against --root")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--only", choices=GROUPS, default="all", help="which sample runs (default: all)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    if not args.check:
        for p in generate(root, args.quiet, args.only):
            print(f"wrote {p}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), args.quiet, args.only)
        bad = []
        for name in names(args.only):
            bad += [f"{name}/{d}" for d in same_tree(root / name, Path(tmp) / name)]
    for d in bad:
        print(f"differs: {d}")
    print("identical" if not bad else f"{len(bad)} file(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
