"""The memory-driven Crafter agent (issue 3): a scripted policy whose long-term memory is MFM.

- ``config``: :class:`RunConfig` (task, method, ablations, seed, budget, clock, ...)
- ``mapping``: routing knowledge from memory + the current view, A* planning
- ``atoms``: closed-loop atoms (go_to, collect, place, craft, drink, eat, sleep, ...)
- ``tools``: memory tools (search, inspect stored frames, read/write ``mine/``, consolidate)
- ``policy``: :class:`MFMPolicy`, one decision per turn
- ``runner``: :class:`Runner` / :func:`run`, the loop writing a run directory
- ``report``: results table over seeds (the sample runs: :mod:`mfm.samples`)
"""
from mfm.agent.atoms import ATOMS, AtomResult, Atoms
from mfm.agent.config import ABLATIONS, METHODS, RunConfig
from mfm.agent.policy import Decision, MFMPolicy
from mfm.agent.runner import Runner, StepClock, run
from mfm.agent.tools import MemoryTools, Sighting

__all__ = ["ABLATIONS", "ATOMS", "AtomResult", "Atoms", "Decision", "METHODS", "MFMPolicy", "MemoryTools",
           "RunConfig", "Runner", "Sighting", "StepClock", "run"]
