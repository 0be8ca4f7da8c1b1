r"""Claim 9: centroid paths through the annealing, one per dataset and mapping.

``RBFKMeans(assignment=m, schedule="geometric", cooling=anneal_cooling)`` is fitted on each
dataset (the geometric ladder, whose history holds every temperature): it starts every
centroid at the data mean above the first critical temperature, cools geometrically, iterates the
soft-Lloyd fixed point at each temperature (warm-started) and finishes with a hard Lloyd polish
and the swap search (a swap is kept only when it lowers J).
Its ``history_`` holds the centroids at each temperature: the path. The final inertia is compared
with the best of the k-means++ Lloyd runs (``J*``) and with scikit-learn's ``KMeans(n_init=10)``.
"""

from __future__ import annotations

from typing import Any

from sklearn.cluster import KMeans

from ..estimator import RBFKMeans
from ._common import Context

__all__ = ["MAPPINGS", "trajectories"]

MAPPINGS = ("softmax", "entmax15")


def trajectories(ctx: Context) -> dict[str, Any]:
    cfg = ctx.config
    out: dict[str, Any] = {}
    for name, dc in ctx.datasets.items():
        X = dc.data.X
        ref = KMeans(dc.k, n_init=10, random_state=cfg.seed).fit(X)
        out[name] = {"sklearn_inertia": float(ref.inertia_), "J_star": dc.J_star}
        for mapping in MAPPINGS:
            ctx.tick(f"annealing paths: {name}/{mapping}")
            est = RBFKMeans(dc.k, assignment=mapping, schedule="geometric",
                            cooling=cfg.anneal_cooling, random_state=cfg.seed).fit(X)
            out[name][mapping] = {
                "T": [float(h["T"]) for h in est.history_],
                "centers": [h["centers"].tolist() for h in est.history_],
                "final_centers": est.cluster_centers_.tolist(),
                "inertia": float(est.inertia_),
                "n_iter": int(est.n_iter_),
                "T_c": float(est.critical_temperature_),
            }
    return out
