"""Sparse input: ``RBFKMeans`` on a CSR TF-IDF matrix against the same fit of the densified
matrix, with scikit-learn's ``KMeans`` on the CSR matrix beside them.

The text ships with installed packages (nothing is downloaded): the distinct docstrings of the
public callables of NumPy, SciPy and scikit-learn (``bench_cosine.docstrings``), as TF-IDF
matrices with tens of thousands of columns (words of letters, English stop words removed,
sublinear tf, rows L2-normalised): every word (``words``), and words and word pairs seen in two
documents or more (``words+pairs``). The package versions are recorded, since the corpus
depends on them.

For each matrix, ``k`` and seed ``s``, and for ``metric`` ``"sqeuclidean"`` and ``"cosine"``:

- ``RBFKMeans(k, metric=metric, random_state=s)`` fitted on the CSR matrix and on
  ``X.toarray()`` (float32 both; the densified fit's time excludes the conversion, which is
  recorded apart), their ``J`` (recomputed in float64 from the centroids: the k-means or the
  spherical objective), the adjusted Rand index between their labels and the largest centroid
  difference after matching the centroids;
- ``KMeans(k, n_init=1)`` and ``KMeans(k, n_init=10)`` (``random_state=s``) on the CSR matrix,
  for ``"cosine"`` on its rows as they are (already unit rows: spherical k-means as scikit-learn
  users run it), scored by the same objective at their own centres.

Each fit is timed as the fastest of ``--repeat`` identical fits (all deterministic; the
densified fits, minutes each at 60,000 columns, ``--dense-repeat``), all in one run; ratios are
per seed. ``--threads`` sets torch's threads and BLAS's (threadpoolctl).

Run by hand: ``python benchmarks/bench_sparse.py``; writes ``benchmarks/results/sparse.json``
(or ``--out``); ``--table`` prints the table of docs/embeddings.md from that file.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import scipy.sparse as sp
import sklearn
import torch
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from bench_cosine import commit, docstrings
from rbfkmeans import RBFKMeans

RESULTS = Path(__file__).parent / "results" / "sparse.json"
TOKENS = r"(?u)\b[^\W\d_]{2,}\b"


def corpora() -> dict[str, sp.csr_array]:
    """The TF-IDF matrices of the docstrings (module docstring), float32 CSR."""
    docs = docstrings()
    out = {}
    for name, params in [("words", {"min_df": 1}),
                         ("words+pairs", {"min_df": 2, "ngram_range": (1, 2)})]:
        tfidf = TfidfVectorizer(stop_words="english", sublinear_tf=True, token_pattern=TOKENS,
                                dtype=np.float32, **params)
        X = sp.csr_array(tfidf.fit_transform(docs))
        out[name] = X[np.diff(X.indptr) > 0]  # a document with no kept term has no direction
    return out


def objective(X: sp.csr_array, C: np.ndarray, metric: str) -> float:
    """``J`` in float64 at centres ``C``: ``sum_i min_j ||x_i - c_j||^2``, or for cosine
    ``sum_i (1 - max_j cos(x_i, c_j))``."""
    X64 = sp.csr_array(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    if metric == "cosine":
        norms = np.sqrt(np.asarray(X64.multiply(X64).sum(axis=1)).reshape(-1))
        cos = (X64 @ (C / np.linalg.norm(C, axis=1, keepdims=True)).T) / norms[:, None]
        return float((1.0 - cos.max(axis=1)).sum())
    sq = np.asarray(X64.multiply(X64).sum(axis=1)).reshape(-1)
    D = sq[:, None] - 2.0 * (X64 @ C.T) + (C * C).sum(axis=1)[None, :]
    return float(np.clip(D.min(axis=1), 0.0, None).sum())


def timed(fn: Any, repeat: int) -> tuple[Any, float]:
    """The result of ``fn()`` and the fastest of ``repeat`` calls' wall times."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def matched_difference(A: np.ndarray, B: np.ndarray) -> float:
    """Largest ``|a - b|`` entry after matching the rows of ``A`` to those of ``B``."""
    r, c = linear_sum_assignment(cdist(A, B))
    return float(np.abs(A[r] - B[c]).max())


def run_one(X: sp.csr_array, k: int, seed: int, metric: str, repeat: int,
            dense_repeat: int = 1) -> dict[str, Any]:
    row: dict[str, Any] = {"k": k, "seed": seed, "metric": metric}

    def fit(data: Any) -> RBFKMeans:
        return RBFKMeans(k, metric=metric, random_state=seed).fit(data)

    sparse_fit, row["time_sparse"] = timed(lambda: fit(X), repeat)
    dense_X, row["time_densify"] = timed(X.toarray, 1)
    dense_fit, row["time_dense"] = timed(lambda: fit(dense_X), dense_repeat)
    dense_X = None  # free it before the peers run
    row["J_sparse"] = objective(X, sparse_fit.cluster_centers_, metric)
    row["J_dense"] = objective(X, dense_fit.cluster_centers_, metric)
    row["ari_sparse_dense"] = float(adjusted_rand_score(sparse_fit.labels_, dense_fit.labels_))
    row["centroid_difference"] = matched_difference(sparse_fit.cluster_centers_,
                                                    dense_fit.cluster_centers_)
    for n_init in (1, 10):
        km, t = timed(lambda n=n_init: KMeans(k, n_init=n, random_state=seed).fit(X), repeat)
        row[f"time_kmeans{n_init}"] = t
        row[f"J_kmeans{n_init}"] = objective(X, km.cluster_centers_, metric)
    row["speedup_sparse_over_dense"] = row["time_dense"] / row["time_sparse"]
    row["J_ratio_sparse_dense"] = row["J_sparse"] / row["J_dense"]
    row["J_ratio_kmeans1"] = row["J_sparse"] / row["J_kmeans1"]
    row["J_ratio_kmeans10"] = row["J_sparse"] / row["J_kmeans10"]
    row["time_ratio_kmeans1"] = row["time_sparse"] / row["time_kmeans1"]
    row["time_ratio_kmeans10"] = row["time_sparse"] / row["time_kmeans10"]
    return row


TABLE_BEGIN = ("<!-- bench_sparse table: begin (generated by benchmarks/bench_sparse.py "
               "--table) -->")
TABLE_END = "<!-- bench_sparse table: end -->"


def table(results: dict[str, Any]) -> str:
    """The docs' table (between ``TABLE_BEGIN`` and ``TABLE_END``): per matrix, ``k`` and
    metric, over the seeds, the CSR fit's time, the densified fit's time over it, whether the
    partitions agree, and ``J`` and time against ``KMeans(n_init=1)`` and ``KMeans(n_init=10)``
    on the CSR matrix (geometric means of the per-seed ratios)."""

    def gmean(values: list[float]) -> float:
        return float(np.exp(np.mean(np.log(values))))

    lines = [TABLE_BEGIN, "",
             "| matrix (n x d, nnz) | k | metric | CSR fit (s) | densified / CSR time | "
             "same partition | J / KMeans(1) | J / KMeans(10) | time / KMeans(10) |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in results["rows"]:
        groups.setdefault((row["data"], row["k"], row["metric"]), []).append(row)
    for (name, k, metric), rows in groups.items():
        r0 = rows[0]
        label = f"{name} ({r0['n']:,} x {r0['d']:,}, {r0['nnz']:,})"
        lines.append(
            f"| {label} | {k} | {metric} | {np.median([r['time_sparse'] for r in rows]):.2f} | "
            f"{gmean([r['speedup_sparse_over_dense'] for r in rows]):.1f}x | "
            f"{sum(r['ari_sparse_dense'] == 1.0 for r in rows)} of {len(rows)} | "
            f"{gmean([r['J_ratio_kmeans1'] for r in rows]):.4f} | "
            f"{gmean([r['J_ratio_kmeans10'] for r in rows]):.4f} | "
            f"{gmean([r['time_ratio_kmeans10'] for r in rows]):.2f}x |")
    return "\n".join([*lines, "", TABLE_END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--ks", default="20,100")
    parser.add_argument("--repeat", type=int, default=2, help="fits timed per setting (fastest)")
    parser.add_argument("--dense-repeat", type=int, default=1,
                        help="fits of the densified matrix timed (up to minutes each)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table", action="store_true",
                        help="print the docs' table of the results file (--out) and stop")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    ks = [int(k) for k in args.ks.split(",")]
    rows: list[dict[str, Any]] = []
    with threadpool_limits(args.threads):
        for name, X in corpora().items():
            for k in ks:
                for metric in ("sqeuclidean", "cosine"):
                    for seed in seeds:
                        row = {"data": name, "n": X.shape[0], "d": X.shape[1], "nnz": X.nnz,
                               **run_one(X, k, seed, metric, args.repeat, args.dense_repeat)}
                        rows.append(row)
                        print(json.dumps({key: (round(v, 5) if isinstance(v, float) else v)
                                          for key, v in row.items()}), flush=True)
    speed = [r["speedup_sparse_over_dense"] for r in rows]
    summary = {
        "pairs": len(rows),
        "sparse_at_least_as_fast": sum(s >= 1.0 for s in speed),
        "speedup_geomean": float(np.exp(np.mean(np.log(speed)))),
        "speedup_min": float(min(speed)),
        "identical_partitions": sum(r["ari_sparse_dense"] == 1.0 for r in rows),
        "J_ratio_sparse_dense_max_deviation": float(max(abs(r["J_ratio_sparse_dense"] - 1.0)
                                                        for r in rows)),
        "at_or_below_kmeans10": sum(r["J_ratio_kmeans10"] <= 1.0 + 1e-4 for r in rows),
        "time_ratio_kmeans10_geomean": float(np.exp(np.mean(
            np.log([r["time_ratio_kmeans10"] for r in rows])))),
    }
    out = {
        "benchmark": "bench_sparse", "commit": commit(), "threads": args.threads,
        "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__,
                     "sklearn": sklearn.__version__, "torch": torch.__version__},
        "summary": summary, "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
