"""Read run directories into DuckDB/pandas, fast and tolerant of damage. No Streamlit.

The loaders need the ``read`` extra (pandas, DuckDB, pyarrow); without it, importing them
raises a ModuleNotFoundError that names the extra to install."""
from importlib.util import find_spec

_READ = ("pandas", "duckdb", "pyarrow")
_missing = [m for m in _READ if find_spec(m) is None]
if _missing:
    raise ModuleNotFoundError(f'the loaders need the read extra ({", ".join(_missing)} not installed): '
                              'pip install "mfm[read]"', name=_missing[0])

from loaders.run import Run, find_runs, open_run, open_runs, runs_table  # noqa: E402
from loaders import display  # noqa: E402,F401  (a run draws itself in Jupyter: Run.html)

__all__ = ["Run", "find_runs", "open_run", "open_runs", "runs_table"]
