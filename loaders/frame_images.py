"""Frames as images: tiles of a Crafter frame, enlargement by whole pixels, a wipe between two
frames and how many pixels differ. Plain numpy, no Streamlit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfm.envs.crafter_env import LOCAL_ROWS, VIEW
from mfm.memory.retrieval import enlarge

TILES_X, TILES_Y = VIEW
MAP_TILES_Y = LOCAL_ROWS
"""A Crafter frame in tiles, as the harness defines it (``mfm.envs.crafter_env``): a 9x9 grid
whose top 9x7 tiles are the map."""


def tile_size(frame: np.ndarray) -> int:
    """Crafter tile edge in pixels for a frame (frame width // 9)."""
    return max(1, frame.shape[1] // TILES_X)


def upscale(frame: np.ndarray, target: int = 256) -> np.ndarray:
    """Nearest-neighbour magnification by the integer factor that brings the width near ``target``."""
    return enlarge(frame, max(1, int(round(target / max(1, frame.shape[1])))))


def wipe(a: np.ndarray, b: np.ndarray, position: float) -> np.ndarray:
    """A/B wipe: columns left of ``position`` (0..1 of the width) from ``a``, the rest from ``b``,
    with a one-pixel yellow divider."""
    if a.shape != b.shape:
        raise ValueError(f"frames differ in size: {a.shape} vs {b.shape}")
    w = a.shape[1]
    cut = int(round(min(1.0, max(0.0, position)) * w))
    out = b.copy()
    out[:, :cut] = a[:, :cut]
    if 0 < cut < w:
        out[:, cut - 1] = (255, 220, 0)
    return out


def difference_count(a: np.ndarray, b: np.ndarray) -> int:
    """How many pixels differ between two frames of the same size."""
    if a.shape != b.shape:
        raise ValueError(f"frames differ in size: {a.shape} vs {b.shape}")
    return int(np.any(a != b, axis=-1).sum())


@dataclass(frozen=True)
class TileRegion:
    """A rectangle of whole tiles of a frame: tile columns ``c0``..``c1 - 1`` and rows
    ``r0``..``r1 - 1`` (ends exclusive), tiles ``tile`` pixels wide."""

    c0: int
    c1: int
    r0: int
    r1: int
    tile: int

    @property
    def pixels(self) -> tuple[int, int, int, int]:
        """The region in pixels, ``(x0, y0, x1, y1)`` with ends exclusive (what ``crop`` takes)."""
        return self.c0 * self.tile, self.r0 * self.tile, self.c1 * self.tile, self.r1 * self.tile

    @property
    def full(self) -> bool:
        """Whether the region is the whole 9x9-tile frame."""
        return (self.c0, self.r0, self.c1, self.r1) == (0, 0, TILES_X, TILES_Y)

    @property
    def tiles(self) -> tuple[int, int, int, int]:
        """``(c0, c1, r0, r1)``: the region as a note records it (``loaders.notes``)."""
        return self.c0, self.c1, self.r0, self.r1


def tile_region(cols: tuple[int, int], rows: tuple[int, int], tile: int) -> TileRegion:
    """The tiles between column bounds ``cols`` and row bounds ``rows`` (a slider's two ends,
    0..9 each, end exclusive), tiles ``tile`` pixels wide; an empty span (end at or before its
    start) is widened to the one tile at its start."""
    (c0, c1), (r0, r1) = (int(v) for v in cols), (int(v) for v in rows)
    return TileRegion(c0, max(c1, c0 + 1), r0, max(r1, r0 + 1), tile)


MAGNIFICATIONS = (2, 3, 4, 6, 8, 12, 16, 24)
"""The enlargement factors a magnified region is offered at."""


def magnifications(width: int, widest: int = 1100, preferred: int = 640) -> tuple[list[int], int]:
    """The factors of :data:`MAGNIFICATIONS` at which an image ``width`` pixels wide stays at
    most ``widest`` pixels wide (``[1]`` when none does), and the default: the largest of them
    that keeps it within ``preferred`` pixels (else the smallest offered)."""
    fits = [f for f in MAGNIFICATIONS if width * f <= widest] or [1]
    return fits, max([f for f in fits if width * f <= preferred] or [fits[0]])
