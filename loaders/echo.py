"""Echo views of learner runs (``csd.jsonl`` and ``echo.jsonl``): unlock curves per
configuration, the analogy graph (which task was induced from which exemplars, along which
axes, and whether it worked), and the descriptors themselves. Plain functions returning data
(the graph is drawn by ``dashboard.vega_charts.analogy_graph``), no Streamlit."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from loaders import chart_data
from loaders.run import Run
from mfm.echo.csd import AXES, CSD
from mfm.echo.library import CSD_FILE, CSDLibrary
from mfm.echo.measure import LearnerRun, read_run
from mfm.schema import Problem


def has_csd(run_dir: Path) -> bool:
    """Whether a run holds a CSD library."""
    return (Path(run_dir) / CSD_FILE).is_file()


def read_csds(run_dir: Path) -> tuple[dict[str, CSD], list[Problem]]:
    """The latest version of every descriptor of a run (later lines win), and damaged lines.

    Read without vectorising (the stored vectors are not needed to show a descriptor)."""
    lib, problems = CSDLibrary.open(Path(run_dir), vectorizer=None)
    return lib.latest, problems


def unlock_bands(runs: Iterable[LearnerRun]) -> chart_data.SeedBands:
    """Per configuration: distinct achievements unlocked after each Echo episode, the mean over
    seeds and its 95% interval (column ``step`` holds the Echo episode, 1-based)."""
    series = [(r.config, r.seed, pd.DataFrame({"step": range(1, len(r.curve()) + 1), "unlocked": r.curve()}))
              for r in runs]
    return chart_data.SeedBands(chart_data.seed_bands(series, "unlocked", points=200, hold=True),
                                "achievements unlocked", x_title="Echo episode")


def learner_runs(paths: Iterable[Path]) -> tuple[list[LearnerRun], list[tuple[Path, Problem]]]:
    """The learner runs among ``paths`` (those with an ``echo.jsonl``), with damaged lines."""
    out, problems = [], []
    for p in paths:
        run, probs = read_run(Path(p))
        problems += [(Path(p), q) for q in probs]
        if run is not None:
            out.append(run)
    return out, problems


def _axis_label(axes: dict) -> str:
    top = sorted(axes.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{a} {v:.2f}" for a, v in top if v > 0) or "no shared axis"


def analogy_edges(csds: dict[str, CSD]) -> pd.DataFrame:
    """One row per (exemplar -> induced task) link: the exemplar's role (representative, or
    the exemplar that shares the substituted value), the per-axis similarity it carried,
    and the induced task's status now."""
    rows = []
    for c in csds.values():
        for e in c.induced_from:
            if not isinstance(e, dict) or "id" not in e:
                continue
            axes = {a: float(v) for a, v in (e.get("axes") or {}).items() if a in AXES}
            rows.append({"source": str(e["id"]).removeprefix("task:"), "target": c.task, "role": e.get("role", ""),
                         "score": float(e.get("score", 0.0)), "axes": _axis_label(axes) if axes else "representative",
                         "status": c.status, "successes": c.successes, "failures": c.failures})
    return pd.DataFrame(rows, columns=["source", "target", "role", "score", "axes", "status", "successes",
                                       "failures"])


def analogy_layout(csds: dict[str, CSD], edges: pd.DataFrame) -> pd.DataFrame:
    """Where each task of the analogy graph goes: exemplars in column 0, each induced task one
    column right of its latest exemplar (columns ``task``, ``x``, ``y``, and ``status``, the
    task's status now: verified, failed or candidate)."""
    depth: dict[str, int] = {}
    sources = edges.groupby("target")["source"].apply(list).to_dict() if len(edges) else {}

    def level(task: str, seen: frozenset = frozenset()) -> int:
        if task in depth:
            return depth[task]
        srcs = [s for s in sources.get(task, []) if s != task and s not in seen]
        depth[task] = 0 if not srcs else 1 + max(level(s, seen | {task}) for s in srcs)
        return depth[task]

    names = list(dict.fromkeys(list(edges["source"]) + list(edges["target"]))) if len(edges) else []
    for n in names:
        level(n)
    rows = []
    for d in sorted(set(depth.values())):
        for i, n in enumerate(sorted(n for n in names if depth[n] == d)):
            c = csds.get(f"task:{n}")
            rows.append({"task": n, "x": float(d), "y": -float(i), "status": c.status if c else "verified"})
    return pd.DataFrame(rows, columns=["task", "x", "y", "status"])


def csd_table(csds: dict[str, CSD]) -> pd.DataFrame:
    """One row per descriptor: task, status, outcome counts, linked episodes, induced or learned."""
    rows = [{"id": c.id, "task": c.task, "status": c.status, "successes": c.successes, "failures": c.failures,
             "episodes": len(c.episodes), "induced": bool(c.induced_from)} for c in csds.values()]
    return pd.DataFrame(rows, columns=["id", "task", "status", "successes", "failures", "episodes", "induced"])


def csd_axes(c: CSD) -> dict[str, dict]:
    """The symbolic content of a descriptor: meta and the five axes (no vectors)."""
    return {"meta": c.meta, **{a: c.axis(a) for a in AXES}}


def attempts_table(run: LearnerRun) -> pd.DataFrame:
    """The Echo episodes of a run: goal, how it was tried, outcome, what it unlocked."""
    rows = [{"episode": a["episode"], "goal": a.get("goal"), "how": a.get("how"), "success": bool(a.get("success")),
             "new": ", ".join(a.get("new") or []), "unlocked": len(a.get("unlocked") or []),
             "steps": (a.get("last_step") or 0) - (a.get("first_step") or 0),
             "mfm_episodes": len(a.get("mfm_episodes") or []),
             "induced": json.dumps([i.get("induced") for i in a.get("induction") or [] if i.get("induced")])}
            for a in run.attempts]
    return pd.DataFrame(rows)


def learners(pool: Sequence[tuple[str, Run]]) -> tuple[chart_data.SeedBands, pd.DataFrame]:
    """What the Echo page shows of the learner runs ``pool`` (``(key, run)`` pairs): the unlock
    bands per configuration (:func:`unlock_bands`) and the damaged lines of their
    ``echo.jsonl``, one row each (``run`` folder, ``where`` file:line, ``problem``)."""
    runs, problems = learner_runs(r.path for _, r in pool)
    return unlock_bands(runs), pd.DataFrame(
        [{"run": str(d), "where": f"{q.file}:{q.line}", "problem": q.message} for d, q in problems],
        columns=["run", "where", "problem"])


def library(learner: Run) -> tuple[dict[str, CSD], pd.DataFrame, pd.DataFrame, list[str]]:
    """What the Echo page shows of one learner run: its descriptors (:func:`read_csds`), their
    analogy edges, its Echo episodes (:func:`attempts_table`; empty without ``echo.jsonl``) and
    its damaged CSD lines as ``file:line: message``."""
    csds, problems = read_csds(learner.path)
    run, _ = learner_runs([learner.path])
    attempts = attempts_table(run[0]) if run else pd.DataFrame()
    return csds, analogy_edges(csds), attempts, [f"{q.file}:{q.line}: {q.message}" for q in problems]
