r"""Claim 8: the interview question's follow-ups, measured on the datasets.

1. Temperature and the output distribution: the mean entropy of the softmax rows
   ``H(r) = -sum_j r_j log r_j`` (as a fraction of ``log k``) at the Lloyd fixed point ``C*``
   against ``T``, and for entmax15 the Tsallis-1.5 entropy (as a fraction of its maximum), the
   share of exactly one-hot rows and the mean support size.
2. ReLU instead of softmax: ``relu(W x + b)`` with the same ``W = C/T``, ``b = -||c||^2/(2T)``,
   i.e. ``relu((||x||^2 - d_ij) / 2T)``. Measured: rows that are all zero (no assignment at all),
   row sums (no normalisation), agreement of the argmax with the nearest centroid, dependence on
   where the origin is (the data shifted by a constant vector, centroids with it), and the
   (absence of) a temperature effect on the normalised rows.
3. Online learning: centroids learnt from a stream (shuffled passes over the data, mini-batches)
   by ``RBFKMeans.partial_fit`` (MacQueen's per-cluster step ``1/n_j``, the SGD step on ``J``
   with ``eta = 1/(2 n_j)``) and by a plain ``torch.optim.SGD`` loop that backpropagates the
   layer's objective (softmax, ``T = 1e-9 lambda_max``) with one global step
   ``eta_t = k / (2 B t)``. Both start from the k-means++ centres ``C0`` that Lloyd went from to
   ``C*``; the error is ``max_j ||c_j - c*_j||`` after matching, against the samples seen. The
   error to the Lloyd fixed point nearest to the online result (Lloyd run from it) is recorded
   too: an online run can settle in another fixed point than batch Lloyd from the same start.
   The log-log slope of the error against the samples seen (after the first pass) tells how
   fast it falls (``-1``: like ``1/samples``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..distances import sq_distances
from ..estimator import RBFKMeans
from ..layer import KMeansLayer
from ..lloyd import lloyd
from ..objectives import kmeans_objective
from ..passes import Data
from ._common import Context, DatasetContext, match_max_error
from .collapse import memberships

__all__ = ["entropy_vs_temperature", "followups", "online_learning", "relu_instead_of_softmax"]


def entropy_vs_temperature(dc: DatasetContext, n_temperatures: int) -> dict[str, Any]:
    X, C, k = dc.X, dc.C_star, dc.k
    temps = np.geomspace(10 * dc.lambda_max, dc.g_min / 20.0, n_temperatures)
    out: dict[str, list[float]] = {key: [] for key in (
        "shannon_fraction", "softmax_one_hot", "tsallis_fraction", "entmax_one_hot",
        "entmax_support")}
    for T in temps:
        R = memberships(X, C, float(T), "softmax")
        H = -(torch.special.xlogy(R, R)).sum(dim=1)  # (n,)
        out["shannon_fraction"].append(float(H.mean() / np.log(k)))
        out["softmax_one_hot"].append(float((R.amax(dim=1) == 1.0).double().mean()))
        P = memberships(X, C, float(T), "entmax15")
        Ht = (4.0 / 3.0) * (1.0 - P.pow(1.5).sum(dim=1))
        out["tsallis_fraction"].append(float(Ht.mean() / ((4.0 / 3.0) * (1 - k**-0.5))))
        out["entmax_one_hot"].append(float((P.amax(dim=1) == 1.0).double().mean()))
        out["entmax_support"].append(float((P > 0).sum(dim=1).double().mean()))
    return {"T": temps.tolist(), **out}


def _relu_rows(X: torch.Tensor, C: torch.Tensor, T: float) -> torch.Tensor:
    W, b = C / T, -(C * C).sum(dim=1) / (2.0 * T)  # (k, d), (k,)
    return torch.relu(X @ W.T + b)  # (n, k)


def relu_instead_of_softmax(dc: DatasetContext) -> dict[str, Any]:
    X, C = dc.X, dc.C_star
    nearest = sq_distances(X, C).argmin(dim=1)  # (n,)
    out: dict[str, Any] = {}
    for label, offset in (("centred", 0.0), ("shifted", 5.0)):
        v = torch.full((X.shape[1],), offset, dtype=X.dtype)
        Xs, Cs = X + v, C + v  # the same geometry, origin elsewhere
        A = _relu_rows(Xs, Cs, 1.0)
        zero = A.amax(dim=1) == 0  # (n,) rows with no output at all
        agree = (A.argmax(dim=1) == nearest) & ~zero
        S = memberships(Xs, Cs, 1.0, "softmax")
        sums = A.sum(dim=1)
        A_cold = _relu_rows(Xs, Cs, 1e-3)
        norm = A / sums.clamp(min=1e-300).unsqueeze(1)
        norm_cold = A_cold / A_cold.sum(dim=1).clamp(min=1e-300).unsqueeze(1)
        out[label] = {
            "offset": offset,
            "zero_rows": float(zero.double().mean()),
            "argmax_agrees": float(agree.double().mean()),
            "argmax_agrees_nonzero_rows": float(agree[~zero].double().mean())
            if bool((~zero).any()) else None,
            "row_sum_mean": float(sums.mean()),
            "row_sum_min": float(sums.min()),
            "row_sum_max": float(sums.max()),
            "normalised_rows_T1_vs_T1e-3": float((norm - norm_cold).abs().max()),
            "normalised_max_membership": float(norm[~zero].amax(dim=1).mean()),
            "softmax_argmax_agrees": float((S.argmax(dim=1) == nearest).double().mean()),
            "softmax_row_sum_error": float((S.sum(dim=1) - 1).abs().max()),
        }
    S0 = memberships(X, C, 1.0, "softmax")
    S5 = memberships(X + 5.0, C + 5.0, 1.0, "softmax")
    out["softmax_translation_change"] = float((S0 - S5).abs().max())
    out["relu_translation_change"] = float(
        (_relu_rows(X, C, 1.0) - _relu_rows(X + 5.0, C + 5.0, 1.0)).abs().max())
    return out


def _loglog_slope(samples: list[int], err: list[float], epochs: int) -> float | None:
    """Least-squares slope of ``log err`` against ``log samples`` after the first of ``epochs``
    passes (``samples >= samples[-1] / epochs``, errors > 0): ``-1`` is an error falling like
    ``1/samples``; ``None`` with fewer than two such points."""
    s, e = np.asarray(samples, float), np.asarray(err, float)
    sel = (s >= s[-1] / epochs) & (e > 0)
    if np.unique(s[sel]).size < 2:
        return None
    return float(np.polyfit(np.log(s[sel]), np.log(e[sel]), 1)[0])


def online_learning(dc: DatasetContext, epochs: int, batch: int, seed: int) -> dict[str, Any]:
    X, k, n = dc.X, dc.k, dc.n
    C_star, C0 = dc.C_star, dc.C0
    J_star = dc.J_star
    gen = torch.Generator().manual_seed(seed)
    # partial_fit from C0: each start counts as one point (MacQueen's start), then the batches
    est = RBFKMeans(k, assignment="hard", init=C0.numpy(), random_state=seed)
    T_sgd = 1e-9 * dc.lambda_max
    layer = KMeansLayer(C0, temperature=T_sgd, assignment="softmax")
    opt = torch.optim.SGD(layer.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: k / (2.0 * batch * (t + 1)))
    seen: list[int] = []
    path_pf: list[torch.Tensor] = []
    path_sgd: list[torch.Tensor] = []
    count = 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for s in range(0, n, batch):
            xb = X[perm[s : s + batch]]  # (B, d)
            est.partial_fit(xb.numpy())
            opt.zero_grad()
            layer.objective(xb).backward()
            opt.step()
            sched.step()
            count += xb.shape[0]
            seen.append(count)
            path_pf.append(torch.as_tensor(est.cluster_centers_).clone())
            path_sgd.append(layer.centroids.detach().clone())
    out: dict[str, Any] = {"samples": seen, "batch": batch, "epochs": epochs, "T_sgd": T_sgd,
                           "initial_error": match_max_error(C0, C_star)}
    for key, path in (("partial_fit", path_pf), ("sgd", path_sgd)):
        # the Lloyd fixed point the online result sits next to (may differ from C*)
        C_own = lloyd(Data(X), path[-1], max_iter=1000).C
        err = [match_max_error(C, C_star) for C in path]
        err_own = [match_max_error(C, C_own) for C in path]
        out[key] = {
            "error": err,
            "error_loglog_slope": _loglog_slope(seen, err, epochs),
            "error_to_nearest_fixed_point": err_own,
            "excess_J": [float(kmeans_objective(X, C)) / J_star - 1 for C in path],
            "final_error": err[-1],
            "final_error_to_nearest_fixed_point": err_own[-1],
            "nearest_fixed_point_is_C_star": match_max_error(C_own, C_star) < 1e-9,
            "nearest_fixed_point_excess_J": float(kmeans_objective(X, C_own)) / J_star - 1,
        }
    return out


def followups(ctx: Context) -> dict[str, Any]:
    cfg = ctx.config
    out: dict[str, Any] = {"entropy": {}, "relu": {}, "online": {}}
    for i, (name, dc) in enumerate(ctx.datasets.items()):
        ctx.tick(f"follow-ups: entropy, ReLU, online ({name})")
        out["entropy"][name] = entropy_vs_temperature(dc, max(24, cfg.n_temperatures))
        out["relu"][name] = relu_instead_of_softmax(dc)
        out["online"][name] = online_learning(dc, cfg.online_epochs, cfg.online_batch,
                                              seed=cfg.seed * 10 + i)
    return out
