"""Loaders for the static game rules and task definitions kept as JSON package data."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Reach:
    """A temporal-reach task's world (:mod:`mfm.envs.reach`): ``material`` exists in one
    cell, in view of the start, which lies ``distance`` (L1, min and max) from the world's
    centre; collecting it does nothing before env step ``delay``."""

    material: str
    delay: int
    distance: tuple[int, int] = (14, 22)


@dataclass(frozen=True)
class Task:
    """A named goal: achievements to reach in order, and a default step budget.

    ``reach``: the temporal-reach arrangement of the world (None: crafter's world as
    generated). ``notes_tokens``: the budget of GUIDE.md, in tokens estimated as characters
    / 4, the same for every method (None: unbounded). ``kit``: items (name, count) the
    player holds at the start of every life, so that a task can begin past the tech tree
    (the ``ore-*`` tasks: find and mine one ore with the pickaxe it needs in hand)."""

    name: str
    milestones: tuple[str, ...]
    budget: int
    reach: Reach | None = None
    notes_tokens: int | None = None
    kit: tuple[tuple[str, int], ...] = ()


def _read_json(filename: str) -> Any:
    """Parse one JSON file from the package data directory."""
    return json.loads((DATA_DIR / filename).read_text(encoding="utf-8"))


def load_rules() -> dict[str, Any]:
    """Return a fresh copy of Crafter's static rules (recipes, tools, walkable tiles).

    Keys: ``area`` (world size in tiles), ``view`` (the frame's grid of tiles, columns x
    rows) and ``local_view`` (its map part around the player; the rows below show the
    inventory), ``actions``, ``materials``, ``walkable``, ``player_walkable``, ``deadly``,
    ``items``, ``vitals``, ``collect`` (material -> require/receive/leaves/probability),
    ``place`` (item -> uses/where/type/target), ``make`` (tool -> uses/nearby/gives/
    nearby_radius) and ``achievements``.
    """
    return _read_json("rules.json")


_RULES = load_rules()


def _pair(key: str) -> tuple[int, int]:
    """A ``[columns, rows]`` entry of the rules as a pair of ints."""
    cols, rows = _RULES[key]
    return int(cols), int(rows)


AREA: tuple[int, int] = _pair("area")
"""The world's size in tiles (crafter's ``area``)."""
VIEW: tuple[int, int] = _pair("view")
"""The rendered frame's grid of tiles, columns x rows (crafter's ``view``)."""
LOCAL_VIEW: tuple[int, int] = _pair("local_view")
"""The map part of the frame around the player, columns x rows (the 9x7 local view)."""
WALKABLE: tuple[str, ...] = tuple(_RULES["walkable"])
"""Materials creatures (and the player) walk on."""
PLAYER_WALKABLE: tuple[str, ...] = tuple(_RULES["player_walkable"])
"""Materials the player can step on (lava too, which kills)."""
VITALS: tuple[str, ...] = tuple(_RULES["vitals"])
"""The player's vitals, in inventory order."""
CONTENT: tuple[str, ...] = tuple(m for m in _RULES["materials"] if m not in WALKABLE)
"""Materials an index of what frames showed records (every one but the ground walked on)."""
MINE_TOOL: dict[str, str] = {material: tool for material, r in _RULES["collect"].items() for tool in r["require"]}
"""Material -> the tool that collecting it requires (only materials that need one)."""


def load_task(name: str) -> Task:
    """Load the task called ``name`` (``diamond``, ``all``, ``reach-1000`` ...: ``tasks.json``).

    A task may name another as its ``base`` and take its milestones and budget from it."""
    tasks = _read_json("tasks.json")
    if name not in tasks:
        raise KeyError(f"unknown task {name!r}; known tasks: {sorted(tasks)}")
    entry = tasks[name]
    if "base" in entry:
        entry = {**tasks[entry["base"]], **entry}
    reach = entry.get("reach")
    kit = tuple(sorted((str(k), int(v)) for k, v in entry.get("kit", {}).items()))
    unknown = [k for k, _ in kit if k not in _RULES["items"]]
    if unknown:
        raise ValueError(f"task {name!r}: kit names unknown items {unknown}")
    return Task(name=name, milestones=tuple(entry["milestones"]), budget=int(entry["budget"]),
                reach=None if reach is None else Reach(reach["material"], int(reach["delay"]),
                                                       tuple(reach.get("distance", (14, 22)))),
                notes_tokens=entry.get("notes_tokens"), kit=kit)


def task_names() -> list[str]:
    """The names of every task in ``tasks.json``."""
    return sorted(_read_json("tasks.json"))
