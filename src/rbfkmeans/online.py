r"""The online half of :class:`~rbfkmeans.RBFKMeans`: ``partial_fit`` and ``fit_batches``.

``partial_fit`` applies MacQueen's point-by-point rule, ``fit_batches`` the mini-batch step, both
from :mod:`rbfkmeans.streaming`: for each batch with memberships ``r`` and running counts ``n_j``,

.. math::

    n_j \leftarrow n_j + N^B_j, \qquad c_j \leftarrow c_j + \frac{S^B_j - N^B_j c_j}{n_j},

the gradient step on the batch objective with ``eta_j = 1 / (2 n_j)``. The methods live in a mixin
that the estimator inherits; they use its validation and conversion helpers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse
import torch
from sklearn.utils import check_random_state
from torch import Tensor

from . import precompile
from ._parameters import (
    agree_on_parameters,
    check_sample_weight,
    is_int,
    raise_on_every_rank,
    restored_on_failure,
    torch_dtype,
)
from .comm import Comm
from .errors import NonFiniteError
from .frame import Frame
from .inference import check_reach, to_numpy
from .metrics import get_metric
from .residuals import settled_inertia
from .seeding import initial_centers
from .sparse import dense, is_sparse
from .stats import cluster_stats
from .streaming import MiniBatchKMeans, agree_on_batch, array_batches, batch_data, macqueen_updates

if TYPE_CHECKING:
    from .estimator import RBFKMeans

__all__ = ["OnlineFitMixin"]


class OnlineFitMixin:
    """``partial_fit`` and ``fit_batches`` for :class:`~rbfkmeans.RBFKMeans` (``self`` is the
    estimator: its parameters and its validation and conversion helpers)."""

    _online_counts: np.ndarray | None  # running counts n_j (k,) for the next online step

    def partial_fit(self: Any, X: Any, y: Any = None, sample_weight: Any = None) -> RBFKMeans:
        r"""Online update from a batch (MacQueen 1967; with a temperature, its soft version).

        For each point ``x`` with weight ``w`` and memberships ``r`` (one-hot when hard, else
        ``m(-d/2T)`` at ``temperature``), every centroid moves by
        ``c_j <- c_j + w r_j (x - c_j) / n_j`` with the running count ``n_j <- n_j + w r_j``:
        the SGD step on ``J`` (or ``F_T``) for that point with ``eta_j = 1/(2 n_j)``
        (:func:`rbfkmeans.streaming.macqueen_updates`). The points of a batch are processed in
        order. The first call initialises the centroids on its batch (which needs at least
        ``n_clusters`` rows) from ``init``, k-means++ for ``"auto"`` and ``"mean"``, each start
        counting as one row of weight 1 (``n_j = 1``: MacQueen's start, the first means each
        seen once). From counts of zero a soft update would move every centroid onto the first
        point, however small its membership there (``w r_j / n_j = 1``), and the start would be
        lost. After :meth:`fit` the counts start at the fitted cluster sizes. ``labels_`` and
        ``inertia_`` describe the last batch at the new centroids. The rule is sequential, point
        after point: under ``torch.distributed`` each process updates its own model from its own
        rows (no collective); :meth:`fit_batches` is the stream that the ranks share.
        """
        with restored_on_failure(self):
            return self._partial_fit(X, sample_weight)

    def _partial_fit(self: Any, X: Any, sample_weight: Any) -> RBFKMeans:
        self._check_params()
        first = not hasattr(self, "cluster_centers_")
        if not first and self.cluster_centers_.shape[0] != self.n_clusters:
            raise ValueError(
                f"n_clusters={self.n_clusters} differs from the {self.cluster_centers_.shape[0]} "
                "clusters of the fitted model that partial_fit would continue; fit again")
        fitted_metric = getattr(self, "_metric_", self.metric)
        if not first and fitted_metric != self.metric:
            raise ValueError(
                f"metric={self.metric!r} differs from the metric={fitted_metric!r} of the fitted "
                "model that partial_fit would continue (its centroids are of that geometry); "
                "fit again")
        X = self._check_X(X, reset=first)
        if first:
            if X.shape[0] < self.n_clusters:
                raise ValueError(
                    f"the first partial_fit batch needs n_samples >= n_clusters={self.n_clusters};"
                    f" got n_samples={X.shape[0]}"
                )
            self._dtype_ = self._compute_dtype(X)
        Xt = self._to_torch(X)
        w = self._weights(sample_weight, X)
        spherical = get_metric(self.metric).spherical
        if first:  # the frame of the online fit: its first batch's (rbfkmeans.frame)
            self._frame_ = Frame() if spherical else Frame.choose(Xt, w)
            self._metric_ = self.metric
        frame = self._fit_frame
        data = self._data(frame.enter(Xt), w)
        T = 0.0 if self.temperature is None else float(self.temperature)
        if first:
            seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
            init = self.init
            if isinstance(init, str) and init in ("auto", "mean"):
                init = "k-means++"
            C = initial_centers(data, self.n_clusters, frame.init(init),
                                generator=torch.Generator().manual_seed(seed), seed=seed)
            # each start seen once (docstring): a soft step from n_j = 0 takes c_j onto x
            counts = torch.ones(self.n_clusters, dtype=Xt.dtype, device=Xt.device)
            self.n_iter_ = 0
        else:
            C = frame.enter(self._centers_t())
            if not spherical:  # rows far beyond the first batch's frame: no finite step
                check_reach(data.X, C, frame.exponent, data.total_weight(), dtype=C.dtype)
            counts = torch.as_tensor(self._online_counts).to(Xt.device, Xt.dtype) \
                if getattr(self, "_online_counts", None) is not None \
                else torch.zeros(self.n_clusters, dtype=Xt.dtype, device=Xt.device)
        for s in [slice(None)] if not is_sparse(data.X) else data.chunks(data.d):
            # the rows in order; sparse rows a chunk at a time as dense rows
            C, counts = macqueen_updates(dense(data.X[s]), C, counts, frame.sq_to(T),
                                         self.assignment, data.weight(s), metric=self.metric)
        kept = X.dtype if first else self.cluster_centers_.dtype  # the model's, not the batch's
        self.cluster_centers_ = to_numpy(frame.leave(C)).astype(kept, copy=False)
        self._online_counts = to_numpy(counts)
        self.n_iter_ += 1
        swaps = getattr(self, "n_swaps_", 0)
        self._set_online(T)  # after a fit too: no annealing describes the centroids any more
        self.n_swaps_ = swaps  # the fit's swaps, which the model still holds
        C_framed = frame.enter(self._centers_t())
        st = cluster_stats(data, C_framed, 0.0, "hard", return_labels=True)
        assert st.labels is not None
        self.labels_ = to_numpy(st.labels).astype(np.int64)
        self.inertia_ = frame.sq_from(settled_inertia(data, C_framed, st.labels, st.inertia))
        return self

    def fit_batches(
        self: Any, batches: Any, *, n_epochs: int = 1, batch_size: int = 1024,
        sample_weight: Any = None,
    ) -> RBFKMeans:
        r"""Mini-batch fit on data that need not fit in memory: any iterable of chunks.

        ``batches`` is a ``torch.utils.data.DataLoader`` (of tuples such as ``(x, y)`` the first
        element is the data; of dictionaries, pass ``(b[key] for b in loader)``), a generator
        or a list of arrays/tensors (b, d), or one 2-D array
        (e.g. a ``numpy.memmap``, a pandas DataFrame, a scipy sparse matrix) read ``batch_size``
        rows at a time in a shuffled block order with the matching rows of ``sample_weight``.
        Each batch takes the mini-batch step of MacQueen's rule (:mod:`rbfkmeans.streaming`):
        ``c_j <- c_j + (S^B_j - N^B_j c_j) / n_j`` with running counts ``n_j``, the gradient
        step on the batch objective with ``eta_j = 1/(2 n_j)``. Memberships are hard unless
        ``temperature`` is set. The first batches (at least ``3 n_clusters`` rows of positive
        weight) are seeded by k-means++ and take one step together (a whole stream of fewer
        rows, at the end of its first epoch); rows of weight 0 and batches of no rows change
        nothing. ``n_epochs > 1`` needs a source that can be iterated again.

        Under ``torch.distributed`` every rank passes its own batches (e.g. a ``DataLoader`` with
        a ``DistributedSampler``); the batch statistics are summed over ranks, so all ranks take
        the same steps, and ranks may hold different numbers of batches.

        Sets ``cluster_centers_``, ``n_iter_`` (steps), ``inertia_`` (sum over the last epoch of
        each batch's ``J`` just before its step: an estimate) and the running counts, so that
        :meth:`partial_fit` can continue. ``labels_`` (this rank's rows, in source order) is set
        by one more pass over a source that can be iterated again (an array, a list, a
        ``DataLoader``); a one-shot iterator leaves none. A call that raises leaves a fitted
        estimator exactly as it was.
        """
        with restored_on_failure(self), precompile.pinned():
            return self._fit_batches(batches, n_epochs, batch_size, sample_weight)

    def _fit_batches(self: Any, batches: Any, n_epochs: int, batch_size: int,
                     sample_weight: Any) -> RBFKMeans:
        comm = Comm.auto()
        error: Exception | None = None
        is_array = one_shot = False
        try:  # every rank learns whether one rejected its arguments (no rank left waiting)
            batches, is_array, one_shot, sample_weight = self._check_batch_arguments(
                batches, n_epochs, batch_size, sample_weight)
        except (ValueError, TypeError) as exc:
            error = exc
        raise_on_every_rank(comm, error, "fit_batches' arguments were")
        # every rank fits the same model: differing settings had hung or mixed statistics
        agree_on_parameters(comm, {**self._shared_parameters(), "n_epochs": n_epochs},
                            "fit_batches'")
        precompile.decide(batch_size * self.n_clusters, comm)  # every rank on the same passes
        seed = torch.tensor([int(check_random_state(self.random_state).randint(2**31 - 1))])
        comm.broadcast_(seed, src=0)
        block_order = np.random.RandomState((int(seed) + comm.rank) % 2**32)
        T = 0.0 if self.temperature is None else float(self.temperature)
        fit = MiniBatchKMeans(self.n_clusters, T, self.assignment,
                              generator=torch.Generator().manual_seed(int(seed)),
                              chunk_size=self.chunk_size, comm=comm, metric=self.metric,
                              init=self.init)
        self.__dict__.pop("_dtype_", None)
        for _ in range(n_epochs):
            stream: Iterator[tuple[Any, Any]] = (
                array_batches(batches, sample_weight, batch_size, block_order) if is_array
                else ((b, None) for b in batches))
            fit.new_epoch()
            for Xb, wb in self._agreed_batches(stream, comm):
                fit.feed(Xb, wb)
            fit.finish()  # a stream of fewer than 3k rows: seeded on the whole first epoch
        if fit.C is None or fit.counts is None:
            raise ValueError("batches yielded no data")
        if not (math.isfinite(fit.inertia) and bool(torch.isfinite(fit.C).all())):
            # a batch far beyond the frame of the first ones (rbfkmeans.frame)
            raise NonFiniteError(
                "batches: a batch lies too far from the centroids of the first batches for "
                f"{self._dtype_} (its squared distances overflow); rescale the batches alike")
        self._frame_ = fit.frame
        self._metric_ = self.metric
        self.cluster_centers_ = to_numpy(fit.centers())
        self._online_counts = to_numpy(fit.counts)
        self.n_iter_ = fit.steps
        self.inertia_ = fit.frame.sq_from(fit.inertia)
        self._set_online(T)
        if comm.rank == 0:
            self._warn_if_centres_coincide(stacklevel=4)
        self.__dict__.pop("labels_", None)
        if not one_shot:
            n = int(batches.shape[0]) if is_array else 0
            items = (_rows(batches, s) for s in _row_blocks(n, batch_size)) if is_array \
                else (batch_data(b) for b in batches)
            labels = [np.empty(0, dtype=np.int64) if _no_rows(b) else self.predict(b)
                      for b in items]
            self.labels_ = np.concatenate(labels) if labels else np.empty(0, dtype=np.int64)
        return self

    def _check_batch_arguments(self: Any, batches: Any, n_epochs: int, batch_size: int,
                               sample_weight: Any) -> tuple[Any, bool, bool, Any]:
        """Check :meth:`fit_batches`' arguments; return the source (a table or a sparse
        matrix as a 2-D array whose rows slice), whether it is one 2-D array, whether it is a
        one-shot iterator, and the checked ``sample_weight``."""
        self._check_params()
        if not is_int(n_epochs) or n_epochs < 1:
            raise ValueError(f"n_epochs must be an integer >= 1; got {n_epochs!r}")
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        batches = _array_source(batches)
        if isinstance(batches, Tensor) and batches.layout != torch.strided:
            raise TypeError(f"batches must be dense when a tensor; got a torch tensor of layout "
                            f"{batches.layout} (pass a scipy.sparse CSR matrix for sparse rows)")
        is_array = isinstance(batches, np.ndarray | Tensor) or scipy.sparse.issparse(batches) \
            or _is_frame(batches)
        if is_array and batches.ndim != 2:
            raise ValueError("batches must be an iterable of (b, d) chunks or a 2-D array; got "
                             f"an array of shape {tuple(batches.shape)}")
        if not is_array and not isinstance(batches, Iterable):
            raise TypeError("batches must be an iterable of (b, d) chunks or a 2-D array; got "
                            f"{type(batches).__name__}")
        if sample_weight is not None and not is_array:
            raise ValueError("sample_weight is only accepted with a 2-D array source; got "
                             f"sample_weight with a {type(batches).__name__}")
        if sample_weight is not None:
            sample_weight = check_sample_weight(sample_weight, int(batches.shape[0]))
        one_shot = not is_array and iter(batches) is batches
        if n_epochs > 1 and one_shot:
            raise ValueError(f"n_epochs={n_epochs} needs a source that can be iterated again "
                             "(a DataLoader, a list, an array); got a one-shot iterator")
        return batches, is_array, one_shot, sample_weight

    def _agreed_batches(
        self: Any, stream: Iterator[tuple[Any, Any]], comm: Comm
    ) -> Iterator[tuple[Tensor, Tensor | None]]:
        """This rank's batches, validated, converted, and agreed on with the other ranks: the
        first batch of the fit fixes the features and the dtype; an exhausted rank yields empty
        (0, d) batches until every rank is done."""
        width = -1
        while True:
            item = next(stream, None)
            if item is not None and _no_rows(item[0]):
                continue  # a batch of no rows (numpy.array_split's last parts) adds nothing
            error: Exception | None = None
            Xb_np: np.ndarray | None = None
            if item is not None:
                try:
                    Xb_np = self._check_X(batch_data(item[0]),
                                          reset=not hasattr(self, "_dtype_"))
                except (ValueError, TypeError) as exc:
                    error = exc
            live, d, any64 = agree_on_batch(comm, error, Xb_np)
            if live == 0:
                return
            if width < 0:
                width = d
                chosen = None if self.dtype is None else torch_dtype(self.dtype)
                self._dtype_ = chosen or (torch.float64 if any64 else torch.float32)
            elif d != width:
                raise ValueError(f"every batch must have {width} features; got {d}")
            self.n_features_in_ = width
            if Xb_np is None:
                yield torch.empty((0, width), dtype=self._dtype_, device=self._torch_device()), None
            else:
                assert item is not None
                # a block of the weights may be all zero (checked whole: fit_batches)
                yield self._to_torch(Xb_np), self._weights(item[1], Xb_np, all_zero=True)


def _array_source(batches: Any) -> Any:
    """``batches`` as an array whose rows slice where it is one table of rows: a pandas
    DataFrame or Series as its values (iterating it would yield column names), a scipy sparse
    matrix or array as CSR (iterating it would yield one row at a time); anything else as it is."""
    if scipy.sparse.issparse(batches):
        return batches.tocsr() if batches.ndim == 2 else batches
    table = callable(getattr(batches, "to_numpy", None)) and hasattr(batches, "ndim")
    if table and not isinstance(batches, np.ndarray | Tensor):
        if _is_frame(batches):  # kept: its blocks carry the column names to the checks
            return batches
        return batches.to_numpy()
    return batches


def _is_frame(batches: Any) -> bool:
    """A 2-D table with positional row slicing (a pandas DataFrame)."""
    return getattr(batches, "ndim", None) == 2 and hasattr(batches, "iloc") \
        and hasattr(batches, "columns")


def _no_rows(item: Any) -> bool:
    """Whether a batch source's item is a 2-D batch of no rows (as it is or as ``(x, y)``)."""
    if isinstance(item, tuple | list) and item and isinstance(item[0], np.ndarray | Tensor):
        item = item[0]
    shape = getattr(item, "shape", None)
    return shape is not None and len(shape) == 2 and int(shape[0]) == 0


def _rows(X: Any, s: slice) -> Any:
    """The rows ``s`` of an array source (by position in a DataFrame)."""
    return X.iloc[s] if _is_frame(X) else X[s]


def _row_blocks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))
