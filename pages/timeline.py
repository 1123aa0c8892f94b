"""Timeline: episodes over env steps, one lane per life, with marks; episode details and frames."""
from __future__ import annotations

import streamlit as st

from dashboard import figures, timeline_canvas, ui, views
from dashboard.core import clamp_range, format_range, parse_int
from dashboard.scrubber import LABEL, frame_scrubber
from dashboard.theme import STATUS_LABELS
from loaders import agent_calls, lookups, runs_summary, timeline_data
from loaders import cursor as cur
from loaders import notes as notes_mod
from loaders.inherited import episode_label, is_inherited
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError
from mfm.schema import IndexRow


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:g}" if float(v).is_integer() else f"{v:.1f}"


_, focus = ui.sidebar(("ep", "range", "color", *ui.CURSOR_KEYS))
key, run = ui.need_run(focus)
st.title("Timeline")
m = run.manifest
st.caption(f"{ui.md_code(key)} · " + ui.md(
    f"{m.task if m else '?'} · {m.method if m else '?'} · seed {m.seed if m and m.seed is not None else '?'} · "
    f"{STATUS_LABELS.get(run.status, run.status)} · {len(run.episodes())} episodes"))
ui.follow_live([(key, run)])
ui.show_problems(key, run)
if missing := runs_summary.absent_records(run):
    st.info(f"This {run.format} run has no {', no '.join(missing)}: those marks are not shown.")

first, last = lookups.step_bounds(run)
if last <= first:
    st.info("This run has no episodes yet.")
    st.stop()

c1, c2 = st.columns([1, 4])
c1.radio("Colour episodes by", ["action kind", "outcome"], horizontal=True,
         **ui.bound("w_color", "color", "action kind", lambda v: "outcome" if v == "outcome" else None))
c2.slider("Step range (zoom)", min_value=first, max_value=last,
          **ui.bound("w_range", "range", (first, last), lambda v: clamp_range(v, first, last), format_range,
                     sync=True),
          help="Zoom: the chart shows this range of steps; long runs are binned to what fits.")
lo, hi = st.session_state["w_range"]
color_by = "outcome" if st.session_state["w_color"] == "outcome" else "action_kind"

ep_id = ui.qp("ep")
if ep_id and is_inherited(ep_id):
    there = ui.episode_link(key, run, ep_id)
    st.info(f"{ui.md(episode_label(run, ep_id), 160)} is an episode of the run whose memory {ui.md_code(key)} "
            "inherited, not of this game" + ("." if there else "; its copy in `inherited/` does not hold it."))
    if there:
        st.page_link(ui.pages()["timeline"], label=f"Open {ui.md(ep_id, 80)} in the copy of that run",
                     icon=":material/view_timeline:", query_params=there)
    ep_id = None
elif ep_id and run.episode(ep_id) is None:
    st.warning(f"Episode {ui.md(repr(ep_id), 80)} from the URL is not in this run.")
    ep_id = None
# The episode's record and its frames (stepped one at a time by the scrubber, or up to 24 side by side) in lazy
# tabs: only the open tab is built and sent (choosing another reruns the page), so a click draws one of each.
DETAIL_TABS = ["state.json", "action.json", "outcome.json", "steps"]
FRAME_TABS = ["Step through its frames", "Frame strip"]
EPISODES_AROUND = 100  # the episode picker lists this many on each side of the open one (lookups.around)
BACK_STEPS = 8  # the scrubber also steps through this many steps before the episode, in its life
cursor = ui.cursor(run)
if cursor is not None:
    held = run.episode(ep_id) if ep_id and not is_inherited(ep_id) else None
    who = cur.follow(ui.named("ep"), ui.named("step"), held is not None and cur.episode_contains(held, cursor,
                                                                                                BACK_STEPS))
    if held is not None and who == "target":
        cursor = cur.episode_start(held)
        ui.set_cursor(cursor)
    elif held is None or who == "cursor":
        at = cur.episode_at(run, cursor)
        ep_id = at.id if at is not None else None
        ui.set_qp(ep=ep_id)
elif ep_id and (held := run.episode(ep_id)) is not None:
    ui.set_cursor(cur.episode_start(held))
step = parse_int(ui.qp("step"))

view = views.timeline(run, lo, hi, color_by)
bars, marks = view.bars, view.marks
sel = run.episode(ep_id) if ep_id else None
lanes = views.timeline_lanes(run, lo, hi, color_by, ep_id, step,
                             (sel.first_step, sel.last_step, sel.life) if sel else None)
points = len(bars) + len(marks) + len(view.vital_lines)


def _on_bar() -> None:
    """The chart's click: the episode of the clicked bar becomes the selected one (a bar that
    merges several episodes names none)."""
    ep = (st.session_state.get("timeline_lanes") or {}).get("episode")
    if isinstance(ep, str) and (ref := run.episode(ep)) is not None:
        ui.set_qp(ep=ep)
        ui.set_cursor(cur.episode_start(ref))


timeline_canvas.draw(lanes, "timeline_lanes", _on_bar)
ui.figure_downloads(lambda: figures.timeline_figure(key, run, view=view),
                    f"timeline_{figures.file_stem(key)}", "double")
binned = len(bars) and (bars["count"] > 1).any()
st.caption(f"Steps {lo}–{hi}: {int(bars['count'].sum()) if len(bars) else 0} episodes"
           + (f" merged into {len(bars)} bars" if binned else "")
           + f", {int(marks['count'].sum()) if len(marks) else 0} marks; {points} points drawn. "
           "Hover for details; click a bar to open its episode.")

eps = run.episodes()
in_range = timeline_data.episodes_in_range(eps, lo, hi)
options = lookups.around(in_range["id"], ep_id, EPISODES_AROUND)
if ep_id and ep_id not in options:
    options = [ep_id] + options
summaries = {e: ref.summary for e in options if (ref := run.episode(e)) is not None}
st.selectbox("Episode", options, placeholder="Pick an episode (or click a bar)",
             format_func=lambda e: f"{e} — {summaries.get(e, '')[:90]}",
             **ui.bound("w_ep", "ep", None, lambda v: v if v == ep_id and v in options else None, sync=True,
                        also=lambda e: cur.episode_start(run.episode(e)).params() if e and run.episode(e) else {}))
if len(in_range) > len(options):
    st.caption(f"Listed: {len(options)} of the range's {len(in_range):,} episodes, around the one open; click a "
               "bar or zoom in to reach the others.")

if not ep_id:
    st.stop()

try:
    d = lookups.episode_detail(run, ep_id)
except (KeyError, UnsafePath) as e:
    st.error(ui.md(e))
    st.stop()
row = d.row
st.subheader(ui.md(f"{row.id} · {row.action_kind or row.kind} · steps {row.first_step}–{row.last_step} · "
                   f"life {row.life}"))
ui.show_notes(notes_mod.at(ui.root_notes().notes, key, life=row.life, lo=row.first_step, hi=row.last_step))
left, right = st.columns([3, 2])
with left:
    st.markdown(f"**Summary.** {ui.md(row.summary)}")
    st.markdown("**Tags.** " + (" ".join(ui.md_code(t) for t in row.tags) or "—"))
    st.markdown(f"**Outcome.** {ui.md(row.outcome or '—')} · "
                f"**turn** {row.turn if row.turn is not None else '—'} · "
                f"**position** ({_fmt(row.x)}, {_fmt(row.y)}{', ' + _fmt(row.z) if row.z is not None else ''}) · "
                f"**frames** {row.frames}")
    if d.extra:
        st.markdown("**Fields of its source format.** " + ui.md(", ".join(f"{k}: {v}" for k, v in d.extra.items())))
    if row.turn is not None:
        st.page_link(ui.pages()["turns"], label=f"Open turn {row.turn} in Turns (why it was chosen)",
                     icon=":material/psychology:", query_params=ui.link_params(turn=row.turn))
    if row.outcome in ("failed", "interrupted") or "died" in row.tags:
        st.page_link(ui.pages()["failures"], label=f"{row.id} in Failures (filmstrip)", icon=":material/report:",
                     query_params=ui.link_params(ep=row.id))
    if row.events:
        st.markdown("**Events.**\n" + "\n".join(f"- {ui.md(e)}" for e in row.events))
    if row.note:
        st.markdown(f"**Note.** {ui.md(row.note)}")
    ev = views.episode_marks(run, row.first_step, row.last_step, row.life)
    if len(ev):
        st.markdown("**Marks in this episode.**")
        st.dataframe(ev[["step", "kind", "label"]].assign(label=ev["label"].str.replace("<br>", " · ")),
                     hide_index=True, width="stretch")
with right:
    tabs = st.tabs(DETAIL_TABS, key="w_detail", on_change="rerun")
    for tab, (name, obj) in zip(tabs, (("state.json", d.state), ("action.json", d.action),
                                       ("outcome.json", d.outcome))):
        if tab.open:
            with tab:
                if obj is None:
                    st.warning(f"{ui.md_code(f'{row.path}/{name}')} is missing or unreadable.")
                else:
                    st.json(obj, expanded=1)
    if tabs[3].open:
        with tabs[3]:
            st.dataframe(d.steps.drop(columns=["episode"], errors="ignore"), hide_index=True, width="stretch",
                         height=260)

if row.turn is not None:
    reqs = agent_calls.model_calls(run.turns(), row.turn)
    if len(reqs):
        st.markdown(f"**Model requests of turn {row.turn}** ({len(reqs)}; ✓ ok, ↻ failed then retried, "
                    "✗ failed and the policy gave up)")
        st.dataframe(reqs[["request", "status", "model", "prompt_tokens", "completion_tokens", "latency_s", "cost_usd",
                           "tool_calls", "error", "prompt_chars", "prompt_sha256"]],
                     hide_index=True, width="stretch", key="model_requests",
                     column_config={"request": st.column_config.NumberColumn("#", width="small"),
                                    "prompt_tokens": st.column_config.NumberColumn("tokens in", format="%d"),
                                    "completion_tokens": st.column_config.NumberColumn("tokens out", format="%d"),
                                    "latency_s": st.column_config.NumberColumn("latency (s)", format="%.3f"),
                                    "cost_usd": st.column_config.NumberColumn("cost (USD)", format="%.5f"),
                                    "tool_calls": st.column_config.TextColumn("tool calls in the reply", width="large"),
                                    "error": st.column_config.TextColumn("failure", width="medium")})
    calls = agent_calls.turn_calls(run.turns(), row.turn)
    if len(calls):
        every = st.expander(f"Every call of turn {row.turn} with its result ({len(calls)})", key="w_calls",
                            on_change="rerun")
        if every.open:
            every.dataframe(calls, hide_index=True, width="stretch", key="turn_calls",
                            column_config={"args": st.column_config.TextColumn("args", width="large"),
                                           "result": st.column_config.TextColumn("result", width="large")})


@st.fragment
def _scrubber(row: IndexRow) -> None:
    """The episode's frames step by step, from :data:`BACK_STEPS` steps before it in the same
    life (what led to it), stepped in the browser (``dashboard.scrubber``): a step paints at
    once; the step settled on comes back here (a fragment: only this part reruns) to keep the
    URL and the link below in step."""
    own, hi_s = row.first_step + 1, row.first_step + row.frames
    try:
        start, frames, captions = views.episode_scrub(run, row.id, BACK_STEPS)
    except (FrameError, UnsafePath) as e:
        st.error(f"Frames of {ui.md(row.id)} cannot be shown: {ui.md(e)}")
        return
    lo_s = min(start, own) if frames else own
    ui.bound("w_step", "step", own, lambda v: s if lo_s <= (s := int(v)) <= hi_s else None, sync=True)

    def moved() -> None:
        got = (st.session_state.get("w_scrub") or {}).get("step")
        if isinstance(got, int) and lo_s <= got <= hi_s:
            st.session_state["w_step"] = got
            ui.set_cursor(cur.Cursor(row.life, got))

    label = f"{LABEL}, from {own - lo_s} step(s) before it" if lo_s < own else None
    frame_scrubber(row.id, start, frames, captions, st.session_state["w_step"], "w_scrub", moved,
                   **({"label": label} if label else {}))
    if lo_s < own:
        st.caption(f"Steps {lo_s}–{own - 1} belong to the episode(s) before {ui.md(row.id)} in life {row.life}: "
                   "what led to it.")
    now = st.session_state["w_step"]
    prev = max(first, now - 1)
    st.page_link(ui.pages()["frames"], label=f"Compare step {now} with the previous step in Frames",
                 query_params=ui.link_params(frames=f"{key}:{prev},{key}:{now}"))
    ui.note_form("note_step", key, "step", f"step {now} (life {row.life})", life=row.life, step=now)


if row.frames:
    step_tab, strip_tab = st.tabs(FRAME_TABS, key="w_frames_view", on_change="rerun")
    if step_tab.open:
        with step_tab:
            _scrubber(row)
    if strip_tab.open:
        with strip_tab:
            try:
                steps, thumbs, width = views.strip_thumbs(run, ep_id, 24, 128)
                st.image(thumbs, width=width, caption=[f"step {s}" for s in steps])
                if row.frames > len(steps):
                    st.caption(f"{len(steps)} of {row.frames} frames, evenly spaced; the other tab steps through "
                               "every one.")
            except (FrameError, UnsafePath) as e:
                st.error(f"Frames of {ui.md(ep_id)} cannot be shown: {ui.md(e)}")
