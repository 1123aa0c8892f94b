"""One episode recorder (``mfm.memory.episode_recorder``) for every player of the game: an Echo
learner run, which records through it as the agent's runner does, has its content index
(a ``seen.jsonl`` row for every episode with frames), the log's ``[SEEN]`` lines naming the
same cells, and the structured call and ending of each episode (format 1.3). Read here with
plain json and os, not with the loaders."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mfm.echo.agent import run_learner

SEEN_LINE = re.compile(r"^\[SEEN\] (\w+) at ((?:\(-?\d+, -?\d+\) ?)+)$", re.MULTILINE)
CELL = re.compile(r"\((-?\d+), (-?\d+)\)")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def learner_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A passive Echo learner run of two Echo episodes in the real game, seed 0."""
    return run_learner("passive", 0, tmp_path_factory.mktemp("echo") / "passive_s0", episodes=2)


def test_an_echo_run_has_a_seen_row_for_every_episode_with_frames(learner_run: Path) -> None:
    folders = sorted(os.listdir(learner_run / "episodes"))
    with_frames = [e for e in folders if os.path.isdir(learner_run / "episodes" / e / "frames")
                   and os.listdir(learner_run / "episodes" / e / "frames")]
    assert len(with_frames) >= 3, folders
    seen = jsonl(learner_run / "seen.jsonl")
    assert set(with_frames) <= {r["episode"] for r in seen}
    index = {r["id"]: r for r in jsonl(learner_run / "index.jsonl")}
    for r in seen:
        assert (r["life"], r["first_step"], r["last_step"]) == tuple(index[r["episode"]][k] for k in
                                                                     ("life", "first_step", "last_step"))


def test_the_echo_log_names_every_seen_cell_once(learner_run: Path) -> None:
    """The ``[SEEN]`` lines of the log name each (material, cell) of seen.jsonl exactly once."""
    named = [(m, (int(x), int(y))) for m, cells in SEEN_LINE.findall((learner_run / "logs.txt").read_text())
             for x, y in CELL.findall(cells)]
    assert named and len(named) == len(set(named))
    assert set(named) == {(r["material"], (x, y)) for r in jsonl(learner_run / "seen.jsonl") for x, y in r["cells"]}


def test_echo_episodes_record_their_call_and_ending_as_fields(learner_run: Path) -> None:
    """Each Echo episode's index row and outcome.json hold its call (the action, the
    arguments of action.json, the material it named) and its ending, as the agent's do."""
    assert json.loads((learner_run / "run.json").read_text())["schema_version"] == "1.3"
    rows = [r for r in jsonl(learner_run / "index.jsonl") if r["kind"] == "episode"]
    assert rows
    for r in rows:
        action = json.loads((learner_run / r["path"] / "action.json").read_text())
        outcome = json.loads((learner_run / r["path"] / "outcome.json").read_text())
        assert (outcome["action"], outcome["args"], outcome["label"], outcome["reason"]) == (
            r["action_kind"], action["args"], r["outcome"], r["reason"])
        assert outcome.get("material") == r.get("material") == action["args"].get("target")
        assert r["summary"].startswith(f"{r['action_kind']}(")
