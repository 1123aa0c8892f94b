"""A deterministic Crafter harness with lives and an honest, local perception.

The harness wraps one real ``crafter.Env`` and exposes only what a player could see: the
rendered frame, its own position, facing, vitals and inventory, and the 9x7 window of tiles
that the frame shows. It never hands out crafter's ``info['semantic']`` (the whole world map).
When the player dies, :meth:`CrafterHarness.respawn` puts a new player into the same,
modified world, so knowledge of places stays useful across lives.
"""
from __future__ import annotations

import operator
import types
from dataclasses import dataclass
from typing import Any

import crafter
import numpy as np
from crafter import constants, objects

from mfm.envs import rules
from mfm.envs.decode import decode_frame, estimate_daylight

ACTIONS: tuple[str, ...] = tuple(constants.actions)
ACHIEVEMENTS: tuple[str, ...] = tuple(constants.achievements)
VITALS: tuple[str, ...] = rules.VITALS
ITEMS: tuple[str, ...] = tuple(name for name in constants.items if name not in VITALS)
DEATH_CAUSES: tuple[str, ...] = (
    "zombie", "skeleton", "arrow", "lava", "starvation", "thirst", "exhaustion", "unknown")

AREA = rules.AREA
VIEW = rules.VIEW
PERCEPTIONS = ("map", "pixels")
"""Sources of the live view and daylight: the world map, or the decoded frame."""
LOCAL_COLS, LOCAL_ROWS = rules.LOCAL_VIEW
HALF_COLS, HALF_ROWS = LOCAL_COLS // 2, LOCAL_ROWS // 2
OUTSIDE = "outside"

_OBJECT_NAMES: dict[type, str] = {
    objects.Player: "player",
    objects.Cow: "cow",
    objects.Zombie: "zombie",
    objects.Skeleton: "skeleton",
    objects.Arrow: "arrow",
    objects.Plant: "plant",
    objects.Fence: "fence",
}
_THREAT_RADIUS = 4
_VITAL_CAUSES = (("food", "starvation"), ("drink", "thirst"), ("energy", "exhaustion"))


def centre(area: tuple[int, int]) -> tuple[int, int]:
    """Where crafter starts the player in a world of ``area`` tiles, and respawns go nearest to."""
    return area[0] // 2, area[1] // 2


SPAWN = centre(AREA)
"""Where crafter puts the player at reset in a world of the default size ((32, 32))."""


@dataclass(frozen=True, eq=False)
class Perception:
    """Everything a policy may see after a step, and nothing more.

    ``local[dx + 4][dy + 3]`` is the name of the tile at world ``(x + dx, y + dy)`` for the
    player at ``pos == (x, y)``; it covers exactly the 9x7 map area drawn in ``frame``. It and
    ``daylight`` are read from the world, or decoded from ``frame`` (the harness's
    ``perception="pixels"``); everything else comes from the game's state.
    """

    step: int
    life: int
    frame: np.ndarray
    pos: tuple[int, int]
    facing: tuple[int, int]
    vitals: dict[str, int]
    inventory: dict[str, int]
    achievements: frozenset[str]
    local: tuple[tuple[str, ...], ...]
    daylight: float
    sleeping: bool
    area: tuple[int, int] = AREA
    """The world's size in tiles (a rule of the game the player knows)."""

    def tile(self, dx: int, dy: int) -> str:
        """Name of the tile at offset ``(dx, dy)`` from the player (|dx| <= 4, |dy| <= 3)."""
        if abs(dx) > HALF_COLS or abs(dy) > HALF_ROWS:
            raise ValueError(f"offset ({dx}, {dy}) is outside the {LOCAL_COLS}x{LOCAL_ROWS} view")
        return self.local[dx + HALF_COLS][dy + HALF_ROWS]

    def facing_tile(self) -> str:
        """Name of the tile the player faces (the target of ``do`` and ``place_*``)."""
        return self.tile(*self.facing)

    def local_cells(self) -> list[tuple[int, int, str]]:
        """World ``(x, y, name)`` of each visible cell; cells beyond the world edge are omitted."""
        x0, y0 = self.pos
        cells = []
        for i, column in enumerate(self.local):
            for j, name in enumerate(column):
                if name != OUTSIDE:
                    cells.append((x0 + i - HALF_COLS, y0 + j - HALF_ROWS, name))
        return cells


@dataclass(frozen=True, eq=False)
class StepResult:
    """Outcome of one :meth:`CrafterHarness.step`.

    ``achievements_unlocked`` lists achievements reached for the first time in this run
    (across lives). ``reward`` is crafter's own reward, whose unlock bonus counts per life.
    """

    perception: Perception
    reward: float
    terminated: bool
    truncated: bool
    died: bool
    death_cause: str | None
    achievements_unlocked: tuple[str, ...]
    step: int


@dataclass(frozen=True)
class _Threats:
    """The state that can hurt the player, recorded just before a step.

    ``order`` values are slots in the world's object list, which is also the order in
    which crafter updates the objects during the step.
    """

    pos: tuple[int, int]
    health: int
    sleeping: bool
    recover: float
    order: int
    zombies: tuple[tuple[objects.Zombie, int, int], ...]
    arrows: tuple[tuple[objects.Arrow, int], ...]


def action_index(action: int | str) -> int:
    """Crafter's index of an action given by name or by index."""
    if isinstance(action, str):
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; expected one of {ACTIONS}")
        return ACTIONS.index(action)
    if isinstance(action, bool):
        raise TypeError("an action must be a name or an integer index, not a bool")
    index = operator.index(action)
    if not 0 <= index < len(ACTIONS):
        raise ValueError(f"action index {index} is outside 0..{len(ACTIONS) - 1}")
    return index


def gymnasium_step(
    env: crafter.Env, action: int
) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
    """Step crafter and return Gymnasium's ``(obs, reward, terminated, truncated, info)``.

    This is the only place where crafter's 4-tuple is converted. With ``length=None``
    crafter reports ``done`` as ``None`` while the player lives; it is cast to ``False``.
    ``terminated`` means the player died, ``truncated`` that crafter's length ran out.
    """
    obs, reward, done, info = env.step(action)
    done = bool(done)
    terminated = done and info["discount"] == 0.0
    truncated = done and not terminated
    return obs, float(reward), terminated, truncated, info


def _balance_chunk_in_order(self: crafter.Env, chunk: tuple[int, ...], objs: Any) -> None:
    """Crafter's creature balancing, fed the chunk's objects in a fixed (position) order.

    Crafter iterates a set whose order follows memory addresses, which makes runs with the
    same seed diverge; sorting by position makes them reproducible.
    """
    ordered = sorted(objs, key=lambda obj: (int(obj.pos[0]), int(obj.pos[1])))
    crafter.Env._balance_chunk(self, chunk, ordered)


def _local_window(world: Any, pos: np.ndarray) -> tuple[tuple[str, ...], ...]:
    """Tile names of the 9x7 window around ``pos``, objects taking precedence over ground."""
    px, py = int(pos[0]), int(pos[1])
    width, height = world.area
    x0, y0 = px - HALF_COLS, py - HALF_ROWS
    xa, xb = max(x0, 0), min(x0 + LOCAL_COLS, width)
    ya, yb = max(y0, 0), min(y0 + LOCAL_ROWS, height)
    materials = world._mat_map[xa:xb, ya:yb].tolist()
    indices = world._obj_map[xa:xb, ya:yb].tolist()
    names = world._mat_names
    columns = []
    for i in range(LOCAL_COLS):
        x = x0 + i
        column = []
        for j in range(LOCAL_ROWS):
            y = y0 + j
            if not (xa <= x < xb and ya <= y < yb):
                column.append(OUTSIDE)
                continue
            index = indices[x - xa][y - ya]
            if index:
                obj = world._objects[index]
                column.append(_OBJECT_NAMES.get(type(obj), type(obj).__name__.lower()))
            else:
                column.append(names[materials[x - xa][y - ya]])
        columns.append(tuple(column))
    return tuple(columns)


def nearest_cell(mask: np.ndarray, target: tuple[int, int]) -> tuple[int, int] | None:
    """The cell of ``mask`` (a boolean x-by-y array) closest to ``target`` (Euclidean; ties:
    smaller x, then y); None if the mask holds none."""
    xs, ys = np.nonzero(mask)
    if xs.size == 0:
        return None
    best = np.lexsort((ys, xs, (xs - target[0]) ** 2 + (ys - target[1]) ** 2))[0]
    return int(xs[best]), int(ys[best])


def _nearest_free_tile(world: Any, target: tuple[int, int]) -> tuple[int, int]:
    """The walkable tile without an object closest to ``target`` (ties: smaller x, then y)."""
    walkable = [world._mat_ids[name] for name in constants.walkable]
    cell = nearest_cell(np.isin(world._mat_map, walkable) & (world._obj_map == 0), target)
    if cell is None:
        raise RuntimeError("no free walkable tile left in the world")
    return cell


def _record_threats(env: crafter.Env) -> _Threats:
    """Note the player's state and the nearby zombies and arrows before a step."""
    world = env._world
    player = env._player
    px, py = int(player.pos[0]), int(player.pos[1])
    zombies, arrows = [], []
    for obj in world.objects:
        ox, oy = int(obj.pos[0]), int(obj.pos[1])
        if abs(ox - px) + abs(oy - py) > _THREAT_RADIUS:
            continue
        order = int(world._obj_map[ox, oy])
        if isinstance(obj, objects.Zombie):
            zombies.append((obj, int(obj.cooldown), order))
        elif isinstance(obj, objects.Arrow):
            arrows.append((obj, order))
    return _Threats(
        pos=(px, py), health=int(player.health), sleeping=bool(player.sleeping),
        recover=float(player._recover), order=int(world._obj_map[px, py]),
        zombies=tuple(zombies), arrows=tuple(arrows))


def _damage_events(env: crafter.Env, threats: _Threats) -> list[tuple[int, int, str]]:
    """Health changes of the last step as ``(update order, damage, cause)``.

    A zombie that hit went from cooldown 0 to 5 (2 damage, 7 on a sleeper). An arrow that
    hit vanished with the player's cell in front of it (2 damage). Deprivation costs 1
    health when the player's recovery counter falls below -15 while a vital is at 0, and
    recovery above 25 gives 1 back; both reset the counter to 0.
    """
    player = env._player
    pos = (int(player.pos[0]), int(player.pos[1]))
    events = []
    for zombie, cooldown, order in threats.zombies:
        if cooldown == 0 and zombie.cooldown == 5:
            asleep = threats.sleeping if order < threats.order else bool(player.sleeping)
            events.append((order, 7 if asleep else 2, "zombie"))
    for arrow, order in threats.arrows:
        target = (int(arrow.pos[0] + arrow.facing[0]), int(arrow.pos[1] + arrow.facing[1]))
        if arrow.removed and target == (threats.pos if order < threats.order else pos):
            events.append((order, 2, "arrow"))
    if player._recover == 0 and threats.recover < -14:
        starved = [cause for vital, cause in _VITAL_CAUSES if player.inventory[vital] <= 0]
        events.append((threats.order, 1, starved[0] if starved else "unknown"))
    if player._recover == 0 and threats.recover > 24:
        events.append((threats.order, -1, "recovery"))
    return sorted(events, key=lambda event: event[0])


def _infer_death_cause(env: crafter.Env, threats: _Threats) -> str:
    """Which of crafter's damage sources dealt the fatal blow during the last step.

    Lava kills on entry. Otherwise the step's damage events are replayed in crafter's
    update order from the health before the step; the one that brings it to 0 is the cause.
    Arrows are only shot by skeletons, and are reported as ``"arrow"``.
    """
    player = env._player
    pos = (int(player.pos[0]), int(player.pos[1]))
    if env._world[pos][0] == "lava":
        return "lava"
    events = _damage_events(env, threats)
    health = threats.health
    for _, damage, cause in events:
        health = min(max(health - damage, 0), constants.items["health"]["max"])
        if health == 0:
            return cause
    harmful = [cause for _, damage, cause in events if damage > 0]
    if harmful:
        return harmful[-1]
    for zombie, _, _ in threats.zombies:
        if not zombie.removed and player.distance(zombie) <= 1:
            return "zombie"
    for vital, cause in _VITAL_CAUSES:
        if player.inventory[vital] <= 0:
            return cause
    return "unknown"


class CrafterHarness:
    """One Crafter world for one seed, stepped deterministically, with lives.

    ``reset()`` always rebuilds the same pristine world for the seed. After a death,
    ``respawn()`` continues in the same, modified world; the step counter (and so the
    day/night cycle) keeps running and achievements accumulate over the whole run.

    ``perception`` says where :attr:`Perception.local` and :attr:`Perception.daylight` come
    from: ``map`` (default) cuts the 9x7 window from the world's material and object maps and
    reads the world's daylight; ``pixels`` decodes both from the rendered frame
    (:func:`~mfm.envs.decode.estimate_daylight`, then :func:`~mfm.envs.decode.decode_frame`),
    as a player looking at the screen would, misreadings at night included. The game itself
    is the same either way (decoding renders nothing).

    ``kit``: items (name, count) put in the player's inventory at the start of every life
    (:attr:`~mfm.envs.rules.Task.kit`).
    """

    def __init__(self, seed: int, size: int = 64, perception: str = "map", area: tuple[int, int] = AREA,
                 kit: tuple[tuple[str, int], ...] = ()) -> None:
        if perception not in PERCEPTIONS:
            raise ValueError(f"unknown perception {perception!r}; expected one of {', '.join(PERCEPTIONS)}")
        self._seed = int(seed)
        self._size = int(size)
        self._source = perception
        self._area = (int(area[0]), int(area[1]))
        self._kit = tuple(kit)
        self._env = crafter.Env(
            area=self._area, view=VIEW, size=(self._size, self._size),
            reward=True, length=None, seed=self._seed)
        self._env._balance_chunk = types.MethodType(_balance_chunk_in_order, self._env)
        self._life = 0
        self._achievements: set[str] = set()
        self._dead = False
        self._perception: Perception | None = None

    @property
    def seed(self) -> int:
        """The world seed."""
        return self._seed

    @property
    def perception_source(self) -> str:
        """``map`` or ``pixels``: where the live view and daylight come from."""
        return self._source

    @property
    def area(self) -> tuple[int, int]:
        """The world's size in tiles."""
        return self._area

    @property
    def size(self) -> int:
        """Frame width and height in pixels."""
        return self._size

    @property
    def life(self) -> int:
        """Index of the current life (0 for the first)."""
        return self._life

    @property
    def step_count(self) -> int:
        """Steps taken since reset, counted across lives."""
        self._require_started()
        return int(self._env._step)

    @property
    def dead(self) -> bool:
        """True after a fatal step until :meth:`respawn`."""
        return self._dead

    @property
    def achievements(self) -> frozenset[str]:
        """Achievements unlocked so far in this run, over all lives."""
        return frozenset(self._achievements)

    @property
    def perception(self) -> Perception:
        """The latest perception."""
        self._require_started()
        assert self._perception is not None
        return self._perception

    def reset(self) -> Perception:
        """Build this seed's world from scratch: step 0, life 0, no achievements."""
        self._env._episode = 0
        frame = self._env.reset()
        self._life = 0
        self._achievements = set()
        self._dead = False
        if self._kit:
            self._equip(self._env._player)
            frame = self._env.render()
        return self._perceive(frame)

    def _equip(self, player: Any) -> None:
        """Give a new player the kit."""
        for item, count in self._kit:
            player.inventory[item] = count

    def step(self, action: int | str) -> StepResult:
        """Apply one action (name or index) and report what the player perceives."""
        self._require_started()
        if self._dead:
            raise RuntimeError("the player is dead: call respawn() before stepping on")
        index = action_index(action)
        threats = _record_threats(self._env)
        frame, reward, terminated, truncated, _ = gymnasium_step(self._env, index)
        cause = _infer_death_cause(self._env, threats) if terminated else None
        unlocked = self._update_achievements()
        self._dead = terminated
        perception = self._perceive(frame)
        return StepResult(
            perception=perception, reward=reward, terminated=terminated,
            truncated=truncated, died=terminated, death_cause=cause,
            achievements_unlocked=unlocked, step=perception.step)

    def respawn(self) -> Perception:
        """Put a new player on the free walkable tile nearest to the centre of the same world."""
        self._require_started()
        if not self._dead:
            raise RuntimeError("respawn() is only allowed after the player died")
        env = self._env
        world = env._world
        world.remove(env._player)
        player = objects.Player(world, _nearest_free_tile(world, centre(self._area)))
        world.add(player)
        for obj in world.objects:
            if hasattr(obj, "player"):
                obj.player = player
        env._player = player
        self._equip(player)
        env._last_health = player.health
        env._unlocked = set()
        self._life += 1
        self._dead = False
        return self._perceive(env.render())

    def _require_started(self) -> None:
        if self._perception is None:
            raise RuntimeError("call reset() first")

    def _update_achievements(self) -> tuple[str, ...]:
        counts = self._env._player.achievements
        new = tuple(
            name for name in ACHIEVEMENTS
            if counts[name] > 0 and name not in self._achievements)
        self._achievements.update(new)
        return new

    def _perceive(self, frame: np.ndarray) -> Perception:
        env = self._env
        player = env._player
        image = np.ascontiguousarray(frame, dtype=np.uint8)
        image.setflags(write=False)
        inventory = player.inventory
        if self._source == "pixels":
            daylight = estimate_daylight(image)
            local = tuple(tuple(column) for column in decode_frame(image, daylight))
        else:
            daylight = float(env._world.daylight)
            local = _local_window(env._world, player.pos)
        perception = Perception(
            step=int(env._step),
            life=self._life,
            frame=image,
            pos=(int(player.pos[0]), int(player.pos[1])),
            facing=(int(player.facing[0]), int(player.facing[1])),
            vitals={name: int(inventory[name]) for name in VITALS},
            inventory={name: int(inventory[name]) for name in ITEMS},
            achievements=frozenset(self._achievements),
            local=local,
            daylight=daylight,
            sleeping=bool(player.sleeping),
            area=self._area,
        )
        self._perception = perception
        return perception
