"""RBFKMeans: the estimator against independent references.

References: ``sklearn.cluster.KMeans(algorithm="lloyd")`` from the same start (hard mode), a
NumPy Lloyd step (fixed points), ``scipy.spatial.distance.cdist`` (transform), ``scipy`` softmax
and the ``entmax`` package (memberships and soft means), repeated rows (integer sample weights),
``numpy.linalg.eigvalsh`` of the covariance (critical temperature).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist
from scipy.special import softmax as sp_softmax
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

import rbfkmeans.costs as costs_mod
import rbfkmeans.refine as refine_mod
import rbfkmeans.runs as runs_mod
from rbfkmeans import KMeansLayer, RBFKMeans
from rbfkmeans._parameters import PARAMETERS as _PARAMETERS
from rbfkmeans.gradient import gradient_step
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data
from rbfkmeans.publish import distinct_rows
from rbfkmeans.splits import Subsample

entmax = pytest.importorskip("entmax")

SOFT = ["entmax15", "softmax", "sparsemax"]
ALL = [*SOFT, "hard"]




def blobs(n: int = 90, k: int = 4, d: int = 3, seed: int = 0, std: float = 1.0) -> np.ndarray:
    X, _ = make_blobs(n, n_features=d, centers=k, cluster_std=std, random_state=seed)
    return X


X0 = blobs()


@functools.cache
def fitted(assignment: str = "entmax15") -> RBFKMeans:
    """``RBFKMeans(4, assignment, random_state=0)`` fitted on ``X0``, shared by the tests that
    only read it (never call fit/partial_fit on it)."""
    return RBFKMeans(4, assignment=assignment, random_state=0).fit(X0)


# -- independent references ------------------------------------------------------------------


def ref_memberships(X: np.ndarray, C: np.ndarray, T: float, assignment: str) -> np.ndarray:
    """``m(-d / 2T)`` (n, k) in float64 from ``cdist``; ``entmax`` package for the sparse maps."""
    D = cdist(X, C, "sqeuclidean")
    if assignment == "hard" or T == 0:
        return np.eye(C.shape[0])[D.argmin(1)]
    z = -D / (2 * T)
    if assignment == "softmax":
        return sp_softmax(z, axis=1)
    f = entmax.entmax15 if assignment == "entmax15" else entmax.sparsemax
    return f(torch.from_numpy(z), dim=1).numpy()


def lloyd_step(X: np.ndarray, C: np.ndarray, w: np.ndarray | None = None):
    """One hard Lloyd update in NumPy: (labels, new centroids; empty clusters kept)."""
    w = np.ones(len(X)) if w is None else w
    labels = cdist(X, C, "sqeuclidean").argmin(1)
    C_new = C.copy()
    for j in range(C.shape[0]):
        m = labels == j
        if w[m].sum() > 0:
            C_new[j] = (w[m, None] * X[m]).sum(0) / w[m].sum()
    return labels, C_new


def quiet_fit(est: RBFKMeans, X: Any, **kw: Any) -> RBFKMeans:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, **kw)


# -- API and fitted attributes ---------------------------------------------------------------


@pytest.mark.parametrize("assignment", ALL)
def test_fitted_attributes_and_methods(assignment: str) -> None:
    k = 4
    est = RBFKMeans(k, assignment=assignment, random_state=0)
    assert est.fit(X0) is est
    assert est.cluster_centers_.shape == (k, 3)
    assert est.cluster_centers_.dtype == np.float64
    assert est.labels_.shape == (len(X0),)
    assert est.n_features_in_ == 3
    assert isinstance(est.n_iter_, int)
    assert est.n_iter_ >= 1
    np.testing.assert_array_equal(est.predict(X0), est.labels_)
    np.testing.assert_array_equal(
        est.labels_, cdist(X0, est.cluster_centers_, "sqeuclidean").argmin(1)
    )
    inertia = cdist(X0, est.cluster_centers_, "sqeuclidean").min(1).sum()
    assert est.inertia_ == pytest.approx(inertia, rel=1e-10)
    assert est.score(X0) == pytest.approx(-inertia, rel=1e-10)
    np.testing.assert_allclose(est.transform(X0), cdist(X0, est.cluster_centers_), atol=1e-7)
    np.testing.assert_allclose(est.fit_transform(X0), cdist(X0, est.cluster_centers_), atol=1e-7)
    np.testing.assert_array_equal(est.fit_predict(X0), est.labels_)
    if assignment == "hard":
        assert est.temperatures_.size == 0
        assert est.history_ == []
    else:
        assert est.temperatures_.size == len(est.history_) >= 1
        for h, T in zip(est.history_, est.temperatures_, strict=True):
            assert set(h) >= {"T", "centers", "objective", "inertia", "n_soft", "n_iter"}
            assert h["T"] == T
            assert h["centers"].shape == (k, 3)
            assert h["objective"] <= h["inertia"] * (1 + 1e-12)  # F_T <= J
    layer = est.to_layer()
    assert isinstance(layer, KMeansLayer)
    np.testing.assert_array_equal(layer.centroids.detach().numpy(), est.cluster_centers_)


def test_chunked_fit_equals_unchunked() -> None:
    a = fitted()
    b = RBFKMeans(4, random_state=0, chunk_size=32).fit(X0)
    np.testing.assert_allclose(b.cluster_centers_, a.cluster_centers_, atol=1e-10)
    np.testing.assert_allclose(b.temperatures_, a.temperatures_, rtol=1e-12)
    np.testing.assert_allclose(b.predict_proba(X0), a.predict_proba(X0), atol=1e-10)


def test_torch_tensor_and_list_input() -> None:
    a = RBFKMeans(3, random_state=0).fit(X0)
    b = RBFKMeans(3, random_state=0).fit(torch.from_numpy(X0))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    c = RBFKMeans(3, assignment="hard", init=X0[:3].tolist()).fit(X0.tolist())
    d = RBFKMeans(3, assignment="hard", init=X0[:3]).fit(X0)
    np.testing.assert_array_equal(c.cluster_centers_, d.cluster_centers_)


# -- hard mode is scikit-learn's Lloyd -------------------------------------------------------


def compare_to_sklearn(est: RBFKMeans, km: KMeans, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, atol=atol)
    np.testing.assert_array_equal(est.labels_, km.labels_)
    assert est.inertia_ == pytest.approx(km.inertia_, rel=1e-6)
    assert est.n_iter_ == km.n_iter_


@pytest.mark.parametrize("tol", [0.0, 1e-4, 1e-2])
def test_hard_equals_sklearn_lloyd_from_same_init(tol: float) -> None:
    X = blobs(200, k=5, d=4, std=2.5)
    C0 = X[np.random.RandomState(1).choice(len(X), 5, replace=False)]
    km = KMeans(5, init=C0, n_init=1, tol=tol, algorithm="lloyd").fit(X)
    est = RBFKMeans(5, assignment="hard", init=C0, tol=tol).fit(X)
    compare_to_sklearn(est, km)


def test_lloyd_tol_stops_at_the_first_small_enough_shift() -> None:
    """``tol > 0`` stops at the first iteration whose squared shift ``sum_j ||c_j^new - c_j||^2``
    is at most ``tol``, not earlier and not later, while the labels still change. The shifts
    come from the centroids of the runs cut at ``max_iter = 1, 2, ...`` (numpy, float64)."""
    X = torch.from_numpy(np.random.RandomState(0).uniform(size=(1500, 2)))
    C0 = X[:10].clone()
    data = Data(X)
    plain = lloyd(data, C0)
    assert plain.converged
    assert plain.n_iter > 10  # the labels change for a while
    Cs = [C0.numpy()]
    for m in range(1, plain.n_iter):  # iterations after which the labels still change
        cut = lloyd(data, C0, max_iter=m)
        assert cut.n_iter == m
        Cs.append(cut.C.numpy())
    shifts = np.array([((Cs[m] - Cs[m - 1]) ** 2).sum() for m in range(1, len(Cs))])
    assert (np.diff(shifts) > 0).any()  # not monotone: the first one below tol is not the last
    levels = np.unique(shifts)
    # tol between two consecutive shifts (never within rounding of one), all gaps in turn
    tols = [float(np.sqrt(a * b)) for a, b in itertools.pairwise(levels)
            if b > a * (1 + 1e-6)]
    assert len(tols) >= 10
    for tol in tols:
        first = 1 + int(np.flatnonzero(shifts <= tol)[0])
        run = lloyd(data, C0, tol=tol)
        assert run.n_iter == first, tol
        assert run.converged
        np.testing.assert_allclose(run.C.numpy(), Cs[first], rtol=0, atol=1e-12)


def test_hard_equals_sklearn_lloyd_with_sample_weight() -> None:
    # tol=0 (run until the labels settle): scikit-learn scales tol by the *unweighted* feature
    # variance, RBFKMeans by the weighted one (consistent with weights as repeats), so only the
    # strict rule gives the same iteration count on weighted data by construction.
    X = blobs(200, k=5, d=4, std=2.5)
    rng = np.random.RandomState(1)
    w = rng.uniform(0.1, 3.0, len(X))
    C0 = X[rng.choice(len(X), 5, replace=False)]
    km = KMeans(5, init=C0, n_init=1, tol=0.0, algorithm="lloyd").fit(X, sample_weight=w)
    est = RBFKMeans(5, assignment="hard", init=C0, tol=0.0).fit(X, sample_weight=w)
    compare_to_sklearn(est, km)
    assert est.score(X, sample_weight=w) == pytest.approx(-km.inertia_, rel=1e-10)


@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_hard_string_init_runs_sklearn_lloyd_from_its_seeds(init: str, monkeypatch) -> None:
    """Capture every start the estimator draws; scikit-learn's Lloyd from each start gives the
    same runs, and the estimator keeps the best (n_init='auto': 1 for k-means++, 10 for random,
    as scikit-learn)."""
    X = blobs(150, k=6, d=2, std=1.5, seed=3)
    starts: list[np.ndarray] = []
    real = runs_mod.lloyd

    def spy(data, C0, **kw):
        starts.append(C0.detach().numpy().copy())
        return real(data, C0, **kw)

    monkeypatch.setattr(runs_mod, "lloyd", spy)
    est = RBFKMeans(6, assignment="hard", init=init, random_state=0).fit(X)
    assert len(starts) == (1 if init == "k-means++" else 10)
    rows = {tuple(r) for r in X}
    runs = []
    for C0 in starts:
        assert {tuple(r) for r in C0} <= rows  # seeds are data points
        assert len({tuple(r) for r in C0}) == 6  # distinct
        runs.append(KMeans(6, init=C0, n_init=1, algorithm="lloyd").fit(X))
    best = min(runs, key=lambda km: km.inertia_)
    assert est.inertia_ == pytest.approx(best.inertia_, rel=1e-6)
    np.testing.assert_allclose(est.cluster_centers_, best.cluster_centers_, atol=1e-6)


# -- gradient mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", ["entmax15", "softmax"])
def test_gradient_solver_follows_lloyd_solver(assignment: str) -> None:
    """autograd on F_T with eta_j = 1/(2 N_j) is the soft-Lloyd map: the same trajectory."""
    X = blobs(120, k=4, d=3, std=1.5, seed=4)
    a = RBFKMeans(4, assignment=assignment, schedule="geometric", random_state=0).fit(X)
    b = RBFKMeans(4, assignment=assignment, random_state=0, solver="gradient").fit(X)
    # The ladders agree; where a point's largest membership sits within rounding of the one-hot
    # test, one solver may stop a temperature later than the other, so compare the common part.
    m = min(len(a.temperatures_), len(b.temperatures_))
    assert m >= 3
    assert abs(len(a.temperatures_) - len(b.temperatures_)) <= 1
    np.testing.assert_array_equal(b.temperatures_[:m], a.temperatures_[:m])
    for ha, hb in zip(a.history_[:m], b.history_[:m], strict=True):
        np.testing.assert_allclose(hb["centers"], ha["centers"], atol=1e-10, rtol=0)
        assert hb["n_iter"] == ha["n_iter"]
    np.testing.assert_allclose(b.cluster_centers_, a.cluster_centers_, atol=1e-10, rtol=0)
    np.testing.assert_array_equal(b.labels_, a.labels_)
    # one more temperature costs one more iteration at most here (it is already converged)
    assert abs(b.n_iter_ - a.n_iter_) <= abs(len(a.temperatures_) - len(b.temperatures_))


@pytest.mark.parametrize("assignment", ["entmax15", "softmax"])
def test_gradient_solver_with_an_optimizer(assignment: str) -> None:
    X = blobs(120, k=4, d=3, std=1.0, seed=4)
    steps = []

    def adam(params):
        opt = torch.optim.Adam(params, lr=0.1)
        opt.register_step_post_hook(lambda *_: steps.append(1))
        return opt

    b = RBFKMeans(4, assignment=assignment, solver="gradient", optimizer=adam,
                  max_iter_per_temperature=10, cooling=0.7, random_state=0).fit(X)
    a = RBFKMeans(4, assignment=assignment, max_iter_per_temperature=10, cooling=0.7,
                  random_state=0).fit(X)
    assert len(steps) > 0
    assert not np.allclose(b.history_[0]["centers"], a.history_[0]["centers"])  # not soft-Lloyd
    assert np.isfinite(b.cluster_centers_).all()
    best = KMeans(4, n_init=10, random_state=0).fit(X).inertia_
    assert b.inertia_ <= best * 1.01


@pytest.mark.parametrize("assignment", ALL)
@pytest.mark.parametrize("T", [0.3, 3.0])
def test_gradient_step_lands_on_soft_means(assignment: str, T: float) -> None:
    rng = np.random.RandomState(0)
    X = rng.randn(40, 3)
    C = rng.randn(4, 3)
    w = rng.uniform(0.2, 2.0, 40)
    C_new, grad, N = gradient_step(
        torch.from_numpy(X), torch.from_numpy(C), T, assignment, sample_weight=torch.from_numpy(w)
    )
    R = ref_memberships(X, C, T, assignment)  # (n, k)
    N_ref = w @ R
    M = (R * w[:, None]).T @ X / N_ref[:, None]  # soft means m_j
    np.testing.assert_allclose(N.numpy(), N_ref, rtol=1e-10)
    np.testing.assert_allclose(C_new.numpy(), M, atol=1e-10, rtol=0)
    np.testing.assert_allclose(grad.numpy(), 2 * N_ref[:, None] * (C - M), atol=1e-9, rtol=0)


@pytest.mark.parametrize("assignment", SOFT)
def test_bare_objective_gradient_differs_at_finite_temperature(assignment: str) -> None:
    """d/dC of sum r d through r (no entropy) is not 2 N_j (c_j - m_j) at finite T, so its step
    with eta_j = 1/(2 N_j) misses m_j; once every row is one-hot (entmax15/sparsemax at small T)
    r is locally constant and the two coincide."""
    rng = np.random.RandomState(0)
    X = rng.randn(40, 3)
    C = rng.randn(4, 3)
    Xt, Ct = torch.from_numpy(X), torch.from_numpy(C)
    T = 1.0
    relaxed_C, relaxed_g, _ = gradient_step(Xt, Ct, T, assignment)
    bare_C, bare_g, _ = gradient_step(Xt, Ct, T, assignment, objective="bare")
    # the bare gradient, independently: autograd through the reference mapping
    Cp = Ct.clone().requires_grad_(True)
    D = ((Xt[:, None, :] - Cp[None]) ** 2).sum(-1)
    z = -D / (2 * T)
    R = {"softmax": lambda: torch.softmax(z, 1), "entmax15": lambda: entmax.entmax15(z, dim=1),
         "sparsemax": lambda: entmax.sparsemax(z, dim=1)}[assignment]()
    (g_ref,) = torch.autograd.grad((R * D).sum(), Cp)
    np.testing.assert_allclose(bare_g.numpy(), g_ref.numpy(), atol=1e-9)
    diff = np.linalg.norm(bare_g.numpy() - relaxed_g.numpy()) / np.linalg.norm(relaxed_g.numpy())
    assert diff > 1e-2
    assert np.abs(bare_C.numpy() - relaxed_C.numpy()).max() > 1e-3
    if assignment != "softmax":
        T_cold = 1e-6
        assert (ref_memberships(X, C, T_cold, assignment).max(1) == 1).all()
        _, g1, _ = gradient_step(Xt, Ct, T_cold, assignment)
        _, g2, _ = gradient_step(Xt, Ct, T_cold, assignment, objective="bare")
        np.testing.assert_allclose(g2.numpy(), g1.numpy(), atol=1e-10)


def test_gradient_step_rejects_unknown_objective() -> None:
    X = torch.randn(5, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="objective must be 'relaxed' or 'bare'; got 'kl'"):
        gradient_step(X, X[:2], 1.0, "softmax", objective="kl")


# -- empty clusters and degenerate data ------------------------------------------------------


FAR = np.vstack([X0[:3], [[1e3, 1e3, 1e3]]])  # a centroid far from all data
# every mode; the gradient solver (its own relocation code) with a dense and a sparse mapping
MODES = [*((a, "lloyd") for a in ALL), ("softmax", "gradient"), ("sparsemax", "gradient")]


@pytest.mark.parametrize(("assignment", "solver"), MODES)
def test_far_centroid_is_relocated(assignment: str, solver: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        est = RBFKMeans(4, assignment=assignment, init=FAR, solver=solver, random_state=0).fit(X0)
    assert np.isfinite(est.cluster_centers_).all()
    assert np.bincount(est.labels_, minlength=4).min() > 0
    assert np.abs(est.cluster_centers_).max() < 100
    assert np.isfinite(est.predict_proba(X0)).all()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(1, 12), d=st.integers(1, 9),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_distinct_centres_are_counted_as_numpy_unique_counts_rows(seed: int, k: int, d: int,
                                                                   dtype: type) -> None:
    """The count behind the warning (rows compared as bytes, after adding 0 so that -0.0 is
    0.0) equals ``numpy.unique(C, axis=0)``'s, on rows drawn from a few values with signed zeros
    and repeats."""
    rng = np.random.default_rng(seed)
    C = rng.choice(np.array([0.0, -0.0, 1.0, -2.5]), size=(k, d)).astype(dtype)
    C[rng.integers(0, k, size=k // 2)] = C[rng.integers(0, k, size=k // 2)]
    assert distinct_rows(C) == np.unique(C, axis=0).shape[0]
    assert distinct_rows(np.asfortranarray(C)) == np.unique(C, axis=0).shape[0]


@pytest.mark.parametrize("weighted", [False, True])
def test_fit_batches_warns_of_fewer_distinct_centres_as_fit_does(weighted: bool) -> None:
    """Fewer distinct rows of positive weight than clusters: ``fit`` warned as scikit-learn
    does, ``fit_batches`` left coinciding centres silently. Both warn now, from the caller's
    line; an ordinary source does not."""
    X = np.repeat([[0.0, 0.0], [1.0, 2.0], [4.0, 1.0]], 4, axis=0)
    w = None
    if weighted:  # distinct rows, but only three of them weigh
        X = np.random.default_rng(0).normal(size=(12, 2))
        w = np.r_[np.ones(3), np.zeros(9)]
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(3\) found smaller") as rec:
        est = RBFKMeans(5, random_state=0).fit_batches(X, sample_weight=w)
    assert rec[0].filename == __file__
    kept = X if w is None else X[:3]
    assert {tuple(c) for c in est.cluster_centers_} == {tuple(x) for x in kept}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RBFKMeans(4, random_state=0).fit_batches(X0, batch_size=30)


def test_weights_of_any_normal_size_give_the_partition_of_unit_weights() -> None:
    """A common factor changes no cluster: weights of 2^-1000 or 2^1000 fit as unit weights (the
    same labels, ``inertia_`` times the factor), where subnormal ones are refused; float32 data
    refuses weights subnormal in float32 (its compute dtype)."""
    base = RBFKMeans(4, random_state=0).fit(X0)
    for e in (-1000, 1000):
        est = RBFKMeans(4, random_state=0).fit(X0, sample_weight=np.full(90, np.ldexp(1.0, e)))
        np.testing.assert_array_equal(est.labels_, base.labels_)
        assert est.inertia_ == pytest.approx(np.ldexp(base.inertia_, e), rel=1e-12)
    with pytest.raises(ValueError, match=r"at least 1\.18e-38 \(the smallest normal number of "
                                         r"float32, the dtype the fit computes in\); got 1e-40"):
        RBFKMeans(4).fit(X0.astype(np.float32), sample_weight=np.full(90, 1e-40))
    # a finite total whose objective overflows float64: the frame's refusal names both
    with pytest.raises(ValueError, match=r"X spreads too far for float64: .* total weight of "
                                         r"1e\+308\).* Rescale the data or sample_weight$"):
        RBFKMeans(4).fit(X0, sample_weight=np.r_[np.ones(80), np.full(10, 1e307)])


def test_fit_batches_names_a_source_of_dictionaries() -> None:
    """A ``DataLoader`` of dictionaries (``{"x": ..., "y": ...}``) failed inside a float
    conversion ('float() argument must be ... not dict'); the error now names the source and
    its keys, a fitted model is left as it was, and the rows passed out of it fit."""
    loader = [{"x": torch.from_numpy(X0[i:i + 30]), "y": i} for i in range(0, 90, 30)]
    est = RBFKMeans(4, random_state=0).fit(X0)
    centres = est.cluster_centers_.copy()
    with pytest.raises(TypeError, match=r"^batches must yield arrays .* got a dict with keys "
                                        r"'x', 'y': pass the rows"):
        est.fit_batches(loader)
    np.testing.assert_array_equal(est.cluster_centers_, centres)
    rows = RBFKMeans(4, random_state=0).fit_batches([b["x"] for b in loader])
    want = RBFKMeans(4, random_state=0).fit_batches([X0[i:i + 30] for i in range(0, 90, 30)])
    np.testing.assert_array_equal(rows.cluster_centers_, want.cluster_centers_)


def test_far_centroid_relocation_as_sklearn() -> None:
    km = KMeans(4, init=FAR, n_init=1, algorithm="lloyd").fit(X0)
    est = RBFKMeans(4, assignment="hard", init=FAR).fit(X0)
    compare_to_sklearn(est, km)


@pytest.mark.parametrize(("assignment", "solver"), MODES)
@pytest.mark.parametrize("case", ["identical", "two_distinct"])
def test_fewer_distinct_points_than_clusters(assignment: str, solver: str, case: str) -> None:
    if case == "identical":
        X, distinct = np.full((10, 2), 3.5), 1
    else:
        X, distinct = np.repeat([[0.0, 0.0], [1.0, 2.0]], 5, axis=0), 2
    est = RBFKMeans(4, assignment=assignment, solver=solver, random_state=0)
    with pytest.warns(ConvergenceWarning, match=rf"distinct clusters \({distinct}\) found smaller"):
        est.fit(X)
    assert np.isfinite(est.cluster_centers_).all()
    assert est.inertia_ == 0.0
    assert {tuple(c) for c in est.cluster_centers_} == {tuple(x) for x in X}
    P = est.predict_proba(X)
    assert np.isfinite(P).all()
    np.testing.assert_allclose(P.sum(1), 1.0)
    assert np.isfinite(est.transform(X)).all()


def test_the_warning_counts_clusters_whose_centres_differ_only_by_rounding_once() -> None:
    """Five distinct rows a hundred times each, k = 8: centres that coincide in the fit's frame
    leave it a few ulps apart, and the warning had said 6 distinct clusters; it counts the
    clusters of positive weight, as scikit-learn counts labels, from the caller's line."""
    X = np.repeat(np.random.default_rng(0).normal(size=(5, 3)), 100, axis=0)
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(5\) found smaller") as rec:
        est = RBFKMeans(8, random_state=0).fit(X)
    assert rec[0].filename == __file__
    assert np.unique(est.labels_).size == 5
    w = np.r_[np.zeros(100), np.ones(400)]  # one of the five weighs nothing
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(4\) found smaller"):
        RBFKMeans(5, random_state=0).fit(X, sample_weight=w)

# -- sample weights --------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", ALL)
def test_integer_weights_equal_repeated_rows(assignment: str) -> None:
    X = blobs(60, k=3, d=2, std=1.5, seed=5)
    sw = np.random.RandomState(0).randint(0, 4, len(X))  # zeros included
    a = RBFKMeans(3, assignment=assignment, random_state=0).fit(X, sample_weight=sw)
    b = RBFKMeans(3, assignment=assignment, random_state=0).fit(np.repeat(X, sw, axis=0))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-10)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-10)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.temperatures_, b.temperatures_, rtol=1e-10)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), atol=1e-10)
    assert a.score(X, sample_weight=sw) == pytest.approx(b.score(np.repeat(X, sw, axis=0)))


@pytest.mark.parametrize("assignment", ["entmax15", "hard"])
def test_unit_weights_equal_no_weights(assignment: str) -> None:
    a = fitted(assignment)
    b = RBFKMeans(4, assignment=assignment, random_state=0).fit(X0, sample_weight=np.ones(90))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-12)


def test_weights_move_the_centres() -> None:
    X = np.array([[0.0], [1.0], [10.0], [11.0]])
    est = RBFKMeans(2, assignment="hard", init=np.array([[0.0], [10.0]]))
    est.fit(X, sample_weight=[3.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(est.cluster_centers_, [[0.25], [10.0]])
    assert est.inertia_ == pytest.approx(3 * 0.25**2 + 0.75**2)


# -- validation ------------------------------------------------------------------------------

BAD_PARAMS: dict[str, Any] = {
    "n_clusters": 0,
    "assignment": "gumbel",
    "metric": "manhattan",
    "schedule": "linear",
    "subsample": 0,
    "fit_rows": 0,
    "init": "kmeans",
    "n_init": 0,
    "max_iter": 0,
    "tol": -1.0,
    "T_start": 0.0,
    "T_end": -1.0,
    "cooling": 1.0,
    "max_iter_per_temperature": 2.5,
    "stop_gap": float("inf"),
    "temperature": -0.5,
    "perturbation": float("nan"),
    "max_swaps": -1,
    "solver": "adam",
    "optimizer": "adam",
    "chunk_size": 0,
    "random_state": "seed",
    "device": 3,
    "dtype": "float16",
    "verbose": -1,
}


def test_every_parameter_has_a_bad_value_here() -> None:
    assert set(BAD_PARAMS) == set(_PARAMETERS)


@pytest.mark.parametrize(("name", "value"), BAD_PARAMS.items())
def test_bad_parameter_is_named_with_its_value(name: str, value: Any) -> None:
    est = RBFKMeans(**{name: value})
    pattern = rf"^{name} must be .*; got {re.escape(repr(value))}$"
    with pytest.raises(ValueError, match=pattern):
        est.fit(X0)
    with pytest.raises(ValueError, match=pattern):
        RBFKMeans(**{name: value}).partial_fit(X0)


def test_more_bad_parameter_values() -> None:
    for name, value in [("n_clusters", True), ("n_clusters", 2.0), ("cooling", 0.0),
                        ("T_start", float("inf")), ("n_init", "many"), ("tol", None)]:
        with pytest.raises(ValueError, match=rf"^{name} must be"):
            RBFKMeans(**{name: value}).fit(X0)


@pytest.mark.parametrize(
    ("X", "match"),
    [
        (np.where(np.arange(270).reshape(90, 3) == 7, np.nan, X0), "Input X contains NaN"),
        (np.where(np.arange(270).reshape(90, 3) == 7, np.inf, X0), "Input X contains infinity"),
        (X0[:, 0], "Expected 2D array, got 1D array"),
        (X0[None], "Found array with dim 3"),
        (X0[:0], "0 sample"),
        (X0[:3], r"n_samples=3 should be >= n_clusters=4"),
        (np.array([["a", "b"]] * 5, dtype=object), "could not convert"),
    ],
)
def test_bad_X(X: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RBFKMeans(4).fit(X)


def test_finite_values_whose_sum_overflows_are_accepted() -> None:
    """NaN and inf are caught by one sum of ``X`` (torch's, on every core); finite float32 values
    whose sum overflows float32 make that sum inf too, and then scikit-learn's exact check
    clears them: the fit runs (in a rescaled frame) as at scale 1, and predict agrees."""
    X = (X0 * 1e37).astype(np.float32)  # |x| up to ~1e38: the sum of 270 of them overflows
    with np.errstate(over="ignore"):
        assert not np.isfinite(X.sum(dtype=np.float32))
    est = RBFKMeans(4, random_state=0).fit(X)
    ref = RBFKMeans(4, random_state=0).fit(X0.astype(np.float32))
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


@pytest.mark.parametrize(
    ("sw", "match"),
    [
        (-np.ones(90), r"sample_weight must be >= 0; got .*-1\.0.* at index 0"),
        (np.r_[np.ones(89), np.nan], r"sample_weight must be finite; got .*nan.* at index 89"),
        (np.r_[np.ones(89), np.inf], r"sample_weight must be finite; got .*inf.* at index 89"),
        (np.ones(5), r"sample_weight must be a scalar or have shape \(90,\) to match X; got "
                     r"shape \(5,\)"),
        (np.nan, r"sample_weight must be finite; got nan at index 0"),
        (-2.0, r"sample_weight must be >= 0; got -2\.0 at index 0"),
        (np.ones((90, 1)), r"sample_weight must be a scalar or have shape \(90,\)"),
        # every weight subnormal: sums and means kept few bits, and the partition came out
        # wrong (adjusted Rand 0.44 against unit weights at 1e-315), silently
        (np.full(90, 1e-310), r"sample_weight must have a largest weight of at least 2\.23e-308 "
                              r"\(the smallest normal number of float64, .* got 1e-310 at index 0"),
        # a total beyond float64: 'X spreads too far ... largest |x - mean| nan', naming X
        (np.r_[np.ones(70), np.full(20, 1e307)],
         r"sample_weight must have a sum finite in float64 \(the dtype the fit computes in, up "
         r"to 1\.8e\+308\); got a sum of inf \(the largest weight 1e\+307 at index 70, over 90 "
         r"rows\)"),

    ],
)
def test_bad_sample_weight(sw: Any, match: str) -> None:
    for call in (lambda: RBFKMeans(4).fit(X0, sample_weight=sw),
                 lambda: RBFKMeans(4).partial_fit(X0, sample_weight=sw),
                 lambda: RBFKMeans(4).fit_batches(X0, sample_weight=sw)):
        with pytest.raises(ValueError, match=match):
            call()
    fitted = RBFKMeans(4, assignment="hard", random_state=0).fit(X0)
    with pytest.raises(ValueError, match=match):
        fitted.score(X0, sample_weight=sw)


@pytest.mark.parametrize("params", [
    {}, {"assignment": "hard"}, {"metric": "cosine"}, {"schedule": "geometric"},
    {"fit_rows": 800}, {"schedule": "k-means++", "n_init": 2},
    {"assignment": "hard", "init": "random"}, {"race": True},
])
def test_rows_of_weight_zero_have_no_influence_on_a_fit(
        params: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stage (the frame, the annealing's samples, k-means++, the race of an abbreviated
    annealing, the swap search, Hartigan's moves, ``fit_rows``' sample) weighs its rows: moving
    the rows of weight 0 anywhere gives the same fit, bit for bit."""
    from rbfkmeans import starts

    params = dict(params)
    if params.pop("race", False):
        monkeypatch.setattr(starts, "ANNEAL_WORK", 0)
    X, _ = make_blobs(3000, 6, centers=8, random_state=0)
    rng = np.random.RandomState(1)
    w = rng.uniform(0.5, 2.0, 3000)
    w[rng.rand(3000) < 0.3] = 0.0
    moved = X.copy()
    moved[w == 0] += 5.0 * rng.randn(int((w == 0).sum()), 6)
    a, b = (RBFKMeans(8, random_state=0, **params).fit(A, sample_weight=w) for A in (X, moved))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_
    np.testing.assert_array_equal(a.labels_[w > 0], b.labels_[w > 0])


@pytest.mark.parametrize("temperature", [None, 0.5])
def test_fit_batches_rows_of_weight_zero_have_no_influence(temperature: float | None) -> None:
    """Blocks of an array source whose weights are all 0 (the whole vector has positive ones)
    were refused as "all zero"; now such rows change nothing: moving them gives the same fit,
    and the seeding waits for 3k rows that weigh something."""
    rng = np.random.RandomState(0)
    X = rng.randn(1000, 4)
    w = np.ones(1000)
    w[:300] = w[600:650] = 0.0  # whole blocks of 100 rows, and half of one
    moved = X.copy()
    moved[w == 0] += 3.0 * rng.randn(int((w == 0).sum()), 4)
    a, b = (RBFKMeans(4, random_state=0, temperature=temperature).fit_batches(
        A, sample_weight=w, batch_size=100, n_epochs=2) for A in (X, moved))
    assert a.n_iter_ == b.n_iter_ == 2 * 10
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_
    assert np.isfinite(a.cluster_centers_).all()


def test_bad_init_array() -> None:
    with pytest.raises(ValueError, match=r"init array must have shape .* \(4, 3\); got \(4, 2\)"):
        RBFKMeans(4, init=np.zeros((4, 2))).fit(X0)
    bad = X0[:4].copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="init array must be finite"):
        RBFKMeans(4, assignment="hard", init=bad).fit(X0)


@pytest.mark.parametrize("method", ["predict", "predict_proba", "transform", "score",
                                    "partial_fit"])
def test_feature_count_mismatch(method: str) -> None:
    est = RBFKMeans(3, assignment="hard", random_state=0).fit(X0)
    with pytest.raises(ValueError, match="X has 2 features, but RBFKMeans is expecting 3"):
        getattr(est, method)(X0[:, :2])


def test_bad_temperature_at_inference() -> None:
    est = fitted()
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 0; got -1"):
        est.predict_proba(X0, temperature=-1)
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 0; got nan"):
        est.to_layer(temperature=float("nan"))


def test_unfitted_raises() -> None:
    from sklearn.exceptions import NotFittedError

    for method in ("predict", "predict_proba", "transform", "score"):
        with pytest.raises(NotFittedError):
            getattr(RBFKMeans(3), method)(X0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("assignment", ["entmax15", "hard"])
def test_caller_arrays_are_never_modified(dtype: type, assignment: str) -> None:
    X = X0.astype(dtype)
    sw = np.linspace(0.5, 2.0, len(X)).astype(dtype)
    init = X[:3].copy()
    copies = [a.copy() for a in (X, sw, init)]
    init_arg = init if assignment == "hard" else "auto"
    est = RBFKMeans(3, assignment=assignment, init=init_arg, random_state=0)
    est.fit(X, sample_weight=sw)
    for call in (est.predict, est.predict_proba, est.transform, est.score):
        call(X)
    est.score(X, sample_weight=sw)
    est.partial_fit(X, sample_weight=sw)
    RBFKMeans(3, assignment=assignment, init=init_arg, random_state=0).partial_fit(
        X, sample_weight=sw)
    for a, c in zip((X, sw, init), copies, strict=True):
        np.testing.assert_array_equal(a, c)


def test_read_only_input() -> None:
    X = X0.copy()
    X.setflags(write=False)
    sw = np.ones(len(X))
    sw.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "The given NumPy array is not writable"
        est = RBFKMeans(3, random_state=0).fit(X, sample_weight=sw)
        est.predict_proba(X)
        est.partial_fit(X, sample_weight=sw)
    np.testing.assert_array_equal(X, X0)



@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_views_with_negative_strides_are_read_as_their_copies(metric: str) -> None:
    """``X[::-1]`` and ``numpy.flip`` are views torch cannot share: every method takes them as
    it takes their contiguous copies, and leaves them as they were."""
    Xf = np.flip(X0)  # rows and features reversed: strides (-16, -8)
    init = np.flip(X0[:3], axis=0)
    Xc, init_c = Xf.copy(), init.copy()
    a = RBFKMeans(3, metric=metric, init=init, random_state=0).fit(Xf)
    b = RBFKMeans(3, metric=metric, init=init_c, random_state=0).fit(Xc)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    for method in ("predict", "predict_proba", "transform", "score"):
        np.testing.assert_array_equal(getattr(a, method)(Xf), getattr(b, method)(Xc))
    a.partial_fit(Xf)
    b.partial_fit(Xc)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    batches = RBFKMeans(3, metric=metric, random_state=0).fit_batches([Xf[:40], Xf[40:]])
    assert np.isfinite(batches.cluster_centers_).all()
    flipped = np.flip(a.cluster_centers_, axis=0)
    np.testing.assert_array_equal(KMeansLayer(flipped, metric=metric).centroids.detach(),
                                  KMeansLayer(flipped.copy(), metric=metric).centroids.detach())
    np.testing.assert_array_equal(Xf, np.flip(X0))
    np.testing.assert_array_equal(init, init_c)

def test_float16_is_computed_in_float32() -> None:
    X16 = X0.astype(np.float16)
    a = RBFKMeans(3, random_state=0).fit(X16)
    b = RBFKMeans(3, random_state=0).fit(X16.astype(np.float32))
    assert a.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    P = a.predict_proba(X16)
    assert P.dtype == np.float32
    assert np.isfinite(P).all()
    np.testing.assert_array_equal(a.predict(X16), b.predict(X16.astype(np.float32)))
    assert X16.dtype == np.float16
    t = RBFKMeans(3, random_state=0).fit(torch.from_numpy(X0).to(torch.bfloat16))
    assert t.cluster_centers_.dtype == np.float32


# -- annealing -------------------------------------------------------------------------------


def cov_eigmax(X: np.ndarray) -> float:
    return float(np.linalg.eigvalsh(np.cov(X.T, bias=True)).max())


@pytest.mark.parametrize(("assignment", "factor"),
                         [("softmax", 1.0), ("entmax15", 2.0), ("sparsemax", 4.0)])
def test_temperature_ladder(assignment: str, factor: float) -> None:
    est = RBFKMeans(4, assignment=assignment, schedule="geometric", random_state=0).fit(X0)
    Tc = factor * cov_eigmax(X0)  # 1, sqrt(k), k times lambda_max for k = 4
    assert est.critical_temperature_ == pytest.approx(Tc, rel=1e-9)
    T = est.temperatures_
    assert T[0] == pytest.approx(1.2 * Tc, rel=1e-9)
    assert (np.diff(T) < 0).all()
    np.testing.assert_allclose(T[1:] / T[:-1], 0.85, rtol=1e-12)
    assert est.temperature_ == T[-1]
    # the event-driven ladder: just below T_c, then steps between jump (0.5) and cooling (0.7)
    ev = fitted(assignment)
    assert ev.critical_temperature_ == pytest.approx(Tc, rel=1e-9)
    assert ev.temperatures_[0] == pytest.approx(0.8 * Tc, rel=1e-9)
    ratios = ev.temperatures_[1:] / ev.temperatures_[:-1]
    assert ((ratios >= 0.5 - 1e-12) & (ratios <= 0.7 + 1e-12)).all()
    custom = RBFKMeans(4, assignment=assignment, schedule="geometric", T_start=5.0, cooling=0.5,
                       random_state=0).fit(X0)
    assert custom.temperatures_[0] == 5.0
    np.testing.assert_allclose(custom.temperatures_[1:] / custom.temperatures_[:-1], 0.5)


@pytest.mark.parametrize(("assignment", "solver"), [*((a, "lloyd") for a in SOFT),
                                                    ("entmax15", "gradient")])
def test_result_is_a_lloyd_fixed_point(assignment: str, solver: str) -> None:
    X = blobs(120, k=5, d=2, std=2.0, seed=7)
    w = np.random.RandomState(1).uniform(0.5, 2, len(X))
    est = RBFKMeans(5, assignment=assignment, solver=solver, random_state=0)
    est.fit(X, sample_weight=w)
    labels, C = lloyd_step(X, est.cluster_centers_, w)
    np.testing.assert_array_equal(labels, est.labels_)
    np.testing.assert_allclose(C, est.cluster_centers_, atol=1e-10, rtol=0)


GRID = np.array([[i, j] for i in range(3) for j in range(3)], dtype=float) * 4.0


@pytest.mark.parametrize("assignment", SOFT)
def test_annealing_finds_the_global_optimum_on_separated_blobs(assignment: str) -> None:
    """3 x 3 grid of tight blobs: most single random-start Lloyd runs end in a local optimum,
    one annealed fit finds the best of 20 k-means++ restarts (and the true blobs)."""
    X, y = make_blobs(180, centers=GRID, cluster_std=0.4, random_state=0)
    best = KMeans(9, n_init=20, random_state=0).fit(X).inertia_
    single = [KMeans(9, init="random", n_init=1, random_state=r).fit(X).inertia_
              for r in range(5)]
    assert max(single) > best * 1.05  # the problem does have bad local optima
    est = RBFKMeans(9, assignment=assignment, random_state=0).fit(X)
    assert est.inertia_ <= best * (1 + 1e-9)
    assert adjusted_rand_score(y, est.labels_) == 1.0


# -- memberships and the layer ---------------------------------------------------------------


@pytest.mark.parametrize("assignment", SOFT)
def test_predict_proba(assignment: str) -> None:
    est = fitted(assignment)
    C = est.cluster_centers_
    for T in (None, 0.5 * est.critical_temperature_, 2.0):
        P = est.predict_proba(X0, temperature=T)
        T_ref = est.temperature_ if T is None else T
        assert P.shape == (90, 4)
        assert (P >= 0).all()
        np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
        np.testing.assert_allclose(P, ref_memberships(X0, C, T_ref, assignment), atol=1e-9)
    hot = est.predict_proba(X0, temperature=est.critical_temperature_)
    if assignment == "softmax":
        assert (hot > 0).all()
    else:
        assert (hot == 0).any()
        assert ((hot > 0).sum(1) > 1).any()
    P0 = est.predict_proba(X0, temperature=0)
    np.testing.assert_array_equal(P0, np.eye(4)[est.labels_])
    fixed = RBFKMeans(4, assignment=assignment, temperature=1.5, random_state=0).fit(X0)
    np.testing.assert_allclose(fixed.predict_proba(X0),
                               ref_memberships(X0, fixed.cluster_centers_, 1.5, assignment),
                               atol=1e-9)


def test_predict_proba_hard_is_one_hot() -> None:
    est = fitted("hard")
    np.testing.assert_array_equal(est.predict_proba(X0), np.eye(4)[est.labels_])
    np.testing.assert_array_equal(est.predict_proba(X0, temperature=3.0), np.eye(4)[est.labels_])


@pytest.mark.parametrize("assignment", ALL)
def test_to_layer_equals_predict_proba(assignment: str) -> None:
    est = fitted(assignment)
    Xt = torch.from_numpy(X0)
    with torch.no_grad():
        np.testing.assert_allclose(est.to_layer()(Xt).numpy(), est.predict_proba(X0), atol=1e-12)
        layer = est.to_layer(temperature=2.0)
        assert layer.temperature == 2.0
        assert layer.assignment == assignment
        np.testing.assert_allclose(layer(Xt).numpy(), est.predict_proba(X0, temperature=2.0),
                                   atol=1e-12)
        np.testing.assert_array_equal(layer.predict(Xt).numpy(), est.predict(X0))
    other = est.to_layer(temperature=1.0, assignment="softmax")
    assert other.assignment == "softmax"


def test_large_data_polish_and_swaps_on_a_subsample_end_at_a_lloyd_fixed_point_of_all_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above 2 x max(SEARCH_MIN_ROWS, SEARCH_ROWS_PER_CLUSTER k) rows the polish and the swap
    search run on a subsample; the last polish on all rows makes the result a Lloyd fixed point
    of the full data (labels = nearest centroid, centroids = means of their labels)."""
    import rbfkmeans.runs as E

    monkeypatch.setattr(E, "SEARCH_MIN_ROWS", 200)
    monkeypatch.setattr(E, "SEARCH_ROWS_PER_CLUSTER", 16)
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 1.0, size=(500, 3)) for c in range(6)])  # 3000 rows
    est = RBFKMeans(8, random_state=0, subsample=16).fit(X)
    C = est.cluster_centers_
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(est.labels_, d2.argmin(1))
    means = np.stack([X[est.labels_ == j].mean(0) for j in range(8)])
    np.testing.assert_allclose(C, means, rtol=1e-10, atol=1e-10)
    assert est.inertia_ == pytest.approx(d2.min(1).sum(), rel=1e-10)
    # the subsample path ran: the search saw fewer rows than the data has
    seen: list[int] = []
    real = refine_mod.swap_search

    def spy(data, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(data.n)
        return real(data, *a, **kw)

    monkeypatch.setattr(refine_mod, "swap_search", spy)
    RBFKMeans(8, random_state=0, subsample=16).fit(X)
    assert seen
    assert seen[0] < X.shape[0]


def _verdicts(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[bool]:
    """The answers ``module.<name>`` (a sample check) gives from now on, in order."""
    verdicts: list[bool] = []
    real = getattr(module, name)

    def spy(*a: Any, **kw: Any) -> bool:
        verdicts.append(real(*a, **kw))
        return verdicts[-1]

    monkeypatch.setattr(module, name, spy)
    return verdicts


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_heavy_tails_the_search_sample_missed_are_searched_on_all_rows(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Cauchy rows: a few rows weigh most of ``J`` and a search sample of 2,048 of 20,000 rows
    misses them, so ``J`` of all the rows at the sample's fixed point is several times the
    sample's, scaled. The run then polishes its start and a k-means++ start on all the rows
    and searches them from the lower: at most 2% above ``KMeans(n_init=10)`` (the sample's
    fixed point alone ended 1.39x, 1.16x and 1.48x it on these seeds)."""
    monkeypatch.setattr(runs_mod, "SEARCH_MIN_ROWS", 1024)
    X = np.random.default_rng(seed).standard_cauchy(size=(20_000, 2))
    calls = _verdicts(monkeypatch, refine_mod, "sample_misjudges")
    est = RBFKMeans(8, random_state=0).fit(X)
    assert calls == [True]
    reference = KMeans(8, n_init=10, random_state=0).fit(X).inertia_
    assert est.inertia_ <= 1.02 * reference
    d2 = ((X[:, None, :] - est.cluster_centers_[None]) ** 2).sum(-1)  # a Lloyd fixed point
    np.testing.assert_array_equal(est.labels_, d2.argmin(1))
    assert est.inertia_ == pytest.approx(d2.min(1).sum(), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 2, 4])
def test_far_outliers_the_annealing_sample_missed_take_a_k_means_pp_rival(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Six blobs of 20,000 rows with three rows 300 times farther out: the annealing's sample
    (4,096 rows) misses them, so the search rows' ``J`` after the polish is several times the
    sample's, scaled; a k-means++ start drawn from the search rows is polished as well and the
    lower goes on. The fit ends at ``KMeans(n_init=10)``'s ``J`` (it ended 1.83x, 2.11x and
    2.82x it on these seeds without the rival). The swap search's split that isolates a far row
    (``costs.FAR_MARGIN``) reaches it as well without the rival, and only the two together
    switched off leave the fit there."""
    X, _ = make_blobs(n_samples=20_000, n_features=3, centers=6, random_state=seed)
    X[:3] = np.random.default_rng(seed).normal(size=(3, 3)) * 300
    fired = _verdicts(monkeypatch, runs_mod, "misjudged")
    est = RBFKMeans(8, random_state=0).fit(X)
    assert True in fired
    reference = KMeans(8, n_init=10, random_state=0).fit(X).inertia_
    assert est.inertia_ <= reference * (1 + 1e-6)
    monkeypatch.setattr(runs_mod, "ANNEAL_SAMPLE_TOLERANCE", math.inf)
    assert RBFKMeans(8, random_state=0).fit(X).inertia_ <= reference * (1 + 1e-6)
    monkeypatch.setattr(costs_mod, "FAR_MARGIN", math.inf)
    assert RBFKMeans(8, random_state=0).fit(X).inertia_ > 1.5 * reference


def test_a_sample_that_judges_J_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gaussian clusters: the search sample's ``J``, scaled, is within SAMPLE_TOLERANCE of all
    rows' (the check does not fire), and the fit is the one without the check, bit for bit;
    the check weighs the rows by their weights."""
    monkeypatch.setattr(runs_mod, "SEARCH_MIN_ROWS", 1024)
    X, _ = make_blobs(n_samples=20_000, centers=8, n_features=3, random_state=3)
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=X.shape[0])
    calls = _verdicts(monkeypatch, refine_mod, "sample_misjudges")
    fits = [RBFKMeans(8, random_state=0).fit(X, sample_weight=w)]
    assert calls == [False]
    monkeypatch.setattr(refine_mod, "SAMPLE_TOLERANCE", math.inf)
    fits.append(RBFKMeans(8, random_state=0).fit(X, sample_weight=w))
    np.testing.assert_array_equal(fits[0].cluster_centers_, fits[1].cluster_centers_)
    assert fits[0].inertia_ == fits[1].inertia_


def test_sample_misjudges_scales_by_the_weights() -> None:
    from rbfkmeans.passes import Data

    data = Data(torch.zeros(10, 2), torch.full((10,), 3.0))
    sample = Data(torch.zeros(4, 2), torch.full((4,), 3.0))
    # all rows weigh 30, the sample 12: J 25 of the sample is 62.5 of all the rows
    tolerance = refine_mod.SAMPLE_TOLERANCE
    assert not refine_mod.sample_misjudges(sample, data, 25.0, 62.5 * (1 + tolerance))
    assert refine_mod.sample_misjudges(sample, data, 25.0, 62.5 * (1.01 + tolerance))
    unweighted = Data(torch.zeros(10, 2))
    assert refine_mod.sample_misjudges(Data(torch.zeros(5, 2)), unweighted, 1.0, 2.3)
    assert not refine_mod.sample_misjudges(Data(torch.zeros(5, 2)), unweighted, 1.0, 2.1)
    # the annealing's sample is judged with its own tolerance: twice the scaled J here
    assert not refine_mod.misjudged(1.0, 1.0, 2.0, 3.9, tolerance=1.0)
    assert refine_mod.misjudged(1.0, 1.0, 2.0, 4.1, tolerance=1.0)
    assert refine_mod.misjudged(1.0, 1.0, 2.0, 2.3)  # SAMPLE_TOLERANCE by default


def test_abbreviation_counts_at_least_ANNEAL_MIN_WIDTH_features(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ANNEAL_MIN_WIDTH features a row-group pair of the annealing costs about what it
    costs at that width, so the rule counts that many: 20,000 rows in the plane with k = 2,000
    (80M products of 2 features) are abbreviated, as 20,000 x 32 rows are."""
    from rbfkmeans import starts

    X, _ = make_blobs(n_samples=60, centers=3, random_state=0)
    est = RBFKMeans(3, random_state=0).fit(X)  # inside a fit as far as the rule checks
    est.n_clusters = 2000
    assert 20_000 * 2000 * 2 <= starts.ANNEAL_WORK < 20_000 * 2000 * starts.ANNEAL_MIN_WIDTH
    assert starts.abbreviated(est, 20_000, 2)
    assert starts.abbreviated(est, 20_000, 2) == starts.abbreviated(est, 20_000, 32)
    est.n_clusters = 64  # the pixel sets of bench_fit: 4,096 annealed rows, far below
    assert not starts.abbreviated(est, 20_000, 3)
    monkeypatch.setattr(starts, "ANNEAL_MIN_WIDTH", 1)
    est.n_clusters = 2000
    assert not starts.abbreviated(est, 20_000, 2)


def test_small_default_fit_keeps_the_better_of_both_ladders(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At most SMALL_FIT_ENTRIES point-centroid pairs the default fit also runs the geometric
    ladder and keeps the lower inertia; its event-driven run is the one n_init=1 makes."""
    X, _ = make_blobs(n_samples=240, centers=8, cluster_std=2.5, random_state=7)
    assert X.shape[0] * 8 <= runs_mod.SMALL_FIT_ENTRIES
    runs: list[tuple[str, float]] = []
    original = RBFKMeans._fit_one

    def spy(self: RBFKMeans, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = original(self, *args, **kwargs)
        runs.append((args[-1], out["inertia"]))
        return out

    monkeypatch.setattr(RBFKMeans, "_fit_one", spy)
    default = RBFKMeans(8, random_state=0).fit(X)
    assert [name for name, _ in runs] == ["splits", "geometric"]
    assert default.inertia_ == pytest.approx(min(J for _, J in runs), rel=1e-12)
    runs.clear()
    single = RBFKMeans(8, n_init=1, random_state=0).fit(X)
    assert [name for name, _ in runs] == ["splits"]
    assert default.inertia_ <= single.inertia_ * (1 + 1e-12)
    # on this set the geometric run wins, and ends at or below KMeans(n_init=10)
    assert default.inertia_ < single.inertia_ * (1 - 1e-4)
    assert default.inertia_ <= KMeans(8, n_init=10, random_state=0).fit(X).inertia_ * (1 + 1e-9)


@pytest.mark.parametrize("kwargs", [{"n_init": 1}, {"schedule": "geometric"},
                                    {"assignment": "hard"}, {"init": "k-means++"},
                                    {"schedule": "k-means++"}])
def test_small_fit_pairs_ladders_only_by_default(kwargs: dict[str, Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = make_blobs(n_samples=120, centers=3, random_state=0)
    schedules: list[str] = []
    original = RBFKMeans._fit_one
    monkeypatch.setattr(RBFKMeans, "_fit_one", lambda self, *a, **kw: (
        schedules.append(a[-1]), original(self, *a, **kw))[1])
    RBFKMeans(3, random_state=0, **kwargs).fit(X)
    assert len(schedules) == 1


def test_larger_default_fit_runs_one_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = make_blobs(n_samples=600, centers=4, random_state=0)
    assert X.shape[0] * 4 > runs_mod.SMALL_FIT_ENTRIES
    schedules: list[str] = []
    original = RBFKMeans._fit_one
    monkeypatch.setattr(RBFKMeans, "_fit_one", lambda self, *a, **kw: (
        schedules.append(a[-1]), original(self, *a, **kw))[1])
    default = RBFKMeans(4, random_state=0).fit(X)
    single = RBFKMeans(4, n_init=1, random_state=0).fit(X)
    assert schedules == ["splits", "splits"]
    np.testing.assert_array_equal(default.cluster_centers_, single.cluster_centers_)



def test_run_functions_reject_bad_input() -> None:
    from rbfkmeans.passes import Data

    X, _ = make_blobs(n_samples=60, centers=3, random_state=0)
    data = Data(torch.as_tensor(X))
    fitted = RBFKMeans(3, random_state=0).fit(X)
    with pytest.raises(TypeError, match="est must be an RBFKMeans inside its fit"):
        runs_mod.run_schedules(RBFKMeans(3), data, 60, 1)
    with pytest.raises(TypeError, match=r"data must be a rbfkmeans\.passes\.Data; got ndarray"):
        runs_mod.run_schedules(fitted, X, 60, 1)
    with pytest.raises(ValueError, match=r"schedule must be 'splits', 'geometric' or "
                                         r"'k-means\+\+'; got 'fast'"):
        runs_mod.fit_run(fitted, data, 0, 0.0, 1.0, 0, "fast")
    out = runs_mod.fit_run(fitted, data, 0, 0.0, 1.0, 0, "splits")  # a fitted estimator's run
    assert out["inertia"] == pytest.approx(fitted.inertia_, rel=1e-9)


def test_start_functions_reject_bad_input() -> None:
    """The start of a run (rbfkmeans.starts) names the argument it cannot take."""
    from rbfkmeans import starts
    from rbfkmeans.passes import Data

    X, _ = make_blobs(n_samples=60, centers=3, random_state=0)
    data = Data(torch.as_tensor(X))
    fitted = RBFKMeans(3, random_state=0).fit(X)
    gen = torch.Generator().manual_seed(0)
    unfitted = "est must be an RBFKMeans inside its fit"
    with pytest.raises(TypeError, match=unfitted):
        starts.geometric_ladder(RBFKMeans(3))
    with pytest.raises(TypeError, match=unfitted):
        starts.abbreviated("est", 60, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be an integer >= 1; got 0"):
        starts.abbreviated(fitted, 0, 2)
    with pytest.raises(TypeError, match=r"data must be a rbfkmeans\.passes\.Data; got ndarray"):
        starts.event_driven(fitted, X)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"data must be a rbfkmeans\.passes\.Data; got ndarray"):
        starts.annealed(fitted, X, None, 0.0, 1.0, gen, None, "splits",  # type: ignore[arg-type]
                        starts.Temperatures.of(fitted))
    with pytest.raises(TypeError, match=r"search must be a rbfkmeans\.passes\.Data; got ndarray"):
        starts.race(fitted, X, data.X[:3], gen, 0)  # type: ignore[arg-type]
    ladder = starts.geometric_ladder(fitted)  # a fitted estimator's own ladder
    assert ladder[0] == pytest.approx(1.2 * fitted.critical_temperature_, rel=1e-12)
    assert not starts.abbreviated(fitted, 60, 2)


def test_fit_rows_fits_on_a_sample_and_labels_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit_rows``: the centroids fitted on a random sample of that many rows take one Lloyd
    iteration on every row (each the mean of the rows nearest it, which lowers ``J`` of all
    rows), every row gets its nearest centroid, and ``inertia_`` is ``J`` of all rows."""
    sample_fits: list[np.ndarray] = []
    step = runs_mod._step_on_every_row
    monkeypatch.setattr(runs_mod, "_step_on_every_row",
                        lambda every, C: sample_fits.append(C.double().numpy()) or step(every, C))
    X, _ = make_blobs(n_samples=3000, centers=6, cluster_std=1.5, random_state=3)
    est = RBFKMeans(6, fit_rows=600, random_state=0).fit(X)
    C = est.cluster_centers_
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(est.labels_, d2.argmin(1))
    assert est.inertia_ == pytest.approx(d2.min(1).sum(), rel=1e-10)
    (C_sample,) = sample_fits  # the sample's fit, then the means of every row's cluster
    d2_sample = ((X[:, None, :] - C_sample[None]) ** 2).sum(-1)
    nearest = d2_sample.argmin(1)
    means = np.stack([X[nearest == j].mean(0) for j in range(6)])
    np.testing.assert_allclose(C, means, rtol=1e-12, atol=1e-12)
    assert est.inertia_ < d2_sample.min(1).sum()  # the step lowered J of all rows
    full = RBFKMeans(6, random_state=0).fit(X)
    assert est.inertia_ >= full.inertia_ * (1 - 1e-12)  # from a sample's fixed point: no better
    assert est.inertia_ <= full.inertia_ * 1.02
    assert RBFKMeans(6, fit_rows=10_000, random_state=0).fit(X).inertia_ == full.inertia_
    assert len(sample_fits) == 1  # no sample, no step


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
@pytest.mark.parametrize("bounded", [False, True])
def test_the_step_on_every_row_is_one_lloyd_iteration(monkeypatch: pytest.MonkeyPatch,
                                                      metric: str, bounded: bool) -> None:
    """After a sample's fit, each centroid becomes the (weighted) mean of the rows nearest it
    (on cosine data their mean direction), and the labels and ``J`` are those at the new
    centroids, by the bounded Lloyd run or by two plain passes: ``J`` of all rows does not
    rise."""
    from rbfkmeans.passes import Data

    monkeypatch.setattr(runs_mod, "bounds_pay", lambda data, k: bounded)
    X, _ = make_blobs(n_samples=2000, centers=5, n_features=4, cluster_std=2.0, random_state=4)
    X = X + 3.0
    w = np.random.default_rng(0).uniform(0.5, 2.0, size=len(X))
    data = Data(torch.from_numpy(X), torch.from_numpy(w), metric=metric)
    Xr = data.X.numpy()  # unit rows on cosine data
    C0 = Xr[[0, 500, 1000, 1500, 1999]].copy()
    C, labels, inertia = runs_mod._step_on_every_row(data, torch.from_numpy(C0))
    nearest = ((Xr[:, None] - C0[None]) ** 2).sum(-1).argmin(1)
    means = np.stack([(w[nearest == j, None] * Xr[nearest == j]).sum(0) / w[nearest == j].sum()
                      for j in range(5)])
    if metric == "cosine":
        means /= np.linalg.norm(means, axis=1, keepdims=True)
    np.testing.assert_allclose(C.numpy(), means, rtol=1e-10, atol=1e-10)
    d2 = ((Xr[:, None] - means[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(labels.numpy(), d2.argmin(1))
    scale = 0.5 if metric == "cosine" else 1.0  # the spherical objective: half of J
    assert inertia == pytest.approx(scale * (w @ d2.min(1)), rel=1e-10)
    assert inertia < scale * (w @ ((Xr[:, None] - C0[None]) ** 2).sum(-1).min(1))


def test_fit_rows_draws_k_means_plus_plus_starts_from_a_smaller_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``fit_rows``, a k-means++ start is drawn from ``SEED_ROWS_PER_CLUSTER k`` rows of
    the sample (every start a row of ``X``), a mean start from the sample itself; repeated rows
    are not folded before the sample is drawn (the sample is of the rows as they are); the
    result is still a Lloyd fixed point of the sample with every row labelled."""
    seen: list[tuple[int, Any]] = []
    original = runs_mod.initial_centers

    def spy(data: Any, k: int, init: Any, **kw: Any) -> torch.Tensor:
        seen.append((data.n, init))
        return original(data, k, init, **kw)

    monkeypatch.setattr(runs_mod, "initial_centers", spy)
    folds: list[int] = []
    import rbfkmeans.estimator as est_mod
    fold = est_mod.fold_repeats
    monkeypatch.setattr(est_mod, "fold_repeats",
                        lambda X, *a, **kw: folds.append(X.shape[0]) or fold(X, *a, **kw))
    X, _ = make_blobs(n_samples=4000, centers=5, cluster_std=1.0, random_state=1)
    X = np.concatenate([X, X[:1000]])  # repeated rows
    k = 5
    est = RBFKMeans(k, assignment="hard", fit_rows=2000, max_iter=25, random_state=0).fit(X)
    assert seen == [(runs_mod.SEED_ROWS_PER_CLUSTER * k, "k-means++")]
    assert not folds
    d2 = ((X[:, None, :] - est.cluster_centers_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(est.labels_, d2.argmin(1))
    assert est.inertia_ == pytest.approx(d2.min(1).sum(), rel=1e-10)
    seen.clear()
    annealed: list[int] = []
    from rbfkmeans import starts

    ladder = starts.anneal_splits
    monkeypatch.setattr(starts, "anneal_splits",
                        lambda data, *a, **kw: annealed.append(data.n) or ladder(data, *a, **kw))
    RBFKMeans(k, fit_rows=2000, random_state=0).fit(X)  # annealed on the sample, from its mean
    assert annealed == [2000]
    assert not seen  # the ladder draws no start
    assert not folds
    seen.clear()
    RBFKMeans(k, assignment="hard", fit_rows=10_000, random_state=0).fit(X)  # no sample
    assert seen == [(runs_mod.SEED_ROWS_PER_CLUSTER * k, "k-means++")]
    assert folds


@pytest.mark.parametrize("kernels_mode", ["0", "1"])
def test_rows_of_one_direction_anneal_within_float32(
        kernels_mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 rows of one direction (cosine): their spread is 0 up to rounding, and the
    geometric ladder's temperatures fell to ~1e-62, where ``1 / T`` is beyond float32 (the
    torch pass raised an overflow error). The ladder stops at the data's resolution
    temperature, as the event-driven one does: one distinct cluster, ``J`` 0 (to rounding)."""
    monkeypatch.setenv("RBFKMEANS_KERNELS", kernels_mode)
    X = np.full((21, 11), 1000.0, dtype=np.float32)
    w = np.random.default_rng(0).uniform(0.0, 3.0, size=21)
    w[[0, 1, 7, 16]] = 0.0
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(1\) found smaller"):
        est = RBFKMeans(2, metric="cosine", random_state=0).fit(X, sample_weight=w)
    np.testing.assert_allclose(est.cluster_centers_, np.full((2, 11), 11 ** -0.5), rtol=1e-6)
    assert 0.0 <= est.inertia_ <= 64 * np.finfo(np.float32).eps * w.sum()  # 0 up to rounding
    assert (X == 1000.0).all()


def test_predict_takes_the_passes_the_fit_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small fit takes the torch passes while the kernels are compiled; predict took the
    kernels, whose rounding broke the ties of rows within rounding of two centroids otherwise:
    labels_ [0 1 0 0] against predict [0 0 0 0] on these cosine rows (the search subsample's
    paths forced on four rows). predict takes the passes the fit took."""
    from rbfkmeans import starts

    monkeypatch.setattr(runs_mod, "SEARCH_MIN_ROWS", 8)
    monkeypatch.setattr(runs_mod, "SEARCH_ROWS_PER_CLUSTER", 2)
    monkeypatch.setattr(starts, "ANNEAL_WORK", 50)
    monkeypatch.setattr(starts, "ANNEAL_MIN_ROWS", 8)
    monkeypatch.setattr(starts, "RACE_ROWS_PER_CLUSTER", 2)
    X = np.array([[1000.00000013, 999.99999987], [1000.00000064, 1000.0000001],
                  [999.99999946, 1000.00000036], [1000.0000013, 1000.00000095]])
    est = RBFKMeans(2, metric="cosine", max_swaps=0, random_state=0).fit(X)
    assert est._kernel_passes is False  # 8 point-centroid pairs: the torch passes
    np.testing.assert_array_equal(est.predict(X), est.labels_)


@pytest.mark.parametrize("assignment", ["hard", "entmax15"])
def test_samples_are_drawn_from_rows_that_weigh_something(
        assignment: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit_rows`` draws its sample from the rows of positive weight: a sample of rows of
    weight 0 fitted nothing (the annealing's start, their weighted mean, was NaN, and the fit
    failed with an error about its own centroids). With no more such rows than ``fit_rows``
    the fit is the fit of all rows; the search subsample of large data is drawn the same way."""
    X = np.full((4, 1), -5.75e-7, dtype=np.float32)
    w = np.array([0.0, 0.73, 0.0, 2.54])
    est = RBFKMeans(1, assignment=assignment, fit_rows=2, random_state=0).fit(X, sample_weight=w)
    np.testing.assert_array_equal(est.cluster_centers_, X[:1])
    assert est.inertia_ == 0.0
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(300, 2)), rng.normal(size=(300, 2)) + 8.0])
    w = np.zeros(600)
    w[::50] = 1.0  # 12 rows weigh something
    sizes: list[tuple[int, float]] = []
    take = Subsample.take
    monkeypatch.setattr(Subsample, "take", lambda self, size, skip=0: (
        sizes.append((self.total, float(self.data.w.min()))), take(self, size, skip))[1])
    sampled = RBFKMeans(2, assignment=assignment, fit_rows=8, random_state=0).fit(
        X, sample_weight=w)
    assert sizes[0] == (12, 1.0)  # drawn from the 12, none of weight 0
    everything = RBFKMeans(2, assignment=assignment, fit_rows=12, random_state=0).fit(
        X, sample_weight=w)
    plain = RBFKMeans(2, assignment=assignment, random_state=0).fit(X, sample_weight=w)
    assert everything.inertia_ == plain.inertia_  # the same centres (k-means++ from the rows
    # of weight, so possibly drawn in another order)
    np.testing.assert_array_equal(np.sort(everything.cluster_centers_, axis=0),
                                  np.sort(plain.cluster_centers_, axis=0))
    for fit in (sampled, everything):
        d2 = ((X[:, None, :] - fit.cluster_centers_[None]) ** 2).sum(-1)
        np.testing.assert_array_equal(fit.labels_, d2.argmin(1))
        assert fit.inertia_ == pytest.approx(w @ d2.min(1), rel=1e-10)
    sizes.clear()
    monkeypatch.setattr(runs_mod, "search_rows", lambda k, d: 100)
    RBFKMeans(2, random_state=0).fit(X, sample_weight=w)
    assert sizes
    assert all(lowest == 1.0 for _, lowest in sizes)


def test_cosine_samples_are_fitted_on_the_sphere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cosine fit's sample (``fit_rows``) and search subsample (large data) are fitted as
    cosine data: every Lloyd run and swap search of the fit is spherical (the subsample's rows
    had lost the metric, and those runs were squared-Euclidean k-means of the unit rows)."""
    metrics: list[str] = []
    for module, name in ((runs_mod, "lloyd"), (refine_mod, "lloyd"), (refine_mod, "swap_search")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda data, *a, _f=original, **kw: (
            metrics.append(data.metric.name), _f(data, *a, **kw))[1])
    X = np.random.default_rng(0).normal(size=(3000, 6)).astype(np.float32)
    RBFKMeans(8, metric="cosine", assignment="hard", fit_rows=800, random_state=0).fit(X)
    monkeypatch.setattr(runs_mod, "search_rows", lambda k, d: 800)
    RBFKMeans(8, metric="cosine", random_state=0).fit(X)
    assert len(metrics) >= 4
    assert set(metrics) == {"cosine"}


def _spy_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Record each run of a fit: its schedule and its result."""
    runs: list[tuple[str, dict[str, Any]]] = []
    original = RBFKMeans._fit_one

    def spy(self: RBFKMeans, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = original(self, *args, **kwargs)
        runs.append((args[-1], out))
        return out

    monkeypatch.setattr(RBFKMeans, "_fit_one", spy)
    return runs


def test_n_init_anneals_once_and_restarts_from_k_means_plus_plus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An event-driven fit with n_init=m: the annealed run n_init=1 makes (the same seed), then
    m-1 k-means++ restarts, none annealed; the lowest J is kept, so never above n_init=1."""
    X, _ = make_blobs(n_samples=900, centers=12, cluster_std=2.0, random_state=3)
    runs = _spy_runs(monkeypatch)
    single = RBFKMeans(10, n_init=1, random_state=0).fit(X)
    runs.clear()
    several = RBFKMeans(10, n_init=4, random_state=0).fit(X)
    assert [s for s, _ in runs] == ["splits"] + [runs_mod.RESTART] * 3
    assert runs[0][1]["inertia"] == pytest.approx(single.inertia_, rel=1e-12)
    assert all(out["temperatures"] == [] and out["history"] == [] for _, out in runs[1:])
    assert len({round(out["inertia"], 9) for _, out in runs}) > 1  # the restarts differ
    assert several.inertia_ == pytest.approx(min(out["inertia"] for _, out in runs), rel=1e-12)
    assert several.inertia_ <= single.inertia_ * (1 + 1e-12)


@pytest.mark.parametrize("kwargs", [{"assignment": "hard"}, {"schedule": "geometric"}])
def test_n_init_repeats_the_schedule_outside_the_event_driven_fit(
        kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = make_blobs(n_samples=600, centers=4, random_state=0)
    runs = _spy_runs(monkeypatch)
    RBFKMeans(4, n_init=3, random_state=0, **kwargs).fit(X)
    assert [s for s, _ in runs] == [kwargs.get("schedule", "splits")] * 3


def test_k_means_plus_plus_schedule_runs_the_restarts_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """schedule='k-means++': every run is a k-means++ restart (no temperature run), the lowest J
    is kept, and the runs are those an annealed fit with the same n_init restarts with (the same
    seeds); the result is a Lloyd fixed point of X."""
    X, _ = make_blobs(n_samples=900, centers=12, cluster_std=2.0, random_state=3)
    runs = _spy_runs(monkeypatch)
    one = RBFKMeans(10, schedule="k-means++", random_state=0).fit(X)
    assert [s for s, _ in runs] == [runs_mod.RESTART]
    assert one.temperatures_.size == 0
    assert one.history_ == []
    runs.clear()
    several = RBFKMeans(10, schedule="k-means++", n_init=4, random_state=0).fit(X)
    restarts = [out["inertia"] for _, out in runs]
    assert [s for s, _ in runs] == [runs_mod.RESTART] * 4
    assert restarts[0] == pytest.approx(one.inertia_, rel=1e-12)
    assert several.inertia_ == pytest.approx(min(restarts), rel=1e-12)
    runs.clear()
    RBFKMeans(10, n_init=4, random_state=0).fit(X)  # annealed once, then the same restarts
    assert [out["inertia"] for _, out in runs[1:]] == pytest.approx(restarts[1:], rel=1e-12)
    C = several.cluster_centers_
    labels = np.argmin(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(several.labels_, labels)
    means = np.stack([X[labels == j].mean(0) for j in range(10)])
    np.testing.assert_allclose(C, means, rtol=1e-9, atol=1e-9)
    assert several.inertia_ == pytest.approx(float(((X - C[labels]) ** 2).sum()), rel=1e-9)


@pytest.mark.parametrize("fit_rows", [None, 2000])
def test_hard_fits_ignore_the_k_means_plus_plus_schedule(fit_rows: int | None) -> None:
    """Plain Lloyd whatever the schedule: the same start (with fit_rows drawn from 16 k of the
    sample's rows, not from the search rows a restart draws from) and the same iterations."""
    X, _ = make_blobs(n_samples=6000, centers=8, cluster_std=3.0, random_state=1)
    kw = {"assignment": "hard", "n_init": 2, "fit_rows": fit_rows, "random_state": 0}
    a = RBFKMeans(8, schedule="k-means++", **kw).fit(X)
    b = RBFKMeans(8, **kw).fit(X)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_


@pytest.mark.parametrize("init", ["mean", "random", "array", "callable"])
def test_k_means_plus_plus_schedule_refuses_another_start(init: str) -> None:
    X = X0.copy()
    value: Any = {"array": X0[:3].copy(), "callable": lambda X, k, rs: X[:k]}.get(init, init)
    shown = repr(init) if init in ("mean", "random") else \
        {"array": "a ndarray", "callable": "a function"}[init]
    with pytest.raises(ValueError, match=rf"^schedule='k-means\+\+' draws its own .*init must "
                       rf"be 'auto' or 'k-means\+\+'; got init={re.escape(shown)}$"):
        RBFKMeans(3, schedule="k-means++", init=value).fit(X)
    np.testing.assert_array_equal(X, X0)
    RBFKMeans(3, schedule="k-means++", init="k-means++", random_state=0).fit(X)  # accepted


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_a_restart_ends_at_a_lloyd_fixed_point_of_its_metric(metric: str) -> None:
    """A k-means++ restart run (fit_run with RESTART): its labels are the nearest centroids
    and its centroids the (spherical) means of its labels, J as recomputed."""
    from rbfkmeans.passes import Data

    X, _ = make_blobs(n_samples=700, centers=6, n_features=3, cluster_std=1.5, random_state=4)
    X = X + 5.0  # cosine: away from the origin
    fitted = RBFKMeans(6, metric=metric, random_state=0).fit(X)
    data = Data(torch.as_tensor(X), metric=metric)
    out = runs_mod.fit_run(fitted, data, 7, 0.0, 1.0, 1, runs_mod.RESTART)
    C = out["C"].numpy()
    labels = out["labels"].numpy()
    if metric == "cosine":
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        np.testing.assert_array_equal(labels, np.argmax(U @ C.T, axis=1))
        means = np.stack([U[labels == j].sum(0) for j in range(6)])
        means /= np.linalg.norm(means, axis=1, keepdims=True)
        J = float((1.0 - (U * C[labels]).sum(1)).sum())
    else:
        np.testing.assert_array_equal(labels, np.argmin(
            ((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1))
        means = np.stack([X[labels == j].mean(0) for j in range(6)])
        J = float(((X - C[labels]) ** 2).sum())
    np.testing.assert_allclose(C, means, rtol=1e-9, atol=1e-9)
    assert out["inertia"] == pytest.approx(J, rel=1e-9)
    assert out["temperatures"] == []
    assert out["history"] == []


def test_hartigan_polish_is_bounded_by_the_search_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hartigan polish takes at most HARTIGAN_PASSES passes and at most the swap search's
    work budget: SEARCH_PASSES passes over all the rows (here 3), spread over the rows it runs
    on (the search subsample: 3 x 3000 / 200 = 45; all rows: 3)."""
    import rbfkmeans.refine as R
    import rbfkmeans.runs as E

    monkeypatch.setattr(E, "SEARCH_MIN_ROWS", 200)
    monkeypatch.setattr(E, "SEARCH_ROWS_PER_CLUSTER", 16)
    monkeypatch.setattr(R, "SEARCH_PASSES", 3)
    monkeypatch.setattr(R, "SEARCH_WORK", 1)
    calls: list[tuple[int, int]] = []
    real = R.hartigan

    def spy(data, labels, k, *, max_passes, **kw):  # type: ignore[no-untyped-def]
        out = real(data, labels, k, max_passes=max_passes, **kw)
        calls.append((data.n, max_passes))
        assert out.n_passes <= max_passes
        return out

    monkeypatch.setattr(R, "hartigan", spy)
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 1.0, size=(500, 3)) for c in range(6)])  # 3000 rows
    RBFKMeans(8, random_state=0, subsample=16).fit(X)
    assert calls
    assert all(passes == (45 if n == 200 else 3) for n, passes in calls)
    assert calls[-1] == (3000, 3)
    monkeypatch.setattr(R, "SEARCH_WORK", 1 << 33)  # small data: the pass cap alone
    calls.clear()
    RBFKMeans(8, random_state=0, subsample=16).fit(X)
    assert all(passes == R.HARTIGAN_PASSES for _, passes in calls)


def test_hartigan_rounds_share_their_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rounds of Hartigan's moves on the search rows take HARTIGAN_PASSES passes in all: each
    round is given what the rounds before left, and none starts once they are spent (here a
    first round of 11 passes and a second of 4 under the cap of 100; under a cap of 3 the first
    round spends it and no second round runs)."""
    import rbfkmeans.refine as R

    calls: list[tuple[int, int]] = []
    real = R.hartigan

    def spy(data, labels, k, *, max_passes, **kw):  # type: ignore[no-untyped-def]
        out = real(data, labels, k, max_passes=max_passes, **kw)
        calls.append((max_passes, out.n_passes))
        return out

    monkeypatch.setattr(R, "hartigan", spy)
    X = np.random.default_rng(0).uniform(size=(3000, 2))
    RBFKMeans(30, random_state=0).fit(X)
    assert len(calls) == 2
    assert calls[0][0] == R.HARTIGAN_PASSES
    assert calls[1][0] == R.HARTIGAN_PASSES - calls[0][1]
    first = calls[0][1]
    assert first > 3
    calls.clear()
    monkeypatch.setattr(R, "HARTIGAN_PASSES", 3)
    RBFKMeans(30, random_state=0).fit(X)
    assert calls == [(3, 3)]


def test_no_hartigan_on_all_rows_after_an_unsettled_polish(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hartigan's moves on all rows start only from a Lloyd fixed point of all rows: where the
    last polish stops at max_iter they are skipped (and the fit warns that it did not settle)."""
    import rbfkmeans.refine as R
    import rbfkmeans.runs as E

    monkeypatch.setattr(E, "SEARCH_MIN_ROWS", 200)
    monkeypatch.setattr(E, "SEARCH_ROWS_PER_CLUSTER", 16)
    # 25 rows per cluster judge J 10% low (the sample's own fit): no search of all rows here
    monkeypatch.setattr(R, "SAMPLE_TOLERANCE", math.inf)
    rows_seen: list[int] = []
    real = R.hartigan

    floors: list[float] = []

    def spy(data, labels, k, *, max_passes, min_gain=0.0, start=None):  # type: ignore[no-untyped-def]
        rows_seen.append(data.n)
        floors.append(min_gain)
        return real(data, labels, k, max_passes=max_passes, min_gain=min_gain, start=start)

    monkeypatch.setattr(R, "hartigan", spy)
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 1.0, size=(500, 3)) for c in range(6)])  # 3000 rows
    est = RBFKMeans(8, random_state=0, subsample=16).fit(X)
    assert rows_seen[-1] == 3000  # settled: the moves ran on all rows
    # on the search rows every paying batch counts; on all rows only those worth
    # HARTIGAN_MIN_GAIN of J (J of the Lloyd fixed point they start from)
    assert floors[:-1] == [0.0] * (len(floors) - 1)
    assert floors[-1] == pytest.approx(R.HARTIGAN_MIN_GAIN * est.inertia_, rel=1e-3)
    rows_seen.clear()
    with pytest.warns(ConvergenceWarning, match="did not settle"):
        RBFKMeans(8, random_state=0, subsample=16, max_iter=1).fit(X)
    assert 3000 not in rows_seen


def test_set_output_pandas_wraps_transform_too() -> None:
    """scikit-learn's ``set_output`` wraps only a class's own ``transform``: ``fit_transform``
    gave a DataFrame and ``transform`` (inherited from the inference mixin) an ndarray, so a
    Pipeline's ``transform`` did too."""
    pd = pytest.importorskip("pandas")
    X, _ = make_blobs(60, 3, centers=3, random_state=0)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    est = RBFKMeans(3, random_state=0).set_output(transform="pandas").fit(df)
    out = est.transform(df)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["rbfkmeans0", "rbfkmeans1", "rbfkmeans2"]
    np.testing.assert_array_equal(out.to_numpy(), RBFKMeans(3, random_state=0).fit(df)
                                  .transform(df))
    assert isinstance(est.fit_transform(df), pd.DataFrame)


def test_fit_rows_below_n_clusters_is_refused() -> None:
    """A sample of fewer rows than clusters cannot hold a row per centroid (it left a cluster
    empty, 5.7x the inertia of ``fit_rows=None``); ``fit_rows = n_clusters`` still fits."""
    X, _ = make_blobs(300, n_features=4, centers=5, random_state=2)
    with pytest.raises(ValueError, match=r"fit_rows must be None or at least n_clusters=5.*3"):
        RBFKMeans(5, random_state=0, fit_rows=3).fit(X)
    model = RBFKMeans(5, random_state=0, fit_rows=5).fit(X)
    assert np.bincount(model.labels_, minlength=5).min() > 0


def test_partial_fit_does_not_continue_a_model_of_another_metric() -> None:
    """Euclidean centroids are not unit directions: continuing them as cosine ones gave centres
    of norm ~200 and an ``inertia_`` 40x the spherical objective at those centres."""
    X, _ = make_blobs(300, n_features=4, centers=5, random_state=2)
    model = RBFKMeans(5, random_state=0).fit(X + 100)
    before = model.cluster_centers_.copy()
    with pytest.raises(ValueError, match=r"metric='cosine' differs from the metric='sqeuclidean'"):
        model.set_params(metric="cosine").partial_fit(X[:100] + 100)
    assert np.array_equal(model.cluster_centers_, before)
    model.set_params(metric="sqeuclidean").partial_fit(X[:100] + 100)  # the same metric: goes on
    spherical = RBFKMeans(5, random_state=0, metric="cosine").partial_fit(X)
    with pytest.raises(ValueError, match=r"metric='sqeuclidean' differs"):
        spherical.set_params(metric="sqeuclidean").partial_fit(X)


@pytest.mark.parametrize("returned", [3, None, "adam"])
def test_an_optimizer_factory_must_return_an_optimizer(returned: Any) -> None:
    X, _ = make_blobs(200, n_features=3, centers=3, random_state=0)
    with pytest.raises(TypeError, match=rf"optimizer must build a torch.optim.Optimizer.*"
                                        rf"returned {type(returned).__name__}"):
        RBFKMeans(3, solver="gradient", optimizer=lambda params: returned).fit(X)
    model = RBFKMeans(3, solver="gradient", random_state=0,
                      optimizer=lambda params: torch.optim.SGD(params, lr=0.1)).fit(X)
    assert np.isfinite(model.inertia_)


def test_float32_fits_refuse_weights_and_data_that_float32_cannot_hold() -> None:
    """The weights are checked in the dtype the fit computes in, their sum too, and float64 data
    fitted with ``dtype='float32'`` must keep its values in float32: before, such fits failed
    inside torch (``linalg.eigh``), named other parameters (``C``, ``w``, a mean of 0), or
    returned every centre 0 with ``inertia_`` 0."""
    rng = np.random.default_rng(0)
    X64 = rng.standard_normal((50, 3))
    X32 = X64.astype(np.float32)
    total = r"sample_weight must have a sum finite in float32 .* got a sum of 5e\+39"
    for kwargs in ({}, {"assignment": "hard"}, {"metric": "cosine"}):
        with pytest.raises(ValueError, match=total):
            RBFKMeans(3, **kwargs).fit(X32, sample_weight=np.full(50, 1e38))
    as32 = RBFKMeans(3, dtype="float32")
    for call in (as32.fit, as32.partial_fit, as32.fit_batches):
        with pytest.raises(ValueError, match=r"sample_weight must be finite in float32 .* 1e\+300"):
            call(X64, sample_weight=np.full(50, 1e300))
        with pytest.raises(ValueError, match=r"sample_weight must have a largest weight of at "
                                             r"least 1\.18e-38 .* float32"):
            call(X64, sample_weight=np.full(50, 1e-50))
    for factor, top in ((1e40, r"2\.37e\+40"), (1e-50, r"2\.37e-50")):
        with pytest.raises(ValueError, match=rf"X does not fit dtype='float32': its largest \|x\| "
                                             rf"is {top}"):
            RBFKMeans(3, dtype="float32").fit(X64 * factor)
    # what float32 holds still fits, to float32 rounding of the float64 fit
    ok = RBFKMeans(3, dtype="float32", random_state=0).fit(X64 * 1e30,
                                                           sample_weight=np.full(50, 1e36))
    ref = RBFKMeans(3, random_state=0).fit(X64 * 1e30, sample_weight=np.full(50, 1e36))
    assert ok.inertia_ == pytest.approx(ref.inertia_, rel=1e-4)


def test_a_ladder_that_would_warm_up_is_refused() -> None:
    """``T_end`` above ``T_start`` gave a ladder of one temperature (geometric) or a few below
    ``T_start`` (splits), silently; equal temperatures are one rung."""
    X, _ = make_blobs(200, centers=3, random_state=0)
    for schedule in ("geometric", "splits"):
        with pytest.raises(ValueError, match=r"T_end must be at most T_start.*0\.01.*T_end=1\.0"):
            RBFKMeans(3, T_start=0.01, T_end=1.0, schedule=schedule).fit(X)
    assert np.isfinite(RBFKMeans(3, T_start=0.5, T_end=0.5, schedule="geometric",
                                 random_state=0).fit(X).inertia_)


def test_a_callable_init_sees_every_row() -> None:
    """Repeated rows are fitted as one weighted row where that removes a tenth of them; a
    callable ``init`` had then been given the distinct rows (180 of 300), without weights, so a
    start drawn uniformly from its ``X`` no longer drew rows as often as they occur."""
    rng = np.random.default_rng(0)
    X = np.repeat(rng.normal(size=(180, 2)), [2] * 120 + [1] * 60, axis=0)  # 300 rows
    seen: list[tuple[int, int]] = []

    def first_rows(A: np.ndarray, k: int, random_state: Any) -> np.ndarray:
        seen.append(A.shape)
        return A[:k]

    model = RBFKMeans(3, init=first_rows, random_state=0).fit(X)
    assert seen == [(300, 2)]
    assert np.isfinite(model.inertia_)


def test_a_float32_model_refuses_rows_whose_distances_overflow_float32() -> None:
    """A model that computes in float32 gave inf distances and NaN memberships for a row at
    1e20 (its squared distance, 3e40, is beyond float32), silently, and a label only where the
    compiled kernels happened to run; a float64 model gives the finite values."""
    X = np.random.default_rng(0).normal(size=(200, 3))
    far = np.full((1, 3), 1e20)
    model = RBFKMeans(3, random_state=0).fit(X.astype(np.float32))
    for call in (model.transform, model.predict, lambda z: model.predict_proba(z, 1.0)):
        with pytest.raises(ValueError, match=r"X lies too far from the centroids for "
                                             r"torch\.float32"):
            call(far.astype(np.float32))
    wide = RBFKMeans(3, random_state=0).fit(X)
    np.testing.assert_allclose(wide.transform(far), np.linalg.norm(
        far - wide.cluster_centers_, axis=1)[None], rtol=1e-12)


def test_fit_transform_of_a_batch_source() -> None:
    """fit_transform on a DataLoader fitted it and then failed inside transform, leaving the
    model changed; now the distances of a second pass, and a one-shot iterator is refused
    before anything changes."""
    from torch.utils.data import DataLoader, TensorDataset

    X = np.random.default_rng(0).normal(size=(150, 2))
    model = RBFKMeans(3, random_state=0)
    D = model.fit_transform(DataLoader(TensorDataset(torch.from_numpy(X)), batch_size=50))
    np.testing.assert_allclose(D, model.transform(X), rtol=1e-12)
    fitted = RBFKMeans(3, random_state=0).fit(X + 100)
    before = fitted.cluster_centers_.copy()
    with pytest.raises(ValueError, match="fit_transform needs the data again"):
        fitted.fit_transform(iter([X]))
    np.testing.assert_array_equal(fitted.cluster_centers_, before)
    assert hasattr(fitted, "labels_")


def test_partial_fit_keeps_the_models_dtype() -> None:
    X = np.random.default_rng(0).normal(size=(100, 3))
    model = RBFKMeans(3, random_state=0).fit(X)
    model.partial_fit(X[:10].astype(np.float32))
    assert model.cluster_centers_.dtype == np.float64
