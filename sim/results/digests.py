"""Each table's SHA-256, recorded in a run's summary (``digests``: file name -> hex) by
the writer (``sim.results.io.RunResult.write``) once its tables are written, and checked
by the reader (``sim.results.runfolder``): a table edited, truncated or copied over
after the run is then told apart from a folder written before fragsim recorded them."""

from __future__ import annotations

import hashlib
from pathlib import Path

DIGESTS = "digests"
"""The summary's key for its tables' SHA-256 (hex), by file name."""


def file_sha256(path: Path) -> str:
    """The SHA-256 (hex) of the file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def table_digests(folder: Path, names: list[str]) -> dict[str, str]:
    """File name -> SHA-256 (hex) of each of ``names`` in ``folder``."""
    return {name: file_sha256(folder / name) for name in names}
