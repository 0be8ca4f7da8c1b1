r"""Mini-batch k-means for data that is not in memory: the step and the batch sources.

One step on a batch ``B`` (rows ``x_i``, weights ``w_i``, memberships ``r_ij``; one-hot at
``T = 0``, else ``m(-d_ij / 2T)``) with running counts ``n_j``:

.. math::

    N^B_j = \sum_{i \in B} w_i r_{ij}, \qquad S^B_j = \sum_{i \in B} w_i r_{ij} x_i, \qquad
    n_j \leftarrow n_j + N^B_j, \qquad c_j \leftarrow c_j + \frac{S^B_j - N^B_j c_j}{n_j}.

Since ``dF_B/dc_j = 2 (N^B_j c_j - S^B_j)``, this is the gradient step on the batch objective with
the per-cluster rate ``eta_j = 1 / (2 n_j)``: MacQueen's online rule applied a batch at a time
(Sculley 2010, "Web-scale k-means clustering"). A batch is never held as more than
``chunk_rows x k`` memberships (:func:`rbfkmeans.stats.cluster_stats`), and under
``torch.distributed`` the batch statistics are summed over ranks, so every rank takes the same step.

:class:`MiniBatchKMeans` drives these steps over a stream of batches: it seeds the centroids by
k-means++ on the first ``3k`` rows that weigh something (over all ranks), then steps once per
batch.
:func:`macqueen_updates` is the point-by-point rule of ``RBFKMeans.partial_fit``: for each point
``x`` with weight ``w`` and memberships ``r``, ``n_j <- n_j + w r_j`` and
``c_j <- c_j + w r_j (x - c_j) / n_j``, the SGD step on ``J`` (or ``F_T``) with
``eta_j = 1/(2 n_j)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._validation import (
    check_finite,
    check_matrix,
    check_positive_int,
    check_temperature,
    check_vector,
    check_within_reach,
    compute_dtype,
    largest_magnitude,
)
from .assignments import Assignment, get_assignment
from .comm import Comm, raise_if_rejected
from .errors import NonFiniteError
from .frame import Frame
from .metrics import check_metric, get_metric
from .passes import Data, check_data
from .relocation import relocate_empty
from .seeding import INITS, initial_centers
from .sparse import SparseRows
from .stats import cluster_stats

__all__ = [
    "MiniBatchKMeans",
    "agree_on_batch",
    "array_batches",
    "batch_data",
    "macqueen_updates",
    "minibatch_step",
]


@torch.no_grad()
def minibatch_step(
    data: Data,
    C: Tensor,
    counts: Tensor,
    T: float,
    assignment: str | Assignment,
) -> tuple[Tensor, Tensor, float]:
    """One mini-batch step (module docstring) on the batch ``data`` (b, d) from centroids ``C``
    (k, d) and running counts ``counts`` (k,). Returns new ``(C, counts, J_B)`` with ``J_B`` the
    batch's k-means objective at the old centroids (over all ranks of ``data.comm``).

    A cluster that has still received no mass (``n_j = 0``) is moved to the batch point farthest
    from the other centroids (its count stays 0, so its next step jumps to its members' mean).
    On a cosine ``data`` the stepped centroids are projected back onto the unit sphere.
    """
    C = check_data(data).check_centroids(C)
    _check_counts(counts, C.shape[0])
    st = cluster_stats(data, C, T, assignment)
    counts = counts + st.N  # (k,)
    tiny = torch.finfo(C.dtype).tiny
    rate = torch.where(counts > 0, 1.0 / counts.clamp(min=tiny), torch.zeros_like(counts))
    C = data.project(C + rate.unsqueeze(1) * (st.S - st.N.unsqueeze(1) * C), C)  # (k, d)
    empty = counts <= 0  # (k,) the same on every rank (counts are sums over ranks)
    if bool(empty.any()):
        C = relocate_empty(data, C, empty)
    return C, counts, st.inertia


def _check_counts(counts: Any, k: int) -> None:
    """Raise unless ``counts`` holds ``k`` finite running counts ``>= 0``."""
    check_vector(counts, "counts", k)
    if not bool(torch.isfinite(counts).all()):
        raise NonFiniteError("counts must be finite and >= 0; got a non-finite entry")
    if bool((counts < 0).any()):
        raise ValueError("counts must be finite and >= 0; got a negative entry")


class MiniBatchKMeans:
    """The state of a mini-batch fit over a stream: centroids, running counts, steps taken.

    :meth:`feed` takes this rank's next batch (an empty (0, d) batch when its source is
    exhausted but others' are not). Until ``3 n_clusters`` rows have arrived over all ranks they
    are kept; then k-means++ seeds the centroids on them (``generator`` the same on every rank)
    and they take one step together. :meth:`finish` seeds and steps on whatever was kept when the
    whole stream held fewer rows. ``inertia`` sums the batches' ``J`` (at the centroids before
    each step) since :meth:`new_epoch`. ``init`` is ``"auto"``, ``"mean"`` (both seeded by
    k-means++ here), ``"k-means++"``, ``"random"``, an array or a callable
    (:func:`rbfkmeans.seeding.initial_centers`). Every batch :meth:`feed` takes is checked for
    NaN and inf (one reduction over the batch), and its weights for those and for negatives.
    """

    def __init__(self, n_clusters: int, T: float, assignment: str | Assignment, *,
                 generator: torch.Generator, chunk_size: int | None = None,
                 comm: Comm | None = None, metric: str = "sqeuclidean",
                 init: Any = "k-means++") -> None:
        self.k = check_positive_int(n_clusters, "n_clusters")
        self.metric = check_metric(metric)
        self.T = check_temperature(T)
        self.assignment = get_assignment(assignment)
        self.generator = generator
        self.chunk_size = None if chunk_size is None else \
            check_positive_int(chunk_size, "chunk_size")
        if comm is not None and not isinstance(comm, Comm):
            raise TypeError(f"comm must be a rbfkmeans.comm.Comm; got {type(comm).__name__}")
        self.comm = comm if comm is not None else Comm()
        if isinstance(init, str) and init not in ("auto", *INITS):
            raise ValueError(f"init must be one of {', '.join(map(repr, ('auto', *INITS)))}, "
                             f"an array or a callable; got {init!r}")
        if init is None:
            raise TypeError("init must be a name, an array or a callable; got None")
        self.init = "k-means++" if isinstance(init, str) and init in ("auto", "mean") else init
        self.frame = Frame()  # chosen from the seeding rows (rbfkmeans.frame)
        self.C: Tensor | None = None  # in the frame's coordinates
        self.counts: Tensor | None = None
        self.steps = 0
        self.inertia = 0.0  # in the frame's units
        self._seeding: list[tuple[Tensor, Tensor | None]] = []

    def centers(self) -> Tensor:
        """The centroids (k, d) in the data's coordinates."""
        if self.C is None:
            raise ValueError("no centroids yet: feed at least n_clusters rows first")
        return self.frame.leave(self.C)

    def new_epoch(self) -> None:
        self.inertia = 0.0

    def _data(self, X: Tensor, w: Tensor | None) -> Data:
        return Data(X, w, chunk_size=self.chunk_size, comm=self.comm, validate=False,
                    metric=self.metric)

    def _step(self, X: Tensor, w: Tensor | None) -> None:
        assert self.C is not None
        assert self.counts is not None
        data = self._data(self.frame.enter(X), w)
        try:
            data.check_centroids(self.C)
        except ValueError as exc:  # the rows, in the frame of the first batches, are too far
            raise NonFiniteError(
                "batches: a batch lies too far from the centroids of the first batches for "
                f"{data.X.dtype} (its squared distances overflow); rescale the batches alike "
                f"({exc})") from None
        self.C, self.counts, J = minibatch_step(data, self.C, self.counts,
                                                self.frame.sq_to(self.T), self.assignment)
        self.inertia += J
        self.steps += 1

    def _seed(self) -> tuple[Tensor, Tensor | None]:
        """k-means++ on the kept batches of all ranks; returns this rank's kept rows."""
        parts = self._seeding
        self._seeding = []
        X = parts[0][0] if len(parts) == 1 else torch.cat([x for x, _ in parts])  # (m, d)
        w = parts[0][1] if len(parts) == 1 else None
        if len(parts) > 1 and any(v is not None for _, v in parts):
            w = torch.cat([v if v is not None else x.new_ones(x.shape[0]) for x, v in parts])
        m = int(self.comm.sum_scalars(X.shape[0])[0])
        if m < self.k:
            raise ValueError(f"n_samples={m} should be >= n_clusters={self.k} (the batches "
                             "hold fewer rows in all than clusters)")
        if not get_metric(self.metric).spherical:
            self.frame = Frame.choose(X, w, chunk_size=self.chunk_size, comm=self.comm)
        seed = int(torch.randint(2**31 - 1, (1,), generator=self.generator)) \
            if callable(self.init) else 0  # a callable's RandomState
        self.C = initial_centers(self._data(self.frame.enter(X), w), self.k,
                                 self.frame.init(self.init), generator=self.generator, seed=seed)
        self.counts = torch.zeros(self.k, dtype=self.C.dtype, device=self.C.device)
        return X, w

    def feed(self, X: Tensor, w: Tensor | None = None) -> None:
        """Take this rank's next batch ``X`` (b, d) with weights ``w`` (b,) (a collective). Raises
        ``ValueError`` naming ``X`` or ``w`` for NaN or inf (and ``w`` for a negative weight)."""
        if not isinstance(X, SparseRows):  # sparse rows: checked where they were made
            check_finite(check_matrix(X, "X", "(b, d)"), "X")
        if w is not None:
            check_finite(check_vector(w, "w", X.shape[0]), "w")
            if bool((w < 0).any()):
                raise ValueError(f"w must be >= 0; got a negative entry {w.min().item()!r}")
        if self.C is None:  # seeded once 3k rows that weigh something have arrived
            self._seeding.append((X, w))
            held = sum(x.shape[0] if v is None else int((v > 0).sum()) for x, v in self._seeding)
            if self.comm.sum_scalars(held)[0] < 3 * self.k:
                return
            X, w = self._seed()
        self._step(X, w)

    def finish(self) -> None:
        """Seed and step on the kept rows if the stream ended before ``3k`` rows arrived."""
        if self.C is None and self._seeding:
            X, w = self._seed()
            self.inertia = 0.0
            self._step(X, w)


@torch.no_grad()
def macqueen_updates(
    X: Tensor, C: Tensor, counts: Tensor, T: float, assignment: str | Assignment,
    w: Tensor | None = None, *, metric: str = "sqeuclidean",
) -> tuple[Tensor, Tensor]:
    """Sequential MacQueen updates (module docstring) over the rows of ``X`` (n, d), in order,
    from centroids ``C`` (k, d) and running counts ``counts`` (k,). Returns new ``(C, counts)``
    (the inputs are not modified). With ``metric="cosine"`` the rows are normalised and the
    centroids projected back onto the unit sphere after every point (online spherical k-means).
    Computed in the wider of ``X``'s and ``C``'s dtypes (float16 and bfloat16 in float32), the
    distances of each point in float64: rows and centroids whose squared distances overflow
    float64, or whose differences overflow the working dtype, raise ``ValueError`` naming the
    larger of ``X`` and ``C`` (one reduction over each).
    """
    entry = get_assignment(assignment)
    T = check_temperature(T, "T")
    geometry = get_metric(metric)
    check_finite(check_matrix(X, "X", "(n, d)"), "X")
    check_finite(check_matrix(C, "C", "(k, d)"), "C")
    if C.shape[1] != X.shape[1] or C.shape[0] < 1:
        raise ValueError(f"C must have shape (k, {X.shape[1]}) with k >= 1 to match X; got "
                         f"{tuple(C.shape)}")
    _check_counts(counts, C.shape[0])
    if w is not None:
        check_finite(check_vector(w, "w", X.shape[0]), "w")
        if bool((w < 0).any()):
            raise ValueError("w must be >= 0; got a negative entry")
    dt = compute_dtype(torch.promote_types(X.dtype, C.dtype))  # float16 -> float32
    if not geometry.spherical:  # (unit rows and centroids are always within reach)
        _check_reach(largest_magnitude(X), largest_magnitude(C), X.shape[1], dt)
    X = geometry.prepare(X.to(dt), "X")
    C = geometry.project(C.to(dt).clone(), None, "C")
    counts = counts.to(dt).clone()
    hard = entry.hard or T == 0.0
    for i in range(X.shape[0]):
        x = X[i]  # (d,)
        d = ((C.double() - x.double()) ** 2).sum(dim=1)  # (k,) float64: finite for float32 rows
        if hard:
            r = torch.zeros_like(C[:, 0])
            r[int(d.argmin())] = 1.0
        else:  # scores shifted to a maximum of 0 (m ignores a constant): finite at any T > 0
            r = entry.forward((d - d.min()) / (-2.0 * T), dim=0).to(dt)
        wr = r if w is None else r * w[i]  # (k,)
        C_old = C.clone() if geometry.spherical else C
        counts += wr
        step = torch.where(counts > 0, wr / counts.clamp(min=torch.finfo(C.dtype).tiny), 0.0)
        C += step.unsqueeze(1) * (x - C)
        if geometry.spherical:
            C = geometry.project(C, C_old, "C")
    return C, counts


def _check_reach(x: float, c: float, d: int, dt: torch.dtype) -> None:
    """Raise ``ValueError`` naming the larger of ``X`` (entries up to ``x``) and ``C`` (up to
    ``c``) unless their squared distances over ``d`` features are finite in float64 and their
    differences ``x - c`` in the working dtype ``dt``: else NaN memberships and counts."""
    name, far_from = ("X", "the centroids C") if x >= c else ("C", "the rows of X")
    check_within_reach(x, c, d, torch.float64, name=name, far_from=far_from)
    if not x + c < torch.finfo(dt).max:
        raise NonFiniteError(f"{name} lies too far from {far_from} for {dt}: their differences "
                             f"overflow (entries of x - c up to {x + c:.3g}); rescale {name}")


def batch_data(item: Any) -> Any:
    """The data of one item of a batch source: the first element of a tuple or list whose first
    element is an array or tensor (``(x, y)`` from a ``DataLoader``), else the item itself. A
    mapping (a ``DataLoader`` of dictionaries) raises ``TypeError`` naming its keys: which of
    them holds the rows is the caller's to say; so does such a tuple or list whose first element
    is not 2-D (a list of 1-D rows had been read as one row and its targets)."""
    if isinstance(item, Mapping):
        keys = ", ".join(repr(k) for k in list(item)[:8])
        raise TypeError("batches must yield arrays or tensors (b, d), or tuples whose first "
                        f"element is one; got a {type(item).__name__} with keys {keys}: pass "
                        "the rows, e.g. (b[key] for b in loader)")
    if isinstance(item, tuple | list) and item and isinstance(item[0], np.ndarray | Tensor):
        if item[0].ndim < 2:  # rows as 1-D arrays, or one unbatched (x, y) sample
            raise TypeError(
                "batches: a list or tuple whose first element is an array is read as (x, y, ...) "
                f"with x the batch (b, d), as a DataLoader yields it; got a first element of "
                f"shape {tuple(item[0].shape)}: pass each batch as one 2-D array (e.g. "
                "numpy.stack of its rows)")
        return item[0]
    return item


def array_batches(
    X: Any, sample_weight: Any, batch_size: int, rng: np.random.RandomState
) -> Iterator[tuple[Any, Any]]:
    """Blocks of ``batch_size`` consecutive rows of the 2-D array ``X`` (views, never a copy of
    ``X``; a ``numpy.memmap`` is read a block at a time; a pandas DataFrame by position, its
    blocks DataFrames), in an order shuffled by ``rng``, each with its rows of
    ``sample_weight`` (or ``None``). ``batch_size`` is an integer ``>= 1``, ``rng`` a
    ``numpy.random.RandomState`` (or ``Generator``); they and ``X`` are checked at the call,
    before the first batch (``TypeError`` / ``ValueError`` naming them)."""
    shape = getattr(X, "shape", None)
    if not isinstance(shape, tuple) or len(shape) != 2:
        raise TypeError(f"X must be a 2-D array (n, d) with a shape (a NumPy array, a memmap, "
                        f"a DataFrame); got {type(X).__name__}"
                        + ("" if shape is None else f" of shape {tuple(shape)}"))
    batch_size = check_positive_int(batch_size, "batch_size")
    if not isinstance(rng, np.random.RandomState | np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.RandomState; got {type(rng).__name__} "
                        f"{rng!r}")
    return _array_blocks(X, sample_weight, batch_size, rng)


def _array_blocks(X: Any, sample_weight: Any, batch_size: int,
                  rng: np.random.RandomState | np.random.Generator
                  ) -> Iterator[tuple[Any, Any]]:
    """The blocks of :func:`array_batches`, on checked arguments."""
    n = int(X.shape[0])
    rows = X.iloc if hasattr(X, "iloc") else X
    starts = np.arange(0, n, batch_size)
    for start in starts[rng.permutation(len(starts))]:
        s = slice(int(start), min(int(start) + batch_size, n))
        yield rows[s], (None if sample_weight is None else sample_weight[s])


def agree_on_batch(
    comm: Comm, error: Exception | None, X: np.ndarray | None
) -> tuple[int, int, bool]:
    """After each rank fetched and validated its next batch (``X`` None when its source is
    exhausted): the number of ranks with a batch, the common feature count, and whether any of
    them is float64. A batch rejected on one rank raises on every rank (no rank is left waiting
    in a collective), and so do differing feature counts."""
    row = [float(error is not None), 0.0, -1.0, 0.0]
    if X is not None and error is None:
        row[1:] = [1.0, float(X.shape[1]), float(X.dtype == np.float64)]
    live = row[1] > 0
    if not comm.active:
        if error is not None:
            raise error
        return int(live), int(row[2]), bool(row[3])
    table = comm.all_gather(torch.tensor([row], dtype=torch.float64))  # (ranks, 4)
    raise_if_rejected(table[:, 0].tolist(), error, "a batch was")
    widths = sorted({int(v) for v in table[:, 2].tolist() if v >= 0})
    if len(widths) > 1:
        raise ValueError(f"batches must have the same number of features on every rank; got "
                         f"{[int(v) for v in table[:, 2].tolist()]} (by rank, -1: no batch)")
    return int(table[:, 1].sum()), (widths[0] if widths else -1), bool(table[:, 3].max() > 0)
