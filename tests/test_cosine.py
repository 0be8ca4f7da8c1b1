"""Spherical k-means (``metric="cosine"``) against direct computations and slow NumPy references.

The references normalise the rows themselves: cosine scores from ``cosine_similarity``, the
spherical update as the normalised weighted mean, spherical Lloyd iterations in NumPy, the
spherical objective ``sum_i w_i (1 - max_j cos)``, and the first split of annealing from the mean
direction found by running the ladder and compared with ``T_c = k gamma lambda_max(P Sigma P) /
||mu||`` (:mod:`rbfkmeans.schedules`).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch.nn import functional as F

import rbfkmeans as rk
from rbfkmeans.annealing import anneal
from rbfkmeans.assignments import get_assignment
from rbfkmeans.cli import main
from rbfkmeans.lloyd import lloyd
from rbfkmeans.metrics import METRICS, UNIT_TOLERANCE, normalize_rows, project_rows, unit_rows
from rbfkmeans.passes import Data
from rbfkmeans.relocation import mean_update
from rbfkmeans.schedules import (
    MIN_MEAN_NORM,
    critical_temperature,
    geometric_schedule,
    sphere_eigmax,
)
from rbfkmeans.sparse import SparseRows
from rbfkmeans.spread import sphere_spread
from rbfkmeans.stats import cluster_stats
from rbfkmeans.streaming import macqueen_updates


def unit(A: np.ndarray) -> np.ndarray:
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def directions(n_per: int = 40, k: int = 4, d: int = 5, spread: float = 0.15,
               seed: int = 0) -> np.ndarray:
    """Rows around ``k`` random directions, each scaled by a random positive length (cosine
    ignores it)."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.normal(size=(k, d)))
    X = np.concatenate([c + spread * rng.normal(size=(n_per, d)) for c in centres])
    return X * rng.uniform(0.2, 5.0, size=(X.shape[0], 1))


def spherical_objective(X: np.ndarray, C: np.ndarray, w: np.ndarray | None = None) -> float:
    cos = unit(X) @ unit(C).T
    w = np.ones(X.shape[0]) if w is None else w
    return float(w @ (1.0 - cos.max(axis=1)))


def spherical_lloyd_step(X: np.ndarray, C: np.ndarray,
                         w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One spherical Lloyd iteration in NumPy: label by the largest cosine, then each centre the
    normalised weighted sum of its (normalised) members; an empty cluster keeps its centre."""
    Xh = unit(X)
    w = np.ones(X.shape[0]) if w is None else w
    labels = (Xh @ C.T).argmax(axis=1)
    M = C.copy()
    for j in range(C.shape[0]):
        members = labels == j
        if members.any():
            M[j] = w[members] @ Xh[members]
    return unit(M), labels


def spherical_lloyd(X: np.ndarray, C0: np.ndarray, w: np.ndarray | None = None,
                    max_iter: int = 300) -> tuple[np.ndarray, np.ndarray]:
    C, labels = unit(C0), None
    for _ in range(max_iter):
        C_new, new = spherical_lloyd_step(X, C, w)
        if labels is not None and np.array_equal(new, labels):
            return C, labels
        C, labels = C_new, new
    raise AssertionError("the reference did not converge")


# -- the layer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax"])
def test_layer_scores_are_cosines(assignment: str) -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(30, 4, generator=g, dtype=torch.float64) * 3.0
    C = torch.randn(5, 4, generator=g, dtype=torch.float64) * 0.1
    T = 0.2
    layer = rk.KMeansLayer(C, T, assignment, metric="cosine")
    cos = F.cosine_similarity(X.unsqueeze(1), C.unsqueeze(0), dim=-1)  # (n, k)
    torch.testing.assert_close(layer.scores(X), cos / T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.distances(X), 1.0 - cos, rtol=1e-12, atol=1e-12)
    R = get_assignment(assignment).forward(cos / T, dim=-1)
    torch.testing.assert_close(layer(X), R, rtol=1e-10, atol=1e-12)
    assert torch.equal(layer.predict(X), cos.argmax(dim=1))
    # the stored centroids are the unit directions; the length of X does not matter
    torch.testing.assert_close(layer.centroids.norm(dim=1), torch.ones(5, dtype=torch.float64))
    torch.testing.assert_close(layer(7.0 * X), layer(X), rtol=1e-12, atol=1e-12)
    # (..., d) inputs
    torch.testing.assert_close(layer(X.reshape(3, 10, 4)), layer(X).reshape(3, 10, 5))


def test_layer_objective_is_the_spherical_one() -> None:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(25, 3, generator=g, dtype=torch.float64)
    C = torch.randn(4, 3, generator=g, dtype=torch.float64)
    w = torch.rand(25, generator=g, dtype=torch.float64)
    cos = F.cosine_similarity(X.unsqueeze(1), C.unsqueeze(0), dim=-1)
    hard = rk.KMeansLayer(C, 0.0, "hard", metric="cosine")
    torch.testing.assert_close(hard.objective(X, w), w @ (1.0 - cos.amax(dim=1)))
    T = 0.3
    soft = rk.KMeansLayer(C, T, "softmax", metric="cosine")
    F_T = w @ (1.0 - T * torch.logsumexp(cos / T, dim=1))
    torch.testing.assert_close(soft.objective(X, w), F_T)
    J = float(w @ (1.0 - cos.amax(dim=1)))
    assert J - T * float(w.sum()) * math.log(4) - 1e-12 <= float(F_T) <= J + 1e-12


def test_layer_gradcheck() -> None:
    g = torch.Generator().manual_seed(2)
    X = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    C = torch.randn(3, 3, generator=g, dtype=torch.float64)
    layer = rk.KMeansLayer(C, 0.5, "entmax15", metric="cosine")
    assert torch.autograd.gradcheck(lambda x, c: rk.KMeansLayer(c.detach(), 0.5, "entmax15",
                                                                metric="cosine")(x), (X, C))
    assert torch.autograd.gradcheck(lambda x: layer.objective(x), (X,))
    layer(X).sum().backward()
    assert layer.centroids.grad is not None


@pytest.mark.parametrize("T", [1.0, 0.05])
def test_as_linear_round_trip(T: float) -> None:
    g = torch.Generator().manual_seed(3)
    X = torch.randn(20, 4, generator=g, dtype=torch.float64) * 4.0
    C = torch.randn(3, 4, generator=g, dtype=torch.float64) * 2.0
    layer = rk.KMeansLayer(C, T, "entmax15", metric="cosine")
    lin = layer.as_linear()
    C_hat = C / C.norm(dim=1, keepdim=True)
    torch.testing.assert_close(lin.weight.detach(), C_hat / T)
    assert torch.equal(lin.bias.detach(), torch.zeros(3, dtype=torch.float64))
    X_hat = X / X.norm(dim=1, keepdim=True)
    torch.testing.assert_close(rk.entmax15(lin(X_hat)), layer(X), rtol=1e-10, atol=1e-12)
    back = rk.KMeansLayer.from_linear(lin, T, "entmax15", metric="cosine")
    assert back.metric == "cosine"
    torch.testing.assert_close(back.centroids.detach(), C_hat, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(back(X), layer(X), rtol=1e-10, atol=1e-12)
    nobias = torch.nn.Linear(4, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        nobias.weight.copy_(lin.weight)
    torch.testing.assert_close(
        rk.KMeansLayer.from_linear(nobias, T, metric="cosine").centroids.detach(), C_hat)


@pytest.mark.parametrize("T", [0.25, 1.0])
def test_as_linear_normalises_centroids_that_left_the_sphere(T: float) -> None:
    """Centroids off unit length (scaled in place, as an optimiser step may leave them): the
    Linear's weight is still ``C_hat / T`` and ``m(lin(X_hat))`` still the layer's output."""
    g = torch.Generator().manual_seed(5)
    X = torch.randn(20, 4, generator=g, dtype=torch.float64) * 4.0
    C = torch.randn(3, 4, generator=g, dtype=torch.float64)
    layer = rk.KMeansLayer(C, T, "softmax", metric="cosine")
    with torch.no_grad():
        layer.centroids.data.mul_(torch.tensor([[3.0], [0.5], [1.7]], dtype=torch.float64))
    C_now = layer.centroids.detach().clone()
    assert not torch.allclose(C_now.norm(dim=1), torch.ones(3, dtype=torch.float64))
    C_hat = C_now / C_now.norm(dim=1, keepdim=True)
    lin = layer.as_linear()
    torch.testing.assert_close(lin.weight.detach(), C_hat / T, rtol=1e-12, atol=1e-12)
    assert torch.equal(lin.bias.detach(), torch.zeros(3, dtype=torch.float64))
    X_hat = X / X.norm(dim=1, keepdim=True)
    P = torch.softmax(X_hat @ C_hat.T / T, dim=1)  # cos(x, c) / T
    torch.testing.assert_close(layer(X), P, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.softmax(lin(X_hat), dim=1), P, rtol=1e-10, atol=1e-12)


def test_from_linear_cosine_errors() -> None:
    layer = rk.KMeansLayer(torch.randn(3, 2), 0.5, metric="cosine")
    lin = layer.as_linear()
    with pytest.raises(ValueError, match=r"linear.weight rows do not have norm 1/T for "
                                         r"temperature=1"):
        rk.KMeansLayer.from_linear(lin, 1.0, metric="cosine")
    with torch.no_grad():
        lin.bias.fill_(0.3)
    with pytest.raises(ValueError, match=r"linear.bias is not 0 \(max \|b\| 0.3\)"):
        rk.KMeansLayer.from_linear(lin, 0.5, metric="cosine")
    ok = rk.KMeansLayer.from_linear(lin, 1.0, metric="cosine", check_bias=False)
    torch.testing.assert_close(ok.centroids.norm(dim=1), torch.ones(3))
    with pytest.raises(ValueError, match=r"^metric must be one of 'sqeuclidean', 'cosine'; "
                                         r"got 'l2'$"):
        rk.KMeansLayer.from_linear(lin, 0.5, metric="l2")


def test_layer_metric_is_validated_and_kept() -> None:
    assert rk.KMeansLayer(torch.randn(2, 3)).metric == "sqeuclidean"
    with pytest.raises(ValueError, match=r"^metric must be one of 'sqeuclidean', 'cosine'; "
                                         r"got 'euclidean'$"):
        rk.KMeansLayer(torch.randn(2, 3), metric="euclidean")
    layer = rk.KMeansLayer(torch.randn(2, 3), 0.5, metric="cosine")
    with pytest.raises(ValueError, match=r"^metric must be one of .*; got 3$"):
        layer.metric = 3  # type: ignore[assignment]
    assert "metric='cosine'" in repr(layer)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    other = rk.KMeansLayer(torch.randn(2, 3))
    other.load_state_dict(torch.load(buffer, weights_only=False))
    assert other.metric == "cosine"
    state = other.state_dict()
    state["_extra_state"] = {"temperature": 1.0, "assignment": "softmax"}  # saved before metrics
    other.load_state_dict(state)
    assert other.metric == "sqeuclidean"


def test_layer_zero_rows() -> None:
    C = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"^centroids has a zero row \(row 1; 2 in all\); "
                                         r"metric='cosine' needs every row"):
        rk.KMeansLayer(C, metric="cosine")
    rk.KMeansLayer(C)  # a zero centroid is fine for sqeuclidean
    layer = rk.KMeansLayer(torch.eye(2), metric="cosine")
    X = torch.ones(2, 3, 2)
    X[1, 2] = 0.0
    with pytest.raises(ValueError, match=r"^X has a zero row \(row \(1, 2\); 1 in all\)"):
        layer(X)


def test_normalize_rows_extreme_scales() -> None:
    X = torch.tensor([[1e-200, 1e-200], [1e200, -1e200], [3.0, 4.0]], dtype=torch.float64)
    expected = torch.tensor([[1.0, 1.0], [1.0, -1.0], [3.0, 4.0]], dtype=torch.float64)
    expected = expected / expected.norm(dim=1, keepdim=True)
    torch.testing.assert_close(normalize_rows(X), expected, rtol=1e-15, atol=0.0)
    C = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    fallback = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert torch.equal(project_rows(C, fallback), torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert list(METRICS) == ["sqeuclidean", "cosine"]


# -- the solvers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("assignment", "T"), [("softmax", 0.1), ("entmax15", 0.05), ("hard", 0.0)])
def test_spherical_update_matches_reference(assignment: str, T: float) -> None:
    rng = np.random.default_rng(4)
    X = directions(seed=4)
    w = rng.uniform(0.1, 2.0, size=X.shape[0])
    C0 = unit(rng.normal(size=(4, X.shape[1])))
    data = Data(torch.as_tensor(X), torch.as_tensor(w), metric="cosine", chunk_size=17)
    st = cluster_stats(data, torch.as_tensor(C0), T, assignment)
    C1, n_empty = mean_update(data, torch.as_tensor(C0), st)
    assert n_empty == 0
    Xh = unit(X)
    cos = Xh @ C0.T
    if assignment == "hard":
        R = np.eye(4)[cos.argmax(axis=1)]
    else:
        R = get_assignment(assignment).forward(torch.as_tensor(cos / T), dim=1).numpy()
    M = (R * w[:, None]).T @ Xh  # (k, d) weighted member sums of the normalised rows
    np.testing.assert_allclose(C1.numpy(), unit(M), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(st.inertia, spherical_objective(X, C0, w), rtol=1e-10)
    if assignment == "softmax":
        F_T = w @ (1.0 - T * np.log(np.exp(cos / T).sum(axis=1)))
        np.testing.assert_allclose(st.objective, F_T, rtol=1e-10)


def test_data_keeps_the_caller_array() -> None:
    X = torch.as_tensor(directions(seed=5))
    before = X.clone()
    data = Data(X, metric="cosine")
    assert torch.equal(X, before)
    torch.testing.assert_close(data.X.norm(dim=1), torch.ones(X.shape[0], dtype=X.dtype))
    with pytest.raises(ValueError, match=r"^metric must be one of"):
        Data(X, metric="cos")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [1, 3, 64, 784, 30000])
def test_unit_rows_reads_normalised_rows_as_they_are(dtype: torch.dtype, d: int) -> None:
    """``normalize_rows``'s output is unit rows to ``UNIT_TOLERANCE`` (so ``unit_rows`` returns
    it, the same storage, and normalising twice reads the same rows as once); rows a little
    further off, or rows that carry a gradient, are normalised (a new tensor)."""
    gen = torch.Generator().manual_seed(d)
    X = torch.randn(2000 if d < 10000 else 50, d, generator=gen, dtype=dtype)
    X[::7] *= 1e3
    Xn = normalize_rows(X)
    assert unit_rows(Xn).data_ptr() == Xn.data_ptr()
    assert unit_rows(X).data_ptr() != X.data_ptr()
    assert torch.equal(unit_rows(X), Xn)
    eps = torch.finfo(dtype).eps
    off = Xn.clone()
    off[3] *= 1.0 + 2 * UNIT_TOLERANCE * eps  # ||x||^2 about 1 + 4 UNIT_TOLERANCE eps
    assert unit_rows(off).data_ptr() != off.data_ptr()
    torch.testing.assert_close(unit_rows(off), normalize_rows(off), rtol=0.0, atol=0.0)
    Xg = Xn.clone().requires_grad_(True)
    out = unit_rows(Xg)
    assert out is not Xg
    v = torch.randn(Xn.shape, generator=gen, dtype=dtype)
    (g,) = torch.autograd.grad((out * v).sum(), Xg)
    (ref,) = torch.autograd.grad((normalize_rows(Xg) * v).sum(), Xg)
    assert torch.equal(g, ref)


def test_a_cosine_fit_of_unit_rows_is_the_fit_of_their_rows_bit_for_bit() -> None:
    """Rows and ``normalize_rows`` of them give the same fit, bit for bit, dense or CSR; the
    pass context of unit rows holds the caller's rows (no copy) and never writes them."""
    X = directions(seed=9, k=4, spread=0.5).astype(np.float32) * 3.0
    Xn = normalize_rows(torch.from_numpy(X)).numpy()
    before = Xn.copy()
    a = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(X)
    b = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(Xn)
    assert np.array_equal(a.cluster_centers_, b.cluster_centers_)
    assert np.array_equal(a.labels_, b.labels_)
    assert a.inertia_ == b.inertia_
    assert np.array_equal(Xn, before)
    Xt = torch.from_numpy(Xn)
    assert Data(Xt, metric="cosine").X.data_ptr() == Xt.data_ptr()
    Xs = sp.csr_matrix(np.where(np.abs(Xn) > 0.1, Xn, 0.0))  # sparse rows, unit after this
    Xs = sp.csr_matrix(normalize_rows(torch.from_numpy(Xs.toarray())).numpy())
    rows = SparseRows.from_scipy(Xs, torch.float32, torch.device("cpu"))
    assert rows.unit_rows() is rows  # the stored entries as they are
    scaled = SparseRows.from_scipy(Xs * 1.001, torch.float32, torch.device("cpu")).unit_rows()
    torch.testing.assert_close(scaled.val, rows.val)
    c = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(Xs)
    dense = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(Xs.toarray())
    assert np.array_equal(c.labels_, dense.labels_)
    np.testing.assert_allclose(c.cluster_centers_, dense.cluster_centers_, rtol=1e-5,
                               atol=1e-6)


def test_hard_fit_equals_reference_spherical_lloyd() -> None:
    X = directions(seed=6, k=5, spread=0.35)
    rng = np.random.default_rng(6)
    C0 = X[rng.choice(X.shape[0], 5, replace=False)] * 3.0  # any length: projected
    est = rk.RBFKMeans(5, assignment="hard", metric="cosine", init=C0, tol=0.0).fit(X)
    C_ref, labels_ref = spherical_lloyd(X, C0)
    np.testing.assert_allclose(est.cluster_centers_, C_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(est.labels_, labels_ref)
    assert est.inertia_ == pytest.approx(spherical_objective(X, C_ref), rel=1e-10)
    # the engine's Lloyd on a cosine Data is the same thing
    res = lloyd(Data(torch.as_tensor(X), metric="cosine"), torch.as_tensor(C0))
    np.testing.assert_allclose(res.C.numpy(), C_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("assignment", ["entmax15", "softmax"])
def test_annealed_fit_ends_on_a_spherical_lloyd_fixed_point(assignment: str) -> None:
    X = directions(seed=7, k=4, spread=0.3)
    est = rk.RBFKMeans(4, assignment=assignment, metric="cosine", random_state=0).fit(X)
    C = est.cluster_centers_
    np.testing.assert_allclose(np.linalg.norm(C, axis=1), 1.0, rtol=1e-12)
    C_next, labels = spherical_lloyd_step(X, C)
    np.testing.assert_array_equal(labels, est.labels_)
    np.testing.assert_allclose(C_next, C, rtol=1e-10, atol=1e-12)
    assert est.inertia_ == pytest.approx(spherical_objective(X, C), rel=1e-10)
    cos = unit(X) @ C.T
    np.testing.assert_allclose(est.transform(X), 1.0 - cos, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(est.predict(X), cos.argmax(axis=1))
    assert est.score(X) == pytest.approx(-est.inertia_, rel=1e-12)
    T = 0.05
    R = get_assignment(assignment).forward(torch.as_tensor(cos / T), dim=1).numpy()
    np.testing.assert_allclose(est.predict_proba(X, temperature=T), R, rtol=1e-9, atol=1e-12)
    layer = est.to_layer(temperature=T)
    assert layer.metric == "cosine"
    np.testing.assert_allclose(layer(torch.as_tensor(X)).detach().numpy(), R, rtol=1e-9,
                               atol=1e-12)
    assert est.history_[-1]["inertia"] >= est.inertia_ - 1e-9  # spherical units throughout
    assert est.critical_temperature_ > 0
    assert len(est.temperatures_) > 1


def test_estimator_critical_temperature_is_the_spherical_one() -> None:
    X = directions(seed=8)
    est = rk.RBFKMeans(4, assignment="entmax15", metric="cosine", random_state=0).fit(X)
    Xh = unit(X)
    mu = Xh.mean(axis=0)
    P = np.eye(X.shape[1]) - np.outer(mu, mu) / (mu @ mu)
    cov = np.cov(Xh, rowvar=False, bias=True)
    lam = np.linalg.eigvalsh(P @ cov @ P).max()
    expected = math.sqrt(4) * lam / np.linalg.norm(mu)
    assert est.critical_temperature_ == pytest.approx(expected, rel=1e-9)
    assert critical_temperature(torch.as_tensor(X), "entmax15", 4,
                                metric="cosine") == pytest.approx(expected, rel=1e-9)
    geometric = rk.RBFKMeans(4, assignment="entmax15", metric="cosine", schedule="geometric",
                             random_state=0).fit(X)
    assert geometric.temperatures_[0] == pytest.approx(1.2 * expected, rel=1e-9)
    # the event-driven ladder anneals the unit rows as Euclidean points: it starts at 0.8 times
    # their Euclidean first split, sqrt(k) lambda_max(Cov x_hat)
    euclidean = math.sqrt(4) * np.linalg.eigvalsh(cov).max()
    assert est.temperatures_[0] == pytest.approx(0.8 * euclidean, rel=1e-9)


def test_sphere_spread_matches_numpy() -> None:
    rng = np.random.default_rng(9)
    Xh = unit(directions(seed=9))
    w = rng.uniform(0.0, 2.0, size=Xh.shape[0])
    mean_var, lam, r = sphere_spread(torch.as_tensor(Xh), torch.as_tensor(w), chunk_size=7)
    mu = w @ Xh / w.sum()
    cov = np.cov(Xh, rowvar=False, bias=True, aweights=w)
    u = mu / np.linalg.norm(mu)
    P = np.eye(Xh.shape[1]) - np.outer(u, u)
    assert r == pytest.approx(np.linalg.norm(mu), rel=1e-12)
    assert lam == pytest.approx(np.linalg.eigvalsh(P @ cov @ P).max(), rel=1e-10)
    assert mean_var == pytest.approx(np.trace(cov) / Xh.shape[1], rel=1e-12)
    assert sphere_eigmax(0.5, 0.25) == 2.0
    assert sphere_eigmax(0.5, 0.0) == 0.5 / MIN_MEAN_NORM


def two_groups(a: float, n: int = 100, noise: float = 0.02, seed: int = 10) -> np.ndarray:
    """Two tight groups of unit rows at angles +-a from the z axis, in the x-z plane."""
    rng = np.random.default_rng(seed)
    centres = np.array([[math.sin(a), 0.0, math.cos(a)], [-math.sin(a), 0.0, math.cos(a)]])
    return unit(np.repeat(centres, n, axis=0) + noise * rng.normal(size=(2 * n, 3)))


@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax"])
def test_first_split_at_the_predicted_temperature(assignment: str) -> None:
    a = math.radians(50.0)
    X = torch.as_tensor(two_groups(a))
    Tc = critical_temperature(X, assignment, 2, metric="cosine")
    _, lam, r = sphere_spread(X)
    factor = {"softmax": 1.0, "entmax15": math.sqrt(2.0), "sparsemax": 2.0}[assignment]
    # about sin^2 a / cos a for softmax; the Euclidean rule on the normalised rows would say
    # factor * lambda_max(Sigma), about sin^2 a: far outside the ladder's resolution below
    assert Tc == pytest.approx(factor * math.sin(a) ** 2 / math.cos(a), rel=0.05)
    euclidean = factor * np.linalg.eigvalsh(np.cov(X.numpy(), rowvar=False, bias=True)).max()
    ratio = 0.95
    ladder = geometric_schedule(1.3 * Tc, 0.7 * Tc, ratio)
    data = Data(X, metric="cosine")
    mean_dir = X.mean(dim=0) / X.mean(dim=0).norm()
    res = anneal(data, mean_dir.repeat(2, 1), ladder, assignment, max_iter=20000, tol=1e-22,
                 perturbation=1e-6, generator=torch.Generator().manual_seed(0),
                 stop_when_hard=False, rebalance=False)
    gaps = [float((h["C"][0] - h["C"][1]).norm()) for h in res.history]  # type: ignore[index]
    split = next(i for i, g in enumerate(gaps) if g > 1e-2)
    T_split = res.temperatures[split]
    # no split above T_c, a clear one at the first rung below it
    assert res.temperatures[split - 1] >= Tc > T_split >= ratio * Tc
    assert max(gaps[:split]) < 1e-4
    assert not T_split <= euclidean < res.temperatures[split - 1]
    assert lam > 0
    assert 0 < r < 1


# -- weights, online, batches, the gradient solver ----------------------------------------------


def test_weights_equal_repeated_rows() -> None:
    X = directions(n_per=15, seed=11, spread=0.2)
    rng = np.random.default_rng(11)
    w = rng.integers(1, 4, size=X.shape[0])
    X_rep = np.repeat(X, w, axis=0)
    C0 = X[rng.choice(X.shape[0], 4, replace=False)]
    for kwargs in ({"assignment": "hard", "init": C0, "tol": 0.0}, {"random_state": 0}):
        a = rk.RBFKMeans(4, metric="cosine", **kwargs).fit(X, sample_weight=w)
        b = rk.RBFKMeans(4, metric="cosine", **kwargs).fit(X_rep)
        np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-7, atol=1e-9)
        assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-9)
        assert a.inertia_ == pytest.approx(spherical_objective(X, a.cluster_centers_, w), rel=1e-10)


def test_macqueen_updates_match_reference() -> None:
    X = directions(n_per=10, seed=12)
    rng = np.random.default_rng(12)
    C0 = unit(rng.normal(size=(4, X.shape[1])))
    counts0 = np.array([3.0, 0.0, 1.0, 2.0])
    C, counts = macqueen_updates(torch.as_tensor(X), torch.as_tensor(C0),
                                 torch.as_tensor(counts0), 0.0, "hard", metric="cosine")
    C_ref, n_ref = C0.copy(), counts0.copy()
    for x in unit(X):
        j = int((C_ref @ x).argmax())
        n_ref[j] += 1
        C_ref[j] = C_ref[j] + (x - C_ref[j]) / n_ref[j]
        C_ref[j] /= np.linalg.norm(C_ref[j])
    np.testing.assert_allclose(C.numpy(), C_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(counts.numpy(), n_ref)


def test_partial_fit_and_fit_batches_stay_on_the_sphere() -> None:
    X = directions(n_per=50, seed=13, spread=0.1)
    order = np.random.default_rng(13).permutation(X.shape[0])
    X = X[order]
    online = rk.RBFKMeans(4, metric="cosine", random_state=0)
    for part in np.array_split(X, 5):
        online.partial_fit(part)
        np.testing.assert_allclose(np.linalg.norm(online.cluster_centers_, axis=1), 1.0,
                                   rtol=1e-12)
    assert online.inertia_ == pytest.approx(
        spherical_objective(np.array_split(X, 5)[-1], online.cluster_centers_), rel=1e-10)
    full = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(X)
    batches = rk.RBFKMeans(4, metric="cosine", random_state=0).fit_batches(
        X, batch_size=40, n_epochs=3)
    np.testing.assert_allclose(np.linalg.norm(batches.cluster_centers_, axis=1), 1.0,
                               rtol=1e-12)
    np.testing.assert_array_equal(batches.labels_, batches.predict(X))
    for est in (online, batches):  # well separated directions: close to the full fit
        assert spherical_objective(X, est.cluster_centers_) <= 1.05 * full.inertia_
    full.partial_fit(X[:20])  # continues from the fitted counts, on the sphere
    np.testing.assert_allclose(np.linalg.norm(full.cluster_centers_, axis=1), 1.0, rtol=1e-12)


def test_gradient_solver_equals_lloyd_solver() -> None:
    X = directions(n_per=20, seed=14, spread=0.3)
    kw = {"metric": "cosine", "random_state": 0, "max_swaps": 0, "assignment": "softmax"}
    a = rk.RBFKMeans(4, schedule="geometric", **kw).fit(X)  # the gradient solver's ladder
    b = rk.RBFKMeans(4, solver="gradient", **kw).fit(X)
    np.testing.assert_allclose(b.cluster_centers_, a.cluster_centers_, rtol=1e-8, atol=1e-10)
    c = rk.RBFKMeans(4, solver="gradient", optimizer=lambda p: torch.optim.Adam(p, lr=0.05),
                     max_iter_per_temperature=5, **kw).fit(X)
    np.testing.assert_allclose(np.linalg.norm(c.cluster_centers_, axis=1), 1.0, rtol=1e-12)
    assert c.inertia_ == pytest.approx(spherical_objective(X, c.cluster_centers_), rel=1e-10)


# -- bad input -----------------------------------------------------------------------------------


def test_zero_rows_are_named() -> None:
    X = directions(seed=15)
    X[3] = 0.0
    X[9] = 0.0
    est = rk.RBFKMeans(4, metric="cosine")
    with pytest.raises(ValueError, match=r"^X has a zero row \(row 3; 2 in all\); "
                                         r"metric='cosine' needs every row to have a direction"):
        est.fit(X)
    rk.RBFKMeans(4, random_state=0).fit(X)  # sqeuclidean: a zero row is an ordinary point
    fitted = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(np.delete(X, [3, 9], axis=0))
    for method in (fitted.predict, fitted.transform, fitted.predict_proba, fitted.score):
        with pytest.raises(ValueError, match=r"X has a zero row \(row 3"):
            method(X)
    with pytest.raises(ValueError, match=r"X has a zero row \(row 3"):
        rk.RBFKMeans(4, metric="cosine").partial_fit(X)


def test_bad_init_and_metric() -> None:
    X = directions(seed=16)
    C0 = unit(X[:4])
    C0[2] = 0.0
    with pytest.raises(ValueError, match=r"^init has a zero row \(row 2; 1 in all\)"):
        rk.RBFKMeans(4, metric="cosine", init=C0).fit(X)
    balanced = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    with pytest.raises(ValueError, match=r"^init='mean' with metric='cosine' needs a mean "
                                         r"direction; the weighted mean of the normalised rows "
                                         r"is 0"):
        rk.RBFKMeans(2, metric="cosine", init="mean").fit(balanced)
    est = rk.RBFKMeans(2, metric="cosine", init="k-means++", random_state=0).fit(balanced)
    np.testing.assert_allclose(np.linalg.norm(est.cluster_centers_, axis=1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match=r"^metric must be one of 'sqeuclidean', 'cosine'; "
                                         r"got 'manhattan'$"):
        rk.RBFKMeans(4, metric="manhattan").fit(X)


def test_cli_fit_cosine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    X = directions(n_per=10, seed=17)
    src = tmp_path / "dirs.npy"
    np.save(src, X)
    assert main(["fit", str(src), "-k", "4", "--metric", "cosine", "--out", str(tmp_path)]) == 0
    out, _ = capsys.readouterr()
    est = rk.RBFKMeans(4, metric="cosine", random_state=0).fit(X)
    C = np.load(tmp_path / "dirs_centers.npy")
    np.testing.assert_array_equal(C, est.cluster_centers_)
    np.testing.assert_allclose(np.linalg.norm(C, axis=1), 1.0, rtol=1e-12)
    assert "metric=cosine" in out
    assert f"inertia={est.inertia_:.6g}" in out
    X[5] = 0.0
    np.save(src, X)
    assert main(["fit", str(src), "-k", "4", "--metric", "cosine", "--force"]) == 2
    _, err = capsys.readouterr()
    assert "rbfkmeans fit: error: X has a zero row (row 5; 1 in all)" in err


def test_wide_float32_rows_are_normalised_by_float64_sums() -> None:
    """Rows of 300,000 float32 features: ``vector_norm``'s float32 sums left them 7e-6 off the
    unit sphere and a cosine fit's ``inertia_`` 2.4e-6 off (now 1.3e-7); the norms are float64
    sums, the gradient stays that of the float64 computation, and ``unit_rows`` reads the
    result as it is."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(6, 300_000, generator=gen) + 0.3
    Xn = normalize_rows(X)
    assert Xn.dtype == torch.float32
    torch.testing.assert_close(Xn.double().square().sum(1), torch.ones(6, dtype=torch.float64),
                               rtol=0.0, atol=4 * torch.finfo(torch.float32).eps)
    assert unit_rows(Xn).data_ptr() == Xn.data_ptr()
    batched = normalize_rows(X.reshape(2, 3, -1))  # (..., d) rows alike
    assert torch.equal(batched.reshape(6, -1), Xn)
    Xg = X.clone().requires_grad_(True)
    v = torch.randn(X.shape, generator=gen)
    (g,) = torch.autograd.grad((normalize_rows(Xg) * v).sum(), Xg)
    X64 = X.double().requires_grad_(True)
    (g64,) = torch.autograd.grad((normalize_rows(X64) * v.double()).sum(), X64)
    torch.testing.assert_close(g.double(), g64, rtol=1e-4, atol=1e-9)
    fit = rk.RBFKMeans(2, metric="cosine", random_state=0).fit(X.numpy())
    A = X.double().numpy()
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    C = fit.cluster_centers_.astype(np.float64)
    J = float((1.0 - (A * C[fit.labels_]).sum(1)).sum())
    assert fit.inertia_ == pytest.approx(J, rel=1e-6)
