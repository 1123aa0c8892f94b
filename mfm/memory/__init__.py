"""The MFM memory core: one module per memory type of the design.

- ``episode_store``: episodic memory (lossless frames, states, actions, outcomes)
- ``index``: the episode index (searchable cues -> episode references) and its content
  half (what each episode's frames showed, by material and place)
- ``spatial``: spatial memory (append-only grid of interacted cells)
- ``agent_memory``: agent-written files under ``mine/`` with history and provenance
- ``procedures``: procedural memory (declarative procedures, versioned, disable-able)
- ``retrieval``: filter -> select references -> load records and frames; crop/enlarge/compare
- ``consolidation``: revise knowledge and plans from evidence, episodes untouched
- ``run_writer``: the run directory writer that commits episodes whole
- ``inheritance``: a new game in a known world, starting from an earlier run's memory
"""
from mfm.memory.agent_memory import AgentMemory, blame, rebuild
from mfm.memory.consolidation import Fact, Target, WorkingPlan, consolidate
from mfm.memory.episode_store import EpisodeRecording, EpisodeStore
from mfm.memory.index import ContentHit, ContentIndex, EpisodeIndex, IndexQuery
from mfm.memory.procedures import ProceduralMemory, Procedure, ProcedureError, parse_procedure
from mfm.memory.run_writer import RunWriter
from mfm.memory.spatial import SpatialGrid

__all__ = [
    "AgentMemory", "ContentHit", "ContentIndex", "EpisodeIndex", "EpisodeRecording", "EpisodeStore", "Fact", "IndexQuery",
    "ProceduralMemory", "Procedure", "ProcedureError", "RunWriter", "SpatialGrid", "Target",
    "WorkingPlan", "blame", "consolidate", "parse_procedure", "rebuild",
]
