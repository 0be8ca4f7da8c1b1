"""Reading a numeric table from a file: a ``.npy`` array or a CSV (the ``rbfkmeans fit`` input).

A ``.npy`` file holds one integer or float array (1-D is one column). A CSV is read by the rules
of Python's :mod:`csv` module (fields may be quoted; the delimiter defaults to ``,``, and a tab
for ``.tsv``). Blank lines and lines starting with ``#`` are skipped. The first other row is a
header when at least one of its fields is non-empty and not a number (empty fields alone do not
make a header: ``id,1`` is a header); :func:`header_warning` says when such a header also holds
numbers (a word mistyped in a first data row makes it a header, the data one row short). The
header must have one name per column. Every other field must be a finite number, written as
Python and NumPy read one in ASCII (``1.5``, ``-2e3``, ``+.5``; not ``1_000`` or other
scripts' digits): an empty field, a word, NaN/inf or a row of another length is an
:class:`InputError` naming its line and column. Compressed files and ``.npz`` archives are
named as such, not read.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["InputError", "check_input", "header_warning", "is_npy", "one_line", "parse_delimiter",
           "read_matrix", "read_table"]


class InputError(ValueError):
    """A problem with the user's files or arguments, reported as one line."""


def parse_delimiter(value: str | None, path: Path) -> str:
    """The CSV field separator: ``value`` (``tab`` or ``\\t`` for a tab), by default ``,``, or a
    tab for a ``.tsv`` file. A quote, a line break or a character of a number is refused."""
    path = _as_path(path)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"delimiter must be a string or None; got {type(value).__name__}")
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
    X, header, _ = read_table(path, delimiter)
    return X, header


def read_table(path: Path, delimiter: str | None = None
               ) -> tuple[np.ndarray, list[str] | None, list[int] | None]:
    """``X`` (n, d) from ``path``, the CSV header (``None`` when there is none) and the line of
    the file each row of ``X`` was read from (counting from 1, header, blank and comment lines
    included; ``None`` for a ``.npy`` file, which has no lines)."""
    import numpy as np

    path = _as_path(path)
    check_input(path)
    if is_npy(path):
        return _read_npy(path), None, None
    X, header, lines = _read_csv(path, parse_delimiter(delimiter, path))
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = (int(v[0]) for v in np.nonzero(bad))
        raise InputError(f"{path}: line {lines[i]}, column {j + 1}: {float(X[i, j])} is not "
                         "finite (NaN, inf, or a number beyond float64's range)")
    return X, header, lines


def is_npy(path: Path) -> bool:
    """Whether ``path`` names a ``.npy`` file (by its suffix, in any case)."""
    return _as_path(path).suffix.lower() == ".npy"


def check_input(path: Path) -> None:
    """Raise unless ``path`` is an existing file."""
    path = _as_path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")


def _as_path(path: object) -> Path:
    if not isinstance(path, str | Path):
        raise TypeError(f"path must be a str or a pathlib.Path; got {type(path).__name__}")
    return Path(path)


#: the first bytes of files that are not tables: what they are, and what to do
_MAGIC = ((b"PK\x03\x04", "a zip archive (an .npz?): save one array with numpy.save"),
          (b"\x1f\x8b", "a gzip-compressed file: decompress it first"))


def _not_a_table(path: Path) -> str | None:
    """What ``path`` is where its first bytes say it is an archive or compressed, else None."""
    with path.open("rb") as f:
        head = f.read(8)
    return next((what for magic, what in _MAGIC if head.startswith(magic)), None)


def _read_npy(path: Path) -> np.ndarray:
    import numpy as np

    try:
        with path.open("rb") as f:
            head = f.read(6)
        if head != b"\x93NUMPY":
            what = _not_a_table(path) or ("empty" if not head else "a text or other file")
            raise InputError(f"{path}: not a .npy array (no NumPy header: {what}; a CSV needs "
                             "a .csv, .tsv or .txt name)")
        X = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: not a readable .npy array ({one_line(exc)})") from None
    if not isinstance(X, np.ndarray):
        raise InputError(f"{path}: expected one array, got {type(X).__name__}")
    if X.dtype.kind not in "iuf":  # not bool, complex, timedelta64 (read as integers), ...
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
                values = _parse_row(fields, where, delimiter)
                if rows and len(values) != len(rows[0]):
                    raise InputError(f"{where} has {len(values)} values, expected {len(rows[0])}")
                rows.append(values)
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        what = _not_a_table(path)
        raise InputError(f"{path}: not a text (UTF-8) file" + (f": {what}" if what else "")
                         ) from None
    except csv.Error as exc:
        raise InputError(f"{path}: {one_line(exc)}") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    if header is not None and len(header) != len(rows[0]):
        raise InputError(f"{path}: line {header_line}: the header has {len(header)} names, "
                         f"the rows {len(rows[0])} values")
    return np.asarray(rows, dtype=np.float64), header, lines


def _is_blank(fields: list[str]) -> bool:
    """An empty line (no fields) or a line of spaces (one blank field). A line ``""`` is one
    empty field (the csv module reads an empty line as no fields): in a file of one column, a
    missing value, not a blank line."""
    return not fields or (len(fields) == 1 and fields[0] != "" and not fields[0].strip())


def _number(s: str) -> float:
    """``float(s)`` for a number written in ASCII without ``_`` (Python's ``float`` also reads
    ``1_000`` and other scripts' digits, which NumPy and CSV readers do not); ``ValueError``
    otherwise."""
    if not s.isascii() or "_" in s:
        raise ValueError(f"not a number: {s!r}")
    return float(s)


def _is_number(s: str) -> bool:
    try:
        _number(s)
    except ValueError:
        return False
    return True


def _is_header(fields: list[str]) -> bool:
    """At least one field is non-empty and not a number."""
    return any(s.strip() and not _is_number(s) for s in fields)


def header_warning(header: list[str] | None) -> str | None:
    """A warning for a header of which some names are numbers (``id,1``, or a data row with a
    mistyped word: ``0.5,abc,2`` would leave the data one row short), None otherwise.
    ``header`` is None or a list of strings (``TypeError`` naming it otherwise)."""
    if header is None:
        return None
    if not isinstance(header, list | tuple) or not all(isinstance(n, str) for n in header):
        raise TypeError(f"header must be None or a list of strings (the field names); got "
                        f"{header!r}")
    numbers = [col for col, name in enumerate(header, start=1) if _is_number(name)]
    if not numbers:
        return None
    words = [name for name in header if name and not _is_number(name)]
    if not words:  # no field is a word (read_matrix makes no such header)
        return (f"the first row was read as a header, though {len(numbers)} of its "
                f"{len(header)} fields are numbers and none is a name")
    return (f"the first row was read as a header, though {len(numbers)} of its {len(header)} "
            f"fields are numbers; if it is a data row, {words[0]!r} is not a number (the fit "
            "then misses that row)")


def _parse_row(fields: list[str], where: str, delimiter: str = ",") -> list[float]:
    """The numbers of one data row; ``where`` (file and line) prefixes the error messages."""
    values = []
    for col, s in enumerate(fields, start=1):
        if not s.strip():
            raise InputError(f"{where}, column {col}: empty field")
        try:
            values.append(_number(s))
        except ValueError:
            hint = next((f" (fields separated by {name}? pass --delimiter)"
                         for sep, name in (("\t", "tabs"), (";", "';'"), (",", "','"))
                         if sep != delimiter and sep in s), "")
            raise InputError(f"{where}, column {col}: {s.strip()!r} is not a number{hint}"
                             ) from None
    return values


def one_line(exc: BaseException | Warning | str) -> str:
    """An error or warning as one line (``file: reason`` for an operating-system error)."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())
