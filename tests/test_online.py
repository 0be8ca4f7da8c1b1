"""RBFKMeans.partial_fit: MacQueen's online k-means and its soft version.

The reference is an explicit SGD loop written here, one point at a time, with autograd on the
per-point loss (``w min_j ||x - c_j||^2`` hard, ``-2T w logsumexp(-d/2T)`` softmax, and for
entmax-1.5 ``w sum_j r_j d_j`` with ``r`` from the ``entmax`` package held fixed: by the envelope
theorem its gradient is that of the Tsallis relaxation) and the per-cluster step
``eta_j = 1/(2 n_j)``, with the running count ``n_j <- n_j + w r_j`` updated first; a fresh
model's counts start at one (each start seen once).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.datasets import make_blobs

from rbfkmeans import RBFKMeans

entmax = pytest.importorskip("entmax")




def sgd_reference(
    X: np.ndarray, C0: np.ndarray, T: float, assignment: str, w: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-point SGD with eta_j = 1 / (2 n_j); returns (centroids, counts)."""
    C = torch.tensor(C0, dtype=torch.float64)
    n = np.zeros(len(C0)) if counts is None else counts.astype(np.float64).copy()
    w = np.ones(len(X)) if w is None else w
    for x_np, wi in zip(X, w, strict=True):
        x = torch.tensor(x_np, dtype=torch.float64)
        Cp = C.clone().requires_grad_(True)
        d = ((x - Cp) ** 2).sum(1)  # (k,)
        if assignment == "hard" or T == 0:
            loss = wi * d.min()
            r = torch.zeros_like(d)
            r[int(d.argmin())] = 1.0
        elif assignment == "softmax":
            loss = -2 * T * wi * torch.logsumexp(-d / (2 * T), 0)
            r = torch.softmax(-d.detach() / (2 * T), 0)
        else:
            r = entmax.entmax15(-d.detach() / (2 * T), dim=0)
            loss = wi * (r * d).sum()
        (g,) = torch.autograd.grad(loss, Cp)
        n += wi * r.numpy()
        eta = np.where(n > 0, 1.0 / (2.0 * np.where(n > 0, n, 1.0)), 0.0)  # (k,)
        C = C - torch.from_numpy(eta).unsqueeze(1) * g
    return C.numpy(), n


def data(n: int = 60, seed: int = 0) -> np.ndarray:
    X, _ = make_blobs(n, n_features=2, centers=3, random_state=seed)
    return X


@pytest.mark.parametrize(("assignment", "T"),
                         [("hard", None), ("softmax", 0.7), ("entmax15", 0.7)])
@pytest.mark.parametrize("weighted", [False, True])
def test_partial_fit_is_sgd_with_eta_one_over_two_n(assignment, T, weighted) -> None:
    X = data()
    C0 = X[[0, 1, 2]].copy()
    w = np.random.RandomState(0).uniform(0.2, 3.0, len(X)) if weighted else None
    est = RBFKMeans(3, assignment=assignment, temperature=T, init=C0, random_state=0)
    for s in (slice(0, 25), slice(25, 60)):
        est.partial_fit(X[s], sample_weight=None if w is None else w[s])
    C_ref, _ = sgd_reference(X, C0, T or 0.0, assignment, w, counts=np.ones(3))
    np.testing.assert_allclose(est.cluster_centers_, C_ref, atol=1e-12, rtol=0)
    assert est.n_iter_ == 2
    # labels_ and inertia_ describe the last batch at the new centroids
    d = ((X[25:, None, :] - C_ref[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(est.labels_, d.argmin(1))
    wl = np.ones(35) if w is None else w[25:]
    assert est.inertia_ == pytest.approx(float(wl @ d.min(1)), rel=1e-10)


def test_macqueen_is_a_running_mean() -> None:
    """Hard MacQueen from a fresh start: each centroid is the mean of its start and the points
    it took."""
    X = data()
    C0 = X[[0, 1, 2]].copy() + 0.25
    est = RBFKMeans(3, assignment="hard", init=C0).partial_fit(X)
    C, taken = C0.copy(), [[c] for c in C0]
    for x in X:
        j = int(((C - x) ** 2).sum(1).argmin())
        taken[j].append(x)
        C[j] = np.mean(taken[j], axis=0)
    np.testing.assert_allclose(est.cluster_centers_, C, atol=1e-12)


@pytest.mark.parametrize(("assignment", "T"),
                         [("softmax", 1.0), ("softmax", 0.05), ("entmax15", 1.0)])
def test_a_soft_start_is_not_lost_to_the_first_point(assignment: str, T: float) -> None:
    """From counts of zero the first point's step ``w r_j / n_j`` was 1 for every centroid with
    ``r_j > 0``: all of them moved onto it, three of four centres coincided on four separated
    rows (at T = 1: memberships of 5e-22 sufficed) and the fit ended with merged centres. Each
    start now counts as one row: the soft rule is the hard one's limit as T falls."""
    C0 = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    X = C0 + 0.1 * np.array([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])
    est = RBFKMeans(4, assignment=assignment, temperature=T, init=C0).partial_fit(X)
    C_ref, _ = sgd_reference(X, C0, T, assignment, counts=np.ones(4))
    np.testing.assert_allclose(est.cluster_centers_, C_ref, atol=1e-12, rtol=0)
    np.testing.assert_allclose(est.cluster_centers_, (C0 + X) / 2, atol=1e-9)  # start and row
    hard = RBFKMeans(4, assignment="hard", init=C0).partial_fit(X)
    np.testing.assert_allclose(est.cluster_centers_, hard.cluster_centers_, atol=1e-9)


def test_soft_partial_fit_on_blobs_ends_at_the_hard_result_as_t_falls() -> None:
    """Four blobs, k-means++ starts: the soft fits had ended with two equal centres and J 57%
    above the hard fit's; now they approach it as T falls (no centres merged)."""
    X, _ = make_blobs(1000, n_features=2, centers=4, random_state=0)
    hard = RBFKMeans(4, assignment="hard", random_state=0).partial_fit(X)
    J_hard = -hard.score(X)
    for T in (0.5, 0.05, 0.005):
        soft = RBFKMeans(4, assignment="softmax", temperature=T, random_state=0).partial_fit(X)
        assert len(np.unique(soft.cluster_centers_.round(6), axis=0)) == 4
        assert -soft.score(X) < 1.01 * J_hard


def test_integer_weights_equal_repeated_points_online() -> None:
    X = data(30)
    sw = np.random.RandomState(1).randint(0, 4, len(X))
    C0 = X[[0, 1, 3]].copy()
    a = RBFKMeans(3, assignment="hard", init=C0).partial_fit(X, sample_weight=sw)
    b = RBFKMeans(3, assignment="hard", init=C0).partial_fit(np.repeat(X, sw, axis=0))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-12)


def test_partial_fit_continues_from_fit() -> None:
    """After fit, the counts are the fitted cluster sizes: one new point x moves its centroid
    by (x - c_j) / (N_j + 1), the others not at all."""
    X = data(90)
    est = RBFKMeans(3, assignment="hard", random_state=0).fit(X)
    C = est.cluster_centers_.copy()
    N = np.bincount(est.labels_, minlength=3)
    x = np.array([[0.5, 0.5]])
    j = int(((C - x) ** 2).sum(1).argmin())
    est.partial_fit(x)
    expected = C.copy()
    expected[j] += (x[0] - C[j]) / (N[j] + 1)
    np.testing.assert_allclose(est.cluster_centers_, expected, atol=1e-12)


def matched_error(A: np.ndarray, B: np.ndarray) -> float:
    cost = ((A[:, None] - B[None]) ** 2).sum(-1)
    r, c = linear_sum_assignment(cost)
    return float(np.sqrt(cost[r, c].max()))


@pytest.mark.parametrize(("assignment", "T"), [("hard", None), ("entmax15", 0.3)])
def test_streamed_batches_approach_the_batch_solution(assignment, T) -> None:
    X, _ = make_blobs(600, n_features=2, centers=4, random_state=3)
    batch = RBFKMeans(4, random_state=0).fit(X)
    est = RBFKMeans(4, assignment=assignment, temperature=T, random_state=0)
    rng = np.random.RandomState(0)
    errors = []
    for _ in range(3):
        order = rng.permutation(len(X))
        for i in range(0, len(X), 50):
            est.partial_fit(X[order[i : i + 50]])
        errors.append(matched_error(est.cluster_centers_, batch.cluster_centers_))
    assert errors[-1] < 0.1
    assert est.score(X) >= batch.score(X) * 1.01  # within 1% of the batch inertia


def test_first_batch_needs_n_clusters_rows() -> None:
    with pytest.raises(ValueError, match=r"needs n_samples >= n_clusters=3; got n_samples=2"):
        RBFKMeans(3).partial_fit(data()[:2])


def test_later_batches_may_be_small_and_must_match_features() -> None:
    X = data()
    est = RBFKMeans(3, assignment="hard", random_state=0).partial_fit(X)
    est.partial_fit(X[:1])
    with pytest.raises(ValueError, match="X has 3 features, but RBFKMeans is expecting 2"):
        est.partial_fit(np.ones((4, 3)))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.partial_fit(np.array([[np.nan, 0.0]]))


def test_partial_fit_leaves_inputs_alone() -> None:
    X = data()
    sw = np.linspace(0.5, 1.5, len(X))
    X_c, sw_c = X.copy(), sw.copy()
    est = RBFKMeans(3, temperature=0.5, random_state=0)
    est.partial_fit(X, sample_weight=sw).partial_fit(X, sample_weight=sw)
    np.testing.assert_array_equal(X, X_c)
    np.testing.assert_array_equal(sw, sw_c)
    assert np.isfinite(est.cluster_centers_).all()
    assert est.predict_proba(X).shape == (len(X), 3)
