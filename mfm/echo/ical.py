"""In-context analogical learning (ICAL) for Crafter, from scratch.

The agent is not given Crafter's recipes. It learns from its own attempts: what it tried
(an action, the tile it faced), what it had, what was within reach, and what changed.
:func:`describe` turns an attempt into a CSD; :func:`refine` updates a task's descriptor
after another attempt (requirements are what every success had; a failure is kept as a
context not to repeat). :func:`induce` proposes *new* tasks by analogy: a known task's name
is a pattern (verb, material, form), one slot is replaced by a value seen in the exemplars
most similar to it, and the exemplars fill in what the new task probably needs, each along
the axis that carries it (attr: what is consumed; struct: which station must be near;
func: which forms exist for a material; proc: the prerequisite chain; inter: which action
does it). :func:`precheck` tests a candidate against the current inventory and surroundings
before it is tried.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from mfm.echo.csd import AXES, CSD, CSD_VERSION
from mfm.echo.library import CSDLibrary, Match

CHAIN = 6
"""Steps kept in a descriptor's ``proc.chain`` (its ordered plan)."""
STATIONS = ("table", "furnace", "water", "lava", "grass", "sand", "tree", "stone", "coal", "iron", "diamond")
ROLES = {"pickaxe": "tool", "sword": "weapon", "table": "station", "furnace": "station", "plant": "food",
         "sapling": "seed", "cow": "food", "drink": "drink", "wood": "material", "stone": "material",
         "coal": "material", "iron": "material", "diamond": "material", "zombie": "enemy", "skeleton": "enemy"}


BLANK: dict[str, dict] = {
    "struct": {"near": [], "faces": None}, "attr": {"consumes": {}, "tools": [], "materials": []},
    "proc": {"chain": [], "gives": {}}, "inter": {"verb": None, "action": None, "target": None, "failed_contexts": []}}
"""What an induced candidate holds on an axis the analogy may not use (the name-derived
``func`` axis is always rebuilt from the new task's name)."""


@dataclass(frozen=True)
class Attempt:
    """One try, as the agent perceived it (honest inputs only)."""

    action: str
    target: str | None
    inventory_before: dict
    inventory_after: dict
    nearby: tuple[str, ...]
    unlocked: tuple[str, ...] = ()
    chain: tuple[str, ...] = ()
    """The ordered plan behind the try: the known tasks that gave what it used (items,
    tools) and placed the stations within reach."""
    episodes: tuple[str, ...] = ()
    step: int = 0


def task_name(a: Attempt) -> str:
    """What the attempt was for: the achievement it unlocked, else the action's own name
    (``make_*``, ``place_*``); for ``do``: ``collect_<item>`` for the item it gave (a repeat
    of a success unlocks nothing), else ``defeat_``/``eat_``/``collect_<target>`` by the
    target's role."""
    if a.unlocked:
        return a.unlocked[0]
    if a.action.startswith(("make_", "place_")):
        return a.action
    if a.action == "do" and a.target:
        _, gained = _delta(a)
        role = ROLES.get(a.target)
        if "food" in gained or (not gained and role == "food"):
            return f"eat_{a.target}"
        if gained:
            return f"collect_{sorted(gained)[0]}"
        return f"{'defeat' if role == 'enemy' else 'collect'}_{a.target}"
    return a.action


def slots(task: str) -> tuple[str, str | None, str]:
    """(verb, material, form) of a task name: ``make_wood_pickaxe`` → (make, wood, pickaxe)."""
    parts = task.split("_")
    if len(parts) >= 3:
        return parts[0], parts[1], "_".join(parts[2:])
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return task, None, task


def _delta(a: Attempt) -> tuple[dict, dict]:
    keys = set(a.inventory_before) | set(a.inventory_after)
    d = {k: a.inventory_after.get(k, 0) - a.inventory_before.get(k, 0) for k in keys}
    return {k: -v for k, v in d.items() if v < 0}, {k: v for k, v in d.items() if v > 0}


def describe(a: Attempt, success: bool, *, run_id: str = "", time: str = "") -> CSD:
    """A first CSD for the task an attempt was for."""
    task = task_name(a)
    verb, material, form = slots(task)
    consumed, gained = _delta(a)
    tools = sorted(k for k, v in a.inventory_before.items() if v > 0 and ROLES.get(k.split("_")[-1]) in
                   ("tool", "weapon") and k not in consumed)
    near = sorted(set(a.nearby) & set(STATIONS))
    return CSD(
        id=f"task:{task}", task=task,
        meta={"time": time, "source": "crafter", "version": CSD_VERSION, "run": run_id, "step": a.step},
        struct={"near": near, "faces": a.target},
        attr={"consumes": consumed if success else {}, "tools": tools if success else [],
              "materials": sorted({m for m in (material, *consumed, *gained, *a.nearby)
                                   if m and ROLES.get(m) == "material"})},
        proc={"chain": list(a.chain[-CHAIN:]), "gives": gained if success else {}},
        func={"product": f"{material}_{form}" if material else form, "form": form,
              "role": ROLES.get(form, "other"), "material": material},
        inter={"verb": verb, "action": a.action, "target": a.target,
               "failed_contexts": [] if success else [_context(a)]},
        status="verified" if success else "failed", successes=int(success), failures=int(not success),
        episodes=a.episodes,
    )


def _context(a: Attempt) -> dict:
    return {"have": {k: v for k, v in sorted(a.inventory_before.items()) if v > 0},
            "near": sorted(set(a.nearby) & set(STATIONS))}


def refine(known: CSD, a: Attempt, success: bool) -> CSD:
    """A task's descriptor after one more attempt. Requirements shrink to what every success
    had; a failure's context is remembered so the same conditions are not tried again."""
    consumed, gained = _delta(a)
    ctx = _context(a)
    if success:
        near = sorted(set(known.struct.get("near", [])) & set(ctx["near"])) if known.successes else ctx["near"]
        tools = known.attr.get("tools", []) if known.successes else sorted(
            k for k in ctx["have"] if ROLES.get(k.split("_")[-1]) in ("tool", "weapon") and k not in consumed)
        if known.successes:
            tools = sorted(set(tools) & set(ctx["have"]))
        chain = known.proc.get("chain", []) if known.successes else list(a.chain[-CHAIN:])
        known = replace(known, struct={**known.struct, "near": near},
                        attr={**known.attr, "consumes": consumed, "tools": tools},
                        proc={**known.proc, "chain": chain, "gives": gained or known.proc.get("gives", {})})
    else:
        fails = list(known.inter.get("failed_contexts", []))
        if ctx not in fails:
            fails.append(ctx)
        known = replace(known, inter={**known.inter, "failed_contexts": fails[-8:]})
    return known.with_outcome(success, a.episodes)


def _substitute(value, old: str, new: str):
    """Replace a slot value everywhere in symbolic content (whole names and name parts)."""
    return json.loads(re.sub(rf'(?<=["_]){re.escape(old)}(?=["_])', new, json.dumps(value)))


def induce(rep: CSD, matches: Sequence[Match], library: CSDLibrary, vocabulary: Iterable[str],
           axes: Sequence[str] = AXES) -> list[CSD]:
    """New candidate tasks by analogy from ``rep`` and its exemplars ``matches``.

    ``vocabulary``: task names the agent can name (its action names and the goals it was
    told of); a candidate outside it is not proposed. ``axes``: the axes the analogy may
    use (an ablation removes one: the candidate then carries nothing on that axis)."""
    vocab = set(vocabulary)
    verb, material, form = slots(rep.task)
    exemplars = [m.csd for m in matches]
    values: dict[int, set[str]] = {1: set(), 2: set()}
    for c in exemplars + [rep]:
        _, mat, frm = slots(c.task)
        if mat:
            values[1].add(mat)
        for m in c.attr.get("materials", []) if "attr" in axes else []:
            values[1].add(m)
        if "func" in axes:
            values[2].add(frm)
    out: dict[str, CSD] = {}
    for slot, pool in values.items():
        old = material if slot == 1 else form
        if old is None:
            continue
        for new in sorted(pool - {old}):
            task = rep.task.replace(old, new, 1) if slot == 1 else rep.task[: -len(form)] + new
            if task in out or task not in vocab:
                continue
            have = library.get(f"task:{task}")
            if have is not None and have.status == "verified":
                continue
            out[task] = _candidate(rep, task, old, new, exemplars, matches, axes)
    ranked = sorted(out.values(), key=lambda c: -sum(e["score"] for e in c.induced_from))
    return ranked


def _candidate(rep: CSD, task: str, old: str, new: str, exemplars: list[CSD], matches: Sequence[Match],
               axes: Sequence[str]) -> CSD:
    """The predicted descriptor of ``task``: ``rep`` with the slot replaced, then each axis
    corrected from the exemplar that shares the new value (if that axis may be used): the most
    similar verified one whose name holds it, else one whose materials hold it."""
    body = {a: _substitute(rep.axis(a), old, new) for a in AXES}
    evidence = [{"id": rep.id, "role": "representative", "score": 1.0}]
    verified = [e for e in exemplars if e.status == "verified"]
    donor = next((e for e in verified if new in slots(e.task)), None) or \
        next((e for e in verified if new in e.attr.get("materials", [])), None)
    if donor is not None:
        m = next(m for m in matches if m.csd.id == donor.id)
        evidence.append({"id": donor.id, "role": f"shares {new}", "score": round(m.score, 4),
                         "axes": {a: round(v, 4) for a, v in m.per_axis.items() if a in axes}})
        _, dmat, _ = slots(donor.task)
        if "attr" in axes and dmat == new:
            body["attr"] = {**body["attr"], "consumes": dict(donor.attr.get("consumes", {})),
                            "tools": list(donor.attr.get("tools", []))}
        if "struct" in axes and dmat == new:
            body["struct"] = {**body["struct"], "near": list(donor.struct.get("near", []))}
        if "proc" in axes:
            steps = donor.proc.get("chain", []) + [donor.task] + body["proc"].get("chain", [])
            body["proc"] = {**body["proc"], "chain": [t for t in dict.fromkeys(steps) if t != task][-CHAIN:]}
    for a in AXES:
        if a not in axes and a != "func":
            body[a] = dict(BLANK[a])
    verb, material, form = slots(task)
    body["func"] = {**body["func"], "product": f"{material}_{form}" if material else form, "form": form,
                    "material": material}
    body["inter"] = {**body["inter"], "failed_contexts": []}
    return CSD(id=f"task:{task}", task=task, meta={**rep.meta, "induced": True}, status="candidate",
               induced_from=tuple(evidence), **body)


def precheck(c: CSD, inventory: dict, nearby: Iterable[str]) -> tuple[bool, list[str]]:
    """Can ``c`` be tried now? Returns (ok, what is missing). Conditions identical to a
    remembered failure count as missing "something new"."""
    missing = [f"{v} {k}" for k, v in c.attr.get("consumes", {}).items() if inventory.get(k, 0) < v]
    missing += [t for t in c.attr.get("tools", []) if inventory.get(t, 0) < 1]
    near = set(nearby)
    missing += [f"{s} nearby" for s in c.struct.get("near", []) if s not in near]
    ctx = {"have": {k: v for k, v in sorted(inventory.items()) if v > 0}, "near": sorted(near & set(STATIONS))}
    if not missing and ctx in c.inter.get("failed_contexts", []):
        missing.append("something new (this exact situation failed before)")
    return not missing, missing
