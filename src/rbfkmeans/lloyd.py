r"""Hard Lloyd iterations.

One Lloyd iteration assigns each point to its nearest centroid and moves each centroid to the
(weighted) mean of its points,

.. math::

    S_j = \{ i : j = \operatorname{argmin}_l d_{il} \}, \qquad
    c_j \leftarrow \frac{\sum_{i \in S_j} w_i x_i}{\sum_{i \in S_j} w_i},

the gradient step on ``J`` with ``eta_j = 1 / (2 |S_j|)``. A cluster left with no weight is
relocated as scikit-learn does (:mod:`rbfkmeans.relocation`), so from the same start the two give
the same centroids. On a cosine :class:`~rbfkmeans.passes.Data` every update is projected back
onto the unit sphere (spherical k-means, :mod:`rbfkmeans.metrics`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import kernels
from ._validation import check_nonnegative, check_positive_int
from .bounds import BoundedAssignment
from .distances import row_dots
from .errors import value_error
from .passes import Data, check_data
from .relocation import hard_update
from .sparse import dense
from .stats import Stats, cluster_stats

__all__ = ["CYCLE_WINDOW", "RESOLUTION", "RESOLUTION_AFTER", "STALL", "LloydResult",
           "bounds_pay", "lloyd"]

#: :func:`lloyd` bounds its passes (``bounds=None``) from this many point-centroid pairs on
BOUNDS_MIN_ENTRIES = 1 << 20
#: ... and takes its bounded torch passes over the compiled run on wide data (more than
#: ``kernels.MAX_DIM`` features) from this many centroids per feature on, where the compiled
#: run's group bounds (``n t`` of them) are more than it keeps for a warm start
#: (``kernels.KEPT_LOWER_BOUNDS``): each of a fit's runs would then start cold, and hold them.
#: Within the cap the compiled runs are faster: to convergence from a k-means++ start (2
#: threads, one process) on MNIST's PCA (70,000 rows) 0.66x the torch passes' time at d = 64
#: with k = 1,024 and 0.52x at d = 32 with k = 256; past it, on 200,000 rows of a mixture of
#: 4,096 unequal Gaussians (d = 128, k = 1,024), where a few centroids of the start move far,
#: 1.26x-1.35x.
BOUNDS_OVER_KERNEL = 8


#: the give-up rule of :func:`lloyd`: a run with a ``target`` stops once ``J`` exceeds it by
#: more than this many times its last decrease (on the swap search's trials of the default fit
#: 40 cut its Lloyd iterations by up to 20% with the results unchanged on 14 of 16 real sets
#: and within 3e-4 on the others; 20 cut more but lost a kept swap on one set in five seeds)
STALL = 40.0

#: From ``RESOLUTION_AFTER`` iterations on, :func:`lloyd` also stops once ``J_t``, the
#: objective of its labels at their means, is at most ``RESOLUTION eps sum_i w_i ||x_i||^2``
#: (``eps`` of the data's dtype; ``sum_i w_i`` for unit rows): the rows are then within rounding
#: of their centroids, where the distances that would move a label are rounding noise (cosine
#: rows of nearly one direction, say: in float32 their labels wandered until ``max_iter``)
RESOLUTION = 64
RESOLUTION_AFTER = 20

#: :func:`lloyd` stops at centroids it had within this many iterations before (a cycle:
#: relocated centroids that take points within rounding of others and lose them again)
CYCLE_WINDOW = 8


@dataclass
class LloydResult:
    """Centroids, nearest-centroid labels, ``J``, iterations run, whether the labels settled,
    and whether the run gave up on its ``target``."""

    C: Tensor
    labels: Tensor
    inertia: float
    n_iter: int
    converged: bool
    gave_up: bool = False
    #: the compiled run's distance bounds at ``C`` (:attr:`rbfkmeans.kernels.LloydRun.bounds`),
    #: for a run that starts next to it (``lloyd(warm=...)``); None from the torch passes
    bounds: tuple[Tensor, ...] | None = field(default=None, repr=False)
    #: the torch passes' bounded state at ``C``, for the same use; None from the other passes
    bounded: BoundedAssignment | None = field(default=None, repr=False)


def _compiled_metric(data: Data) -> bool:
    """Whether the compiled runs take ``data``'s metric: squared-Euclidean data, and cosine
    data in one process (their update ``S_j / ||S_j||``)."""
    return data.metric.name == "sqeuclidean" or (data.metric.spherical and not data.comm.active)


def bounds_pay(data: Data, k: int) -> bool:
    """Whether :func:`lloyd` bounds its passes with ``bounds=None`` for ``k`` centroids (its
    docstring): from ``n k >= BOUNDS_MIN_ENTRIES`` on, where the compiled runs do not take the
    data or it is wide with ``k >= BOUNDS_OVER_KERNEL d`` and more group bounds than a run
    keeps (``kernels.KEPT_LOWER_BOUNDS``). Every rank decides alike."""
    check_data(data)
    k = check_positive_int(k, "k")
    n_total = sum(data.comm.counts(data.n)) if data.comm.active else data.n
    return (n_total * k >= BOUNDS_MIN_ENTRIES
            and (not _compiled_metric(data) or not kernels.usable(data.X, k, scores=True)
                 or (data.d > kernels.MAX_DIM and k >= BOUNDS_OVER_KERNEL * data.d
                     and n_total * kernels.bound_groups(n_total, k)
                     > kernels.KEPT_LOWER_BOUNDS)))


@torch.no_grad()
def lloyd(
    data: Data,
    C0: Tensor,
    *,
    max_iter: int = 300,
    tol: float = 0.0,
    callback: Callable[[int, Tensor, Stats], None] | None = None,
    bounds: bool | None = None,
    target: float | None = None,
    warm: tuple[LloydResult, Tensor] | None = None,
) -> LloydResult:
    r"""Hard Lloyd iterations ``c_j <- mean of S_j`` from ``C0`` (k, d).

    Stops when the labels no longer change (strict convergence: the result is a Lloyd fixed
    point) or, if ``tol > 0``, when ``sum_j ||c_j^new - c_j||^2 <= tol``, or after ``max_iter``;
    also where rounding decides the labels (converged): when a relocation captures nothing, when
    the centroids repeat those of one of the last ``CYCLE_WINDOW`` iterations, or when ``J`` of
    the labels is within rounding of 0 (``RESOLUTION``).
    Same stopping rules as ``sklearn.cluster.KMeans(algorithm="lloyd")``, whose ``tol`` is in
    absolute units here (the estimator scales it by the mean feature variance). ``callback(it, C,
    stats)`` is called after each assignment pass (``stats`` with the objective at ``C``).
    With ``data.metric`` cosine this is spherical k-means: ``C0`` is projected onto the sphere
    and each update is ``c_j <- m_j / ||m_j||``.

    With ``bounds`` (and no ``callback``) the passes after the first skip the points whose
    label cannot have changed (:class:`rbfkmeans.bounds.BoundedAssignment`; the sums are then
    kept in float64): the same Lloyd iterations up to rounding, at a fraction of the cost once
    few labels move. On cosine data they bound the Euclidean distances of the unit rows to the
    unit centroids, ``||x - c||^2 = 2 - 2 cos(x, c)``, whose nearest centroid is the most
    similar one. ``None`` (default) uses them from ``n k >= 2^20`` on (measured: below that
    their bookkeeping costs more than the distances it saves), except on the CPU where the
    compiled Lloyd runs take over (squared-Euclidean data; they keep bounds of their own)
    unless the data is wide, ``k >= BOUNDS_OVER_KERNEL d`` and the rows too many for the
    compiled run to keep its bounds (where the torch passes' bounds save more).
    Otherwise, on
    the CPU in a single process and without a callback, the iterations run in compiled code
    (:func:`rbfkmeans.kernels.lloyd_run`: bounded passes with the labels and sums of full ones
    on few features, full passes on BLAS products beyond) until one leaves a cluster empty;
    the relocation and what follows run here.

    With a ``target`` (a value of ``J`` the caller hopes to go below) the run gives up,
    unconverged (``gave_up``), once from the third iteration on

    .. math::

        J_t - \text{target} > \text{STALL} \, (J_{t-1} - J_t), \qquad
        J_t = \sum_i w_i \lVert x_i \rVert^2 - \sum_j \lVert S_j \rVert^2 / N_j,

    ``J_t`` the objective of iteration ``t``'s labels at their means (on cosine data at their
    mean directions, ``J_t = sum_i w_i - sum_j ||S_j||``: the spherical objective of the unit
    rows, ``sum_{i in j} w_i x_i . S_j / ||S_j|| = ||S_j||``) (``STALL = 40``: at the pace
    of its last step the run would need more than 40 further steps to get there, and Lloyd's
    steps shrink). A heuristic for searches that only keep runs ending below ``target``; an
    iteration that relocates an empty cluster is not judged.

    ``warm = (parent, rows)``: ``parent`` a result of ``lloyd`` on the same ``data`` and
    ``rows`` (k,) int64 the row of ``parent.C`` that each row of ``C0`` continues (equal to it,
    or moved from it, as Hartigan's moves move the means: the bounds then move by the distance,
    as after an update), or -1 for a new centroid. The passes then start from the parent's
    labels and distance bounds and score each point only against the new centroids (and in
    full where its own centroid is gone, or where the moves leave its label in doubt), instead
    of against all: the same labels, centroids and iterations as without it, at a fraction of
    the first pass's cost (on wide data the new centroids join the parent's groups of
    centroids, and the run skips a cold start's full ``n k d`` product and its pass over ``X``
    for ``||x_i||^2``). Ignored where the parent kept no bounds (full passes, or wide group
    bounds beyond :data:`rbfkmeans.kernels.KEPT_LOWER_BOUNDS`).
    """
    check_data(data)
    max_iter = check_positive_int(max_iter, "max_iter")
    check_nonnegative(tol, "tol")
    if bounds is not None and not isinstance(bounds, bool):
        raise ValueError(f"bounds must be True, False or None; got {bounds!r}")
    if target is not None and not (isinstance(target, int | float)
                                   and not isinstance(target, bool) and math.isfinite(target)):
        raise value_error(target, f"target must be a finite number or None; got {target!r}")
    C_in = data.check_centroids(C0, "C0")
    C = data.project(C_in.clone(), name="C0")
    comm = data.comm
    spherical = data.metric.spherical
    labels_old: Tensor | None = None
    converged = False
    bounded = None
    compiled_metric = _compiled_metric(data)
    if bounds is None:
        bounds = bounds_pay(data, C.shape[0])
    if bounds and callback is None:
        bounded = BoundedAssignment(_euclidean(data) if spherical else data)
        if warm is not None and warm[0].bounded is not None:
            # kept rows as given (unit rows projected again may round differently)
            bounded.start_from(warm[0].bounded, C, _check_warm_rows(C_in, *warm))
    it = done = 0
    gave_up = False
    eps = float(torch.finfo(data.X.dtype).eps)  # the resolution rule's unit
    if (bounded is None and callback is None and not comm.active and compiled_metric
            and kernels.usable(data.X, C.shape[0], scores=True)):
        # the same iterations in compiled code, up to a pass that empties a cluster
        run = kernels.lloyd_run(data.X, C, data.w, max_iter, tol,
                                math.inf if target is None else target, STALL,
                                None if warm is None else _warm_start(C, *warm),
                                spherical=spherical, floor=RESOLUTION * eps,
                                floor_after=RESOLUTION_AFTER)
        if run.finished:
            assert run.labels is not None
            return LloydResult(run.C, run.labels, run.inertia, run.n_iter, run.converged,
                               run.gave_up, run.bounds)
        C, labels_old, done = run.C, run.labels, run.n_iter
        it = done
    moments = _moments(data, spherical) if target is not None else 0.0
    J_prev = math.inf
    relocated = False  # whether the last update relocated an empty cluster
    total_sq: float | None = None  # sum_i w_i ||x_i||^2, once a run is long enough to need it
    recent: deque[Tensor] = deque(maxlen=CYCLE_WINDOW)  # the last iterations' centroids
    for it in range(done + 1, max_iter + 1):
        if bounded is not None:
            st = bounded(C)
        else:
            st = cluster_stats(data, C, 0.0, "hard", return_labels=True,
                               objective=callback is not None)
        assert st.labels is not None
        if callback is not None:
            callback(it, C, st)
        C_new, n_empty = hard_update(data, C, st)
        shift = float(((C_new - C) ** 2).sum())
        same = labels_old is not None and bool(torch.equal(st.labels, labels_old))
        if comm.active:
            same = comm.sum_scalars(0.0 if same else 1.0)[0] == 0.0
        # relocations that capture nothing repeat forever (duplicate points, fewer distinct
        # points than k, points within rounding of their centroids): the labels they leave are
        # a fixed point too. So are centroids the run had a few iterations before (each
        # iteration is a function of the centroids alone, so the run would repeat that cycle
        # forever, and J cannot fall along one): points within rounding of each other that
        # relocated centroids take from their clusters and give back in turn
        futile = same and n_empty > 0 and relocated
        cycled = any(bool(torch.equal(C_new, c)) for c in recent)
        recent.append(C_new)
        relocated = n_empty > 0
        C = C_new
        if (same and (n_empty == 0 or shift == 0.0)) or futile or cycled:
            converged = True
            break
        labels_old = st.labels
        if tol > 0 and shift <= tol:
            converged = True
            break
        if it >= RESOLUTION_AFTER:  # J_t within rounding of 0: no label is worth moving
            if total_sq is None:
                total_sq = moments if target is not None else _moments(data, spherical)
            if total_sq - _between(st, spherical) <= RESOLUTION * eps * total_sq:
                converged = True
                break
        if target is not None:
            if n_empty:
                J_prev = math.inf
                continue
            J = moments - _between(st, spherical)
            if it >= 3 and J - target > STALL * (J_prev - J):
                gave_up = True
                break
            J_prev = J
    if bounded is not None:
        # the labels at the last centroids by one more bounded pass (after a converged run
        # they moved by rounding: few points are in doubt), and J from them, O(n d)
        labels = bounded(C).labels
        assert labels is not None
        J = (_spherical_objective(data, C, labels) if spherical
             else _labelled_inertia(data, C, labels))
        return LloydResult(C, labels, J, it, converged, gave_up, bounded=bounded)
    final = cluster_stats(data, C, 0.0, "hard", return_labels=True)
    assert final.labels is not None
    return LloydResult(C, final.labels, final.inertia, it, converged, gave_up)


def distance_bounds(result: LloydResult) -> tuple[Tensor, Tensor, Tensor] | None:
    """The distance bounds a Lloyd run kept at its centroids ``result.C`` with its labels
    (its compiled run's, or its torch passes'): per row an upper bound on the distance to its
    own centroid and a lower bound on the distance to every other (float64, (n,)), and the
    centroids they hold at. None where the run kept none."""
    if result.bounds is not None:
        upper, lower = result.bounds[0], result.bounds[1]
        if lower.dim() == 2:  # group bounds (n, t), rounded down: their least
            lower = lower.amin(dim=1) if lower.shape[1] else torch.zeros_like(upper)
        return upper.double(), lower.double(), result.C
    if result.bounded is not None:
        state = result.bounded.distance_bounds()
        if state is not None and torch.equal(state[0], result.labels):
            return state[1], state[2], state[3]
    return None


def _warm_start(C: Tensor, parent: LloydResult, rows: Tensor) -> kernels.WarmStart | None:
    """For :func:`rbfkmeans.kernels.lloyd_run`: the parent's labels renumbered to the rows of
    ``C`` (-1 where their centroid is gone), its bounds, the rows of ``C`` that are new, and
    the parent's centroid each row continues (a new one: its own row); on wide data also the
    group of each row of ``C`` (a kept centroid's parent's group, a new one the group of the
    parent's centroid nearest it) and the parent's ``||x_i||^2``. None without bounds."""
    if parent.bounds is None:
        return None
    rows = _check_warm_rows(C, parent, rows)
    kept = (rows >= 0).nonzero().squeeze(1)
    renumber = torch.full((parent.C.shape[0],), -1, dtype=torch.long)
    renumber[rows[kept]] = kept
    moved = (rows < 0).nonzero().squeeze(1)
    continued = C.clone()  # the parent's centroid each row continues (a new one: its own)
    continued[kept] = parent.C[rows[kept]].to(C.dtype)
    warm = kernels.WarmStart(renumber[parent.labels], parent.bounds[0], parent.bounds[1], moved,
                             continued)
    if len(parent.bounds) == 2:
        return warm
    parent_group, xs = parent.bounds[2], parent.bounds[3]
    group_of = torch.empty(C.shape[0], dtype=torch.long)
    group_of[kept] = parent_group[rows[kept]]
    if moved.numel():
        nearest = torch.cdist(C[moved].double(), parent.C.double()).argmin(dim=1)
        group_of[moved] = parent_group[nearest]
    return warm._replace(group_of=group_of, xs=xs)


def _check_warm_rows(C: Tensor, parent: LloydResult, rows: Tensor) -> Tensor:
    """``rows`` as int64, checked: shape (k,), each -1 or a distinct row of the parent's
    centroids."""
    if not isinstance(rows, Tensor) or rows.shape != (C.shape[0],):
        raise ValueError(f"warm rows must be a tensor of shape ({C.shape[0]},); got "
                         f"{tuple(getattr(rows, 'shape', ()))}")
    rows = rows.to(torch.long)
    kept = (rows >= 0).nonzero().squeeze(1)
    if bool((rows >= parent.C.shape[0]).any()) or rows[kept].unique().numel() != kept.numel():
        raise ValueError(f"warm rows must be distinct rows of the parent's {parent.C.shape[0]} "
                         f"centroids or -1; got {rows.tolist()}")
    return rows


def _spherical_objective(data: Data, C: Tensor, labels: Tensor) -> float:
    """``sum_i w_i (1 - x_i . c_{l_i})`` of unit rows at unit centroids ``C`` with ``labels``,
    in float64, by chunks and summed over ranks (the spherical objective of a hard pass at
    ``C``, as its scores round)."""
    total = 0.0
    for s in data.chunks(data.d):  # the rows' centroids C[labels[s]] are a (b, d) copy
        cos = row_dots(dense(data.X[s]), C[labels[s]]).double()  # (b,)
        w = data.weight(s)
        total += float((1.0 - cos).sum() if w is None else (1.0 - cos) @ w.double())
    return data.comm.sum_scalars(total)[0]


def _labelled_inertia(data: Data, C: Tensor, labels: Tensor) -> float:
    """``J = sum_i w_i ||x_i - c_{l_i}||^2`` at ``C`` (k, d) with ``labels``, the differences
    in float64, by chunks and summed over ranks (a hard pass's ``J`` when ``labels`` are the
    nearest centroids, without its ``n k d`` products)."""
    total = 0.0
    Cd = C.double()
    for s in data.chunks(data.d):
        r = (dense(data.X[s]).double() - Cd[labels[s]]).pow_(2).sum(dim=1)  # (b,)
        w = data.weight(s)
        total += float(r.sum() if w is None else r @ w.double())
    return data.comm.sum_scalars(total)[0]


def _euclidean(data: Data) -> Data:
    """The unit rows of cosine ``data`` as squared-Euclidean data (the same tensors)."""
    return Data(data.X, data.w, chunk_size=data.chunk_size, comm=data.comm, validate=False)


def _moments(data: Data, spherical: bool = False) -> float:
    """``sum_i w_i ||x_i||^2`` over the ranks (``sum_i w_i`` for unit rows, ``spherical``),
    squared and added in float64 (``Data.X_sq`` is in the data's dtype: in float32 its rounding
    would swamp ``J_t``, a small difference). By chunks of ``d`` entries per row: a chunk's
    rows are copied to float64."""
    total = 0.0
    for s in data.chunks(data.d):
        w = data.weight(s)
        if spherical:  # unit rows: their weights
            total += float(data.X[s].shape[0] if w is None else w.double().sum())
            continue
        sq = data.X[s].double().square().sum(dim=1)  # .double() of float64 rows is X itself
        total += float(sq.sum() if w is None else sq @ w.double())
    return data.comm.sum_scalars(total)[0] if data.comm.active else total


def _between(st: Stats, spherical: bool = False) -> float:
    """``sum_j ||S_j||^2 / N_j`` of a hard pass (``sum_j ||S_j||`` for unit rows,
    ``spherical``; float64, clusters of no weight add nothing)."""
    N, S = st.N.double(), st.S.double()
    if spherical:
        return float(S.square().sum(dim=1).sqrt().sum())
    return float((S.square().sum(dim=1) / N.clamp(min=torch.finfo(N.dtype).tiny)).sum())
