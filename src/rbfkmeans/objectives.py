r"""The k-means objective and its entropic relaxations, with sample weights ``w`` (n,).

.. math::

    J(C) &= \sum_i w_i \min_j d_{ij}, \\
    F^{\mathrm{S}}_T(C) &= \min_{R} \sum_{ij} w_i r_{ij} d_{ij} + 2T \sum_{ij} w_i r_{ij}\log r_{ij}
        = -2T \sum_i w_i \operatorname{logsumexp}_j\!\left(-\frac{d_{ij}}{2T}\right), \\
    F^{\mathrm{Ts}}_T(C) &= \min_{R} \sum_{ij} w_i r_{ij} d_{ij}
        - 2T \sum_i w_i\, \tfrac43\Big(1 - \sum_j r_{ij}^{3/2}\Big),
        \quad R = \operatorname{entmax}_{1.5}(-D/2T), \\
    F^{\mathrm{sp}}_T(C) &= \min_{R} \sum_{ij} w_i r_{ij} d_{ij}
        - 2T \sum_i w_i\, \tfrac12\Big(1 - \sum_j r_{ij}^{2}\Big),
        \quad R = \operatorname{sparsemax}(-D/2T),

where ``R`` ranges over row-stochastic matrices. Each relaxation is sandwiched by ``J``:

.. math::

    J - 2T\,(\textstyle\sum_i w_i)\, H_{\max} \;\le\; F_T \;\le\; J,

with the largest entropy ``H_max`` = ``log k`` (Shannon), ``(4/3)(1 - k^{-1/2})`` (Tsallis-1.5),
``(1/2)(1 - 1/k)`` (Gini, sparsemax). So ``F_T -> J`` uniformly as ``T -> 0`` (Gamma-convergence).
By the envelope theorem every relaxation has ``dF_T/dc_j = 2 N_j (c_j - m_j)`` with
``N_j = sum_i w_i r_ij`` and ``m_j = sum_i w_i r_ij x_i / N_j``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ._validation import (
    check_finite,
    check_matrix,
    check_positive_int,
    check_temperature,
    compute_dtype,
)
from .assignments import Assignment, get_assignment
from .distances import shifted_scores, sq_distances
from .errors import NonFiniteError

__all__ = [
    "entropy_bound",
    "kmeans_objective",
    "objective_from_distances",
    "shannon_objective",
    "soft_objective",
    "sparsemax_objective",
    "tsallis_objective",
]


def _weights(w: Tensor | None, D: Tensor) -> Tensor | None:
    """``sample_weight`` as a (n,) tensor of D's dtype/device; finite and >= 0, else raise."""
    if w is None:
        return None
    if not isinstance(w, Tensor):  # an array or a list: float64 stays float64
        try:
            w = torch.as_tensor(np.ascontiguousarray(w))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"sample_weight must be a tensor or an array of numbers; got "
                            f"{type(w).__name__} ({exc})") from None
    if w.is_complex() or w.dtype == torch.bool:
        raise TypeError(f"sample_weight must hold real numbers; got dtype {w.dtype}")
    w = w.to(dtype=D.dtype, device=D.device)
    if w.shape != (D.shape[0],):
        raise ValueError(
            f"sample_weight must have shape ({D.shape[0]},); got {tuple(w.shape)}"
        )
    check_finite(w, "sample_weight")
    if bool((w < 0).any()):
        raise ValueError(
            f"sample_weight must be >= 0; got a negative entry {w.min().item()}"
        )
    return w


def _distances(X: Tensor, C: Tensor) -> Tensor:
    """Checked ``sq_distances`` for the objective functions (NaN/inf in X or C raise)."""
    D = sq_distances(X, C)  # (n, k); validates shapes
    check_finite(X, "X")
    check_finite(C, "C")
    return D


def _objective(X: Tensor, C: Tensor, T: float, assignment: str,
               sample_weight: Tensor | None) -> Tensor:
    """:func:`objective_from_distances` of the checked distances of ``X`` and ``C``. Finite
    inputs whose squared distances (or their weighted sum) overflow float32 or narrower are
    computed again in float64 (the result then float64); beyond float64's range ``ValueError``
    names ``X``. One look at the scalar result: nothing more is read on valid input."""
    F = objective_from_distances(_distances(X, C), T, assignment, sample_weight)
    if bool(torch.isfinite(F)):
        return F
    D = sq_distances(X.double(), C.double())
    if F.dtype != torch.float64:
        F = objective_from_distances(D, T, assignment, sample_weight)
        if bool(torch.isfinite(F)):
            return F
    if bool(torch.isfinite(objective_from_distances(D, 0.0, "hard", sample_weight))):
        raise NonFiniteError(  # J is finite: the entropy term T * H overflows
            f"temperature={T!r} is too large for float64: the objective overflows (got "
            f"{F.item()!r}) though J at these X and C is finite; use a smaller temperature")
    raise NonFiniteError(
        "X and C are too far apart for float64: the objective overflows (got "
        f"{F.item()!r}); the supported range is max |x - c| * sqrt(4 d sum(w)) < 1.3e154. "
        "Rescale X and C (or the weights)")


def _wsum(per_point: Tensor, w: Tensor | None) -> Tensor:
    return per_point.sum() if w is None else per_point @ w


def objective_from_distances(
    D: Tensor, T: float, assignment: str | Assignment, sample_weight: Tensor | None = None
) -> Tensor:
    """The relaxed objective of ``assignment`` at temperature ``T`` from distances ``D`` (n, k).

    ``assignment="softmax"`` gives ``F^S_T``, ``"entmax15"`` ``F^Ts_T``, ``"sparsemax"``
    ``F^sp_T``, ``"hard"`` (or ``T = 0`` for any of them) gives ``J``. Differentiable.
    Scores are shifted by the row minimum (:func:`~rbfkmeans.distances.shifted_scores`), so the
    value stays finite at any ``T > 0`` where it is representable in ``D``'s dtype (a huge
    ``T``: the entropy term ``2T sum_i w_i H_i`` is formed as ``T (2 ...)``, as ``2T`` alone
    overflows first); ``T`` so small that ``2T`` is 0 in ``D``'s dtype gives ``J``. Where the
    value itself overflows it is ``-inf``, which the callers look at (the objectives of ``X``
    and ``C`` below, the layer's objective and :func:`rbfkmeans.gradient.gradient_step` retry
    in float64 or raise naming the temperature). float16 and bfloat16 ``D`` are computed (and
    returned) in float32.

    Precondition: ``D`` holds squared distances, finite and ``>= 0`` (as
    :func:`~rbfkmeans.distances.sq_distances` returns them), with at least one column. Only its
    shape is checked: this is the objective of the layer's and the quantizer's training steps,
    where a scan of every entry would cost as much as the objective itself (and a device
    synchronisation per step). NaN in ``D`` gives a NaN objective, and a negative entry is taken
    as it is; :func:`kmeans_objective` and the other objectives of ``X`` and ``C`` check their
    inputs.
    """
    check_matrix(D, "D", "(n, k)")
    if D.shape[1] == 0:
        raise ValueError(f"D must have at least one column (one centroid); got shape "
                         f"{tuple(D.shape)}")
    entry = get_assignment(assignment)
    T = check_temperature(T, "T")
    if compute_dtype(D.dtype) != D.dtype:  # float16/bfloat16 (and integers): in float32
        D = D.to(compute_dtype(D.dtype))
    w = _weights(sample_weight, D)
    shifted = None if T == 0.0 or entry.hard else shifted_scores(D, T)
    if shifted is None:
        return _wsum(D.amin(dim=1), w)
    z, D_min = shifted  # (n, k) = -(D - D_min)/2T, (n, 1)
    # F_i = min_j d_ij + 2T (<r_i, g_i> - H(r_i)) with gaps g = -z >= 0 (the registry's free
    # energy; softmax: -log sum exp(z)). D_min is detached; the gradient is R either way.
    R = entry.forward(z, dim=1) if entry.free_energy_uses_R else None
    energy = entry.free_energy(-z, R)  # (n,)
    if torch.finfo(D.dtype).max < 2.0 * T:  # 2T overflows, T (2 ...) need not
        return _wsum(D_min.squeeze(1) + T * (2.0 * energy), w)
    return _wsum(D_min.squeeze(1) + 2.0 * T * energy, w)


def kmeans_objective(X: Tensor, C: Tensor, sample_weight: Tensor | None = None) -> Tensor:
    """k-means objective ``J(C) = sum_i w_i min_j ||x_i - c_j||^2``."""
    return _objective(X, C, 0.0, "hard", sample_weight)


def shannon_objective(
    X: Tensor, C: Tensor, T: float, sample_weight: Tensor | None = None
) -> Tensor:
    """Shannon (softmax) relaxation ``F_T(C) = -2T sum_i w_i logsumexp_j(-d_ij / 2T)``."""
    return _objective(X, C, T, "softmax", sample_weight)


def tsallis_objective(
    X: Tensor, C: Tensor, T: float, sample_weight: Tensor | None = None
) -> Tensor:
    """Tsallis-1.5 (entmax-1.5) relaxation ``F^Ts_T(C)`` (module docstring)."""
    return _objective(X, C, T, "entmax15", sample_weight)


def sparsemax_objective(
    X: Tensor, C: Tensor, T: float, sample_weight: Tensor | None = None
) -> Tensor:
    """Gini (sparsemax) relaxation ``F^sp_T(C)`` (module docstring)."""
    return _objective(X, C, T, "sparsemax", sample_weight)


def soft_objective(
    X: Tensor, C: Tensor, T: float, assignment: str, sample_weight: Tensor | None = None
) -> Tensor:
    """The relaxation that matches ``assignment`` (``J`` for ``"hard"``)."""
    return _objective(X, C, T, assignment, sample_weight)


def entropy_bound(assignment: str, k: int) -> float:
    """``H_max``: the largest entropy of a k-point distribution for ``assignment``'s regulariser,
    so that ``J - 2T (sum w) H_max <= F_T <= J``."""
    entry = get_assignment(assignment)
    return entry.max_entropy(check_positive_int(k, "k"))
