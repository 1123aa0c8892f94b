"""The MFM dashboard: ``mfm dashboard [ROOT]`` or ``streamlit run dashboard/app.py -- --root ROOT``.

A multipage app over the files in the top-level ``pages/`` folder. It reads run folders
under the runs root and nothing else; it never runs code from a run.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402

from dashboard.ui import pages  # noqa: E402

st.set_page_config(page_title="MFM runs", page_icon="🧠", layout="wide")
st.navigation(list(pages().values())).run()
