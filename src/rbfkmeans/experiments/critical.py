r"""Claim 6: critical temperatures of deterministic annealing, predicted against measured.

At high ``T`` all centroids sit at the data mean ``mu``. Linearising the soft-Lloyd map
``c_j <- m_j`` there (:mod:`rbfkmeans.schedules`) gives the gain ``k gamma lambda_max / T`` with
``gamma = 1/k`` (softmax), ``1/sqrt(k)`` (entmax15), ``1`` (sparsemax), hence the first split at

.. math::  T_c = \lambda_{\max},\quad \sqrt{k}\,\lambda_{\max},\quad k\,\lambda_{\max}.

Three measurements per dataset and mapping:

1. ``linear``: the spectral radius of the Jacobian of the soft-Lloyd map at ``C = (mu, ..., mu)``
   (autograd through the mapping), whose crossing of 1 is the measured ``T_c`` (``rho`` is exactly
   proportional to ``1/T`` there, so one evaluation gives the crossing);
2. ``nonlinear``: soft Lloyd to convergence from ``mu`` plus a tiny perturbation at
   ``T = ratio * T_c`` for a few ratios; the spread ``max_j ||c_j - mu||`` tells whether the
   centroids split (the first split lies between the lowest unsplit and the highest split ratio);
3. ``phase``: an annealing run (warm-started, from ``1.5 T_c``, geometric cooling, no
   rebalancing) and the number of distinct centroids and the soft-Lloyd iterations at each
   temperature -- the phase diagram. Its resolution is the ladder's step: the split shows at the
   first step where the perturbation has grown past :data:`DISTINCT_TOL`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .._validation import check_dense, check_finite, check_matrix, check_real
from ..annealing import anneal, soft_lloyd
from ..assignments import get_mapping
from ..distances import sq_distances
from ..passes import Data
from ..schedules import critical_temperature_factor
from ._common import Context, DatasetContext

__all__ = ["MAPPINGS", "critical_temperatures", "distinct_count"]

MAPPINGS = ("softmax", "entmax15", "sparsemax")
#: centroids closer than this (data have unit average variance) count as one
DISTINCT_TOL = 2e-2
#: symmetric-breaking perturbation (absolute)
EPS = 1e-4


def distinct_count(C: torch.Tensor, tol: float = DISTINCT_TOL) -> int:
    """Number of groups of centroids ``C`` (k, d) (finite), grouping those within ``tol``
    (a finite number >= 0; single linkage)."""
    check_finite(check_matrix(check_dense(C, "C"), "C", "(k, d)"), "C")
    tol = check_real(tol, "tol", minimum=0.0)
    k = C.shape[0]
    close = (torch.cdist(C.double(), C.double()) <= tol).numpy()  # (k, k)
    seen, groups = np.zeros(k, bool), 0
    for i in range(k):
        if seen[i]:
            continue
        groups += 1
        stack = [i]
        seen[i] = True
        while stack:
            j = stack.pop()
            for m in np.flatnonzero(close[j] & ~seen):
                seen[m] = True
                stack.append(int(m))
    return groups


def _soft_lloyd_map(X: torch.Tensor, C: torch.Tensor, T: float, mapping: str) -> torch.Tensor:
    """``m_j(C) = sum_i r_ij x_i / sum_i r_ij``, ``R = m(-D/2T)``; differentiable in ``C``."""
    R = get_mapping(mapping)(sq_distances(X, C) / (-2.0 * T), dim=1)  # (n, k)
    return (R.T @ X) / R.sum(dim=0).unsqueeze(1)  # (k, d)


def linear_critical_temperature(dc: DatasetContext, mapping: str) -> dict[str, float]:
    """Spectral radius of the soft-Lloyd Jacobian at the all-mean configuration, at ``T = 1``;
    the map's gain is ``rho(1) / T``, so the measured ``T_c`` is ``rho(1)``."""
    X, k = dc.X, dc.k
    mu = X.mean(dim=0)
    C = mu.repeat(k, 1)  # (k, d)
    J = torch.autograd.functional.jacobian(lambda c: _soft_lloyd_map(X, c, 1.0, mapping), C)
    J = J.reshape(C.numel(), C.numel())  # (kd, kd)
    rho = float(torch.linalg.eigvals(J).abs().max())
    return {"rho_at_T1": rho, "T_c_measured": rho}


def _spread_after(dc: DatasetContext, T: float, mapping: str, max_iter: int,
                  gen: torch.Generator) -> tuple[float, int]:
    mu = dc.X.mean(dim=0)
    noise = EPS * torch.randn((dc.k, dc.X.shape[1]), generator=gen, dtype=torch.float64)
    C0 = mu + noise - noise.mean(dim=0)  # zero-sum perturbation around the mean
    C, it, _ = soft_lloyd(Data(dc.X), C0, T, mapping, max_iter=max_iter, tol=1e-26)
    return float((C - dc.X.mean(dim=0)).norm(dim=1).max()), it


def _phase(dc: DatasetContext, mapping: str, T_c: float, cooling: float, max_iter: int,
           gen: torch.Generator) -> dict[str, Any]:
    T_hot = 1.5 * T_c
    T_cold = 1e-2 * dc.lambda_max
    n_T = math.ceil(math.log(T_cold / T_hot) / math.log(cooling)) + 1
    temps = T_hot * cooling ** np.arange(n_T)
    C0 = dc.X.mean(dim=0).repeat(dc.k, 1)
    res = anneal(Data(dc.X), C0, temps.tolist(), mapping, max_iter=max_iter, tol=1e-16,
                 perturbation=EPS, generator=gen, stop_when_hard=False, rebalance=False)
    counts = [distinct_count(h["C"]) for h in res.history]  # type: ignore[arg-type]
    split = next((h["T"] for h, c in zip(res.history, counts, strict=True) if c > 1), None)
    return {"T": [float(h["T"]) for h in res.history], "distinct": counts,  # type: ignore[arg-type]
            "n_iter": [int(h["n_iter"]) for h in res.history],  # type: ignore[call-overload]
            "max_iter": max_iter, "cooling": cooling, "T_hot_over_T_c": 1.5,
            "first_split_T": split}


def critical_temperatures(ctx: Context) -> dict[str, Any]:
    cfg = ctx.config
    out: dict[str, Any] = {"ratios": list(cfg.critical_ratios), "eps": EPS,
                           "distinct_tol": DISTINCT_TOL}
    for i, (name, dc) in enumerate(ctx.datasets.items()):
        out[name] = {"lambda_max": dc.lambda_max, "k": dc.k}
        for mapping in MAPPINGS:
            ctx.tick(f"critical temperatures: {name}/{mapping}")
            gen = torch.Generator().manual_seed(cfg.seed * 1000 + i)
            T_pred = critical_temperature_factor(mapping, dc.k) * dc.lambda_max
            lin = linear_critical_temperature(dc, mapping)
            spreads, iters = [], []
            for r in cfg.critical_ratios:
                s, it = _spread_after(dc, r * T_pred, mapping, cfg.critical_max_iter, gen)
                spreads.append(s)
                iters.append(it)
            split = [s > 100 * EPS for s in spreads]
            above = [r for r, sp in zip(cfg.critical_ratios, split, strict=True) if not sp]
            below = [r for r, sp in zip(cfg.critical_ratios, split, strict=True) if sp]
            out[name][mapping] = {
                "T_c_predicted": T_pred,
                "factor": critical_temperature_factor(mapping, dc.k),
                "linear": lin,
                "linear_ratio": lin["T_c_measured"] / T_pred,
                "nonlinear": {"ratio": list(cfg.critical_ratios), "spread": spreads,
                              "split": split, "n_iter": iters},
                "split_bracket": [max(below, default=None), min(above, default=None)],
                "consistent": bool(all(r < 1 for r in below) and all(r > 1 for r in above)),
                "phase": _phase(dc, mapping, T_pred, cfg.phase_cooling, cfg.phase_max_iter, gen),
            }
    return out
