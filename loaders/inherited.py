"""Episodes a run names ``inherited:ep_NNNNNN``: those of the earlier run whose memory it
inherited (``mfm run --inherit``, :mod:`mfm.memory.inheritance`), read from the copy of that
run in its ``inherited/`` folder.

Plain functions over opened runs, no Streamlit. The copy is opened only when it lies inside
the run folder (a symlink leading out is refused), so a reader never leaves the runs root.
An inherited episode's steps, lives and frames are the earlier game's: they are read from the
copy, never from the run that names the episode.

    from loaders import open_run
    from loaders.inherited import locate
    run = open_run("runs/ore-iron_mfm_s0_from-reach-1000_mfm_s0")
    ep = locate(run, "inherited:ep_000043")
    ep.label                  # 'inherited:ep_000043 (from run reach-1000_mfm_s0)'
    ep.holder.frame(305)      # a frame of the earlier game, from the copy
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loaders.formats import detect
from loaders.run import Run, inherited_record, open_run
from mfm.boundary import UnsafePath, inside
from mfm.memory import inheritance
from mfm.memory.inheritance import qualify
from mfm.schema import INHERITED, IndexRow

__all__ = ["INHERITED", "EpisodeRef", "copy_of", "episode_label", "inherited_id", "is_inherited", "locate",
           "origin", "qualify"]


def inherited_id(ep: object) -> str | None:
    """The inherited run's own id of an ``inherited:ep_…`` id (None for anything else, a
    missing value of a table included)."""
    return inheritance.inherited_id(ep) if isinstance(ep, str) else None


def is_inherited(ep: object) -> bool:
    """Whether ``ep`` names an inherited episode (``inherited:ep_…``)."""
    return inherited_id(ep) is not None


def inherited_from(run: Run) -> dict[str, Any] | None:
    """What the run inherited, as its manifest records it (``config.inherited``: run, task,
    method, steps, status, milestones); None when it inherited nothing."""
    return inherited_record(run.manifest)


def copy_of(run: Run) -> Run | None:
    """The copy of the inherited run (``run.path / "inherited"``), opened (once per version of
    the run); None when there is none, it is no run folder, or it leads outside the run folder."""
    return run.derived("inherited-copy", _open_copy)


def _open_copy(run: Run) -> Run | None:
    if not run.path.is_dir():
        return None
    try:
        path = inside(run.path, INHERITED)
    except UnsafePath:
        return None
    if path == run.path.resolve() or detect(path) != "mfm":
        return None
    return open_run(path)


def origin(run: Run) -> str | None:
    """The name of the run whose memory ``run`` inherited (its manifest's record, else the
    copy's run id); None when it inherited nothing."""
    got = inherited_from(run)
    if got and got.get("run"):
        return str(got["run"])
    copy = copy_of(run)
    if copy is None:
        return None
    m = copy.manifest
    return m.run_id if m is not None and m.run_id else INHERITED


@dataclass(frozen=True)
class EpisodeRef:
    """An episode as a run names it, and where its files are.

    ``holder`` is the run holding its files (the run itself, or the copy of the inherited run;
    None when the episode is found in neither), ``row`` its index row there (with the id the
    holder's files use, :attr:`local_id`), ``origin`` the inherited run's name (None for the
    run's own episodes)."""

    id: str
    holder: Run | None
    row: IndexRow | None
    origin: str | None = None

    @property
    def inherited(self) -> bool:
        return is_inherited(self.id)

    @property
    def local_id(self) -> str:
        """The id the holder's files use (``ep_000043`` for ``inherited:ep_000043``)."""
        return inherited_id(self.id) or self.id

    @property
    def label(self) -> str:
        """The id as shown: ``inherited:ep_000043 (from run NAME)`` for an inherited episode."""
        if not self.inherited:
            return self.id
        return f"{self.id} (from run {self.origin or 'unknown'})"


def locate(run: Run, ep: str) -> EpisodeRef:
    """Where episode ``ep`` of ``run`` is: an own id in the run, an ``inherited:`` id in the copy
    of the inherited run (:func:`copy_of`)."""
    bare = inherited_id(ep)
    if bare is None:
        row = run.episode(ep) if isinstance(ep, str) else None
        return EpisodeRef(str(ep), run if row is not None else None, row)
    copy = copy_of(run)
    row = copy.episode(bare) if copy is not None else None
    return EpisodeRef(ep, copy if row is not None else None, row, origin(run))


def episode_label(run: Run, ep: str) -> str:
    """``ep`` as shown (:attr:`EpisodeRef.label`): an inherited id names the run it came from."""
    return locate(run, ep).label if is_inherited(ep) else str(ep)
