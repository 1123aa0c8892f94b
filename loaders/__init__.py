"""Read run directories into DuckDB/pandas, fast and tolerant of damage. No Streamlit."""
from loaders.run import Run, find_runs, open_run, open_runs, runs_table

__all__ = ["Run", "find_runs", "open_run", "open_runs", "runs_table"]
