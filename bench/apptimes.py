"""Script time of one dashboard page through Streamlit's AppTest, in this (fresh) process.

    python -m bench.apptimes ROOT PAGE [RUN ...]

Prints one JSON object: the page's first script run (``cold``: nothing cached, the run
opened by the page itself; the libraries the pages use are imported beforehand, as a
running dashboard has them), a rerun (``warm``: Streamlit caches and the opened run kept),
the data rows its charts send the browser (every Vega-Lite dataset of the page) and
the process's peak resident memory. ``RUN`` keys (paths under ROOT) are put in the
URL as the open runs, the first one focused, as a user would arrive from a link.
"""
from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
PRELOAD = ("altair", "dashboard.vega_charts", "loaders.lookups", "loaders.timeline_data")
"""Imported before timing: a running dashboard has them loaded already."""


def page_times(root: Path, page: str, runs: list[str]) -> dict:
    """Cold and warm script time of ``page`` (a key of ``dashboard.ui.PAGE_SPECS``)."""
    os.environ["MFM_RUNS_ROOT"] = str(root)
    for module in PRELOAD:
        importlib.import_module(module)
    from streamlit.testing.v1 import AppTest

    from dashboard.ui import PAGE_SPECS

    at = AppTest.from_file(str(APP), default_timeout=600)
    if runs:
        at.query_params["runs"] = ",".join(runs)
        at.query_params["run"] = runs[0]
    if page != "runs":
        at.switch_page(f"../pages/{PAGE_SPECS[page][0]}")
    _register_components(at)
    t = time.perf_counter()
    at.run()
    cold = time.perf_counter() - t
    errors = [str(e.value) for e in at.exception]
    t = time.perf_counter()
    at.run()
    warm = time.perf_counter() - t
    errors += [str(e.value) for e in at.exception]
    return {"page": page, "cold_s": cold, "warm_s": warm, "errors": errors,
            "chart_points": sum(chart_rows(c.proto) for c in at.get("vega_lite_chart")),
            "peak_rss_mb": peak_rss_mb()}


def _register_components(at: object) -> None:
    """Do, before the timing, what a Streamlit server does once when it starts and AppTest
    on its first run: scan every installed package for components (~0.3-0.5 s here, 507
    distributions). Left out, it made every page's first run look that much slower. Uses
    AppTest's private attribute when it exists (Streamlit 1.67); otherwise nothing."""
    if getattr(at, "_bidi_component_manager", False) is not None:
        return
    from streamlit.components.v2.component_manager import BidiComponentManager

    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    at._bidi_component_manager = manager


def chart_rows(chart: object) -> int:
    """Data rows a Vega-Lite chart element (``st.altair_chart``'s proto, as AppTest holds it)
    sends the browser: the rows of every dataset, each an Arrow stream."""
    import pyarrow as pa

    return sum(pa.ipc.open_stream(d.data.data).read_all().num_rows for d in chart.datasets)


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ``ru_maxrss``, not inherited
    from the parent that started it)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    print(json.dumps(page_times(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])))
