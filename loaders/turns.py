"""One decision of the policy in full, for the Turns page: what the agent had when the turn
began (its frame, in the turn's own life), its state block and decision, the plan before and
after, every tool call by kind (searches with the episodes they returned, inspections with the
frames looked at and the tiles decoded, memory writes with their diffs, consolidations), the
targets it named, the episodes it produced and, for a model-driven policy, its requests.
Plain functions over a run, no Streamlit.

Life-aware throughout: a step can belong to two lives (the step of a death is also the
step of the respawn), so positions and frames are picked by step *and* life.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from loaders import agent_calls
from loaders.frame_compare import tile_of_cell
from loaders.inherited import is_inherited, locate, origin
from loaders.lookups import episode_holding, position_at
from loaders.paper_measures import RADIUS, inspected
from loaders.provenance import held_writes
from loaders.run import Run
from mfm.memory.agent_memory import replay
from mfm.schema import IndexRow, MemoryWrite, TurnRow

FAILED_OUTCOMES = ("failed", "interrupted")
NAV_KINDS = ("retarget", "failed", "death")
"""The kinds of turn one can step through: those that name a target outside their plan, those
that produced a failed or interrupted episode, those whose episode ended in a death."""


@dataclass(frozen=True)
class StartFrame:
    """A frame of the turn's start: ``step`` (or ``episode``: its end observation) and what it is.
    ``exact`` is False when the turn's own start frame is not stored and this is the nearest
    frame of the same life."""

    label: str
    life: int
    step: int | None = None
    episode: str | None = None
    exact: bool = True


@dataclass(frozen=True)
class Find:
    """A tile decoded during an inspection: what, at which world cell, in which frame, and the
    tile (col, row) that shows it in that frame (None: outside the view or position unknown)."""

    name: str
    x: int
    y: int
    step: int | None
    tile: tuple[int, int] | None


@dataclass(frozen=True)
class InspectedFrame:
    """One frame an inspection decoded: its step, the player's cell then, and the finds in it."""

    step: int
    position: tuple[int, int] | None
    finds: tuple[Find, ...]


@dataclass(frozen=True)
class WriteView:
    """One logged write to ``mine/`` with the text before and after it."""

    seq: int
    path: str
    op: str
    author: str
    reason: str
    step: int
    sources: tuple[str, ...]
    diff: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    holds_from: int | None = None
    before: str = ""
    after: str = ""

    @property
    def as_of(self) -> int:
        """The step from which the write holds (:func:`loaders.provenance.holds_from`: a plan
        update holds from the first step of the turn that decided it), else its own step."""
        return self.step if self.holds_from is None else self.holds_from


@dataclass(frozen=True)
class CallView:
    """One tool call of the turn, with what its kind needs to be shown.

    search: ``query`` (its arguments) and ``ids`` (the episodes returned); inspect:
    ``episode``, ``frames`` (the decoded frames and their finds) and ``finds``; ``origin``:
    the run the inherited episodes among them came from (its steps, positions and frames are
    that run's, read from its copy: :func:`loaders.lookups.frame_holder`); write and
    consolidate: ``writes`` (the logged writes it made) and, for consolidate, ``added``,
    ``revised``, ``removed``; model: ``request`` (see :func:`loaders.agent_calls.model_calls`)."""

    index: int
    tool: str
    args: dict
    result: dict
    query: dict = field(default_factory=dict)
    ids: tuple[str, ...] = ()
    episode: str | None = None
    origin: str | None = None
    frames: tuple[InspectedFrame, ...] = ()
    finds: tuple[Find, ...] = ()
    writes: tuple[WriteView, ...] = ()
    added: tuple[str, ...] = ()
    revised: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    request: dict | None = None

    @property
    def inherited_ids(self) -> tuple[str, ...]:
        """The inherited episodes among those a search returned (of the run :attr:`origin`)."""
        return tuple(e for e in self.ids if is_inherited(e))

    @property
    def episode_label(self) -> str:
        """The inspected episode as shown: an inherited one names the run it came from."""
        ep = self.episode or "?"
        return f"{ep} (from run {self.origin})" if self.origin else ep


@dataclass(frozen=True)
class TargetView:
    """A go_to/look_at target: ``in_plan`` as recorded; ``new`` when absent from the plan
    (a retarget); ``near``: the nearest inspected episode whose recorded position lies within
    ``RADIUS`` cells (None: none), ``distance`` to the nearest inspected episode; ``seen_in``:
    the inspected episodes whose decoded tiles include the target cell. Episodes are named as
    shown (an inherited one with the run it came from, :attr:`CallView.episode_label`)."""

    kind: str
    x: float
    y: float
    in_plan: bool
    new: bool
    near: str | None
    distance: float | None
    seen_in: tuple[str, ...]


@dataclass(frozen=True)
class EpisodeView:
    """An episode the turn produced, with its outcome and whether it ended in a death."""

    id: str
    action_kind: str | None
    first_step: int
    last_step: int
    outcome: str | None
    summary: str
    tags: tuple[str, ...]
    died: str | None


@dataclass(frozen=True)
class PlanLine:
    """A line of the plan diff: ``-`` dropped, ``+`` added, `` `` kept."""

    sign: str
    x: Any
    y: Any
    label: str


@dataclass(frozen=True)
class TurnView:
    """Everything about one turn (see the module docstring)."""

    turn: int
    life: int
    first_step: int
    last_step: int
    policy: str
    position: tuple[float, float] | None
    start_frames: tuple[StartFrame, ...]
    state_block: tuple[str, ...]
    decision: str | None
    plan: tuple[PlanLine, ...]
    calls: tuple[CallView, ...]
    targets: tuple[TargetView, ...]
    episodes: tuple[EpisodeView, ...]
    model: pd.DataFrame
    usage: dict | None
    latency_s: float | None
    cost_usd: float | None
    tokens: tuple[float | None, float | None]
    other_writes: tuple[WriteView, ...] = ()

    @property
    def retargets(self) -> bool:
        return any(t.new for t in self.targets)


def turns_by_number(run: Run) -> dict[int, TurnRow]:
    """Each turn record by its number (the first record of a number written twice), built once
    per run version (``Run.derived``): the Turns page looks turns up on every rerun."""
    def build(r: Run) -> dict[int, TurnRow]:
        out: dict[int, TurnRow] = {}
        for t in r.records("turns.jsonl"):
            out.setdefault(t.turn, t)
        return out

    return run.derived("turns-by-number", build)


def _turn(run: Run, turn: int) -> TurnRow | None:
    return turns_by_number(run).get(turn)


def turn_numbers(run: Run) -> list[int]:
    """Every turn number of the run, in order."""
    return sorted({t.turn for t in run.records("turns.jsonl")})


def frame_position(run: Run, step: int | None = None, episode: str | None = None
                   ) -> tuple[tuple[float, float], int] | None:
    """The player's cell and life in a frame: the frame of env ``step`` (in the life of the
    episode that owns it) or the end observation of ``episode``; None when not recorded."""
    if episode is not None:
        ref = run.episode(episode)
        return ((float(ref.x), float(ref.y)), ref.life) if ref and ref.x is not None and ref.y is not None else None
    if step is None:
        return None
    ref = episode_holding(run, step)
    if ref is None:
        ref = next((r for r in run.records("index.jsonl") if r.last_step == step), None)
    if ref is None:
        return None
    pos = position_at(run, step, ref.life)
    return (pos, ref.life) if pos else None


def start_frames(run: Run, step: int, life: int) -> tuple[StartFrame, ...]:
    """The frame the agent had at env ``step`` in ``life``.

    The frame of a step is owned by one episode, of one life; when that is another life (the
    step of a death is the respawn step of the next life) or no frame is stored, the life's
    start observation is used (its initial episode), or else the first frame of the life after
    ``step``, marked as not exact."""
    ref = episode_holding(run, step)
    if ref is not None and ref.life == life:
        return (StartFrame(f"step {step} · life {life}", life, step=step),)
    for r in run.records("index.jsonl"):
        if r.kind == "initial" and r.life == life and r.last_step == step:
            return (StartFrame(f"start of life {life} (step {step})", life, episode=r.id),)
    why = (f"the frame of step {step} belongs to life {ref.life}" if ref is not None
           else f"no frame of step {step} is stored")
    st = run.steps()
    later = st[(st["life"] == life) & (st["step"] > step)] if len(st) else st
    if len(later):
        s = int(later["step"].min())
        if episode_holding(run, s) is not None:
            return (StartFrame(f"step {s} · life {life}: first frame of life {life} after step {step} "
                               f"({why})", life, step=s, exact=False),)
    return ()


def _state_block(note: str | None) -> tuple[tuple[str, ...], str | None]:
    lines = tuple(line for line in (note or "").splitlines() if line.strip())
    decision = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("decision:")), None)
    return tuple(line for line in lines if not line.startswith("decision:")), decision


def plan_diff(before: tuple[dict, ...], after: tuple[dict, ...]) -> tuple[PlanLine, ...]:
    """The plan before → after as a line diff of ``(x, y) label`` entries."""
    def key(p: dict) -> str:
        return f"({p.get('x')}, {p.get('y')}) {p.get('label', '')}"

    a, b = [key(p) for p in before], [key(p) for p in after]
    out: list[PlanLine] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out += [PlanLine(" ", p.get("x"), p.get("y"), str(p.get("label", ""))) for p in before[i1:i2]]
            continue
        out += [PlanLine("-", p.get("x"), p.get("y"), str(p.get("label", ""))) for p in before[i1:i2]]
        out += [PlanLine("+", p.get("x"), p.get("y"), str(p.get("label", ""))) for p in after[j1:j2]]
    return tuple(out)


def write_view(w: MemoryWrite, before: str | None, after: str | None, holds_from: int | None = None) -> WriteView:
    """A logged write with the unified diff of its file; ``holds_from``: the step from which
    it holds, when not its own."""
    a = (before or "").splitlines(keepends=True)
    b = (after or "").splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(a, b, fromfile=f"{w.path} before write {w.seq}",
                                        tofile=f"{w.path} after write {w.seq}"))
    added, removed = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            removed += [x.rstrip("\n") for x in a[i1:i2]]
            added += [x.rstrip("\n") for x in b[j1:j2]]
    return WriteView(w.seq, w.path, w.op, w.author, w.reason, w.step, tuple(w.sources), diff, tuple(added),
                     tuple(removed), holds_from, before or "", after or "")


def turn_writes(run: Run, turn: int) -> list[WriteView]:
    """The logged writes of one turn with their diffs and the step each holds from, in log order."""
    held = {w.seq: w.step for w in held_writes(run)}
    out = []
    for v in replay(run.records("memory_writes.jsonl")):
        if v.write.turn == turn:
            out.append(write_view(v.write, v.before, v.after, held.get(v.write.seq)))
    return out


DIFF_COLUMNS = ["change", "old", "new", "text"]
"""The columns of :func:`line_diff`: ``change`` (``added``, ``removed``, ``unchanged``, or
``…`` for a run of unchanged lines left out), the line's number in the old and in the new
text (missing where it has none), and the line itself, as written."""


def line_diff(old: str, new: str, context: int = 3) -> pd.DataFrame:
    """The lines that differ between two texts, each with ``context`` unchanged lines around
    it, one row per line with its kind of change named in words (:data:`DIFF_COLUMNS`).

    A unified diff marks an unchanged line with a leading space, so an unchanged Markdown
    bullet (``- item``) reads `` - item``, like a deletion; here the kind is a column of its
    own and the text is never prefixed."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[tuple[str, int | None, int | None, str]] = []
    done = 0
    for group in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_grouped_opcodes(context):
        if group[0][1] > done:
            rows.append(("…", None, None, f"{group[0][1] - done} unchanged line(s) left out"))
        done = group[-1][2]
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                rows += [("unchanged", i + 1, j1 + i - i1 + 1, a[i]) for i in range(i1, i2)]
                continue
            rows += [("removed", i + 1, None, a[i]) for i in range(i1, i2)]
            rows += [("added", None, j + 1, b[j]) for j in range(j1, j2)]
    if rows and done < len(a):
        rows.append(("…", None, None, f"{len(a) - done} unchanged line(s) left out"))
    df = pd.DataFrame(rows, columns=DIFF_COLUMNS)
    for c in ("old", "new"):
        df[c] = df[c].astype("Int64")
    return df


DIFF_COLORS = {"added": "#dff5e1", "removed": "#fbe0e0", "…": "#f0f0f0"}
"""Row backgrounds of a :func:`line_diff` table by kind of change (unchanged rows: none)."""
DIFF_CONFIG = {"old": "old line", "new": "new line", "text": "line"}
"""Column headers of a :func:`line_diff` table as shown."""


def styled_diff(rows: pd.DataFrame) -> Any:
    """A :func:`line_diff` table with each row's background by its kind of change
    (:data:`DIFF_COLORS`), as a pandas Styler."""
    def paint(row: pd.Series) -> list[str]:
        color = DIFF_COLORS.get(str(row["change"]))
        return [f"background-color: {color}" if color else ""] * len(row)

    return rows.style.apply(paint, axis=1)


def turn_steps(first: int, last: int) -> str:
    """A turn's env steps in words, as its frame scrubber counts them: it decides at step
    ``first`` (the frame it had) and acts at steps ``first + 1 .. last``."""
    if last <= first:
        return f"no env step (decided at step {first})"
    return f"steps {first + 1}–{last} (decided at step {first})"


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _finds(run: Run, ref: IndexRow | None, found: list) -> tuple[tuple[Find, ...], tuple[InspectedFrame, ...]]:
    finds = []
    for f in found:
        if not isinstance(f, dict) or _int(f.get("x")) is None or _int(f.get("y")) is None:
            continue
        s = _int(f.get("step"))
        pos = position_at(run, s, ref.life) if s is not None and ref is not None else None
        tile = tile_of_cell((int(f["x"]), int(f["y"])), (int(pos[0]), int(pos[1]))) if pos else None
        finds.append(Find(str(f.get("name", "?")), int(f["x"]), int(f["y"]), s, tile))
    frames = []
    for s in sorted({f.step for f in finds if f.step is not None}):
        pos = position_at(run, s, ref.life) if ref is not None else None
        frames.append(InspectedFrame(s, (int(pos[0]), int(pos[1])) if pos else None,
                                     tuple(f for f in finds if f.step == s)))
    return tuple(finds), tuple(frames)


def inspected_steps(ref: IndexRow, frames: int | None, stride: int | None) -> list[int]:
    """The steps an inspection decoded: every ``stride``-th stored frame from the last,
    ``frames`` of them (the agent's ``MemoryTools.inspect``)."""
    if not ref.frames:
        return []
    stride = max(1, stride or 1)
    idx = list(range(ref.frames - 1, -1, -stride))
    if frames is not None:
        idx = idx[:max(0, frames)]
    return [ref.first_step + 1 + i for i in idx]


def _calls(run: Run, t: TurnRow, writes: list[WriteView]) -> tuple[tuple[CallView, ...], tuple[WriteView, ...]]:
    requests = agent_calls.model_calls(run.turns(), t.turn)
    reqs = iter(requests.to_dict("records"))
    claimed: set[int] = set()
    by_seq = {w.seq: w for w in writes}
    plans: list[list[WriteView]] = []
    for c in t.calls:
        res = c.get("result") if isinstance(c.get("result"), dict) else {}
        args = c.get("args") if isinstance(c.get("args"), dict) else {}
        mine: list[WriteView] = []
        if c.get("tool") == "write":
            seq = _int(res.get("seq"))
            if seq in by_seq and seq not in claimed:
                mine = [by_seq[seq]]
            else:
                mine = [w for w in writes if w.path == args.get("path") and w.seq not in claimed][:1]
            claimed |= {w.seq for w in mine}
        plans.append(mine)
    out = []
    for i, (c, mine) in enumerate(zip(t.calls, plans)):
        tool = str(c.get("tool"))
        res = c.get("result") if isinstance(c.get("result"), dict) else {}
        args = c.get("args") if isinstance(c.get("args"), dict) else {}
        kw: dict[str, Any] = {}
        if tool == "search":
            ids = tuple(str(x) for x in res.get("ids") or res.get("episodes") or res.get("results") or []
                        if isinstance(x, str))
            kw = {"query": args, "ids": ids, "origin": origin(run) if any(map(is_inherited, ids)) else None}
        elif tool == "inspect":
            ep = args.get("episode") or args.get("id")
            where = locate(run, str(ep)) if ep else None
            ref = where.row if where is not None else None
            holder = where.holder if where is not None and where.holder is not None else run
            finds, frames = _finds(holder, ref, list(res.get("found") or []))
            looked = inspected_steps(ref, _int(args.get("frames")), _int(args.get("stride"))) if ref else []
            seen = {f.step for f in frames}
            pos_of = {s: position_at(holder, s, ref.life) for s in looked if s not in seen} if ref else {}
            frames = tuple(sorted(frames + tuple(
                InspectedFrame(s, (int(p[0]), int(p[1])) if p else None, ()) for s, p in pos_of.items()),
                key=lambda f: f.step))
            kw = {"episode": str(ep) if ep else None, "origin": where.origin if where is not None else None,
                  "finds": finds, "frames": frames}
        elif tool in ("consolidate", "write"):
            if tool == "consolidate":
                mine = [w for w in writes if w.seq not in claimed]
                claimed |= {w.seq for w in mine}
            kw = {k: tuple(map(str, res.get(k) or ())) for k in ("added", "revised", "removed")}
        elif tool == "model":
            kw = {"request": next(reqs, None)}
        out.append(CallView(i, tool, args, res, writes=tuple(mine), **kw))
    return tuple(out), tuple(w for w in writes if w.seq not in claimed)


def _targets(run: Run, t: TurnRow, calls: tuple[CallView, ...], radius: float) -> tuple[TargetView, ...]:
    """The turn's targets against the inspected episodes' recorded positions (an inherited
    episode's from the copy of its run, named with that run: the same world)."""
    looked = [locate(run, e) for e in inspected(t)]
    looked = [(e.label, e.row) for e in looked if e.row is not None and e.row.x is not None and e.row.y is not None]
    out = []
    for g in t.targets:
        try:
            x, y = float(g["x"]), float(g["y"])
        except (KeyError, TypeError, ValueError):
            continue
        dists = sorted((math.hypot(x - float(r.x), y - float(r.y)), label) for label, r in looked)
        seen = tuple(dict.fromkeys(c.episode_label for c in calls if c.tool == "inspect" and c.episode and any(
            (f.x, f.y) == (x, y) for f in c.finds)))
        near = dists[0][1] if dists and dists[0][0] <= radius else None
        out.append(TargetView(str(g.get("kind", "?")), x, y, bool(g.get("in_plan", False)),
                              not g.get("in_plan", False), near, round(dists[0][0], 1) if dists else None, seen))
    return tuple(out)


def _deaths(run: Run) -> dict[str, str]:
    return {str(e.episode): str(e.cause or "unknown") for e in run.records("lives.jsonl")
            if e.event == "death" and e.episode}


def _episodes(run: Run, t: TurnRow) -> tuple[EpisodeView, ...]:
    deaths = _deaths(run)
    out = []
    for e in t.episodes:
        r = run.episode(e)
        if r is None:
            continue
        died = deaths.get(r.id) or ("unknown" if "died" in r.tags else None)
        out.append(EpisodeView(r.id, r.action_kind, r.first_step, r.last_step, r.outcome, r.summary, tuple(r.tags),
                               died))
    return tuple(out)


def turn_view(run: Run, turn: int, radius: float = RADIUS) -> TurnView | None:
    """The view of turn number ``turn``, or None if the run has no such turn."""
    t = _turn(run, turn)
    if t is None:
        return None
    state, decision = _state_block(t.note)
    calls, other = _calls(run, t, turn_writes(run, turn))
    model = agent_calls.model_calls(run.turns(), turn)
    usage = dict(t.usage) if isinstance(t.usage, dict) else None

    def total(col: str) -> float | None:
        return float(model[col].sum()) if len(model) and model[col].notna().any() else None

    tokens = (total("prompt_tokens"), total("completion_tokens"))
    if usage and tokens == (None, None):
        tokens = (_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")))
    cost = total("cost_usd")
    if cost is None and usage and isinstance(usage.get("cost_usd"), (int, float)):
        cost = float(usage["cost_usd"])
    return TurnView(t.turn, t.life, t.first_step, t.last_step, t.policy, position_at(run, t.first_step, t.life),
                    start_frames(run, t.first_step, t.life), state, decision,
                    plan_diff(tuple(t.plan_before), tuple(t.plan_after)), calls, _targets(run, t, calls, radius),
                    _episodes(run, t), model, usage, t.latency_s if t.latency_s is not None else total("latency_s"),
                    cost, tokens, other)


def find_caption(finds: tuple[Find, ...], targets: set[tuple[float, float]], per_name: int = 3,
                 tiles: bool = True) -> str:
    """The finds of one frame in words: finds on a target cell first (``[target]``), then per
    name each find (with its tile when ``tiles``), or a count when a name has more than
    ``per_name``."""
    def one(f: Find) -> str:
        return f"{f.name} ({f.x}, {f.y})" + (f" at tile {f.tile}" if f.tile and tiles else "")

    on_target = [f for f in finds if (f.x, f.y) in targets]
    parts = [one(f) + " [target]" for f in on_target]
    rest = [f for f in finds if f not in on_target]
    for name in dict.fromkeys(f.name for f in rest):
        group = [f for f in rest if f.name == name]
        parts += [one(f) for f in group] if len(group) <= per_name else [f"{name} ×{len(group)}"]
    return "; ".join(parts)


def turn_kinds(run: Run) -> pd.DataFrame:
    """One row per turn: ``turn, life, first_step, retarget, failed, death`` (see :data:`NAV_KINDS`)."""
    deaths = _deaths(run)
    rows = []
    for t in sorted(run.records("turns.jsonl"), key=lambda x: x.turn):
        eps = [run.episode(e) for e in t.episodes]
        eps = [r for r in eps if r is not None]
        rows.append((t.turn, t.life, t.first_step, any(not g.get("in_plan", False) for g in t.targets),
                     any(r.outcome in FAILED_OUTCOMES for r in eps),
                     any(r.id in deaths or "died" in r.tags for r in eps)))
    return pd.DataFrame(rows, columns=["turn", "life", "first_step", "retarget", "failed", "death"])


def targets_table(targets: tuple[TargetView, ...]) -> pd.DataFrame:
    """A turn's targets as the Turns page lists them, one row each, every cell as text (a
    static table: a turn names a few targets)."""
    return pd.DataFrame([{"kind": t.kind, "x": f"{t.x:g}", "y": f"{t.y:g}", "in plan": "yes" if t.in_plan else "no",
                          "new (retarget)": "yes" if t.new else "no", "near an inspected episode": t.near or "",
                          "nearest (cells)": "" if t.distance is None else f"{t.distance:g}",
                          "seen in inspections of": ", ".join(t.seen_in)} for t in targets],
                        columns=["kind", "x", "y", "in plan", "new (retarget)", "near an inspected episode",
                                 "nearest (cells)", "seen in inspections of"])


def episodes_table(episodes: tuple[EpisodeView, ...]) -> pd.DataFrame:
    """The episodes a turn produced as the Turns page lists them, one row each, as text."""
    return pd.DataFrame([{"episode": e.id, "action": e.action_kind or "", "steps": f"{e.first_step}–{e.last_step}",
                          "outcome": e.outcome or "", "death": e.died or "", "summary": e.summary} for e in episodes],
                        columns=["episode", "action", "steps", "outcome", "death", "summary"])


@dataclass(frozen=True)
class TurnMenu:
    """What the Turns page's turn picker and its buttons need of every turn, built once per
    run version: the turn numbers in order, :func:`turn_kinds`, and each turn's label (``turn
    12``, with the kinds of :data:`NAV_KINDS` it is: ``turn 12 · retarget, death``)."""

    numbers: list[int]
    kinds: pd.DataFrame
    labels: dict[int, str]


def turn_menu(run: Run) -> TurnMenu:
    """Every turn of ``run`` as the Turns page lists it (:class:`TurnMenu`)."""
    kinds = turn_kinds(run)
    labels = {}
    for r in kinds.itertuples():
        flags = [k for k in NAV_KINDS if getattr(r, k)]
        labels[int(r.turn)] = f"turn {r.turn}" + (f" · {', '.join(flags)}" if flags else "")
    return TurnMenu(turn_numbers(run), kinds, labels)


PICKER_WINDOW = 100
"""The Turns picker lists this many turns on each side of the one shown (``lookups.around``;
the buttons and the URL reach every turn): a 360k-step run has 18,000 turns, and sending every
label on each rerun made a click there 4x the bare framework's."""


@dataclass(frozen=True)
class TurnNav:
    """Where to step from a turn: the previous and next turn, and per kind of
    :data:`NAV_KINDS` the previous and next turn of that kind (None: none)."""

    prev: int | None
    next: int | None
    kinds: dict[str, tuple[int | None, int | None]]


def navigation(kinds: pd.DataFrame, turn: int) -> TurnNav:
    """Previous / next turn of every kind around ``turn`` (``kinds`` from :func:`turn_kinds`, in turn order)."""
    nums = kinds["turn"].to_numpy(dtype=int)
    cut, end = int(np.searchsorted(nums, turn, "left")), int(np.searchsorted(nums, turn, "right"))

    def around(mask: np.ndarray) -> tuple[int | None, int | None]:
        before, after = nums[:cut][mask[:cut]], nums[end:][mask[end:]]
        return (int(before[-1]) if len(before) else None, int(after[0]) if len(after) else None)

    prev, nxt = around(np.ones(len(nums), dtype=bool))
    return TurnNav(prev, nxt, {k: around(kinds[k].to_numpy(dtype=bool)) for k in NAV_KINDS})


def turn_at(run: Run, step: int, life: int | None = None) -> int | None:
    """The turn whose steps cover env ``step`` (in ``life`` when given): ``first_step < step
    <= last_step``, or the turn starting at ``step``."""
    best = None
    for t in run.records("turns.jsonl"):
        if life is not None and t.life != life:
            continue
        if t.first_step < step <= t.last_step or t.first_step == step:
            if best is None or t.first_step > best.first_step:
                best = t
    return best.turn if best else None


@dataclass(frozen=True)
class InspectedShot:
    """The one frame shown for an episode a turn inspected, and why that one.

    ``step`` is the frame that showed a new target of the turn (the one showing most of them,
    the earliest of equals); else one that showed a target already in the plan; else the
    decoded frame with the most finds; else the last frame decoded (the inspection's first
    look); None when no frame of it was decoded (then its end observation is shown). ``finds``
    holds every find of the episode's inspections in the turn, ``shown`` those of the frame
    shown; ``on_target`` the shown finds on a target cell (outlined cyan, the rest yellow)."""

    episode: str
    label: str
    origin: str | None
    step: int | None
    why: str
    finds: tuple[Find, ...]
    shown: tuple[Find, ...]
    on_target: tuple[Find, ...]
    decoded: int
    targets: tuple[tuple[float, float], ...] = ()

    @property
    def shows_new_target(self) -> bool:
        """Whether the frame shown is one that showed a new target."""
        return self.why.startswith("showed the new target")


def _named(finds: tuple[Find, ...] | list[Find]) -> str:
    return ", ".join(dict.fromkeys(f"{f.name} ({f.x}, {f.y})" for f in finds))


def inspection_shots(view: TurnView) -> tuple[InspectedShot, ...]:
    """One :class:`InspectedShot` per episode the turn inspected, in the order first inspected
    (an episode inspected twice is shown once, with the finds of both)."""
    new = {(t.x, t.y) for t in view.targets if t.new}
    planned = {(t.x, t.y) for t in view.targets} - new
    calls: dict[str, list[CallView]] = {}
    for c in view.calls:
        if c.tool == "inspect" and c.episode:
            calls.setdefault(c.episode, []).append(c)
    out = []
    for ep, group in calls.items():
        frames: dict[int, list[Find]] = {}
        for c in group:
            for fr in c.frames:
                frames.setdefault(fr.step, [])
                frames[fr.step] += [f for f in fr.finds if f not in frames[fr.step]]
        finds = tuple(dict.fromkeys(f for c in group for f in c.finds))

        def on(cells: set, step: int) -> list[Find]:
            return [f for f in frames[step] if (f.x, f.y) in cells]

        order = sorted(frames)
        new_hits = [s for s in order if on(new, s)]
        plan_hits = [s for s in order if on(planned, s)]
        found = [s for s in order if frames[s]]
        if new_hits:
            step = max(new_hits, key=lambda s: (len(on(new, s)), -s))
            why = f"showed the new target {_named(on(new, step))}"
        elif plan_hits:
            step = max(plan_hits, key=lambda s: (len(on(planned, s)), -s))
            why = f"showed a target already in the plan, {_named(on(planned, step))}"
        elif found:
            step = max(found, key=lambda s: (len(frames[s]), -s))
            why = f"most finds of the frames decoded ({len(frames[step])})"
        elif order:
            step, why = order[-1], "nothing wanted in any frame decoded; the last frame, looked at first"
        else:
            step, why = None, "no frame decoded; the episode's end observation"
        shown = tuple(frames.get(step, ())) if step is not None else ()
        out.append(InspectedShot(ep, group[0].episode_label, group[0].origin, step, why, finds, shown,
                                 tuple(f for f in shown if (f.x, f.y) in new | planned), len(order),
                                 tuple(sorted(new | planned))))
    return tuple(out)


def shots_table(shots: tuple[InspectedShot, ...], inspections: list[dict] | None = None) -> pd.DataFrame:
    """The inspected episodes as a table: ``episode, found, frame, why this frame, life, x, y,
    counted``
    (``frame``: the step of the frame shown; ``found``: every find of the episode, those on a
    target cell first, :func:`find_caption`; ``life, x, y, counted`` from the retarget audit's
    ``inspections`` when given: its life, recorded position, and whether §A.4 counts it)."""
    meta = {str(i.get("episode")): i for i in reversed(inspections or [])}
    rows = []
    for s in shots:
        m = meta.get(s.episode, {})
        found = find_caption(s.finds, set(s.targets), tiles=False) or "nothing wanted"
        rows.append({"episode": s.label, "found": found, "frame": s.step, "why this frame": s.why, "life": m.get("life"),
                     "x": m.get("x"), "y": m.get("y"), "counted": m.get("counted")})
    df = pd.DataFrame(rows, columns=["episode", "found", "frame", "why this frame", "life", "x", "y", "counted"])
    for c in ("frame", "life"):
        df[c] = df[c].astype("Int64")
    return df


SHOTS_PER_PAGE = 4
"""Inspected episodes shown side by side at once (beside the frame the agent had)."""


def shot_pages(count: int, per_page: int | None = None) -> list[tuple[int, int]]:
    """``count`` items cut into pages of ``per_page`` (default :data:`SHOTS_PER_PAGE`): each
    page's ``(first, end)`` indices, end excluded; none for no item."""
    size = max(1, per_page or SHOTS_PER_PAGE)
    return [(i, min(count, i + size)) for i in range(0, count, size)]
