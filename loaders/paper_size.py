"""Print sizes of the paper figures and tables, in one place.

Lengths are kept in PostScript points (``bp``, 1/72 in), the unit of a PDF page: a figure
``W`` bp wide is a PDF page ``W`` pts wide, which ``\\includegraphics`` places at ``W`` bp
without scaling. LaTeX's own ``pt`` is 1/72.27 in (``\\the\\columnwidth`` prints it), so
``--width 241pt`` means 241 TeX points, 240.17 bp.

Named widths (:data:`WIDTHS`): ``single``, one column of a two-column page (3.45 in: a 7 in
text block with a 0.1 in gap); ``double``, that page's whole 7 in text block; ``text``, the
5.5 in text block of a one-column page. Figures come out at exactly the width asked; the
LaTeX tables of :mod:`loaders.paper_tables` are laid out to fit the same widths.
"""
from __future__ import annotations

import math
import re

BP_PER_IN = 72.0
TEX_PT_PER_IN = 72.27

WIDTHS = {"single": 3.45 * BP_PER_IN, "double": 7.0 * BP_PER_IN, "text": 5.5 * BP_PER_IN}
"""Named print widths in bp: one column of a two-column page (3.45 in = 248.4 bp), that
page's text block (7 in = 504 bp), a one-column page's text block (5.5 in = 396 bp)."""

UNITS = {"bp": 1.0, "pt": BP_PER_IN / TEX_PT_PER_IN, "in": BP_PER_IN, "cm": BP_PER_IN / 2.54,
         "mm": BP_PER_IN / 25.4}
"""Length units accepted in a width or height, as bp per unit (``pt``: TeX points)."""

_LENGTH = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$")

MIN_WIDTH_BP = 1.5 * BP_PER_IN
MAX_WIDTH_BP = 20 * BP_PER_IN
"""The narrowest and widest figure drawn (1.5 in, 20 in): narrower leaves no room for a plot."""


def parse_length(text: str | float | int, what: str = "width") -> float:
    """A length as bp: a number with a unit (``3.3in``, ``241pt``, ``8.5cm``, ``240bp``); a
    bare number is refused (TeX points or PDF points? say which). Raises ``ValueError``
    naming the text and what is accepted."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _LENGTH.match(str(text).lower())
        if not m or m.group(2) not in UNITS:
            raise ValueError(f"{what} {text!r}: give a number and a unit ({', '.join(UNITS)}; pt is TeX's "
                             f"1/72.27 in, bp 1/72 in), e.g. 3.3in or 241pt"
                             + (f", or one of {', '.join(WIDTHS)}" if what == "width" else ""))
        value = float(m.group(1)) * UNITS[m.group(2)]
    if not math.isfinite(value) or not MIN_WIDTH_BP / 2 <= value <= MAX_WIDTH_BP:
        raise ValueError(f"{what} {text!r}: {value:.1f} bp is outside {MIN_WIDTH_BP / 2:.0f}-{MAX_WIDTH_BP:.0f} bp")
    return value


def width_bp(width: str | float) -> float:
    """A width given by name (:data:`WIDTHS`) or as a length (:func:`parse_length`), in bp."""
    if isinstance(width, str) and width in WIDTHS:
        return WIDTHS[width]
    value = parse_length(width, "width")
    if value < MIN_WIDTH_BP:
        raise ValueError(f"width {width!r}: {value:.1f} bp is narrower than {MIN_WIDTH_BP:.0f} bp (1.5 in), "
                         "too narrow for a plot with its axes")
    return value


def tex_pt(bp: float) -> float:
    """A length in bp as TeX points."""
    return bp * TEX_PT_PER_IN / BP_PER_IN


def is_column(width: str | float) -> bool:
    """Whether a width is a column's (fits a two-column page's column): ``single`` or any
    length up to it (with 1 bp to spare)."""
    return width_bp(width) <= WIDTHS["single"] + 1
