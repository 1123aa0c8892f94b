"""Loaders for the static game rules and task definitions kept as JSON package data."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Task:
    """A named goal: achievements to reach in order, and a default step budget."""

    name: str
    milestones: tuple[str, ...]
    budget: int


def _read_json(filename: str) -> Any:
    """Parse one JSON file from the package data directory."""
    return json.loads((DATA_DIR / filename).read_text(encoding="utf-8"))


def load_rules() -> dict[str, Any]:
    """Return a fresh copy of Crafter's static rules (recipes, tools, walkable tiles).

    Keys: ``actions``, ``materials``, ``walkable``, ``player_walkable``, ``deadly``,
    ``items``, ``vitals``, ``collect`` (material -> require/receive/leaves/probability),
    ``place`` (item -> uses/where/type/target), ``make`` (tool -> uses/nearby/gives/
    nearby_radius) and ``achievements``.
    """
    return _read_json("rules.json")


def load_task(name: str) -> Task:
    """Load the task called ``name`` (``"diamond"`` or ``"all"``)."""
    tasks = _read_json("tasks.json")
    if name not in tasks:
        raise KeyError(f"unknown task {name!r}; known tasks: {sorted(tasks)}")
    entry = tasks[name]
    return Task(name=name, milestones=tuple(entry["milestones"]), budget=int(entry["budget"]))
