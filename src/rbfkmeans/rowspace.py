r"""Fits of fewer rows than features, in coordinates of the rows' span.

A fit sees the data only through the distances ``||x_i - c||^2``, and every centroid it makes
lies in the affine span of the rows: weighted means of rows, rows drawn by k-means++, the
annealing's splits along principal axes of the rows. With ``mu`` the mean of the ``n`` rows and
the thin QR decomposition

.. math::

    (X - \mu)^\top = Q R, \qquad Q \in \mathbb{R}^{d \times n},\; Q^\top Q = I,

the coordinates ``Z = (X - mu) Q = R^T`` (n, n) are an isometry of that span:
``||x_i - c||^2 = ||z_i - y||^2`` for every ``c = mu + Q y``. A fit of ``n`` rows of
``d >= 2n`` features (gene expression, a few images of many pixels) therefore runs on ``Z`` and
publishes ``C = mu + C_Z Q^T``: the same objective, at the cost of one QR decomposition
(``2 d n^2`` operations, in float64) where every pass of the fit would read ``n d`` entries.
For cosine the span is linear (``mu = 0``): the rows keep their norms and their angles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._validation import check_finite, check_matrix, check_positive_int

__all__ = ["ROW_SPACE_MAX_ENTRIES", "ROW_SPACE_MAX_ROWS", "RowSpace", "row_space_applies"]

#: The row space is taken for at most this many rows (its QR decomposition costs ``2 d n^2``:
#: 0.1 s for 200 rows of 20,000 features, about 1 s for 2,000 of 10,000, on two cores).
ROW_SPACE_MAX_ROWS = 2048
#: ... and at most this many entries ``n d``: the decomposition holds the centred rows and
#: ``Q`` in float64, 256 MB each at this size, besides the data.
ROW_SPACE_MAX_ENTRIES = 2**25


def row_space_applies(n: int, d: int) -> bool:
    """Whether a fit of ``n`` rows of ``d`` features runs in the coordinates of the rows' span
    (module docstring): at most :data:`ROW_SPACE_MAX_ROWS` rows and
    :data:`ROW_SPACE_MAX_ENTRIES` entries, and at least twice as many features as rows."""
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    return n <= ROW_SPACE_MAX_ROWS and n * d <= ROW_SPACE_MAX_ENTRIES and 2 * n <= d


@dataclass(frozen=True)
class RowSpace:
    """The affine span ``mu + span(Q)`` of rows (module docstring): ``mu`` (d,) and ``Q``
    (d, n) with orthonormal columns, both float64."""

    mu: Tensor
    Q: Tensor

    @classmethod
    def of(cls, X: Tensor, *, centred: bool = True) -> tuple[RowSpace, Tensor]:
        """The span of the rows of ``X`` (n, d) and their coordinates ``Z`` (n, n) in it, in
        ``X``'s dtype; ``centred=False`` takes the linear span (``mu = 0``, for cosine). NaN or
        inf in ``X`` raise ``ValueError`` naming ``X`` (one sum)."""
        check_finite(check_matrix(X, "X"), "X")
        Xd = X.to(torch.float64, copy=True)  # (n, d), centred in place: one copy of the rows
        mu = Xd.mean(dim=0) if centred else Xd.new_zeros(X.shape[1])  # (d,)
        Q, R = torch.linalg.qr(Xd.sub_(mu).T, mode="reduced")  # (d, n), (n, n)
        return cls(mu, Q), R.T.to(X.dtype).contiguous()

    def leave(self, C: Tensor) -> Tensor:
        """Points ``C`` (k, n) of the span's coordinates in the data's: ``mu + C Q^T`` (k, d),
        float64. NaN or inf in ``C`` raise ``ValueError`` naming ``C``."""
        check_finite(check_matrix(C, "C", "(k, n)"), "C")
        if C.shape[1] != self.Q.shape[1]:
            raise ValueError(f"C must have {self.Q.shape[1]} columns (the span's dimension); "
                             f"got shape {tuple(C.shape)}")
        return self.mu + C.to(self.Q) @ self.Q.T
