"""Rich display of runs in Jupyter: a run, an episode, a turn and a memory file as of a step
render themselves as HTML, with a plain-text form that stays useful in a terminal.

    from loaders import open_run
    from loaders.display import Episode, MemoryFile, Turn
    run = open_run("sample_runs/diamond_mfm_s2")
    run                                   # header and milestones
    Episode(run, "ep_000045")             # frame strip (pixel-exact, enlarged) and summary
    Turn(run, 21)                         # searched, inspected, found, written, new target
    MemoryFile(run, "mine/GUIDE.md", 300) # the file as it stood at step 300, with its writers

Pure functions over opened runs, no Jupyter import: every string that comes from a run is
HTML-escaped (run files are untrusted input) and nothing from a run is ever executed. Frames
are enlarged by an integer factor with nearest-neighbour sampling and sent as PNG data URIs,
so every stored pixel shows as a square block. ``run.sql(...)`` needs nothing from here:
DuckDB relations render themselves as an escaped HTML table of their first rows.
"""
from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from loaders import analysis_pages
from loaders import agent_calls, lookups
from loaders.inherited import episode_label, inherited_from, locate
from loaders.provenance import blame_as_of, file_as_of
from loaders.run import Run
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError, enlarge
from mfm.schema import IndexRow, MemoryWrite, TurnRow

FRAME_SCALE = 3
"""Default enlargement of a frame in a strip (a 64-pixel Crafter frame shows 192 pixels wide)."""
THUMB_SCALE = 2
"""Enlargement of the frames beside a turn."""
MAX_STRIP = 16
"""Frames shown in an episode's strip by default (evenly spaced over the episode)."""
MAX_ROWS = 40
"""Rows shown in a table inside a repr."""

STYLE = ("<style>.mfm-view{font-family:system-ui,sans-serif;font-size:13px;line-height:1.35}"
         ".mfm-view table{border-collapse:collapse;margin:4px 0 8px 0}"
         ".mfm-view th,.mfm-view td{border:1px solid #ddd;padding:2px 6px;text-align:left!important;"
         "vertical-align:top}"
         ".mfm-view th{background:#f4f4f4}.mfm-view .mfm-muted{color:#666}"
         ".mfm-view pre{background:#f7f7f7;padding:6px;margin:4px 0;white-space:pre-wrap;max-height:24em;"
         "overflow:auto}.mfm-view figure{display:inline-block!important;margin:0 6px 6px 0;text-align:center}"
         ".mfm-view figcaption{font-size:11px;color:#444}.mfm-view img{image-rendering:pixelated;"
         "image-rendering:crisp-edges}</style>")
FRAME_ERRORS = (FrameError, UnsafePath, KeyError, OSError, ValueError)
"""What reading a frame of a damaged run may raise; shown as a note in place of the frame."""


def esc(value: Any) -> str:
    """``value`` as text safe to put in HTML (quotes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def png_bytes(image: np.ndarray) -> bytes:
    """A uint8 HxWx3 (or HxW) array as PNG bytes (lossless)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def data_uri(frame: np.ndarray, scale: int = FRAME_SCALE) -> str:
    """A frame enlarged by ``scale`` as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(enlarge(frame, scale))).decode("ascii")


def img(frame: np.ndarray, scale: int = FRAME_SCALE, title: str = "") -> str:
    """An ``<img>`` of a frame, enlarged by ``scale``, at exactly its enlarged size."""
    h, w = frame.shape[:2]
    return (f'<img src="{data_uri(frame, scale)}" width="{w * scale}" height="{h * scale}" '
            f'alt="{esc(title)}" title="{esc(title)}">')


def figure(frame: np.ndarray | None, caption: str, scale: int, error: str | None = None) -> str:
    """A captioned frame, or the reason it cannot be shown."""
    body = img(frame, scale, caption) if frame is not None else f'<span class="mfm-muted">{esc(error)}</span>'
    return f"<figure>{body}<figcaption>{esc(caption)}</figcaption></figure>"


def frames_html(frames: Sequence[tuple[str, np.ndarray]], scale: int = FRAME_SCALE) -> str:
    """Captioned frames side by side, each enlarged ×``scale`` (nearest neighbour)."""
    return _wrap("".join(figure(f, caption, scale) for caption, f in frames))


def table(rows: Sequence[dict] | pd.DataFrame, columns: Sequence[str] | None = None, max_rows: int = MAX_ROWS) -> str:
    """An HTML table of records (every cell escaped), cut at ``max_rows`` with a note."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in records for k in r))
    if not records:
        return '<p class="mfm-muted">none</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{esc(_cell(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in records[:max_rows])
    more = f'<p class="mfm-muted">… {len(records) - max_rows} more rows</p>' if len(records) > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _cell(v: Any) -> str:
    """A table cell as text: missing values empty, lists and dicts as compact JSON."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _wrap(body: str) -> str:
    return f'{STYLE}<div class="mfm-view">{body}</div>'


def _frame_or_error(read: Callable[[], np.ndarray]) -> tuple[np.ndarray | None, str | None]:
    """``read()`` as (frame, None), or (None, why) when the frame cannot be read."""
    try:
        return read(), None
    except FRAME_ERRORS as e:
        return None, f"frame unavailable: {e}"


# --- a run ---------------------------------------------------------------------------------------

def milestones(run: Run) -> list[dict]:
    """The milestones of a run in the order they were reached (``milestones.jsonl``), then
    those of the task's order not reached: ``name, step, life, episode, turn`` (None when not reached)."""
    reached = sorted(run.records("milestones.jsonl"), key=lambda m: (m.step, m.name))
    rows = [{"name": m.name, "step": m.step, "life": m.life, "episode": m.episode, "turn": m.turn} for m in reached]
    seen = {m.name for m in reached}
    order = run.manifest.milestone_order if run.manifest else ()
    rows += [{"name": n, "step": None, "life": None, "episode": None, "turn": None} for n in order if n not in seen]
    return rows


def run_html(run: Run) -> str:
    """A run's header (method, task, seed, status, steps, lives, episodes, problems) and its milestones."""
    s = run.summary()
    head = (f"<b>{esc(s['run'])}</b> · {esc(s['format'])} · method <b>{esc(s['method'])}</b>"
            + (f" ({esc(s['ablations'])})" if s["ablations"] else "")
            + f" · task {esc(s['task'])} · seed {esc(s['seed'])} · <b>{esc(s['status'])}</b>"
            + (f" · inherited memory of <b>{esc(got_from.get('run'))}</b> (its copy: inherited/)"
               if (got_from := inherited_from(run)) else ""))
    facts = (f"steps {esc(s['steps'])} of {esc(s['budget'])} · lives {esc(s['lives'])} · deaths {esc(s['deaths'])}"
             f" · episodes {esc(s['episodes'])} · turns {len(run.records('turns.jsonl'))}"
             f" · problems {len(run.problems)}")
    ms = milestones(run)
    got = sum(1 for r in ms if r["step"] is not None)
    return _wrap(f"<div>{head}</div><div class='mfm-muted'>{facts} · {esc(run.path)}</div>"
                 f"<div><b>Milestones</b> {got}/{len(ms)}</div>"
                 + table(ms, ["name", "step", "life", "episode", "turn"], max_rows=len(ms) or 1))


# --- an episode ------------------------------------------------------------------------------------

@dataclass
class Episode:
    """One episode of a run for display: its index row, records and a strip of its frames.
    An ``inherited:`` id is read from the copy of the run it came from (:mod:`loaders.inherited`)."""

    run: Run
    id: str
    max_frames: int = MAX_STRIP
    scale: int = FRAME_SCALE

    @property
    def row(self) -> IndexRow:
        """The episode's index row, in the run holding it (KeyError if there is no such episode)."""
        ref = locate(self.run, self.id).row
        if ref is None:
            raise KeyError(f"{self.run.name}: no episode {self.id}")
        return ref

    @property
    def label(self) -> str:
        """The id as shown: an inherited one names the run it came from."""
        return episode_label(self.run, self.id)

    def frames(self) -> list[tuple[int, np.ndarray]]:
        """Up to ``max_frames`` per-step frames, evenly spaced: ``[(step, frame)]``."""
        return lookups.frame_strip(self.run, self.id, self.max_frames)

    def _repr_html_(self) -> str:
        return episode_html(self)

    def __repr__(self) -> str:
        return episode_text(self)


def episode_text(ep: Episode) -> str:
    """An episode in one paragraph: id, action, steps, outcome, position, summary."""
    try:
        r = ep.row
    except KeyError as e:
        return f"<Episode {ep.id}: {e.args[0]}>"
    return (f"<Episode {ep.label} of {ep.run.name}: {r.action_kind or r.kind}, {_span(r)} "
            f"({r.frames} frames), life {r.life}, outcome {r.outcome or '-'}, at ({_num(r.x)}, {_num(r.y)})>\n"
            f"{r.summary}")


def _span(r: IndexRow) -> str:
    """The env steps an episode owns, ``(first_step, last_step]``, as text."""
    return f"steps {r.first_step + 1}-{r.last_step}" if r.last_step > r.first_step else f"no step (at {r.last_step})"


def _pos(p: tuple[float, ...] | None) -> str:
    return "?" if p is None else "(" + ", ".join(f"{v:g}" for v in p) + ")"


def _num(v: Any) -> str:
    return "?" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def episode_html(ep: Episode) -> str:
    """Summary, outcome, tags and events of an episode over its frame strip (or its end
    observation when it recorded no per-step frame)."""
    try:
        r = ep.row
    except KeyError as e:
        return _wrap(f"<p>{esc(e.args[0])}</p>")
    head = (f"<b>{esc(ep.label)}</b> · {esc(r.action_kind or r.kind)} · {esc(_span(r))}"
            f" · life {esc(r.life)} · turn {esc(r.turn)} · outcome <b>{esc(r.outcome or '—')}</b>"
            f" · ends at ({esc(_num(r.x))}, {esc(_num(r.y))}) · {esc(r.frames)} frames")
    tags = ", ".join(r.tags) or "—"
    events = "".join(f"<li>{esc(e)}</li>" for e in r.events)
    strip, note = _strip(ep)
    return _wrap(f"<div>{head}</div><div>{esc(r.summary)}</div><div class='mfm-muted'>tags: {esc(tags)}"
                 f"{' · note: ' + esc(r.note) if r.note else ''}</div>"
                 + (f"<ul>{events}</ul>" if events else "") + f"<div>{strip}</div>"
                 + (f"<div class='mfm-muted'>{esc(note)}</div>" if note else ""))


def _strip(ep: Episode) -> tuple[str, str]:
    """The frame strip of an episode as HTML and a note on what it shows."""
    try:
        frames = ep.frames()
    except FRAME_ERRORS as e:
        return "", f"frames unavailable: {e}"
    if frames:
        shown = f"{len(frames)} of {ep.row.frames} frames" if len(frames) < ep.row.frames else "every frame"
        return ("".join(figure(f, f"step {s}", ep.scale) for s, f in frames),
                f"{shown}, enlarged ×{ep.scale} (nearest neighbour)")
    frame, error = _frame_or_error(lambda: lookups.frame_for(ep.run, episode=ep.id))
    return figure(frame, f"end observation · step {ep.row.last_step}", ep.scale, error), \
        "no per-step frame recorded: the observation at the episode's end"


# --- a turn ----------------------------------------------------------------------------------------

@dataclass
class Turn:
    """One decision turn of a run for display: the state it saw, what it searched and
    inspected and found, what it wrote to memory, its plan and its new targets."""

    run: Run
    number: int
    scale: int = THUMB_SCALE
    max_frames: int = 4

    @property
    def row(self) -> TurnRow:
        """The turn's row of ``turns.jsonl`` (KeyError if absent)."""
        hit = next((t for t in self.run.records("turns.jsonl") if t.turn == self.number), None)
        if hit is None:
            raise KeyError(f"{self.run.name}: no turn {self.number}")
        return hit

    @property
    def audit(self) -> analysis_pages.RetargetAudit:
        """Searches, inspections (with what each found), position and new targets of the turn."""
        a = analysis_pages.retarget_audit(self.run, self.number)
        if a is None:
            raise KeyError(f"{self.run.name}: no turn {self.number}")
        return a

    @property
    def writes(self) -> list[MemoryWrite]:
        """The memory writes logged for this turn, in order."""
        return [w for w in self.run.records("memory_writes.jsonl") if w.turn == self.number]

    def frames(self) -> list[tuple[str, np.ndarray | None, str | None]]:
        """``(caption, frame or None, error)``: the frame the agent had when the turn began,
        then the frames it inspected (their step, or the inspected episode's end)."""
        t = self.row
        out = [(f"had · step {t.first_step}",
                *_frame_or_error(lambda: lookups.frame_for(self.run, step=t.first_step, life=t.life)))]
        insp = agent_calls.run_inspections(self.run)
        insp = insp[insp["turn"] == self.number] if len(insp) else insp
        for r in insp.head(self.max_frames - 1).itertuples():
            target = None if pd.isna(r.target_step) else int(r.target_step)
            out.append((f"inspected {r.retrieved}", *_frame_or_error(
                lambda: lookups.frame_for(*lookups.frame_holder(self.run, r.episode, target)))))
        return out

    def _repr_html_(self) -> str:
        return turn_html(self)

    def __repr__(self) -> str:
        return turn_text(self)


def found_summary(sightings: Sequence[dict], per_name: int = 3) -> str:
    """What an inspection recognised (its ``sightings``: ``name``, ``x``, ``y``, ``step``, as
    :func:`loaders.analysis_pages.retarget_audit` gives them), grouped by name, rarest first,
    at most ``per_name`` positions each: ``diamond (33, 13) @ 952 · coal (35, 14) @ 950, … +3``."""
    groups: dict[str, list[str]] = {}
    for f in sightings:
        groups.setdefault(str(f.get("name")), []).append(f"({f.get('x')}, {f.get('y')}) @ {f.get('step')}")
    parts = []
    for name, places in sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[0])):
        shown = f"{name} " + ", ".join(places[:per_name])
        parts.append(shown + (f" … +{len(places) - per_name}" if len(places) > per_name else ""))
    return " · ".join(parts) or "nothing"


def _targets(targets: Iterable[dict]) -> str:
    return "; ".join(f"{g.get('kind', '?')} ({g.get('x')}, {g.get('y')})" for g in targets) or "-"


def _plan(plan: Iterable[dict]) -> str:
    return "; ".join(f"({p.get('x')}, {p.get('y')}) {p.get('label', '')}".strip() for p in plan) or "-"


def turn_text(turn: Turn) -> str:
    """A turn in a few lines: steps, searches, inspections, writes, plan, new targets."""
    try:
        t, a = turn.row, turn.audit
    except KeyError as e:
        return f"<Turn {turn.number}: {e.args[0]}>"
    lines = [f"<Turn {t.turn} of {turn.run.name}: life {t.life}, steps {t.first_step}-{t.last_step}, {t.policy}>"]
    lines += [f"  searched {s['query']} -> {', '.join(s['returned']) or 'nothing'}" for s in a.searches]
    lines += [f"  inspected {i['episode']}" + (f" (from run {i['from_run']})" if i.get("inherited") else "")
              + f" ({i['frames']} frames): found {found_summary(i['sightings'])}" for i in a.inspections]
    lines += [f"  wrote {w.path} (seq {w.seq}, step {w.step}): {w.reason}" for w in turn.writes]
    lines.append(f"  plan before: {_plan(t.plan_before)}")
    lines.append(f"  plan after:  {_plan(t.plan_after)}")
    lines.append(f"  new targets: {_targets(a.targets)}")
    return "\n".join(lines)


def turn_html(turn: Turn) -> str:
    """The dashboard's turn view, compactly: header and state, searches, inspections and what
    they found, memory writes, plan before and after, new targets (near an inspected
    episode or not), and the frames the agent had and inspected."""
    try:
        t, a = turn.row, turn.audit
    except KeyError as e:
        return _wrap(f"<p>{esc(e.args[0])}</p>")
    head = (f"<b>Turn {esc(t.turn)}</b> · life {esc(t.life)} · steps {esc(t.first_step)}–{esc(t.last_step)}"
            f" · policy {esc(t.policy)} · at {esc(_pos(a.position))} · episodes {esc(', '.join(t.episodes))}")
    state = f"<pre>{esc(t.note)}</pre>" if t.note else ""
    searches = table([{"query": s["query"], "returned": ", ".join(s["returned"])} for s in a.searches],
                     ["query", "returned"])
    theirs = any(i.get("inherited") for i in a.inspections)
    insp = table([{**i, "found": found_summary(i["sightings"])} for i in a.inspections],
                 ["episode", *(["from_run"] if theirs else []), "frames", "x", "y", "last_step", "counted", "found"])
    writes = table([{"seq": w.seq, "step": w.step, "path": w.path, "op": w.op, "author": w.author,
                     "reason": w.reason, "sources": ", ".join(w.sources)} for w in turn.writes],
                   ["seq", "step", "path", "op", "author", "reason", "sources"])
    plans = table([{"plan": "before", "entries": _plan(t.plan_before)},
                   {"plan": "after", "entries": _plan(t.plan_after)}], ["plan", "entries"])
    targets = table(a.targets or list(t.targets), None)
    frames = "".join(figure(f, c, turn.scale, e) for c, f, e in turn.frames())
    return _wrap(f"<div>{head}</div>{state}<div><b>Searched</b></div>{searches}<div><b>Inspected</b></div>{insp}"
                 f"<div><b>Memory writes</b></div>{writes}<div><b>Plan</b></div>{plans}"
                 f"<div><b>New targets</b> (near: within {a.radius:g} cells of an inspected episode)</div>{targets}"
                 f"<div><b>Frames: had, then inspected</b></div><div>{frames}</div>")


# --- a memory file ---------------------------------------------------------------------------------

@dataclass
class MemoryFile:
    """A ``mine/`` file as it stood at a step (None: the end of the run), rebuilt from the
    write history, each line with the write that set it."""

    run: Run
    path: str
    step: int | None = None

    @property
    def text(self) -> str | None:
        """The file's content as of :attr:`step` (None: not written yet, or deleted)."""
        return file_as_of(self.run, self.path, self.step)

    def lines(self) -> list:
        """Each line with its write (``text``, ``write``), as :func:`loaders.provenance.blame_as_of` gives them."""
        return blame_as_of(self.run, self.path, self.step)

    def versions(self) -> list[MemoryWrite]:
        """The writes of this file up to :attr:`step`."""
        return [w for w in self.run.records("memory_writes.jsonl") if w.path == self.path
                and (self.step is None or w.step <= self.step)]

    def _repr_html_(self) -> str:
        return memory_html(self)

    def __repr__(self) -> str:
        return memory_text(self)


def _as_of(mf: MemoryFile) -> str:
    return "the end of the run" if mf.step is None else f"step {mf.step}"


def memory_text(mf: MemoryFile) -> str:
    """The file's content under a one-line header."""
    try:
        text = mf.text
    except ValueError as e:
        return f"<MemoryFile {mf.path} as of {_as_of(mf)}: history does not rebuild: {e}>"
    n = len(mf.versions())
    head = f"<MemoryFile {mf.path} of {mf.run.name} as of {_as_of(mf)}: {n} write(s)>"
    return head + ("\n(not written yet)" if text is None else "\n" + text)


def memory_html(mf: MemoryFile) -> str:
    """The file's lines, numbered, each with the step, author and reason of the write that set it."""
    versions = mf.versions()
    head = f"<b>{esc(mf.path)}</b> as of {esc(_as_of(mf))} · {len(versions)} write(s)"
    if versions:
        w = versions[-1]
        head += f" · last by {esc(w.author)} at step {esc(w.step)}: {esc(w.reason)}"
    try:
        lines = mf.lines()
    except ValueError as e:
        return _wrap(f"<div>{head}</div><p>history does not rebuild: {esc(e)}</p>")
    if not lines:
        return _wrap(f"<div>{head}</div><p class='mfm-muted'>empty, or not written yet</p>")
    rows = [{"line": i, "text": b.text.rstrip("\n"), "step": b.write.step, "author": b.write.author,
             "reason": b.write.reason, "sources": ", ".join(b.write.sources)} for i, b in enumerate(lines, 1)]
    return _wrap(f"<div>{head}</div>"
                 + table(rows, ["line", "text", "step", "author", "reason", "sources"], max_rows=len(rows)))


Run.html = run_html
