r"""Deterministic annealing (Rose 1998): the soft-Lloyd fixed point at each temperature.

At a temperature ``T`` the soft-Lloyd map ``c_j <- m_j = S_j / N_j`` (:mod:`rbfkmeans.stats`)
is iterated to a fixed point of the relaxed objective ``F_T``; the next, colder temperature starts
from it (warm start). Above the first critical temperature every centroid sits at the data mean;
below it the centroids split (:mod:`rbfkmeans.schedules`). The ladder is a list of temperatures
the driver only consumes, and the iterations at one temperature are a pluggable *step*:
:class:`SoftLloydStep` (the default) or the autograd step of :mod:`rbfkmeans.gradient`, so that
both solvers run the same loop.

Centroids that are still coincident after a temperature are spare copies of one cluster;
:func:`rebalance_duplicates` hands them to the clusters that most need splitting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from ._validation import check_bool, check_nonnegative, check_positive_int, check_temperature
from .assignments import Assignment, get_assignment
from .errors import NonFiniteError
from .passes import Data, check_data, nearest
from .relocation import mean_update
from .stats import Stats, cluster_stats

__all__ = [
    "AnnealResult",
    "AnnealStep",
    "SoftLloydStep",
    "anneal",
    "rebalance_duplicates",
    "soft_lloyd",
]


def _check_tol(tol: float, name: str = "tol") -> float:
    return check_nonnegative(tol, name)


class AnnealStep(Protocol):
    """The iterations at one temperature: ``step(data, C, T) -> (C_new, iterations run)``."""

    def __call__(self, data: Data, C: Tensor, T: float) -> tuple[Tensor, int]: ...


class SoftLloydStep:
    """Iterate ``c_j <- m_j`` at ``T`` until ``sum_j ||c_j^new - c_j||^2 <= tol`` or
    ``max_iter`` iterations (each one pass without the objective)."""

    def __init__(self, assignment: str | Assignment, *, max_iter: int = 100,
                 tol: float = 0.0) -> None:
        self.assignment = get_assignment(assignment)
        self.max_iter = check_positive_int(max_iter, "max_iter")
        self.tol = _check_tol(tol)

    def __call__(self, data: Data, C: Tensor, T: float) -> tuple[Tensor, int]:
        it = 0
        for it in range(1, self.max_iter + 1):  # noqa: B007 (read after)
            st = cluster_stats(data, C, T, self.assignment, objective=False)
            C_new, _ = mean_update(data, C, st)
            shift = float(((C_new - C) ** 2).sum())
            C = C_new
            if shift <= self.tol:
                break
        return C, it


@torch.no_grad()
def soft_lloyd(
    data: Data,
    C0: Tensor,
    T: float,
    assignment: str | Assignment,
    *,
    max_iter: int = 100,
    tol: float = 0.0,
) -> tuple[Tensor, int, Stats]:
    r"""Iterate ``c_j <- m_j`` at temperature ``T`` to a fixed point of the soft-Lloyd map.

    Stops when ``sum_j ||c_j^new - c_j||^2 <= tol`` or after ``max_iter`` iterations. Returns
    the centroids, the iterations run and the statistics (objectives included) at the returned
    centroids.
    """
    T = check_temperature(T, "T")
    C = check_data(data).check_centroids(C0, "C0").clone()
    step = SoftLloydStep(assignment, max_iter=max_iter, tol=tol)
    C, it = step(data, C, T)
    return C, it, cluster_stats(data, C, T, step.assignment)


@dataclass
class AnnealResult:
    """Outcome of :func:`anneal`: final centroids, the temperatures actually run, the iterations
    in all, per temperature the centroids, ``F_T``, ``J``, soft-point count and iterations
    (``history``), and whether the ladder stopped because the memberships became hard."""

    C: Tensor
    temperatures: list[float]
    n_iter: int
    history: list[dict[str, object]] = field(default_factory=list)
    hard: bool = False
    #: the weight of the random subsample of rows the last temperature was computed on (all
    #: ranks' rows) and ``J`` of those rows at ``C``; None where all rows were annealed
    sample: tuple[float, float] | None = None


def anneal(
    data: Data,
    C0: Tensor,
    temperatures: Sequence[float] | np.ndarray,
    assignment: str | Assignment,
    *,
    step: AnnealStep | None = None,
    max_iter: int = 100,
    tol: float = 0.0,
    perturbation: float = 0.0,
    generator: torch.Generator | None = None,
    stop_when_hard: bool = True,
    stop_gap: float = 0.0,
    keep_history: bool = True,
    rebalance: bool = True,
    merge_tol: float = 1e-6,
    progress: Callable[[float, int], None] | None = None,
) -> AnnealResult:
    r"""Deterministic annealing over ``temperatures`` (hot to cold), warm-started.

    At each ``T``: a symmetric-breaking perturbation of standard deviation ``perturbation``
    (absolute units; drawn from ``generator`` identically on every rank) so that coincident
    centroids can split at a critical temperature; the ``step`` (default
    ``SoftLloydStep(assignment, max_iter=max_iter, tol=tol)``); one pass for ``F_T``, ``J`` and
    the soft points at the new centroids; with ``rebalance``, spare copies of coincident
    centroids (squared distance ``<= merge_tol * T``) moved to the clusters that most need them
    (:func:`rebalance_duplicates`). Without it, copies shared out at an early split stay where
    they landed, and a cluster spanning two groups of points can be left with no copy to split.
    Stops after the first temperature where every membership is one-hot, or where the relaxation
    gap ``(J - F_T) / J`` is at most ``stop_gap`` (``stop_when_hard``). Autograd stays enabled
    for the step (the gradient solver needs it); the driver itself records no graph.

    ``temperatures`` is one temperature or a 1-D sequence of finite temperatures ``>= 0`` that
    never rise. An empty one runs nothing and returns ``C0`` (a copy) with no temperatures: the
    estimator's ladder is empty where it starts below the data's resolution.
    """
    check_data(data)
    entry = get_assignment(assignment)
    if entry.hard:
        raise ValueError("anneal needs a soft assignment (softmax, entmax15, sparsemax); "
                         f"got assignment={entry.name!r}")
    if isinstance(temperatures, str | bytes) or temperatures is None:
        raise TypeError(f"temperatures must be a 1-D sequence of numbers; got "
                        f"{type(temperatures).__name__} {temperatures!r}")
    try:
        ladder = np.asarray(temperatures, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"temperatures must be a 1-D sequence of numbers; got "
                        f"{temperatures!r}") from None
    if ladder.ndim > 1:
        raise ValueError(f"temperatures must be 1-D (hot to cold); got shape {ladder.shape}")
    temps = [check_temperature(T, "temperatures") for T in ladder.ravel().tolist()]
    rising = [i for i in range(1, len(temps)) if temps[i] > temps[i - 1]]
    if rising:
        i = rising[0]
        raise ValueError(f"temperatures must not increase (annealing cools, hot to cold); got "
                         f"temperatures[{i - 1}]={temps[i - 1]!r} < temperatures[{i}]="
                         f"{temps[i]!r}")
    perturbation = _check_tol(perturbation, "perturbation")
    stop_gap = _check_tol(stop_gap, "stop_gap")
    merge_tol = _check_tol(merge_tol, "merge_tol")
    stop_when_hard = check_bool(stop_when_hard, "stop_when_hard")
    keep_history = check_bool(keep_history, "keep_history")
    rebalance = check_bool(rebalance, "rebalance")
    step = step or SoftLloydStep(entry, max_iter=max_iter, tol=tol)
    C = data.check_centroids(C0, "C0").clone()
    run: list[float] = []
    history: list[dict[str, object]] = []
    total = 0
    hard = False
    for T in temps:
        if perturbation > 0:
            noise = torch.randn(C.shape, generator=generator, dtype=torch.float64)
            C = _perturbed(data, C, (perturbation * noise).to(C.dtype).to(C.device),
                           perturbation)
        C, it = step(data, C, T)
        C = C.detach()
        st = cluster_stats(data, C, T, entry)
        total += it
        run.append(T)
        if rebalance and T > 0:
            C = rebalance_duplicates(data, C, T, generator=generator, merge_tol=merge_tol)
        if keep_history:
            history.append({"T": T, "C": C.detach().cpu().clone(), "objective": st.objective,
                            "inertia": st.inertia, "n_soft": st.n_soft, "n_iter": it})
        if progress is not None:
            progress(T, it)
        if stop_when_hard and (
            st.n_soft == 0 or st.inertia - st.objective <= stop_gap * abs(st.inertia)
        ):
            hard = True
            break
    return AnnealResult(C, run, total, history, hard)


def _perturbed(data: Data, C: Tensor, noise: Tensor, perturbation: float) -> Tensor:
    """``C + noise``, raising ``ValueError`` naming ``perturbation`` where it moves the centroids
    out of the dtype's range or out of reach of the rows (:meth:`Data.check_centroids`: one
    reduction over ``C``); the passes would otherwise blame ``C``."""
    C = C + noise
    try:
        data.check_centroids(C)
    except ValueError as exc:
        raise NonFiniteError(f"perturbation must be small enough to keep the centroids finite and "
                             f"within reach of X; got perturbation={perturbation!r}, which moved "
                             f"them out ({exc})") from None
    return C


def _groups(C: Tensor, thr: float) -> list[int]:
    """Leader grouping: centroid ``j`` joins the first earlier leader within squared distance
    ``thr`` (else leads its own group). Returns each centroid's leader."""
    d2 = torch.cdist(C.double(), C.double()).square_().cpu().numpy()  # (k, k)
    close = d2 <= thr
    k = C.shape[0]
    rep = np.arange(k)
    if not np.triu(close, 1).any():  # the common case: all distinct
        return rep.tolist()
    leader = np.ones(k, dtype=bool)
    for j in range(1, k):
        hit = np.flatnonzero(close[:j, j] & leader[:j])
        if hit.size:
            rep[j] = hit[0]
            leader[j] = False
    return rep.tolist()


@torch.no_grad()
def rebalance_duplicates(
    data: Data,
    C: Tensor,
    T: float,
    *,
    generator: torch.Generator | None = None,
    merge_tol: float = 1e-6,
) -> Tensor:
    r"""Move spare copies of coincident centroids to the clusters that most need splitting.

    Groups ``g`` of centroids within squared distance ``merge_tol * T`` of each other act as one
    cluster with ``m_g`` copies. With ``V_g`` the weighted within-cluster sum of squares of the
    group (nearest-group assignment), a copy is moved from group ``L`` to group ``H`` while
    ``V_L / (m_L - 1) < V_H / m_H``; it is placed at ``c_H`` plus an offset of length
    ``1e-3 sqrt(T)``, so it splits from ``c_H`` as soon as ``T`` is below that cluster's
    critical temperature. Returns new centroids (the input is not modified).
    """
    T = check_temperature(T, "T")
    C = check_data(data).check_centroids(C)
    rep = _groups(C, _check_tol(merge_tol, "merge_tol") * T)
    reps = sorted(set(rep))
    if len(reps) == C.shape[0]:
        return C
    near = nearest(data, C[reps])  # one centroid per group
    dist = near.dist.double()
    if data.w is not None:
        dist = dist * data.w.double()
    V_t = torch.zeros(len(reps), dtype=torch.float64, device=C.device)
    V_t.index_add_(0, near.labels, dist)
    data.comm.sum_(V_t)
    V = dict(zip(reps, V_t.tolist(), strict=True))  # one transfer, then plain floats
    copies = {g: [j for j, r in enumerate(rep) if r == g] for g in reps}
    C = C.clone()
    while True:
        donors = [g for g in reps if len(copies[g]) > 1]
        if not donors:
            break
        low = min(donors, key=lambda g: V[g] / (len(copies[g]) - 1))
        high = max(reps, key=lambda g: V[g] / len(copies[g]))
        if high == low or not V[low] / (len(copies[low]) - 1) < V[high] / len(copies[high]):
            break
        j = copies[low].pop()
        direction = torch.randn(C.shape[1], generator=generator, dtype=torch.float64)
        direction = direction / direction.norm().clamp(min=1e-300)
        C[j] = C[high] + (1e-3 * math.sqrt(T) * direction).to(C.dtype).to(C.device)
        copies[high].append(j)
    return C
