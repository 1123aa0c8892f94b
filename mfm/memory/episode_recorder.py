"""The episode recorder: the one path by which a played episode becomes a run's records.

Every driver of the game harness records through it (the agent's runner,
``mfm.agent.runner``, and the Echo learner, ``mfm.echo.agent``, through the body they share),
so every run has every table. An episode is opened with its :class:`Call`
(:meth:`EpisodeRecorder.begin`, which fixes its ``action.json``); its steps and frames are
added to the open :class:`~mfm.memory.episode_store.EpisodeRecording` as they are played; and
:meth:`EpisodeRecorder.end` commits it with its :class:`Ending`, through
:meth:`RunWriter.end_episode <mfm.memory.run_writer.RunWriter.end_episode>`: the trace, grid
and ``seen.jsonl`` rows, ``state/state.json``, ``outcome.json`` (:class:`~mfm.schema.EpisodeOutcome`),
the frames, the index row and the log section (``[ACTION]``, ``[STATE]``, ``[SEEN]``, ``[EVENT]``,
``[NOTE]``). :meth:`EpisodeRecorder.initial` records a run's initial state, :meth:`death` and
:meth:`respawn` the lives.

Since format 1.3 what an episode called and how it ended are fields (the index row's
``action_kind``, ``material``, ``target``, ``outcome`` and ``reason``; ``outcome.json``'s
``action``, ``args``, ``material``, ``target``, ``label`` and ``reason``). The summary is rendered
from them for people and for text search (:func:`summary_text`); no reader parses it back.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mfm.memory.episode_store import EpisodeRecording
from mfm.memory.run_writer import RunWriter
from mfm.schema import EpisodeOutcome, GridRow, IndexRow, LifeEvent

Cell = tuple[int, int]
SeenCells = Mapping[str, Iterable[Cell]]
"""What an episode's frames showed: material -> its world cells, each once, in the order first seen."""
SeenLine = Callable[[str, list[Cell]], str]
"""Writes the log line naming cells of a material the view showed for the first time."""

MATERIAL_ARGS = ("material", "item", "name", "target", "what", "tool")
"""Arguments that name what a call acts on, makes or places, by precedence: the value of the
first of them the call has (a string) is its ``material``."""
HIDDEN_ARGS = frozenset({"stop_on"})
"""Arguments the summary leaves out (a routing hint, not what the call is about)."""
INITIAL_SUMMARY = "initial state"


@dataclass(frozen=True)
class Call:
    """What an episode runs: the atom or stored procedure ``name`` with its ``args``, and why
    (``goal``, the index row's ``note``). A procedure has its ``version`` and the ``atoms`` its
    arguments bound to; an atom has neither."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    goal: str | None = None
    version: int | None = None
    atoms: Sequence[Mapping[str, Any]] = ()

    @property
    def is_procedure(self) -> bool:
        return self.version is not None

    @property
    def material(self) -> str | None:
        """What the call names to act on, make or place (:data:`MATERIAL_ARGS`), or None."""
        for k in MATERIAL_ARGS:
            if k in self.args:
                v = self.args[k]
                return v if isinstance(v, str) and v else None
        return None

    @property
    def target(self) -> Cell | None:
        """The world cell the call names (its ``x`` and ``y`` arguments), or None."""
        x, y = self.args.get("x"), self.args.get("y")
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (x, y)):
            return None
        return int(x), int(y)

    def action_record(self) -> dict[str, Any]:
        """The body of ``action.json`` (after its ``turn`` and ``first_step``)."""
        if self.is_procedure:
            return {"procedure": self.name, "version": self.version, "args": dict(self.args), "atoms": list(self.atoms),
                    "is_procedure": True, "goal": self.goal}
        return {"atom": self.name, "args": dict(self.args), "is_procedure": False, "goal": self.goal}

    def text(self) -> str:
        """The call as the summary shows it: ``collect(material=stone, x=23, y=35)``."""
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.args.items() if k not in HIDDEN_ARGS)})"


@dataclass(frozen=True)
class Ending:
    """How an episode ended: ``label`` (``done``, ``failed`` or ``interrupted``), ``reason``
    (``no tree at (30, 31) (grass)``, ``died (arrow)``, ``budget``), and the label and reason
    of each atom it ran, in order."""

    label: str
    reason: str
    atoms: tuple[tuple[str, str], ...] = ()


def summary_text(call: Call, ending: Ending, steps: int, moved: int, highlights: Sequence[str] = ()) -> str:
    """An episode's ``summary`` (index row, ``[ACTION]`` line), rendered from its fields:
    ``collect(material=stone, x=23, y=35) -> failed: no stone at (23, 35) (path); 4 steps, 2
    new cells; collected wood at (29, 34)`` (at most four ``highlights``)."""
    text = f"{call.text()} -> {ending.label}: {ending.reason}; {steps} steps, {moved} new cells"
    return text + "".join(f"; {h}" for h in highlights[:4])


def episode_tags(call: Call, ending: Ending, tags: Iterable[str]) -> list[str]:
    """An episode's tags: those its steps earned, plus ``failed`` or ``interrupted`` by its
    ending and ``procedure`` for a stored procedure; sorted."""
    out = set(tags)
    if ending.label in ("failed", "interrupted"):
        out.add(ending.label)
    if call.is_procedure:
        out.add("procedure")
    return sorted(out)


class EpisodeRecorder:
    """Records a run's episodes into its :class:`RunWriter` (see the module docstring).

    ``seen_line`` writes the log's line for cells of one material first shown (the agent's
    ``[SEEN]`` line); :attr:`logged` holds the (material, cell) pairs the log has named."""

    def __init__(self, writer: RunWriter, seen_line: SeenLine) -> None:
        self.writer = writer
        self.seen_line = seen_line
        self.logged: set[tuple[str, Cell]] = set()

    def seen_lines(self, seen: SeenCells) -> list[str]:
        """The log lines of an episode's ``seen``: per material, the cells no earlier line named
        (they are then named)."""
        out = []
        for material in sorted(seen):
            new = [(int(x), int(y)) for x, y in seen[material] if (material, (int(x), int(y))) not in self.logged]
            self.logged.update((material, c) for c in new)
            if new:
                out.append(self.seen_line(material, new))
        return out

    def initial(self, *, life: int, step: int, observation: np.ndarray, state: dict[str, Any], position: Cell,
                seen: SeenCells, state_line: str) -> IndexRow:
        """Record the state a life starts in (the run's reset) as an ``initial`` episode."""
        rec = self.writer.begin_episode(kind="initial", life=life, turn=None, action_kind=None, first_step=step,
                                        action={})
        return self.writer.end_episode(rec, observation=observation, state=state, outcome={}, summary=INITIAL_SUMMARY,
                                       tags=["initial"], events=[], x=position[0], y=position[1], outcome_label=None,
                                       log_lines=[state_line, *self.seen_lines(seen)], seen=seen)

    def begin(self, call: Call, *, life: int, turn: int | None, first_step: int) -> EpisodeRecording:
        """Open an episode running ``call`` after env step ``first_step``."""
        rec = self.writer.begin_episode(kind="episode", life=life, turn=turn, action_kind=call.name,
                                        first_step=first_step, action=call.action_record())
        rec.material, rec.target = call.material, call.target
        return rec

    def end(self, rec: EpisodeRecording, call: Call, ending: Ending, *, observation: np.ndarray,
            state: dict[str, Any], position: Cell, grid: Sequence[GridRow], events: Sequence[str],
            tags: Iterable[str], seen: SeenCells, damage: float, state_line: str,
            highlights: Sequence[str] = ()) -> IndexRow:
        """Commit the open episode ``rec`` (opened by :meth:`begin` with ``call``) and
        everything that happened in it; return its index row.

        ``observation``: the frame it ends on; ``state``: ``state/state.json``; ``position``:
        the player's cell then; ``grid``: its spatial rows; ``events``: its event lines;
        ``tags``: the tags its steps earned; ``seen``: what its frames showed; ``damage``:
        health lost; ``state_line``: the log's ``[STATE]`` line; ``highlights``: the events
        the summary repeats."""
        rec.reason = ending.reason
        tags = episode_tags(call, ending, tags)
        outcome = EpisodeOutcome(
            last_step=rec.last_step, tags=tuple(tags), events=tuple(events), label=ending.label, reason=ending.reason,
            atoms=tuple({"label": label, "reason": reason} for label, reason in ending.atoms), damage=damage,
            action=call.name, args=dict(call.args), material=call.material, target=call.target)
        moved = sum(1 for g in grid if g.kind == "walked")
        return self.writer.end_episode(
            rec, grid=grid, observation=observation, state=state, outcome=outcome.to_dict(),
            summary=summary_text(call, ending, len(rec.steps), moved, highlights), tags=tags, events=list(events),
            x=position[0], y=position[1], outcome_label=ending.label, note=call.goal,
            log_lines=[state_line, *self.seen_lines(seen)], seen=seen)

    def death(self, *, life: int, step: int, cell: Cell, cause: str, episode: str) -> None:
        """Queue a death (``lives.jsonl``), committed with the episode it ended."""
        self.writer.record_life_event(LifeEvent(event="death", life=life, step=step, x=cell[0], y=cell[1],
                                                cause=cause, episode=episode))

    def respawn(self, *, life: int, step: int, position: Cell) -> None:
        """Record a respawn (``lives.jsonl``, written with the next episode) and the new life
        count in ``run.json``."""
        self.writer.record_life_event(LifeEvent(event="respawn", life=life, step=step, x=position[0],
                                                y=position[1]))
        self.writer.update_manifest()
