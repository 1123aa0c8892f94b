"""Tests of the Crafter harness (mfm.envs) against the real game."""
from __future__ import annotations

import collections
import dataclasses
import inspect
import time

import crafter
import numpy as np
import pytest
from crafter import constants, objects

from mfm.envs import (
    ACTIONS,
    CrafterHarness,
    Perception,
    StepResult,
    Task,
    decode_frame,
    decode_inventory,
    estimate_daylight,
    load_rules,
    load_task,
)
from mfm.envs.crafter_env import DEATH_CAUSES, gymnasium_step

SEMANTIC_OBJECTS = ("player", "cow", "zombie", "skeleton", "arrow", "plant")
MOVES = {"move_left": (-1, 0), "move_right": (1, 0), "move_up": (0, -1), "move_down": (0, 1)}
LAVA_SEED = 7


def ground_truth_local(harness: CrafterHarness) -> list[list[str]]:
    """TEST-ONLY ground truth: the 9x7 window cut from crafter's full semantic map."""
    env = harness._env
    semantic = env._sem_view()
    names = {index: name for name, index in env._world._mat_ids.items() if name}
    first_object = len(env._world._mat_ids)
    names.update({first_object + i: name for i, name in enumerate(SEMANTIC_OBJECTS)})
    x, y = (int(v) for v in env._player.pos)
    window = np.pad(semantic, ((4, 4), (3, 3)))[x:x + 9, y:y + 7]
    return [[names.get(int(v), "outside") for v in column] for column in window]


def material_map(harness: CrafterHarness) -> np.ndarray:
    """TEST-ONLY copy of the world's material array."""
    return harness._env._world._mat_map.copy()


def random_actions(seed: int, count: int) -> list[int]:
    """Mostly moves and ``do``, with some of every other action."""
    rng = np.random.default_rng(seed)
    weights = np.ones(len(ACTIONS))
    for name in ("move_left", "move_right", "move_up", "move_down", "do"):
        weights[ACTIONS.index(name)] = 6.0
    return [int(a) for a in rng.choice(len(ACTIONS), size=count, p=weights / weights.sum())]


def play(harness: CrafterHarness, actions: list[int]) -> list[StepResult]:
    """Step through ``actions``, respawning after every death."""
    results = []
    for action in actions:
        result = harness.step(action)
        results.append(result)
        if result.died:
            harness.respawn()
    return results


def agreement(a: list[list[str]], b: list[list[str]], centre: bool = False) -> tuple[int, int]:
    """Matching tiles and compared tiles of two 9x7 grids (optionally the central 5x5)."""
    cols, rows = (range(2, 7), range(1, 6)) if centre else (range(9), range(7))
    hits = sum(a[i][j] == b[i][j] for i in cols for j in rows)
    return hits, len(cols) * len(rows)


def test_actions_and_parsing() -> None:
    assert ACTIONS == tuple(constants.actions) and len(ACTIONS) == 17
    harness = CrafterHarness(seed=3)
    with pytest.raises(RuntimeError):
        harness.step("noop")
    first = harness.reset()
    assert first.step == 0 and first.life == 0 and first.achievements == frozenset()
    assert first.frame.shape == (64, 64, 3) and first.frame.dtype == np.uint8
    by_name = harness.step("move_left")
    by_index = harness.step(ACTIONS.index("move_right"))
    assert (by_name.step, by_index.step) == (1, 2)
    for bad in ("fly", 17, -1, True, 2.5):
        with pytest.raises((ValueError, TypeError)):
            harness.step(bad)
    assert harness.step_count == 2
    obs, reward, terminated, truncated, info = gymnasium_step(harness._env, 0)
    assert terminated is False and truncated is False
    assert isinstance(reward, float) and obs.shape == (64, 64, 3) and "semantic" in info


def test_determinism_same_seed_same_game() -> None:
    actions = random_actions(seed=11, count=500)
    assert {ACTIONS[a] for a in actions} >= {"noop", "do", "place_table", "place_stone", *MOVES}
    first, second, other = CrafterHarness(5), CrafterHarness(5), CrafterHarness(6)
    p1, p2, p3 = first.reset(), second.reset(), other.reset()
    assert np.array_equal(p1.frame, p2.frame) and p1.local == p2.local
    assert not np.array_equal(p1.frame, p3.frame)
    for action in actions:
        r1, r2 = first.step(action), second.step(action)
        assert np.array_equal(r1.perception.frame, r2.perception.frame), r1.step
        assert r1.perception.pos == r2.perception.pos and r1.perception.local == r2.perception.local
        assert (r1.reward, r1.died, r1.death_cause) == (r2.reward, r2.died, r2.death_cause)
        if r1.died:
            first.respawn()
            second.respawn()
    assert np.array_equal(material_map(first), material_map(second))
    assert first.achievements == second.achievements
    assert first.step_count == second.step_count == 500


def _assert_local_sized(value: object, field: str) -> None:
    """Every container inside a perception is at most the 9x7 window."""
    if isinstance(value, np.ndarray):
        raise AssertionError(f"{field}: unexpected array of shape {value.shape}")
    if isinstance(value, (tuple, list, frozenset, set)):
        assert len(value) <= 22, field
        for item in value:
            _assert_local_sized(item, field)
    elif isinstance(value, dict):
        assert len(value) <= 16, field
        for item in value.values():
            _assert_local_sized(item, field)
    else:
        assert isinstance(value, (int, float, str, bool)), (field, type(value))


def test_perception_is_honest_and_local() -> None:
    expected_fields = {
        "step", "life", "frame", "pos", "facing", "vitals", "inventory", "achievements",
        "local", "daylight", "sleeping", "area"}
    assert {f.name for f in dataclasses.fields(Perception)} == expected_fields
    assert {f.name for f in dataclasses.fields(StepResult)} == {
        "perception", "reward", "terminated", "truncated", "died", "death_cause",
        "achievements_unlocked", "step"}
    harness = CrafterHarness(seed=1)
    perception = harness.reset()
    checked = 0
    for action in random_actions(seed=2, count=260):
        assert set(vars(perception)) == expected_fields
        assert perception.frame.shape == (64, 64, 3) and not perception.frame.flags.writeable
        assert len(perception.local) == 9 and all(len(col) == 7 for col in perception.local)
        assert perception.local[4][3] == "player"
        assert perception.area == (64, 64), "the world's size, a rule of the game, not a view of it"
        for field in expected_fields - {"frame"}:
            _assert_local_sized(getattr(perception, field), field)
        assert set(perception.vitals) == {"health", "food", "drink", "energy"}
        assert "health" not in perception.inventory and "wood" in perception.inventory
        assert [list(col) for col in perception.local] == ground_truth_local(harness)
        x, y = perception.pos
        cells = perception.local_cells()
        assert (x, y, "player") in cells and len(cells) <= 63
        assert all(abs(cx - x) <= 4 and abs(cy - y) <= 3 for cx, cy, _ in cells)
        assert perception.facing_tile() == perception.local[4 + perception.facing[0]][
            3 + perception.facing[1]]
        checked += 1
        result = harness.step(action)
        if result.died:
            harness.respawn()
        perception = harness.perception
    assert checked == 260


@pytest.fixture(scope="module")
def decoding_run() -> list[tuple[Perception, list[list[str]]]]:
    """Perceptions and ground-truth windows over a day and most of a night, three seeds."""
    samples = []
    for seed in (21, 22, 23):
        harness = CrafterHarness(seed)
        samples.append((harness.reset(), ground_truth_local(harness)))
        for action in random_actions(seed=seed, count=270):
            result = harness.step(action)
            samples.append((result.perception, ground_truth_local(harness)))
            if result.died:
                samples.append((harness.respawn(), ground_truth_local(harness)))
    return samples


def test_decode_frame_day_and_night(decoding_run) -> None:
    counts = collections.defaultdict(lambda: np.zeros(4, int))
    seconds = []
    for perception, truth in decoding_run:
        start = time.perf_counter()
        decoded = decode_frame(perception.frame, perception.daylight)
        seconds.append(time.perf_counter() - start)
        light = "day" if perception.daylight > 0.5 else "night"
        key = f"{light}-sleeping" if perception.sleeping else light
        counts[key] += [*agreement(decoded, truth), *agreement(decoded, truth, centre=True)]
        if light == "day":
            counts["all-day"] += [*agreement(decoded, truth), *agreement(decoded, truth, True)]
    rates = {key: (c[0] / c[1], c[2] / c[3], c[1] // 63) for key, c in counts.items()}
    for key, (full, centre, frames) in sorted(rates.items()):
        print(f"\ndecode {key}: full view {full:.4f}, central 5x5 {centre:.4f}, {frames} frames")
    print(f"decode time per 64x64 frame: median {1000 * np.median(seconds[1:]):.2f} ms")
    assert rates["all-day"][2] >= 300 and rates["night"][2] >= 100
    assert rates["all-day"][0] >= 0.99
    assert rates["night"][1] >= 0.95 and rates["night"][0] >= 0.9


def test_decode_without_daylight_and_inventory(decoding_run) -> None:
    errors, hits, total = [], 0, 0
    for perception, truth in decoding_run[::3]:
        estimate = estimate_daylight(perception.frame)
        errors.append(abs(estimate - perception.daylight))
        if perception.daylight > 0.5:
            h, n = agreement(decode_frame(perception.frame), truth)
            hits, total = hits + h, total + n
        seen = decode_inventory(perception.frame)
        assert seen == {**perception.vitals, **perception.inventory}
    print(f"\ndaylight estimate error: mean {np.mean(errors):.3f}, max {np.max(errors):.3f}; "
          f"day decoding with estimated light {hits / total:.4f}")
    assert np.max(errors) < 0.15
    assert hits / total >= 0.99


def _free_neighbour(harness: CrafterHarness, materials: tuple[str, ...]) -> tuple[int, int]:
    """TEST-ONLY: a free cell next to the player whose ground is one of ``materials``."""
    world = harness._env._world
    x, y = harness.perception.pos
    for dx, dy in MOVES.values():
        material, obj = world[(x + dx, y + dy)]
        if obj is None and material in materials:
            return x + dx, y + dy
    raise AssertionError("no free neighbour cell")


def _clear_threats(harness: CrafterHarness) -> None:
    """TEST-ONLY: remove every zombie, skeleton and arrow, so one staged attack is alone."""
    world = harness._env._world
    for obj in world.objects:
        if isinstance(obj, (objects.Zombie, objects.Skeleton, objects.Arrow)):
            world.remove(obj)


def _expected_spawn_distance(harness: CrafterHarness) -> float:
    """TEST-ONLY: distance from (32, 32) of the nearest walkable cell free of live objects."""
    world = harness._env._world
    walkable = [world._mat_ids[name] for name in constants.walkable]
    occupied = world._obj_map != 0
    occupied[tuple(harness._env._player.pos)] = False
    free = np.isin(world._mat_map, walkable) & ~occupied
    xs, ys = np.nonzero(free)
    return float(np.sqrt(((xs - 32) ** 2 + (ys - 32) ** 2).min()))


def _respawn_and_check(harness: CrafterHarness, death: StepResult) -> Perception:
    """Respawn and check that the world, clock and run-level state carried over."""
    assert death.died and death.terminated and not death.truncated
    assert death.death_cause in DEATH_CAUSES
    assert death.perception.vitals["health"] == 0 and harness.dead
    with pytest.raises(RuntimeError):
        harness.step("noop")
    before = material_map(harness)
    achievements = harness.achievements
    life = harness.life
    expected_distance = _expected_spawn_distance(harness)
    perception = harness.respawn()
    assert perception.life == life + 1 and perception.step == death.step
    assert np.array_equal(before, material_map(harness))
    assert np.hypot(perception.pos[0] - 32, perception.pos[1] - 32) == pytest.approx(
        expected_distance)
    assert perception.vitals == {"health": 9, "food": 9, "drink": 9, "energy": 9}
    assert perception.achievements == achievements
    assert [list(col) for col in perception.local] == ground_truth_local(harness)
    player = harness._env._player
    for obj in harness._env._world.objects:
        if isinstance(obj, (objects.Zombie, objects.Skeleton)):
            assert obj.player is player
    with pytest.raises(RuntimeError):
        harness.respawn()
    return perception


def _walk_into_lava(harness: CrafterHarness, limit: int = 200) -> StepResult:
    """Walk honestly to the nearest lava (found with TEST-ONLY ground truth) and step in."""
    world = harness._env._world
    for _ in range(limit):
        start = harness.perception.pos
        parents = {start: None}
        queue = collections.deque([start])
        goal = None
        while queue and goal is None:
            cell = queue.popleft()
            for dx, dy in MOVES.values():
                nxt = (cell[0] + dx, cell[1] + dy)
                if nxt in parents or not (0 <= nxt[0] < 64 and 0 <= nxt[1] < 64):
                    continue
                material, obj = world[nxt]
                if material == "lava" and obj is None:
                    parents[nxt], goal = cell, nxt
                    break
                if material in constants.walkable and obj is None:
                    parents[nxt] = cell
                    queue.append(nxt)
        assert goal is not None, "no reachable lava"
        cell = goal
        while parents[cell] != start:
            cell = parents[cell]
        step = (cell[0] - start[0], cell[1] - start[1])
        result = harness.step(next(name for name, d in MOVES.items() if d == step))
        if result.died:
            return result
    raise AssertionError("did not reach lava")


def test_lives_death_causes_and_respawn() -> None:
    harness = CrafterHarness(seed=LAVA_SEED)
    harness.reset()
    unlocked = []
    death = _walk_into_lava(harness)
    assert death.death_cause == "lava" and death.step < 60
    _respawn_and_check(harness, death)

    for _ in range(3):
        unlocked += harness.step("do").achievements_unlocked
    player = harness._env._player
    player.inventory["food"], player.health, player._recover = 0, 1, -15
    death = harness.step("noop")
    assert death.death_cause == "starvation"
    _respawn_and_check(harness, death)

    player = harness._env._player
    player.inventory["drink"], player.health, player._recover = 0, 1, -15
    death = harness.step("noop")
    assert death.death_cause == "thirst"
    _respawn_and_check(harness, death)

    world = harness._env._world
    player = harness._env._player
    player.health = 2
    _clear_threats(harness)
    world.add(objects.Zombie(world, _free_neighbour(harness, ("grass", "sand", "path")), player))
    for _ in range(30):
        death = harness.step("noop")
        if death.died:
            break
    assert death.death_cause == "zombie"
    _respawn_and_check(harness, death)

    player = harness._env._player
    player.health = 2
    _clear_threats(harness)
    cell = _free_neighbour(harness, ("grass", "sand", "path", "water", "lava"))
    facing = (player.pos[0] - cell[0], player.pos[1] - cell[1])
    world.add(objects.Arrow(world, cell, facing))
    death = harness.step("noop")
    assert death.death_cause == "arrow"
    perception = _respawn_and_check(harness, death)
    assert perception.life == 5

    step = perception.step
    for i, action in enumerate(random_actions(seed=4, count=50)):
        result = harness.step(action)
        assert result.step == step + i + 1 and result.perception.life == 5
        assert not result.died
        unlocked += result.achievements_unlocked
    assert set(unlocked) <= harness.achievements
    assert len(unlocked) == len(set(unlocked))


def test_reset_rebuilds_the_same_world() -> None:
    harness = CrafterHarness(seed=LAVA_SEED)
    first = harness.reset()
    pristine = material_map(harness)
    for action in random_actions(seed=9, count=40):
        harness.step(action)
    again = harness.reset()
    assert np.array_equal(pristine, material_map(harness))
    assert np.array_equal(first.frame, again.frame) and again.step == 0 and again.life == 0


def test_rules_and_tasks() -> None:
    diamond = load_task("diamond")
    assert isinstance(diamond, Task) and diamond.budget == 12000
    assert diamond.milestones == (
        "collect_wood", "place_table", "make_wood_pickaxe", "collect_stone",
        "make_stone_pickaxe", "place_furnace", "collect_coal", "collect_iron",
        "make_iron_pickaxe", "collect_diamond")
    everything = load_task("all")
    assert everything.budget == 36000 and len(everything.milestones) == 22
    assert everything.milestones == tuple(constants.achievements)
    assert set(diamond.milestones) <= set(everything.milestones)
    with pytest.raises(KeyError):
        load_task("nether")
    rules = load_rules()
    assert tuple(rules["actions"]) == ACTIONS
    assert rules["achievements"] == list(constants.achievements)
    assert rules["walkable"] == list(constants.walkable)
    for name, info in constants.collect.items():
        assert rules["collect"][name]["require"] == dict(info["require"])
        assert rules["collect"][name]["receive"] == dict(info["receive"])
        assert rules["collect"][name]["leaves"] == info["leaves"]
    for name, info in constants.place.items():
        assert rules["place"][name]["uses"] == dict(info["uses"])
        assert rules["place"][name]["where"] == list(info["where"])
    for name, info in constants.make.items():
        assert rules["make"][name]["uses"] == dict(info["uses"])
        assert rules["make"][name]["nearby"] == list(info["nearby"])
    assert rules["collect"]["diamond"]["require"] == {"iron_pickaxe": 1}


def test_the_game_rules_have_one_home() -> None:
    """The view sizes, walkable tiles and mining tools live in rules.json (read through
    mfm.envs.rules), agree with crafter, and are what the harness, the frame decoder and the
    agent's map use."""
    from mfm.agent import atoms, mapping
    from mfm.envs import crafter_env, decode, rules as game

    rules = load_rules()
    defaults = inspect.signature(crafter.Env).parameters
    assert tuple(rules["area"]) == tuple(defaults["area"].default) == game.AREA
    assert tuple(rules["view"]) == tuple(defaults["view"].default) == game.VIEW
    env = crafter.Env(area=game.AREA, view=game.VIEW, size=(64, 64))
    assert tuple(int(n) for n in env._local_view._grid) == game.LOCAL_VIEW == (9, 7)
    assert (crafter_env.LOCAL_COLS, crafter_env.LOCAL_ROWS) == (decode.GRID_COLS, decode.GRID_ROWS) == game.LOCAL_VIEW
    assert (crafter_env.AREA, crafter_env.VIEW) == (game.AREA, game.VIEW) and mapping.WORLD == game.AREA
    assert mapping.WALKABLE == frozenset(constants.walkable) == frozenset(game.WALKABLE)
    assert game.PLAYER_WALKABLE == (*constants.walkable, "lava")
    assert mapping.MINE_TOOL == {m: t for m, info in constants.collect.items() for t in info["require"]}
    assert set(atoms.PICKAXES) == {t for t in constants.items if t.endswith("_pickaxe")}
    assert crafter_env.VITALS == game.VITALS == tuple(rules["vitals"])
    env.reset()
    assert crafter_env.SPAWN == tuple(int(v) for v in env._player.pos) == (game.AREA[0] // 2, game.AREA[1] // 2)
    from mfm.agent import explore, head

    assert (head.HALF_COLS, head.HALF_ROWS) == (crafter_env.HALF_COLS, crafter_env.HALF_ROWS) == (4, 3)
    assert explore.lattice(game.AREA)[0] == (explore.EDGE, explore.EDGE)
    assert explore.lattice(game.AREA)[-1] == (game.AREA[0] - 4, game.AREA[1] - 4) == (60, 60)
