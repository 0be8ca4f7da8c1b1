"""``rbfkmeans fit FILE --n-clusters K``: cluster a numeric CSV or ``.npy`` file.

Reads ``X`` (n, d) from a ``.npy`` array or a CSV (``--delimiter``) by the rules of
:mod:`rbfkmeans.table_file`. The command prints what it read (rows, columns, header), fits
:class:`~rbfkmeans.RBFKMeans` and writes, into ``--out`` (default: the input's folder),

- ``<stem>_labels``: the nearest centroid of each row (n,),
- ``<stem>_memberships``: ``predict_proba`` (n, k), the memberships at the last temperature,
- ``<stem>_centers``: the centroids ``C`` (k, d),

where ``<stem>`` is the input's name less its last suffix (``data.v2.csv`` gives
``data.v2_labels.csv``), as ``.npy`` when the input is ``.npy``, else as CSV written by the
:mod:`csv` module: a header line (the input's header for the centres, else ``x0, x1, ...``),
labels as integers, floats with the digits that round-trip them exactly.

An output that already exists is an error before anything is read or fitted, unless ``--force`` is
passed; the input file itself is never overwritten. The three are written all or none
(:mod:`rbfkmeans.atomic_files`): a failed run leaves the folder as it was. Bad input (missing file,
non-numeric or ragged CSV, NaN/inf, ``k > n``, a zero row under ``--metric cosine``...) exits with
status 2 and a one-line message on stderr, no traceback; a CSV's row is named by its line, a
``.npy``'s by its index from 0.

NumPy and the estimator are imported when the command runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ._parameters import SCHEDULES
from .assignments import ASSIGNMENTS
from .atomic_files import Writer, as_path, check_out, check_targets, write_outputs
from .cli_args import MAX_N_INIT, folder
from .errors import NonFiniteError
from .metrics import METRICS
from .table_file import (
    InputError,
    check_input,
    header_warning,
    is_npy,
    one_line,
    parse_delimiter,
    read_matrix,
    read_table,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["add_fit_parser", "output_paths", "read_matrix", "run_fit"]

OUTPUTS = ("labels", "memberships", "centers")
"""The outputs' names after ``<stem>_``, in the order they are written."""


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
    p.add_argument("--out", type=folder, default=None,
                   help="output folder (created if needed; default: the input's folder)")
    p.add_argument("--force", action="store_true",
                   help="replace outputs that already exist (the input file never is)")
    p.add_argument("--random-state", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--schedule", choices=SCHEDULES, default="splits",
                   help="the annealing ladder, or k-means++ restarts without annealing "
                   "(default: splits; the quality setting is --schedule k-means++ --n-init 6)")
    p.add_argument("--n-init", type=_n_init, default="auto",
                   help=f"runs, the lowest inertia kept ('auto' or an integer from 1 to "
                   f"{MAX_N_INIT}; default auto, as RBFKMeans)")
    p.add_argument("--max-swaps", type=int, default=30,
                   help="swaps after an annealed fit, at most (default 30, as RBFKMeans; 0: none)")
    p.add_argument("--delimiter", default=None,
                   help="CSV field separator, one character (default ',', tab for .tsv; "
                   "'tab' for a tab)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress bar over temperatures")
    p.set_defaults(func=run_fit)
    return p


def _n_init(text: str) -> int | str:
    """``--n-init``: ``auto`` as it is, else an integer of at most :data:`MAX_N_INIT` (the
    estimator checks that it is >= 1)."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = MAX_N_INIT + 1
    if value > MAX_N_INIT:
        raise argparse.ArgumentTypeError(
            f"must be 'auto' or an integer from 1 to {MAX_N_INIT}; got {text!r}")
    return value


# -- the outputs -------------------------------------------------------------------------------


def output_paths(path: Path | str, out: Path | str) -> list[Path]:
    """The outputs of input ``path`` in folder ``out``: ``<stem>_labels``, ``<stem>_memberships``,
    ``<stem>_centers``, each with ``.npy`` for a ``.npy`` input, else ``.csv``; ``<stem>`` is the
    input's name less its last suffix only. Either may be given as a str."""
    path, out = as_path(path, "path"), as_path(out, "out")
    ext = ".npy" if is_npy(path) else ".csv"
    return [out / f"{path.stem}_{what}{ext}" for what in OUTPUTS]


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
        check_input(args.file)
        out = args.out if args.out is not None else args.file.resolve().parent
        check_out(out)
        targets = output_paths(args.file, out)
        check_targets(targets, args.file, args.force)
        X, header, lines = read_table(args.file, delimiter)
        print(_describe(args.file, X, header), flush=True)
        if (note := header_warning(header)) is not None:
            print(f"rbfkmeans fit: warning: {args.file}: {note}", file=sys.stderr)
        if args.metric == "cosine" and lines is not None:  # a .npy's: the estimator's index
            _check_directions(args.file, X, lines)
        from .estimator import RBFKMeans

        est = RBFKMeans(args.n_clusters, assignment=args.assignment, metric=args.metric,
                        random_state=args.random_state, max_swaps=args.max_swaps,
                        schedule=args.schedule, n_init=args.n_init, verbose=int(args.verbose))
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X)
            P = est.predict_proba(X)  # (n, k)
        for name, result in (("memberships", P), ("centres", est.cluster_centers_)):
            if not np.isfinite(result).all():  # a last guard: no file of NaN, ever
                raise NonFiniteError(f"the fit produced non-finite {name}; nothing was written")
        seconds = time.perf_counter() - t0
        n, d = X.shape
        k = est.n_clusters
        columns = header if header is not None else [f"x{j}" for j in range(d)]
        writers = _writers(is_npy(args.file), est.labels_, P, est.cluster_centers_, columns)
        write_outputs(targets, writers, args.file, args.force)
    except (ValueError, OSError) as exc:
        print(f"rbfkmeans fit: error: {one_line(exc)}", file=sys.stderr)
        return 2
    for message in dict.fromkeys(one_line(w.message) for w in caught):
        print(f"rbfkmeans fit: warning: {message}", file=sys.stderr)
    T = est.temperatures_
    temps = (f"{T.size} (T {T[0]:.4g} -> {T[-1]:.4g})" if T.size
             else "0 (plain Lloyd)" if args.assignment == "hard"
             else "0 (a k-means++ start, not annealed)")
    print(f"{args.file}: n={n} d={d} k={k} assignment={args.assignment} metric={args.metric}")
    print(f"  inertia={est.inertia_:.6g} iterations={est.n_iter_} swaps={est.n_swaps_} "
          f"time={seconds:.2f}s temperatures={temps}")
    print("  wrote " + ", ".join(str(p) for p in targets))
    return 0


def _check_directions(path: Path, X: np.ndarray, lines: list[int]) -> None:
    """For ``--metric cosine`` on a CSV: raise :class:`InputError` naming the first row of ``X``
    whose entries are all zero by its line in ``path`` (``lines`` from :func:`read_table`), as
    the other messages about the file do (the estimator would name its index in ``X``)."""
    import numpy as np

    zero = np.flatnonzero(~X.any(axis=1))
    if zero.size:
        raise InputError(f"{path}: line {lines[int(zero[0])]}: a zero row ({zero.size} in all); "
                         "--metric cosine needs every row to have a direction (a non-zero norm)")


def _describe(path: Path, X: np.ndarray, header: list[str] | None) -> str:
    """One line on what was read: ``read FILE: n rows x d columns, header: a, b`` (or
    ``no header``; the dtype for ``.npy``)."""
    n, d = X.shape
    what = f"{X.dtype} array" if is_npy(path) else (
        "no header" if header is None else "header: " + ", ".join(map(_show_name, header)))
    return f"read {path}: {n} rows x {d} columns, {what}"


def _show_name(name: str) -> str:
    """A header name as printed: in double quotes when empty or holding a comma or quote."""
    return f'"{name}"' if not name or any(c in name for c in ',"') else name
