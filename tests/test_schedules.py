"""Schedules: the covariance spread against NumPy, the ladder's properties, parameter errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkmeans.schedules import (
    critical_temperature,
    critical_temperature_factor,
    geometric_schedule,
)
from rbfkmeans.spread import (
    SAMPLE_SPREAD_MIN_DIM,
    covariance_eigmax,
    covariance_spread,
    sphere_spread,
    top_eigenpair,
)


def numpy_spread(X: np.ndarray, w: np.ndarray | None) -> tuple[float, float]:
    cov = np.cov(X, rowvar=False, bias=True, aweights=w).reshape(X.shape[1], X.shape[1])
    return float(np.trace(cov) / X.shape[1]), float(np.linalg.eigvalsh(cov).max())


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 1, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_covariance_spread_matches_numpy(weighted: bool, chunk_size: int | None,
                                         dtype: torch.dtype) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(53, 4)) * np.array([3.0, 1.0, 0.5, 0.1]) + 100.0  # far from 0
    w = rng.uniform(0.0, 2.0, size=53) if weighted else None
    Xt = torch.as_tensor(X, dtype=dtype)
    before = Xt.clone()
    wt = None if w is None else torch.as_tensor(w, dtype=dtype)
    mean_var, lam = covariance_spread(Xt, wt, chunk_size=chunk_size)
    ref_var, ref_lam = numpy_spread(Xt.double().numpy(), None if w is None else wt.double().numpy())
    # float64 accumulation: float32 input only loses what its own rounding lost
    assert mean_var == pytest.approx(ref_var, rel=1e-10)
    assert lam == pytest.approx(ref_lam, rel=1e-10)
    assert covariance_eigmax(Xt, wt) == pytest.approx(ref_lam, rel=1e-10)
    assert torch.equal(Xt, before)


def test_covariance_spread_degenerate() -> None:
    X = torch.ones(6, 3)
    assert covariance_spread(X) == (0.0, 0.0)
    assert covariance_spread(X, torch.zeros(6)) == (0.0, 0.0)  # no weight at all


@pytest.mark.parametrize(("assignment", "factor"),
                         [("softmax", 1.0), ("entmax15", 3.0), ("sparsemax", 9.0), ("hard", 0.0)])
def test_critical_temperature(assignment: str, factor: float) -> None:
    X = torch.as_tensor(np.random.default_rng(0).normal(size=(40, 3)) * [2.0, 1.0, 1.0])
    lam = numpy_spread(X.numpy(), None)[1]
    assert critical_temperature_factor(assignment, 9) == factor
    assert critical_temperature(X, assignment, 9) == pytest.approx(factor * lam, rel=1e-12)
    assert critical_temperature(X, assignment, 9, eigmax=2.0) == factor * 2.0


@settings(max_examples=60, deadline=None)
@given(
    T_start=st.floats(1e-6, 1e6),
    span=st.floats(1.0, 1e8),
    ratio=st.floats(0.05, 0.99),
)
def test_geometric_schedule_properties(T_start: float, span: float, ratio: float) -> None:
    T_end = T_start / span
    temps = geometric_schedule(T_start, T_end, ratio)
    assert temps[0] == T_start
    assert temps[-1] == pytest.approx(T_end, rel=1e-9)
    assert np.all(np.diff(temps) < 0)
    assert np.all(temps >= T_end * (1 - 1e-9))
    steps = temps[1:] / temps[:-1]
    # every step is the ratio, except possibly the last one, which only lands on T_end
    np.testing.assert_allclose(steps[:-1], ratio, rtol=1e-9)
    assert np.all(steps >= ratio * (1 - 1e-9))
    if span == 1.0:
        assert len(temps) == 1
    assert len(temps) <= math.ceil(math.log(span) / -math.log(ratio)) + 2


@pytest.mark.parametrize(
    ("args", "name"),
    [((1.0, 2.0, 0.5), "T_start"), ((1.0, 0.1, 1.0), "ratio"), ((1.0, 0.1, 0.0), "ratio"),
     ((-1.0, 0.1, 0.5), "T_start"), ((1.0, math.nan, 0.5), "T_end")],
)
def test_geometric_schedule_errors(args: tuple[float, float, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        geometric_schedule(*args)


def test_factor_errors() -> None:
    with pytest.raises(ValueError, match="assignment"):
        critical_temperature_factor("softermax", 3)
    with pytest.raises(ValueError, match="n_clusters"):
        critical_temperature_factor("softmax", 0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(0, 60), d=st.integers(1, 40),
       zero_weights=st.booleans())
def test_top_eigenpair_equals_a_dense_decomposition(seed: int, m: int, d: int,
                                                    zero_weights: bool) -> None:
    """Lanczos on ``A v = Y^T (u * (Y v))`` gives the top eigenpair of ``A = Y^T diag(u) Y``
    formed densely, in float64 (a zero ``A``: 0)."""
    rng = np.random.default_rng(seed)
    Y = torch.from_numpy(rng.normal(size=(m, d)) * rng.uniform(0.1, 5.0, size=d))
    u = torch.from_numpy(rng.uniform(0.0, 2.0, size=m) * (0.0 if zero_weights else 1.0))
    val, vec = top_eigenpair(Y, u)
    A = Y.T @ (u.unsqueeze(1) * Y)
    evals, evecs = torch.linalg.eigh(A)
    top = float(evals[-1])
    assert val == pytest.approx(max(top, 0.0), rel=1e-10, abs=1e-12 * (1 + abs(top)))
    assert float(vec.norm()) == pytest.approx(1.0, rel=1e-12)
    if top > 0 and (d == 1 or float(evals[-1] - evals[-2]) > 1e-6 * top):
        assert float((vec @ evecs[:, -1]).abs()) == pytest.approx(1.0, rel=1e-8)


def test_sampled_spread_of_wide_data() -> None:
    """Wide data with more rows than ``sample``: the trace from all rows (exact), the top
    eigenvalue that of a random sample's covariance (Lanczos); fewer rows, narrow data or
    ``sample=None``: the dense computation, unchanged."""
    rng = np.random.default_rng(1)
    d = SAMPLE_SPREAD_MIN_DIM
    X = torch.from_numpy(rng.normal(size=(3000, d)) * np.linspace(0.5, 3.0, d))
    w = torch.from_numpy(rng.uniform(0.5, 2.0, size=3000))
    exact = covariance_spread(X, w)
    sampled = covariance_spread(X, w, sample=1000)
    assert sampled[0] == pytest.approx(exact[0], rel=1e-12)
    rows = torch.randperm(3000, generator=torch.Generator().manual_seed(0))[:1000]
    assert sampled[1] == pytest.approx(covariance_spread(X[rows], w[rows])[1], rel=1e-10)
    # a sample's top eigenvalue errs upwards by at most the Marchenko-Pastur edge (1+sqrt(d/m))^2
    assert 0.9 * exact[1] <= sampled[1] <= (1 + math.sqrt(d / 1000)) ** 2 * exact[1]
    assert covariance_spread(X, w, sample=3000) == exact
    assert covariance_spread(X[:, :20], w, sample=10) == covariance_spread(X[:, :20], w)
    s_exact = sphere_spread(X / X.norm(dim=1, keepdim=True), w)
    s_sampled = sphere_spread(X / X.norm(dim=1, keepdim=True), w, sample=1000)
    assert s_sampled[0] == pytest.approx(s_exact[0], rel=1e-12)
    assert s_sampled[2] == pytest.approx(s_exact[2], rel=1e-12)
    assert 0.9 * s_exact[1] <= s_sampled[1] <= (1 + math.sqrt(d / 1000)) ** 2 * s_exact[1]
