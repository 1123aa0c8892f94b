"""Compiling exported tables and figures in real LaTeX documents (pdflatex) and reading the
result back: the two page layouts of issue 42 (a two-column article whose column is 3.45 in,
and a one-column article whose text block is 5.5 in), the ``Overfull \\hbox`` messages of the
log attributed to the item that caused them, and the PDF's text (pdftotext) and page size
(pdfinfo). Test helpers, not library code."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

TWO_COLUMN = r"\documentclass[10pt,twocolumn]{article}" "\n" \
             r"\usepackage[letterpaper,textwidth=7in,columnsep=0.1in,textheight=9in]{geometry}"
"""A two-column page: a 7 in text block, two 3.45 in columns."""
ONE_COLUMN = r"\documentclass[10pt]{article}" "\n" r"\usepackage[letterpaper,textwidth=5.5in,textheight=9in]{geometry}"
"""A one-column page with a 5.5 in text block."""
PACKAGES = "\n".join([r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}", r"\usepackage{graphicx}",
                      r"\extrafloats{300}", r"\maxdeadcycles=1000", r"\setlength{\hfuzz}{0pt}"])


def need_tex() -> None:
    """Skip (fail under CI) when pdflatex or poppler's tools are missing."""
    missing = [t for t in ("pdflatex", "pdftotext", "pdfinfo") if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} needed (Debian: texlive-latex-base, texlive-latex-recommended, "
                        "texlive-latex-extra, poppler-utils)")
        pytest.skip(f"{', '.join(missing)} not installed")


@dataclass
class Compiled:
    log: str
    text: str
    pages: int
    pdf: Path


def compile_tex(folder: Path, name: str, source: str, runs: int = 2) -> Compiled:
    """``name.tex`` written into ``folder`` and compiled with pdflatex ``runs`` times
    (nonstop, halting on the first error: an error fails the test with the log's tail)."""
    need_tex()
    (folder / f"{name}.tex").write_text(source, encoding="utf-8")
    env = {**os.environ, "max_print_line": "100000", "error_line": "254", "half_error_line": "238"}
    for _ in range(runs):
        done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
                               f"{name}.tex"], cwd=folder, capture_output=True, text=True, env=env, errors="replace")
        log = (folder / f"{name}.log").read_text(errors="replace")
        assert done.returncode == 0, log[-4000:]
    pdf = folder / f"{name}.pdf"
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return Compiled(log, text, pdf_pages(pdf), pdf)


def document(layout: str, body: str) -> str:
    """A whole document: ``layout`` (:data:`TWO_COLUMN` or :data:`ONE_COLUMN`), the packages
    the exports need, ``body``."""
    return "\n".join([layout, PACKAGES, r"\begin{document}", body, r"\end{document}", ""])


def marked(name: str, tex: str) -> str:
    """``tex`` between two log markers naming ``name`` (see :func:`overfull`)."""
    return f"\\typeout{{MFM-BEGIN {name}}}\n{tex}\n\\typeout{{MFM-END {name}}}\n"


OVERFULL = re.compile(r"Overfull \\hbox \((\d+(?:\.\d+)?)pt too wide\)")


def overfull(log: str) -> dict[str, float]:
    """The widest ``Overfull \\hbox`` (pt) reported between each pair of :func:`marked`
    markers, by name; an overfull box outside every pair is reported under ``""``."""
    out: dict[str, float] = {}
    current = ""
    for line in log.splitlines():
        m = re.search(r"MFM-(BEGIN|END) (.+)$", line)
        if m:
            current = m.group(2).strip() if m.group(1) == "BEGIN" else ""
            continue
        for amount in OVERFULL.findall(line):
            out[current] = max(out.get(current, 0.0), float(amount))
    return out


def pdf_pages(pdf: Path) -> int:
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))


def pdf_size(pdf: Path) -> tuple[float, float]:
    """The first page's width and height in PDF points (bp), as ``pdfinfo`` reads the MediaBox."""
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Page size:\s+([\d.]+) x ([\d.]+) pts", info)
    return float(m.group(1)), float(m.group(2))


def pdf_text(pdf: Path) -> str:
    """The PDF's text, whitespace collapsed to single spaces."""
    out = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return " ".join(out.split())
