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
  if (!mine || (st.timer === null && data.step !== Number(range.value))) {
    range.value = data.step; st.sent = data.step;
  }
  show(Number(range.value));
  range.oninput = () => {
    const step = Number(range.value);
    show(step);
    if (st.timer !== null) clearTimeout(st.timer);
    st.timer = setTimeout(() => {
      st.timer = null;
      if (st.data.report && step !== st.sent) { st.sent = step; setStateValue('step', step); }
    }, data.settle);
  };
}
"""

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
