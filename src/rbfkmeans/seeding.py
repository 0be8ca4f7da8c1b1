r"""Starting centroids: the data mean, k-means++, random rows, an array or a callable.

k-means++ (Arthur & Vassilvitskii 2007) draws each new centre with probability proportional to
``w_i D(x_i)^2``, the weighted squared distance to the nearest centre drawn so far; the greedy
variant keeps the best of ``2 + log k`` candidates, the one that lowers the potential
``sum_i w_i D(x_i)^2`` most. Annealing starts from the weighted mean ``mu`` instead: above the
first critical temperature every centroid sits there.

Under ``torch.distributed`` the draws come from a generator that is the same on every rank, as
thresholds on the cumulative potential of the concatenated data, so a distributed run picks the
same points as one process on the concatenated data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._validation import check_positive_int, real_array, tensor_of
from .comm import Comm
from .distances import row_norms_sq
from .errors import NonFiniteError
from .passes import Data, check_data, nearest
from .sparse import dense

__all__ = ["INITS", "initial_centers", "kmeans_plusplus", "weighted_mean"]

#: the names accepted as ``init`` (besides an array and a callable)
INITS = ("mean", "k-means++", "random")


def _draw(
    cum_local: Tensor, u: float, totals: list[float], counts: list[int], comm: Comm
) -> tuple[int, int]:
    """Locate the global threshold ``u`` in the concatenation of the ranks' cumulative sums.

    The point drawn is the first ``i`` of the concatenated data with ``cum[i] >= u`` (as
    ``searchsorted`` in one process): it lives on the first rank with rows whose running total
    reaches ``u`` (the last rank with rows if rounding leaves ``u`` above every total).
    Returns (owner rank, local index on the owner; -1 on the other ranks)."""
    owner, offset, end = -1, 0.0, 0.0
    for r in range(comm.world_size):
        if counts[r] == 0:
            continue
        if owner < 0 or end < u:
            owner, offset = r, end
        end += totals[r]
        if end >= u:
            break
    local = -1
    if owner == comm.rank and cum_local.numel():
        target = torch.tensor([u - offset], dtype=cum_local.dtype, device=cum_local.device)
        local = int(torch.searchsorted(cum_local, target).clamp(max=cum_local.numel() - 1))
    return owner, local


def _potentials(data: Data, cand: Tensor, closest: Tensor, w: Tensor, out: Tensor) -> Tensor:
    """``sum_i w_i min(closest_i, ||x_i - cand_t||^2)`` for each candidate ``t`` (trials,), in
    float64, by one chunked pass; the squared distances go to ``out`` (n, trials), so that the
    chosen candidate's column updates ``closest`` without a second pass over ``X`` (a row of
    ``out`` is ``trials`` numbers where one of ``X`` is ``d``)."""
    pot = torch.zeros(cand.shape[0], dtype=torch.float64, device=data.X.device)
    C_sq = row_norms_sq(cand)
    X_sq = data.X_sq
    for s in data.chunks(cand.shape[0]):
        D = torch.addmm(C_sq.unsqueeze(0), data.X[s], cand.T, alpha=-2.0, out=out[s])  # (b, t)
        D.add_(X_sq[s].unsqueeze(1)).clamp_(min=0.0)
        pot += w[s] @ torch.minimum(D, closest[s].unsqueeze(1)).double()
    return pot


@torch.no_grad()
def kmeans_plusplus(
    data: Data,
    n_clusters: int,
    *,
    generator: torch.Generator | None = None,
    n_local_trials: int | None = None,
) -> Tensor:
    r"""Greedy k-means++ seeding (module docstring): ``n_clusters`` centres (k, d), each the best
    of ``n_local_trials`` (default ``2 + log k``) candidates drawn with probability
    ``w_i D(x_i)^2``. ``n_clusters`` and ``n_local_trials`` are integers from 1 to the number
    of rows (over all ranks; a trial draws a row), else ``ValueError`` naming them."""
    check_data(data)
    k = check_positive_int(n_clusters, "n_clusters")
    trials = 2 + int(math.log(k)) if n_local_trials is None \
        else check_positive_int(n_local_trials, "n_local_trials")
    comm = data.comm
    n, d = data.n, data.d
    counts = comm.counts(n)
    if sum(counts) < k:
        raise ValueError(f"n_samples={sum(counts)} should be >= n_clusters={k}")
    if n_local_trials is not None and trials > sum(counts):
        raise ValueError(f"n_local_trials must be at most the number of rows n_samples="
                         f"{sum(counts)} (each trial draws a row); got {n_local_trials!r}")
    w = torch.ones(n, dtype=torch.float64, device=data.X.device) if data.w is None \
        else data.w.double()
    total = w.sum().reshape(1)
    comm.sum_(total)
    if not float(total) > 0:  # every draw would take row 0: k copies of one row
        raise ValueError("sample_weight must have a positive sum for k-means++'s weighted "
                         f"draws; got a total weight of {float(total)!r}")
    centers = data.X.new_empty((k, d))

    def pick(weights: Tensor, n_draw: int) -> Tensor:
        """Points drawn with probability proportional to ``weights`` (local (n,)), over ranks."""
        cum = weights.cumsum(0)  # (n,)
        if not comm.active:  # one process: every draw located at once, as _draw would
            at = torch.rand(n_draw, generator=generator, dtype=torch.float64) * float(cum[-1])
            idx = torch.searchsorted(cum, at.to(cum.device)).clamp_(max=n - 1)
            return dense(data.X[idx]).clone()
        local_total = float(cum[-1]) if n else 0.0
        totals = comm.all_gather(torch.tensor([local_total], dtype=torch.float64)).tolist()
        grand = math.fsum(totals)
        # the same draws on every rank, whatever its number of rows
        u = torch.rand(n_draw, generator=generator, dtype=torch.float64).tolist()
        out = data.X.new_zeros((n_draw, d))
        for t, ut in enumerate(u):
            _, local = _draw(cum, ut * grand, totals, counts, comm)
            if local >= 0:
                out[t] = data.X[local]
        comm.sum_(out)  # only the owner contributed a non-zero row
        return out

    first = pick(w, 1)
    centers[0] = first[0]
    closest = nearest(data, first).dist  # (n,)
    D = data.X.new_empty((n, trials))  # the candidates' squared distances, reused
    for c in range(1, k):
        cand = pick(w * closest.double(), trials)  # (trials, d)
        pot = _potentials(data, cand, closest, w, D)  # (trials,)
        comm.sum_(pot)
        best = int(pot.argmin())
        centers[c] = cand[best]
        torch.minimum(closest, D[:, best], out=closest)
    return centers


def weighted_mean(data: Data) -> Tensor:
    """``mu = sum_i w_i x_i / sum_i w_i`` (d,) over all ranks. Raises ``ValueError`` when the
    weights (``data``'s ``sample_weight``) sum to zero over all ranks, or there are no rows:
    there is no mean."""
    check_data(data)
    w = torch.ones(data.n, dtype=data.X.dtype, device=data.X.device) if data.w is None \
        else data.w  # (n,)
    tot = w.sum().reshape(1)
    s = w @ data.X  # (d,)
    data.comm.sum_(tot, s)
    if not float(tot) > 0:  # one number, once per fit
        if data.w is None:
            raise ValueError("data has no rows: X must have at least one row for a mean")
        raise ValueError(f"sample_weight must have a positive sum for a weighted mean; got a "
                         f"total weight of {float(tot)!r}")
    return s / tot


@torch.no_grad()
def initial_centers(
    data: Data,
    n_clusters: int,
    init: str | Any | Callable[..., Any],
    *,
    generator: torch.Generator | None = None,
    seed: int = 0,
) -> Tensor:
    """Starting centroids (k, d) in the data's dtype and device.

    ``init`` is ``"mean"`` (every centroid at :func:`weighted_mean`), ``"k-means++"``,
    ``"random"`` (k distinct rows drawn with probability proportional to their weight; one
    process only), an array (k, d), or a callable ``init(X, n_clusters, RandomState(seed))``
    returning one. An array or a callable's result is broadcast from rank 0 (a callable sees only
    this rank's shard). On a cosine ``data`` every start is on the unit sphere: the mean is the
    mean direction ``mu / ||mu||`` of the normalised rows, a callable sees the normalised rows,
    and an array's rows are normalised (a zero row raises). ``seed`` is an integer in
    ``[0, 2**32)``.
    """
    check_data(data)
    k = check_positive_int(n_clusters, "n_clusters")
    seed = check_positive_int(seed, "seed", minimum=0)
    if seed >= 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32); got {seed!r}")
    if isinstance(init, str):
        if init == "mean":
            mu = weighted_mean(data).unsqueeze(0)  # (1, d)
            if data.metric.spherical and not bool(mu.any()):
                raise ValueError("init='mean' with metric='cosine' needs a mean direction; the "
                                 "weighted mean of the normalised rows is 0 (use 'k-means++')")
            return data.project(mu).repeat(k, 1)
        if init == "k-means++":
            return kmeans_plusplus(data, k, generator=generator)
        if init == "random":
            if data.comm.active:
                raise ValueError("init='random' is not supported under torch.distributed; "
                                 "use 'k-means++' or 'mean'")
            p = torch.ones(data.n, dtype=torch.float64) if data.w is None \
                else data.w.double().cpu()
            idx = torch.multinomial(p, k, replacement=False, generator=generator)
            return dense(data.X[idx.to(data.X.device)]).clone()
        raise ValueError(f"init must be one of {', '.join(map(repr, INITS))}, an array or a "
                         f"callable; got {init!r}")
    C0 = real_array(init(data.X.cpu().numpy(), k, np.random.RandomState(seed)),
                    "the array init returned") if callable(init) else real_array(init, "init")
    if C0.shape != (k, data.d):
        raise ValueError(
            f"init array must have shape (n_clusters, n_features) = ({k}, {data.d}); "
            f"got {C0.shape}"
        )
    if not np.issubdtype(C0.dtype, np.number):
        raise ValueError("init array must be finite numbers; got NaN, inf or non-numbers")
    if not np.isfinite(C0).all():
        raise NonFiniteError("init array must be finite numbers; got NaN, inf or non-numbers")
    C = tensor_of(C0).to(device=data.X.device, dtype=data.X.dtype).clone()
    data.comm.broadcast_(C, src=0)
    return data.project(C, name="init")
