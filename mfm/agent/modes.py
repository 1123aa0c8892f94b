"""Memory modes: what each method (and each MFM ablation) may read and write.

The policy, the atoms and the survival and tech-tree logic are the same for every method;
only the memory the policy can consult differs. :data:`TABLE` declares, once, which method
gets which affordance (:data:`AFFORDANCES`); :func:`mode_for` turns a row (with ablations)
into the :class:`MemoryMode` the policy and the runner read, and :func:`table_text` prints it
(``mfm methods``, ``mfm results``).

The reference is the MFM paper's Table 6 and §D.3 (Su et al., arXiv 2610.22686): every method
shares the action and procedure reference, the knowledge sections, the rules and a per-turn
state block; Direct alone omits [RECENT] and [MAP]; every method with memory can write files
and run stored procedures through the same interface; PRO-LONG keeps programmatic text logs;
VISTA keeps lossless frames addressed by turn and frame identifiers, with two notes files as
its writable memory; MFM adds the searchable index linked to its episodes.

Where this table departs from the paper, and why:

- *No model.* The shared brief (actions, procedures, rules, knowledge sections) is the
  scripted policy's competence: the same atoms, tech tree and survival rules for everyone.
- *[MAP] is the harness's spatial grid* (cells walked, blocked, opened; routing over them)
  for every method with memory. The paper lists [MAP] in the shared state block and the grid
  among MFM's records (§D.2); a map that only MFM could route over made routing, not memory,
  part of the comparison (issue 44), so the grid's routing and coverage go to all. A cut tree
  or a mined rock is then known to be gone by every method with a map.
- *Notes are revised the same way for every method with notes*: at deaths and every 25
  episodes (``consolidation``), hazards, rules, caps and the plan. The paper's consolidation
  is MFM's; here only MFM's revision cites the episodes it rests on (its index), which is the
  part the paper credits to MFM.
- *PRO-LONG's log records what its text perception saw*: each cell of a notable material
  (``rules.CONTENT``) the first time the view shows it, as ``[SEEN]`` lines of ``logs.txt``
  beside the events and positions. The paper's PRO-LONG logs its text observations; without
  these lines it could not remember a place it saw and did not use (issue 44).
- *VISTA chooses turns by rule*: a model picks which turn's frames to reopen; the scripted
  VISTA opens the newest turns it has not looked at, then walks back through older turns,
  ``inspect_episodes // 4`` per lookup (as many as MFM opens per content search), wrapping to
  the newest at turn 0, so any earlier turn's frames are reachable by id without an index.
- *The notes budget* (a task's ``notes_tokens``) caps GUIDE.md for every method with notes;
  the ``no-budget`` arm removes it, for every method with notes, not only MFM.
- *Direct* also keeps nothing in its head between turns (failed targets, the current
  exploration target); it explores with a seeded generator.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Affordance:
    """One column of :data:`TABLE`: its name and what a method with it may do."""

    name: str
    meaning: str


AFFORDANCES: tuple[Affordance, ...] = (
    Affordance("state", "[STATE] block each turn: view, vitals, inventory, milestones, with the shared brief "
                        "(actions, procedures reference, rules, knowledge sections)"),
    Affordance("recent", "[RECENT]: the last turns' actions and outcomes, and a working context between turns"),
    Affordance("map", "[MAP]: the harness's spatial grid: where it has been, routing over walked and blocked "
                      "cells, cells cut or mined"),
    Affordance("notes", "writes GUIDE.md and working.md (capped by the task's notes budget unless no-budget)"),
    Affordance("procedures", "stores and runs procedures (table_tool, safe_sleep)"),
    Affordance("consolidation", "revises its notes at deaths and every N episodes"),
    Affordance("search", "how it searches its past: the episode index (events and what frames showed), "
                         "grep of the text log (events, positions, [SEEN] lines), or not at all"),
    Affordance("frames", "how it reopens stored frames to decode them: episodes named by an index search, "
                         "by turn id (any earlier turn), or not at all"),
)
"""The columns of :data:`TABLE`."""

TABLE: dict[str, dict[str, bool | str | None]] = {
    "direct": {"state": True, "recent": False, "map": False, "notes": False, "procedures": False,
               "consolidation": False, "search": None, "frames": None},
    "pro-long": {"state": True, "recent": True, "map": True, "notes": True, "procedures": True,
                 "consolidation": True, "search": "log", "frames": None},
    "vista": {"state": True, "recent": True, "map": True, "notes": True, "procedures": True,
              "consolidation": True, "search": None, "frames": "turn"},
    "mfm": {"state": True, "recent": True, "map": True, "notes": True, "procedures": True,
            "consolidation": True, "search": "index", "frames": "index"},
}
"""Which method gets which affordance (see the module docstring for the reference)."""

ARMS: tuple[str, ...] = ("no-budget",)
"""Ablations every method with notes may take (an arm of the comparison), not only MFM."""


@dataclass(frozen=True)
class MemoryMode:
    """The memory capabilities of one method (a :data:`TABLE` row, with ablations).

    ``coverage``: where "where have I been" comes from (``grid``, or None). ``grid_routing``:
    atoms route over the spatial grid. ``search``: ``index`` or ``log`` (grep) or None.
    ``frames``: how frames are chosen for inspection, ``index`` (after a search) or ``turn``
    (by turn id: the newest not looked at, then older ones), or None. ``text_sites``: recall
    places from text (collected / drank / seen lines). ``notes``: may write GUIDE.md and
    working.md. ``in_head``: keeps the working context of recent turns (recent actions, failed
    targets, the current exploration target); off for ``direct``. ``content``: index searches
    look up what episodes' frames showed (``seen.jsonl``) over the whole history, rather than
    the episodes since the last inspection. ``budget``: the task's cap on GUIDE.md applies.
    """

    label: str
    recent: bool = True
    in_head: bool = True
    coverage: str | None = "grid"
    grid_routing: bool = True
    notes: bool = True
    search: str | None = "index"
    frames: str | None = "index"
    text_sites: bool = False
    procedures: bool = True
    consolidation: bool = True
    content: bool = True
    budget: bool = True


def _from_row(method: str, row: dict[str, bool | str | None]) -> MemoryMode:
    """The memory mode a :data:`TABLE` row declares."""
    return MemoryMode(method, recent=bool(row["recent"]), in_head=bool(row["recent"]),
                      coverage="grid" if row["map"] else None, grid_routing=bool(row["map"]),
                      notes=bool(row["notes"]), search=row["search"], frames=row["frames"],  # type: ignore[arg-type]
                      text_sites=row["search"] == "log", procedures=bool(row["procedures"]),
                      consolidation=bool(row["consolidation"]), content=row["search"] == "index")


BASELINES: dict[str, MemoryMode] = {m: _from_row(m, row) for m, row in TABLE.items()}
MFM = BASELINES["mfm"]
ABLATION_CHANGES = {
    "no-frames": {"frames": None, "text_sites": True, "content": False},
    "no-index": {"search": None, "frames": "turn", "content": False},
    "no-procedures": {"procedures": False},
    "no-consolidation": {"consolidation": False},
    "no-content": {"content": False},
    "no-budget": {"budget": False},
}


def allowed(method: str, ablation: str) -> bool:
    """Whether ``method`` may take ``ablation``: MFM any; the others only an :data:`ARMS`
    one, and only if they write notes."""
    return method == "mfm" or (ablation in ARMS and bool(TABLE[method]["notes"]))


def mode_for(method: str, ablations: tuple[str, ...] = ()) -> MemoryMode:
    """The memory mode of ``method`` with ``ablations`` switched off."""
    mode = BASELINES[method]
    for a in ablations:
        if not allowed(method, a):
            raise ValueError(f"method {method!r} cannot take ablation {a!r}")
        mode = replace(mode, **ABLATION_CHANGES[a])
    if ablations:
        mode = replace(mode, label=f"{method} {' '.join(ablations)}")
    return mode


def label(method: str, ablations: tuple[str, ...] | list[str] = ()) -> str:
    """How a run's memory mode is named in tables: the method, then its ablations."""
    return " ".join([method, *ablations])


def _cell(value: bool | str | None) -> str:
    return "yes" if value is True else "-" if value in (False, None) else str(value)


def table_rows() -> list[list[str]]:
    """:data:`TABLE` as rows of text, a header first (the method, then each affordance)."""
    head = ["method", *(a.name for a in AFFORDANCES)]
    return [head] + [[m, *(_cell(row[a.name]) for a in AFFORDANCES)] for m, row in TABLE.items()]


def table_text(markdown: bool = True) -> str:
    """The affordance table (Markdown, or aligned plain text), then what each column means and
    the arms every method with notes may take."""
    rows = table_rows()
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += [""] + [f"- {a.name}: {a.meaning}" for a in AFFORDANCES]
    lines.append(f"- arms for every method with notes: {', '.join(ARMS)}; MFM also takes "
                 f"{', '.join(a for a in ABLATION_CHANGES if a not in ARMS)}")
    return "\n".join(lines)
