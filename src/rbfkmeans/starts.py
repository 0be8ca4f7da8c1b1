r"""The start of an annealed run of :class:`~rbfkmeans.RBFKMeans`: its ladder and, where the
annealing is abbreviated, the race against a k-means++ start.

:func:`annealed` runs one of two ladders: the event-driven one
(:func:`rbfkmeans.splits.anneal_splits`: groups of coincident centroids split at their own
critical temperatures, from the mean of the rows it anneals, in the principal subspace of wide
data; cosine data anneals as the Euclidean relaxation of its unit rows) or the geometric one
(:func:`rbfkmeans.annealing.anneal`: all ``k`` centroids through ``T_start, T_start cooling,
...``; the ladder of other starts and of the gradient solver). An event-driven annealing whose
last passes would cost more than ``ANNEAL_WORK`` products is abbreviated (:func:`abbreviated`:
it cools faster and stops once every group is one centroid), and :func:`race` then pits it
against a greedy k-means++ start, both polished on a subsample: top-down splits can misplace
centroids between clusters of unequal size (on a mixture of 4,096 unequal Gaussians in 128
dimensions, k = 1,024, the annealed start was 11% above k-means++, where on MNIST and its PCA
it is 0.1-0.4% below). Each function checks that it is given an estimator inside its fit and
a pass context, then reads the settings from the estimator as they are (the estimator's ``fit``
validated them; :func:`rbfkmeans.runs.fit_run` calls these).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from . import subspace
from ._validation import check_positive_int
from .annealing import AnnealResult, AnnealStep, anneal
from .gradient import GradientStep
from .lloyd import LloydResult, lloyd
from .passes import Data
from .schedules import geometric_schedule
from .seeding import initial_centers, weighted_mean
from .splits import Subsample, anneal_splits, resolution_temperature
from .subspace import Subspace, principal_subspace

if TYPE_CHECKING:
    from .estimator import RBFKMeans

__all__ = ["ANNEAL_MIN_ROWS", "ANNEAL_MIN_WIDTH", "ANNEAL_WORK", "RACE_PROBE_ROWS_PER_CLUSTER",
           "RACE_ROWS_PER_CLUSTER", "Temperatures", "abbreviated", "annealed", "event_driven",
           "geometric_ladder", "race"]

#: The event-driven ladder anneals on ``subsample`` rows per group, at least this many
ANNEAL_MIN_ROWS = 4096
#: An annealing whose last passes cost more than this many point-centroid-feature products
#: (rows x k x features) cools by 0.5 between events (not 0.7) and ends as soon as every group
#: is a single centroid, its fixed points taking at most 6 steps (the hard polish and the
#: search refine from there)
ANNEAL_WORK = 1 << 28
#: and counts at least this many features: below it a row-group pair costs about as much (the
#: memberships, not the products: the compiled group pass took 0.88 ns a pair at 2 features,
#: 1.37 ns at 32, 1.85 ns at 64). 20,000 x 2 rows with k = 2,000 took 32.5 s unabbreviated
#: (KMeans(n_init=1) 1.3 s), 8.1 s abbreviated at 0.3% lower J; 200,000 x 2, k = 500, 14.7 s
#: and 6.4 s at 0.7% lower J (KMeans(n_init=1) 7.7 s, 1.2% above)
ANNEAL_MIN_WIDTH = 32
#: An abbreviated annealing races a k-means++ start (:func:`race`), both polished on a random
#: ``RACE_ROWS_PER_CLUSTER * k`` of the search rows; only the winner is polished on all of
#: them (on MNIST with k = 256 the losing rival's polish on all rows took 6.9 s of a 40 s fit).
#: The rival is first drawn from other search rows (a probe), and from all of them only if it
#: wins
RACE_ROWS_PER_CLUSTER = 32
#: Where the search rows hold more than twice the race's rows, the race is first run against
#: a rival drawn from this many other rows per centroid (at most ``RACE_ROWS_PER_CLUSTER``): a
#: probe, which tells whether k-means++ would win and costs a step per centroid over the rows
#: it reads. From 16 rows per centroid, not 32: the race's outcome the same on MNIST's
#: 64-dimensional PCA (k = 1,024, the annealed start wins), MNIST k = 256 (wins), E and two
#: smaller mixtures of its kind (the probe wins, 2.5%-3.8% below the annealed start), a
#: 32-dimensional PCA of MNIST (k = 512, loses by 0.36% where it lost by 0.14%); the PCA's fit
#: 6.66 s against 7.21 s at best of six runs each (AMD EPYC with AVX-512), its race 0.6 s shorter
RACE_PROBE_ROWS_PER_CLUSTER = 16


def _check_run(est: Any, data: Any = None, name: str = "data") -> None:
    """Raise unless ``est`` is an RBFKMeans whose fit is under way (``critical_temperature_``
    set) and ``data`` (when given) a pass context. The estimator is recognised by what a run
    reads of it (its ``_init_name``, ``_hard`` and ``critical_temperature_``), so that this
    module, below the estimator, does not import it."""
    if not (callable(getattr(est, "_init_name", None)) and hasattr(type(est), "_hard")
            and hasattr(est, "critical_temperature_")):
        raise TypeError("est must be an RBFKMeans inside its fit (critical_temperature_ set); "
                        f"got {type(est).__name__}")
    if data is not None and not isinstance(data, Data):
        raise TypeError(f"{name} must be a rbfkmeans.passes.Data; got {type(data).__name__}")


@dataclass(frozen=True)
class Temperatures:
    """The temperatures a run starts from, in the units of the data it runs on (a fit in a
    rescaled frame, :mod:`rbfkmeans.frame`, converts them): the first critical temperature and
    the estimator's ``T_start`` and ``T_end`` (None: the defaults)."""

    critical: float
    start: float | None = None
    end: float | None = None

    @classmethod
    def of(cls, est: RBFKMeans) -> Temperatures:
        """The estimator's own (data units)."""
        return cls(est.critical_temperature_, est.T_start, est.T_end)


def geometric_ladder(est: RBFKMeans, temps: Temperatures | None = None) -> np.ndarray:
    """``T_start, T_start cooling, ...`` down to ``T_end`` (defaults ``1.2 T_c``, ``0.85``,
    ``1e-6 T_c``); empty for constant data. ``temps`` defaults to the estimator's."""
    _check_run(est)
    temps = temps or Temperatures.of(est)
    Tc = temps.critical
    T_start = temps.start if temps.start is not None else 1.2 * Tc
    T_end = temps.end if temps.end is not None else 1e-6 * Tc
    if T_start <= 0 or T_end <= 0:  # constant data: nothing to anneal
        return np.array([])
    cooling = 0.85 if est.cooling is None else est.cooling
    return geometric_schedule(T_start, min(T_end, T_start), cooling)


def event_driven(est: RBFKMeans, data: Data, schedule: str | None = None) -> bool:
    """Whether a run with ``schedule`` (default: the estimator's) takes the event-driven
    ladder: the Lloyd solver from the mean (on cosine data: the ladder of the Euclidean
    relaxation of the unit rows, then the spherical polish and search)."""
    _check_run(est, data)
    init = est._init_name()
    return ((schedule or est.schedule) == "splits" and est.solver == "lloyd"
            and isinstance(init, str) and init == "mean")


def abbreviated(est: RBFKMeans, n: int, d: int) -> bool:
    """Whether the event-driven annealing of ``n`` rows of ``d`` features (after the
    projection on the principal subspace of wide data) is abbreviated: its last passes, on
    ``min(n, max(ANNEAL_MIN_ROWS, subsample k))`` rows, would cost more than ``ANNEAL_WORK``
    products of at least ``ANNEAL_MIN_WIDTH`` features. Such a fit also races a k-means++
    start on the search rows (:func:`race`)."""
    _check_run(est)
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    final_rows = n if est.subsample is None else \
        min(n, max(ANNEAL_MIN_ROWS, est.subsample * est.n_clusters))
    return final_rows * est.n_clusters * max(d, ANNEAL_MIN_WIDTH) > ANNEAL_WORK


def annealed(est: RBFKMeans, data: Data, C: Tensor | None, abs_tol: float, lam: float,
            gen: torch.Generator, tick: Callable[[float, int], None] | None,
            schedule: str, temps: Temperatures) -> AnnealResult:
    """The annealing of a run from ``C`` (the geometric ladder's start; None on the
    event-driven ladder, which starts from the mean of the rows it anneals): its centroids in
    all features (on the sphere for cosine data), ladder and iterations. ``tick(T, it)`` reports
    each temperature; ``temps`` are in the units of ``data``."""
    _check_run(est, data)
    if event_driven(est, data, schedule):
        space: Subspace | None = None
        rows = data
        spherical = data.metric.spherical
        if spherical:  # the unit rows, annealed as Euclidean points (their memberships at T
            # are those of the scores cos / T: -||x - c||^2 / 2T = (cos - 1) / T for unit c)
            rows = Data(data.X, data.w, chunk_size=data.chunk_size, comm=data.comm,
                        validate=False)
        if data.d > subspace.MAX_DIM and not data.comm.active:  # wide: the top directions
            m = data.n if est.subsample is None else \
                min(data.n, max(ANNEAL_MIN_ROWS, est.subsample * est.n_clusters))
            pick = torch.randperm(data.n, generator=gen)[:m].to(data.X.device)
            space = principal_subspace(data, pick)
            rows = Data(space.project(data.X[pick]), None if data.w is None else data.w[pick],
                        chunk_size=data.chunk_size, validate=False)
        T_c = None if spherical else 0.8 * temps.critical or None  # cosine: the ladder's own
        big = abbreviated(est, sum(rows.comm.counts(rows.n)), rows.d)  # all ranks' rows
        res = anneal_splits(
            rows, est.n_clusters, est.assignment,
            T_start=temps.start if temps.start is not None else T_c, T_end=temps.end,
            cooling=(0.5 if big else 0.7) if est.cooling is None else est.cooling,
            max_iter=est.max_iter_per_temperature or (6 if big else 15), tol=10.0 * abs_tol,
            stop_gap=float(est.stop_gap), points_per_group=est.subsample,
            min_points=ANNEAL_MIN_ROWS, generator=gen, progress=tick, stop_at_singles=big,
        )
        if space is not None or spherical:  # J of its sample is not J of the rows here
            res.sample = None
        if space is not None:  # the centroids, and those of the history, in all features
            res.C = space.lift(res.C)
            for h in res.history:
                h["C"] = space.lift(h["C"])  # type: ignore[arg-type]
        if spherical:  # onto the sphere (a zero mean keeps the data's mean direction)
            res.C = data.project(res.C, data.project(weighted_mean(data).unsqueeze(0))
                                 .expand_as(res.C))
        return res
    assert C is not None  # the geometric ladder's start
    step: AnnealStep | None = None
    max_iter = est.max_iter_per_temperature or 50
    if est.solver == "gradient":
        step = GradientStep(est.assignment, C, optimizer=est.optimizer, max_iter=max_iter,
                            tol=abs_tol)
    ladder = geometric_ladder(est, temps)
    # below the data's resolution a soft pass is the hard one (and 1 / T may leave float32)
    ladder = ladder[ladder >= resolution_temperature(data)]
    return anneal(
        data, C, ladder, est.assignment, step=step, max_iter=max_iter,
        tol=abs_tol, perturbation=float(est.perturbation) * math.sqrt(max(lam, 0.0)),
        generator=gen, stop_gap=float(est.stop_gap), progress=tick,
    )


def race(est: RBFKMeans, search: Data, C: Tensor, gen: torch.Generator, seed: int
          ) -> tuple[Tensor, LloydResult | None, int]:
    """The start the hard polish of an abbreviated annealing takes: the annealed ``C`` or a
    greedy k-means++ start, whichever ends the lower ``J`` when both are polished on a random
    ``m = RACE_ROWS_PER_CLUSTER k`` of ``search``'s rows. Returns it (the annealed ``C`` itself
    when it wins, the rival's polished centroids otherwise), the winner's polish when the race
    ran on all of ``search``'s rows (else None), and the Lloyd iterations run.

    The rival that goes on is drawn from all the search rows: drawn from 16 or 64 rows per
    centroid it won the race on the mixture of 4,096 unequal Gaussians (k = 1,024) all the
    same, but ended the fit 3.3% or 0.6% above one drawn from all 256. Drawing it costs a
    pass over the search rows per centroid (5.9 s of a 22 s fit on MNIST with k = 256, where
    the annealed start wins), so where the search rows hold more than ``2 m`` rows the race
    is first run against a rival drawn from ``RACE_PROBE_ROWS_PER_CLUSTER k`` other rows (not
    the race rows, which would favour a start made of them), and the one from all rows is
    drawn only if that rival wins; it goes on if it also ends below the annealed start. The
    probe is a weaker rival than one from all rows (on a 32-dimensional PCA of MNIST, k = 512,
    0.36% above the annealed start where one from twice its rows was 0.14% above): a
    k-means++ start that would win by less than that is not drawn.

    A rival's polish gives up once it stalls above the annealed start's ``J``
    (:func:`rbfkmeans.lloyd.lloyd`'s ``target``): a rival that loses is not polished to its
    end (on MNIST's 64-dimensional PCA with k = 1,024, where the annealed start wins by 0.8%,
    the losing rival's polish had taken 41 iterations, 1.2 s of a 3.2 s race). A rival that
    wins has as a rule not given up, and its polish is the one that goes on; one that gave up
    and ends below all the same (on rows within rounding of their means) is polished to its
    end first."""
    _check_run(est, search, "search")
    k = est.n_clusters
    m = RACE_ROWS_PER_CLUSTER * k
    pool = Subsample(search.weighing_rows(), gen)
    rows = pool.take(m)
    drawn_from_all = 2 * m >= pool.total
    probe = search if drawn_from_all else \
        pool.take(min(RACE_PROBE_ROWS_PER_CLUSTER, RACE_ROWS_PER_CLUSTER) * k, skip=m)
    rival = initial_centers(probe, k, "k-means++", generator=gen, seed=seed)
    ours = lloyd(rows, C, max_iter=est.max_iter, tol=0.0)
    theirs = lloyd(rows, rival, max_iter=est.max_iter, tol=0.0, target=ours.inertia)
    n_iter = ours.n_iter + theirs.n_iter
    if theirs.inertia >= ours.inertia:
        return C, (ours if rows is search else None), n_iter
    if not drawn_from_all:
        rival = initial_centers(search, k, "k-means++", generator=gen, seed=seed)
        theirs = lloyd(rows, rival, max_iter=est.max_iter, tol=0.0, target=ours.inertia)
        n_iter += theirs.n_iter
        if theirs.inertia >= ours.inertia:
            return C, None, n_iter
    if theirs.gave_up:  # it gave up below the annealed start's J all the same (the rule
        # reads J from the sums, which rounding decides on rows within rounding of their
        # means): polished to its end, so that the polish that goes on is a converged one
        theirs = lloyd(rows, theirs.C, max_iter=est.max_iter, tol=0.0)
        n_iter += theirs.n_iter
    return theirs.C, (theirs if rows is search else None), n_iter
