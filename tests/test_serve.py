"""How ``mfm dashboard`` starts Streamlit (``dashboard.serve``): the options it adds."""
from __future__ import annotations

import pytest
from streamlit import config

from dashboard.serve import OPTIONS, run_args


def test_the_options_added_exist_in_this_streamlit() -> None:
    for name in OPTIONS:
        assert isinstance(config.get_option(name.removeprefix("--")), bool)


@pytest.mark.parametrize("argv, expected", [
    (["app.py", "--server.port", "8501", "--", "--root", "runs"],
     ["app.py", "--runner.postScriptGC", "false", "--server.port", "8501", "--", "--root", "runs"]),
    (["app.py"], ["app.py", "--runner.postScriptGC", "false"]),
    # the person's own setting wins, in either spelling
    (["app.py", "--runner.postScriptGC", "true", "--", "--root", "runs"],
     ["app.py", "--runner.postScriptGC", "true", "--", "--root", "runs"]),
    (["app.py", "--runner.postScriptGC=true"], ["app.py", "--runner.postScriptGC=true"]),
    # what follows "--" belongs to the app, not to Streamlit
    (["app.py", "--", "--runner.postScriptGC", "true"],
     ["app.py", "--runner.postScriptGC", "false", "--", "--runner.postScriptGC", "true"]),
    ([], []),
])
def test_run_args_turn_off_the_collector_after_every_script_run(argv: list[str], expected: list[str]) -> None:
    assert run_args(argv) == expected
