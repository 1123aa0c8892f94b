"""Paired comparisons of methods over the same seeds (issue 44): each seed is one world, so two
methods run on it form a pair, and the tests below use the pairing.

- **Success**: the exact McNemar test, i.e. a two-sided binomial test with p = 1/2 on the
  discordant pairs (seeds where exactly one of the two succeeded); :func:`mcnemar_exact`.
- **Steps to success**: the mean per-seed difference (a failure counted as the run's step
  budget, a censored value that only makes a failing method look faster than it was), with a
  percentile interval from a paired bootstrap that resamples seeds; :func:`paired_bootstrap`.

A run succeeds when it reached every milestone of its task (``done_step``; on the diamond and
temporal-reach tasks, the diamond).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from loaders.run import open_runs
from loaders.paper_measures import ORDER, TRIALS, RunMeasures, label
from mfm.objectstore import is_url, join, read_bytes
from mfm.schema import SWEEPS, RunManifest

BOOTSTRAP_RESAMPLES = 10_000
"""Resamples of the paired bootstrap in the tables."""
BOOTSTRAP_SEED = 44
"""The seed of the bootstrap's generator (tables print the same interval every time)."""


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int, float]:
    """(seeds only ``a`` succeeded on, seeds only ``b`` succeeded on, two-sided exact p):
    twice the smaller binomial tail of the discordant count, at most 1 (1 with no discordant
    pair)."""
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    n = only_a + only_b
    if n == 0:
        return only_a, only_b, 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return only_a, only_b, min(1.0, 2 * tail)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of the per-pair differences ``a - b`` and its percentile interval at ``level``
    from ``resamples`` resamples of the pairs (with replacement; numpy's default generator
    seeded with ``seed``); nan bounds for fewer than two pairs."""
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if len(d) == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(d.mean())
    if len(d) < 2:
        return mean, float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    means = d[idx].mean(axis=1)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return mean, float(lo), float(hi)


def _base(label: str) -> str:
    return label.split(" ", 1)[0]


def _arm(label: str) -> str:
    """The arm or ablation a label names after its method (``no-budget``), or ``""``."""
    return label.split(" ", 1)[1] if " " in label else ""


def _pairs(labels: list[str]) -> list[tuple[str, str]]:
    """The pairs to compare: every two base methods (MFM first, then in the tables' order
    backwards); every two methods' runs of the same arm or ablation (``mfm no-budget`` against
    ``vista no-budget``: the methods compared again with that change made to all), in the same
    order; and each arm or ablation against its own method."""
    def rank(lab: str) -> int:
        return -ORDER.index(_base(lab)) if _base(lab) in ORDER else -len(ORDER)

    out = []
    for arm in sorted({_arm(lab) for lab in labels}):
        same = sorted((lab for lab in labels if _arm(lab) == arm), key=rank)
        out += [(x, y) for i, x in enumerate(same) for y in same[i + 1:]]
    return out + [(lab, _base(lab)) for lab in sorted(labels) if _arm(lab) and _base(lab) in labels]


def _pair_row(ra: Sequence[RunMeasures], rb: Sequence[RunMeasures]) -> dict[str, Any]:
    """The paired figures of runs ``ra[i]`` and ``rb[i]`` (one pair per seed): the pair
    count, successes of each, seeds only one succeeded on, the exact McNemar p, and the mean
    difference of steps (first minus second, a failure at its budget) with its 95%
    paired-bootstrap interval."""
    ok_a, ok_b = [r.done_step is not None for r in ra], [r.done_step is not None for r in rb]
    only_a, only_b, p = mcnemar_exact(ok_a, ok_b)
    steps = [[r.done_step if r.done_step is not None else r.budget for r in g] for g in (ra, rb)]
    mean, lo, hi = paired_bootstrap(*steps)
    return {"pairs": len(ra), "seeds": [r.seed for r in ra], "successes_a": sum(ok_a), "successes_b": sum(ok_b),
            "only_a": only_a, "only_b": only_b, "p_mcnemar": p, "steps_diff": mean, "steps_lo": lo, "steps_hi": hi}


def _by_task(ms: Sequence[RunMeasures]) -> dict[str, dict[tuple[str, int], RunMeasures]]:
    """Per task, the runs that ran to an end (:data:`TRIALS`) by (method, seed)."""
    out: dict[str, dict[tuple[str, int], RunMeasures]] = {}
    for r in ms:
        if r.status in TRIALS and r.seed is not None:
            out.setdefault(r.task, {})[(r.method, r.seed)] = r
    return out


def paired_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Per task, each pair of methods over the seeds both ran to an end (:data:`TRIALS`),
    with the figures of :func:`_pair_row`."""
    rows = []
    for task, runs in sorted(_by_task(ms).items()):
        labels = sorted({m for m, _ in runs})
        for x, y in _pairs(labels):
            seeds = sorted({s for m, s in runs if m == x} & {s for m, s in runs if m == y})
            if seeds:
                rows.append({"task": task, "a": x, "b": y,
                             **_pair_row([runs[(x, s)] for s in seeds], [runs[(y, s)] for s in seeds])})
    return pd.DataFrame(rows)


def between_table(here: Sequence[RunMeasures], there: Sequence[RunMeasures]) -> pd.DataFrame:
    """Each method against itself in another folder of runs (the same sweep with another
    ``--perception``, say): per task and method, over the seeds both folders ran to an end,
    the figures of :func:`_pair_row` with ``a`` the runs of ``here`` and ``b`` those of
    ``there``. Methods in the tables' order, then their arms."""
    a, b = _by_task(here), _by_task(there)

    def rank(lab: str) -> tuple[int, str]:
        return (ORDER.index(_base(lab)) if _base(lab) in ORDER else len(ORDER), lab)

    rows = []
    for task in sorted(a.keys() & b.keys()):
        for method in sorted({m for m, _ in a[task]} & {m for m, _ in b[task]}, key=rank):
            seeds = sorted({s for m, s in a[task] if m == method} & {s for m, s in b[task] if m == method})
            if seeds:
                rows.append({"task": task, "method": method,
                             **_pair_row([a[task][(method, s)] for s in seeds], [b[task][(method, s)] for s in seeds])})
    return pd.DataFrame(rows)


DEVELOPMENT = range(0, 30)
"""Seeds for developing and tuning (issue 44)."""
HELD_OUT = range(100, 2**31)
"""Seeds the tables are reported on, run once, never used for tuning: every seed from 100 on
(the blocks are 100-139, and 100-142 for ``reach-3000``, whose screen drops three worlds and
takes the next seeds; a later fresh block starts past the last one used)."""
MEMORY_COLUMNS = (("recent", "recent"), ("map", "grid_routing"), ("notes", "notes"), ("procedures", "procedures"),
                  ("consolidation", "consolidation"), ("search", "search"), ("frames", "frames"))
"""The affordance columns and the ``config.memory`` field (``run.json``) each is read from."""


def _yes(v: Any) -> str:
    return "yes" if v is True else "-" if v in (False, None) else str(v)


def manifests(root: Any, task: str | None = None) -> list[RunManifest]:
    """The manifests of the runs under ``root`` (of ``task`` if given)."""
    return [r.manifest for r in open_runs(root)
            if r.manifest is not None and (task is None or r.manifest.task == task)]


def affordance_table(mans: Sequence[RunManifest]) -> pd.DataFrame:
    """What each method's runs could use, from what their ``run.json`` recorded
    (``config.memory``, the notes budget, the perception): one row per method label, and one
    per distinct record if its runs differ."""
    rows: dict[tuple, dict[str, Any]] = {}
    for m in mans:
        mem = m.config.get("memory") or {}
        budget = "n/a" if not mem.get("notes") else "capped" if mem.get("budget", True) else "uncapped"
        cells = {"method": label(m), **{col: _yes(mem.get(key)) for col, key in MEMORY_COLUMNS},
                 "notes budget": budget, "perception": str(m.config.get("perception", "map"))}
        key = tuple(cells.values())
        rows.setdefault(key, {**cells, "runs": 0})["runs"] += 1
    order = {name: i for i, name in enumerate(ORDER)}
    out = sorted(rows.values(), key=lambda c: (order.get(str(c["method"]).split(" ")[0], len(order)), c["method"]))
    return pd.DataFrame(out)


def _ranges(seeds: Sequence[int]) -> str:
    """``0-9, 12, 100-139``."""
    out, run = [], []
    for s in sorted(set(seeds)):
        if run and s == run[-1] + 1:
            run.append(s)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [s]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def seed_class(seeds: Sequence[int]) -> str:
    """``held-out`` when every seed is in :data:`HELD_OUT`, ``development`` when every one is
    in :data:`DEVELOPMENT`, else ``mixed`` (which a reported table should not be)."""
    if seeds and all(s in HELD_OUT for s in seeds):
        return "held-out"
    if seeds and all(s in DEVELOPMENT for s in seeds):
        return "development"
    return "mixed"


def seed_table(mans: Sequence[RunManifest]) -> pd.DataFrame:
    """Per task and method: how many seeds, which, of which class (:func:`seed_class`), and
    the package versions that ran them."""
    groups: dict[tuple[str, str], list[RunManifest]] = {}
    for m in mans:
        groups.setdefault((m.task, label(m)), []).append(m)
    rows = []
    for (task, method), g in sorted(groups.items()):
        seeds = sorted(int(m.seed) for m in g if m.seed is not None)
        rows.append({"task": task, "method": method, "seeds": len(seeds), "which": _ranges(seeds),
                     "class": seed_class(seeds),
                     "mfm version": ", ".join(sorted({str(m.package_version) for m in g}))})
    return pd.DataFrame(rows)


SWEEPS_BYTES = 16 * 1024 * 1024
"""How much of a local ``sweeps.jsonl`` is read (thousands of sweeps' records)."""


def sweep_records(root: Any) -> list[dict[str, Any]]:
    """The records of the sweeps that wrote under ``root`` (a folder or an object storage
    prefix; ``mfm.schema.SWEEPS``), oldest first."""
    if is_url(str(root)):
        raw = read_bytes(join(str(root), SWEEPS)) or b""
    else:
        path = Path(str(root)) / SWEEPS
        raw = b""
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                raw = f.read(SWEEPS_BYTES)
    out = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _steps_cell(mean: float, lo: float, hi: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:+.0f}" + ("" if math.isnan(lo) else f" ({lo:+.0f} to {hi:+.0f})")


def _figure_cells(t: pd.DataFrame, a: str = "a", b: str = "b") -> dict[str, list[str]]:
    """The display cells of :func:`_pair_row`'s figures, ``a`` and ``b`` naming the two sides."""
    return {
        f"successes {a} / {b}": [f"{x} / {y}" for x, y in zip(t["successes_a"], t["successes_b"])],
        f"only {a} / only {b}": [f"{x} / {y}" for x, y in zip(t["only_a"], t["only_b"])],
        "McNemar exact p": [f"{p:.3g}" for p in t["p_mcnemar"]],
        f"steps {a} - {b}, mean (95% paired bootstrap)": [_steps_cell(*v) for v in zip(t["steps_diff"], t["steps_lo"],
                                                                                       t["steps_hi"])]}


def between_markdown(here: Sequence[RunMeasures], there: Sequence[RunMeasures]) -> pd.DataFrame:
    """:func:`between_table` as display cells (``here`` against ``there``)."""
    t = between_table(here, there)
    if t.empty:
        return t
    return pd.DataFrame({"task": t["task"], "method": t["method"], "paired seeds": t["pairs"],
                         **_figure_cells(t, "here", "there")})


def paired_markdown(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """:func:`paired_table` as display cells."""
    t = paired_table(ms)
    if t.empty:
        return t
    return pd.DataFrame({"task": t["task"], "a": t["a"], "b": t["b"], "paired seeds": t["pairs"], **_figure_cells(t)})


def sections(root: Any, ms: Sequence[RunMeasures], task: str | None = None) -> list[tuple[str, pd.DataFrame | str]]:
    """The blocks ``mfm results`` prints before the paper's tables: the affordances of the
    runs, their seeds (with the commits of the sweeps that ran them), and the paired tests."""
    mans = manifests(root, task)
    out: list[tuple[str, pd.DataFrame | str]] = [
        ("Affordances of these runs (from their run.json)", affordance_table(mans)),
        ("Seeds", seed_table(mans))]
    recs = sweep_records(root)
    if recs:
        commits = ", ".join(dict.fromkeys(f"{r.get('commit') or 'unknown'}{' (modified)' if r.get('dirty') else ''}"
                                          for r in recs))
        out.append(("Sweeps that wrote here", f"{len(recs)} sweep(s), from commit(s) {commits}"))
    out.append(("Paired comparisons over the same seeds (success: exact McNemar; steps: a failure at its budget)",
                paired_markdown(ms)))
    return out
