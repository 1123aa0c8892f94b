"""The default suite runs on every core; the browser tests, which time pages, one at a time."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import pytest_xdist_auto_num_workers


@pytest.mark.parametrize("markexpr, workers", [
    ("not slow", None),
    ("slow and not browser", None),
    ("not browser", None),
    ("slow", 0),
    ("browser", 0),
    ("slow and browser", 0),
    ("slow or not slow", 0),
    ("", 0),
])
def test_auto_workers_are_left_to_xdist_unless_browser_tests_can_run(markexpr: str, workers: int | None) -> None:
    config = SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))
    assert pytest_xdist_auto_num_workers(config) == workers

