"""``mfm dashboard`` stops its whole server when it is stopped, and serves this machine only
unless told otherwise (issue 47, finding 17).

SIGTERM to ``mfm dashboard`` used to leave the Streamlit process serving (its parent PID 1),
and the server listened on every interface. These tests start the real command on a free port
and read what is left, and where it listens, from ``/proc``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO
from dash_browser import free_port

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="reads /proc")


def stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def processes() -> Iterator[tuple[int, list[str]]]:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat(int(entry))) is not None:
            yield int(entry), fields


def living_in_group(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies."""
    return [pid for pid, f in processes() if int(f[2]) == pgid and f[0] != "Z"]


def children(pid: int) -> list[int]:
    return [p for p, f in processes() if int(f[1]) == pid and f[0] != "Z"]


def listening(port: int) -> list[str]:
    """Local addresses (hex, as ``/proc/net/tcp*`` writes them) with a socket listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).is_file():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}
"""127.0.0.1 and ::1 as ``/proc/net/tcp`` and ``tcp6`` write them."""


def start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """``mfm dashboard sample_runs --port P --no-warm`` as a subprocess; returns it once the
    server answers its health check, and the port."""
    port = free_port()
    log = open(tmp_path / "server.log", "w+")
    cli = subprocess.Popen([sys.executable, "-m", "mfm.cli", "dashboard", str(REPO / "sample_runs"),
                            "--port", str(port), "--no-warm", *extra],
                           cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + 180  # a guard against a hang, generous for a loaded machine
    while time.monotonic() < end and cli.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return cli, port
        except OSError:
            time.sleep(0.3)
    log.seek(0)
    os.killpg(cli.pid, signal.SIGKILL)
    pytest.fail(f"the dashboard did not start:\n{log.read()}")


def server_of(cli: subprocess.Popen) -> int:
    """The Streamlit server process ``mfm dashboard`` started."""
    [server] = children(cli.pid)
    return server


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_dashboard_leaves_no_server(tmp_path: Path, signum: int) -> None:
    cli, port = start(tmp_path)
    server = server_of(cli)
    try:
        assert int(stat(server)[2]) == server != int(stat(cli.pid)[2]), "the server is not in a group of its own"
        group = living_in_group(server)
        assert server in group
        os.kill(cli.pid, signum)
        assert cli.wait(120) == 128 + signum
        assert living_in_group(server) == [] and stat(server) is None
        assert not [p for p in group if stat(p) is not None and stat(p)[0] != "Z"]
        assert listening(port) == []
    finally:
        for pgid in (cli.pid, server):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_dashboard_serves_this_machine_only_by_default(tmp_path: Path) -> None:
    cli, port = start(tmp_path)
    try:
        addresses = listening(port)
        assert addresses and set(addresses) <= LOOPBACK, addresses
    finally:
        os.kill(cli.pid, signal.SIGTERM)
        cli.wait(120)


def test_serving_every_interface_is_a_choice(tmp_path: Path) -> None:
    cli, port = start(tmp_path, "--host", "0.0.0.0")
    try:
        assert listening(port) == ["00000000"]
    finally:
        os.kill(cli.pid, signal.SIGTERM)
        cli.wait(120)


SQL_SERVER = """
import os, sys, time
from loaders import open_run
from loaders.usersql import run_user_query, worker_pids
assert run_user_query(open_run(sys.argv[1]), "SELECT 1 AS one").message is None
print(os.getpid(), *worker_pids(), flush=True)
time.sleep(600)
"""
SUPERVISE_SQL = """
import sys
from dashboard.serve import supervise
sys.exit(supervise([sys.executable, "-c", sys.argv[1], sys.argv[2]]))
"""


def test_stopping_the_dashboard_also_ends_its_sql_worker() -> None:
    """The SQL page's warm worker is a child of the server, in its process group: stopping
    ``mfm dashboard``'s supervisor ends it with the server."""
    run = REPO / "sample_runs" / "diamond_mfm_s2"
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISE_SQL, SQL_SERVER, str(run)],
                           cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True)
    pids: list[int] = []
    try:
        pids = [int(p) for p in sup.stdout.readline().split()]
        server, worker = pids
        assert int(stat(worker)[2]) == server and int(stat(worker)[1]) == server
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(60) == 128 + signal.SIGTERM
        assert living_in_group(server) == []
    finally:
        sup.kill()
        for pid in pids:
            if (fields := stat(pid)) is not None and fields[0] != "Z":
                os.kill(pid, signal.SIGKILL)
