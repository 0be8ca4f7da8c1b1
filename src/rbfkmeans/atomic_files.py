"""Writing a set of output files all or none, never over the input.

:func:`check_out` and :func:`check_targets` refuse, before any work, an output folder that cannot
be made or written and targets that are folders, the input itself, or (without ``force``)
existing files. :func:`write_outputs` writes each file to a temporary next to its target, then
moves the temporaries onto the targets; on any failure, an interrupt included, the folder is left
as it was: temporaries and outputs already moved are removed, the files they replaced are put
back (kept meanwhile as hard links, or renamed where there are none) and folders made for them
are removed. A command that writes a whole report folder (``reproduce``, ``deep-cluster``,
``vq``) writes it into :func:`staged_folder`'s temporary folder inside it, whose files are moved
into place the same way once the command has succeeded; such a temporary folder left by a run
killed outright does not make the folder one that holds files. Problems are
:class:`OutputError`, one line each.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

__all__ = ["OutputError", "Writer", "check_out", "check_report_folder", "check_targets",
           "staged_folder", "write_outputs"]

Writer = Callable[[IO[bytes]], None]
"""Writes one output's bytes to an open binary file."""


class OutputError(ValueError):
    """A problem with the output files or their folder, reported as one line."""


def as_path(value: object, name: str) -> Path:
    """``value`` (a ``str`` or an ``os.PathLike``) as a :class:`~pathlib.Path`, else raise
    ``TypeError`` naming ``name``."""
    if isinstance(value, Path):
        return value
    if isinstance(value, str) or (isinstance(value, os.PathLike)
                                  and isinstance(os.fspath(value), str)):
        return Path(value)
    raise TypeError(f"{name} must be a path (str or os.PathLike); got "
                    f"{type(value).__name__} {value!r}")


def check_out(out: Path | str) -> None:
    """Raise unless ``out`` (a path or a str) is a writable folder or can be created as one: its
    nearest existing ancestor must be a writable folder."""
    out = as_path(out, "out")
    folder = out.absolute()
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{folder}: not a folder, cannot write the outputs into {out}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{folder}: permission denied, cannot write the outputs into {out}")


def check_targets(targets: Sequence[Path | str], source: Path | str, force: bool) -> None:
    """Raise if a target is a folder or the input ``source``, or, without ``force``, exists.
    Paths may be given as str."""
    targets = _paths(targets, "targets")
    source = as_path(source, "source")
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


def _paths(targets: object, name: str) -> list[Path]:
    """A sequence of paths (or str) as a list of :class:`~pathlib.Path`, else raise naming
    ``name``."""
    if isinstance(targets, str | bytes | os.PathLike) or not isinstance(targets, Sequence):
        raise TypeError(f"{name} must be a sequence of paths; got {type(targets).__name__} "
                        f"{targets!r}")
    return [as_path(t, f"{name}[{i}]") for i, t in enumerate(targets)]


def write_outputs(targets: Sequence[Path | str], writers: Sequence[Writer],
                  source: Path | str, force: bool) -> None:
    """Write each output with its writer to a temporary file next to its target (all targets
    share one folder), then move the temporaries onto the targets. On any failure the folder is
    left as it was: temporaries and outputs already moved are removed, files they replaced
    (``force``) are put back, and folders made for them are removed. ``targets`` must be
    non-empty, in one folder, with one writer each (``ValueError`` naming them otherwise)."""
    targets = _paths(targets, "targets")
    source = as_path(source, "source")
    if not targets:
        raise ValueError("targets must name at least one output file; got an empty sequence")
    if isinstance(writers, str | bytes) or not isinstance(writers, Sequence) \
            or len(writers) != len(targets) or not all(callable(f) for f in writers):
        raise ValueError(f"writers must be {len(targets)} callables, one per target; got "
                         f"{writers!r}")
    if len({t.parent for t in targets}) > 1:
        raise ValueError(f"targets must share one folder; got "
                         f"{sorted({str(t.parent) for t in targets})}")
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


_STAGE_PREFIX, _STAGE_SUFFIX = ".rbfkmeans-report.", ".tmp"
"""How :func:`staged_folder`'s temporary folder is named: prefix, random letters, suffix."""


def check_report_folder(out: Path | str, force: bool) -> None:
    """Raise unless ``out`` can take a command's report: a folder that exists or can be made
    (:func:`check_out`) and, without ``force``, holds nothing yet, so that no file the command
    did not write in this run is replaced unless asked.

    The tool's own staging folders (:func:`_is_stage`) do not count as files there: one is left
    behind only by a run killed outright (SIGKILL, a power cut), and it holds nothing the user
    wrote, while refusing the folder for it would block every later run. Such a folder is left
    as it is, not removed: it may be another run's, still writing into the same folder (of two
    such runs, the one that finishes second finds the other's files and is refused, as for
    files that appeared while it ran)."""
    out = as_path(out, "out")
    check_out(out)
    if os.path.lexists(out) and not out.is_dir():
        raise OutputError(f"{out}: is a file, cannot write a report folder there")
    if not force and out.is_dir() and any(not _is_stage(p) for p in out.iterdir()):
        raise OutputError(f"{out} already holds files; pass --force to write the report over "
                          "them, or choose another folder")


def _is_stage(path: Path) -> bool:
    """Whether ``path`` is a staging folder of :func:`staged_folder`: a folder (not a link)
    named ``.rbfkmeans-report.*.tmp``."""
    name = path.name
    return (name.startswith(_STAGE_PREFIX) and name.endswith(_STAGE_SUFFIX)
            and len(name) > len(_STAGE_PREFIX) + len(_STAGE_SUFFIX)
            and not path.is_symlink() and path.is_dir())


@contextlib.contextmanager
def staged_folder(out: Path | str, force: bool) -> Iterator[Path]:
    """A report folder written all or none. Checks ``out`` (:func:`check_report_folder`), makes
    it if need be, then yields a new hidden temporary folder inside it for the command to write
    its files into (on ``out``'s own file system, whatever its parent's: a mount point, a link
    to another disk); when the block ends without error the files are moved out of it into
    ``out`` all or none, files of the same names replaced only with ``force``. On any failure,
    an interrupt included, the temporary folder and the folders made for it are removed and
    ``out`` is left as it was. A Python exception is needed for that: the ``rbfkmeans`` command
    turns SIGTERM into one (:func:`rbfkmeans.cli.main`); a process killed outright leaves the
    temporary folder, which later runs ignore (:func:`check_report_folder`)."""
    out = as_path(out, "out")
    check_report_folder(out, force)
    created = _make_folders(out)
    stage: Path | None = None
    try:
        try:
            stage = Path(tempfile.mkdtemp(prefix=_STAGE_PREFIX, suffix=_STAGE_SUFFIX, dir=out))
        except OSError as exc:
            raise OutputError(f"{out}: cannot write ({_reason(exc)})") from None
        yield stage
        files = sorted(stage.iterdir())
        if any(f.is_symlink() or not f.is_file() for f in files):
            raise OutputError(f"{out}: a report holds plain files only")
        targets = [out / f.name for f in files]
        existing = [t for t in targets if os.path.lexists(t)]
        if any(t.is_dir() for t in existing):
            raise OutputError(f"{out}: a folder there has the name of a report file")
        if existing and not force:  # one appeared while the command ran
            raise OutputError(f"{', '.join(map(str, existing))} appeared while the report was "
                              "written; pass --force to overwrite")
        _commit(files, targets)
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for folder in reversed(created):
            _remove_folder(folder)
        raise
    shutil.rmtree(stage, ignore_errors=True)


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
