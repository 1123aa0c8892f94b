"""Echo: transferable experience. Context State Descriptors (five axes) and in-context
analogical learning (ICAL), beside the memory core.

- ``csd``: the descriptor and its symbolic tokens
- ``vectorize``: per-axis vectors (offline hashing by default; any embedding model plugs in)
- ``library``: the append-only CSD library of a run, top-K retrieval with per-axis evidence
- ``ical``: describe attempts, refine from outcomes, induce new tasks by analogy, pre-check
- ``agent``: the learner that plays Crafter without its recipes (passive retrieval or ICAL)
- ``measure``: Success@0->k per task family, unlock curves, speed-up (``mfm echo report``)
"""
from mfm.echo.csd import AXES, CSD
from mfm.echo.ical import Attempt, describe, induce, precheck, refine
from mfm.echo.library import CSDLibrary, Match
from mfm.echo.vectorize import HashingVectorizer, SentenceVectorizer, axis_similarity, vectorize

__all__ = ["AXES", "CSD", "Attempt", "CSDLibrary", "HashingVectorizer", "Match", "SentenceVectorizer",
           "axis_similarity", "describe", "induce", "precheck", "refine", "vectorize"]
