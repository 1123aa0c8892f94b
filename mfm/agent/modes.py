"""Memory modes: what each method (and each MFM ablation) may read and write.

The policy, the atoms and the survival and tech-tree logic are the same for every method;
only the memory the policy can consult differs. A :class:`MemoryMode` is the list of those
capabilities, and :func:`mode_for` gives it for a method and its ablations.

=================  =========================================================================
``mfm``            spatial grid (routing, where I have been), index search -> frame
                   inspection (by what frames showed, over the whole history: the index's
                   content half), GUIDE.md + working.md, procedures, consolidation
``direct``         nothing persistent: each turn sees the state block only (current view,
                   vitals, inventory, milestones); no recent actions, no map, no files
``pro-long``       the harness's append-only text log (``logs.txt``), searched with grep:
                   places where it collected, drank or placed something, and the positions
                   the log records; recent actions; no frames, no grid, no files of its own
``vista``          lossless frames addressed by turn (the last N turns, newest first), the
                   same inspection; where it has been from the frames' recorded positions;
                   two notes files (GUIDE.md, working.md); no index, no grid, no procedures
``no-frames``      MFM without frame inspection: the index is searched by text instead
``no-index``       MFM without index search: frames by recency, as VISTA
``no-procedures``  MFM without stored procedures
``no-consolidation`` MFM without consolidation (no periodic revision of GUIDE.md/working.md)
``no-content``     MFM whose index holds events only: episodes since the last inspection
                   searched near the player, newest 16 first (the index before format 1.2)
``no-budget``      MFM with GUIDE.md uncapped where the task caps notes (reach tasks)
=================  =========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, replace



@dataclass(frozen=True)
class MemoryMode:
    """The memory capabilities of one method.

    ``coverage``: where "where have I been" comes from (``grid``, ``trace`` of the stored
    frames, ``log`` text, or None). ``search``: ``index`` or ``log`` (grep) or None.
    ``frames``: how frames are chosen for inspection, ``index`` (after a search) or
    ``recency`` (by turn), or None. ``text_sites``: recall places from text (collected /
    drank / placed lines). ``notes``: may write GUIDE.md and working.md. ``in_head``: keeps
    the working context of recent turns (recent actions, failed targets, the current
    exploration target); off for ``direct``. ``content``: index searches look up what
    episodes' frames showed (``seen.jsonl``) over the whole history, rather than the episodes
    since the last inspection. ``budget``: the task's cap on GUIDE.md applies.
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


MFM = MemoryMode("mfm")
BASELINES = {
    "mfm": MFM,
    "direct": MemoryMode("direct", recent=False, in_head=False, coverage=None, grid_routing=False, notes=False,
                         search=None, frames=None, procedures=False, consolidation=False, content=False),
    "pro-long": MemoryMode("pro-long", coverage="log", grid_routing=False, notes=False, search="log", frames=None,
                           text_sites=True, procedures=False, consolidation=False, content=False),
    "vista": MemoryMode("vista", coverage="trace", grid_routing=False, search=None, frames="recency",
                        procedures=False, content=False),
}
ABLATION_CHANGES = {
    "no-frames": {"frames": None, "text_sites": True, "content": False},
    "no-index": {"search": None, "frames": "recency", "content": False},
    "no-procedures": {"procedures": False},
    "no-consolidation": {"consolidation": False},
    "no-content": {"content": False},
    "no-budget": {"budget": False},
}


def mode_for(method: str, ablations: tuple[str, ...] = ()) -> MemoryMode:
    """The memory mode of ``method`` with ``ablations`` switched off (ablations apply to mfm)."""
    mode = BASELINES[method]
    for a in ablations:
        mode = replace(mode, **ABLATION_CHANGES[a])
    if ablations:
        mode = replace(mode, label=f"{method} {' '.join(ablations)}")
    return mode


def label(method: str, ablations: tuple[str, ...] | list[str] = ()) -> str:
    """How a run's memory mode is named in tables: the method, then its ablations."""
    return " ".join([method, *ablations])
