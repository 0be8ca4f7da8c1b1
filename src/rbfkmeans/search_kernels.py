r"""Typed wrappers of the compiled sweeps of the swap search and of Hartigan's moves (numba).

They follow :mod:`rbfkmeans.kernels`' rule (call only where :func:`rbfkmeans.kernels.usable`
holds), threads and blocks; the loops are in the private ``rbfkmeans._swap_loops`` and
``rbfkmeans._hartigan_loops``. For rows ``x_i`` of weight ``w_i`` labelled ``a_i`` among the
centroids ``c_a`` of weights ``N_a``:

* :func:`spread_pass`: the removal cost of each centroid,
  ``sum_{a_i = a} w_i (d_i^(2) - d_i^(1))`` (``d^(1) <= d^(2)`` a row's two smallest squared
  distances), and the scatter matrices ``W_a = sum_{a_i = a} w_i (x_i - c_a)(x_i - c_a)^T``;
* :func:`scatter_pass`: ``W_a v_a`` without forming ``W_a`` (the power iterations on wide data);
* :func:`halves_pass`: the weight and sum of each cluster's rows on either side of the plane
  through ``c_a`` normal to ``v_a``;
* :func:`far_pass`: each cluster's row of largest gain ``w_i N_a / (N_a - w_i) ||x_i - c_a||^2``
  (isolating it), and :func:`cells_pass` the weight and sum of the rows nearer to that row than to
  ``c_a``;
* :func:`hartigan_pass` / :func:`hartigan_rows`: each row's best single move, of gain
  ``w_i N_a / (N_a - w_i) ||x_i - c_a||^2 - w_i N_b / (N_b + w_i) ||x_i - c_b||^2``, on few
  features / from BLAS products on wide rows.

:func:`rbfkmeans.costs.swap_costs` and :mod:`rbfkmeans.hartigan` call them; every result is
float64 and equals its torch counterpart up to rounding (``tests/test_kernels.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import kernels
from .kernels import as_array, blocks, weights_array

try:  # pragma: no cover - exercised by whichever environment runs the suite
    from . import _hartigan_loops, _swap_loops
except ImportError:  # pragma: no cover  (numba missing: kernels.usable never holds)
    _hartigan_loops = _swap_loops = None  # type: ignore[assignment]

__all__: list[str] = []  # the engine's: see rbfkmeans.kernels


def spread_pass(X: Tensor, C: Tensor, labels: Tensor, w: Tensor | None, *,
                scatter: bool = True) -> tuple[Tensor, Tensor]:
    """What the swap search needs of a clustering (:func:`rbfkmeans.costs.swap_costs`), in one
    sweep over the rows of ``X`` (n, d) labelled ``labels`` (n,) among ``C`` (k, d), float64:
    ``removal[a] = sum_{a_i = a} w_i (d_i^(2) - d_i^(1))`` (k,), with ``d^(1) <= d^(2)`` the two
    smallest squared distances of the row, and the scatter matrices
    ``W_a = sum_{a_i = a} w_i (x_i - c_a)(x_i - c_a)^T`` (k, d, d; (0, d, d) without
    ``scatter``). Needs ``k >= 2``; call only where :func:`rbfkmeans.kernels.usable` holds
    (with ``gains=k``)."""
    with kernels.launch():
        R, W = _swap_loops.spread(as_array(X), as_array(C.to(X.dtype)), as_array(labels),
                                  weights_array(w, X), bool(scatter),
                                  blocks(int(X.shape[0]), int(C.shape[0]) * (
                                      int(X.shape[1]) ** 2 if scatter else 1)))
    return torch.from_numpy(R), torch.from_numpy(W)


def scatter_pass(X: Tensor, C: Tensor, labels: Tensor, V: Tensor,
                 w: Tensor | None) -> Tensor:
    """``U_a = Sigma_a V_a`` (k, d) float64: the scatter matrix of each cluster (rows of ``X``
    labelled ``labels`` around ``C``) times its row of ``V`` (k, d), in one sweep, no matrix
    formed: the power iterations of :func:`rbfkmeans.costs.swap_costs` on wide data."""
    k, d = int(C.shape[0]), int(X.shape[1])
    with kernels.launch():
        U = _swap_loops.scatter_times(as_array(X), as_array(C.to(X.dtype)), as_array(labels),
                                      as_array(V.to(torch.float64)), weights_array(w, X),
                                      blocks(int(X.shape[0]), k * d))
    return torch.from_numpy(U)


def halves_pass(X: Tensor, C: Tensor, labels: Tensor, V: Tensor,
                w: Tensor | None) -> tuple[Tensor, Tensor]:
    """The halves of every cluster cut through ``c_a`` normal to the axis ``V_a`` (k, d): the
    weight ``count`` (2k,) and weighted sum ``total`` (2k, d) of the rows on each side (entry
    ``2a`` the side ``(x - c_a).V_a <= 0``, ``2a + 1`` the other), float64."""
    with kernels.launch():
        count, total = _swap_loops.halves(as_array(X), as_array(C.to(X.dtype)), as_array(labels),
                                          as_array(V.to(torch.float64)), weights_array(w, X),
                                          blocks(int(X.shape[0]),
                                                 2 * int(C.shape[0]) * int(X.shape[1])))
    return torch.from_numpy(count), torch.from_numpy(total)


def far_pass(X: Tensor, C: Tensor, labels: Tensor, w: Tensor | None,
             size: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each cluster's farthest row by the gain ``w_i N_a / (N_a - w_i) ||x_i - c_a||^2`` of
    isolating it (``size`` (k,) the clusters' weights ``N_a``): the gains (k,), the first such
    row's index (k; -1 where no gain is positive) and every row's squared distance to its
    centroid (n,), float64 (:func:`rbfkmeans.costs.swap_costs`)."""
    with kernels.launch():
        top, row, dist = _swap_loops.far_rows(as_array(X), as_array(C.to(X.dtype)),
                                              as_array(labels), weights_array(w, X),
                                              as_array(size.to(torch.float64)),
                                              blocks(int(X.shape[0]), int(C.shape[0])))
    return torch.from_numpy(top), torch.from_numpy(row), torch.from_numpy(dist)


def cells_pass(X: Tensor, C: Tensor, labels: Tensor, far: Tensor,
               w: Tensor | None) -> tuple[Tensor, Tensor]:
    """The weight (k,) and weighted sum (k, d) of each cluster's rows strictly nearer to its row
    ``far[a]`` (k, d) than to ``c_a``, float64 (:func:`rbfkmeans.costs.swap_costs`)."""
    k, d = int(C.shape[0]), int(X.shape[1])
    with kernels.launch():
        count, total = _swap_loops.far_cells(as_array(X), as_array(C.to(X.dtype)), as_array(labels),
                                             as_array(far.to(torch.float64)), weights_array(w, X),
                                             blocks(int(X.shape[0]), k * d))
    return torch.from_numpy(count), torch.from_numpy(total)


def hartigan_pass(X: Tensor, C: Tensor, N: Tensor, labels: Tensor, w: Tensor | None,
                  rows: Tensor) -> tuple[Tensor, ...]:
    """The best single move of the rows ``rows`` (m, int64) of ``X`` (n, d) labelled ``labels``
    among the means ``C`` (k, d, float64) of weights ``N`` (k, float64), one sweep
    (:mod:`rbfkmeans.hartigan`): the gain ``-Delta J`` (m, float64; 0 where no move pays), the
    target cluster (m, int64; -1 there), and for the bounds the squared distances (float64) to
    the own mean, the nearest other cluster and the squared distances to it and to the next
    (``inf`` where there is none). Call only where :func:`rbfkmeans.kernels.usable` holds (few
    features)."""
    with kernels.launch():
        out = _hartigan_loops.gains(as_array(X), as_array(C.to(torch.float64)),
                                    as_array(N.to(torch.float64)), as_array(labels),
                                    weights_array(w, X), as_array(rows.to(torch.long)))
    return tuple(torch.from_numpy(a) for a in out)


def hartigan_rows(X: Tensor, C: Tensor, N: Tensor, labels: Tensor, w: Tensor | None,
                  rows: Tensor) -> tuple[Tensor, ...]:
    """:func:`hartigan_pass` for the rows ``rows`` (m, int64) of wide ``X``, from BLAS products
    of a few hundred of them at a time (:func:`rbfkmeans._hartigan_loops.gains_wide`): their
    gains and targets, and for the bounds of :mod:`rbfkmeans.hartigan` their squared distances
    (float64) to their own mean, their nearest other cluster and the squared distances to it
    and to the next. Call only where :func:`rbfkmeans.kernels.usable` holds with ``scores=True``."""
    with kernels.launch(blas=True):
        out = _hartigan_loops.gains_wide(as_array(X), as_array(C.to(torch.float64)),
                                         as_array(N.to(torch.float64)), as_array(labels),
                                         weights_array(w, X), as_array(rows.to(torch.long)),
                                         blocks(int(rows.numel())))
    return tuple(torch.from_numpy(a) for a in out)
