r"""Swap search: move a centroid from where it is least needed to where it is most needed.

Annealing allocates centroids to regions as clusters split; when two splits compete, the
allocation can end one centroid short in one region and one spare in another, which no Lloyd
iteration undoes. A *swap* deletes centroid ``a`` and splits cluster ``j`` in two; its predicted
change of ``J`` is

.. math::

    \Delta J \approx \underbrace{\sum_{i \in S_a} w_i \,(d_i^{(2)} - d_i^{(1)})}_{\text{removal}[a]}
    \;-\; \underbrace{\frac{n_+ n_-}{n_j} \lVert m_+ - m_- \rVert^2}_{\text{gain}[j]},

with ``d^(1), d^(2)`` the distances to the nearest and second-nearest centroid and ``m_+, m_-``
the means of the halves of cluster ``j`` cut through ``c_j`` normal to its principal axis, or of
a far part of it and the rest (:mod:`rbfkmeans.costs`, which computes both terms). The
cheapest swaps are tried by Lloyd iterations and kept only when ``J`` drops (Kanungo et al. 2004
show single swaps give a constant-factor approximation).

The prediction holds the other centroids in place, so it overstates the removal where Lloyd
would spread the neighbours over the freed region: on data along curves (two concentric rings
of 2,000 rows each, radii 1 and 3, k = 12) every swap was predicted to cost 16% of ``J`` or more
and none was tried, though moving one centroid from the outer ring to the inner one lowers
``J`` by 5.5%. A breath of depth 1 chooses its removal after Lloyd has run with ``k + 1``
centroids (:func:`swap_search`'s last look).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from ._validation import check_nonnegative, check_positive_int
from .costs import removal_costs, swap_costs
from .lloyd import LloydResult, lloyd
from .passes import Data, check_data

__all__ = ["LOOK_SLACK", "SwapResult", "swap_search"]

#: a trial is kept only if it lowers J by this fraction: a trial that returns to the same fixed
#: point (its centroids in another order) differs by rounding alone and must not be taken
_GAIN = 1e-9
#: the last look runs on the trials that ended within this fraction above J
NEAR = 1e-3
#: the last look tries swaps predicted to cost up to this fraction of J (the rounds: ``slack``).
#: Where rows lie far from every centroid (1% of rows scattered uniformly around six blobs,
#: k = 6) removing any centroid is predicted dear, the rounds try nothing, and the fit had ended
#: up to 1.127x KMeans(n_init=10)'s J (1.0011-1.1274 on eight draws); a wider last look takes
#: six of the eight to it or below (the others 1.00014x and 1.016x), rings of unequal density
#: from 1.057x to 0.995x, and leaves bench_fit's 115 pairs and the held-out 75 as they were.
LOOK_SLACK = 0.5


@dataclass
class SwapResult:
    """Outcome of :func:`swap_search`: the Lloyd fixed point reached, its labels and ``J``, the
    Lloyd iterations run by every trial, the swaps kept and the swaps tried."""

    C: Tensor
    labels: Tensor
    inertia: float
    n_iter: int
    n_swaps: int
    n_trials: int
    converged: bool
    #: the Lloyd result it returns (with its bounds, for a run that starts next to it:
    #: ``lloyd(warm=(fixed_point, rows))``)
    fixed_point: LloydResult | None = field(default=None, repr=False)


def _spread_out(removal: Tensor, C: Tensor, m: int) -> list[int]:
    """Up to ``m`` centroids by increasing removal cost, none the nearest neighbour of an earlier
    one (removing both would cost far more than the sum of their costs)."""
    d2 = torch.cdist(C.double(), C.double()).fill_diagonal_(float("inf"))
    neighbour = d2.argmin(dim=1).tolist()
    chosen: list[int] = []
    frozen: set[int] = set()
    for a in removal.argsort().tolist():
        if len(chosen) == m:
            break
        if a not in frozen:
            chosen.append(a)
            frozen.add(neighbour[a])
    return chosen


def _breathe(data: Data, best: LloydResult, gain: Tensor, halves: Tensor, m: int,
             max_iter: int, tol: float, least: int = 2) -> tuple[LloydResult, int] | None:
    """One breathing trial of depth ``m``: split the ``m`` clusters of largest gain (``k + m``
    centroids, Lloyd), then delete the ``m`` centroids that cost least to remove (spread out;
    Lloyd with ``k``). Returns the result and the Lloyd iterations, or None when fewer than
    ``least`` clusters can be split."""
    split = [j for j in gain.argsort(descending=True).tolist() if float(gain[j]) > 0][:m]
    if len(split) < least:
        return None
    C = best.C.clone()
    C[split] = halves[split, 0]
    rows = torch.cat([_kept_rows(best, split), torch.full((len(split),), -1)])
    grown = lloyd(data, torch.cat([C, halves[split, 1]]), max_iter=max_iter, tol=tol,
                  warm=(best, rows))
    drop = _spread_out(removal_costs(data, grown.C, grown.labels), grown.C, len(split))
    keep = [j for j in range(grown.C.shape[0]) if j not in set(drop)]
    trial = lloyd(data, grown.C[keep], max_iter=max_iter, tol=tol, target=best.inertia,
                  warm=(grown, torch.tensor(keep)))
    return trial, grown.n_iter + trial.n_iter


def _kept_rows(parent: LloydResult, moved: list[int]) -> Tensor:
    """For ``lloyd(warm=...)``: each of the parent's ``k`` centroids kept in place, except
    ``moved`` (-1)."""
    rows = torch.arange(parent.C.shape[0])
    rows[moved] = -1
    return rows


def _cheapest_swaps(removal: Tensor, gain: Tensor, m: int,
                    budget: float) -> list[tuple[float, int, int]]:
    """Up to ``m`` swaps ``(predicted change, a, j)`` in increasing order of
    ``removal[a] - gain[j]``, among the ``m + 1`` cheapest removals and the ``m + 1`` largest
    positive gains, each predicted to cost at most ``budget``."""
    k = removal.numel()
    top = min(k, m + 1)
    cheap = removal.argsort()[:top].tolist()
    g = gain.tolist()
    useful = [j for j in gain.argsort(descending=True)[:top].tolist() if g[j] > 0]
    r = removal.tolist()
    pairs = sorted((r[a] - g[j], a, j) for a in cheap for j in useful if a != j)
    return [p for p in pairs if p[0] <= budget][:m]


def _last_look(data: Data, best: LloydResult, tried: list[LloydResult],
               pairs: list[tuple[float, int, int]], removal: Tensor, gain: Tensor,
               halves: Tensor, last_look: int, slack: float, max_iter: int,
               tol: float) -> tuple[LloydResult | None, int, int]:
    """The last look of :func:`swap_search` before it stops: the near misses among ``tried``
    run on to ``tol / 100``, then the cheapest swaps not in ``pairs``, up to ``last_look`` in
    all. Returns the first result below ``J`` (or None), the Lloyd iterations and the trials."""
    n_iter = n_trials = 0
    goal = best.inertia * (1.0 - _GAIN)
    for trial in sorted(tried, key=lambda t: t.inertia):
        if trial.inertia >= best.inertia * (1.0 + NEAR):
            break
        if trial.gave_up:  # it stalled above J: not a run stopped early by the tolerance
            continue
        more = lloyd(data, trial.C, max_iter=max_iter, tol=tol / 100.0,
                     warm=(trial, _kept_rows(trial, [])))
        n_iter += more.n_iter
        if more.inertia < goal:
            return more, n_iter, n_trials
    seen = {(a, j) for _, a, j in pairs}
    budget = max(slack, LOOK_SLACK) * best.inertia
    for _, a, j in _cheapest_swaps(removal, gain, last_look, budget):
        if (a, j) in seen:
            continue
        C = best.C.clone()
        C[a], C[j] = halves[j, 0], halves[j, 1]
        trial = lloyd(data, C, max_iter=max_iter, tol=tol, target=best.inertia,
                      warm=(best, _kept_rows(best, [a, j])))
        n_iter += trial.n_iter
        n_trials += 1
        if trial.inertia < goal:
            return trial, n_iter, n_trials
    return None, n_iter, n_trials


@torch.no_grad()
def swap_search(
    data: Data,
    start: LloydResult,
    *,
    max_swaps: int = 10,
    n_candidates: int = 3,
    slack: float = 0.1,
    max_iter: int = 300,
    tol: float = 0.0,
    max_moves: int = 1,
    last_look: int = 0,
    generator: torch.Generator | None = None,
    max_trial_iter: int | None = None,
) -> SwapResult:
    r"""Local search over Lloyd fixed points by moving one centroid at a time (module docstring).

    The ``n_candidates`` swaps with the lowest predicted change ``removal[a] - gain[j]``
    (:func:`swap_costs`), among those predicted to cost at most ``slack * J``, are tried in that
    order, each by hard Lloyd iterations (at most ``max_iter``) from the swapped centroids
    (``c_a`` and ``c_j`` become the means of ``j``'s halves), given up once they stall above
    ``J`` (:func:`rbfkmeans.lloyd.lloyd` with ``target=J``); the first whose Lloyd fixed point
    has a lower ``J`` is kept and the search starts again from it. Stops after a round with no
    improvement or after ``max_swaps`` kept swaps. With ``tol > 0`` the trials stop once the
    centroids move by at most ``tol`` (squared, as :func:`rbfkmeans.lloyd.lloyd`) and the kept
    result is polished until its labels settle. ``J`` never increases and the result is a Lloyd
    fixed point.

    With ``max_moves = M > 1`` the search first breathes (Fritzke 2020, breathing k-means, here
    from the annealed start): the ``M`` clusters of largest split gain are split (``k + M``
    centroids, Lloyd), then the ``M`` centroids that cost least to remove are deleted (never the
    nearest neighbour of another deleted one; Lloyd with ``k``, given up as above); kept if
    ``J`` drops (the same ``M`` is tried again), else ``M`` decreases by one, down to the
    single swaps above. Each moved centroid counts as one swap.

    With ``last_look = L > n_candidates`` (and ``tol > 0``) a round without improvement is
    followed by a last look before the search stops, measured against the result it would
    return (the best fixed point so far, polished until its labels settle): the round's trials
    that ended within ``NEAR`` (0.1%) of its ``J`` (without giving up) run on until their
    centroids move by at most ``tol / 100`` (a trial stopped at ``tol`` is often still above a
    fixed point that beats ``J``), then the next swaps in order of predicted cost (up to
    ``max(slack, LOOK_SLACK)`` of ``J``) are tried, up to ``L`` in the round; an improvement
    resumes the search. Where the round had no swap predicted within the slack and the search
    breathes (``M > 1``), the last look ends with one breath of depth 1. Everything before that
    point is as without it, so the result's ``J`` is lower than or equal to the one without
    it.

    ``max_trial_iter``: once the trials have run that many Lloyd iterations in all, no new
    trial starts (the search's work bounded by the caller's budget; None: no bound).
    """
    check_data(data)
    if not isinstance(start, LloydResult):
        raise TypeError(f"start must be a LloydResult; got {type(start).__name__}")
    if isinstance(max_swaps, bool) or not isinstance(max_swaps, int) or max_swaps < 0:
        raise ValueError(f"max_swaps must be an integer >= 0; got {max_swaps!r}")
    n_candidates = check_positive_int(n_candidates, "n_candidates")
    depth = check_positive_int(max_moves, "max_moves")
    last_look = check_positive_int(last_look, "last_look", minimum=0)
    if max_trial_iter is not None:
        max_trial_iter = check_positive_int(max_trial_iter, "max_trial_iter", minimum=0)
    slack = check_nonnegative(slack, "slack")  # finite: an infinite slack tries every swap
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_nonnegative(tol, "tol")
    best = start
    n_iter = n_swaps = n_trials = 0
    k = start.C.shape[0]
    costs: tuple[Tensor, Tensor, Tensor] | None = None
    settled = False  # best is already the polished result the search returns
    def spent() -> bool:  # the trials' Lloyd iterations have used up their budget
        return max_trial_iter is not None and n_iter >= max_trial_iter

    while n_swaps < max_swaps and k >= 2 and best.inertia > 0 and not spent():
        if costs is None:
            costs = swap_costs(data, best.C, best.labels, generator=generator)
        removal, gain, halves = costs
        if depth > 1:
            out = _breathe(data, best, gain, halves, min(depth, max_swaps - n_swaps), max_iter,
                           tol)
            if out is None:
                depth = 1
                continue
            trial, its = out
            n_iter += its
            n_trials += 1
            if trial.inertia < best.inertia * (1.0 - _GAIN):
                best, costs = trial, None
                n_swaps += min(depth, max_swaps - n_swaps)
            else:
                depth -= 1
            continue
        pairs = _cheapest_swaps(removal, gain, n_candidates, slack * best.inertia)
        improved = False
        tried: list[LloydResult] = []
        for _, a, j in pairs:
            if spent():
                break
            C = best.C.clone()
            C[a], C[j] = halves[j, 0], halves[j, 1]
            trial = lloyd(data, C, max_iter=max_iter, tol=tol, target=best.inertia,
                          warm=(best, _kept_rows(best, [a, j])))
            n_iter += trial.n_iter
            n_trials += 1
            if trial.inertia < best.inertia * (1.0 - _GAIN):
                best, improved, costs = trial, True, None
                n_swaps += 1
                break
            tried.append(replace(trial, bounds=None))  # the last look may run it on, cold:
            # a fit holds the bounds of the best and of the trial running, not of every trial
        if not improved and last_look > n_candidates and tol > 0 and not spent():
            if n_swaps and not settled:  # what the search would return: the look must beat it
                polished = lloyd(data, best.C, max_iter=max_iter, warm=(best, _kept_rows(best, [])))
                n_iter += polished.n_iter
                best, settled = polished, True
            found, its, trials = _last_look(data, best, tried, pairs, removal, gain, halves,
                                            last_look, slack, max_iter, tol)
            n_iter += its
            n_trials += trials
            if found is not None:
                best, improved, costs, settled = found, True, None, False
                n_swaps += 1
            if not improved and max_moves > 1 and not pairs and not spent():
                # no single swap within the slack: one breath of depth 1, whose removal is
                # chosen after Lloyd has spread the k + 1 centroids (module docstring)
                out = _breathe(data, best, gain, halves, 1, max_iter, tol, least=1)
                if out is not None:
                    n_iter += out[1]
                    n_trials += 1
                    if out[0].inertia < best.inertia * (1.0 - _GAIN):
                        best, improved, costs, settled = out[0], True, None, False
                        n_swaps += 1
        if not improved:
            break
    # the trials stopped on the tolerance, or the kept one gave up (below J all the same): settle
    if n_swaps and not settled and (tol > 0 or best.gave_up):
        polished = lloyd(data, best.C, max_iter=max_iter, warm=(best, _kept_rows(best, [])))
        n_iter += polished.n_iter
        best = polished
    return SwapResult(best.C, best.labels, best.inertia, n_iter, n_swaps, n_trials,
                      best.converged, best)
