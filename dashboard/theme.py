"""One palette for every page: methods, cell kinds, action kinds, outcomes, marks, lives, vitals.

Colours are stable: the same method, cell kind or action kind has the same colour on every
page and in every run. Names not listed get a colour from a fixed hash of the name.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

QUALITATIVE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
               "#9c755f", "#bab0ac", "#17becf", "#bcbd22")
"""Tableau-10 plus two: the fallback palette for names without a fixed colour."""

METHOD_COLORS = {
    "mfm": "#009E73", "vista": "#D55E00", "pro-long": "#0072B2", "prolong": "#0072B2", "direct": "#CC79A7",
    "random": "#7f7f7f", "scripted": "#E69F00", "ical": "#56B4E9", "passive": "#000000",
}
"""Methods in the Okabe–Ito palette (Okabe & Ito 2008, "Color Universal Design"), which stays
distinguishable under the common colour-vision deficiencies."""

METHOD_DASHES = {"mfm": "solid", "vista": "dash", "pro-long": "dot", "prolong": "dot", "direct": "dashdot",
                 "random": "longdash", "scripted": "longdashdot", "ical": "solid", "passive": "dash"}
METHOD_MARKERS = {"mfm": "circle", "vista": "square", "pro-long": "diamond", "prolong": "diamond",
                  "direct": "triangle-up", "random": "x", "scripted": "cross", "ical": "circle", "passive": "square"}
DASH_ARRAYS = {"solid": [], "dash": [6, 3], "dot": [1.5, 2], "dashdot": [6, 2, 1.5, 2], "longdash": [10, 3],
               "longdashdot": [10, 2, 1.5, 2]}
"""Plotly's dash names as Vega-Lite stroke dash arrays (points), for the printed figures."""
VEGA_SHAPES = {"circle": "circle", "square": "square", "diamond": "diamond", "triangle-up": "triangle-up",
               "x": "cross", "cross": "cross"}
"""Plotly's marker symbols as Vega-Lite point shapes."""


@dataclass(frozen=True)
class MethodStyle:
    """How a method is drawn everywhere: colour, line dash and marker (Plotly names)."""

    color: str
    dash: str
    marker: str

    @property
    def dash_array(self) -> list[float]:
        """The dash as a Vega-Lite stroke dash array."""
        return DASH_ARRAYS[self.dash]

    @property
    def shape(self) -> str:
        """The marker as a Vega-Lite point shape."""
        return VEGA_SHAPES[self.marker]


def method_style(method: str | None) -> MethodStyle:
    """The style of a method (``mfm``, or with ablations ``mfm no-frames``): its base
    method's colour; an ablation keeps the colour and takes another dash and marker."""
    name = (method or "unknown").lower()
    base, _, ablation = name.partition(" ")
    color = METHOD_COLORS.get(base) or _hashed(base)
    if not ablation and base in METHOD_DASHES:
        return MethodStyle(color, METHOD_DASHES[base], METHOD_MARKERS[base])
    dashes, markers = list(DASH_ARRAYS), list(VEGA_SHAPES)
    h = zlib.crc32(name.encode("utf-8"))
    return MethodStyle(color, dashes[1 + h % (len(dashes) - 1)] if ablation else dashes[h % len(dashes)],
                       markers[h % len(markers)])


CELL_KIND_COLORS = {
    "walked": "#c7ccd6", "placed": "#8c564b", "opened": "#f2b01e", "blocked": "#3b3b3b", "hazard": "#d62728",
    "water": "#1f77b4",
}

ACTION_KIND_COLORS = {
    "initial": "#bab0ac", "episode": "#9c9c9c", "go_to": "#4e79a7", "explore": "#76b7b2", "move": "#76b7b2",
    "collect": "#59a14f", "do": "#59a14f", "place": "#9c755f", "craft": "#b07aa1", "make": "#b07aa1",
    "eat": "#f28e2b", "drink": "#17becf", "sleep": "#edc948", "fight": "#e15759", "flee": "#ff9da7",
    "noop": "#dddddd", "procedure": "#bcbd22", "attack": "#e15759", "shelter": "#bcbd22", "look_at": "#2f4b7c",
    "face": "#a0cbe8",
}

PROCEDURE_PALETTE = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#31a354", "#756bb1")
"""Dark tones for stored procedures (agent-named action kinds), apart from the atoms' colours."""

OUTCOME_COLORS = {"done": "#2ca02c", "failed": "#d62728", "interrupted": "#ff7f0e", "none": "#bbbbbb"}

MARK_STYLES = {
    "milestone": {"symbol": "star", "color": "#d4a000", "size": 15, "name": "milestone"},
    "death": {"symbol": "x", "color": "#111111", "size": 13, "name": "death"},
    "search": {"symbol": "triangle-down", "color": "#7b3fb0", "size": 9, "name": "index search"},
    "inspect": {"symbol": "diamond", "color": "#00a3a3", "size": 10, "name": "frame inspection"},
    "memory_write": {"symbol": "square", "color": "#c2185b", "size": 7, "name": "memory write"},
    "model_ok": {"symbol": "circle", "color": "#2ca02c", "size": 7, "name": "model requests ok"},
    "model_retried": {"symbol": "circle", "color": "#ff7f0e", "size": 8, "name": "model requests retried"},
    "model_failed": {"symbol": "circle-x", "color": "#d62728", "size": 10, "name": "model requests failed"},
}

RETARGET_COLORS = {"retarget | inspect": "#1b9e77", "retarget | other": "#a6d8c9", "near": "#d95f02",
                   "null": "#bbbbbb"}
"""The A.4 rates (``loaders.chart_data.RETARGET_MEASURES``), on screen and in print."""

PROVENANCE_KINDS = {"knowledge": ("knowledge lines", "#1b9e77"), "procedure": ("procedure versions", "#d95f02"),
                    "plan": ("plan versions", "#7570b3"), "file": ("other files", "#999999")}
"""Memory kinds of the provenance summary: their legend label and colour."""

VITAL_COLORS = {"health": "#d62728", "food": "#ff7f0e", "drink": "#1f77b4", "energy": "#2ca02c"}

STATUS_LABELS = {"running": "● running", "finished": "✓ finished", "interrupted": "‖ interrupted",
                 "crashed": "✗ crashed", "unknown": "? unknown"}


def _hashed(name: str) -> str:
    return QUALITATIVE[zlib.crc32(name.encode("utf-8")) % len(QUALITATIVE)]


def method_color(method: str | None) -> str:
    """The colour of a method (agent configuration) on every page and in every figure."""
    return method_style(method).color


def cell_kind_color(kind: str) -> str:
    return CELL_KIND_COLORS.get(kind) or _hashed(kind)


def category_color(category: str, color_by: str) -> str:
    """Colour of a timeline bar category: an action kind or an outcome."""
    if color_by == "outcome":
        return OUTCOME_COLORS.get(category) or _hashed(category)
    return ACTION_KIND_COLORS.get(category) or PROCEDURE_PALETTE[
        zlib.crc32(category.encode("utf-8")) % len(PROCEDURE_PALETTE)]


def life_color(life: int) -> str:
    return QUALITATIVE[int(life) % len(QUALITATIVE)]
