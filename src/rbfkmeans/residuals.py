r"""The k-means objective from the residuals, where the expanded form is mostly rounding.

Every pass scores a row by the expansion ``||x - c||^2 = ||x||^2 + (||c||^2 - 2 x.c)``: one BLAS
product a chunk. Each of its terms is about ``||c||^2`` where the row lies near its centroid, so
its rounding costs about ``d eps ||c||^2`` a row (``eps`` of the data's dtype), and where the
clusters are much tighter than their distance from the origin (the fit's frame puts it at the
data's mean) ``J`` summed from it is mostly that rounding: five blobs of spread ``1e-8`` in
8 dimensions (float64) had ``inertia_`` ``2.67e-11`` where the residuals give ``1.563e-12``
(scikit-learn, which sums residuals, ``1.563e-12``).

:func:`settled_inertia` takes ``J`` of a hard pass with its labels, and where

.. math::

    J < \text{CANCELLATION\_ULPS} \; d \; \varepsilon \sum_j N_j \|c_j\|^2

(``N_j`` the weight of cluster ``j``; ``sum_j N_j ||c_j||^2 + J`` is the rows' ``sum_i w_i
||x_i||^2`` at a Lloyd fixed point) sums it again as ``J = sum_i w_i ||x_i - c_{l_i}||^2``, one
pass of ``O(n d)``. Elsewhere ``J`` is returned as it is, bit for bit: the condition costs a
bincount of the labels.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._validation import check_matrix, check_real, check_vector
from .distances import row_norms_sq
from .passes import Data, check_data, check_labels
from .sparse import SparseRows

__all__ = ["CANCELLATION_ULPS", "cancels", "residual_sum", "settled_inertia"]

#: ``J`` is summed from the residuals where it is below this many units in the last place of
#: ``d sum_j N_j ||c_j||^2`` (module docstring): far above the expansion's error on the
#: benchmarks' data (MNIST's float32 pixels with k = 10: the bound 0.08 a row against a
#: ``J`` of 39 a row), and far below it on data that needs it.
CANCELLATION_ULPS = 64


def cancels(inertia: float, N: Tensor, C: Tensor, dtype: torch.dtype) -> bool:
    """Whether ``J = inertia`` (in squared distances) of centroids ``C`` (k, d) with cluster
    weights ``N`` (k,) may be mostly the rounding of the expansion (module docstring)."""
    inertia = check_real(inertia, "inertia")
    check_matrix(C, "C", "(k, d)")
    check_vector(N, "N", C.shape[0])
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype; got {dtype!r}")
    C_sq = row_norms_sq(C.to(torch.float64))  # (k,)
    bound = CANCELLATION_ULPS * C.shape[1] * torch.finfo(dtype).eps * float(
        N.to(torch.float64) @ C_sq)
    return bool(inertia < bound)


def residual_sum(data: Data, C: Tensor, labels: Tensor) -> float:
    """``sum_i w_i ||x_i - c_{l_i}||^2`` over the rows of every rank, from the residuals (float64
    sums of chunks of rows), for dense ``data``; ``labels`` (n,) are this rank's."""
    check_data(data)
    if isinstance(data.X, SparseRows):
        raise TypeError("residual_sum needs dense rows; got sparse data")
    C = data.check_centroids(C)
    labels = check_labels(data, labels, C.shape[0])
    total = torch.zeros((), dtype=torch.float64, device=data.X.device)
    for s in data.chunks(C.shape[1]):
        r = row_norms_sq(data.X[s] - C[labels[s]])  # (b,)
        w = data.weight(s)
        total += r.sum(dtype=torch.float64) if w is None else r.double() @ w.double()
    return data.comm.sum_scalars(float(total))[0]


def settled_inertia(data: Data, C: Tensor, labels: Tensor, J: float) -> float:
    """``J`` (in the metric's units, :attr:`rbfkmeans.metrics.Metric.objective_scale`) of a hard
    pass at ``C`` with this rank's ``labels``, or where it may be mostly rounding
    (:func:`cancels`) the same sum from the residuals. Sparse rows keep ``J``."""
    check_data(data)
    C = data.check_centroids(C)
    k = C.shape[0]
    labels = check_labels(data, labels, k)
    J = check_real(J, "J")  # (a cosine J may round below 0)
    if isinstance(data.X, SparseRows):
        return J
    w = None if data.w is None else data.w.to(torch.float64)
    N = torch.bincount(labels, weights=w, minlength=k).to(torch.float64)  # (k,)
    data.comm.sum_(N)
    scale = data.metric.objective_scale
    if not cancels(J / scale, N, C, data.X.dtype):
        return J
    return scale * residual_sum(data, C, labels)
