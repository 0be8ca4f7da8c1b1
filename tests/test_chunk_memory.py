"""Passes that copy a chunk of rows size the chunk by the rows' width, not by ``k`` alone.

``Data.chunks(width)`` gives about ``DEFAULT_CHUNK_ELEMENTS`` (2^20) entries of ``width`` a row.
A pass that copies its chunk's rows (to float64, weighted, or the rows' centroids) holds
``b x d`` entries, so a width below ``d`` makes chunks larger than the budget: with width 1, the
sums of squared norms of the Lloyd runs' give-up rule copied every row to float64 at once (a
fit of 1,000,000 x 32 rows grew its peak memory by 830 MB instead of about 330 MB), and
``transform`` with few clusters did the same. Each case is measured by the largest single
allocation torch's profiler sees, on 300,000 x 32 float32 rows (36.6 MB; a float64 copy of all
of them is 73 MB, the budget's chunks 8 MB).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from rbfkmeans import RBFKMeans, lloyd, stats
from rbfkmeans.metrics import normalize_rows
from rbfkmeans.passes import Data

N, D = 300_000, 32
#: twice the budget's chunk of float64 rows (2^20 entries of 8 bytes), in MiB
MOST_MB = 16.0


def _largest_allocation_mb(fn: Callable[[], object]) -> float:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max((e.cpu_memory_usage for e in prof.events()), default=0) / 2**20


@pytest.fixture(scope="module")
def rows() -> torch.Tensor:
    return torch.randn(N, D, generator=torch.Generator().manual_seed(0))


def test_the_give_up_rule_s_moments_copy_a_chunk_at_a_time(rows: torch.Tensor) -> None:
    data = Data(rows)
    assert _largest_allocation_mb(lambda: lloyd._moments(data)) <= MOST_MB
    exact = float(rows.double().square().sum())
    assert lloyd._moments(data) == pytest.approx(exact, rel=1e-12)


def test_the_spherical_objective_copies_a_chunk_of_centroid_rows_at_a_time(
        rows: torch.Tensor) -> None:
    X = normalize_rows(rows)
    data = Data(X, metric="cosine")
    C = normalize_rows(rows[:4].clone())
    labels = torch.randint(0, 4, (N,), generator=torch.Generator().manual_seed(1))
    assert _largest_allocation_mb(lambda: lloyd._spherical_objective(data, C, labels)) <= MOST_MB
    exact = float((1.0 - (X.double() * C.double()[labels]).sum(dim=1)).sum())
    assert lloyd._spherical_objective(data, C, labels) == pytest.approx(exact, rel=1e-6)


def test_transform_with_few_clusters_copies_a_chunk_at_a_time(rows: torch.Tensor) -> None:
    est = RBFKMeans(2, random_state=0).fit(rows[:5000].numpy())
    X = rows.numpy()
    assert _largest_allocation_mb(lambda: est.transform(X)) <= MOST_MB
    C = torch.from_numpy(est.cluster_centers_).double()
    expected = torch.cdist(rows[:1000].double(), C).numpy()
    assert est.transform(X[:1000]) == pytest.approx(expected, rel=1e-6)


def test_a_weighted_torch_pass_copies_a_chunk_of_weighted_rows_at_a_time(
        rows: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats.kernels, "usable", lambda *args, **kwargs: False)
    w = torch.rand(N, generator=torch.Generator().manual_seed(2))
    data = Data(rows, w)
    C = rows[:4].clone()
    assert _largest_allocation_mb(lambda: stats.cluster_stats(data, C, 0.0, "hard")) <= MOST_MB
    st = stats.cluster_stats(data, C, 0.0, "hard", return_labels=True)
    labels = torch.cdist(rows.double(), C.double()).argmin(dim=1)
    assert torch.equal(st.labels, labels)
    N_ref = torch.zeros(4, dtype=torch.float64).index_add_(0, labels, w.double())
    torch.testing.assert_close(st.N.double(), N_ref, rtol=1e-5, atol=0.0)


def test_the_moments_of_float64_rows_leave_the_rows_as_they_were() -> None:
    X = torch.randn(1000, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    before = X.clone()
    total = lloyd._moments(Data(X))
    assert torch.equal(X, before)  # .double() of float64 rows is the rows themselves
    assert total == pytest.approx(float(before.square().sum()), rel=1e-12)
