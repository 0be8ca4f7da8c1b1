r"""One pass over the data: the pass context and the nearest centroids.

Every solver is built on chunked passes over (possibly sharded) data held by a :class:`Data`
context: the points ``X`` (n, d), their weights ``w`` (n,), the row norms ``||x_i||^2``, the
process group (:class:`~rbfkmeans.comm.Comm`, local unless one is handed in) and the chunk budget.
No pass holds more than ``chunk_rows x k`` memberships or distances. Every pass first checks that
its centroids are within reach of the rows (:meth:`Data.centroids_in_reach`).

:func:`nearest` is the one chunked nearest (or two-nearest) centroid reducer: prediction,
relocation of empty clusters, duplicate rebalancing, k-means++ and the swap search use it;
:func:`nearest_labels` gives prediction's labels as a fit's hard passes compute them. Labels and
per-point distances stay local to each rank. The statistics pass of the soft-Lloyd step
(``N``, ``S``, ``F_T``, ``J``) is :func:`rbfkmeans.stats.cluster_stats`.

Spherical k-means (``Data(..., metric="cosine")``, :mod:`rbfkmeans.metrics`) runs on the same
passes: the context holds the normalised rows, the solvers project their updates back onto the
sphere (:meth:`Data.project`), and the statistics report the spherical objectives (half the
Euclidean ones of the normalised rows).
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
    check_within_reach,
    largest_magnitude,
)
from .comm import Comm
from .copies import centroid_copies, distinct, least, least_two
from .distances import chunk_rows, cross_term, iter_chunks, row_norms_sq
from .metrics import Metric, get_metric, unit_rows
from .sparse import SparseRows

__all__ = ["Data", "Nearest", "check_data", "check_labels", "nearest", "nearest_labels"]


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
    pass, nothing larger than a chunk of distances. Needs ``k >= 2`` for ``two``.

    Equal centroids are one centroid to the pass (:mod:`rbfkmeans.copies`): a point takes the
    lowest index of its nearest, and with ``two`` the next copy of it at the same distance
    where there is one."""
    C = check_data(data).check_centroids(C)
    k = C.shape[0]
    if check_bool(two, "two") and k < 2:
        raise ValueError(f"two nearest centroids need k >= 2; got C of shape {tuple(C.shape)}")
    C_sq = row_norms_sq(C)
    copies = centroid_copies(C, C_sq)
    C, C_sq = distinct(C, C_sq, copies)
    shape = (data.n, 2) if two else (data.n,)
    dist = torch.empty(shape, dtype=data.X.dtype, device=data.X.device)
    labels = torch.empty(shape, dtype=torch.long, device=data.X.device)
    X_sq = data.X_sq
    for s in data.chunks(k):
        G = cross_term(data.X[s], C, C_sq)  # (b, k')
        if two:
            g1, lab1, g2, lab2 = least_two(G, copies)
            g, lab = torch.stack((g1, g2), dim=1), torch.stack((lab1, lab2), dim=1)
            dist[s] = g.add_(X_sq[s].unsqueeze(1)).clamp_(min=0.0)
        else:
            g, lab = least(G, copies, overwrite=True)  # (b,)
            dist[s] = g.add_(X_sq[s]).clamp_(min=0.0)
        labels[s] = lab
    return Nearest(dist, labels)
