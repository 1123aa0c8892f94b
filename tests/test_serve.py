"""How ``mfm dashboard`` starts Streamlit (``dashboard.serve``): the options it adds, what it
imports before it listens."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import APP, REPO
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


FIRST_IMPORTS = """
import json, sys
from dashboard import serve
serve.preload()
from streamlit.testing.v1 import AppTest
AppTest.from_string("import streamlit as st\\nst.write('AppTest itself, warmed')").run()
from dashboard.ui import PAGE_SPECS
before = set(sys.modules)
runs = sys.argv[1]
for page in PAGE_SPECS:
    at = AppTest.from_file(sys.argv[2], default_timeout=600)
    at.query_params["runs"] = runs
    if page != "runs":
        at.switch_page(f"../pages/{PAGE_SPECS[page][0]}")
    at.run()
    assert not at.exception, (page, [e.value for e in at.exception])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_no_page_imports_a_library_the_server_could_have_loaded_at_start() -> None:
    """What a first visit costs in a fresh server: every library module a page imports on
    its first script run is one the server imports before it listens (``PRELOAD``), so the
    first visitor does not wait for it (``streamlit.emojis`` alone took 0.57 s, loaded by the
    first alert whose text is not ASCII). Only the dashboard's own modules that need a
    Streamlit runtime (``dashboard.ui``, ``dashboard.scrubber``) are left to the script."""
    out = subprocess.run([sys.executable, "-c", FIRST_IMPORTS, "diamond_mfm_s2", APP], cwd=REPO,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "MFM_RUNS_ROOT": str(REPO / "sample_runs")})
    late = [m for m in json.loads(out.stdout.strip().splitlines()[-1]) if not m.startswith("dashboard.")]
    assert late == []


STACK_WALKS = """
import inspect, sys
from dashboard import serve
serve.preload()
walks = []
real = inspect.stack
inspect.stack = lambda *a, **k: walks.append(1) or real(*a, **k)
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.query_params["runs"] = sys.argv[2]
at.run()
assert not at.exception, [e.value for e in at.exception]
print(len(walks))
"""


def test_a_first_page_walks_no_stack() -> None:
    """Streamlit's one-time check whether it was started from a REPL (``inspect.stack()``
    over every frame, reading their source: 0.09 s of a first visit at 360k steps) is marked
    done by the preload, so the first page a server runs does not pay for it."""
    out = subprocess.run([sys.executable, "-c", STACK_WALKS, APP, "diamond_mfm_s2"], cwd=REPO, capture_output=True,
                         text=True, check=True, env={**os.environ, "MFM_RUNS_ROOT": str(REPO / "sample_runs")})
    assert out.stdout.strip().splitlines()[-1] == "0"


SUPERVISED = """
import subprocess, sys
from dashboard.serve import supervise
# the "server": starts a child that ignores SIGTERM, prints both PIDs, then waits
server = ("import os, signal, subprocess, sys, time; "
          "deaf = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
          "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)'], "
          "stdout=subprocess.PIPE); deaf.stdout.readline(); "
          "print(os.getpid(), deaf.pid, flush=True); time.sleep(600)")
sys.exit(supervise([sys.executable, "-c", server], grace_s=float(sys.argv[1])))
"""


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_supervise_stops_the_whole_group_even_a_process_deaf_to_sigterm() -> None:
    """``mfm dashboard``'s supervisor, on SIGTERM: the server (in a group of its own) and a
    child of it that ignores SIGTERM are both gone when it returns (the deaf one killed after
    the grace), and it exits with 128 + SIGTERM."""
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISED, "0.5"], cwd=REPO, stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    pids: list[int] = []
    try:
        pids = [int(p) for p in sup.stdout.readline().split()]
        server, deaf = pids
        assert _alive(server) and _alive(deaf)
        assert os.getpgid(server) == server == os.getpgid(deaf) != os.getpgid(sup.pid)
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(60) == 128 + signal.SIGTERM
        assert not _alive(server) and not _alive(deaf)
    finally:
        sup.kill()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


GC_SEEN = """
import gc, json, sys
import streamlit.web.cli
from dashboard import serve
seen = {}
def fake_main():
    seen.update(thresholds=gc.get_threshold(), frozen=gc.get_freeze_count())
streamlit.web.cli.main = fake_main
serve.main(["--no-warm", sys.argv[1]])
print(json.dumps(seen))
"""


def test_the_server_collects_less_often_and_freezes_what_it_preloaded() -> None:
    """By the time ``streamlit run`` starts, the server's collector has the thresholds
    ``dashboard.serve`` declares, not Python's default, and the preloaded modules' objects are
    frozen out of its walks."""
    from dashboard.serve import GC_THRESHOLDS

    out = subprocess.run([sys.executable, "-c", GC_SEEN, APP], cwd=REPO, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert tuple(seen["thresholds"]) == GC_THRESHOLDS != (700, 10, 10)
    assert seen["frozen"] > 10_000, "the preloaded libraries' objects are frozen"
