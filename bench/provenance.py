"""Provenance graph at scale: build, filter and aggregate the graph of a long memory history.

Writes a synthetic run through the memory core — every consolidation adds a fact, revises an
older one and retracts a third, rewrites the plan, and every 50th updates a procedure — then
prints how long the provenance page's computations take and how many nodes reach the browser.

    python -m bench.provenance [--writes 3000] [--out DIR]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mfm.memory import RunWriter
from mfm.memory.consolidation import Fact, Target, WorkingPlan, consolidate
from mfm.memory.procedures import ProceduralMemory, Procedure
from mfm.schema import SCHEMA_VERSION, RunManifest


def write_history(out: Path, writes: int) -> Path:
    """A run whose agent memory gets ``writes`` consolidations (no episodes or frames)."""
    m = RunManifest(schema_version=SCHEMA_VERSION, run_id="bench-provenance", env="synthetic", task="diamond",
                    method="mfm", seed=0, step_budget=10 * writes, milestone_order=("collect_wood",),
                    status="running", started_at="2026-01-01T00:00:00+00:00")
    w = RunWriter(out, m)
    pm = ProceduralMemory(w.memory, ("go_to", "collect"))
    for i in range(writes):
        ep = (f"ep_{i:06d}",)
        facts = [Fact(f"res:k{i}", f"thing {i}", "Resources", ep),
                 Fact(f"res:k{i // 2}", f"thing {i // 2} seen again at {i}", "Resources", ep)]
        if i >= 10 and i % 3 == 0:
            facts.append(Fact(f"res:k{i - 10}", "", sources=ep, retract=True))
        plan = WorkingPlan("diamond", (Target(i % 64, i % 57, f"target {i}"),))
        consolidate(w.memory, facts, plan=plan, step=10 * i, reason="bench")
        if i % 50 == 0:
            pm.save(Procedure("chop", f"chop, revision {i}", ({"atom": "go_to", "args": {"x": i}},), sources=ep),
                    author="agent", reason="bench", sources=ep, step=10 * i)
    w.close("finished", "budget")
    return out


def main() -> None:
    from loaders import provenance as pv
    from loaders.run import open_run

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=3000)
    ap.add_argument("--out", default=None, help="folder for the run (default: a temp folder)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="mfm-prov-")) / "run"
    t = time.perf_counter()
    write_history(out, args.writes)
    print(f"wrote {args.writes} consolidations in {time.perf_counter() - t:.1f} s")
    run = open_run(out)
    writes = run.records("memory_writes.jsonl")
    t = time.perf_counter()
    g = pv.build_graph(run)
    print(f"build_graph: {len(writes)} writes -> {len(g.nodes)} nodes, {len(g.edges)} edges "
          f"in {time.perf_counter() - t:.2f} s")
    for lo, hi in ((None, None), (0, 10 * args.writes // 4), (0, 500)):
        t = time.perf_counter()
        v = pv.view(g, lo, hi)
        print(f"view steps {lo}-{hi}: {v.total} -> {len(v.nodes)} nodes drawn, {len(v.edges)} edges, "
              f"{time.perf_counter() - t:.3f} s; " + ("; ".join(v.aggregated) or "not aggregated"))
    node = next(n.id for n in reversed(g.nodes) if n.kind == "knowledge")
    t = time.perf_counter()
    pv.node_detail(run, g, node)
    print(f"node_detail({node}): {time.perf_counter() - t:.3f} s")
    t = time.perf_counter()
    c = pv.contradictions(run, "mine/GUIDE.md", 10 * args.writes // 2)
    print(f"contradictions of GUIDE.md at mid-run: {int(c['contradiction'].notna().sum())} of {len(c)} lines, "
          f"{time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
