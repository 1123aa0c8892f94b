"""How ``mfm dashboard`` runs Streamlit: ``python -m dashboard.serve APP [streamlit run
options] -- [app args]`` imports the libraries and loaders the pages use, then starts
``streamlit run`` in the same process. Streamlit runs each page's script in a thread of
this process, so the first visit after a start no longer pays for those imports (2-3 s on
a loaded 2-core machine; docs/benchmarks.md, "first visit").

Only libraries and ``loaders`` are imported here, never the dashboard's own modules: they
register Streamlit caches and components, which belongs to a script run.

It also turns off Streamlit's full garbage collection after every script run
(``runner.postScriptGC``, on by default) unless the command line sets it: with a large run
open, the collector walks every object the loaded tables hold, holding the GIL: ~0.2 s
after each script run with a 360,000-step run open, and page changes in the browser took up
to twice as long (docs/benchmarks.md, "The collector after every script run"). Python's own
collector still runs as usual.
"""
from __future__ import annotations

import importlib
import sys

PRELOAD = ("pandas", "pyarrow", "duckdb", "numpy", "PIL.Image", "altair",
           "loaders.run", "loaders.run_pages", "loaders.chart_data", "loaders.turns", "loaders.failures",
           "loaders.provenance", "loaders.analysis_pages", "loaders.frame_compare", "loaders.scrubber",
           "loaders.usersql", "loaders.echo")
"""Imported before the server starts (what the pages import, heaviest first)."""
OPTIONS = {"--runner.postScriptGC": "false"}
"""``streamlit run`` options put after the app's path unless the command line names them."""


def preload() -> None:
    """Import :data:`PRELOAD` (a module that fails to import is left for the page to report)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def run_args(argv: list[str]) -> list[str]:
    """``streamlit run``'s arguments: ``argv`` (the app's path first) with :data:`OPTIONS`
    after the path, except an option the part before ``--`` already names."""
    if not argv:
        return argv
    ours = argv[:argv.index("--")] if "--" in argv else argv
    extra = [a for name, value in OPTIONS.items()
             if not any(o == name or o.startswith(name + "=") for o in ours) for a in (name, value)]
    return [argv[0], *extra, *argv[1:]]


def main(argv: list[str] | None = None) -> None:
    """Preload, then ``streamlit run`` with ``argv`` (this process's arguments by default)
    and :data:`OPTIONS`."""
    preload()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", "run", *run_args(sys.argv[1:] if argv is None else argv)]
    streamlit_main()


if __name__ == "__main__":
    main()
