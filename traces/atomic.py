"""Atomic outputs that replace only what fragsim may replace: the one writer of every
file and folder a command writes (``traces`` is the lowest layer, so every other one can
use it).

What an output path may name is :mod:`traces.targets`'s to say (:func:`file_target`,
:func:`check_folder_target`): a file is replaced or written through, a folder replaced
only when the caller's check allows; anything else is refused.

Atomicity: a file is written to ``.NAME.PID.RANDOM.tmp`` beside its target and renamed
over it; a folder to ``.NAME.tmp-PID-XXXXXXXX/`` beside it, then swapped with the earlier
folder in one step (Linux ``renameat2(RENAME_EXCHANGE)``; where unavailable the earlier
folder is renamed aside to ``.NAME.old-PID-XXXXXXXX/`` first, and put back by the next
write if the process died in between). Temporaries whose PID no longer runs (a SIGKILL
cannot be caught) are removed by the next write to the same target.

Several outputs of one command are committed together (:class:`Outputs`): each is
complete in its temporary before any is put in place, so a failure while writing any of
them (a full disk, a read-only folder) leaves every target as it was; two outputs at one
path (also through links or relative forms) are refused before anything is written.
Ctrl-C is ignored while the outputs are put in place (milliseconds).

Errors: a file output's problem is a :class:`traces.errors.TraceError` naming the path
(never the temporary); a folder output's is an ``OSError`` (``FileExistsError`` for a
target it refuses to replace), as :meth:`sim.results.io.RunResult.write` documents.

``FRAGSIM_FAULT_AT=POINT[:SIGNAL]`` is a test-only hook (:func:`fault`): the writer sends
itself ``SIGNAL`` (default ``KILL``) at the named point (``sim.results.io.FAULT_POINTS``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import hashlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from traces.errors import TraceError
from traces.targets import (
    FileTarget,
    check_distinct,
    check_folder_target,
    file_target,
    os_error,
    same_output,
)

TMP_SUFFIX: Final = ".tmp"
_STEM_LIMIT: Final = 120  # longer names are shortened in the temporaries' names
_TMP_RE: Final = re.compile(r"\.(\d+)\.[^.]+\.tmp$")

# -- names of temporaries ---------------------------------------------------------------


def _stem(name: str) -> str:
    """The target's name as used in its temporaries' names (a long name is cut and
    keeps a digest, so a temporary's name stays within the file system's 255 bytes)."""
    if len(name.encode()) <= _STEM_LIMIT:
        return name
    return f"{name[:80]}~{hashlib.sha1(name.encode()).hexdigest()[:12]}"


def temp_prefix(path: Path) -> str:
    """``.NAME.PID.``: the start of the name of this process's temporaries for ``path``."""
    return f".{_stem(path.name)}.{os.getpid()}."


def _folder_prefix(out: Path, kind: str) -> str:
    """``.NAME.KIND-PID-``: ``mkdtemp`` appends 8 characters of ``[a-z0-9_]``."""
    return f".{_stem(out.name)}.{kind}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporaries (``.NAME.PID.RANDOM.tmp`` beside ``path``) that processes
    no longer alive left behind (a SIGKILL mid-write); returns what was removed."""
    removed = []
    pattern = f".{glob.escape(_stem(path.name))}.*{TMP_SUFFIX}"
    for tmp in path.parent.glob(pattern):
        m = _TMP_RE.search(tmp.name)
        if m is None or tmp.name[: m.start()] != f".{_stem(path.name)}" or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def clean_stale(out: Path, complete: Callable[[Path], bool] = lambda p: True) -> None:
    """Remove the folder temporaries of dead writers to ``out``; an earlier folder left
    aside (a kill between the two renames of a replacement without swap) is put back at
    ``out`` when nothing is there and ``complete(folder)`` says it is whole."""
    pattern = re.compile(rf"\.{re.escape(_stem(out.name))}\.(tmp|old)-(\d+)-[a-z0-9_]+")
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return
    for entry in sorted(entries):
        match = pattern.fullmatch(entry.name)
        if match is None or _alive(int(match.group(2))):
            continue
        if match.group(1) == "old" and not out.exists() and complete(entry):
            os.rename(entry, out)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def fault(point: str) -> None:
    """Test-only (``FRAGSIM_FAULT_AT=POINT[:SIGNAL]``): signal this process at ``point``."""
    spec = os.environ.get("FRAGSIM_FAULT_AT")
    if spec:
        where, _, name = spec.partition(":")
        if where == point:
            os.kill(os.getpid(), getattr(signal, f"SIG{name or 'KILL'}"))


# -- staging and committing ------------------------------------------------------------


@dataclass
class _File:
    target: FileTarget
    tmp: Path
    fd: int | None  # a written-through target, held open from staging to commit


@dataclass
class _Folder:
    out: Path
    tmp: Path


class Outputs:
    """The outputs of one command, staged then committed together (module docstring).
    Use :func:`staged`; :meth:`file` and :meth:`folder` return the temporary to write."""

    def __init__(self) -> None:
        self._files: list[_File] = []
        self._folders: list[_Folder] = []
        self._committed = False

    def _check_new(self, path: Path) -> None:
        for other in [f.target.path for f in self._files] + [f.out for f in self._folders]:
            if same_output(path, other):
                raise TraceError(
                    path, f"the same path as another output ({other}); give each its own path"
                )

    def file(self, path: str | Path) -> Path:
        """A temporary path for the file output ``path``, put in place on commit."""
        target = file_target(path)
        self._check_new(target.path)
        fd = None
        try:
            if target.through:
                fd = _open_through(target)
                made, tmp = tempfile.mkstemp(prefix="fragsim-output-", suffix=TMP_SUFFIX)
            else:
                remove_stale_temporaries(target.real)
                made, tmp = tempfile.mkstemp(
                    prefix=temp_prefix(target.real), suffix=TMP_SUFFIX, dir=target.real.parent
                )
        except OSError as exc:
            if fd is not None:
                os.close(fd)
            raise os_error(target.path, exc) from None
        os.close(made)
        self._files.append(_File(target, Path(tmp), fd))
        return Path(tmp)

    def folder(
        self,
        out: str | Path,
        check: Callable[[Path], None],
        complete: Callable[[Path], bool] = lambda p: True,
    ) -> Path:
        """A temporary folder for the folder output ``out``, swapped in on commit.
        ``check(out)`` raises (FileExistsError) unless ``out`` holds only what may be
        replaced; stale temporaries of dead writers are removed first (``complete``:
        :func:`clean_stale`)."""
        out = Path(out)
        check_folder_target(out)
        check(out)
        self._check_new(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out, complete)
        tmp = Path(tempfile.mkdtemp(prefix=_folder_prefix(out, "tmp"), dir=out.parent))
        self._folders.append(_Folder(out, tmp))
        return tmp

    def commit(self, on_commit: Callable[[], None] | None = None) -> None:
        """Put every staged output in place (files first, then folders), with Ctrl-C
        ignored; ``on_commit`` is called once they are, before Ctrl-C is heard again."""
        umask = os.umask(0)
        os.umask(umask)
        for staged_file in self._files:
            try:
                os.chmod(staged_file.tmp, 0o666 & ~umask)  # mkstemp makes 0600
            except OSError as exc:
                raise os_error(staged_file.target.path, exc) from None
        for staged_folder in self._folders:
            staged_folder.tmp.chmod(0o777 & ~umask)  # mkdtemp makes it 0700
        with _interrupts_ignored():
            for staged_file in self._files:
                _commit_file(staged_file)
            for staged_folder in self._folders:
                _commit_folder(staged_folder.tmp, staged_folder.out)
            self._committed = True
            if on_commit is not None:
                on_commit()

    def discard(self) -> None:
        """Remove every temporary (after a swap: the earlier folder) and close devices."""
        for staged_file in self._files:
            with contextlib.suppress(OSError):
                os.unlink(staged_file.tmp)
            if staged_file.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(staged_file.fd)
                staged_file.fd = None
        for staged_folder in self._folders:
            shutil.rmtree(staged_folder.tmp, ignore_errors=True)


@contextlib.contextmanager
def staged() -> Iterator[Outputs]:
    """Stage a command's outputs; commit them all when the block ends normally (unless
    it committed them itself), else remove every temporary and leave the targets."""
    outputs = Outputs()
    try:
        yield outputs
        if not outputs._committed:
            outputs.commit()
    finally:
        outputs.discard()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path for the file output ``path``; put it in place only on
    success (module docstring: what ``path`` may name). Any ``OSError`` (missing folder,
    a name too long, no permission, disk full) becomes a :class:`TraceError` naming
    ``path``, never the temporary file."""
    with staged() as outputs:
        tmp = outputs.file(path)
        try:
            yield tmp
        except OSError as exc:
            raise os_error(Path(path), exc) from None


def _open_through(target: FileTarget) -> int:
    """Open a character device or a FIFO for writing without waiting: a FIFO nobody
    reads is refused (TraceError), never waited on."""
    try:
        fd = os.open(target.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise TraceError(
                target.path,
                "is a FIFO (named pipe) that nothing reads; refusing to wait for a reader",
                expected="a regular file, or a FIFO another process reads",
            ) from None
        raise
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return fd


def _commit_file(staged_file: _File) -> None:
    target = staged_file.target
    try:
        if staged_file.fd is None:
            os.replace(staged_file.tmp, target.real)
            return
        with open(staged_file.tmp, "rb") as source:
            while chunk := source.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(staged_file.fd, view) :]
        os.close(staged_file.fd)
        staged_file.fd = None
    except OSError as exc:
        raise os_error(target.path, exc) from None


def _commit_folder(tmp: Path, out: Path) -> None:
    """Move the complete folder ``tmp`` to ``out``; an earlier folder there ends in
    ``tmp`` (swapped, then deleted) or aside (deleted). At every instant ``out`` or an
    ``old`` aside folder holds a complete one."""
    if not out.exists():
        os.rename(tmp, out)
        return
    if exchange(tmp, out):
        fault("swapped")
        shutil.rmtree(tmp)
        return
    aside = Path(tempfile.mkdtemp(prefix=_folder_prefix(out, "old"), dir=out.parent))
    os.rename(out, aside)  # an empty directory is replaced by rename
    fault("aside")
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(aside, out)
        raise
    fault("replaced")
    shutil.rmtree(aside, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux ``renameat2``); False where the C
    library or the file system has no such call, so the caller falls back."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # no exchange here
        return False
    raise OSError(code, os.strerror(code), str(b))


exchange: Callable[[Path, Path], bool] = _renameat2
"""The swap :func:`_commit_folder` uses (tests replace it to run the fallback)."""


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """Ctrl-C (SIGINT) does nothing within the block. Only the main thread can set
    signal handlers in Python; elsewhere (no Ctrl-C arrives there) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = [
    "TMP_SUFFIX",
    "FileTarget",
    "Outputs",
    "atomic_path",
    "check_distinct",
    "check_folder_target",
    "clean_stale",
    "exchange",
    "fault",
    "file_target",
    "remove_stale_temporaries",
    "same_output",
    "staged",
    "temp_prefix",
]
