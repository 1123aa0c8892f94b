"""Notes by the researcher: bookmarks and comments on a run, a turn, an env step or a region of
a frame, kept apart from the runs.

Notes live in ``<runs root>/.mfm/notes/notes.jsonl``, never inside a run folder (the agent's
record stays as the agent wrote it). The file is append-only JSON lines: each note is one line
with its time and author; removing a note appends a line that retracts it. Every write goes
through ``mfm.boundary.atomic_writer``; a ``.mfm`` or ``notes`` folder, or a notes file, that is
a symlink is refused, as is a runs root that is itself a run folder.

    from loaders import notes
    notes.add("sample_runs", run="reach-1000_mfm_s0", target="turn", turn=141, text="retarget to the diamond")
    notes.table("sample_runs", run="reach-1000_mfm_s0")      # a DataFrame, shown as a table in a notebook
"""
from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlencode

import pandas as pd

from loaders.formats import detect
from mfm.boundary import UnsafePath, atomic_writer, folder_inside, open_regular

FOLDER = ".mfm/notes"
FILE = f"{FOLDER}/notes.jsonl"
"""Where the notes of a runs root are kept, relative to the root."""
TARGETS = ("run", "turn", "step", "region")
"""What a note points at: a whole run, a turn, an env step (of a life), a region of the frame
of a step (tile columns ``c0 <= c < c1`` and rows ``r0 <= r < r1``, as the Frames page's region)."""
KINDS = ("comment", "bookmark")
MAX_TEXT, MAX_AUTHOR = 4000, 100
MAX_FILE_BYTES = 32 * 1024 * 1024
"""A notes file larger than this is refused unread."""
TILES = 9
COLUMNS = ["id", "time", "author", "kind", "run", "target", "turn", "life", "step", "region", "text", "page",
           "query"]
""":func:`table`'s columns; ``page`` and ``query`` open the note's place in the dashboard."""


class NotesError(ValueError):
    """A notes file that cannot be read or written; the message names the file (and line)."""


@dataclass(frozen=True)
class Note:
    """One note (a line of the notes file)."""

    id: str
    time: str
    author: str
    run: str
    target: str
    text: str
    kind: str = "comment"
    turn: int | None = None
    life: int | None = None
    step: int | None = None
    region: tuple[int, int, int, int] | None = None

    def record(self) -> dict[str, Any]:
        """The note as its JSON line's object."""
        return {"id": self.id, "time": self.time, "author": self.author, "kind": self.kind, "run": self.run,
                "target": self.target, "turn": self.turn, "life": self.life, "step": self.step,
                "region": list(self.region) if self.region else None, "text": self.text}

    def page(self) -> str:
        """The dashboard page that shows what the note points at."""
        return {"run": "timeline", "turn": "turns", "step": "timeline", "region": "frames"}[self.target]

    def query(self) -> str:
        """The URL query (without the runs) that opens the note's place: the turn, the time
        cursor at its step, the frame and region; ``note`` names the note."""
        params: dict[str, Any] = {}
        if self.target == "turn":
            params["turn"] = self.turn
        if self.target == "region" and self.step is not None:
            params["frames"] = f"{self.run}:{self.step}"
            if self.region:
                c0, c1, r0, r1 = self.region
                params["region"] = f"{c0},{r0},{c1},{r1}"
        if self.life is not None and self.step is not None:
            params.update(life=self.life, step=self.step)
        params["note"] = self.id
        return urlencode({k: str(v) for k, v in params.items() if v is not None})


@dataclass
class Notes:
    """The notes of a runs root as read: the live ones (retracted notes left out), and why lines
    were skipped (``file:line: what``)."""

    notes: list[Note] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    retracted: int = 0


def _checked_folder(root: Path, create: bool) -> str | None:
    """The real path of ``root/.mfm/notes``, each part checked to be a real folder (not a
    symlink) inside ``root``; None when it does not exist and ``create`` is false."""
    root = Path(root)
    if detect(root) is not None:
        raise UnsafePath(f"{root.name} is itself a run folder: notes are kept under a runs root, never inside a run")
    cur = os.path.realpath(root)
    for part in FOLDER.split("/"):
        step = os.path.join(cur, part)
        try:
            mode = os.lstat(step).st_mode
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(step, 0o777)
            mode = os.lstat(step).st_mode
        if stat.S_ISLNK(mode):
            raise UnsafePath(f"{FOLDER}: {part} is a symlink, refused (notes are kept in a real folder of the runs "
                             "root)")
        if not stat.S_ISDIR(mode):
            raise UnsafePath(f"{FOLDER}: {part} is not a folder, refused")
        cur = step
    return folder_inside(root, FOLDER)


def path(root: Path | str) -> Path:
    """The notes file of a runs root (it may not exist yet)."""
    return Path(root) / FILE


def _opt_int(obj: dict, name: str, where: str) -> int | None:
    v = obj.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise NotesError(f"{where}: {name} must be a whole number or null, not {v!r:.40}")
    return v


def _region(v: Any, where: str) -> tuple[int, int, int, int] | None:
    if v is None:
        return None
    if not (isinstance(v, (list, tuple)) and len(v) == 4 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                 for x in v)):
        raise NotesError(f"{where}: region must be [c0, c1, r0, r1] (tile columns and rows), not {v!r:.60}")
    c0, c1, r0, r1 = v
    if not (0 <= c0 < c1 <= TILES and 0 <= r0 < r1 <= TILES):
        raise NotesError(f"{where}: region {list(v)} is not within the frame's {TILES}x{TILES} tiles")
    return c0, c1, r0, r1


def _text(obj: dict, name: str, where: str, limit: int, empty: bool = False) -> str:
    v = obj.get(name)
    if not isinstance(v, str) or (not empty and not v.strip()):
        raise NotesError(f"{where}: {name} must be a non-empty string")
    if len(v) > limit:
        raise NotesError(f"{where}: {name} is {len(v):,} characters long (at most {limit:,})")
    return v


def parse_note(obj: Any, where: str) -> Note:
    """A note from one line's JSON object; NotesError naming ``where`` and what is wrong."""
    if not isinstance(obj, dict):
        raise NotesError(f"{where}: a note is a JSON object, not {type(obj).__name__}")
    target = obj.get("target")
    if target not in TARGETS:
        raise NotesError(f"{where}: target must be one of {', '.join(TARGETS)}, not {target!r:.40}")
    kind = obj.get("kind", "comment")
    if kind not in KINDS:
        raise NotesError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r:.40}")
    note = Note(id=_text(obj, "id", where, 80), time=_text(obj, "time", where, 40),
                author=_text(obj, "author", where, MAX_AUTHOR), run=_text(obj, "run", where, 400),
                target=target, text=_text(obj, "text", where, MAX_TEXT, empty=kind == "bookmark"), kind=kind,
                turn=_opt_int(obj, "turn", where), life=_opt_int(obj, "life", where),
                step=_opt_int(obj, "step", where), region=_region(obj.get("region"), where))
    need = {"turn": ("turn",), "step": ("life", "step"), "region": ("life", "step", "region")}.get(target, ())
    missing = [n for n in need if getattr(note, n) is None]
    if missing:
        raise NotesError(f"{where}: a note on a {target} needs {' and '.join(missing)}")
    return note


def read(root: Path | str, strict: bool = False) -> Notes:
    """The notes of a runs root (none when it has no notes file). A line that is not a note is
    skipped and named in ``problems`` (``.mfm/notes/notes.jsonl:LINE: what``); with ``strict``
    it raises NotesError instead. A symlinked notes folder or file raises UnsafePath."""
    out = Notes()
    if _checked_folder(Path(root), create=False) is None:
        return out
    try:
        f = open_regular(Path(root), FILE)
    except FileNotFoundError:
        return out
    with f:
        if os.fstat(f.fileno()).st_size > MAX_FILE_BYTES:
            raise NotesError(f"{FILE}: larger than {MAX_FILE_BYTES:,} bytes, not read")
        data = f.read()
    found: dict[str, Note] = {}
    gone: set[str] = set()
    for no, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"{FILE}:{no}"
        try:
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise NotesError(f"{where}: not UTF-8 text") from None
            except json.JSONDecodeError as e:
                raise NotesError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
            if isinstance(obj, dict) and "retracts" in obj:
                if not isinstance(obj["retracts"], str):
                    raise NotesError(f"{where}: retracts must name a note id")
                gone.add(obj["retracts"])
                continue
            note = parse_note(obj, where)
        except NotesError as e:
            if strict:
                raise
            out.problems.append(str(e))
            continue
        found.setdefault(note.id, note)
    out.notes = [n for i, n in found.items() if i not in gone]
    out.retracted = len(gone & set(found))
    return out


def _append(root: Path, record: dict[str, Any]) -> None:
    """Add one line to the notes file: the file as it is plus the line, written whole through
    ``atomic_writer`` while holding a lock on the notes folder (two writers never lose a line)."""
    real = _checked_folder(root, create=True)
    line = json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
    dfd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(dfd, fcntl.LOCK_EX)
        try:
            with open_regular(root, FILE) as f:
                old = f.read()
        except FileNotFoundError:
            old = b""
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafePath(f"{FILE}: a symlink, refused") from None
            raise
        if old and not old.endswith(b"\n"):
            old += b"\n"
        with atomic_writer(root, FILE, make_folders=False) as out:
            out.write(old + line)
    finally:
        os.close(dfd)


def author() -> str:
    """Who writes a note by default: ``MFM_AUTHOR``, else the login name."""
    try:
        return os.environ.get("MFM_AUTHOR") or getpass.getuser()
    except (KeyError, OSError):
        return "researcher"


def add(root: Path | str, run: str, target: str, text: str = "", kind: str = "comment", turn: int | None = None,
        life: int | None = None, step: int | None = None, region: Sequence[int] | None = None,
        by: str | None = None) -> Note:
    """Append a note on run ``run`` (its key under the runs root) and return it. ``target``:
    run, turn (``turn``), step (``life``, ``step``) or region (also ``region`` = c0, c1, r0,
    r1). NotesError for a note that is not valid; UnsafePath for a symlinked notes folder."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record = {"id": f"n{datetime.now(timezone.utc):%Y%m%d%H%M%S}-{secrets.token_hex(3)}", "time": now,
              "author": (by or author()).strip()[:MAX_AUTHOR], "kind": kind, "run": run, "target": target,
              "turn": turn, "life": life, "step": step, "region": list(region) if region is not None else None,
              "text": text}
    note = parse_note(record, "the new note")
    _append(Path(root), note.record())
    return note


def retract(root: Path | str, note_id: str, by: str | None = None) -> None:
    """Append a line retracting note ``note_id`` (the note stays in the file, no longer shown)."""
    _append(Path(root), {"retracts": str(note_id), "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         "author": (by or author()).strip()[:MAX_AUTHOR]})


def at(notes: Sequence[Note], run: str, turn: int | None = None, life: int | None = None,
       lo: int | None = None, hi: int | None = None) -> list[Note]:
    """The notes of ``run`` that point into a view: on the run itself, on ``turn``, or at a
    step (or a region of a frame) of ``life`` within ``lo..hi``."""
    out = []
    for n in notes:
        if n.run != run:
            continue
        if n.target == "run" or (turn is not None and n.target == "turn" and n.turn == turn):
            out.append(n)
        elif n.target in ("step", "region") and lo is not None and hi is not None and n.step is not None \
                and (life is None or n.life == life) and lo <= n.step <= hi:
            out.append(n)
    return out


def at_steps(notes: Sequence[Note], run: str, steps: Sequence[int]) -> list[Note]:
    """The notes of ``run`` on one of ``steps`` (a step or a region of its frame, of any life):
    the notes on the frames a view shows."""
    shown = set(steps)
    return [n for n in notes if n.run == run and n.target in ("step", "region") and n.step in shown]


def table(root: Path | str, run: str | None = None, notes: Sequence[Note] | None = None) -> pd.DataFrame:
    """The notes of a runs root (of ``run`` only, when given) as a table (:data:`COLUMNS`),
    oldest first; skipped lines raise nothing here (see :func:`read`)."""
    got = read(root).notes if notes is None else list(notes)
    rows = [{**n.record(), "region": ",".join(map(str, n.region)) if n.region else None, "page": n.page(),
             "query": n.query()} for n in got if run is None or n.run == run]
    df = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("turn", "life", "step"):
        df[c] = df[c].astype("Int64")
    return df


def for_runs(runs: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The notes on ``(key, run)`` pairs as plain records with their dashboard query, for a
    figure's manifest: the runs root is the folder each run's ``path`` lies in under its key.
    A root whose notes cannot be read gives a record saying why instead."""
    out: list[dict[str, Any]] = []
    roots: dict[Path, list[str]] = {}
    for key, run in runs:
        p = Path(run.path)
        parts = Path(key).parts
        if not parts or p.parts[-len(parts):] != parts:
            continue
        roots.setdefault(p.parents[len(parts) - 1], []).append(key)
    for root, keys in roots.items():
        try:
            got = read(root)
        except (NotesError, UnsafePath, OSError) as e:
            out.append({"error": f"notes of the runs root not read: {e}"})
            continue
        out += [{**n.record(), "query": n.query()} for n in got.notes if n.run in keys]
    return out
