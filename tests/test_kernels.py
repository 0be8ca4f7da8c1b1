"""The fused CPU kernels against the torch passes they replace, in float64.

References: the chunked torch computations of the same sums (``RBFKMEANS_KERNELS=0``, or the
torch helpers directly), which the rest of the suite checks against independent references (the
k-copy form, scikit-learn's Lloyd, exact distances). Also: the rules for when a kernel runs, that
the sums do not depend on the number of threads, and that a forked child falls back to torch.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import rbfkmeans.costs as costs_module
from rbfkmeans import (
    RBFKMeans,
    _hartigan_loops,
    _lloyd_loops,
    _loops,
    _row_loops,
    kernels,
    search_kernels,
    splits,
)
from rbfkmeans import lloyd as lloyd_module
from rbfkmeans.assignments import get_assignment
from rbfkmeans.costs import _halves, _scatter_times, removal_costs, swap_costs
from rbfkmeans.groups import GroupStats, _kernel_sums_wide, _torch_sums, group_stats
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data, nearest, nearest_labels
from rbfkmeans.stats import cluster_stats

SOFT = ["softmax", "entmax15", "sparsemax"]


@pytest.fixture(autouse=True)
def _kernels_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fits here take the kernels whatever their size (``RBFKMEANS_KERNELS=1``; by default
    a fit of fewer than ``precompile.PAYBACK_ENTRIES`` pairs takes the torch passes)."""
    monkeypatch.setenv("RBFKMEANS_KERNELS", "1")


def _points(seed: int, n: int, d: int, dtype: torch.dtype = torch.float64,
            weighted: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(seed)
    centers = 4.0 * torch.randn(5, d, generator=gen, dtype=torch.float64)
    X = centers[torch.randint(0, 5, (n,), generator=gen)] + torch.randn(n, d, generator=gen,
                                                                      dtype=torch.float64)
    w = torch.rand(n, generator=gen, dtype=torch.float64) * 3 if weighted else None
    return X.to(dtype), None if w is None else w.to(dtype)


def _assert_same_group_stats(fused: GroupStats, plain: GroupStats, atol: float) -> None:
    for f in ("N", "S", "V", "T_crit", "axis"):
        torch.testing.assert_close(getattr(fused, f), getattr(plain, f), rtol=1e-9, atol=atol)
    for f in ("objective", "inertia", "n_soft"):
        assert getattr(fused, f) == pytest.approx(getattr(plain, f), rel=1e-10, abs=1e-9)


def _torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBFKMEANS_KERNELS", "0")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 1500),
       d=st.one_of(st.integers(1, 16), st.integers(17, 80)), k=st.integers(1, 40),
       weighted=st.booleans())
def test_hard_pass_equals_the_torch_pass(seed: int, n: int, d: int, k: int,
                                         weighted: bool) -> None:
    """Up to MAX_DIM features the kernel computes the scores; beyond, BLAS products of
    WIDE_ROWS rows inside the kernel (n up to 1500 covers full and partial row blocks)."""
    X, w = _points(seed, n, d, weighted=weighted)
    data = Data(X, w)
    C = X[torch.randperm(n, generator=torch.Generator().manual_seed(seed))[: min(k, n)]] + 0.01
    assert kernels.usable(data.X, C.shape[0], scores=True)
    assert kernels.usable(data.X, C.shape[0]) == (d <= kernels.MAX_DIM)
    fused = cluster_stats(data, C, 0.0, "hard", return_labels=True)
    os.environ["RBFKMEANS_KERNELS"] = "0"
    try:
        plain = cluster_stats(data, C, 0.0, "hard", return_labels=True)
    finally:
        del os.environ["RBFKMEANS_KERNELS"]
    assert fused.labels is not None
    assert plain.labels is not None
    assert torch.equal(fused.labels, plain.labels)
    torch.testing.assert_close(fused.N, plain.N, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused.S, plain.S, rtol=1e-11, atol=1e-9)
    assert fused.inertia == pytest.approx(plain.inertia, rel=1e-10, abs=1e-9)
    assert fused.n_soft == 0.0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 700),
       d=st.one_of(st.integers(1, 16), st.integers(17, 60)), k=st.integers(1, 45),
       kind=st.sampled_from(SOFT), weighted=st.booleans(), objective=st.booleans(),
       spread=st.sampled_from([0.02, 0.3, 5.0]))
@example(seed=1, n=500, d=30, k=40, kind="entmax15", weighted=True, objective=True,
         spread=5.0)  # every centroid a candidate: more than the insertion sort's 32
def test_soft_pass_in_the_kernel_equals_the_chunked_pass(
        seed: int, n: int, d: int, k: int, kind: str, weighted: bool, objective: bool,
        spread: float) -> None:
    """A soft pass in the group kernel (every group one centroid) gives the chunked torch pass's
    ``N``, ``S``, ``F_T``, ``J`` and soft weight (float64), at temperatures where rows have one,
    a few or every centroid as a candidate (the kernel's sorts by insertion and by merging)."""
    from rbfkmeans import stats

    X, w = _points(seed, n, d, weighted=weighted)
    data = Data(X, w)
    C = X[torch.randperm(n, generator=torch.Generator().manual_seed(seed))[: min(k, n)]] + 0.01
    T = spread * float(torch.cdist(X, C).square().mean())
    calls: list[str] = []
    real = kernels.group_pass
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RBFKMEANS_KERNELS", "1")
        mp.setattr(kernels, "group_pass", lambda *a, **kw: calls.append(a[4]) or real(*a, **kw))
        mp.setattr(stats, "_soft_in_kernel", lambda *a: True)
        fused = cluster_stats(data, C, T, kind, objective=objective)
        assert calls == [kind]
        mp.setattr(stats, "_soft_in_kernel", lambda *a: False)
        plain = cluster_stats(data, C, T, kind, objective=objective)
        assert len(calls) == 1
    scale = float(X.abs().max()) * max(1.0, float(fused.N.sum()))
    torch.testing.assert_close(fused.N, plain.N, rtol=1e-9, atol=1e-9 * n)
    torch.testing.assert_close(fused.S, plain.S, rtol=1e-9, atol=1e-9 * scale)
    for f in ("objective", "inertia", "n_soft"):
        a, b = getattr(fused, f), getattr(plain, f)
        assert (math.isnan(a) and math.isnan(b)) if not objective else \
            a == pytest.approx(b, rel=1e-9, abs=1e-9 * max(1.0, abs(b)))


def test_which_soft_passes_run_in_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Softmax up to KERNEL_SOFTMAX_MAX_K centroids; entmax-1.5 and sparsemax while a sample's
    rows have at most KERNEL_CANDIDATES candidates on average (a cold temperature, not a hot
    one); never with labels asked for, nor on the torch passes."""
    from rbfkmeans import stats

    X, _ = _points(3, 2000, 40)
    data = Data(X)
    calls: list[str] = []
    real = kernels.group_pass
    monkeypatch.setattr(kernels, "group_pass",
                        lambda *a, **kw: calls.append(a[4]) or real(*a, **kw))
    small, large = X[:stats.KERNEL_SOFTMAX_MAX_K] + 0.01, X[:100] + 0.01
    mean_sq = float(torch.cdist(X, large).square().mean())
    cold, hot = 1e-4 * mean_sq, 10.0 * mean_sq
    for C, T, kind, fused in ((small, hot, "softmax", True),
                              (large, cold, "softmax", False),
                              (large, cold, "entmax15", True),
                              (large, cold, "sparsemax", True),
                              (large, hot, "entmax15", False),
                              (large, hot, "sparsemax", False)):
        calls.clear()
        cluster_stats(data, C, T, kind)
        assert calls == ([kind] if fused else []), (C.shape[0], T, kind)
    calls.clear()
    cluster_stats(data, large, cold, "entmax15", return_labels=True)
    _torch_path(monkeypatch)
    cluster_stats(data, large, cold, "entmax15")
    assert calls == []


def test_hard_pass_without_objective_or_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = _points(1, 400, 3)
    data = Data(X)
    st = cluster_stats(data, X[:4], 0.0, "hard", objective=False)
    assert st.labels is None
    assert np.isnan(st.inertia)
    assert np.isnan(st.objective)
    _torch_path(monkeypatch)
    ref = cluster_stats(data, X[:4], 0.0, "hard", objective=False)
    torch.testing.assert_close(st.N, ref.N)
    torch.testing.assert_close(st.S, ref.S)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-3, 3), min_size=1, max_size=70),
       scale=st.sampled_from([1.0, 1e-300, 1e300]))
def test_argmin_takes_the_smallest_entry_and_the_lowest_index_on_ties(values: list[int],
                                                                      scale: float) -> None:
    """The kernels' argmin and argmax (one chain below ``ARGMIN_LANES`` entries, four beyond)
    equal numpy's: the smallest (largest) value, on ties (few distinct values: many) the lowest
    index; signed zeros count as equal."""
    g = np.array(values, dtype=np.float64) * scale
    g[g == 0] = np.where(np.arange(len(g)) % 2 == 0, 0.0, -0.0)[g == 0]
    best, arg = _row_loops._argmin(g)
    assert arg == int(np.argmin(g))
    assert best == g.min()
    top, at = _row_loops._argmax(g)  # the same chains on -g
    assert at == int(np.argmax(g))
    assert top == g.max()


def test_hard_pass_float32_matches_float64_sums() -> None:
    X, w = _points(2, 3000, 6, dtype=torch.float32, weighted=True)
    C = X[:7].clone()
    st = cluster_stats(Data(X, w), C, 0.0, "hard", return_labels=True)
    assert st.N.dtype == torch.float32
    assert st.labels is not None
    ref_d = torch.cdist(X.double(), C.double()).square()
    assert bool((ref_d.argmin(dim=1) == st.labels).float().mean() > 0.999)
    wd = w.double()
    N = torch.zeros(7, dtype=torch.float64).index_add_(0, st.labels, wd)
    S = torch.zeros(7, 6, dtype=torch.float64).index_add_(0, st.labels, X.double() * wd[:, None])
    torch.testing.assert_close(st.N.double(), N, rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(st.S.double(), S, rtol=1e-6, atol=1e-3)
    J = float((ref_d.gather(1, st.labels[:, None]).squeeze(1) * wd).sum())
    assert st.inertia == pytest.approx(J, rel=1e-5)


@pytest.mark.parametrize("name", SOFT)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.sampled_from([1, 2, 3, 8, 16, 40, 64]),
       g=st.integers(1, 40), log_T=st.floats(-3.0, 2.0), weighted=st.booleans(),
       critical=st.booleans())
# wide rows against at least ROWS_FIRST_BELOW groups: the products as C X_b^T, the rows' maxima
# and candidates found at once (rows with one candidate and with several)
@example(seed=0, d=40, g=70, log_T=-1.5, weighted=True, critical=False)
@example(seed=1, d=64, g=96, log_T=-0.5, weighted=False, critical=True)
def test_group_pass_equals_the_torch_pass(name: str, seed: int, d: int, g: int, log_T: float,
                                          weighted: bool, critical: bool) -> None:
    X, w = _points(seed, 700, d, weighted=weighted)
    data = Data(X, w)
    gen = torch.Generator().manual_seed(seed)
    C = X[torch.randperm(700, generator=gen)[:g]] + 0.1
    m = torch.randint(1, 5, (g,), generator=gen)
    T = float(10.0**log_T) * d
    split = (m > 1).nonzero().squeeze(1) if critical else None
    gains = 0 if split is None else int(split.numel())
    if kernels.usable(data.X, g, gains=gains):
        got = kernels.group_pass(X, C, m, T, name, w, objective=True, split=split,
                                 hard_tol=1e-7)
    else:  # wide data: scores by BLAS products in the kernel, gains by matrix products
        assert d > kernels.MAX_DIM
        assert kernels.usable(data.X, g, scores=True)
        got = _kernel_sums_wide(data, C, m, T, get_assignment(name), True, split, 1e-7)
        if split is None:
            got = (*got[:4], torch.zeros(0, d, d, dtype=torch.float64))
    ref = _torch_sums(data, C, m, T, get_assignment(name), True, split, 1e-7)
    for a, b in zip(got[:4], ref[:4], strict=True):
        torch.testing.assert_close(a, b.to(a.dtype), rtol=1e-9,
                                   atol=1e-9 * (1 + float(b.abs().max())))
    if split is not None:
        assert ref[4] is not None
        assert got[4].shape == ref[4].shape == (gains, d, d)
        scale = 1 + float(ref[4].abs().max()) if gains else 1.0
        torch.testing.assert_close(got[4], ref[4], rtol=1e-9, atol=1e-9 * scale)


@pytest.mark.parametrize("name", SOFT)
def test_group_stats_takes_the_kernel_with_the_same_results(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    X, w = _points(5, 2000, 3, weighted=True)
    data = Data(X, w)
    C = X[:6] * 0.5
    m = torch.tensor([1, 3, 1, 2, 1, 1])
    fused = group_stats(data, C, m, 0.7, name, critical=True)
    _torch_path(monkeypatch)
    _assert_same_group_stats(fused, group_stats(data, C, m, 0.7, name, critical=True), 1e-10)


def test_group_pass_float32_counts_soft_points_as_float32_memberships() -> None:
    X, _ = _points(3, 3000, 4, dtype=torch.float32)
    C = X[:5].clone()
    m = torch.tensor([1, 1, 2, 1, 1])
    for T in (1e-3, 0.05, 1.0):
        got = kernels.group_pass(X, C, m, T, "entmax15", None, objective=True, split=None,
                                 hard_tol=1e-7)
        ref = _torch_sums(Data(X), C, m, T, get_assignment("entmax15"), True, None, 1e-7)
        # soft weight (unit weights: a count of rows): only a row whose memberships round
        # across hard_tol differently in the two float32 computations may be counted apart
        assert abs(float(got[3][2] - ref[3][2])) <= 1
        # N (k,): each a float32 sum of 3000 float32 memberships, summed in another order on
        # each side; they agree to about 4 float32 eps (5e-7 relative), rtol 1e-5 ~ 84 eps
        torch.testing.assert_close(got[0].double(), ref[0].double(), rtol=1e-5, atol=0)


@pytest.mark.parametrize("weighted", [False, True])
def test_swap_costs_equal_the_torch_passes(weighted: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    X, w = _points(4, 2500, 5, weighted=weighted)
    data = Data(X, w)
    C = X[:8].clone()
    labels = cluster_stats(data, C, 0.0, "hard", return_labels=True).labels
    assert labels is not None
    removal, scatter = search_kernels.spread_pass(X, C, labels, w)
    V = torch.randn(8, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(torch.bmm(scatter, V[:, :, None]).squeeze(2),
                               _scatter_times(data, C, labels, V), rtol=1e-11, atol=1e-9)
    count, total = search_kernels.halves_pass(X, C, labels, V, w)
    ref_count, ref_total = _halves(data, C, labels, V)
    torch.testing.assert_close(count, ref_count, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(total, ref_total, rtol=1e-11, atol=1e-9)
    fused = swap_costs(data, C, labels, generator=torch.Generator().manual_seed(1))
    _torch_path(monkeypatch)
    torch.testing.assert_close(removal, removal_costs(data, C, labels), rtol=1e-11, atol=1e-9)
    plain = swap_costs(data, C, labels, generator=torch.Generator().manual_seed(1))
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_far_rows_and_cells_equal_the_torch_passes(weighted: bool, dtype: torch.dtype,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled far-row and cell sweeps give the torch passes' rows, gains, distances and
    sums (float32 rows: the torch pass subtracts in float32, the kernel in float64)."""
    X, w = _points(5, 3000, 3, dtype=dtype, weighted=weighted)
    X[:40] += 30.0  # a small group far out in some cluster
    X[77] = -60.0  # and one row
    data = Data(X, w)
    C = X[100:108].clone()
    labels = cluster_stats(data, C, 0.0, "hard", return_labels=True).labels
    assert labels is not None
    size = torch.zeros(8, dtype=torch.float64).index_add_(
        0, labels, torch.ones(3000, dtype=torch.float64) if w is None else w.double())
    gains, rows, weights, dist = costs_module._farthest_rows(data, C, labels, size)
    count, total = costs_module._far_cells(data, C, labels, rows, dist)
    assert (count > 1).sum() >= 2  # cells of more than one row
    _torch_path(monkeypatch)
    ref = costs_module._farthest_rows(data, C, labels, size)
    tol = {"rtol": 1e-12, "atol": 0.0} if dtype == torch.float64 else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(gains, ref[0], **tol)
    torch.testing.assert_close(rows, ref[1], rtol=0, atol=0)
    torch.testing.assert_close(weights, ref[2], rtol=0, atol=0)
    torch.testing.assert_close(dist, ref[3], **tol)
    ref_count, ref_total = costs_module._far_cells(data, C, labels, ref[1], ref[3])
    torch.testing.assert_close(count, ref_count, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(total, ref_total, rtol=1e-11, atol=1e-9)


def test_sums_do_not_depend_on_the_number_of_threads() -> None:
    X, w = _points(6, 20_000, 3, weighted=True)
    C = X[:16].clone()
    wide, _ = _points(7, 20_000, 40, dtype=torch.float32)
    m = torch.tensor([2] + [1] * 15)
    out = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out.append((*kernels.hard_pass(X, C, w, labels=None, objective=True),
                        *kernels.group_pass(X, C, m, 0.3, "entmax15", w, objective=True,
                                            split=torch.tensor([0]), hard_tol=1e-7),
                        *kernels.hard_pass(wide, wide[:9].clone(), None, labels=None,
                                           objective=True),
                        *kernels.lloyd_run(wide, wide[:9].clone(), None, 5, 0.0)[:2]))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(out[0], out[1], strict=True):
        assert torch.equal(a, b)


def test_wide_kernels_run_the_blas_on_one_thread_and_restore_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wide kernels' matrix products run on one BLAS thread each (a threaded BLAS inside the
    kernel's parallel region would oversubscribe the cores; OpenBLAS warns it may hang); the
    BLAS thread counts are restored afterwards."""
    import scipy.linalg.cython_blas  # noqa: F401  (the BLAS numba's products call)
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    seen: list[list[int]] = []
    for module, name in ((_loops, "hard_wide"), (_lloyd_loops, "lloyd"), (_loops, "group"),
                         (_hartigan_loops, "gains_wide")):
        real = getattr(module, name)

        def spy(*args: object, real: object = real) -> object:
            seen.append(blas_threads())
            return real(*args)  # type: ignore[operator]

        monkeypatch.setattr(module, name, spy)
    X, _ = _points(12, 2000, 40)
    with threadpool_limits(2, user_api="blas"):
        before = blas_threads()
        kernels.hard_pass(X, X[:8].clone(), None, labels=None, objective=True)
        kernels.lloyd_run(X, X[:8].clone(), None, 3, 0.0)
        kernels.group_pass(X, X[:3].clone(), torch.tensor([2, 1, 1]), 1.0, "entmax15", None,
                           objective=True, split=None, hard_tol=1e-7)
        labels = torch.arange(len(X)) % 4
        search_kernels.hartigan_rows(X, X[:4].double(), torch.bincount(labels).double(),
                                     labels, None, torch.arange(len(X)))
        assert blas_threads() == before
    assert len(seen) == 4
    assert all(threads == [1] * len(before) for threads in seen), seen


def test_usable_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    X = torch.randn(50, kernels.MAX_DIM, dtype=torch.float64)
    wide = torch.randn(50, kernels.MAX_DIM + 1, dtype=torch.float64)
    assert kernels.usable(X, 8)
    assert kernels.usable(X, 8, gains=3)
    assert not kernels.usable(wide, 8)  # wide data: only passes with BLAS products inside
    assert kernels.usable(wide, 8, scores=True)
    assert not kernels.usable(wide, 8, gains=2, scores=True)  # d x d gains: few features only
    assert not kernels.usable(X.requires_grad_(), 8)
    assert not kernels.usable(X.detach().to(torch.int64), 8)
    # partial sums too large for two blocks; large ones are cut into fewer blocks
    assert not kernels.usable(torch.randn(50, 2), 1 << 22)
    assert kernels.usable(torch.randn(50, 2), 1 << 20)
    assert kernels.blocks(10**6, 1 << 20) == kernels.MAX_PARTIAL_ENTRIES // (1 << 20) == 8
    assert kernels.blocks(10**6) == kernels.MAX_BLOCKS
    assert kernels.blocks(1000) == 2
    monkeypatch.setenv("RBFKMEANS_KERNELS", "0")
    assert not kernels.usable(torch.randn(50, 2), 3)


def test_forked_child_takes_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process whose kernel thread pool was started by its parent (the state a fork leaves)
    does not launch kernels, and the passes still run."""
    kernels.hard_pass(torch.randn(10, 2), torch.randn(2, 2), None, labels=None, objective=True)
    assert kernels.enabled()
    monkeypatch.setattr(kernels, "_pool_pid", os.getpid() + 1)
    assert not kernels.enabled()
    X, _ = _points(7, 300, 3)
    st = cluster_stats(Data(X), X[:3], 0.0, "hard", return_labels=True)
    monkeypatch.setattr(kernels, "_pool_pid", os.getpid())
    ref = cluster_stats(Data(X), X[:3], 0.0, "hard", return_labels=True)
    assert torch.equal(st.labels, ref.labels)
    torch.testing.assert_close(st.S, ref.S)


def test_fit_with_and_without_kernels_reaches_the_same_minimum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = _points(8, 1500, 3)
    fused = RBFKMeans(6, random_state=0).fit(X.numpy())
    _torch_path(monkeypatch)
    plain = RBFKMeans(6, random_state=0).fit(X.numpy())
    assert fused.inertia_ == pytest.approx(plain.inertia_, rel=1e-9)
    np.testing.assert_array_equal(fused.labels_, plain.labels_)
    np.testing.assert_allclose(fused.cluster_centers_, plain.cluster_centers_, rtol=1e-9,
                               atol=1e-9)


@pytest.mark.parametrize("tol", [0.0, 1e-3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("d", [4, 40])
def test_compiled_lloyd_equals_the_python_loop(tol: float, weighted: bool, d: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """On few features the compiled loop's passes are bounded, on wide data BLAS products."""
    X, w = _points(9, 3000, d, weighted=weighted)
    data = Data(X, w)
    for max_iter in (1, 3, 300):
        C0 = X[:9].clone()
        fused = lloyd(data, C0, max_iter=max_iter, tol=tol)
        with monkeypatch.context() as mp:
            _torch_path(mp)
            plain = lloyd(data, C0, max_iter=max_iter, tol=tol)
        assert (fused.n_iter, fused.converged) == (plain.n_iter, plain.converged)
        assert torch.equal(fused.labels, plain.labels)
        torch.testing.assert_close(fused.C, plain.C, rtol=1e-12, atol=1e-12)
        assert fused.inertia == pytest.approx(plain.inertia, rel=1e-12)


def _give_up_iteration(X: np.ndarray, w: np.ndarray, C0: np.ndarray, target: float,
                       max_iter: int, spherical: bool = False) -> tuple[int, bool]:
    """Plain float64 Lloyd iterations with the give-up rule of ``lloyd(target=...)`` written
    from its definition: ``J_t`` the weighted squared distances of iteration ``t``'s points to
    their clusters' means (``spherical``: unit rows ``X``, each centroid the mean direction and
    ``J_t = sum_i w_i (1 - x_i . c_{l_i})``). Returns the iterations run and whether it gave
    up."""
    C, prev, J_prev = C0.copy(), None, math.inf
    for it in range(1, max_iter + 1):
        lab = ((X[:, None, :] - C[None]) ** 2).sum(axis=2).argmin(axis=1)
        C = np.stack([np.average(X[lab == j], axis=0, weights=w[lab == j])
                      for j in range(len(C))])
        if spherical:
            C /= np.linalg.norm(C, axis=1, keepdims=True)
        if prev is not None and np.array_equal(lab, prev):
            return it, False
        J = float((w * (1.0 - (X * C[lab]).sum(axis=1))).sum()) if spherical \
            else float((w * ((X - C[lab]) ** 2).sum(axis=1)).sum())
        excess, pace = J - target, lloyd_module.STALL * (J_prev - J)
        if it >= 3 and excess > pace:
            assert excess - pace > 1e-6 * J  # far from the boundary: rounding cannot flip it
            return it, True
        assert it < 3 or pace - excess > 1e-6 * J
        prev, J_prev = lab, J
    return max_iter, False


@pytest.mark.parametrize("d", [3, 40, kernels.MAX_DIM + 40])
@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_lloyd_gives_up_on_its_target_as_its_rule_says(d: int, metric: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """From the third iteration a run stops, unconverged, once ``J_t - target`` exceeds
    ``STALL (J_{t-1} - J_t)``: the compiled loop and the Python loop stop at the iteration the
    rule written from its definition gives, on a target it cannot reach and on one it reaches;
    without a target the run is the one it always was. The same for spherical k-means, whose
    ``J_t`` is the spherical objective at the mean directions."""
    X, w = _points(21, 1500, d, weighted=True)
    assert w is not None
    data = Data(X, w, metric=metric)
    C0 = data.X[:12].clone()
    free = lloyd(data, C0)
    calls: list[bool] = []
    original = kernels.lloyd_run

    def spy(*args: Any, **kw: Any) -> Any:
        calls.append(True)
        return original(*args, **kw)

    for target, gives_up in ((0.97 * free.inertia, True), (1.02 * free.inertia, False)):
        want = _give_up_iteration(data.X.numpy(), w.numpy(), C0.numpy(), target, 300,
                                  spherical=metric == "cosine")
        assert want[1] is gives_up
        for torch_path in (False, True):
            calls.clear()
            with monkeypatch.context() as mp:
                mp.setattr(kernels, "lloyd_run", spy)
                if torch_path:
                    _torch_path(mp)
                run = lloyd(data, C0, target=target)
            assert calls == ([] if torch_path else [True])
            assert (run.n_iter, run.gave_up) == want
            assert run.converged is not gives_up
            if gives_up:
                assert run.inertia > target
                assert run.n_iter < free.n_iter
            else:
                assert run.inertia == pytest.approx(free.inertia, rel=1e-12)
    with monkeypatch.context() as mp:
        mp.setattr(lloyd_module, "STALL", 1e300)  # a run that never stalls ends as without
        run = lloyd(data, C0, target=0.5 * free.inertia)
    assert (run.n_iter, run.gave_up, run.inertia) == (free.n_iter, False, free.inertia)


def _lloyd_on_full_passes(X: np.ndarray, C0: np.ndarray, w: np.ndarray, max_iter: int,
                          nb: int) -> tuple[np.ndarray, np.ndarray, bool, int, int]:
    """``_lloyd_loops.lloyd`` with every pass the unbounded :func:`_loops.hard` (the reference)."""
    C, lab, prev = C0.copy(), np.empty(len(X), np.int64), np.empty(0, np.int64)
    iters, status = max_iter, 0
    for it in range(1, max_iter + 1):
        N, S, _ = _loops.hard(X, C, w, False, lab, nb)
        if (N == 0).any():
            return C, prev, np.nan, it - 1, 2
        C = (S / N[:, None]).astype(X.dtype)
        if it > 1 and np.array_equal(lab, prev):
            iters, status = it, 1
            break
        prev = lab.copy()
    J = _loops.hard(X, C, w, True, lab, nb)[2]  # the labels and J at the centroids reached
    return C, lab, J, iters, status


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3000), d=st.integers(1, 16),
       k=st.integers(1, 40), grid=st.booleans(), weighted=st.booleans(),
       single=st.booleans())
@example(seed=0, n=1859, d=1, k=7, grid=False, weighted=False, single=True)  # float32 squares
def test_bounded_lloyd_passes_equal_full_passes_bit_for_bit(
        seed: int, n: int, d: int, k: int, grid: bool, weighted: bool, single: bool) -> None:
    """The compiled Lloyd skips rows whose label its bounds prove unchanged; labels, centroids
    and iterations equal those of full passes exactly, also with exact ties (integer points,
    duplicated centroids) and in float32."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.1, 10.0) + rng.uniform(-100.0, 100.0)
    if grid:  # many points equidistant from two centroids
        X = np.round(X / 10.0)
    dt = np.float32 if single else np.float64
    X = np.ascontiguousarray(X.astype(dt))
    C0 = X[rng.integers(0, n, size=k)].copy()  # duplicates when k > distinct rows
    w = (rng.uniform(0.0, 3.0, size=n) if weighted else np.empty(0)).astype(dt)
    nb = kernels.blocks(n)
    none_i, none_f = np.empty(0, np.int64), np.empty(0)
    got = _lloyd_loops.lloyd(X, C0, w, 100, 0.0, nb, False, np.inf, 0.0, 0.0, 0, none_i, none_f,
                             none_f, none_i, none_i, 2.0**-53, False,
                             np.empty((0, 0), np.float32), none_f, np.empty((0, 0), dt))[:5]
    want = _lloyd_on_full_passes(X, C0, w, 100, nb)
    assert got[3:] == want[3:]
    np.testing.assert_array_equal(got[0], want[0])
    if want[4] != 2:  # the final labels and J too
        np.testing.assert_array_equal(got[1], want[1])
        assert got[2] == want[2]
    elif want[3]:
        np.testing.assert_array_equal(got[1], want[1])


def _wide_lloyd(X: np.ndarray, C0: np.ndarray, w: np.ndarray, grouped: bool,
                max_iter: int = 100) -> tuple[np.ndarray, np.ndarray, float, int, int]:
    """``_lloyd_loops.lloyd`` on wide data: bounded passes with the groups of
    :func:`kernels.centroid_groups` (``grouped``), or full passes of ``hard_wide``."""
    n, k = len(X), len(C0)
    none_i, none_f = np.empty(0, np.int64), np.empty(0)
    group_of = kernels.centroid_groups(torch.from_numpy(C0), kernels.bound_groups(n, k)).numpy() \
        if grouped else none_i
    with kernels.launch(blas=True):
        return _lloyd_loops.lloyd(X, C0, w, max_iter, 0.0, kernels.blocks(n), True, np.inf,
                                  0.0, 0.0, 0, none_i, none_f, none_f, none_i, group_of,
                                  float(np.finfo(X.dtype).eps) / 2, False,
                                  np.empty((0, 0), np.float32), none_f,
                                  np.empty((0, 0), X.dtype))[:5]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3000), d=st.integers(17, 80),
       k=st.integers(1, 100), weighted=st.booleans(), single=st.booleans(),
       spread=st.sampled_from([0.3, 3.0, 30.0]))
# the products of both orientations (_loops.ROWS_FIRST_BELOW), groups of several centroids
@example(seed=3, n=2500, d=40, k=90, weighted=False, single=True, spread=3.0)
@example(seed=4, n=2500, d=40, k=40, weighted=True, single=True, spread=0.3)
# k d at least _wide_loops.LOCAL_MIN_WORK: rows in doubt scored against their groups in doubt
@example(seed=5, n=3000, d=64, k=512, weighted=False, single=True, spread=3.0)
def test_wide_bounded_lloyd_equals_full_passes(seed: int, n: int, d: int, k: int,
                                               weighted: bool, single: bool,
                                               spread: float) -> None:
    """Wide data: the group bounds (Elkan's up to 16 centroids, Yinyang's groups beyond) skip
    rows whose label provably stays; the scored rows take BLAS products of the gathered rows,
    which round differently from the full pass's products of whole blocks (in float32 by
    ~1e-7 of ||x||^2), and both passes settle a tie within that rounding by the same exact
    rule. In float64 and in float32, labels, iterations and stopping status equal those of
    full passes and the centroids (from sums kept by the rows that move) do to rounding."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(1, k // 2), d)) * spread
    X = centers[rng.integers(0, len(centers), size=n)] + rng.normal(size=(n, d))
    dt = np.float32 if single else np.float64
    X = np.ascontiguousarray(X.astype(dt))
    C0 = X[rng.integers(0, n, size=k)].copy()
    w = (rng.uniform(0.1, 3.0, size=n) if weighted else np.empty(0)).astype(dt)
    got, want = _wide_lloyd(X, C0, w, True), _wide_lloyd(X, C0, w, False)
    # the bounded run's J is sum w ||x - c_l||^2 from float64 differences at its labels; the
    # full pass's comes from the expansion ||x||^2 + ||c||^2 - 2 x.c in X's dtype products
    Xd, ww = X.astype(np.float64), (w.astype(np.float64) if weighted else np.ones(n))
    if got[4] != 2:
        direct = float((ww * ((Xd - np.asarray(got[0], np.float64)[got[1]]) ** 2).sum(1)).sum())
        assert got[2] == pytest.approx(direct, rel=1e-12, abs=1e-300)
    expansion = 64 * float(np.finfo(dt).eps) * float(
        (ww * ((Xd**2).sum(1) + (np.asarray(C0, np.float64) ** 2).sum(1).max())).sum())
    assert got[3:] == want[3:]
    np.testing.assert_array_equal(got[1], want[1])
    if single:  # the centroids are float32 roundings of sums equal to float64's rounding
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6 * spread)
    else:
        np.testing.assert_allclose(got[0], want[0], rtol=1e-11, atol=1e-9)
    if want[4] != 2:
        assert got[2] == pytest.approx(want[2], rel=1e-12, abs=expansion)


def test_wide_bound_groups() -> None:
    """Elkan's bounds (a group per centroid) up to 16 centroids, ``k / 8`` groups of nearby
    centroids beyond, within the memory cap; every group non-empty and made of near centroids:
    each centroid is nearer its own group's mean than any other group's."""
    assert kernels.bound_groups(1000, 10) == 10
    assert kernels.bound_groups(1000, 256) == 32
    assert kernels.bound_groups(10**9, 1024) == 1
    rng = np.random.default_rng(0)
    C = torch.from_numpy(rng.normal(size=(200, 12)) + 8.0 * rng.integers(0, 5, size=(200, 1)))
    g = kernels.centroid_groups(C, 25)
    assert g.min() == 0
    assert torch.equal(torch.unique(g), torch.arange(int(g.max()) + 1))
    means = torch.stack([C[g == j].mean(0) for j in range(int(g.max()) + 1)])
    assert torch.equal(torch.cdist(C, means).argmin(1), g)
    assert torch.equal(kernels.centroid_groups(C[:7], 10), torch.arange(7))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 2500), d=st.integers(1, 16),
       k=st.integers(2, 30),
       move=st.sampled_from(["swap", "delete", "grow", "shift", "none"]),
       grid=st.booleans(), weighted=st.booleans(), wide=st.booleans(),
       metric=st.sampled_from(["sqeuclidean", "cosine"]))
@example(seed=0, n=300, d=3, k=6, move="shift", grid=False, weighted=False, wide=False,
         metric="cosine")
@example(seed=21, n=300, d=3, k=6, move="shift", grid=True, weighted=True, wide=True,
         metric="cosine")
def test_lloyd_from_a_parents_bounds_equals_a_cold_start(seed: int, n: int, d: int, k: int,
                                                         move: str, grid: bool,
                                                         weighted: bool, wide: bool,
                                                         metric: str) -> None:
    """A run started from a finished run's labels and bounds (``warm``), its centroids changed
    as the swap search changes them (two replaced, some deleted, some added, none) or as
    Hartigan's moves move the means (some shifted, each continuing its own), takes
    exactly the iterations, labels, centroids and ``J`` of a cold start from the same centroids,
    also with exact ties (integer points). On wide data (beyond the compiled kernels' few
    features) the warm run keeps the parent's groups of centroids, the moved ones joining the
    group of their nearest parent centroid, and its group bounds (float64 data: the scores
    of the rows in doubt round as in the cold run's products). The same for spherical
    k-means (cosine data: the unit rows' bounds, the kept centroids projected again)."""
    if wide:
        d += kernels.MAX_DIM
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.1, 10.0) + rng.uniform(-100.0, 100.0)
    if grid:
        X = np.round(X / 10.0)
        X[(X == 0.0).all(axis=1)] = 1.0  # no zero rows (they have no direction)
    Xt = torch.as_tensor(X)
    w = torch.as_tensor(rng.uniform(0.0, 3.0, size=n)) if weighted else None
    data = Data(Xt, w, metric=metric)
    parent = lloyd(data, Xt[torch.as_tensor(rng.choice(n, size=min(k, n), replace=False))]
                   .clone(), tol=1e-3)
    assume(parent.bounds is not None)  # a run that relocated an empty cluster has none
    assert parent.bounds is not None
    assert len(parent.bounds) == (4 if wide else 2)  # wide: with the groups and ||x_i||^2
    k = parent.C.shape[0]
    rows = torch.arange(k)
    C = parent.C.clone()
    if move == "swap":
        a, b = rng.choice(k, size=2, replace=False).tolist()
        C[a], C[b] = Xt[int(rng.integers(n))], Xt[int(rng.integers(n))]
        rows[[a, b]] = -1
    elif move == "delete":
        keep = torch.as_tensor(np.sort(rng.choice(k, size=max(1, k - 3), replace=False)))
        C, rows = C[keep], keep
    elif move == "grow":
        C = torch.cat([C, Xt[torch.as_tensor(rng.integers(0, n, size=3))]])
        rows = torch.cat([rows, torch.full((3,), -1)])
    elif move == "shift":  # some means moved, by up to a tenth of the data's spread
        some = torch.as_tensor(rng.random(k) < 0.5)
        C[some] += torch.as_tensor(rng.normal(size=(int(some.sum()), C.shape[1]))) \
            * float(data.X.std()) * rng.uniform(0.0, 0.1)
    for max_iter in (1, 2, 300):  # after one pass too: a fixed point can hide a wrong pass
        warm = lloyd(data, C, tol=1e-6, max_iter=max_iter, warm=(parent, rows))
        cold = lloyd(data, C, tol=1e-6, max_iter=max_iter)
        assert (warm.n_iter, warm.converged, warm.inertia) == (cold.n_iter, cold.converged,
                                                                cold.inertia)
        assert torch.equal(warm.labels, cold.labels)
        assert torch.equal(warm.C, cold.C)


def test_lloyd_warm_start_checks_its_rows() -> None:
    """``warm`` rows must name distinct parent centroids (or -1), one per centroid."""
    X, _ = _points(3, 500, 3)
    data = Data(X)
    parent = lloyd(data, X[:6].clone())
    with pytest.raises(ValueError, match=r"warm rows must be distinct rows of the parent's 6"):
        lloyd(data, parent.C, warm=(parent, torch.tensor([0, 1, 2, 3, 4, 6])))
    with pytest.raises(ValueError, match=r"warm rows must be distinct rows of the parent's 6"):
        lloyd(data, parent.C, warm=(parent, torch.tensor([0, 0, 1, 2, 3, 4])))
    with pytest.raises(ValueError, match=r"warm rows must be a tensor of shape \(6,\)"):
        lloyd(data, parent.C, warm=(parent, torch.arange(5)))


def test_a_wide_run_past_the_kept_bounds_cap_keeps_none(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A wide compiled run whose group bounds exceed ``KEPT_LOWER_BOUNDS`` (as 262,144 rows of
    more than 128 features against 1,024 centroids would) keeps no bounds, so runs that would
    start from it start cold and Hartigan's moves score every row: a fit with the cap that low
    ends exactly where one that keeps them does. (Its result used to keep the group run's upper
    bounds as if they were a narrow run's, and the swap search's warm start from it failed.)"""
    from sklearn.datasets import make_blobs

    from rbfkmeans.lloyd import distance_bounds

    X, _ = make_blobs(3000, kernels.MAX_DIM + 4, centers=12, random_state=0)
    data = Data(torch.as_tensor(X))
    C0 = data.X[:8].clone()
    kept = lloyd(data, C0)
    fitted = RBFKMeans(8, random_state=0).fit(X)
    assert kept.bounds is not None
    assert len(kept.bounds) == 4  # the compiled wide run's group bounds
    monkeypatch.setattr(kernels, "KEPT_LOWER_BOUNDS", 1)
    capped = lloyd(data, C0)
    assert capped.bounds is None
    assert distance_bounds(capped) is None
    assert (capped.n_iter, capped.inertia) == (kept.n_iter, kept.inertia)
    assert torch.equal(capped.labels, kept.labels)
    cold = RBFKMeans(8, random_state=0).fit(X)
    assert cold.inertia_ == fitted.inertia_
    np.testing.assert_array_equal(cold.labels_, fitted.labels_)
    np.testing.assert_array_equal(cold.cluster_centers_, fitted.cluster_centers_)


def test_float32_rows_are_squared_in_float64() -> None:
    """The kernels widen float32 entries to float64 before multiplying them (numba's ``float()``
    keeps float32): on points far from the origin and close to their centroid, ``J`` from the
    scores ``||c||^2 - 2 x.c + ||x||^2`` equals the float64 distances to 1e-9, where float32
    squares are off by 1e-3 relative."""
    rng = np.random.default_rng(4)
    X = (rng.normal(size=(500, 2)) * 0.3 - 38.0).astype(np.float32)
    C = X[:3].copy()
    labels = np.empty(500, np.int64)
    got = _loops.hard(X, C, np.empty(0, np.float32), True, labels, 1)[2]
    Xd, Cd = X.astype(np.float64), C.astype(np.float64)
    want = ((Xd[:, None, :] - Cd[None]) ** 2).sum(axis=2).min(axis=1).sum()
    assert got == pytest.approx(want, rel=1e-9)


def test_compiled_lloyd_hands_an_empty_cluster_to_the_relocation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A start with a centroid far from every point empties it in the first pass: the
    compiled loop stops there and the Python loop relocates it as scikit-learn does."""
    X, _ = _points(10, 2000, 3)
    data = Data(X)
    C0 = torch.cat([X[:5], torch.full((1, 3), 1e3, dtype=torch.float64)])
    run = kernels.lloyd_run(X, C0, None, 300, 0.0)
    assert (run.n_iter, run.finished, run.converged) == (0, False, False)
    assert run.labels is None
    torch.testing.assert_close(run.C, C0)
    fused = lloyd(data, C0)
    _torch_path(monkeypatch)
    plain = lloyd(data, C0)
    assert (fused.n_iter, fused.converged) == (plain.n_iter, plain.converged)
    assert torch.equal(fused.labels, plain.labels)
    torch.testing.assert_close(fused.C, plain.C, rtol=1e-12, atol=1e-12)
    assert bool((fused.C.abs() < 1e2).all())  # the far centroid was moved onto the data


def _python_fixed_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """``splits._fixed_point`` without its compiled loop (its passes still the kernels' on few
    features, the torch passes on wide data)."""
    real = kernels.usable

    def usable(X: torch.Tensor, width: int, *, gains: int = 0, scores: bool = False) -> bool:
        return False if scores else real(X, width, gains=gains)

    monkeypatch.setattr(kernels, "usable", usable)


@pytest.mark.parametrize("name", SOFT)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("d", [3, 40])
def test_compiled_fixed_point_equals_the_python_loop(name: str, weighted: bool, d: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQUAREM cycles in compiled code take the same steps as the Python loop: the same
    evaluations of the map and the same centroids up to rounding, for converged and capped
    runs, with and without extrapolations kept."""
    X, w = _points(11, 2500, d, weighted=weighted)
    data = Data(X, w)
    entry = get_assignment(name)
    gen = torch.Generator().manual_seed(3)
    for g, T, max_iter, tol in ((1, 3.0 * d, 15, 0.0), (4, 0.5 * d, 15, 1e-12),
                                (6, 0.2 * d, 4, 0.0), (9, 0.05 * d, 40, 1e-9)):
        C = X[torch.randperm(2500, generator=gen)[:g]].clone()
        m = torch.randint(1, 4, (g,), generator=gen)
        fused, it = splits._fixed_point(data, C, m, T, entry, max_iter, tol)
        with monkeypatch.context() as mp:
            _python_fixed_point(mp)
            plain, it_plain = splits._fixed_point(data, C, m, T, entry, max_iter, tol)
        assert it == it_plain
        torch.testing.assert_close(fused, plain, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", SOFT)
def test_every_fixed_point_of_a_fit_takes_the_python_loops_steps(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Along a weighted annealed fit (where wild extrapolations empty a group and are
    rejected) each compiled fixed point ends where the Python loop does, after as many
    evaluations."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=500, n_features=3, centers=6, cluster_std=1.2, random_state=1)
    calls: list[tuple[object, ...]] = []
    real = splits._fixed_point

    def record(*args: object) -> tuple[torch.Tensor, int]:
        out = real(*args)  # type: ignore[arg-type]
        calls.append((args, out))
        return out

    monkeypatch.setattr(splits, "_fixed_point", record)
    RBFKMeans(6, assignment=name, random_state=0).fit(X, sample_weight=np.linspace(0.2, 3, 500))
    monkeypatch.undo()
    assert len(calls) > 5
    _python_fixed_point(monkeypatch)
    for args, (C, it) in calls:
        C_plain, it_plain = real(*args)  # type: ignore[arg-type]
        assert it == it_plain
        torch.testing.assert_close(C, C_plain, rtol=0.0, atol=1e-12)


def test_compiled_fixed_point_hands_an_empty_group_to_the_relocation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group far from every point gets no weight under entmax-1.5: the compiled loop stops
    before using it and the Python loop relocates it onto the data, as without the loop."""
    X, _ = _points(12, 1500, 3)
    data = Data(X)
    C = torch.cat([X[:3], torch.full((1, 3), 1e3, dtype=torch.float64)])
    m = torch.tensor([2, 1, 1, 2])
    C_out, it, done = kernels.group_fixed_point(X, C, m, 1.0, "entmax15", None, 15, 0.0)
    assert (it, done) == (0, False)
    torch.testing.assert_close(C_out, C)
    entry = get_assignment("entmax15")
    fused, it = splits._fixed_point(data, C, m, 1.0, entry, 15, 0.0)
    _python_fixed_point(monkeypatch)
    plain, it_plain = splits._fixed_point(data, C, m, 1.0, entry, 15, 0.0)
    assert it == it_plain
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    assert bool((fused.abs() < 1e2).all())


@pytest.mark.parametrize("name", SOFT)
@pytest.mark.parametrize("chunk_size", [None, 150])
@pytest.mark.parametrize("d", [40, 120])
def test_wide_critical_pass_forms_the_gains_by_matrix_products(
        name: str, chunk_size: int | None, d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide data: the gains by matrix products over each group's support (d = 40), or from
    d = MATRIX_FREE_MIN_DIM on never formed, their top eigenpairs by Lanczos on products with
    the support's rows (d = 120): the critical temperatures and axes of the torch pass's dense
    gain matrices, in float64."""
    from rbfkmeans import groups as groups_module

    assert (d >= groups_module.MATRIX_FREE_MIN_DIM) == (d == 120)
    X, w = _points(11, 700, d, weighted=True)
    data = Data(X, w, chunk_size=chunk_size)
    C = X[:5] * 0.9
    m = torch.tensor([3, 1, 2, 1, 2])
    assert not kernels.usable(data.X, 5, gains=3)
    assert kernels.usable(data.X, 5, scores=True)
    fused = group_stats(data, C, m, 5.0, name, critical=True)
    _torch_path(monkeypatch)
    _assert_same_group_stats(fused, group_stats(data, C, m, 5.0, name, critical=True), 1e-9)


def test_usable_names_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"X must be a torch\.Tensor; got ndarray"):
        kernels.usable(np.zeros((3, 2)), 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="width"):
        kernels.usable(torch.zeros(3, 2), 0)
    with pytest.raises(ValueError, match="gains"):
        kernels.usable(torch.zeros(3, 2), 2, gains=-1)


def test_kernels_leave_torchs_thread_count_alone() -> None:
    """The first parallel region of numba's OpenMP pool resets the thread count of the OpenMP
    runtime torch shares; the kernels put torch's count back (checked in a fresh process, where
    the pool starts)."""
    code = (
        "import torch\n"
        "from rbfkmeans import kernels\n"
        "torch.set_num_threads(1)\n"
        "X = torch.randn(500, 3, dtype=torch.float64)\n"
        "kernels.hard_pass(X, X[:4].clone(), None, labels=None, objective=True)\n"
        "print(torch.get_num_threads())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.split()[-1] == "1"


@pytest.mark.parametrize("d", [8, 40])
def test_predictions_label_rows_as_the_fit_passes_do(d: int) -> None:
    """Midpoints of two float32 centroids are nearest to both up to rounding; the torch product
    and the kernel's may break such ties differently (on few features by construction: the
    kernel's scores are float64), so predictions take the kernel's pass: the labels a fit's hard
    pass gives."""
    rng = np.random.default_rng(d)
    C = rng.normal(size=(16, d)).astype(np.float32)
    a = rng.integers(0, 16, size=20_000)
    b = (a + 1 + rng.integers(0, 15, size=a.size)) % 16
    X = torch.from_numpy((C[a] + C[b]) / 2)
    data, Ct = Data(X), torch.from_numpy(C)
    fit_pass = cluster_stats(data, Ct, 0.0, "hard", return_labels=True).labels
    assert fit_pass is not None
    assert torch.equal(nearest_labels(data, Ct), fit_pass)
    if d <= kernels.MAX_DIM:  # float64 scores in the kernel, float32 in torch: the ties differ
        assert not torch.equal(nearest(data, Ct).labels, fit_pass)
    est = RBFKMeans(16, assignment="hard", max_iter=3, random_state=0).fit(X.numpy())
    np.testing.assert_array_equal(est.predict(X.numpy()), est.labels_)


@pytest.mark.parametrize("weighted", [False, True])
def test_wide_swap_costs_equal_the_torch_passes(weighted: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide data: each cluster's scatter matrix times a vector and the halves' sums in compiled
    sweeps (never a d x d matrix), equal to the torch passes and to the dense scatter product."""
    X, w = _points(5, 2000, 60, weighted=weighted)
    data = Data(X, w)
    C = X[:7].clone()
    labels = cluster_stats(data, C, 0.0, "hard", return_labels=True).labels
    assert labels is not None
    V = torch.randn(7, 60, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    U = search_kernels.scatter_pass(X, C, labels, V, w)
    dense = torch.stack([
        ((X[labels == a] - C[a]).T * (1.0 if w is None else w[labels == a])) @ (
            (X[labels == a] - C[a]) @ V[a]) for a in range(7)])
    torch.testing.assert_close(U, dense, rtol=1e-10, atol=1e-8)
    fused = swap_costs(data, C, labels, generator=torch.Generator().manual_seed(1))
    _torch_path(monkeypatch)
    torch.testing.assert_close(U, _scatter_times(data, C, labels, V), rtol=1e-11, atol=1e-9)
    plain = swap_costs(data, C, labels, generator=torch.Generator().manual_seed(1))
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("d", "k", "weighted"), [(3, 5, False), (3, 7, True), (40, 12, True),
                                                  (40, 30, False)])
def test_spherical_lloyd_run_equals_the_torch_iterations(monkeypatch: pytest.MonkeyPatch,
                                                         d: int, k: int, weighted: bool) -> None:
    """Spherical k-means in compiled code (cosine data): the run of the torch passes
    (same iterations, labels and centroids up to rounding), ending at a fixed point of the
    spherical update ``c_j = m_j / ||m_j||`` (float64 reference) with ``J = sum_i w_i (1 -
    cos)`` summed from float64 products."""
    X, w = _points(d, 4000, d, dtype=torch.float32, weighted=weighted)
    data = Data(X, w, metric="cosine")
    C0 = data.X[:k].clone()
    calls: list[bool] = []
    original = kernels.lloyd_run

    def spy(*args: Any, **kw: Any) -> Any:
        calls.append(bool(kw.get("spherical")))
        return original(*args, **kw)

    monkeypatch.setattr(kernels, "lloyd_run", spy)
    fast = lloyd(data, C0, max_iter=200, tol=0.0)
    assert calls == [True]
    monkeypatch.setenv("RBFKMEANS_KERNELS", "0")
    plain = lloyd(data, C0, max_iter=200, tol=0.0, bounds=False)
    assert fast.converged
    assert plain.converged
    assert fast.n_iter == plain.n_iter
    assert torch.equal(fast.labels, plain.labels)
    torch.testing.assert_close(fast.C, plain.C, rtol=0, atol=1e-6)
    assert fast.inertia == pytest.approx(plain.inertia, rel=1e-6)
    U = data.X.double().numpy()
    wn = np.ones(len(U)) if w is None else w.double().numpy()
    lab = fast.labels.numpy()
    for j in range(k):
        m = (wn[lab == j, None] * U[lab == j]).sum(0)
        np.testing.assert_allclose(fast.C[j].double().numpy(), m / np.linalg.norm(m), atol=1e-5)
    cos = (U * fast.C.double().numpy()[lab]).sum(1)
    assert fast.inertia == pytest.approx(float(wn @ (1 - cos)), rel=1e-10)  # float64 products


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 800), k=st.integers(1, 70),
       copies=st.integers(1, 3), dtype=st.sampled_from([torch.float32, torch.float64]))
@example(seed=0, n=513, k=64, copies=2, dtype=torch.float32)  # two full blocks and one row
def test_the_wide_hard_pass_breaks_exact_ties_to_the_lowest_index(
        seed: int, n: int, k: int, copies: int, dtype: torch.dtype) -> None:
    """:func:`_loops.hard_wide` finds the nearest centroids of a block of rows at once, centroid
    by centroid; with integer rows and centroids repeated ``copies`` times (every score an exact
    tie among the copies, and many rows equidistant from distinct centroids) its labels are the
    first index of the smallest score, as numpy's argmin of the same float64 scores, and its
    ``J`` the exact one."""
    rng = np.random.default_rng(seed)
    d = kernels.MAX_DIM + 4
    Xn = rng.integers(-3, 4, size=(n, d)).astype(np.float64)
    base = rng.integers(-3, 4, size=(k, d)).astype(np.float64)
    Cn = np.repeat(base, copies, axis=0)  # (k copies, d): rows j and j+1.. equal
    scores = (Cn * Cn).sum(1)[None, :] - 2.0 * Xn @ Cn.T  # exact in float64
    X, C = torch.from_numpy(Xn).to(dtype), torch.from_numpy(Cn).to(dtype)
    data = Data(X)
    assert kernels.usable(data.X, C.shape[0], scores=True)
    st_ = cluster_stats(data, C, 0.0, "hard", return_labels=True)
    assert st_.labels is not None
    assert np.array_equal(st_.labels.numpy(), scores.argmin(axis=1))
    J = float(((Xn[:, None, :] - Cn[None]) ** 2).sum(2).min(1).sum())
    assert st_.inertia == pytest.approx(J, rel=1e-12, abs=1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), pairs=st.integers(1, 40), n=st.integers(1, 700),
       offset=st.sampled_from([0, 257]))
def test_the_wide_hard_pass_labels_rows_in_doubt_by_their_exact_nearest_centroid(
        seed: int, pairs: int, n: int, offset: int) -> None:
    """Integer float32 rows and centroids whose products need more than float32's 24 bits: the
    BLAS product rounds each score by up to some hundred units, while the scores of a centroid
    and its neighbour ``c + delta`` (``delta`` a few unit steps) differ by a few units for many
    rows. The wide hard pass's labels are the exact nearest centroid of every row (Python's
    integers, ties to the lowest index), wherever the row sits in its block of the product
    (``offset`` rows before it shift the blocks) and whether the rows' norms come from the
    caller or not, and its ``J`` the exact one to float32's rounding of the products."""
    rng = np.random.default_rng(seed)
    d = kernels.MAX_DIM + 4
    base = rng.integers(-4096, 4097, size=(pairs, d))
    delta = np.zeros((pairs, d), dtype=np.int64)
    for p in range(pairs):
        delta[p, rng.choice(d, 2, replace=False)] = rng.choice([-1, 1], size=2)
    Cn = np.empty((2 * pairs, d), dtype=np.int64)
    Cn[0::2], Cn[1::2] = base, base + delta
    rows = Cn[rng.integers(0, 2 * pairs, size=n)] + rng.integers(-40, 41, size=(n, d))
    Xn = np.concatenate([rng.integers(-4096, 4097, size=(offset, d)), rows])
    exact = (Cn * Cn).sum(1)[None, :] - 2 * Xn @ Cn.T  # int64: exact
    want = exact.argmin(axis=1)
    X = torch.from_numpy(Xn.astype(np.float32))
    C = torch.from_numpy(Cn.astype(np.float32))
    assert torch.equal(X.double(), torch.from_numpy(Xn).double())  # the integers are exact
    assert kernels.usable(X, C.shape[0], scores=True)
    labels = torch.empty(X.shape[0], dtype=torch.int64)
    _, _, J = kernels.hard_pass(X, C, None, labels=labels, objective=True)
    np.testing.assert_array_equal(labels.numpy(), want)
    given_norms = torch.empty_like(labels)  # the rows' norms from the caller, in float32
    for objective in (False, True):
        _, _, J_given = kernels.hard_pass(X, C, None, labels=given_norms, objective=objective,
                                          x_sq=(X * X).sum(1))
        np.testing.assert_array_equal(given_norms.numpy(), want)
    assert float(J_given) == float(J)  # J takes each row's own norm either way
    exact_J = float(exact.min(axis=1).sum() + (Xn * Xn).sum())
    bound = 4 * (2 * d + 4) * 2.0**-24 * float(
        np.sqrt((Xn.astype(np.float64) ** 2).sum(1)).sum() * np.sqrt((Cn**2).sum(1).max()))
    assert float(J) == pytest.approx(exact_J, rel=0, abs=bound)

