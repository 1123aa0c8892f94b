"""Hostile run content and hostile URLs in the dashboard (issue 19, findings 9 and 10).

A run's summaries, notes, events, tags, task, policy and agent-written memory are untrusted:
Markdown images in them must never make the viewer's browser fetch anything, anywhere
Streamlit renders Markdown. URL parameters are untrusted too: too long, ``..``, absolute,
NUL bytes or a run outside the root give a short message, never a traceback or a server path.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from streamlit.testing.v1 import AppTest

from conftest import REPO, open_app, use_root
from dash_browser import ARGS, CHROMIUM, dashboard, free_port, needs_browser, settle, url
from dashboard.safe_text import clip, md, md_code, md_document, relative_paths
from loaders import provenance as pv
from loaders.run import open_run

PLANT = f"127.0.0.1:{free_port()}"
"""Where the planted images point: loopback, a port nothing listens on."""
BASE = f"http://{PLANT}"
RUN, PLAIN = "diamond_mfm_s2", "plain_s2"
EPISODE = "ep_000005"


def img(name: str) -> str:
    return f"![{name}]({BASE}/{name}.png)"


DOC = (f"# Knowledge\n\n- inline {img('doc_inline')}\n- reference ![ref][r]\n"
       f"- nested [![inner]({BASE}/doc_nested.png)]({BASE}/doc_outer)\n"
       f"- html <img src=\"{BASE}/doc_html.png\">\n- escaped backslash \\\\{img('doc_backslash')}\n"
       f"- a plain link [to the site]({BASE}/doc_link)\n\n[r]: {BASE}/doc_ref.png\n")
"""The agent's GUIDE.md: inline, reference, nested and HTML images, and one after an escaped backslash."""


def _rewrite_jsonl(path: Path, change) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(change(r)) + "\n" for r in rows))


def make_hostile_root(base: Path) -> Path:
    """Two copies of ``sample_runs/diamond_mfm_s2``: one whose run-written text is full of
    Markdown images pointing at :data:`PLANT`, one left as it is (a second task for the Runs page)."""
    root = base / "runs"
    src = REPO / "sample_runs" / RUN
    shutil.copytree(src, root / RUN)
    shutil.copytree(src, root / PLAIN)
    run = root / RUN
    manifest = json.loads((run / "run.json").read_text())
    manifest["task"] = img("task")
    (run / "run.json").write_text(json.dumps(manifest))

    def episode(r: dict[str, Any]) -> dict[str, Any]:
        if r["kind"] == "episode":
            r.update(summary=f"{img('summary')} and ![ref][s]\n\n[s]: {BASE}/summary_ref.png",
                     note=f"[![n]({BASE}/note_nested.png)]({BASE}/note) <img src={BASE}/note_html.png>",
                     events=[*r["events"], img("event")], tags=[*r["tags"], img("tag")])
        return r

    _rewrite_jsonl(run / "index.jsonl", episode)
    with open(run / "index.jsonl", "a") as f:
        f.write(json.dumps({"id": img("problem"), "summary": img("problem_summary")}) + "\n")
    _rewrite_jsonl(run / "turns.jsonl", lambda t: {**t, "policy": img("policy")})
    writes = [json.loads(line) for line in (run / "memory_writes.jsonl").read_text().splitlines()]
    last = writes[-1]
    writes.append({**{k: last[k] for k in ("turn", "step", "life", "time")}, "seq": last["seq"] + 1,
                   "path": "mine/GUIDE.md", "op": "edit", "author": img("author"), "reason": img("reason"),
                   "sources": [EPISODE], "sha256": hashlib.sha256(DOC.encode()).hexdigest(), "snapshot": DOC})
    (run / "memory_writes.jsonl").write_text("".join(json.dumps(w) + "\n" for w in writes))
    (run / "mine" / "GUIDE.md").write_text(DOC)
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hostile_root(tmp_path_factory.mktemp("hostile"))


# ---------------------------------------------------------------- the helper

UNESCAPED_IMAGE = re.compile(r"(?<!\\)(?:\\\\)*!\[")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)


def renders_image(markdown: str, html: bool = True) -> bool:
    """Whether Markdown holds an image that CommonMark would render, or with ``html`` (raw
    HTML allowed) an ``<img>`` tag; code spans, whose content is never interpreted, left out."""
    text = CODE_SPAN.sub("", markdown)
    return bool(UNESCAPED_IMAGE.search(text) or html and re.search(r"(?<!\\)<img", text, re.I))


def unescape(markdown: str) -> str:
    """What CommonMark shows for text made only of backslash escapes and plain characters,
    without the invisible word joiners that keep bare URLs and e-mail addresses from linking."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


@pytest.mark.parametrize("text", [
    img("a"),
    "![a][r]\n[r]: http://127.0.0.1:9/r.png",
    "[![a](http://127.0.0.1:9/u.png)](http://127.0.0.1:9/v)",
    "<img src=http://127.0.0.1:9/h.png> &lt;img&gt;",
    "\\![a](u) \\\\![b](u) `![c](u)` *em* _u_ # h | t ~s~ $x$ :red[r] :material/home:",
    "- list\n12. ordered\n> quote",
], ids=["inline-image", "reference-image", "linked-image", "html-image", "escapes-and-inline-markup", "blocks"])
def test_md_shows_text_literally(text: str) -> None:
    out = md(text)
    assert not renders_image(out) and "\n" not in out
    assert unescape(out) == clip(text)
    code = md_code(text)
    assert CODE_SPAN.fullmatch(code) and code.strip("`")[1:-1] == clip(text)


def test_md_keeps_ids_and_keys_as_they_are() -> None:
    for text in ("ep_000012", "ablations/crafter_mfm_s1", "collect(material=tree, x=29, y=34) -> done: 2026-01-01"):
        assert md(text) == text
    assert md("x" * 500, 10) == "x" * 9 + "…" and md("a\x00b\nc") == "a b c"


def test_md_document_keeps_markdown_but_no_image() -> None:
    out = md_document(DOC)
    assert not renders_image(out, html=False)
    assert "# Knowledge" in out and f"[to the site]({BASE}/doc_link)" in out and f"[r]: {BASE}/doc_ref.png" in out
    assert out.count("\\![") == 4 and "\\\\\\![doc_backslash]" in out
    assert md_document(out) == md_document(md_document(out))


def test_relative_paths_hide_the_root() -> None:
    base = Path("/srv/runs")
    text = "/srv/runs/a/ep.png: missing; /srv/runs2/x; outside /srv/runs."
    assert relative_paths(text, base) == "a/ep.png: missing; /srv/runs2/x; outside the runs root."


# ---------------------------------------------------------------- the pages (AppTest)

PLAIN_TYPES = {"plotly_chart", "arrow_data_frame", "json", "code", "text", "arrow_vega_lite_chart", "vega_lite_chart",
               "imgs", "bidi_component"}
"""Elements that show text without Markdown (image captions are checked apart; a component
only while its script writes no HTML: :data:`HTML_WRITES`)."""
HTML_WRITES = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "createContextualFragment")
"""What a component's script would use to turn the text of its data into HTML."""
OPTION_FIELDS = {"options", "default", "value", "raw_value", "raw_values", "values", "set_value"}


def _strings(msg: Any, skip: set[str]) -> Iterator[str]:
    for field, value in msg.ListFields():
        if field.name in skip:
            continue
        single = isinstance(value, (str, bytes, int, float)) or hasattr(value, "ListFields")
        values = [value] if single else list(value)
        for v in values:
            if isinstance(v, str):
                yield v
            elif hasattr(v, "ListFields"):
                yield from _strings(v, skip)


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in getattr(node, "children", {}).values():
        yield from _nodes(child)


def rendered_images(at: AppTest) -> list[str]:
    """The strings of the page that Streamlit renders as Markdown (bodies, labels, tooltips,
    captions, radio and select-slider options; selectbox and multiselect options are plain)
    and that would show an image."""
    out = []
    for block in (at.main, at.sidebar):
        for node in _nodes(block):
            proto, kind = getattr(node, "proto", None), getattr(node, "type", "")
            if kind == "bidi_component":
                assert not [w for w in HTML_WRITES if w in proto.js_content], proto.component_name
            if proto is None or kind in PLAIN_TYPES - {"imgs"}:
                continue
            texts = [i.caption for i in proto.imgs] if kind == "imgs" else \
                _strings(proto, set() if kind in ("radio", "select_slider") else OPTION_FIELDS)
            html = kind == "markdown" and proto.allow_html
            out += [s for s in texts if renders_image(s, html)]
    return out


def all_texts(at: AppTest) -> list[str]:
    """Every string of every element, Markdown or not."""
    return [s for block in (at.main, at.sidebar) for n in _nodes(block) if getattr(n, "proto", None) is not None
            for s in _strings(n.proto, set())]


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch, root: Path) -> Path:
    use_root(monkeypatch, root)
    return root


def _node_with_image(root: Path) -> str:
    graph = pv.build_graph(open_run(root / RUN))
    return next(n.id for n in graph.nodes if PLANT in n.label and n.kind != "episode")


@pytest.mark.parametrize("page,params", [
    (None, {}),
    (None, {"runs": f"{RUN},{PLAIN}"}),
    ("timeline", {"runs": RUN, "ep": EPISODE, "step": "20"}),
    ("timeline", {"runs": RUN, "ep": img("qp_ep")}),
    ("memory", {"runs": RUN, "file": "mine/GUIDE.md"}),
    ("memory", {"runs": RUN, "file": img("qp_file")}),
    ("provenance", {"runs": RUN}),
    ("provenance", {"runs": RUN, "node": EPISODE}),
    ("provenance", {"runs": RUN, "node": img("qp_node")}),
    ("grid", {"runs": RUN, "cell": "29,33"}),
    ("frames", {"runs": RUN, "frames": f"{RUN}:{EPISODE},{RUN}:20"}),
    ("retargeting", {"runs": RUN}),
    ("progress", {"runs": f"{RUN},{PLAIN}"}),
    ("steps_per_turn", {"runs": f"{RUN},{PLAIN}"}),
    ("timeline", {"runs": f"{RUN},{img('qp_runs')}", "run": img("qp_run")}),
])
def test_pages_render_no_planted_image(hostile: Path, page: str | None, params: dict[str, str]) -> None:
    at = open_app(page, **params)
    assert any(PLANT in s for s in all_texts(at)), "the hostile text is not on the page at all"
    assert not rendered_images(at)


def test_timeline_shows_the_hostile_text_as_written(hostile: Path) -> None:
    at = open_app("timeline", runs=RUN, ep=EPISODE)
    row = open_run(hostile / RUN).episode(EPISODE)
    shown = {m.value.split(" ", 1)[0]: m.value.split(" ", 1)[1] for m in at.markdown
             if m.value.startswith(("**Summary.**", "**Note.**"))}
    assert unescape(shown["**Summary.**"]) == clip(row.summary) and unescape(shown["**Note.**"]) == row.note
    assert any(m.value.startswith("**Events.**") and f"- {img('event')}" in unescape(m.value) for m in at.markdown)


def test_memory_page_renders_the_guide_without_images(hostile: Path) -> None:
    at = open_app("memory", runs=RUN, file="mine/GUIDE.md")
    guide = [m for m in at.markdown if "# Knowledge" in m.value and PLANT in m.value]
    assert guide and not guide[0].allow_html and not renders_image(guide[0].value, html=False)
    assert f"[to the site]({BASE}/doc_link)" in guide[0].value


def test_provenance_node_with_an_image_in_its_label(hostile: Path) -> None:
    at = open_app("provenance", runs=RUN, node=_node_with_image(hostile))
    assert at.subheader and not rendered_images(at)


# ---------------------------------------------------------------- hostile URL parameters

LONG = "a" * 100_000


@pytest.mark.parametrize("params", [
    {"runs": LONG},
    {"runs": "b" * 5_000},
    {"runs": f"{'c' * 300}/{RUN}"},
    {"runs": "../../etc,../" + RUN},
    {"runs": "ROOT/" + RUN},
    {"runs": "/etc/passwd"},
    {"runs": f"{RUN}\x00../../etc"},
    {"runs": RUN, "run": "../../etc"},
    {"runs": RUN, "run": "ROOT"},
    {"runs": RUN, "ep": LONG},
    {"runs": RUN, "x" * 1000: "1"},
    {"runs": RUN, "frames": f"ROOT/{RUN}:3,../{RUN}:4"},
])
@pytest.mark.parametrize("page", [None, "timeline", "frames", "memory"])
def test_hostile_url_parameters_get_a_short_message(hostile: Path, page: str | None, params: dict[str, str]) -> None:
    absolute = str(hostile.resolve())
    at = open_app(page, **{k: v.replace("ROOT", absolute) for k, v in params.items()})
    messages = [e.value for e in (*at.error, *at.warning, *at.info)]
    assert messages and all(len(m) < 400 for m in messages), messages
    assert not [s for s in all_texts(at) if absolute in s]
    assert not rendered_images(at)


def test_too_long_parameters_and_keys_are_named_shortly(hostile: Path) -> None:
    at = open_app(runs=LONG)
    assert [w.value for w in at.warning if "URL" in w.value] == [
        "URL parameter ` runs ` is 100,000 characters long (at most 8,000): ignored."]
    assert "runs" not in at.query_params
    at = open_app(runs=f"{'c' * 300}/{RUN}")
    assert [e.value for e in at.error] == ["Refused run path: '" + "c" * 59 + "…' is too long for a run folder "
                                           "(315 characters). Runs are named by their folder relative to the runs root."]
    at = open_app("timeline", runs=f"{hostile.resolve()}/{RUN}")
    assert any("an absolute path" in e.value for e in at.error)


# ---------------------------------------------------------------- a real browser

@pytest.fixture(scope="module")
def server(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dashboard(root, tmp_path_factory.mktemp("log")) as base:
        yield base


@needs_browser
@pytest.mark.browser
@pytest.mark.slow
def test_browser_fetches_nothing_planted(server: str, root: Path) -> None:
    from playwright.sync_api import sync_playwright

    asked: list[str] = []
    pages = [("", {"runs": f"{RUN},{PLAIN}"}), ("", {}),
             ("timeline", {"runs": RUN, "ep": EPISODE, "step": "20"}),
             ("timeline", {"runs": RUN, "ep": img("qp_ep")}),
             ("memory", {"runs": RUN, "file": "mine/GUIDE.md"}),
             ("provenance", {"runs": RUN, "node": _node_with_image(root)}),
             ("retargeting", {"runs": RUN})]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 2400}).new_page()
            page.on("request", lambda r: asked.append(r.url))
            for path, params in pages:
                page.goto(url(server, path, **params))
                settle(page)
                assert page.locator('[data-testid="stException"]').count() == 0
                time.sleep(1.0)
            page.goto(url(server, "timeline", runs=RUN, ep=EPISODE, step="20"))
            settle(page)
            shown = "\u2060?".join(map(re.escape, f"{img('summary')} and"))  # word joiners keep URLs text
            page.get_by_text(re.compile(shown)).first.wait_for(state="visible")
            for runs, says in (("a" * 20_000, "20,000 characters long"), (f"{'c' * 300}/{RUN}", "too long for a run folder"),
                               (f"{root.resolve()}/{RUN}", "an absolute path")):
                page.goto(url(server, "timeline", runs=runs))
                settle(page)
                page.get_by_text(says, exact=False).first.wait_for(state="visible")
                body = page.inner_text("body")
                assert str(root.resolve()) not in body and "Traceback" not in body
        finally:
            browser.close()
    assert asked and not [u for u in asked if PLANT in u], [u for u in asked if PLANT in u]
