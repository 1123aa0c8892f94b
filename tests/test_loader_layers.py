"""``loaders/`` has a floor: no import circle among its modules, counting every import (at
module level, inside functions, and for type checking only), and each module's layer in
``.importlinter`` (contract ``loaders-layers``) kept. The walk reads the source with ``ast``;
it imports nothing."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "loaders"


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its text. ``from loaders import x``
    counts as importing ``loaders.x`` when that is a module, else the package itself."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - node.level + 1]
                base = ".".join([*here, base] if base else here)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {n: imports_of(n, p, modules) for n, p in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_walk_sees_lazy_and_type_only_imports(tmp_path: Path) -> None:
    """The reader counts an import inside a function and one under TYPE_CHECKING."""
    mods = {"loaders": tmp_path / "__init__.py", "loaders.a": tmp_path / "a.py", "loaders.b": tmp_path / "b.py"}
    mods["loaders.a"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loaders.b import X\n")
    mods["loaders.b"].write_text("def f():\n    from loaders import a\n    from . import a as again\n")
    edges = {n: imports_of(n, p, mods) for n, p in mods.items() if n != "loaders"}
    assert edges == {"loaders.a": {"loaders.b"}, "loaders.b": {"loaders.a"}}
    assert cycles(edges) == [["loaders.a", "loaders.b"]]


def test_no_import_circle_inside_loaders() -> None:
    found = cycles(graph())
    assert not found, "import circles in loaders/: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_of_loaders_imports_the_package_itself() -> None:
    """``loaders/__init__`` is the facade on top: a module that imports it (``from loaders import
    open_run``) closes a circle through everything the facade imports."""
    edges = graph()
    offenders = sorted(n for n, deps in edges.items() if n != "loaders" and "loaders" in deps)
    assert not offenders, f"import loaders.<module> instead of the package in: {offenders}"


@pytest.mark.parametrize("module", ["loaders.records", "loaders.sqlsafety"])
def test_the_floor_imports_nothing_of_loaders(module: str) -> None:
    assert graph()[module] == set()
