"""Streamlit glue shared by the pages: the runs root, URL state, the run registry, the sidebar.
The cached views the pages draw are declared in ``dashboard.views``.

Every piece of view state (selected runs, focused run, episode, step, frames, cell, ...)
lives in the URL query string, so any view is a shareable deep link. Values are also kept
in the session, so moving between pages through the sidebar keeps the selection.

Run data and URL values reach Markdown-rendering elements only through :func:`md` or
:func:`md_code` (``dashboard.safe_text``), which also write paths relative to the runs root.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import streamlit as st

from dashboard import safe_text
from dashboard.core import (
    PAGES_DIR,
    copy_key,
    live_caption,
    param_problem,
    resolve_run_key,
    run_key,
    runs_root,
    split_list,
    status_changes,
)
from dashboard.theme import STATUS_LABELS
from loaders import cursor as cursor_mod
from loaders import lookups, runs_summary
from loaders import notes as notes_mod
from loaders.cursor import Cursor
from loaders.inherited import inherited_from, locate
from loaders.live import needs_refresh, watch_key
from loaders.remote.mirror import mirrored_url
from loaders.run import Run, find_runs, open_run
from mfm.boundary import UnsafePath

STICKY = "_mfm_sticky"
LISTED = 500
"""The most options a picker lists (each is sent to the browser on every run of the page)."""
GLOBAL_KEYS = ("runs", "run")

PAGE_SPECS = {
    "runs": ("runs.py", "Runs", ":material/table_rows:"),
    "search": ("search.py", "Search", ":material/search:"),
    "notes": ("notes.py", "Notes", ":material/sticky_note_2:"),
    "timeline": ("timeline.py", "Timeline", ":material/view_timeline:"),
    "turns": ("turns.py", "Turns", ":material/psychology:"),
    "failures": ("failures.py", "Failures", ":material/report:"),
    "frames": ("frames.py", "Frames", ":material/compare:"),
    "grid": ("grid.py", "Spatial grid", ":material/grid_on:"),
    "retargeting": ("retargeting.py", "Retargeting", ":material/my_location:"),
    "steps_per_turn": ("steps_per_turn.py", "Steps per turn", ":material/speed:"),
    "memory": ("memory.py", "Memory", ":material/description:"),
    "provenance": ("provenance.py", "Provenance", ":material/account_tree:"),
    "progress": ("progress.py", "Progress", ":material/flag:"),
    "echo": ("echo.py", "Echo", ":material/school:"),
    "sql": ("sql.py", "SQL", ":material/terminal:"),
}


def pages() -> dict[str, Any]:
    """The app's pages as ``st.Page`` objects. The Runs page is the default, served at the
    app's root (Streamlit gives a default page the url ``""``); ``/runs`` opens the same script
    through a hidden page, so a link or bookmark naming it is not "Page not found"."""
    out = {name: st.Page(PAGES_DIR / file, title=title, icon=icon, url_path=name)
           for name, (file, title, icon) in PAGE_SPECS.items() if name != "runs"}
    file, title, icon = PAGE_SPECS["runs"]
    return {"runs": st.Page(PAGES_DIR / file, title=title, icon=icon, url_path="home", default=True), **out,
            "runs_path": st.Page(PAGES_DIR / file, title=title, icon=icon, url_path="runs", visibility="hidden")}


def root() -> Path:
    """The runs root of this dashboard (``--root`` after ``--``, env MFM_RUNS_ROOT, or sample_runs/)."""
    return runs_root(sys.argv[1:])


def root_label() -> str:
    """How the runs root is named on screen: its folder's name, or the URL it mirrors."""
    r = root()
    return mirrored_url(r) or r.name


def md(text: object, limit: int | None = None) -> str:
    """Run data, an error or a URL value as Markdown that shows it literally (no image,
    link or HTML can form), with paths under the runs root written relative to it."""
    return safe_text.md(safe_text.relative_paths(str(text), root()), limit)


def md_code(text: object, limit: int | None = None) -> str:
    """Like :func:`md`, as an inline code span."""
    return safe_text.md_code(safe_text.relative_paths(str(text), root()), limit)


def qp(name: str) -> str | None:
    """One query parameter (the last value if repeated)."""
    v = st.query_params.get(name)
    return v if v else None


def set_qp(**values: Any) -> None:
    """Set (or, with None/empty, remove) query parameters, remembering them for page changes;
    the URL changes once for all of them (:func:`_write_url`)."""
    sticky = st.session_state.setdefault(STICKY, {})
    now = st.query_params.to_dict()
    new = dict(now)
    for k, v in values.items():
        text = "" if v is None else str(v)
        if text:
            new[k] = sticky[k] = text
        else:
            new.pop(k, None)
            sticky.pop(k, None)
    _write_url(now, new)


def _write_url(now: dict[str, str], new: dict[str, str]) -> None:
    """Change the URL's parameters from ``now`` to ``new`` in one message to the browser.
    Streamlit sends one per assignment and the browser pushes a history entry for each: set
    one by one, the parameters of a page change left Back two to five half-built URLs to step
    through, and cost a few ms of the click each."""
    if new != now:
        st.query_params.from_dict(new)


def drop_bad_params() -> None:
    """Remove query parameters that are too long or hold NUL (``core.param_problem``) from
    the URL, with a short note each, before any page reads them."""
    sticky = st.session_state.setdefault(STICKY, {})
    for k in list(st.query_params):
        why = next(filter(None, (param_problem(k, v) for v in st.query_params.get_all(k))), None)
        if why:
            del st.query_params[k]
            sticky.pop(k, None)
            st.warning(f"URL parameter {md_code(k, 40)} {why}: ignored.", icon="🚫")


def restore(keys: tuple[str, ...]) -> None:
    """Put back query parameters this session had set that the URL lacks (after a page
    change), once parameters the dashboard refuses are dropped. Which were put back this run
    is kept (:func:`named` tells a value the URL named from one the session remembered)."""
    drop_bad_params()
    sticky = st.session_state.setdefault(STICKY, {})
    put_back = {}
    for k in (*GLOBAL_KEYS, *keys):
        if k in st.query_params:
            sticky[k] = st.query_params[k]
        elif k in sticky:
            put_back[k] = sticky[k]
    if put_back:
        st.query_params.update(put_back)
    st.session_state[RESTORED] = set(put_back)


RESTORED = "_mfm_restored"
CURSOR_KEYS = ("life", "step")
"""The URL parameters of the run-wide time cursor (``loaders.cursor``)."""


def named(param: str) -> bool:
    """Whether the URL that opened this run of the page named ``param`` (not put back from
    the session by :func:`restore`, nor absent)."""
    return param in st.query_params and param not in st.session_state.get(RESTORED, set())


def cursor(run: Run) -> Cursor | None:
    """The time cursor of ``run`` from the URL (``loaders.cursor.parse``), each dropped or moved
    value said in a warning, the URL rewritten to the cursor read (its life filled in)."""
    got, problems = cursor_mod.parse(run, qp("life"), qp("step"))
    for why in problems:
        st.warning(f"URL parameter {md(why, 200)}.", icon="🚫")
    if got is not None:
        set_qp(**got.params())
    elif qp("step") is not None:
        set_qp(step=None)
    return got


def set_cursor(c: Cursor | None) -> None:
    """Move the time cursor (None: clear it); every page that follows it reads it from the URL."""
    set_qp(**(c.params() if c else {"life": None, "step": None}))


def cursor_bar(run: Run, c: Cursor | None, key: str = "w_cursor") -> Cursor | None:
    """The time cursor's bar (``dashboard.scrubber.cursor_bar``): where the cursor stands (the
    turn, episode and position there), a slider over its life's steps, buttons and the arrow
    keys. Without a cursor it stands at the run's last step and moving it sets one. Returns the
    cursor (None when not set)."""
    from dashboard.scrubber import cursor_bar as mount

    shown = c
    if shown is None:
        lives = lookups.lives_of(run)
        bounds = cursor_mod.life_bounds(run, lives[-1]) if lives else None
        if bounds is None:
            return None
        shown = Cursor(lives[-1], bounds[1])
    lo, hi = cursor_mod.life_bounds(run, shown.life) or (shown.step, shown.step)
    line = cursor_mod.describe(run, shown)[len(f"life {shown.life} · step {shown.step}"):]
    if c is None:
        line += " (not set: move it to set it)"

    def moved() -> None:
        got = (st.session_state.get(key) or {}).get("step")
        if isinstance(got, int) and lo <= got <= hi:
            set_cursor(Cursor(shown.life, got))

    mount(shown.life, shown.step, lo, hi, line, key, moved)
    return c


def bound(key: str, param: str, default: Any, parse: Callable[[str], Any] = str,
          fmt: Callable[[Any], object] = str, sync: bool = False, keep: bool = False,
          also: Callable[[Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Bind the widget ``key`` to the URL parameter ``param``; returns the widget's ``key``
    and ``on_change`` arguments.

    The widget starts at ``parse(value)`` of the parameter (``default`` when it is absent, or
    ``parse`` gives None or raises ValueError) unless the session already holds a value; with
    ``sync`` the URL wins on every run. A change writes ``fmt(value)`` to the URL, or removes
    the parameter when the value is ``default`` or None, so a deep link reopens the same view;
    with ``keep`` the URL names the value on every run, default or not. ``also(value)`` gives
    further parameters a change sets (None removes one), e.g. the step of the episode just left."""
    def parse_one(text: str) -> tuple | None:
        v = parse(text)
        return None if v is None else (v,)

    return bound_group((key,), param, None if default is None else (default,), parse_one, lambda vs: fmt(vs[0]),
                       sync, keep, (lambda vs: also(vs[0])) if also else None)[0]


def bound_group(keys: Sequence[str], param: str, default: tuple | None, parse: Callable[[str], tuple | None],
                fmt: Callable[[tuple], object], sync: bool = False, keep: bool = False,
                also: Callable[[tuple], dict[str, Any]] | None = None, initial: tuple | None = None
                ) -> list[dict[str, Any]]:
    """Bind several widgets to the parts of one URL parameter (a cell's x and y, a region's
    columns and rows): ``parse(text)`` gives one value per key, ``fmt`` takes those values;
    ``default`` is a tuple (or None: the parameter stays in the URL once set), ``initial`` what
    the widgets show while the parameter is absent (``default`` if not given). Otherwise as
    :func:`bound`; returns each widget's ``key`` and ``on_change``."""
    text = qp(param)
    try:
        value = None if text is None else parse(text)
    except ValueError:
        value = None
    if value is not None and len(value) != len(keys):
        value = None
    start = next((v for v in (value, initial, default) if v is not None), (None,) * len(keys))
    if sync or any(k not in st.session_state for k in keys):
        for k, v in zip(keys, start):
            st.session_state[k] = v
    if keep and None not in (now := tuple(st.session_state[k] for k in keys)):
        set_qp(**{param: fmt(now)})

    def changed() -> None:
        vs = tuple(st.session_state[k] for k in keys)
        set_qp(**{param: None if None in vs or vs == default else fmt(vs)}, **(also(vs) if also else {}))

    return [{"key": k, "on_change": changed} for k in keys]


def goes_to(key: str, param: str) -> dict[str, Any]:
    """A picker that moves the view (open a merged node, a citing version): choosing a value
    writes it to the URL parameter ``param`` that another widget is bound to; the picker keeps
    no URL state of its own. Returns the widget's ``key`` and ``on_change``."""
    return {"key": key, "on_change": lambda: set_qp(**{param: st.session_state[key]})}


def get_run(path: Path) -> Run:
    """A run as it is on disk now (the registry of runs, ``loaders.registry``): re-read when
    its files change, and for a run being written only the tables whose file changed are
    parsed again (``loaders.live``)."""
    return open_run(path)


@st.cache_data(ttl=5, show_spinner=False)
def _find(root_dir: str) -> list[str]:
    return [str(p) for p in find_runs(root_dir)]


def all_runs() -> list[Run]:
    """Every run under the root (the folder listing is re-read every few seconds)."""
    return [get_run(Path(p)) for p in _find(str(root()))]


REFUSED_SHOWN = 5
"""The most refused run keys a page names (one message each; the others are counted in one more)."""


def resolve_run_keys(base: Path, keys: Sequence[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """The run folders ``keys`` name, each once however it is spelled (``x``, ``./x``, ``x/``,
    a symlink to ``x`` inside the root: one run, keyed by its path relative to the root with
    symlinks resolved), in the order first named, before any is opened; and why keys were
    refused (``core.resolve_run_key``), each reason once."""
    found: dict[str, Path] = {}
    refused: list[str] = []
    for key in keys:
        try:
            path = resolve_run_key(base, key)
        except UnsafePath as e:
            if str(e) not in refused:
                refused.append(str(e))
            continue
        found.setdefault(run_key(base, path), path)
    return list(found.items()), refused


def selected_runs() -> list[tuple[str, Run]]:
    """The runs named by ``runs`` in the URL, each run once (:func:`resolve_run_keys`);
    refused keys are reported on the page."""
    found, refused = resolve_run_keys(root(), split_list(qp("runs")))
    for why in refused[:REFUSED_SHOWN]:
        st.error(f"Refused run path: {md(why)}. Runs are named by their folder relative to the runs root.",
                 icon="🚫")
    if len(refused) > REFUSED_SHOWN:
        st.error(f"{len(refused) - REFUSED_SHOWN:,} more run paths refused.", icon="🚫")
    return [(key, get_run(path)) for key, path in found]


def focus_run(runs: list[tuple[str, Run]]) -> tuple[str, Run] | None:
    """The run this page shows (``run`` in the URL, else the first selected run)."""
    if not runs:
        return None
    keys = [k for k, _ in runs]
    want = qp("run")
    if want and want not in keys:
        st.warning(f"Run {md(repr(want), 80)} from the URL is not among the open runs; showing {md_code(keys[0])}.")
    return runs[keys.index(want)] if want in keys else runs[0]


def _on_focus() -> None:
    set_qp(run=st.session_state["w_focus"])


def sidebar(page_keys: tuple[str, ...] = ()) -> tuple[list[tuple[str, Run]], tuple[str, Run] | None]:
    """Restore URL state, draw the sidebar run picker; return (open runs, focused run)."""
    restore(page_keys)
    runs = selected_runs()
    focus = focus_run(runs)
    with st.sidebar:
        st.caption(f"Runs root: {md_code(root_label())}")
        if runs:
            keys = [k for k, _ in runs]
            st.session_state["w_focus"] = focus[0] if focus else keys[0]
            st.selectbox("Focused run", keys, key="w_focus", on_change=_on_focus,
                         help="The run shown by Timeline, Frames and Spatial grid. Open runs on the Runs page.")
            if focus:
                m = focus[1].manifest
                if m:
                    got = inherited_from(focus[1])
                    st.caption(md(f"{m.task} · {m.method} · seed {'unknown' if m.seed is None else m.seed} · "
                                  f"{focus[1].status}" + (f" · inherited memory of {got.get('run')}" if got else "")))
        else:
            st.caption("No run open: pick runs on the Runs page.")
    if focus and qp("run") != focus[0]:
        set_qp(run=focus[0])
    return runs, focus


def need_run(focus: tuple[str, Run] | None) -> tuple[str, Run]:
    """Stop the page with a pointer to the Runs page when no run is open."""
    if focus is None:
        st.info("No run is open. Pick one or more runs on the Runs page; they are kept in the URL.")
        st.page_link(pages()["runs"], label="Go to Runs", icon=":material/table_rows:")
        st.stop()
    return focus


def link_params(**extra: Any) -> dict[str, str]:
    """Query params for a link to another page: the open runs plus ``extra``."""
    out = {k: v for k in GLOBAL_KEYS if (v := qp(k))}
    out.update({k: str(v) for k, v in extra.items() if v is not None and str(v) != ""})
    return out


def episode_link(key: str, run: Run, ep: str) -> dict[str, str] | None:
    """Query params opening episode ``ep`` of run ``key`` in Timeline. An ``inherited:``
    episode opens in the copy of the run it came from (added to the open runs and focused),
    under its own id there; None when the episode is found nowhere."""
    ref = locate(run, ep)
    if ref.holder is None:
        return None
    if not ref.inherited:
        return link_params(ep=ep)
    copy = copy_key(key)
    opened = [k for k in split_list(qp("runs")) or [key] if k != copy]
    return {"runs": ",".join([*opened, copy]), "run": copy, "ep": ref.local_id}


def episode_frames_ref(key: str, run: Run, ep: str) -> str | None:
    """The ``frames`` query value of episode ``ep``'s end observation (an inherited one in the
    copy, ``copy_key(key):ep_…``); None when the episode is found nowhere."""
    ref = locate(run, ep)
    if ref.holder is None:
        return None
    return f"{copy_key(key)}:{ref.local_id}" if ref.inherited else f"{key}:{ep}"


def show_problems(key: str, run: Run) -> None:
    """A collapsible warning listing a damaged run's problems with file:line."""
    probs = runs_summary.problems_table(run)
    if not len(probs):
        return
    base = root()
    probs = probs.assign(**{c: [safe_text.relative_paths(str(v), base) for v in probs[c]]
                            for c in ("where", "message")})
    errors = int((probs["severity"] == "error").sum())
    label = f"⚠️ {md(key)}: {len(probs)} problem(s), {errors} error(s) — the run is damaged"
    with st.expander(label, expanded=False):
        st.warning("These lines or files were skipped; everything else of the run is shown.")
        st.dataframe(probs, hide_index=True, width="stretch",
                     column_config={"where": st.column_config.TextColumn("file:line", width="medium"),
                                    "message": st.column_config.TextColumn("problem", width="large")})


def figure_downloads(make: Callable[[], Any], stem: str, width: str) -> None:
    """Download buttons for a paper figure (SVG, PDF, PNG and its JSON manifest) in one
    "Export figure" popover (one element of the page where four buttons in four columns were:
    0.015 s of a click on Retargeting at 360k, docs/benchmarks.md); ``make`` builds the
    :class:`dashboard.figures.Figure` and runs only when a button is clicked. The manifest
    records the page's URL state (its filters), so its deep link reopens this view."""
    from dashboard import figures

    state = {k: st.query_params[k] for k in st.query_params}

    def made() -> Any:
        fig = make()
        fig.view = state
        return fig

    box = st.popover("Export figure", icon=":material/download:")
    for fmt in figures.FORMATS:
        box.download_button(f"Figure {fmt.upper()}", data=lambda f=fmt: figures.render(made(), f),
                            file_name=f"{stem}.{fmt}", mime=figures.MIME[fmt], key=f"dl_{stem}_{fmt}",
                            on_click="ignore", icon=":material/download:")
    box.download_button("Manifest JSON", data=lambda: json.dumps(figures.manifest(made(), width), indent=2),
                        file_name=f"{stem}.json", mime="application/json", key=f"dl_{stem}_json",
                        on_click="ignore", icon=":material/data_object:")


def stamp() -> str:
    """The wall time, for captions of pages that refresh."""
    return time.strftime("%H:%M:%S")


LIVE_EVERY = 3
"""Seconds between checks of a run being written, on the pages that follow it."""
LIVE_SEEN, LIVE_STOPPED = "_mfm_live_seen", "_mfm_live_stopped"


def follow_live(shown: list[tuple[str, Run]]) -> None:
    """Follow the shown runs while any is being written: a "live" caption, and a check every
    :data:`LIVE_EVERY` seconds that reruns the page when a run's files or status changed
    (widgets and the URL keep their values; cached loading re-reads only what changed).
    A run that stopped while this session watched it gets a note of its status change."""
    seen = st.session_state.setdefault(LIVE_SEEN, {})
    stopped = st.session_state.setdefault(LIVE_STOPPED, {})
    now = {k: (r.status, len(r.records("index.jsonl"))) for k, r in shown}
    for k, old, new in status_changes({k: v[0] for k, v in seen.items() if k in now},
                                      {k: v[0] for k, v in now.items()}):
        stopped[k] = (old, new)
    for k, (status, episodes) in now.items():
        seen[k] = (status, seen[k][1] if k in seen else episodes)
        if k in stopped and status == "running":
            del stopped[k]
    for k, (old, new) in stopped.items():
        if k in now:
            st.info(f"{md_code(k)} stopped being written: {md(STATUS_LABELS.get(old, old))} → "
                    f"{md(STATUS_LABELS.get(new, new))}.",
                    icon=":material/flag:")
    running = {k: str(r.path) for k, r in shown if r.status == "running"}
    if not running:
        return
    caption = live_caption(stamp(), sum(now[k][1] - seen[k][1] for k in running), len(running))
    state = {k: watch_key(r) for k, r in shown if k in running}

    @st.fragment(run_every=LIVE_EVERY)
    def _watch() -> None:
        fresh = {k: watch_key(get_run(Path(p))) for k, p in running.items()}
        if needs_refresh(state, fresh):
            st.rerun()
        st.caption(f"{caption} · checked {stamp()}")

    _watch()


def root_notes() -> notes_mod.Notes:
    """The researcher's notes of this runs root (``loaders.notes``), read afresh; skipped lines
    are listed in a warning, a notes folder the dashboard refuses in an error."""
    try:
        got = notes_mod.read(root())
    except (notes_mod.NotesError, UnsafePath, OSError) as e:
        st.error(f"Notes cannot be read: {md(e, 300)}", icon="🚫")
        return notes_mod.Notes()
    if got.problems:
        with st.expander(f"⚠️ {len(got.problems)} line(s) of the notes file skipped"):
            st.warning("\n".join(f"- {md(p, 300)}" for p in got.problems[:50]))
    return got


def note_where(n: notes_mod.Note) -> str:
    """What a note points at, in words."""
    if n.target == "turn":
        return f"turn {n.turn}"
    if n.target == "step":
        return f"step {n.step} of life {n.life}"
    if n.target == "region":
        c0, c1, r0, r1 = n.region or (0, 9, 0, 9)
        return f"tiles {c0}–{c1 - 1} × {r0}–{r1 - 1} of the frame of step {n.step} (life {n.life})"
    return "the run"


def show_notes(found: Sequence[notes_mod.Note]) -> None:
    """The notes pointing into this view, each with its author, time and place, and a link to
    it on the Notes page."""
    for n in found:
        mark = "Bookmark" if n.kind == "bookmark" else "Note"
        st.info(f"**{mark}** by the researcher on {md(n.run, 80)}, {md(note_where(n))} · {md(n.author, 60)} · {md(n.time)}"
                + (f"\n\n{md(n.text, 2000)}" if n.text else ""), icon=":material/sticky_note_2:")


def note_form(form_key: str, run_key: str, target: str, label: str, **place: Any) -> None:
    """A collapsed form adding a note or a bookmark on ``label`` (``target`` and ``place`` as
    ``loaders.notes.add`` takes them), kept in ``<runs root>/.mfm/notes/``. The note is saved
    before the page runs again, so the page shows it at once."""
    said = f"{form_key}_said"

    def save() -> None:
        who = st.session_state.get(f"{form_key}_author") or notes_mod.author()
        try:
            n = notes_mod.add(root(), run=run_key, target=target, text=st.session_state.get(f"{form_key}_text") or "",
                              kind=st.session_state.get(f"{form_key}_kind") or "comment", by=who, **place)
        except (notes_mod.NotesError, UnsafePath, OSError) as e:
            st.session_state[said] = ("error", f"Not saved: {md(e, 300)}")
        else:
            st.session_state["_mfm_author"] = who
            st.session_state[said] = ("ok", f"Saved note {md(n.id)} in `.mfm/notes/notes.jsonl` of the runs root.")

    box = st.expander(f"Add a note or a bookmark on {label}", icon=":material/edit_note:", key=f"{form_key}_open",
                      on_change="rerun")
    if box.open:  # a lazy expander: the form is built once it is opened, not on every drawing of the page
        with box, st.form(form_key, clear_on_submit=True, border=False):
            st.radio("Kind", notes_mod.KINDS, horizontal=True, key=f"{form_key}_kind")
            st.text_area("Note", key=f"{form_key}_text", max_chars=notes_mod.MAX_TEXT,
                         placeholder="What you saw here (a bookmark may stay empty)")
            st.text_input("Author", value=st.session_state.get("_mfm_author") or notes_mod.author(),
                          key=f"{form_key}_author", max_chars=notes_mod.MAX_AUTHOR)
            st.form_submit_button("Save the note", icon=":material/save:", on_click=save)
    if said in st.session_state:
        how, text = st.session_state.pop(said)
        (st.success if how == "ok" else st.error)(text)
