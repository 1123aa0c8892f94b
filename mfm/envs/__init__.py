"""The Crafter game harness: stepping, lives, honest perception, rules and frame decoding.

This package knows nothing about memory or agents.
"""
from mfm.envs.crafter_env import ACTIONS, PERCEPTIONS, CrafterHarness, Perception, StepResult
from mfm.envs.decode import decode_frame, decode_inventory, estimate_daylight
from mfm.envs.reach import ReachHarness, ReachSite
from mfm.envs import rules
from mfm.envs.rules import Reach, Task, load_rules, load_task

__all__ = [
    "ACTIONS",
    "CrafterHarness",
    "PERCEPTIONS",
    "Perception",
    "StepResult",
    "Reach",
    "ReachHarness",
    "ReachSite",
    "Task",
    "decode_frame",
    "decode_inventory",
    "estimate_daylight",
    "load_rules",
    "load_task",
    "make_harness",
]


def make_harness(seed: int, task: Task, size: int = 64, perception: str = "map",
                 area: tuple[int, int] | None = None) -> CrafterHarness:
    """The game for a task in a world of ``area`` tiles (None: the rules' default, 64x64): a
    :class:`ReachHarness` for a temporal-reach task, else crafter's world as generated; the
    player holds the task's kit at the start of every life."""
    world = area or rules.AREA
    if task.reach is not None:
        return ReachHarness(seed, task.reach, size=size, perception=perception, area=world, kit=task.kit)
    return CrafterHarness(seed, size=size, perception=perception, area=world, kit=task.kit)
