"""The frame scrubber of the Timeline: an episode's frames sent to the browser once and
stepped there, so a step paints at once instead of after a round trip to the server.

A Streamlit custom component (``st.components.v2``, inline HTML/CSS/JS, no build step). It
gets every frame of the episode as a small PNG (the stored pixels re-encoded by the server:
no byte of a run file reaches the browser) and one caption per step, shows the frame of the
step the slider or the arrow keys reach, and reports that step back to Python when the user
pauses (:data:`SETTLE_MS`), so the URL and the page's links follow. Captions are set as
text, never as HTML.
"""
from __future__ import annotations

from typing import Any, Callable

import streamlit as st

LABEL = "Step (scrub the episode's frames)"
SETTLE_MS = 250
"""Milliseconds without a new step before the step reached is sent to the server."""

_HTML = """<div class="mfm-scrub">
  <label class="mfm-scrub-label"><span class="mfm-scrub-name"></span>
  <input class="mfm-scrub-range" type="range" step="1"></label>
  <div class="mfm-scrub-row">
    <img class="mfm-scrub-frame" alt="">
    <div class="mfm-scrub-text"><div class="mfm-scrub-head"></div><div class="mfm-scrub-lines"></div></div>
  </div>
</div>"""

_CSS = """
.mfm-scrub { font-family: var(--st-font); color: var(--st-text-color); }
.mfm-scrub-label { display: block; font-size: 0.875rem; }
.mfm-scrub-range { display: block; width: 100%; accent-color: var(--st-primary-color); margin: 0.25rem 0 0.75rem 0; }
.mfm-scrub-row { display: flex; gap: 1.5rem; align-items: flex-start; }
.mfm-scrub-frame { image-rendering: pixelated; image-rendering: crisp-edges; flex: none; }
.mfm-scrub-head { font-weight: 600; margin-bottom: 0.35rem; }
.mfm-scrub-lines div { margin-bottom: 0.25rem; }
"""

_KEYS = """
const keys = (root, range) => {
  window.__mfmStep = (e) => {
    if (!root.isConnected || e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
    const t = e.target;
    if (t === range) return;
    if (t && t.closest && t.closest('input, textarea, select, [contenteditable="true"], [role="slider"]')) return;
    e.preventDefault();
    const by = (e.key === 'ArrowLeft' ? -1 : 1) * (e.shiftKey ? 10 : 1);
    const next = Math.max(Number(range.min), Math.min(Number(range.max), Number(range.value) + by));
    if (next !== Number(range.value)) { range.value = next; range.oninput(); }
  };
  if (!window.__mfmKeysOn) {
    window.__mfmKeysOn = true;
    document.addEventListener('keydown', (e) => { if (window.__mfmStep) window.__mfmStep(e); });
  }
};
"""
"""Keyboard stepping shared by the scrubber and the cursor bar: ← → move one step, with Shift ten,
anywhere on the page but in another text field or slider (the last one mounted answers)."""

_SETTLE = """
function settle(st, range, data, mine, show, report, setStateValue) {
  if (!mine || (st.timer === null && data.step !== Number(range.value))) { range.value = data.step; st.sent = data.step; }
  show(Number(range.value));
  range.oninput = () => {
    const step = Number(range.value);
    show(step);
    if (st.timer !== null) clearTimeout(st.timer);
    st.timer = setTimeout(() => {
      st.timer = null;
      if (report() && step !== st.sent) { st.sent = step; setStateValue('step', step); }
    }, data.settle);
  };
}
"""
"""The slider of the scrubber and of the cursor bar: it follows the server's step unless the user is
moving it, shows each step as it is reached, and sends the step settled on (``SETTLE_MS`` without a
new one) to the server when ``report()`` holds."""

_JS = """
export default function ({ data, setStateValue, parentElement }) {
  const root = parentElement.querySelector('.mfm-scrub');
  const range = root.querySelector('.mfm-scrub-range');
  const img = root.querySelector('.mfm-scrub-frame');
  const head = root.querySelector('.mfm-scrub-head');
  const lines = root.querySelector('.mfm-scrub-lines');
  const last = data.first + data.frames.length - 1;
  const mine = root.__mfm && root.__mfm.episode === data.episode;
  const st = mine ? root.__mfm : { episode: data.episode, timer: null, sent: data.step };
  root.__mfm = st;
  st.data = data;
  range.min = data.first; range.max = last;
  root.querySelector('.mfm-scrub-name').textContent = data.label + ' · ← → one step';
  range.setAttribute('aria-label', data.label);
  img.width = data.size; img.height = data.size;
  const show = (step) => {
    const d = st.data, i = step - d.first;
    img.src = d.frames[i];
    img.alt = 'frame of step ' + step;
    head.textContent = d.captions[i][0];
    lines.replaceChildren(...d.captions[i].slice(1).map((t) => {
      const e = document.createElement('div'); e.textContent = t; return e; }));
  };
  settle(st, range, data, mine, show, () => st.data.report, setStateValue);
  keys(root, range);
}
""".replace("export default", _KEYS + _SETTLE + "\nexport default", 1)

_COMPONENT = st.components.v2.component("mfm_frame_scrubber", html=_HTML, css=_CSS, js=_JS, isolate_styles=False)


def frame_scrubber(name: str, first: int, frames: list[str], captions: list[list[str]], step: int,
                   key: str, on_step: Callable[[], None] | None = None, size: int = 320, label: str = LABEL) -> Any:
    """Mount the scrubber for the steps ``first .. first + len(frames) - 1`` at ``step``:
    ``frames`` as ``data:`` URIs, ``captions[i]`` the lines shown beside frame ``i`` (the
    first as a heading); from ``loaders.scrubber.steps_scrub``. ``name`` identifies the
    steps shown (an episode, a turn): new steps reset the slider. With ``on_step`` the step
    the user settles on is sent back (then called), without it the server never hears of a
    step. Returns the component's result: its ``step`` (None before any)."""
    return _COMPONENT(key=key, data={"episode": name, "first": first, "step": step, "label": label,
                                     "frames": frames, "captions": captions, "size": size, "settle": SETTLE_MS,
                                     "report": on_step is not None},
                      **({"default": {"step": None}, "on_step_change": on_step} if on_step else {}), height="content")


CURSOR_LABEL = "Time cursor"

_CURSOR_HTML = """<div class="mfm-cursor">
  <div class="mfm-cursor-row">
    <button class="mfm-cursor-back10" type="button" title="10 steps back (Shift+←)">«</button>
    <button class="mfm-cursor-back" type="button" title="one step back (←)">‹</button>
    <input class="mfm-cursor-range" type="range" step="1">
    <button class="mfm-cursor-fwd" type="button" title="one step on (→)">›</button>
    <button class="mfm-cursor-fwd10" type="button" title="10 steps on (Shift+→)">»</button>
  </div>
  <div class="mfm-cursor-text"></div>
</div>"""

_CURSOR_CSS = """
.mfm-cursor { font-family: var(--st-font); color: var(--st-text-color); font-size: 0.875rem; }
.mfm-cursor-row { display: flex; gap: 0.4rem; align-items: center; }
.mfm-cursor-range { flex: 1; accent-color: var(--st-primary-color); }
.mfm-cursor button { min-width: 2rem; border: 1px solid var(--st-border-color, #ccc); border-radius: 0.4rem;
  background: transparent; color: inherit; cursor: pointer; }
.mfm-cursor-text { margin-top: 0.2rem; }
"""

_CURSOR_JS = """
export default function ({ data, setStateValue, parentElement }) {
  const root = parentElement.querySelector('.mfm-cursor');
  const range = root.querySelector('.mfm-cursor-range');
  const text = root.querySelector('.mfm-cursor-text');
  const mine = root.__mfm && root.__mfm.life === data.life && root.__mfm.lo === data.lo && root.__mfm.hi === data.hi;
  const st = mine ? root.__mfm : { life: data.life, lo: data.lo, hi: data.hi, timer: null, sent: data.step };
  root.__mfm = st;
  range.min = data.lo; range.max = data.hi;
  range.setAttribute('aria-label', data.label);
  const show = (step) => {
    text.textContent = data.label + ': life ' + data.life + ' · step ' + step + (step === data.step ? data.line : '')
      + ' · life ' + data.life + ' runs steps ' + data.lo + '–' + data.hi + ' · ← → one step, Shift ten';
  };
  settle(st, range, data, mine, show, () => true, setStateValue);
  const by = (n) => () => {
    const next = Math.max(data.lo, Math.min(data.hi, Number(range.value) + n));
    if (next !== Number(range.value)) { range.value = next; range.oninput(); }
  };
  root.querySelector('.mfm-cursor-back10').onclick = by(-10);
  root.querySelector('.mfm-cursor-back').onclick = by(-1);
  root.querySelector('.mfm-cursor-fwd').onclick = by(1);
  root.querySelector('.mfm-cursor-fwd10').onclick = by(10);
  keys(root, range);
}
""".replace("export default", _KEYS + _SETTLE + "\nexport default", 1)

_CURSOR = st.components.v2.component("mfm_time_cursor", html=_CURSOR_HTML, css=_CURSOR_CSS, js=_CURSOR_JS,
                                     isolate_styles=False)


def cursor_bar(life: int, step: int, lo: int, hi: int, line: str, key: str, on_step: Callable[[], None]) -> Any:
    """Mount the time cursor's bar: a slider over the steps ``lo..hi`` of ``life`` at ``step``
    with buttons one and ten steps back and on, and the arrow keys (Shift: ten steps) anywhere
    on the page. ``line`` (text, never HTML) follows the step while it is the one the server
    drew. The step the user settles on is sent back, then ``on_step`` is called."""
    return _CURSOR(key=key, data={"life": life, "step": step, "lo": lo, "hi": hi, "line": line, "settle": SETTLE_MS,
                                  "label": CURSOR_LABEL},
                   default={"step": None}, on_step_change=on_step, height="content")
