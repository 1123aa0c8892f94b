"""Run configuration: one frozen, typed record of what a run is and how it is recorded."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mfm.agent.modes import ARMS, MemoryMode, allowed, mode_for
from mfm.envs import PERCEPTIONS as _HARNESS_PERCEPTIONS
from mfm.envs import load_task

METHODS: tuple[str, ...] = ("mfm", "direct", "pro-long", "vista")
"""Memory modes (see :mod:`mfm.agent.modes`): the same policy with different memory."""

ABLATIONS: tuple[str, ...] = ("no-frames", "no-index", "no-procedures", "no-consolidation", "no-content", "no-budget")
"""Components of the MFM method that can be switched off (``mfm`` takes any; every method with notes
takes the arms of :data:`mfm.agent.modes.ARMS`, e.g. ``no-budget``)."""


POLICIES: tuple[str, ...] = ("scripted", "llm")
"""Who decides each turn: the scripted policy, or a model over an OpenAI-compatible API."""

PERCEPTIONS: tuple[str, ...] = _HARNESS_PERCEPTIONS
"""Where the live 9x7 view and daylight come from: the game's world map (``map``, the
default), or the rendered frame, decoded (``pixels``; see :class:`mfm.envs.CrafterHarness`)."""


@dataclass(frozen=True)
class LLMConfig:
    """Settings of the LLM policy (see :mod:`mfm.agent.llm` and ``docs/llm.md``).

    ``base_url`` None: the ``OPENAI_BASE_URL`` environment variable (or the OpenAI default).
    The key is read from the environment variable ``api_key_env`` and never recorded.
    Prices are per 1000 tokens, for the cost estimate in each turn's ``usage``.
    ``max_failures`` consecutive failed model requests stop the run (status interrupted);
    each failure waits ``backoff_s * 2**(n-1)`` seconds (at most ``backoff_max_s``) first.
    ``recent_tokens`` is the budget of the recent-turns part of the prompt, ``guide_tokens``
    of GUIDE.md; tokens are estimated as characters / 4. Prompts longer than
    ``record_prompt_chars`` are recorded by sha256 and length only.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    price_prompt_per_1k: float = 0.0
    price_completion_per_1k: float = 0.0
    timeout_s: float = 60.0
    max_failures: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    max_tool_rounds: int = 6
    recent_tokens: int = 2000
    guide_tokens: int = 1500
    send_images: bool = True
    temperature: float | None = None
    max_tokens: int | None = None
    record_prompt_chars: int = 4000

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("the llm policy needs a model name (--model)")
        if self.max_failures < 1 or self.max_tool_rounds < 1:
            raise ValueError("max_failures and max_tool_rounds must be at least 1")
        if min(self.price_prompt_per_1k, self.price_completion_per_1k, self.backoff_s, self.timeout_s) < 0:
            raise ValueError("prices, backoff and timeout cannot be negative")


MIN_AREA, MAX_AREA = 16, 512
"""World sides a run may have (crafter's generator needs room for its start area)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides a run; two equal configs give the same run directory.

    ``steps`` is the env step budget (None: the task's budget). ``fixed_clock`` replaces wall
    time by a clock derived from the env step, so that a run is byte-identical when
    regenerated. ``consolidate_every`` is the number of episodes between consolidations.
    ``perception`` (one of :data:`PERCEPTIONS`) is where the live view and daylight come from.
    ``area``: the world's side in tiles (None: the rules' 64; crafter's worlds are square here).
    ``inherit``: a run that ended in the same world, whose memory this run starts with
    (:mod:`mfm.memory.inheritance`; a new game in a known world).
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
    llm: LLMConfig | None = None
    perception: str = "map"
    area: int | None = None
    inherit: Path | None = None

    def __post_init__(self) -> None:
        if self.perception not in PERCEPTIONS:
            raise ValueError(f"unknown perception {self.perception!r}; expected one of {', '.join(PERCEPTIONS)}")
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; expected one of {', '.join(METHODS)}")
        bad = [a for a in self.ablations if a not in ABLATIONS]
        if bad:
            raise ValueError(f"unknown ablation(s) {', '.join(bad)}; expected any of {', '.join(ABLATIONS)}")
        refused = [a for a in self.ablations if not allowed(self.method, a)]
        if refused:
            raise ValueError(f"method {self.method!r} cannot take {', '.join(refused)}: ablations switch off parts "
                             f"of mfm; other methods with notes take only {', '.join(ARMS)}")
        if len(set(self.ablations)) != len(self.ablations):
            raise ValueError("an ablation is given twice")
        load_task(self.task)
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.consolidate_every < 1:
            raise ValueError("consolidate_every must be at least 1")
        if self.area is not None and not MIN_AREA <= self.area <= MAX_AREA:
            raise ValueError(f"area must be {MIN_AREA} to {MAX_AREA} tiles, got {self.area}")
        if self.inherit is not None and not self.mode.notes:
            raise ValueError(f"method {self.method!r} keeps no memory, so it cannot inherit any")

    @property
    def budget(self) -> int:
        """The env step budget of the run."""
        return self.steps if self.steps is not None else load_task(self.task).budget

    def uses(self, component: str) -> bool:
        """Whether a memory component (``frames``, ``index``, ``procedures``, ``consolidation``) is on."""
        return f"no-{component}" not in self.ablations

    @property
    def world(self) -> tuple[int, int] | None:
        """The world's size in tiles (None: the rules' default)."""
        return None if self.area is None else (self.area, self.area)

    @property
    def notes_tokens(self) -> int | None:
        """The budget of GUIDE.md in tokens (the task's, the same for every method; None:
        unbounded, also with the ``no-budget`` ablation)."""
        return load_task(self.task).notes_tokens if self.mode.budget else None

    @property
    def mode(self) -> MemoryMode:
        """What the policy may read and write (see :mod:`mfm.agent.modes`)."""
        return mode_for(self.method, self.ablations)

    @property
    def policy(self) -> str:
        """``scripted`` or ``llm``."""
        return "scripted" if self.llm is None else "llm"

    @property
    def run_name(self) -> str:
        """``task_method[-ablation...]_sSEED`` (``_aN`` added for a world of N x N tiles,
        ``_from-RUN`` for a run that inherits RUN's memory, ``_llm`` for the LLM policy): the
        run id and default folder name."""
        base = f"{self.task}_{'-'.join([self.method, *self.ablations])}_s{self.seed}"
        if self.area is not None:
            base += f"_a{self.area}"
        if self.inherit is not None:
            base += f"_from-{Path(self.inherit).name}"
        return base if self.llm is None else f"{base}_llm"

    def to_manifest(self) -> dict[str, Any]:
        """The config as recorded in ``run.json`` (paths as strings, no output folder).
        ``perception`` and ``area`` are recorded only when they are not the default, so that the
        manifest of a default run stays what it was before the options existed; what a run
        inherited is recorded by the runner (``inherited``: the run, its task and steps)."""
        d = asdict(self)
        d.pop("out")
        d.pop("inherit")
        if self.llm is None:
            d.pop("llm")
        if self.perception == "map":
            d.pop("perception")
        if self.area is None:
            d.pop("area")
        d["ablations"] = list(self.ablations)
        d["budget"] = self.budget
        d["memory"] = asdict(self.mode)
        return d
