"""Fits of fewer rows than features in the coordinates of the rows' span (rbfkmeans.rowspace):
the coordinates against the definition, and fits against the same fits on every feature."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

import rbfkmeans.rowspace as rowspace
from rbfkmeans import RBFKMeans
from rbfkmeans.rowspace import (
    ROW_SPACE_MAX_ENTRIES,
    ROW_SPACE_MAX_ROWS,
    RowSpace,
    row_space_applies,
)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 25), extra=st.integers(0, 40),
       centred=st.booleans(), offset=st.sampled_from([0.0, 3.0, 1e4]))
def test_the_coordinates_are_an_isometry_of_the_span(seed: int, n: int, extra: int,
                                                     centred: bool, offset: float) -> None:
    """``||x_i - c||^2 = ||z_i - y||^2`` for the rows and for points ``c = mu + Q y`` of the
    span, ``Q`` orthonormal, the rows recovered by :meth:`RowSpace.leave` (float64)."""
    rng = np.random.default_rng(seed)
    d = 2 * n + extra
    X = torch.from_numpy(rng.normal(size=(n, d)) + offset)
    given = X.clone()
    space, Z = RowSpace.of(X, centred=centred)
    assert torch.equal(X, given)  # centred in a copy, never in the caller's rows
    assert Z.shape == (n, n)
    assert Z.dtype == X.dtype
    scale = float((X - space.mu).square().sum(dim=1).max()) + 1.0
    torch.testing.assert_close(space.Q.T @ space.Q, torch.eye(n, dtype=torch.float64),
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(space.leave(Z), X, atol=1e-10 * scale**0.5, rtol=0)
    Y = torch.from_numpy(rng.normal(size=(4, n))) * scale**0.5
    C = space.leave(Y)  # (4, d) points of the span
    torch.testing.assert_close(torch.cdist(Z, Y).square(), torch.cdist(X, C).square(),
                               atol=1e-9 * scale, rtol=1e-9)
    if not centred:  # the linear span keeps every row's norm (cosine fits)
        torch.testing.assert_close(Z.norm(dim=1), X.norm(dim=1), atol=1e-10 * scale**0.5,
                                   rtol=1e-12)


def _blobs(n: int, d: int, k: int, seed: int, dtype: Any = np.float64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d)) * 0.6
    X = rng.normal(size=(n, d)) * 0.5 + centres[np.arange(n) % k]
    return (X + 2.0).astype(dtype)  # off the origin: the span is affine


@pytest.mark.parametrize("params", [
    {}, {"assignment": "hard"}, {"metric": "cosine"}, {"schedule": "geometric"},
    {"schedule": "k-means++", "n_init": 2}, {"fit_rows": 40}, {"weighted": True},
    {"float32": True},
])
def test_a_fit_in_the_span_equals_the_fit_on_every_feature(
        params: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """60 rows of 400 features in 3 clusters: the partition and ``J`` of the fit on every
    feature (the row space switched off), centroids in the rows' span, ``predict`` =
    ``labels_``, ``score`` = -``inertia_``, the annealing's history in the data's coordinates."""
    params = dict(params)
    weighted = params.pop("weighted", False)
    dtype = np.float32 if params.pop("float32", False) else np.float64
    X = _blobs(60, 400, 3, seed=1, dtype=dtype)
    w = np.random.default_rng(2).uniform(0.5, 2.0, 60) if weighted else None
    assert row_space_applies(*X.shape)
    fast = RBFKMeans(3, random_state=0, **params).fit(X, sample_weight=w)
    monkeypatch.setattr(rowspace, "ROW_SPACE_MAX_ROWS", 0)
    full = RBFKMeans(3, random_state=0, **params).fit(X, sample_weight=w)
    assert adjusted_rand_score(fast.labels_, full.labels_) == 1.0
    rel = 1e-5 if dtype is np.float32 else 1e-9
    assert fast.inertia_ == pytest.approx(full.inertia_, rel=rel)
    np.testing.assert_array_equal(fast.predict(X), fast.labels_)
    assert fast.score(X, sample_weight=w) == pytest.approx(-fast.inertia_, rel=rel)
    assert fast.cluster_centers_.dtype == X.dtype
    # the centroids lie in the rows' (affine) span: nothing left after projecting onto it
    Xd = X.astype(np.float64)
    mu = 0.0 if params.get("metric") == "cosine" else Xd.mean(axis=0)
    Q = np.linalg.qr((Xd - mu).T)[0]  # (d, n)
    Cd = fast.cluster_centers_.astype(np.float64) - mu
    assert np.abs(Cd - (Cd @ Q) @ Q.T).max() <= 1e-4 * np.abs(Cd).max()
    for h in fast.history_:
        assert np.asarray(h["centers"]).shape[1] == X.shape[1]


def test_the_row_space_is_taken_only_where_it_pays_and_applies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At most ROW_SPACE_MAX_ROWS rows and twice as many features; a start given as an array
    or a callable keeps every feature (its centroids need not lie in the span); bad sizes are
    named."""
    assert row_space_applies(10, 20)
    assert not row_space_applies(10, 19)
    assert not row_space_applies(ROW_SPACE_MAX_ROWS + 1, 10**7)
    assert row_space_applies(32, ROW_SPACE_MAX_ENTRIES // 32)
    assert not row_space_applies(32, ROW_SPACE_MAX_ENTRIES // 32 + 1)  # its float64 copies
    for n, d, name in ((0, 5, "n"), (5, -1, "d")):
        with pytest.raises(ValueError, match=rf"^{name} must be"):
            row_space_applies(n, d)
    X = _blobs(30, 100, 3, seed=3)
    seen: list[int] = []
    monkeypatch.setattr(RowSpace, "of", classmethod(
        lambda cls, X, centred=True: seen.append(X.shape[1]) or _of(cls, X, centred=centred)))
    RBFKMeans(3, random_state=0).fit(X)
    assert seen == [100]
    RBFKMeans(3, random_state=0, init=X[[0, 10, 20]]).fit(X)
    RBFKMeans(3, random_state=0, init=lambda X, k, random_state: X[:k]).fit(X)
    assert seen == [100]


_of = RowSpace.of.__func__  # type: ignore[attr-defined]


def test_leave_names_a_wrong_width() -> None:
    space, _ = RowSpace.of(torch.randn(4, 10, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"C must have 4 columns .* got shape \(2, 3\)"):
        space.leave(torch.zeros(2, 3))
    with pytest.raises(TypeError, match=r"X must be a torch.Tensor"):
        RowSpace.of(np.zeros((2, 4)))  # type: ignore[arg-type]
