r"""Event-driven annealing: groups of coincident centroids split at their own critical temperature.

The geometric ladder of :func:`rbfkmeans.annealing.anneal` carries all ``k`` centroids through
every temperature and spends as much effort where nothing happens as where clusters split. Here
the ``k`` copies are carried as groups with multiplicities (:mod:`rbfkmeans.groups`, the same
statistics at ``O(n g d)`` per pass), and the ladder is driven by the groups' critical
temperatures ``T_j = lambda_max(A_j)``:

1. start with one group of ``k`` copies at the weighted mean, just below its critical
   temperature (the ``T_c`` of :mod:`rbfkmeans.schedules`);
2. at each temperature iterate the soft-Lloyd map of the groups to a fixed point; a group whose
   ``T_j`` is above ``T`` is unstable and splits in two along its principal axis (its copies
   shared out evenly), and the fixed point is sought again;
3. spare copies move to the groups with the largest within-group variance per copy (the rule of
   :func:`rbfkmeans.annealing.rebalance_duplicates`: here it only changes multiplicities);
4. the next temperature is the next event: ``split_margin`` times the highest ``T_j`` among the
   groups that can still split, but never below ``jump`` times, and never above ``cooling`` times
   the current one; once every group is a single centroid the ladder cools by ``cooling`` until
   the memberships are hard (or the relaxation gap ``(J - F_T)/J <= stop_gap``).

Large data is annealed on a growing random subsample (``points_per_group`` rows per group, at
least ``min_points``): the statistics of a few distinct centroids need few points. The hard
Lloyd polish and the swap search that follow in :class:`~rbfkmeans.RBFKMeans` run on all of it,
so the result is still a Lloyd fixed point of the full data.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from . import kernels
from ._validation import check_nonnegative, check_positive_int, check_temperature
from .annealing import AnnealResult
from .assignments import Assignment, get_assignment
from .groups import GroupStats, group_stats_unchecked
from .passes import Data, check_data
from .relocation import relocate_empty
from .seeding import weighted_mean

__all__ = ["SMALL_COPY", "Subsample", "anneal_splits"]

#: a subsample of more than half the rows is copied only up to this many entries (``rows x d``)
SMALL_COPY = 1 << 20


class Subsample:
    """Growing random subsets of the rows of ``data``: :meth:`take` keeps the rows whose place in
    one random permutation of all rows (of every rank, drawn from ``generator``, the same on
    every rank) comes first, so each subset contains the smaller ones and a distributed run
    keeps exactly the rows one process would keep of the concatenated data. ``data`` is a
    :class:`~rbfkmeans.passes.Data`, ``generator`` None or a ``torch.Generator``, else
    ``TypeError`` naming them."""

    def __init__(self, data: Data, generator: torch.Generator | None = None) -> None:
        self.data = check_data(data)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be None or a torch.Generator; got "
                            f"{type(generator).__name__} {generator!r}")
        counts = data.comm.counts(data.n)
        self.total = sum(counts)
        start = sum(counts[: data.comm.rank])
        rank_of = torch.empty(self.total, dtype=torch.long)
        rank_of[torch.randperm(self.total, generator=generator)] = torch.arange(self.total)
        self.place = rank_of[start : start + data.n].to(data.X.device)  # (n,) in the permutation
        self._size = -1
        self._part = data

    def take(self, size: int, skip: int = 0) -> Data:
        """The rows among the first ``size`` of the permutation: the data itself once ``size``
        covers all rows over all ranks, or half of them and the copy would hold more than
        ``SMALL_COPY`` entries (a large copy stays below half of ``X``). With ``skip``, the
        rows at places ``skip`` to ``skip + size - 1`` instead (disjoint from ``take(skip)``;
        always a copy)."""
        data = self.data
        if skip > 0:
            idx = ((self.place >= skip) & (self.place < skip + size)).nonzero().squeeze(1)
            return self._rows(idx)
        if size >= self.total or (2 * size >= self.total and size * data.d > SMALL_COPY):
            return data
        if size != self._size:
            self._part = self._rows((self.place < size).nonzero().squeeze(1))
            self._size = size
        return self._part

    def _rows(self, idx: Tensor) -> Data:
        """The rows ``idx`` as data of the same metric (cosine rows are unit rows already:
        they are read as they are)."""
        data = self.data
        w = None if data.w is None else data.w[idx]
        return Data(data.X[idx], w, chunk_size=data.chunk_size, comm=data.comm, validate=False,
                    metric=data.metric)


def resolution_temperature(data: Data) -> float:
    r"""``T_floor = (64 eps max|x|)^2``: below it ``sqrt(T)``, the scale of a soft membership's
    reach and of a split, is within a few dozen rounding units of the coordinates themselves
    (``eps`` of the data's dtype), so no membership or split there can be told from a hard
    one. The event-driven ladder stops there: its number of temperatures then does not grow
    without bound with extreme weights or starting temperatures (a point of weight ``1e100``
    makes the weighted spread, and every critical temperature, ``1e-100`` times smaller)."""
    if data.n:
        lo, hi = torch.aminmax(data.X)  # no temporary the size of X
        big = torch.maximum(-lo, hi).reshape(1).double()
    else:
        big = torch.zeros(1, dtype=torch.float64, device=data.X.device)
    x_max = float(data.comm.all_gather(big).amax())
    return (64.0 * torch.finfo(data.X.dtype).eps * x_max) ** 2


def _sum(values: list[float]) -> float:
    """The values added one after another, in order (as the compiled fixed point adds them)."""
    total = 0.0
    for v in values:
        total += v
    return total


def _sq(t: Tensor) -> float:
    """``sum t^2`` in float64, the entries squared and added in row-major order."""
    return _sum([v * v for v in t.double().flatten().tolist()])


def _map(data: Data, C: Tensor, m: Tensor, T: float, entry: Assignment,
         objective: bool = True) -> tuple[Tensor, float]:
    """One soft-Lloyd step of the groups, ``c_j <- S_j / N_j`` (empty groups relocated), and the
    relaxed objective ``F_T`` at the input ``C`` (NaN without ``objective``)."""
    st = group_stats_unchecked(data, C, m, T, entry, objective=objective)
    empty = 1e-12 * _sum(st.N.double().tolist()) >= st.N
    C_new = st.S / st.N.clamp(min=torch.finfo(st.N.dtype).tiny).unsqueeze(1)
    C_new = torch.where(empty.unsqueeze(1), C, C_new)
    if bool(empty.any()):
        C_new = relocate_empty(data, C_new, empty)
    return C_new, st.objective


def _fixed_point(data: Data, C: Tensor, m: Tensor, T: float, entry: Assignment,
                 max_iter: int, tol: float) -> tuple[Tensor, int]:
    r"""The fixed point of the groups' soft-Lloyd map ``G`` at ``T``, accelerated by SQUAREM
    (Varadhan & Roland 2008): from ``C``, ``C_1 = G(C)``, ``C_2 = G(C_1)``, ``r = C_1 - C``,
    ``v = C_2 - 2 C_1 + C``, ``alpha = -||r|| / ||v||`` (at most -1), the extrapolation
    ``C' = C - 2 alpha r + alpha^2 v`` and one stabilising step ``G(C')``. The step is kept only
    if ``F_T(C') <= F_T(C_1)`` (each plain step lowers ``F_T``), else (or when ``C'`` is not
    finite) the cycle ends at ``C_2``: ``F_T`` never rises. Stops once a step moves the
    centroids by at most ``tol`` (squared) or after ``max_iter`` evaluations of ``G``. On the
    CPU in one process the same steps run in compiled code
    (:func:`rbfkmeans.kernels.group_fixed_point`), unless one needs an empty group relocated:
    then they run here."""
    if not data.comm.active and kernels.usable(data.X, C.shape[0], scores=True):
        C_k, it_k, done = kernels.group_fixed_point(data.X, C, m, T, entry.name, data.w,
                                                    max_iter, tol)
        if done:
            return C_k, it_k
    it = 0
    while it < max_iter:
        C1, _ = _map(data, C, m, T, entry, objective=False)  # F at C is not compared
        it += 1
        r = C1 - C
        if _sq(r) <= tol or it >= max_iter:
            return C1, it
        C2, F1 = _map(data, C1, m, T, entry)
        it += 1
        if _sq(C2 - C1) <= tol or it >= max_iter:
            return C2, it
        v = C2 - 2.0 * C1 + C
        nv = _sq(v)
        alpha = -math.sqrt(_sq(r) / nv) if nv > 0 else -1.0
        alpha = min(alpha, -1.0)
        C_ext = C - 2.0 * alpha * r + alpha**2 * v
        if not bool(torch.isfinite(C_ext).all()):  # an extrapolation beyond float range
            C = C2
            continue
        C3, F_ext = _map(data, C_ext, m, T, entry)
        it += 1
        C = C3 if F_ext <= F1 else C2
    return C, it


def _rebalance(m: Tensor, V: Tensor) -> Tensor:
    """Move single copies from group ``L`` to group ``H`` while ``V_L/(m_L - 1) < V_H/m_H``."""
    mm = [int(v) for v in m.tolist()]
    vv = [float(v) for v in V.tolist()]
    while True:
        donors = [j for j in range(len(mm)) if mm[j] > 1]
        if not donors:
            break
        low = min(donors, key=lambda j: vv[j] / (mm[j] - 1))
        high = max(range(len(mm)), key=lambda j: vv[j] / mm[j])
        if high == low or not vv[low] / (mm[low] - 1) < vv[high] / mm[high]:
            break
        mm[low] -= 1
        mm[high] += 1
    return torch.tensor(mm, dtype=m.dtype, device=m.device)


def _split(C: Tensor, m: Tensor, st: GroupStats, T: float) -> tuple[Tensor, Tensor, int]:
    """Split every unstable group (``m_j > 1``, ``T_j > T``) into two along its axis, the halves
    ``+-0.3 sqrt(T)`` apart, or ``+-0.3 sqrt(T_j / 1e6)`` for a split long overdue (a ladder
    started far below ``T_j``), where ``sqrt(T)`` could vanish against the centroid's own
    coordinates and the halves would coincide."""
    assert st.T_crit is not None
    assert st.axis is not None
    unstable = ((st.T_crit > T) & (m > 1)).nonzero().squeeze(1).tolist()
    if not unstable:
        return C, m, 0
    C_new, m_new = C.clone(), m.clone()
    extra_C, extra_m = [], []
    for j in unstable:
        step = 0.3 * math.sqrt(max(T, 1e-6 * float(st.T_crit[j]))) * st.axis[j]  # (d,)
        half = int(m[j]) // 2
        C_new[j], m_new[j] = C[j] + step, int(m[j]) - half
        extra_C.append(C[j] - step)
        extra_m.append(half)
    extra = torch.tensor(extra_m, dtype=m.dtype, device=m.device)
    return torch.cat([C_new, torch.stack(extra_C)]), torch.cat([m_new, extra]), len(unstable)


def _merge(C: Tensor, m: Tensor, thr: float) -> tuple[Tensor, Tensor]:
    """Groups closer than ``thr`` (squared distance) become one (multiplicities added)."""
    if C.shape[0] < 2:
        return C, m
    d2 = torch.cdist(C.double(), C.double()).square_()
    d2.fill_diagonal_(math.inf)
    close = (d2 <= thr).cpu().numpy()  # (g, g)
    if not close.any():
        return C, m
    kept = np.zeros(C.shape[0], dtype=bool)
    mult = [int(v) for v in m.tolist()]
    for j in range(C.shape[0]):
        twins = np.flatnonzero(close[:j, j] & kept[:j])  # the first kept group close to j
        if twins.size:
            mult[int(twins[0])] += mult[j]
        else:
            kept[j] = True
    keep = np.flatnonzero(kept).tolist()
    return C[keep], torch.tensor([mult[i] for i in keep], dtype=m.dtype, device=m.device)


def anneal_splits(
    data: Data,
    n_clusters: int,
    assignment: str | Assignment,
    *,
    T_start: float | None = None,
    T_end: float | None = None,
    cooling: float = 0.7,
    jump: float = 0.5,
    split_margin: float = 0.8,
    max_iter: int = 15,
    tol: float = 0.0,
    stop_gap: float = 1e-4,
    merge_tol: float = 1e-6,
    max_temperatures: int = 1000,
    settled_iter: int = 2,
    points_per_group: int | None = 64,
    min_points: int = 4096,
    generator: torch.Generator | None = None,
    keep_history: bool = True,
    progress: Callable[[float, int], None] | None = None,
    stop_at_singles: bool = False,
) -> AnnealResult:
    r"""Event-driven annealing of ``n_clusters`` copies from the weighted mean (module docstring).

    ``T_start`` defaults to ``split_margin`` times the first critical temperature; ``T_end``
    (default: none) is the coldest temperature run, where the ladder stops if it has not
    stopped before (a ``T_end`` at or above the first temperature leaves that one alone). At each
    temperature the groups' fixed point is sought by at most ``max_iter`` SQUAREM-accelerated
    soft-Lloyd steps, stopping once a step moves the centroids by at most ``tol`` (squared).
    Groups closer than ``merge_tol * T`` (squared distance) are merged. The ladder stops when
    every group is a single centroid and the memberships are hard, the relaxation gap is at most
    ``stop_gap``, or the fixed point took at most ``settled_iter`` steps (the hard polish takes
    over), or after ``max_temperatures``; with ``stop_at_singles`` as soon as every group is a
    single centroid (large problems, where the cold end of the ladder costs most and the hard
    polish refines as well). ``points_per_group`` rows per group are used, and at
    least ``min_points`` (a growing random subsample drawn from ``generator``; ``None``: all
    rows). ``T_start`` is a finite temperature ``>= 0``; the counts are integers (``>= 1``,
    ``settled_iter >= 0``) and the tolerances finite numbers ``>= 0``.

    Returns the ``k`` centroids (a group of ``m`` copies repeated ``m`` times), the temperatures
    run, the soft-Lloyd steps in all, and per temperature the centroids (k, d), ``F_T``, ``J``,
    the soft weight, the steps and the number of groups (``history``). Where a temperature ran
    on a subsample, its ``F_T``, ``J`` and soft weight are the subsample's scaled by the data's
    total weight over the subsample's (estimates of the data's, comparable with a fit's
    ``inertia_``), and ``sample_fraction`` is the share of the weight they come from (1 on all
    rows, where they are exact).
    """
    check_data(data)
    entry = get_assignment(assignment)
    if entry.hard:
        raise ValueError("anneal_splits needs a soft assignment (softmax, entmax15, sparsemax); "
                         f"got assignment={entry.name!r}")
    k = check_positive_int(n_clusters, "n_clusters")
    n_total = sum(data.comm.counts(data.n))
    if k > n_total:
        raise ValueError(f"n_samples={n_total} should be >= n_clusters={k}")
    for name, v in (("cooling", cooling), ("jump", jump), ("split_margin", split_margin)):
        if not (isinstance(v, int | float) and 0 < v < 1):
            raise ValueError(f"{name} must be a number in (0, 1); got {v!r}")
    if T_start is not None:
        T_start = check_temperature(T_start, "T_start")  # finite and >= 0
    if T_end is not None:
        T_end = check_temperature(T_end, "T_end")
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_nonnegative(tol, "tol")
    stop_gap = check_nonnegative(stop_gap, "stop_gap")
    merge_tol = check_nonnegative(merge_tol, "merge_tol")
    max_temperatures = check_positive_int(max_temperatures, "max_temperatures")
    settled_iter = check_positive_int(settled_iter, "settled_iter", minimum=0)
    if points_per_group is not None:
        points_per_group = check_positive_int(points_per_group, "points_per_group")
    min_points = check_positive_int(min_points, "min_points")
    pool = Subsample(data.weighing_rows(), generator)

    def part(groups: int) -> Data:
        if points_per_group is None:
            return data
        return pool.take(max(min_points, points_per_group * groups))

    C = weighted_mean(data).unsqueeze(0)  # (1, d)
    m = torch.tensor([k], dtype=torch.long, device=C.device)
    first = group_stats_unchecked(part(1), C, m, 1.0, entry, objective=False, critical=True)
    assert first.T_crit is not None
    Tc = float(first.T_crit[0]) if k > 1 else 0.0
    T_floor = resolution_temperature(data)
    if (Tc <= 0 and T_start is None) or max(Tc, T_start or 0.0) <= T_floor:
        # constant data, k = 1, or splits too fine to resolve: nothing to anneal
        return AnnealResult(C.repeat(k, 1), [], 0, [], True)
    T = float(T_start) if T_start is not None else split_margin * Tc
    T = max(T, 2.0 * T_floor)  # a start below the resolution is taken at it
    temps: list[float] = []
    history: list[dict[str, object]] = []
    weight = data.total_weight() if keep_history else 1.0  # the history's scale (docstring)
    total = 0
    hard = False
    for _ in range(max_temperatures):
        if not T_floor < T:  # below the resolution of the coordinates: the hard polish
            break  # takes over
        sub = part(C.shape[0])
        C, it = _fixed_point(sub, C, m, T, entry, max_iter, tol)
        st = group_stats_unchecked(sub, C, m, T, entry, critical=True)
        C, m, n_split = _split(C, m, st, T)
        if n_split:  # the new groups' fixed point at the same temperature
            sub = part(C.shape[0])
            C, it2 = _fixed_point(sub, C, m, T, entry, max_iter, tol)
            it += it2
            st = group_stats_unchecked(sub, C, m, T, entry, critical=True)
        C, m = _merge(C, m, merge_tol * T)
        if C.shape[0] != st.N.shape[0]:
            st = group_stats_unchecked(sub, C, m, T, entry, critical=True)
        m = _rebalance(m, st.V)
        total += it
        temps.append(T)
        if keep_history:
            fraction = 1.0 if sub is data else sub.total_weight() / weight
            history.append({"T": T, "C": C.detach().repeat_interleave(m, dim=0).cpu(),
                            "objective": st.objective / fraction,
                            "inertia": st.inertia / fraction, "n_soft": st.n_soft / fraction,
                            "n_iter": it, "groups": int(C.shape[0]),
                            "sample_fraction": fraction})
        if progress is not None:
            progress(T, it)
        singles = bool((m == 1).all())
        if singles and (stop_at_singles or st.n_soft == 0
                        or st.inertia - st.objective <= stop_gap * abs(st.inertia)
                        or it <= settled_iter):
            hard = st.n_soft == 0
            break
        if T_end is not None and T_end >= T:  # the coldest temperature asked for: reached
            break
        assert st.T_crit is not None
        can_split = st.T_crit[m > 1]
        if can_split.numel():
            T_event = split_margin * float(can_split.max())
            T = min(cooling * T, max(T_event, jump * T))
        else:
            T = cooling * T
        if T_end is not None:
            T = max(T, T_end)  # the last temperature is T_end itself, as on the geometric ladder
    sample = None
    if temps and sub is not data:  # J of the subsample at C: judged by the caller on all rows
        sample = (sub.total_weight(), float(st.inertia))
    return AnnealResult(C.repeat_interleave(m, dim=0), temps, total, history, hard, sample)
