"""Groups of coincident centroids (the mass-constrained form) and the event-driven ladder.

References: the same computation on the ``k`` copies (each group's centroid repeated ``m_j``
times) with the registry's mappings and :func:`rbfkmeans.stats.cluster_stats`, in float64; the
critical temperature of :mod:`rbfkmeans.schedules`; the measured growth or decay of a split
perturbation under the copies' soft-Lloyd map, on the reproduction's datasets.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkmeans import RBFKMeans, splits
from rbfkmeans.annealing import soft_lloyd
from rbfkmeans.assignments import get_assignment
from rbfkmeans.comm import Comm
from rbfkmeans.experiments.datasets import make_dataset
from rbfkmeans.groups import group_memberships, group_stats
from rbfkmeans.passes import Data
from rbfkmeans.schedules import critical_temperature
from rbfkmeans.splits import Subsample, anneal_splits
from rbfkmeans.stats import cluster_stats

SOFT = ["softmax", "entmax15", "sparsemax"]


def copies_memberships(Z: torch.Tensor, m: torch.Tensor, name: str) -> torch.Tensor:
    """The k copies' memberships, summed per group: the reference of the group form."""
    cols = torch.repeat_interleave(torch.arange(len(m)), m)
    R = get_assignment(name).forward(Z[:, cols], dim=1)  # (b, k)
    return torch.zeros_like(Z).index_add_(1, cols, R)


@pytest.mark.parametrize("name", SOFT)
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), g=st.sampled_from([1, 2, 3, 4, 6, 9]),
       scale=st.sampled_from([0.1, 1.0, 10.0]))
def test_group_memberships_equal_the_copies(name: str, seed: int, g: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    Z = torch.as_tensor(rng.normal(size=(40, g)) * scale)
    m = torch.as_tensor(rng.integers(1, 5, size=g))
    Q = group_memberships(Z, m, name)
    torch.testing.assert_close(Q, copies_memberships(Z, m, name), atol=1e-10, rtol=0)
    torch.testing.assert_close(Q.sum(dim=1), torch.ones(40, dtype=Q.dtype), atol=1e-12, rtol=0)


def test_group_memberships_errors() -> None:
    Z = torch.zeros(3, 2)
    with pytest.raises(ValueError,
                       match=r"m \(the multiplicities\) must be a tensor of shape \(2,\)"):
        group_memberships(Z, torch.tensor([1, 1, 1]), "softmax")
    with pytest.raises(ValueError,
                       match=r"m \(the multiplicities\) must be integers >= 1; got \[0, 2\]"):
        group_memberships(Z, torch.tensor([0, 2]), "softmax")
    with pytest.raises(ValueError, match=r"assignment must be one of .*; got 'soft'"):
        group_memberships(Z, torch.tensor([1, 1]), "soft")


@pytest.mark.parametrize("name", SOFT)
@pytest.mark.parametrize("T", [0.05, 0.5, 5.0])
def test_group_stats_equal_the_copies_pass(name: str, T: float) -> None:
    rng = np.random.default_rng(1)
    X = torch.as_tensor(rng.normal(size=(150, 3)) * 2)
    w = torch.as_tensor(rng.uniform(0.2, 2.0, size=150))
    C = X[:5].clone()
    m = torch.tensor([3, 1, 2, 1, 4])
    data = Data(X, w, chunk_size=37)
    got = group_stats(data, C, m, T, name)
    ref = cluster_stats(data, C.repeat_interleave(m, dim=0), T, name)
    cols = torch.repeat_interleave(torch.arange(5), m)
    N = torch.zeros(5, dtype=X.dtype).index_add_(0, cols, ref.N)
    S = torch.zeros(5, 3, dtype=X.dtype).index_add_(0, cols, ref.S)
    torch.testing.assert_close(got.N, N, atol=1e-9, rtol=1e-10)
    torch.testing.assert_close(got.S, S, atol=1e-9, rtol=1e-10)
    assert got.objective == pytest.approx(ref.objective, rel=1e-10)
    assert got.inertia == pytest.approx(ref.inertia, rel=1e-10)
    assert got.n_soft == pytest.approx(ref.n_soft, rel=1e-12)


@pytest.mark.parametrize("name", SOFT)
def test_single_group_critical_temperature_is_the_first_split(name: str) -> None:
    dc = make_dataset("blobs", 300, seed=0)
    X = torch.as_tensor(dc.X)
    k = 6
    mu = X.mean(dim=0, keepdim=True)
    st_ = group_stats(Data(X), mu, torch.tensor([k]), 1.0, name, critical=True)
    assert st_.T_crit is not None
    assert float(st_.T_crit[0]) == pytest.approx(critical_temperature(X, name, k), rel=1e-9)


@pytest.mark.parametrize("d", [30, 64])
def test_wide_critical_temperatures_and_axes_match_a_full_eigendecomposition(
        d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``SUBSET_EIGH_MIN_DIM`` features on the top eigenpair comes from LAPACK's subset
    solver: the same critical temperatures and axes (largest entry positive) as the full
    ``torch.linalg.eigh`` of the same gain matrices."""
    from rbfkmeans import groups

    assert d >= groups.SUBSET_EIGH_MIN_DIM
    rng = np.random.default_rng(d)
    X = torch.as_tensor(rng.normal(size=(600, d)) * rng.uniform(0.5, 3.0, size=d))
    C = X[:5].clone()
    m = torch.tensor([3, 1, 2, 4, 2])
    got = group_stats(Data(X), C, m, 0.5 * d, "entmax15", critical=True)
    monkeypatch.setattr(groups, "SUBSET_EIGH_MIN_DIM", 10**9)
    ref = group_stats(Data(X), C, m, 0.5 * d, "entmax15", critical=True)
    assert got.T_crit is not None
    assert ref.T_crit is not None
    assert got.axis is not None
    assert ref.axis is not None
    assert bool((ref.T_crit[m > 1] > 0).all())
    torch.testing.assert_close(got.T_crit, ref.T_crit, rtol=1e-10, atol=0.0)
    torch.testing.assert_close(got.axis, ref.axis, rtol=0.0, atol=1e-8)


@pytest.mark.parametrize("kernels_mode", ["0", "1"])
@pytest.mark.parametrize("d", [3, 30])
def test_a_splitting_group_without_mass_has_critical_temperature_zero(
        kernels_mode: str, d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """entmax-1.5 gives a far group exactly no mass. Its gain matrix is 0 and so is its
    ``m_j / N_j``-scaled one: T_crit 0 and a finite axis (``m_j / tiny`` overflowed to inf for
    ``m_j >= 4``, and inf times 0 made the eigensolver fail), the other groups' values as when
    the empty group is left out."""
    monkeypatch.setenv("RBFKMEANS_KERNELS", kernels_mode)
    rng = np.random.default_rng(d)
    X = torch.as_tensor(rng.normal(size=(200, d)))
    far = torch.full((1, d), 1e3, dtype=X.dtype)
    C = torch.cat([X[:2], far])
    for m_far in (2, 4, 64):
        m = torch.tensor([3, 2, m_far])
        got = group_stats(Data(X), C, m, 0.5, "entmax15", critical=True)
        ref = group_stats(Data(X), C[:2], m[:2], 0.5, "entmax15", critical=True)
        assert float(got.N[2]) == 0.0
        assert got.T_crit is not None
        assert ref.T_crit is not None
        assert got.axis is not None
        assert ref.axis is not None
        assert float(got.T_crit[2]) == 0.0
        assert bool(torch.isfinite(got.axis).all())
        torch.testing.assert_close(got.T_crit[:2], ref.T_crit, rtol=1e-12, atol=0.0)
        torch.testing.assert_close(got.axis[:2], ref.axis, rtol=0.0, atol=1e-10)


@pytest.mark.parametrize("kernels_mode", ["0", "1"])
@pytest.mark.parametrize("d", [3, 30])
def test_a_critical_pass_over_no_rows_sums_zeros(kernels_mode: str, d: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank of a distributed fit whose share of a subsample holds no row takes the same pass
    with zero sums (the wide kernel path collected its sums from no chunk at all and failed,
    aborting the other ranks): N, S and the gain-weighted statistics 0, the temperatures 0."""
    monkeypatch.setenv("RBFKMEANS_KERNELS", kernels_mode)
    C = torch.as_tensor(np.random.default_rng(d).normal(size=(3, d)))
    m = torch.tensor([3, 1, 2])
    got = group_stats(Data(torch.zeros(0, d, dtype=C.dtype)), C, m, 0.5, "entmax15",
                      critical=True)
    assert got.T_crit is not None
    assert got.axis is not None
    for t in (got.N, got.S, got.V, got.T_crit):
        assert t.shape[0] == 3
        assert not bool(t.any())
    assert got.S.shape == (3, d)
    assert bool(torch.isfinite(got.axis).all())


def split_growth(X: torch.Tensor, C: torch.Tensor, m: torch.Tensor, j: int, axis: torch.Tensor,
                 T: float, name: str) -> float:
    """How a small zero-sum split of group ``j``'s copies along ``axis`` changes after ten
    soft-Lloyd steps of all ``k`` copies (> 1: it grows, the group splits)."""
    Ck = C.repeat_interleave(m, dim=0).clone()
    first = int(m[:j].sum())
    eps = 1e-6 * float(X.std())
    Ck[first] += eps * axis
    Ck[first + 1] -= eps * axis
    out, _, _ = soft_lloyd(Data(X), Ck, T, name, max_iter=10, tol=0.0)
    return float((out[first] - out[first + 1]).norm()) / (2 * eps)


@pytest.mark.parametrize("name", SOFT)
@pytest.mark.parametrize("dataset", ["blobs", "moons"])
def test_predicted_group_split_matches_the_copies(name: str, dataset: str) -> None:
    """A group of copies inside a configuration of several groups: below its predicted T_j a
    split perturbation of the copies grows, above it decays (the k-copy dynamics)."""
    dc = make_dataset(dataset, 400, seed=0)
    X = torch.as_tensor(dc.X)
    res = anneal_splits(Data(X), 5, name, keep_history=True, points_per_group=None,
                        max_iter=200, tol=1e-14)
    # a temperature of the ladder that still holds a group of several copies
    stage = next((h for h in res.history if h["groups"] < 5), None)  # type: ignore[operator]
    assert stage is not None
    T0 = float(stage["T"])  # type: ignore[arg-type]
    Ck = stage["C"]
    assert isinstance(Ck, torch.Tensor)
    C, _, _ = soft_lloyd(Data(X), Ck, T0, name, max_iter=300, tol=1e-20)  # settle the copies
    C, m = torch.unique(C, dim=0, return_counts=True)
    st_ = group_stats(Data(X), C, m, T0, name, critical=True)
    assert st_.T_crit is not None
    assert st_.axis is not None
    j = int(torch.argmax(torch.where(m > 1, st_.T_crit, -1.0)))
    Tj = float(st_.T_crit[j])
    assert Tj > 0
    # memberships change with T, so probe close to T_j from the settled configuration at T0
    probes = 0
    for T in (0.9 * Tj, 1.1 * Tj):
        Cs, _, _ = soft_lloyd(Data(X), C.repeat_interleave(m, dim=0), T, name, max_iter=300,
                              tol=1e-20)
        Cg, mg = torch.unique(Cs.round(decimals=10), dim=0, return_counts=True)
        if len(Cg) != len(C):  # the configuration itself changed at this T: nothing to probe
            continue
        stT = group_stats(Data(X), Cg, mg, T, name, critical=True)
        assert stT.T_crit is not None
        jj = int(torch.argmax(torch.where(mg > 1, stT.T_crit, -1.0)))
        assert stT.axis is not None
        g = split_growth(X, Cg, mg, jj, stT.axis[jj].double(), T, name)
        assert (g > 1.0) == (float(stT.T_crit[jj]) > T), (T, g, float(stT.T_crit[jj]))
        probes += 1
    assert probes >= 1


@pytest.mark.parametrize("name", SOFT)
def test_anneal_splits_ends_hard_with_k_centroids(name: str) -> None:
    dc = make_dataset("blobs", 300, seed=1)
    X = torch.as_tensor(dc.X)
    res = anneal_splits(Data(X), 4, name)
    assert res.C.shape == (4, 2)
    assert len(torch.unique(res.C, dim=0)) == 4
    T = np.array(res.temperatures)
    assert (np.diff(T) < 0).all()
    groups = [h["groups"] for h in res.history]
    assert groups == sorted(groups)  # groups only split (or merge back) downwards
    assert groups[-1] == 4


def test_anneal_splits_errors() -> None:
    X = torch.randn(30, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"anneal_splits needs a soft assignment .*'hard'"):
        anneal_splits(Data(X), 3, "hard")
    with pytest.raises(ValueError, match=r"cooling must be a number in \(0, 1\); got 1\.5"):
        anneal_splits(Data(X), 3, "softmax", cooling=1.5)
    with pytest.raises(ValueError, match=r"n_clusters must be an integer >= 1; got 0"):
        anneal_splits(Data(X), 0, "softmax")


def test_subsample_grows_and_nests() -> None:
    X = torch.arange(200, dtype=torch.float64).reshape(100, 2)
    pool = Subsample(Data(X), torch.Generator().manual_seed(0))
    small, large = pool.take(10).X, pool.take(40).X
    assert small.shape == (10, 2)
    assert large.shape == (40, 2)
    assert {tuple(r) for r in small.tolist()} <= {tuple(r) for r in large.tolist()}
    assert pool.take(1000).X is X
    assert pool.take(100).X is X
    assert pool.take(70).X.shape == (70, 2)  # most of the rows, but a small copy
    assert not Comm().active


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_subsamples_keep_the_metric_and_weigh_something(metric: str) -> None:
    """A subsample is data of the same metric (cosine rows: the unit rows, as they are), and
    ``Data.weighing_rows`` holds exactly the rows of positive weight, in order (the data
    itself where none weighs 0)."""
    rng = np.random.default_rng(1)
    X = torch.as_tensor(rng.normal(size=(100, 3)))
    w = torch.as_tensor(rng.uniform(0.5, 2.0, size=100))
    data = Data(X, w, metric=metric)
    pool = Subsample(data, torch.Generator().manual_seed(0))
    for part in (pool.take(10), pool.take(10, skip=10)):
        assert part.metric.name == metric
        rows = [data.X.tolist().index(r) for r in part.X.tolist()]
        assert torch.equal(part.X, data.X[rows])  # unit rows not normalised again
        assert torch.equal(part.w, w[rows])
    assert data.weighing_rows() is data
    assert Data(X).weighing_rows().X is X
    w0 = w.clone()
    w0[::3] = 0.0
    weighing = Data(X, w0, metric=metric).weighing_rows()
    keep = (w0 > 0).nonzero().squeeze(1)
    assert weighing.metric.name == metric
    assert torch.equal(weighing.X, data.X[keep])
    assert torch.equal(weighing.w, w0[keep])
    assert torch.equal(w0[::3], torch.zeros(34, dtype=w0.dtype))  # the caller's weights kept


def test_subsample_copies_most_of_large_data_only_below_half(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A subsample of more than half the rows is the data itself once its copy would exceed
    ``SMALL_COPY`` entries (so a large copy stays below half of ``X``)."""
    monkeypatch.setattr(splits, "SMALL_COPY", 99)
    X = torch.arange(200, dtype=torch.float64).reshape(100, 2)
    pool = Subsample(Data(X), torch.Generator().manual_seed(0))
    assert pool.take(49).X.shape == (49, 2)
    assert pool.take(50).X is X
    assert pool.take(70).X is X


@pytest.mark.parametrize("weighted", [False, True])
def test_subsample_rows_after_a_skip_are_the_next_places_of_the_permutation(
        weighted: bool) -> None:
    """``take(size, skip)`` holds the rows at places ``skip .. skip + size - 1`` of the same
    permutation: disjoint from ``take(skip)``, together with it ``take(skip + size)``, with
    their own weights; past the last row it holds what is left."""
    X = torch.arange(200, dtype=torch.float64).reshape(100, 2)
    w = torch.arange(1, 101, dtype=torch.float64) if weighted else None
    pool = Subsample(Data(X, w), torch.Generator().manual_seed(3))
    first, after, both = pool.take(30), pool.take(25, skip=30), pool.take(55)
    assert after.X.shape == (25, 2)
    rows = {tuple(r) for r in after.X.tolist()}
    assert rows.isdisjoint(tuple(r) for r in first.X.tolist())
    assert rows | {tuple(r) for r in first.X.tolist()} == {tuple(r) for r in both.X.tolist()}
    if weighted:
        assert after.w is not None
        np.testing.assert_array_equal(after.w.numpy(), after.X[:, 0].numpy() / 2 + 1)
    assert pool.take(40, skip=80).X.shape == (20, 2)
    assert pool.take(10, skip=100).n == 0


def test_estimator_schedules_agree_on_separated_blobs() -> None:
    X = make_dataset("blobs", 400, seed=2).X
    a = RBFKMeans(4, random_state=0).fit(X)
    b = RBFKMeans(4, schedule="geometric", random_state=0).fit(X)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-9)
    assert len(a.temperatures_) < len(b.temperatures_)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), sites=st.integers(1, 6), g=st.integers(1, 30))
def test_merge_joins_each_group_to_the_first_kept_one_within_the_threshold(
        seed: int, sites: int, g: int) -> None:
    """``_merge`` against the rule written plainly: groups in order, each either kept or added
    to the first kept group within ``thr`` (squared distance), its multiplicity carried along;
    near-coincident groups around a few sites, so chains (a close to b close to c) occur."""
    rng = np.random.default_rng(seed)
    site = rng.normal(size=(sites, 3)) * 5.0
    C = torch.as_tensor(site[rng.integers(0, sites, size=g)] + rng.normal(size=(g, 3)) * 1e-3)
    m = torch.as_tensor(rng.integers(1, 5, size=g))
    thr = float(rng.choice([1e-7, 1e-6, 4e-6]))
    kept: list[int] = []
    mult = m.tolist()
    for j in range(g):
        twin = next((i for i in kept if float(((C[i] - C[j]) ** 2).sum()) <= thr), None)
        if twin is None:
            kept.append(j)
        else:
            mult[twin] += mult[j]
    C_got, m_got = splits._merge(C, m, thr)
    torch.testing.assert_close(C_got, C[kept], rtol=0, atol=0)
    assert m_got.tolist() == [mult[i] for i in kept]
    assert int(m_got.sum()) == int(m.sum())
