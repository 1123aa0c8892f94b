"""Shared fixtures: a small run written through the memory core with known contents."""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from mfm.memory import RunWriter
from mfm.schema import SCHEMA_VERSION, GridRow, LifeEvent, MilestoneRow, RunManifest, StepRow, TurnRow

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "dashboard" / "app.py")
EXPORT = Path(os.environ.get("MFM_SHARED", REPO.parent / "shared")) / "mfm_export" / "abaw3_mfmskills"
"""A real run exported by the original MFM project (``shared/`` beside the checkout, or
``$MFM_SHARED``); present in CI, where the tests that need it must run."""


def shared_export() -> Path:
    """:data:`EXPORT`; the test fails in CI and is skipped elsewhere when it is missing."""
    if not (EXPORT / "data.json").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the shared MFM export is missing at {EXPORT}")
        pytest.skip(f"the shared MFM export is not at {EXPORT} (set MFM_SHARED)")
    return EXPORT


def bound_socket(path: Path) -> socket.socket:
    """A Unix socket bound at ``path`` however long it is: bound by name from inside its folder,
    since an address holds at most 107 bytes and the parallel suite's temporary folders are deep."""
    sock = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        sock.bind(path.name)
    finally:
        os.chdir(here)
    return sock


def record_crafter(folder: Path, seed: int, policy_seed: int, length: int, episodes: int = 1) -> Path:
    """Record ``episodes`` episodes of the real game with ``crafter.Recorder`` and a seeded
    random policy into ``folder``; return it."""
    import crafter

    env = crafter.Recorder(crafter.Env(seed=seed, length=length), str(folder), save_stats=True, save_episode=True,
                           save_video=False)
    rng = np.random.default_rng(policy_seed)
    for _ in range(episodes):
        env.reset()
        done = False
        while not done:
            _, _, done, _ = env.step(int(rng.integers(0, 17)))
    return folder


@pytest.fixture(autouse=True, scope="session")
def table_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """The tests' own table cache (``loaders.tablecache``), never the user's ~/.cache; set in
    the environment so that processes the tests start use it too."""
    old = os.environ.get("MFM_CACHE_DIR")
    os.environ["MFM_CACHE_DIR"] = str(tmp_path_factory.mktemp("mfm-cache"))
    yield
    if old is None:
        os.environ.pop("MFM_CACHE_DIR", None)
    else:
        os.environ["MFM_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def cache_writes_done():
    """Each test ends with the table cache writes it started finished (``tablecache.wait``),
    so none lands in a folder a later test owns."""
    yield
    tablecache = sys.modules.get("loaders.tablecache")
    if tablecache is not None:
        tablecache.wait()


def use_root(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Point the dashboard at ``root`` and clear Streamlit's caches (between AppTest tests)."""
    import streamlit as st

    monkeypatch.setenv("MFM_RUNS_ROOT", str(root))
    st.cache_data.clear()
    st.cache_resource.clear()


def vega_data(at) -> list[list]:
    """Per Vega-Lite (Altair) chart of a finished AppTest, the tables Streamlit sent for it
    (pandas DataFrames, one per dataset: a layered chart has one per layer)."""
    import pyarrow as pa

    return [[pa.ipc.open_stream(d.data.data).read_pandas() for d in c.proto.datasets]
            for c in at.get("vega_lite_chart")]


def components(at, name: str) -> list[dict]:
    """The data each ``st.components.v2`` component called ``name`` (``mfm_timeline_lanes``,
    ``mfm_frame_scrubber``, ...) of a finished AppTest was sent, in page order."""
    import json

    return [json.loads(c.proto.json) for c in at.get("bidi_component") if c.proto.component_name == name]


def grid_map(at) -> dict:
    """What the Spatial grid's map of a finished AppTest was sent
    (``dashboard.grid_canvas.map_data``)."""
    (data,) = components(at, "mfm_grid_map")
    return data


def grid_marks(data: dict) -> list[tuple[float, float, str]]:
    """Every point mark the map of ``data`` draws, as (x, y, what it stands for): the end
    positions and deaths, and the picked cell, the failed target and the time cursor."""
    names = [m[0] for m in data["marks"]]
    q = data["points"]
    marks = [(x, y, names[m]) for x, y, m in zip(q["x"], q["y"], q["mark"])]
    for name, at in (("selected cell", data["cell"]), ("failed target", data["target"]), ("time cursor", data["here"])):
        if at is not None:
            marks.append((at[0], at[1], name))
    return marks


def svg_images(at) -> list[str]:
    """The SVG markup of every SVG image of a finished AppTest (``st.image`` of SVG, sent as
    a ``data:image/svg+xml;base64`` URL), in page order."""
    import base64

    head = "data:image/svg+xml;base64,"
    return [base64.b64decode(i.url[len(head):]).decode("utf-8") for n in at.get("image") for i in n.proto.imgs
            if i.url.startswith(head)]


def svg_labels(svg: str) -> list[str]:
    """The ``aria-label`` of every element of an SVG Vega drew (each mark's fields as
    ``name: value; ...``), unescaped."""
    import html
    import re

    return [html.unescape(m) for m in re.findall(r'aria-label="([^"]*)"', svg)]


def vega_tables(at) -> list:
    """Every table of every Vega-Lite chart of a finished AppTest (:func:`vega_data`, flat)."""
    return [t for chart in vega_data(at) for t in chart]


def chart_spec(chart) -> dict:
    """An Altair chart's Vega-Lite spec, of any number of rows (Altair's 5,000-row guard off)."""
    import altair as alt

    with alt.data_transformers.enable("default", max_rows=None):
        return chart.to_dict()


def chart_layers(chart) -> list[dict]:
    """The unit views of an Altair chart (layers and concatenations flattened), each with its
    data rows as ``rows`` (its own data, or the data it inherits)."""
    spec = chart_spec(chart)
    data = spec.get("datasets", {})
    out = []

    def walk(node: dict, inherited: dict) -> None:
        ref = node.get("data") or inherited
        children = [c for k in ("layer", "concat", "hconcat", "vconcat") for c in node.get(k, [])]
        for child in children:
            walk(child, ref)
        if not children:
            out.append(dict(node, rows=data.get(ref.get("name"), ref.get("values", []))))

    walk(spec, {})
    return out


def open_app(page: str | None = None, **params: str):
    """Run the dashboard with query ``params``, switch to ``page`` (a file of pages/ without
    ``.py``), and return the finished AppTest after checking it raised nothing."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=90)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(f"../pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at) -> str:
    """Every Markdown, caption, title, subheader, info, warning and error text of an AppTest."""
    parts = [e.value for e in (*at.markdown, *at.caption, *at.title, *at.subheader, *at.info, *at.warning,
                               *at.error)]
    return "\n".join(str(p) for p in parts)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through Playwright (the helpers are in ``dash_browser.py``)."""
    from playwright.sync_api import sync_playwright

    from dash_browser import ARGS, CHROMIUM

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh browser page, 1440 x 1000."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    pg = ctx.new_page()
    yield pg
    ctx.close()


@dataclass
class WrittenRun:
    """A run written by :func:`write_run` and what was put into it."""

    dir: Path
    frames: dict[int, np.ndarray] = field(default_factory=dict)
    episodes: list = field(default_factory=list)
    memory_versions: list[tuple[int, str]] = field(default_factory=list)


def manifest(**kw) -> RunManifest:
    base = dict(schema_version=SCHEMA_VERSION, run_id="test", env="synthetic", task="diamond", method="mfm",
                seed=0, step_budget=1000, milestone_order=("collect_wood", "place_table"), status="running",
                started_at="2026-11-30T00:00:00+00:00")
    base.update(kw)
    return RunManifest(**base)


ACTIONS = ("go_to", "collect", "place", "craft", "explore")


def write_run(run_dir: Path, episodes: int = 20, steps_per_episode: int = 5, seed: int = 0) -> WrittenRun:
    """Write a run with the memory core: random frames, a walk, tags, two lives, memory writes."""
    rng = np.random.default_rng(seed)
    w = RunWriter(run_dir, manifest())
    out = WrittenRun(run_dir)
    step, life, x, y = 0, 0, 32, 32
    first = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
    rec = w.begin_episode(kind="initial", life=0, turn=None, action_kind=None, first_step=0, action={})
    out.episodes.append(w.end_episode(rec, observation=first, state={"step": 0}, outcome={}, summary="initial state",
                                      tags=["initial"], events=[], x=x, y=y, outcome_label=None))
    for e in range(episodes):
        kind = ACTIONS[e % len(ACTIONS)]
        rec = w.begin_episode(kind="episode", life=life, turn=e, action_kind=kind, first_step=step,
                              action={"atom": kind, "args": {"n": e}})
        grid = []
        for _ in range(steps_per_episode):
            step += 1
            x += 1
            frame = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
            out.frames[step] = frame
            rec.add_step(frame, StepRow(step=step, life=life, episode=rec.id, action="move_right", x=x, y=y,
                                        facing=(1, 0), health=9, food=9, drink=9, energy=9,
                                        inventory={"wood": e}, reward=0.0))
            grid.append(GridRow(cell=(x, y), kind="walked", step=step, life=life))
        tags = ["inventory_changed"] if kind == "collect" else []
        if e == 3:
            tags.append("milestone")
            w.record_milestone(MilestoneRow(name="collect_wood", step=step, life=life, episode=rec.id, turn=e))
        if e == 6:
            grid.append(GridRow(cell=(x + 1, y), kind="hazard", step=step, life=life, damage=9, cause="lava"))
            w.record_life_event(LifeEvent(event="death", life=life, step=step, x=x, y=y, cause="lava",
                                          episode=rec.id))
        row = w.end_episode(rec, grid=grid, observation=out.frames[step], state={"step": step}, outcome={"moved": 5},
                            summary=f"{kind}(n={e}) -> {steps_per_episode} steps, moved 5",
                            tags=tags, events=[f"event {e}"], x=x, y=y, outcome_label="done")
        out.episodes.append(row)
        w.record_turn(TurnRow(turn=e, life=life, first_step=row.first_step, last_step=row.last_step,
                              policy="test", calls=({"tool": "atom", "args": {"atom": kind}, "result": {}},),
                              targets=({"kind": "go_to", "x": x, "y": y, "in_plan": e % 2 == 0},),
                              plan_before=(), plan_after=(), episodes=(row.id,)))
        text = "# Knowledge\n" + "".join(f"- fact {i}\n" for i in range(e + 1))
        w.memory.write("GUIDE.md", text, author="test", reason=f"episode {e}", sources=[row.id], step=step,
                       life=life, turn=e)
        out.memory_versions.append((step, text))
        if e == 6:
            life += 1
            x, y = 32, 32
            w.record_life_event(LifeEvent(event="respawn", life=life, step=step, x=x, y=y))
    w.close("finished", "budget")
    return out


@pytest.fixture
def written_run(tmp_path: Path) -> WrittenRun:
    return write_run(tmp_path / "run")


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server (object storage tests, issue 22) on a free loopback port, the AWS
    variables pointing every client (this process and the commands it starts) at it; yields
    an fsspec filesystem on it."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from bench.objectstore import s3_server

    proc, env = s3_server(tmp_path_factory.mktemp("moto") / "moto.log")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    yield fs
    proc.terminate()
    proc.wait(timeout=30)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
