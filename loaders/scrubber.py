"""A frame scrubber for notebooks: step through one life's frames with a slider, a play
button or the keyboard, with the agent's position, vitals, action and the current turn shown
under the frame. Frames are decoded in the kernel only when shown.

    from loaders.scrubber import scrubber
    scrubber(run, life=1)           # in JupyterLab or a VS Code notebook

Keys (click the widget first): ← → one step, Shift+← → ten steps, Home/End, Space play/pause.

The widget is an anywidget (needs the ``notebook`` extra); :class:`LifeFrames`, which finds a
life's steps, positions and turns, needs nothing beyond the loaders.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from loaders.display import FRAME_ERRORS, data_uri, esc, img
from loaders.run import Run
from loaders.lookups import episode_holding, frame_at
from mfm.schema import TurnRow

SCALE = 4
"""Default enlargement of the scrubber's frame (64 pixels show as 256)."""
FPS = 8.0

NOTEBOOK_EXTRA = 'the frame scrubber needs the notebook extra: pip install "mfm[notebook]"'


@dataclass(frozen=True)
class StepInfo:
    """What the scrubber shows beside the frame of one step."""

    step: int
    life: int
    episode: str | None
    position: tuple[float, float] | None
    action: str | None
    vitals: dict[str, int]
    turn: TurnRow | None

    def caption(self) -> str:
        """One line: step, life, episode, position, action, vitals."""
        pos = "?" if self.position is None else f"({self.position[0]:g}, {self.position[1]:g})"
        vit = " ".join(f"{k[0]}{v}" for k, v in self.vitals.items())
        return (f"step {self.step} · life {self.life} · {self.episode or '?'} · at {pos} · "
                f"action {self.action or '?'}" + (f" · {vit}" if vit else ""))

    def turn_text(self) -> str:
        """The turn that produced this step: its number, steps, decision and new targets."""
        t = self.turn
        if t is None:
            return "no turn recorded for this step"
        decision = next((line.split(":", 1)[1].strip() for line in (t.note or "").splitlines()
                         if line.startswith("decision:")), "")
        targets = "; ".join(f"{g.get('kind', '?')} ({g.get('x')}, {g.get('y')})" for g in t.targets)
        return (f"turn {t.turn} (steps {t.first_step + 1}-{t.last_step})" + (f": {decision}" if decision else "")
                + (f" · targets {targets}" if targets else ""))


class LifeFrames:
    """The env steps of one life that have a frame, with position and turn per step."""

    def __init__(self, run: Run, life: int | None = None) -> None:
        self.run = run
        lives = sorted({int(r.life) for r in run.records("index.jsonl") if r.frames})
        if not lives:
            raise ValueError(f"{run.name}: no episode with per-step frames")
        self.life = lives[0] if life is None else int(life)
        if self.life not in lives:
            raise ValueError(f"{run.name}: life {life} has no frames (lives with frames: {lives})")
        rows = [r for r in run.records("index.jsonl") if r.life == self.life and r.frames]
        self.steps: list[int] = sorted({s for r in rows for s in range(r.first_step + 1, r.first_step + 1 + r.frames)})
        self._episode = {s: r.id for r in rows for s in range(r.first_step + 1, r.first_step + 1 + r.frames)}
        self._trace = {st.step: st for st in run.records("steps.jsonl") if st.life == self.life}
        self._turns = sorted((t for t in run.records("turns.jsonl") if t.life == self.life),
                             key=lambda t: t.first_step)
        self._turn_starts = [t.first_step for t in self._turns]

    def __len__(self) -> int:
        return len(self.steps)

    def turn_at(self, step: int) -> TurnRow | None:
        """The turn whose actions produced ``step`` (``first_step < step <= last_step``)."""
        i = bisect.bisect_left(self._turn_starts, step) - 1
        while i >= 0:
            t = self._turns[i]
            if t.first_step < step <= t.last_step:
                return t
            if t.last_step < step:
                return None
            i -= 1
        return None

    def info(self, index: int) -> StepInfo:
        """Position, action, vitals and turn of the ``index``-th step of the life."""
        step = self.steps[index]
        st = self._trace.get(step)
        return StepInfo(step=step, life=self.life, episode=self._episode.get(step),
                        position=None if st is None else (st.x, st.y), action=None if st is None else st.action,
                        vitals={} if st is None else {"health": st.health, "food": st.food, "drink": st.drink,
                                                      "energy": st.energy},
                        turn=self.turn_at(step))

    def frame(self, index: int) -> np.ndarray:
        """The frame of the ``index``-th step (decoded now; FrameError if unreadable)."""
        return self.run.frame(self.steps[index])


def episode_scrub(run: Run, episode: str, back: int = 0) -> tuple[int, list[str], list[list[str]]]:
    """What the dashboard's frame scrubber (``dashboard.scrubber``) sends for one episode:
    :func:`steps_scrub` over the steps of its frames, from ``back`` steps before it in the same
    life (the frames that led to it, of the episodes before; nothing for an episode without
    frames of its own)."""
    ref = run.episode(episode)
    if ref is None or not ref.frames:
        return 0, [], []
    return steps_scrub(run, max(1, ref.first_step + 1 - max(0, back)), ref.first_step + ref.frames, ref.life)


def steps_scrub(run: Run, lo: int, hi: int, life: int) -> tuple[int, list[str], list[list[str]]]:
    """The frames of ``life`` at the steps ``lo..hi`` that have one, for the dashboard's
    frame scrubber: the first such step, each frame as a PNG ``data:`` URI (the stored
    pixels), and per step the lines shown beside it (step; position, action and vitals;
    inventory; the turn), as the notebook scrubber words them. Steps are consecutive from
    the first (a step without a frame ends the range). FrameError if a frame cannot be read."""
    steps = run.steps()
    rows = steps[(steps["step"] >= lo) & (steps["step"] <= hi) & (steps["life"] == life)].drop_duplicates("step")
    trace = {int(r["step"]): r for r in rows.to_dict("records")}
    turns = sorted((t for t in run.records("turns.jsonl") if t.life == life and t.last_step >= lo
                    and t.first_step < hi), key=lambda t: t.first_step)
    held = {s for r in run.index.rows if r.life == life and r.frames and r.first_step < hi
            and r.first_step + r.frames >= lo for s in range(r.first_step + 1, r.first_step + r.frames + 1)}
    start = min((s for s in held if lo <= s <= hi), default=None)
    uris: list[str] = []
    captions: list[list[str]] = []
    if start is None:
        return 0, uris, captions
    step = start
    while step <= hi and step in held:
        r = trace.get(step)
        episode = episode_holding(run, step, life)
        info = StepInfo(step=step, life=life, episode=episode.id if episode else None,
                        position=None if r is None else (r["x"], r["y"]), action=None if r is None else r["action"],
                        vitals={} if r is None else {k: int(r[k]) for k in ("health", "food", "drink", "energy")},
                        turn=next((t for t in turns if t.first_step < step <= t.last_step), None))
        inv = {} if r is None else (json.loads(r["inventory"]) if isinstance(r["inventory"], str) else r["inventory"])
        have = ", ".join(f"{k} {v}" for k, v in (inv or {}).items() if v) or "empty"
        captions.append([f"Step {step}", info.caption(), f"inventory: {have}", info.turn_text()])
        uris.append(data_uri(frame_at(run, step, life), 1))
        step += 1
    return start, uris, captions


ESM = """
function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mfm-scrubber";
  root.tabIndex = 0;
  const image = document.createElement("img");
  image.style.imageRendering = "pixelated";
  image.style.display = "block";
  const bar = document.createElement("div");
  bar.className = "mfm-bar";
  const play = document.createElement("button");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.min = "0";
  const label = document.createElement("span");
  const caption = document.createElement("div");
  const turn = document.createElement("div");
  caption.className = "mfm-caption";
  turn.className = "mfm-turn";
  bar.append(play, slider, label);
  root.append(image, bar, caption, turn);
  el.appendChild(root);

  let timer = null;
  const count = () => model.get("count");
  const go = (i) => {
    const n = Math.max(0, Math.min(count() - 1, i));
    if (n !== model.get("index")) { model.set("index", n); model.save_changes(); }
    return n;
  };
  const stop = () => {
    if (timer !== null) { clearTimeout(timer); timer = null; }
    if (model.get("playing")) { model.set("playing", false); model.save_changes(); }
  };
  const draw = () => {
    image.src = model.get("frame");
    image.width = model.get("width");
    image.height = model.get("height");
    slider.max = String(Math.max(0, count() - 1));
    slider.value = String(model.get("index"));
    label.textContent = ` ${model.get("index") + 1} / ${count()}`;
    caption.textContent = model.get("caption");
    turn.textContent = model.get("turn");
    play.textContent = model.get("playing") ? "❚❚ pause" : "▶ play";
  };
  // Playback waits for each frame from the kernel before asking for the next one.
  const next = () => {
    timer = null;
    if (!model.get("playing")) return;
    if (model.get("index") >= count() - 1) { stop(); draw(); return; }
    timer = setTimeout(() => go(model.get("index") + 1), 1000 / Math.max(0.5, model.get("fps")));
  };
  model.on("change:frame", () => { draw(); next(); });
  model.on("change:playing", () => { draw(); next(); });
  model.on("change:count", draw);
  slider.addEventListener("input", () => { stop(); go(Number(slider.value)); });
  play.addEventListener("click", () => {
    if (model.get("playing")) { stop(); } else {
      if (model.get("index") >= count() - 1) go(0);
      model.set("playing", true); model.save_changes();
    }
    root.focus();
  });
  root.addEventListener("keydown", (e) => {
    const step = e.shiftKey ? 10 : 1;
    const moves = { ArrowRight: step, ArrowLeft: -step, ArrowUp: step, ArrowDown: -step };
    if (e.key in moves) { stop(); go(model.get("index") + moves[e.key]); }
    else if (e.key === "Home") { stop(); go(0); }
    else if (e.key === "End") { stop(); go(count() - 1); }
    else if (e.key === " ") { play.click(); }
    else return;
    e.preventDefault();
    e.stopPropagation();
  });
  draw();
  return () => { if (timer !== null) clearTimeout(timer); };
}
export default { render };
"""

CSS = """
.mfm-scrubber { font-family: system-ui, sans-serif; font-size: 13px; outline: none; display: inline-block; }
.mfm-scrubber:focus { box-shadow: 0 0 0 2px #7aa7e6; }
.mfm-scrubber .mfm-bar { display: flex; align-items: center; gap: 6px; margin: 4px 0; }
.mfm-scrubber .mfm-bar input { flex: 1; }
.mfm-scrubber .mfm-turn { color: #555; max-width: 60em; }
"""


def _anywidget() -> Any:
    """The anywidget module, or ImportError naming the notebook extra."""
    try:
        import anywidget
    except ImportError as e:
        raise ImportError(NOTEBOOK_EXTRA) from e
    return anywidget


@lru_cache(maxsize=1)
def widget_class() -> type:
    """The scrubber's widget class (built on first use, so that importing this module needs no
    Jupyter library)."""
    anywidget = _anywidget()
    import traitlets as t

    class Scrubber(anywidget.AnyWidget):
        """Step through a life's frames; see :func:`scrubber`."""

        _esm = ESM
        _css = CSS
        index = t.Int(0).tag(sync=True)
        count = t.Int(0).tag(sync=True)
        frame = t.Unicode("").tag(sync=True)
        width = t.Int(0).tag(sync=True)
        height = t.Int(0).tag(sync=True)
        caption = t.Unicode("").tag(sync=True)
        turn = t.Unicode("").tag(sync=True)
        playing = t.Bool(False).tag(sync=True)
        fps = t.Float(FPS).tag(sync=True)

        def __init__(self, frames: LifeFrames, index: int = 0, scale: int = SCALE, fps: float = FPS) -> None:
            self.frames = frames
            self.scale = int(scale)
            self.decoded = 0
            """How many frames this widget has decoded (one per step shown)."""
            super().__init__(count=len(frames), fps=fps, index=min(max(0, int(index)), len(frames) - 1))
            if not self.frame:
                self._show(self.index)

        @t.observe("index")
        def _on_index(self, change: dict) -> None:
            self._show(int(change["new"]))

        @t.validate("index")
        def _clamp(self, proposal: dict) -> int:
            return min(max(0, int(proposal["value"])), max(0, self.count - 1))

        def _show(self, index: int) -> None:
            info = self.frames.info(index)
            try:
                frame = self.frames.frame(index)
                self.decoded += 1
                uri, h, w = data_uri(frame, self.scale), frame.shape[0], frame.shape[1]
            except FRAME_ERRORS as e:
                uri, h, w = "", 16, 16 * 8
                info_caption = f"{info.caption()} · frame unavailable: {e}"
            else:
                info_caption = info.caption()
            with self.hold_sync():
                self.frame, self.width, self.height = uri, w * self.scale, h * self.scale
                self.caption, self.turn = info_caption, info.turn_text()
            self.info = info

        @property
        def step(self) -> int:
            """The env step shown."""
            return self.frames.steps[self.index]

        @step.setter
        def step(self, value: int) -> None:
            self.index = bisect.bisect_left(self.frames.steps, int(value))

        def __repr__(self) -> str:
            return (f"<Scrubber {self.frames.run.name} life {self.frames.life}: "
                    f"{self.caption}; {self.turn}>")

        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            """The widget view, plus a still of the current frame as HTML for viewers without
            a widget manager (an exported page, a notebook viewer)."""
            bundle = super()._repr_mimebundle_(**kwargs)
            data = bundle[0] if isinstance(bundle, tuple) else bundle
            data["text/html"] = still_html(self)
            return bundle

    return Scrubber


def still_html(widget: Any) -> str:
    """The scrubber's current frame and captions as static HTML."""
    try:
        frame = widget.frames.frame(widget.index)
        body = img(frame, widget.scale, widget.caption)
    except FRAME_ERRORS as e:
        body = f"<span>frame unavailable: {esc(e)}</span>"
    return (f'<div class="mfm-scrubber-still" style="font-family:system-ui,sans-serif;font-size:13px">{body}'
            f"<div>{esc(widget.caption)}</div><div style='color:#555'>{esc(widget.turn)}</div>"
            f"<div style='color:#888'>(a still: run the notebook for the slider)</div></div>")


def scrubber(run: Run, life: int | None = None, step: int | None = None, scale: int = SCALE,
             fps: float = FPS) -> Any:
    """A widget to step through the frames of ``life`` (default: the first with frames),
    starting at env ``step`` (default: its first frame), each frame enlarged ×``scale``."""
    cls = widget_class()
    frames = LifeFrames(run, life)
    index = 0 if step is None else min(bisect.bisect_left(frames.steps, int(step)), len(frames) - 1)
    return cls(frames, index=index, scale=scale, fps=fps)
