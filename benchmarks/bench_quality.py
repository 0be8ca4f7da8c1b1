"""Annealed fit against ``sklearn.cluster.KMeans(n_init=10)`` on real data shipped with sklearn.

For each dataset and each seed ``s``: the inertia ``J`` of ``RBFKMeans(k, random_state=s)`` (the
default fit: entmax-1.5 annealing, then the hard Lloyd polish; other mappings with
``--assignments``) against ``KMeans(k, n_init=10, random_state=s)``, and the wall time of each fit,
measured in the same run. A ratio below one means annealing found a lower (better) k-means
objective. Annealing from the data mean is deterministic up to the symmetric-breaking noise, so
the seeds show how much the outcome depends on it. Also the spread of single k-means++ runs
(``n_init=1`` over ten seeds): how often plain Lloyd lands in a poorer local minimum.

Run by hand: ``python benchmarks/bench_quality.py``; writes ``benchmarks/results/quality.json``
(or ``--out``). ``--max-swaps 0`` measures annealing and the Lloyd polish without the swap
search (``benchmarks/results/quality_no_swaps.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    load_sample_image,
    load_wine,
)
from sklearn.preprocessing import StandardScaler

from rbfkmeans import RBFKMeans

RESULTS = Path(__file__).parent / "results" / "quality.json"


def datasets() -> dict[str, tuple[np.ndarray, int]]:
    # every 4th pixel of the photograph (68,320 RGB points) keeps the run to minutes on 2 cores
    china = load_sample_image("china.jpg").reshape(-1, 3)[::4].astype(np.float64) / 255.0
    digits = load_digits().data.astype(np.float64)
    std = StandardScaler()
    return {
        "iris (std), k=3": (std.fit_transform(load_iris().data), 3),
        "wine (std), k=3": (std.fit_transform(load_wine().data), 3),
        "breast cancer (std), k=2": (std.fit_transform(load_breast_cancer().data), 2),
        "digits, k=10": (digits, 10),
        "digits, k=30": (digits, 30),
        "china.jpg pixels/4, k=16": (china, 16),
        "china.jpg pixels/4, k=64": (china, 64),
    }


def timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def summary(values: list[float]) -> dict[str, float]:
    return {"min": float(np.min(values)), "median": float(np.median(values)),
            "max": float(np.max(values))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated random states")
    parser.add_argument("--assignments", default="entmax15,softmax")
    parser.add_argument("--only", default=None, help="substring of the dataset names to run")
    parser.add_argument("--max-swaps", type=int, default=None,
                        help="RBFKMeans(max_swaps=...); 0 shows annealing and polish alone")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    assignments = args.assignments.split(",")
    rows: list[dict[str, Any]] = []
    for name, (X, k) in datasets().items():
        if args.only and args.only not in name:
            continue
        singles = [KMeans(k, n_init=1, random_state=s).fit(X).inertia_ for s in range(10)]
        row: dict[str, Any] = {
            "dataset": name, "n": int(X.shape[0]), "d": int(X.shape[1]), "k": k,
            "seeds": seeds, "sklearn_single_runs": summary(singles), "sklearn_n_init10": [],
        }
        for s in seeds:
            km, t_km = timed(lambda X=X, k=k, s=s: KMeans(k, n_init=10, random_state=s).fit(X))
            row["sklearn_n_init10"].append({"inertia": float(km.inertia_), "seconds": t_km})
        for a in assignments:
            runs = []
            for s, ref in zip(seeds, row["sklearn_n_init10"], strict=True):
                extra = {} if args.max_swaps is None else {"max_swaps": args.max_swaps}
                est, t = timed(lambda X=X, k=k, a=a, s=s, extra=extra: RBFKMeans(
                    k, assignment=a, random_state=s, **extra).fit(X))
                runs.append({
                    "inertia": float(est.inertia_), "seconds": t,
                    "inertia_ratio": float(est.inertia_ / ref["inertia"]),
                    "time_ratio": t / ref["seconds"], "temperatures": len(est.temperatures_),
                    "n_iter": int(est.n_iter_), "n_swaps": int(est.n_swaps_),
                })
            ratios = [r["inertia_ratio"] for r in runs]
            row[f"rbfkmeans_{a}"] = {
                "runs": runs,
                "inertia_ratio": summary(ratios),
                "time_ratio": summary([r["time_ratio"] for r in runs]),
                "seeds_at_or_below": int(sum(r <= 1.0 for r in ratios)),
            }
        rows.append(row)
        parts = [
            f"{a} J ratio {row[f'rbfkmeans_{a}']['inertia_ratio']['min']:.5f}-"
            f"{row[f'rbfkmeans_{a}']['inertia_ratio']['max']:.5f} "
            f"({row[f'rbfkmeans_{a}']['seeds_at_or_below']}/{len(seeds)} <= 1), time ratio "
            f"{row[f'rbfkmeans_{a}']['time_ratio']['median']:.2f}"
            for a in assignments
        ]
        print(f"{name:26s} " + " | ".join(parts) + " | single runs worst/best "
              f"{max(singles) / min(singles):.4f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": args.threads, "max_swaps": args.max_swaps,
                                    "rows": rows}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
