r"""Hartigan's single-point moves: the polish after Lloyd's.

Moving a row ``x`` of weight ``w`` from its cluster ``a`` to another cluster ``b``, both means
updated at once, changes ``J`` by

.. math::

    \Delta J = w \frac{N_b}{N_b + w} \lVert x - c_b \rVert^2
             - w \frac{N_a}{N_a - w} \lVert x - c_a \rVert^2

(Hartigan & Wong 1979). A Lloyd fixed point can still have moves with ``Delta J < 0`` (rows near
a boundary, leaving a small cluster), and every partition without one is a Lloyd fixed point
(``N_a / (N_a - w) > 1 > N_b / (N_b + w)``, so each row is nearest its own mean): the polish
only ever lands on Lloyd fixed points, often lower ones (Telgarsky & Vattani 2010).

The moves are applied in batches, not one row at a time: each pass scores every row against
every centroid (one chunked pass, as Lloyd's), takes the rows whose best move has
``Delta J < 0`` and evaluates the change of ``J`` of moving all of them at once *exactly*, from
the moments of the moved rows about the current means (for each cluster ``j``: the weight
``dN_j``, the sum ``dS_j`` and the square sum ``dQ_j`` of ``x - c_j`` over the rows coming in,
minus those going out, in float64):

.. math::

    J' - J = \sum_j \Big(dQ_j - \frac{\lVert dS_j \rVert^2}{N_j + dN_j}\Big),

valid because each ``c_j`` is the mean of its cluster. The batch is kept when that is negative;
otherwise its better half (by single-move gain) is tried, down to one move, which always pays.
So ``J`` falls at every pass, and the polish stops at the first pass without a paying move (a
Hartigan fixed point) or after ``max_passes``. Under ``torch.distributed`` each rank scores its
rows, the candidates are ranked over all ranks (ties in the order of the concatenated shards)
and the moments summed, so every rank takes the steps one process takes on the concatenated
data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from . import kernels
from ._validation import check_positive_int
from .passes import Data, check_data

__all__ = ["ROUNDING", "HartiganResult", "hartigan", "holds_weight"]

#: a batch pays only if ``J`` falls by more than this fraction of the moved rows' squared
#: distances to their two means: smaller changes are rounding (and would let rows move back and
#: forth for ever)
ROUNDING = 1e-12


@dataclass
class HartiganResult:
    """The means reached (float64), the labels, the passes run, the moves made, and whether it
    stopped at a Hartigan fixed point (no paying move left)."""

    C: Tensor
    labels: Tensor
    n_passes: int
    n_moves: int
    converged: bool


def _means(data: Data, labels: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``N`` (k,) and the means (k, d) of the clusters of ``labels``, float64 (chunked: never a
    copy of ``X``)."""
    dev = data.X.device
    N = torch.zeros(k, dtype=torch.float64, device=dev)
    S = torch.zeros(k, data.d, dtype=torch.float64, device=dev)
    for s in data.chunks(data.d):
        Xc, a = data.X[s].to(torch.float64), labels[s]
        if data.w is None:
            N.index_add_(0, a, torch.ones(a.numel(), dtype=torch.float64, device=dev))
            S.index_add_(0, a, Xc)
        else:
            w = data.w[s].to(torch.float64)
            N.index_add_(0, a, w)
            S.index_add_(0, a, Xc * w.unsqueeze(1))
    data.comm.sum_(N, S)
    return N, S / N.clamp(min=torch.finfo(torch.float64).tiny).unsqueeze(1)


def holds_weight(data: Data, labels: Tensor, k: int) -> bool:
    """Whether every one of the ``k`` clusters of ``labels`` holds weight (over all ranks): the
    partitions :func:`hartigan` starts from (fewer distinct points than ``k`` leave some
    empty)."""
    return bool((_means(data, labels, k)[0] > 0).all())


def _candidates(data: Data, C: Tensor, N: Tensor, labels: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
    """This rank's rows whose best single move pays (``Delta J < 0`` by the module's formula, in
    the data's dtype), in row order, their target clusters and their gains ``-Delta J``."""
    k = C.shape[0]
    if kernels.usable(data.X, k):  # few features on the CPU: one compiled sweep
        gain, target = kernels.hartigan_pass(data.X, C, N, labels, data.w)
        moving = torch.nonzero(target >= 0).flatten()
        return moving, target[moving], gain[moving]
    Cd = C.to(data.X.dtype)
    C_sq = (Cd * Cd).sum(1)
    N_d = N.to(data.X.dtype)
    rows: list[Tensor] = []
    targets: list[Tensor] = []
    gains: list[Tensor] = []
    for s in data.chunks(k):
        Xc = data.X[s]
        D = torch.addmm(C_sq, Xc, Cd.T, alpha=-2.0).add_(data.X_sq[s].unsqueeze(1))
        D.clamp_(min=0.0)  # (m, k) squared distances
        a = labels[s]
        d_a = D.gather(1, a[:, None])[:, 0]
        Na = N_d[a]
        if data.w is None:  # w = 1: the join factors are a (k,) vector
            movable = Na > 1
            leave = Na / (Na - 1).clamp(min=1) * d_a
            D.mul_(N_d / (N_d + 1))
        else:
            w = data.w[s].to(Xc.dtype)
            movable = Na > w
            leave = w * Na / (Na - w).clamp(min=torch.finfo(Xc.dtype).tiny) * d_a
            D.mul_(w.unsqueeze(1) * N_d / (N_d + w.unsqueeze(1)))
        D.scatter_(1, a[:, None], torch.inf)
        best, b = D.min(dim=1)
        gain = torch.where(movable, leave - best, -torch.inf)  # a cluster never empties
        pick = torch.nonzero(gain > 0).flatten()
        rows.append(pick + s.start)
        targets.append(b[pick])
        gains.append(gain[pick].to(torch.float64))
    return torch.cat(rows), torch.cat(targets), torch.cat(gains)


def _ranked(data: Data, gain: Tensor) -> Tensor:
    """For this rank's candidates (gains in row order): their places in the order of all ranks'
    candidates, best gain first, ties in row order over the concatenated shards (the order one
    process has on the concatenated data)."""
    comm = data.comm
    counts = comm.counts(int(gain.numel()))
    most = max(counts)
    padded = torch.cat([gain, gain.new_full((most - gain.numel(),), -math.inf)])
    every = comm.all_gather(padded).view(len(counts), most)  # (ranks, most)
    real = torch.cat([every[r, :c] for r, c in enumerate(counts)])  # shard order
    order = torch.argsort(real, descending=True, stable=True)
    place = torch.empty_like(order)
    place[order] = torch.arange(order.numel(), device=order.device)
    start = sum(counts[: comm.rank]) if comm.active else 0
    return place[start:start + gain.numel()]


def _batch_change(data: Data, C: Tensor, N: Tensor, rows: Tensor, source: Tensor,
                  target: Tensor) -> tuple[float, Tensor, Tensor]:
    """The exact change of ``J`` when ``rows`` (this rank's; the others' move too) go from
    ``source`` to ``target`` together, with the new ``N`` and means (module docstring);
    ``+inf`` if a cluster would empty."""
    k = C.shape[0]
    x = data.X[rows].to(torch.float64)
    w = torch.ones(rows.numel(), dtype=torch.float64, device=x.device) if data.w is None \
        else data.w[rows].to(torch.float64)
    y_out, y_in = x - C[source], x - C[target]
    dN = torch.zeros(k, dtype=torch.float64, device=x.device)
    dN.index_add_(0, target, w).index_add_(0, source, -w)
    dS = torch.zeros_like(C).index_add_(0, target, w.unsqueeze(1) * y_in)
    dS.index_add_(0, source, -w.unsqueeze(1) * y_out)
    dQ = torch.zeros(k, dtype=torch.float64, device=x.device)
    dQ.index_add_(0, target, w * (y_in * y_in).sum(1)).index_add_(0, source,
                                                                  -w * (y_out * y_out).sum(1))
    data.comm.sum_(dN, dS, dQ)
    N_new = N + dN
    touched = dN != 0
    if bool((N_new[touched] <= 1e-12 * N.sum()).any()):
        return float("inf"), N, C
    change = float((dQ - (dS * dS).sum(1) / N_new.clamp(min=1e-300)).sum())
    # a change within rounding of the moved rows' own terms is no change (moves back and forth)
    size = data.comm.sum_scalars(float((w * ((y_in * y_in).sum(1) + (y_out * y_out).sum(1)))
                                       .sum()))[0]
    if abs(change) <= ROUNDING * size:
        change = 0.0
    return change, N_new, C + dS / N_new.clamp(min=1e-300).unsqueeze(1)


def hartigan(data: Data, labels: Tensor, k: int, *, max_passes: int = 100) -> HartiganResult:
    """Hartigan's moves from the partition ``labels`` (n,) of ``data`` into ``k`` non-empty
    clusters (this rank's rows under ``torch.distributed``), in batches (module docstring), for
    at most ``max_passes`` passes."""
    data = check_data(data)
    k = check_positive_int(k, "k")
    max_passes = check_positive_int(max_passes, "max_passes")
    if not isinstance(labels, Tensor) or labels.shape != (data.n,) or labels.dtype != torch.long:
        raise ValueError(f"labels must be an int64 tensor of shape ({data.n},); got "
                         f"{getattr(labels, 'dtype', type(labels).__name__)} "
                         f"{tuple(getattr(labels, 'shape', ()))}")
    labels = labels.to(data.X.device).clone()
    if data.n and (int(labels.min()) < 0 or int(labels.max()) >= k):  # this rank's rows
        raise ValueError(f"labels must lie in [0, {k}); got [{int(labels.min())}, "
                         f"{int(labels.max())}]")
    N, C = _means(data, labels, k)
    if bool((N <= 0).any()):
        raise ValueError(f"every cluster of labels must hold weight; clusters "
                         f"{torch.nonzero(N <= 0).flatten().tolist()} are empty")
    moves = passes = 0
    converged = False
    while passes < max_passes:
        passes += 1
        rows, target, gain = _candidates(data, C, N, labels)
        place = _ranked(data, gain)  # this rank's candidates among all, best first
        m = int(data.comm.sum_scalars(float(rows.numel()))[0])
        accepted = False
        while m >= 1:
            mine = place < m
            change, N_new, C_new = _batch_change(data, C, N, rows[mine], labels[rows[mine]],
                                                 target[mine])
            if change < 0.0:
                labels[rows[mine]] = target[mine]
                N, C = N_new, C_new
                moves += m
                accepted = True
                break
            m //= 2
        if not accepted:
            converged = True
            break
        N, C = _means(data, labels, k)  # fresh means: no drift from the updates
    return HartiganResult(C, labels, passes, moves, converged)
