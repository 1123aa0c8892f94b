"""The layer contracts (issue 21): ``.importlinter`` checked by import-linter, and what it
cannot see (pages/ is not a package in the checkout; the command line's lazy imports) checked
with ``ast``. docs/architecture.md has the table of the layers."""
from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from conftest import REPO

SCREENS = ("pages", "dashboard")
"""Folders of the Streamlit screens: layout over the loaders."""
NOT_ON_SCREENS = ("mfm.agent", "mfm.echo.agent", "mfm.envs", "mfm.samples", "mfm.sweep", "mfm.cli")
"""The agent, the Echo learner, the game harness and the top faces: no screen imports them."""
NOT_IN_LOADERS = ("streamlit", "dashboard")
LAZY_IN_CLI = ("loaders", "dashboard")
"""What the command line may import only inside a subcommand (.importlinter, core-no-extras)."""


def parse(path: Path) -> ast.Module:
    """The syntax tree of one source file."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imports(tree: ast.AST) -> Iterator[tuple[ast.stmt, str]]:
    """Every absolute import in ``tree`` with the modules it names (``from a import b``
    names ``a`` and ``a.b``, since ``b`` may be a module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module
            yield from ((node, f"{node.module}.{a.name}") for a in node.names)


def within(module: str, packages: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def violations(folders: Iterable[str], forbidden: tuple[str, ...]) -> list[str]:
    """``file:line imports module`` for each import of ``forbidden`` under ``folders``."""
    files = sorted(f for d in folders for f in (REPO / d).rglob("*.py"))
    return sorted({f"{f.relative_to(REPO)}:{node.lineno} imports {m}" for f in files for node, m in imports(parse(f))
                   if within(m, forbidden)})


def test_import_linter_contracts_hold():
    """``lint-imports`` keeps every contract of .importlinter (its report is the failure message)."""
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                          "--no-cache", "--no-logo"], cwd=REPO, capture_output=True, text=True, timeout=300)
    if run.returncode:
        pytest.fail(f"broken layer contract(s):\n{run.stdout}\n{run.stderr}", pytrace=False)


def test_screens_import_no_agent_learner_or_harness():
    """pages/ and dashboard/ draw what the loaders read; they never run the agent or the game."""
    assert violations(SCREENS, NOT_ON_SCREENS) == []


def test_pages_import_no_plotly():
    """The pages draw Vega-Lite: the dashboard extra does not install Plotly (the notebook extra
    does, for dashboard.charts; .importlinter's app-no-plotly keeps the dashboard package clean)."""
    assert violations(["pages"], ("plotly", "dashboard.charts")) == []


def test_loaders_import_no_streamlit():
    """A notebook gets the same tables the pages use."""
    assert violations(["loaders"], NOT_IN_LOADERS) == []


def test_command_line_imports_the_extras_lazily():
    """mfm.cli imports loaders and dashboard only inside its subcommands, the one exception
    to the core's contract; nothing at module level."""
    tree = parse(REPO / "mfm" / "cli.py")
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(n) for f in funcs for n in ast.walk(f)}
    eager = [f"mfm/cli.py:{node.lineno} imports {m}" for node, m in imports(tree)
             if within(m, LAZY_IN_CLI) and id(node) not in inside]
    assert eager == []


def test_checks_see_a_bad_import():
    """The ast checks see every import form: ``import a.b``, ``from a import b``, ``from a.b import c``."""
    page = ast.parse("import mfm.envs\nfrom mfm.echo import agent\nfrom mfm.agent.runner import Runner\n"
                     "from mfm.echo import csd\nfrom loaders import run_pages\nfrom . import sibling\n")
    named = {m for _, m in imports(page) if within(m, NOT_ON_SCREENS)}
    assert named == {"mfm.envs", "mfm.echo.agent", "mfm.agent.runner", "mfm.agent.runner.Runner"}
