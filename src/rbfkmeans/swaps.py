r"""Swap search: move a centroid from where it is least needed to where it is most needed.

Annealing allocates centroids to regions as clusters split; when two splits compete, the
allocation can end one centroid short in one region and one spare in another, which no Lloyd
iteration undoes. A *swap* deletes centroid ``a`` and splits cluster ``j`` in two; its predicted
change of ``J`` is

.. math::

    \Delta J \approx \underbrace{\sum_{i \in S_a} w_i \,(d_i^{(2)} - d_i^{(1)})}_{\text{removal}[a]}
    \;-\; \underbrace{\frac{n_+ n_-}{n_j} \lVert m_+ - m_- \rVert^2}_{\text{gain}[j]},

with ``d^(1), d^(2)`` the distances to the nearest and second-nearest centroid and ``m_+, m_-``
the means of the halves of cluster ``j`` cut through ``c_j`` normal to its principal axis. The
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

from . import kernels
from ._validation import check_nonnegative, check_positive_int
from .lloyd import LloydResult, lloyd
from .passes import Data, check_data, check_labels, nearest
from .sparse import dense, is_sparse

__all__ = ["FAR_ROW_MARGIN", "LOOK_SLACK", "SwapResult", "swap_costs", "swap_search"]

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
#: a cluster's split isolates its farthest row where that gains more than this many times the
#: axis cut (:func:`swap_costs`). A row 300 times farther out than six blobs gained 15-17x
#: the cut, and the search had never isolated it (the fit ended 1.6-1.75x KMeans(n_init=10)'s
#: J); the rarest colours of a photograph's pixels gain up to 2.5x, and taking those moved
#: bench_fit's hubble k=64 and the held-out coffee k=64 both ways (-0.20% to +0.09%, a little
#: lower in all): the margin leaves such clusters to the axis cut, as before.
FAR_ROW_MARGIN = 4.0


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


def _removal_costs(data: Data, C: Tensor, labels: Tensor) -> Tensor:
    """``sum_{i in S_a} w_i (d_i^(2) - d_i^(1))`` per centroid (k,), float64, over the ranks."""
    return _removal_and_own(data, C, labels)[0]


def _removal_and_own(data: Data, C: Tensor, labels: Tensor) -> tuple[Tensor, Tensor | None]:
    """:func:`_removal_costs`, and each local row's ``d_i^(1)`` (n,) where the pass computes it
    (the chunked torch pass; None from the compiled one)."""
    if kernels.usable(data.X, C.shape[0]):
        removal = kernels.spread_pass(data.X, C, labels, data.w, scatter=False)[0]
        data.comm.sum_(removal)
        return removal, None
    two = nearest(data, C, two=True).dist  # (n, 2)
    extra = (two[:, 1] - two[:, 0]).double()  # (n,)
    if data.w is not None:
        extra = extra * data.w.double()
    removal = torch.zeros(C.shape[0], dtype=torch.float64, device=data.X.device)
    removal.index_add_(0, labels, extra)
    data.comm.sum_(removal)
    return removal, two[:, 0]


def _scatter_times(data: Data, C: Tensor, labels: Tensor, V: Tensor) -> Tensor:
    """``U_a = Sigma_a V_a`` (k, d) over the ranks, ``Sigma_a`` the weighted scatter matrix of
    cluster ``a``, without forming it: ``sum_{i in S_a} w_i y_i (y_i . V_a)``, ``y_i = x_i - c_a``
    (float64, chunked)."""
    k, d = C.shape
    if kernels.usable(data.X, k, scores=True):  # wide data: one compiled sweep
        U = kernels.scatter_pass(data.X, C, labels, V, data.w)
        data.comm.sum_(U)
        return U
    U = torch.zeros(k, d, dtype=torch.float64, device=data.X.device)
    if is_sparse(data.X):  # U_a = sum w_i p_i x_i - c_a sum w_i p_i, p_i = x_i . V_a - c_a . V_a
        Cd, Vd = C.double(), V.double()
        Xd = data.X.double()
        proj = Xd.row_dot(Vd, labels) - (Cd * Vd).sum(dim=1)[labels]  # (n,)
        if data.w is not None:
            proj = proj * data.w.double()
        (Xd * proj).scatter_add_into(U, labels)
        U -= Cd * torch.zeros(k, dtype=torch.float64, device=U.device).index_add_(
            0, labels, proj).unsqueeze(1)
        data.comm.sum_(U)
        return U
    for s in data.chunks(max(k, d)):
        lab = labels[s]
        Y = (data.X[s] - C[lab]).double()  # (b, d)
        proj = (Y * V[lab]).sum(dim=1)  # (b,)
        if data.w is not None:
            proj = proj * data.w[s].double()
        U.index_add_(0, lab, Y * proj.unsqueeze(1))
    data.comm.sum_(U)
    return U


def _halves(data: Data, C: Tensor, labels: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
    """Weight (2k,) and weighted sum (2k, d) of each side of every cluster cut through ``c_a``
    normal to ``V_a`` (entry ``2a + 1`` the side ``(x - c_a).V_a > 0``), float64, local."""
    k, d = C.shape
    if kernels.usable(data.X, 2 * k, scores=True):  # wide data: one compiled sweep
        return kernels.halves_pass(data.X, C, labels, V, data.w)
    dev = data.X.device
    count = torch.zeros(2 * k, dtype=torch.float64, device=dev)
    total = torch.zeros(2 * k, d, dtype=torch.float64, device=dev)
    if is_sparse(data.X):  # the side from x_i . V_a - c_a . V_a, the sums from stored entries
        Xd, Vd = data.X.double(), V.double()
        side = Xd.row_dot(Vd, labels) - (C.double() * Vd).sum(dim=1)[labels] > 0
        half = 2 * labels + side.long()
        wc = torch.ones(data.n, dtype=torch.float64, device=dev) if data.w is None \
            else data.w.double()
        count.index_add_(0, half, wc)
        (Xd * wc).scatter_add_into(total, half)
        return count, total
    for s in data.chunks(max(k, d)):
        lab = labels[s]
        Xc = data.X[s].double()
        side = ((Xc - C[lab].double()) * V[lab]).sum(dim=1) > 0  # (b,)
        half = 2 * lab + side.long()  # (b,)
        wc = torch.ones_like(side, dtype=torch.float64) if data.w is None else data.w[s].double()
        count.index_add_(0, half, wc)
        total.index_add_(0, half, Xc * wc.unsqueeze(1))
    return count, total


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
    drop = _spread_out(_removal_costs(data, grown.C, grown.labels), grown.C, len(split))
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
def swap_costs(
    data: Data,
    C: Tensor,
    labels: Tensor,
    *,
    generator: torch.Generator | None = None,
    power_iter: int = 5,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""What removing each centroid costs and what splitting each cluster in two gains.

    With ``labels`` the nearest centroid of each point (``k >= 2``):

    * ``removal[a] = sum_{i in S_a} w_i (d_i^(2) - d_i^(1))``: the increase of ``J`` when ``c_a``
      is deleted and its points go to their second-nearest centroid (exact, others fixed);
    * ``gain[j] = (n_+ n_- / n_j) ||m_+ - m_-||^2``: the decrease of ``J`` when cluster ``j`` is
      cut by the hyperplane through ``c_j`` normal to its principal axis (``power_iter`` power
      iterations on the weighted scatter matrix, from a random start drawn from ``generator``)
      and each half gets its mean ``m_+``, ``m_-`` (exact for that partition; 0 when a half is
      empty);
    * ``halves`` (k, 2, d): those means.

    Where isolating the farthest row of cluster ``j`` (:func:`_farthest_rows`: the exact decrease
    ``w_i n_j / (n_j - w_i) ||x_i - c_j||^2`` when row ``i`` leaves for a centroid of its own)
    gains more than ``FAR_ROW_MARGIN`` times that cut, ``gain[j]`` is that decrease and the
    halves are the row and the mean of the others: an outlier the axis cut would leave in a
    half of thousands of rows.

    All sums are accumulated in float64 and reduced over the ranks; nothing larger than a chunk.
    On a cosine ``data`` the costs are in the units of the spherical ``J`` (half the Euclidean
    ones of the normalised rows) and a trial starts from the halves projected onto the sphere.
    """
    C = check_data(data).check_centroids(C)
    k, d = C.shape
    labels = check_labels(data, labels, k)
    power_iter = check_positive_int(power_iter, "power_iter")
    comm, dev = data.comm, data.X.device
    fused = kernels.usable(data.X, k, gains=k)  # few features on the CPU: two fused sweeps
    scatter: Tensor | None = None
    own: Tensor | None = None  # (n,) d_i^(1), where the removal's pass gives it
    if fused:
        removal, scatter = kernels.spread_pass(data.X, C, labels, data.w)
        comm.sum_(removal, scatter)
    else:
        removal, own = _removal_and_own(data, C, labels)
    V = torch.randn(k, d, generator=generator, dtype=torch.float64).to(dev)  # (k, d)
    for _ in range(power_iter):  # V_j <- Sigma_j V_j, Sigma_j the scatter of cluster j
        if scatter is not None:
            U = torch.bmm(scatter, V.unsqueeze(2)).squeeze(2)
        else:
            U = _scatter_times(data, C, labels, V)
        V = U / U.norm(dim=1, keepdim=True).clamp(min=1e-300)  # 0 for a cluster of one point
    if fused:
        count, total = kernels.halves_pass(data.X, C, labels, V, data.w)
    else:
        count, total = _halves(data, C, labels, V)
    comm.sum_(count, total)
    count, total = count.view(k, 2), total.view(k, 2, d)
    halves = total / count.clamp(min=1e-300).unsqueeze(2)  # (k, 2, d)
    both = (count > 0).all(dim=1)  # (k,)
    between = count.prod(dim=1) / count.sum(dim=1).clamp(min=1e-300)
    gain = torch.where(both, between * (halves[:, 0] - halves[:, 1]).square().sum(dim=1), 0.0)
    size = count.sum(dim=1)  # (k,) n_j
    far_gain, far_row, far_w = _farthest_rows(data, C, labels, size, own)
    use = far_gain > FAR_ROW_MARGIN * gain  # (k,) a row that far: isolating it gains most
    if bool(use.any()):
        rest = (total.sum(dim=1)[use] - far_w[use].unsqueeze(1) * far_row[use]) / \
            (size[use] - far_w[use]).unsqueeze(1)
        halves[use, 0], halves[use, 1], gain[use] = far_row[use], rest, far_gain[use]
    scale = data.metric.objective_scale  # in the units of the metric's J (1/2 for cosine)
    return scale * removal, scale * gain, halves.to(data.X.dtype)



def _farthest_rows(data: Data, C: Tensor, labels: Tensor, size: Tensor,
                   own: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Per cluster ``j`` the row of largest gain ``w_i n_j / (n_j - w_i) ||x_i - c_j||^2``:
    the exact decrease of ``J`` when row ``i`` leaves cluster ``j`` (whose mean moves) for a
    centroid of its own (Hartigan's move to an empty cluster). Returns the gains (k,), the rows
    (k, d) and their weights (k,), float64, over all ranks (the first row of the first rank on a
    tie); a gain of 0 where no row can leave (a cluster of one row). ``own`` (n,): the rows'
    squared distances to their centroids where a pass has them already."""
    k, d = C.shape
    dev, f64 = data.X.device, torch.float64
    best = torch.zeros(k, dtype=f64, device=dev)
    rows = torch.zeros(k, d, dtype=f64, device=dev)
    weights = torch.zeros(k, dtype=f64, device=dev)
    sparse = is_sparse(data.X)
    if sparse and own is None:  # (the sparse passes are the torch ones, which give it)
        own = nearest(data, C).dist
    for s in data.chunks(d):
        lab, Xs = labels[s], data.X[s]
        r = own[s].double() if own is not None else (Xs - C[lab]).double().square().sum(dim=1)
        w = data.weight(s)
        w = torch.ones_like(r) if w is None else w.double()
        n_j = size[lab]
        g = torch.where(n_j - w > 0, w * n_j / (n_j - w).clamp(min=1e-300) * r, 0.0)
        top = torch.zeros(k, dtype=f64, device=dev).scatter_reduce(0, lab, g, "amax")
        better = top > best
        if not bool(better.any()):
            continue
        hit = ((g == top[lab]) & better[lab]).nonzero().squeeze(1)
        first = torch.full((k,), g.numel(), dtype=torch.long, device=dev).scatter_reduce(
            0, lab[hit], hit, "amin")
        js = better.nonzero().squeeze(1)
        picked = Xs[first[js]]
        rows[js] = (dense(picked) if sparse else picked).double()
        best[js], weights[js] = top[js], w[first[js]]
    if data.comm.active:  # the largest over the ranks (the lowest rank on a tie)
        table = data.comm.all_gather(torch.cat([best.unsqueeze(1), weights.unsqueeze(1), rows],
                                               dim=1)).view(-1, k, d + 2)
        rank = table[:, :, 0].argmax(dim=0)  # (k,) the first maximum
        pick = table[rank, torch.arange(k, device=dev)]
        best, weights, rows = pick[:, 0], pick[:, 1], pick[:, 2:]
    return best, rows, weights


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
