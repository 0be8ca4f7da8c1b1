"""``rbfkmeans fit FILE --n-clusters K``: cluster a numeric CSV or ``.npy`` file.

Reads ``X`` (n, d) from a ``.npy`` array (1-D is one column) or from a CSV read by the rules of
Python's :mod:`csv` module (fields may be quoted; ``--delimiter``, default ``,`` and a tab for
``.tsv``). Blank lines and lines starting with ``#`` are skipped. The first other row is a header
when at least one of its fields is non-empty and not a number (empty fields alone do not make a
header); the header must have one name per column. Every other field must be a finite number: an
empty field, a word, NaN/inf or a row of another length is an error naming its line and column.
The command prints what it read (rows, columns, header), fits :class:`~rbfkmeans.RBFKMeans` and
writes, into ``--out`` (default: the input's folder),

- ``<stem>_labels``: the nearest centroid of each row (n,),
- ``<stem>_memberships``: ``predict_proba`` (n, k), the memberships at the last temperature,
- ``<stem>_centers``: the centroids ``C`` (k, d),

where ``<stem>`` is the input's name less its last suffix (``data.v2.csv`` gives
``data.v2_labels.csv``), as ``.npy`` when the input is ``.npy``, else as CSV written by the
:mod:`csv` module: a header line (the input's header for the centres, else ``x0, x1, ...``),
labels as integers, floats with the digits that round-trip them exactly.

An output that already exists is an error before anything is read or fitted, unless ``--force``
is passed; the input file itself is never overwritten. Each output is written to a temporary file
in its folder and the three are moved into place only when all were written: a failed run leaves
the folder as it was. Bad input (missing file, non-numeric or ragged CSV, NaN/inf, ``k > n``...)
exits with status 2 and a one-line message on stderr, no traceback.

NumPy and the estimator are imported when the command runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .assignments import ASSIGNMENTS
from .metrics import METRICS

if TYPE_CHECKING:
    import numpy as np

__all__ = ["add_fit_parser", "output_paths", "read_matrix", "run_fit"]

OUTPUTS = ("labels", "memberships", "centers")
"""The outputs' names after ``<stem>_``, in the order they are written."""

Writer = Callable[[IO[bytes]], None]


class InputError(ValueError):
    """A problem with the user's files or arguments, reported as one line."""


def add_fit_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``fit`` subcommand on ``sub`` (an ``add_subparsers`` object)."""
    p = sub.add_parser(
        "fit",
        help="cluster a numeric CSV or .npy file",
        description="Cluster the rows of a numeric CSV (optional header) or .npy file with "
        "RBFKMeans; write labels, memberships and centres next to it (or into --out).",
    )
    p.add_argument("file", type=Path, help="input: .csv (or any text table) or .npy")
    p.add_argument("-k", "--n-clusters", type=int, required=True, help="number of clusters")
    p.add_argument("--assignment", choices=ASSIGNMENTS, default="entmax15",
                   help="simplex mapping of the soft assignment (default: entmax15)")
    p.add_argument("--metric", choices=METRICS, default="sqeuclidean",
                   help="sqeuclidean (k-means) or cosine (spherical k-means: unit centres, "
                   "inertia sum(1 - max cos); every row needs a non-zero norm)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (created if needed; default: the input's folder)")
    p.add_argument("--force", action="store_true",
                   help="replace outputs that already exist (the input file never is)")
    p.add_argument("--random-state", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--max-swaps", type=int, default=30,
                   help="swaps after an annealed fit, at most (default 30, as RBFKMeans; 0: none)")
    p.add_argument("--delimiter", default=None,
                   help="CSV field separator, one character (default ',', tab for .tsv; "
                   "'tab' for a tab)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress bar over temperatures")
    p.set_defaults(func=run_fit)
    return p


# -- reading -----------------------------------------------------------------------------------


def parse_delimiter(value: str | None, path: Path) -> str:
    """The CSV field separator: ``value`` (``tab`` or ``\\t`` for a tab), by default ``,``, or a
    tab for a ``.tsv`` file. A quote, a line break or a character of a number is refused."""
    if value is None:
        return "\t" if path.suffix.lower() == ".tsv" else ","
    delimiter = "\t" if value.lower() in ("tab", "\\t") else value
    if len(delimiter) != 1 or delimiter in "\"\r\n.+-_" or delimiter.isalnum():
        raise InputError(
            "--delimiter must be one character, not a quote, a line break or a character of a "
            f"number ('tab' for a tab); got {value!r}"
        )
    return delimiter


def read_matrix(path: Path, delimiter: str | None = None) -> tuple[np.ndarray, list[str] | None]:
    """``X`` (n, d) from ``path`` and the CSV header (``None`` when there is none)."""
    import numpy as np

    _check_input(path)
    if _is_npy(path):
        return _read_npy(path), None
    X, header, lines = _read_csv(path, parse_delimiter(delimiter, path))
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = (int(v[0]) for v in np.nonzero(bad))
        raise InputError(f"{path}: line {lines[i]}, column {j + 1}: {float(X[i, j])} is not finite")
    return X, header


def _is_npy(path: Path) -> bool:
    return path.suffix.lower() == ".npy"


def _check_input(path: Path) -> None:
    """Raise unless ``path`` is an existing file."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")


def _read_npy(path: Path) -> np.ndarray:
    import numpy as np

    try:
        X = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(f"{path}: not a readable .npy array ({_one_line(exc)})") from None
    if not isinstance(X, np.ndarray):
        raise InputError(f"{path}: expected one array, got {type(X).__name__}")
    if not (np.issubdtype(X.dtype, np.integer) or np.issubdtype(X.dtype, np.floating)):
        raise InputError(f"{path}: expected an integer or float array; got dtype {X.dtype}")
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2:
        raise InputError(f"{path}: expected a 2-D array (n, d); got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise InputError(f"{path}: the array is empty (shape {X.shape})")
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = (int(v[0]) for v in np.nonzero(bad))
        raise InputError(f"{path}: row {i}, column {j}: {float(X[i, j])} is not finite")
    return X


def _read_csv(path: Path, delimiter: str) -> tuple[np.ndarray, list[str] | None, list[int]]:
    """The data rows, the header and the line number of each row (see the module's rules)."""
    import numpy as np

    rows: list[list[float]] = []
    lines: list[int] = []
    header: list[str] | None = None
    header_line = 0
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=delimiter)
            for fields in reader:
                if _is_blank(fields) or fields[0].lstrip().startswith("#"):
                    continue
                if not rows and header is None and _is_header(fields):
                    header, header_line = [s.strip() for s in fields], reader.line_num
                    continue
                where = f"{path}: line {reader.line_num}"
                values = _parse_row(fields, where)
                if rows and len(values) != len(rows[0]):
                    raise InputError(f"{where} has {len(values)} values, expected {len(rows[0])}")
                rows.append(values)
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text (UTF-8) file") from None
    except csv.Error as exc:
        raise InputError(f"{path}: {_one_line(exc)}") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    if header is not None and len(header) != len(rows[0]):
        raise InputError(f"{path}: line {header_line}: the header has {len(header)} names, "
                         f"the rows {len(rows[0])} values")
    return np.asarray(rows, dtype=np.float64), header, lines


def _is_blank(fields: list[str]) -> bool:
    """An empty line (no fields) or a line of spaces (one blank field)."""
    return not fields or (len(fields) == 1 and not fields[0].strip())


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _is_header(fields: list[str]) -> bool:
    """At least one field is non-empty and not a number."""
    return any(s.strip() and not _is_number(s) for s in fields)


def _parse_row(fields: list[str], where: str) -> list[float]:
    """The numbers of one data row; ``where`` (file and line) prefixes the error messages."""
    values = []
    for col, s in enumerate(fields, start=1):
        if not s.strip():
            raise InputError(f"{where}, column {col}: empty field")
        try:
            values.append(float(s))
        except ValueError:
            raise InputError(f"{where}, column {col}: {s.strip()!r} is not a number") from None
    return values


# -- the outputs -------------------------------------------------------------------------------


def output_paths(path: Path, out: Path) -> list[Path]:
    """The outputs of input ``path`` in folder ``out``: ``<stem>_labels``, ``<stem>_memberships``,
    ``<stem>_centers``, each with ``.npy`` for a ``.npy`` input, else ``.csv``; ``<stem>`` is the
    input's name less its last suffix only."""
    ext = ".npy" if _is_npy(path) else ".csv"
    return [out / f"{path.stem}_{what}{ext}" for what in OUTPUTS]


def check_out(out: Path) -> None:
    """Raise unless ``out`` is a writable folder or can be created as one: its nearest existing
    ancestor must be a writable folder."""
    folder = out.absolute()
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder, cannot write the outputs into {out}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{folder}: permission denied, cannot write the outputs into {out}")


def check_targets(targets: Sequence[Path], source: Path, force: bool) -> None:
    """Raise if a target is a folder or the input ``source``, or, without ``force``, exists."""
    existing = [t for t in targets if os.path.lexists(t)]
    for target in existing:
        if target.is_dir():
            raise InputError(f"{target}: is a folder, cannot write an output there")
        if _same_file(target, source):
            raise InputError(f"{target}: is the input file, which is never overwritten")
    if existing and not force:
        names = ", ".join(str(t) for t in existing)
        verb = "exists" if len(existing) == 1 else "exist"
        raise InputError(f"{names} already {verb}; pass --force to overwrite")


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
            raise InputError(f"{p}: cannot create the folder ({_reason(exc)})") from None
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
        raise InputError(f"{target}: cannot write ({_reason(exc)})") from None
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
            raise InputError(f"{target}: cannot write ({_reason(exc)})") from None
        raise
    return temporary


def _move(temporary: Path, target: Path) -> None:
    try:
        os.replace(temporary, target)
    except OSError as exc:
        raise InputError(f"{target}: cannot write ({_reason(exc)})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_npy(f: IO[bytes], A: np.ndarray) -> None:
    import numpy as np

    np.save(f, A)


def _write_csv(f: IO[bytes], A: np.ndarray, header: Sequence[str]) -> None:
    """``A`` (n,) or (n, m) as CSV under ``header``: integers as integers, floats with ``repr``
    (the shortest digits that read back to the same value)."""
    import numpy as np

    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    as_text = str if np.issubdtype(A.dtype, np.integer) else repr
    for row in A.reshape(A.shape[0], -1).tolist():
        writer.writerow([as_text(v) for v in row])
    text.flush()
    text.detach()


def _writers(npy: bool, labels: np.ndarray, P: np.ndarray, C: np.ndarray,
             columns: list[str]) -> list[Writer]:
    """One writer per output, in the order of :data:`OUTPUTS`."""
    if npy:
        return [partial(_write_npy, A=A) for A in (labels, P, C)]
    headers = (["label"], [f"cluster_{j}" for j in range(P.shape[1])], columns)
    return [partial(_write_csv, A=A, header=h)
            for A, h in zip((labels, P, C), headers, strict=True)]


# -- the command -------------------------------------------------------------------------------


def run_fit(args: argparse.Namespace) -> int:
    """Run ``rbfkmeans fit`` with parsed ``args``; returns the exit status (2 on bad input)."""
    import warnings

    import numpy as np

    try:
        delimiter = parse_delimiter(args.delimiter, args.file)
        _check_input(args.file)
        out = args.out if args.out is not None else args.file.resolve().parent
        check_out(out)
        targets = output_paths(args.file, out)
        check_targets(targets, args.file, args.force)
        X, header = read_matrix(args.file, delimiter)
        print(_describe(args.file, X, header), flush=True)
        from .estimator import RBFKMeans

        est = RBFKMeans(args.n_clusters, assignment=args.assignment, metric=args.metric,
                        random_state=args.random_state, max_swaps=args.max_swaps,
                        verbose=int(args.verbose))
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X)
            P = est.predict_proba(X)  # (n, k)
        for name, result in (("memberships", P), ("centres", est.cluster_centers_)):
            if not np.isfinite(result).all():  # a last guard: no file of NaN, ever
                raise ValueError(f"the fit produced non-finite {name}; nothing was written")
        seconds = time.perf_counter() - t0
        n, d = X.shape
        k = est.n_clusters
        columns = header if header is not None else [f"x{j}" for j in range(d)]
        writers = _writers(_is_npy(args.file), est.labels_, P, est.cluster_centers_, columns)
        write_outputs(targets, writers, args.file, args.force)
    except (ValueError, OSError) as exc:
        print(f"rbfkmeans fit: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    for message in dict.fromkeys(_one_line(w.message) for w in caught):
        print(f"rbfkmeans fit: warning: {message}", file=sys.stderr)
    T = est.temperatures_
    temps = (f"{T.size} (T {T[0]:.4g} -> {T[-1]:.4g})" if T.size
             else "0 (plain Lloyd)")
    print(f"{args.file}: n={n} d={d} k={k} assignment={args.assignment} metric={args.metric}")
    print(f"  inertia={est.inertia_:.6g} iterations={est.n_iter_} swaps={est.n_swaps_} "
          f"time={seconds:.2f}s temperatures={temps}")
    print("  wrote " + ", ".join(str(p) for p in targets))
    return 0


def _describe(path: Path, X: np.ndarray, header: list[str] | None) -> str:
    """One line on what was read: ``read FILE: n rows x d columns, header: a, b`` (or
    ``no header``; the dtype for ``.npy``)."""
    n, d = X.shape
    what = f"{X.dtype} array" if _is_npy(path) else (
        "no header" if header is None else "header: " + ", ".join(map(_show_name, header)))
    return f"read {path}: {n} rows x {d} columns, {what}"


def _show_name(name: str) -> str:
    """A header name as printed: in double quotes when empty or holding a comma or quote."""
    return f'"{name}"' if not name or any(c in name for c in ',"') else name


def _one_line(exc: BaseException | Warning | str) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())


def _reason(exc: OSError) -> str:
    """Why an operation on a file the command names itself failed, without the file name."""
    return exc.strerror or _one_line(exc)
