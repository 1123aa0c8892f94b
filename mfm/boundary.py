"""The one guarded boundary for reading a file that a run names.

A run's own rows name files (an index row's ``path`` and ``image``, frame strips under it,
an episode's ``state/state.json``). Every read of such a file goes through here, whoever
reads (the agent, ``mfm validate``, ``mfm import``, the loaders, the dashboard): the name
must be a plain relative path, what it leads to (symlinks followed) must stay inside the
run folder, and JSON files are bounded in size and nesting depth (``mfm.schema.parse_json``).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from mfm.schema import JSONError, parse_json, plain_relative

MAX_JSON_FILE_BYTES = 16 * 1024 * 1024
"""An episode record (state, action, outcome) larger than this is refused unread."""


class UnsafePath(ValueError):
    """A path named by a run (or a URL) that would leave the folder it must stay in."""


@lru_cache(maxsize=1024)
def _real(base: str) -> str:
    return os.path.realpath(base)


def inside(base: Path, rel: str) -> Path:
    """``base / rel`` resolved; UnsafePath for absolute paths, ``..`` and symlinks that leave
    ``base``. The message names ``rel`` only (never the server's absolute paths)."""
    if not plain_relative(rel):
        raise UnsafePath(f"{rel!r} is not a plain relative path (absolute paths, '..', backslashes and NUL "
                         "are refused)" if isinstance(rel, str) and rel else f"empty or invalid path {rel!r}")
    root = _real(str(base))
    target = os.path.realpath(os.path.join(root, rel))
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        raise UnsafePath(f"{rel!r} leads outside its folder (through a symlink), refused")
    return Path(target)


def read_json(base: Path, rel: str, max_bytes: int = MAX_JSON_FILE_BYTES) -> Any:
    """Parse the JSON file ``rel`` under ``base``. Raises UnsafePath (outside ``base``),
    FileNotFoundError, OSError, or JSONError (too large, not UTF-8, not JSON, too deep)."""
    p = inside(base, rel)
    with open(p, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JSONError(f"larger than {max_bytes} bytes, not read")
    return parse_json(data)
