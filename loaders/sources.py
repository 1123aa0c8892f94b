"""Where a run's records and frames come from: our run directories or a foreign format.

A :class:`Source` turns one run, in whatever format it was written, into our typed records
(``mfm.validate.RunContents``) plus on-demand access to episode records and frames. The
:class:`~loaders.run.Run` built on it is the same for every format, so every page works
on every format, and ``mfm import`` writes any source out as our format.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from mfm.memory.index import EpisodeIndex
from mfm.memory.retrieval import EpisodeRecord, FrameError, episode_frame, load_episode, observation
from loaders import cachedread
from mfm.schema import SCHEMA_VERSION, IndexRow, Problem, RunManifest
from mfm.validate import RunContents, TableRead


class Source(Protocol):
    """One run in some format."""

    format: str
    """``mfm`` (ours), ``mfm-original`` (an original MFM run folder), ``mfm-export``,
    ``crafter-recorder``."""

    def contents(self) -> RunContents:
        """Every valid record and every problem, read tolerantly (a folder source leaves
        ``mfm.validate.LAZY_TABLES`` out until :meth:`read_table` reads them; the others
        hold every table)."""

    def read_table(self, path: Path, name: str) -> TableRead:
        """One table file of the run (folder sources: a lazy table when it is asked for)."""

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        """State, action and outcome of an episode (None where not recorded)."""

    def observation(self, ref: IndexRow) -> np.ndarray:
        """The frame when the episode ended; FrameError if there is none."""

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        """The frame of one env step; FrameError if not recorded."""


def inferred_manifest(run_id: str, env: str, index: list[IndexRow], **kw) -> RunManifest:
    """A manifest for a run that came without one, filled from what the run holds."""
    last = max((r.last_step for r in index), default=0)
    base = dict(schema_version=SCHEMA_VERSION, run_id=run_id, env=env, task="unknown", method="unknown", seed=0,
                step_budget=last, milestone_order=(), status="finished", started_at="", last_step=last,
                lives=1 + max((r.life for r in index), default=0))
    base.update(kw)
    return RunManifest(**base)


class DirSource:
    """A run directory in our format, or an original MFM run directory (no ``run.json``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.format = "mfm" if (path / "run.json").is_file() else "mfm-original"

    def contents(self) -> RunContents:
        c = cachedread.validate(self.path, cache=True, lazy=True)
        if self.format == "mfm-original" and c.tables:
            refused = [p for p in c.problems if p.file == "run.json" and p.message.startswith("not a regular file")]
            c.problems = [p for p in c.problems if p.file != "run.json"]
            c.problems.insert(0, Problem("run.json", 0, f"{refused[0].message}; the manifest is inferred from "
                                                        "index.jsonl") if refused else
                              Problem("run.json", 0, "missing: read as an original MFM run directory; "
                                                     "the manifest is inferred from index.jsonl", "warning"))
            rows = c.tables["index.jsonl"]
            c.manifest = inferred_manifest(self.path.name, "minecraft" if any(r.z is not None for r in rows)
                                           else "unknown", rows, method="mfm")
        return c

    def read_table(self, path: Path, name: str) -> TableRead:
        return cachedread.read_one_table_cached(path, name)

    def episode_record(self, ref: IndexRow) -> EpisodeRecord:
        return load_episode(self.path, ref)

    def observation(self, ref: IndexRow) -> np.ndarray:
        return observation(self.path, ref)

    def step_frame(self, index: EpisodeIndex, step: int) -> np.ndarray:
        ref = index.episode_at(step)
        if ref is None:
            raise FrameError(f"{self.path.name}: no stored frame for step {step}")
        return episode_frame(self.path, ref, step - ref.first_step - 1)
