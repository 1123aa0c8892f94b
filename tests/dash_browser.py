"""Test helper: the dashboard served by `mfm dashboard ROOT --port P` for a real browser
(Playwright + Chromium). The ``browser`` and ``page`` fixtures are in ``conftest.py``."""
from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlencode, urlparse

import numpy as np
import pytest
from PIL import Image

CHROMIUM = os.environ.get("MFM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
REPO = Path(__file__).resolve().parent.parent
"""The checkout under test: the server runs its ``mfm.cli`` (not whatever ``mfm`` is installed)."""
SHOTS = REPO / "test-artifacts" / "screenshots"

needs_browser = pytest.mark.skipif(
    not Path(CHROMIUM).is_file() and not os.environ.get("MFM_REQUIRE_BROWSER"),
    reason=f"no Chromium at {CHROMIUM} (set MFM_CHROMIUM or apt-get install chromium); "
           "CI sets MFM_REQUIRE_BROWSER so that this fails instead")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dashboard(root: Path, log_dir: Path) -> Iterator[str]:
    """`mfm dashboard ROOT` on a free port, as a subprocess of this checkout; yields its URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "mfm.cli", "dashboard", str(root), "--port", str(port)]
    log = open(log_dir / "server.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180  # a guard against a hang, generous for a loaded machine
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.3)
        if proc.poll() is not None:
            break
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        log.seek(0)
        pytest.fail(f"the dashboard did not start:\n{log.read()}")
    if proc.poll() is not None:
        log.seek(0)
        pytest.fail(f"the dashboard exited:\n{log.read()}")
    try:
        yield base
    finally:
        stop_group(proc, 10)
        log.close()


def stop_group(proc: subprocess.Popen, wait: float) -> None:
    """End a server started in its own process group: SIGTERM, then SIGKILL after ``wait`` s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def settle(pg, timeout: float = 45) -> None:
    """Wait until Streamlit has finished running the script and the page stopped changing."""
    pg.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    deadline = time.time() + timeout
    quiet = 0
    while time.time() < deadline:
        running = pg.locator('[data-testid="stStatusWidget"]').count() > 0
        skeleton = pg.locator('[data-testid="stSkeleton"]').count() > 0
        quiet = quiet + 1 if not running and not skeleton else 0
        if quiet >= 4:
            break
        time.sleep(0.25)
    pg.wait_for_load_state("networkidle")


def url(base: str, path: str, **params: str) -> str:
    return f"{base}/{path}" + (f"?{urlencode(params)}" if params else "")


def no_exception(pg) -> None:
    """The page shows no Streamlit exception (its text in the failure message if it does)."""
    errors = pg.locator('[data-testid="stException"]')
    assert errors.count() == 0, errors.first.inner_text()


def screenshot(pg, path: Path, tall: int = 2000) -> None:
    """A screenshot of the page's top ``tall`` pixels, once it has settled at that height."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pg.set_viewport_size({"width": 1440, "height": tall})
    settle(pg)
    time.sleep(1.0)
    pg.screenshot(path=str(path))
    pg.set_viewport_size({"width": 1440, "height": 1000})


def checked_screenshot(pg, path: Path, tall: int = 2000) -> None:
    """Once the page has settled and shows no Streamlit exception, a screenshot of its top ``tall`` pixels."""
    settle(pg)
    no_exception(pg)
    screenshot(pg, path, tall)


def query(pg) -> dict[str, str]:
    """The page's query parameters as the browser has them now (after history updates)."""
    return {k: v[-1] for k, v in parse_qs(urlparse(pg.evaluate("location.href")).query).items()}


def see(pg, text: str) -> None:
    """Wait until a visible element holds ``text``."""
    pg.get_by_text(text, exact=False).filter(visible=True).first.wait_for(state="visible", timeout=60_000)


def image_with_caption(pg, base: str, caption: str) -> np.ndarray:
    """The pixels of the image whose caption contains ``caption``, as the browser got them."""
    src = pg.evaluate("""(cap) => {
        for (const c of document.querySelectorAll('[data-testid="stImageCaption"]')) {
            if (c.innerText.includes(cap)) {
                let box = c.parentElement;
                while (box && !box.querySelector('img')) box = box.parentElement;
                return box ? box.querySelector('img').getAttribute('src') : null;
            }
        }
        return null;
    }""", caption)
    assert src, f"no image captioned {caption!r}"
    body = pg.request.get(src if src.startswith("http") else base + src).body()
    return np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))
