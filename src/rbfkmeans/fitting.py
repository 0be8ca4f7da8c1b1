r"""The solvers: hard Lloyd, the soft-Lloyd fixed point at a temperature, and annealing.

Every solver is built on one chunked pass over the data, :func:`cluster_stats`, that returns the
sufficient statistics of the soft-Lloyd step at temperature ``T``:

.. math::

    R = m(-D / 2T), \qquad N_j = \sum_i w_i r_{ij}, \qquad S_j = \sum_i w_i r_{ij} x_i,

plus the relaxed objective ``F_T`` and the k-means objective ``J`` at the current centroids.
The update ``c_j <- m_j = S_j / N_j`` is the gradient step ``c_j - eta_j dF_T/dc_j`` with the
per-cluster step ``eta_j = 1 / (2 N_j)`` (because ``dF_T/dc_j = 2 N_j (c_j - m_j)``); at ``T = 0``
(``assignment="hard"``) ``N_j = |S_j|`` and it is exactly one Lloyd iteration.

No pass holds more than ``chunk_rows x k`` memberships. Under an initialised ``torch.distributed``
process group every rank passes its own shard of the data: the statistics, the objectives, the
relocation candidates and the initialisation draws are reduced across ranks, so all ranks hold the
same centroids, equal to a single-process run on the concatenated data.
"""

from __future__ import annotations

import contextvars
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .distances import chunk_rows, cross_term, iter_chunks, row_norms_sq
from .mappings import entmax15_, get_mapping, sparsemax_

__all__ = [
    "AnnealResult",
    "Comm",
    "LloydResult",
    "Stats",
    "SwapResult",
    "anneal",
    "cluster_stats",
    "farthest_points",
    "gradient_step",
    "kmeans_plusplus",
    "lloyd",
    "relocate_empty",
    "soft_lloyd",
    "swap_costs",
    "swap_search",
]


# ---------------------------------------------------------------------------------------------
# communication: identity in one process, all_reduce under torch.distributed
# ---------------------------------------------------------------------------------------------


#: set by :func:`rbfkmeans.distributed.local_only`: fits use this process's data only
LOCAL_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("rbfkmeans_local_only",
                                                                  default=False)


class Comm:
    """Reductions across the ranks of a ``torch.distributed`` group (no-ops in one process).

    ``Comm.auto()`` is active exactly when a default process group is initialised (and not
    inside :func:`rbfkmeans.distributed.local_only`).
    """

    def __init__(self, group: object | None = None, active: bool | None = None) -> None:
        dist = torch.distributed
        if active is None:
            active = dist.is_available() and dist.is_initialized() and not LOCAL_ONLY.get()
        self.active = bool(active)
        self.group = group
        self.rank = dist.get_rank(group) if self.active else 0  # type: ignore[arg-type]
        self.world_size = dist.get_world_size(group) if self.active else 1  # type: ignore[arg-type]
        # NCCL only moves CUDA tensors; gloo (and the rest) are given CPU tensors
        self.device = torch.device("cpu")
        if self.active and "nccl" in str(dist.get_backend(group)).lower():  # type: ignore[arg-type]
            self.device = torch.device("cuda", torch.cuda.current_device())

    @classmethod
    def auto(cls) -> Comm:
        return cls()

    def sum_(self, *tensors: Tensor) -> None:
        """In-place sum of each tensor over all ranks (one collective for all of them)."""
        if not self.active or not tensors:
            return
        flat = torch.cat([t.reshape(-1).to(self.device, torch.float64) for t in tensors])
        torch.distributed.all_reduce(flat, group=self.group)
        offset = 0
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].reshape(t.shape).to(t.device, t.dtype))
            offset += n

    def sum_scalars(self, *values: float) -> list[float]:
        if not self.active:
            return [float(v) for v in values]
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t, group=self.group)
        return [float(v) for v in t.tolist()]

    def all_gather(self, t: Tensor) -> Tensor:
        """Concatenate ``t`` (same shape on every rank) along dim 0 over ranks, in rank order."""
        if not self.active:
            return t
        src = t.contiguous().to(self.device)
        out = [torch.empty_like(src) for _ in range(self.world_size)]
        torch.distributed.all_gather(out, src, group=self.group)
        return torch.cat(out, dim=0).to(t.device)

    def broadcast_(self, t: Tensor, src: int) -> None:
        """Overwrite ``t`` on every rank with rank ``src``'s ``t``."""
        if self.active:
            buf = t.to(self.device).contiguous()
            torch.distributed.broadcast(buf, src=src, group=self.group)  # type: ignore[arg-type]
            if buf is not t:
                t.copy_(buf)

    def counts(self, n_local: int) -> list[int]:
        """Number of rows on each rank."""
        if not self.active:
            return [n_local]
        t = torch.tensor([n_local], dtype=torch.int64)
        return [int(v) for v in self.all_gather(t).tolist()]


# ---------------------------------------------------------------------------------------------
# the one pass: sufficient statistics of the soft-Lloyd step
# ---------------------------------------------------------------------------------------------


@dataclass
class Stats:
    """Statistics of one pass at centroids ``C`` and temperature ``T`` (summed over ranks).

    ``N`` (k,) weighted memberships, ``S`` (k, d) weighted member sums, ``objective`` the relaxed
    objective ``F_T`` (``J`` when hard), ``inertia`` ``J``, ``n_soft`` the (weighted count of)
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
    one fused ``addmm`` (the Linear layer of the module docstring)."""
    return torch.addmm(C_sq.unsqueeze(0), Xc, C.T, beta=-0.5 / T, alpha=1.0 / T)


def _soft_memberships(Z: Tensor, assignment: str) -> Tensor:
    """``R = m(Z)`` (b, k) from a scores buffer that may be overwritten (no autograd)."""
    if assignment == "softmax":
        # Scores more than `margin` below their row's maximum are raised to it before the
        # exponential and their memberships (<= e^-margin) set to 0 after it: a change below
        # 2e-35 (float32) or 1e-304 (float64) per entry. Subnormal exponentials otherwise make
        # the softmax and the product R^T X several times slower at intermediate temperatures.
        margin = -math.log(torch.finfo(Z.dtype).tiny) - 7.0
        torch.maximum(Z, Z.amax(dim=1, keepdim=True) - margin, out=Z)
        R = torch.softmax(Z, dim=1)
        return torch.nn.functional.threshold(R, math.exp(-margin), 0.0, inplace=True)
    if assignment == "entmax15":
        return entmax15_(Z)
    return sparsemax_(Z)


def _soft_objective_rows(
    Z: Tensor, R: Tensor, x_sq: Tensor, T: float, assignment: str
) -> tuple[Tensor, Tensor]:
    """Per-row relaxed objective and ``min_j d_ij`` (b,), from the shifted scores ``Z`` and the
    memberships ``R``; written relative to the row maximum so nothing cancels at small ``T``:
    ``d_ij = dmin_i + 2T (max_l Z_il - Z_ij)``."""
    zmax = Z.amax(dim=1, keepdim=True)  # (b, 1)
    dmin = (x_sq - 2.0 * T * zmax.squeeze(1)).clamp_(min=0.0)  # (b,)
    gap = zmax - Z  # (b, k) >= 0: (d_ij - dmin_i) / 2T
    if assignment == "softmax":
        # F_i = -2T logsumexp_j(-d_ij/2T) = dmin_i - 2T log sum_j exp(-gap_ij)
        return dmin - 2.0 * T * torch.logsumexp(gap.neg_(), dim=1), dmin
    if assignment == "entmax15":
        ent = (4.0 / 3.0) * (1.0 - R.pow(1.5).sum(dim=1))  # Tsallis-1.5 entropy (b,)
    else:
        ent = 0.5 * (1.0 - R.square().sum(dim=1))  # Gini entropy (b,)
    # F_i = sum_j r_ij d_ij - 2T H(r_i) = dmin_i + 2T (sum_j r_ij gap_ij - H(r_i))
    return dmin + 2.0 * T * (torch.einsum("bk,bk->b", R, gap) - ent), dmin


@torch.no_grad()
def cluster_stats(
    X: Tensor,
    C: Tensor,
    T: float,
    assignment: str,
    *,
    sample_weight: Tensor | None = None,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    return_labels: bool = False,
    comm: Comm | None = None,
    hard_tol: float = 1e-7,
    objective: bool = True,
) -> Stats:
    """One chunked pass: ``N``, ``S``, ``F_T`` and ``J`` at centroids ``C`` (module docstring).

    ``assignment="hard"`` or ``T = 0`` uses the nearest centroid (ties to the lowest index).
    A point counts as soft when its largest membership is below ``1 - hard_tol``. With
    ``objective=False`` only ``N`` and ``S`` are computed (the inner iterations of the soft
    solvers); ``objective``, ``inertia`` and ``n_soft`` are then NaN.
    """
    n, d = X.shape
    k = C.shape[0]
    hard = assignment == "hard" or T == 0.0
    C_sq = row_norms_sq(C)  # (k,)
    N = torch.zeros(k, dtype=X.dtype, device=X.device)
    S = torch.zeros(k, d, dtype=X.dtype, device=X.device)
    obj = torch.zeros((), dtype=torch.float64, device=X.device)
    inertia = torch.zeros((), dtype=torch.float64, device=X.device)
    n_soft = torch.zeros((), dtype=torch.float64, device=X.device)
    labels = torch.empty(n, dtype=torch.long, device=X.device) if return_labels else None
    need_sq = hard or objective
    if need_sq and X_sq is None:
        X_sq = row_norms_sq(X)
    rows = chunk_rows(n, k, chunk_size)
    for s in iter_chunks(n, rows):
        Xc = X[s]  # (b, d)
        w = None if sample_weight is None else sample_weight[s]  # (b,)
        Xw = Xc if w is None else Xc * w.unsqueeze(1)  # (b, d)
        if hard:
            assert X_sq is not None
            gmin, lab = cross_term(Xc, C, C_sq).min(dim=1)  # (b,), (b,): ||c||^2 - 2 x.c
            if w is None:
                N += torch.bincount(lab, minlength=k).to(X.dtype)
            else:
                N.index_add_(0, lab, w)
            S.index_add_(0, lab, Xw)
            if objective:
                dmin = gmin.add_(X_sq[s]).clamp_(min=0.0)  # (b,)
                inertia += (
                    dmin.sum(dtype=torch.float64) if w is None else dmin.double() @ w.double()
                )
            if labels is not None:
                labels[s] = lab
            continue
        Z = _scores(Xc, C, C_sq, T)  # (b, k)
        if labels is not None:
            labels[s] = Z.argmax(dim=1)  # nearest centroid, ties to the lowest index
        if objective:
            assert X_sq is not None
            R = _soft_memberships(Z.clone(), assignment)  # (b, k); Z kept for the objective
            row_obj, dmin = _soft_objective_rows(Z, R, X_sq[s], T, assignment)
            soft = (R.amax(dim=1) < 1.0 - hard_tol).to(X.dtype)  # (b,)
            if w is None:
                obj += row_obj.sum(dtype=torch.float64)
                inertia += dmin.sum(dtype=torch.float64)
                n_soft += soft.sum(dtype=torch.float64)
            else:
                wd = w.double()
                obj += row_obj.double() @ wd
                inertia += dmin.double() @ wd
                n_soft += soft.double() @ wd
        else:
            R = _soft_memberships(Z, assignment)  # (b, k), Z overwritten where possible
        N += R.sum(dim=0) if w is None else w @ R
        S.addmm_(R.T, Xw)
    if hard:
        obj = inertia
    if not objective:
        obj = inertia = n_soft = torch.full((), math.nan, dtype=torch.float64)
    comm = comm or Comm.auto()
    comm.sum_(N, S, obj, inertia, n_soft)
    return Stats(N, S, float(obj), float(inertia), float(n_soft), labels)


# ---------------------------------------------------------------------------------------------
# empty clusters
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def farthest_points(
    X: Tensor,
    C: Tensor,
    m: int,
    *,
    chunk_size: int | None = None,
    comm: Comm | None = None,
) -> Tensor:
    """The ``m`` points (m, d) farthest from their nearest centroid, over all ranks, farthest
    first (as scikit-learn relocates empty clusters)."""
    comm = comm or Comm.auto()
    n = X.shape[0]
    k = C.shape[0]
    C_sq = row_norms_sq(C)
    best_d = torch.empty(0, dtype=X.dtype, device=X.device)
    best_x = X.new_empty((0, X.shape[1]))
    for s in iter_chunks(n, chunk_rows(n, k, chunk_size)):
        Xc = X[s]
        dmin = cross_term(Xc, C, C_sq).amin(dim=1).add_(row_norms_sq(Xc))  # (b,)
        cand_d = torch.cat([best_d, dmin])
        cand_x = torch.cat([best_x, Xc])
        top = cand_d.topk(min(m, cand_d.numel())).indices
        best_d, best_x = cand_d[top], cand_x[top]
    if comm.active:  # pad to m so every rank sends the same shape, then take the global top m
        pad = m - best_d.numel()
        if pad:
            best_d = torch.cat([best_d, best_d.new_full((pad,), -math.inf)])
            best_x = torch.cat([best_x, best_x.new_zeros((pad, X.shape[1]))])
        all_d, all_x = comm.all_gather(best_d), comm.all_gather(best_x)
        top = all_d.topk(m).indices
        top = top[all_d[top] > -math.inf]  # fewer than m rows in all: drop the padding
        best_d, best_x = all_d[top], all_x[top]
    return best_x


def relocate_empty(
    X: Tensor,
    C_new: Tensor,
    empty: Tensor,
    *,
    chunk_size: int | None = None,
    comm: Comm | None = None,
) -> Tensor:
    """Move the centroids flagged in ``empty`` (k,) bool to the points farthest from the other
    centroids; returns the new centroids (never NaN)."""
    idx = empty.nonzero().squeeze(1)
    if idx.numel() == 0:
        return C_new
    keep = ~empty
    C_out = C_new.clone()
    if keep.any():
        far = farthest_points(X, C_new[keep], int(idx.numel()), chunk_size=chunk_size, comm=comm)
        C_out[idx[: far.shape[0]]] = far
    return C_out


def _update(
    X: Tensor,
    C: Tensor,
    st: Stats,
    *,
    chunk_size: int | None,
    comm: Comm | None,
    empty_tol: float,
) -> tuple[Tensor, int]:
    """``c_j <- S_j / N_j``, empty clusters (``N_j <= empty_tol``) relocated: (C, n_empty)."""
    empty = empty_tol >= st.N
    C_new = st.S / st.N.clamp(min=torch.finfo(st.N.dtype).tiny).unsqueeze(1)
    C_new = torch.where(empty.unsqueeze(1), C, C_new)
    n_empty = int(empty.sum())
    if n_empty:
        C_new = relocate_empty(X, C_new, empty, chunk_size=chunk_size, comm=comm)
    return C_new, n_empty


# ---------------------------------------------------------------------------------------------
# solvers
# ---------------------------------------------------------------------------------------------


@dataclass
class LloydResult:
    """Centroids, nearest-centroid labels, ``J``, iterations run, whether the labels settled."""

    C: Tensor
    labels: Tensor
    inertia: float
    n_iter: int
    converged: bool
    n_relocated: int = 0


def _empty_tol(N_total: float) -> float:
    return 0.0 if N_total == 0 else 1e-12 * N_total


@torch.no_grad()
def lloyd(
    X: Tensor,
    C0: Tensor,
    *,
    sample_weight: Tensor | None = None,
    max_iter: int = 300,
    tol: float = 0.0,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    callback: Callable[[int, Tensor, Stats], None] | None = None,
) -> LloydResult:
    r"""Hard Lloyd iterations ``c_j <- mean of S_j`` from ``C0`` (k, d).

    Stops when the labels no longer change (strict convergence: the result is a Lloyd fixed
    point) or, if ``tol > 0``, when ``sum_j ||c_j^new - c_j||^2 <= tol``, or after ``max_iter``.
    Same stopping rules as ``sklearn.cluster.KMeans(algorithm="lloyd")``, whose ``tol`` is in
    absolute units here (the estimator scales it by the mean feature variance).
    """
    comm = comm or Comm.auto()
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    C = C0.clone()
    labels_old: Tensor | None = None
    converged = False
    relocated = 0
    it = 0
    for it in range(1, max_iter + 1):
        st = cluster_stats(
            X, C, 0.0, "hard", sample_weight=sample_weight, X_sq=X_sq,
            chunk_size=chunk_size, return_labels=True, comm=comm, objective=callback is not None,
        )
        assert st.labels is not None
        if callback is not None:
            callback(it, C, st)
        C_new, n_empty = _update(
            X, C, st, chunk_size=chunk_size, comm=comm, empty_tol=_empty_tol(float(st.N.sum()))
        )
        relocated += n_empty
        shift = float(((C_new - C) ** 2).sum())
        same = labels_old is not None and bool(torch.equal(st.labels, labels_old))
        if comm.active:
            same = comm.sum_scalars(0.0 if same else 1.0)[0] == 0.0
        C = C_new
        # relocations that move nothing (duplicate points, fewer distinct points than k) repeat
        # forever: the centroids are then a fixed point too
        if same and (n_empty == 0 or shift == 0.0):
            converged = True
            break
        labels_old = st.labels
        if tol > 0 and shift <= tol:
            converged = True
            break
    final = cluster_stats(
        X, C, 0.0, "hard", sample_weight=sample_weight, X_sq=X_sq,
        chunk_size=chunk_size, return_labels=True, comm=comm,
    )
    assert final.labels is not None
    return LloydResult(C, final.labels, final.inertia, it, converged, relocated)


@torch.no_grad()
def soft_lloyd(
    X: Tensor,
    C0: Tensor,
    T: float,
    assignment: str,
    *,
    sample_weight: Tensor | None = None,
    max_iter: int = 100,
    tol: float = 0.0,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
) -> tuple[Tensor, int, Stats]:
    r"""Iterate ``c_j <- m_j`` at temperature ``T`` to a fixed point of the soft-Lloyd map.

    Stops when ``sum_j ||c_j^new - c_j||^2 <= tol`` or after ``max_iter`` iterations. Returns
    the centroids, the iterations run and the statistics (objectives included) at the returned
    centroids.
    """
    comm = comm or Comm.auto()
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    C = C0.clone()
    st: Stats | None = None
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (read after)
        st = cluster_stats(
            X, C, T, assignment, sample_weight=sample_weight, X_sq=X_sq,
            chunk_size=chunk_size, comm=comm, objective=False,
        )
        C_new, _ = _update(
            X, C, st, chunk_size=chunk_size, comm=comm, empty_tol=_empty_tol(float(st.N.sum()))
        )
        shift = float(((C_new - C) ** 2).sum())
        C = C_new
        if shift <= tol:
            break
    st = cluster_stats(
        X, C, T, assignment, sample_weight=sample_weight, X_sq=X_sq,
        chunk_size=chunk_size, comm=comm,
    )
    return C, it, st


@dataclass
class AnnealResult:
    """Outcome of :func:`anneal`: final centroids, the temperatures actually run, and per
    temperature the centroids, ``F_T``, ``J``, soft-point count and iterations (``history``)."""

    C: Tensor
    temperatures: list[float]
    n_iter: int
    history: list[dict[str, object]] = field(default_factory=list)
    hard: bool = False


@torch.no_grad()
def anneal(
    X: Tensor,
    C0: Tensor,
    temperatures: Sequence[float] | np.ndarray,
    assignment: str,
    *,
    sample_weight: Tensor | None = None,
    max_iter: int = 100,
    tol: float = 0.0,
    perturbation: float = 0.0,
    generator: torch.Generator | None = None,
    stop_when_hard: bool = True,
    stop_gap: float = 0.0,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    keep_history: bool = True,
    rebalance: bool = True,
    merge_tol: float = 1e-6,
    progress: Callable[[float, int], None] | None = None,
) -> AnnealResult:
    r"""Deterministic annealing: the soft-Lloyd fixed point at each temperature, warm-started.

    Before each temperature the centroids get a symmetric-breaking perturbation of standard
    deviation ``perturbation`` (absolute units; drawn from ``generator`` identically on every
    rank), so that coincident centroids can split at a critical temperature. Stops after the
    first temperature where every membership is one-hot, or where the relaxation gap
    ``(J - F_T) / J`` is at most ``stop_gap`` (``stop_when_hard``).

    With ``rebalance`` (the default), centroids that are still coincident after a temperature
    (squared distance ``<= merge_tol * T``) are spare copies of one cluster: they are moved, one at
    a time, to the cluster with the largest within-cluster variance per copy
    (:func:`rebalance_duplicates`). Without it, copies shared out at an early split stay where they
    landed, and a cluster spanning two groups of points can be left with no copy to split into.
    """
    comm = comm or Comm.auto()
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    C = C0.clone()
    run: list[float] = []
    history: list[dict[str, object]] = []
    total = 0
    hard = False
    for T in temperatures:
        T = float(T)
        if perturbation > 0:
            noise = torch.randn(C.shape, generator=generator, dtype=torch.float64)
            C = C + (perturbation * noise).to(C.dtype).to(C.device)
        C, it, st = soft_lloyd(
            X, C, T, assignment, sample_weight=sample_weight, max_iter=max_iter, tol=tol,
            X_sq=X_sq, chunk_size=chunk_size, comm=comm,
        )
        total += it
        run.append(T)
        if rebalance and T > 0:
            C = rebalance_duplicates(
                X, C, T, sample_weight=sample_weight, X_sq=X_sq, chunk_size=chunk_size,
                comm=comm, generator=generator, merge_tol=merge_tol,
            )
        if keep_history:
            history.append(
                {
                    "T": T,
                    "C": C.detach().cpu().clone(),
                    "objective": st.objective,
                    "inertia": st.inertia,
                    "n_soft": st.n_soft,
                    "n_iter": it,
                }
            )
        if progress is not None:
            progress(T, it)
        if stop_when_hard and (
            st.n_soft == 0 or st.inertia - st.objective <= stop_gap * abs(st.inertia)
        ):
            hard = True
            break
    return AnnealResult(C, run, total, history, hard)


@torch.no_grad()
def rebalance_duplicates(
    X: Tensor,
    C: Tensor,
    T: float,
    *,
    sample_weight: Tensor | None = None,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    generator: torch.Generator | None = None,
    merge_tol: float = 1e-6,
) -> Tensor:
    r"""Move spare copies of coincident centroids to the clusters that most need splitting.

    Groups ``g`` of centroids within squared distance ``merge_tol * T`` of each other act as one
    cluster with ``m_g`` copies. With ``V_g`` the weighted within-cluster sum of squares of the
    group (nearest-group assignment), a copy is moved from group ``L`` to group ``H`` while
    ``V_L / (m_L - 1) < V_H / m_H``; it is placed at ``c_H`` plus an offset of length
    ``1e-3 sqrt(T)``, so it splits from ``c_H`` as soon as ``T`` is below that cluster's
    critical temperature. Returns new centroids (the input is not modified).
    """
    comm = comm or Comm.auto()
    k = C.shape[0]
    d2 = torch.cdist(C.double(), C.double()).square_()  # (k, k)
    thr = merge_tol * T
    rep = list(range(k))
    for j in range(k):
        for i in range(j):
            if rep[i] == i and d2[i, j] <= thr:
                rep[j] = i
                break
    reps = sorted(set(rep))
    if len(reps) == k:
        return C
    copies = {g: [j for j in range(k) if rep[j] == g] for g in reps}
    R = C[reps]  # (g, d) one centroid per group
    V = torch.zeros(len(reps), dtype=torch.float64, device=X.device)
    R_sq = row_norms_sq(R)
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    for s in iter_chunks(X.shape[0], chunk_rows(X.shape[0], len(reps), chunk_size)):
        gmin, lab = cross_term(X[s], R, R_sq).min(dim=1)
        dmin = gmin.add_(X_sq[s]).clamp_(min=0.0).double()
        if sample_weight is not None:
            dmin = dmin * sample_weight[s].double()
        V.index_add_(0, lab, dmin)
    comm.sum_(V)
    C = C.clone()
    m = {g: len(copies[g]) for g in reps}
    pos = {g: i for i, g in enumerate(reps)}
    while True:
        donors = [g for g in reps if m[g] > 1]
        if not donors:
            break
        low = min(donors, key=lambda g: float(V[pos[g]]) / (m[g] - 1))
        high = max(reps, key=lambda g: float(V[pos[g]]) / m[g])
        if high == low or not float(V[pos[low]]) / (m[low] - 1) < float(V[pos[high]]) / m[high]:
            break
        j = copies[low].pop()
        m[low] -= 1
        direction = torch.randn(C.shape[1], generator=generator, dtype=torch.float64)
        direction = direction / direction.norm().clamp(min=1e-300)
        C[j] = C[high] + (1e-3 * math.sqrt(T) * direction).to(C.dtype).to(C.device)
        copies[high].append(j)
        m[high] += 1
    return C


# ---------------------------------------------------------------------------------------------
# swap search: move a centroid from where it is least needed to where it is most needed
# ---------------------------------------------------------------------------------------------


@dataclass
class SwapResult:
    """Outcome of :func:`swap_search`: the Lloyd fixed point reached, its labels and ``J``, the
    Lloyd iterations run by every trial, the swaps kept and the swaps tried."""

    C: Tensor
    labels: Tensor
    inertia: float
    n_iter: int
    n_swaps: int
    n_trials: int
    converged: bool


@torch.no_grad()
def swap_costs(
    X: Tensor,
    C: Tensor,
    labels: Tensor,
    *,
    sample_weight: Tensor | None = None,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    generator: torch.Generator | None = None,
    power_iter: int = 5,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""What removing each centroid costs and what splitting each cluster in two gains.

    With ``labels`` the nearest centroid of each point (``k >= 2``):

    * ``removal[a] = sum_{i in S_a} w_i (d_i^(2) - d_i^(1))``: the increase of ``J`` when ``c_a``
      is deleted and its points go to their second-nearest centroid (exact, others fixed);
    * ``gain[j] = (n_+ n_- / n_j) ||m_+ - m_-||^2``: the decrease of ``J`` when cluster ``j`` is
      cut by the hyperplane through ``c_j`` normal to its principal axis (``power_iter`` power
      iterations on the weighted scatter matrix, from a random start drawn from ``generator``)
      and each half gets its mean ``m_+``, ``m_-`` (exact for that partition; 0 when a half is
      empty);
    * ``halves`` (k, 2, d): those means.

    All sums are accumulated in float64 and reduced over the ranks; nothing larger than a chunk.
    """
    comm = comm or Comm.auto()
    n, d = X.shape
    k = C.shape[0]
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    C_sq = row_norms_sq(C)
    removal = torch.zeros(k, dtype=torch.float64, device=X.device)
    rows = chunk_rows(n, max(k, d), chunk_size)
    for s in iter_chunks(n, rows):
        two = cross_term(X[s], C, C_sq).topk(2, dim=1, largest=False).values  # (b, 2)
        extra = (two[:, 1] - two[:, 0]).double()  # (b,) the X_sq terms cancel
        if sample_weight is not None:
            extra = extra * sample_weight[s].double()
        removal.index_add_(0, labels[s], extra)
    comm.sum_(removal)
    V = torch.randn(k, d, generator=generator, dtype=torch.float64).to(X.device)  # (k, d)
    for _ in range(power_iter):  # V_j <- Sigma_j V_j, Sigma_j the scatter of cluster j
        U = torch.zeros(k, d, dtype=torch.float64, device=X.device)
        for s in iter_chunks(n, rows):
            lab = labels[s]
            Y = (X[s] - C[lab]).double()  # (b, d)
            proj = (Y * V[lab]).sum(dim=1)  # (b,)
            if sample_weight is not None:
                proj = proj * sample_weight[s].double()
            U.index_add_(0, lab, Y * proj.unsqueeze(1))
        comm.sum_(U)
        V = U / U.norm(dim=1, keepdim=True).clamp(min=1e-300)  # 0 for a cluster of one point
    count = torch.zeros(2 * k, dtype=torch.float64, device=X.device)
    total = torch.zeros(2 * k, d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, rows):
        lab = labels[s]
        Xc = X[s].double()
        side = ((Xc - C[lab].double()) * V[lab]).sum(dim=1) > 0  # (b,)
        half = 2 * lab + side.long()  # (b,)
        wc = torch.ones_like(side, dtype=torch.float64) if sample_weight is None \
            else sample_weight[s].double()
        count.index_add_(0, half, wc)
        total.index_add_(0, half, Xc * wc.unsqueeze(1))
    comm.sum_(count, total)
    count, total = count.view(k, 2), total.view(k, 2, d)
    halves = total / count.clamp(min=1e-300).unsqueeze(2)  # (k, 2, d)
    both = (count > 0).all(dim=1)  # (k,)
    between = count.prod(dim=1) / count.sum(dim=1).clamp(min=1e-300)
    gain = torch.where(both, between * (halves[:, 0] - halves[:, 1]).square().sum(dim=1), 0.0)
    return removal, gain, halves.to(X.dtype)


@torch.no_grad()
def swap_search(
    X: Tensor,
    start: LloydResult,
    *,
    sample_weight: Tensor | None = None,
    max_swaps: int = 10,
    n_candidates: int = 3,
    slack: float = 0.1,
    max_iter: int = 300,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    generator: torch.Generator | None = None,
) -> SwapResult:
    r"""Local search over Lloyd fixed points by moving one centroid at a time (a swap).

    A swap deletes centroid ``a`` and splits cluster ``j`` in two (:func:`swap_costs`): ``c_a``
    and ``c_j`` become the means of ``j``'s halves. Its predicted change of ``J`` is
    ``removal[a] - gain[j]``; the ``n_candidates`` swaps with the lowest prediction, among those
    predicted to cost at most ``slack * J``, are tried in that order, each by hard Lloyd
    iterations from the swapped centroids; the first whose Lloyd fixed point has a lower ``J`` is
    kept and the search starts again from it. Stops after a round with no improvement or after
    ``max_swaps`` kept swaps. ``J`` never increases and the result is a Lloyd fixed point.

    Annealing allocates centroids to regions as clusters split; when two splits compete, the
    allocation can end one centroid short in one region and one spare in another, which no
    Lloyd iteration undoes. The removal cost and the split gain find such pairs in a few
    passes (Kanungo et al. 2004 show single swaps give a constant-factor approximation).
    """
    comm = comm or Comm.auto()
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    best = start
    n_iter = n_swaps = n_trials = 0
    k = start.C.shape[0]
    while n_swaps < max_swaps and k >= 2 and best.inertia > 0:
        removal, gain, halves = swap_costs(
            X, best.C, best.labels, sample_weight=sample_weight, X_sq=X_sq,
            chunk_size=chunk_size, comm=comm, generator=generator,
        )
        top = min(k, n_candidates + 1)
        cheap = removal.argsort()[:top].tolist()
        useful = [j for j in gain.argsort(descending=True)[:top].tolist() if gain[j] > 0]
        pairs = sorted(
            (float(removal[a] - gain[j]), a, j) for a in cheap for j in useful if a != j
        )
        pairs = [p for p in pairs if p[0] <= slack * best.inertia][:n_candidates]
        improved = False
        for _, a, j in pairs:
            C = best.C.clone()
            C[a], C[j] = halves[j, 0], halves[j, 1]
            trial = lloyd(X, C, sample_weight=sample_weight, max_iter=max_iter, X_sq=X_sq,
                          chunk_size=chunk_size, comm=comm)
            n_iter += trial.n_iter
            n_trials += 1
            if trial.inertia < best.inertia * (1.0 - 1e-12):
                best, improved = trial, True
                n_swaps += 1
                break
        if not improved:
            break
    return SwapResult(best.C, best.labels, best.inertia, n_iter, n_swaps, n_trials,
                      best.converged)


# ---------------------------------------------------------------------------------------------
# initialisation
# ---------------------------------------------------------------------------------------------


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


@torch.no_grad()
def kmeans_plusplus(
    X: Tensor,
    n_clusters: int,
    *,
    sample_weight: Tensor | None = None,
    generator: torch.Generator | None = None,
    n_local_trials: int | None = None,
    X_sq: Tensor | None = None,
    chunk_size: int | None = None,
    comm: Comm | None = None,
) -> Tensor:
    r"""Greedy k-means++ seeding (Arthur & Vassilvitskii 2007): each new centre is the best of
    ``2 + log k`` candidates drawn with probability ``w_i D(x_i)^2``.

    Draws come from ``generator`` (the same on every rank) as thresholds on the cumulative
    weighted potential of the concatenated data, so a distributed run picks the same points as a
    single process on the concatenated data.
    """
    comm = comm or Comm.auto()
    n, d = X.shape
    k = n_clusters
    trials = n_local_trials or 2 + int(math.log(k))
    w = torch.ones(n, dtype=torch.float64, device=X.device) if sample_weight is None \
        else sample_weight.double()
    X_sq = row_norms_sq(X) if X_sq is None else X_sq
    counts = comm.counts(n)
    centers = X.new_empty((k, d))

    def pick(weights: Tensor, n_draw: int) -> Tensor:
        """Points drawn with probability proportional to ``weights`` (local (n,)), over ranks."""
        cum = weights.cumsum(0)  # (n,)
        local_total = float(cum[-1]) if n else 0.0
        totals = comm.all_gather(torch.tensor([local_total], dtype=torch.float64)).tolist() \
            if comm.active else [local_total]
        grand = math.fsum(totals)
        # the same draws on every rank, whatever its number of rows
        u = torch.rand(n_draw, generator=generator, dtype=torch.float64).tolist()
        out = X.new_zeros((n_draw, d))
        for t, ut in enumerate(u):
            _, local = _draw(cum, ut * grand, totals, counts, comm)
            if local >= 0:
                out[t] = X[local]
        comm.sum_(out)  # only the owner contributed a non-zero row
        return out

    first = pick(w, 1)
    centers[0] = first[0]
    closest = _min_dist(X, first, X_sq, chunk_size)  # (n,)
    for c in range(1, k):
        cand = pick(w * closest.double(), trials)  # (trials, d)
        pot = _potentials(X, cand, closest, X_sq, w, chunk_size)  # (trials,)
        comm.sum_(pot)
        best = int(pot.argmin())
        centers[c] = cand[best]
        closest = torch.minimum(closest, _min_dist(X, cand[best : best + 1], X_sq, chunk_size))
    return centers


def _potentials(
    X: Tensor, cand: Tensor, closest: Tensor, X_sq: Tensor, w: Tensor, chunk_size: int | None
) -> Tensor:
    """``sum_i w_i min(closest_i, ||x_i - cand_t||^2)`` for each candidate ``t`` (trials,), in
    float64: one chunked pass, never a (trials, n) matrix."""
    pot = torch.zeros(cand.shape[0], dtype=torch.float64, device=X.device)
    C_sq = row_norms_sq(cand)
    for s in iter_chunks(X.shape[0], chunk_rows(X.shape[0], cand.shape[0], chunk_size)):
        D = cross_term(X[s], cand, C_sq).add_(X_sq[s].unsqueeze(1)).clamp_(min=0.0)  # (b, t)
        pot += w[s] @ torch.minimum(D, closest[s].unsqueeze(1)).double()
    return pot


def _min_dist(X: Tensor, C: Tensor, X_sq: Tensor, chunk_size: int | None) -> Tensor:
    out = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    C_sq = row_norms_sq(C)
    for s in iter_chunks(X.shape[0], chunk_rows(X.shape[0], C.shape[0], chunk_size)):
        out[s] = cross_term(X[s], C, C_sq).amin(dim=1).add_(X_sq[s]).clamp_(min=0.0)
    return out


# ---------------------------------------------------------------------------------------------
# the gradient view
# ---------------------------------------------------------------------------------------------


def gradient_step(
    X: Tensor,
    C: Tensor,
    T: float,
    assignment: str,
    *,
    sample_weight: Tensor | None = None,
    lr: float | Tensor | None = None,
    objective: str = "relaxed",
) -> tuple[Tensor, Tensor, Tensor]:
    r"""One explicit gradient step on the centroids through autograd.

    ``objective="relaxed"`` differentiates ``F_T`` (the layer's objective, entropy included);
    ``objective="bare"`` differentiates ``sum_ij w_i r_ij d_ij`` with ``R`` depending on ``C``
    but no entropy term, which is *not* ``2 N_j (c_j - m_j)`` at finite ``T``.
    With ``lr=None`` the per-cluster step ``eta_j = 1 / (2 N_j)`` is used, which makes the step
    land on ``m_j`` (the soft-Lloyd update; Lloyd's update when hard). Returns
    ``(C_new, grad, N)``.
    """
    from .distances import sq_distances
    from .objectives import objective_from_distances

    Cp = C.detach().clone().requires_grad_(True)
    D = sq_distances(X, Cp)  # (n, k)
    hard = assignment == "hard" or T == 0.0
    if objective == "relaxed" or hard:
        F = objective_from_distances(D, T, "hard" if hard else assignment, sample_weight)
        if hard:
            # J = sum_i w_i sum_j r_ij d_ij with R piecewise constant: its gradient is the same
            R = torch.zeros_like(D).scatter_(1, D.detach().argmin(1, keepdim=True), 1.0)
            F = ((R * D).sum(1) * (1 if sample_weight is None else sample_weight)).sum()
    elif objective == "bare":
        R = get_mapping(assignment)(D / (-2.0 * T), dim=1)
        F = ((R * D).sum(1) * (1 if sample_weight is None else sample_weight)).sum()
    else:
        raise ValueError(f"objective must be 'relaxed' or 'bare'; got {objective!r}")
    (grad,) = torch.autograd.grad(F, Cp)
    with torch.no_grad():
        R = (
            torch.zeros_like(D).scatter_(1, D.argmin(1, keepdim=True), 1.0)
            if hard
            else get_mapping(assignment)(D / (-2.0 * T), dim=1)
        )
        w = torch.ones(X.shape[0], dtype=X.dtype, device=X.device) if sample_weight is None \
            else sample_weight
        N = w @ R  # (k,)
        if lr is None:
            eta = 1.0 / (2.0 * N.clamp(min=torch.finfo(N.dtype).tiny))
            C_new = torch.where((N > 0).unsqueeze(1), C - eta.unsqueeze(1) * grad, C)
        else:
            C_new = C - lr * grad
    return C_new.detach(), grad.detach(), N


def to_numpy(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _warn(message: str, category: type[Warning]) -> None:
    warnings.warn(message, category, stacklevel=3)
