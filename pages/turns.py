"""Turns: one decision of the policy at a time, everything about it on one page."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from dashboard import ui, views
from dashboard.core import copy_key, parse_int
from dashboard.scrubber import frame_scrubber
from loaders import cursor as cur
from loaders import lookups
from loaders import notes as notes_mod
from loaders import turns as tv
from loaders.frame_compare import (
    FIND_OUTLINE,
    TARGET_OUTLINE,
    TURN_LEGEND,
    legend_text,
    outline_groups,
)
from loaders.frame_images import upscale
from mfm.boundary import UnsafePath
from mfm.memory.retrieval import FrameError

NAV_LABELS = {"retarget": "retargeting turn", "failed": "failed turn", "death": "death"}


_, focus = ui.sidebar(("turn", *ui.CURSOR_KEYS))
key, run = ui.need_run(focus)
st.title("Turns")
st.caption("One decision at a time: what the agent had when the turn began, what it searched, inspected and "
           "wrote, how its plan changed, which targets it chose and what came of them. Step through every turn, "
           "or only the retargeting ones, the failed ones, the deaths.")
ui.show_problems(key, run)
menu = views.turn_menu(run)
numbers = menu.numbers
if not numbers:
    st.info("This run recorded no turns (a foreign format, or a run that has not decided yet).")
    st.stop()

want = parse_int(ui.qp("turn"))
if want is not None and want not in numbers:
    st.warning(f"Turn {want} from the URL is not in {ui.md_code(key)}; showing turn {numbers[0]}.")
    want = None
by_number = tv.turns_by_number(run)
cursor = ui.cursor(run)
if cursor is not None:
    held = by_number.get(want) if want is not None else None
    who = cur.follow(ui.named("turn"), ui.named("step"), held is not None and cur.turn_contains(held, cursor))
    if held is not None and who == "target":
        ui.set_cursor(cur.turn_start(held))
    elif held is None or who == "cursor":
        at = cur.turn_at(run, cursor)
        if at is not None:
            ui.set_qp(turn=at.turn)
        elif held is None:
            st.info(f"No turn of {ui.md_code(key)} took step {cursor.step} of life {cursor.life}: showing "
                    f"turn {numbers[0]}.")
elif want is not None:
    ui.set_cursor(cur.turn_start(by_number[want]))
picker = ui.bound("w_turn", "turn", numbers[0], lambda v: t if (t := int(v)) in by_number else None, sync=True,
                  keep=True, also=lambda t: cur.turn_start(by_number[t]).params() if t in by_number else {})
listed = lookups.around(numbers, st.session_state.get("w_turn"), tv.PICKER_WINDOW)
st.selectbox("Turn", listed, format_func=lambda t: menu.labels.get(t, f"turn {t}"), **picker)
if len(listed) < len(numbers):
    st.caption(f"Listed: turns {listed[0]}–{listed[-1]} of {len(numbers):,}, around this one; the buttons below "
               "and the URL's `turn=` reach every turn.")
turn = int(st.session_state["w_turn"])
nav = tv.navigation(menu.kinds, turn)


def _go(n: int) -> None:
    ui.set_qp(turn=n)
    ui.set_cursor(cur.turn_start(by_number[n]))


buttons = [("← previous turn", nav.prev), ("next turn →", nav.next)]
for kind in tv.NAV_KINDS:
    prev, nxt = nav.kinds[kind]
    buttons += [(f"← previous {NAV_LABELS[kind]}", prev), (f"next {NAV_LABELS[kind]} →", nxt)]
for start in range(0, len(buttons), 4):
    for col, (label, n) in zip(st.columns(4), buttons[start:start + 4]):
        col.button(label, key=f"nav_{label}", disabled=n is None, on_click=_go, args=(n,),
                   help=None if n is None else f"turn {n}", width="stretch")

v = views.turn_view(run, turn)
if v is None:
    st.error(f"Turn {turn} is not in {ui.md_code(key)}.")
    st.stop()
pos = f"({v.position[0]:g}, {v.position[1]:g})" if v.position else "unknown"
st.subheader(f"Turn {v.turn} · life {v.life} · {tv.turn_steps(v.first_step, v.last_step)}")
st.markdown(f"**Position** {pos} in life {v.life} · **policy** {ui.md_code(v.policy)}"
            + (" · **retargets**" if v.retargets else ""))
ui.show_notes([n for n in notes_mod.at(ui.root_notes().notes, key, turn=v.turn, life=v.life, lo=v.first_step,
                                        hi=v.last_step) if n.target != "run"])
ui.note_form("note_turn", key, "turn", f"turn {v.turn}", turn=v.turn, life=v.life, step=v.first_step)


page_of = ui.pages()


def _num(v: object, spec: str, unit: str = "") -> str:
    """A number of a model request as text ("—" when not recorded)."""
    return "—" if not isinstance(v, (int, float)) or pd.isna(v) else f"{unit}{v:{spec}}"


def _frame(step: int | None = None, episode: str | None = None):
    return views.frame(run, step=step, episode=episode)


left, right = st.columns([2, 3])
with left:
    st.markdown("**What the agent had when the turn began**")
    if not v.start_frames:
        st.caption("No frame of this life is stored for the turn's start.")
    for sf in v.start_frames:
        try:
            img = upscale(_frame(sf.step, sf.episode), 256)
            left.image(img, width=img.shape[1], caption=ui.md(sf.label), output_format="PNG")
        except (FrameError, UnsafePath) as e:
            st.error(f"{ui.md(sf.label)}: {ui.md(e)}")
        if not sf.exact:
            st.caption("The turn's own start frame is not stored; this is the nearest frame of the same life.")
with right:
    st.markdown("**State block**")
    st.code("\n".join(v.state_block) or "(no state recorded)", language=None, wrap_lines=True)
    st.markdown(f"**Decision** {ui.md(v.decision) if v.decision else '—'}")
    st.markdown("**Plan before → after**")
    if v.plan:
        st.code("\n".join(f"{p.sign} ({p.x}, {p.y}) {p.label}" for p in v.plan), language="diff")
    else:
        st.caption("No plan before or after.")

if v.last_step > v.first_step:
    st.markdown("**The turn's steps, frame by frame**")
    try:
        start, frames, captions = views.turn_frames(run, v.first_step + 1, v.last_step, v.life)
        if frames:
            now = parse_int(ui.qp("step"))
            at = now if now is not None and start <= now < start + len(frames) else start

            def _moved() -> None:
                got = (st.session_state.get("w_turn_scrub") or {}).get("step")
                if isinstance(got, int) and start <= got < start + len(frames):
                    ui.set_cursor(cur.Cursor(v.life, got))

            frame_scrubber(f"turn {v.turn}", start, frames, captions, at, "w_turn_scrub", _moved,
                           label="Step (scrub the turn's frames; moves the time cursor)")
        else:
            st.caption("No frame of this life is stored for the turn's steps.")
    except (FrameError, UnsafePath) as e:
        st.error(f"Frames of turn {v.turn} cannot be shown: {ui.md(e)}")

if v.model is not None and len(v.model):
    st.markdown("**Model**")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("tokens in", "—" if v.tokens[0] is None else f"{v.tokens[0]:,.0f}")
    m2.metric("tokens out", "—" if v.tokens[1] is None else f"{v.tokens[1]:,.0f}")
    m3.metric("latency", "—" if v.latency_s is None else f"{v.latency_s:.2f} s")
    m4.metric("cost", "—" if v.cost_usd is None else f"${v.cost_usd:.4f}")

st.markdown(f"### Tool calls ({len(v.calls)})")


def _thumbs(ids: tuple[str, ...]) -> None:
    """End observations of the episodes a search returned (an inherited one's from the copy of its run)."""
    imgs, caps, missing = [], [], []
    for e in ids:
        try:
            imgs.append(upscale(views.episode_frame(run, e), 96))
            caps.append(ui.md(e))
        except (FrameError, UnsafePath, KeyError):
            missing.append(e)
    if imgs:
        st.image(imgs, width=imgs[0].shape[1], caption=caps, output_format="PNG")
    if missing:
        st.caption("No frame for " + ", ".join(ui.md(e) for e in missing))


def _write(w: tv.WriteView) -> None:
    held = f" (holds from step {w.as_of}, the turn's first step: a plan update)" if w.as_of != w.step else ""
    st.markdown(f"write {w.seq} · {ui.md_code(w.path)} · {ui.md(w.op)} by {ui.md(w.author)} at step {w.step}{held}"
                f" — {ui.md(w.reason)}" + (f" · sources {ui.md(', '.join(w.sources))}" if w.sources else ""))
    rows = tv.line_diff(w.before, w.after)
    if len(rows):
        st.dataframe(tv.styled_diff(rows), hide_index=True, width="stretch", key=f"turn_write_{w.seq}",
                     column_config=tv.DIFF_CONFIG)
    else:
        st.caption("(no textual change)")
    st.page_link(page_of["memory"], label=f"Open {ui.md(w.path)} as of step {w.as_of} in Memory",
                 icon=":material/description:",
                 query_params=ui.link_params(file=w.path, asof=w.as_of))


target_cells = {(t.x, t.y) for t in v.targets}


def _inspected_frames(c: tv.CallView, found: list[str]) -> None:
    """The frames an inspection decoded, each with its finds outlined (the target's apart), and what
    it found."""
    imgs, caps = [], []
    shown_frames = [fr for fr in c.frames if fr.finds or len(c.frames) <= 8]
    quiet = [fr.step for fr in c.frames if fr not in shown_frames]
    if c.origin:
        st.caption(f"Steps, positions and frames of the run {ui.md(c.origin)}, read from its copy "
                   f"({ui.md_code(copy_key(key))}).")
    for fr in shown_frames:
        try:
            img = views.episode_frame(run, c.episode, step=fr.step) if c.episode else _frame(fr.step)
        except (FrameError, UnsafePath) as e:
            st.caption(f"step {fr.step}: {ui.md(e)}")
            continue
        hit = [f.tile for f in fr.finds if f.tile and (f.x, f.y) in target_cells]
        other = [f.tile for f in fr.finds if f.tile and (f.x, f.y) not in target_cells]
        imgs.append(outline_groups(img, [(other, FIND_OUTLINE), (hit, TARGET_OUTLINE)], factor=3, width=2))
        caps.append(ui.md(f"{c.episode} · step {fr.step} · "
                          + (tv.find_caption(fr.finds, target_cells) or "nothing wanted")))
    if imgs:
        st.image(imgs, width=imgs[0].shape[1], caption=caps, output_format="PNG")
    if quiet:
        st.caption(f"{len(quiet)} more decoded frame(s) held nothing wanted: steps "
                   + ", ".join(map(str, quiet)))
    if found:
        st.caption("Found: " + ui.md(", ".join(found), 1500))


if any(c.tool == "inspect" for c in v.calls):
    legend = views.outline_legend(TURN_LEGEND)
    st.image(legend, width=legend.shape[1], output_format="PNG")
    st.caption(legend_text(TURN_LEGEND))
for c in v.calls:
    title = f"{c.index + 1}. {c.tool}"
    if c.tool == "search":
        with st.container(border=True):
            theirs = len(c.inherited_ids)
            st.markdown(f"**{ui.md(title)}** · {len(c.ids)} episode(s) returned"
                        + (f", {theirs} of them inherited from run {ui.md(c.origin)}" if theirs else ""))
            st.code(json.dumps(c.query, sort_keys=True), language="json")
            _thumbs(c.ids)
    elif c.tool == "inspect":
        found = sorted({f"{f.name} ({f.x}, {f.y})" for f in c.finds})
        on_target = sorted({f"{f.name} ({f.x}, {f.y})" for f in c.finds if (f.x, f.y) in target_cells})
        label = (f"{title} {c.episode_label} · {len(c.frames)} frame(s) decoded · {len(c.finds)} find(s)"
                 + (f" · saw the target: {', '.join(on_target)}" if on_target else ""))
        box = st.expander(ui.md(label), expanded=bool(on_target), key=f"w_inspect_{turn}_{c.index}", on_change="rerun")
        if box.open:  # lazy: its frames are decoded and outlined once it is opened
            with box:
                _inspected_frames(c, found)
    elif c.tool in ("write", "consolidate"):
        with st.container(border=True):
            st.markdown(f"**{ui.md(title)}** {ui.md_code(c.args.get('path', '')) if c.args.get('path') else ''} "
                        f"{ui.md(c.args.get('reason', ''))}")
            for name, items in (("added", c.added), ("revised", c.revised), ("removed", c.removed)):
                if items:
                    st.markdown(f"{name}: " + ", ".join(ui.md_code(i) for i in items))
            for w in c.writes:
                _write(w)
            if not c.writes:
                st.caption("No logged write matches this call (nothing changed).")
    elif c.tool == "model":
        with st.container(border=True):
            r = c.request or {}
            st.markdown(f"**{ui.md(title)}** {ui.md_code(r.get('model') or c.args.get('model') or '?')} · "
                        f"{ui.md(r.get('status', '?'))} · tokens in {_num(r.get('prompt_tokens'), ',.0f')} / out "
                        f"{_num(r.get('completion_tokens'), ',.0f')} · {_num(r.get('latency_s'), '.2f')} s · "
                        f"cost {_num(r.get('cost_usd'), '.4f', '$')}")
            if c.args.get("prompt"):
                prompt = st.expander("Prompt", key=f"w_prompt_{turn}_{c.index}", on_change="rerun")
                if prompt.open:
                    prompt.code(str(c.args["prompt"]), language=None)
            else:
                st.caption(f"Prompt not recorded ({c.args.get('prompt_chars', '?')} characters, sha256 "
                           f"{ui.md_code(str(c.args.get('prompt_sha256', '?'))[:16])}).")
            reply = c.result.get("content") or ""
            calls = "\n".join(f"{t.get('name')}({t.get('arguments', '')})" for t in c.result.get("tool_calls") or []
                              if isinstance(t, dict))
            st.code((reply + ("\n" if reply and calls else "") + calls) or str(c.result.get("error", "(empty reply)")),
                    language=None)
    else:
        with st.container(border=True):
            st.markdown(f"**{ui.md(title)}**")
            st.code(json.dumps({"args": c.args, "result": c.result}, sort_keys=True, default=str)[:4000],
                    language="json")
for w in v.other_writes:
    with st.container(border=True):
        st.markdown("**Another write of this turn**")
        _write(w)

st.markdown("### Targets")
if v.targets:
    st.table(tv.targets_table(v.targets), hide_index=True)
    for t in v.targets:
        st.markdown(f"- {ui.md(t.kind)} ({t.x:g}, {t.y:g}): " + ("**new target**" if t.new else "in the plan")
                    + (f", near {ui.md(t.near)} ({t.distance} cells)" if t.near else "")
                    + (f", seen in {ui.md(', '.join(t.seen_in))}" if t.seen_in else ""))
else:
    st.caption("The turn named no go_to/look_at target.")

st.markdown("### Episodes produced")
if v.episodes:
    st.table(tv.episodes_table(v.episodes), hide_index=True)
    links = st.columns(min(4, len(v.episodes) * 2))
    for i, e in enumerate(v.episodes[:2]):
        links[2 * i].page_link(page_of["timeline"], label=f"{ui.md(e.id)} in Timeline",
                               icon=":material/view_timeline:", query_params=ui.link_params(ep=e.id))
        if e.outcome in tv.FAILED_OUTCOMES or e.died:
            links[2 * i + 1].page_link(page_of["failures"], label=f"{ui.md(e.id)} in Failures",
                                       icon=":material/report:", query_params=ui.link_params(ep=e.id))
else:
    st.caption("The turn produced no episode.")
