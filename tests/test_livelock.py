"""The livelock of issue 23, reproduced on the real game and shown fixed.

A long run was seen turning 27,148 times at one env step: once every explore point had been
seen, the explore fallback was the point mirrored through the world's centre, which for a
player at the centre (32, 32) (where every life starts) is its own cell; the stuck handler
turned towards ``step % 4``, the same direction every time when no step is taken (and the
one the player already faced); and the runner had no cap on turns without an env step.
Each of the three is tested here on its own.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mfm.agent import Decision, MFMPolicy, RunConfig, Runner
from mfm.agent.explore import FALLBACK_MIN
from mfm.agent.mapping import DIRS, WORLD, l1
from mfm.agent.protocol import TurnReport
from mfm.agent.runner import MAX_TURNS_WITHOUT_STEP, stalled_reason
from mfm.agent.survival import FACINGS, STUCK_REPEATS
from mfm.envs import CrafterHarness, load_task
from mfm.envs.crafter_env import SPAWN
from mfm.validate import validate

ALL_CELLS = {(x, y) for x in range(WORLD[0]) for y in range(WORLD[1])}


def _policy() -> MFMPolicy:
    """A scripted MFM policy that has seen the whole map (every explore point)."""
    policy = MFMPolicy(load_task("diamond"), None)  # type: ignore[arg-type]  # explore targets need no procedures
    policy.head.seen = set(ALL_CELLS)
    return policy


def _face(runner: Runner, direction: str) -> None:
    """TEST-ONLY: turn the player on the spot (game internals), and perceive again."""
    runner.harness._env._player.facing = DIRS[direction]
    runner.body.perception = runner.harness._perceive(runner.harness._env.render())


def _seen_everything_and_seeking_a_diamond(runner: Runner) -> None:
    """TEST-ONLY: the state of the long run: the whole map seen, a diamond wanted and none known
    (so the policy explores), the player at the centre facing where ``step % 4`` points."""
    policy = runner.policy
    assert isinstance(policy, MFMPolicy)
    policy.head.seen = set(ALL_CELLS)
    policy._update_seen = lambda tools: None
    policy.targets.progress = lambda p, tools, facts, source: policy.recall.seek(p, ["diamond"], tools, facts,
                                                                                source, "find a diamond")
    _face(runner, FACINGS[runner.body.perception.step % 4])


def test_fallback_explore_target_is_never_the_players_own_cell() -> None:
    """With every explore point seen, the target is far from the player wherever it stands
    (before the fix it was (32, 32) for a player at (32, 32), an explore that took no step)."""
    harness = CrafterHarness(0)
    p = harness.reset()
    assert p.pos == SPAWN == (32, 32)
    policy = _policy()
    target = policy.explorer.target(p, {"tree"}, {})
    assert target != p.pos and l1(target, p.pos) >= FALLBACK_MIN, target
    for x in range(WORLD[0]):
        for y in range(WORLD[1]):
            here = dataclasses.replace(p, pos=(x, y))
            policy.head.explore_target = None
            target = policy.explorer.target(here, {"tree"}, {})
            assert l1(target, (x, y)) >= FALLBACK_MIN, ((x, y), target)
            assert 0 <= target[0] < WORLD[0] and 0 <= target[1] < WORLD[1]
    # A player far from the centre keeps the mirrored point (as before the fix) ...
    far = dataclasses.replace(p, pos=(10, 50))
    policy.head.explore_target = None
    assert policy.explorer.target(far, {"tree"}, {}) == (54, 14)
    # ... unless that point failed twice (e.g. no route to it): then another far point.
    policy.head.failed[(54, 14)] = 2
    policy.head.explore_target = None
    other = policy.explorer.target(far, {"tree"}, {})
    assert other != (54, 14) and l1(other, far.pos) >= FALLBACK_MIN


def test_stuck_handler_turns_another_way_when_no_step_was_taken(tmp_path: Path) -> None:
    """Stuck three turns in a row at one step, again and again: after its first
    ``STUCK_REPEATS`` tries (``step % 4``, as before, which keeps the samples identical) the
    handler turns another way each time (before the fix it chose the same one for ever)."""
    runner = Runner(RunConfig(seed=0, steps=50, out=tmp_path / "run", fixed_clock=True))
    runner.start()
    p = runner.body.perception
    policy = runner.policy
    directions = []
    for _ in range(STUCK_REPEATS + 4):
        policy.head.idle = 3
        d = policy.decide(p, runner.tools, None)
        assert d.name == "face" and d.goal == "stuck: turn around"
        directions.append(d.args["direction"])
    assert directions[:STUCK_REPEATS] == [FACINGS[p.step % 4]] * STUCK_REPEATS
    assert sorted(directions[STUCK_REPEATS - 1:]) == sorted(FACINGS + (FACINGS[p.step % 4],)), directions
    # a step taken starts the count again
    later = dataclasses.replace(p, step=p.step + 1)
    policy.head.idle = 3
    assert policy.decide(later, runner.tools, None).args["direction"] == FACINGS[later.step % 4]
    runner.finish("finished", "test")


def test_the_long_run_livelock_is_gone(tmp_path: Path) -> None:
    """The long run's state on the real game and the real runner: the whole map seen, a
    diamond wanted, the player at the spawn point facing the ``step % 4`` direction. Before the
    fix every turn took no env step, forever; now the player walks off at once."""
    runner = Runner(RunConfig(seed=0, steps=200, out=tmp_path / "run", fixed_clock=True))
    runner.start()
    _seen_everything_and_seeking_a_diamond(runner)
    assert runner.body.perception.pos == SPAWN
    rows = [runner.run_turn() for _ in range(12)]
    assert runner.harness.perception.step > 0
    assert rows[0].last_step > rows[0].first_step, "the first explore took no step"
    assert rows[0].action_kind == "explore", rows[0].summary
    runner.finish("finished", "test")
    assert not validate(runner.writer.dir).errors


def test_stuck_handler_alone_gets_the_player_moving(tmp_path: Path) -> None:
    """Even if every explore target took no step (the old fallback, put back for this test),
    the stuck handler now gets the player to take a step: it fires every third turn and
    rotates after its first ``STUCK_REPEATS`` tries; one of the next three moves the player."""
    runner = Runner(RunConfig(seed=0, steps=200, out=tmp_path / "run", fixed_clock=True))
    runner.start()
    _seen_everything_and_seeking_a_diamond(runner)
    runner.policy.explorer.fallback = lambda p: p.pos
    limit = 3 * (STUCK_REPEATS + 3) + 3
    for _ in range(limit):
        runner.run_turn()
        if runner.harness.perception.step > 0:
            break
    assert runner.harness.perception.step > 0, f"no env step in {limit} turns"
    runner.finish("finished", "test")


class NeverSteps(MFMPolicy):
    """A policy stub whose every decision takes no env step: it faces where it already faces.
    It gives up (the run crashes) after many turns, so that a runner without a cap fails the
    test instead of turning forever."""

    def __init__(self, runner: Runner, give_up_after: int) -> None:
        super().__init__(runner.task, runner.procedures)
        self.turns = 0
        self.give_up_after = give_up_after

    def play_turn(self, turn) -> TurnReport:
        self.turns += 1
        if self.turns > self.give_up_after:
            raise AssertionError(f"the runner let {self.turns} turns without an env step go by")
        facing = turn.perception.facing
        direction = next(k for k, v in DIRS.items() if v == facing)
        return TurnReport(Decision("atom", "face", {"direction": direction}, "face where I face"), None, None,
                          "state")


def test_runner_stops_after_turns_without_env_steps(tmp_path: Path) -> None:
    runner = Runner(RunConfig(seed=0, steps=500, out=tmp_path / "run", fixed_clock=True), max_idle_turns=20)
    runner.policy = NeverSteps(runner, give_up_after=200)
    out = runner.run()
    m = json.loads((out / "run.json").read_text())
    assert m["status"] == "interrupted" and m["end_reason"] == stalled_reason(20), m["end_reason"]
    assert "no env step" in m["end_reason"]
    assert m["last_step"] == 0 and runner.turn == 20 and runner.policy.turns == 20
    assert m["config"]["agent_summary"]["turns"] == 20
    checked = validate(out)
    assert not checked.errors, [str(e) for e in checked.errors]
    assert Runner(RunConfig(seed=0, steps=1, out=tmp_path / "other")).max_idle_turns == MAX_TURNS_WITHOUT_STEP


def test_turns_with_steps_reset_the_count(tmp_path: Path) -> None:
    """Only turns *in a row* without a step count: an ordinary run is not stopped."""
    runner = Runner(RunConfig(seed=0, steps=120, out=tmp_path / "run", fixed_clock=True), max_idle_turns=3)
    runner.run()
    assert runner.status == "finished" and runner.end_reason == "budget"
    assert runner.writer.manifest.last_step == 120 and runner.idle_turns < 3
