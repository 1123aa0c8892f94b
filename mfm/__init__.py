"""mfm: Multimodal Filesystem Memory for long-horizon embodied agents.

The core's Python API, for scripts and notebooks (the loaders, ``loaders.open_run``, read what it
writes)::

    import mfm
    path = mfm.play(mfm.RunConfig(task="diamond", method="mfm", seed=0, steps=500, out="runs/x"))
    mfm.validate_run(path).problems    # what is wrong with its files, file:line each

Names are imported on first use, so ``import mfm`` stays cheap and the package's root imports
none of its layers (the layers of ``.importlinter`` import ``mfm`` for its version).
"""
from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "RunConfig": "mfm.agent.config",
    "SCHEMA_VERSION": "mfm.schema",
}
"""Public names and the module each comes from."""

__all__ = ["__version__", "play", "validate_run", *_LAZY]


def play(config: Any, progress: bool = False) -> Path:
    """Play one run (a :class:`mfm.agent.config.RunConfig`) as ``mfm run`` does and return its
    folder (``config.out``); the run's ``run.json`` says how it ended."""
    return import_module("mfm.agent.runner").Runner(config, progress=progress).run()


def validate_run(path: str | Path, frames: bool = False) -> Any:
    """``mfm validate`` as a function: every record and every problem of the run at ``path``
    (``.problems``, each with file and line); ``frames`` decodes every stored frame too. (Not
    ``mfm.validate``: that name is the module.)"""
    return import_module("mfm.validate").validate(Path(path), frames=frames)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mfm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
