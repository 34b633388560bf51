"""What an output path names, and whether fragsim may write there: the checks
:mod:`traces.atomic` (the one writer) makes before it stages anything.

What an output path may name (:func:`file_target`, :func:`check_folder_target`):

* nothing: the output is created (its folder must exist, for a file);
* a regular file (a file output): replaced whole, in one ``os.replace``;
* a folder (a folder output): replaced whole, only when the caller's ``check`` says it
  holds nothing but what fragsim wrote there (an earlier run, an earlier comparison);
* a symbolic link (a file output): followed; the file it names is replaced, the link
  kept. A link to nothing, or a loop of links, is refused;
* a character device (``/dev/null``, a terminal; ``/dev/stdout`` on one) or a FIFO with a
  reader (``/dev/stdout`` piped to another command): *written through*, never replaced.
  The output is complete in a temporary file first, then copied into it; a write error
  (``/dev/full``: no space left on device; a reader that went away) is an error. A FIFO
  nobody reads is refused, never waited on;
* anything else -- a folder for a file output, a file for a folder output, a socket, a
  block device -- is refused, one line naming the path and what it is.

Errors: a file output's problem is a :class:`traces.errors.TraceError` naming the path;
a folder output's a ``FileExistsError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from traces.errors import TraceError

KINDS: Final = {
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFREG: "a regular file",
}


def kind_of(mode: int) -> str:
    """What a ``stat`` mode names, in words (``a socket``)."""
    return KINDS.get(stat.S_IFMT(mode), "a special file")


@dataclass(frozen=True)
class FileTarget:
    """Where a file output goes: ``real`` (links followed), and whether it is written
    through (a character device or a FIFO) rather than replaced."""

    path: Path
    """As the user gave it (every message names it)."""
    real: Path
    through: bool


def os_error(path: Path, exc: OSError, doing: str = "cannot write file") -> TraceError:
    """``exc`` as one line naming ``path`` (never a temporary): ``cannot write file (...)``."""
    return TraceError(path, f"{doing} ({exc.strerror or exc})")


def file_target(path: str | Path) -> FileTarget:
    """What the file output ``path`` names (module docstring): TraceError, one line
    naming ``path``, for one it must not replace or cannot write into."""
    path = Path(path)
    try:
        st = os.stat(path)  # follows links
    except FileNotFoundError:
        if os.path.islink(path):
            raise TraceError(
                path,
                "a symbolic link to nothing; refusing to write through it",
                expected="a regular file, a link to one, or a new name",
                got=f"a link to {os.readlink(path)}",
            ) from None
        st = None
    except OSError as exc:  # a loop of links, a name too long, a folder not searchable
        if exc.errno == errno.ELOOP:
            raise TraceError(path, "a loop of symbolic links; refusing to write") from None
        problem = _folder_problem(path)
        raise problem or os_error(path, exc) from None
    if st is None:
        problem = _folder_problem(path)
        if problem is not None:
            raise problem
        return FileTarget(path, Path(os.path.realpath(path)), through=False)
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return FileTarget(path, Path(os.path.realpath(path)), through=False)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return FileTarget(path, Path(os.path.realpath(path)), through=True)
    raise TraceError(
        path,
        f"is {kind_of(mode)}; refusing to replace it",
        expected="a regular file, a character device, a FIFO being read, or a new name",
    )


def _folder_problem(path: Path) -> TraceError | None:
    """Why ``path``'s folder cannot take a new file, or None."""
    folder = path.parent
    try:
        st = folder.stat()
    except FileNotFoundError:
        return TraceError(
            path, "output folder does not exist", expected="an existing folder", got=str(folder)
        )
    except OSError as exc:  # a name too long, a folder that may not be searched, a loop
        return TraceError(path, f"cannot use output folder ({exc.strerror or exc})")
    if not stat.S_ISDIR(st.st_mode):
        return TraceError(
            path, "output folder is not a folder", expected="an existing folder", got=str(folder)
        )
    return None


def check_folder_target(out: Path) -> None:
    """Refuse (FileExistsError) a folder output at a symbolic link or at anything that
    is not a folder; ``out`` absent or a folder passes (what it holds is the caller's
    check)."""
    if out.is_symlink():
        raise FileExistsError(f"{out} exists and is not a directory (a symbolic link)")
    try:
        st = os.stat(out)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise FileExistsError(f"{out} exists and is not a directory ({kind_of(st.st_mode)})")


def same_output(a: str | Path, b: str | Path) -> bool:
    """Whether two output paths name one file (links and relative forms resolved)."""
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    if ra == rb:
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(ra, rb)
    return False


def check_distinct(outputs: dict[str, str | Path]) -> None:
    """Refuse (TraceError naming the second path) two outputs of one command that name
    one file: ``{"-o": out, "--tests": tests}``, each a flag and its path (None: not
    given)."""
    seen: list[tuple[str, str | Path]] = []
    for flag, path in outputs.items():
        if path is None:
            continue
        for other_flag, other in seen:
            if same_output(path, other):
                raise TraceError(
                    path,
                    f"{flag} names the same file as {other_flag} ({other}); "
                    "give each output its own path",
                )
        seen.append((flag, path))
