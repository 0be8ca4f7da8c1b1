r"""Mini-batch k-means for data that is not in memory: the step and the batch sources.

One step on a batch ``B`` (rows ``x_i``, weights ``w_i``, memberships ``r_ij``; one-hot at
``T = 0``, else ``m(-d_ij / 2T)``) with running counts ``n_j``:

.. math::

    N^B_j = \sum_{i \in B} w_i r_{ij}, \qquad S^B_j = \sum_{i \in B} w_i r_{ij} x_i, \qquad
    n_j \leftarrow n_j + N^B_j, \qquad c_j \leftarrow c_j + \frac{S^B_j - N^B_j c_j}{n_j}.

Since ``dF_B/dc_j = 2 (N^B_j c_j - S^B_j)``, this is the gradient step on the batch objective with
the per-cluster rate ``eta_j = 1 / (2 n_j)``: MacQueen's online rule applied a batch at a time
(Sculley 2010, "Web-scale k-means clustering"). A batch is never held as more than
``chunk_rows x k`` memberships (:func:`rbfkmeans.fitting.cluster_stats`), and under
``torch.distributed`` the batch statistics are summed over ranks, so every rank takes the same step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .fitting import Comm, cluster_stats, relocate_empty

__all__ = ["agree_on_batch", "array_batches", "batch_data", "minibatch_step"]


@torch.no_grad()
def minibatch_step(
    X: Tensor,
    C: Tensor,
    counts: Tensor,
    T: float,
    assignment: str,
    *,
    sample_weight: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
) -> tuple[Tensor, Tensor, float]:
    """One mini-batch step (module docstring) on the batch ``X`` (b, d) from centroids ``C``
    (k, d) and running counts ``counts`` (k,). Returns new ``(C, counts, J_B)`` with ``J_B`` the
    batch's k-means objective at the old centroids (over all ranks).

    A cluster that has still received no mass (``n_j = 0``) is moved to the batch point farthest
    from the other centroids (its count stays 0, so its next step jumps to its members' mean).
    """
    comm = comm or Comm.auto()
    st = cluster_stats(X, C, T, assignment, sample_weight=sample_weight, chunk_size=chunk_size,
                       comm=comm)
    counts = counts + st.N  # (k,)
    tiny = torch.finfo(C.dtype).tiny
    rate = torch.where(counts > 0, 1.0 / counts.clamp(min=tiny), torch.zeros_like(counts))
    C = C + rate.unsqueeze(1) * (st.S - st.N.unsqueeze(1) * C)  # (k, d)
    empty = counts <= 0  # (k,) the same on every rank (counts are sums over ranks)
    if bool(empty.any()):
        C = relocate_empty(X, C, empty, chunk_size=chunk_size, comm=comm)
    return C, counts, st.inertia


def batch_data(item: Any) -> Any:
    """The data of one item of a batch source: the first element of a tuple or list whose first
    element is an array or tensor (``(x, y)`` from a ``DataLoader``), else the item itself."""
    if isinstance(item, tuple | list) and item and isinstance(item[0], np.ndarray | Tensor):
        return item[0]
    return item


def array_batches(
    X: Any, sample_weight: Any, batch_size: int, rng: np.random.RandomState
) -> Iterator[tuple[Any, Any]]:
    """Blocks of ``batch_size`` consecutive rows of the 2-D array ``X`` (views, never a copy of
    ``X``; a ``numpy.memmap`` is read a block at a time), in an order shuffled by ``rng``, each
    with its rows of ``sample_weight`` (or ``None``)."""
    n = int(X.shape[0])
    starts = np.arange(0, n, batch_size)
    for start in starts[rng.permutation(len(starts))]:
        s = slice(int(start), min(int(start) + batch_size, n))
        yield X[s], (None if sample_weight is None else sample_weight[s])


def agree_on_batch(
    comm: Comm, error: Exception | None, X: np.ndarray | None
) -> tuple[int, int, bool]:
    """After each rank fetched and validated its next batch (``X`` None when its source is
    exhausted): the number of ranks with a batch, the common feature count, and whether any of
    them is float64. A batch rejected on one rank raises on every rank (no rank is left waiting
    in a collective), and so do differing feature counts."""
    row = [float(error is not None), 0.0, -1.0, 0.0]
    if X is not None and error is None:
        row[1:] = [1.0, float(X.shape[1]), float(X.dtype == np.float64)]
    live = row[1] > 0
    if not comm.active:
        if error is not None:
            raise error
        return int(live), int(row[2]), bool(row[3])
    table = comm.all_gather(torch.tensor([row], dtype=torch.float64))  # (ranks, 4)
    if error is not None:
        raise error
    failed = [r for r in range(comm.world_size) if table[r, 0] > 0]
    if failed:
        raise ValueError(f"a batch was rejected on rank(s) {failed} (see the error there)")
    widths = sorted({int(v) for v in table[:, 2].tolist() if v >= 0})
    if len(widths) > 1:
        raise ValueError(f"batches must have the same number of features on every rank; got "
                         f"{[int(v) for v in table[:, 2].tolist()]} (by rank, -1: no batch)")
    return int(table[:, 1].sum()), (widths[0] if widths else -1), bool(table[:, 3].max() > 0)
