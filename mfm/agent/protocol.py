"""What the runner needs of a policy: a turn in, a typed report out, and the hooks of a turn's end.

The runner (:mod:`mfm.agent.runner`) uses a policy only through :class:`Policy`; the
scripted policy (:class:`~mfm.agent.policy.MFMPolicy`) and the LLM policy
(:class:`~mfm.agent.llm.LLMPolicy`) implement it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mfm.agent.atoms import AtomResult
from mfm.agent.mapping import Cell
from mfm.agent.tools import MemoryTools
from mfm.envs import Perception
from mfm.schema import IndexRow


class PolicyGaveUp(RuntimeError):
    """The policy cannot decide any more (e.g. its model failed too often): the run stops
    cleanly with status ``interrupted`` and this message as the end reason."""


@dataclass
class Decision:
    """What the policy does this turn: one atom or one procedure, and why."""

    kind: str
    name: str
    args: dict[str, Any]
    goal: str
    targets: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Turn:
    """What a policy is given at the start of a turn.

    ``source``: the id of the newest episode; ``decision``: an outside controller's choice,
    which replaces the policy's own (the policy only takes in the turn)."""

    perception: Perception
    tools: MemoryTools
    source: str | None
    decision: Decision | None = None


@dataclass(frozen=True)
class TurnReport:
    """What a policy made of a turn: its decision (None when it gave up, ``gave_up`` then
    saying why), the model usage and latency it took (None without a model) and the state
    block it decided from (the turn's note)."""

    decision: Decision | None
    usage: dict[str, Any] | None
    latency_s: float | None
    state: str
    gave_up: PolicyGaveUp | None = None


class Policy(Protocol):
    """A player the runner can drive, turn by turn."""

    name: str

    def play_turn(self, turn: Turn) -> TurnReport:
        """Take in the turn and decide (or take the outside decision)."""
        ...

    def resources(self, tools: MemoryTools, p: Perception) -> list[tuple[str, Cell]]:
        """Resources known from memory, for routing the decision's atoms."""
        ...

    def after(self, d: Decision, result: AtomResult, row: IndexRow, died: bool, p: Perception,
              tools: MemoryTools) -> None:
        """Learn from the episode the decision ran."""
        ...

    def consolidation(self, p: Perception, tools: MemoryTools, reason: str, death: tuple[str, Cell, str] | None,
                      last: Decision | None) -> None:
        """Consolidate memory (at the start, after a death, every few episodes)."""
        ...

    def update_plan(self, p: Perception, d: Decision, tools: MemoryTools) -> None:
        """Keep the working plan in step with the decision just taken."""
        ...

    def summary(self) -> dict[str, Any]:
        """The policy's part of the run's agent summary."""
        ...
