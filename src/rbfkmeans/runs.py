r"""One run of :class:`~rbfkmeans.RBFKMeans`: start, annealing ladder, hard polish, swap search,
Hartigan's moves.

A run from a seed ``s`` is

1. the start (:func:`rbfkmeans.seeding.initial_centers`; the event-driven ladder starts from the
   mean of the rows it anneals);
2. the annealing (:func:`rbfkmeans.starts.annealed`), on the event-driven ladder or the
   geometric one; ``assignment="hard"`` skips it (plain Lloyd);
3. the hard Lloyd polish until the labels settle (:func:`rbfkmeans.lloyd.lloyd`), so the result
   is a Lloyd fixed point. An abbreviated annealing (large ``n k d``) first races a k-means++
   start (:func:`rbfkmeans.starts.race`), and the lower ``J`` goes on to the polish;
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
and Lloyd). Where ``J`` of all the rows after that Lloyd run exceeds the sample's, scaled to
all of them, by more than ``SAMPLE_TOLERANCE`` (heavy tails: a few rows the sample missed
weigh much of ``J``), the run polishes its start and a k-means++ start drawn from all the
rows (a restart: only the latter) on all of them, and searches all the rows from the lower.
With the estimator's ``fit_rows`` the run fits on a random sample of that many rows and then
takes one Lloyd iteration on every row, labelling every row at the means it reaches.
:func:`run_schedules` gives the ladder of each run of a fit: a default fit of at most
``SMALL_FIT_ENTRIES`` point-centroid pairs runs both ladders, and the estimator keeps the lower
``J``; an event-driven fit with ``n_init > 1`` anneals once and makes the other runs ``RESTART``
(step 2 replaced by a greedy k-means++ start on the search rows, steps 3-5 as above), and
``schedule="k-means++"`` makes every run one. The run
reads its settings from the estimator (its constructor parameters, its ``_hard``,
``_init_name()`` and ``critical_temperature_``); nothing here validates them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from sklearn.exceptions import ConvergenceWarning
from torch import Tensor

from . import subspace
from .hartigan import hartigan, holds_weight
from .lloyd import LloydResult, bounds_pay, lloyd
from .passes import Data, Stats, cluster_stats
from .relocation import mean_update
from .seeding import initial_centers
from .splits import Subsample
from .starts import (
    Temperatures,
    _check_run,
    abbreviated,
    annealed,
    event_driven,
    geometric_ladder,
    race,
)
from .swaps import SwapResult, swap_search

if TYPE_CHECKING:
    from .estimator import RBFKMeans

__all__ = ["ANNEAL_SAMPLE_TOLERANCE", "HARTIGAN_MIN_GAIN", "HARTIGAN_PASSES",
           "HARTIGAN_ROUNDS", "LAST_LOOK", "RESTART", "SAMPLE_TOLERANCE", "SEARCH_MIN_ROWS",
           "SEARCH_PASSES", "SEARCH_ROWS_PER_CLUSTER", "SEARCH_WORK", "SMALL_FIT_ENTRIES",
           "fit_run", "misjudged", "run_schedules", "sample_misjudges", "search_budget",
           "search_rows"]

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
#: The event-driven run's swap search takes a last look at ``k // 2`` swaps, within these
#: bounds, before it stops (:func:`rbfkmeans.swaps.swap_search`); the geometric ladder's search
#: stops without one.
LAST_LOOK = (5, 12)
#: The swap search's trials may cost as much as this many passes over all the rows
#: (:func:`search_budget`), or ``SEARCH_WORK`` point-centroid-feature products if that is more
SEARCH_PASSES = 10
SEARCH_WORK = 1 << 33
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
#: After the search on a subsample and the polish on all rows, a run searches all the rows as
#: well where their ``J`` exceeds the sample's, scaled to all rows' weight, by more than this
#: fraction (:func:`sample_misjudges`): the sample then missed rows that weigh much of ``J``.
#: On 200,000 rows of a Cauchy distribution (k = 16) the sample's fixed point ended at 1.07x to
#: 3.9x ``KMeans(n_init=10)``'s ``J`` on four seeds, the search of all the rows at 0.97x to
#: 1.03x; on MNIST (k = 10), E and blobs the two agree to within 0.4%.
SAMPLE_TOLERANCE = 0.1
#: The hard polish of an annealed run polishes a k-means++ start drawn from the search rows
#: as well, and keeps the lower, where their ``J`` exceeds that of the annealing's own
#: subsample (its last temperature's, scaled by the weights) by more than this fraction: the
#: annealing missed far outliers. 20,000 rows of 6 blobs with 3 rows 300 times farther out
#: (k = 8): ratios 2.4-20, the fit 1.29x-2.82x ``KMeans(n_init=10)``'s ``J`` on five of six
#: seeds, now 1.00x on all six; the pixel sets of ``bench_fit`` (64 sampled rows per cluster)
#: reach 1.39, and keep their fits
ANNEAL_SAMPLE_TOLERANCE = 1.0
#: The runs after the first of an event-driven fit with ``n_init > 1``, and every run of a fit
#: with ``schedule="k-means++"``: no annealing, a greedy k-means++ start on the search rows, then
#: the same polish, swap search and Hartigan rounds
RESTART = "k-means++"


def _check(est: Any, data: Any, schedule: Any = "splits") -> None:
    """Raise unless ``est`` is an RBFKMeans whose fit is under way (``critical_temperature_``
    set), ``data`` a pass context and ``schedule`` a ladder name."""
    _check_run(est)
    if not isinstance(data, Data):
        raise TypeError(f"data must be a rbfkmeans.passes.Data; got {type(data).__name__}")
    if schedule not in ("splits", "geometric", RESTART):
        raise ValueError(f"schedule must be 'splits', 'geometric' or {RESTART!r}; "
                         f"got {schedule!r}")


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


def run_schedules(est: RBFKMeans, data: Data, n_total: int, n_init: int) -> list[str]:
    """The ladder of each run: ``n_init`` times the estimator's, except that

    - a default fit (``n_init="auto"``, event-driven) of at most ``SMALL_FIT_ENTRIES``
      point-centroid pairs also runs the geometric ladder;
    - an event-driven fit with ``n_init > 1`` anneals once and makes the other runs
      ``RESTART``: k-means++ starts taken through the same polish and searches. Annealed
      runs differ only by the symmetric-breaking noise and mostly end in the same basin
      (hubble_deep_field k=16: 7 of 8 seeds in one), where the restarts, at about half
      of the annealed run's time on 20,000 pixels, reach others;
    - otherwise every run takes the estimator's schedule: with ``schedule="k-means++"``
      (``RESTART``) every run is a restart (plain Lloyd for ``assignment="hard"``, whatever
      the schedule)."""
    _check(est, data)
    if (est.n_init == "auto" and not est._hard and event_driven(est, data)
            and n_total * est.n_clusters <= SMALL_FIT_ENTRIES):
        return ["splits", "geometric"]
    if n_init > 1 and not est._hard and event_driven(est, data):
        return [est.schedule] + [RESTART] * (n_init - 1)
    return [est.schedule] * n_init


def sample_misjudges(sample: Data, data: Data, J_sample: float, J_all: float) -> bool:
    """Whether ``J_all`` of all the rows ``data`` exceeds ``J_sample`` of the rows ``sample``
    drawn from them, scaled by the ratio of their weights (every rank's rows), by more than
    ``SAMPLE_TOLERANCE`` of it."""
    return misjudged(sample.total_weight(), J_sample, data.total_weight(), J_all)


def misjudged(w_sample: float, J_sample: float, w_all: float, J_all: float,
              tolerance: float | None = None) -> bool:
    """Whether ``J_all`` of rows of weight ``w_all`` exceeds ``J_sample`` of a sample of them
    of weight ``w_sample``, scaled by ``w_all / w_sample``, by more than ``tolerance``
    (default ``SAMPLE_TOLERANCE``)."""
    tol = SAMPLE_TOLERANCE if tolerance is None else tolerance
    return J_all > (1.0 + tol) * J_sample * w_all / max(w_sample, 1e-300)


def _hartigan_applies(est: RBFKMeans, data: Data) -> bool:
    """Whether a run polishes with Hartigan's moves: annealed, on squared-Euclidean data."""
    return not est._hard and not data.metric.spherical


def _lloyd_of(fixed_point: LloydResult | SwapResult) -> LloydResult | None:
    """The Lloyd result behind ``fixed_point`` (with its bounds, at its labels), None if it has
    none."""
    if isinstance(fixed_point, LloydResult):
        return fixed_point
    parent = fixed_point.fixed_point
    return parent if parent is not None and torch.equal(parent.labels, fixed_point.labels) \
        else None


def _moved_from(fixed_point: LloydResult | SwapResult) -> tuple[LloydResult, Tensor] | None:
    """``lloyd(warm=...)`` for a run from the means Hartigan's moves left of ``fixed_point``:
    each continues the same centroid (its bounds move by the distance), None without a Lloyd
    result to start from."""
    parent = _lloyd_of(fixed_point)
    return None if parent is None else (parent, torch.arange(parent.C.shape[0]))


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
    if est.fit_rows is not None:
        pool = every.weighing_rows()  # a sample of rows that weigh nothing fits nothing
        if sum(data.comm.counts(pool.n)) > est.fit_rows:
            data = Subsample(pool, gen).take(est.fit_rows)
    seeding = data  # the rows a start is drawn from
    if est.fit_rows is not None and isinstance(start, str) and start == "k-means++":
        # from rows that weigh something (a draw of rows of weight 0 has nothing to draw from),
        # where there are k of them
        weighing = data.weighing_rows()
        if sum(data.comm.counts(weighing.n)) >= est.n_clusters:
            seeding = Subsample(weighing, gen).take(SEED_ROWS_PER_CLUSTER * est.n_clusters)
    hard_only = est._hard
    restart = schedule == RESTART and not hard_only  # plain Lloyd ignores the schedule
    splits = event_driven(est, data, schedule)
    # the event-driven ladder starts from the mean of the rows it anneals (on cosine data the
    # mean direction is checked here: init='mean' needs one); a restart draws its own start
    skip = restart or (not hard_only and splits and not data.metric.spherical)
    C: Tensor | None = None if skip else initial_centers(seeding, est.n_clusters, start,
                                                         generator=gen, seed=seed)
    ladder: list[float] = []
    history: list[dict[str, Any]] = []
    n_soft_iter = 0
    show = bool(est.verbose) and data.comm.rank == 0
    searched = restart or splits  # on search rows, a last look
    sample: tuple[float, float] | None = None  # the annealing's subsample: weight, J
    if not hard_only and not restart:
        total = None if splits else len(geometric_ladder(est, temps))
        bar = _progress(show, total, f"anneal (run {run + 1})")
        res = annealed(est, data, C, abs_tol, lam, gen, _ticker(bar), schedule, temps)
        if bar is not None:
            bar.close()
        C, ladder, n_soft_iter = res.C, res.temperatures, res.n_iter
        sample = res.sample
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
            search = Subsample(data.weighing_rows(), gen).take(rows)
    if restart:
        C = initial_centers(search, est.n_clusters, "k-means++", generator=gen, seed=seed)
    assert C is not None  # annealed, drawn, or the estimator's start
    n_hard_iter, n_swaps = 0, 0
    raced: LloydResult | None = None
    d_annealed = min(data.d, subspace.MAX_DIM) if not data.comm.active else data.d
    # all ranks' rows: every rank decides alike (this rank's count differs on uneven shards)
    if not hard_only and not restart and splits and abbreviated(est, n_total, d_annealed):
        C, raced, n_hard_iter = race(est, search, C, gen, seed)
    if raced is not None:  # the race ran on all the search rows: its winner is polished
        hard = raced
    else:
        bar = _progress(show, est.max_iter, "lloyd" if hard_only else "hard polish")
        hard = lloyd(search, C, max_iter=est.max_iter, tol=polish_tol,
                     callback=_lloyd_ticker(bar))
        if bar is not None:
            bar.close()
        n_hard_iter += hard.n_iter
        if sample is not None and misjudged(sample[0], sample[1], search.total_weight(),
                                            hard.inertia, tolerance=ANNEAL_SAMPLE_TOLERANCE):
            # the annealing's sample missed rows that weigh much of J (far outliers): a
            # k-means++ start drawn from the search rows is polished too, the lower goes on
            rival = lloyd(search, initial_centers(search, est.n_clusters, "k-means++",
                                                  generator=gen, seed=seed),
                          max_iter=est.max_iter, tol=polish_tol)
            n_hard_iter += rival.n_iter
            if rival.inertia < hard.inertia:
                C, hard = rival.C, rival
    def search_swaps(rows: Data, start: LloydResult, again: bool = False) -> SwapResult:
        return swap_search(
            rows, start, max_swaps=est.max_swaps, max_iter=est.max_iter, tol=abs_tol,
            max_moves=1 if again else max(1, min(5, est.n_clusters // 4)),
            last_look=min(LAST_LOOK[1], max(LAST_LOOK[0], est.n_clusters // 2))
            if searched and not again else 0,
            generator=gen, max_trial_iter=search_budget(
                n_total, sum(data.comm.counts(rows.n)), est.n_clusters, data.d))

    def hartigan_passes(rows: int) -> int:  # on this rank's rows, of all ranks' rows
        n_rows = sum(data.comm.counts(rows))
        return min(HARTIGAN_PASSES, search_budget(n_total, n_rows, est.n_clusters, data.d))

    final: LloydResult | SwapResult = hard
    del hard, raced  # results hold bounds (kernels.KEPT_LOWER_BOUNDS): keep only final's
    while True:  # on the search rows, then (a sample that misjudged J) on all of them
        if not hard_only and est.max_swaps > 0:
            assert isinstance(final, LloydResult)
            final = search_swaps(search, final)
            n_hard_iter += final.n_iter
            n_swaps += final.n_swaps
        for _ in range(HARTIGAN_ROUNDS if _hartigan_applies(est, data) else 0):
            # Hartigan's moves and the swap search in turn, each from the other's fixed point
            if not holds_weight(search, final.labels, est.n_clusters):
                break
            moved = hartigan(search, final.labels, est.n_clusters,
                             max_passes=hartigan_passes(search.n), start=_lloyd_of(final))
            n_hard_iter += moved.n_passes
            if not moved.n_moves:
                break
            final = lloyd(search, moved.C.to(search.X.dtype), max_iter=est.max_iter, tol=0.0,
                          warm=_moved_from(final))
            n_hard_iter += final.n_iter
            if est.max_swaps == 0:
                break
            again = search_swaps(search, final, again=True)
            n_hard_iter += again.n_iter
            if not again.n_swaps:
                break
            final = again
            n_swaps += again.n_swaps
        if search is data:
            break
        on_search = final.inertia  # the result is a Lloyd fixed point of all the rows
        bar = _progress(show, est.max_iter, "hard polish (all rows)")
        final = lloyd(data, final.C, max_iter=est.max_iter, tol=0.0, callback=_lloyd_ticker(bar))
        if bar is not None:
            bar.close()
        n_hard_iter += final.n_iter
        if not (final.converged and sample_misjudges(search, data, on_search, final.inertia)):
            break
        # a few rows the sample missed weigh much of J (heavy tails): on all the rows, from the
        # lower of the run's start (unless a restart) and a k-means++ start drawn from them all
        search = data
        drawn = initial_centers(data, est.n_clusters, "k-means++", generator=gen, seed=seed)
        best: LloydResult | None = None
        for start_C in ([] if restart else [C]) + [drawn]:
            polished = lloyd(data, start_C, max_iter=est.max_iter, tol=polish_tol)
            n_hard_iter += polished.n_iter
            if best is None or polished.inertia < best.inertia:
                best = polished
        assert best is not None
        final = best
        del best, polished
    if search is not data and _hartigan_applies(est, data) and final.converged and \
            holds_weight(data, final.labels, est.n_clusters):  # and Hartigan's on all of them
        # (from a Lloyd fixed point only: where the polish stopped at max_iter, another
        # max_iter of Lloyd after the moves cost a third of the time of a 1,000,000-row fit)
        moved = hartigan(data, final.labels, est.n_clusters,
                         max_passes=hartigan_passes(data.n),
                         min_gain=HARTIGAN_MIN_GAIN * final.inertia, start=_lloyd_of(final))
        n_hard_iter += moved.n_passes
        if moved.n_moves:
            final = lloyd(data, moved.C.to(data.X.dtype), max_iter=est.max_iter, tol=0.0,
                          warm=_moved_from(final))
            n_hard_iter += final.n_iter
    if not final.converged and not hard_only and data.comm.rank == 0:
        warnings.warn(
            f"the hard Lloyd polish did not settle in max_iter={est.max_iter} iterations; "
            "increase max_iter",
            ConvergenceWarning,
            stacklevel=5,
        )
    C, labels, inertia = final.C, final.labels, final.inertia
    if data is not every:  # fitted on a sample: one Lloyd iteration on every row
        C, labels, inertia = _step_on_every_row(every, C)
        n_hard_iter += 1
    return {
        "C": C, "labels": labels, "inertia": inertia,
        "n_iter": n_soft_iter + n_hard_iter, "n_swaps": n_swaps, "temperatures": ladder,
        "history": history,
    }


def _step_on_every_row(every: Data, C: Tensor) -> tuple[Tensor, Tensor, float]:
    """One Lloyd iteration on every row from the centroids ``C`` fitted on a sample: each
    becomes the mean of the rows nearest it (``J`` of all rows never rises), and the labels and
    ``J`` at those means. Lloyd's bounded passes where they pay (the second pass then scores
    only the rows in doubt), else two plain passes (for a single iteration the compiled run's
    set-up costs more than it saves: on MNIST with k = 10, 0.090 s against 0.064 s)."""
    if bounds_pay(every, C.shape[0]):
        step = lloyd(every, C, max_iter=1, tol=0.0)
        return step.C, step.labels, step.inertia
    C = mean_update(every, C, cluster_stats(every, C, 0.0, "hard"))[0]
    st = cluster_stats(every, C, 0.0, "hard", return_labels=True)
    assert st.labels is not None
    return C, st.labels, st.inertia


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
