"""Run-directory format v1: typed records, frozen field order, tolerant readers.

This module is the single definition of the on-disk format. The writer (``mfm.memory``),
the loaders (``loaders``) and the validator (``mfm.validate``) all use it, and it imports
nothing else from the project. The prose spec is ``docs/run-format.md``.

Version rule: ``SCHEMA_VERSION`` is ``MAJOR.MINOR``. A minor bump only adds optional fields
or files (old readers ignore what they do not know); a major bump changes or removes
something. Readers open any run of the same major version, warn on a newer minor one and
refuse a newer major one with a clear message.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, BinaryIO, ClassVar, Iterator, get_args, get_origin, get_type_hints

import numpy as np

SCHEMA_VERSION = "1.3"
"""1.1: ``IndexRow.image`` is null when the end observation is the episode's last per-step
frame, which readers then take from its frame strip (docs/run-format.md, ``image``).
1.2: ``seen.jsonl`` (:class:`SeenRow`), what each episode's frames showed; runs of 1.1 have
none and read as before.
1.3: structured outcomes: an episode's call and how it ended as fields, not only as summary
prose: ``material``, ``target`` and ``reason`` of :class:`IndexRow`, and ``action``, ``args``,
``material``, ``target`` of ``outcome.json`` (:class:`EpisodeOutcome`); runs of 1.2 have
none (their readers take them from the summary: ``loaders.failures``)."""
SCHEMA_MAJOR, SCHEMA_MINOR = (int(p) for p in SCHEMA_VERSION.split("."))
STRUCTURED_OUTCOMES = (1, 3)
"""The format version from which an episode's call and ending are fields (:class:`IndexRow`'s
``material``, ``target``, ``reason``; :class:`EpisodeOutcome`), not only summary prose."""


def version_at_least(version: Any, since: tuple[int, int]) -> bool:
    """Whether a run's ``schema_version`` (``"1.3"``) is ``since`` or later; False when it
    cannot be read."""
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+", version):
        return False
    major, minor = (int(p) for p in version.split("."))
    return (major, minor) >= since

EPISODE_ID = re.compile(r"^ep_\d{6,}$")
INHERITED = "inherited"
"""A run's copy of the run whose memory it inherited (``RUN/inherited/``), and the prefix of
the ids of that run's episodes (``inherited:ep_000018``) where the new run refers to them."""
EPISODE_REF = re.compile(rf"^(?:{INHERITED}:)?ep_\d{{6,}}$")
"""An episode a source may name: one of the run's own, or of the run it inherited."""
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
"""No JSON value in a run nests deeper than this many arrays and objects (records nest 4 deep
at most); deeper input is refused before it is parsed, so no reader recurses on it."""
MAX_COORD = 1e7
FRAMES_PER_CHUNK = 64

RUN_STATUSES = ("running", "finished", "interrupted", "crashed")
CLOSED_STATUSES = RUN_STATUSES[1:]
"""The statuses a writer gives a run when it closes it (``running`` until then)."""
EPISODE_KINDS = ("initial", "episode")
OUTCOMES = ("done", "failed", "interrupted")
GRID_KINDS = ("walked", "placed", "opened", "blocked", "hazard", "water")
LIFE_EVENTS = ("death", "respawn")
MEMORY_OPS = ("create", "edit", "append", "disable", "delete")
TOOLS = ("search", "inspect", "read", "write", "procedure", "atom", "consolidate", "model")


def plain_relative(rel: Any) -> bool:
    """Whether ``rel`` is a non-empty relative POSIX path with no ``..``, backslash or NUL
    (what every path a run names must be: it stays inside the run folder)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return False
    return ".." not in rel.split("/")


def episode_id(n: int) -> str:
    """The id of the n-th episode of a run (``ep_000123``)."""
    return f"ep_{n:06d}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a run, located by file and line (line 0: the whole file)."""

    file: str
    line: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.severity}: {self.message}"


class SchemaError(ValueError):
    """A value does not match the format; the message says which field and why."""


def _finite(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SchemaError(f"{name} must be a number, got {type(v).__name__}")
    if not math.isfinite(v) or abs(v) > MAX_COORD:
        raise SchemaError(f"{name} must be finite and within ±{MAX_COORD:g}, got {v!r}")
    return v


def check_field(name: str, kind: str, v: Any) -> Any:
    """Check one value against a field kind; return the normalised value."""
    optional = kind.endswith("?")
    if optional:
        if v is None:
            return None
        kind = kind[:-1]
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            if not (isinstance(v, float) and v.is_integer()):
                raise SchemaError(f"{name} must be an integer, got {v!r}")
            v = int(v)
        if v < 0:
            raise SchemaError(f"{name} must not be negative, got {v}")
        return v
    if kind == "num":
        return _finite(name, v)
    if kind == "str":
        if not isinstance(v, str):
            raise SchemaError(f"{name} must be a string, got {type(v).__name__}")
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            raise SchemaError(f"{name} must be true or false, got {v!r}")
        return v
    if kind == "strs":
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            raise SchemaError(f"{name} must be a list of strings")
        return tuple(v)
    if kind == "list":
        if not isinstance(v, list):
            raise SchemaError(f"{name} must be a list")
        return tuple(v)
    if kind == "dict":
        if not isinstance(v, dict):
            raise SchemaError(f"{name} must be an object")
        return v
    if kind == "cell":
        if not isinstance(v, list) or len(v) not in (2, 3):
            raise SchemaError(f"{name} must be [x, y] or [x, y, z]")
        return tuple(int(_finite(f"{name}[{i}]", c)) for i, c in enumerate(v))
    if kind == "vec2":
        if not isinstance(v, list) or len(v) != 2:
            raise SchemaError(f"{name} must be [dx, dy]")
        return tuple(int(_finite(f"{name}[{i}]", c)) for i, c in enumerate(v))
    if kind == "counts":
        if not isinstance(v, dict) or not all(
            isinstance(k, str) and isinstance(c, int) and not isinstance(c, bool) for k, c in v.items()
        ):
            raise SchemaError(f"{name} must map names to integers")
        return v
    raise AssertionError(f"unknown field kind {kind}")


FIELD_KINDS = ("int", "num", "str", "bool", "strs", "list", "dict", "cell", "vec2", "counts")
"""The kinds a record field can have (:func:`check_field`); a trailing ``?`` allows null.

A record field is declared once, by one of the annotations below (``first_step: Int``): the
Python type, with the field's kind as its ``Annotated`` metadata. ``Record.KINDS`` is derived
from them (:func:`field_kinds`)."""

Int = Annotated[int, "int"]
OptInt = Annotated[int | None, "int?"]
Num = Annotated[float, "num"]
OptNum = Annotated[float | None, "num?"]
Str = Annotated[str, "str"]
OptStr = Annotated[str | None, "str?"]
Bool = Annotated[bool, "bool"]
Strs = Annotated[tuple[str, ...], "strs"]
Items = Annotated[tuple[Any, ...], "list"]
OptItems = Annotated[tuple[Any, ...] | None, "list?"]
Dicts = Annotated[tuple[dict[str, Any], ...], "list"]
Obj = Annotated[dict[str, Any], "dict"]
OptObj = Annotated[dict[str, Any] | None, "dict?"]
GridCell = Annotated[tuple[int, ...], "cell"]
OptCell = Annotated[tuple[int, ...] | None, "cell?"]
Vec2 = Annotated[tuple[int, int], "vec2"]
Counts = Annotated[dict[str, int], "counts"]


def field_kinds(cls: type) -> dict[str, str]:
    """Each field's kind, in field order, read from the ``Annotated`` annotations of ``cls``
    (ClassVars are skipped). Raises TypeError for a field declared without a known kind."""
    kinds: dict[str, str] = {}
    for name, hint in get_type_hints(cls, include_extras=True).items():
        if get_origin(hint) is ClassVar:
            continue
        meta = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, str)]
        if len(meta) != 1 or meta[0].rstrip("?") not in FIELD_KINDS or meta[0].count("?") > 1:
            raise TypeError(f"{cls.__name__}.{name} needs an annotation that names its kind "
                            f"(one of {', '.join(FIELD_KINDS)}, '?' for null), e.g. Int or OptStr")
        if meta[0].endswith("?") != (type(None) in get_args(get_args(hint)[0])):
            raise TypeError(f"{cls.__name__}.{name}: kind {meta[0]!r} and type {get_args(hint)[0]} "
                            "disagree on null")
        kinds[name] = meta[0]
    return kinds


class Record:
    """Base of every record: a frozen dataclass whose field order is the JSON key order.

    Each field is declared once, by an annotation that names its kind (``first_step: Int``,
    ``note: OptStr = None``; see :data:`FIELD_KINDS`). ``KINDS`` (field -> kind, in field
    order) is derived from those annotations when a subclass is defined. ``CHOICES``
    restricts string fields to a set of values. Fields with a default are optional on read;
    optional fields whose value is None are left out on write.
    """

    KINDS: ClassVar[dict[str, str]] = {}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.KINDS = field_kinds(cls)

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict in frozen field order."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None and _has_default(f):
                continue
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    def to_json(self) -> str:
        """One JSON line (no newline), compact, non-ASCII kept."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, obj: Any) -> Any:
        """Build a record from parsed JSON; raise SchemaError naming the bad field."""
        if not isinstance(obj, dict):
            raise SchemaError(f"expected a JSON object, got {type(obj).__name__}")
        kwargs: dict[str, Any] = {}
        for name, check, optional, choices in _spec(cls):
            v = obj.get(name)
            if v is None:
                if not optional:
                    if name in obj and cls.KINDS[name].endswith("?"):
                        kwargs[name] = None
                        continue
                    raise SchemaError(f"missing field '{name}'")
                continue
            v = check(name, v)
            if choices and v not in choices:
                raise SchemaError(f"{name} must be one of {', '.join(choices)}; got {v!r}")
            kwargs[name] = v
        rec = cls(**kwargs)
        rec.check()
        return rec

    def check(self) -> None:
        """Cross-field checks; raise SchemaError."""


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


_SPECS: dict[type, list[tuple[str, Any, bool, tuple[str, ...] | None]]] = {}


def _spec(cls: type) -> list[tuple[str, Any, bool, tuple[str, ...] | None]]:
    """Per record type, once: (field, checker, has a default, allowed values) in field order."""
    spec = _SPECS.get(cls)
    if spec is None:
        spec = [(f.name, _checker(cls.KINDS[f.name]), _has_default(f), cls.CHOICES.get(f.name))
                for f in dataclasses.fields(cls)]
        _SPECS[cls] = spec
    return spec


def _checker(kind: str) -> Any:
    """A fast checker for one field kind (plain ints, strings and in-range numbers pass at
    once; anything else goes through :func:`check_field` for the normalisation or the message)."""
    base = kind.rstrip("?")
    if base == "int":
        return lambda name, v: v if type(v) is int and v >= 0 else check_field(name, kind, v)
    if base == "str":
        return lambda name, v: v if type(v) is str else check_field(name, kind, v)
    if base == "num":
        return lambda name, v: (v if type(v) in (int, float) and -MAX_COORD <= v <= MAX_COORD
                                else check_field(name, kind, v))
    return lambda name, v: check_field(name, kind, v)


MAX_EPISODE_FRAMES = 10_000
"""The most frames one episode stores (:attr:`IndexRow.frames`). An episode is the steps of one
turn of the policy, whose atoms stop after tens of steps (the samples' longest: 141); a frame
is kept per step, so an episode's frames never exceed its steps, and 10,000 (Crafter's own
episode length) is far above any episode written. Every reader loops over an episode's frames
or its strips (``mfm validate``, the file checks, the scrubber, ``mfm import``): a row beyond
this bound is an error at its line and skipped, so one line cannot make that work unbounded."""


@dataclass(frozen=True, slots=True)
class IndexRow(Record):
    """``index.jsonl``: one searchable row per finished episode (MFM-compatible, D.1)."""

    id: Str
    kind: Str
    action_kind: OptStr
    first_step: Int
    last_step: Int
    summary: Str
    tags: Strs
    x: OptNum
    y: OptNum
    path: Str
    image: OptStr
    life: Int = 0
    turn: OptInt = None
    z: OptNum = None
    events: Strs = ()
    outcome: OptStr = None
    note: OptStr = None
    observation_hash: OptStr = None
    frames: Int = 0
    """Frames stored, one per step, in strips of ``FRAMES_PER_CHUNK``: at most the episode's
    steps (``last_step - first_step``) and :data:`MAX_EPISODE_FRAMES`."""
    material: OptStr = None
    """(1.3) What the call named to act on, make or place (``stone``, ``table``); null: none."""
    target: OptCell = None
    """(1.3) The world cell ``[x, y]`` the call named; null: none."""
    reason: OptStr = None
    """(1.3) Why the episode ended as it did: the reason its last atom gave (``no tree at
    (30, 31) (grass)``, ``died (arrow)``, ``budget``); null for initial episodes."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kind": EPISODE_KINDS, "outcome": OUTCOMES}

    def check(self) -> None:
        if not EPISODE_ID.match(self.id):
            raise SchemaError(f"id must look like ep_000123, got {self.id!r}")
        if self.last_step < self.first_step:
            raise SchemaError(f"last_step {self.last_step} is before first_step {self.first_step}")
        if self.frames > MAX_EPISODE_FRAMES:
            shown = f"{self.frames:,}" if self.frames < 10 ** 15 else f"of {len(str(self.frames))} digits"
            raise SchemaError(f"frames {shown} exceeds the bound of {MAX_EPISODE_FRAMES:,} frames per episode")
        if self.frames > self.last_step - self.first_step:
            raise SchemaError(f"frames {self.frames} exceeds the episode's {self.last_step - self.first_step} steps")
        for name, rel in (("path", self.path), ("image", self.image)):
            if rel is not None and not plain_relative(rel):
                raise SchemaError(f"{name} must be a relative path inside the run (no '..', no leading '/'), "
                                  f"got {rel!r}")


@dataclass(frozen=True, slots=True)
class EpisodeOutcome(Record):
    """``episodes/ep_NNNNNN/outcome.json``: how the episode ended (MFM, with our fields).

    ``label`` is the index row's ``outcome``; ``reason`` why it ended so; ``atoms`` the
    ``{"label", "reason"}`` of each atom it ran; ``damage`` the health it lost (not counting a
    death). Since 1.3 the call it ran: ``action`` (the atom or procedure, the index row's
    ``action_kind``), its ``args`` (as ``action.json`` holds them), and the ``material`` and
    ``target`` cell it named (as in the index row). An initial episode's has only the first
    three fields; an MFM folder's may hold other fields, which readers ignore."""

    last_step: Int
    tags: Strs = ()
    events: Strs = ()
    label: OptStr = None
    reason: OptStr = None
    atoms: OptItems = None
    damage: OptNum = None
    action: OptStr = None
    args: OptObj = None
    material: OptStr = None
    target: OptCell = None

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"label": OUTCOMES}


@dataclass(frozen=True, slots=True)
class GridRow(Record):
    """``grid.jsonl``: one interacted cell (MFM-compatible, D.2)."""

    cell: GridCell
    kind: Str
    step: Int
    life: Int = 0
    item: OptStr = None
    pose: OptObj = None
    damage: OptNum = None
    cause: OptStr = None

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"kind": GRID_KINDS}


@dataclass(frozen=True, slots=True)
class StepRow(Record):
    """``steps.jsonl``: the per-step trace (ours). ``step`` is the env step after the action."""

    step: Int
    life: Int
    episode: Str
    action: Str
    x: Num
    y: Num
    facing: Vec2
    health: Int
    food: Int
    drink: Int
    energy: Int
    inventory: Counts
    reward: Num
    unlocked: Strs = ()


@dataclass(frozen=True, slots=True)
class TurnRow(Record):
    """``turns.jsonl``: one decision of the policy (ours).

    ``calls`` items: ``{"tool": one of TOOLS, "args": {...}, "result": {...}}``.
    ``targets`` items: ``{"kind": "go_to"|"look_at", "x", "y", "in_plan": bool}``: every
    target the turn named, and whether the plan held it at that moment.
    ``plan_before``/``plan_after`` items: ``{"x", "y", "label"}``.
    """

    turn: Int
    life: Int
    first_step: Int
    last_step: Int
    policy: Str
    calls: Dicts
    targets: Dicts
    plan_before: Dicts
    plan_after: Dicts
    episodes: Strs
    usage: OptObj = None
    latency_s: OptNum = None
    note: OptStr = None

    def check(self) -> None:
        for i, c in enumerate(self.calls):
            if not isinstance(c, dict) or c.get("tool") not in TOOLS:
                raise SchemaError(f"calls[{i}].tool must be one of {', '.join(TOOLS)}")
        for i, t in enumerate(self.targets):
            if not isinstance(t, dict) or t.get("kind") not in ("go_to", "look_at"):
                raise SchemaError(f"targets[{i}].kind must be go_to or look_at")
            _finite(f"targets[{i}].x", t.get("x"))
            _finite(f"targets[{i}].y", t.get("y"))


@dataclass(frozen=True, slots=True)
class MemoryWrite(Record):
    """``memory_writes.jsonl``: one write to ``mine/`` with its provenance (ours).

    ``diff`` turns the previous version into this one: a list of ``[start, end, lines]``
    hunks, each replacing old lines ``start:end`` with ``lines``, in ascending order.
    ``snapshot`` holds the whole new content (always on create, and every few writes),
    so a damaged diff only affects the versions up to the next snapshot.
    """

    seq: Int
    turn: OptInt
    step: Int
    life: Int
    path: Str
    op: Str
    author: Str
    reason: Str
    sources: Strs
    time: Str
    sha256: Str
    diff: OptItems = None
    snapshot: OptStr = None

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"op": MEMORY_OPS}

    def check(self) -> None:
        if not self.path.startswith("mine/") or not plain_relative(self.path):
            raise SchemaError(f"path must be a plain relative path under mine/ (no '..', backslash or NUL), "
                              f"got {self.path!r}")
        if self.diff is None and self.snapshot is None and self.op != "delete":
            raise SchemaError("a write needs a diff or a snapshot")
        for s in self.sources:
            if not EPISODE_REF.match(s):
                raise SchemaError(f"source {s!r} is not an episode id")


@dataclass(frozen=True, slots=True)
class MilestoneRow(Record):
    """``milestones.jsonl``: a milestone reached for the first time (ours)."""

    name: Str
    step: Int
    life: Int
    episode: OptStr = None
    turn: OptInt = None


@dataclass(frozen=True, slots=True)
class LifeEvent(Record):
    """``lives.jsonl``: a death or a respawn (ours)."""

    event: Str
    life: Int
    step: Int
    x: OptNum = None
    y: OptNum = None
    cause: OptStr = None
    episode: OptStr = None

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"event": LIFE_EVENTS}


@dataclass(frozen=True, slots=True)
class SeenRow(Record):
    """``seen.jsonl``: what an episode's frames showed of one material (ours, format 1.2).

    ``cells`` are the world cells ``[x, y]`` where the player's view showed ``material``
    during the episode (each once, in the order first seen), placed by the position the
    trace recorded for the frame. Written with the episode, before its index row; the
    content half of the episode index: searchable by material and place over the whole
    history (:class:`mfm.memory.index.ContentIndex`)."""

    episode: Str
    life: Int
    first_step: Int
    last_step: Int
    material: Str
    cells: Items

    def check(self) -> None:
        if not EPISODE_ID.match(self.episode):
            raise SchemaError(f"episode must look like ep_000123, got {self.episode!r}")
        if self.last_step < self.first_step:
            raise SchemaError(f"last_step {self.last_step} is before first_step {self.first_step}")
        for c in self.cells:
            if (not isinstance(c, list) or len(c) != 2
                    or not all(type(v) is int and abs(v) <= MAX_COORD for v in c)):
                raise SchemaError(f"cells must be [x, y] pairs of integers, got {c!r}")


@dataclass(frozen=True, slots=True)
class RunManifest(Record):
    """``run.json``: what the run is and how it stands (ours). Replaced atomically."""

    schema_version: Str
    run_id: Str
    env: Str
    task: Str
    method: Str
    seed: OptInt
    step_budget: Int
    milestone_order: Strs
    status: Str
    started_at: Str
    ablations: Strs = ()
    milestones: Counts = field(default_factory=dict)
    ended_at: OptStr = None
    end_reason: OptStr = None
    last_step: Int = 0
    lives: Int = 1
    policy: OptStr = None
    package_version: OptStr = None
    command: OptStr = None
    config: Obj = field(default_factory=dict)

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"status": RUN_STATUSES}


TABLES: dict[str, type[Record]] = {
    "index.jsonl": IndexRow,
    "grid.jsonl": GridRow,
    "steps.jsonl": StepRow,
    "turns.jsonl": TurnRow,
    "memory_writes.jsonl": MemoryWrite,
    "milestones.jsonl": MilestoneRow,
    "lives.jsonl": LifeEvent,
    "seen.jsonl": SeenRow,
}
"""Every append-only table of a run directory and the record type of its lines."""

MANIFEST = "run.json"
LOGS = "logs.txt"
MINE = "mine"
SWEEPS = "sweeps.jsonl"
"""Beside the runs of a sweep (``mfm sweep --out``): one line per sweep that wrote there, with
when it started, its command, its runs and the commit it ran from (``mfm results`` prints them)."""


def check_version(version: Any) -> tuple[str | None, str | None]:
    """Return (error, warning) for a run's ``schema_version``."""
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+", version):
        return f"schema_version must look like '1.0', got {version!r}", None
    major, minor = (int(p) for p in version.split("."))
    if major > SCHEMA_MAJOR:
        return (f"schema_version {version} is newer than this mfm reads ({SCHEMA_VERSION}); "
                "upgrade mfm to open it"), None
    if major < SCHEMA_MAJOR:
        return f"schema_version {version} is older than format 1 and not supported", None
    if minor > SCHEMA_MINOR:
        return None, f"schema_version {version} is newer than {SCHEMA_VERSION}; unknown fields are ignored"
    return None, None


_CLASS = np.zeros(256, np.uint8)
_CLASS[[34, 92, 91, 123, 93, 125]] = [1, 2, 3, 3, 4, 4]
"""Bytes that matter to nesting: 1 quote, 2 backslash, 3 opening and 4 closing bracket."""


def nesting(data: bytes, ends: np.ndarray) -> tuple[int, bool]:
    """How deep the arrays and objects of JSON lines nest, brackets inside strings not
    counted: (the deepest nesting met, whether every line's quotes and brackets balance).

    ``ends``: the offsets of the lines' ends (their newlines). Vectorised over all lines; a
    line that does not balance is not valid JSON (a parser stops on it: the depth met before
    its fault is the one that counts)."""
    arr = np.frombuffer(data, np.uint8)
    cls = _CLASS[arr]
    pos = np.flatnonzero(cls)
    ch = cls[pos]
    k = np.arange(len(pos))
    slash = ch == 2
    preceded = np.zeros(len(pos), bool)
    preceded[1:] = slash[:-1] & (np.diff(pos) == 1)
    chain_start = np.maximum.accumulate(np.where(slash & ~preceded, k, 0))
    backslashes = np.where(preceded, k - chain_start[np.maximum(k - 1, 0)], 0)
    quote = (ch == 1) & (backslashes % 2 == 0)
    quotes = np.cumsum(quote)
    outside = (quotes - quote) % 2 == 0
    step = (outside & (ch == 3)).astype(np.int64) - (outside & (ch == 4))
    cut = np.searchsorted(pos, ends)
    depth = np.r_[0, np.cumsum(step)]
    balanced = not (np.any(np.diff(np.r_[0, quotes][cut], prepend=0) % 2) or np.any(depth[cut] != 0)
                    or depth.min() < 0)
    return int(depth.max()), balanced


def too_deep(raw: bytes) -> bool:
    """Whether the arrays and objects of one JSON text nest deeper than ``MAX_DEPTH``
    (:func:`nesting`; costs two byte counts unless the text holds more than ``MAX_DEPTH``
    opening brackets)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    return nesting(raw, np.array([len(raw)]))[0] > MAX_DEPTH


class NotRegularFile(OSError):
    """A run's file that is a FIFO, socket, device or folder: refused, never read (opening a
    FIFO waits for a writer, reading a device may never end). ``reason`` is the message
    without the file's name, for callers that name the file themselves."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name if name.isprintable() else repr(name)}: {reason}")
        self.reason = reason


def _not_regular(name: str, mode: int) -> NotRegularFile:
    kind = next((what for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                                         (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
                                         (stat.S_ISDIR, "a folder")) if test(mode)), "of an unknown kind")
    return NotRegularFile(name, f"not a regular file ({kind}), not read")


def check_regular(path: str | os.PathLike[str], name: str) -> None:
    """Raise :class:`NotRegularFile` unless ``path`` is a regular file, itself and not through
    a symbolic link (a run's writers never make links; a file a run's row names is resolved and
    checked to stay inside the run by :mod:`mfm.boundary` before it gets here); FileNotFoundError
    (or another OSError) when it cannot be looked at. Opens nothing. ``name`` is how messages
    name the file (never the server's absolute path)."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise NotRegularFile(name, "a symbolic link, not followed (a run's own files are never links)")
    if not stat.S_ISREG(mode):
        raise _not_regular(name, mode)


def open_file(path: str | os.PathLike[str], name: str) -> BinaryIO:
    """Open a run's file for reading (binary) only if it is a regular file: looked at with
    ``stat`` first, then opened without blocking and checked again by descriptor (a file
    swapped since). Every reader of a run's files opens them here (the tables, ``run.json``,
    and through :mod:`mfm.boundary` the files rows name). Raises :class:`NotRegularFile`, OSError."""
    check_regular(path, name)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(name, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class JSONError(ValueError):
    """A JSON text that cannot be taken: not UTF-8, not JSON, or nested too deep."""

    def __init__(self, message: str, lineno: int = 1) -> None:
        super().__init__(message)
        self.lineno = lineno


def parse_json(raw: bytes | str) -> Any:
    """Parse one JSON text from a run's files, refusing what no reader should recurse on.

    Raises :class:`JSONError` with a message fit for a problem report (never RecursionError):
    ``not UTF-8 (byte N)``, ``not valid JSON (… at line L column C)`` or ``nested deeper
    than 64 levels``."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if too_deep(data):
        raise JSONError(f"nested deeper than {MAX_DEPTH} levels")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JSONError(f"not UTF-8 (byte {e.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise JSONError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        msg = getattr(e, "msg", str(e))
        raise JSONError(f"not valid JSON ({msg} at column {getattr(e, 'colno', 0)})",
                        getattr(e, "lineno", 1)) from None


def iter_jsonl(path: Path, label: str | None = None) -> Iterator[tuple[int, Any, Problem | None]]:
    """Yield ``(line_number, parsed_json_or_None, problem_or_None)`` for each non-blank line.

    Never raises for bad content: undecodable bytes, broken JSON, a truncated last line or
    an oversized line each give one Problem naming the file and line. A missing file
    yields nothing.
    """
    name = label or path.name
    try:
        f = open_file(path, name)
    except FileNotFoundError:
        return
    except NotRegularFile as e:
        yield 0, None, Problem(name, 0, e.reason)
        return
    except OSError as e:
        yield 0, None, Problem(name, 0, f"cannot read: {e.strerror or e}")
        return
    with f:
        lineno = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(MAX_LINE_BYTES)
                yield lineno, None, Problem(name, lineno, f"line longer than {MAX_LINE_BYTES} bytes, skipped")
                continue
            complete = raw.endswith(b"\n")
            text = raw.strip()
            if not text:
                continue
            try:
                obj = parse_json(text)
            except JSONError as e:
                if not complete and str(e).startswith("not valid JSON"):
                    yield lineno, None, Problem(name, lineno,
                                                "truncated last line (the writer stopped mid-line), skipped", "warning")
                else:
                    yield lineno, None, Problem(name, lineno, f"{e}, skipped")
                continue
            yield lineno, obj, None


def read_table(path: Path, rtype: type[Record], label: str | None = None
               ) -> tuple[list[tuple[int, Any]], list[Problem]]:
    """Read a JSONL table into ``[(line, record)]`` plus the problems of the lines skipped."""
    name = label or path.name
    rows: list[tuple[int, Any]] = []
    problems: list[Problem] = []
    for lineno, obj, problem in iter_jsonl(path, name):
        if problem:
            problems.append(problem)
            continue
        try:
            rows.append((lineno, rtype.from_dict(obj)))
        except SchemaError as e:
            problems.append(Problem(name, lineno, f"{e}, skipped"))
        except (TypeError, ValueError, OverflowError) as e:
            problems.append(Problem(name, lineno, f"bad value ({e}), skipped"))
    return rows, problems


def read_manifest(run_dir: Path) -> tuple[RunManifest | None, list[Problem]]:
    """Read and check ``run.json``; return (manifest or None, problems)."""
    p = run_dir / MANIFEST
    try:
        with open_file(p, MANIFEST) as f:
            raw = f.read()
    except FileNotFoundError:
        return None, [Problem(MANIFEST, 0, "missing: this folder has no run manifest")]
    except NotRegularFile as e:
        return None, [Problem(MANIFEST, 0, e.reason)]
    except OSError as e:
        return None, [Problem(MANIFEST, 0, f"cannot read: {e.strerror or e}")]
    return parse_manifest(raw)


def parse_manifest(raw: bytes) -> tuple[RunManifest | None, list[Problem]]:
    """Check the bytes of a ``run.json`` (wherever they were read); (manifest or None, problems)."""
    try:
        obj = parse_json(raw)
    except JSONError as e:
        return None, [Problem(MANIFEST, e.lineno, str(e))]
    problems: list[Problem] = []
    if isinstance(obj, dict):
        err, warn = check_version(obj.get("schema_version"))
        if err:
            return None, [Problem(MANIFEST, 1, err)]
        if warn:
            problems.append(Problem(MANIFEST, 1, warn, "warning"))
    try:
        return RunManifest.from_dict(obj), problems
    except (SchemaError, TypeError, ValueError) as e:
        return None, problems + [Problem(MANIFEST, 1, str(e))]


def frame_chunk(episode_path: str, index: int) -> tuple[str, int]:
    """Where the ``index``-th frame of an episode lives: (chunk path, row in the strip).

    Strips are lossless WebP: 16% smaller than PNG on Crafter frames (its subtract-green
    transform suits the night noise, which is the same in all channels); see
    docs/run-format.md."""
    return f"{episode_path}/frames/{index // FRAMES_PER_CHUNK:05d}.webp", index % FRAMES_PER_CHUNK
