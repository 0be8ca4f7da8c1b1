"""Fewer rows than features: the default fit in the rows' span against every feature and KMeans.

Workloads (float32, generated from the seed): ``n`` rows of ``d`` features, ``k`` cluster centres
drawn as normal rows times 0.05 and every row a normal row plus the centre of its cluster (noise
far above the separation, as in expression tables); ``(n, d, k)`` = (50, 200,000, 2),
(200, 20,000, 10), (1,000, 20,000, 10) and (2,000, 10,000, 20). For each seed, in one run:
``RBFKMeans(k, random_state=s)`` (the default: fitted in the coordinates of the rows' span,
:mod:`rbfkmeans.rowspace`), the same fit on every feature (``ROW_SPACE_MAX_ROWS`` set to 0 for
the call) and ``sklearn.cluster.KMeans(k, n_init=1)`` and ``n_init=10``, each the fastest of
``--repeat`` runs (in rounds), 2 threads, inertia recomputed in float64 from the centroids.
Reported per workload: our time over the every-feature fit's and over each KMeans', and our
inertia over each of theirs (paired per seed).

Run by hand, alone on a quiet machine: ``python benchmarks/bench_wide_rows.py [--seeds 0,1,2]
[--repeat 3]``; writes ``benchmarks/results/wide_rows.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

import rbfkmeans.rowspace as rowspace
from rbfkmeans import RBFKMeans

RESULTS = Path(__file__).parent / "results" / "wide_rows.json"
WORKLOADS = ((50, 200_000, 2), (200, 20_000, 10), (1_000, 20_000, 10), (2_000, 10_000, 20))


def make_data(n: int, d: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d), dtype=np.float32) * np.float32(0.05)
    X = rng.standard_normal((n, d), dtype=np.float32)
    X += centres[rng.integers(0, k, size=n)]
    return X


def inertia(X: np.ndarray, C: np.ndarray) -> float:
    """``J`` in float64: each row's squared distance to its nearest centroid, by differences."""
    Xd, Cd = X.astype(np.float64), C.astype(np.float64)
    best = np.full(len(Xd), np.inf)
    for c in Cd:
        best = np.minimum(best, ((Xd - c) ** 2).sum(axis=1))
    return float(best.sum())


def every_feature(k: int, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    def fit(X: np.ndarray) -> np.ndarray:
        kept = rowspace.ROW_SPACE_MAX_ROWS
        rowspace.ROW_SPACE_MAX_ROWS = 0
        try:
            return RBFKMeans(k, random_state=seed).fit(X).cluster_centers_
        finally:
            rowspace.ROW_SPACE_MAX_ROWS = kept
    return fit


def run(seeds: list[int], repeat: int) -> dict[str, Any]:
    rows = []
    for n, d, k in WORKLOADS:
        runs = []
        for s in seeds:
            X = make_data(n, d, k, s)
            methods: dict[str, Callable[[np.ndarray], np.ndarray]] = {
                "ours": lambda X, k=k, s=s: RBFKMeans(k, random_state=s).fit(X).cluster_centers_,
                "every_feature": every_feature(k, s),
                "kmeans1": lambda X, k=k, s=s: KMeans(k, n_init=1, random_state=s).fit(
                    X).cluster_centers_,
                "kmeans10": lambda X, k=k, s=s: KMeans(k, n_init=10, random_state=s).fit(
                    X).cluster_centers_,
            }
            best = {m: math.inf for m in methods}
            centres: dict[str, np.ndarray] = {}
            for _ in range(repeat):  # rounds: every method once, in turn
                for m, f in methods.items():
                    t = time.perf_counter()
                    centres[m] = f(X)
                    best[m] = min(best[m], time.perf_counter() - t)
            J = {m: inertia(X, C) for m, C in centres.items()}
            runs.append({"seed": s, "seconds": best, "inertia": J})
            print(f"{n}x{d} k={k} seed {s}: " + ", ".join(
                f"{m} {best[m]:.2f}s J {J[m]:.7g}" for m in methods), flush=True)
        summary = {}
        for m in ("every_feature", "kmeans1", "kmeans10"):
            summary[f"time_over_{m}"] = math.exp(float(np.mean(
                [math.log(r["seconds"]["ours"] / r["seconds"][m]) for r in runs])))
            summary[f"inertia_over_{m}"] = [r["inertia"]["ours"] / r["inertia"][m] for r in runs]
        rows.append({"n": n, "d": d, "k": k, "runs": runs, **summary})
    return {"threads": torch.get_num_threads(), "seeds": seeds, "repeat": repeat,
            "machine": platform.machine(), "processor": platform.processor(), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(2)
    with threadpool_limits(2):
        RBFKMeans(2, random_state=0).fit(make_data(40, 100, 2, 0))  # imports and kernels warm
        results = run([int(s) for s in args.seeds.split(",")], args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    for row in results["rows"]:
        print(f"{row['n']}x{row['d']} k={row['k']}: time over every feature "
              f"{row['time_over_every_feature']:.2f}x, over KMeans(n_init=1) "
              f"{row['time_over_kmeans1']:.2f}x, over KMeans(n_init=10) "
              f"{row['time_over_kmeans10']:.2f}x; J over KMeans(n_init=10) "
              + ", ".join(f"{r:.5f}" for r in row["inertia_over_kmeans10"]))


if __name__ == "__main__":
    main()
