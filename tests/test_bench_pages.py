"""The browser benchmark measures every page of the dashboard (a page added to the sidebar
and not to ``bench.browser.PAGES`` would go unmeasured)."""
from __future__ import annotations


def test_the_browser_benchmark_names_every_page_in_the_sidebars_order() -> None:
    from bench.browser import PAGES
    from dashboard.ui import PAGE_SPECS

    assert PAGES == tuple(PAGE_SPECS)


def test_an_ab_arm_names_a_checkout_and_may_set_one_variable(tmp_path) -> None:
    import pytest

    from bench.ab import parse_arm
    from bench.browser import REPO

    assert parse_arm(f"after={REPO}") == ("after", REPO, {})
    assert parse_arm(f"abl={REPO}@ABL=nochart,canvas") == ("abl", REPO, {"ABL": "nochart,canvas"})
    for bad in ("after", f"={REPO}", "after=", f"x={REPO}@ABL", f"x={REPO}@=1"):
        with pytest.raises(ValueError):
            parse_arm(bad)
    with pytest.raises(ValueError, match="not a checkout"):
        parse_arm(f"x={tmp_path}")
