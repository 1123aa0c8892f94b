"""The run-wide time cursor: one ``(life, step)`` that the Timeline, Turns, Frames, Spatial grid,
Memory and Provenance pages follow (``life`` and ``step`` in the URL query).

Plain functions, no Streamlit: reading a cursor from URL text against a run, the turn and the
episode at a cursor, where a turn or an episode puts it, and which wins when a page's own target
(``turn``, ``ep``, ``asof``) and the cursor disagree (:func:`follow`).

    from loaders.cursor import Cursor, turn_at
    turn_at(run, Cursor(life=0, step=1030))     # the TurnRow whose actions took step 1030
"""
from __future__ import annotations

from dataclasses import dataclass

from loaders.run import Run
from loaders.lookups import life_at, position_at, step_bounds
from mfm.schema import IndexRow, TurnRow


@dataclass(frozen=True, order=True)
class Cursor:
    """A point in a run's time: env ``step`` of ``life`` (the state after that step)."""

    life: int
    step: int

    def params(self) -> dict[str, str]:
        """The cursor as URL query parameters."""
        return {"life": str(self.life), "step": str(self.step)}

    def moved(self, by: int, lo: int, hi: int) -> "Cursor":
        """The cursor ``by`` steps later (earlier when negative), kept within ``lo..hi``."""
        return Cursor(self.life, max(lo, min(hi, self.step + by)))


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def life_bounds(run: Run, life: int) -> tuple[int, int] | None:
    """The first and last env step of ``life`` (from its trace rows and its episodes), or None
    when the run holds nothing of it. Worked out for every life at once, once per run version
    (``Run.derived``): the sidebar asks on every rerun of every page."""
    return run.derived("life-bounds", _every_life_bounds).get(int(life))


def _every_life_bounds(run: Run) -> dict[int, tuple[int, int]]:
    """Each life's first and last env step over its trace rows and its episodes."""
    out: dict[int, tuple[int, int]] = {}
    st = run.steps()
    if len(st):
        spans = st.groupby("life")["step"].agg(["min", "max"])
        out = {int(life): (int(lo), int(hi)) for life, lo, hi in zip(spans.index, spans["min"], spans["max"])}
    for r in run.index.rows:
        lo, hi = out.get(r.life, (r.first_step, r.last_step))
        out[r.life] = (min(lo, r.first_step), max(hi, r.last_step))
    return out


def parse(run: Run, life_text: str | None, step_text: str | None) -> tuple[Cursor | None, list[str]]:
    """The cursor named by the URL values ``life`` and ``step`` in ``run``, and why a value was
    dropped (one sentence each). No ``step``: no cursor (and ``life`` is left alone: a page
    may read it as its own filter). A step without a life takes the life
    that played it (``loaders.lookups.life_at``); a life the run does not hold is dropped; a step
    outside its life's steps is moved to the nearest one and said so."""
    problems: list[str] = []
    step = _int(step_text)
    if step_text is not None and step is None:
        problems.append(f"step = {step_text[:40]!r} is not a whole number: dropped")
    if step is None:
        return None, problems
    life = _int(life_text)
    if life_text is not None and life is None:
        problems.append(f"life = {life_text[:40]!r} is not a whole number: dropped")
    if life is not None and life_bounds(run, life) is None:
        problems.append(f"life = {life} is no life of {run.name}: dropped")
        life = None
    if life is None:
        first, last = step_bounds(run)
        if last <= first and not len(run.index.rows):
            return None, problems + [f"{run.name} has no steps: the cursor is dropped"]
        step = max(first, min(last, step))
        life = life_at(run, step)
        if life is None:
            return None, problems + [f"no life of {run.name} played step {step}: the cursor is dropped"]
    lo, hi = life_bounds(run, life) or (step, step)
    if not lo <= step <= hi:
        problems.append(f"step = {step} is outside life {life} (steps {lo}–{hi}): moved to "
                        f"{max(lo, min(hi, step))}")
        step = max(lo, min(hi, step))
    return Cursor(int(life), int(step)), problems


def turns_of(run: Run, life: int) -> list[TurnRow]:
    """The turns of ``life`` in order of their first step (then their number). Sorted once per
    run version for every life (``Run.derived``): the sidebar asks on every rerun of every page."""
    return run.derived("turns-by-life", _turns_by_life).get(int(life), [])


def _turns_by_life(run: Run) -> dict[int, list[TurnRow]]:
    out: dict[int, list[TurnRow]] = {}
    for t in sorted(run.records("turns.jsonl"), key=lambda t: (t.first_step, t.turn)):
        out.setdefault(t.life, []).append(t)
    return out


def turn_contains(turn: TurnRow, c: Cursor) -> bool:
    """Whether the cursor lies in the turn: its life, from the step it decided at to its last."""
    return turn.life == c.life and turn.first_step <= c.step <= turn.last_step


def turn_at(run: Run, c: Cursor) -> TurnRow | None:
    """The turn whose actions took the cursor's step (``first_step < step <= last_step``), else
    the last turn of the life decided at that step, else None."""
    took = [t for t in turns_of(run, c.life) if t.first_step < c.step <= t.last_step]
    if took:
        return took[-1]
    at = [t for t in turns_of(run, c.life) if t.first_step == c.step]
    return at[-1] if at else None


def turn_start(turn: TurnRow) -> Cursor:
    """Where a turn puts the cursor: its first action's step (its decision step if it acted
    not at all)."""
    return Cursor(turn.life, turn.first_step + 1 if turn.last_step > turn.first_step else turn.first_step)


def episode_contains(row: IndexRow, c: Cursor, back: int = 0) -> bool:
    """Whether the cursor lies in the episode (its life, steps ``first_step + 1 - back`` to
    ``last_step``: ``back`` steps before it count, as the Timeline's scrubber shows them)."""
    return row.life == c.life and row.first_step + 1 - back <= c.step <= max(row.last_step, row.first_step + 1)


def episode_at(run: Run, c: Cursor) -> IndexRow | None:
    """The episode of the cursor's life that played its step (the last such), else the last
    one ending at it, else None."""
    played = [r for r in run.index.rows if r.life == c.life and r.first_step < c.step <= r.last_step]
    if played:
        return played[-1]
    ended = [r for r in run.index.rows if r.life == c.life and r.last_step == c.step]
    return ended[-1] if ended else None


def episode_start(row: IndexRow) -> Cursor:
    """Where an episode puts the cursor: its first step (its start when it took none)."""
    return Cursor(row.life, row.first_step + 1 if row.last_step > row.first_step else row.first_step)


def position(run: Run, c: Cursor) -> tuple[float, float] | None:
    """Where the agent stood at the cursor (``loaders.lookups.position_at``)."""
    return position_at(run, c.step, c.life)


def follow(target_named: bool, step_named: bool, contained: bool) -> str:
    """Which of a page's own target (a turn, an episode, a memory step) and the cursor the page
    shows when both are set: ``"both"`` when the cursor lies in the target; ``"target"`` when
    the URL named the target and not the step (a link to it: the cursor moves there);
    ``"cursor"`` otherwise (the cursor moved last: the target follows it)."""
    if contained:
        return "both"
    if target_named and not step_named:
        return "target"
    return "cursor"


def describe(run: Run, c: Cursor) -> str:
    """One line naming the cursor: life, step, the turn and episode at it, the position."""
    t = turn_at(run, c)
    e = episode_at(run, c)
    p = position(run, c)
    return (f"life {c.life} · step {c.step}" + (f" · turn {t.turn}" if t else "") + (f" · {e.id}" if e else "")
            + (f" · at ({p[0]:g}, {p[1]:g})" if p else ""))
