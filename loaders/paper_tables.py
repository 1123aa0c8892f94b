"""The paper's tables (Table 2 milestones per method, Table 4 the mfm ablations, A.4
retargeting, the interaction counts, the reach of retrieval, the diamond task's successes and
the temporal-reach successes against the delay D) as tables of display cells,
written once and rendered three ways: Markdown (``mfm results``), LaTeX with booktabs rules
laid out to fit a column or the text width (:func:`layout`, :func:`to_latex`) and CSV
(``mfm figures``, beside the figures). The numbers come from
:mod:`loaders.paper_measures`; each cell here is only their formatting.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from loaders.escape import latex_label, latex_text, md_text
from loaders.paper_size import WIDTHS, is_column, tex_pt, width_bp
from loaders.paper_measures import RADIUS, RunMeasures, diamond_success_table, inherit_table, interaction_table, \
    milestone_table, reach_success_table, reach_table, retarget_table, seed_label


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.0f}%"


def _of(rate: float, n: int, what: str) -> str:
    return f"{_pct(rate)} of {n}" if n else f"n/a (0 {what})"


def _seeds(d: dict) -> str:
    return ", ".join(f"{seed_label(k)}: {'-' if v is None else v}" for k, v in d.items())


def milestones(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Milestones reached per method (Table 2; Table 4 for ablations): mean ± std over seeds."""
    t = milestone_table(ms)
    if t.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "method": t["method"], "seeds": t["seeds"],
        "milestones (mean ± std)": [f"{_f(m)} ± {_f(s)} of {o}" if n > 1 else f"{_f(m)} of {o} (single run)"
                                    for m, s, o, n in zip(t["mean"], t["std"], t["of"], t["seeds"])],
        "per seed": [_seeds(d) for d in t["per_seed"]],
        "diamond at step": [_seeds(d) for d in t["diamond_step"]],
        "steps used": [_seeds(d) for d in t["steps"]],
        "deaths (all seeds)": t["deaths"]})
    if all(v is None for d in t["diamond_step"] for v in d.values()):
        out = out.drop(columns="diamond at step")  # no seed collected a diamond (not this task's goal)
    return out


def retargeting(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Retargeting after inspection (A.4), pooled over seeds."""
    t = retarget_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "method": t["method"], "seeds": t["seeds"],
        "retarget rate, inspecting turns": [_of(r, n, "turns") for r, n in zip(t["inspect_retarget_rate"],
                                                                             t["inspect_turns"])],
        "retarget rate, other turns": [_of(r, n, "turns") for r, n in zip(t["other_retarget_rate"], t["other_turns"])],
        f"new targets within {RADIUS:g} of an inspected episode": [
            f"{a}/{n} ({_pct(a / n)})" if n else "n/a (0 targets)" for a, n in zip(t["near"], t["new_targets"])],
        "null rate": [_pct(v) if not math.isnan(v) else "n/a" for v in t["null_rate"]]})


def interaction(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Env steps per turn, turns and tool calls per milestone, pooled over seeds; turns are
    called model calls only when a model chose every run's turns."""
    t = interaction_table(ms)
    if t.empty:
        return pd.DataFrame()
    models = all(m.model_driven for m in ms)
    return pd.DataFrame({
        "method": t["method"], "env steps": t["steps"], ("turns (model calls)" if models else "turns"): t["turns"],
        "env steps/turn": [_f(v, 2) for v in t["steps_per_turn"]],
        ("model calls/milestone" if models else "turns/milestone"): [_f(v) for v in t["model_calls_per_milestone"]],
        "tool calls": t["tool_calls"], "tool calls/milestone": [_f(v) for v in t["tool_calls_per_milestone"]],
        "tool calls by tool": [", ".join(f"{k} {v}" for k, v in d.items()) or "-" for d in t["calls_by_tool"]]})


def reach(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """How far back retrieval reaches: the age of retrieved episodes, pooled over seeds."""
    t = reach_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "method": t["method"], "retrieved by": t["tool"], "episodes retrieved": t["episodes"],
        "median age (steps)": [_f(v, 0) for v in t["median"]], "90th percentile": [_f(v, 0) for v in t["p90"]],
        "max": t["max"], "share older than 1,000 steps": [_pct(v) for v in t["over_1000"]]})


def _ages(v: list[int]) -> str:
    return f"median {int(np.median(v)):,}, max {max(v):,}" if v else "-"


def _success_columns(t: pd.DataFrame) -> dict[str, list]:
    """The cells of a success table (:func:`loaders.paper_measures.reach_success_table` or
    :func:`~loaders.paper_measures.diamond_success_table`) from its method on: 95% intervals
    (Wilson for the rate; Student's t for the mean steps, its lower end shown no lower than 0)
    and the recalls that led to the successes."""
    return {
        "method": list(t["method"]),
        "diamonds": [f"{k}/{n}" for k, n in zip(t["successes"], t["seeds"])],
        "rate (95% CI)": [f"{_pct(r)} ({_pct(lo)}-{_pct(hi)})" for r, lo, hi in zip(t["rate"], t["rate_lo"], t["rate_hi"])],
        "steps to diamond (95% CI)": [("-" if m != m else _f(m, 0) if lo != lo else
                                       f"{_f(m, 0)} ({_f(max(lo, 0.0), 0)}-{_f(hi, 0)})")
                                      for m, lo, hi in zip(t["steps_mean"], t["steps_lo"], t["steps_hi"])],
        "place recalled from frames / log / notes / no recall": [
            f"{a} / {b} / {c} / {d}" for a, b, c, d in zip(t["by_frames"], t["by_log"], t["by_notes"], t["by_sight"])],
        "age of the episode that showed it (steps)": [_ages(v) for v in t["recall_ages"]],
        "shown in an earlier life": [f"{k}/{n}" if n else "-" for k, n in zip(t["earlier_life"], t["successes"])],
        "kept in GUIDE.md before use (steps)": [_ages(v) for v in t["kept"]],
        "share older than 1,000 steps": [_pct(v) if v == v else "-" for v in t["over_1000"]]}


def reach_success(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Temporal reach: success against the delay D per method, with 95% intervals, and the age
    of the recalls that led to the successes."""
    t = reach_success_table(ms)
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame({"D": [f"{d} (kit)" if "-kit-" in task else str(d) for d, task in zip(t["delay"], t["task"])],
                         **_success_columns(t)})


def diamond_success(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """Success at a task whose goal is the diamond (no delay) per method, with 95% intervals,
    and the recalls that led to the successes."""
    t = diamond_success_table(ms)
    return pd.DataFrame(_success_columns(t)) if not t.empty else pd.DataFrame()


def inherited_memory(ms: Sequence[RunMeasures]) -> pd.DataFrame:
    """New games in a known world (paper §5.2): the task done with no memory and with an
    earlier run's memory, and how often that memory held the target's place."""
    t = inherit_table(ms)
    if t.empty:
        return pd.DataFrame()
    held = [("-" if h is None or h != h else f"{int(h)}/{n} ({int(k)}/{int(h)} done)")
            for h, n, k in zip(t["held"], t["runs"], t["held_successes"])]
    return pd.DataFrame({
        "task": t["task"], "method": t["method"], "memory": [
            m if m == "none" else f"{m} from {', '.join(f)}" for m, f in zip(t["memory"], t["from"])],
        "done": [f"{k}/{n}" for k, n in zip(t["successes"], t["runs"])],
        "rate (95% CI)": [f"{_pct(r)} ({_pct(lo)}-{_pct(hi)})" for r, lo, hi in zip(t["rate"], t["rate_lo"], t["rate_hi"])],
        "median steps (successes)": ["-" if v != v else _f(v, 0) for v in t["steps_median"]],
        "steps per seed (-: not done)": [", ".join(f"{seed_label(k)} {'-' if v is None else v}" for k, v in d.items())
                                         for d in t["per_seed"]],
        "memory held the target": held})


def to_markdown(df: pd.DataFrame) -> str:
    """A Markdown table whose cells show their text literally (:func:`loaders.escape.md_text`:
    no raw HTML, link, image or emphasis; pipes and line breaks cannot break a row)."""
    head = "| " + " | ".join(map(md_text, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(map(md_text, row)) + " |"
                                     for row in df.itertuples(index=False)])


latex_escape = latex_text
"""Text as LaTeX source that prints it literally (:func:`loaders.escape.latex_text`)."""

SHORT = {
    "seeds": ("n", "seeds (runs) of the method"),
    "milestones (mean ± std)": ("milestones", "mean ± sample std over seeds, of the task's milestones"),
    "diamond at step": ("diamond", "env step the diamond was collected at (-: not collected)"),
    "steps used": ("steps", "env steps each seed ran"),
    "deaths (all seeds)": ("deaths", "summed over seeds"),
    "retarget rate, inspecting turns": ("inspecting", "retarget rate of the turns that inspected frames"),
    "retarget rate, other turns": ("other", "retarget rate of the other turns"),
    "null rate": ("null", "share of new targets that would be near by chance"),
    "env steps": ("steps", "env steps"),
    "turns (model calls)": ("turns", "policy decisions, one model call each"),
    "model calls/milestone": ("turns/ms.", "model calls per milestone reached"),
    "turns/milestone": ("turns/ms.", "turns per milestone reached"),
    "env steps/turn": ("steps/turn", "env steps per turn"),
    "tool calls": ("tools", "memory tool calls"),
    "tool calls/milestone": ("tools/ms.", "memory tool calls per milestone reached"),
    "tool calls by tool": ("by tool", "memory tool calls per tool"),
    "retrieved by": ("by", "the tool that retrieved the episodes"),
    "episodes retrieved": ("n", "episodes retrieved"),
    "median age (steps)": ("median", "median age of the retrieved episodes, env steps"),
    "90th percentile": ("p90", "90th percentile of that age"),
    "max": ("max", "oldest retrieved episode, env steps"),
    "share older than 1,000 steps": ("old", "share older than 1,000 env steps"),
    "diamonds": ("got", "seeds that collected the diamond, of all seeds"),
    "rate (95% CI)": ("rate", "success rate with its Wilson 95% interval"),
    "steps to diamond (95% CI)": ("steps", "mean env steps to the diamond with its 95% t interval"),
    "place recalled from frames / log / notes / no recall": (
        "frames/log/notes/none", "successes whose diamond place was recalled from stored frames, from the "
        "text log, from a note written when seen, or got with no recall"),
    "age of the episode that showed it (steps)": ("age", "env steps since the episode that showed the place"),
    "shown in an earlier life": ("earlier life", "successes shown the place in an earlier life"),
    "kept in GUIDE.md before use (steps)": ("kept", "env steps the place was kept in GUIDE.md before use"),
    "median steps (successes)": ("median steps", "median env steps of the successes"),
    "steps per seed (-: not done)": ("per seed", "env steps per seed (-: not done)"),
    "memory held the target": ("held", "runs whose inherited memory held the target's place"),
}
"""Column headers as the LaTeX tables print them, and what a shortened one means (the note
under the table says it); Markdown and CSV keep the full headers. Headers containing the
radius of :data:`RADIUS` are shortened by :func:`short_header`."""

KEYS = {"reach": 2, "reach-success": 2, "inherited-memory": 2}
"""How many leading columns name a row (repeated in each part of a split table); 1 if not listed."""

TABLE_SIZE_PT = 9.0
"""The tables' type size: ``\\small`` in a 10 pt document."""
TABCOLSEP_PT = 4.0
"""Space on each side of a column (``\\tabcolsep``), TeX points."""
_CMR = dict(zip("abcdefghijklmnopqrstuvwxyz", (5.0, 5.56, 4.44, 5.56, 4.44, 3.06, 5.0, 5.56, 2.78, 3.06, 5.28,
                                                2.78, 8.33, 5.56, 5.0, 5.56, 5.28, 3.92, 3.94, 3.89, 5.56, 5.28,
                                                7.22, 5.28, 5.28, 4.44)))
_CMR |= dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (7.5, 7.08, 7.22, 7.64, 6.81, 6.53, 7.85, 7.5, 3.61, 5.14, 7.78,
                                                6.25, 9.17, 7.5, 7.78, 6.81, 7.78, 7.36, 5.56, 7.22, 7.5, 7.5,
                                                10.28, 7.5, 7.5, 6.11)))
_CMR |= {d: 5.0 for d in "0123456789"} | {" ": 3.33, "\u00a0": 3.33, ".": 2.78, ",": 2.78, ":": 2.78, ";": 2.78,
                                           "-": 3.33,
                                           "(": 3.89, ")": 3.89, "/": 5.0, "%": 8.33, "±": 7.78, "|": 2.78,
                                           "'": 2.78, "!": 2.78, "?": 4.72, "[": 2.78, "]": 2.78, "=": 7.78,
                                           "+": 7.78, "_": 5.0, "—": 10.0, "–": 5.0}
"""Advance widths of Computer Modern Roman 10 pt (cmr10), TeX points: the estimate behind
every layout choice (Times, the other usual paper font, is narrower)."""
ESTIMATE_MARGIN = 1.06
"""Estimated widths are taken this much wider, to be safe."""


def text_pt(text: str, size: float = TABLE_SIZE_PT) -> float:
    """The estimated printed width of ``text`` (TeX points) at ``size`` in Computer Modern;
    a character not in the table counts as an ``m`` (8.33 pt at 10 pt), to be safe."""
    return sum(_CMR.get(c, 8.33) for c in text) * size / 10 * ESTIMATE_MARGIN


def short_header(header: str) -> tuple[str, str]:
    """The header a LaTeX table prints and what it means (empty when it is the full header)."""
    if header in SHORT:
        return SHORT[header]
    if header.startswith("new targets within "):
        return "near", header.replace("new targets", "share of new targets", 1).replace(" of an", " cells of an", 1)
    return header, ""


_NUMBER = r"^-?[\d,]*\.?\d+%?$|^-$"


@dataclass(frozen=True)
class _Col:
    """One column of a LaTeX table: printed header, cells, right-aligned or not, and its
    estimated natural width and narrowest width (its longest word), TeX points."""

    header: str
    cells: list[str]
    numeric: bool
    natural: float
    narrow: float


COMFORT_PT = 45.0
"""A wrapped column is given at least this width (TeX points) or its natural width if less,
so its cells wrap into a few lines, not a word a line."""
_BOUND = re.compile(r"(?<=:) (?=\S)| (?=± )|(?<= ±) ")
"""Spaces kept unbroken in a wrapped cell: after ``s2:`` (a seed and its value) and around ``±``."""


def bind(text: str) -> str:
    """``text`` with the spaces of :data:`_BOUND` made no-break spaces (U+00A0, ``~`` in LaTeX)."""
    return _BOUND.sub("\u00a0", text)


def _column(header: str, values: pd.Series) -> _Col:
    cells = [bind("" if v is None else str(v)) for v in values]
    numeric = pd.api.types.is_numeric_dtype(values) or (len(cells) > 0 and all(
        re.match(_NUMBER, c.strip()) for c in cells))
    texts = [header, *cells]
    natural = max(text_pt(t) for t in texts)
    longest = max((text_pt(w) for t in texts for w in t.split(" ")), default=0.0)
    narrow = natural if numeric else max(longest, min(natural, COMFORT_PT))
    return _Col(header, cells, numeric, natural, narrow)


def _fits(cols: Sequence[_Col], width: float, natural: bool) -> bool:
    used = sum((c.natural if natural or c.numeric else c.narrow) + 2 * TABCOLSEP_PT for c in cols)
    return used <= width


def _widths(cols: Sequence[_Col], width: float) -> list[float]:
    """Column widths (text, without the column gaps) summing with the gaps to ``width``: each
    numeric column its natural width, the text columns the rest in proportion to their
    natural widths, none below its longest word."""
    free = width - sum(2 * TABCOLSEP_PT + (c.natural if c.numeric else 0.0) for c in cols)
    text = [i for i, c in enumerate(cols) if not c.numeric]
    out = [c.natural for c in cols]
    fixed: dict[int, float] = {}
    while True:
        rest = [i for i in text if i not in fixed]
        room = free - sum(fixed.values())
        total = sum(cols[i].natural for i in rest) or 1.0
        share = {i: room * cols[i].natural / total for i in rest}
        low = [i for i in rest if share[i] < cols[i].narrow]
        if not low:
            break
        fixed.update({i: cols[i].narrow for i in low})
    for i in text:
        out[i] = fixed.get(i, share.get(i, cols[i].narrow))
    if not text and cols:
        out[-1] += free - sum(out)
    return out


def _parts(cols: list[_Col], keys: int, width: float) -> list[list[_Col]]:
    """The columns in parts that each fit ``width`` (their text wrapped), each part
    beginning with the ``keys`` columns that name a row; a part holds at least one more
    column even if it cannot fit."""
    head, rest = cols[:keys], cols[keys:]
    parts: list[list[_Col]] = []
    part = list(head)
    for c in rest:
        if len(part) > len(head) and not _fits([*part, c], width, natural=False):
            parts.append(part)
            part = list(head)
        part.append(c)
    parts.append(part)
    return parts


@dataclass(frozen=True)
class LatexLayout:
    """How a table is laid out: ``env`` (``table``, one column; ``table*``, the page's full
    width), the ``width`` it was fitted to (TeX points), its column ``parts`` (one tabular
    each), whether its text wraps (``p`` columns filling the line) or keeps its natural width
    (it fits, or a word in it is wider than the width: the table then shows it whole, too wide)."""

    env: str
    width: float
    parts: tuple[tuple[str, ...], ...]
    wrapped: tuple[bool, ...]
    reason: str = ""

    @property
    def why(self) -> str:
        """The layout in words: which float and why, how many parts, wrapped or not."""
        where = "a column" if self.env == "table" else "the full text width"
        split = f", split in {len(self.parts)} parts" if len(self.parts) > 1 else ""
        wrap = " with wrapped cells" if any(self.wrapped) else ""
        return f"{self.env} ({self.reason}): fitted to {where}, {self.width:.0f} pt{split}{wrap}"


def layout(df: pd.DataFrame, width: str | float | None = None, keys: int = 1) -> tuple[LatexLayout, list[_Col]]:
    """The layout of ``df`` as a LaTeX table for ``width`` (:mod:`loaders.paper_size`: a
    name or a length). A column width (``single`` or no wider) gives a ``table`` fitted to
    the column, split if it must be; a wider one a ``table*`` fitted to it; ``None`` lets
    the content choose: a ``table`` when it fits a column whole, else a ``table*`` fitted to
    the narrower full width (``text``, 5.5 in), which also fits a two-column page's 7 in."""
    cols = [_column(short_header(str(h))[0], df[h]) for h in df.columns]
    keys = max(1, min(keys, len(cols)))
    column = tex_pt(WIDTHS["single"])
    if width is None:
        whole = _fits(cols, column, natural=False)
        env, target = ("table", column) if whole else ("table*", tex_pt(WIDTHS["text"]))
        reason = ("its columns fit a column whole" if whole else
                  "its columns do not fit a column whole; the 5.5 in width also fits a 7 in page")
    else:
        env, target = ("table", column) if is_column(width) else ("table*", tex_pt(width_bp(width)))
        target = min(target, tex_pt(width_bp(width)))
        reason = f"--width {width}"
    parts = _parts(cols, keys, target)
    wrapped = tuple(not _fits(p, target, natural=True) and _fits(p, target, natural=False) for p in parts)
    return LatexLayout(env, target, tuple(tuple(c.header for c in p) for p in parts), wrapped, reason), cols


def _tabular(cols: Sequence[_Col], width: float, wrap: bool) -> list[str]:
    """One booktabs tabular: natural ``l``/``r`` columns, or ``p`` columns whose widths are
    shares of ``\\linewidth`` (ragged, numbers flush right). Rows end in ``\\tabularnewline``
    so a ragged cell's ``\\\\`` cannot end them; only booktabs is needed."""
    if wrap:
        widths = _widths(cols, width)
        spec = "".join(rf"p{{\dimexpr{(w + 2 * TABCOLSEP_PT) / width:.4f}\linewidth-2\tabcolsep\relax}}"
                       for w in widths)
        first = [r"\raggedleft " if c.numeric else r"\raggedright " for c in cols]
    else:
        spec = "".join("r" if c.numeric else "l" for c in cols)
        first = ["" for _ in cols]
    rows = [" & ".join(f + latex_text(c.cells[i]) for f, c in zip(first, cols)) + r" \tabularnewline"
            for i in range(len(cols[0].cells))]
    return [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
            " & ".join(f + latex_text(c.header) for f, c in zip(first, cols)) + r" \tabularnewline", r"\midrule",
            *rows, r"\bottomrule", r"\end{tabular}"]


def to_latex(df: pd.DataFrame, caption: str, label: str, width: str | float | None = None, keys: int = 1,
             notes: Sequence[str] = ()) -> str:
    """The table as a ``table`` or ``table*`` float (:func:`layout`) holding booktabs
    tabulars (needs only ``\\usepackage{booktabs}``) that fit the width: headers shortened
    (:data:`SHORT`) with their meaning in a note under the table, text cells wrapped in
    ``p`` columns when the natural width does not fit, a table too wide even so split into
    parts that repeat the ``keys`` columns naming each row. Numbers and counts
    right-aligned, text left-aligned; the caption, notes and every cell escaped
    (:func:`loaders.escape.latex_text`), the label reduced to a safe key
    (:func:`loaders.escape.latex_label`)."""
    plan, cols = layout(df, width, keys)
    by_header = {c.header: c for c in cols}
    body: list[str] = []
    for i, (names, wrap) in enumerate(zip(plan.parts, plan.wrapped)):
        if i:
            body.append(r"\par\medskip")
        body += _tabular([by_header[n] for n in names], plan.width, wrap)
    meanings = [f"{short}: {meaning}" for short, meaning in (short_header(str(h)) for h in df.columns) if meaning]
    text = "; ".join([*meanings, *notes])
    note = ([r"\par\smallskip", r"{\footnotesize\raggedright " + latex_text(text + ("." if text else "")) + r"\par}"]
            if text else [])
    return "\n".join([f"% {plan.why} (mfm figures; loaders/paper_tables.py)", rf"\begin{{{plan.env}}}[tbp]",
                      r"\centering", r"\small",
                      rf"\setlength{{\tabcolsep}}{{{TABCOLSEP_PT:g}pt}}", r"\hyphenpenalty=10000",
                      r"\exhyphenpenalty=10000", rf"\caption{{{latex_text(caption)}}}",
                      rf"\label{{{latex_label(label)}}}", *body, *note, rf"\end{{{plan.env}}}", ""])


def tables(ms: Sequence[RunMeasures]) -> list[tuple[str, str, pd.DataFrame]]:
    """Every table that has rows, as ``(name, title, table)``: methods first, then the mfm
    ablations (with the full mfm for reference) when there are any."""
    base = [m for m in ms if not m.ablations]
    abl = [m for m in ms if m.base == "mfm"]
    out = [("milestones", "Milestones reached, per method (compare with paper Table 2)", milestones(base)),
           ("success", "Success: the diamond within the budget, per method (95% intervals)", diamond_success(base)),
           ("ablations", "Milestones reached, mfm ablations (compare with paper Table 4)",
            milestones(abl) if len({m.method for m in abl}) > 1 else pd.DataFrame()),
           ("retargeting", f"Retargeting after inspection (radius {RADIUS:g} cells; compare with paper A.4)",
            retargeting(ms)),
           ("interaction", "Interaction: env steps per turn, turns and tool calls per milestone", interaction(ms)),
           ("reach", "How far back retrieval reaches (age of retrieved episodes)", reach(ms)),
           ("reach-success", "Temporal reach: diamonds got against the delay D (95% intervals)", reach_success(ms)),
           ("inherited-memory", "New games in a known world: no memory vs an earlier run's (compare with paper §5.2)",
            inherited_memory(ms))]
    return [(n, t, df) for n, t, df in out if len(df)]
