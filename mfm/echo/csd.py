"""Context State Descriptors (CSD): a learned task described along five transfer axes.

After Echo (CVPR 2026): ``struct`` (spatial layout: what must be nearby, what is faced,
reachability), ``attr`` (materials and their properties), ``proc`` (the ordered state
transitions), ``func`` (what the product is for: tool, weapon, station, food…), ``inter``
(how the agent acts and what feedback it got), plus ``meta`` (time, source environment,
version, run and episodes). Each axis holds symbolic JSON and, once vectorised, a vector.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterator

AXES: tuple[str, ...] = ("struct", "attr", "proc", "func", "inter")

CONFIGS: dict[str, tuple[str, ...] | None] = {
    "passive": None, "ical": AXES, **{f"ical-no-{a}": tuple(x for x in AXES if x != a) for a in AXES}}
"""Learner configuration name -> the axes ICAL may use (None: no ICAL, retrieval only)."""

ATTEMPTS_FILE = "echo.jsonl"
"""A learner run's Echo episodes, one line each (beside ``csd.jsonl``)."""
STATUSES = ("verified", "candidate", "failed")
CSD_VERSION = 1


@dataclass(frozen=True)
class CSD:
    """One task's descriptor. ``status``: verified (seen to work), candidate (induced, not
    tried yet) or failed (tried, did not work). ``induced_from`` records the analogy: the
    exemplar ids and their per-axis similarity."""

    id: str
    task: str
    meta: dict
    struct: dict
    attr: dict
    proc: dict
    func: dict
    inter: dict
    status: str = "verified"
    successes: int = 0
    failures: int = 0
    episodes: tuple[str, ...] = ()
    induced_from: tuple[dict, ...] = ()
    vectors: dict = field(default_factory=dict)

    def axis(self, name: str) -> dict:
        if name not in AXES:
            raise KeyError(f"unknown axis {name!r}; axes are {', '.join(AXES)}")
        return getattr(self, name)

    def to_json(self) -> str:
        d = asdict(self)
        d["episodes"] = list(self.episodes)
        d["induced_from"] = list(self.induced_from)
        return json.dumps(d, sort_keys=False, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "CSD":
        """Build from parsed JSON; raise ValueError naming what is wrong."""
        if not isinstance(d, dict):
            raise ValueError("a CSD must be a JSON object")
        for k in ("id", "task"):
            if not isinstance(d.get(k), str) or not d[k]:
                raise ValueError(f"{k} must be a non-empty string")
        for k in ("meta", *AXES):
            if not isinstance(d.get(k, {}), dict):
                raise ValueError(f"{k} must be an object")
        if d.get("status", "verified") not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}")
        return cls(id=d["id"], task=d["task"], meta=d.get("meta", {}), struct=d.get("struct", {}),
                   attr=d.get("attr", {}), proc=d.get("proc", {}), func=d.get("func", {}), inter=d.get("inter", {}),
                   status=d.get("status", "verified"), successes=int(d.get("successes", 0)),
                   failures=int(d.get("failures", 0)), episodes=tuple(d.get("episodes", ())),
                   induced_from=tuple(d.get("induced_from", ())), vectors=d.get("vectors", {}) or {})

    def with_outcome(self, success: bool, episodes: tuple[str, ...] = ()) -> "CSD":
        """This descriptor after one more attempt."""
        return replace(
            self, successes=self.successes + success, failures=self.failures + (not success),
            episodes=tuple(dict.fromkeys(self.episodes + episodes)),
            status="verified" if success or self.status == "verified" else "failed")


def tokens(value: Any, prefix: str = "") -> Iterator[str]:
    """Symbolic content as tokens: every key path, every value and ``path=value``.

    ``{"consumes": {"wood": 1}}`` gives ``consumes``, ``consumes.wood``, ``wood``,
    ``consumes.wood=1``. Names joined by ``_`` also give their parts (``wood_pickaxe`` →
    ``wood``, ``pickaxe``), so shared materials and shared forms meet."""
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from _words(str(k))
            yield from tokens(v, path)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from tokens(v, f"{prefix}[]" if prefix else "[]")
            if isinstance(v, (dict, list, tuple)):
                yield f"{prefix}[{i}]"
    elif value is not None:
        text = str(value).lower()
        yield f"{prefix}={text}" if prefix else text
        yield from _words(text)


def _words(text: str) -> Iterator[str]:
    yield text
    parts = text.replace("-", "_").split("_")
    if len(parts) > 1:
        yield from (p for p in parts if p)
