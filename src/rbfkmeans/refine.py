r"""After a run's hard polish: the swap search and Hartigan's moves in turn, on the search rows
and then on all of them. Every step starts from a Lloyd fixed point and ends on one, and none
raises ``J`` of the rows it runs on.

From the polish's fixed point of the search rows (all the rows, or a random subsample of them on
large data: :func:`rbfkmeans.runs.search_rows`), a :class:`Refinement`

1. runs the swap search (:func:`rbfkmeans.swaps.swap_search`) when annealed, with a last look
   at ``k // 2`` swaps (within ``LAST_LOOK``) before it stops on the event-driven ladder; its
   trials may cost ``SEARCH_PASSES`` passes over all the rows (:func:`search_budget`);
2. when annealed on squared-Euclidean data, takes Hartigan's single-point moves
   (:func:`rbfkmeans.hartigan.hartigan`) from the search's fixed point, a Lloyd run that
   confirms the fixed point they reach and, if they moved anything, a shorter swap search from
   there (single swaps, no last look); up to ``HARTIGAN_ROUNDS`` rounds, until the moves or the
   search find nothing or the rounds have taken their passes (``HARTIGAN_PASSES``, in all).
   Each escapes the other's fixed points: on the 23 sets of ``benchmarks/bench_fit.py`` (five
   seeds) the rounds lowered the worst excess over the better of ``KMeans(n_init=10)`` and
   breathing k-means from 0.53% to 0.15%;
3. on a subsample, polishes once more on all the rows (Lloyd, then, if it settled, Hartigan's
   moves worth at least ``HARTIGAN_MIN_GAIN`` of ``J``, and Lloyd). Where ``J`` of all the rows
   after that Lloyd run exceeds the sample's, scaled to all of them, by more than
   ``SAMPLE_TOLERANCE`` (:func:`sample_misjudges`: heavy tails, a few rows the sample missed
   weigh much of ``J``), it polishes the run's start (a restart: not) and a k-means++ start drawn
   from all the rows on all of them, and repeats 1-2 on all the rows from the lower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from . import progress
from ._validation import check_real
from .hartigan import hartigan, holds_weight
from .lloyd import LloydResult, lloyd
from .passes import Data, check_data
from .seeding import initial_centers
from .starts import _check_run
from .swaps import SwapResult, swap_search

if TYPE_CHECKING:
    from .estimator import RBFKMeans

__all__ = ["HARTIGAN_MIN_GAIN", "HARTIGAN_PASSES", "HARTIGAN_ROUNDS", "LAST_LOOK",
           "SAMPLE_TOLERANCE", "SEARCH_PASSES", "SEARCH_WORK", "Refinement", "misjudged",
           "sample_misjudges", "search_budget"]

#: The event-driven run's swap search takes a last look at ``k // 2`` swaps, within these
#: bounds, before it stops (:func:`rbfkmeans.swaps.swap_search`); the geometric ladder's search
#: stops without one.
LAST_LOOK = (5, 12)
#: The swap search's trials may cost as much as this many passes over all the rows
#: (:func:`search_budget`), or ``SEARCH_WORK`` point-centroid-feature products if that is more
SEARCH_PASSES = 10
SEARCH_WORK = 1 << 33
#: An annealed run's rounds of Hartigan's moves (:func:`rbfkmeans.hartigan.hartigan`) on the
#: search rows take at most this many passes in all, and at most as much work in all as the
#: swap search's trials (:func:`search_budget`: 10 passes over all the rows on large data, no
#: bound in practice on small); so does the polish on all the rows after a search on a
#: subsample. On 1,000,000 x 32 rows that Lloyd leaves unsettled after 300 iterations the
#: moves never run out, and 100 passes on all rows made the fit 2.2x as long for 0.05% of J.
#: Where the first round spends them, none follows: on MNIST's 64-dimensional PCA (k = 1,024,
#: 10 passes) rounds 2 and 3 had lowered J by 0.22% (956,679 -> 954,568; KMeans(n_init=1):
#: 964,918) for 18%-28% of the fit's time (AMD EPYC), on MNIST k = 256 by 0.08%
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
#: After the search on a subsample and the polish on all rows, a run searches all the rows as
#: well where their ``J`` exceeds the sample's, scaled to all rows' weight, by more than this
#: fraction (:func:`sample_misjudges`): the sample then missed rows that weigh much of ``J``.
#: On 200,000 rows of a Cauchy distribution (k = 16) the sample's fixed point ended at 1.07x to
#: 3.9x ``KMeans(n_init=10)``'s ``J`` on four seeds, the search of all the rows at 0.97x to
#: 1.03x; on MNIST (k = 10), E and blobs the two agree to within 0.4%.
SAMPLE_TOLERANCE = 0.1


def search_budget(n_total: int, n_search: int, k: int, d: int) -> int:
    """The Lloyd iterations the swap search's trials may run in all: as much work (``n k d``
    products per iteration) as ``SEARCH_PASSES`` passes over all the data, or
    ``SEARCH_WORK`` products when that is more (small problems: no bound in practice)."""
    work = max(SEARCH_PASSES * n_total * k * d, SEARCH_WORK)
    return max(1, int(work // max(1, n_search * k * d)))


def sample_misjudges(sample: Data, data: Data, J_sample: float, J_all: float) -> bool:
    """Whether ``J_all`` of all the rows ``data`` exceeds ``J_sample`` of the rows ``sample``
    drawn from them, scaled by the ratio of their weights (every rank's rows), by more than
    ``SAMPLE_TOLERANCE`` of it. ``sample`` and ``data`` are
    :class:`~rbfkmeans.passes.Data` and the ``J`` finite numbers (a cosine pass's ``J`` may
    round below 0 by a few ulps), else ``TypeError`` / ``ValueError`` naming them."""
    check_data(sample, "sample")
    check_data(data)
    J_sample = check_real(J_sample, "J_sample")
    J_all = check_real(J_all, "J_all")
    return misjudged(sample.total_weight(), J_sample, data.total_weight(), J_all)


def misjudged(w_sample: float, J_sample: float, w_all: float, J_all: float,
              tolerance: float | None = None) -> bool:
    """Whether ``J_all`` of rows of weight ``w_all`` exceeds ``J_sample`` of a sample of them
    of weight ``w_sample``, scaled by ``w_all / w_sample``, by more than ``tolerance``
    (default ``SAMPLE_TOLERANCE``)."""
    tol = SAMPLE_TOLERANCE if tolerance is None else tolerance
    return J_all > (1.0 + tol) * J_sample * w_all / max(w_sample, 1e-300)


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


class Refinement:
    """One run's partition from its hard polish on, refined in place (module docstring).

    ``data`` holds the rows the run fits (all of them, or ``fit_rows``' sample), ``search`` the
    rows of the polish (``data`` or a subsample of it), ``final`` the polish's Lloyd fixed point
    of them. ``abs_tol`` is ``tol`` in absolute units, ``polish_tol`` the polish's (0 when
    annealed: until the labels settle), ``last_look`` whether the first search takes one,
    ``restart`` whether the run is a k-means++ restart (its start is not polished again on all
    the rows), ``show`` whether this rank shows progress bars, ``ticks`` whether its Lloyd runs
    take progress callbacks (every rank's where any rank is verbose; default ``show``).
    :meth:`run` leaves the result in ``final`` and counts the Lloyd iterations and Hartigan
    passes in ``n_iter``, the swaps kept in ``n_swaps``. Only ``final`` holds a result
    (each holds its distance bounds), so the previous one is freed as soon as it is replaced."""

    def __init__(self, est: RBFKMeans, data: Data, search: Data, final: LloydResult, *,
                 generator: torch.Generator, seed: int, abs_tol: float, polish_tol: float,
                 last_look: bool, restart: bool, show: bool, ticks: bool | None = None) -> None:
        _check_run(est, data)
        _check_run(est, search, "search")
        if not isinstance(final, LloydResult):
            raise TypeError(f"final must be a rbfkmeans.lloyd.LloydResult; got "
                            f"{type(final).__name__}")
        self.est, self.data, self.search = est, data, search
        self.final: LloydResult | SwapResult = final
        self.gen, self.seed, self.abs_tol, self.polish_tol = generator, seed, abs_tol, polish_tol
        self.last_look, self.restart, self.show = last_look, restart, show
        self.ticks = show if ticks is None else ticks  # Lloyd's callbacks (progress.lloyd_ticker)
        self.n_total = sum(data.comm.counts(data.n))  # all ranks' rows: every rank decides alike
        self.n_iter, self.n_swaps = 0, 0
        self.k = est.n_clusters
        # Hartigan's moves: annealed runs on squared-Euclidean data
        self.hartigan_applies = not est._hard and not data.metric.spherical

    def run(self, start: Tensor) -> LloydResult | SwapResult:
        """Steps 1-3 of the module docstring; ``start`` is the run's start (the annealed or
        raced centroids), polished again on all the rows where the sample misjudged ``J``."""
        while True:  # on the search rows, then (a sample that misjudged J) on all of them
            self._search_and_move()
            if self.search is self.data:
                break
            on_search = self.final.inertia  # the result is a Lloyd fixed point of all the rows
            bar = progress.bar(self.show, self.est.max_iter, "hard polish (all rows)")
            self.final = lloyd(self.data, self.final.C, max_iter=self.est.max_iter, tol=0.0,
                               callback=progress.lloyd_ticker(bar, self.ticks))
            if bar is not None:
                bar.close()
            self.n_iter += self.final.n_iter
            if not (self.final.converged and sample_misjudges(
                    self.search, self.data, on_search, self.final.inertia)):
                break
            self._restart_on_all_rows(start)
        if self.search is not self.data and self.final.converged:
            # Hartigan's moves on all the rows, from a Lloyd fixed point only: where the polish
            # stopped at max_iter, another max_iter of Lloyd after the moves cost a third of
            # the time of a 1,000,000-row fit
            self._hartigan_round(self.data, self._passes(self.data),
                                 min_gain=HARTIGAN_MIN_GAIN * self.final.inertia)
        return self.final

    def _search_and_move(self) -> None:
        """The swap search, then Hartigan's moves and shorter searches in turn (steps 1-2)."""
        est, rows = self.est, self.search
        if not est._hard and est.max_swaps > 0:
            assert isinstance(self.final, LloydResult)
            self.final = self._swaps(rows)
            self.n_iter += self.final.n_iter
            self.n_swaps += self.final.n_swaps
        left = self._passes(rows)  # the rounds share them
        for _ in range(HARTIGAN_ROUNDS):
            if left < 1:
                break
            moved, passes = self._hartigan_round(rows, left)
            left -= passes
            if not moved or est.max_swaps == 0:
                break
            again = self._swaps(rows, again=True)
            self.n_iter += again.n_iter
            if not again.n_swaps:
                break
            self.final = again
            self.n_swaps += again.n_swaps

    def _passes(self, rows: Data) -> int:
        """The passes Hartigan's moves may take on ``rows`` (``HARTIGAN_PASSES``)."""
        n_rows = sum(self.data.comm.counts(rows.n))
        return min(HARTIGAN_PASSES, search_budget(self.n_total, n_rows, self.k, self.data.d))

    def _hartigan_round(self, rows: Data, max_passes: int, min_gain: float = 0.0
                        ) -> tuple[bool, int]:
        """Hartigan's moves on ``rows`` from ``final``, at most ``max_passes`` passes, and the
        Lloyd run that confirms where they lead; whether they moved anything (never where they
        do not apply, or where a cluster holds no weight) and the passes they took."""
        if not self.hartigan_applies or not holds_weight(rows, self.final.labels, self.k):
            return False, 0
        moved = hartigan(rows, self.final.labels, self.k, max_passes=max_passes,
                         min_gain=min_gain, start=_lloyd_of(self.final))
        self.n_iter += moved.n_passes
        if not moved.n_moves:
            return False, moved.n_passes
        self.final = lloyd(rows, moved.C.to(rows.X.dtype), max_iter=self.est.max_iter, tol=0.0,
                           warm=_moved_from(self.final))
        self.n_iter += self.final.n_iter
        return True, moved.n_passes

    def _swaps(self, rows: Data, again: bool = False) -> SwapResult:
        """The swap search from ``final`` on ``rows``: up to ``max(1, min(5, k // 4))`` swaps
        at once and the last look the run takes, or (``again``, after Hartigan's moves) single
        swaps and no last look."""
        est = self.est
        n_rows = sum(self.data.comm.counts(rows.n))
        assert isinstance(self.final, LloydResult)
        return swap_search(
            rows, self.final, max_swaps=est.max_swaps, max_iter=est.max_iter, tol=self.abs_tol,
            max_moves=1 if again else max(1, min(5, self.k // 4)),
            last_look=min(LAST_LOOK[1], max(LAST_LOOK[0], self.k // 2))
            if self.last_look and not again else 0,
            generator=self.gen,
            max_trial_iter=search_budget(self.n_total, n_rows, self.k, self.data.d))

    def _restart_on_all_rows(self, start: Tensor) -> None:
        """Search all the rows from now on, from the lower of ``start`` (unless the run is a
        restart) and a k-means++ start drawn from all the rows, each polished on them."""
        data = self.search = self.data
        drawn = initial_centers(data, self.k, "k-means++", generator=self.gen, seed=self.seed)
        best: LloydResult | None = None
        for start_C in ([] if self.restart else [start]) + [drawn]:
            polished = lloyd(data, start_C, max_iter=self.est.max_iter, tol=self.polish_tol)
            self.n_iter += polished.n_iter
            if best is None or polished.inertia < best.inertia:
                best = polished
        assert best is not None
        self.final = best
