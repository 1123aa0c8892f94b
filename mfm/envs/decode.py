"""Read a rendered Crafter frame back into tile names: the honest "inspect" perception.

Each 9x7 map tile of the frame is matched to the nearest template built from crafter's own
texture files (materials, and creatures drawn over the grounds they can stand on). The
templates go through the same lighting as crafter's renderer:

* day/night blend: ``pixel = d * T + (1 - d) * night(T)``, where ``night`` desaturates the
  texture (PIL colour factor 0.4) and tints it halfway towards ``(0, 16, 64)``;
* at night (``d < 0.5``) crafter mixes grey noise into the dark image, weighted by a
  vignette that is zero at the centre and close to one in the corners. The noise is the
  same in all three channels, so the matcher gives the grey direction of each pixel less
  weight the more noise it carries, while colour differences keep full weight;
* while the player sleeps the whole view is turned grey and tinted, so only brightness
  is compared.

When the daylight is unknown it is estimated from the tiles around the player, which the
noise vignette barely touches.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from crafter import constants, engine
from PIL import Image, ImageEnhance

from mfm.envs.rules import LOCAL_VIEW, PLAYER_WALKABLE, VIEW, WALKABLE

GRID_COLS, GRID_ROWS = LOCAL_VIEW
"""The map part of a frame, in tiles (the rows below it show the inventory)."""
OUTSIDE = "outside"
OUTSIDE_GREY = 127.0

_TINT = np.array([0.0, 16.0, 64.0])
_SLEEP_BLUE = 8.0
_NIGHT_COLOR = 0.4
_NOISE_MEAN = (32.0 + 127.0) / 2
_NOISE_STD = (127.0 - 32.0) / np.sqrt(12.0)
_VIGNETTE_STD = 0.5
_BASE_STD = 1.0
_LUMA = np.array([0.299, 0.587, 0.114])
_CENTRE_RADIUS = 1

_ARROW_GROUNDS = WALKABLE + ("water", "lava")
"""Where an arrow can fly (crafter's ``Arrow.walkable``)."""
_OBJECT_TEXTURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "player-left": ("player", PLAYER_WALKABLE),
    "player-right": ("player", PLAYER_WALKABLE),
    "player-up": ("player", PLAYER_WALKABLE),
    "player-down": ("player", PLAYER_WALKABLE),
    "player-sleep": ("player", PLAYER_WALKABLE),
    "cow": ("cow", WALKABLE),
    "zombie": ("zombie", WALKABLE),
    "skeleton": ("skeleton", WALKABLE),
    "arrow-left": ("arrow", _ARROW_GROUNDS),
    "arrow-right": ("arrow", _ARROW_GROUNDS),
    "arrow-up": ("arrow", _ARROW_GROUNDS),
    "arrow-down": ("arrow", _ARROW_GROUNDS),
    "plant": ("plant", ("grass",)),
    "plant-ripe": ("plant", ("grass",)),
}


@dataclass(frozen=True)
class _Templates:
    """Lit-independent template data for one tile size."""

    unit: int
    labels: tuple[str, ...]
    day: np.ndarray
    night: np.ndarray
    vignette: np.ndarray
    centre: np.ndarray


@lru_cache(maxsize=1)
def _textures() -> engine.Textures:
    """Crafter's own texture loader, so that scaling matches the renderer bit for bit."""
    return engine.Textures(constants.root / "assets")


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` for the small products of decoding (63 tiles by ~80 templates), computed by
    numpy's own loop rather than BLAS: on a busy 2-core machine OpenBLAS's threads made each
    decode about ten times slower than one thread (measured for issue 23)."""
    return np.einsum("ij,kj->ik", a, b)


def _blend(canvas: np.ndarray, texture: np.ndarray) -> np.ndarray:
    """Alpha-composite ``texture`` over ``canvas`` with crafter's float32 rounding."""
    if texture.shape[-1] != 4:
        return texture[..., :3].copy()
    alpha = texture[..., 3:].astype(np.float32) / 255
    colour = texture[..., :3].astype(np.float32) / 255
    current = canvas.astype(np.float32) / 255
    return (255 * (alpha * colour + (1 - alpha) * current)).astype(np.uint8)


def _night_version(tile: np.ndarray) -> np.ndarray:
    """Crafter's noise-free night look of a uint8 tile, as float."""
    faded = ImageEnhance.Color(Image.fromarray(tile)).enhance(_NIGHT_COLOR)
    return 0.5 * np.asarray(faded, dtype=np.float64) + 0.5 * _TINT


def _vignette(width: int, height: int) -> np.ndarray:
    """Crafter's noise weight per pixel of the map view, indexed [x, y]."""
    xs = np.linspace(-1, 1, width)[:, None]
    ys = np.linspace(-1, 1, height)[None, :]
    return 1 - np.exp(-0.5 * (xs ** 2 + ys ** 2) / _VIGNETTE_STD ** 2)


def _split_tiles(view: np.ndarray, unit: int) -> np.ndarray:
    """(9u, 7u, ...) map view -> (63, u*u, ...) tiles, tile index = col * 7 + row."""
    rest = view.shape[2:]
    tiles = view.reshape((GRID_COLS, unit, GRID_ROWS, unit) + rest)
    tiles = tiles.transpose((0, 2, 1, 3) + tuple(range(4, 4 + len(rest))))
    return tiles.reshape((GRID_COLS * GRID_ROWS, unit * unit) + rest)


@lru_cache(maxsize=8)
def _templates(unit: int) -> _Templates:
    """Build (once per tile size) every tile picture the renderer can draw."""
    textures = _textures()
    size = (unit, unit)
    labels: list[str] = []
    tiles: list[np.ndarray] = []
    grounds: dict[str, np.ndarray] = {}
    for material in constants.materials:
        grounds[material] = textures.get(material, size)[..., :3].copy()
        labels.append(material)
        tiles.append(grounds[material])
    labels.append(OUTSIDE)
    tiles.append(np.full((unit, unit, 3), OUTSIDE_GREY, np.uint8))
    for texture_name, (label, under) in _OBJECT_TEXTURES.items():
        texture = textures.get(texture_name, size)
        for ground in under:
            labels.append(label)
            tiles.append(_blend(grounds[ground], texture))
    day = np.stack(tiles).reshape(len(tiles), unit * unit, 3).astype(np.float64)
    night = np.stack([_night_version(t) for t in tiles]).reshape(day.shape)
    vignette = _split_tiles(_vignette(GRID_COLS * unit, GRID_ROWS * unit), unit)
    cols, rows = np.meshgrid(np.arange(GRID_COLS), np.arange(GRID_ROWS), indexing="ij")
    near = (np.abs(cols - GRID_COLS // 2) <= _CENTRE_RADIUS) & (
        np.abs(rows - GRID_ROWS // 2) <= _CENTRE_RADIUS)
    return _Templates(unit, tuple(labels), day, night, vignette, np.flatnonzero(near.ravel()))


def _layout(frame: np.ndarray) -> tuple[int, int]:
    """Tile size and border (in pixels) of a crafter frame."""
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.shape[0] != frame.shape[1]:
        raise ValueError(f"expected a square HxWx3 frame, got shape {frame.shape}")
    unit = frame.shape[1] // VIEW[0]
    if unit < 1:
        raise ValueError(f"frame too small to hold a {VIEW[0]}x{VIEW[1]} grid of tiles")
    return unit, (frame.shape[1] - unit * VIEW[0]) // 2


def _map_tiles(frame: np.ndarray) -> tuple[np.ndarray, int]:
    """The 63 map tiles of a frame as (63, u*u, 3) float pixels, plus the tile size."""
    unit, border = _layout(frame)
    view = np.asarray(frame).transpose(1, 0, 2)[
        border:border + GRID_COLS * unit, border:border + GRID_ROWS * unit]
    return _split_tiles(view.astype(np.float64), unit), unit


def _is_sleeping(tiles: np.ndarray) -> bool:
    """Crafter's sleep filter leaves red == green and blue == green + 8 on every map pixel."""
    red, green, blue = tiles[..., 0], tiles[..., 1], tiles[..., 2]
    return bool(np.array_equal(red, green) and np.all(blue - green == _SLEEP_BLUE))


def _to_grey(pixels: np.ndarray) -> np.ndarray:
    """What crafter's sleep filter keeps of a pixel: half its luminance (one channel)."""
    return 0.5 * (pixels @ _LUMA)[..., None]


def _lit_model(
    tpl: _Templates, daylight: float, sleeping: bool
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Mean template pixels ``A``, noise-offset ``B``, noise amount and noise scale.

    A tile pixel is modelled as ``A + m * B + s * m * (n - mean)`` with ``m`` the
    vignette times the noise amount and ``n`` crafter's uniform grey noise.
    """
    d = float(np.clip(daylight, 0.0, 1.0))
    mean = d * tpl.day + (1 - d) * tpl.night
    offset = (1 - d) * ((0.5 * _NOISE_MEAN + 0.5 * _TINT) - tpl.night)
    scale = (1 - d) * 0.5 * _NOISE_STD
    if sleeping:
        mean, offset, scale = _to_grey(mean), _to_grey(offset), 0.5 * scale
    amount = 2 * (0.5 - d) if d < 0.5 else 0.0
    return mean, offset, amount, scale


def _costs(
    pixels: np.ndarray, tpl: _Templates, daylight: float, sleeping: bool
) -> np.ndarray:
    """Noise-weighted squared distance of each tile (rows) to each template (columns).

    Per pixel the residual ``r`` is scored as ``|r|^2 - w * (sum r)^2`` with
    ``w = s^2 / (b^2 + C s^2)``: the inverse of a covariance with base noise ``b`` in every
    channel plus grey noise of size ``s`` shared by the ``C`` channels.
    """
    mean, offset, amount, scale = _lit_model(tpl, daylight, sleeping)
    count = pixels.shape[0]
    flat_pixels = pixels.reshape(count, -1)
    flat_mean = mean.reshape(mean.shape[0], -1)
    cost = (flat_mean ** 2).sum(1)[None, :] - 2 * _mm(flat_pixels, flat_mean)
    if amount <= 0:
        return cost
    m = amount * tpl.vignette
    channels = pixels.shape[-1]
    sigma2 = (scale * m) ** 2
    w = sigma2 / (_BASE_STD ** 2 + channels * sigma2)
    cost -= 2 * _mm((m[..., None] * pixels).reshape(count, -1), offset.reshape(len(offset), -1))
    cost += 2 * _mm(m, (mean * offset).sum(-1)) + _mm(m * m, (offset * offset).sum(-1))
    g_pix, g_mean, g_off = pixels.sum(-1), mean.sum(-1), offset.sum(-1)
    cost -= _mm(w, g_mean * g_mean) + _mm(w * m * m, g_off * g_off)
    cost += 2 * _mm(w * g_pix, g_mean) + 2 * _mm(w * m * g_pix, g_off)
    cost -= 2 * _mm(w * m, g_mean * g_off)
    return cost


def _estimate_daylight(pixels: np.ndarray, tpl: _Templates, sleeping: bool) -> float:
    """Least-squares daylight of the central tiles, each matched to its best template.

    Around the player crafter's night noise is negligible, so each pixel is close to
    ``night + d * (day - night)``; ``d`` is solved in closed form per (tile, template),
    the best-fitting template picks each tile's ``d`` and the median is returned.
    """
    day, night = tpl.day, tpl.night
    centre = pixels[tpl.centre]
    if sleeping:
        day, night = _to_grey(day), _to_grey(night)
    k = day.shape[0]
    diff = (day - night).reshape(k, -1)
    base = night.reshape(k, -1)
    obs = centre.reshape(len(centre), -1)
    dd = (diff * diff).sum(1)
    proj = _mm(obs, diff) - (base * diff).sum(1)[None, :]
    d = np.clip(proj / np.maximum(dd, 1e-9)[None, :], 0.0, 1.0)
    dist0 = (obs * obs).sum(1)[:, None] - 2 * _mm(obs, base) + (base * base).sum(1)[None, :]
    resid = dist0 - 2 * d * proj + d * d * dd[None, :]
    best = resid.argmin(1)
    return float(np.median(d[np.arange(len(centre)), best]))


def estimate_daylight(frame: np.ndarray) -> float:
    """Estimate crafter's daylight level (0 = deep night, 1 = full day) from a frame."""
    pixels, unit = _map_tiles(frame)
    sleeping = _is_sleeping(pixels)
    if sleeping:
        pixels = pixels[..., 1:2]
    return _estimate_daylight(pixels + 0.5, _templates(unit), sleeping)


def decode_frame(frame: np.ndarray, daylight: float | None = None) -> list[list[str]]:
    """Name every tile of the 9x7 map view: ``grid[col][row]``, the player at ``[4][3]``.

    ``daylight`` is crafter's light level for the frame (``Perception.daylight``); when it
    is ``None`` it is estimated from the frame. Far tiles at deep night are drawn mostly as
    noise by crafter and may be misread.
    """
    pixels, unit = _map_tiles(frame)
    tpl = _templates(unit)
    sleeping = _is_sleeping(pixels)
    if sleeping:
        pixels = pixels[..., 1:2]
    pixels = pixels + 0.5
    if daylight is None:
        daylight = _estimate_daylight(pixels, tpl, sleeping)
    best = _costs(pixels, tpl, daylight, sleeping).argmin(1)
    names = [tpl.labels[k] for k in best]
    return [names[c * GRID_ROWS:(c + 1) * GRID_ROWS] for c in range(GRID_COLS)]


@lru_cache(maxsize=8)
def _item_slots(unit: int) -> np.ndarray:
    """Pictures of every inventory slot for amounts 0..9: (items, 10, u*u*3) float."""
    textures = _textures()
    icon_at, icon_size = int(0.1 * unit), int(0.8 * unit)
    digit_at, digit_size = int(0.4 * unit), int(0.6 * unit)
    slots = np.zeros((len(constants.items), 10, unit, unit, 3), np.uint8)
    for i, item in enumerate(constants.items):
        icon = textures.get(item, (icon_size, icon_size))
        for amount in range(1, 10):
            slot = slots[i, amount]
            area = slot[icon_at:icon_at + icon_size, icon_at:icon_at + icon_size]
            area[...] = _blend(area, icon)
            digit = textures.get(str(amount), (digit_size, digit_size))
            area = slot[digit_at:digit_at + digit_size, digit_at:digit_at + digit_size]
            area[...] = _blend(area, digit)
    return slots.reshape(len(constants.items), 10, -1).astype(np.float64)


def decode_inventory(frame: np.ndarray) -> dict[str, int]:
    """Read the inventory bar (vitals included) from the two bottom rows of a frame."""
    unit, border = _layout(frame)
    view = np.asarray(frame).transpose(1, 0, 2)[border:, border:]
    slots = _item_slots(unit)
    found: dict[str, int] = {}
    for i, item in enumerate(constants.items):
        col, row = i % VIEW[0], i // VIEW[0]
        x, y = col * unit, (GRID_ROWS + row) * unit
        seen = view[x:x + unit, y:y + unit].astype(np.float64).reshape(-1)
        found[item] = int(((slots[i] - seen) ** 2).sum(1).argmin())
    return found
