"""Pixel comparisons of Crafter frames that see the world rather than the screen: a change
threshold that hides the night noise, counts in tiles, a world-aligned difference that undoes
the camera's move between two steps, and tile outlines. Plain numpy, no Streamlit.

A 64x64 frame is 9x9 tiles of ``width // 9`` pixels (``loaders.frame_images.tile_size``): the
top 9x7 tiles are the local view with the player at tile (4, 3), the two rows below are the
inventory. The view shows world cell ``(X, Y)`` at tile ``(X - x + 4, Y - y + 3)`` when the
player stands at ``(x, y)``.

Night noise, measured on ``sample_runs/diamond_mfm_s2``: between steps 740 and 741 (dusk; the
player turns on the spot, an arrow hits it) 3,082 of 4,096 pixels differ, but only 62 (the
player's sprite, the arrow, the health icon) by more than 2 levels, and still 62 by more than
8 or 30: early in the night Crafter's noise moves pixels by a level or two.
:data:`DEFAULT_THRESHOLD` (8) hides it. Deeper in the night Crafter blends in stronger noise
(up to ~127 levels in the darkest pixels), of which some shows through any threshold that
keeps real changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from loaders.frame_images import MAP_TILES_Y, TILES_X, TILES_Y, tile_size
from mfm.memory.retrieval import enlarge

DEFAULT_THRESHOLD = 8
"""Changes of at most this many levels (largest over the three channels) are ignored."""
PLAYER_TILE = (TILES_X // 2, MAP_TILES_Y // 2)
"""The player's tile in the local view: (4, 3)."""
CHANGED = (255, 0, 255)
FIND_OUTLINE = (255, 220, 0)
"""Outline of a decoded tile (yellow)."""
TARGET_OUTLINE = (0, 230, 255)
"""Outline of a tile on a cell the turn chose as a target (cyan)."""
TURN_LEGEND = ((TARGET_OUTLINE, "cyan: a decoded tile on a cell the turn chose as a target"),
               (FIND_OUTLINE, "yellow: any other tile the inspection decoded"))
"""What the outlines on inspected frames mean (Turns, Retargeting)."""
FAILURE_LEGEND = ((TARGET_OUTLINE, "cyan: the tile of the failed action's target cell"),)
"""What the outline on a failure's filmstrip means (Failures)."""
OUTSIDE = (40, 40, 40)


def change_levels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per pixel, the largest absolute difference over the channels (0-255), as int16."""
    if a.shape != b.shape:
        raise ValueError(f"frames differ in size: {a.shape} vs {b.shape}")
    return np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=-1)


def changed_mask(a: np.ndarray, b: np.ndarray, threshold: int = DEFAULT_THRESHOLD) -> np.ndarray:
    """Pixels that changed by more than ``threshold`` levels (0: any change)."""
    return change_levels(a, b) > threshold


def cell_of_tile(col: int, row: int, position: tuple[int, int]) -> tuple[int, int]:
    """The world cell shown at map tile (col, row) with the player at ``position``."""
    return position[0] + col - PLAYER_TILE[0], position[1] + row - PLAYER_TILE[1]


def tile_of_cell(cell: tuple[int, int], position: tuple[int, int]) -> tuple[int, int] | None:
    """The map tile (col, row) showing world ``cell`` with the player at ``position``, or None
    when the cell is outside the 9x7 view."""
    col, row = cell[0] - position[0] + PLAYER_TILE[0], cell[1] - position[1] + PLAYER_TILE[1]
    return (col, row) if 0 <= col < TILES_X and 0 <= row < MAP_TILES_Y else None


def tile_counts(mask: np.ndarray, unit: int, valid: np.ndarray | None = None) -> tuple[int, int]:
    """How many map tiles and inventory tiles hold a changed pixel (``valid``: the pixels
    that count, e.g. where two aligned frames overlap)."""
    m = mask if valid is None else mask & valid
    tiles = m[:TILES_Y * unit, :TILES_X * unit].reshape(TILES_Y, unit, TILES_X, unit).any(axis=(1, 3))
    return int(tiles[:MAP_TILES_Y].sum()), int(tiles[MAP_TILES_Y:].sum())


def shift_map(frame: np.ndarray, dx: int, dy: int, unit: int) -> tuple[np.ndarray, np.ndarray]:
    """The frame's map view moved so that the tile showing cell ``(X, Y)`` lands where the
    cell ``(X - dx, Y - dy)`` was: ``out[row, col] = frame[row + dy, col + dx]`` in tiles.
    The inventory rows stay. Returns the shifted frame and a mask of the pixels that hold
    shifted content (False where the view had no such tile)."""
    h, w = MAP_TILES_Y * unit, TILES_X * unit
    out = frame.copy()
    valid = np.ones(frame.shape[:2], bool)
    region = np.zeros((h, w) + frame.shape[2:], frame.dtype)
    ok = np.zeros((h, w), bool)
    sx, sy = dx * unit, dy * unit
    ys, ye = max(0, -sy), min(h, h - sy)
    xs, xe = max(0, -sx), min(w, w - sx)
    if ys < ye and xs < xe:
        region[ys:ye, xs:xe] = frame[ys + sy:ye + sy, xs + sx:xe + sx]
        ok[ys:ye, xs:xe] = True
    out[:h, :w] = region
    valid[:h, :w] = ok
    return out, valid


@dataclass(frozen=True)
class FrameDiff:
    """The difference of frame ``b`` against frame ``a``.

    ``b_shown`` is ``b`` as compared (shifted by ``shift`` tiles when world-aligned);
    ``valid`` marks the pixels compared (outside it: no overlap after the shift)."""

    threshold: int
    shift: tuple[int, int]
    aligned: bool
    b_shown: np.ndarray
    mask: np.ndarray
    valid: np.ndarray
    pixels_any: int
    pixels: int
    map_tiles: int
    inventory_tiles: int

    def image(self) -> np.ndarray:
        """``b`` as compared with changed pixels in magenta and uncompared pixels dark."""
        out = self.b_shown.copy()
        out[~self.valid] = OUTSIDE
        out[self.mask & self.valid] = CHANGED
        return out


def diff(a: np.ndarray, b: np.ndarray, threshold: int = DEFAULT_THRESHOLD,
         positions: tuple[tuple[int, int], tuple[int, int]] | None = None) -> FrameDiff:
    """Compare ``b`` with ``a``. With ``positions`` (the player's cell at ``a`` and at ``b``)
    the map view of ``b`` is shifted by the player's move so that the same world cells overlap:
    what remains is a mined block or a placed table, not the camera move."""
    unit = tile_size(a)
    shift = (0, 0)
    b_shown, valid = b, np.ones(a.shape[:2], bool)
    if positions is not None:
        (xa, ya), (xb, yb) = positions
        shift = (int(xa - xb), int(ya - yb))
        b_shown, valid = shift_map(b, shift[0], shift[1], unit)
    levels = change_levels(a, b_shown)
    mask = (levels > threshold) & valid
    m_tiles, i_tiles = tile_counts(mask, unit)
    return FrameDiff(threshold, shift, positions is not None, b_shown, mask, valid,
                     int(((levels > 0) & valid).sum()), int(mask.sum()), m_tiles, i_tiles)


def outline_tiles(frame: np.ndarray, tiles: list[tuple[int, int]], color: tuple[int, int, int] = FIND_OUTLINE,
                  factor: int = 1, width: int = 1) -> np.ndarray:
    """The frame enlarged ``factor`` times (nearest neighbour) with an outline ``width`` pixels
    wide (of the enlarged image), inside the tile's edge, around each (col, row) tile."""
    return outline_groups(frame, [(tiles, color)], factor, width)


def outline_groups(frame: np.ndarray, groups: list[tuple[list[tuple[int, int]], tuple[int, int, int]]],
                   factor: int = 1, width: int = 1) -> np.ndarray:
    """Like :func:`outline_tiles`, with one colour per group of tiles (later groups on top)."""
    big = enlarge(frame, factor) if factor > 1 else frame.copy()
    unit = tile_size(frame) * factor
    w = max(1, min(width, unit // 2))
    for col, row, color in [(c, r, color) for tiles, color in groups for c, r in tiles]:
        x0, y0 = col * unit, row * unit
        x1, y1 = min(big.shape[1], x0 + unit), min(big.shape[0], y0 + unit)
        big[y0:y0 + w, x0:x1] = color
        big[y1 - w:y1, x0:x1] = color
        big[y0:y1, x0:x0 + w] = color
        big[y0:y1, x1 - w:x1] = color
    return big


def legend_text(items: tuple[tuple[tuple[int, int, int], str], ...]) -> str:
    """A legend of outline colours in words: each entry with its RGB value."""
    return "Outlines: " + "; ".join(f"{label} (RGB {c[0]}, {c[1]}, {c[2]})" for c, label in items) + "."


def legend_image(items: tuple[tuple[tuple[int, int, int], str], ...], tile: int = 21, width: int = 3) -> np.ndarray:
    """A legend of outline colours as an image: per entry a grey tile outlined as on the
    frames (``width`` pixels, ``tile`` pixels square) and its label, one entry per row."""
    font = ImageDraw.ImageDraw(Image.new("RGB", (1, 1))).font
    rows = max(1, len(items))
    side = max((int(ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(label, font=font)) for _, label in items),
               default=0)
    img = Image.new("RGB", (tile + 12 + side + 8, rows * (tile + 6) + 2), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for i, (color, label) in enumerate(items):
        y = 2 + i * (tile + 6)
        draw.rectangle([0, y, tile - 1, y + tile - 1], fill=(120, 120, 120))
        for k in range(width):
            draw.rectangle([k, y + k, tile - 1 - k, y + tile - 1 - k], outline=tuple(color))
        draw.text((tile + 8, y + tile // 2), label, fill=(20, 20, 20), font=font, anchor="lm")
    return np.asarray(img)
