"""The paper's comparison measures over runs: milestones, retargeting after inspection, interaction cost,
and how far back retrieval reaches. Plain functions (no Streamlit), so that the dashboard,
``mfm results`` and notebooks compute the same numbers.

Definitions (the paper's appendix A.4, for our turn records):

- A turn **inspected a stored frame** if one of its calls is ``inspect`` and it looked at
  least at one frame (``args.frames`` > 0, or no count recorded).
- A turn **retargets** if it names a go_to/look_at target absent from the running plan
  (``in_plan`` false). Methods without a plan file have every target absent from it.
- For a retarget turn that inspected, each new target is **near** if it lies within
  ``radius`` (Euclidean, 8 cells) of the recorded position (the index row's x, y, where the
  episode ended) of one of the k episodes that turn inspected.
- The **null rate** is the chance of that with the inspected episodes replaced by k episodes
  drawn at random, without replacement, from the run's earlier episodes (those ended by the
  turn's first step): 1 - C(n-m, k) / C(n, k), where n are the earlier episodes and m of them
  lie within the radius of the target; averaged over the new targets. It is computed
  exactly, not by drawing.
"""
from __future__ import annotations

import logging
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from loaders.remote.mirror import run_identity
from mfm.boundary import read_json
from mfm.memory import AgentMemory, ContentIndex
from mfm.memory.consolidation import GUIDE
from mfm.schema import INHERITED, IndexRow, RunManifest, TurnRow

RADIUS = 8.0


def label(manifest: RunManifest) -> str:
    """The method as tables name it: the method, then its ablations (``mfm no-frames``)."""
    return " ".join([manifest.method, *manifest.ablations])


def inspected(turn: TurnRow) -> list[str]:
    """Episode ids whose stored frames the turn looked at, in call order, without repeats."""
    out = []
    for c in turn.calls:
        if c.get("tool") != "inspect":
            continue
        args = c.get("args") or {}
        if args.get("frames", 1) and args.get("episode"):
            out.append(str(args["episode"]))
    return list(dict.fromkeys(out))


def retargets(turn: TurnRow) -> list[dict]:
    """The turn's targets absent from the running plan."""
    return [t for t in turn.targets if not t.get("in_plan", False)]


def near_chance(n: int, m: int, k: int) -> float:
    """P(at least one of k episodes drawn without replacement from n lies near), m of n near."""
    if n <= 0 or k <= 0:
        return 0.0
    k = min(k, n)
    if n - m < k:
        return 1.0
    return 1.0 - math.comb(n - m, k) / math.comb(n, k)


@dataclass
class Retargeting:
    """Retarget counts of one or more runs (add them with ``+``)."""

    inspect_turns: int = 0
    inspect_retargets: int = 0
    other_turns: int = 0
    other_retargets: int = 0
    new_targets: int = 0
    near: int = 0
    null_sum: float = 0.0

    def __add__(self, o: "Retargeting") -> "Retargeting":
        return Retargeting(*(getattr(self, f) + getattr(o, f) for f in self.__dataclass_fields__))

    @property
    def inspect_rate(self) -> float:
        """Share of inspecting turns that retarget."""
        return self.inspect_retargets / self.inspect_turns if self.inspect_turns else float("nan")

    @property
    def other_rate(self) -> float:
        """Share of the other turns that retarget."""
        return self.other_retargets / self.other_turns if self.other_turns else float("nan")

    @property
    def null_rate(self) -> float:
        return self.null_sum / self.new_targets if self.new_targets else float("nan")


def position(r: IndexRow, three_d: bool = False) -> tuple[float, ...]:
    """Where an episode ended, for distances: (x, y) in 2-D worlds; in 3-D worlds (``z`` set,
    ``y`` the height) the horizontal plane (x, z), or (x, z, y) with ``three_d``."""
    if r.z is None:
        return (r.x, r.y)
    return (r.x, r.z, r.y) if three_d else (r.x, r.z)


def target_position(g: dict, three_d: bool = False) -> tuple[float, ...]:
    """A named target's position in the same plane (3-D targets keep their height apart)."""
    if three_d and isinstance(g.get("height"), (int, float)):
        return (float(g["x"]), float(g["y"]), float(g["height"]))
    return (float(g["x"]), float(g["y"]))


def _near_count(points: np.ndarray, at: tuple[float, ...], radius: float) -> int:
    """How many ``points`` (rows) lie within ``radius`` of ``at``, as ``math.dist(at, p) <=
    radius`` decides it: on squared distances, exact for the integer cells of a grid world."""
    if not len(points):
        return 0
    d2 = ((points - np.asarray(at, dtype=float)) ** 2).sum(axis=1)
    return int(np.count_nonzero(d2 <= radius * radius))


def retargeting(turns: Iterable[TurnRow], index: Sequence[IndexRow], radius: float = RADIUS,
                three_d: bool = False) -> Retargeting:
    """Retargeting after inspection vs without, and nearness of the new targets (see module doc).
    Distances are taken on the horizontal plane unless ``three_d``."""
    eps = sorted((r for r in index if r.kind == "episode" and r.x is not None and r.y is not None),
                 key=lambda r: r.last_step)
    by_id = {r.id: r for r in index}
    last = np.array([r.last_step for r in eps], dtype=np.int64)
    where = np.full((len(eps), 3), np.nan)
    for i, r in enumerate(eps):
        pos = position(r, three_d)
        where[i, :len(pos)] = pos
    out = Retargeting()
    for t in turns:
        looked = [by_id[e] for e in inspected(t) if e in by_id and by_id[e].x is not None]
        new = retargets(t)
        if not looked:
            out.other_turns += 1
            out.other_retargets += bool(new)
            continue
        out.inspect_turns += 1
        out.inspect_retargets += bool(new)
        n = int(np.searchsorted(last, t.first_step, side="right"))
        for g in new:
            tp = target_position(g, three_d)
            out.new_targets += 1
            out.near += any(math.dist(tp, position(r, three_d)[:len(tp)]) <= radius for r in looked)
            m = _near_count(where[:n, :len(tp)], tp, radius)
            out.null_sum += near_chance(n, m, len(looked))
    return out


def retrieval_ages(turns: Iterable[TurnRow], index: Sequence[IndexRow]) -> list[tuple[str, int]]:
    """(tool, age in env steps) of every episode a search returned or an inspection opened:
    the turn's first step minus the episode's last step."""
    by_id = {r.id: r for r in index}
    out = []
    for t in turns:
        for c in t.calls:
            tool = c.get("tool")
            if tool == "search":
                ids = (c.get("result") or {}).get("ids") or ()
            elif tool == "inspect":
                ids = [(c.get("args") or {}).get("episode")]
            else:
                continue
            for e in ids:
                r = by_id.get(str(e))
                if r is not None:
                    out.append((tool, t.first_step - r.last_step))
    return out


@dataclass
class RunMeasures:
    """Everything the comparison tables need from one run."""

    name: str
    task: str
    method: str
    seed: int
    milestones: int
    of: int
    steps: int
    budget: int
    status: str
    turns: int
    tool_calls: int
    calls_by_tool: dict[str, int]
    deaths: int
    diamond_step: int | None
    retarget: Retargeting
    ages: list[tuple[str, int]] = field(default_factory=list)
    recalls: list[dict] = field(default_factory=list)
    done_step: int | None = None
    """The step of the task's last milestone, if every one was reached."""
    inherited: dict | None = None
    """What the run inherited (``run.json``'s ``config.inherited``) and whether that memory
    held its target (:func:`target_in_memory`); None for a run that inherited nothing."""
    base: str = ""
    """The method without its ablations (``run.json``'s ``method``)."""
    ablations: tuple[str, ...] = ()
    """The ablations the run switched on (``mfm no-frames``: ``("no-frames",)``)."""
    identity: str = ""
    """Which run this is however it was named (``loaders.remote.mirror.run_identity``; empty: not
    known): the tables count each run once."""
    model_driven: bool = False
    """Whether a model chose the run's turns (``run.json``'s ``policy`` is ``llm:<model>``), so
    each turn was a model call; a scripted run's turns are decisions of its script."""

    @property
    def steps_per_turn(self) -> float:
        return self.steps / self.turns if self.turns else float("nan")


MEASURES = "measures.json"
"""A compact record's measures of its full run folder (``results/heldout/save_measures.py``)."""

_log = logging.getLogger(__name__)


def measures_doc(m: RunMeasures, source: str) -> dict[str, Any]:
    """``m`` as the JSON object of a :data:`MEASURES` file, naming the folder it was measured from."""
    return {"measured_from": source, **asdict(m)}


def kept_measures(run: Any) -> RunMeasures | None:
    """The measures a compact record keeps in :data:`MEASURES`, for a run folder without its
    ``turns.jsonl`` (a compact record holds ``run.json``, milestones and lives only; the turns
    stayed in the full folder it was measured from). None when the folder has its turns or no
    such file, or when the file is not a measures object (with a warning naming it)."""
    folder = getattr(run, "path", None)
    if not isinstance(folder, Path) or (folder / "turns.jsonl").exists() or not (folder / MEASURES).is_file():
        return None
    path = folder / MEASURES
    try:
        doc = read_json(folder, MEASURES)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        doc.pop("measured_from", None)
        doc.update(retarget=Retargeting(**doc["retarget"]), ages=[(str(a), int(n)) for a, n in doc["ages"]],
                   ablations=tuple(doc["ablations"]), identity=run_identity(folder))
        return RunMeasures(**doc)
    except (OSError, ValueError, TypeError, KeyError) as e:
        _log.warning("%s: not read (%s); the run is measured from its own files", path, e)
        return None


def measure(run: Any) -> RunMeasures:
    """The measures of a run opened with :func:`loaders.open_run` (a compact record's kept
    measures when it has them: :func:`kept_measures`)."""
    kept = kept_measures(run)
    if kept is not None:
        return kept
    m: RunManifest = run.manifest
    turns: list[TurnRow] = run.records("turns.jsonl")
    index: list[IndexRow] = run.records("index.jsonl")
    by_tool: dict[str, int] = {}
    for t in turns:
        for c in t.calls:
            by_tool[c.get("tool", "?")] = by_tool.get(c.get("tool", "?"), 0) + 1
    lives = run.records("lives.jsonl")
    deaths = sum(1 for e in lives if e.event == "death")
    recalls = recall_provenance(list((m.config.get("agent_summary") or {}).get("recalls") or []), turns)
    return RunMeasures(
        name=run.name, task=m.task, method=label(m), seed=m.seed, base=m.method, ablations=tuple(m.ablations),
        identity=run_identity(run.path) if isinstance(getattr(run, "path", None), Path) else "",
        milestones=sum(1 for n in m.milestone_order if n in m.milestones), of=len(m.milestone_order),
        steps=m.last_step, budget=m.step_budget, status=m.status, turns=len(turns),
        model_driven=str(m.policy or "").startswith("llm"),
        tool_calls=sum(by_tool.values()), calls_by_tool=by_tool, deaths=deaths,
        diamond_step=m.milestones.get("collect_diamond"), retarget=retargeting(turns, index),
        ages=retrieval_ages(turns, index),
        recalls=recall_lives(recalls, index, [e.step for e in lives if e.event == "respawn"]),
        done_step=m.milestones.get(m.milestone_order[-1]) if m.milestone_order and
        all(n in m.milestones for n in m.milestone_order) else None,
        inherited=({**m.config["inherited"], **target_in_memory(run.path, m.milestone_order)}
                   if isinstance(m.config.get("inherited"), dict) else None))


def recall_lives(recalls: list[dict], index: Sequence[IndexRow], respawns: Sequence[int]) -> list[dict]:
    """The recalls, each with ``life`` (the life it was made in: respawns at or before its
    step) and ``source_life`` (the life of the episode that showed the place; None for an
    inherited or unknown one): a recall with ``source_life < life`` recognised a place from
    an earlier life's frames or notes (the paper's §A.2 case)."""
    lives = {r.id: r.life for r in index}
    out = []
    for c in recalls:
        life = sum(1 for s in respawns if s <= int(c.get("step", 0)))
        out.append({**c, "life": life, "source_life": lives.get(str(c.get("source")))})
    return out


def target_in_memory(run_dir: Path, milestones: Sequence[str]) -> dict[str, Any]:
    """Whether the memory a run inherited (its ``inherited/`` copy) held the place of what its
    first ``collect_*`` milestone collects: ``seen``, the copy's frames showed it (its
    ``seen.jsonl``); ``noted``, the copy's last GUIDE.md names a cell of it."""
    item = next((n[len("collect_"):] for n in milestones if n.startswith("collect_")), None)
    tile = {"wood": "tree"}.get(item or "", item)
    copy = run_dir / INHERITED
    content, _ = ContentIndex.open(copy)
    guide = AgentMemory.open(copy)[0].read(GUIDE) or ""
    return {"target": tile, "seen": bool(tile and content.find(tile, limit=1)),
            "noted": bool(tile and f"[res:{tile}@" in guide)}


def recall_provenance(recalls: list[dict], turns: Sequence[TurnRow]) -> list[dict]:
    """The recalls of a run's summary, each with where its GUIDE.md line came from: the last
    write of that fact at or before the recall (``turns.jsonl``: a ``write`` or
    ``consolidate`` call that added or revised its key), its step (``written``) and reason
    (``written_by``: ``frames`` for a frame inspection, ``sight`` for direct sight, None if no
    write is on record); ``read_now`` when that write was in the recall's own turn."""
    writes: dict[str, list[tuple[int, str]]] = {}
    for t in turns:
        for call in t.calls:
            result = call.get("result") or {}
            if call.get("tool") in ("write", "consolidate"):
                for key in [*(result.get("added") or ()), *(result.get("revised") or ())]:
                    writes.setdefault(key, []).append((t.first_step, str((call.get("args") or {}).get("reason"))))
    out = []
    for c in recalls:
        key = f"res:{c.get('name')}@{c.get('x')},{c.get('y')}"
        before = [w for w in writes.get(key, ()) if w[0] <= int(c.get("step", -1))]
        step, reason = before[-1] if before else (None, None)
        by = None if reason is None else "frames" if "frame" in reason else "sight" if "sight" in reason else "other"
        out.append({**c, "written": step, "written_by": by, "read_now": step is not None and step == c.get("step")})
    return out


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    vals = list(values)
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def _seed_key(r: RunMeasures) -> int | str:
    """A run's key in per-seed columns: its seed, or its name when it records none."""
    return r.seed if r.seed is not None else r.name


def seed_label(key: int | str) -> str:
    """A per-seed column key as shown: ``s3``, or ``NAME (no seed)`` for a run without one."""
    return f"s{key}" if isinstance(key, int) else f"{key} (no seed)"


def milestone_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Milestones reached per method: mean, std, per-seed values, diamond steps."""
    rows = []
    for method, group in _by_method(ms):
        mean, std = mean_std([r.milestones for r in group])
        rows.append({"method": method, "seeds": len(group), "mean": mean, "std": std, "of": group[0].of,
                     "per_seed": {_seed_key(r): r.milestones for r in group},
                     "diamond_step": {_seed_key(r): r.diamond_step for r in group},
                     "steps": {_seed_key(r): r.steps for r in group}, "deaths": sum(r.deaths for r in group)})
    return pd.DataFrame(rows)


def retarget_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Retargeting pooled over the seeds of each method."""
    rows = []
    for method, group in _by_method(ms):
        r = sum((x.retarget for x in group), Retargeting())
        rows.append({"method": method, "seeds": len(group), "inspect_turns": r.inspect_turns,
                     "inspect_retarget_rate": r.inspect_rate,
                     "other_turns": r.other_turns, "other_retarget_rate": r.other_rate,
                     "new_targets": r.new_targets, "near": r.near,
                     "near_rate": r.near / r.new_targets if r.new_targets else float("nan"),
                     "null_rate": r.null_rate})
    return pd.DataFrame(rows)


def interaction_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Env steps per turn and model (turn) / tool calls per milestone, pooled over seeds."""
    rows = []
    for method, group in _by_method(ms):
        steps, turns = sum(r.steps for r in group), sum(r.turns for r in group)
        calls, got = sum(r.tool_calls for r in group), sum(r.milestones for r in group)
        tools: dict[str, int] = {}
        for r in group:
            for k, v in r.calls_by_tool.items():
                tools[k] = tools.get(k, 0) + v
        rows.append({"method": method, "steps": steps, "turns": turns, "steps_per_turn": steps / turns if turns else
                     float("nan"), "model_calls_per_milestone": turns / got if got else float("nan"),
                     "tool_calls": calls, "tool_calls_per_milestone": calls / got if got else float("nan"),
                     "calls_by_tool": dict(sorted(tools.items()))})
    return pd.DataFrame(rows)


def reach_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Age in env steps of retrieved episodes (searched or inspected), pooled over seeds."""
    rows = []
    for method, group in _by_method(ms):
        for tool in ("search", "inspect"):
            ages = np.array([a for r in group for t, a in r.ages if t == tool], dtype=np.int64)
            if not len(ages):
                continue
            rows.append({"method": method, "tool": tool, "episodes": len(ages), "median": float(np.median(ages)),
                         "p90": float(np.percentile(ages, 90)), "max": int(ages.max()),
                         "over_1000": float((ages > 1000).mean())})
    return pd.DataFrame(rows)


Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95% interval."""


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default; its ends are exactly 0 and
    1 for no and all successes); (nan, nan) for n = 0."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    return lo, 1.0 if successes == n else min(1.0, centre + half)


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom: exact for 1 and 2,
    else the Cornish-Fisher expansion to the fourth order (within 0.004 at 3, 1e-6 from 10)."""
    if df == 1:
        return math.tan(math.pi * 0.475)
    if df == 2:
        return 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))
    z = Z95
    terms = ((z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
             (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
             (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(g / df ** (k + 1) for k, g in enumerate(terms))


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its 95% Student-t interval (nan bounds for fewer than two values)."""
    vals = list(values)
    if not vals:
        return float("nan"), float("nan"), float("nan")
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return mean, float("nan"), float("nan")
    half = t975(len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))
    return mean, mean - half, mean + half


def winning_recall(r: RunMeasures) -> dict | None:
    """The recall that sent the player to the diamond it collected: the last one at or before
    the diamond's step (None: the run got no diamond, or got it without memory, by sight)."""
    if r.diamond_step is None:
        return None
    before = [c for c in r.recalls if c.get("name") == "diamond" and int(c.get("step", 0)) <= r.diamond_step]
    return before[-1] if before else None


def delay(task: str) -> int | None:
    """The delay D of a temporal-reach task named ``reach-D`` or ``reach-kit-D`` (None for
    other tasks)."""
    head, _, tail = task.partition("-")
    tail = tail.removeprefix("kit-")
    return int(tail) if head == "reach" and tail.isdigit() else None


TRIALS = ("finished", "interrupted")
"""Run statuses that count as a trial in the reach table (a running or crashed run does not)."""


def _success_row(group: Sequence[RunMeasures]) -> dict[str, Any]:
    """One method's runs of one task whose goal is the diamond: diamonds got out of n with a
    95% Wilson interval, steps to the diamond (mean, 95% t interval, over the successes), and
    the recall that led to each success (see :func:`reach_success_table`)."""
    got = [r for r in group if r.diamond_step is not None]
    lo, hi = wilson(len(got), len(group))
    mean, mlo, mhi = mean_interval([r.diamond_step for r in got])
    wins = [winning_recall(r) for r in got]
    ages = [int(w["age"]) for w in wins if w is not None and w.get("age") is not None]
    return {"seeds": len(group), "successes": len(got), "rate": len(got) / len(group), "rate_lo": lo, "rate_hi": hi,
            "steps_mean": mean, "steps_lo": mlo, "steps_hi": mhi,
            "recall_ages": ages,
            "kept": [int(w["step"]) - int(w["written"]) for w in wins if w and w.get("written") is not None],
            "by_frames": sum(1 for w in wins if w and w.get("via") == "frames"),
            "by_log": sum(1 for w in wins if w and w.get("via") == "log"),
            "by_notes": sum(1 for w in wins if w and w.get("via") not in ("frames", "log")),
            "by_sight": sum(1 for w in wins if w is None),
            "earlier_life": sum(1 for w in wins if w and w.get("source_life") is not None
                                and w["source_life"] < w["life"]),
            "over_1000": sum(a > 1000 for a in ages) / len(ages) if ages else float("nan")}


def reach_success_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Temporal reach, per task (its delay D, then ``reach-kit-D`` after ``reach-D``) and
    method, over the runs that ended (:data:`TRIALS`):
    diamonds got out of n seeds with a 95% Wilson interval, steps to the diamond (mean, 95% t
    interval, over the successes), and the recall that led to each success: the age of the
    episode that showed the place, how long its GUIDE.md line had been kept when it was used
    (``kept``), how the recall learned the place (its ``via``): from stored frames
    (``by_frames``), from the text log's ``[SEEN]`` line (``by_log``, PRO-LONG) or from a
    note written when it was seen (``by_notes``); ``by_sight``: got with no recall, the
    diamond in view; ``earlier_life``: successes whose recall named an episode of an earlier life."""
    ended = [r for r in ms if r.status in TRIALS and delay(r.task) is not None]
    return pd.DataFrame([{"task": task, "delay": delay(task), "method": method, **_success_row(group)}
                         for task in sorted({r.task for r in ended}, key=lambda t: (delay(t), t))
                         for method, group in _by_method([r for r in ended if r.task == task])])


DIAMOND_TASKS = ("diamond",)
"""Tasks with no delay whose success is the diamond collected within the budget."""


def diamond_success_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Success at the tasks of :data:`DIAMOND_TASKS`, per task and method, over the runs that
    ended: the columns of :func:`reach_success_table` without the delay."""
    ended = [r for r in ms if r.status in TRIALS and r.task in DIAMOND_TASKS]
    return pd.DataFrame([{"task": task, "method": method, **_success_row(group)}
                         for task in sorted({r.task for r in ended})
                         for method, group in _by_method([r for r in ended if r.task == task])])


def inherit_table(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """New games in a known world (the ``ore-*`` tasks, paper §5.2), per task, method and
    memory (``none``, or ``inherited``), over the runs that ended: the task done out of n
    with a 95% Wilson interval, the median steps of the successes and each seed's steps (None:
    not done within the budget; a run stops when done, so success within a smaller budget B
    is steps <= B); for inherited memory,
    how many of the earlier runs' memories held the target's place (``held``: seen in their
    frames or named in their notes) and the successes with and without it."""
    rows = []
    ended = [r for r in ms if r.status in TRIALS and (r.inherited is not None or r.task.startswith("ore-"))]
    for task in sorted({r.task for r in ended}):
        for method, group in _by_method([r for r in ended if r.task == task]):
            for memory in ("none", "inherited"):
                runs = [r for r in group if (r.inherited is not None) == (memory == "inherited")]
                if not runs:
                    continue
                done = [r for r in runs if r.done_step is not None]
                held = [r for r in runs if r.inherited and (r.inherited.get("seen") or r.inherited.get("noted"))]
                lo, hi = wilson(len(done), len(runs))
                rows.append({"task": task, "method": method, "memory": memory, "runs": len(runs),
                             "successes": len(done), "rate": len(done) / len(runs), "rate_lo": lo, "rate_hi": hi,
                             "steps_median": float(np.median([r.done_step for r in done])) if done else float("nan"),
                             "held": len(held) if memory == "inherited" else None,
                             "held_successes": sum(r.done_step is not None for r in held),
                             "per_seed": {_seed_key(r): r.done_step for r in runs},
                             "from": sorted({str(r.inherited.get("task")) for r in runs if r.inherited})})
    return pd.DataFrame(rows)


ORDER = ("direct", "pro-long", "vista", "mfm")


def _by_method(ms: Sequence[RunMeasures]) -> list[tuple[str, list[RunMeasures]]]:
    """The measures per method, in the paper's order, each run once (by ``identity``)."""
    groups: dict[str, list[RunMeasures]] = {}
    seen: set[str] = set()
    for r in ms:
        if r.identity and r.identity in seen:
            continue
        seen.add(r.identity)
        groups.setdefault(r.method, []).append(r)

    def key(name: str) -> tuple[int, str]:
        return (ORDER.index(name) if name in ORDER else len(ORDER), name)

    return [(k, sorted(groups[k], key=lambda r: (r.seed is None, r.seed or 0, r.name)))
            for k in sorted(groups, key=key)]
