"""The browser benchmark measures every page of the dashboard (a page added to the sidebar
and not to ``bench.browser.PAGES`` would go unmeasured)."""
from __future__ import annotations


def test_the_browser_benchmark_names_every_page_in_the_sidebars_order() -> None:
    from bench.browser import PAGES
    from dashboard.ui import PAGE_SPECS

    assert PAGES == tuple(PAGE_SPECS)
