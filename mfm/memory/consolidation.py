"""Consolidation: revise knowledge (GUIDE.md) and the working plan (working.md) from evidence.

Consolidation only has agent-written memory to write to: the episode store and the index
are left unchanged by construction. Knowledge is a list of facts, one line each, grouped
in sections; each line carries a stable key and the ids of the episodes that support it:

    - [res:iron@40,12] iron at (40, 12) (ep_000120, ep_000133)

A new fact with the same key revises the line (its sources merge); a retracted fact
removes it. Every change is one logged write with author, reason and sources. With a budget
(``budget_tokens``, tokens estimated as characters / 4, as a model's context would count
them) the facts written longest ago are dropped until the file fits: the notes then cannot
carry everything, and the episodes stay the only full record.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from mfm.memory.agent_memory import AgentMemory
from mfm.schema import INHERITED

GUIDE = "mine/GUIDE.md"
WORKING = "mine/working.md"
_SRC = rf"(?:{INHERITED}:)?ep_\d+"
FACT_LINE = re.compile(rf"^- \[(?P<key>[^\]]+)\] (?P<text>.*?)(?: \((?P<src>{_SRC}(?:, {_SRC})*)\))?$")


@dataclass(frozen=True)
class Fact:
    """One line of knowledge. ``retract=True`` removes the line with this key."""

    key: str
    text: str
    section: str = "Notes"
    sources: tuple[str, ...] = ()
    retract: bool = False


@dataclass
class ConsolidationReport:
    """What one consolidation changed."""

    added: list[str] = field(default_factory=list)
    revised: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    plan_changed: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.added or self.revised or self.removed or self.evicted or self.plan_changed)


def parse_guide(text: str) -> dict[str, Fact]:
    """Facts of a GUIDE.md in file order (lines without a key are not facts and are dropped)."""
    facts: dict[str, Fact] = {}
    section = "Notes"
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        m = FACT_LINE.match(line)
        if m:
            src = tuple(s.strip() for s in m["src"].split(",")) if m["src"] else ()
            facts[m["key"]] = Fact(m["key"], m["text"], section, src)
    return facts


def render_guide(facts: Iterable[Fact], title: str = "Knowledge") -> str:
    """GUIDE.md text: sections in first-seen order, one line per fact."""
    sections: dict[str, list[Fact]] = {}
    for f in facts:
        sections.setdefault(f.section, []).append(f)
    out = [f"# {title}", ""]
    for name, items in sections.items():
        out += [f"## {name}", ""]
        for f in items:
            src = f" ({', '.join(f.sources)})" if f.sources else ""
            out.append(f"- [{f.key}] {f.text}{src}")
        out.append("")
    return "\n".join(out)


@dataclass(frozen=True)
class Target:
    """A plan target: a place to go to or look at, and why."""

    x: int
    y: int
    label: str


@dataclass(frozen=True)
class WorkingPlan:
    """working.md: the current plan, the next prediction, unresolved contradictions."""

    goal: str
    targets: tuple[Target, ...] = ()
    prediction: str = ""
    contradictions: tuple[str, ...] = ()

    def render(self) -> str:
        lines = ["# Working memory", "", f"Goal: {self.goal}", "", "## Plan", ""]
        lines += [f"{i}. ({t.x}, {t.y}) {t.label}" for i, t in enumerate(self.targets, 1)] or ["(no targets)"]
        lines += ["", "## Next prediction", "", self.prediction or "(none)", "", "## Contradictions", ""]
        lines += [f"- {c}" for c in self.contradictions] or ["(none)"]
        return "\n".join(lines) + "\n"


PLAN_LINE = re.compile(r"^\d+\. \((-?\d+), (-?\d+)\) (.*)$")


def parse_plan_targets(text: str) -> list[Target]:
    """The targets listed in a working.md."""
    return [Target(int(m[1]), int(m[2]), m[3]) for m in map(PLAN_LINE.match, text.splitlines()) if m]


CHARS_PER_TOKEN = 4
"""The token estimate of a notes budget (the LLM policy's prompt budgets count the same way)."""


def evict(current: dict[str, Fact], budget_tokens: int) -> list[str]:
    """Drop facts from the front of ``current`` (the least recently written first) until its
    GUIDE.md fits ``budget_tokens``; return the keys dropped."""
    dropped: list[str] = []
    while current and len(render_guide(current.values())) > budget_tokens * CHARS_PER_TOKEN:
        key = next(iter(current))
        del current[key]
        dropped.append(key)
    return dropped


def consolidate(memory: AgentMemory, facts: Iterable[Fact], *, plan: WorkingPlan | None = None,
                step: int, life: int = 0, turn: int | None = None, reason: str,
                author: str = "consolidation", budget_tokens: int | None = None) -> ConsolidationReport:
    """Merge ``facts`` into GUIDE.md and replace working.md with ``plan``; log each write.

    With ``budget_tokens`` a fact added or revised moves to the end of the file's order and
    the least recently written facts are evicted while GUIDE.md is over the budget."""
    report = ConsolidationReport()
    current = parse_guide(memory.read(GUIDE) or "")
    sources: list[str] = []
    for f in facts:
        old = current.get(f.key)
        if f.retract:
            if old is not None:
                del current[f.key]
                report.removed.append(f.key)
                sources += f.sources
            continue
        merged = tuple(dict.fromkeys((old.sources if old else ()) + f.sources))
        new = Fact(f.key, f.text, f.section if old is None else old.section, merged)
        if old is None:
            report.added.append(f.key)
        elif (old.text, old.sources) != (new.text, new.sources):
            report.revised.append(f.key)
        else:
            continue
        if budget_tokens is not None:
            current.pop(f.key, None)
        current[f.key] = new
        sources += f.sources
    if budget_tokens is not None:
        report.evicted = evict(current, budget_tokens)
    if report.added or report.revised or report.removed or report.evicted:
        why = f"{reason}: +{len(report.added)} ~{len(report.revised)} -{len(report.removed)}"
        if report.evicted:
            why += f" ({len(report.evicted)} evicted: over the notes budget of {budget_tokens} tokens)"
        memory.write(GUIDE, render_guide(current.values()), author=author, reason=why, sources=sources,
                     step=step, life=life, turn=turn)
    if plan is not None:
        w = memory.write(WORKING, plan.render(), author=author, reason=reason, step=step, life=life, turn=turn)
        report.plan_changed = w is not None
    return report
