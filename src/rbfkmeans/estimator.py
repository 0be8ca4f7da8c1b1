r"""``RBFKMeans``: scikit-learn compatible k-means that anneals a soft RBF assignment into Lloyd's.

.. math::

    \min_C\; F_T(C) = \min_R \sum_{ij} w_i r_{ij} \lVert x_i - c_j\rVert^2 - 2T \sum_i w_i H(r_i)
    \;\xrightarrow[T\to 0]{}\; J(C) = \sum_i w_i \min_j \lVert x_i - c_j\rVert^2

with ``H`` the entropy matching the mapping (Shannon for softmax, Tsallis-1.5 for entmax15, Gini
for sparsemax). A fit starts at the weighted mean, above the first critical temperature ``T_c``,
iterates the soft-Lloyd step ``c_j <- m_j`` (the gradient step with ``eta_j = 1/(2 N_j)``) to a
fixed point at each temperature of a cooling ladder (by default event-driven: groups of
coincident centroids split at their own critical temperatures), polishes with exact hard Lloyd
iterations until the labels no longer change (a Lloyd fixed point), runs a swap search and
Hartigan's single-point moves in turn
(:mod:`rbfkmeans.runs`). With ``metric="cosine"`` it is spherical k-means: the same fit on the
normalised rows with the centroids projected back onto the unit sphere after every update
(:mod:`rbfkmeans.metrics`).

This module is glue: validation (one declarative table), the scikit-learn contract, and the
calls into :mod:`~rbfkmeans.scales` (the fit's ``tol`` unit and ``T_c``),
:mod:`~rbfkmeans.runs` (one run of the fit), :mod:`~rbfkmeans.streaming` and
:mod:`~rbfkmeans.online`; how it reads ``X`` and the weights is :mod:`~rbfkmeans.reading`.
It is the only place that detects an initialised ``torch.distributed`` group
(:meth:`Comm.auto`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from torch import Tensor

from . import precompile
from ._parameters import (
    PARAMETERS,
    agree_on_shards,
    parameters_key,
    restored_on_failure,
)
from .assignments import get_assignment
from .comm import Comm
from .errors import value_error
from .frame import Frame
from .inference import InferenceMixin, to_numpy
from .metrics import get_metric
from .online import OnlineFitMixin
from .passes import Data
from .publish import distinct_rows, leave_frame, leave_row_space
from .reading import ReadingMixin
from .repeats import fold_repeats
from .rowspace import RowSpace, row_space_applies
from .runs import fit_run, run_schedules
from .scales import fit_scales
from .schedules import critical_temperature_factor
from .seeding import weighted_mean
from .sparse import is_sparse
from .starts import Temperatures
from .streaming import batch_data

__all__ = ["RBFKMeans"]


def _owns(Xt: Tensor, X: np.ndarray) -> bool:
    """Whether ``Xt`` is a tensor of its own (a converted copy), not a view of the caller's
    ``X``: then it may be written in place."""
    if is_sparse(Xt):
        return True  # SparseRows.from_scipy copies
    return Xt.device.type != "cpu" or not np.shares_memory(Xt.numpy(), X)


class RBFKMeans(
    InferenceMixin, OnlineFitMixin, ReadingMixin, ClassNamePrefixFeaturesOutMixin, ClusterMixin,
    TransformerMixin, BaseEstimator,
):
    r"""k-means by annealing a soft (RBF) assignment into Lloyd's hard one.

    Parameters
    ----------
    n_clusters : int, default 8
        ``k``, the number of centroids.
    assignment : {"entmax15", "softmax", "sparsemax", "hard"}, default "entmax15"
        The simplex mapping of the soft assignment. ``"hard"`` is plain Lloyd (no annealing) and,
        from the same ``init``, reproduces ``sklearn.cluster.KMeans(algorithm="lloyd")``.
    metric : {"sqeuclidean", "cosine"}, default "sqeuclidean"
        ``"cosine"`` is spherical k-means: scores ``cos(x, c) / T``, unit-norm centroids (the
        update is the normalised weighted mean ``m_j / ||m_j||``), ``inertia_`` the spherical
        objective ``sum_i w_i (1 - max_j cos(x_i, c_j))``, ``transform`` the cosine distances
        ``1 - cos``, and ``T_c = factor * lambda_max(P Sigma P) / ||mu||`` of the normalised rows
        (:mod:`rbfkmeans.schedules`). Every row of ``X`` needs a non-zero norm; the fit keeps a
        normalised copy of ``X``, unless its rows are unit rows already (to rounding: as
        embedding models return them), which it reads as they are. ``init="mean"`` is the
        mean direction; a callable ``init`` receives the normalised rows.
    init : {"auto", "mean", "k-means++", "random"}, array (k, d) or callable, default "auto"
        Start of the fit. ``"auto"`` is ``"mean"`` (annealing from the data mean, where every
        centroid sits above ``T_c``) for soft assignments and ``"k-means++"`` for ``"hard"``
        (and for cosine rows whose directions average to exactly zero: no mean direction).
        An array may be a tensor (read detached: a layer's centroids, say). A callable is
        called as ``init(X, n_clusters, random_state)`` with every row of ``X`` (with
        ``fit_rows``, the sample the fit draws), as in scikit-learn (no weights).
    n_init : "auto" or int, default "auto"
        Number of runs (different seeds); the one with the lowest inertia is kept. ``"auto"``:
        1, except 10 for ``init="random"`` with ``"hard"`` (as scikit-learn), and 2 for an
        event-driven fit of at most ``SMALL_FIT_ENTRIES = 2048`` point-centroid pairs (a few
        hundred points), whose second run takes the geometric ladder (the more thorough search
        on tiny data, at a few tens of milliseconds). An event-driven fit with ``n_init = m >
        1`` anneals once (the run ``n_init=1`` makes) and restarts ``m - 1`` times from greedy
        k-means++ starts, each taken through the same hard polish, swap search and Hartigan
        moves: annealed runs differ only by the symmetric-breaking noise, which decides the
        order of competing splits, and mostly end in the same basin, which restarts leave.
        With ``schedule="k-means++"`` every run is such a restart, which trades time for
        quality best: on the 23 sets of ``benchmarks/bench_curve.py`` (five seeds)
        ``schedule="k-means++", n_init=6`` (the quality setting) ended at or below the better
        of ``KMeans(n_init=10)`` and breathing k-means on all 115 set-seed pairs (the default
        99, ``n_init=3`` 111) in 0.94x ``KMeans(n_init=10)``'s time in geometric mean (the
        default 0.28x; see docs/estimator.md). Other ladders repeat themselves with new
        seeds.
        With an explicit ``init`` array only one run is made (a ``RuntimeWarning`` says so when
        ``n_init > 1``), as scikit-learn.
    max_iter : int, default 300
        Iterations of the final hard Lloyd polish (or of plain Lloyd).
    tol : float, default 1e-4
        Relative tolerance, in units of the mean feature variance, on the squared centroid shift:
        the stopping rule of the iterations at each temperature (and of plain Lloyd, as in
        scikit-learn). The final polish runs until the labels no longer change.
    schedule : {"splits", "geometric", "k-means++"}, default "splits"
        The annealing ladder, or none: ``"k-means++"`` anneals nothing, and each of the
        ``n_init`` runs (1 for ``"auto"``) is what an event-driven fit's restarts are (above):
        a greedy k-means++ start on the search rows through the hard polish, the swap search
        and Hartigan's moves (``init`` must be ``"auto"`` or ``"k-means++"``; the temperatures
        and the solver are not used; with ``assignment="hard"`` the fit is plain Lloyd, as
        with any schedule). ``"splits"`` (:func:`rbfkmeans.splits.anneal_splits`) carries the
        coincident centroids as groups with multiplicities, jumps from one predicted split
        temperature to the next, accelerates each fixed point (SQUAREM) and anneals on a growing
        subsample (``subsample`` rows per group); it is exact for softmax, entmax15 and
        sparsemax and much cheaper than ``"geometric"`` (:func:`rbfkmeans.annealing.anneal`):
        every centroid through every temperature of ``T_start, T_start cooling, ...``. The
        event-driven ladder starts from the mean (``init="auto"`` or ``"mean"``; cosine data
        anneals its unit rows as Euclidean points); other starts and the gradient solver run
        the geometric ladder.
    subsample : int or None, default 64
        ``"splits"``: rows per group of centroids used while annealing, 4096 at least (all rows
        when the data has fewer, and then integer weights equal repeated rows exactly); ``None``
        anneals on all rows. On more than ``2 max(65536, 256 k)`` rows the hard polish and the
        swap search run on a random ``max(65536, 256 k)`` of them, then a last polish on all
        rows until their labels settle (``None``: all rows throughout).
    fit_rows : int or None, default None
        Fit the centroids (annealing, polish, swap search) on a random sample of at most this
        many rows, then take one Lloyd iteration on every row (each centroid becomes the mean
        of the rows nearest it, which lowers ``J`` of all rows) and label every row at those
        centroids (``inertia_`` is ``J`` of all the rows; the centroids are not a fixed point
        of the data), as faiss and mini-batch k-means trade quality for time. A k-means++
        start is then drawn from ``16 k`` of the sample's rows, and repeated rows are not
        folded first. With ``fit_rows`` at or above the number of rows nothing is sampled, but
        a k-means++ start is still drawn from ``16 k`` rows (the setting's cost of seeding
        does not grow with ``n``): such a fit equals ``fit_rows=None`` only from other starts.
        ``256 k`` is faiss's default sample; ``None``: every row, and the result is a Lloyd
        fixed point of the data. The documented faster setting for embeddings is
        faiss's recipe from k-means++ starts, ``RBFKMeans(k, assignment="hard",
        fit_rows=256 * k, max_iter=25)`` (docs/embeddings.md, "The two settings").
    T_start : float, optional
        First temperature; default ``1.2 T_c`` (geometric) or ``0.8 T_c`` (splits), with ``T_c``
        the first critical temperature (``lambda_max(Cov X)`` for softmax,
        ``sqrt(k) lambda_max`` for entmax15, ``k lambda_max`` for sparsemax; see
        :mod:`rbfkmeans.schedules`).
    T_end : float, optional
        Coldest temperature of the ladder (both ladders); default ``1e-6 T_c`` (geometric) or
        none (splits). The ladder usually stops earlier, as soon as every membership is one-hot;
        a ``T_end`` at or above the first temperature (``T_start``'s default when only
        ``T_end`` is given) leaves that one temperature.
    cooling : float, optional
        Ratio between consecutive temperatures: default 0.85 (geometric), or the largest ratio
        between events, 0.7 (splits; 0.5 where the annealing is abbreviated on large data,
        ``rbfkmeans.starts.abbreviated``). For the geometric ladder, faster cooling (0.8 with 20
        iterations per temperature) does about half the work; on 16 sets of 8 overlapping blobs
        (30 points each), inertia / ``KMeans(n_init=10)`` was at most 1.0025 with 0.85 / 50 and
        1.025 with 0.8 / 20 (without the swap search: 1.108 and 1.048).
    max_iter_per_temperature : int, optional
        Soft-Lloyd iterations at one temperature at most: default 50 (geometric), 15 (splits,
        whose fixed points stop at ``10 tol``; each accelerated; 6 where the annealing is
        abbreviated).
    stop_gap : float, default 1e-4
        The ladder stops at the first temperature where every membership is one-hot or the
        relaxation gap ``(J - F_T) / J`` is at most ``stop_gap`` (splits: the first such
        temperature after every group has split into single centroids); the hard polish
        follows.
    temperature : float, optional
        Temperature of ``predict_proba`` and ``to_layer`` (default: the last one of the fit).
    perturbation : float, default 1e-4
        Symmetric-breaking noise added before each temperature, relative to ``sqrt(lambda_max)``.
    max_swaps : int, default 30
        After the hard polish of an annealed fit, at most this many centroids moved by swaps
        (:func:`rbfkmeans.swaps.swap_search`): centroids whose removal costs little are moved
        to split the clusters whose split gains most (up to ``min(5, k // 4)`` at once, fewer
        as trials fail), Lloyd runs from there (to ``tol``), and the move is kept only if ``J``
        drops; the kept result is polished until its labels settle. It repairs a misallocation
        of centroids between regions that the order of the splits can leave and no Lloyd step
        undoes. ``0`` turns it off. Not used with ``assignment="hard"`` (plain Lloyd, as
        scikit-learn). A larger cap can pay at large ``k``: on flower.jpg pixels with k=64 the
        search stops at 30 on 3 of 5 seeds and ends 0.03-0.6% lower there with up to 64; on 1M
        rows with k=256, allowed 256, it keeps 256 and takes 1.7x the time for 0.01% lower ``J``.
    solver : {"lloyd", "gradient"}, default "lloyd"
        ``"gradient"`` optimises the centroids of a :class:`KMeansLayer` with autograd on ``F_T``:
        with ``optimizer=None`` by the per-cluster step ``eta_j = 1/(2 N_j)`` (identical to
        ``"lloyd"``), otherwise with ``optimizer(params)`` (any ``torch.optim`` optimiser) for
        ``max_iter_per_temperature`` steps per temperature on ``F_T / sum(w)``.
    optimizer : callable, optional
        ``params -> torch.optim.Optimizer`` for ``solver="gradient"``, e.g.
        ``lambda p: torch.optim.Adam(p, lr=0.1)``.
    chunk_size : int, optional
        Rows per chunk (default: about ``2^20`` (1M) memberships or distances per chunk). No
        pass holds more.
    random_state : int, RandomState or None
        Seeds the initialisation and the perturbations.
    device, dtype : optional
        Torch device of the computation (default CPU) and its dtype (default: float64 for float64
        input, float32 otherwise; float16/bfloat16 data is computed in float32).
    verbose : bool or int, default 0
        Progress bars over the temperatures and over the Lloyd iterations (of plain Lloyd, the
        hard polish and the swap trials) when set.

    Attributes
    ----------
    cluster_centers_ : ndarray (k, d)
    labels_ : ndarray (n,)
        Nearest centroid of each training point.
    inertia_ : float
        ``J`` at ``cluster_centers_`` (weighted; for cosine ``sum_i w_i (1 - max_j cos)``).
    n_iter_ : int
        Iterations run in total (soft, hard and those of the swap trials) by the best run.
    n_swaps_ : int
        Swaps kept by the best run (see ``max_swaps``).
    n_features_in_ : int
    temperatures_ : ndarray
        The temperatures actually run (the schedule, cut where the assignments became hard).
    temperature_ : float
        The last temperature of the fit (``0`` for ``"hard"``).
    critical_temperature_ : float
        The predicted first critical temperature ``T_c``; NaN after :meth:`partial_fit` or
        :meth:`fit_batches`, which run no annealing.
    history_ : list of dict
        Per temperature: ``T``, ``centers`` (k, d), ``objective`` (``F_T``), ``inertia`` (``J``),
        ``n_soft`` (weight of points with non one-hot memberships), ``n_iter``, and
        ``sample_fraction``: where the event-driven ladder ran a temperature on a subsample
        (``subsample``), the share of the data's weight it holds, and the three sums are the
        subsample's scaled to the data's weight (estimates); 1 where they are the data's.
    """

    #: defined on the class itself, so that scikit-learn's ``set_output`` wraps it (it wraps
    #: only a class's own ``transform``; ``fit_transform`` calls this one)
    transform = InferenceMixin.transform

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        assignment: str = "entmax15",
        metric: str = "sqeuclidean",
        schedule: str = "splits",
        subsample: int | None = 64,
        fit_rows: int | None = None,
        init: Any = "auto",
        n_init: int | str = "auto",
        max_iter: int = 300,
        tol: float = 1e-4,
        T_start: float | None = None,
        T_end: float | None = None,
        cooling: float | None = None,
        max_iter_per_temperature: int | None = None,
        stop_gap: float = 1e-4,
        temperature: float | None = None,
        perturbation: float = 1e-4,
        max_swaps: int = 30,
        solver: str = "lloyd",
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        chunk_size: int | None = None,
        random_state: int | np.random.RandomState | None = None,
        device: str | torch.device | None = None,
        dtype: Any = None,
        verbose: bool | int = 0,
    ) -> None:
        self.n_clusters = n_clusters
        self.assignment = assignment
        self.metric = metric
        self.schedule = schedule
        self.subsample = subsample
        self.fit_rows = fit_rows
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.T_start = T_start
        self.T_end = T_end
        self.cooling = cooling
        self.max_iter_per_temperature = max_iter_per_temperature
        self.stop_gap = stop_gap
        self.temperature = temperature
        self.perturbation = perturbation
        self.max_swaps = max_swaps
        self.solver = solver
        self.optimizer = optimizer
        self.chunk_size = chunk_size
        self.random_state = random_state
        self.device = device
        self.dtype = dtype
        self.verbose = verbose

    def _shared_parameters(self) -> dict[str, Any]:
        """The parameters every rank of a distributed fit must share: all but ``random_state``
        (the seeds come from rank 0), ``device`` (each rank its own), ``chunk_size`` and
        ``verbose``."""
        own = {"random_state", "device", "chunk_size", "verbose"}
        return {k: v for k, v in self.get_params().items() if k not in own}

    def set_params(self, **params: Any) -> RBFKMeans:
        """scikit-learn's ``set_params``, all or none: a call that raises (an unknown name)
        leaves every parameter as it was (scikit-learn's sets them one by one)."""
        with restored_on_failure(self):
            return super().set_params(**params)

    # -- validation and conversion ------------------------------------------------------------
    def _check_params(self) -> None:
        for name, (rule, ok) in PARAMETERS.items():
            value = getattr(self, name)
            if not ok(value):
                raise value_error(value, f"{name} must be {rule}; got {value!r}")
        if self.schedule == "k-means++" and not (isinstance(self.init, str)
                                                 and self.init in ("auto", "k-means++")):
            got = repr(self.init) if isinstance(self.init, str) else \
                f"a {type(self.init).__name__}"
            raise ValueError("schedule='k-means++' draws its own greedy k-means++ starts: init "
                             f"must be 'auto' or 'k-means++'; got init={got}")
        if self.T_start is not None and self.T_end is not None and self.T_end > self.T_start:
            raise ValueError(f"T_end must be at most T_start (the ladder cools from T_start to "
                             f"T_end); got T_start={self.T_start!r}, T_end={self.T_end!r}")
        if self.fit_rows is not None and self.fit_rows < self.n_clusters:
            raise ValueError(f"fit_rows must be None or at least n_clusters={self.n_clusters} "
                             f"(a sample of fewer rows leaves clusters empty); got "
                             f"fit_rows={self.fit_rows}")

    @property
    def _hard(self) -> bool:
        return get_assignment(self.assignment).hard

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> RBFKMeans:
        """Fit the centroids to ``X`` (n, d) with optional non-negative ``sample_weight`` (n,).

        Under an initialised ``torch.distributed`` process group, ``X`` is this rank's shard and
        every rank ends with the centroids of the fit on the concatenated data. A
        ``torch.utils.data.DataLoader`` or an iterator of chunks is handed to :meth:`fit_batches`
        (mini-batch, one pass); a ``numpy.memmap`` is used as it is (no copy) by the full fit,
        unless it lies far from the origin. Otherwise, in one process, repeated rows are fitted
        as one row of their summed weight (:mod:`rbfkmeans.repeats`) when that removes a tenth
        of the rows: the same objective at the cost of the distinct rows; ``labels_`` covers
        every row.

        The fit runs in the frame of :mod:`rbfkmeans.frame`: on ``X - mean`` when the data's
        mean lies farther from the origin than its spread (a copy), rescaled by a power of two
        when its values are out of the comfortable range of the dtype, so that every distance is
        accurate relative to the spread of the data, not its offset. A call that raises (bad
        input, ``KeyboardInterrupt``) leaves a fitted estimator exactly as it was.
        """
        if isinstance(X, torch.utils.data.DataLoader | Iterator):
            return self.fit_batches(X, sample_weight=sample_weight)
        with restored_on_failure(self), precompile.pinned():
            return self._fit(X, sample_weight)

    def _fit(self, X: Any, sample_weight: Any) -> RBFKMeans:
        comm = Comm.auto()
        out_of_core = isinstance(X, np.memmap)
        error: Exception | None = None
        w: Tensor | None = None
        weight = 0.0
        try:  # validate this rank's shard; under torch.distributed every rank learns the outcome
            self._check_params()
            if comm.active and isinstance(self.init, str) and self.init == "random":
                raise ValueError("init='random' is not supported under torch.distributed; "
                                 "use 'k-means++' or 'mean'")
            # a shard may hold no rows, or weigh nothing, where the others do
            X = self._check_X(X, reset=True, min_samples=0 if comm.active else 1)
            if comm.active and sp.issparse(X):
                raise ValueError("sparse X is not supported under torch.distributed; got a "
                                 f"{type(X).__name__} shard")
            self._dtype_ = self._compute_dtype(X)
            w = self._weights(sample_weight, X, all_zero=comm.active)  # (n,) or None
            weight = float(X.shape[0]) if w is None else float(w.double().sum())
        except (ValueError, TypeError) as exc:
            error = exc
        shared = self._shared_parameters()
        shards = agree_on_shards(comm, error, X, weighted=w is not None,
                                 float64=error is None and self._dtype_ == torch.float64,
                                 key=parameters_key(shared) if comm.active else 0,
                                 weight=weight, params=shared)
        n_total = shards.total
        if n_total < self.n_clusters:
            raise ValueError(
                f"n_samples={n_total} should be >= n_clusters={self.n_clusters}"
            )
        if shards.float64 and self._dtype_ != torch.float64:  # as one process would compute
            self._dtype_ = torch.float64
            w = None if w is None else w.to(torch.float64)
        if shards.weighted and w is None:  # weights on other ranks: these rows weigh 1 each
            w = torch.ones(X.shape[0], dtype=self._dtype_, device=self._torch_device())
        sparse = sp.issparse(X)
        # the kernels or the torch passes; predict takes the same (labels_ agree at ties,
        # but for the bounded passes of wide data: inference.predict)
        self._kernel_passes = precompile.decide(n_total * self.n_clusters, comm)
        Xt = self._to_torch(X)
        # repeated rows fit as one weighted row (one process; a memmap is left as it is; with
        # fit_rows the fit draws its sample from the rows as they are)
        sampled = self.fit_rows is not None and n_total > self.fit_rows
        folded = None if comm.active or out_of_core or sparse or sampled or callable(
            self.init) else fold_repeats(Xt, w, chunk_size=self.chunk_size)  # a callable init
        # is promised X: every row
        wf: Tensor | None
        if folded is not None and folded.rows.numel() >= self.n_clusters:
            Xf, wf, own = Xt[folded.rows], folded.weight, True  # (m, d) distinct rows, a copy
        else:
            folded = None
            Xf, wf, own = Xt, w, _owns(Xt, X)  # (n, d)
        spherical = get_metric(self.metric).spherical
        space: RowSpace | None = None  # fewer rows than features: fitted in their span
        if not (comm.active or sparse or out_of_core) and isinstance(self.init, str) and \
                row_space_applies(*Xf.shape):
            space, Xf = RowSpace.of(Xf, centred=not spherical)  # (m, m) coordinates
            own = True
        frame = Frame() if spherical else Frame.choose(Xf, wf, chunk_size=self.chunk_size,
                                                       comm=comm)
        data = self._data(frame.enter(Xf, inplace=own), wf, comm)
        rng = check_random_state(self.random_state)
        mean_var, lam = fit_scales(data, frame, hard=self._hard)  # tol's unit, T_c's
        abs_tol = float(self.tol) * mean_var
        Tc = critical_temperature_factor(self.assignment, self.n_clusters) * lam
        self.critical_temperature_ = frame.sq_from(Tc)
        temps = Temperatures(Tc, None if self.T_start is None else frame.sq_to(self.T_start),
                             None if self.T_end is None else frame.sq_to(self.T_end))
        # "auto" anneals from the mean where there is one: cosine rows can average to zero
        self._mean_start = not (spherical and not self._hard and isinstance(self.init, str)
                                and self.init == "auto" and not bool(weighted_mean(data).any()))
        init = frame.init(self._init_name())
        schedules = run_schedules(self, data, n_total, self._n_init(comm))
        seeds = torch.tensor([int(rng.randint(np.iinfo(np.int32).max)) for _ in schedules])
        comm.broadcast_(seeds, src=0)  # random_state=None differs between processes
        best: dict[str, Any] | None = None
        for run, schedule in enumerate(schedules):
            result = self._fit_one(data, int(seeds[run]), abs_tol, lam, run, schedule,
                                   init=init, temps=temps)
            if best is None or result["inertia"] < best["inertia"]:
                best = result
        assert best is not None
        best = leave_frame(best, frame, data, X.dtype)
        if space is not None:  # the data's coordinates; labels and J of every row
            frame = Frame() if spherical else Frame.choose(Xt, w, chunk_size=self.chunk_size)
            best = leave_row_space(best, space, self._data(frame.enter(Xt), w), frame, X.dtype)
        elif folded is not None:  # every row takes the label of its distinct row
            best["labels"] = best["labels"][folded.inverse]
        self._frame_ = frame
        self._metric_ = self.metric  # the geometry of the centroids (partial_fit continues it)
        self._set_fitted(best, X)
        # MacQueen counts for a later partial_fit: the (weighted) size of each cluster
        counts = torch.as_tensor(np.bincount(
            self.labels_, weights=None if w is None else to_numpy(w).astype(np.float64),
            minlength=self.n_clusters).astype(np.float64))  # (k,)
        comm.sum_(counts)
        self._online_counts: np.ndarray | None = to_numpy(counts)
        if comm.rank == 0:
            self._warn_if_centres_coincide(stacklevel=4, sizes=self._online_counts)
        return self

    def _n_init(self, comm: Comm) -> int:
        explicit = not isinstance(self.init, str) and not callable(self.init)
        if explicit and self.n_init != "auto" and int(self.n_init) > 1:
            if comm.rank == 0:
                warnings.warn(
                    "Explicit initial center position passed: performing only one init in "
                    f"RBFKMeans instead of n_init={self.n_init}.", RuntimeWarning, stacklevel=3)
            return 1
        if self.n_init != "auto":
            return int(self.n_init)
        # as scikit-learn: plain Lloyd from random rows or a callable takes the best of 10
        random_start = callable(self.init) or (isinstance(self.init, str)
                                               and self.init == "random")
        return 10 if self._hard and random_start else 1

    def _init_name(self) -> Any:
        if isinstance(self.init, str) and self.init == "auto":
            return "k-means++" if self._hard or not getattr(self, "_mean_start", True) \
                else "mean"
        return self.init

    def _fit_one(self, data: Data, seed: int, abs_tol: float, lam: float,
                 run: int, schedule: str, **frame_units: Any) -> dict[str, Any]:
        return fit_run(self, data, seed, abs_tol, lam, run, schedule, **frame_units)

    def _set_fitted(self, best: dict[str, Any], X: np.ndarray) -> None:
        self.cluster_centers_ = to_numpy(best["C"]).astype(X.dtype, copy=False)
        self.labels_ = to_numpy(best["labels"]).astype(np.int64)
        self.inertia_ = float(best["inertia"])
        self.n_iter_ = int(best["n_iter"])
        self.n_swaps_ = int(best.get("n_swaps", 0))
        self.temperatures_ = np.asarray(best["temperatures"], dtype=np.float64)
        self.temperature_ = float(self.temperatures_[-1]) if self.temperatures_.size else 0.0
        self.history_ = best["history"]
        self._online_counts = None

    def _warn_if_centres_coincide(self, stacklevel: int,
                                  sizes: np.ndarray | None = None) -> None:
        """scikit-learn's ``ConvergenceWarning`` where fewer distinct centres than
        ``n_clusters`` were found (fewer distinct rows of positive weight than clusters): the
        clusters of positive weight ``sizes`` (k,) where the fit has them (as scikit-learn
        counts labels: centres that coincide differ in their last bits once they leave the
        fit's frame), else the distinct centres."""
        distinct = distinct_rows(self.cluster_centers_)
        if sizes is not None:
            distinct = min(distinct, int(np.count_nonzero(sizes)))
        if distinct < self.n_clusters:
            warnings.warn(
                f"Number of distinct clusters ({distinct}) found smaller than "
                f"n_clusters ({self.n_clusters}). Possibly due to duplicate points in X.",
                ConvergenceWarning,
                stacklevel=stacklevel,
            )

    def _set_online(self, T: float) -> None:
        """The fitted attributes that an online fit (no annealing) leaves as they are named."""
        self.temperatures_ = np.array([], dtype=np.float64)
        self.temperature_ = T
        self.history_ = []
        self.critical_temperature_ = float("nan")
        self.n_swaps_ = 0

    # -- fit and use at once -------------------------------------------------------------------
    def fit_predict(self, X: Any, y: Any = None, sample_weight: Any = None) -> np.ndarray:
        """Fit and return ``labels_`` (for a batch source: its rows' labels, in the order of a
        second pass over it, which needs a source that can be iterated again)."""
        if isinstance(X, Iterator) and not isinstance(X, torch.utils.data.DataLoader):
            raise ValueError("fit_predict needs the data again to label it; got a one-shot "
                             "iterator (pass a DataLoader, a list or an array)")
        return self.fit(X, sample_weight=sample_weight).labels_

    def fit_transform(self, X: Any, y: Any = None, sample_weight: Any = None) -> np.ndarray:
        """Fit and return the distances (n, k) of every row to the centroids (for a
        ``DataLoader``: of the rows of a second pass over it, in its order). A call that raises
        leaves a fitted estimator as it was."""
        if isinstance(X, Iterator) and not isinstance(X, torch.utils.data.DataLoader):
            raise ValueError("fit_transform needs the data again to transform it; got a one-shot "
                             "iterator (pass a DataLoader, a list or an array)")
        with restored_on_failure(self):
            self.fit(X, sample_weight=sample_weight)
            if isinstance(X, torch.utils.data.DataLoader):
                return np.concatenate([self.transform(batch_data(item)) for item in X])
            return self.transform(X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
