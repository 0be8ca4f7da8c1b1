r"""The neighbour graph of deep clustering, and averages over it, in bounded memory.

* :func:`knn_graph` -- each row's ``m`` nearest other rows (exact), from blocked products through
  :mod:`rbfkmeans.distances`: a block of ``b`` query rows against all ``n`` rows at a time,
  ``d_il - ||y_i||^2 = ||y_l||^2 - 2 y_i . y_l`` (the row constant does not change the order),
  so at most ``b x n`` distances exist at once. ``dims`` first projects the rows onto their
  leading principal axes (a ``d x d`` covariance and its eigenvectors): on MNIST (70,000 rows
  of 784 pixels) the 10 nearest neighbours on 50 axes take about 16 s on two cores
  (``docs/deep-clustering.md``).

  The products are rounded at the scale of ``||y||^2``, so rows far from the origin lose the
  differences between their distances (float32 rows ``randn + 1e3``: 44% of the nearest
  neighbours wrong). The rows are therefore centred, ``y_i = x_i - mu`` (a translation, which
  keeps every distance), when their mean lies more than :data:`CENTRING_OFFSET` times their
  root-mean-square distance to it from the origin,

  .. math::

      \lVert\mu\rVert^2 > \rho^2 \operatorname{tr}\Sigma, \qquad
      \operatorname{tr}\Sigma = \frac{1}{n}\sum_i \lVert x_i - \mu\rVert^2,

  and taken as they are (``y_i = x_i``) otherwise, where the rounding is at most
  ``1 + rho^2`` times that of centred rows. Rows near the origin thus give the graph they
  always gave: the project's data sets lie well inside (``||mu|| / sqrt(tr Sigma)``: digits
  1.48, MNIST pixels 0.82, their principal coordinates about ``1e-7``, MNIST embeddings on the
  unit sphere 0.03 to 0.04).
* :func:`neighbor_average` -- ``Rbar_i = (R_i + sum_{l in N(i)} R_l) / (m + 1)``, a block of rows
  at a time;
* :func:`propagate` -- that average applied ``rounds`` times (label propagation over the graph).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import check_dense, check_finite, check_matrix, check_positive_int
from ..distances import cross_term, iter_chunks, row_norms_sq
from ..errors import NonFiniteError
from .inputs import _row_moments

__all__ = ["CENTRING_OFFSET", "knn_graph", "neighbor_average", "principal_projection",
           "propagate"]

#: Distances held at once by :func:`knn_graph` (query rows x all rows): 64 MiB in float32.
GRAPH_CHUNK_ELEMENTS = 1 << 24
#: ``rho`` of the module docstring: :func:`knn_graph` centres the rows when their mean lies
#: more than ``rho`` root-mean-square distances (to the mean) from the origin
CENTRING_OFFSET = 4.0


@torch.no_grad()
def principal_projection(X: Tensor, dims: int) -> Tensor:
    """Coordinates (n, dims) of the centred rows of ``X`` (n, d) on their ``dims`` leading
    principal axes (eigenvectors of the covariance, accumulated in float64 a block at a time)."""
    dims = check_positive_int(dims, "dims")
    X = check_finite(check_matrix(X, "X"), "X")
    if X.dtype not in (torch.float32, torch.float64):  # integers, bool, half: in float32
        X = X.float()
    n, d = X.shape
    if dims >= d:
        return X - X.mean(dim=0)
    mean = X.double().mean(dim=0)  # (d,)
    cov = torch.zeros(d, d, dtype=torch.float64, device=X.device)
    for rows in iter_chunks(n, 8192):
        Xc = X[rows].double() - mean  # (b, d)
        cov += Xc.T @ Xc
    _, vecs = torch.linalg.eigh(cov)  # ascending eigenvalues
    V = vecs[:, -dims:].flip(1).to(X.dtype)  # (d, dims)
    return (X - mean.to(X.dtype)) @ V


@torch.no_grad()
def knn_graph(X: Tensor, n_neighbors: int, *, dims: int | None = None,
              chunk_rows: int | None = None, progress: bool = False) -> Tensor:
    """Indices (n, m) of each row's ``m = min(n_neighbors, n - 1)`` nearest other rows of ``X``
    (n, d), nearest first: exact squared Euclidean distances ``||x_i - x_l||^2`` on ``X``, or on
    its ``dims`` leading principal axes, ranked by ``||y_l||^2 - 2 y_i . y_l`` with ``y`` the
    rows, centred when their mean lies far from the origin (module docstring,
    :data:`CENTRING_OFFSET`). Computed in ``X``'s dtype: float32 rows in float32, float64 rows in
    float64 (integer, bool and half-precision rows in float32). ``chunk_rows`` query rows at a
    time (default: enough for :data:`GRAPH_CHUNK_ELEMENTS` distances). ``X`` is not
    modified."""
    n_neighbors = check_positive_int(n_neighbors, "n_neighbors")
    X = check_finite(check_matrix(X, "X"), "X")
    if X.shape[0] < 2:
        raise ValueError(f"X must be (n, d) with n >= 2 rows; got shape {tuple(X.shape)}")
    n = X.shape[0]
    m = min(n_neighbors, n - 1)
    if X.dtype not in (torch.float32, torch.float64):
        X = X.float()
    Y = X if dims is None else principal_projection(X, dims)
    mu, trace = _row_moments(Y)
    if float(mu.square().sum()) > CENTRING_OFFSET**2 * trace:
        Y = Y - mu.to(Y.dtype)  # a new tensor: X is not modified
    sq = row_norms_sq(Y)  # (n,)
    rows = chunk_rows if chunk_rows is not None else max(1, GRAPH_CHUNK_ELEMENTS // n)
    rows = check_positive_int(rows, "chunk_rows")
    out = torch.empty(n, m, dtype=torch.int64, device=X.device)
    from tqdm.auto import tqdm

    blocks = list(iter_chunks(n, rows))
    for block in tqdm(blocks, desc="neighbour graph", disable=not progress, leave=False):
        D = cross_term(Y[block], Y, sq)  # (b, n): ||x_l||^2 - 2 x_i.x_l
        local = torch.arange(D.shape[0], device=X.device)
        D[local, local + block.start] = torch.inf  # a row is not its own neighbour
        out[block] = D.topk(m, dim=1, largest=False, sorted=True).indices
    return out


def check_graph(R: Tensor, neighbors: Tensor) -> None:
    """Raise unless ``R`` is a finite dense (n, k) tensor and ``neighbors`` (n, m) dense integer
    indices of its rows."""
    check_finite(check_matrix(check_dense(R, "R"), "R", "(n, k)"), "R")
    if not R.is_floating_point():
        raise TypeError(f"R must be a floating-point tensor of memberships; got {R.dtype}")
    check_matrix(check_dense(neighbors, "neighbors"), "neighbors", "(n, m)")
    n = R.shape[0]
    if neighbors.shape[0] != n:
        raise ValueError(f"neighbors must be (n, m) with n = {n} rows of R; got "
                         f"{tuple(neighbors.shape)}")
    if neighbors.is_floating_point() or neighbors.dtype == torch.bool:
        raise TypeError(f"neighbors must hold integer row indices; got {neighbors.dtype}")
    if neighbors.numel() and not 0 <= int(neighbors.min()) <= int(neighbors.max()) < n:
        raise ValueError(f"neighbors must be row indices in [0, {n}); got values from "
                         f"{int(neighbors.min())} to {int(neighbors.max())}")


def check_rows(rows: object, n: int) -> None:
    """Raise unless ``rows`` selects rows of an (n, k) tensor: a slice, or a 1-D integer index
    tensor with entries in ``[-n, n)`` (``TypeError``/``ValueError`` naming ``rows``)."""
    if isinstance(rows, slice):
        return
    if not isinstance(rows, Tensor):
        raise TypeError(f"rows must be a slice or an index tensor; got {type(rows).__name__}")
    check_dense(rows, "rows")
    if rows.dtype in (torch.bool, torch.uint8) or rows.is_floating_point() or rows.dim() != 1 \
            or (rows.numel() and not -n <= int(rows.min()) <= int(rows.max()) < n):
        raise ValueError(f"rows must be integer indices in [-{n}, {n}) of R's rows, a 1-D "
                         f"tensor; got {rows.dtype} of shape {tuple(rows.shape)}")


@torch.no_grad()
def neighbor_average(R: Tensor, neighbors: Tensor, rows: slice | Tensor | None = None) -> Tensor:
    r"""``Rbar_i = (R_i + sum_{l in N(i)} R_l) / (m + 1)``: each row of ``R`` (n, k) averaged
    with its ``m`` neighbours' (``neighbors`` (n, m) row indices). ``rows`` (a slice or an
    index tensor, :func:`check_rows`) returns only those rows of ``Rbar``; the whole of it is
    built a block of rows at a time. ``R`` is read contiguously (its memory layout does not
    change the sums); entries so large that a row's sum with its neighbours' overflows raise
    ``ValueError`` naming ``R`` (memberships lie in [0, 1])."""
    check_graph(R, neighbors)
    R = R.contiguous()
    if rows is not None:
        check_rows(rows, R.shape[0])
        out = (R[rows] + R[neighbors[rows]].sum(dim=1)) / (neighbors.shape[1] + 1)
    else:
        out = torch.empty_like(R)  # (n, k)
        for block in iter_chunks(R.shape[0], 8192):
            out[block] = (R[block] + R[neighbors[block]].sum(dim=1)) / (neighbors.shape[1] + 1)
    # one sum of the output; only where it overflows, the entries themselves
    if out.numel() and not bool(torch.isfinite(out.sum())) \
            and not bool(torch.isfinite(out).all()):
        raise NonFiniteError(f"R's entries are too large to average in {R.dtype}: a row's sum with "
                             f"its {neighbors.shape[1]} neighbours' overflows (memberships lie in "
                             "[0, 1])")
    return out


@torch.no_grad()
def propagate(R: Tensor, neighbors: Tensor, rounds: int = 1) -> Tensor:
    """:func:`neighbor_average` applied ``rounds`` times (``rounds = 0`` returns ``R``)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"rounds must be an integer >= 0; got {rounds!r}")
    check_graph(R, neighbors)
    for _ in range(rounds):
        R = neighbor_average(R, neighbors)
    return R
