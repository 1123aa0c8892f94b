"""Dashboard logic that needs no Streamlit: the runs root, safe run keys, frame references.

A run is named in URLs by its *key*: its folder relative to the runs root (``a/b/run``).
Keys from a URL are untrusted: :func:`resolve_run_key` refuses absolute paths, ``..`` and
symlinks leaving the root, keys too long or holding control characters, and folders that are
not runs; :func:`param_problem` bounds every query parameter.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from dashboard.safe_text import clip
from loaders.formats import detect
from loaders.remote.listing import mirror_root
from mfm.objectstore import is_url
from mfm.boundary import UnsafePath, inside
from mfm.schema import EPISODE_ID, INHERITED

REPO = Path(__file__).resolve().parent.parent
PAGES_DIR = REPO / "pages" if (REPO / "pages").is_dir() else Path(__file__).resolve().parent / "page_files"
"""The top-level pages/ of a checkout, or dashboard/page_files/ where ``pip install .`` put it."""
MAX_FRAMES = 4
MAX_KEY, NAME_MAX = 400, 255
"""Longest run key accepted from a URL, and longest folder name in it (bytes, as file systems count)."""
MAX_PARAM, MAX_PARAM_NAME = 8_000, 64
PARAM_LIMITS = {"q": 20_000}
"""Longest value of a URL query parameter (an SQL query may be longer), and of its name."""


def runs_root(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Path:
    """The runs root: ``--root`` after ``--`` in argv, else env ``MFM_RUNS_ROOT``, else ``sample_runs/``.
    A URL of object storage (``s3://bucket/prefix``) gives its local mirror (``loaders.remote``)."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--root")
    args, _ = parser.parse_known_args(argv if argv is not None else [])
    root = args.root or env.get("MFM_RUNS_ROOT") or str(REPO / "sample_runs")
    if is_url(root):
        return mirror_root(root)
    return Path(root).expanduser().resolve()


def resolve_run_key(root: Path, key: str) -> Path:
    """The run folder for a key from a URL; raise UnsafePath with a short reason otherwise.
    Absolute keys, keys too long for a file system and keys holding control characters are
    refused before any file is looked at; an OSError on the way is refused too. The reason
    quotes at most 60 characters of the key, and never an absolute path."""
    if not isinstance(key, str):
        raise UnsafePath(f"{type(key).__name__} is not a run key")
    key = key.strip()
    if key.startswith(("/", "\\")):
        raise UnsafePath("an absolute path")
    key = key.rstrip("/")
    shown = repr(clip(key, 60))
    if len(key) > MAX_KEY or any(len(p.encode()) > NAME_MAX for p in key.split("/")):
        raise UnsafePath(f"{shown} is too long for a run folder ({len(key):,} characters)")
    if key != clip(key):
        raise UnsafePath(f"{shown} holds control characters")
    try:
        path = inside(root, key)
        if path == root.resolve():
            raise UnsafePath(f"{shown} is the runs root itself, not a run")
        if detect(path) is None:
            raise UnsafePath(f"{shown} is not a run under the runs root")
    except OSError as e:
        raise UnsafePath(f"{shown} cannot be read ({e.strerror or type(e).__name__})") from None
    return path


def run_key(root: Path, path: Path) -> str:
    """The key of a run folder (its path relative to the root, POSIX style)."""
    return path.resolve().relative_to(root.resolve()).as_posix()


def param_problem(name: str, value: str) -> str | None:
    """Why a URL query parameter is refused (None when it is acceptable): a name or value
    too long (:data:`MAX_PARAM`, :data:`PARAM_LIMITS`) or a NUL character."""
    limit = PARAM_LIMITS.get(name, MAX_PARAM)
    if len(name) > MAX_PARAM_NAME:
        return f"has a name of {len(name):,} characters (at most {MAX_PARAM_NAME})"
    if len(value) > limit:
        return f"is {len(value):,} characters long (at most {limit:,})"
    if "\x00" in name + value:
        return "holds a NUL character"
    return None


def split_list(value: str | None) -> list[str]:
    """A comma-separated query value as a list, blanks dropped."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def parse_int(value: str | None) -> int | None:
    """An integer query value, or None when absent or malformed."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def parse_range(value: str | None) -> tuple[int, int] | None:
    """A ``lo-hi`` step range query value, or None."""
    if not value or "-" not in value.strip("-"):
        return None
    a, _, b = value.partition("-")
    lo, hi = parse_int(a), parse_int(b)
    if lo is None or hi is None:
        return None
    return (lo, hi) if lo <= hi else (hi, lo)


def format_range(rng: tuple[int, int]) -> str:
    """A step range as its ``lo-hi`` query value (the inverse of :func:`parse_range`)."""
    return f"{rng[0]}-{rng[1]}"


def clamp_range(value: str | None, first: int, last: int) -> tuple[int, int] | None:
    """A ``lo-hi`` query value clamped into ``first..last``; None when absent, unreadable or
    empty once clamped."""
    rng = parse_range(value)
    if rng is None:
        return None
    lo, hi = max(first, min(rng[0], last)), min(last, max(rng[1], first))
    return (lo, hi) if lo < hi else None


def parse_cell(value: str | None) -> tuple[int, int] | None:
    """An ``x,y`` cell query value, or None."""
    parts = split_list(value)
    if len(parts) != 2:
        return None
    x, y = parse_int(parts[0]), parse_int(parts[1])
    return None if x is None or y is None else (x, y)


def parse_region(value: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A ``c0,r0,c1,r1`` tile region query value as (columns, rows) ranges within the 9x9
    tiles, or None."""
    reg = [parse_int(v) for v in split_list(value)]
    if len(reg) != 4 or None in reg:
        return None
    c0, r0, c1, r1 = reg
    return (max(0, min(c0, 8)), max(1, min(c1, 9))), (max(0, min(r0, 8)), max(1, min(r1, 9)))


def format_region(region: tuple[tuple[int, int], tuple[int, int]]) -> str:
    """The query value of a tile region (inverse of :func:`parse_region`)."""
    (c0, c1), (r0, r1) = region
    return f"{c0},{r0},{c1},{r1}"


@dataclass(frozen=True)
class FrameRef:
    """A frame named in a URL: a run key and either an env step or an episode id (its end
    observation). Written ``key:123`` or ``key:ep_000012``."""

    run: str
    step: int | None = None
    episode: str | None = None

    def __str__(self) -> str:
        return f"{self.run}:{self.episode if self.episode else self.step}"

    @property
    def label(self) -> str:
        return f"{self.run} · " + (f"{self.episode} (end)" if self.episode else f"step {self.step}")


def copy_key(key: str) -> str:
    """The run key of the copy of the run that run ``key`` inherited (its ``inherited/`` folder)."""
    return f"{key}/{INHERITED}"


def parse_frame_ref(text: str) -> FrameRef:
    """Parse ``key:step`` or ``key:ep_NNNNNN``; raise ValueError on anything else. An episode
    named as the run names an inherited one, ``key:inherited:ep_NNNNNN``, is that episode of
    the copy (``copy_key(key):ep_NNNNNN``)."""
    key, sep, what = text.strip().rpartition(":")
    if not sep or not key:
        raise ValueError(f"frame {text!r} must look like RUN:STEP or RUN:ep_000012")
    if EPISODE_ID.match(what):
        heir, sep, qualifier = key.rpartition(":")
        if sep and heir and qualifier == INHERITED:
            return FrameRef(copy_key(heir), episode=what)
        return FrameRef(key, episode=what)
    step = parse_int(what)
    if step is None or step < 0:
        raise ValueError(f"frame {text!r}: {what!r} is neither a step nor an episode id")
    return FrameRef(key, step=step)


def parse_frame_refs(value: str | None) -> tuple[list[FrameRef], list[str]]:
    """All frame references of a ``frames`` query value (at most :data:`MAX_FRAMES`), and errors."""
    refs, errors = [], []
    for part in split_list(value):
        try:
            refs.append(parse_frame_ref(part))
        except ValueError as e:
            errors.append(str(e))
    if len(refs) > MAX_FRAMES:
        errors.append(f"only the first {MAX_FRAMES} of {len(refs)} frames are shown")
        refs = refs[:MAX_FRAMES]
    return refs, errors


def format_frame_refs(refs: list[FrameRef]) -> str:
    """The ``frames`` query value for a list of references."""
    return ",".join(str(r) for r in refs[:MAX_FRAMES])


def live_caption(updated: str, new_episodes: int, running: int = 1) -> str:
    """The indicator of a page following runs being written: when it was last redrawn and
    how many episodes arrived since this session started following."""
    runs = "" if running == 1 else f" ({running} runs)"
    return f"● live{runs} · updated {updated} · +{new_episodes} episode{'' if new_episodes == 1 else 's'}"


def status_changes(before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str, str]]:
    """The runs that were running and now are not: ``(key, old status, new status)``."""
    return [(k, before[k], s) for k, s in after.items() if before.get(k) == "running" and s != "running"]
