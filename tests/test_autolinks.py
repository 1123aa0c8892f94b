"""Bare URLs and e-mail addresses in run text stay text in the dashboard (issue 47).

Streamlit renders Markdown with GitHub-flavoured autolinks: besides ``<http://…>`` it links
bare ``http://…``, ``https://…``, ``www.…`` and e-mail addresses, and it looks for them in the
text *after* backslash escapes are read (``mdast-util-gfm-autolink-literal`` runs over the
syntax tree's text), so ``http\\://`` still became a link. :func:`gfm_autolinks` follows that
step's rules; the pages' Markdown is checked with it, as Streamlit's AppTest gives it.
"""
from __future__ import annotations

import json
import re
import shutil
import unicodedata
from pathlib import Path

import pytest

from conftest import REPO, open_app, use_root
from dashboard.safe_text import JOINER, md

RUN = "diamond_mfm_s2"
EPISODE = "ep_000005"
TEXT = ("see http://127.0.0.1:9/help, https://example.org/a?b=1 and www.example.com; "
        "write to bob.smith+crafter@example.co.uk (or mailto:eve@example.org)")

_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.I | re.A)
_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)", re.A)


def _after_boundary(text: str, index: int, email: bool = False) -> bool:
    """An autolink may start at ``index``: at the start, or after white space or punctuation
    (not after ``/`` for an e-mail)."""
    if index == 0:
        return True
    before = text[index - 1]
    if email and before == "/":
        return False
    return before.isspace() or unicodedata.category(before)[0] in "PS"


def _domain_ok(domain: str) -> bool:
    parts = domain.split(".")
    return len(parts) >= 2 and not any(p and ("_" in p or not re.search(r"[A-Za-z0-9]", p)) for p in parts[-2:])


def gfm_autolinks(markdown: str) -> list[str]:
    """The bare URLs and e-mail addresses GFM's renderer would link in ``markdown``: its text
    with code spans left out and backslash escapes read, searched as the autolink step does."""
    text = _ESCAPE.sub(r"\1", _CODE_SPAN.sub(" ", markdown))
    found = [m.group(0) for m in _URL.finditer(text) if _after_boundary(text, m.start())
             and _domain_ok(m.group(2) if m.group(1).lower().startswith("http") else "www" + m.group(2))]
    for m in _EMAIL.finditer(text):
        start = m.start()
        while start < m.end() and not _after_boundary(text, start, email=True) and text[start] in "-.+_":
            start += 1
        if _after_boundary(text, start, email=True) and not m.group(2).endswith(("-", "_")):
            found.append(m.group(0))
    return found


def test_the_check_finds_what_gfm_links() -> None:
    """Without the joiners the check sees every link (so the tests below can fail)."""
    escaped_only = md(TEXT).replace(JOINER, "")
    assert len(gfm_autolinks(escaped_only)) == 5
    assert gfm_autolinks("a_b@example.com") == ["a_b@example.com"]
    assert gfm_autolinks("`http://x.org` and path/bob@example.com") == []


@pytest.mark.parametrize("text", [
    TEXT, "http://x.org", "HTTPS://X.ORG/a", "WWW.X.ORG", "a@b.cd", "<bob@example.com>", "[x](http://x.org)",
    "(www.x.org)", "*http://x.org*", "ftp://x.org and file:///etc/passwd",
])
def test_md_links_no_bare_url_or_e_mail(text: str) -> None:
    out = md(text)
    assert gfm_autolinks(out) == []
    assert _ESCAPE.sub(r"\1", out).replace(JOINER, "") == text


def test_md_leaves_ordinary_text_alone() -> None:
    for text in ("ep_000012", "collect(material=tree, x=29, y=34) -> done: 2026-01-01", "a.b.c", "10:30 / 2"):
        assert md(text) == text


@pytest.fixture
def linked_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the sample run whose episode summaries, notes, events and tags hold :data:`TEXT`."""
    shutil.copytree(REPO / "sample_runs" / RUN, tmp_path / RUN)
    index = tmp_path / RUN / "index.jsonl"
    rows = [json.loads(line) for line in index.read_text().splitlines() if line.strip()]
    for r in rows:
        if r.get("kind") == "episode":
            r.update(summary=TEXT, note=TEXT, events=[*r["events"], TEXT], tags=[*r["tags"], "www.example.com"])
    index.write_text("".join(json.dumps(r) + "\n" for r in rows))
    use_root(monkeypatch, tmp_path)
    return tmp_path


def test_timeline_shows_urls_and_e_mails_as_text(linked_root: Path) -> None:
    at = open_app("timeline", runs=RUN, ep=EPISODE)
    texts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    shown = [t for t in texts if "example" in _ESCAPE.sub(r"\1", t).replace(JOINER, "")]
    assert any(TEXT in _ESCAPE.sub(r"\1", t).replace(JOINER, "") for t in shown)
    assert {t: gfm_autolinks(t) for t in shown if gfm_autolinks(t)} == {}
