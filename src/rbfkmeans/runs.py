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
4. the refinement (:class:`rbfkmeans.refine.Refinement`): the swap search when annealed,
   Hartigan's moves and shorter searches in turn on squared-Euclidean data, each from the
   other's Lloyd fixed point.

On more than ``2 max(SEARCH_MIN_ROWS, SEARCH_ROWS_PER_CLUSTER k)`` rows the event-driven run
polishes and searches on a random subsample of that size, then polishes once more on all rows,
and searches all of them where the sample misjudged ``J`` (the refinement's step 3).
With the estimator's ``fit_rows`` the run fits on a random sample of that many rows and then
takes one Lloyd iteration on every row, labelling every row at the means it reaches.
:func:`run_schedules` gives the ladder of each run of a fit: a default fit of at most
``SMALL_FIT_ENTRIES`` point-centroid pairs runs both ladders, and the estimator keeps the lower
``J``; an event-driven fit with ``n_init > 1`` anneals once and makes the other runs ``RESTART``
(step 2 replaced by a greedy k-means++ start on the search rows, steps 3-4 as above), and
``schedule="k-means++"`` makes every run one. The run reads its settings from the estimator
(its constructor parameters, its ``_hard``, ``_init_name()`` and ``critical_temperature_``);
nothing here validates them.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import torch
from sklearn.exceptions import ConvergenceWarning
from torch import Tensor

from . import progress, subspace
from ._validation import check_positive_int
from .lloyd import LloydResult, bounds_pay, lloyd
from .passes import Data
from .refine import Refinement, misjudged
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
from .stats import cluster_stats

if TYPE_CHECKING:
    from .estimator import RBFKMeans

__all__ = ["ANNEAL_SAMPLE_TOLERANCE", "RESTART", "SEARCH_MIN_ROWS", "SEARCH_ROWS_PER_CLUSTER",
           "SEED_ROWS_PER_CLUSTER", "SMALL_FIT_ENTRIES", "fit_run", "run_schedules",
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
#: A default fit of at most this many point-centroid pairs (``n k``: a few hundred points) runs
#: both ladders and keeps the better: the geometric one is the more thorough search on tiny
#: data, and the two together still take a few tens of milliseconds there.
SMALL_FIT_ENTRIES = 2048
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
    dimensions, k = 1,024, 64 per cluster left the fit 2.2% above KMeans(n_init=1), 256 0.7%.
    ``k`` and ``d`` are integers ``>= 1``, else ``TypeError`` / ``ValueError`` naming them."""
    k, d = check_positive_int(k, "k"), check_positive_int(d, "d")
    f = max(1.0 / 16.0, min(1.0, 32.0 / d))
    return max(math.ceil(SEARCH_MIN_ROWS * f), k * SEARCH_ROWS_PER_CLUSTER)


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
    show = bool(est.verbose) and data.comm.rank == 0  # the bars: rank 0's
    # Lloyd's progress callbacks on every rank where any rank is verbose (``verbose`` may be
    # set on rank 0 alone): they decide which passes a Lloyd run takes (progress.lloyd_ticker)
    ticks = data.comm.sum_scalars(float(bool(est.verbose)))[0] > 0
    searched = restart or splits  # on search rows, a last look
    sample: tuple[float, float] | None = None  # the annealing's subsample: weight, J
    if not hard_only and not restart:
        total = None if splits else len(geometric_ladder(est, temps))
        bar = progress.bar(show, total, f"anneal (run {run + 1})")
        res = annealed(est, data, C, abs_tol, lam, gen, progress.annealing_ticker(bar), schedule,
                       temps)
        if bar is not None:
            bar.close()
        C, ladder, n_soft_iter = res.C, res.temperatures, res.n_iter
        sample = res.sample
        history = [
            {"T": h["T"], "centers": h["C"].detach().cpu().numpy(),  # type: ignore[attr-defined]
             "objective": h["objective"], "inertia": h["inertia"], "n_soft": h["n_soft"],
             "n_iter": h["n_iter"], "sample_fraction": h.get("sample_fraction", 1.0)}
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
    n_hard_iter = 0
    raced: LloydResult | None = None
    d_annealed = min(data.d, subspace.MAX_DIM) if not data.comm.active else data.d
    # all ranks' rows: every rank decides alike (this rank's count differs on uneven shards)
    if not hard_only and not restart and splits and abbreviated(est, n_total, d_annealed):
        C, raced, n_hard_iter = race(est, search, C, gen, seed)
    if raced is not None:  # the race ran on all the search rows: its winner is polished
        hard = raced
    else:
        bar = progress.bar(show, est.max_iter, "lloyd" if hard_only else "hard polish")
        hard = lloyd(search, C, max_iter=est.max_iter, tol=polish_tol,
                     callback=progress.lloyd_ticker(bar, ticks))
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
    refinement = Refinement(est, data, search, hard, generator=gen, seed=seed, abs_tol=abs_tol,
                            polish_tol=polish_tol, last_look=searched, restart=restart,
                            show=show, ticks=ticks)
    del hard, raced  # results hold bounds (kernels.KEPT_LOWER_BOUNDS): keep only final's
    final = refinement.run(C)
    n_hard_iter += refinement.n_iter
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
        "n_iter": n_soft_iter + n_hard_iter, "n_swaps": refinement.n_swaps,
        "temperatures": ladder, "history": history,
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
