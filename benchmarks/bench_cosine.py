"""Spherical k-means: ``RBFKMeans(metric="cosine")`` against ``KMeans(n_init=10)`` on unit rows.

The usual way to get spherical clusters from scikit-learn is Euclidean k-means on L2-normalised
rows (its centres are then not unit vectors). Both fits are scored by the spherical objective
``J_cos = sum_i (1 - max_j cos(x_i, c_j))`` at their own centres, for each seed ``s``:
``RBFKMeans(k, metric="cosine", random_state=s)`` (entmax-1.5 annealing, the hard spherical
polish and the swap search) against ``KMeans(k, n_init=10, random_state=s)`` fitted on the
normalised rows, with the wall time of each fit measured in the same run (the fastest of
``--repeat`` identical fits, since the fits are deterministic and a machine shared with other
jobs slows single runs by up to ten times). A ratio below one means the spherical fit found a
lower (better) spherical objective.

The data ship with installed packages (nothing is downloaded): scikit-learn's iris, wine and
breast cancer (standardised), its digits, and a TF-IDF (1000 words of letters, English stop
words removed, sublinear tf) of the distinct docstrings of the public functions and classes of
NumPy, SciPy and scikit-learn; the package versions are recorded, since that corpus depends on
them.

Run by hand: ``python benchmarks/bench_cosine.py``; writes ``benchmarks/results/cosine.json``
(or ``--out``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import sklearn
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from rbfkmeans import RBFKMeans

RESULTS = Path(__file__).parent / "results" / "cosine.json"

#: the modules whose public callables' docstrings make the text corpus
DOC_MODULES = [
    "numpy", "numpy.linalg", "numpy.fft", "numpy.random", "scipy.linalg", "scipy.stats",
    "scipy.optimize", "scipy.signal", "scipy.sparse", "scipy.special", "scipy.integrate",
    "scipy.interpolate", "scipy.ndimage", "scipy.spatial", "scipy.cluster.vq", "scipy.io",
    "scipy.fft",
]


def docstrings() -> list[str]:
    """The distinct docstrings (over 200 characters) of the public callables of
    :data:`DOC_MODULES` and of scikit-learn's estimators and functions, in a fixed order."""
    from sklearn.utils.discovery import all_estimators, all_functions

    found: dict[str, str] = {}
    for name in DOC_MODULES:
        module = importlib.import_module(name)
        for attr in sorted(dir(module)):
            obj = getattr(module, attr)
            if not attr.startswith("_") and callable(obj):
                found[f"{name}.{attr}"] = inspect.getdoc(obj) or ""
    for attr, obj in all_estimators() + all_functions():
        found[f"sklearn.{attr}"] = inspect.getdoc(obj) or ""
    texts = [found[key] for key in sorted(found) if len(found[key]) > 200]
    return list(dict.fromkeys(texts))  # aliases share a docstring: keep one


def datasets() -> dict[str, tuple[np.ndarray, int]]:
    std = StandardScaler()
    digits = load_digits().data.astype(np.float64)
    # words of letters only: a few docstrings are generated with random example outputs
    tfidf = TfidfVectorizer(max_features=1000, stop_words="english", min_df=3, sublinear_tf=True,
                            token_pattern=r"(?u)\b[^\W\d_]{2,}\b")
    docs = tfidf.fit_transform(docstrings()).toarray()
    docs = docs[np.abs(docs).max(axis=1) > 0]  # a document with no kept term has no direction
    return {
        "iris (std), k=3": (std.fit_transform(load_iris().data), 3),
        "wine (std), k=3": (std.fit_transform(load_wine().data), 3),
        "breast cancer (std), k=2": (std.fit_transform(load_breast_cancer().data), 2),
        "digits, k=10": (digits, 10),
        "digits, k=30": (digits, 30),
        "docstrings TF-IDF, k=20": (docs, 20),
    }


def unit(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def spherical_objective(X_hat: np.ndarray, C: np.ndarray) -> float:
    """``sum_i (1 - max_j cos(x_i, c_j))`` for unit rows ``X_hat``."""
    return float((1.0 - (X_hat @ unit(C).T).max(axis=1)).sum())


def commit() -> str | None:
    """The checked-out commit of this repository (``None`` outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def timed(fn: Any, repeat: int = 1) -> tuple[Any, float]:
    """The result of ``fn()`` and the fastest of ``repeat`` calls' wall times."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def summary(values: list[float]) -> dict[str, float]:
    return {"min": float(np.min(values)), "median": float(np.median(values)),
            "max": float(np.max(values))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated random states")
    parser.add_argument("--only", default=None, help="substring of the dataset names to run")
    parser.add_argument("--repeat", type=int, default=3, help="fits timed per seed (fastest)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):  # scikit-learn's BLAS and OpenMP pools as torch's
        run(args)


def run(args: argparse.Namespace) -> None:
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict[str, Any]] = []
    for name, (X, k) in datasets().items():
        if args.only and args.only not in name:
            continue
        X_hat = unit(X)
        runs = []
        for s in seeds:
            km, t_km = timed(lambda X_hat=X_hat, k=k, s=s: KMeans(
                k, n_init=10, random_state=s).fit(X_hat), args.repeat)
            est, t = timed(lambda X=X, k=k, s=s: RBFKMeans(
                k, metric="cosine", random_state=s).fit(X), args.repeat)
            J_km = spherical_objective(X_hat, km.cluster_centers_)
            J = spherical_objective(X_hat, est.cluster_centers_)
            runs.append({
                "seed": s, "inertia": J, "inertia_reported": float(est.inertia_),
                "sklearn_inertia": J_km, "seconds": t, "sklearn_seconds": t_km,
                "inertia_ratio": J / J_km, "time_ratio": t / t_km,
                "temperatures": len(est.temperatures_), "n_iter": int(est.n_iter_),
                "n_swaps": int(est.n_swaps_),
                "critical_temperature": float(est.critical_temperature_),
            })
        ratios = [r["inertia_ratio"] for r in runs]
        row: dict[str, Any] = {
            "dataset": name, "n": int(X.shape[0]), "d": int(X.shape[1]), "k": k, "runs": runs,
            "inertia_ratio": summary(ratios),
            "time_ratio": summary([r["time_ratio"] for r in runs]),
            "seeds_at_or_below": int(sum(r <= 1.0 for r in ratios)),
        }
        rows.append(row)
        print(f"{name:26s} J_cos ratio " + " ".join(f"{r:.5f}" for r in ratios)
              + f" ({row['seeds_at_or_below']}/{len(seeds)} <= 1), time ratio median "
              f"{row['time_ratio']['median']:.2f}", flush=True)
    result = {
        "benchmark": "spherical k-means: RBFKMeans(metric='cosine') vs KMeans(n_init=10) on "
                     "L2-normalised rows, both scored by sum(1 - max cos)",
        "settings": {"threads": args.threads, "seeds": seeds, "dtype": "float64",
                     "repeat": args.repeat,
                     "rbfkmeans": "defaults (entmax15, swaps)", "sklearn": "KMeans(n_init=10)"},
        "commit": commit(),
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "numpy": np.__version__, "scipy": scipy.__version__,
                    "sklearn": sklearn.__version__, "processor": platform.processor()},
        "datasets": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
