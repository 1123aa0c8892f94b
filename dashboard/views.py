"""Every cached view the pages draw, declared once, at import time, with why it is cached as it is.

A view is a ``loaders`` function (or a chart built from one) wrapped by
``dashboard.caching.cached``: keyed on the run's signature, so a run written again is read
again, and cleared by ``st.cache_data.clear()`` (``shared`` views: ``st.cache_resource.clear()``).
Streamlit names each cache after the function it wraps and where that is defined, so a page
that runs again finds the same caches. Pages call these names; they wrap nothing themselves.

``max_entries`` is how many argument sets one view keeps per server; 64 (the default) where
an entry is a table or a small record, fewer where an entry is large (a chart, the frames of
a scrubber), more where entries are small and many (single frames).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dashboard import grid_canvas, timeline_canvas, vega_charts
from dashboard.caching import cached, kept
from loaders import agent_calls, chart_data, echo, frame_images, lookups, scrubber
from loaders import analysis_pages as ap
from loaders import failures as fl
from loaders import provenance as pv
from loaders import search as sr
from loaders import turns as tv
from loaders.display import png_bytes
from loaders.frame_compare import legend_image
from loaders.run import Run

# Frames

frame = cached(lookups.frame_for, max_entries=2048)
"""``frame(run, step=None, episode=None, life=None)``: one frame's pixels (a copy per call;
raises FrameError or UnsafePath). 2,048 entries: each is one small frame, and a filmstrip,
the Frames page and the Turns page ask for many, often again."""


def episode_frame(run: Run, episode: str, step: int | None = None, life: int | None = None) -> np.ndarray:
    """A frame of an episode ``run`` names (:data:`frame`): of env ``step``, else its end
    observation; an inherited episode's from the copy of its run (``lookups.frame_holder``)."""
    holder, s, ep, lf = lookups.frame_holder(run, episode, step, life)
    return frame(holder, step=s, episode=ep, life=lf)


def _frames_panels(*args: Any, **kwargs: Any) -> dict:
    return vega_charts.spec(vega_charts.frames_panels(*args, **kwargs))


frames_panels = kept(_frames_panels)
"""The Frames page's synchronised panels (``vega_charts.frames_panels``) as a Vega-Lite spec,
kept (not copied: only read) per the content of the frames shown, which may come from several
runs (``caching.kept``, 32 entries)."""

inspections = cached(agent_calls.run_inspections)
"""Every frame inspection of a run, inherited ones looked up in the copy of their run (a table
per run version: the Frames page lists them and matches two frames against them)."""

# Timeline

timeline = cached(chart_data.timeline)
"""``timeline(run, lo, hi, color_by)``: the Timeline's bars, marks and vitals of one step range
(a small record per range and colouring; the chart and the episode's marks are built from it)."""

episode_marks = cached(chart_data.episode_marks)
"""``episode_marks(run, first_step, last_step, life)``: the marks of the open episode, one per
row (the chart's may be binned); found among the run's every call, once per episode."""


def _timeline_lanes(run: Run, lo: int, hi: int, color_by: str, ep: str | None, step: int | None,
                    span: tuple[int, int, int] | None) -> dict:
    return timeline_canvas.lanes_data(timeline(run, lo, hi, color_by), ep, step, span)


timeline_lanes = cached(_timeline_lanes, max_entries=16, shared=True)
"""What the Timeline's chart draws (``dashboard.timeline_canvas.lanes_data``) for a range,
colouring, episode, step and episode span: made once and kept, not copied (only read)."""


def _strip_thumbs(run: Run, episode: str, max_frames: int, side: int) -> tuple[list[int], list[bytes], int]:
    strip = lookups.frame_strip(run, episode, max_frames=max_frames)
    thumbs = [frame_images.upscale(f, side) for _, f in strip]
    return [s for s, _ in strip], [png_bytes(t) for t in thumbs], thumbs[0].shape[1] if thumbs else side


strip_thumbs = cached(_strip_thumbs, max_entries=32)
"""``strip_thumbs(run, episode, max_frames, side)``: the Timeline's frame strip of an episode,
evenly spaced frames enlarged to ``side`` pixels: (steps, PNG bytes, width), encoded once per
episode rather than on every rerun (PNG-encoding 24 frames took a quarter of one)."""

episode_scrub = cached(scrubber.episode_scrub, max_entries=16)
"""``episode_scrub(run, episode, back)``: an episode's frames as PNG data for the Timeline's
scrubber; 16 entries, as each holds every frame of an episode."""

# Failures

failures = cached(fl.failures)
"""Every failed or interrupted action and every death of a run (one table per run version)."""

filmstrip = cached(fl.filmstrip)
"""``filmstrip(run, episode, target, fail_step, back)``: the frames' steps, positions, target
tiles and vitals of one failure's filmstrip (a short list; the pixels come from :data:`frame`)."""

# Spatial grid

lives = cached(lookups.lives_of)
"""The lives of a run (a short list, read from three tables: the grid page offers them)."""

grid = cached(chart_data.grid)
"""``grid(run, lo, hi, kinds, life=, height=, paths=, positions=)``: the Spatial grid's cells,
paths, positions and deaths of one choice of filters (a small record per choice)."""


def _grid_map(run: Run, lo: int, hi: int, kinds: tuple[str, ...], life: int | None, band: tuple[int, int] | None,
              paths: bool, positions: bool, cell: tuple[int, int] | None, mark: tuple[int, int] | None
              ) -> tuple[chart_data.GridView, dict]:
    view = grid(run, lo, hi, kinds, life=life, height=band, paths=paths, positions=positions)
    return view, grid_canvas.map_data(view, cell, mark)


grid_map = cached(_grid_map, max_entries=16, shared=True)
"""The Spatial grid's view and what its map draws (``dashboard.grid_canvas.map_data``) for one
choice of filters, picked cell and marked cell: kept, not copied (only read), 16 of them."""

# Memory and provenance

memory_provenance = cached(ap.memory_provenance)
"""``memory_provenance(run, path, asof)``: each line of a memory file as of a step with the write
that set it and what later removed or contradicted it (a table per file and step)."""

provenance_graph = cached(pv.build_graph, max_entries=16)
"""The whole provenance graph of a run's memory (every version of every file, replayed from
the write log): large and slow to build, so 16 run versions are kept."""


def _provenance_view(run: Run, lo: int, hi: int) -> pv.Graph:
    return pv.view(provenance_graph(run), lo, hi)


provenance_view = cached(_provenance_view)
"""``provenance_view(run, lo, hi)``: the provenance graph of the memory written in steps
``lo``–``hi``, aggregated to stay drawable (a graph per step range)."""


def _provenance_detail(run: Run, node_id: str) -> pv.NodeDetail | None:
    return pv.node_detail(run, provenance_graph(run), node_id)


provenance_detail = cached(_provenance_detail)
"""``provenance_detail(run, node_id)``: what the Provenance page shows of one node (its file as
it stood, the diff, the linked episodes)."""

# Runs compared

progress = cached(chart_data.progress_tables)
"""``progress(runs, root)``: the Progress page's bands and tables of runs of one task, keyed on
every run's signature (a run being written moves its curve)."""

steps_per_turn = cached(chart_data.steps_per_turn_tables)
"""``steps_per_turn(runs, window)``: the Steps per turn page's bands and pooled table of runs of
one task, per rolling window."""

learners = cached(echo.learners)
"""``learners(pool)``: the Echo page's unlock bands of learner runs and their damaged lines."""

learner_library = cached(echo.library)
"""``learner_library(run)``: a learner run's descriptors, analogy edges, Echo episodes and
damaged CSD lines (read from ``csd.jsonl`` and ``echo.jsonl``)."""

# Search

search_corpus = cached(sr.corpus)
"""Everything the Search page looks through in one run (one table per run version; each new
search is matched against it without reading the run again)."""

# Turns and retargeting

turn_menu = cached(tv.turn_menu, max_entries=8, shared=True)
"""The Turns page's picker labels and the turns each navigation button moves to, built once
per run version (not per click); kept, not copied, as it holds a label per turn."""

turn_view = cached(tv.turn_view)
"""``turn_view(run, turn)``: what the Turns and Retargeting pages show of one turn (a small record)."""

turn_frames = cached(scrubber.steps_scrub, max_entries=16)
"""``turn_frames(run, lo, hi, life)``: a turn's frames for the Turns scrubber; 16 entries, each
holds every frame of a turn."""

outline_legend = kept(legend_image, max_entries=4)
"""The legend image of the frame outlines (one small image per legend; kept, only read)."""

retarget_tables = cached(ap.retarget_tables)
"""``retarget_tables(runs)``: the Retargeting page's per-run and per-method tables of one task."""

retarget_rates = cached(chart_data.retarget_rates)
"""``retarget_rates(runs, per_method)``: the A.4 rates with their intervals, one row per method."""

retarget_turns = cached(ap.retarget_turns)
"""The retargeting turns of a run (a table per run version: the audit's picker)."""

retarget_audit = cached(ap.retarget_audit)
"""``retarget_audit(run, turn)``: one retarget turn's position, inspections and targets."""

RATES_WIDTH = 560
"""Each method's row of bars in the rates chart, pixels."""


def _rates_svg(group: list[tuple[str, Run]]) -> str:
    rates = retarget_rates(group, retarget_tables(group)[1])
    return vega_charts.svg(vega_charts.spec(vega_charts.rates_chart(rates, RATES_WIDTH, screen=True)))


rates_svg = cached(_rates_svg, max_entries=16, shared=True)
"""The rates chart of one task's runs drawn in the server, as SVG markup (what the page
shows), made once per runs' version (the spec and the drawing took most of a rerun)."""


def _map_svg(run: Run, turn: int) -> str:
    audit = retarget_audit(run, turn)
    return vega_charts.svg(vega_charts.spec(
        vega_charts.retarget_map(audit.position, audit.inspections, audit.targets, audit.radius)))


map_svg = cached(_map_svg, max_entries=32, shared=True)
"""The retarget map of one turn drawn in the server, as SVG markup (as :data:`rates_svg`),
32 turns kept."""
