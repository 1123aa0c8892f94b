"""Run-written text made safe for each kind of file it is exported into (issue 47).

Task names, method and ablation names, run keys, episode summaries and memory-write reasons
come from run files and are untrusted. Each export context has its own escaper:

- :func:`latex_text` for LaTeX cells and captions: prints the text literally (``\\input``
  shows as text), never opens a group, a math shift, a comment or an optional argument;
- :func:`latex_label` for ``\\label`` keys: only letters, digits, ``-``, ``:`` and ``.``;
- :func:`file_segment` for any file or folder name built from run data: exactly one safe
  path segment (no separator, no ``..``, no leading dot, no control character, bounded
  length, never empty), made unique among the names already ``taken``;
- :func:`csv_cell` / :func:`csv_frame` for CSV: a text cell that a spreadsheet would read
  as a formula gets a leading ``'`` (OWASP, "CSV Injection"); numbers stay numbers;
- :func:`md_text` for Markdown table cells and prose: no raw HTML (``& < >`` as entities),
  no link, image, code, emphasis or math, no table-cell break (``|``, line breaks);
  :func:`md_code` for an inline code span.
"""
from __future__ import annotations

import hashlib
import html
import re
import unicodedata
from typing import Any, MutableSet

import pandas as pd

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 and C1 control characters, DEL and the Unicode line and paragraph separators."""
_SURROGATES = re.compile("[\ud800-\udfff]")
"""Lone surrogates (JSON may hold ``"\\ud800"``), which no UTF-8 file can hold."""


def encodable(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, so it can be written as UTF-8."""
    return _SURROGATES.sub("\ufffd", text)


def one_line(text: object) -> str:
    """``text`` as a string with every control character (line breaks, tabs, NUL, terminal
    escapes) replaced by a space and each lone surrogate by U+FFFD."""
    return _CONTROLS.sub(" ", encodable(str(text)))


def _digest(text: str, n: int = 8) -> str:
    """The first ``n`` hex digits of the SHA-256 of ``text`` (a stable tag for a changed name)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


# ---------------------------------------------------------------- LaTeX

_LATEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#", "%": r"\%",
          "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
          ">": r"\textgreater{}", "|": r"\textbar{}", '"': r"{\fontencoding{T1}\selectfont\char34}",
          "'": r"\textquotesingle{}", "`": r"\textasciigrave{}", "[": "{[}", "]": "{]}", "*": "{*}",
          "±": r"$\pm$", "≈": r"$\approx$", "×": r"$\times$", "÷": r"$\div$", "–": "--", "—": "---",
          "…": r"\ldots{}", "§": r"\S{}", "¶": r"\P{}", "°": r"\textdegree{}", "‘": "`", "’": "'", "“": "``",
          "”": "''", "·": r"\textperiodcentered{}", "•": r"\textbullet{}", "€": r"\texteuro{}",
          "£": r"\pounds{}", "©": r"\copyright{}", "®": r"\textregistered{}", "™": r"\texttrademark{}",
          "¡": r"\textexclamdown{}", "¿": r"\textquestiondown{}", "ß": r"\ss{}", "æ": r"\ae{}", "Æ": r"\AE{}",
          "ø": r"\o{}", "Ø": r"\O{}", "å": r"\aa{}", "Å": r"\AA{}", "œ": r"\oe{}", "Œ": r"\OE{}", "ł": r"\l{}",
          "Ł": r"\L{}", "→": r"$\to$", "←": r"$\leftarrow$", "≤": r"$\leq$", "≥": r"$\geq$", "≠": r"$\neq$",
          "µ": r"$\mu$", "\u00a0": "~"}
"""Characters LaTeX would read as syntax (or typeset as another glyph: ``"`` is taken from
the T1 font, which has it, also in a document in the default OT1 encoding), and the
non-ASCII characters that have a command in the standard font encodings."""
_ACCENTS = {"\u0300": "`", "\u0301": "'", "\u0302": "^", "\u0303": "~", "\u0308": '"', "\u0327": "c",
            "\u030c": "v", "\u0306": "u", "\u030a": "r", "\u0304": "="}
"""Combining accents and the LaTeX accent command that puts each on a letter."""


def _latex_char(c: str) -> str:
    """One character as LaTeX that prints it."""
    if c in _LATEX:
        return _LATEX[c]
    if " " <= c <= "~":
        return c
    base, *marks = unicodedata.normalize("NFD", c)
    if len(marks) == 1 and marks[0] in _ACCENTS and " " <= base <= "~" and base.isalpha():
        base = {"i": r"\i", "j": r"\j"}.get(base, base)
        return rf"\{_ACCENTS[marks[0]]}{{{base}}}"
    return rf"\texttt{{[U+{ord(c):04X}]}}"


def latex_text(text: object) -> str:
    """LaTeX source that prints ``text`` literally in running text, a caption or a table
    cell. Control characters become spaces; ``--`` and ``,,`` are kept from forming a dash or
    a low quote; a character with no command in the standard font encodings is written as
    its code point, ``[U+1F600]``, so the document still compiles."""
    s = one_line(text)
    out = []
    for i, c in enumerate(s):
        out.append(_latex_char(c))
        if c in "-," and s[i + 1:i + 2] == c:
            out.append("{}")
    return "".join(out)


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9:.\-]+")


def latex_label(text: object, limit: int = 80) -> str:
    """A ``\\label``/``\\ref`` key made of letters, digits, ``-``, ``:`` and ``.`` only: each
    run of other characters becomes ``-``; a key that had to change (or be cut to ``limit``
    characters) ends in a digest of the original, so two different texts keep two keys."""
    s = str(text)
    safe = _LABEL_UNSAFE.sub("-", s).strip("-") or "label"
    if safe == s and len(s) <= limit:
        return s
    return f"{safe[:limit - 9].rstrip('-')}-{_digest(s)}"


# ---------------------------------------------------------------- file names

SEGMENT_BYTES = 120
"""The longest file-name segment built from run data, in UTF-8 bytes (file systems allow 255;
a prefix such as ``provenance_graph_`` and a suffix such as ``.json`` still fit)."""
_FILE_UNSAFE = re.compile(r"[^\w.+=@,-]")
"""Everything but letters, digits and ``. + = @ , -``: separators, control characters, spaces,
the characters Windows forbids, and those a shell or ``\\input`` would read as syntax."""
_RESERVED = re.compile(r"(?i)^(con|prn|aux|nul|com\d|lpt\d)(\..*)?$")
"""Names Windows keeps for devices, with or without an extension."""


def _cut(s: str, limit: int) -> str:
    """``s`` cut to at most ``limit`` UTF-8 bytes, never inside a character."""
    raw = s.encode("utf-8", "surrogatepass")
    return s if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def file_segment(name: object, taken: MutableSet[str] | None = None, limit: int = SEGMENT_BYTES) -> str:
    """``name`` as exactly one safe path segment: every character but letters, digits and
    ``. + = @ , - _`` becomes ``_`` (separators ``/`` and ``\\``, NUL and other control
    characters, spaces, quotes, ``{ } % # $ & ~``), as do runs of dots (never ``..``), a
    leading dot (never a hidden file) and a leading ``-`` (never read as an option);
    trailing dots go; never empty, never a Windows device name; at most ``limit`` UTF-8
    bytes (a cut name ends in a digest of the whole). With ``taken`` (names
    already used in the same folder, compared case-insensitively as macOS and Windows do), a
    name already there gets ``_2``, ``_3``, ...; the name returned is added to ``taken``."""
    original = str(name)
    s = _FILE_UNSAFE.sub("_", _SURROGATES.sub("_", original)).rstrip(".")
    s = re.sub(r"^[.\-]+|\.{2,}", lambda m: "_" * len(m.group(0)), s) or "_"
    if _RESERVED.match(s):
        s = "_" + s
    if len(s.encode("utf-8", "surrogatepass")) > limit:
        s = _cut(s, limit - 9) + "-" + _digest(original)
    if taken is None:
        return s
    unique, n = s, 2
    while unique.casefold() in {t.casefold() for t in taken}:
        tail = f"_{n}"
        unique, n = _cut(s, limit - len(tail)) + tail, n + 1
    taken.add(unique)
    return unique


# ---------------------------------------------------------------- CSV

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""The first characters that make a spreadsheet read a cell as a formula (OWASP)."""
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a text starting with ``= + - @``, a tab or a
    carriage return gets a leading ``'``. Numbers (also a number written as text, such as
    ``-3.5``), the lone placeholder ``-`` and non-text values are kept as they are. NUL
    (which many CSV readers stop at) and lone surrogates become U+FFFD."""
    if not isinstance(value, str):
        return value
    value = encodable(value).replace("\x00", "\ufffd")
    if value.startswith(FORMULA_START) and value != "-" and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with :func:`csv_cell` applied to every text cell and column name (numeric
    columns untouched)."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c]):
            out[c] = out[c].map(csv_cell)
    out.columns = [csv_cell(c) if isinstance(c, str) else c for c in out.columns]
    return out


# ---------------------------------------------------------------- Markdown

_MD_MARKS = re.compile(r"([\\`*_\[\]|~$])")


def md_text(text: object) -> str:
    """Markdown (and HTML) that shows ``text`` literally on one line, also inside a table
    cell: ``& < >`` as entities (no raw HTML, no autolink), the marks of code, emphasis,
    links, images, strikethrough, math and cell borders backslash-escaped, control
    characters and line breaks as spaces."""
    return _MD_MARKS.sub(r"\\\1", html.escape(one_line(text), quote=False))


def md_code(text: object) -> str:
    """``text`` as an inline code span on one line, fenced with more backticks than it holds
    (nothing inside is interpreted)."""
    s = one_line(text)
    fence = "`" * (max(map(len, re.findall(r"`+", s)), default=0) + 1)
    return f"{fence}{s}{fence}" if fence == "`" else f"{fence} {s} {fence}"
