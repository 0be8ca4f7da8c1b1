r"""Temperature schedules for deterministic annealing (Rose 1998), in this project's convention.

With scores ``z = -d / (2T)`` the softmax memberships are Gaussian posteriors of variance ``T``.
At high ``T`` every centroid sits at the (weighted) data mean ``mu`` and every row of ``R`` is
uniform. The mapping's Jacobian at a row of equal scores is ``gamma (I - 11^T/k)`` with
``gamma = 1/k`` (softmax), ``1/sqrt(k)`` (entmax-1.5: ``s = sqrt(p) = k^{-1/2}``) and ``1``
(sparsemax). Linearising the soft-Lloyd map ``c_j <- m_j`` there, a zero-sum perturbation
``c_j = mu + e_j`` evolves as ``e_j <- (k gamma / T) Sigma e_j`` with ``Sigma`` the data covariance.
The mean becomes unstable, and the centroids split, once the gain exceeds one:

.. math::

    T_c^{\text{softmax}} = \lambda_{\max}(\Sigma), \qquad
    T_c^{\text{entmax15}} = \sqrt{k}\,\lambda_{\max}(\Sigma), \qquad
    T_c^{\text{sparsemax}} = k\,\lambda_{\max}(\Sigma).

The softmax value is the classical ``2 lambda_max`` of Rose's convention (there ``exp(-d/T)``).
The entmax-1.5 and sparsemax values are derived here, not taken from the paper; the reproduction
report (``rbfkmeans reproduce``, critical temperatures) measures the first split numerically and
compares it with these predictions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from ._validation import check_positive_int, check_temperature
from .assignments import get_assignment
from .distances import chunk_rows, iter_chunks

if TYPE_CHECKING:
    from .comm import Comm

__all__ = [
    "covariance_eigmax",
    "covariance_spread",
    "critical_temperature",
    "critical_temperature_factor",
    "geometric_schedule",
]


def critical_temperature_factor(assignment: str, n_clusters: int) -> float:
    """``T_c / lambda_max``: 1 (softmax), ``sqrt(k)`` (entmax15), ``k`` (sparsemax), 0 (hard)."""
    entry = get_assignment(assignment)
    return entry.critical_factor(check_positive_int(n_clusters, "n_clusters"))


def covariance_spread(
    X: Tensor,
    sample_weight: Tensor | None = None,
    *,
    chunk_size: int | None = None,
    comm: Comm | None = None,
) -> tuple[float, float]:
    r"""Mean feature variance and largest eigenvalue of the weighted (biased) covariance of ``X``.

    ``Sigma = sum_i w_i (x_i - mu)(x_i - mu)^T / sum_i w_i`` with ``mu`` the weighted mean: two
    chunked passes accumulated in float64 (no float64 copy of ``X``). With ``comm`` (a
    :class:`rbfkmeans.comm.Comm`) the sums run over every rank's shard. Returns
    ``(trace(Sigma) / d, lambda_max(Sigma))``; ``(0, 0)`` when the weights sum to zero.
    """
    n, d = X.shape
    rows = chunk_rows(n, d, chunk_size)
    tot = torch.zeros(1, dtype=torch.float64, device=X.device)
    s1 = torch.zeros(d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, rows):
        Xc = X[s].double()  # (b, d)
        if sample_weight is None:
            tot += Xc.shape[0]
            s1 += Xc.sum(dim=0)
        else:
            wc = sample_weight[s].double()
            tot += wc.sum()
            s1 += wc @ Xc
    if comm is not None:
        comm.sum_(tot, s1)
    if float(tot) == 0:
        return 0.0, 0.0
    mu = s1 / tot  # (d,)
    M = torch.zeros(d, d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, rows):
        Xc = X[s].double() - mu  # (b, d)
        Xw = Xc if sample_weight is None else Xc * sample_weight[s].double().unsqueeze(1)
        M.addmm_(Xw.T, Xc)
    if comm is not None:
        comm.sum_(M)
    cov = M / tot  # (d, d)
    mean_var = float(cov.diagonal().clamp(min=0).mean())
    return mean_var, float(torch.linalg.eigvalsh(cov).max().clamp(min=0))


def covariance_eigmax(X: Tensor, sample_weight: Tensor | None = None) -> float:
    """Largest eigenvalue of the (weighted, biased) covariance of the rows of ``X``."""
    return covariance_spread(X, sample_weight)[1]


def critical_temperature(
    X: Tensor,
    assignment: str,
    n_clusters: int,
    sample_weight: Tensor | None = None,
    *,
    eigmax: float | None = None,
) -> float:
    """First critical temperature ``T_c`` (module docstring) of data ``X`` (n, d)."""
    lam = covariance_eigmax(X, sample_weight) if eigmax is None else float(eigmax)
    return critical_temperature_factor(assignment, n_clusters) * lam


def geometric_schedule(T_start: float, T_end: float, ratio: float) -> np.ndarray:
    r"""Temperatures ``T_start, T_start r, T_start r^2, ...`` down to (and including) ``T_end``.

    A pure function: the solver only consumes the list. ``0 < ratio < 1``, ``T_start >= T_end > 0``.
    """
    T_start = check_temperature(T_start, "T_start")
    T_end = check_temperature(T_end, "T_end")
    if not 0.0 < float(ratio) < 1.0:
        raise ValueError(f"ratio must be in (0, 1); got {ratio!r}")
    if T_end <= 0.0 or T_start < T_end:
        raise ValueError(
            f"need T_start >= T_end > 0; got T_start={T_start!r}, T_end={T_end!r}"
        )
    n = math.floor(math.log(T_end / T_start) / math.log(ratio) + 1e-9) + 1
    temps = T_start * float(ratio) ** np.arange(n)
    if temps[-1] > T_end * (1 + 1e-12):
        temps = np.append(temps, T_end)
    return temps
