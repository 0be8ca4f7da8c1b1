"""The collapse guard of joint training: re-seed clusters that emptied or merged.

After each joint epoch a cluster holding fewer than ``min_cluster_fraction * n / k`` points
(counted by the labels the clusterer reports: the nearest centroid, or the neighbour vote when
the caller passes its ``labels``), or a centroid whose squared distance to another is below
``merge_tol`` times the mean squared distance of the points to their centroid, is re-seeded by
splitting the largest cluster in two along its principal axis: with ``m`` its mean, ``v`` its
first principal direction and ``s^2`` the variance along it, the two centroids go to ``m + s v``
and ``m - s v``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._validation import check_dense, check_finite, check_real
from ..layer import KMeansLayer
from .losses import _floating

__all__ = ["collapse_guard"]


@torch.no_grad()
def collapse_guard(
    layer: KMeansLayer,
    Z: Tensor,
    min_cluster_fraction: float = 0.1,
    merge_tol: float = 0.05,
    opt: torch.optim.Optimizer | None = None,
    labels: Tensor | None = None,
) -> list[int]:
    """Re-seed the clusters of ``layer`` that are (nearly) empty or merged with another on the
    embeddings ``Z`` (n, p) (module docstring), in place; returns their indices. Clusters are
    counted by ``labels`` (n,) when given (the labels the caller reports, e.g. a neighbour vote),
    else by nearest centroid; the donor of each split is the largest cluster by nearest centroid.
    Adam's moments (``opt``, optional) of both rows of each split are reset. ``Z`` is a dense
    floating-point tensor (float16/bfloat16 computed in float32; ``TypeError`` naming ``Z`` for
    integers)."""
    if not isinstance(layer, KMeansLayer):
        raise TypeError(f"layer must be a KMeansLayer; got {type(layer).__name__}")
    if not 0.0 <= check_real(min_cluster_fraction, "min_cluster_fraction") < 1.0:
        raise ValueError(f"min_cluster_fraction must be a number in [0, 1); got "
                         f"{min_cluster_fraction!r}")
    merge_tol = check_real(merge_tol, "merge_tol", minimum=0.0)
    C = layer.centroids
    Z = _floating(check_dense(Z, "Z"), "Z")
    if Z.ndim != 2 or Z.shape[1] != C.shape[1]:
        raise ValueError(f"Z must be (n, {C.shape[1]}) to match the layer's centroids; got "
                         f"{tuple(Z.shape)}")
    check_finite(Z, "Z")  # once per epoch, on the embeddings: one sum
    n, k = Z.shape[0], C.shape[0]
    if labels is not None and not isinstance(labels, Tensor):
        raise TypeError(f"labels must be a torch.Tensor or None; got {type(labels).__name__}")
    D = layer.distances(Z)  # (n, k)
    nearest = D.argmin(dim=1)
    if labels is None:
        labels = nearest
    elif labels.shape != (n,) or labels.dtype not in (torch.int32, torch.int64) or (
        n > 0 and not 0 <= int(labels.min()) <= int(labels.max()) < k
    ):
        raise ValueError(f"labels must be ({n},) integers in [0, {k}), one per row of Z "
                         f"(shape {tuple(Z.shape)}) and centroid of the layer; got shape "
                         f"{tuple(labels.shape)}, dtype {labels.dtype}")
    counts = torch.bincount(labels, minlength=k)
    min_size = max(1, math.ceil(min_cluster_fraction * n / k))
    flagged = [j for j in range(k) if int(counts[j]) < min_size]
    if merge_tol > 0:
        spread = D.gather(1, nearest[:, None]).mean()
        Dc = torch.cdist(C, C).square()  # (k, k)
        for a in range(k):
            for b in range(a + 1, k):
                if float(Dc[a, b]) < merge_tol * float(spread) and not (
                    a in flagged or b in flagged
                ):
                    flagged.append(b if counts[b] <= counts[a] else a)
    for j in flagged:
        nearest = layer.distances(Z).argmin(dim=1)
        counts = torch.bincount(nearest, minlength=k)
        counts[j] = -1
        donor = int(counts.argmax())
        members = Z[nearest == donor]  # (m, p)
        mean = members.mean(dim=0)
        if members.shape[0] > 1:
            centred = members - mean
            _, S, Vh = torch.linalg.svd(centred, full_matrices=False)
            step = Vh[0] * (S[0] / math.sqrt(members.shape[0]))
        else:
            step = torch.full_like(mean, 1e-3)
        C[j] = mean + step
        C[donor] = mean - step
        if opt is not None:
            state = opt.state.get(C, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][[j, donor]] = 0.0
    return flagged
