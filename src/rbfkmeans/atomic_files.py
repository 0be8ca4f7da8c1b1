"""Writing a set of output files all or none, never over the input.

:func:`check_out` and :func:`check_targets` refuse, before any work, an output folder that cannot
be made or written and targets that are folders, the input itself, or (without ``force``)
existing files. :func:`write_outputs` writes each file to a temporary next to its target, then
moves the temporaries onto the targets; on any failure, an interrupt included, the folder is left
as it was: temporaries and outputs already moved are removed, the files they replaced are put
back (kept meanwhile as hard links, or renamed where there are none) and folders made for them
are removed. Problems are :class:`OutputError`, one line each.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

__all__ = ["OutputError", "Writer", "check_out", "check_targets", "write_outputs"]

Writer = Callable[[IO[bytes]], None]
"""Writes one output's bytes to an open binary file."""


class OutputError(ValueError):
    """A problem with the output files or their folder, reported as one line."""


def check_out(out: Path) -> None:
    """Raise unless ``out`` is a writable folder or can be created as one: its nearest existing
    ancestor must be a writable folder."""
    folder = out.absolute()
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{folder}: not a folder, cannot write the outputs into {out}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{folder}: permission denied, cannot write the outputs into {out}")


def check_targets(targets: Sequence[Path], source: Path, force: bool) -> None:
    """Raise if a target is a folder or the input ``source``, or, without ``force``, exists."""
    existing = [t for t in targets if os.path.lexists(t)]
    for target in existing:
        if target.is_dir():
            raise OutputError(f"{target}: is a folder, cannot write an output there")
        if _same_file(target, source):
            raise OutputError(f"{target}: is the input file, which is never overwritten")
    if existing and not force:
        names = ", ".join(str(t) for t in existing)
        verb = "exists" if len(existing) == 1 else "exist"
        raise OutputError(f"{names} already {verb}; pass --force to overwrite")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def write_outputs(targets: Sequence[Path], writers: Sequence[Writer], source: Path,
                  force: bool) -> None:
    """Write each output with its writer to a temporary file next to its target (all targets
    share one folder), then move the temporaries onto the targets. On any failure the folder is
    left as it was: temporaries and outputs already moved are removed, files they replaced
    (``force``) are put back, and folders made for them are removed."""
    created = _make_folders(targets[0].parent)
    temporaries: list[Path] = []
    try:
        for target, write in zip(targets, writers, strict=True):
            temporaries.append(_write_temporary(target, write))
        check_targets(targets, source, force)  # one may have appeared during the fit
        _commit(temporaries, targets)
    except BaseException:
        for path in temporaries:
            path.unlink(missing_ok=True)
        for folder in reversed(created):
            _remove_folder(folder)
        raise


def _commit(temporaries: Sequence[Path], targets: Sequence[Path]) -> None:
    """Move each temporary onto its target, all or none: on failure the outputs moved so far are
    removed and the files they replaced are put back."""
    backups: Path | None = None
    done: list[tuple[Path, Path | None]] = []  # each target, and its former file if it had one
    try:
        for temporary, target in zip(temporaries, targets, strict=True):
            backup = None
            if os.path.lexists(target):
                if backups is None:
                    backups = Path(tempfile.mkdtemp(prefix=".rbfkmeans-fit.", dir=target.parent))
                backup = _keep(target, backups / target.name)
            done.append((target, backup))
            _move(temporary, target)
    except BaseException:
        _undo(done)
        if backups is not None:
            _remove_folder(backups)  # left in place, with what it holds, if a restore failed
        raise
    for _, backup in done:
        if backup is not None:
            with contextlib.suppress(OSError):
                backup.unlink()
    if backups is not None:
        _remove_folder(backups)


def _same_entry(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are links to one file (symbolic links not followed)."""
    try:
        return os.path.samestat(os.lstat(a), os.lstat(b))
    except OSError:
        return False


def _keep(target: Path, backup: Path) -> Path:
    """Keep ``target``'s file as ``backup``: a hard link, or where there are none, a rename."""
    try:
        os.link(target, backup, follow_symlinks=False)
    except (OSError, NotImplementedError):
        os.replace(target, backup)
    return backup


def _undo(done: Sequence[tuple[Path, Path | None]]) -> None:
    """Remove the outputs moved onto ``done``'s targets and put their former files back."""
    for target, backup in reversed(done):
        with contextlib.suppress(OSError):
            if backup is None:
                target.unlink(missing_ok=True)
            elif _same_entry(backup, target):  # never moved: rename() would leave both links
                backup.unlink()
            else:
                os.replace(backup, target)


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return those created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)][::-1]
    for p in missing:
        try:
            p.mkdir()
        except OSError as exc:
            for q in reversed(missing[: missing.index(p)]):
                _remove_folder(q)
            raise OutputError(f"{p}: cannot create the folder ({_reason(exc)})") from None
    return missing


def _remove_folder(folder: Path) -> None:
    """Remove ``folder`` if it is empty; leave it otherwise."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def _write_temporary(target: Path, write: Writer) -> Path:
    """Write a temporary file in ``target``'s folder with ``write``; return its path."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write ({_reason(exc)})") from None
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(f"{target}: cannot write ({_reason(exc)})") from None
        raise
    return temporary


def _move(temporary: Path, target: Path) -> None:
    try:
        os.replace(temporary, target)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write ({_reason(exc)})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    """Why an operation on a file the command names itself failed, without the file name."""
    return exc.strerror or " ".join(str(exc).split())
