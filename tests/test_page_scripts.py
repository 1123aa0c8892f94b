"""Page scripts as Streamlit runs them: its "magic" writes every bare expression of a page's
script on the page, a string included, so a page says what a constant is in a comment."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

SCRIPTS = sorted((REPO / "pages").glob("*.py")) + [REPO / "dashboard" / "app.py"]


def bare_strings(body: list[ast.stmt]) -> list[int]:
    """Lines of the string expressions in ``body`` and the blocks it runs in place (if, for,
    while, with, try), not inside functions or classes, whose strings magic leaves alone."""
    found = []
    for node in body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append(node.lineno)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            found += bare_strings(getattr(node, field, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            found += bare_strings(handler.body)
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_page_script_holds_no_string_but_its_docstring(script: Path) -> None:
    tree = ast.parse(script.read_text(), filename=str(script))
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    assert bare_strings(body) == [], f"{script.relative_to(REPO)}: Streamlit would write these lines on the page"


def test_the_check_sees_a_string_in_a_block() -> None:
    tree = ast.parse('"""doc"""\nX = 1\n"""about X"""\nif X:\n    "in a block"\ndef f():\n    """own doc"""\n')
    assert bare_strings(tree.body[1:]) == [3, 5]
