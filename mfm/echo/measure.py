"""Echo measurements over learner runs: Success@0->k per task family, unlock curves, speed-up.

Task families (Echo's four, mapped to Crafter achievements):

- Recipe: pickaxes and swords of wood, stone and iron.
- Functional equivalence: defeat a zombie (with any weapon or none), mine stone, coal and
  iron (with any pickaxe tier that can).
- Crafting chain: an iron pickaxe from nothing.
- Utility blocks: place a table, a furnace, a plant.

Success@0->k of a family in one run = the fraction of the family's tasks unlocked within
the first k Echo episodes (from scratch); the table averages it over seeds. The unlock
curve counts distinct achievements unlocked after each Echo episode.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, median, quantiles
from typing import Iterable

from mfm.echo.csd import ATTEMPTS_FILE, CONFIGS
from mfm.schema import Problem, iter_jsonl

FAMILIES: dict[str, tuple[str, ...]] = {
    "Recipe": ("make_wood_pickaxe", "make_stone_pickaxe", "make_iron_pickaxe", "make_wood_sword",
               "make_stone_sword", "make_iron_sword"),
    "Functional eq.": ("defeat_zombie", "collect_stone", "collect_coal", "collect_iron"),
    "Crafting chain": ("make_iron_pickaxe",),
    "Utility blocks": ("place_table", "place_furnace", "place_plant"),
}
KS: tuple[int, ...] = (10, 30)


@dataclass(frozen=True)
class LearnerRun:
    """The Echo episodes of one learner run (``echo.jsonl``)."""

    path: Path
    config: str
    seed: int
    attempts: tuple[dict, ...]
    deaths: int | None = None
    steps: int | None = None

    def unlocked_by(self, k: int) -> set[str]:
        """Achievements unlocked within the first ``k`` Echo episodes."""
        got = [a for a in self.attempts if a["episode"] < k]
        return set(got[-1]["unlocked"]) if got else set()

    def curve(self) -> list[int]:
        """Distinct achievements unlocked after each Echo episode."""
        return [len(a["unlocked"]) for a in self.attempts]


def read_run(run_dir: Path) -> tuple[LearnerRun | None, list[Problem]]:
    """Read ``echo.jsonl`` of a run; (None, problems) when it has none or it is unusable."""
    path = Path(run_dir) / ATTEMPTS_FILE
    if not path.is_file():
        return None, []
    rows, problems = [], []
    for n, obj, problem in iter_jsonl(path):
        if problem:
            problems.append(problem)
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("episode"), int) or \
                not isinstance(obj.get("unlocked"), list) or obj.get("config") not in CONFIGS:
            problems.append(Problem(ATTEMPTS_FILE, n, "an Echo episode needs episode (int), unlocked (list) and a "
                                                     "known config, skipped"))
            continue
        rows.append(obj)
    if not rows:
        return None, problems
    rows.sort(key=lambda r: r["episode"])
    deaths, steps = _agent_summary(Path(run_dir))
    return LearnerRun(Path(run_dir), rows[0]["config"], int(rows[0].get("seed", 0)), tuple(rows), deaths,
                      steps), problems


def _agent_summary(run_dir: Path) -> tuple[int | None, int | None]:
    """Deaths and env steps from ``run.json`` (``config.agent_summary``), if written."""
    try:
        s = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["config"]["agent_summary"]
        return int(s["deaths"]), int(s["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


def find_runs(root: Path) -> tuple[list[LearnerRun], list[tuple[Path, Problem]]]:
    """Every learner run under ``root`` (``root`` itself or its sub-folders, two levels)."""
    root = Path(root)
    dirs = [root] + sorted(p for p in root.glob("*") if p.is_dir()) + sorted(p for p in root.glob("*/*") if p.is_dir())
    runs, problems = [], []
    for d in dirs:
        run, probs = read_run(d)
        problems += [(d, p) for p in probs]
        if run is not None:
            runs.append(run)
    return runs, problems


def success_at(run: LearnerRun, family: str, k: int) -> float:
    """Fraction of ``family``'s tasks unlocked within the first ``k`` Echo episodes."""
    tasks = FAMILIES[family]
    got = run.unlocked_by(k)
    return sum(t in got for t in tasks) / len(tasks)


def by_config(runs: Iterable[LearnerRun]) -> dict[str, list[LearnerRun]]:
    """Runs grouped by configuration, in the order of :data:`CONFIGS`, seeds sorted."""
    out: dict[str, list[LearnerRun]] = {}
    for r in runs:
        out.setdefault(r.config, []).append(r)
    return {c: sorted(out[c], key=lambda r: r.seed) for c in CONFIGS if c in out}


def mean_curve(runs: list[LearnerRun]) -> list[float]:
    """The unlock curve averaged over runs (each run's last value carried to the longest)."""
    n = max(len(r.curve()) for r in runs)
    padded = [r.curve() + [r.curve()[-1]] * (n - len(r.curve())) for r in runs]
    return [mean(col) for col in zip(*padded)]


def episodes_to(run: LearnerRun, count: int) -> int | None:
    """The first Echo episode (1-based) after which ``count`` achievements were unlocked."""
    return next((i + 1 for i, v in enumerate(run.curve()) if v >= count), None)


def _auc(curves: list[list[int]], n: int) -> float:
    return sum(sum(c[:n]) + c[-1] * max(0, n - len(c)) for c in curves)


def speedup(fast: list[LearnerRun], slow: list[LearnerRun], resamples: int = 2000) -> dict:
    """How much faster ``fast`` unlocks than ``slow`` (same seeds): the ratio of the areas
    under the mean unlock curves; its spread over seeds (the per-seed AUC ratios' median and
    quartiles, and a 95% bootstrap interval of the pooled ratio, resampling seeds with a
    fixed generator); and the mean over seeds of (episodes ``slow`` needed to reach its
    final count) / (episodes ``fast`` needed to reach that count)."""
    fc, sc = mean_curve(fast), mean_curve(slow)
    n = min(len(fc), len(sc))
    auc = sum(fc[:n]) / sum(sc[:n]) if sum(sc[:n]) else None
    ratios, pairs = [], []
    seeds = {r.seed: r for r in fast}
    for s in slow:
        f = seeds.get(s.seed)
        if f is None:
            continue
        pairs.append((f.curve(), s.curve()))
        target = s.curve()[-1]
        es, ef = episodes_to(s, target), episodes_to(f, target)
        if es and ef:
            ratios.append(es / ef)
    per_seed = [_auc([f], n) / _auc([s], n) for f, s in pairs if _auc([s], n)]
    ci = None
    if len(pairs) >= 2:
        rng = random.Random(0)
        boot = []
        for _ in range(resamples):
            pick = [pairs[rng.randrange(len(pairs))] for _ in pairs]
            den = _auc([s for _, s in pick], n)
            if den:
                boot.append(_auc([f for f, _ in pick], n) / den)
        boot.sort()
        ci = (boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]) if boot else None
    q = quantiles(per_seed, n=4) if len(per_seed) >= 2 else None
    return {"auc_ratio": auc, "episodes_ratio": mean(ratios) if ratios else None,
            "seeds_reaching": float(len(ratios)), "per_seed": per_seed,
            "median": median(per_seed) if per_seed else None, "iqr": (q[0], q[2]) if q else None, "ci": ci}


def deaths_per_1000(runs: list[LearnerRun]) -> float | None:
    """Deaths per 1,000 env steps over runs that recorded their summary."""
    known = [r for r in runs if r.deaths is not None and r.steps]
    steps = sum(r.steps or 0 for r in known)
    return 1000 * sum(r.deaths or 0 for r in known) / steps if steps else None


def table(runs: list[LearnerRun]) -> str:
    """The markdown report: Success@0->k per family and configuration, unlock summary, speed-up."""
    groups = by_config(runs)
    if not groups:
        return "No learner runs (no echo.jsonl) found."
    head = "| configuration | seeds | " + " | ".join(f"{f} @0->{k}" for f in FAMILIES for k in KS) + \
        " | unlocked @10 | unlocked @30 |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for c, rs in groups.items():
        cells = [f"{100 * mean(success_at(r, f, k) for r in rs):.0f}%" for f in FAMILIES for k in KS]
        u = [f"{mean(len(r.unlocked_by(k)) for r in rs):.1f}" for k in KS]
        seeds = ",".join(str(r.seed) for r in rs)
        out.append(f"| {c} | {seeds} | " + " | ".join(cells) + f" | {u[0]} | {u[1]} |")
    out.append("")
    out.append("Unlock curve (mean distinct achievements after Echo episode 5, 10, 15, 20, 25, 30):")
    out.append("")
    for c, rs in groups.items():
        curve = mean_curve(rs)
        pts = ", ".join(f"{curve[i - 1]:.1f}" for i in (5, 10, 15, 20, 25, 30) if i <= len(curve))
        out.append(f"- {c}: {pts}")
    if "passive" in groups:
        out.append("")
        out.append("Speed-up over passive retrieval (AUC ratio of the mean unlock curves [95% bootstrap interval "
                   "over seeds]; per-seed AUC ratio median (IQR); episodes-to-passive's-final-count ratio, mean "
                   "over seeds that reach it):")
        out.append("")
        for c, rs in groups.items():
            if c == "passive":
                continue
            s = speedup(rs, groups["passive"])
            auc = f"{s['auc_ratio']:.2f}x" if s["auc_ratio"] is not None else "-"
            ci = f" [{s['ci'][0]:.2f}, {s['ci'][1]:.2f}]" if s["ci"] else ""
            med = f"{s['median']:.2f}x" if s["median"] is not None else "-"
            iqr = f" ({s['iqr'][0]:.2f}-{s['iqr'][1]:.2f})" if s["iqr"] else ""
            ep = f"{s['episodes_ratio']:.2f}x" if s["episodes_ratio"] is not None else "-"
            out.append(f"- {c}: AUC {auc}{ci}; per seed {med}{iqr}; episodes {ep} ({int(s['seeds_reaching'])} of "
                       f"{len(groups['passive'])} seeds reach passive's final count)")
    rates = {c: deaths_per_1000(rs) for c, rs in groups.items()}
    if any(v is not None for v in rates.values()):
        out.append("")
        out.append("Deaths per 1,000 env steps: " + "; ".join(f"{c} {v:.1f}" for c, v in rates.items()
                                                                  if v is not None))
    return "\n".join(out)


def summary_json(runs: list[LearnerRun]) -> str:
    """The same figures as JSON (for scripts)."""
    groups = by_config(runs)
    return json.dumps({c: {"seeds": [r.seed for r in rs],
                           "success": {f: {str(k): mean(success_at(r, f, k) for r in rs) for k in KS}
                                       for f in FAMILIES},
                           "curve": mean_curve(rs)} for c, rs in groups.items()}, indent=1)
