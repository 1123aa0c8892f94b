"""Run configuration: one frozen, typed record of what a run is and how it is recorded."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mfm.envs import load_task

METHODS: tuple[str, ...] = ("mfm", "direct", "pro-long", "vista")
"""Memory modes. Only ``mfm`` is implemented so far; the others are reserved switches."""

ABLATIONS: tuple[str, ...] = ("no-frames", "no-index", "no-procedures", "no-consolidation")
"""Components of the MFM method that a later issue can switch off."""

IMPLEMENTED_METHODS: tuple[str, ...] = ("mfm",)


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides a run; two equal configs give the same run directory.

    ``steps`` is the env step budget (None: the task's budget). ``fixed_clock`` replaces wall
    time by a clock derived from the env step, so that a run is byte-identical when
    regenerated. ``consolidate_every`` is the number of episodes between consolidations.
    """

    task: str = "diamond"
    method: str = "mfm"
    seed: int = 0
    steps: int | None = None
    out: Path = Path("runs/run")
    ablations: tuple[str, ...] = ()
    consolidate_every: int = 25
    fixed_clock: bool = False
    frame_size: int = 64
    inspect_episodes: int = 16
    inspect_stride: int = 2
    max_atom_steps: int = 60
    stop_when_done: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; expected one of {', '.join(METHODS)}")
        if self.method not in IMPLEMENTED_METHODS:
            raise NotImplementedError(f"method {self.method!r} is reserved for a later issue; use 'mfm'")
        bad = [a for a in self.ablations if a not in ABLATIONS]
        if bad:
            raise ValueError(f"unknown ablation(s) {', '.join(bad)}; expected any of {', '.join(ABLATIONS)}")
        if self.ablations:
            raise NotImplementedError("ablations are reserved for a later issue")
        load_task(self.task)
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.consolidate_every < 1:
            raise ValueError("consolidate_every must be at least 1")

    @property
    def budget(self) -> int:
        """The env step budget of the run."""
        return self.steps if self.steps is not None else load_task(self.task).budget

    def uses(self, component: str) -> bool:
        """Whether a memory component (``frames``, ``index``, ``procedures``, ``consolidation``) is on."""
        return f"no-{component}" not in self.ablations

    def to_manifest(self) -> dict[str, Any]:
        """The config as recorded in ``run.json`` (paths as strings, no output folder)."""
        d = asdict(self)
        d.pop("out")
        d["ablations"] = list(self.ablations)
        d["budget"] = self.budget
        return d
