"""fit_scales: the mean feature variance and the covariance's top eigenvalue of a fit, against
numpy on the weighted covariance, for each kind of data it serves."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from rbfkmeans import RBFKMeans
from rbfkmeans.frame import Frame
from rbfkmeans.passes import Data
from rbfkmeans.scales import SPREAD_SAMPLE, fit_scales
from rbfkmeans.sparse import SparseRows


def _cov(X: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """The weighted, biased covariance (float64)."""
    w = np.ones(len(X)) if w is None else w
    mu = w @ X / w.sum()
    Y = X - mu
    return (Y * w[:, None]).T @ Y / w.sum()


def _rows(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) + 3.0


@pytest.mark.parametrize("weighted", [False, True])
def test_dense_rows_take_the_exact_moments(weighted: bool) -> None:
    X = _rows(500, 6, 0)
    w = np.random.default_rng(1).uniform(0.1, 3.0, 500) if weighted else None
    data = Data(torch.as_tensor(X), None if w is None else torch.as_tensor(w))
    mean_var, lam = fit_scales(data, Frame())
    cov = _cov(X, w)
    assert mean_var == pytest.approx(np.trace(cov) / 6, rel=1e-12)
    assert lam == pytest.approx(np.linalg.eigvalsh(cov)[-1], rel=1e-10)


def test_a_hard_fit_takes_the_mean_variance_alone() -> None:
    X = _rows(300, 5, 2)
    data = Data(torch.as_tensor(X))
    mean_var, lam = fit_scales(data, Frame(), hard=True)
    assert lam == 0.0
    assert mean_var == pytest.approx(np.trace(_cov(X, None)) / 5, rel=1e-12)
    # in a frame with the trace it measured: the same value, in the frame's units
    frame = Frame.choose(torch.as_tensor(X))
    inside = Data(frame.enter(torch.as_tensor(X)))
    v_frame, _ = fit_scales(inside, frame, hard=True)
    assert frame.sq_from(v_frame) == pytest.approx(mean_var, rel=1e-10)


def test_wide_rows_take_the_frames_trace_and_a_samples_eigenvalue() -> None:
    d = 100
    X = _rows(SPREAD_SAMPLE + 500, d, 3)
    frame = Frame.choose(torch.as_tensor(X))
    assert frame.trace is not None
    data = Data(frame.enter(torch.as_tensor(X)))
    mean_var, lam = fit_scales(data, frame)
    cov = _cov(X, None)
    assert frame.sq_from(mean_var) == pytest.approx(np.trace(cov) / d, rel=1e-9)
    # lambda of a random sample of SPREAD_SAMPLE of the rows: near the exact one
    assert frame.sq_from(lam) == pytest.approx(np.linalg.eigvalsh(cov)[-1], rel=0.05)


def test_unit_rows_take_the_tangent_spread_at_the_mean_direction() -> None:
    X = _rows(400, 4, 4)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    data = Data(torch.as_tensor(X), metric="cosine")
    mean_var, lam = fit_scales(data, Frame())
    mu = X.mean(axis=0)
    r = np.linalg.norm(mu)
    P = np.eye(4) - np.outer(mu, mu) / r**2
    cov = _cov(X, None)
    assert mean_var == pytest.approx(np.trace(cov) / 4, rel=1e-10)
    assert lam == pytest.approx(np.linalg.eigvalsh(P @ cov @ P)[-1] / r, rel=1e-8)
    hard_var, hard_lam = fit_scales(data, Frame(), hard=True)
    assert hard_lam == 0.0
    assert hard_var == pytest.approx((1.0 - r**2) / 4, rel=1e-10)


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_sparse_rows_give_the_scales_of_the_dense_ones(metric: str) -> None:
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 20)) * (rng.uniform(size=(300, 20)) < 0.3)
    X[:, 0] += 1.0  # no zero row
    if metric == "cosine":
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    dense = fit_scales(Data(torch.as_tensor(X), metric=metric), Frame())
    rows = SparseRows.from_scipy(sp.csr_matrix(X), torch.float64, torch.device("cpu"))
    sparse = fit_scales(Data(rows, metric=metric), Frame())
    assert sparse == pytest.approx(dense, rel=1e-9)
    assert fit_scales(Data(rows, metric=metric), Frame(), hard=True) == (sparse[0], 0.0)


def test_the_estimator_takes_its_critical_temperature_from_them() -> None:
    X = _rows(400, 5, 6)
    est = RBFKMeans(4, assignment="softmax", random_state=0).fit(X)
    assert est.critical_temperature_ == pytest.approx(
        np.linalg.eigvalsh(_cov(X, None))[-1], rel=1e-9)


def test_bad_arguments_are_named() -> None:
    data = Data(torch.randn(20, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="data must be"):
        fit_scales(torch.randn(20, 3), Frame())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"frame must be a rbfkmeans\.frame\.Frame; got NoneType"):
        fit_scales(data, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hard must be a bool; got int"):
        fit_scales(data, Frame(), hard=1)  # type: ignore[arg-type]
