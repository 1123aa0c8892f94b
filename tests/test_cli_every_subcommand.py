"""Every subcommand through every failure that applies to it (issue 46): a path that is not
there, a path that is a file where a folder is wanted, a folder of garbage where a run is
read, and a bad value for each option that takes one. Each is one line on stderr naming what
is wrong, with the documented exit code (2: usage or environment; 1: problems found in what
was read), and never a traceback.

The subcommands and their options are read from the parser, so a new subcommand or option is
driven too; an option this test does not know how to make bad fails the test until it is
classified below."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from mfm.cli import build_parser

SAMPLES = REPO / "sample_runs"
RUN = SAMPLES / "diamond_direct_s3_1600steps"

READS = {"runs", "src", "paths", "root", "inherit", "against"}
"""Arguments (by dest) that name runs or runs roots read by the command."""
WRITES = {"dest", "out"}
"""Arguments (by dest) that name a folder the command writes."""
GOOD_INPUT = {("echo report", "root"): SAMPLES / "echo", ("dashboard", "root"): SAMPLES,
              ("results", "root"): SAMPLES}
"""A readable input for an argument when a run is not the right kind (default: a sample run)."""
CHEAP = {"run": ["--steps", "20"], "sweep": ["--steps", "20", "--seeds", "0", "--methods", "direct"],
         "echo run": ["--episodes", "1", "--configs", "passive", "--seeds", "0", "--no-report"]}
"""Options that keep a command small should a failure not stop it."""
BAD = {"--steps": "0", "--jobs": "0", "--seeds": "x", "--methods": "nope", "--ablations": "nope",
       "--configs": "nope", "--episodes": "0", "--step-cap": "5", "--consolidate-every": "0",
       "--max-failures": "0", "--timeout": "0", "--area": "3", "--window": "0", "--port": "0",
       "--host": "no.such.host.invalid", "--price-in": "-1", "--price-out": "-1", "--address": "auto",
       "--model": "some-model", "--font-size": "0", "--height": "tall", "--width": "wide"}
"""A bad value for options whose type does not refuse every bad value by itself."""
FREE = {"--task@results", "--base-url@run"}
"""Options any text is right for (a filter, an endpoint that is tried only with --policy llm)."""
ACCEPTED = {("dashboard", "root", "garbage"): "a folder holding a broken run is still a runs root to show",
            ("echo run", "out", "garbage"): "a folder of runs may hold other files"}
"""(command, argument, failure) that are not failures, and why."""


def subcommands() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every leaf subcommand of the parser (``echo run``), with its parser."""
    out = []

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out.append((" ".join(prefix), parser))
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, prefix + [name])

    walk(build_parser(), [])
    return out


COMMANDS = subcommands()


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def with_value(command: str, parser: argparse.ArgumentParser, tmp: Path, dest: str, value: str) -> list[str]:
    """The command line of ``command`` with ``value`` for ``dest`` and good values elsewhere."""
    argv = command.split()
    for a in arguments(parser):
        if a.dest == dest:
            v = value
        elif a.option_strings and not a.required:
            continue
        elif a.dest in WRITES:
            v = str(tmp / f"new_{a.dest}")
        else:
            v = str(GOOD_INPUT.get((command, a.dest), RUN))
        argv += [a.option_strings[0], v] if a.option_strings else [v]
    cheap = CHEAP.get(command, [])
    tested = {s for a in arguments(parser) if a.dest == dest for s in a.option_strings}
    return argv + [x for flag, v in zip(cheap[::2], cheap[1::2]) if flag not in tested for x in (flag, v)]


def mfm(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mfm.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def refused(got: subprocess.CompletedProcess, command: str, names: tuple[str, ...], codes: tuple[int, ...] = (2,)
            ) -> None:
    """One line on stderr from ``mfm COMMAND`` naming one of ``names``, exit code in ``codes``;
    a report of problems on stdout (``validate``) stands for the line when stderr is empty."""
    what = f"{got.args[3:]}: exit {got.returncode}\nstdout: {got.stdout[-600:]}\nstderr: {got.stderr[-1500:]}"
    assert got.returncode in codes, what
    assert "Traceback" not in got.stdout + got.stderr and "internal error" not in got.stderr, what
    lines = [x for x in got.stderr.splitlines() if not x.startswith("mfm: WARNING")]
    if lines:
        assert len(lines) == 1 and lines[0].startswith(f"mfm {command}"), what
        assert any(n in lines[0] for n in names), what
    else:
        assert got.returncode == 1 and any(n in got.stdout.splitlines()[-1] for n in names), what


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    """A file where a folder belongs, and a folder of garbage where a run belongs."""
    (tmp_path / "a_file").write_text("not a folder\n")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "run.json").write_text("not json{")
    (garbage / "index.jsonl").write_text('garbage\n{"id":\n')
    (garbage / "steps.jsonl").write_bytes(b"\x00\xff\xfe\n")
    return {"missing": "no_such_place", "file": "a_file", "garbage": "garbage"}


def test_every_subcommand_is_driven() -> None:
    names = [c for c, _ in COMMANDS]
    assert {"validate", "import", "figures", "pack", "dashboard", "run", "sweep", "methods", "results", "echo run",
            "echo report"} <= set(names)


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, _ in COMMANDS])
def test_paths_that_are_missing_files_or_garbage(command: str, tmp_path: Path, places: dict[str, str]) -> None:
    parser = dict(COMMANDS)[command]
    for a in arguments(parser):
        kinds = ("missing", "file", "garbage") if a.dest in READS else ("file",) if a.dest in WRITES else ()
        for kind in kinds:
            if (command, a.dest, kind) in ACCEPTED:
                continue
            got = mfm(with_value(command, parser, tmp_path, a.dest, places[kind]), tmp_path)
            refused(got, command, (places[kind],), (1, 2) if kind == "garbage" else (2,))


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, _ in COMMANDS])
def test_bad_option_values(command: str, tmp_path: Path) -> None:
    parser = dict(COMMANDS)[command]
    unclassified: list[str] = []
    for a in arguments(parser):
        if not a.option_strings or a.nargs == 0 or a.dest in READS | WRITES:
            continue
        flag = a.option_strings[0]
        if flag in BAD:
            value = BAD[flag]
        elif a.choices is not None or a.type is not None:
            value = "bogus-value"
        elif f"{flag}@{command}" in FREE:
            continue
        else:
            unclassified.append(flag)
            continue
        got = mfm(with_value(command, parser, tmp_path, a.dest, value), tmp_path)
        refused(got, command, (flag, value))
    assert unclassified == [], f"mfm {command}: give these options a bad value in BAD, or list them in FREE"
