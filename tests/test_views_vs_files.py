"""Every view checked against the run's files, not against itself.

For every sample run under ``sample_runs/``, each expectation is recomputed here from the raw
files with plain ``json``, ``hashlib``, ``difflib`` and PIL: positions from ``lives.jsonl`` and
``steps.jsonl``, frames decoded straight from the episode's strip or PNG, search counts from
the turn's logged ``ids``, agent memory replayed from ``memory_writes.jsonl`` with the as-of
rule written out below, outcomes and deaths from ``index.jsonl`` and ``lives.jsonl``. The
loaders' functions are only ever the thing compared, never the source of an expectation.
"""
from __future__ import annotations

import difflib
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from PIL import Image
from raw import episode_file, strip_image

from loaders import agent_calls, lookups, open_run, runs_summary, timeline_data
from loaders import analysis_pages as ap
from mfm.memory.retrieval import FrameError

SAMPLES = REPO / "sample_runs"
RUN_DIRS = sorted(p.parent for p in SAMPLES.rglob("index.jsonl"))
FRAMES_PER_STRIP = 64
PLAN_ITEM = re.compile(r"^\d+\. \((-?\d+), (-?\d+)\)")


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Raw:
    """A run's files as plain JSON."""

    path: Path
    index: list[dict]
    steps: list[dict]
    lives: list[dict]
    turns: list[dict]
    writes: list[dict]
    trace: dict[tuple[int, int], dict] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> "Raw":
        raw = cls(path, *(_jsonl(path / f) for f in ("index.jsonl", "steps.jsonl", "lives.jsonl", "turns.jsonl",
                                                      "memory_writes.jsonl")))
        raw.trace = {(s["life"], s["step"]): s for s in raw.steps}
        return raw

    def position(self, step: int, life: int) -> tuple[float, float] | None:
        """Where life ``life`` stood after ``step``: its newest trace row, respawn or episode end."""
        cands = [(s["step"], 2, (s["x"], s["y"])) for s in self.steps if s["life"] == life and s["step"] <= step]
        cands += [(e["step"], 1, (e["x"], e["y"])) for e in self.lives
                  if e["event"] == "respawn" and e["life"] == life and e["step"] <= step]
        cands += [(r["last_step"], 0, (r["x"], r["y"])) for r in self.index
                  if r.get("life", 0) == life and r["last_step"] <= step and r.get("x") is not None]
        if not cands:
            return None
        x, y = max(cands, key=lambda c: c[:2])[2]
        return float(x), float(y)

    def strip_frame(self, ep: dict, i: int) -> np.ndarray:
        """Frame ``i`` of an episode, cut from its WebP strip decoded with PIL."""
        strip = strip_image(self.path, ep["path"], i // FRAMES_PER_STRIP)
        h = strip.shape[1]
        row = i % FRAMES_PER_STRIP
        return strip[row * h:(row + 1) * h]

    def frame(self, step: int, life: int) -> np.ndarray | None:
        """The frame life ``life`` had after ``step``, or None if the files hold none."""
        for ep in self.index:
            if ep.get("life", 0) == life and ep["first_step"] < step <= ep["first_step"] + ep.get("frames", 0):
                return self.strip_frame(ep, step - ep["first_step"] - 1)
        for ep in reversed(self.index):
            if ep.get("life", 0) == life and ep["last_step"] == step:
                if ep.get("image"):
                    with Image.open(io.BytesIO(episode_file(self.path, ep["image"]))) as im:
                        return np.asarray(im.convert("RGB"))
                if ep.get("frames") and ep.get("observation_hash"):
                    return self.strip_frame(ep, ep["frames"] - 1)
        return None

    def holds_from(self) -> dict[int, int]:
        """The as-of rule: a ``plan:`` write to working.md holds from its turn's first step, any
        other write from its own step; no write of a file holds later than a later one of it."""
        first = {t["turn"]: t["first_step"] for t in self.turns}
        own = {}
        for w in self.writes:
            t = first.get(w.get("turn"))
            plan = w["path"] == "mine/working.md" and w["reason"].startswith("plan:") and t is not None
            own[w["seq"]] = t if plan and t <= w["step"] else w["step"]
        out, low = {}, {}
        for w in reversed(self.writes):
            low[w["path"]] = min(own[w["seq"]], low.get(w["path"], own[w["seq"]]))
            out[w["seq"]] = low[w["path"]]
        return out

    def memory(self, path: str, step: int) -> str | None:
        """``path`` as of ``step``: its writes holding by then, replayed (snapshots replace, diff
        hunks ``[start, end, lines]`` patch), each checked against its sha256."""
        held = self.holds_from()
        text: str | None = None
        for w in self.writes:
            if w["path"] != path or held[w["seq"]] > step:
                continue
            if w["op"] == "delete":
                text = None
                continue
            if w.get("snapshot") is not None:
                text = w["snapshot"]
            else:
                old = (text or "").splitlines(keepends=True)
                out, pos = [], 0
                for start, end, lines in w["diff"]:
                    out += old[pos:start] + lines
                    pos = end
                text = "".join(out + old[pos:])
            assert hashlib.sha256(text.encode("utf-8")).hexdigest() == w["sha256"], (path, w["seq"])
        return text


@pytest.fixture(scope="module", params=RUN_DIRS, ids=[p.relative_to(SAMPLES).as_posix() for p in RUN_DIRS])
def pair(request: pytest.FixtureRequest):
    return Raw.read(request.param), open_run(request.param)


def test_there_are_sample_runs_with_respawns() -> None:
    assert len(RUN_DIRS) >= 4
    assert any(e["event"] == "respawn" for p in RUN_DIRS for e in _jsonl(p / "lives.jsonl"))


def test_positions_follow_the_life(pair) -> None:
    raw, run = pair
    for e in raw.lives:
        assert lookups.position_at(run, e["step"], e["life"]) == (float(e["x"]), float(e["y"])), e
    for t in raw.turns:
        assert lookups.position_at(run, t["first_step"], t["life"]) == raw.position(t["first_step"], t["life"]), t["turn"]
    for s in raw.steps[::50]:
        assert lookups.position_at(run, s["step"]) == (float(s["x"]), float(s["y"]))
        assert lookups.step_row(run, s["step"], s["life"])["episode"] == s["episode"]


def test_retarget_audit_puts_the_agent_in_the_turns_life(pair) -> None:
    raw, run = pair
    respawns = {(e["step"], e["life"]) for e in raw.lives if e["event"] == "respawn"}
    turns = [t for t in raw.turns if (t["first_step"], t["life"]) in respawns] + raw.turns[::25]
    for t in turns:
        audit = ap.retarget_audit(run, t["turn"])
        assert audit.position == raw.position(t["first_step"], t["life"]), t["turn"]
        assert audit.had == (t["first_step"], t["life"])


def test_frames_follow_the_life(pair) -> None:
    raw, run = pair
    checked = 0
    for t in raw.turns[::10] + [t for t in raw.turns if any(e["step"] == t["first_step"] for e in raw.lives)]:
        want = raw.frame(t["first_step"], t["life"])
        if want is None:
            with pytest.raises(FrameError):
                lookups.frame_at(run, t["first_step"], t["life"])
            with pytest.raises(FrameError):
                lookups.frame_for(run, step=t["first_step"], life=t["life"])
        else:
            assert np.array_equal(lookups.frame_at(run, t["first_step"], t["life"]), want), t["turn"]
            checked += 1
    for s in raw.steps[::97] + [s for s in raw.steps if any(e["step"] == s["step"] for e in raw.lives)]:
        want = raw.frame(s["step"], s["life"])
        assert np.array_equal(lookups.frame_at(run, s["step"], s["life"]), want)
        assert np.array_equal(lookups.frame_for(run, step=s["step"]), want)
        checked += 1
    assert checked or not raw.steps


def test_end_observations_match_their_hash(pair) -> None:
    raw, run = pair
    for ep in raw.index:
        if ep.get("image") is None and ep.get("frames") and ep.get("observation_hash"):
            pixels = raw.strip_frame(ep, ep["frames"] - 1)
            digest = hashlib.blake2b(np.ascontiguousarray(pixels).tobytes(), digest_size=8).hexdigest()
            assert digest == ep["observation_hash"], ep["id"]
            assert np.array_equal(lookups.frame_for(run, episode=ep["id"]), pixels)


def test_search_marks_show_the_query_and_the_count(pair) -> None:
    raw, run = pair
    logged = [(t["turn"], c) for t in raw.turns for c in t["calls"] if c["tool"] == "search"]
    calls = agent_calls.tool_calls(run.turns(), ("search",))
    assert len(calls) == len(logged)
    for (turn, c), row in zip(logged, calls.itertuples(index=False)):
        assert row.turn == turn
        assert row.results == len(c["result"]["ids"])
        assert row.text and all(str(v) in row.text for v in c["args"].values() if isinstance(v, (str, int)))
    marks = timeline_data.timeline_marks(run, max_per_kind=10 ** 6)
    labels = list(marks.loc[marks["kind"] == "search", "label"])
    assert sorted(labels) == sorted(f"search {row.text} → {row.results} result{'' if row.results == 1 else 's'}"
                                    for row in calls.itertuples(index=False))
    assert not any("''" in lab or "→ ?" in lab for lab in labels)
    for turn, c in logged[:5]:
        audit = ap.retarget_audit(run, turn)
        assert [s["count"] for s in audit.searches] == [len(x["result"]["ids"]) for t in raw.turns
                                                        if t["turn"] == turn for x in t["calls"]
                                                        if x["tool"] == "search"]


def test_inspections_name_the_inspected_life(pair) -> None:
    raw, run = pair
    life = {ep["id"]: ep.get("life", 0) for ep in raw.index}
    got = agent_calls.inspections(run.turns(), run.episodes())
    logged = [c["args"].get("episode") for t in raw.turns for c in t["calls"] if c["tool"] == "inspect"]
    assert list(got["episode"]) == logged
    assert [None if v is None or v is np.nan or str(v) == "<NA>" else int(v) for v in got["target_life"]] == \
        [life.get(e) for e in logged]


def test_memory_as_of_replays_the_log(pair) -> None:
    raw, run = pair
    held = raw.holds_from()
    for path in sorted({w["path"] for w in raw.writes}):
        steps = sorted({held[w["seq"]] for w in raw.writes if w["path"] == path})
        assert ap.memory_steps(run, path) == steps
        for s in sorted({*steps, *(x - 1 for x in steps), *(x + 1 for x in steps)})[::3]:
            assert ap.memory_text(run, path, s) == raw.memory(path, s), (path, s)
        versions = [raw.memory(path, s) for s in steps]
        if len(versions) >= 2:
            want = list(difflib.unified_diff((versions[-2] or "").splitlines(keepends=True),
                                             (versions[-1] or "").splitlines(keepends=True)))[2:]
            got = ap.memory_diff(run, path).splitlines(keepends=True)[2:]
            assert got == want and got, path


def test_the_plan_shown_is_the_plan_followed(pair) -> None:
    """While a turn's actions run (after its first step, up to the step the next turn decides
    at), working.md shows the plan that turn decided: its ``plan_after`` targets."""
    raw, run = pair
    plan_turns = {w["turn"] for w in raw.writes if w["path"] == "mine/working.md" and w["reason"].startswith("plan:")}
    starts = sorted(t["first_step"] for t in raw.turns)
    checked = 0
    for t in raw.turns:
        later_same_start = [s for s in starts if s == t["first_step"]]
        if t["turn"] not in plan_turns or len(later_same_start) > 1 or t["last_step"] == t["first_step"]:
            continue
        for s in range(t["first_step"], t["last_step"]):
            text = ap.memory_text(run, "mine/working.md", s) or ""
            shown = [(int(m[1]), int(m[2])) for m in map(PLAN_ITEM.match, text.splitlines()) if m]
            assert shown == [(p["x"], p["y"]) for p in t["plan_after"]], (t["turn"], s)
        checked += 1
    assert checked or not plan_turns


def test_outcomes_deaths_and_milestones_come_from_the_files(pair) -> None:
    raw, run = pair
    bars = timeline_data.timeline_bars(run.episodes(), color_by="outcome", max_bars=10 ** 6)
    assert dict(zip(bars["episode"], bars["category"])) == {ep["id"]: ep.get("outcome") or "none" for ep in raw.index}
    deaths = [e for e in raw.lives if e["event"] == "death"]
    marks = timeline_data.timeline_marks(run, max_per_kind=10 ** 6)
    dm = marks[marks["kind"] == "death"]
    assert sorted(zip(dm["step"], dm["life"])) == sorted((e["step"], e["life"]) for e in deaths)
    ov = runs_summary.runs_overview([run], run.path.parent).iloc[0]
    assert ov["deaths"] == len(deaths) and ov["lives"] == 1 + sum(e["event"] == "respawn" for e in raw.lives)
    manifest = json.loads((raw.path / "run.json").read_text())
    assert ov["seed"] == manifest["seed"] and ov["budget"] == manifest["step_budget"]
    failed = [ep["id"] for ep in raw.index if ep.get("outcome") == "failed"]
    assert sorted(run.episodes().loc[run.episodes()["outcome"] == "failed", "id"]) == sorted(failed)
