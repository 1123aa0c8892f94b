"""Three installs from one repository (issue 21): the core (``pip install .``) runs the agent
and ``mfm validate`` without pandas, DuckDB, pyarrow or Streamlit; the ``read`` and
``dashboard`` extras add the loaders and the app; a subcommand whose extra is missing says
which one in one line. ``mfm validate`` prints the same with the pure reader and the fast one."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import loaders.fastread
import mfm.run_reader
import mfm.validate
from conftest import REPO
from loaders import cachedread, tablecache
from mfm.cli import EXTRAS, main

NOT_IN_CORE = ("streamlit", "pandas", "duckdb", "pyarrow", "plotly", "altair", "vl-convert-python", "openai", "ray",
               "jupyterlab", "anywidget")
SOURCES = ("pyproject.toml", "README.md", "mfm", "loaders", "dashboard", "pages")
"""What a build of the project reads (the rest of the checkout is not copied)."""
WITHOUT_EXTRA = [(["dashboard"], "dashboard", "streamlit"), (["dashboard", "sample_runs"], "dashboard", "altair"),
                 (["figures", "sample_runs", "--out", "F"], "dashboard", "vl_convert"),
                 (["results", "sample_runs"], "read", "pandas"), (["import", "A", "B"], "read", "duckdb"),
                 (["run", "--policy", "llm", "--model", "m", "--out", "L"], "llm", "openai")]
"""(arguments, the extra the subcommand needs, a module of it to hide)."""


def needs(command: str, extra: str) -> str:
    return f'mfm {command}: needs the {extra} extra: pip install "mfm[{extra}]"'


def requirements(extra: str | None, project: dict) -> set[str]:
    """Distribution names an extra installs (None: the core), with the extras it includes."""
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    out: set[str] = set()
    for r in reqs:
        name, extras = re.match(r"\s*([\w.-]+)\s*(?:\[([^\]]*)\])?", r).groups()
        if name.lower() == project["name"]:
            for inner in extras.split(","):
                out |= requirements(inner.strip(), project)
        else:
            out.add(name.lower())
    return out


def test_command_line_knows_the_modules_of_each_extra():
    """``mfm.cli.EXTRAS`` (import names) lists what pyproject.toml's extras install."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    module = {"vl-convert-python": "vl_convert"}
    for extra, modules in EXTRAS.items():
        assert {module.get(d, d.replace("-", "_")) for d in requirements(extra, project)} == set(modules), extra
    assert not requirements(None, project) & set(NOT_IN_CORE)
    assert requirements("test", project) >= requirements("dashboard", project) | requirements("llm", project)


@pytest.mark.parametrize("argv, extra, hidden", WITHOUT_EXTRA, ids=[a[0] for a, *_ in WITHOUT_EXTRA])
def test_a_missing_extra_is_one_line(argv, extra, hidden, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, hidden, None)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == needs(argv[0], extra) + "\n"


def test_the_table_cache_key_reads_every_rule_source():
    """After the move to loaders/ the cache key still hashes the schema, the run reader, the
    validator, the fast path, the cached reader and the cache itself (a missing file would be
    hashed by name)."""
    names = [p.name for p in tablecache.rule_sources()]
    assert names == ["schema.py", "run_reader.py", "validate.py", "fastread.py", "cachedread.py", "tablecache.py"]
    assert all(p.is_file() for p in tablecache.rule_sources())
    assert tablecache.rule_sources()[1:3] == [Path(mfm.run_reader.__file__), Path(mfm.validate.__file__)]


def damaged(tmp_path: Path) -> Path:
    """A copy of diamond_mfm_s2 with bad and out-of-order steps, a broken memory history, a
    torn last turn, a missing episode folder and record file, and an orphan folder;
    index.jsonl and grid.jsonl stay clean (the fast path reads them as columns)."""
    run = tmp_path / "damaged"
    shutil.copytree(REPO / "sample_runs" / "diamond_mfm_s2", run)
    p = run / "steps.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:5] + [b'{"step": "7"}\n', b"not json\n", lines[2]] + lines[5:]))
    p = run / "memory_writes.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[:3] + [lines[3].replace(b'"sha256":"', b'"sha256":"00')] + lines[4:]))
    (run / "turns.jsonl").write_bytes((run / "turns.jsonl").read_bytes()[:-40])
    shutil.rmtree(run / "episodes" / "ep_000005")
    (run / "episodes" / "ep_000007" / "action.json").unlink()
    (run / "episodes" / "ep_999999").mkdir()
    return run


def test_pure_and_fast_readers_validate_alike(tmp_path, monkeypatch, capsys):
    """The same problems, records and line numbers from the core's reader and the loaders'
    fast path (records equal: a ``num`` field rebuilt from columns is a float where the JSON
    held an integer), and the same ``mfm validate`` output with and without the read extra."""
    monkeypatch.setattr(loaders.fastread, "MIN_BYTES", 0)
    run = damaged(tmp_path)
    pure, fast = mfm.validate.validate(run), cachedread.validate(run)
    assert not pure.columns and {"index.jsonl", "grid.jsonl"} <= set(fast.columns), "both paths are exercised"
    assert pure.problems == fast.problems and len(pure.errors) >= 4
    assert {p.file for p in pure.problems} >= {"steps.jsonl", "memory_writes.jsonl", "turns.jsonl", "index.jsonl",
                                                "episodes/ep_999999"}
    for name in pure.tables:
        assert list(pure.lines[name]) == list(fast.lines[name]), name
        assert list(pure.tables[name]) == list(fast.tables[name]), name
    assert main(["validate", str(run)]) == 1
    with_read = capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "loaders.cachedread", None)
    assert main(["validate", str(run)]) == 1
    assert capsys.readouterr().out == with_read and "INVALID" in with_read


@pytest.mark.slow
def test_core_install_in_a_fresh_virtualenv(tmp_path: Path):
    """``pip install .`` (no extras) into a new virtualenv: no pandas, DuckDB, pyarrow,
    Streamlit, Plotly or Altair; the agent runs and ``mfm validate`` passes its run; the
    subcommands that need an extra say so in one line, without a traceback."""
    src = tmp_path / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PIP_DISABLE_PIP_VERSION_CHECK="1")
    python = str(bin_dir / "python")

    def sh(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)

    start = time.perf_counter()
    pip = sh(python, "-m", "pip", "install", "-q", str(src), timeout=900)
    print(f"core install: {time.perf_counter() - start:.1f} s")
    assert pip.returncode == 0, pip.stdout + pip.stderr
    listed = sh(python, "-m", "pip", "list", "--format=freeze").stdout
    print(listed)
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "mfm" in installed and not installed & set(NOT_IN_CORE), listed
    mfm_cli = str(bin_dir / "mfm")
    ran = sh(mfm_cli, "run", "--task", "diamond", "--seed", "0", "--steps", "300", "--out", "D")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    checked = sh(mfm_cli, "validate", "D")
    assert checked.returncode == 0 and "D: valid: 0 error(s)" in checked.stdout, checked.stdout + checked.stderr
    for argv, extra, _ in WITHOUT_EXTRA:
        got = sh(mfm_cli, *argv)
        assert (got.returncode, got.stdout, got.stderr) == (2, "", needs(argv[0], extra) + "\n"), argv
    version = sh(mfm_cli, "--version")
    assert version.returncode == 0 and version.stdout.startswith("mfm "), version.stdout + version.stderr
    api = sh(python, "-c", "from loaders import open_run")
    assert api.returncode == 1 and api.stderr.strip().splitlines()[-1].endswith('pip install "mfm[read]"'), api.stderr
    typed = sh(python, "-c", "import importlib.resources as r; print(r.files('mfm').joinpath('py.typed').is_file())")
    assert typed.stdout.strip() == "True", typed.stdout + typed.stderr


def test_the_loaders_without_the_read_extra_name_it() -> None:
    """Importing the loaders' API where DuckDB is missing says which extra to install."""
    code = ("import sys; sys.modules['duckdb'] = None\n"
            "try:\n    from loaders import open_run\nexcept ModuleNotFoundError as e:\n    print(e, e.name)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.stdout.strip() == 'the loaders need the read extra (duckdb not installed): pip install "mfm[read]" duckdb'


def test_help_is_plain_text_with_defaults_and_a_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``mfm --help`` and each subcommand's help hold no reStructuredText markup, say the exit
    codes, and show defaults; ``--version`` prints the package's version."""
    from mfm import __version__
    from mfm.cli import build_parser

    parser = build_parser()
    top = parser.format_help()
    assert "``" not in top and ":data:" not in top and "exit codes: 0" in top
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in subs.items():
        text = sub.format_help()
        assert "``" not in text and ":data:" not in text and ":func:" not in text, name
    assert "(default: 25)" in " ".join(subs["run"].format_help().split())
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"mfm {__version__}"


def test_every_environment_variable_read_is_on_the_configuration_page() -> None:
    """docs/configuration.md names every MFM_/OPENAI_/XDG_ variable the code reads."""
    code = "\n".join(p.read_text(encoding="utf-8") for d in ("mfm", "loaders", "dashboard", "pages", "bench", "tests")
                     for p in (REPO / d).rglob("*.py"))
    read = set(re.findall(r"""["'\[]((?:MFM|OPENAI|XDG)_[A-Z_]+)["'\]]""", code))
    assert {"MFM_CACHE_DIR", "MFM_STAGING_DIR"} <= read
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert not {v for v in read if f"`{v}`" not in page}


def test_the_notebook_charts_without_plotly_name_the_extra() -> None:
    code = ("import sys; sys.modules['plotly'] = None\n"
            "try:\n    import dashboard.charts\nexcept ModuleNotFoundError as e:\n    print(e)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.stdout.strip().endswith('pip install "mfm[notebook]"'), got.stdout + got.stderr
