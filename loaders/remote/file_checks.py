"""The file checks of a mirrored run (``mfm.validate.FileCheck``), made against one listing of the bucket.

Missing episode folders, record files and frame strips are looked for in one listing of the
run's ``episodes/`` (and a packed run's zip directory, :mod:`loaders.remote.packs`), not by
fetching them; the problems found are kept in the mirror with the ``index.jsonl`` they were
found for, or come with the run's columnar copy.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loaders.remote.downloads import is_file_name, settle
from loaders.remote.mirror import RUN_MARK, read_mark, write_mark
from loaders.remote.packs import remote_pack
from mfm.objectstore import filesystem
from mfm.schema import Problem
from mfm.validate import FileCheck

if TYPE_CHECKING:
    from loaders.columns import Columns


def _index_key(mark: dict) -> list | None:
    """The stamp of the bucket's ``index.jsonl`` the mirror last saw (listed, or fetched)."""
    return mark.get("listed", {}).get("index.jsonl") or mark.get("files", {}).get("index.jsonl")


class ListedFileCheck(FileCheck):
    """The file checks of a mirrored run, against one listing of its ``episodes/`` in the
    bucket, made only when needed: the problems found are kept in the mirror with the
    ``index.jsonl`` they were found for (its size and ETag in the bucket), and reused while
    it is the same (an episode's files never change once its row is written; as the local
    file checks' cache, a file deleted from the bucket behind an unchanged index is not seen)."""

    def __init__(self, run_dir: Path, cols: Columns | None = None) -> None:
        """The checks of the mirrored run at ``run_dir``; ``cols``: its columnar copy, if any."""
        super().__init__(run_dir)
        self.mark = read_mark(run_dir / RUN_MARK)
        self.key = _index_key(self.mark)
        self.cols = cols

    def known(self) -> list[Problem] | None:
        """The problems the columnar copy holds, else those kept in the mirror, for this
        ``index.jsonl`` (None: not known, :meth:`run` looks)."""
        if self.cols is not None:
            got = self.cols.file_problems(self.key)
            if got is not None:
                return got
        kept = self.mark.get("file_check")
        if not isinstance(kept, dict) or self.key is None or kept.get("key") != self.key:
            return None
        try:
            return [Problem(str(f), int(n), str(m), str(s)) for f, n, m, s in kept["problems"]]
        except (KeyError, TypeError, ValueError):
            return None

    def run(self, refs: list) -> list[Problem]:
        """Check the files against one listing of the run's ``episodes/`` in the bucket (and
        its pack's members), with a problem for each object refused there; kept in the mirror."""
        fs, path = filesystem(str(self.mark.get("url", "")))
        fs.invalidate_cache(f"{path}/episodes")
        try:
            found = fs.find(f"{path}/episodes", detail=True)
        except FileNotFoundError:
            found = {}
        infos = {k[len(path) + 1:]: info for k, info in found.items()}
        keep, refused = settle(infos)
        self.listing = frozenset(keep) | frozenset(k for k in refused if k in infos and is_file_name(k))
        pack = remote_pack(self.run_dir)
        if pack is not None:
            self.listing |= frozenset(pack[1].members)
        out = super().run(refs) + [Problem(rel, 0, why) for rel, why in sorted(refused.items())]
        if self.key is not None:
            mark = read_mark(self.run_dir / RUN_MARK)
            if _index_key(mark) == self.key:
                mark["file_check"] = {"key": self.key, "problems": [[p.file, p.line, p.message, p.severity]
                                                                    for p in out]}
                write_mark(self.run_dir / RUN_MARK, mark)
        return out
