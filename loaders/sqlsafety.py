"""DuckDB locked down: the settings every connection of the loaders gets (a notebook's
``Run.connect`` and the SQL page's worker alike), and this process's private folder for
DuckDB's own files. The bottom of ``loaders``: imports nothing of it."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

SAFE_DUCKDB: dict[str, str | int | bool] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "python_enable_replacements": False,
    "lock_configuration": True,
}
"""No file system or network access (COPY TO, ATTACH, read_csv of paths), no extensions, no scans
of Python variables, and the configuration cannot be changed back."""

_PRIVATE: list[str] = []
_PRIVATE_LOCK = threading.Lock()


def private_dir() -> str:
    """A folder of this process for DuckDB's own files (mode 0700, removed at exit), so that
    DuckDB never uses or opens up ``<cwd>/.tmp``; a new one if a /tmp cleaner removed it."""
    with _PRIVATE_LOCK:
        if not _PRIVATE or not os.path.isdir(_PRIVATE[-1]):
            _PRIVATE.append(tempfile.mkdtemp(prefix="mfm-duckdb-"))
            atexit.register(shutil.rmtree, _PRIVATE[-1], ignore_errors=True)
        return _PRIVATE[-1]


def duckdb_config(folder: str | None = None, **settings: str | int | bool) -> dict[str, str | int | bool]:
    """:data:`SAFE_DUCKDB` with DuckDB's spill and secrets folders in ``folder`` (default
    :func:`private_dir`), plus ``settings``."""
    folder = folder or private_dir()
    return {**SAFE_DUCKDB, "temp_directory": folder, "secret_directory": folder, **settings}
