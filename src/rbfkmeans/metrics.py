r"""The geometry of the assignment: squared Euclidean distances, or cosine (spherical k-means).

``metric="sqeuclidean"`` (the default) is the convention of the whole package: distances
``d_ij = ||x_i - c_j||^2`` and scores ``z_ij = -d_ij / 2T``. ``metric="cosine"`` is spherical
k-means (Dhillon & Modha 2001), with the scores

.. math::

    z_{ij} = \frac{\langle \hat x_i, \hat c_j \rangle}{T}, \qquad
    \hat x = \frac{x}{\lVert x \rVert},

that is the Linear layer ``W = C_hat / T``, ``b = 0`` applied to normalised inputs. On unit vectors
``||x_hat - c_hat||^2 = 2 (1 - cos)``, hence ``-||x_hat - c_hat||^2 / 2T = cos / T - 1 / T``: the
memberships of the cosine scores at ``T`` are the Euclidean memberships of the normalised data at
the same ``T`` (a simplex mapping ignores a per-row constant). So spherical k-means runs on the
Euclidean passes (:mod:`rbfkmeans.passes`) over the normalised data, with every centroid projected
back onto the sphere after each update. The spherical update is the normalised weighted mean,

.. math::

    c_j \leftarrow \frac{m_j}{\lVert m_j \rVert}, \qquad
    m_j = \frac{\sum_i w_i r_{ij} \hat x_i}{\sum_i w_i r_{ij}},

the maximiser of ``sum_i w_i r_ij <x_hat_i, c>`` over unit vectors ``c``, and the objective

.. math::

    J_{\cos}(C) = \sum_i w_i \big(1 - \max_j \cos(x_i, c_j)\big) = \tfrac12\, J(\hat X, \hat C)

is half the Euclidean ``J`` of the normalised data at unit centroids. The relaxations are halved
alike: for softmax ``F_T = sum_i w_i (1 - T logsumexp_j(cos_ij / T))``, and
``J_cos - T (sum w) H_max <= F_T <= J_cos``.

A :class:`Metric` holds what the solvers need: ``prepare`` (the data the Euclidean passes see),
``project`` (centroids onto the metric's set of centroids) and ``objective_scale`` (the metric's
objective over the Euclidean ``J`` of the prepared data). :data:`METRICS` is the registry of the
names accepted as ``metric`` everywhere (the layer, the estimator, the command line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._validation import check_finite, check_matrix, check_tensor, compute_dtype
from .distances import WIDE_DOTS, row_norms_sq

__all__ = [
    "METRICS",
    "Metric",
    "check_metric",
    "check_nonzero_rows",
    "cosine_similarity",
    "get_metric",
    "normalize_rows",
    "project_rows",
    "unit_rows",
]

#: Rows whose squared norm, as their own precision computes it, lies within this many machine
#: epsilons of 1 are unit rows already (:func:`unit_rows`). :func:`normalize_rows` leaves at
#: most 11 eps on rows of up to 30,000 random entries (3 eps at 784), so its own output passes.
UNIT_TOLERANCE = 16


def _numbers(X: Tensor) -> Tensor:
    """``X``, or bool ``X`` as its 0/1 values in float32 (as :func:`cosine_similarity` computes
    it): this module takes integers as numbers, and bools are integers."""
    return X.to(compute_dtype(X.dtype)) if X.dtype == torch.bool else X


def _scale(X: Tensor, name: str = "X") -> Tensor:
    """``max_l |x_il|`` (..., 1), detached: dividing by it first keeps the norms of rows of tiny
    or huge entries from underflowing to 0 or overflowing to inf. Raises unless ``X`` is a real
    tensor with a non-empty last dimension (named ``name``)."""
    _check_rows(X, name)
    return _numbers(X.detach()).abs().amax(dim=-1, keepdim=True)


def _norms(X: Tensor) -> Tensor:
    """``||x||`` of every row of ``X`` (..., d), (..., 1): ``vector_norm``, or for rows of more
    than :data:`~rbfkmeans.distances.WIDE_DOTS` features not in float64 the square root of
    their squares summed in float64 (:func:`~rbfkmeans.distances.row_norms_sq`; a float32
    ``vector_norm`` of 1,000,000 features is 1e-5 off)."""
    d = X.shape[-1]
    if d <= WIDE_DOTS or X.dtype == torch.float64 or not X.is_floating_point():
        return torch.linalg.vector_norm(X, dim=-1, keepdim=True)
    return row_norms_sq(X.reshape(-1, d)).sqrt().reshape(*X.shape[:-1], 1)


def _check_rows(X: Tensor, name: str) -> None:
    """Raise unless ``X`` is a real tensor with a non-empty last dimension (named ``name``)."""
    check_tensor(X, name)
    if X.dim() < 1 or X.shape[-1] == 0:
        raise ValueError(f"{name} must have rows of at least one entry (..., d); got shape "
                         f"{tuple(X.shape)}")


def _zero_row_error(zero: Tensor, name: str) -> ValueError:
    first = zero.nonzero()[0].tolist()
    where = str(first[0]) if len(first) == 1 else str(tuple(first))
    return ValueError(
        f"{name} has a zero row (row {where}; {int(zero.sum())} in all); metric='cosine' needs "
        "every row to have a direction (a non-zero norm)"
    )


def check_nonzero_rows(X: Tensor, name: str = "X") -> None:
    """Raise ``ValueError`` naming the first row of ``X`` (..., d) whose entries are all zero."""
    _check_rows(X, name)
    Xd = X.detach()
    if not Xd.is_floating_point():  # integers and bools: no norm to take, no underflow
        zero = ~(Xd != 0).any(dim=-1)
        if bool(zero.any()):
            raise _zero_row_error(zero, name)
        return
    zero = torch.linalg.vector_norm(Xd, dim=-1) == 0  # (...,): the zero rows, and any whose
    if bool(zero.any()):  # squares all underflowed, told apart by their entries
        zero[zero.clone()] = ~(Xd[zero] != 0).any(dim=-1)
        if bool(zero.any()):
            raise _zero_row_error(zero, name)


def normalize_rows(X: Tensor, name: str = "X") -> Tensor:
    """``x / ||x||`` for every row of ``X`` (..., d): a new tensor, differentiable in ``X``.

    Computed as ``x / ||x||`` where every row's ``||x||^2`` is safely inside the dtype's range
    (at most half its largest value, and at least ``d / eps`` times its smallest normal, so
    that squares lost to underflow cannot matter); otherwise as ``y / ||y||`` with ``y = x /
    max_l |x_l|`` (the scale detached: the quotient does not depend on it), so no row
    underflows or overflows. A zero row raises ``ValueError`` naming the first one, NaN or inf
    entries ``ValueError`` saying how many (``name`` is the parameter's name in the messages).
    Integers are divided as numbers (a float32 result), bools as 0 and 1.
    """
    _check_rows(X, name)
    X = _numbers(X)
    if X.is_floating_point():
        norm = _norms(X)  # (..., 1)
        info = torch.finfo(X.dtype)
        sq = norm.detach().double().square()
        if X.numel() and bool(((sq <= info.max / 2)
                               & (sq >= X.shape[-1] / info.eps * info.tiny)).all()):
            return X / norm
    scale = _scale(X, name)  # (..., 1)
    if not bool(torch.isfinite(scale).all()):  # a NaN or inf entry (its row's norm is not
        check_finite(X, name)  # finite either, so finite rows never come this way for it)
    zero = (scale == 0).squeeze(-1)
    if bool(zero.any()):
        raise _zero_row_error(zero, name)
    Y = X / scale
    return Y / _norms(Y)


def _all_unit(sq: Tensor, dtype: torch.dtype) -> bool:
    """Whether every squared norm in ``sq`` lies within ``UNIT_TOLERANCE`` eps of ``dtype`` of
    1: the rule of :func:`unit_rows`, for dense and sparse rows alike."""
    return bool(((sq - 1.0).abs_() <= UNIT_TOLERANCE * torch.finfo(dtype).eps).all())


def unit_rows(X: Tensor, name: str = "X") -> Tensor:
    """The rows of ``X`` (..., d) on the unit sphere, for data that is only read (the passes):
    ``X`` itself, not a copy, when it carries no gradient and every row's ``||x||^2`` lies
    within ``UNIT_TOLERANCE`` eps of 1 (rows normalised already, as embedding models return
    them: dividing them by their norms again would move them by rounding alone), else
    :func:`normalize_rows`. So a fit of rows and a fit of ``normalize_rows`` of them read the
    same unit rows, bit for bit."""
    _check_rows(X, name)
    if X.is_floating_point() and not X.requires_grad and X.numel():
        sq = _norms(X).squeeze(-1).double().square_()
        if _all_unit(sq, X.dtype):
            return X
    return normalize_rows(X, name)


def project_rows(C: Tensor, fallback: Tensor | None = None, name: str = "C") -> Tensor:
    """The rows of ``C`` (k, d) on the unit sphere, ``c_j / ||c_j||``.

    A zero row (a cluster whose members' directions cancel) takes the row of ``fallback`` (the
    previous centroids, so such a centroid keeps its direction; a real tensor of ``C``'s
    shape, else ``TypeError`` / ``ValueError`` naming it); without ``fallback`` it raises
    ``ValueError`` naming the row.
    """
    if fallback is not None:
        scale = _scale(C, name)  # (k, 1); checks C
        check_tensor(fallback, "fallback")
        if fallback.shape != C.shape:
            raise ValueError(f"fallback must have the shape of {name} {tuple(C.shape)}; got "
                             f"{tuple(fallback.shape)}")
        zero = (scale == 0).squeeze(-1)  # (k,)
        if bool(zero.any()):
            C = _numbers(C)
            C = torch.where(zero.unsqueeze(-1),
                            fallback.to(C.dtype) if C.is_floating_point() else fallback, C)
    return normalize_rows(C, name)


def cosine_similarity(X: Tensor, C: Tensor) -> Tensor:
    """``cos(x_i, c_j)`` (n, k) of ``X`` (n, d) and ``C`` (k, d): one matrix product of the
    normalised rows; raises on a zero row of either (named ``X`` and ``C``). The two are
    promoted to a common dtype; float16, bfloat16 and integers are computed (and returned) in
    float32."""
    check_matrix(X, "X", "(n, d)")
    check_matrix(C, "C", "(k, d)")
    if X.shape[1] != C.shape[1]:
        raise ValueError(f"X has {X.shape[1]} features but C has {C.shape[1]}; they must match")
    if X.device != C.device:
        raise ValueError(f"X and C must be on one device; got {X.device} and {C.device}")
    dtype = compute_dtype(torch.promote_types(X.dtype, C.dtype))
    X, C = X.to(dtype), C.to(dtype)  # no copy when already in it
    return normalize_rows(X, "X") @ normalize_rows(C, "C").T


def _identity(X: Tensor, name: str = "X") -> Tensor:
    return X


def _keep(C: Tensor, fallback: Tensor | None = None, name: str = "C") -> Tensor:
    return C


@dataclass(frozen=True)
class Metric:
    """One metric and what the solvers need of it (module docstring).

    ``prepare(X, name)`` is the data the Euclidean passes run on (``X`` itself, or its rows
    normalised, a new tensor); ``project(C, fallback, name)`` maps centroids onto the metric's
    set of centroids after an update (the identity, or onto the unit sphere);
    ``objective_scale`` is the metric's objective over the Euclidean ``J`` of the prepared data
    (1, or 1/2 for cosine).
    """

    name: str
    prepare: Callable[[Tensor, str], Tensor]
    project: Callable[[Tensor, Tensor | None, str], Tensor]
    objective_scale: float
    spherical: bool = False

    def __repr__(self) -> str:
        return f"Metric({self.name!r})"


#: name -> :class:`Metric`; the names accepted as ``metric`` everywhere, in this order.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("sqeuclidean", _identity, _keep, 1.0),
        Metric("cosine", normalize_rows, project_rows, 0.5, spherical=True),
    )
}


def check_metric(metric: Any, name: str = "metric") -> str:
    """Return ``metric`` if it names a registered metric, else raise ``ValueError`` naming the
    parameter ``name`` and the value received."""
    if not isinstance(metric, str) or metric not in METRICS:
        names = ", ".join(repr(m) for m in METRICS)
        raise ValueError(f"{name} must be one of {names}; got {metric!r}")
    return metric


def get_metric(metric: Any, name: str = "metric") -> Metric:
    """The registry entry of ``metric`` (a :class:`Metric` is returned as it is)."""
    if isinstance(metric, Metric):
        return metric
    return METRICS[check_metric(metric, name)]
