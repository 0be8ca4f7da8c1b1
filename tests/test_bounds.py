"""Bounded hard passes (Hamerly bounds) against full passes and plain Lloyd."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkmeans import kernels
from rbfkmeans.bounds import MOVERS, MOVERS_MIN_K, BoundedAssignment
from rbfkmeans.lloyd import (
    BOUNDS_MIN_ENTRIES,
    BOUNDS_OVER_KERNEL,
    bounds_pay,
    lloyd,
)
from rbfkmeans.passes import Data, nearest
from rbfkmeans.relocation import hard_update
from rbfkmeans.stats import cluster_stats


def _blobs(seed: int, n: int, d: int, centers: int, dtype: torch.dtype = torch.float64
           ) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    means = 4.0 * torch.randn(centers, d, generator=g, dtype=torch.float64)
    X = means[torch.randint(0, centers, (n,), generator=g)]
    return (X + torch.randn(n, d, generator=g, dtype=torch.float64)).to(dtype)


def _passes_equal_full_passes(data: Data, C: torch.Tensor, steps: int,
                              leap: Callable[[torch.Tensor], None] | None = None) -> None:
    """Along Lloyd steps from ``C`` (each followed by ``leap(C)``, in place, when given) every
    bounded pass gives the full pass's labels, and its float64 sums equal the full pass's."""
    bounded = BoundedAssignment(data)
    for _ in range(steps):
        full = cluster_stats(data, C, 0.0, "hard", return_labels=True, objective=False)
        got = bounded(C)
        assert torch.equal(got.labels, full.labels)
        torch.testing.assert_close(got.N, full.N, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.S, full.S, rtol=1e-12, atol=1e-9)
        C, _ = hard_update(data, C, full)
        if leap is not None:
            leap(C)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 600), d=st.integers(1, 6),
       k=st.integers(1, 12), weighted=st.booleans(), chunk=st.sampled_from([None, 7, 64]))
def test_each_pass_equals_the_full_pass(seed: int, n: int, d: int, k: int, weighted: bool,
                                        chunk: int | None) -> None:
    """Along a plain Lloyd trajectory every bounded pass gives the full pass's labels, and its
    float64 sums equal the full pass's (float64 data)."""
    X = _blobs(seed, n, d, 5)
    w = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) \
        if weighted else None
    data = Data(X, w, chunk_size=chunk)
    C = X[torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))[: min(k, n)]]
    _passes_equal_full_passes(data, C, 8)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(300, 900), d=st.integers(1, 5),
       k=st.integers(MOVERS_MIN_K, MOVERS_MIN_K + 40), jumps=st.integers(0, 2 * MOVERS),
       weighted=st.booleans())
def test_passes_after_a_few_large_moves_equal_the_full_pass(
        seed: int, n: int, d: int, k: int, jumps: int, weighted: bool) -> None:
    """With ``k >= MOVERS_MIN_K`` the points in doubt take exact distances to the centroids
    that moved most: after Lloyd steps in which ``jumps`` centroids also leap to random points
    (a swap trial's halves, a relocation), every bounded pass gives the full pass's labels and
    sums (float64 data; the leaps land off the data, as ties are the module's one caveat)."""
    X = _blobs(seed, n, d, 12)
    w = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) \
        if weighted else None
    data = Data(X, w, chunk_size=97)
    g = torch.Generator().manual_seed(seed + 1)
    C = X[torch.randperm(n, generator=g)[:k]].clone()

    def leap(C: torch.Tensor) -> None:  # to random rows, moved off them: no exact ties
        moved = torch.randperm(k, generator=g)[:jumps]
        C[moved] = X[torch.randint(0, n, (jumps,), generator=g)] \
            + 0.1 * torch.randn(jumps, d, generator=g, dtype=X.dtype)

    _passes_equal_full_passes(data, C, 6, leap)


def test_a_few_large_moves_leave_the_far_points_alone() -> None:
    """One centroid relocated across the data loosens Hamerly's single lower bound of every
    point; with its exact distances (a mover) the points near neither of its places keep their
    labels without all k distances."""
    X = _blobs(3, 6000, 2, 100)
    data = Data(X)
    C = lloyd(data, X[:MOVERS_MIN_K].clone(), bounds=False).C
    bounded = BoundedAssignment(data)
    bounded(C)
    C = C.clone()
    C[0] = X[-1]  # a leap
    before = bounded.n_full
    got = bounded(C)
    full = cluster_stats(data, C, 0.0, "hard", return_labels=True, objective=False)
    assert torch.equal(got.labels, full.labels)
    changed = int((got.labels == 0).sum()) + int((full.labels != bounded.labels).sum())
    assert bounded.n_full - before < data.n // 4  # Hamerly alone: every point in doubt
    assert changed > 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_lloyd_with_bounds_equals_plain_lloyd(seed: int, weighted: bool, metric: str) -> None:
    """On cosine data the bounds are those of the unit rows' Euclidean distances to the unit
    centroids (``2 - 2 cos``): the labels, iterations and centroids of full cosine passes."""
    X = _blobs(seed, 3000, 5 if metric == "sqeuclidean" else 6, 12)
    w = torch.linspace(0.1, 2.0, 3000, dtype=torch.float64) if weighted else None
    data = Data(X, w, chunk_size=500, metric=metric)
    C0 = X[:24].clone()
    plain = lloyd(data, C0, bounds=False)
    fast = lloyd(data, C0, bounds=True)
    assert fast.n_iter == plain.n_iter
    assert fast.converged
    assert torch.equal(fast.labels, plain.labels)
    torch.testing.assert_close(fast.C, plain.C, rtol=1e-12, atol=1e-12)
    if metric == "cosine":
        torch.testing.assert_close(fast.C.norm(dim=1), torch.ones(24, dtype=torch.float64))
    assert fast.inertia == pytest.approx(plain.inertia, rel=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_a_warm_start_takes_up_the_parents_bounds_and_ends_where_a_cold_start_ends(
        weighted: bool, metric: str) -> None:
    """``lloyd(warm=(parent, rows))`` on the bounded passes starts from the parent's labels and
    bounds (:meth:`BoundedAssignment.start_from`): a swap (two centroids replaced), a grown set
    (two new centroids), a subset (two gone) and two means moved a little (as Hartigan's moves
    move them; each continues its own) end with the labels, iterations and centroids of full
    passes from the same start, and score fewer points than a cold start."""
    X = _blobs(1, 4000, 4, 90)
    w = torch.linspace(0.1, 2.0, 4000, dtype=torch.float64) if weighted else None
    data = Data(X, w, chunk_size=700, metric=metric)
    k = MOVERS_MIN_K + 8
    parent = lloyd(data, X[:k].clone(), bounds=True)
    assert parent.bounded is not None
    swap = parent.C.clone()
    swap[3], swap[40] = X[3000], X[3001]
    swap_rows = torch.arange(k)
    swap_rows[[3, 40]] = -1
    keep = torch.tensor([j for j in range(k) if j not in (5, 17)])
    starts = [(swap, swap_rows),
              (torch.cat([parent.C, X[[2500, 2600]]]), torch.cat([torch.arange(k),
                                                                  torch.tensor([-1, -1])])),
              (parent.C[keep], keep)]
    shifted = parent.C.clone()
    shifted[[7, 30]] += 0.02 * parent.C[[7, 30]].norm(dim=1, keepdim=True)
    starts.append((shifted, torch.arange(k)))
    for C0, rows in starts:
        warm = lloyd(data, C0, bounds=True, warm=(parent, rows))
        cold = lloyd(data, C0, bounds=True)
        plain = lloyd(data, C0, bounds=False)
        assert warm.n_iter == plain.n_iter
        assert torch.equal(warm.labels, plain.labels)
        torch.testing.assert_close(warm.C, plain.C, rtol=1e-12, atol=1e-12)
        assert warm.inertia == pytest.approx(plain.inertia, rel=1e-12)
        assert warm.bounded is not None
        assert cold.bounded is not None
        assert warm.bounded.n_full < cold.bounded.n_full


def test_start_from_rejects_a_parent_on_other_rows() -> None:
    X = _blobs(0, 500, 3, 4)
    parent = BoundedAssignment(Data(X))
    parent(X[:4].clone())
    child = BoundedAssignment(Data(X.clone()))
    with pytest.raises(ValueError, match="same rows"):
        child.start_from(parent, X[:4].clone(), torch.arange(4))


def test_bounds_skip_most_points_once_labels_settle() -> None:
    X = _blobs(0, 4000, 3, 8)
    data = Data(X)
    C = lloyd(data, X[:8].clone(), bounds=False).C
    bounded = BoundedAssignment(data)
    for _ in range(5):  # at the fixed point nothing moves: no point needs its k distances
        st_ = bounded(C)
        C, _ = hard_update(data, C, st_)
    assert bounded.n_full == data.n  # the first pass only


def test_float32_result_is_a_lloyd_fixed_point() -> None:
    """float32: the sums are kept in float64, so the trajectory may part from plain Lloyd's at
    rounding level; the result is still a fixed point with the nearest-centroid labels."""
    X = _blobs(3, 5000, 4, 10, torch.float32)
    data = Data(X)
    res = lloyd(data, X[:16].clone(), bounds=True)
    assert res.converged
    near = nearest(data, res.C)
    assert torch.equal(res.labels, near.labels)
    means = torch.stack([X[res.labels == j].double().mean(dim=0) for j in range(16)])
    torch.testing.assert_close(res.C.double(), means, rtol=1e-5, atol=1e-5)
    plain = lloyd(data, X[:16].clone(), bounds=False)
    assert res.inertia == pytest.approx(plain.inertia, rel=1e-3)


def test_empty_clusters_are_relocated_as_plain_lloyd_does() -> None:
    X = _blobs(1, 2000, 2, 4)
    C0 = X[:6].clone()
    C0[0] = 1e3  # far from every point: emptied at once, relocated
    C0[1] = 1e3 + 1.0
    data = Data(X)
    plain, fast = lloyd(data, C0, bounds=False), lloyd(data, C0, bounds=True)
    assert torch.equal(fast.labels, plain.labels)
    torch.testing.assert_close(fast.C, plain.C, rtol=1e-12, atol=1e-12)


def test_duplicate_points_and_k_equal_n() -> None:
    X = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [5.0, 5.0]],
                     dtype=torch.float64)
    data = Data(X)
    for k in (1, 3, 5):
        plain, fast = lloyd(data, X[-k:].clone(), bounds=False), lloyd(data, X[-k:].clone(),
                                                                       bounds=True)
        assert torch.equal(fast.labels, plain.labels)
        torch.testing.assert_close(fast.C, plain.C)


def _spy_bounded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record ``k`` of every bounded pass (:class:`BoundedAssignment` called) from now on."""
    calls: list[int] = []
    original = BoundedAssignment.__call__

    def spy(self: BoundedAssignment, C: torch.Tensor):  # type: ignore[no-untyped-def]
        calls.append(C.shape[0])
        return original(self, C)

    monkeypatch.setattr(BoundedAssignment, "__call__", spy)
    return calls


def test_default_uses_bounds_on_large_problems_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_bounded(monkeypatch)
    monkeypatch.setenv("RBFKMEANS_KERNELS", "0")  # the torch passes: bounds from n k >= 2^20
    small = Data(_blobs(0, 200, 2, 3))
    lloyd(small, small.X[:3].clone())
    assert not calls
    assert not bounds_pay(small, 3)
    k = 64
    n = BOUNDS_MIN_ENTRIES // k
    big = Data(_blobs(0, n, 2, 3))
    lloyd(big, big.X[:k].clone(), max_iter=2)
    assert calls == [k, k, k]  # two iterations, then the labels at the last centroids
    assert bounds_pay(big, k)
    # a progress callback needs the objective of every pass: the full passes run
    calls.clear()
    lloyd(big, big.X[:k].clone(), max_iter=2, callback=lambda it, C, s: None)
    assert not calls
    # where the full pass runs in the fused kernel (few features on the CPU) it costs less than
    # the bookkeeping of the bounds: full passes
    monkeypatch.delenv("RBFKMEANS_KERNELS")
    lloyd(big, big.X[:k].clone(), max_iter=2)
    assert calls == ([] if kernels.usable(big.X, k) else [k, k, k])
    assert bounds_pay(big, k) == (calls != [])
    assert kernels.usable(big.X, k) == kernels.enabled()


@pytest.mark.skipif(not kernels.enabled(), reason="the compiled kernels are switched off")
def test_wide_data_with_many_centroids_per_feature_takes_the_bounded_passes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On wide data (more than ``kernels.MAX_DIM`` features) with ``k >= BOUNDS_OVER_KERNEL d``
    and more group bounds than a compiled run keeps (``kernels.KEPT_LOWER_BOUNDS``, made small
    here) the default Lloyd run takes the bounded torch passes even where the compiled run
    could take it, and ends where the compiled run ends (same labels, same ``J`` up to
    rounding); within the cap, or with fewer centroids per feature, the compiled run keeps it."""
    calls = _spy_bounded(monkeypatch)
    d = kernels.MAX_DIM + 1
    k = BOUNDS_OVER_KERNEL * d
    X = _blobs(3, 2 * BOUNDS_MIN_ENTRIES // k + 1, d, 40, torch.float32)
    data = Data(X)
    C0 = X[:k].clone()
    groups = X.shape[0] * kernels.bound_groups(X.shape[0], k)
    assert groups <= kernels.KEPT_LOWER_BOUNDS  # within the cap: the compiled run
    assert not bounds_pay(data, k)
    lloyd(data, C0, max_iter=3, tol=0.0)
    assert calls == []
    monkeypatch.setattr(kernels, "KEPT_LOWER_BOUNDS", groups - 1)
    res = lloyd(data, C0, max_iter=6, tol=0.0)
    assert calls == [k] * (res.n_iter + 1)
    assert bounds_pay(data, k)
    assert res.n_iter >= 2
    ref = lloyd(data, C0, max_iter=6, tol=0.0, bounds=False)
    assert torch.equal(res.labels, ref.labels)
    assert res.inertia == pytest.approx(ref.inertia, rel=1e-5)
    calls.clear()
    few = k // 2  # below the rule: the compiled run where kernels are enabled
    lloyd(data, X[:few].clone(), max_iter=3, tol=0.0)
    assert (calls == []) == kernels.usable(X, few, scores=True)
    assert bounds_pay(data, few) == (calls != [])


def test_rejects_cosine_data() -> None:
    data = Data(_blobs(0, 50, 3, 2), metric="cosine")
    with pytest.raises(ValueError, match="sqeuclidean data; got 'cosine'"):
        BoundedAssignment(data)
    res = lloyd(data, data.X[:2].clone(), bounds=True)  # lloyd itself falls back to full passes
    assert np.isfinite(res.inertia)


def test_bad_input_names_the_parameter() -> None:
    data = Data(_blobs(0, 40, 2, 2))
    with pytest.raises(TypeError, match=r"data must be a rbfkmeans\.passes\.Data; got Tensor"):
        BoundedAssignment(data.X)  # type: ignore[arg-type]
    bounded = BoundedAssignment(data)
    with pytest.raises(ValueError, match=r"C must have shape \(k, 2\)"):
        bounded(torch.zeros(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="C must be finite"):
        bounded(torch.tensor([[0.0, float("nan")]], dtype=torch.float64))
    with pytest.raises(ValueError, match="bounds must be True, False or None; got 'yes'"):
        lloyd(data, data.X[:2], bounds="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("weighted", [False, True])
def test_spherical_stall_objective_is_the_objective_at_the_mean_directions(
        weighted: bool) -> None:
    """The give-up rule's ``J_t`` on cosine data, ``sum w - sum_j ||S_j||``, is the spherical
    objective of the labels at their mean directions (computed by a pass at those centroids)."""
    from rbfkmeans.lloyd import _between, _moments

    X = _blobs(5, 2000, 5, 8)
    w = torch.rand(2000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) \
        if weighted else None
    data = Data(X, w, metric="cosine")
    st_ = cluster_stats(data, data.project(X[:10].clone()), 0.0, "hard", return_labels=True)
    directions = st_.S / st_.S.norm(dim=1, keepdim=True)
    # the objective of the same labels at their mean directions, summed point by point
    cos = (data.X * directions[st_.labels]).sum(dim=1)
    weights = torch.ones(2000, dtype=torch.float64) if w is None else w
    expected = float((weights * (1.0 - cos)).sum())
    got = _moments(data, spherical=True) - _between(st_, spherical=True)
    assert got == pytest.approx(expected, rel=1e-12)


def test_spherical_lloyd_gives_up_below_an_unreachable_target() -> None:
    X = _blobs(2, 3000, 6, 12)
    data = Data(X, metric="cosine")
    free = lloyd(data, X[:24].clone(), bounds=True)
    hopeless = lloyd(data, X[:24].clone(), bounds=True, target=0.0)
    assert free.converged
    assert not free.gave_up
    assert hopeless.gave_up
    assert not hopeless.converged
    assert hopeless.n_iter < free.n_iter


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 40), steps=st.integers(1, 5))
def test_the_kept_centroid_distances_follow_every_move(seed: int, k: int, steps: int) -> None:
    """The nearest-other-centroid distances the bounds use come from centroid distances kept
    between calls, recomputed only for the centroids that moved: after calls that move a few
    centroids (or many, or none) they equal the distances computed afresh."""
    rng = np.random.default_rng(seed)
    data = Data(_blobs(seed, 300, 5, 4))
    bounded = BoundedAssignment(data)
    C = data.X[torch.as_tensor(rng.choice(300, size=k, replace=False))].clone()
    bounded(C)
    for _ in range(steps):
        C = C.clone()
        some = torch.as_tensor(rng.random(k) < rng.choice([0.0, 0.1, 0.2, 0.9]))
        C[some] += torch.as_tensor(rng.normal(size=(int(some.sum()), 5)))
        bounded(C)
        assert bounded._CC is not None
        want = torch.cdist(C.double(), C.double()).fill_diagonal_(float("inf"))
        torch.testing.assert_close(bounded._CC, want, rtol=1e-12, atol=1e-12)
