r"""The soft-Lloyd statistics pass: ``N``, ``S``, ``F_T`` and ``J`` at one temperature.

:func:`cluster_stats` returns the sufficient statistics of the soft-Lloyd step at temperature
``T`` for an assignment ``m`` (:mod:`rbfkmeans.assignments`), in one chunked pass over the rows
of a pass context (:class:`~rbfkmeans.passes.Data`):

.. math::

    R = m(-D / 2T), \qquad N_j = \sum_i w_i r_{ij}, \qquad S_j = \sum_i w_i r_{ij} x_i,

plus the relaxed objective ``F_T`` and the k-means objective ``J`` at the current centroids. The
update ``c_j <- m_j = S_j / N_j`` is the gradient step ``c_j - eta_j dF_T/dc_j`` with the
per-cluster step ``eta_j = 1 / (2 N_j)`` (because ``dF_T/dc_j = 2 N_j (c_j - m_j)``); at ``T = 0``
(a hard assignment) ``N_j = |S_j|`` and it is exactly one Lloyd iteration.

The scores of a chunk are ``Z = (x.c - ||c||^2/2) / T = W x + b``, one ``addmm`` (the Linear
layer of the k-means layer); at a temperature beyond the dtype's range they are formed shifted
by their row maximum (:func:`scores_in_range`, :func:`shifted_scores`). On the CPU a hard pass,
and a soft pass whose rows have few non-zero memberships, run fused in the compiled kernels
(:mod:`rbfkmeans.kernels`). Sums are reduced over the ranks of ``data.comm``, so every rank gets
the statistics of the concatenated data; labels stay local.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import kernels
from ._validation import check_bool, check_real, check_temperature
from .assignments import Assignment, get_assignment
from .copies import centroid_copies, distinct, least
from .distances import cross_term, row_norms_sq
from .errors import NonFiniteError
from .passes import Data, check_data

__all__ = ["KERNEL_CANDIDATES", "KERNEL_SOFTMAX_MAX_K", "SCORE_HEADROOM", "Stats", "check_hard_tol",
           "check_objectives", "cluster_stats", "scores_in_range", "shifted_scores"]


def check_hard_tol(hard_tol: Any) -> float:
    """``hard_tol`` as a float if it is a number in ``[0, 1)``, else raise naming it (O(1))."""
    value = check_real(hard_tol, "hard_tol", minimum=0.0)
    if value >= 1.0:
        raise ValueError(f"hard_tol must be a number in [0, 1); got {hard_tol!r}")
    return value


@dataclass
class Stats:
    """Statistics of one pass at centroids ``C`` and temperature ``T`` (summed over ranks).

    ``N`` (k,) weighted memberships, ``S`` (k, d) weighted member sums, ``objective`` the relaxed
    objective ``F_T`` (``J`` when hard), ``inertia`` ``J`` (both in the metric's units: for
    cosine ``J = sum_i w_i (1 - max_j cos_ij)``), ``n_soft`` the (weighted count of)
    points whose membership is not one-hot, ``labels`` the nearest centroid of each local point
    when asked for.
    """

    N: Tensor
    S: Tensor
    objective: float
    inertia: float
    n_soft: float
    labels: Tensor | None = None


def _scores(Xc: Tensor, C: Tensor, C_sq: Tensor, T: float) -> Tensor:
    """Shifted scores ``Z = (x.c - ||c||^2/2) / T = W x + b`` (b, k): ``z + ||x||^2/(2T)``,
    one fused ``addmm`` (the Linear layer of the k-means layer)."""
    return torch.addmm(C_sq.unsqueeze(0), Xc, C.T, beta=-0.5 / T, alpha=1.0 / T)


#: a soft pass forms its scores ``Z = (x.c - ||c||^2/2) / T`` by one ``addmm`` (the kernels
#: theirs as well) where their bound ``d reach^2 / T`` (at least ``1 / T``) and the entropy
#: term ``2T log k`` lie below this fraction of the dtype's largest number. Beyond (float64 data
#: of unit size: ``T`` below about ``6e-303`` or above ``1e304``; the estimator's temperatures,
#: in the frame of :mod:`rbfkmeans.frame`, stay far inside) they are formed shifted
#: (:func:`shifted_scores`), and the objective in an order that overflows only where its value
#: does.
SCORE_HEADROOM = 2.0**-10


def scores_in_range(reach: float, d: int, k: int, T: float, dtype: torch.dtype) -> bool:
    """Whether the plain scores and entropy terms of a soft pass at ``T > 0`` over ``k``
    centroids lie far inside ``dtype``'s range (:data:`SCORE_HEADROOM`), for rows and centroids
    whose entries of ``x - c`` are bounded by ``reach`` (:meth:`Data.centroids_in_reach`):
    ``|x.c - ||c||^2/2| <= d reach^2``. O(1)."""
    big = torch.finfo(dtype).max * SCORE_HEADROOM
    return max(d * reach * reach, 1.0) < T * big and 2.0 * T * max(1.0, math.log(k)) < big


def shifted_scores(Xc: Tensor, C: Tensor, C_sq: Tensor, T: float) -> tuple[Tensor, Tensor]:
    """The scores of a chunk less their row maximum, ``Z - max_l Z_il`` (b, k) (every mapping
    ignores a per-row constant), and ``T max_l Z_il`` (b,), at any ``T > 0``: formed as
    ``(G - max_l G_il) / T`` from the finite ``G = T Z = x.c - ||c||^2/2``, so that where
    ``1 / T`` or ``Z`` would overflow a gap beyond the range is ``-inf`` (a membership of 0)
    and the nearest centroid scores exactly 0, rather than ``inf - inf``."""
    G = torch.addmm(C_sq.unsqueeze(0), Xc, C.T, beta=-0.5)  # (b, k) = T Z
    top = G.amax(dim=1, keepdim=True)  # (b, 1)
    return G.sub_(top).div_(T), top.squeeze(1)


def _wsum(v: Tensor, w: Tensor | None) -> Tensor:
    """``sum_i w_i v_i`` in float64."""
    return v.sum(dtype=torch.float64) if w is None else v.double() @ w.double()


#: A soft pass runs in the compiled group kernel (:func:`rbfkmeans.kernels.group_pass`: the
#: scores of a few hundred rows by one BLAS product, the mapping and the sums fused per row,
#: never a chunk of memberships) where each row has few non-zero memberships, whose sums it
#: adds row by row (the chunked passes add them by BLAS products): softmax gives every
#: centroid one, so up to ``KERNEL_SOFTMAX_MAX_K`` centroids (measured on MNIST's pixels:
#: 0.86x the chunked pass's time at k = 10, 1.3x at 16, 2.2x at 64); entmax-1.5 and sparsemax
#: give one to each centroid whose gap ``a (max z - z_j)`` is below 1, so while a sample of
#: ``CANDIDATE_SAMPLE`` rows has at most ``KERNEL_CANDIDATES`` such centroids per row on average
#: (on a 64-dimensional PCA of MNIST with k = 1,024: 0.34x at 19 per row, 0.78x at 92, 2.3x
#: at 552). One process only (every rank of a distributed pass takes the chunked path).
KERNEL_SOFTMAX_MAX_K = 12
KERNEL_CANDIDATES = 64
CANDIDATE_SAMPLE = 256


def _soft_in_kernel(data: Data, C: Tensor, C_sq: Tensor, T: float, entry: Assignment) -> bool:
    """Whether the soft pass of ``entry`` at ``T`` runs in the group kernel (see
    :data:`KERNEL_CANDIDATES`); the sample is of evenly spaced rows (no randomness)."""
    k = C.shape[0]
    if data.comm.active or entry.name not in ("softmax", "entmax15", "sparsemax") or \
            not kernels.usable(data.X, k, scores=True):
        return False
    if k <= KERNEL_SOFTMAX_MAX_K:
        return True
    if entry.name == "softmax":
        return False
    rows = torch.linspace(0, data.n - 1, min(data.n, CANDIDATE_SAMPLE)).long()
    Z = _scores(data.X[rows], C, C_sq, T)  # (m, k)
    a = 0.5 if entry.name == "entmax15" else 1.0
    gaps = (Z.amax(dim=1, keepdim=True) - Z).mul_(a)  # (m, k) >= 0
    return float((gaps < 1.0).sum()) <= KERNEL_CANDIDATES * rows.numel()


@torch.no_grad()
def cluster_stats(
    data: Data,
    C: Tensor,
    T: float,
    assignment: str | Assignment,
    *,
    return_labels: bool = False,
    hard_tol: float = 1e-7,
    objective: bool = True,
) -> Stats:
    """One chunked pass: ``N``, ``S``, ``F_T`` and ``J`` at centroids ``C`` (module docstring).

    A hard assignment or ``T = 0`` uses the nearest centroid (ties to the lowest index). A point
    counts as soft when its largest membership is below ``1 - hard_tol`` (``0 <= hard_tol <
    1``). With
    ``objective=False`` only ``N`` and ``S`` are computed (the inner iterations of the soft
    solvers); ``objective``, ``inertia`` and ``n_soft`` are then NaN. A hard pass on the CPU runs
    in one sweep of the fused kernel of :mod:`rbfkmeans.kernels` (beyond
    :data:`rbfkmeans.kernels.MAX_DIM` features with the scores of BLAS products of a few
    hundred rows; the same statistics up to rounding).
    """
    check_data(data)
    entry = get_assignment(assignment)
    T = check_temperature(T, "T")
    hard_tol = check_hard_tol(hard_tol)
    return_labels = check_bool(return_labels, "return_labels")
    objective = check_bool(objective, "objective")
    C, reach = data.centroids_in_reach(C)
    k, d = C.shape
    hard = entry.hard or T == 0.0
    # scores far inside the range: formed as they are (or by the kernels), else shifted
    plain = hard or scores_in_range(reach, d, k, T, data.X.dtype)
    dev, dt = data.X.device, data.X.dtype
    C_sq = row_norms_sq(C)  # (k,)
    N = torch.zeros(k, dtype=dt, device=dev)
    S = torch.zeros(k, d, dtype=dt, device=dev)
    obj = torch.zeros((), dtype=torch.float64, device=dev)
    inertia = torch.zeros((), dtype=torch.float64, device=dev)
    n_soft = torch.zeros((), dtype=torch.float64, device=dev)
    labels = torch.empty(data.n, dtype=torch.long, device=dev) if return_labels else None
    fused = hard and kernels.usable(data.X, k, scores=True)  # one sweep of the kernel
    fused_soft = not hard and plain and labels is None and data.n > 0 and \
        _soft_in_kernel(data, C, C_sq, T, entry)
    X_sq = data.X_sq if objective and not (fused or fused_soft) else None  # (kernels: in them)
    if fused:
        N, S, inertia = kernels.hard_pass(data.X, C, data.w, labels=labels, objective=objective,
                                          x_sq=data.X_sq)
    elif fused_soft:  # every group a single centroid: the mapping of the scores themselves
        N, S, _, acc, _ = kernels.group_pass(
            data.X, C, torch.ones(k, dtype=torch.long), T, entry.name, data.w,
            objective=objective, split=None, hard_tol=hard_tol)
        obj, inertia, n_soft = acc.to(dev)  # F_T, J, the soft rows' weight (float64)
    # weighted rows are copied (Xw): then chunks of max(k, d) entries a row
    width = k if data.w is None else max(k, data.d)
    copies = centroid_copies(C, C_sq) if hard and not fused else None
    C_hard, C_hard_sq = distinct(C, C_sq, copies)
    for s in () if fused or fused_soft else data.chunks(width):
        Xc = data.X[s]  # (b, d)
        w = data.weight(s)  # (b,)
        Xw = Xc if w is None else Xc * w.unsqueeze(1)  # (b, d)
        if hard:
            # (b,), (b,): the minimum of ||c||^2 - 2 x.c over the distinct centroids, and its
            # index (the lowest of equal centroids: rbfkmeans.copies)
            gmin, lab = least(cross_term(Xc, C_hard, C_hard_sq), copies, overwrite=True)
            if w is None:
                N += torch.bincount(lab, minlength=k).to(dt)
            else:
                N.index_add_(0, lab, w)
            S.index_add_(0, lab, Xw)
            if objective:
                assert X_sq is not None
                inertia += _wsum(gmin.add_(X_sq[s]).clamp_(min=0.0), w)
            if labels is not None:
                labels[s] = lab
            continue
        # (b, k); shifted: the row maxima of Z are 0 and lift (b,) holds T max_l Z_il
        Z, lift = (_scores(Xc, C, C_sq, T), None) if plain else shifted_scores(Xc, C, C_sq, T)
        if labels is not None:
            labels[s] = Z.argmax(dim=1)  # nearest centroid, ties to the lowest index
        if objective:
            assert X_sq is not None
            assert entry.inplace is not None
            R = entry.inplace(Z.clone())  # (b, k); Z kept for the objective
            # F_i = dmin_i + 2T free_energy(gap_i, r_i), written relative to the row maximum so
            # nothing cancels at small T: d_ij = dmin_i + 2T (max_l Z_il - Z_ij)
            zmax = Z.amax(dim=1, keepdim=True)  # (b, 1)
            top = 2.0 * T * zmax.squeeze(1) if lift is None else 2.0 * lift  # (b,)
            dmin = (X_sq[s] - top).clamp_(min=0.0)  # (b,)
            gap = torch.sub(zmax, Z, out=Z)  # (b, k) >= 0, in place of Z
            energy = entry.free_energy(gap, R)  # (b,)
            # at a huge T, 2T alone may overflow where 2 T energy does not
            row_obj = dmin + (2.0 * T * energy if lift is None else T * (2.0 * energy))
            soft = (R.amax(dim=1) < 1.0 - hard_tol).to(dt)  # (b,)
            obj += _wsum(row_obj, w)
            inertia += _wsum(dmin, w)
            n_soft += _wsum(soft, w)
        else:
            assert entry.inplace is not None
            R = entry.inplace(Z)  # (b, k), Z overwritten where possible
        N += R.sum(dim=0) if w is None else w @ R
        S.addmm_(R.T, Xw)
    if hard:
        obj = inertia
    if not objective:
        obj = inertia = n_soft = torch.full((), math.nan, dtype=torch.float64, device=dev)
    data.comm.sum_(N, S, obj, inertia, n_soft)
    scale = data.metric.objective_scale  # the metric's objectives (1/2 of J, F_T for cosine)
    F, J = float(obj), float(inertia)
    if objective:
        check_objectives(F, J, T, entry.name)
    return Stats(N, S, scale * F, scale * J, float(n_soft), labels)


def check_objectives(F: float, J: float, T: float, assignment: str) -> None:
    """Raise ``ValueError`` unless the objectives ``F_T`` and ``J`` of a pass (float64 sums over
    every rank, so that every rank raises) are finite: the distances themselves are (checked
    with the centroids), so an infinite ``J`` is a sum beyond float64 (the rows' weight times
    their distances) and an infinite ``F_T`` with a finite ``J`` an entropy term ``2T (sum w)
    H`` beyond it (a temperature far above the data's scale)."""
    if not math.isfinite(J):
        raise NonFiniteError(f"X is too far from the centroids for float64: its k-means objective "
                             f"J (the weighted sum of its squared distances) overflows (got {J!r});"
                             " rescale X or its weights")
    if not math.isfinite(F):
        raise NonFiniteError(f"T must be small enough for the objective to be finite in "
                             f"float64; got T={T!r}, at which the entropy term 2T sum_i w_i H_i of "
                             f"the {assignment} objective overflows (got {F!r}) though J={J:.6g} "
                             "is finite; use a smaller temperature")
