"""``rbfkmeans fit FILE --n-clusters K``: cluster a numeric CSV or ``.npy`` file.

Reads ``X`` (n, d) -- a CSV with an optional header line (detected: a first line that is not all
numbers), blank lines and ``#`` comment lines skipped, or a ``.npy`` array (1-D is one column) --
fits :class:`~rbfkmeans.RBFKMeans` and writes, into ``--out`` (default: the input's folder),

- ``<stem>_labels``: the nearest centroid of each row (n,),
- ``<stem>_memberships``: ``predict_proba`` (n, k), the memberships at the last temperature,
- ``<stem>_centers``: the centroids ``C`` (k, d),

as CSV with a header line, or as ``.npy`` when the input is ``.npy``. Prints a short summary.
Bad input (missing file, non-numeric or ragged CSV, NaN/inf, ``k > n``...) exits with status 2
and a one-line message on stderr, no traceback.

NumPy and the estimator are imported when the command runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .assignments import ASSIGNMENTS
from .metrics import METRICS

if TYPE_CHECKING:
    import numpy as np

__all__ = ["add_fit_parser", "read_matrix", "run_fit"]


class InputError(ValueError):
    """A problem with the user's file, reported as one line."""


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
    p.add_argument("--random-state", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--max-swaps", type=int, default=30,
                   help="swaps after an annealed fit, at most (default 30, as RBFKMeans; 0: none)")
    p.add_argument("--delimiter", default=None,
                   help="CSV field separator (default ',', tab for .tsv; 'tab' for a tab)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress bar over temperatures")
    p.set_defaults(func=run_fit)
    return p


# -- reading -----------------------------------------------------------------------------------


def read_matrix(path: Path, delimiter: str | None = None) -> tuple[np.ndarray, list[str] | None]:
    """``X`` (n, d) from ``path`` and the CSV header (``None`` when there is none)."""
    import numpy as np

    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")
    if path.suffix.lower() == ".npy":
        return _read_npy(path), None
    if delimiter is None:
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    elif delimiter.lower() in ("tab", "\\t"):
        delimiter = "\t"
    X, header, lines = _read_csv(path, delimiter)
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = (int(v[0]) for v in np.nonzero(bad))
        raise InputError(f"{path}: line {lines[i]}, column {j + 1}: {float(X[i, j])} is not finite")
    return X, header


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
    """Rows of numbers; a first line that does not parse is the header. Returns the array, the
    header and the line number of each row."""
    import csv

    import numpy as np

    rows: list[list[float]] = []
    lines: list[int] = []
    header: list[str] | None = None
    first = True
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            for lineno, fields in enumerate(csv.reader(f, delimiter=delimiter), start=1):
                if not any(s.strip() for s in fields) or fields[0].lstrip().startswith("#"):
                    continue
                values = []
                for col, s in enumerate(fields, start=1):
                    try:
                        values.append(float(s))
                    except ValueError:
                        if first:
                            break
                        raise InputError(
                            f"{path}: line {lineno}, column {col}: {s.strip()!r} is not a number"
                        ) from None
                if first and len(values) < len(fields):
                    header = [s.strip() for s in fields]
                    first = False
                    continue
                first = False
                width = len(rows[0]) if rows else len(values)
                if len(values) != width:
                    raise InputError(
                        f"{path}: line {lineno} has {len(values)} values, expected {width}"
                    )
                rows.append(values)
                lines.append(lineno)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text (UTF-8) file") from None
    except csv.Error as exc:
        raise InputError(f"{path}: {_one_line(exc)}") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    return np.asarray(rows, dtype=np.float64), header, lines


# -- writing -----------------------------------------------------------------------------------


def _write(path: Path, A: np.ndarray, header: list[str], fmt: str, npy: bool) -> Path:
    import numpy as np

    if npy:
        path = path.with_suffix(".npy")
        np.save(path, A)
    else:
        path = path.with_suffix(".csv")
        np.savetxt(path, A.reshape(A.shape[0], -1), fmt=fmt, delimiter=",",
                   header=",".join(header), comments="")
    return path


# -- the command -------------------------------------------------------------------------------


def run_fit(args: argparse.Namespace) -> int:
    """Run ``rbfkmeans fit`` with parsed ``args``; returns the exit status (2 on bad input)."""
    import warnings

    try:
        X, header = read_matrix(args.file, args.delimiter)
        from .estimator import RBFKMeans

        est = RBFKMeans(args.n_clusters, assignment=args.assignment, metric=args.metric,
                        random_state=args.random_state, max_swaps=args.max_swaps,
                        verbose=int(args.verbose))
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X)
            P = est.predict_proba(X)  # (n, k)
        seconds = time.perf_counter() - t0
        out = args.out if args.out is not None else args.file.resolve().parent
        out.mkdir(parents=True, exist_ok=True)
        npy = args.file.suffix.lower() == ".npy"
        n, d = X.shape
        k = est.n_clusters
        stem = out / args.file.stem
        columns = header if header is not None and len(header) == d else \
            [f"x{j}" for j in range(d)]
        written = [
            _write(stem.with_name(stem.name + "_labels"), est.labels_, ["label"], "%d", npy),
            _write(stem.with_name(stem.name + "_memberships"), P,
                   [f"cluster_{j}" for j in range(k)], "%.17g", npy),
            _write(stem.with_name(stem.name + "_centers"), est.cluster_centers_, columns,
                   "%.17g", npy),
        ]
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
    print("  wrote " + ", ".join(str(p) for p in written))
    return 0


def _one_line(exc: BaseException | Warning | str) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())

