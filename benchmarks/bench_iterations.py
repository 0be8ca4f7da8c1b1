"""Cost of one clustering iteration on workload W, as ratios to the matrix-product floor.

Workload W (SPEC section 4): ``make_blobs`` n=200,000, d=32, k=64, float32, 2 threads. The floor
is the time of the one product ``X @ C.T`` measured in the same run; every other time is reported
as a multiple of it. Compared: our hard Lloyd, softmax and entmax-1.5 soft iterations (one full
``cluster_stats`` pass plus the centroid update, the rows' norms computed once beforehand as a fit
does), scikit-learn's Lloyd iteration and faiss's k-means iteration, each the marginal cost of an
iteration: the difference between fits of ``LONG`` and ``SHORT`` iterations from the same start
(``tol=0``), divided by the difference of their iteration counts, so that what a fit pays once
(validation, copies, the rows' norms, the last labelling) is left out as it is for ours; and whole
fits (ours with default settings against ``KMeans(n_init=10)``, inertia recomputed in float64).
Every library runs on ``--threads`` threads (torch, numba, faiss, and the BLAS and OpenMP pools
through threadpoolctl); every time is the fastest of several runs.

Run by hand: ``python benchmarks/bench_iterations.py [--skip-fit]``; writes
``benchmarks/results/iterations.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

from rbfkmeans import RBFKMeans, warmup
from rbfkmeans.passes import Data
from rbfkmeans.schedules import critical_temperature
from rbfkmeans.stats import cluster_stats

RESULTS = Path(__file__).parent / "results" / "iterations.json"

#: The peers' fits whose difference gives the marginal cost of one iteration.
SHORT, LONG = 5, 25


def marginal(fit: Callable[[int], int], repeat: int = 3) -> float | None:
    """Seconds of one iteration: ``fit(m)`` runs ``m`` iterations and returns how many it ran;
    the fastest of ``repeat`` fits of ``LONG`` minus the fastest of ``SHORT``, over the
    difference of their counts (None where a fit settled before ``LONG`` iterations: on W
    scikit-learn's runs 91 from this start)."""
    runs: dict[int, int] = {}

    def run(m: int) -> None:
        runs[m] = fit(m)

    t_short = timeit(lambda: run(SHORT), repeat=repeat)
    t_long = timeit(lambda: run(LONG), repeat=repeat)
    if runs[LONG] < LONG:
        print(f"the peer settled after {runs[LONG]} iterations: no marginal cost measured")
        return None
    return (t_long - t_short) / (runs[LONG] - runs[SHORT])


def inertia64(X: np.ndarray, C: np.ndarray) -> float:
    """``J`` in float64 (the nearest centroid of every row), chunked."""
    X64, C64 = torch.from_numpy(X).double(), torch.from_numpy(np.asarray(C)).double()
    return float(sum(torch.cdist(X64[s:s + 50_000], C64).square().amin(dim=1).sum()
                     for s in range(0, X64.shape[0], 50_000)))


def timeit(fn: Callable[[], Any], repeat: int = 7, warmup: int = 1) -> float:
    """Fastest of ``repeat`` runs: on a shared machine the minimum is the least disturbed."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--d", type=int, default=32)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-fit", action="store_true", help="skip the whole-fit comparison")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):
        run(args)


def run(args: argparse.Namespace) -> None:
    from machine import describe  # benchmarks/machine.py, beside this script

    warmup.warm_up()  # compiled (or loaded) before any timing

    Xn, _ = make_blobs(args.n, args.d, centers=args.k, random_state=0)
    Xn = Xn.astype(np.float32)
    X = torch.from_numpy(Xn)
    rng = np.random.default_rng(0)
    Cn = Xn[rng.choice(args.n, args.k, replace=False)].copy()
    C = torch.from_numpy(Cn)
    results: dict[str, Any] = {
        "workload": {"n": args.n, "d": args.d, "k": args.k, "dtype": "float32",
                     "threads": args.threads},
        "machine": describe(),
        "peer_iterations": {"short": SHORT, "long": LONG},
        "seconds": {},
    }
    sec = results["seconds"]

    sec["floor_matmul"] = timeit(lambda: X @ C.T)

    data = Data(X)  # the pass context: row norms computed once, as in a fit

    def ours(T: float, assignment: str) -> Callable[[], Any]:
        def step() -> Any:
            st = cluster_stats(data, C, T, assignment, return_labels=assignment == "hard",
                               objective=False)  # the solvers' inner iteration
            return st.S / st.N.clamp(min=1e-12).unsqueeze(1)
        return step

    Tc = critical_temperature(X, "softmax", args.k)
    sec["ours_hard"] = timeit(ours(0.0, "hard"))
    for frac in (1e-1, 1e-2, 1e-3):
        sec[f"ours_softmax_T{frac:g}Tc"] = timeit(ours(frac * Tc, "softmax"), repeat=5)
        sec[f"ours_entmax15_T{frac:g}Tc"] = timeit(ours(frac * Tc, "entmax15"), repeat=5)

    # scikit-learn: fits of a fixed number of Lloyd iterations from the same start (tol=0 runs
    # them all)
    def sklearn_fit(m: int) -> int:
        km = KMeans(args.k, init=Cn, n_init=1, max_iter=m, tol=0.0, algorithm="lloyd").fit(Xn)
        return int(km.n_iter_)

    sec["sklearn_lloyd_iteration"] = marginal(sklearn_fit)
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)

        def faiss_fit(m: int) -> int:
            kmf = faiss.Kmeans(args.d, args.k, niter=m, verbose=False, seed=0,
                               max_points_per_centroid=args.n)
            kmf.train(Xn, init_centroids=Cn)
            return m

        sec["faiss_iteration"] = marginal(faiss_fit)
    except ImportError:  # faiss-cpu is a benchmark-only dependency
        sec["faiss_iteration"] = None

    if not args.skip_fit:
        fits: dict[str, Any] = {}

        def fit(name: str, make: Callable[[], Any]) -> Callable[[], None]:
            def once() -> None:
                fits[name] = make().fit(Xn)
            return once

        sec["fit_sklearn_n_init10"] = timeit(
            fit("sklearn", lambda: KMeans(args.k, n_init=10, random_state=0)), repeat=3, warmup=0)
        sec["fit_rbfkmeans_default"] = timeit(
            fit("ours", lambda: RBFKMeans(args.k, random_state=0)), repeat=3, warmup=0)
        ref, est = fits["sklearn"], fits["ours"]
        results["fit"] = {
            "inertia_sklearn_n_init10": inertia64(Xn, ref.cluster_centers_),
            "inertia_rbfkmeans": inertia64(Xn, est.cluster_centers_),
            "temperatures_run": len(est.temperatures_),
            "n_iter_rbfkmeans": int(est.n_iter_),
            "ari_vs_sklearn": float(adjusted_rand_score(ref.labels_, est.labels_)),
        }

    floor = sec["floor_matmul"]
    results["ratio_to_floor"] = {
        key: (None if val is None else val / floor)
        for key, val in sec.items()
        if key != "floor_matmul"
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"floor X @ C.T: {floor * 1e3:.2f} ms")
    for key, ratio in results["ratio_to_floor"].items():
        if ratio is not None:
            print(f"{key:32s} {sec[key] * 1e3:9.2f} ms  {ratio:7.2f}x floor")
    if "fit" in results:
        print(json.dumps(results["fit"], indent=2))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
