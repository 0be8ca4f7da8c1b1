"""``J`` from the residuals where the expanded distances leave it mostly rounding
(:mod:`rbfkmeans.residuals`).

Reference: ``sum_i w_i ||x_i - c_{l_i}||^2`` summed by NumPy in float64 from the published
centroids and labels, as scikit-learn sums its ``inertia_``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_blobs

import rbfkmeans.residuals as residuals
from rbfkmeans import RBFKMeans
from rbfkmeans.passes import Data
from rbfkmeans.residuals import cancels, residual_sum, settled_inertia
from rbfkmeans.sparse import SparseRows
from rbfkmeans.stats import cluster_stats


def _residual_J(X: np.ndarray, C: np.ndarray, labels: np.ndarray,
                w: np.ndarray | None = None) -> float:
    r = ((X.astype(np.float64) - C.astype(np.float64)[labels]) ** 2).sum(1)
    return float(r.sum() if w is None else r @ w)


def _tight(std: float, dtype: type = np.float64, n: int = 2000) -> np.ndarray:
    X, _ = make_blobs(n, n_features=8, centers=5, cluster_std=std, random_state=0)
    return X.astype(dtype)


@pytest.mark.parametrize(("std", "dtype"), [(1e-8, np.float64), (1e-6, np.float32),
                                            (1e-8, np.float32)])
@pytest.mark.parametrize("weighted", [False, True])
def test_tight_clusters_report_the_residuals_J(std: float, dtype: type, weighted: bool) -> None:
    """Blobs of spread 1e-8 (float64: inertia_ was 17x the residuals' J) or 1e-6 and 1e-8
    (float32: up to 2.3x): inertia_, score and partial_fit's inertia_ are the residuals'."""
    X = _tight(std, dtype)
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(X)) if weighted else None
    est = RBFKMeans(5, random_state=0).fit(X, sample_weight=w)
    want = _residual_J(X, est.cluster_centers_, est.labels_, w)
    assert est.inertia_ == pytest.approx(want, rel=1e-6, abs=0)
    assert -est.score(X, sample_weight=w) == pytest.approx(want, rel=1e-6, abs=0)
    # the expanded pass alone is far off: the check is what makes these equal
    Xt, Ct = torch.from_numpy(X), torch.from_numpy(est.cluster_centers_)
    wt = None if w is None else torch.from_numpy(w).to(Xt.dtype)
    st_ = cluster_stats(Data(Xt, wt), Ct, 0.0, "hard", return_labels=True)
    assert abs(st_.inertia / want - 1) > 1e-3
    est.partial_fit(X, sample_weight=w)
    assert est.inertia_ == pytest.approx(
        _residual_J(X, est.cluster_centers_, est.labels_, w), rel=1e-6, abs=0)


def test_tight_clusters_far_from_the_origin() -> None:
    """The same rows moved 1e3 away (the frame takes them back to their mean first)."""
    X = _tight(1e-9) + 1e3
    est = RBFKMeans(5, random_state=0).fit(X)
    assert est.inertia_ == pytest.approx(
        _residual_J(X, est.cluster_centers_, est.labels_), rel=1e-6, abs=0)


def test_as_many_clusters_as_rows_is_zero() -> None:
    """k = n distinct rows: ``J`` 0 (it was 9e-13, the expansion's rounding)."""
    X = np.random.default_rng(0).normal(size=(300, 4))
    assert RBFKMeans(300, random_state=0).fit(X).inertia_ == 0.0


@pytest.mark.parametrize(("scale", "dtype", "rel"), [(1e-9, np.float64, 1e-6),
                                                    (1e-5, np.float32, 1e-3),
                                                    (1e-3, np.float32, 1e-5)])
def test_tight_cosine_clusters(scale: float, dtype: type, rel: float) -> None:
    """Directions within ``scale`` of five: the spherical ``J = sum_i (1 - cos_i)`` from the unit
    rows' residuals ``||x/|x| - c||^2 / 2`` (the expanded form had given up to 181x of it in
    float64 at 1e-9, and in float32 4,261x at 1e-5 and 1.033x at 1e-3)."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(5, 16))
    X = (np.repeat(base, 200, axis=0) * rng.uniform(1, 3, (1000, 1)) +
         rng.normal(scale=scale, size=(1000, 16))).astype(dtype)
    est = RBFKMeans(5, metric="cosine", random_state=0).fit(X)
    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    assert est.inertia_ == pytest.approx(
        _residual_J(U, est.cluster_centers_, est.labels_) / 2, rel=rel, abs=0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 6), d=st.integers(1, 12),
       dtype=st.sampled_from([torch.float32, torch.float64]), weighted=st.booleans())
def test_ordinary_data_keep_the_expanded_J_bit_for_bit(seed: int, k: int, d: int,
                                                       dtype: torch.dtype,
                                                       weighted: bool) -> None:
    """Clusters of ordinary spread: the check does not fire and ``J`` is returned as given."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(200, d, generator=g, dtype=dtype)
    w = torch.rand(200, generator=g, dtype=dtype) + 0.1 if weighted else None
    C = X[torch.randperm(200, generator=g)[:k]]
    data = Data(X, w)
    st_ = cluster_stats(data, C, 0.0, "hard", return_labels=True)
    assert st_.labels is not None
    assert not cancels(st_.inertia, st_.N, C, dtype)
    assert settled_inertia(data, C, st_.labels, st_.inertia) == st_.inertia


def test_residual_sum_against_numpy_and_the_check_against_its_bound() -> None:
    rng = np.random.default_rng(3)
    X, C = rng.normal(size=(500, 7)), rng.normal(size=(4, 7))
    labels = rng.integers(0, 4, 500)
    w = rng.uniform(0, 2, 500)
    got = residual_sum(Data(torch.from_numpy(X), torch.from_numpy(w), chunk_size=64),
                       torch.from_numpy(C), torch.from_numpy(labels))
    assert got == pytest.approx(_residual_J(X, C, labels, w), rel=1e-13, abs=0)
    N, Ct = torch.tensor([1.0, 2.0]), torch.tensor([[3.0, 4.0], [0.0, 1.0]])  # sum N|c|^2 27
    bound = residuals.CANCELLATION_ULPS * 27 * 2 * torch.finfo(torch.float64).eps
    assert cancels(0.99 * bound, N, Ct, torch.float64)
    assert not cancels(bound, N, Ct, torch.float64)


def test_sparse_rows_keep_their_J() -> None:
    A = sp.random(50, 20, density=0.3, format="csr", random_state=0)
    data = Data(SparseRows.from_scipy(A, torch.float64, torch.device("cpu")))
    C = torch.zeros(2, 20, dtype=torch.float64)
    assert settled_inertia(data, C, torch.zeros(50, dtype=torch.long), 1e-30) == 1e-30
    with pytest.raises(TypeError, match="residual_sum needs dense rows"):
        residual_sum(data, C, torch.zeros(50, dtype=torch.long))
