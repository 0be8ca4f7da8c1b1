r"""Claim 4: one gradient step with per-cluster step ``eta_j = 1/(2 N_j)`` is one Lloyd update.

From the same start ``C0`` (k random data points), four trajectories of ``L`` steps each:

(a) Lloyd: ``c_j <- mean of S_j`` (:func:`rbfkmeans.fitting.lloyd`, one iteration at a time);
(b) autograd gradient step on ``J`` (the hard limit) with ``eta_j = 1/(2|S_j|)``:
    ``c_j <- c_j - eta_j dJ/dc_j = c_j - (1/(2|S_j|)) 2|S_j| (c_j - m_j) = m_j``;
(c) the same gradient with one global learning rate ``eta = k / (2n)`` (right only for clusters of
    exactly ``n/k`` points);
(d) the gradient of the bare weighted loss ``sum_ij r_ij d_ij`` (softmax at a finite ``T``, no
    entropy term, ``R`` differentiated) with ``eta_j = 1/(2 N_j)``, against (e) the gradient of the
    relaxed ``F_T`` at the same ``T`` with the same steps (which is soft Lloyd, ``c_j <- m_j``).

``max_abs_diff`` is ``max_t max |C_t^(a) - C_t^(b)|`` over the whole trajectory, in float64;
``max_rel_diff`` the same divided by the largest ``|coordinate|`` of the Lloyd path.
The relaxed gradient at a small ``T`` (softmax and entmax15) is compared with Lloyd too.
"""

from __future__ import annotations

from typing import Any

import torch

from ..annealing import soft_lloyd
from ..gradient import gradient_step
from ..lloyd import lloyd
from ..objectives import kmeans_objective, soft_objective
from ..passes import Data
from ..stats import cluster_stats
from ._common import Context

__all__ = ["gradient_vs_lloyd"]


def _trajectory(step: Any, C0: torch.Tensor, iters: int) -> list[torch.Tensor]:
    path = [C0.clone()]
    C = C0
    for _ in range(iters):
        C = step(C)
        path.append(C.clone())
    return path


def _max_diff(p: list[torch.Tensor], q: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(p, q, strict=True))


def _one(ctx: Context, name: str, iters: int, seed: int) -> dict[str, Any]:
    dc = ctx.datasets[name]
    X, k, n = dc.X, dc.k, dc.n
    gen = torch.Generator().manual_seed(seed)
    C0 = X[torch.randperm(n, generator=gen)[:k]].clone()  # (k, 2) k random data points
    T_mid = 0.05 * dc.lambda_max  # visibly soft memberships
    T_small = 1e-9 * dc.lambda_max  # far below the margins met along the way

    def lloyd_step(C: torch.Tensor) -> torch.Tensor:
        return lloyd(Data(X), C, max_iter=1).C

    def grad_hard(C: torch.Tensor) -> torch.Tensor:
        return gradient_step(X, C, 0.0, "hard")[0]

    def grad_global(C: torch.Tensor) -> torch.Tensor:
        return gradient_step(X, C, 0.0, "hard", lr=k / (2.0 * n))[0]

    def grad_bare(C: torch.Tensor) -> torch.Tensor:
        return gradient_step(X, C, T_mid, "softmax", objective="bare")[0]

    def grad_relaxed(C: torch.Tensor) -> torch.Tensor:
        return gradient_step(X, C, T_mid, "softmax")[0]

    def soft_lloyd_step(C: torch.Tensor) -> torch.Tensor:
        return soft_lloyd(Data(X), C, T_mid, "softmax", max_iter=1)[0]

    paths = {
        "lloyd": _trajectory(lloyd_step, C0, iters),
        "gradient_per_cluster_step": _trajectory(grad_hard, C0, iters),
        "gradient_global_lr": _trajectory(grad_global, C0, iters),
        "gradient_bare_loss": _trajectory(grad_bare, C0, iters),
        "gradient_relaxed": _trajectory(grad_relaxed, C0, iters),
        "soft_lloyd": _trajectory(soft_lloyd_step, C0, iters),
    }
    small = {
        m: _max_diff(_trajectory(lambda C, m=m: gradient_step(X, C, T_small, m)[0], C0, iters),
                     paths["lloyd"])
        for m in ("softmax", "entmax15")
    }
    # the two gradients at the start, at T_mid: bare vs relaxed
    _, g_bare, _ = gradient_step(X, C0, T_mid, "softmax", objective="bare")
    _, g_rel, _N = gradient_step(X, C0, T_mid, "softmax")
    st = cluster_stats(Data(X), C0, T_mid, "softmax")
    g_formula = 2 * st.N.unsqueeze(1) * (C0 - st.S / st.N.unsqueeze(1))  # 2 N_j (c_j - m_j)
    J = {key: [float(kmeans_objective(X, C)) for C in p] for key, p in paths.items()}
    F_mid = {key: [float(soft_objective(X, C, T_mid, "softmax")) for C in paths[key]]
             for key in ("gradient_bare_loss", "gradient_relaxed")}
    return {
        "dataset": name,
        "iterations": iters,
        "T_mid": T_mid,
        "T_small": T_small,
        "global_lr": k / (2.0 * n),
        "max_abs_diff": _max_diff(paths["lloyd"], paths["gradient_per_cluster_step"]),
        "max_abs_coordinate": max(float(C.abs().max()) for C in paths["lloyd"]),
        "max_abs_diff_global_lr": _max_diff(paths["lloyd"], paths["gradient_global_lr"]),
        "max_abs_diff_relaxed_vs_soft_lloyd": _max_diff(paths["gradient_relaxed"],
                                                         paths["soft_lloyd"]),
        "max_abs_diff_bare_vs_relaxed": _max_diff(paths["gradient_bare_loss"],
                                                  paths["gradient_relaxed"]),
        "max_abs_diff_small_T_vs_lloyd": small,
        "relaxed_gradient_vs_formula": float((g_rel - g_formula).abs().max()),
        "bare_vs_relaxed_gradient_rel": float((g_bare - g_rel).norm() / g_rel.norm()),
        "J": J,
        "F_T_mid": F_mid,
        "paths": {key: [C.tolist() for C in p] for key, p in paths.items()},
    }


def gradient_vs_lloyd(ctx: Context, figure_dataset: str = "moons") -> dict[str, Any]:
    """Claim 4 on every dataset; ``max_abs_diff`` (and each difference) is the largest over all
    of them, ``max_rel_diff`` the largest of ``max_abs_diff / max_abs_coordinate``."""
    cfg = ctx.config
    per: dict[str, Any] = {}
    for i, name in enumerate(ctx.datasets):
        ctx.tick(f"gradient step vs Lloyd: {name}")
        per[name] = _one(ctx, name, cfg.gradient_iters, seed=cfg.seed * 10 + i)
    keys = ("max_abs_diff", "max_abs_diff_global_lr", "max_abs_diff_relaxed_vs_soft_lloyd",
            "max_abs_diff_bare_vs_relaxed", "relaxed_gradient_vs_formula")
    out: dict[str, Any] = {key: max(p[key] for p in per.values()) for key in keys}
    # relative to the size of the coordinates (standardised data: about 1)
    out["max_rel_diff"] = max(p["max_abs_diff"] / p["max_abs_coordinate"] for p in per.values())
    out["figure_dataset"] = figure_dataset if figure_dataset in per else next(iter(per))
    out["per_dataset"] = per
    return out
