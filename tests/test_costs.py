"""Costs of a swap: removal costs, axis-cut gains, the far row and its cell against brute
force (dense, chunked, weighted, CSR), and the far groups they let the fit reach."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans

import rbfkmeans.costs as costs_module
from rbfkmeans import RBFKMeans
from rbfkmeans.costs import removal_costs, swap_costs
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data
from rbfkmeans.sparse import SparseRows


def inertia(X: np.ndarray, C: np.ndarray, w: np.ndarray | None = None) -> float:
    d = cdist(X, C, "sqeuclidean").min(axis=1)
    return float(d.sum() if w is None else d @ w)


def sse(X: np.ndarray, w: np.ndarray | None = None) -> float:
    """``sum_i w_i ||x_i - m||^2`` about the weighted mean ``m``."""
    w = np.ones(len(X)) if w is None else w
    return float(((X - np.average(X, axis=0, weights=w)) ** 2).sum(1) @ w)


def brute_removal(X: np.ndarray, C: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.array([inertia(X, np.delete(C, a, 0), w) - inertia(X, C, w)
                     for a in range(len(C))])


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_swap_costs_against_brute_force(chunk_size: int | None) -> None:
    rng = np.random.default_rng(4)
    # three elongated clusters: a clear principal axis each, so the power iteration settles
    centres = np.array([[0.0, 0.0, 0.0], [15.0, 0.0, 0.0], [0.0, 15.0, 0.0]])
    y = np.repeat(np.arange(3), 40)
    X = centres[y] + rng.normal(size=(120, 3)) * np.array([3.0, 0.5, 0.2])
    w = rng.uniform(0.5, 2.0, size=120)
    Xt, wt = torch.as_tensor(X), torch.as_tensor(w)
    start = lloyd(Data(Xt, wt), torch.as_tensor(centres))
    C, labels = start.C.numpy(), start.labels.numpy()
    removal, gain, halves = swap_costs(Data(Xt, wt, chunk_size=chunk_size), start.C,
                                       start.labels, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(removal.numpy(), brute_removal(X, C, w), rtol=1e-10)
    for j in range(3):
        Xj, wj = X[labels == j], w[labels == j]
        Y = Xj - C[j]
        _, vecs = np.linalg.eigh((Y * wj[:, None]).T @ Y)
        side = Y @ vecs[:, -1] > 0
        parts = [Xj[side == s] for s in (False, True)]
        pw = [wj[side == s] for s in (False, True)]
        m = [np.average(p, axis=0, weights=q) for p, q in zip(parts, pw, strict=True)]
        ss = [((p - mm) ** 2).sum(1) @ q for p, mm, q in zip(parts, m, pw, strict=True)]
        total = ((Xj - np.average(Xj, axis=0, weights=wj)) ** 2).sum(1) @ wj
        assert gain[j].item() == pytest.approx(total - ss[0] - ss[1], rel=1e-8)
        # the halves are those means (in either order: the axis sign is arbitrary)
        got = halves[j].numpy()
        assert (np.allclose(got, m, atol=1e-10) or np.allclose(got[::-1], m, atol=1e-10))


def test_swap_costs_of_a_single_point_cluster() -> None:
    X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0]], dtype=torch.float64)
    start = lloyd(Data(X), torch.tensor([[0.0, 0.5], [5.0, 5.0]], dtype=torch.float64))
    removal, gain, halves = swap_costs(Data(X), start.C, start.labels)
    assert gain[1].item() == 0.0  # one point: nothing to split
    assert gain[0].item() == pytest.approx(0.5)  # two points 1 apart: 2 * 0.25 -> 0
    assert torch.isfinite(halves).all()
    assert removal[1].item() == pytest.approx(25.0 + 20.25 - 0.0)


def _brute_farthest(X: np.ndarray, w: np.ndarray, C: np.ndarray,
                    labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster the largest ``w_i n_j / (n_j - w_i) ||x_i - c_j||^2`` and its row."""
    gains, rows = np.zeros(len(C)), np.zeros_like(C)
    for j in range(len(C)):
        idx = np.flatnonzero(labels == j)
        n = w[idx].sum()
        g = np.where(n - w[idx] > 0, w[idx] * n / np.maximum(n - w[idx], 1e-300)
                     * ((X[idx] - C[j]) ** 2).sum(1), 0.0)
        gains[j], rows[j] = g.max(), X[idx[np.argmax(g)]]
    return gains, rows


@pytest.mark.parametrize("chunk_size", [None, 7])
@pytest.mark.parametrize("weighted", [False, True])
def test_farthest_rows_against_brute_force(chunk_size: int | None, weighted: bool) -> None:
    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(loc, 1.0, size=(30, 3)) for loc in ((0, 0, 0), (9, 0, 0))])
    X[7] = (40.0, -30.0, 5.0)  # one far row
    w = rng.uniform(0.5, 2.0, size=len(X)) if weighted else np.ones(len(X))
    wt = torch.as_tensor(w) if weighted else None
    start = lloyd(Data(torch.as_tensor(X), wt), torch.as_tensor(X[[0, 40]]))
    labels = start.labels
    size = torch.zeros(2, dtype=torch.float64).index_add_(0, labels, torch.as_tensor(w))
    gains, rows, weights, dist = costs_module._farthest_rows(
        Data(torch.as_tensor(X), wt, chunk_size=chunk_size), start.C, labels, size)
    want_g, want_rows = _brute_farthest(X, w, start.C.numpy(), labels.numpy())
    np.testing.assert_allclose(gains.numpy(), want_g, rtol=1e-12)
    np.testing.assert_allclose(dist.numpy(), ((X - start.C.numpy()[labels.numpy()]) ** 2).sum(1),
                               rtol=1e-12)
    np.testing.assert_array_equal(rows.numpy(), want_rows)
    j = int(labels[7])
    np.testing.assert_array_equal(rows[j].numpy(), X[7])
    assert weights[j].item() == w[7]


def test_isolating_the_farthest_row_is_an_exact_decrease_and_a_swap_candidate() -> None:
    """Moving row i out of its cluster to a centroid of its own lowers J (at the means of the
    new partition) by exactly its gain; swap_costs takes it where it beats the axis cut, with
    the row and the mean of the others as the halves."""
    rng = np.random.default_rng(6)
    X = np.concatenate([rng.normal(loc, 1.0, size=(200, 2)) for loc in ((0, 0), (40, 0))])
    X[243] = (300.0, 200.0)  # in the second blob's cluster
    Xt = torch.as_tensor(X)
    lab = np.repeat([0, 1], 200)
    C = torch.as_tensor(np.stack([X[lab == c].mean(0) for c in (0, 1)]))
    assert (cdist(X, C.numpy()).argmin(1) == lab).all()
    labels = torch.as_tensor(lab)
    j, i = 1, 243

    def J(parts: list[np.ndarray]) -> float:
        return float(sum(((X[p] - X[p].mean(0)) ** 2).sum() for p in parts))

    members = np.flatnonzero(lab == j)
    before = J([members])
    after = J([members[members != i], np.array([i])])
    _, gain, halves = swap_costs(Data(Xt), C, labels,
                                 generator=torch.Generator().manual_seed(0))
    assert gain[j].item() == pytest.approx(before - after, rel=1e-10)
    np.testing.assert_array_equal(halves[j, 0].numpy(), X[i])
    np.testing.assert_allclose(halves[j, 1].numpy(), X[members[members != i]].mean(0),
                               rtol=1e-12)
    # the same candidate from CSR rows
    sp = pytest.importorskip("scipy.sparse")
    rows = SparseRows.from_scipy(sp.csr_matrix(X), torch.float64, torch.device("cpu"))
    _, gain_s, halves_s = swap_costs(Data(rows), C, labels,
                                     generator=torch.Generator().manual_seed(0))
    assert gain_s[j].item() == pytest.approx(gain[j].item(), rel=1e-10)
    np.testing.assert_allclose(halves_s[j].numpy(), halves[j].numpy(), rtol=1e-12)


def _csr(X: np.ndarray) -> SparseRows:
    sp = pytest.importorskip("scipy.sparse")
    return SparseRows.from_scipy(sp.csr_matrix(X), torch.float64, torch.device("cpu"))


@pytest.mark.parametrize("chunk_size", [None, 7])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_far_cells_against_brute_force(chunk_size: int | None, weighted: bool,
                                       sparse: bool) -> None:
    """Weight and sum of each cluster's rows strictly nearer to a given row than to its
    centroid, against NumPy's distances."""
    rng = np.random.default_rng(8)
    X = np.concatenate([rng.normal(loc, 1.0, size=(40, 3)) for loc in ((0, 0, 0), (8, 0, 0))])
    X[X[:, 0] > 4, 1] += 3.0  # some rows of the second cluster nearer to its far row
    w = rng.uniform(0.5, 2.0, size=len(X)) if weighted else np.ones(len(X))
    labels = np.repeat([0, 1], 40)
    C = np.stack([X[labels == j].mean(0) for j in (0, 1)])
    far = np.stack([X[5], X[70]])
    rows = _csr(X) if sparse else torch.as_tensor(X)
    data = Data(rows, torch.as_tensor(w) if weighted else None, chunk_size=chunk_size)
    dist = torch.as_tensor(((X - C[labels]) ** 2).sum(1))
    count, total = costs_module._far_cells(data, torch.as_tensor(C), torch.as_tensor(labels),
                                           torch.as_tensor(far), dist)
    for j in (0, 1):
        idx = np.flatnonzero(labels == j)
        near = ((X[idx] - far[j]) ** 2).sum(1) < ((X[idx] - C[j]) ** 2).sum(1)
        assert 1 < near.sum() < len(idx)  # a real part of the cluster, not all, not one row
        assert count[j].item() == pytest.approx(w[idx][near].sum(), rel=1e-12)
        np.testing.assert_allclose(total[j].numpy(), w[idx][near] @ X[idx][near], rtol=1e-12)


def _big_and_far_group(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A cluster of 2,000 rows around the origin with a group of 20 rows 25 away, and a second
    cluster; its labels and the clusters' means."""
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(size=(2000, 2)),
                        rng.normal(size=(20, 2)) * 0.1 + np.array([25.0, 0.0]),
                        rng.normal(size=(300, 2)) + np.array([0.0, 40.0])])
    labels = np.repeat([0, 1], [2020, 300])
    C = np.stack([X[labels == j].mean(0) for j in (0, 1)])
    return X, labels, C


@pytest.mark.parametrize("sparse", [False, True])
def test_the_cell_of_a_far_group_is_the_split_and_an_exact_decrease(sparse: bool) -> None:
    """The far group's cell gains more than FAR_MARGIN times the axis cut and more than its
    farthest row alone: the split proposed is the group and the rest, and its gain is the exact
    decrease of J (each part at its mean)."""
    X, labels, C = _big_and_far_group()
    group = np.arange(2000, 2020)
    rest = np.arange(2000)
    rows = _csr(X) if sparse else torch.as_tensor(X)
    _, gain, halves = swap_costs(Data(rows), torch.as_tensor(C), torch.as_tensor(labels),
                                 generator=torch.Generator().manual_seed(0))
    exact = sse(X[:2020]) - sse(X[group]) - sse(X[rest])
    assert gain[0].item() == pytest.approx(exact, rel=1e-10)
    np.testing.assert_allclose(halves[0, 0].numpy(), X[group].mean(0), rtol=1e-12)
    np.testing.assert_allclose(halves[0, 1].numpy(), X[rest].mean(0), atol=1e-12)
    # the farthest row alone gains far less, and so does the axis cut (the cell is taken)
    far_row = sse(X[:2020]) - sse(X[np.setdiff1d(np.arange(2020), [group[0]])])
    assert exact > 10 * far_row
    side = (X[:2020] - C[0]) @ np.array([1.0, 0.0]) > 0  # about the principal axis here
    axis_cut = sse(X[:2020]) - sse(X[:2020][side]) - sse(X[:2020][~side])
    assert exact > costs_module.FAR_MARGIN * axis_cut


def test_far_splits_follow_the_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the margin (infinite) the proposed split is the axis cut; the removal costs are
    those of swap_costs."""
    X, labels, C = _big_and_far_group()
    args = (Data(torch.as_tensor(X)), torch.as_tensor(C), torch.as_tensor(labels))
    removal, cell_gain, _ = swap_costs(*args, generator=torch.Generator().manual_seed(0))
    margin = costs_module.FAR_MARGIN
    monkeypatch.setattr(costs_module, "FAR_MARGIN", float("inf"))
    removal_inf, axis_gain, halves = swap_costs(*args, generator=torch.Generator().manual_seed(0))
    assert axis_gain[0].item() * margin < cell_gain[0].item() / 2
    assert not np.allclose(halves[0, 0].numpy(), X[2000:2020].mean(0), atol=1.0)
    torch.testing.assert_close(removal, removal_inf, rtol=0, atol=0)
    torch.testing.assert_close(removal_costs(*args), removal, rtol=0, atol=0)


@pytest.mark.parametrize("draw", [0, 8, 13])
def test_far_small_groups_reach_scikit_learn(draw: int) -> None:
    """A Gaussian of thousands of rows and four to seven groups of 10-40 rows far out, fewer
    centroids than groups + 3: the fit ended 1.011x / 1.111x / 1.073x KMeans(n_init=10)'s J on
    these draws (the axis cut halved the big part while a group stayed in its cluster)."""
    rng = np.random.default_rng(1000 + draw)
    d = [2, 3, 5, 10][draw % 4]
    m = int(rng.integers(4, 9))
    big = rng.normal(size=(int(rng.integers(3000, 12000)), d))
    dirs = rng.normal(size=(m, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    centres = dirs * rng.uniform(8, 50, (m, 1))
    groups = [rng.normal(size=(int(rng.integers(10, 40)), d)) * 0.2 + c for c in centres]
    X = np.vstack([big, *groups])
    k = 3 + m - int(rng.integers(0, 3))
    est = RBFKMeans(k, random_state=0).fit(X)
    assert est.inertia_ <= KMeans(k, n_init=10, random_state=0).fit(X).inertia_ * (1 + 1e-4)
