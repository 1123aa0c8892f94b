"""The Crafter game harness: stepping, lives, honest perception, rules and frame decoding.

This package knows nothing about memory or agents.
"""
from mfm.envs.crafter_env import ACTIONS, PERCEPTIONS, CrafterHarness, Perception, StepResult
from mfm.envs.decode import decode_frame, decode_inventory, estimate_daylight
from mfm.envs.rules import Task, load_rules, load_task

__all__ = [
    "ACTIONS",
    "CrafterHarness",
    "PERCEPTIONS",
    "Perception",
    "StepResult",
    "Task",
    "decode_frame",
    "decode_inventory",
    "estimate_daylight",
    "load_rules",
    "load_task",
]
