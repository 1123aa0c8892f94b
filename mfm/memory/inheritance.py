"""Inherited memory: a new game in a known world that starts with an earlier run's memory.

The earlier run (finished or interrupted, never one still running) is copied into the new
run's ``inherited/`` folder, with hard links where the filesystem allows (a run that ended
no longer changes), so that the new run stays one self-contained directory. The new run
names that run's episodes ``inherited:ep_000018``.

The new game's agent-written memory starts as the earlier run's last GUIDE.md and
procedures, their sources re-pointed at the copy, written once at the start by the author
``inherited``; the plan (``working.md``) is not inherited, it served the other game's task.
The earlier run's episodic memory (index, what its frames showed, per-step trace, frames) is
read from the copy and never written. Env steps of the two games are separate counts: an
inherited episode's steps are the earlier game's.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

from mfm.memory.agent_memory import AgentMemory
from mfm.memory.consolidation import FACT_LINE, GUIDE, WORKING
from mfm.memory.index import ContentHit, ContentIndex, EpisodeIndex
from mfm.memory.retrieval import read_trace
from mfm.schema import EPISODE_ID, INHERITED, IndexRow, RunManifest, SchemaError

PREFIX = f"{INHERITED}:"
AUTHOR = "inherited"
"""The author of the memory writes that start a run from an inherited one."""
ENDED = ("finished", "interrupted")
"""Run statuses whose memory may be inherited."""


class InheritError(ValueError):
    """The run cannot inherit this memory (named run, and why)."""


def qualify(ep: str) -> str:
    """``ep_000018`` -> ``inherited:ep_000018``."""
    return ep if ep.startswith(PREFIX) else PREFIX + ep


def inherited_id(ref: str) -> str | None:
    """The earlier run's own id of an ``inherited:`` reference (None for the run's own episodes)."""
    return ref[len(PREFIX):] if ref.startswith(PREFIX) else None


def read_manifest(run: Path) -> RunManifest:
    """The manifest of a run whose memory is to be inherited; InheritError if it is not one
    that ended (a run still running changes under the copy)."""
    path = run / "run.json"
    try:
        manifest = RunManifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise InheritError(f"{run}: not a run directory (no run.json)") from None
    except (ValueError, SchemaError) as e:
        raise InheritError(f"{path}: unreadable manifest: {e}") from None
    if manifest.status not in ENDED:
        raise InheritError(f"{run}: run {manifest.run_id!r} is {manifest.status}; only a run that ended "
                           f"({' or '.join(ENDED)}) can be inherited")
    return manifest


def _link_or_copy(src: str, dest: str) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def copy_run(src: Path, run_dir: Path) -> Path:
    """Copy run ``src`` to ``run_dir/inherited`` (hard links where possible); the copy's path."""
    dest = run_dir / INHERITED
    if (src / INHERITED).exists():
        raise InheritError(f"{src}: inherited memory itself; inherit from the run it came from instead")
    if dest.exists():
        raise InheritError(f"{dest}: already exists (a run inherits once, when it starts)")
    shutil.copytree(src, dest, copy_function=_link_or_copy)
    return dest


def requalify_guide(text: str) -> tuple[str, tuple[str, ...]]:
    """GUIDE.md text with every fact's sources re-pointed at the inherited copy, and those
    sources in order of first mention."""
    out, sources = [], {}
    for line in text.splitlines():
        m = FACT_LINE.match(line)
        if m and m["src"]:
            src = [qualify(s.strip()) for s in m["src"].split(",")]
            sources.update(dict.fromkeys(src))
            line = line[:m.start("src")] + ", ".join(src) + line[m.end("src"):]
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), tuple(sources)


def _requalify_procedure(text: str) -> tuple[str, tuple[str, ...]]:
    obj = json.loads(text)
    sources = tuple(qualify(s) for s in obj.get("sources", []) if isinstance(s, str) and EPISODE_ID.match(s))
    obj["sources"] = list(sources)
    extra = obj.get("extra")
    for key in ("disabled_sources", "last_episodes", "failed_episodes"):
        for holder in (obj, extra if isinstance(extra, dict) else {}):
            if isinstance(holder.get(key), list):
                holder[key] = [qualify(s) for s in holder[key] if isinstance(s, str)]
    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n", sources


def seed_memory(memory: AgentMemory, copy: Path, run_id: str) -> list[str]:
    """Write the inherited run's last agent-written files (all but ``working.md``) into
    ``memory`` as its first writes, sources re-pointed at the copy; the paths written."""
    past, _ = AgentMemory.open(copy)
    written = []
    for path in past.files():
        text = past.read(path)
        if path == WORKING or text is None:
            continue
        if path == GUIDE:
            text, sources = requalify_guide(text)
        elif path.endswith(".json"):
            try:
                text, sources = _requalify_procedure(text)
            except json.JSONDecodeError:
                sources = ()
        else:
            sources = ()
        w = memory.write(path, text, author=AUTHOR, reason=f"inherited from run {run_id} ({INHERITED}/)",
                         sources=sources, step=0, life=0, turn=None)
        if w is not None:
            written.append(path)
    return written


class InheritedMemory:
    """The episodic memory of the run a run inherited, read from its copy (read-only).

    Lookups take and give ``inherited:`` ids; :meth:`bare` turns one back into the row
    the copy's own files are addressed by."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / INHERITED
        self.manifest = read_manifest(self.dir)
        self.index, _ = EpisodeIndex.open(self.dir)
        self.content, _ = ContentIndex.open(self.dir)
        self._trace: dict[int, tuple[int, int]] | None = None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def episode(self, ref: str) -> IndexRow | None:
        """The index row of ``inherited:ep_…`` with that id (None if the copy has no such episode)."""
        own = inherited_id(ref)
        row = self.index.get(own) if own is not None else None
        return None if row is None else replace(row, id=qualify(row.id))

    @staticmethod
    def bare(ref: IndexRow) -> IndexRow:
        """An inherited row as the copy's files name it."""
        own = inherited_id(ref.id)
        return ref if own is None else replace(ref, id=own)

    def find(self, material: str, *, near: tuple[float, float] | None = None, radius: float | None = None,
             limit: int | None = None) -> list[ContentHit]:
        """What the earlier game's frames showed of ``material`` (every episode), as hits on
        ``inherited:`` episodes."""
        return [replace(h, episode=qualify(h.episode))
                for h in self.content.find(material, near=near, radius=radius, limit=limit)]

    def position_at(self, step: int) -> tuple[int, int] | None:
        """The player's position after step ``step`` of the earlier game (its per-step trace)."""
        if self._trace is None:
            self._trace = {}
            read_trace(self.dir / "steps.jsonl", 0, self._trace)
        return self._trace.get(step)
