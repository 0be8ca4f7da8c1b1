"""Annealing on small overlapping blob sets: the event-driven ladder against the geometric one.

Sixteen sets of 8 Gaussian blobs in 2-D (240 points, ``cluster_std`` 1.5 and 2.5, seeds 0-7, from
``sklearn.datasets.make_blobs``): the inertia of ``RBFKMeans(8, random_state=0)`` divided by that
of ``KMeans(8, n_init=10, random_state=0)`` for the defaults (on these 1,920 point-centroid
pairs: the event-driven ladder and the geometric one, the better kept), the event-driven ladder
alone (``n_init=1``), the geometric ladder alone (``schedule="geometric"``), and the default and
the geometric ladder with ``max_swaps=0`` (annealing and polish alone).

Run by hand: ``python benchmarks/bench_blobs.py``; writes ``benchmarks/results/blobs.json``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from rbfkmeans import RBFKMeans

RESULTS = Path(__file__).parent / "results" / "blobs.json"

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "splits_only": {"n_init": 1},
    "geometric": {"schedule": "geometric"},
    "no_swaps": {"max_swaps": 0},
    "geometric_no_swaps": {"schedule": "geometric", "max_swaps": 0},
}


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # ConvergenceWarnings are not the point here
    ratios: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for std in (1.5, 2.5):
        for seed in range(8):
            X, _ = make_blobs(240, centers=8, n_features=2, cluster_std=std, random_state=seed)
            ref = KMeans(8, n_init=10, random_state=0).fit(X).inertia_
            for name, kw in VARIANTS.items():
                est = RBFKMeans(8, random_state=0, **kw).fit(X)
                ratios[name].append({"cluster_std": std, "seed": seed,
                                     "inertia_ratio": float(est.inertia_ / ref),
                                     "n_swaps": int(est.n_swaps_)})
    summary = {}
    for name, rows in ratios.items():
        r = [row["inertia_ratio"] for row in rows]
        summary[name] = {"max": max(r), "sets_above": sum(x > 1 + 1e-9 for x in r),
                         "sets": len(r)}
        print(f"{name:28s} max ratio {max(r):.4f}, above KMeans(n_init=10) on "
              f"{summary[name]['sets_above']}/{len(r)} sets")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    from machine import describe  # benchmarks/machine.py, beside this script

    RESULTS.write_text(json.dumps({"machine": describe(), "summary": summary, "runs": ratios},
                                  indent=2))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
