"""Frames as images: tiles of a Crafter frame, enlargement by whole pixels, a wipe between two
frames and how many pixels differ. Plain numpy, no Streamlit."""
from __future__ import annotations

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
