"""Procedural memory: reusable procedures the agent writes as data, never as code.

A procedure is a JSON file ``mine/procedures/NAME.json``: a list of atoms with arguments
(``"$param"`` strings are filled from the call's parameters), preconditions, the episodes
it was learned from, a version, and whether it is disabled (and why, with the episodes
that showed it). Every save goes through :class:`~mfm.memory.agent_memory.AgentMemory`,
so each version stays in the history.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable

from mfm.memory.agent_memory import AgentMemory
from mfm.schema import EPISODE_REF

NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PRECONDITIONS = ("have", "near", "min_vital")
PROC_DIR = "mine/procedures"


class ProcedureError(ValueError):
    """A procedure that is not valid data; the message says which part."""


@dataclass(frozen=True)
class Procedure:
    """A declarative procedure: ordered atoms with arguments and preconditions."""

    name: str
    description: str
    steps: tuple[dict, ...]
    params: tuple[str, ...] = ()
    preconditions: tuple[dict, ...] = ()
    sources: tuple[str, ...] = ()
    version: int = 1
    uses: int = 0
    failures: int = 0
    disabled: bool = False
    disabled_reason: str | None = None
    disabled_sources: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("extra")
        d.update(self.extra)
        return json.dumps(d, indent=1, ensure_ascii=False) + "\n"

    def bind(self, args: dict[str, Any]) -> list[dict]:
        """The atom calls with ``$param`` placeholders filled from ``args``."""
        missing = [p for p in self.params if p not in args]
        if missing:
            raise ProcedureError(f"{self.name}: missing parameter(s) {', '.join(missing)}")

        def fill(v: Any) -> Any:
            if isinstance(v, str) and v.startswith("$"):
                return args[v[1:]]
            return v

        return [{"atom": s["atom"], "args": {k: fill(v) for k, v in s.get("args", {}).items()}} for s in self.steps]


def parse_procedure(obj: Any, atoms: Iterable[str]) -> Procedure:
    """Validate a procedure given as parsed JSON against the known atom names."""
    allowed = set(atoms)
    if not isinstance(obj, dict):
        raise ProcedureError("a procedure must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ProcedureError(f"name must be lower_snake_case, got {name!r}")
    steps = obj.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ProcedureError(f"{name}: steps must be a non-empty list")
    params = obj.get("params", [])
    if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
        raise ProcedureError(f"{name}: params must be a list of names")
    for i, s in enumerate(steps):
        if not isinstance(s, dict) or s.get("atom") not in allowed:
            raise ProcedureError(f"{name}: steps[{i}].atom must be one of {', '.join(sorted(allowed))}")
        args = s.get("args", {})
        if not isinstance(args, dict) or not all(isinstance(v, (str, int, float, bool)) for v in args.values()):
            raise ProcedureError(f"{name}: steps[{i}].args must map names to plain values")
        for v in args.values():
            if isinstance(v, str) and v.startswith("$") and v[1:] not in params:
                raise ProcedureError(f"{name}: steps[{i}] uses undeclared parameter {v}")
    pre = obj.get("preconditions", [])
    if not isinstance(pre, list) or not all(isinstance(p, dict) and len(p) == 1 and next(iter(p)) in PRECONDITIONS
                                            for p in pre):
        raise ProcedureError(f"{name}: each precondition is one of {', '.join(PRECONDITIONS)}")
    sources = tuple(obj.get("sources", ()))
    if not all(isinstance(s, str) and EPISODE_REF.match(s) for s in sources):
        raise ProcedureError(f"{name}: sources must be episode ids")
    known = {f for f in Procedure.__dataclass_fields__ if f != "extra"}
    extra = {k: v for k, v in obj.items() if k not in known}
    return Procedure(
        name=name, description=str(obj.get("description", "")), steps=tuple(steps), params=tuple(params),
        preconditions=tuple(pre), sources=sources, version=int(obj.get("version", 1)),
        uses=int(obj.get("uses", 0)), failures=int(obj.get("failures", 0)),
        disabled=bool(obj.get("disabled", False)), disabled_reason=obj.get("disabled_reason"),
        disabled_sources=tuple(obj.get("disabled_sources", ())), extra=extra,
    )


class ProceduralMemory:
    """Procedures stored under ``mine/procedures/`` through agent-written memory."""

    def __init__(self, memory: AgentMemory, atoms: Iterable[str]) -> None:
        self.memory = memory
        self.atoms = frozenset(atoms)

    def path(self, name: str) -> str:
        return f"{PROC_DIR}/{name}.json"

    def load(self, name: str, as_of_step: int | None = None) -> Procedure | None:
        text = self.memory.read(self.path(name), as_of_step)
        return None if text is None else parse_procedure(json.loads(text), self.atoms)

    def names(self, include_disabled: bool = False) -> list[str]:
        out = []
        for p in self.memory.files():
            if p.startswith(PROC_DIR + "/") and p.endswith(".json"):
                name = p[len(PROC_DIR) + 1:-5]
                proc = self.load(name)
                if proc and (include_disabled or not proc.disabled):
                    out.append(name)
        return out

    def save(self, proc: Procedure, **kw) -> Procedure:
        """Validate and store ``proc``; a changed existing procedure gets the next version."""
        parse_procedure(json.loads(proc.to_json()), self.atoms)
        old = self.load(proc.name)
        if old is not None and (old.steps, old.params, old.preconditions) != (proc.steps, proc.params, proc.preconditions):
            proc = replace(proc, version=old.version + 1)
        self.memory.write(self.path(proc.name), proc.to_json(), **kw)
        return proc

    def disable(self, name: str, *, reason: str, sources: Iterable[str], **kw) -> Procedure | None:
        """Mark a procedure disabled, naming why and the episodes that showed it."""
        proc = self.load(name)
        if proc is None or proc.disabled:
            return proc
        srcs = tuple(sources)
        proc = replace(proc, disabled=True, disabled_reason=reason, disabled_sources=srcs)
        self.memory.write(self.path(name), proc.to_json(), op="disable", reason=reason, sources=srcs, **kw)
        return proc
