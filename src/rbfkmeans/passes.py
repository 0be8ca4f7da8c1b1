r"""One pass over the data: the pass context, the soft-Lloyd statistics, the nearest centroids.

Every solver is built on chunked passes over (possibly sharded) data held by a :class:`Data`
context: the points ``X`` (n, d), their weights ``w`` (n,), the row norms ``||x_i||^2``, the
process group (:class:`~rbfkmeans.comm.Comm`, local unless one is handed in) and the chunk budget.
No pass holds more than ``chunk_rows x k`` memberships or distances.

:func:`cluster_stats` returns the sufficient statistics of the soft-Lloyd step at temperature
``T`` for an assignment ``m`` (:mod:`rbfkmeans.assignments`):

.. math::

    R = m(-D / 2T), \qquad N_j = \sum_i w_i r_{ij}, \qquad S_j = \sum_i w_i r_{ij} x_i,

plus the relaxed objective ``F_T`` and the k-means objective ``J`` at the current centroids. The
update ``c_j <- m_j = S_j / N_j`` is the gradient step ``c_j - eta_j dF_T/dc_j`` with the
per-cluster step ``eta_j = 1 / (2 N_j)`` (because ``dF_T/dc_j = 2 N_j (c_j - m_j)``); at ``T = 0``
(a hard assignment) ``N_j = |S_j|`` and it is exactly one Lloyd iteration.

:func:`nearest` is the one chunked nearest (or two-nearest) centroid reducer: prediction,
relocation of empty clusters, duplicate rebalancing, k-means++ and the swap search use it.
Sums are reduced over the ranks of ``data.comm``, so every rank gets the statistics of the
concatenated data; labels and per-point distances stay local.

Spherical k-means (``Data(..., metric="cosine")``, :mod:`rbfkmeans.metrics`) runs on the same
passes: the context holds the normalised rows, the solvers project their updates back onto the
sphere (:meth:`Data.project`), and ``Stats`` reports the spherical objectives (half the Euclidean
ones of the normalised rows).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import kernels
from ._validation import (
    check_bool,
    check_finite,
    check_matrix,
    check_positive_int,
    check_real,
    check_temperature,
    check_within_reach,
    largest_magnitude,
)
from .assignments import Assignment, get_assignment
from .comm import Comm
from .distances import chunk_rows, cross_term, iter_chunks, row_min, row_norms_sq
from .errors import NonFiniteError
from .metrics import Metric, get_metric, unit_rows
from .sparse import SparseRows

__all__ = ["Data", "Nearest", "Stats", "check_data", "check_labels", "cluster_stats", "nearest",
           "nearest_labels"]


class Data:
    """The context of a pass: ``X`` (n, d), weights, row norms, process group, chunk budget.

    Parameters
    ----------
    X : Tensor (n, d) or SparseRows
        float32 or float64 points (this rank's shard under ``torch.distributed``); never modified
        (copied once when not row-major). A :class:`~rbfkmeans.sparse.SparseRows` stands in for
        CSR data: the passes compute from its stored entries (:mod:`rbfkmeans.sparse`).
    sample_weight : Tensor (n,), optional
        Non-negative finite weights (converted to ``X``'s dtype and device).
    chunk_size : int, optional
        Rows per chunk (default :func:`rbfkmeans.distances.chunk_rows`: about ``2^20`` entries).
    comm : Comm, optional
        Reductions over a process group; default local.
    validate : bool, default True
        Check ``X`` for NaN/inf (one reduction); off where the caller has checked already.
        Either way the first pass at some centroids reads the largest ``|x|`` (one reduction,
        kept: :attr:`largest`), so that rows and centroids whose squared distances overflow
        the dtype raise (:meth:`check_centroids`).
    metric : {"sqeuclidean", "cosine"}, default "sqeuclidean"
        The geometry (:mod:`rbfkmeans.metrics`). With ``"cosine"`` the pass context holds the
        rows of ``X`` normalised (:func:`rbfkmeans.metrics.unit_rows`: ``X`` itself where its
        rows are unit already, else a new tensor; a zero row raises), :meth:`project` maps updated
        centroids back onto the unit sphere, and the objectives of :func:`cluster_stats` are the
        spherical ones (half the Euclidean ``J`` and ``F_T`` of the normalised rows).
    """

    def __init__(
        self,
        X: Tensor | SparseRows,
        sample_weight: Tensor | None = None,
        *,
        chunk_size: int | None = None,
        comm: Comm | None = None,
        validate: bool = True,
        metric: str | Metric = "sqeuclidean",
    ) -> None:
        if not isinstance(X, SparseRows):
            check_matrix(X, "X", "(n, d)")
        if X.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"X must be float32 or float64; got {X.dtype}")
        if X.device.type == "meta":  # no values to compute with (metadata only: no scan)
            raise ValueError("X must hold values; got a tensor on the 'meta' device")
        if check_bool(validate, "validate"):
            check_finite(X.val if isinstance(X, SparseRows) else X, "X")
        if sample_weight is not None:
            if not isinstance(sample_weight, Tensor):
                raise TypeError(
                    f"sample_weight must be a torch.Tensor; got {type(sample_weight).__name__}"
                )
            if sample_weight.shape != (X.shape[0],):
                raise ValueError(f"sample_weight must have shape ({X.shape[0]},); got "
                                 f"{tuple(sample_weight.shape)}")
            sample_weight = sample_weight.to(device=X.device, dtype=X.dtype)
            if validate:
                check_finite(sample_weight, "sample_weight")
                if bool((sample_weight < 0).any()):
                    raise ValueError("sample_weight must be >= 0; got a negative entry "
                                     f"{sample_weight.min().item()}")
        if chunk_size is not None:
            chunk_size = check_positive_int(chunk_size, "chunk_size")
        if comm is not None and not isinstance(comm, Comm):
            raise TypeError(f"comm must be a rbfkmeans.comm.Comm; got {type(comm).__name__}")
        self.metric = get_metric(metric)
        if isinstance(X, SparseRows):
            if self.metric.spherical:  # the unit rows, as stored entries
                X = X.unit_rows("X")
        elif self.metric.spherical:  # only read: rows normalised already are not copied
            X = unit_rows(X, "X")
        self.X: Any = X.contiguous()  # row-major: every pass reads rows (or sparse rows)
        self.w = sample_weight
        self.chunk_size = chunk_size
        self.comm = comm if comm is not None else Comm()
        self._X_sq: Tensor | None = None
        # max |x| (unit rows: at most 1, no scan)
        self._X_max: float | None = 1.0 if self.metric.spherical else None

    @property
    def n(self) -> int:
        """Local number of rows."""
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    @property
    def X_sq(self) -> Tensor:
        """``||x_i||^2`` (n,), computed on first use."""
        if self._X_sq is None:
            self._X_sq = row_norms_sq(self.X)
        return self._X_sq

    @property
    def largest(self) -> float:
        """``max |x_ij|`` of the local rows (0 when there are none), one reduction on first use.
        NaN or inf (in a context built with ``validate=False``) raise ``ValueError`` naming
        ``X``."""
        if self._X_max is None:
            big = largest_magnitude(self.X)
            if not math.isfinite(big):
                check_finite(self.X.val if isinstance(self.X, SparseRows) else self.X, "X")
            self._X_max = big
        return self._X_max

    def rows(self, width: int) -> int:
        """Rows per chunk for ``width`` entries per row (``k`` memberships, say)."""
        return chunk_rows(self.n, width, self.chunk_size, self.X.device)

    def chunks(self, width: int) -> Iterator[slice]:
        """Row slices of at most :meth:`rows` rows covering the local data."""
        return iter_chunks(self.n, self.rows(width))

    def weight(self, s: slice) -> Tensor | None:
        """The weights of the rows ``s`` (None when unweighted)."""
        return None if self.w is None else self.w[s]

    def weighing_rows(self) -> Data:
        """The rows that weigh something: this data itself when unweighted or when no weight is
        0 (nothing copied), else a copy of the rows of positive weight (the same metric, chunks
        and processes). A random sample of them cannot weigh nothing in all. Under
        ``torch.distributed`` every rank copies where one has a weight of 0 (a collective), so
        that all take the same branch where the caller asks whether it got the data itself."""
        some_zero = self.w is not None and not bool((self.w > 0).all())
        if self.comm.active:
            some_zero = self.comm.sum_scalars(float(some_zero))[0] > 0
        if not some_zero:
            return self
        assert self.w is not None  # weights of 1 stand in on ranks without them (estimator)
        keep = (self.w > 0).nonzero().squeeze(1)
        rows = Data(self.X[keep], self.w[keep], chunk_size=self.chunk_size, comm=self.comm,
                    validate=False, metric=self.metric)
        rows._X_max = self._X_max  # a bound of the subset's too (not read here: no scan)
        return rows

    def total_weight(self) -> float:
        """``sum_i w_i`` over all ranks (``n`` when unweighted)."""
        local = float(self.n) if self.w is None else float(self.w.sum(dtype=torch.float64))
        return self.comm.sum_scalars(local)[0]

    def project(self, C: Tensor, fallback: Tensor | None = None, name: str = "C") -> Tensor:
        """Centroids ``C`` (k, d) on this metric's set of centroids: ``C`` itself, or for cosine
        its rows normalised (a zero row takes ``fallback``'s row, or raises without one)."""
        return self.metric.project(C, fallback, name)

    def check_centroids(self, C: Any, name: str = "C") -> Tensor:
        """Raise unless ``C`` is a finite (k, d) tensor with this data's ``d`` whose squared
        distances to the rows are finite in the data's dtype; returns it in the data's dtype and
        device (no copy when it already is). See :meth:`centroids_in_reach`."""
        return self.centroids_in_reach(C, name)[0]

    def centroids_in_reach(self, C: Any, name: str = "C") -> tuple[Tensor, float]:
        """:meth:`check_centroids`, and the bound ``reach = max |x| + max |c|`` of every entry
        of ``x_i - c_j``. Finite values whose squared distances ``d reach^2`` overflow the
        data's dtype would give infinite distances, NaN memberships and arbitrary labels: they
        raise ``ValueError`` naming ``name`` where the centroids are the larger (a centroid at
        ``1e308``), else ``X`` (:func:`~rbfkmeans._validation.check_within_reach`). One
        reduction over ``C`` (NaN and inf raise naming ``name``) and the kept
        :attr:`largest`: nothing per row. Under ``torch.distributed`` only ``C`` (the same on
        every rank) is checked, against the origin: one rank's rows must not raise while the
        others wait in the pass's reduction (rows out of reach there give non-finite sums on
        every rank, which the callers check)."""
        check_matrix(C, name, "(k, d)")
        if C.shape[0] < 1 or C.shape[1] != self.d:
            raise ValueError(f"{name} must have shape (k, {self.d}) with k >= 1 to match X; "
                             f"got {tuple(C.shape)}")
        c = largest_magnitude(C)
        if not math.isfinite(c):
            check_finite(C, name)  # says how many and one of them
        if self.comm.active:
            if self._X_max is None:
                self._X_max = largest_magnitude(self.X)  # NaN or inf: never plain scores
            check_within_reach(0.0, c, self.d, self.X.dtype, name=name,
                               far_from="the rows of X")
            return C.to(device=self.X.device, dtype=self.X.dtype), self._X_max + c
        x = self.largest
        if c > x:
            check_within_reach(x, c, self.d, self.X.dtype, name=name, far_from="the rows of X")
        else:
            check_within_reach(x, c, self.d, self.X.dtype, far_from=f"the centroids {name}")
        return C.to(device=self.X.device, dtype=self.X.dtype), x + c


def check_data(data: Any, name: str = "data") -> Data:
    """Raise ``TypeError`` unless ``data`` is a pass context :class:`Data` (wrap a tensor ``X``
    as ``Data(X)``)."""
    if not isinstance(data, Data):
        raise TypeError(f"{name} must be a rbfkmeans.passes.Data (the pass context: "
                        f"Data(X, sample_weight)); got {type(data).__name__}")
    return data


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


def check_labels(data: Data, labels: Any, k: int) -> Tensor:
    """Raise unless ``labels`` is an int64 tensor (n,) of this rank's rows with values in
    ``[0, k)``; returns it."""
    check_data(data)
    k = check_positive_int(k, "k")
    if not isinstance(labels, Tensor) or labels.shape != (data.n,) or labels.dtype != torch.long:
        raise ValueError(f"labels must be an int64 tensor of shape ({data.n},); got "
                         f"{getattr(labels, 'dtype', type(labels).__name__)} "
                         f"{tuple(getattr(labels, 'shape', ()))}")
    if data.n and (int(labels.min()) < 0 or int(labels.max()) >= k):
        raise ValueError(f"labels must lie in [0, {k}); got values in "
                         f"[{int(labels.min())}, {int(labels.max())}]")
    return labels


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
        N, S, inertia = kernels.hard_pass(data.X, C, data.w, labels=labels, objective=objective)
    elif fused_soft:  # every group a single centroid: the mapping of the scores themselves
        N, S, _, acc, _ = kernels.group_pass(
            data.X, C, torch.ones(k, dtype=torch.long), T, entry.name, data.w,
            objective=objective, split=None, hard_tol=hard_tol)
        obj, inertia, n_soft = acc.to(dev)  # F_T, J, the soft rows' weight (float64)
    for s in () if fused or fused_soft else data.chunks(k):
        Xc = data.X[s]  # (b, d)
        w = data.weight(s)  # (b,)
        Xw = Xc if w is None else Xc * w.unsqueeze(1)  # (b, d)
        if hard:
            # (b,), (b,): the minimum of ||c||^2 - 2 x.c and its index
            gmin, lab = row_min(cross_term(Xc, C, C_sq), overwrite=True)
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


@torch.no_grad()
def nearest_labels(data: Data, C: Tensor) -> Tensor:
    """The nearest centroid of each local point (n,), ties to the lowest index, computed as the
    hard passes of a fit compute it (the fused kernel on the CPU), so that a fit's labels and a
    prediction on the same rows agree also where two centroids are equally near up to
    rounding."""
    C = check_data(data).check_centroids(C)
    if kernels.usable(data.X, C.shape[0], scores=True):
        labels = torch.empty(data.n, dtype=torch.long)
        kernels.hard_pass(data.X, C, None, labels=labels, objective=False)
        return labels
    return nearest(data, C).labels


@dataclass
class Nearest:
    """Per local point: squared distance to the nearest centroid(s) and its index.

    ``dist`` and ``labels`` are (n,) for the nearest centroid, (n, 2) with ``two=True`` (nearest
    first; ties to the lowest index)."""

    dist: Tensor
    labels: Tensor


@torch.no_grad()
def nearest(data: Data, C: Tensor, *, two: bool = False) -> Nearest:
    """The nearest centroid of each local point (or its two nearest, ``two=True``), with the
    squared distances ``d_ij = ||x_i||^2 + (||c_j||^2 - 2 x_i.c_j)``, clamped at 0; one chunked
    pass, nothing larger than a chunk of distances. Needs ``k >= 2`` for ``two``."""
    C = check_data(data).check_centroids(C)
    k = C.shape[0]
    if check_bool(two, "two") and k < 2:
        raise ValueError(f"two nearest centroids need k >= 2; got C of shape {tuple(C.shape)}")
    C_sq = row_norms_sq(C)
    shape = (data.n, 2) if two else (data.n,)
    dist = torch.empty(shape, dtype=data.X.dtype, device=data.X.device)
    labels = torch.empty(shape, dtype=torch.long, device=data.X.device)
    X_sq = data.X_sq
    for s in data.chunks(k):
        G = cross_term(data.X[s], C, C_sq)  # (b, k)
        if two:  # the least, then the least of the others (two reductions beat topk's sort)
            g1, lab1 = row_min(G)
            g2, lab2 = row_min(G.scatter_(1, lab1.unsqueeze(1), math.inf), overwrite=True)
            g, lab = torch.stack((g1, g2), dim=1), torch.stack((lab1, lab2), dim=1)
            dist[s] = g.add_(X_sq[s].unsqueeze(1)).clamp_(min=0.0)
        else:
            g, lab = row_min(G, overwrite=True)  # (b,)
            dist[s] = g.add_(X_sq[s]).clamp_(min=0.0)
        labels[s] = lab
    return Nearest(dist, labels)
