"""Hostile run text in every export (issue 47, findings 3, 6 and 7).

Task names, method and ablation names, run folder names, episode summaries and memory-write
reasons are untrusted. ``mfm figures`` must write every file under ``--out`` (a task ``..``
once wrote everything into its parent), its LaTeX tables must print the text and never run
it (``\\input{/etc/hostname}`` in a task once read that file into the paper), its CSVs must
not hand a spreadsheet a formula, and ``mfm results`` must print Markdown holding no raw
HTML. The runs are copies of ``sample_runs/diamond_mfm_s2`` with hostile text written into
their ``run.json``, ``index.jsonl`` and ``memory_writes.jsonl``; every check reads the files
the commands wrote, compiles the tables with a real ``pdflatex`` and parses the CSVs with
Python's ``csv`` module and the Markdown with a CommonMark parser.
"""
from __future__ import annotations

import csv
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from conftest import REPO
from loaders import paper_tables
from loaders.escape import FORMULA_START, csv_cell, file_segment, latex_label, latex_text, md_text, one_line

SOURCE = REPO / "sample_runs" / "diamond_mfm_s2"

DOTS_TASK = ".."
"""Finding 3: a task that, used as a folder name, is the parent of ``--out``."""
TEX_TASK = "x}\\input{/etc/hostname}\\label{y %#$&_^~ [*] <script>|\"'` \x00\n/..\\ end"
"""Finding 6: closes the label's brace, reads a file, opens another label; then every
character LaTeX reads as syntax, HTML, a cell border, quotes, NUL, a line break, a path."""
FORMULA_METHOD = "=cmd|' /C calc'!A0"
"""Finding 7: a method name a spreadsheet runs as a DDE command."""
ABLATIONS = ["+no-frames", "<script>alert(1)</script>", "a|b\nc", "@x/../y\\z", "\tTAB", "%#$&_^~{}",
             "-2+3+cmd|' /C calc'!A0"]
SUMMARIES = ["=HYPERLINK(\"http://evil.example/\",\"click\")", "+SUM(1,2)", "-2+3+cmd|' /C calc'!A0", "@SUM(1)",
             "\tTAB=1", "\rCR=1", "<script>alert(1)</script>", "a|b\nc", "x}\\input{/etc/hostname}", "\x00nul"]
"""Episode summaries, cycled over the episodes of the first run."""
REASON = "=HYPERLINK(\"http://evil.example/\",\"why\")"
NOTE_PATH = "mine/=HYPERLINK(1).md"
"""An agent-written file whose name starts a formula: the provenance graph labels its version
``=HYPERLINK(1).md · create · REASON``."""
NOTE = "# Notes\n\n+cmd|' /C calc'!A0\n"
RUN_DIRS = {"dots": Path("sub") / "=1+2|<b>\\x\n..", "tex": Path("inj<1>"), "plain": Path("inj_1_")}
"""Run folders under the root: a nested one whose name holds a formula, HTML, a backslash, a
line break and a trailing ``..``; two whose names differ but sanitise to the same file name."""


def _rewrite_jsonl(path: Path, change: Callable[[int, dict[str, Any]], dict[str, Any]]) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(change(i, r)) + "\n" for i, r in enumerate(rows)))


def _hostile_copy(dest: Path, **manifest: Any) -> Path:
    shutil.copytree(SOURCE, dest)
    m = json.loads((dest / "run.json").read_text())
    m.update(manifest)
    (dest / "run.json").write_text(json.dumps(m))
    return dest


def make_hostile_root(base: Path) -> Path:
    """Three hostile copies of the sample run (tasks :data:`DOTS_TASK` and :data:`TEX_TASK`,
    the second holding the full mfm beside an ablation whose names are hostile)."""
    root = base / "runs"
    dots = _hostile_copy(root / RUN_DIRS["dots"], task=DOTS_TASK, method=FORMULA_METHOD)
    _hostile_copy(root / RUN_DIRS["tex"], task=TEX_TASK, method="mfm", ablations=ABLATIONS)
    _hostile_copy(root / RUN_DIRS["plain"], task=TEX_TASK, method="mfm", ablations=[])

    def episode(i: int, r: dict[str, Any]) -> dict[str, Any]:
        if r.get("kind") == "episode":
            r["summary"] = SUMMARIES[i % len(SUMMARIES)]
            if i % 7 == 0 and r.get("x") is not None:
                r["x"] = -3 - i
        return r

    _rewrite_jsonl(dots / "index.jsonl", episode)
    writes = [json.loads(line) for line in (dots / "memory_writes.jsonl").read_text().splitlines()]
    first = writes[0]
    note = {**{k: first[k] for k in ("turn", "step", "life", "time")}, "path": NOTE_PATH, "op": "create",
            "author": "@author", "reason": REASON, "sources": [], "sha256": hashlib.sha256(NOTE.encode()).hexdigest(),
            "snapshot": NOTE}
    writes = [{**w, "seq": i} for i, w in enumerate([first, note, *writes[1:]])]
    (dots / "memory_writes.jsonl").write_text("".join(json.dumps(w) + "\n" for w in writes))
    (dots / NOTE_PATH).write_text(NOTE)
    return root


def _files(base: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in base.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hostile_root(tmp_path_factory.mktemp("hostile_exports"))


@pytest.fixture(scope="module")
def exported(hostile_root: Path) -> tuple[Path, list[Path], dict[Path, int], dict[Path, int]]:
    """``mfm figures ROOT --out BASE/out/figs --html``: the output folder, the files it
    printed, and the files under the hostile root's parent before and after."""
    base = hostile_root.parent
    before = _files(base)
    out = base / "out" / "figs"
    code, printed = _run_cli(["figures", str(hostile_root), "--out", str(out), "--html"])
    assert code == 0, printed
    return out, [Path(line) for line in printed.splitlines() if line.strip()], before, _files(base)


def _run_cli(args: list[str]) -> tuple[int, str]:
    """``mfm ARGS`` in a child process (the real entry point): exit code and stdout+stderr."""
    done = subprocess.run([sys.executable, "-m", "mfm.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    return done.returncode, done.stdout + (done.stderr if done.returncode else "")


# ---------------------------------------------------------------- the escapers on their own

HOSTILE = ["..", "../..", "/etc/passwd", "a\\b", "a\x00b", "x}\\input{/etc/hostname}\\label{y", "%#$&_^~",
           "<script>alert(1)</script>", "a|b", "line\nbreak", "\r\n", "=1+2", "+1+2", "-2+3", "@SUM(1)",
           "\tTAB", "\rCR", ".hidden", "-rf", "", " ", "CON", "a" * 400, "é" * 200, "\ud800", "emoji 😀"]


@pytest.mark.parametrize("name", HOSTILE)
def test_file_segment_is_one_safe_segment(name: str, tmp_path: Path) -> None:
    seg = file_segment(name)
    assert seg and seg == file_segment(seg)
    assert not set(seg) & set("/\\\x00\n\r\t{}%#$&~<>|:*?\"' ")
    assert ".." not in seg and not seg.startswith((".", "-")) and len(seg.encode()) <= 120
    (tmp_path / seg).write_text("x")
    assert [p.name for p in tmp_path.iterdir()] == [seg]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=12))
def test_file_segments_are_distinct_children_of_their_folder(names: list[str]) -> None:
    taken: set[str] = set()
    segs = [file_segment(n, taken) for n in names]
    assert len({s.casefold() for s in segs}) == len(segs)
    base = Path("/nonexistent/out")
    for s in segs:
        assert (base / s).resolve().parent == base and s not in (".", "..") and "\x00" not in s


def test_colliding_names_are_made_unique() -> None:
    taken: set[str] = set()
    assert [file_segment(n, taken) for n in ("a/b", "a_b", "A_B", "..", "_")] == ["a_b", "a_b_2", "A_B_3", "_", "__2"]


@pytest.mark.parametrize("text", HOSTILE)
def test_latex_labels_hold_only_safe_characters(text: str) -> None:
    label = latex_label(f"tab:milestones-{text}")
    assert re.fullmatch(r"[A-Za-z0-9:.\-]+", label) and len(label) <= 80
    assert label.startswith("tab:milestones")
    assert latex_label("tab:milestones-diamond") == "tab:milestones-diamond"


def test_different_texts_keep_different_labels() -> None:
    labels = {latex_label(f"tab:m-{t}") for t in ("a/b", "a_b", "a b", "a\\b", "a}b")}
    assert len(labels) == 5


@pytest.mark.parametrize("value, cell", [
    ("=1+2", "'=1+2"), ("+SUM(1)", "'+SUM(1)"), ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
    ("@SUM(1)", "'@SUM(1)"), ("\tx", "'\tx"), ("\rx", "'\rx"), ("ok =1", "ok =1"), ("-", "-"), ("-3.5", "-3.5"),
    ("+2", "+2"), ("-1e-5", "-1e-5"), (-3, -3), (-2.5, -2.5), (None, None), ("a\x00b", "a\ufffdb"),
    ("=\ud800", "'=\ufffd")])
def test_csv_cells_that_start_a_formula_get_a_quote(value: Any, cell: Any) -> None:
    assert csv_cell(value) == cell


def test_markdown_text_has_no_raw_html_and_cannot_break_a_cell() -> None:
    text = md_text("<script>alert(1)</script> | a\\|b\nc & [x](http://e/) ![i](http://e/i.png) `c` *e*")
    assert "<" not in text and ">" not in text and "\n" not in text
    assert not re.search(r"(?<!\\)(\\\\)*\|", text)
    row = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {text} |\n")
    assert "<script" not in row and "<a " not in row and "<img" not in row and "<code" not in row
    assert row.count("<td>") == 1


# ---------------------------------------------------------------- LaTeX, compiled


def _tex_roots() -> list[Path]:
    """The folders TeX reads its own files from (kpathsea's trees)."""
    names = ("TEXMFDIST", "TEXMFMAIN", "TEXMFLOCAL", "TEXMFSYSVAR", "TEXMFSYSCONFIG", "TEXMFVAR", "TEXMFCONFIG",
             "TEXMFHOME")
    roots = []
    for name in names:
        value = subprocess.run(["kpsewhich", f"-var-value={name}"], capture_output=True, text=True).stdout.strip()
        roots += [Path(v).resolve() for v in value.split(":") if v.startswith("/")]
    return roots


def compile_latex(folder: Path, body: str, preamble: str = r"\usepackage[T1]{fontenc}") -> tuple[str, str]:
    """``paper.tex`` in ``folder`` (geometry wide enough for any table, booktabs) compiled
    twice with ``pdflatex`` (the second run reads the list of tables back from ``.lot``);
    returns its log and the text of its PDF. pdflatex missing: skipped, or failed under CI."""
    if shutil.which("pdflatex") is None or shutil.which("pdftotext") is None:
        if os.environ.get("CI"):
            pytest.fail("pdflatex and pdftotext are needed (Debian: texlive-latex-extra, poppler-utils)")
        pytest.skip("pdflatex or pdftotext is not installed (Debian: texlive-latex-base, "
                    "texlive-latex-recommended, texlive-latex-extra, poppler-utils)")
    (folder / "paper.tex").write_text("\n".join([
        r"\documentclass{article}", preamble, r"\usepackage{booktabs}",
        r"\usepackage[paperwidth=400cm,paperheight=60cm,margin=1cm]{geometry}",
        r"\begin{document}", r"\listoftables", body, r"\end{document}", ""]), encoding="utf-8")
    env = {**os.environ, "max_print_line": "100000"}
    for _ in range(2):
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
                               "paper.tex"], cwd=folder, capture_output=True, text=True, env=env,
                              errors="replace")
        log = (folder / "paper.log").read_text(errors="replace")
        assert done.returncode == 0, log[-3000:]
    text = subprocess.run(["pdftotext", "-layout", "paper.pdf", "-"], cwd=folder, capture_output=True,
                          text=True, check=True).stdout
    return log, text


def files_read(log: str) -> list[str]:
    """The files a TeX log says were opened: each ``(path`` it prints."""
    return re.findall(r"\((\.?/[^\s()]+)", log)


def assert_reads_only_its_own_files(log: str, folder: Path) -> None:
    assert "/etc/hostname" not in log
    roots = [folder.resolve(), *_tex_roots()]
    for name in files_read(log):
        path = (folder / name).resolve() if name.startswith("./") else Path(name).resolve()
        assert any(path.is_relative_to(r) for r in roots), name


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_to_latex_prints_hostile_text_literally(tmp_path: Path) -> None:
    """Without ``mfm figures``: one table whose caption, label, header and cells are hostile."""
    texts = [t for t in HOSTILE if t.isascii() and t.strip()]
    df = pd.DataFrame({"method": texts, "n": range(len(texts)), "[3pt] head*": ["[3pt]"] * len(texts)})
    tex = paper_tables.to_latex(df, f"Caption {TEX_TASK}", f"tab:x-{TEX_TASK}")
    (tmp_path / "t.tex").write_text(tex)
    log, pdf = compile_latex(tmp_path, r"\input{t.tex} See Table~\ref{" + latex_label(f"tab:x-{TEX_TASK}") + "}.")
    assert_reads_only_its_own_files(log, tmp_path)
    assert "??" not in pdf and "Table 1." in " ".join(pdf.split())
    for t in [*texts, f"Caption {TEX_TASK}"]:
        assert _squash(one_line(t)) in _squash(pdf), t


def test_latex_escaping_compiles_in_the_default_encoding_too(tmp_path: Path) -> None:
    body = latex_text(TEX_TASK + " " + " ".join(HOSTILE) + " ±≈–…§ é ñ ç ü ß ø")
    log, pdf = compile_latex(tmp_path, body + r"\par", preamble="")
    assert_reads_only_its_own_files(log, tmp_path)
    assert "[U+1F600]" in pdf and "input{/etc/hostname}" in _squash(pdf)


# ---------------------------------------------------------------- mfm results


def test_results_markdown_holds_no_raw_html(hostile_root: Path) -> None:
    code, out = _run_cli(["results", str(hostile_root)])
    assert code == 0, out
    assert "<" not in out.replace(str(hostile_root), "ROOT") and "&lt;script&gt;" in out
    tokens = MarkdownIt("commonmark").enable("table").parse(out)
    rendered = MarkdownIt("commonmark").enable("table").render(out)
    assert "<script" not in rendered and "<a " not in rendered and "<img" not in rendered
    tables = [t for t in tokens if t.type == "table_open"]
    assert len(tables) >= 4
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            width = len(re.findall(r"(?<!\\)\|", lines[i - 1]))
            for row in lines[i + 1:]:
                if not row.startswith("| "):
                    break
                assert len(re.findall(r"(?<!\\)\|", row.replace("\\\\", ""))) == width, row
    cells = [html.unescape(m) for m in re.findall(r"<td>(.*?)</td>", rendered)]
    assert FORMULA_METHOD in cells
    assert one_line(" ".join(["mfm", *ABLATIONS])) in cells


# ---------------------------------------------------------------- mfm figures, end to end

@pytest.mark.slow
def test_every_file_lands_under_out(hostile_root: Path, exported) -> None:
    out, printed, before, after = exported
    new = [p for p in after if p not in before]
    assert new and all(p.resolve().is_relative_to(out.resolve()) for p in new)
    assert set(new) == {p for p in printed}
    assert all(before[p] == after[p] for p in before)
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == [file_segment(DOTS_TASK), file_segment(TEX_TASK)]
    assert all(p.parent.parent == out or p.parent == out for p in new)
    for p in new:
        assert re.fullmatch(r"[\w.+=@,-]+", p.name), p.name
    tex_folder = out / file_segment(TEX_TASK)
    stems = {p.stem for p in tex_folder.glob("timeline_*.svg")}
    assert stems == {"timeline_inj_1_", "timeline_inj_1__2"}


@pytest.mark.slow
def test_latex_tables_compile_and_show_the_hostile_text(exported) -> None:
    out, printed, _, _ = exported
    tables = sorted(p for p in printed if p.suffix == ".tex" and p.name.startswith("table_"))
    assert {p.stem for p in tables} >= {"table_milestones", "table_ablations", "table_retargeting"}
    body = []
    for p in tables:
        tex = p.read_text()
        label = re.search(r"\\label\{([^}]*)\}", tex).group(1)
        assert re.fullmatch(r"[A-Za-z0-9:.\-]+", label), label
        assert "\\input" not in tex.replace("\\textbackslash{}input", "")
        body.append(r"\input{" + p.relative_to(out).as_posix() + "}" + r" Table~\ref{" + label + "}.")
    log, pdf = compile_latex(out, "\n".join(body))
    assert_reads_only_its_own_files(log, out)
    assert "??" not in pdf
    flat = _squash(pdf)
    for text in (TEX_TASK, FORMULA_METHOD, " ".join(["mfm", *ABLATIONS])):
        assert _squash(one_line(text)) in flat, text


def _csv_cells(path: Path) -> Iterator[str]:
    """Every cell of a CSV file, read by the csv module; every row as wide as the header (a
    line break or carriage return in a cell never starts a row of its own)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows and all(len(r) == len(rows[0]) for r in rows), path.name
    for row in rows:
        yield from row


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.slow
def test_csv_cells_never_start_a_formula(exported) -> None:
    out, printed, _, _ = exported
    found: set[str] = set()
    negatives = 0
    for path in (p for p in printed if p.suffix == ".csv"):
        assert b"\x00" not in path.read_bytes(), path.name
        for cell in _csv_cells(path):
            if cell.startswith(FORMULA_START):
                assert cell == "-" or _is_number(cell), (path.name, cell)
                negatives += cell.startswith("-") and _is_number(cell)
            if cell.startswith("'"):
                found.add(cell[1:])
    assert negatives, "a negative position should stay a number"
    assert "" not in found, "a lone quote: a carriage return split a cell into rows"
    for text in (FORMULA_METHOD, SUMMARIES[0], SUMMARIES[1], "@SUM(1)", SUMMARIES[4], SUMMARIES[5]):
        assert text in found, text
    assert any(cell.startswith(NOTE_PATH.removeprefix("mine/")) and cell.endswith(REASON) for cell in found)
    dots = out / file_segment(DOTS_TASK)
    with open(dots / "table_milestones.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["method"] == "'" + FORMULA_METHOD and rows[0]["seeds"] == "1"


@pytest.mark.slow
def test_manifests_hold_the_text_exactly_and_name_their_files(exported) -> None:
    out, printed, _, _ = exported
    manifests = [p for p in printed if p.suffix == ".json"]
    tasks, methods = set(), set()
    for p in manifests:
        m = json.loads(p.read_text(encoding="utf-8"))
        tasks.add(m["task"])
        methods |= {r["method"] for r in m["runs"]}
        if m["data"] is not None:
            assert (p.parent / m["data"]).is_file() and "/" not in m["data"]
    assert tasks == {DOTS_TASK, TEX_TASK}
    assert FORMULA_METHOD in methods and "mfm" in methods


@pytest.mark.slow
def test_html_page_links_only_written_files(exported) -> None:
    out, _, _, _ = exported
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    links = re.findall(r"(?:href|src)='([^']*)'", page)
    assert links
    for link in links:
        target = (out / unquote(html.unescape(link))).resolve()
        assert target.is_relative_to(out.resolve()) and target.is_file(), link


def test_a_task_folder_linked_outside_is_refused(hostile_root: Path, tmp_path: Path) -> None:
    """``--out`` already holding the task's folder as a symlink to elsewhere: nothing is
    written there, ``mfm figures`` exits 2 with one line."""
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "figs"
    elsewhere.mkdir()
    out.mkdir()
    (out / file_segment(DOTS_TASK)).symlink_to(elsewhere, target_is_directory=True)
    code, printed = _run_cli(["figures", str(hostile_root / RUN_DIRS["dots"]), "--out", str(out)])
    assert code == 2 and "outside the output folder" in printed and len(printed.strip().splitlines()) == 1
    assert list(elsewhere.iterdir()) == []


@pytest.mark.slow
def test_svg_figures_show_hostile_names_as_text(exported) -> None:
    """The legends name the hostile methods as text: each SVG parses as XML and holds no
    element but SVG's own (no ``script``, no foreign HTML)."""
    out, printed, _, _ = exported
    svgs = [p for p in printed if p.suffix == ".svg"]
    texts = []
    for p in svgs:
        tree = ET.parse(p)
        tags = {el.tag.rsplit("}", 1)[-1] for el in tree.iter()}
        assert "script" not in tags and "foreignObject" not in tags, p.name
        texts.append(" ".join(tree.getroot().itertext()))
    assert any(FORMULA_METHOD in t for t in texts)
    assert any("<script>alert(1)</script>" in t for t in texts)
