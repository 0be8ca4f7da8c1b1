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
A kept batch's means ``c_j + dS_j / (N_j + dN_j)`` serve the next pass (recomputed from all the
rows every ``REFRESH`` passes and at the end).
So ``J`` falls at every pass, and the polish stops at the first pass without a paying move (a
Hartigan fixed point) or after ``max_passes``. Under ``torch.distributed`` each rank scores its
rows, the candidates are ranked over all ranks (ties in the order of the concatenated shards)
and the moments summed, so every rank takes the steps one process takes on the concatenated
data.

Passes after the first score only the rows whose move may pay (Hamerly's bounds, 2010, carried
over to the move's factors): each row keeps an upper bound ``u_i >= ||x_i - c_a||``, the
nearest other cluster ``b_1`` when it was scored with a lower bound ``l_1 <= ||x_i - c_{b_1}||``,
and a lower bound ``l_2`` on its distances to all the others, set when it is scored and loosened
by how far the means move (``u_i`` grows by its own mean's shift, ``l_1`` shrinks by ``c_{b_1}``'s,
``l_2`` by the largest other shift). Since ``N_b / (N_b + w)`` grows with ``N_b``, no move of row
``i`` pays while

.. math::

    \frac{N_a}{N_a - w_i} u_i^2 \le \min\Big(\frac{N_{b_1}}{N_{b_1} + w_i} l_1^2,\;
        \frac{N_{min}}{N_{min} + w_i} l_2^2\Big),

and such a row is not scored. The first pass scores every row, unless the polish starts from the
Lloyd run that ended at its partition (``start``) and takes up that run's distance bounds: an
upper bound on the own distance and a lower bound on all the others, as ``u_i`` and ``l_1 = l_2``.
The rows scored are the ones the full pass would find moves among,
so the passes take the same steps (tests check it); this serves the chunked torch scoring (GPU,
sparse rows) and the compiled sweeps on the CPU (of few features from differences, where
``k d >= NARROW_BOUNDS_MIN_WORK``: on 200,000 rows of 2 features with k = 500 a pass scored
every row in 97 ms; of wide rows from BLAS
products of the rows left: on 70,000 x 64 rows with k = 1,024 a pass took 80 ms against the
torch pass's 110-190 ms).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import kernels, search_kernels
from ._validation import check_nonnegative, check_positive_int
from .lloyd import LloydResult, distance_bounds
from .passes import Data, check_data

__all__ = ["NARROW_BOUNDS_MIN_WORK", "REFRESH", "ROUNDING", "HartiganResult", "hartigan",
           "holds_weight"]

#: the means are updated from each batch's moments (float64) and recomputed from all the rows
#: every this many passes and at the end (a recomputation costs about a Lloyd pass on wide data)
REFRESH = 16

#: a batch pays only if ``J`` falls by more than this fraction of the moved rows' squared
#: distances to their two means: smaller changes are rounding (and would let rows move back and
#: forth for ever)
ROUNDING = 1e-12
#: :meth:`_Bounds.active` decides this many rows at a time (its temporaries, some 50 bytes a
#: row, then stay a few MB on millions of rows)
ACTIVE_ROWS = 1 << 16
#: the compiled sweep of few features scores every row where ``k d`` is below this: there the
#: bounds' bookkeeping (a few torch passes over the rows) costs more than the scores it saves
#: (100,000 rows of 16 features: k = 2 0.49 s against 0.54 s bounded; k = 16 4.1 s against 2.6 s)
NARROW_BOUNDS_MIN_WORK = 64


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


def _singletons_exact(data: Data, N: Tensor, labels: Tensor) -> Tensor:
    """``N`` with the weight of each cluster of one row set to that row's weight. Carried as
    ``N + dN``, weighted sums drift by rounding: a cluster of one row of weight ``w`` could read
    ``N_a > w`` and offer a move that empties it, with a gain of ``w N_a / (N_a - w)`` times a
    rounding-size distance (huge), which ranks first and stalls every batch."""
    if data.w is None:  # sums of ones: exact
        return N
    k = N.shape[0]
    count = torch.zeros(k, dtype=torch.float64, device=N.device)
    fresh = torch.zeros(k, dtype=torch.float64, device=N.device)
    count.index_add_(0, labels, torch.ones(labels.numel(), dtype=torch.float64,
                                           device=N.device))
    fresh.index_add_(0, labels, data.w.to(torch.float64))
    data.comm.sum_(count, fresh)
    return torch.where(count == 1, fresh, N)


def holds_weight(data: Data, labels: Tensor, k: int) -> bool:
    """Whether every one of the ``k`` clusters of ``labels`` holds weight (over all ranks): the
    partitions :func:`hartigan` starts from (fewer distinct points than ``k`` leave some
    empty). ``labels`` is an int64 tensor (n,) of cluster indices in ``[0, k)``, ``k >= 1``,
    else ``ValueError`` naming them (one ``aminmax`` of the labels, as cheap as the sum that
    reads them anyway: this is called once per round of moves, not per pass). ``k`` is at most
    the number of rows (over all ranks), else ``ValueError`` naming it."""
    data = check_data(data)
    k = _check_k(data, k)
    if not isinstance(labels, Tensor) or labels.shape != (data.n,) or labels.dtype != torch.long:
        raise ValueError(f"labels must be an int64 tensor of shape ({data.n},); got "
                         f"{getattr(labels, 'dtype', type(labels).__name__)} "
                         f"{tuple(getattr(labels, 'shape', ()))}")
    if data.n:
        lo, hi = (int(v) for v in torch.aminmax(labels))
        if lo < 0 or hi >= k:
            raise ValueError(f"labels must be cluster indices in [0, {k}) (k={k}); got "
                             f"{lo if lo < 0 else hi}")
    N = torch.zeros(k, dtype=torch.float64, device=labels.device)
    w = torch.ones(data.n, dtype=torch.float64, device=labels.device) if data.w is None \
        else data.w.to(torch.float64)
    N.index_add_(0, labels, w)
    data.comm.sum_(N)
    return bool((N > 0).all())


def _check_k(data: Data, k: Any) -> int:
    """``k`` if it is an integer from 1 to the number of rows of ``data`` over all ranks (no
    more clusters than rows can all hold weight), else raise naming ``k``."""
    k = check_positive_int(k, "k")
    n_total = sum(data.comm.counts(data.n))
    if k > n_total:
        raise ValueError(f"k must be at most the number of rows n_samples={n_total} (every "
                         f"cluster holds a row); got {k!r}")
    return k


def _candidates(data: Data, C: Tensor, N: Tensor, labels: Tensor,
                bounds: _Bounds | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """This rank's rows whose best single move pays (``Delta J < 0`` by the module's formula, in
    the data's dtype), in row order, their target clusters and their gains ``-Delta J``. With
    ``bounds``, only the rows they do not rule out are scored, and their bounds are reset."""
    k = C.shape[0]
    active = None if bounds is None else bounds.active(N, labels, data.w)
    if kernels.usable(data.X, k, scores=True):  # on the CPU: a compiled sweep of the rows
        # the bounds leave, from differences (few features) or BLAS products (wide rows)
        idx = torch.arange(data.n) if active is None else active
        narrow = kernels.usable(data.X, k)
        sweep = search_kernels.hartigan_pass if narrow else search_kernels.hartigan_rows
        gain, target, own, near, first, second = sweep(data.X, C, N, labels, data.w, idx)
        if bounds is not None:  # the products' rounding, or the differences' (d + 2 terms)
            eps = torch.finfo(torch.float64).eps * (data.d + 2) if narrow else \
                torch.finfo(data.X.dtype).eps
            bounds.reset_nearest(idx, own, near, first, second, data.X_sq[idx],
                                 (C * C).sum(1), eps)
        moving = torch.nonzero(target >= 0).flatten()
        return idx[moving], target[moving], gain[moving]
    Cd = C.to(data.X.dtype)
    C_sq = (Cd * Cd).sum(1)
    N_d = N.to(data.X.dtype)
    rows: list[Tensor] = []
    targets: list[Tensor] = []
    gains: list[Tensor] = []
    pieces: Iterable[slice | Tensor] = data.chunks(k) if active is None else \
        active.split(data.rows(k))
    for s in pieces:  # row slices, or index vectors of the rows the bounds leave
        Xc = data.X[s]
        D = torch.addmm(C_sq, Xc, Cd.T, alpha=-2.0).add_(data.X_sq[s].unsqueeze(1))
        D.clamp_(min=0.0)  # (m, k) squared distances
        a = labels[s]
        d_a = D.gather(1, a[:, None])[:, 0]
        Na = N_d[a]
        D.scatter_(1, a[:, None], torch.inf)
        if bounds is not None:
            bounds.reset(s, d_a, D, data.X_sq[s], C_sq)
        if data.w is None:  # w = 1: the join factors are a (k,) vector
            movable = Na > 1
            leave = Na / (Na - 1).clamp(min=1) * d_a
            D.mul_(N_d / (N_d + 1))
        else:
            w = data.w[s].to(Xc.dtype)
            movable = Na > w
            leave = w * Na / (Na - w).clamp(min=torch.finfo(Xc.dtype).tiny) * d_a
            D.mul_(w.unsqueeze(1) * N_d / (N_d + w.unsqueeze(1)))
        best, b = D.min(dim=1)
        gain = torch.where(movable, leave - best, -torch.inf)  # a cluster never empties
        pick = torch.nonzero(gain > 0).flatten()
        rows.append(pick + s.start if isinstance(s, slice) else s[pick])
        targets.append(b[pick])
        gains.append(gain[pick].to(torch.float64))
    if not rows:  # the bounds left no row
        empty = torch.zeros(0, dtype=torch.long, device=data.X.device)
        return empty, empty, torch.zeros(0, dtype=torch.float64, device=data.X.device)
    return torch.cat(rows), torch.cat(targets), torch.cat(gains)


class _Bounds:
    """Per row ``u_i >= ||x_i - c_a||``, the nearest other cluster ``b1_i`` at the last scoring
    with ``l1_i <= ||x_i - c_b1||``, and ``l2_i <= min_{b != a, b1} ||x_i - c_b||`` (float64;
    the module docstring), for this rank's rows."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.upper = torch.full((n,), math.inf, dtype=torch.float64, device=device)
        self.lower1 = torch.zeros(n, dtype=torch.float64, device=device)
        self.lower2 = torch.zeros(n, dtype=torch.float64, device=device)
        self.near = torch.zeros(n, dtype=torch.long, device=device)
        self.first = True

    def active(self, N: Tensor, labels: Tensor, w: Tensor | None) -> Tensor | None:
        """The rows (ascending) whose move the bounds do not rule out; None for all (the
        first pass)."""
        if self.first:
            self.first = False
            return None
        n_min = N.min()
        found = []
        for start in range(0, labels.shape[0], ACTIVE_ROWS):  # temporaries of a chunk only
            s = slice(start, start + ACTIVE_ROWS)
            Na = N[labels[s]]
            wi = torch.ones_like(Na) if w is None else w[s].to(torch.float64)
            leave = Na / (Na - wi).clamp(min=torch.finfo(torch.float64).tiny)
            Nb = N[self.near[s]]
            join = torch.minimum(Nb / (Nb + wi) * self.lower1[s].clamp(min=0.0).square(),
                                 n_min / (n_min + wi) * self.lower2[s].clamp(min=0.0).square())
            may = (leave * self.upper[s].square() > join) & (Na > wi)
            found.append(torch.nonzero(may).flatten() + start)
        return torch.cat(found) if found else torch.zeros(0, dtype=torch.long,
                                                          device=labels.device)

    def take_up(self, upper: Tensor, lower: Tensor, C_at: Tensor, C: Tensor,
                labels: Tensor) -> None:
        """Start from a Lloyd run's bounds (:func:`rbfkmeans.lloyd.distance_bounds`) on the
        distances to its centroids ``C_at``, ``labels`` theirs, for the means ``C``: ``u_i`` grows
        by its own mean's distance from ``C_at``, the lower bound on every other distance
        shrinks by the largest such distance and serves as ``l_1`` and ``l_2`` (``b_1`` any
        other cluster); the next pass is then a bounded one."""
        shift = (C - C_at.to(C.dtype)).norm(dim=1).mul_(1.0 + 1e-12)  # (k,)
        self.upper = upper.to(torch.float64) + shift[labels]
        self.lower2 = (lower.to(torch.float64) - float(shift.max())).clamp(min=0.0)
        self.lower1 = self.lower2.clone()
        self.near = (labels + 1) % C.shape[0]
        self.first = False

    def reset(self, rows: slice | Tensor, d_a: Tensor, D_other: Tensor, X_sq: Tensor,
              C_sq: Tensor) -> None:
        """The bounds of ``rows`` from their squared distances to their own mean (``d_a``) and
        to the others (``D_other``, ``inf`` at their own), widened by the expansion's rounding
        (a few ulps of ``||x||^2 + max ||c||^2``)."""
        two, at = D_other.topk(2, dim=1, largest=False)  # k >= 2: the second may be inf
        self.reset_nearest(rows, d_a, at[:, 0], two[:, 0], two[:, 1], X_sq, C_sq,
                           torch.finfo(d_a.dtype).eps)

    def reset_nearest(self, rows: slice | Tensor, d_a: Tensor, near: Tensor, first: Tensor,
                      second: Tensor, X_sq: Tensor, C_sq: Tensor, eps: float) -> None:
        """:meth:`reset` from the squared distances to the own mean, to the nearest other
        (``near``) and to the next, computed from products with unit roundoff ``eps``."""
        slack = (X_sq.to(torch.float64) + float(C_sq.max())) * (8 * eps)
        self.upper[rows] = (d_a.to(torch.float64) + slack).sqrt()
        self.near[rows] = near
        self.lower1[rows] = (first.to(torch.float64) - slack).clamp(min=0.0).sqrt()
        self.lower2[rows] = (second.to(torch.float64) - slack).clamp(min=0.0).sqrt()

    def moved(self, rows: Tensor, shift: Tensor, labels: Tensor) -> None:
        """After ``rows`` changed cluster and each mean moved by ``shift`` (k,): the moved rows
        must be scored again, the others' bounds loosen by the shifts of the means they bound."""
        self.upper[rows] = math.inf
        self.upper += shift[labels]
        self.lower1 -= shift[self.near]
        top, at = shift.topk(2)
        self.lower2 -= torch.where(labels == at[0], top[1], top[0])  # largest other shift


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


def hartigan(data: Data, labels: Tensor, k: int, *, max_passes: int = 100,
             min_gain: float = 0.0, start: LloydResult | None = None) -> HartiganResult:
    """Hartigan's moves from the partition ``labels`` (n,) of ``data`` into ``k`` non-empty
    clusters (this rank's rows under ``torch.distributed``), in batches (module docstring), for
    at most ``max_passes`` passes. ``min_gain``: a batch is kept only if it lowers ``J`` by more
    than this (absolute); the first pass without one ends the polish (``converged``: no move
    pays more than that). 0 keeps every paying batch: a Hartigan fixed point.

    ``start``: the Lloyd run (:func:`rbfkmeans.lloyd.lloyd` on ``data``) that ended at
    ``labels``. Where it kept distance bounds (:func:`rbfkmeans.lloyd.distance_bounds`), the
    first pass takes them up, moved by how far each mean lies from the run's centroid, and
    scores only the rows they leave in doubt, as the later passes do."""
    data = check_data(data)
    k = _check_k(data, k)
    max_passes = check_positive_int(max_passes, "max_passes")
    min_gain = check_nonnegative(min_gain, "min_gain")
    if not isinstance(labels, Tensor) or labels.shape != (data.n,) or labels.dtype != torch.long:
        raise ValueError(f"labels must be an int64 tensor of shape ({data.n},); got "
                         f"{getattr(labels, 'dtype', type(labels).__name__)} "
                         f"{tuple(getattr(labels, 'shape', ()))}")
    if start is not None and not (isinstance(start, LloydResult)
                                  and start.labels.shape == labels.shape
                                  and start.C.shape == (k, data.d)
                                  and torch.equal(start.labels, labels.to(start.labels.device))):
        raise ValueError("start must be the LloydResult whose labels are labels, with k = "
                         f"{k} centroids; got {type(start).__name__}")
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
    bounds = None if k < 2 or (kernels.usable(data.X, k) and k * data.d < NARROW_BOUNDS_MIN_WORK) \
        else _Bounds(data.n, labels.device)
    held = None if bounds is None or start is None else distance_bounds(start)
    if bounds is not None and held is not None:
        bounds.take_up(*held, C, labels)
    while passes < max_passes:
        passes += 1
        rows, target, gain = _candidates(data, C, N, labels, bounds)
        C_scored = C
        place = _ranked(data, gain)  # this rank's candidates among all, best first
        m = int(data.comm.sum_scalars(float(rows.numel()))[0])
        accepted = False
        while m >= 1:
            mine = place < m
            change, N_new, C_new = _batch_change(data, C, N, rows[mine], labels[rows[mine]],
                                                 target[mine])
            if change < -min_gain:
                labels[rows[mine]] = target[mine]
                N, C = _singletons_exact(data, N_new, labels), C_new
                moves += m
                accepted = True
                break
            m //= 2
        if not accepted:
            converged = True
            break
        if passes % REFRESH == 0:  # fresh means now and then: no drift from the updates
            N, C = _means(data, labels, k)
        if bounds is not None:
            bounds.moved(rows[mine], (C - C_scored).norm(dim=1), labels)
    if moves:
        N, C = _means(data, labels, k)
    return HartiganResult(C, labels, passes, moves, converged)
