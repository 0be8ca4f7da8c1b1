r"""One run of :class:`~rbfkmeans.RBFKMeans`: start, annealing ladder, hard polish, swap search,
Hartigan's moves.

A run from a seed ``s`` is

1. the start (:func:`rbfkmeans.seeding.initial_centers`; the event-driven ladder starts from the
   mean of the rows it anneals);
2. the annealing, on one of two ladders: the event-driven one
   (:func:`rbfkmeans.splits.anneal_splits`, groups of coincident centroids split at their own
   critical temperatures) or the geometric one (:func:`rbfkmeans.annealing.anneal`, all ``k``
   centroids through ``T_start, T_start cooling, ...``; also the ladder of other starts, of the
   gradient solver and of cosine data). ``assignment="hard"`` skips it (plain Lloyd);
3. the hard Lloyd polish until the labels settle (:func:`rbfkmeans.lloyd.lloyd`), so the result
   is a Lloyd fixed point. An abbreviated annealing (large ``n k d``, :func:`_abbreviated`)
   first races a k-means++ start, both polished on a subsample (:func:`_race`), and the
   lower ``J`` goes on to the polish: the fast top-down splits can misplace centroids between
   unequal clusters (on a mixture of 4,096 unequal Gaussians in 128 dimensions, k = 1,024,
   the annealed start was 11% above k-means++ where on MNIST and its PCA it is 0.1-0.4%
   below);
4. the swap search (:func:`rbfkmeans.swaps.swap_search`) when annealed, with a last look at
   ``k // 2`` swaps (within ``LAST_LOOK``) before it stops on the event-driven ladder;
5. when annealed on squared-Euclidean data, Hartigan's single-point moves
   (:func:`rbfkmeans.hartigan.hartigan`) from the search's Lloyd fixed point, a Lloyd pass that
   confirms the fixed point they reach, and, if they moved anything, a shorter swap search from
   there (single swaps, no last look); up to ``HARTIGAN_ROUNDS`` rounds, until the moves or the
   search find nothing. Each escapes the other's fixed points: on the 23 sets of
   ``benchmarks/bench_fit.py`` (five seeds) the rounds lowered the worst excess over the better
   of ``KMeans(n_init=10)`` and breathing k-means from 0.53% to 0.15%.

On more than ``2 max(SEARCH_MIN_ROWS, SEARCH_ROWS_PER_CLUSTER k)`` rows the event-driven run
polishes and searches on a random subsample of that size, then polishes once more on all rows
(Lloyd, then, if it settled, Hartigan's moves worth at least ``HARTIGAN_MIN_GAIN`` of ``J``
and Lloyd).
:func:`run_schedules` gives the ladder of each run of a fit: a default fit of at most
``SMALL_FIT_ENTRIES`` point-centroid pairs runs both ladders, and the estimator keeps the lower
``J``; an event-driven fit with ``n_init > 1`` anneals once and makes the other runs ``RESTART``
(step 2 replaced by a greedy k-means++ start on the search rows, steps 3-5 as above). The run
reads its settings from the estimator (its constructor parameters, its ``_hard``,
``_init_name()`` and ``critical_temperature_``); nothing here validates them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from torch import Tensor

from . import subspace
from .annealing import AnnealResult, AnnealStep, anneal
from .gradient import GradientStep
from .hartigan import hartigan, holds_weight
from .lloyd import LloydResult, lloyd
from .passes import Data, Stats, cluster_stats
from .schedules import geometric_schedule
from .seeding import initial_centers, weighted_mean
from .splits import Subsample, anneal_splits
from .subspace import Subspace, principal_subspace
from .swaps import SwapResult, swap_search

if TYPE_CHECKING:
    from .estimator import RBFKMeans

__all__ = ["ANNEAL_MIN_ROWS", "HARTIGAN_MIN_GAIN", "HARTIGAN_PASSES", "HARTIGAN_ROUNDS",
           "LAST_LOOK", "RACE_ROWS_PER_CLUSTER", "RESTART", "SEARCH_MIN_ROWS", "SEARCH_PASSES",
           "SEARCH_ROWS_PER_CLUSTER", "SEARCH_WORK", "SMALL_FIT_ENTRIES", "Temperatures",
           "fit_run", "run_schedules", "search_budget", "search_rows"]

#: On large data the event-driven fit polishes and searches swaps on a subsample of
#: ``max(SEARCH_MIN_ROWS, SEARCH_ROWS_PER_CLUSTER * k)`` rows first (used when the data has more
#: than twice as many), then polishes on all rows.
SEARCH_MIN_ROWS = 65536
SEARCH_ROWS_PER_CLUSTER = 256
#: With ``fit_rows``, a k-means++ start is drawn from a random ``SEED_ROWS_PER_CLUSTER * k`` of
#: the sample's rows: each of its ``k`` steps reads every row it draws from (memory-bound: on
#: MNIST with k = 256 the greedy seeding of 65,536 rows took 6.2 s of a 9.6 s fit), and a start
#: from 16 rows per centroid ended 25 Lloyd iterations on the sample 0.05% above one from all.
SEED_ROWS_PER_CLUSTER = 16
#: An abbreviated annealing races a k-means++ start (:func:`_race`), both polished on a random
#: ``RACE_ROWS_PER_CLUSTER * k`` of the search rows; only the winner is polished on all of
#: them (on MNIST with k = 256 the losing rival's polish on all rows took 6.9 s of a 40 s fit).
#: The rival is first drawn from as many other search rows, and from all of them only if it wins
RACE_ROWS_PER_CLUSTER = 32
#: The event-driven run's swap search takes a last look at ``k // 2`` swaps, within these
#: bounds, before it stops (:func:`rbfkmeans.swaps.swap_search`); the geometric ladder's search
#: stops without one.
LAST_LOOK = (5, 12)
#: The swap search's trials may cost as much as this many passes over all the rows
#: (:func:`search_budget`), or ``SEARCH_WORK`` point-centroid-feature products if that is more
SEARCH_PASSES = 10
SEARCH_WORK = 1 << 33
#: The event-driven ladder anneals on ``subsample`` rows per group, at least this many
ANNEAL_MIN_ROWS = 4096
#: An annealing whose last passes cost more than this many point-centroid-feature products
#: (rows x k x features) cools by 0.5 between events (not 0.7) and ends as soon as every group
#: is a single centroid, its fixed points taking at most 6 steps (the hard polish and the
#: search refine from there)
ANNEAL_WORK = 1 << 28
#: An annealed run's Hartigan polish (:func:`rbfkmeans.hartigan.hartigan`) takes at most this
#: many passes, and at most as much work as the swap search's trials (:func:`search_budget`:
#: 10 passes over all the rows on large data, no bound in practice on small): on 1,000,000 x 32
#: rows that Lloyd leaves unsettled after 300 iterations its moves never run out, and 100
#: passes on all rows made the fit 2.2x as long for 0.05% of J
HARTIGAN_PASSES = 100
#: and at most this many rounds of Hartigan's moves and the swap search in turn
HARTIGAN_ROUNDS = 3
#: Hartigan's moves on all the rows, after a search on a subsample of them, keep only batches
#: that lower ``J`` by more than this fraction of it. Such fits have at least
#: ``2 SEARCH_ROWS_PER_CLUSTER`` rows per cluster, where a move's factors ``N/(N -+ w)`` are
#: nearly 1: on MNIST (k = 10) and on the mixture of 4,096 Gaussians (k = 1,024) the moves
#: had lowered ``J`` by 3.5e-7 and 4.6e-7 of it, for 0.27 s of a 1.4 s fit and 8.4 s of 110 s
#: (their passes and the Lloyd run that confirms them).
HARTIGAN_MIN_GAIN = 1e-6
#: A default fit of at most this many point-centroid pairs (``n k``: a few hundred points) runs
#: both ladders and keeps the better: the geometric one is the more thorough search on tiny
#: data, and the two together still take a few tens of milliseconds there.
SMALL_FIT_ENTRIES = 2048
#: The runs after the first of an event-driven fit with ``n_init > 1``: no annealing, a greedy
#: k-means++ start on the search rows, then the same polish, swap search and Hartigan rounds
RESTART = "k-means++"


def _check(est: Any, data: Any, schedule: Any = "splits") -> None:
    """Raise unless ``est`` is an RBFKMeans whose fit is under way (``critical_temperature_``
    set), ``data`` a pass context and ``schedule`` a ladder name."""
    from .estimator import RBFKMeans

    if not isinstance(est, RBFKMeans) or not hasattr(est, "critical_temperature_"):
        raise TypeError("est must be an RBFKMeans inside its fit (critical_temperature_ set); "
                        f"got {type(est).__name__}")
    if not isinstance(data, Data):
        raise TypeError(f"data must be a rbfkmeans.passes.Data; got {type(data).__name__}")
    if schedule not in ("splits", "geometric", RESTART):
        raise ValueError(f"schedule must be 'splits', 'geometric' or {RESTART!r}; "
                         f"got {schedule!r}")


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


def search_rows(k: int, d: int) -> int:
    """The rows the polish and the swap search of an event-driven fit run on when the data has
    more than twice as many: ``max(f SEARCH_MIN_ROWS, SEARCH_ROWS_PER_CLUSTER k)``, the floor
    scaled by ``f = min(1, 32 / d)`` on wider data (a row costs ``d`` products), by at most
    1/16. The rows per cluster are not: on a mixture of 4,096 unequal Gaussians in 128
    dimensions, k = 1,024, 64 per cluster left the fit 2.2% above KMeans(n_init=1), 256 0.7%."""
    f = max(1.0 / 16.0, min(1.0, 32.0 / d))
    return max(math.ceil(SEARCH_MIN_ROWS * f), k * SEARCH_ROWS_PER_CLUSTER)


def search_budget(n_total: int, n_search: int, k: int, d: int) -> int:
    """The Lloyd iterations the swap search's trials may run in all: as much work (``n k d``
    products per iteration) as ``SEARCH_PASSES`` passes over all the data, or
    ``SEARCH_WORK`` products when that is more (small problems: no bound in practice)."""
    work = max(SEARCH_PASSES * n_total * k * d, SEARCH_WORK)
    return max(1, int(work // max(1, n_search * k * d)))


def geometric_ladder(est: RBFKMeans, temps: Temperatures | None = None) -> np.ndarray:
    """``T_start, T_start cooling, ...`` down to ``T_end`` (defaults ``1.2 T_c``, ``0.85``,
    ``1e-6 T_c``); empty for constant data. ``temps`` defaults to the estimator's."""
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
    init = est._init_name()
    return ((schedule or est.schedule) == "splits" and est.solver == "lloyd"
            and isinstance(init, str) and init == "mean")


def run_schedules(est: RBFKMeans, data: Data, n_total: int, n_init: int) -> list[str]:
    """The ladder of each run: ``n_init`` times the estimator's, except that

    - a default fit (``n_init="auto"``, event-driven) of at most ``SMALL_FIT_ENTRIES``
      point-centroid pairs also runs the geometric ladder;
    - an event-driven fit with ``n_init > 1`` anneals once and makes the other runs
      ``RESTART``: k-means++ starts taken through the same polish and searches. Annealed
      runs differ only by the symmetric-breaking noise and mostly end in the same basin
      (hubble_deep_field k=16: 7 of 8 seeds in one), where the restarts, at about a third
      of the annealed run's time on 20,000 pixels, reach others."""
    _check(est, data)
    if (est.n_init == "auto" and not est._hard and event_driven(est, data)
            and n_total * est.n_clusters <= SMALL_FIT_ENTRIES):
        return ["splits", "geometric"]
    if n_init > 1 and not est._hard and event_driven(est, data):
        return [est.schedule] + [RESTART] * (n_init - 1)
    return [est.schedule] * n_init


def _abbreviated(est: RBFKMeans, n: int, d: int) -> bool:
    """Whether the event-driven annealing of ``n`` rows of ``d`` features (after the
    projection on the principal subspace of wide data) is abbreviated: its last passes, on
    ``min(n, max(ANNEAL_MIN_ROWS, subsample k))`` rows, would cost more than ``ANNEAL_WORK``
    products. Such a fit also races a k-means++ start on the search rows (:func:`fit_run`)."""
    final_rows = n if est.subsample is None else \
        min(n, max(ANNEAL_MIN_ROWS, est.subsample * est.n_clusters))
    return final_rows * est.n_clusters * d > ANNEAL_WORK


def _anneal(est: RBFKMeans, data: Data, C: Tensor | None, abs_tol: float, lam: float,
            gen: torch.Generator, tick: Callable[[float, int], None] | None,
            schedule: str, temps: Temperatures) -> AnnealResult:
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
        big = _abbreviated(est, rows.n, rows.d)
        res = anneal_splits(
            rows, est.n_clusters, est.assignment,
            T_start=temps.start if temps.start is not None else T_c,
            cooling=(0.5 if big else 0.7) if est.cooling is None else est.cooling,
            max_iter=est.max_iter_per_temperature or (6 if big else 15), tol=10.0 * abs_tol,
            stop_gap=float(est.stop_gap), points_per_group=est.subsample,
            min_points=ANNEAL_MIN_ROWS, generator=gen, progress=tick, stop_at_singles=big,
        )
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
    return anneal(
        data, C, geometric_ladder(est, temps), est.assignment, step=step, max_iter=max_iter,
        tol=abs_tol, perturbation=float(est.perturbation) * math.sqrt(max(lam, 0.0)),
        generator=gen, stop_gap=float(est.stop_gap), progress=tick,
    )


def _race(est: RBFKMeans, search: Data, C: Tensor, gen: torch.Generator, seed: int
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
    is first run against a rival drawn from ``m`` other rows (not the race rows, which would
    favour a start made of them), and the one from all rows is drawn only if that rival wins;
    it goes on if it also ends below the annealed start."""
    k = est.n_clusters
    m = RACE_ROWS_PER_CLUSTER * k
    pool = Subsample(search, gen)
    rows = pool.take(m)
    drawn_from_all = 2 * m >= pool.total
    rival = initial_centers(search if drawn_from_all else pool.take(m, skip=m), k,
                            "k-means++", generator=gen, seed=seed)
    ours = lloyd(rows, C, max_iter=est.max_iter, tol=0.0)
    theirs = lloyd(rows, rival, max_iter=est.max_iter, tol=0.0)
    n_iter = ours.n_iter + theirs.n_iter
    if theirs.inertia >= ours.inertia:
        return C, (ours if rows is search else None), n_iter
    if not drawn_from_all:
        rival = initial_centers(search, k, "k-means++", generator=gen, seed=seed)
        theirs = lloyd(rows, rival, max_iter=est.max_iter, tol=0.0)
        n_iter += theirs.n_iter
        if theirs.inertia >= ours.inertia:
            return C, None, n_iter
    return theirs.C, (theirs if rows is search else None), n_iter


def _hartigan_applies(est: RBFKMeans, data: Data) -> bool:
    """Whether a run polishes with Hartigan's moves: annealed, on squared-Euclidean data."""
    return not est._hard and not data.metric.spherical


def fit_run(est: RBFKMeans, data: Data, seed: int, abs_tol: float, lam: float, run: int,
            schedule: str, *, init: Any = None, temps: Temperatures | None = None
            ) -> dict[str, Any]:
    """One run from ``seed`` (module docstring); ``abs_tol`` is ``tol`` in absolute units,
    ``lam`` the largest eigenvalue of the data's covariance (the perturbation's scale), ``run``
    the run's number (progress bars); ``init`` and ``temps`` the start and the temperatures in
    the units of ``data`` (default: the estimator's). Returns the centroids, labels, ``J``,
    iterations, swaps, temperatures run and the annealing history."""
    _check(est, data, schedule)
    temps = temps or Temperatures.of(est)
    gen = torch.Generator().manual_seed(seed)
    every = data  # all the rows; with fit_rows the centroids are fitted on a sample of them
    start = est._init_name() if init is None else init
    if est.fit_rows is not None and sum(data.comm.counts(data.n)) > est.fit_rows:
        data = Subsample(every, gen).take(est.fit_rows)
    seeding = data  # the rows a start is drawn from
    if est.fit_rows is not None and isinstance(start, str) and start == "k-means++":
        seeding = Subsample(data, gen).take(SEED_ROWS_PER_CLUSTER * est.n_clusters)
    hard_only = est._hard
    restart = schedule == RESTART
    # the event-driven ladder starts from the mean of the rows it anneals (on cosine data the
    # mean direction is checked here: init='mean' needs one); a restart draws its own start
    skip = restart or (not hard_only and event_driven(est, data, schedule)
                       and not data.metric.spherical)
    C: Tensor | None = None if skip else initial_centers(seeding, est.n_clusters, start,
                                                         generator=gen, seed=seed)
    ladder: list[float] = []
    history: list[dict[str, Any]] = []
    n_soft_iter = 0
    show = bool(est.verbose) and data.comm.rank == 0
    searched = restart or event_driven(est, data, schedule)  # on search rows, a last look
    if not hard_only and not restart:
        total = None if event_driven(est, data, schedule) else len(geometric_ladder(est, temps))
        bar = _progress(show, total, f"anneal (run {run + 1})")
        res = _anneal(est, data, C, abs_tol, lam, gen, _ticker(bar), schedule, temps)
        if bar is not None:
            bar.close()
        C, ladder, n_soft_iter = res.C, res.temperatures, res.n_iter
        history = [
            {"T": h["T"], "centers": h["C"].detach().cpu().numpy(),  # type: ignore[attr-defined]
             "objective": h["objective"], "inertia": h["inertia"], "n_soft": h["n_soft"],
             "n_iter": h["n_iter"]}
            for h in res.history
        ]
    polish_tol = 0.0 if not hard_only else abs_tol  # annealed: until the labels settle
    search = data  # the rows of the polish and the swap search
    n_total = sum(data.comm.counts(data.n))
    if searched and est.subsample is not None:
        rows = search_rows(est.n_clusters, data.d)
        if 2 * rows < n_total:
            search = Subsample(data, gen).take(rows)
    if restart:
        C = initial_centers(search, est.n_clusters, "k-means++", generator=gen, seed=seed)
    assert C is not None  # annealed, drawn, or the estimator's start
    n_hard_iter, n_swaps = 0, 0
    raced: LloydResult | None = None
    d_annealed = min(data.d, subspace.MAX_DIM) if not data.comm.active else data.d
    if not hard_only and not restart and event_driven(est, data, schedule) and \
            _abbreviated(est, data.n, d_annealed):
        C, raced, n_hard_iter = _race(est, search, C, gen, seed)
    if raced is not None:  # the race ran on all the search rows: its winner is polished
        hard = raced
    else:
        bar = _progress(show, est.max_iter, "lloyd" if hard_only else "hard polish")
        hard = lloyd(search, C, max_iter=est.max_iter, tol=polish_tol,
                     callback=_lloyd_ticker(bar))
        if bar is not None:
            bar.close()
        n_hard_iter += hard.n_iter
    def search_swaps(start: LloydResult, again: bool = False) -> SwapResult:
        return swap_search(
            search, start, max_swaps=est.max_swaps, max_iter=est.max_iter, tol=abs_tol,
            max_moves=1 if again else max(1, min(5, est.n_clusters // 4)),
            last_look=min(LAST_LOOK[1], max(LAST_LOOK[0], est.n_clusters // 2))
            if searched and not again else 0,
            generator=gen, max_trial_iter=search_budget(
                n_total, sum(data.comm.counts(search.n)), est.n_clusters, data.d))

    def hartigan_passes(rows: int) -> int:  # on this rank's rows, of all ranks' rows
        n_rows = sum(data.comm.counts(rows))
        return min(HARTIGAN_PASSES, search_budget(n_total, n_rows, est.n_clusters, data.d))

    final: LloydResult | SwapResult = hard
    if not hard_only and est.max_swaps > 0:
        final = search_swaps(hard)
        n_hard_iter += final.n_iter
        n_swaps = final.n_swaps
    for _ in range(HARTIGAN_ROUNDS if _hartigan_applies(est, data) else 0):
        # Hartigan's moves and the swap search in turn, each from the other's fixed point
        if not holds_weight(search, final.labels, est.n_clusters):
            break
        moved = hartigan(search, final.labels, est.n_clusters,
                         max_passes=hartigan_passes(search.n))
        n_hard_iter += moved.n_passes
        if not moved.n_moves:
            break
        final = lloyd(search, moved.C.to(search.X.dtype), max_iter=est.max_iter, tol=0.0)
        n_hard_iter += final.n_iter
        if est.max_swaps == 0:
            break
        again = search_swaps(final, again=True)
        n_hard_iter += again.n_iter
        if not again.n_swaps:
            break
        final = again
        n_swaps += again.n_swaps
    if search is not data:  # the result is a Lloyd fixed point of all the rows
        bar = _progress(show, est.max_iter, "hard polish (all rows)")
        final = lloyd(data, final.C, max_iter=est.max_iter, tol=0.0, callback=_lloyd_ticker(bar))
        if bar is not None:
            bar.close()
        n_hard_iter += final.n_iter
    if search is not data and _hartigan_applies(est, data) and final.converged and \
            holds_weight(data, final.labels, est.n_clusters):  # and Hartigan's on all of them
        # (from a Lloyd fixed point only: where the polish stopped at max_iter, another
        # max_iter of Lloyd after the moves cost a third of the time of a 1,000,000-row fit)
        moved = hartigan(data, final.labels, est.n_clusters,
                         max_passes=hartigan_passes(data.n),
                         min_gain=HARTIGAN_MIN_GAIN * final.inertia)
        n_hard_iter += moved.n_passes
        if moved.n_moves:
            final = lloyd(data, moved.C.to(data.X.dtype), max_iter=est.max_iter, tol=0.0)
            n_hard_iter += final.n_iter
    if not final.converged and not hard_only and data.comm.rank == 0:
        warnings.warn(
            f"the hard Lloyd polish did not settle in max_iter={est.max_iter} iterations; "
            "increase max_iter",
            ConvergenceWarning,
            stacklevel=5,
        )
    labels, inertia = final.labels, final.inertia
    if data is not every:  # fitted on a sample: every row's label and J, one pass
        st = cluster_stats(every, final.C, 0.0, "hard", return_labels=True)
        assert st.labels is not None
        labels, inertia = st.labels, st.inertia
    return {
        "C": final.C, "labels": labels, "inertia": inertia,
        "n_iter": n_soft_iter + n_hard_iter, "n_swaps": n_swaps, "temperatures": ladder,
        "history": history,
    }


def _progress(show: bool, total: int | None, desc: str) -> Any:
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False)


def _ticker(bar: Any) -> Callable[[float, int], None] | None:
    """Progress of the annealing ladder: one tick per temperature."""
    if bar is None:
        return None

    def tick(T: float, it: int) -> None:
        bar.set_postfix(T=f"{T:.3g}", iters=it)
        bar.update(1)

    return tick


def _lloyd_ticker(bar: Any) -> Callable[[int, Tensor, Stats], None] | None:
    """Progress of Lloyd iterations: one tick per iteration, ``J`` as the postfix."""
    if bar is None:
        return None

    def tick(it: int, C: Tensor, st: Stats) -> None:
        bar.set_postfix(J=f"{st.inertia:.6g}")
        bar.update(1)

    return tick
