"""The Spatial grid's map drawn in the browser on one canvas: the interacted cells coloured
by kind, each life's path, the episodes' end positions and the deaths, the picked cell, a
failed action's target and the time cursor's place.

Why not Vega-Lite: a click to the Spatial grid at 360,000 steps with every life shown sent a
1.5 MB spec of ~14,000 marks, and Vega parsed it and built its scene graph on the browser's
main thread every time: the map alone cost 0.4 s of the click's 0.54 s (3.5x the bare
Streamlit app's click), and no layer dropped from it brought that down by much
(docs/benchmarks.md, "The Spatial grid on a canvas"). The exported figure is still Vega-Lite
(``dashboard.figures.grid_figure``), drawn from the same view.

:func:`map_data` makes what is drawn from a :class:`~loaders.chart_data.GridView` as plain
columns, with no Streamlit; :func:`draw` mounts the component (``st.components.v2``, inline
HTML/CSS/JS, no build step). As before: equal axes, the second axis growing downwards as in
the game, wheel to zoom, drag to pan, double-click to reset (in the browser, kept across
reruns while the map's extent stays), hovering shows what is under the pointer as text
(never HTML), and clicking a cell or a mark reports its cell back to Python.
"""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd
import streamlit as st

from dashboard import theme
from dashboard.canvas import JS, SHAPES, TIP_CSS, column, count
from loaders.chart_data import GridView

GRID_SIDE = 720
"""The map's longer side (pixels) where the page has room; both axes get the same pixels per
cell, and a narrower page shrinks both."""

LIFE, INK = "life", "ink"
"""Colours a mark takes from where it is drawn: its life's, the theme's text colour."""

MARKS = {"episode end position": ("circle", 70, LIFE, False), "death": ("x", 130, INK, False),
         "selected cell": ("square", 420, "#ff00aa", True), "failed target": ("diamond", 520, "#d62728", True),
         "time cursor": ("circle", 260, INK, True)}
"""The map's point marks by what they stand for: shape (a :data:`~dashboard.canvas.SHAPES`
name), size (pixels²), colour (or :data:`LIFE`, :data:`INK`) and whether only its outline is
drawn."""

MANY_LIVES = 6
"""With more lives than this, the map's life colours get no legend (the note says so)."""

DEATH_LIFE = -1
"""The ``life`` of a death's mark (it is drawn in the theme's text colour, whatever life it
ended: black on a light page, light on a dark one)."""

HALF = 0.46
"""Half a cell's drawn side, in cells: neighbouring cells keep a hairline between them."""


def points(view: GridView) -> pd.DataFrame:
    """Episode end positions and deaths as one table of marks (``x, y, life, mark``) with
    their hover texts (``what``, ``detail``); a death's ``life`` is :data:`DEATH_LIFE`."""
    pos = view.positions
    many = pos["count"] > 1
    lives = pos["life"].astype(str)
    ended = ("1 episode ended here, life " + lives).where(
        ~many, pos["count"].astype(str) + " episodes ended here, lives " + pos["first_life"].astype(str) + "–"
        + lives)
    latest = ("latest " + pos["id"]).where(many, pos["id"])
    ends = pd.DataFrame({"x": pos["x"], "y": pos["y"], "life": pos["life"], "mark": "episode end position",
                         "what": ended, "detail": latest + ": " + pos["summary"].str.slice(0, 80)})
    d = view.deaths
    deaths = pd.DataFrame({"x": d["x"], "y": d["y"], "life": DEATH_LIFE, "mark": "death",
                           "what": "death at step " + d["step"].astype(str),
                           "detail": d["cause"].fillna("unknown").astype(str)})
    return pd.concat([ends, deaths], ignore_index=True)


def map_data(view: GridView, cell: tuple[int, int] | None = None,
             mark: tuple[int, int] | None = None) -> dict[str, Any]:
    """What :func:`draw` draws, as JSON-ready columns: the ``extent`` (first and last cell of
    each axis: the view's, grown to hold the picked cell and the target) and ``plane`` (the
    second axis' name); ``cells`` (``x, y, kind`` (an index into ``kinds``, each with its
    colour), ``count`` of grid records, ``first``/``last`` step,
    ``lives``); ``paths`` (``life, step, x, y`` in step order, a life's points consecutive);
    ``points`` (:func:`points`, ``mark`` an index into ``marks``: :data:`MARKS`' name, colour,
    :data:`~dashboard.canvas.SHAPES` path, size and outline);
    ``lives`` with their colours (``legend`` false when there are more than
    :data:`MANY_LIVES`); the picked ``cell`` and the failed action's ``target``; ``here``
    (the time cursor's place, set by :func:`with_here`); a ``note`` under the map and an
    ``aria`` sentence saying what it holds."""
    x0, y0, x1, y1 = _around(view.extent, cell, mark)
    cells, paths = view.cells, view.paths
    pts = points(view)
    lives = sorted({int(v) for v in paths["life"]} | {int(v) for v in view.positions["life"]})
    many = len(lives) > MANY_LIVES
    kinds = list(dict.fromkeys(cells["kind"])) if len(cells) else []
    kind_at = {k: i for i, k in enumerate(kinds)}
    names = [m for m in MARKS if m in set(pts["mark"]) or (m == "selected cell" and cell is not None)
             or (m == "failed target" and mark is not None)]
    mark_at = {m: i for i, m in enumerate(names)}
    if len(paths):
        paths = paths.sort_values(["life", "step"], kind="stable")
    aria = (f"Map of {view.plane} against x, cells {x0}–{x1} by {y0}–{y1}: {count(len(cells), 'interacted cell')}, "
            + (f"the paths of {count(len(lives), 'life', 'lives')} through {count(len(paths), 'point')}, " if len(paths)
               else "no paths, ")
            + f"{count(len(view.positions), 'cell')} where episodes ended, {count(len(view.deaths), 'death')}"
            + (f"; picked cell ({cell[0]}, {cell[1]})" if cell is not None else "")
            + (f"; failed target ({mark[0]}, {mark[1]})" if mark is not None else "") + ".")
    note = ("Each life's path and its episodes' end positions in the life's colour"
            + (f" ({len(lives)} lives)" if many else "") + ". Drag to pan, wheel to zoom, double-click to reset.")
    return {
        "extent": [int(x0), int(y0), int(x1), int(y1)], "plane": view.plane, "side": GRID_SIDE,
        "kinds": [[k, theme.cell_kind_color(k)] for k in kinds],
        "cells": {"x": column(cells["x"], int), "y": column(cells["y"], int),
                  "kind": [kind_at[k] for k in cells["kind"]],
                  "count": column(cells["count"], int), "first": column(cells["first_step"], int),
                  "last": column(cells["last_step"], int), "lives": column(cells["lives"], str)},
        "paths": {"life": column(paths["life"], int), "step": column(paths["step"], int),
                  "x": column(paths["x"], float), "y": column(paths["y"], float)},
        "marks": [_mark(m) for m in names],
        "points": {"x": column(pts["x"], float), "y": column(pts["y"], float), "life": column(pts["life"], int),
                   "mark": [mark_at[m] for m in pts["mark"]], "what": column(pts["what"], str),
                   "detail": column(pts["detail"], str)},
        "lives": [[v, theme.life_color(v)] for v in lives], "legend": not many,
        "cell": list(cell) if cell is not None else None, "target": list(mark) if mark is not None else None,
        "here": None, "note": note, "aria": aria,
    }


def _around(extent: tuple[int, int, int, int], *cells: tuple[float, float] | list | None
            ) -> tuple[int, int, int, int]:
    """``extent`` (first and last cell of each axis) grown to hold each of ``cells`` given: a
    picked cell or a failed target outside what the filters show stays on the map."""
    x0, y0, x1, y1 = extent
    for c in (c for c in cells if c is not None):
        x0, y0, x1, y1 = min(x0, int(c[0])), min(y0, int(c[1])), max(x1, int(c[0])), max(y1, int(c[1]))
    return x0, y0, x1, y1


def _mark(name: str) -> list:
    shape, size, colour, outline = MARKS[name]
    return [name, colour, SHAPES[shape], size, outline]


def with_here(data: dict[str, Any], x: float, y: float, step: int, life: int) -> dict[str, Any]:
    """A copy of :func:`map_data`'s data with the time cursor's ring at ``(x, y)`` (the data
    itself is shared, not copied)."""
    return {**data, "marks": [*data["marks"], _mark("time cursor")],
            "here": [float(x), float(y), int(step), int(life)], "extent": list(_around(tuple(data["extent"]), (x, y)))}


_HTML = """<div class="mfm-grid">
  <div class="mfm-grid-legend"></div>
  <div class="mfm-grid-box"><canvas class="mfm-grid-canvas" role="img"></canvas><div class="mfm-grid-tip"></div></div>
  <div class="mfm-grid-note"></div>
</div>"""

_CSS = """
.mfm-grid { font-family: var(--st-font); color: var(--st-text-color); font-size: 12px; }
.mfm-grid-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; margin: 0 0 4px 58px; }
.mfm-grid-legend span { white-space: nowrap; }
.mfm-grid-legend b { font-weight: 600; margin-right: -6px; }
.mfm-grid-legend svg { vertical-align: -1px; margin-right: 4px; }
.mfm-grid-box { position: relative; }
.mfm-grid-canvas { display: block; touch-action: none; }
.mfm-grid-note { margin: 2px 0 0 58px; opacity: 0.8; }
.mfm-grid-tip { """ + TIP_CSS + """ }
"""

_JS = JS + """
const L = 58, R = 10, T = 8, B = 40, HALF = """ + str(HALF) + """;

function legend(el, d) {
  const head = (text) => { const b = document.createElement('b'); b.textContent = text; return b; };
  const items = [];
  if (d.kinds.length) items.push(head('cell'), ...d.kinds.map(([k, color]) => legendItem(color, null, false, k)));
  if (d.marks.length) items.push(head('mark'), ...d.marks.map(([name, color, path, , outline]) =>
    legendItem(color === 'life' ? '#777777' : color === 'ink' ? 'currentColor' : color, path, false, name, outline)));
  if (d.legend && d.lives.length) items.push(head('life'), ...d.lives.map(([v, color]) => legendItem(color, null, true, String(v))));
  el.replaceChildren(...items);
}

function layout(root, st) {
  const d = st.data, [x0, y0, x1, y1] = d.extent, w = x1 - x0 + 1, h = y1 - y0 + 1;
  const room = Math.max(160, root.clientWidth - L - R);
  const per = Math.min(d.side / Math.max(w, h), room / w);
  const pw = w * per, ph = h * per, z = st.zoom.z, u = per * z;
  const X = (x) => L + (x - st.zoom.ox) * u, Y = (y) => T + (y - st.zoom.oy) * u;
  const cx = (px) => st.zoom.ox + (px - L) / u, cy = (py) => st.zoom.oy + (py - T) / u;
  return { W: L + pw + R, H: T + ph + B, pw, ph, per, u, X, Y, cx, cy };
}

function home(d) { return { z: 1, ox: d.extent[0] - 0.5, oy: d.extent[1] - 0.5 }; }

function color(st, m, i, ink) {
  const c = st.data.marks[m][1];
  if (c === 'ink') return ink;
  if (c === 'life') return st.lifeColor.get(st.data.points.life[i]) || '#777777';
  return c;
}

function outline(g, path, x, y, size, color) {
  const r = Math.sqrt(size) / 2;
  g.save(); g.translate(x, y); g.scale(r, r); g.strokeStyle = color; g.lineWidth = 3 / r; g.stroke(path); g.restore();
}

function draw(root, st) {
  const d = st.data, k = layout(root, st);
  const [g, ink] = begin(root, st, k, d.aria);
  const xt = niceTicks(Math.ceil(k.cx(L)), Math.floor(k.cx(L + k.pw)), Math.max(2, Math.floor(k.pw / 60)));
  const yt = niceTicks(Math.ceil(k.cy(T)), Math.floor(k.cy(T + k.ph)), Math.max(2, Math.floor(k.ph / 50)));
  g.save(); g.beginPath(); g.rect(L, T, k.pw, k.ph); g.clip();
  g.strokeStyle = 'rgba(128,128,128,0.18)'; g.lineWidth = 1; g.beginPath();
  for (const t of xt) { const px = Math.round(k.X(t)) + 0.5; g.moveTo(px, T); g.lineTo(px, T + k.ph); }
  for (const t of yt) { const py = Math.round(k.Y(t)) + 0.5; g.moveTo(L, py); g.lineTo(L + k.pw, py); }
  g.stroke();
  const c = d.cells, side = 2 * HALF * k.u;
  for (let kind = 0; kind < d.kinds.length; kind++) {
    g.fillStyle = d.kinds[kind][1]; g.beginPath();
    for (let i = 0; i < c.x.length; i++) if (c.kind[i] === kind) g.rect(k.X(c.x[i] - HALF), k.Y(c.y[i] - HALF), side, side);
    g.fill();
  }
  const p = d.paths, byColor = new Map();
  for (let i = 0; i < p.x.length;) {
    const life = p.life[i], col = st.lifeColor.get(life) || '#777777';
    let path = byColor.get(col);
    if (!path) byColor.set(col, path = new Path2D());
    path.moveTo(k.X(p.x[i]), k.Y(p.y[i]));
    for (i++; i < p.x.length && p.life[i] === life; i++) path.lineTo(k.X(p.x[i]), k.Y(p.y[i]));
  }
  g.globalAlpha = 0.75; g.lineWidth = 1;
  for (const [col, path] of byColor) {
    g.strokeStyle = col; g.stroke(path);
    g.save(); g.translate(0.7, 0.7); g.stroke(path); g.restore();
  }
  g.globalAlpha = 1;
  const q = d.points, paths = d.marks.map((m) => new Path2D(m[2])), groups = new Map();
  for (let i = 0; i < q.x.length; i++) {
    const m = q.mark[i], fill = color(st, m, i, ink), key = m + ' ' + fill;
    let grp = groups.get(key);
    if (!grp) groups.set(key, grp = { m, fill, path: new Path2D() });
    const x = k.X(q.x[i]), y = k.Y(q.y[i]), r = Math.sqrt(d.marks[m][3]) / 2;
    if (d.marks[m][0] === 'episode end position') { grp.path.moveTo(x + r, y); grp.path.arc(x, y, r, 0, 2 * Math.PI); }
    else grp.path.addPath(paths[m], new DOMMatrix([r, 0, 0, r, x, y]));
  }
  g.strokeStyle = '#222222'; g.lineWidth = 0.8;
  for (const grp of groups.values()) { g.fillStyle = grp.fill; g.fill(grp.path); g.stroke(grp.path); }
  for (const [name, at] of [['selected cell', d.cell], ['failed target', d.target], ['time cursor', d.here]]) {
    const m = d.marks.findIndex((e) => e[0] === name);
    if (at && m >= 0) outline(g, paths[m], k.X(at[0]), k.Y(at[1]), d.marks[m][3], color(st, m, -1, ink));
  }
  if (!c.x.length && !p.x.length && !q.x.length) {
    g.fillStyle = ink; g.font = '12px sans-serif'; g.textAlign = 'center'; g.textBaseline = 'middle';
    g.fillText('no cells or positions recorded', L + k.pw / 2, T + k.ph / 2);
  }
  g.restore();
  g.strokeStyle = '#bbbbbb'; g.lineWidth = 1; g.strokeRect(L - 0.5, T - 0.5, k.pw + 1, k.ph + 1);
  g.fillStyle = ink; g.font = '11px sans-serif'; g.textAlign = 'center'; g.textBaseline = 'top';
  for (const t of xt) { const px = k.X(t); g.fillRect(Math.round(px), T + k.ph, 1, 4); g.fillText(String(t), px, T + k.ph + 6); }
  g.textAlign = 'right'; g.textBaseline = 'middle';
  for (const t of yt) { const py = k.Y(t); g.fillRect(L - 5, Math.round(py), 4, 1); g.fillText(String(t), L - 7, py); }
  g.font = 'bold 11px sans-serif'; g.textAlign = 'center';
  g.fillText('x (cells)', L + k.pw / 2, T + k.ph + 28);
  g.save(); g.translate(12, T + k.ph / 2); g.rotate(-Math.PI / 2);
  g.fillText(d.plane + ' (cells, downwards as in the game)', 0, 0); g.restore();
}

function hit(st, px, py) {
  const d = st.data, k = st.k;
  if (px < L || px > L + k.pw || py < T || py > T + k.ph) return null;
  const off = (x, y) => Math.hypot(k.X(x) - px, k.Y(y) - py);
  const near = (x, y, size) => off(x, y) <= Math.sqrt(size) / 2 + 2;
  const at = (x, y) => '(' + x + ', ' + y + ')';
  const rings = [['time cursor', d.here], ['failed target', d.target], ['selected cell', d.cell]];
  for (const [name, where] of rings) {
    const m = d.marks.find((e) => e[0] === name);
    const e = where && m ? off(where[0], where[1]) - Math.sqrt(m[3]) / 2 : Infinity;
    if (e >= -4 && e <= 2) {
      const text = name === 'time cursor' ? 'time cursor: step ' + where[2] + ', life ' + where[3] : name;
      return { x: where[0], y: where[1], text: text + '\\n' + at(where[0], where[1]) };
    }
  }
  const q = d.points;
  for (let i = q.x.length - 1; i >= 0; i--) {
    if (near(q.x[i], q.y[i], d.marks[q.mark[i]][3]))
      return { x: q.x[i], y: q.y[i], text: q.what[i] + '\\n' + q.detail[i] + '\\n' + at(q.x[i], q.y[i]) };
  }
  if (!st.cellAt) st.cellAt = new Map(d.cells.x.map((x, i) => [x + ',' + d.cells.y[i], i]));
  const cx = Math.round(k.cx(px)), cy = Math.round(k.cy(py)), i = st.cellAt.get(cx + ',' + cy);
  if (i === undefined || Math.abs(k.cx(px) - cx) > HALF || Math.abs(k.cy(py) - cy) > HALF) return null;
  const c = d.cells;
  return { x: cx, y: cy, text: at(cx, cy) + ' · ' + d.kinds[c.kind[i]][0] + '\\n' + c.count[i] + ' record'
    + (c.count[i] === 1 ? '' : 's') + ' · steps ' + c.first[i] + '–' + c.last[i] + '\\nlives ' + c.lives[i] };
}

export default function ({ data, setTriggerValue, parentElement }) {
  const root = parentElement.querySelector('.mfm-grid');
  const cv = root.querySelector('canvas'), tip = root.querySelector('.mfm-grid-tip');
  const st = root.__mfm || (root.__mfm = {});
  const extent = data.extent.join(',');
  if (st.extent !== extent || !st.zoom) { st.zoom = home(data); st.extent = extent; }
  st.data = data;
  st.lifeColor = new Map(data.lives.map(([v, color]) => [v, color]));
  st.cellAt = null;
  legend(root.querySelector('.mfm-grid-legend'), data);
  root.querySelector('.mfm-grid-note').textContent = data.note;
  draw(root, st);
  if (!st.observer) {
    st.observer = new ResizeObserver(() => { if (root.clientWidth !== st.width) draw(root, st); });
    st.observer.observe(root);
  }
  const pos = (ev) => { const r = cv.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
  let drag = null;
  cv.onpointerdown = (ev) => {
    const [px, py] = pos(ev);
    drag = { px, py, ox: st.zoom.ox, oy: st.zoom.oy, moved: false };
    cv.setPointerCapture(ev.pointerId);
  };
  cv.onpointermove = (ev) => {
    const [px, py] = pos(ev);
    if (drag && (drag.moved || Math.hypot(px - drag.px, py - drag.py) > 3)) {
      drag.moved = true; tip.style.display = 'none'; cv.style.cursor = 'grabbing';
      st.zoom.ox = drag.ox - (px - drag.px) / st.k.u; st.zoom.oy = drag.oy - (py - drag.py) / st.k.u;
      draw(root, st);
      return;
    }
    const h = hit(st, px, py);
    cv.style.cursor = h ? 'pointer' : 'grab';
    showTip(tip, h ? h.text : null, px, py, st.k.W);
  };
  cv.onpointerup = (ev) => {
    const was = drag; drag = null; cv.style.cursor = 'grab';
    if (!was || was.moved) return;
    const h = hit(st, ...pos(ev));
    if (h) setTriggerValue('cell', Math.round(h.x) + ',' + Math.round(h.y));
  };
  cv.onpointerleave = () => { if (!drag) tip.style.display = 'none'; };
  cv.onwheel = (ev) => {
    const [px, py] = pos(ev);
    if (px < L || px > L + st.k.pw || py < T || py > T + st.k.ph) return;
    ev.preventDefault();
    const x = st.k.cx(px), y = st.k.cy(py);
    const z = Math.min(40, Math.max(0.5, st.zoom.z * Math.exp(-ev.deltaY * 0.0015)));
    const u = st.k.per * z;
    st.zoom = { z, ox: x - (px - L) / u, oy: y - (py - T) / u };
    draw(root, st);
  };
  cv.ondblclick = () => { st.zoom = home(st.data); draw(root, st); };
  return () => { if (st.observer) { st.observer.disconnect(); st.observer = null; } };
}
"""

_COMPONENT = st.components.v2.component("mfm_grid_map", html=_HTML, css=_CSS, js=_JS, isolate_styles=False)


def draw(data: dict[str, Any], key: str, on_cell: Callable[[], None]) -> Any:
    """Mount the map of :func:`map_data`; a click on a cell or a mark sets the result's
    ``cell`` (``"x,y"``, a trigger: it holds the cell during the rerun the click makes) and
    calls ``on_cell``."""
    return _COMPONENT(key=key, data=data, on_cell_change=on_cell, height="content")
