"""The Timeline's chart drawn in the browser on one canvas: the episodes as bars, one lane
per life, the event marks, and the vitals in a band below, over one env-step axis.

Why not Vega-Lite: a click on the Timeline reran the page and Vega then rebuilt its scene
graph of the whole chart, 110-140 ms of the browser's main thread at 360,000 steps, which
no trimming of the chart brought down; the click took 3.2x the bare Streamlit app's. Drawn
here it took 1.6x (docs/benchmarks.md, "The Timeline on a canvas"). The exported figure is
still Vega-Lite (``dashboard.figures.timeline_figure``), drawn from the same view.

:func:`lanes_data` makes what is drawn from a :class:`~loaders.chart_data.TimelineView`, as
plain columns (the marks with the lane, shape, colour and size they are drawn at), with no
Streamlit; :func:`draw` mounts the component (``st.components.v2``, inline HTML/CSS/JS, no
build step). Hovering shows what is under the pointer as text (never HTML); a click on the
bar of one episode reports that episode back to Python. The server-side zoom is the page's
step-range slider.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import theme
from dashboard.canvas import JS, SHAPES, TIP_CSS, column, count
from loaders.chart_data import TimelineView

MARK_OFFSETS = {"milestone": -0.42, "memory_write": -0.32, "death": 0.0, "search": 0.32, "inspect": 0.42,
                "model_ok": 0.2, "model_retried": 0.2, "model_failed": 0.2}
"""Where in its life's lane (lane height 1) each kind of timeline mark sits, so kinds at
one step do not hide each other."""

SELECTED = "selected episode"
"""The legend name of the pointer over the selected episode."""

VITALS_HEIGHT = 150
"""Height (pixels) of the vitals band's scale: values 0-9 take 9/10 of it."""
BAND_PAD = 24
"""Pixels of the vitals band beyond :data:`VITALS_HEIGHT`."""


def lane_height(lives: list[int]) -> int:
    """Pixels per life's lane: roomy for a few lives, at least 22 for many."""
    return 70 if len(lives) <= 8 else max(22, 560 // len(lives))


def timeline_marks(view: TimelineView, selected: str | None,
                   span: tuple[int, int, int] | None) -> pd.DataFrame:
    """The event marks with their lane (the life plus the kind's offset), legend name, hover
    label and size (pixels²; binned marks grow with the log of how many they hold), and the
    selected episode's pointer."""
    marks, lives = view.marks, view.lives
    scale = 1.0 if len(lives) <= 8 else max(0.55, 8 / len(lives))
    parts = []
    for kind, style in theme.MARK_STYLES.items():
        m = marks[marks["kind"] == kind] if len(marks) else marks
        if not len(m):
            continue
        side = (style["size"] * scale if m["count"].max() <= 1
                else np.clip((style["size"] + np.log2(m["count"].to_numpy(float))) * scale, 5, 22))
        parts.append(pd.DataFrame({"step": m["step"], "lane": m["life"] + MARK_OFFSETS[kind], "name": style["name"],
                                   "label": m["label"], "size": np.square(side) * 0.8}))
    if span is not None:
        a, b, life = span
        parts.append(pd.DataFrame([{"step": (a + b) / 2, "lane": life - 0.47, "name": SELECTED,
                                    "label": f"selected {selected}: steps {a}–{b}", "size": 150.0}]))
    return (pd.concat(parts, ignore_index=True) if parts
            else pd.DataFrame(columns=["step", "lane", "name", "label", "size"]))


def with_breaks(lines: pd.DataFrame) -> pd.DataFrame:
    """``lines`` (:attr:`TimelineView.vital_lines`) with, per vital, a row of value null halfway
    between the end of one life and the start of the next, sorted by vital, life and step:
    one line per vital, broken where a life ends."""
    if not len(lines):
        return lines
    parts = [lines.assign(_break=False)]
    for vital, g in lines.groupby("vital", sort=False):
        step, life = g["step"].to_numpy(), g["life"].to_numpy()
        order = np.lexsort((step, life))
        step, life = step[order], life[order]
        new = life[1:] != life[:-1]
        parts.append(pd.DataFrame({"step": (step[:-1][new] + step[1:][new]) / 2, "life": life[1:][new],
                                   "vital": vital, "value": np.nan, "_break": True}))
    return (pd.concat([p for p in parts if len(p)], ignore_index=True)
            .sort_values(["vital", "life", "_break", "step"], ascending=[True, True, False, True], kind="stable")
            .drop(columns="_break").astype({"value": float}).reset_index(drop=True))


def lanes_data(view: TimelineView, selected: str | None = None, step: int | None = None,
               span: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """What :func:`draw` draws, as JSON-ready columns: ``bars`` (``life, start, end, cat``
    (an index into ``categories``), ``episode`` (None for a bar merging several), ``label``,
    ``count``), ``marks`` (:func:`timeline_marks`; ``kind`` an index into ``kinds``, each with
    its name, colour and :data:`SHAPES` path), ``vitals`` (``vital, life, step, value``, drawn
    step-after, a null breaking the line between lives), the selected episode's outline
    (``chosen``: start, end, life of its bar) and shaded ``span``, the dotted ``step``, the
    lane and band sizes in pixels, and an ``aria`` sentence saying what the chart holds (the
    ``pointer`` kind, the selected episode's, is drawn in the text colour)."""
    bars, lives = view.bars, view.lives
    lane_px = float(max(lane_height(lives) * (len(lives) + 0.2), 120) / (len(lives) + 0.2))
    cats = sorted(set(bars["category"])) if len(bars) else []
    marks = timeline_marks(view, selected, span)
    style = {s["name"]: s for s in theme.MARK_STYLES.values()}
    names = list(dict.fromkeys(marks["name"]))
    lines = with_breaks(view.vital_lines)
    if not len(lines):
        lines = pd.DataFrame({"vital": [], "life": [], "step": [], "value": []})
    cat_at, kind_at = {c: i for i, c in enumerate(cats)}, {n: i for i, n in enumerate(names)}
    vital_at = {v: i for i, v in enumerate(theme.VITAL_COLORS)}
    chosen = bars[bars["episode"] == selected] if selected and len(bars) else bars.iloc[0:0]
    what = "outcome" if view.color_by == "outcome" else "action kind"
    binned = len(bars) and int(bars["count"].max()) > 1
    episodes = int(bars["count"].sum()) if len(bars) else 0
    n_marks = int(view.marks["count"].sum()) if len(view.marks) else 0
    aria = (f"Timeline of env steps {view.lo:,}–{view.hi:,}: {count(episodes, 'episode')}"
            + (f" in {count(len(bars), 'bar')}" if binned else "")
            + f" over {count(len(lives), 'life', 'lives')}, coloured by {what}; "
            + f"{count(n_marks, 'event mark')}" + ("; vitals 0–9 below" if len(lines) else "") + ".")
    return {
        "lo": view.lo, "hi": view.hi, "lives": [int(v) for v in lives], "lane_px": lane_px,
        "band_px": VITALS_HEIGHT + BAND_PAD if len(lines) else 0, "vitals_px": VITALS_HEIGHT, "what": what,
        "categories": [[c, theme.category_color(c, view.color_by)] for c in cats],
        "bars": {"life": column(bars["life"], int), "start": column(bars["start"], float),
                 "end": column(bars["end"], float), "cat": [cat_at[c] for c in bars["category"]],
                 "episode": [e if isinstance(e, str) else None for e in bars["episode"]],
                 "label": column(bars["label"], str), "count": column(bars["count"], int)},
        "kinds": [[n, style[n]["color"] if n in style else "#000000",
                   SHAPES[style[n]["symbol"] if n in style else "triangle-down"]] for n in names],
        "marks": {"step": column(marks["step"], float), "lane": column(marks["lane"], float),
                  "kind": [kind_at[n] for n in marks["name"]], "size": column(marks["size"], float),
                  "label": column(marks["label"], str)},
        "vital_colors": [[v, c] for v, c in theme.VITAL_COLORS.items()],
        "vitals": {"vital": [vital_at[v] for v in lines["vital"]], "life": column(lines["life"], int),
                   "step": column(lines["step"], float), "value": column(lines["value"], float)},
        "chosen": ([float(chosen["start"].iloc[0]), float(chosen["end"].iloc[0]), int(chosen["life"].iloc[0])]
                   if len(chosen) else None),
        "span": [span[0], max(span[1], span[0] + 0.5), span[2]] if span else None,
        "step": step, "aria": aria, "pointer": SELECTED,
    }


_HTML = """<div class="mfm-lanes">
  <div class="mfm-lanes-legend"></div>
  <div class="mfm-lanes-box"><canvas class="mfm-lanes-canvas" role="img"></canvas><div class="mfm-lanes-tip"></div></div>
</div>"""

_CSS = """
.mfm-lanes { font-family: var(--st-font); color: var(--st-text-color); font-size: 12px; }
.mfm-lanes-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; margin: 0 0 4px 70px; }
.mfm-lanes-legend span { white-space: nowrap; }
.mfm-lanes-legend svg { vertical-align: -1px; margin-right: 4px; }
.mfm-lanes-box { position: relative; }
.mfm-lanes-canvas { display: block; }
.mfm-lanes-tip { """ + TIP_CSS + """ }
"""

_JS = JS + """
const L = 72, R = 74, T = 6, B = 38;

function legend(el, d) {
  el.replaceChildren(...d.categories.map(([c, color]) => legendItem(color, null, false, c)),
    ...d.kinds.map(([n, color, path]) => legendItem(n === d.pointer ? 'currentColor' : color, path, false, n)),
    ...(d.band_px ? d.vital_colors.map(([v, color]) => legendItem(color, null, true, v)) : []));
}

function layout(root, d) {
  const W = Math.max(320, root.clientWidth), lanesH = d.lane_px * (d.lives.length + 0.2);
  const H = T + lanesH + d.band_px + B, pw = W - L - R;
  const idx = new Map(d.lives.map((l, i) => [l, i]));
  const x = (s) => L + (s - d.lo + 0.5) / (d.hi - d.lo + 1) * pw;
  const pos = (lane) => { const life = Math.round(lane); return T + ((idx.get(life) ?? 0) + 0.6 + lane - life) * d.lane_px; };
  const vy = (v) => T + lanesH + d.band_px - (v + 0.5) * d.vitals_px / 10;
  const step = (px) => d.lo - 0.5 + (px - L) / pw * (d.hi - d.lo + 1);
  return { W, H, pw, lanesH, x, pos, vy, step };
}

function draw(root, st) {
  const d = st.data, k = layout(root, d);
  const [g, ink] = begin(root, st, k, d.aria);
  g.save(); g.beginPath(); g.rect(L, 0, k.pw, k.H); g.clip();
  if (d.span) {
    g.fillStyle = ink; g.globalAlpha = 0.1;
    g.fillRect(k.x(d.span[0]), T, Math.max(1, k.x(d.span[1]) - k.x(d.span[0])), k.lanesH);
    g.globalAlpha = 1;
  }
  const b = d.bars, half = d.lane_px * 0.25;
  for (let i = 0; i < b.start.length; i++) {
    g.fillStyle = d.categories[b.cat[i]][1];
    g.fillRect(k.x(b.start[i]), k.pos(b.life[i]) - half, Math.max(1, k.x(b.end[i]) - k.x(b.start[i])), 2 * half);
  }
  if (d.chosen) {
    const [a, e, life] = d.chosen, h = d.lane_px * 0.36;
    g.strokeStyle = ink; g.lineWidth = 2.5;
    g.strokeRect(k.x(a), k.pos(life) - h, Math.max(1, k.x(e) - k.x(a)), 2 * h);
  }
  const m = d.marks, paths = d.kinds.map((kind) => new Path2D(kind[2]));
  g.strokeStyle = '#fff';
  for (let i = 0; i < m.step.length; i++) {
    const r = Math.sqrt(m.size[i]) / 2;
    g.save(); g.translate(k.x(m.step[i]), k.pos(m.lane[i])); g.scale(r, r);
    g.fillStyle = d.kinds[m.kind[i]][0] === d.pointer ? ink : d.kinds[m.kind[i]][1];
    g.fill(paths[m.kind[i]], 'evenodd');
    g.lineWidth = 0.5 / r; g.stroke(paths[m.kind[i]]);
    g.restore();
  }
  if (d.band_px) {
    const v = d.vitals;
    for (let c = 0; c < d.vital_colors.length; c++) {
      g.strokeStyle = d.vital_colors[c][1]; g.lineWidth = 1.5; g.beginPath();
      let on = false, py = 0;
      for (let i = 0; i < v.step.length; i++) {
        if (v.vital[i] !== c) continue;
        if (v.value[i] === null) { on = false; continue; }
        const px = k.x(v.step[i]), y = k.vy(v.value[i]);
        if (!on) { g.moveTo(px, y); on = true; } else { g.lineTo(px, py); g.lineTo(px, y); }
        py = y;
      }
      if (on) g.lineTo(k.x(d.hi + 0.5), py);
      g.stroke();
    }
  }
  if (d.step !== null) {
    g.strokeStyle = ink; g.lineWidth = 1; g.setLineDash([2, 3]); g.beginPath();
    g.moveTo(k.x(d.step), T); g.lineTo(k.x(d.step), T + k.lanesH + d.band_px); g.stroke(); g.setLineDash([]);
  }
  g.restore();
  g.strokeStyle = '#bbb'; g.lineWidth = 1; g.beginPath();
  g.moveTo(L, T + k.lanesH + 0.5); g.lineTo(L + k.pw, T + k.lanesH + 0.5);
  g.moveTo(L, T + k.lanesH + d.band_px + 0.5); g.lineTo(L + k.pw, T + k.lanesH + d.band_px + 0.5); g.stroke();
  g.fillStyle = ink; g.font = '11px sans-serif'; g.textAlign = 'right'; g.textBaseline = 'middle';
  for (const life of d.lives) g.fillText('life ' + life, L - 6, k.pos(life));
  if (d.band_px) {
    g.textAlign = 'left';
    for (const v of [0, 3, 6, 9]) { g.fillRect(L + k.pw, k.vy(v), 4, 1); g.fillText(String(v), L + k.pw + 7, k.vy(v)); }
  }
  g.textAlign = 'center'; g.textBaseline = 'top';
  const bottom = T + k.lanesH + d.band_px;
  for (const t of niceTicks(d.lo, d.hi, Math.max(2, Math.floor(k.pw / 90)))) {
    const px = k.x(t); g.fillRect(Math.round(px), bottom, 1, 4); g.fillText(t.toLocaleString('en'), px, bottom + 6);
  }
  g.font = 'bold 11px sans-serif';
  g.fillText('env step', L + k.pw / 2, bottom + 22);
  const vertical = (text, cx, cy, turn) => { g.save(); g.translate(cx, cy); g.rotate(turn); g.fillText(text, 0, 0); g.restore(); };
  g.textBaseline = 'middle';
  vertical('life (one lane each)', 10, T + k.lanesH / 2, -Math.PI / 2);
  if (d.band_px) vertical('vitals (0–9)', L + k.pw + 40, T + k.lanesH + d.band_px / 2, Math.PI / 2);
}

function pick(st, px, py) {
  const d = st.data, k = st.k;
  if (px < L || px > L + k.pw || py < T || py > T + k.lanesH + d.band_px) return null;
  const m = d.marks;
  let best = null, dist = Infinity;
  for (let i = 0; i < m.step.length; i++) {
    const dx = k.x(m.step[i]) - px, dy = k.pos(m.lane[i]) - py, r = Math.sqrt(m.size[i]) / 2 + 2, e = Math.hypot(dx, dy);
    if (e <= r && e < dist) { best = i; dist = e; }
  }
  if (best !== null) return { text: d.kinds[m.kind[best]][0] + ' · step ' + Math.round(m.step[best]) + '\\n' + m.label[best] };
  const b = d.bars, s = k.step(px), half = d.lane_px * 0.25, slack = 0.5 * (d.hi - d.lo + 1) / k.pw;
  for (let i = 0; i < b.start.length; i++) {
    const cy = k.pos(b.life[i]);
    if (Math.abs(py - cy) <= half && b.start[i] - slack <= s && s <= b.end[i] + slack) {
      return { episode: b.episode[i], text: b.label[i] + '\\n' + d.what + ': ' + d.categories[b.cat[i]][0]
        + '\\nsteps ' + b.start[i] + '–' + Math.round(b.end[i]) + (b.episode[i] ? '\\nclick to open it' : '') };
    }
  }
  if (d.band_px && py > T + k.lanesH) {
    const v = d.vitals, last = new Map();
    for (let i = 0; i < v.step.length; i++) if (v.step[i] <= s) last.set(v.vital[i], i);
    const parts = [];
    for (const [c, i] of [...last.entries()].sort((p, q) => p[0] - q[0]))
      if (v.value[i] !== null) parts.push(d.vital_colors[c][0] + ' ' + v.value[i]);
    if (parts.length) return { text: 'step ' + Math.round(s) + (last.size ? ' · life ' + v.life[[...last.values()][0]] : '') + '\\n' + parts.join(' · ') };
  }
  return null;
}

export default function ({ data, setTriggerValue, parentElement }) {
  const root = parentElement.querySelector('.mfm-lanes');
  const cv = root.querySelector('canvas'), tip = root.querySelector('.mfm-lanes-tip');
  const st = root.__mfm || (root.__mfm = {});
  st.data = data;
  legend(root.querySelector('.mfm-lanes-legend'), data);
  draw(root, st);
  if (!st.observer) {
    st.observer = new ResizeObserver(() => { if (root.clientWidth !== st.width) draw(root, st); });
    st.observer.observe(root);
  }
  const at = (ev) => { const r = cv.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
  cv.onmousemove = (ev) => {
    const [px, py] = at(ev), hit = pick(st, px, py);
    cv.style.cursor = hit && hit.episode ? 'pointer' : 'default';
    showTip(tip, hit ? hit.text : null, px, py, st.k.W);
  };
  cv.onmouseleave = () => { tip.style.display = 'none'; };
  cv.onclick = (ev) => { const hit = pick(st, ...at(ev)); if (hit && hit.episode) setTriggerValue('episode', hit.episode); };
  return () => { if (st.observer) { st.observer.disconnect(); st.observer = null; } };
}
"""

_COMPONENT = st.components.v2.component("mfm_timeline_lanes", html=_HTML, css=_CSS, js=_JS, isolate_styles=False)


def draw(data: dict[str, Any], key: str, on_episode: Callable[[], None]) -> Any:
    """Mount the chart of :func:`lanes_data`; a click on one episode's bar sets the result's
    ``episode`` (a trigger: it holds the episode during the rerun the click makes, even when
    the same bar is clicked twice) and calls ``on_episode``."""
    return _COMPONENT(key=key, data=data, on_episode_change=on_episode, height="content")
