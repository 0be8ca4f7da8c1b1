r"""The principal subspace the annealing of wide data runs in.

The annealing decides how the ``k`` centroids are shared out between the regions of the data:
its groups split along the top eigenvectors of their gain matrices, which on data whose
variance lies in few directions lie in the top principal directions of the data. On wide data
(hundreds of features) a group pass costs ``O(n g d)`` and each critical temperature an
eigenproblem in ``d`` dimensions; in the span of the top ``p`` principal directions ``V``
(d, p) of a sample of rows, with ``p`` the fewest that hold :data:`VARIANCE` of its variance
(at most :data:`MAX_DIM`), both cost ``p / d`` as much. The annealing runs on the sample's
coordinates ``y = (x - mu) V`` and its centroids come back as ``c = mu + y_c V^T``; the hard
polish that follows runs on all features, so the result is a Lloyd fixed point of the data, as
without the subspace.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .passes import Data, check_data

__all__ = ["MAX_DIM", "MIN_DIM", "VARIANCE", "Subspace", "principal_subspace"]

#: the most principal directions the annealing keeps (and the width from which it projects)
MAX_DIM = 128
#: the fewest it keeps
MIN_DIM = 16
#: the share of the sample's variance the kept directions hold (when fewer than MAX_DIM do)
VARIANCE = 0.95


class Subspace:
    """``mu`` (d,) and an orthonormal basis ``V`` (d, p), both in the data's dtype and device:
    :meth:`project` gives the coordinates ``(x - mu) V``, :meth:`lift` the points
    ``mu + y V^T``; ``held`` is the share of the sample's variance the basis holds."""

    def __init__(self, mu: Tensor, V: Tensor, held: float) -> None:
        self.mu, self.V, self.held = mu, V, float(held)

    @property
    def dim(self) -> int:
        return int(self.V.shape[1])

    def project(self, X: Tensor) -> Tensor:
        """``(X - mu) V`` (n, p)."""
        return (X - self.mu) @ self.V

    def lift(self, Y: Tensor) -> Tensor:
        """``mu + Y V^T`` (n, d)."""
        return self.mu + Y.to(self.V.dtype) @ self.V.T


@torch.no_grad()
def principal_subspace(data: Data, rows: Tensor) -> Subspace:
    """The top principal directions of the rows ``rows`` (indices) of ``data``, weighted:
    eigenvectors of their covariance (float64, ``O(m d^2)``, once per fit) by decreasing
    eigenvalue, the fewest that hold :data:`VARIANCE` of the variance, between
    :data:`MIN_DIM` and :data:`MAX_DIM` of them."""
    check_data(data)
    X = data.X[rows]  # (m, d)
    w = None if data.w is None else data.w[rows].to(X.dtype)
    tot = float(X.shape[0] if w is None else w.double().sum())
    mu = (X.sum(0, dtype=torch.float64) if w is None else w.double() @ X.double()) / max(
        tot, 1e-300)  # (d,)
    Y = X - mu.to(X.dtype)  # in the data's precision: the directions, not the digits, matter
    cov = ((Y.T @ (Y if w is None else Y * w.unsqueeze(1))) / max(tot, 1e-300)).double()
    d = data.d
    top = min(MAX_DIM, d)
    import scipy.linalg  # the top eigenpairs only (LAPACK's subset solver)

    vals, vecs = scipy.linalg.eigh(cov.cpu().numpy(), subset_by_index=[d - top, d - 1],
                                   driver="evr", check_finite=False)
    evals = torch.from_numpy(vals[::-1].copy()).clamp(min=0.0)  # decreasing
    evecs = torch.from_numpy(vecs[:, ::-1].copy())
    total = float(cov.diagonal().sum())
    share = torch.cumsum(evals, 0) / total if total > 0 else torch.ones_like(evals)
    p = int((share < VARIANCE).sum()) + 1
    p = max(min(MIN_DIM, data.d), min(p, MAX_DIM, data.d))
    dt, dev = data.X.dtype, data.X.device
    return Subspace(mu.to(device=dev, dtype=dt),
                    evecs[:, :p].to(device=dev, dtype=dt).contiguous(), float(share[p - 1]))
