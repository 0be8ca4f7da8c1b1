r"""Empty clusters: where a centroid that lost all its weight goes, and the updates that move it.

After a hard pass (:func:`hard_update`, the update of :func:`rbfkmeans.lloyd.lloyd`) an empty
cluster is relocated as scikit-learn does (``KMeans(algorithm="lloyd")``): it takes the point
farthest from its own (old) centroid,

.. math::

    i^* = \operatorname{argmax}_{i : w_i > 0} \lVert x_i - c_{a_i} \rVert^2, \qquad
    c_j \leftarrow x_{i^*}, \quad S_{a_{i^*}} \leftarrow S_{a_{i^*}} - w_{i^*} x_{i^*},

and that point leaves its old cluster's mean (so from the same start the two give the same
centroids). Only points that weigh something are taken: a centroid on a point of weight 0 stays
empty. The soft solvers and the mini-batch step, whose memberships have no single owner, move an
empty centroid to the point of positive weight farthest from the other centroids
(:func:`relocate_empty`; in the soft update :func:`mean_update` a cluster of weight
``N_j <= 1e-12 sum_l N_l`` counts as empty). Over several processes the farthest points are
taken over all ranks. On a cosine :class:`~rbfkmeans.passes.Data` every update is projected
back onto the unit sphere.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ._validation import check_positive_int, check_vector
from .passes import Data, check_data, nearest
from .sparse import dense
from .stats import Stats

__all__ = ["farthest_points", "hard_update", "mean_update", "relocate_empty"]


def _top_over_ranks(data: Data, score: Tensor, m: int, *extra: Tensor) -> tuple[Tensor, ...]:
    """The rows with the ``m`` largest ``score`` over all ranks (largest first), never one
    scored ``-inf``: the scores and the matching rows of ``X`` and of each ``extra`` (n, ...)
    tensor. Fewer when there are fewer such rows in all."""
    top = score.topk(min(m, score.numel())).indices
    top = top[score[top] > -math.inf]
    picked = [score[top], dense(data.X[top]), *(t[top] for t in extra)]
    comm = data.comm
    if not comm.active:
        return tuple(picked)
    pad = m - picked[0].numel()  # every rank sends m rows; padding scores -inf
    if pad:
        picked[0] = torch.cat([picked[0], picked[0].new_full((pad,), -math.inf)])
        picked[1:] = [torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) for t in picked[1:]]
    gathered = [comm.all_gather(t) for t in picked]
    top = gathered[0].topk(m).indices
    top = top[gathered[0][top] > -math.inf]  # fewer than m rows in all: drop the padding
    return tuple(t[top] for t in gathered)


@torch.no_grad()
def farthest_points(data: Data, C: Tensor, m: int) -> Tensor:
    """The ``m`` points (m, d) of positive weight farthest from their nearest centroid of
    ``C``, over all ranks, farthest first (fewer when the data holds fewer such rows: a
    centroid moved onto a point of weight 0 would stay empty)."""
    m = check_positive_int(m, "m")
    dist = nearest(check_data(data), C).dist
    if data.w is not None:
        dist = dist.masked_fill(data.w <= 0, -math.inf)
    return _top_over_ranks(data, dist, m)[1]


@torch.no_grad()
def relocate_empty(data: Data, C_new: Tensor, empty: Tensor) -> Tensor:
    """Move the centroids flagged in ``empty`` (k,) bool to the points farthest from the other
    centroids of ``C_new``; returns new centroids (never NaN; the input is not modified)."""
    C_new = check_data(data).check_centroids(C_new, "C_new")
    check_vector(empty, "empty", C_new.shape[0])
    if empty.dtype != torch.bool:
        raise TypeError(f"empty must be a bool tensor; got {empty.dtype}")
    idx = empty.nonzero().squeeze(1)
    if idx.numel() == 0:
        return C_new
    keep = ~empty
    C_out = C_new.clone()
    if bool(keep.any()):
        far = farthest_points(data, C_new[keep], int(idx.numel()))
        C_out[idx[: far.shape[0]]] = far
    return C_out


def _check_stats(st: Any, k: int) -> None:
    """Raise unless ``st`` is the :class:`~rbfkmeans.stats.Stats` of a pass with ``k``
    centroids."""
    if not isinstance(st, Stats) or st.N.shape != (k,):
        raise TypeError(f"st must be the Stats of a pass over data with {k} centroids; got "
                        f"{type(st).__name__}")


def _empty_tol(N_total: float) -> float:
    """Weight below which a soft cluster counts as empty."""
    return 0.0 if N_total == 0 else 1e-12 * N_total


def mean_update(data: Data, C: Tensor, st: Stats) -> tuple[Tensor, int]:
    """The soft-Lloyd update ``c_j <- S_j / N_j`` from a pass's statistics; clusters with
    ``N_j <= 1e-12 sum_j N_j`` are relocated by :func:`relocate_empty`. Returns
    ``(C_new, number relocated)``."""
    C = check_data(data).check_centroids(C)
    _check_stats(st, C.shape[0])
    empty = _empty_tol(float(st.N.sum())) >= st.N
    C_new = st.S / st.N.clamp(min=torch.finfo(st.N.dtype).tiny).unsqueeze(1)
    C_new = data.project(torch.where(empty.unsqueeze(1), C, C_new), C)  # cosine: m_j / ||m_j||
    n_empty = int(empty.sum())
    if n_empty:
        C_new = relocate_empty(data, C_new, empty)
    return C_new, n_empty


def hard_update(data: Data, C: Tensor, st: Stats) -> tuple[Tensor, int]:
    """``c_j <- S_j / N_j`` after a hard pass at ``C`` (``st``, with its labels), empty clusters
    relocated as scikit-learn does: the ``m`` points farthest from their own centroid (farthest
    first) become the ``m`` empty centroids and leave the sums of the clusters they came from.
    Only points that weigh something are taken (one of weight 0 would leave its cluster as
    empty as before, and the run would relocate it at every iteration); with fewer such points,
    fewer clusters move. Returns ``(C_new, number of empty clusters)``."""
    C = check_data(data).check_centroids(C)
    _check_stats(st, C.shape[0])
    if st.labels is None or st.labels.shape != (data.n,):
        raise TypeError(f"st must hold the labels of the {data.n} local rows (a hard pass "
                        "with return_labels=True)")
    N, S = st.N.clone(), st.S.clone()
    empty = (N == 0).nonzero().squeeze(1)
    m = int(empty.numel())
    if m:
        own = torch.empty(data.n, dtype=data.X.dtype, device=data.X.device)  # (n,)
        for s in data.chunks(data.d):  # squared distance of each point to its own centroid
            own[s] = (data.X[s] - C[st.labels[s]]).square_().sum(dim=1)
        w = data.w if data.w is not None else torch.ones_like(own)
        own = own.masked_fill_(w <= 0, -math.inf)  # never picked
        _, far_x, far_lab, far_w = _top_over_ranks(data, own, m, st.labels, w)
        for j, x, a, wx in zip(empty.tolist(), far_x, far_lab.tolist(), far_w, strict=False):
            S[a] -= wx * x
            N[a] -= wx
            S[j] = wx * x
            N[j] = wx
    C_new = torch.where((N > 0).unsqueeze(1), S / N.clamp(min=torch.finfo(N.dtype).tiny)
                        .unsqueeze(1), C)
    if m:  # a relocated centroid sits on its point
        C_new[empty[: far_x.shape[0]]] = far_x
    return data.project(C_new, C), m  # cosine: the spherical update m_j / ||m_j||
