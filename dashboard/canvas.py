"""What the charts the dashboard draws on a canvas of its own share (the Timeline's lanes,
``dashboard.timeline_canvas``; the Spatial grid's map, ``dashboard.grid_canvas``): the marker
symbols as SVG paths, columns made JSON-ready, and the JavaScript both components start with
(axis ticks, legend swatches, the hover text's place).

Each component gets its data as columns (a list per field) rather than a list of records:
fewer bytes to send on every rerun and to parse in the browser.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

CIRCLE = "M1,0A1,1 0 1 1 -1,0A1,1 0 1 1 1,0Z"
SHAPES = {
    "circle": CIRCLE,
    "square": "M-1,-1H1V1H-1Z",
    "diamond": "M0,-1L1,0L0,1L-1,0Z",
    "triangle-up": "M0,-0.87L1,0.87H-1Z",
    "triangle-down": "M0,0.87L-1,-0.87H1Z",
    "cross": "M-1,-0.4H-0.4V-1H0.4V-0.4H1V0.4H0.4V1H-0.4V0.4H-1Z",
    "x": "M-0.8,-1L0,-0.2L0.8,-1L1,-0.8L0.2,0L1,0.8L0.8,1L0,0.2L-0.8,1L-1,0.8L-0.2,0L-1,-0.8Z",
    "star": "M0,-1L0.24,-0.33L0.95,-0.31L0.38,0.12L0.59,0.81L0,0.4L-0.59,0.81L-0.38,0.12L-0.95,-0.31L-0.24,-0.33Z",
    "circle-x": (CIRCLE + "M-0.5,-0.65L0,-0.15L0.5,-0.65L0.65,-0.5L0.15,0L0.65,0.5L0.5,0.65L0,0.15L-0.5,0.65"
                 "L-0.65,0.5L-0.15,0L-0.65,-0.5Z"),
}
"""Each marker symbol (``theme.MARK_STYLES``' and the maps') as an SVG path in the square
from -1 to 1, filled with the even-odd rule (the circled cross is a hole); a mark of size
``s`` (pixels²) is drawn scaled by ``sqrt(s) / 2``, as Vega draws its symbols."""


def column(s: pd.Series, kind: type) -> list:
    """A column as a JSON list of ``kind`` (float: NaN as null)."""
    if kind is float:
        v = s.to_numpy(float)
        return [None if x != x else x for x in v.tolist()]
    return [kind(x) for x in s.tolist()]


def count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun it counts."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def rows(table: dict[str, list]) -> list[dict[str, Any]]:
    """One of a component's column tables as a list of rows."""
    keys = list(table)
    return [dict(zip(keys, r)) for r in zip(*(table[k] for k in keys))]


JS = """
const ns = 'http://www.w3.org/2000/svg';

function niceTicks(lo, hi, n) {
  const raw = Math.max(1, hi - lo) / Math.max(1, n), mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return out;
}

function swatch(color, path, line, outline) {
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', '11'); svg.setAttribute('height', '11'); svg.setAttribute('viewBox', '-1.1 -1.1 2.2 2.2');
  const p = document.createElementNS(ns, 'path');
  if (line) { p.setAttribute('d', 'M-1,0H1'); p.setAttribute('stroke', color); p.setAttribute('stroke-width', '0.5'); }
  else if (outline) {
    p.setAttribute('d', path); p.setAttribute('fill', 'none'); p.setAttribute('stroke', color);
    p.setAttribute('stroke-width', '0.35'); p.setAttribute('transform', 'scale(0.8)');
  } else { p.setAttribute('d', path || 'M-1,-1H1V1H-1Z'); p.setAttribute('fill', color); p.setAttribute('fill-rule', 'evenodd'); }
  svg.append(p);
  return svg;
}

function legendItem(color, path, line, text, outline) {
  const s = document.createElement('span');
  s.append(swatch(color, path, line, outline), document.createTextNode(text));
  return s;
}

function begin(root, st, k, aria) {
  const cv = root.querySelector('canvas'), dpr = window.devicePixelRatio || 1;
  st.k = k; st.width = root.clientWidth;
  cv.width = Math.round(k.W * dpr); cv.height = Math.round(k.H * dpr);
  cv.style.width = k.W + 'px'; cv.style.height = k.H + 'px';
  cv.setAttribute('aria-label', aria);
  const g = cv.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, k.W, k.H);
  return [g, getComputedStyle(root).color || '#262730'];
}

function showTip(tip, text, px, py, width) {
  if (text === null) { tip.style.display = 'none'; return; }
  tip.textContent = text;
  tip.style.display = 'block';
  const left = px + 14 + tip.offsetWidth > width ? px - 14 - tip.offsetWidth : px + 14;
  tip.style.left = Math.max(0, left) + 'px'; tip.style.top = (py + 14) + 'px';
}
"""
"""The JavaScript each canvas component's script starts with: ``niceTicks`` (round axis
values), ``swatch`` and ``legendItem`` (a legend entry as SVG and text, never HTML), ``begin``
(the canvas sized to the layout ``k`` at the screen's pixel ratio, labelled and cleared: its
context and the theme's text colour), ``showTip`` (the hover text beside the pointer, as
text)."""

TIP_CSS = """position: absolute; display: none; pointer-events: none; z-index: 2; white-space: pre;
  background: var(--st-background-color, #fff); border: 1px solid var(--st-border-color, #bbb); border-radius: 3px;
  padding: 4px 6px; font-size: 12px; box-shadow: 0 1px 3px rgba(0,0,0,0.2);"""
"""The hover text's box, in the theme's colours."""
