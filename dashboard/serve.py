"""How ``mfm dashboard`` runs Streamlit: ``python -m dashboard.serve APP [streamlit run
options] -- [app args]`` imports the libraries and loaders the pages use, then starts
``streamlit run`` in the same process. Streamlit runs each page's script in a thread of
this process, so the first visit after a start no longer pays for those imports (2-3 s on
a loaded 2-core machine; docs/benchmarks.md, "first visit").

Only libraries and ``loaders`` are imported here, never the dashboard's own modules: they
register Streamlit caches and components, which belongs to a script run.
"""
from __future__ import annotations

import importlib
import sys

PRELOAD = ("pandas", "pyarrow", "duckdb", "numpy", "PIL.Image", "plotly.graph_objects", "altair",
           "loaders.run", "loaders.run_pages", "loaders.chart_data", "loaders.turns", "loaders.failures",
           "loaders.provenance", "loaders.analysis_pages", "loaders.frame_compare", "loaders.scrubber",
           "loaders.usersql", "loaders.echo")
"""Imported before the server starts (what the pages import, heaviest first)."""


def preload() -> None:
    """Import :data:`PRELOAD` (a module that fails to import is left for the page to report)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def main(argv: list[str] | None = None) -> None:
    """Preload, then ``streamlit run`` with ``argv`` (this process's arguments by default)."""
    preload()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", "run", *(sys.argv[1:] if argv is None else argv)]
    streamlit_main()


if __name__ == "__main__":
    main()
