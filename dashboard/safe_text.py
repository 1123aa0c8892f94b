"""Untrusted text made safe for the elements where Streamlit renders Markdown.

Run files (summaries, notes, events, tags, task names, memory files, problem messages) and
URL parameters are untrusted. Streamlit renders Markdown in ``st.markdown``, captions, alerts,
titles, expander and tab labels, widget labels and tooltips, radio and select-slider options,
image captions and page links, and a Markdown image there makes the viewer's browser fetch
its URL. Its renderer (GitHub-flavoured Markdown) also turns bare URLs (``http://…``,
``https://…``, ``www.…``) and e-mail addresses into links, and it does so on the text left after
backslash escapes are read, so escaping cannot stop it: :func:`md` puts an invisible word
joiner (U+2060) inside each, which no autolink matches across. Text shown as text goes
through :func:`md` (or :func:`md_code`); a Markdown document written by the agent that is meant
to render goes through :func:`md_document`. Selectbox and multiselect options, tables, code
blocks, JSON and charts show plain text and need neither.
"""
from __future__ import annotations

import re
from pathlib import Path

_SYNTAX = re.compile(r"([\\`*\[\]<!~$&]|:(?=//))")
_MARKER = re.compile(r"^\s*(?=[-+>#])|^\s*\d+(?=[.)])")
_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")
_IMAGE = re.compile(r"(?<!\\)((?:\\\\)*)!(?=\[)")
_TICKS = re.compile(r"`+")
_AUTOLINK = re.compile(r"(?<=[A-Za-z0-9])(?=://)|(?i:(?<=www))(?=\.)|(?<=@)(?=[\w.+-])")
JOINER = "\u2060"
"""WORD JOINER: invisible, does not break the line; put where a URL or e-mail autolink would start."""


def clip(text: object, limit: int | None = None) -> str:
    """``text`` on one line (control characters and line breaks as spaces), cut to ``limit``
    characters with an ellipsis."""
    s = _BREAKS.sub(" ", str(text))
    return s if limit is None or len(s) <= limit else s[:max(0, limit - 1)] + "…"


def md(text: object, limit: int | None = None) -> str:
    """Markdown that shows ``text`` literally on one line, cut to ``limit`` characters. The
    marks that open images, links, HTML, code, emphasis, math and Streamlit directives are
    backslash-escaped, and so is a leading list, quote or heading mark; bare URLs and e-mail
    addresses get a :data:`JOINER` (before ``://``, after ``www``, after ``@``) so that they
    stay text. Other marks (``_ . - : ( ) >`` ...) are kept, as run keys, ids and summaries
    are full of them: alone they build none of these (at most ``_a_`` shows in italics)."""
    text = _AUTOLINK.sub(JOINER, clip(text, limit))
    return _MARKER.sub(lambda m: m.group(0) + "\\", _SYNTAX.sub(r"\\\1", text), count=1)


def md_code(text: object, limit: int | None = None) -> str:
    """``text`` as an inline code span (nothing inside is interpreted), fenced with more
    backticks than it holds."""
    s = clip(text, limit)
    fence = "`" * (max(map(len, _TICKS.findall(s)), default=0) + 1)
    return f"{fence} {s} {fence}"


def md_document(text: str) -> str:
    """An agent-written Markdown document with its images made inert: each unescaped ``![``
    gets its ``!`` escaped, so inline, reference and nested images become plain links (raw
    HTML stays off: render with ``unsafe_allow_html=False``)."""
    return _IMAGE.sub(r"\1\\!", text)


def relative_paths(text: str, root: Path) -> str:
    """``text`` with absolute paths under ``root`` written relative to it and ``root`` itself
    as "the runs root", so no server path outside the runs root is shown."""
    base = str(root)
    if base in ("", "/"):
        return text
    return re.sub(re.escape(base) + r"(/|(?![\w~-]|\.\w))", lambda m: "" if m.group(1) else "the runs root", text)
