"""Run the agent on several seeds in parallel and print a results table (markdown).

    python -m mfm.agent.report --task diamond --seeds 0,1,2 [--steps N] [--out runs/report]
"""
from __future__ import annotations

import argparse
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

from mfm.agent.config import RunConfig
from mfm.agent.runner import Runner


def one(task: str, seed: int, steps: int | None, out: str) -> dict[str, Any]:
    """Run one seed (fixed clock) and return its row of the table."""
    run_dir = Path(out) / f"{task}_mfm_s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    config = RunConfig(task=task, seed=seed, steps=steps, out=run_dir, fixed_clock=True)
    r = Runner(config, command=f"python -m mfm.agent.report --task {task} --seeds {seed}")
    r.run()
    m = r.writer.manifest
    s = r.summary()
    return {"seed": seed, "reached": [n for n in m.milestone_order if n in m.milestones],
            "total": len(m.milestone_order), "steps": m.last_step, "deaths": s["deaths"], "turns": s["turns"],
            "steps_per_turn": s["steps_per_turn"], "inspection": sum(s["found_by_inspection"].values()),
            "sight": sum(s["found_by_sight"].values()), "used": s["inspection_targets_used"],
            "diamond_step": m.milestones.get("collect_diamond"), "dir": str(run_dir)}


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown results table."""
    head = ("| seed | milestones | last milestone | steps used | diamond at step | deaths | turns | env steps/turn "
            "| found by inspection | found by sight | inspection facts used as targets |")
    out = [head, "|" + "|".join("---" for _ in range(11)) + "|"]
    for r in rows:
        last = r["reached"][-1] if r["reached"] else "-"
        out.append(f"| {r['seed']} | {len(r['reached'])}/{r['total']} | {last} | {r['steps']} | "
                   f"{r['diamond_step'] if r['diamond_step'] is not None else '-'} | {r['deaths']} | {r['turns']} | "
                   f"{r['steps_per_turn']} | {r['inspection']} | {r['sight']} | {r['used']} |")
    full = sum(len(r["reached"]) == r["total"] for r in rows)
    out.append("")
    out.append(f"All milestones in {full} of {len(rows)} seeds; mean "
               f"{sum(len(r['reached']) for r in rows) / max(len(rows), 1):.1f} milestones ({date.today().isoformat()}).")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="diamond")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--out", default="runs/report")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(one, [args.task] * len(seeds), seeds, [args.steps] * len(seeds),
                             [args.out] * len(seeds)))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
