"""The fitted model's geometry after ``set_params``, starts and weights given as tensors that
carry a gradient or as arrays NumPy cannot read, an optimiser that diverges, the annealing's
attributes after ``partial_fit`` continues a fit, ``transform`` of float32 rows, ``history_`` of
an annealing on a subsample, and cosine rows without a mean direction (one test per defect two
probes found)."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

import rbfkmeans as rk

K = 4


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    X, _ = make_blobs(200, n_features=3, centers=K, random_state=0)
    return X + 20.0  # away from the origin: cosine and Euclidean nearest centres differ


# -- 1. inference keeps the fitted metric --------------------------------------------------------
@pytest.mark.parametrize(("fitted", "changed"), [("sqeuclidean", "cosine"),
                                                 ("cosine", "sqeuclidean")])
def test_inference_keeps_the_fitted_metric_after_set_params(X: np.ndarray, fitted: str,
                                                            changed: str) -> None:
    model = rk.RBFKMeans(K, metric=fitted, random_state=0).fit(X)
    before = (model.labels_.copy(), model.transform(X), model.score(X), model.predict_proba(X))
    model.set_params(metric=changed)
    np.testing.assert_array_equal(model.predict(X), before[0])
    np.testing.assert_array_equal(model.transform(X), before[1])
    assert model.score(X) == before[2]
    np.testing.assert_array_equal(model.predict_proba(X), before[3])
    assert model.to_layer().metric == fitted
    assert np.array_equal(model.transform(X).argmin(axis=1), model.predict(X))


def test_a_refit_takes_the_new_metric(X: np.ndarray) -> None:
    model = rk.RBFKMeans(K, random_state=0).fit(X).set_params(metric="cosine").fit(X)
    reference = rk.RBFKMeans(K, metric="cosine", random_state=0).fit(X)
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    np.testing.assert_array_equal(model.predict(X), reference.labels_)


# -- 2. init -------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_init_may_be_a_tensor_that_requires_grad(X: np.ndarray, method: str) -> None:
    start = torch.tensor(X[:K] + 0.5, requires_grad=True)
    kept = start.detach().clone()
    got = getattr(rk.RBFKMeans(K, init=start, random_state=0), method)(X)
    want = getattr(rk.RBFKMeans(K, init=X[:K] + 0.5, random_state=0), method)(X)
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    assert torch.equal(start.detach(), kept)
    assert start.grad is None
    assert start.requires_grad


def test_init_may_be_a_layers_parameter(X: np.ndarray) -> None:
    layer = rk.KMeansLayer(torch.tensor(X[:K]), learnable=True)
    model = rk.RBFKMeans(K, init=layer.centroids, random_state=0).fit(X)
    assert np.isfinite(model.inertia_)
    assert layer.centroids.grad is None


@pytest.mark.parametrize(("init", "message"), [
    ([[1.0, 2.0, 3.0], [1.0, 2.0]], "init must be an array of numbers; got a list that is not "
                                    "one array"),
    (lambda X, k, rs: [[1.0, 2.0, 3.0], [1.0]], "the array init returned must be an array of "
                                                 "numbers"),
    (torch.zeros(K, 3, device="meta"), "init must hold values; got a tensor on the meta device"),
])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_init_that_is_not_one_array_is_named(X: np.ndarray, init: object, message: str,
                                             method: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        getattr(rk.RBFKMeans(K, init=init, random_state=0), method)(X)


@pytest.mark.parametrize(("shift", "kwargs", "method"), [
    (0.0, {}, "fit"), (0.0, {}, "partial_fit"), (1e6, {"assignment": "hard"}, "fit"),
])
def test_a_complex_init_is_refused(X: np.ndarray, shift: float, kwargs: dict[str, object],
                                   method: str) -> None:
    """Its imaginary part had been dropped (complex X is refused)."""
    model = rk.RBFKMeans(K, init=X[:K] + shift + 1j, random_state=0, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Casting complex values to real" neither
        with pytest.raises(ValueError, match=r"init must hold real numbers; got complex"):
            getattr(model, method)(X + shift)


# -- 3. sample_weight ----------------------------------------------------------------------------
def test_sample_weight_may_be_a_tensor_that_requires_grad(X: np.ndarray) -> None:
    rng = np.random.default_rng(1)
    w_np = rng.uniform(0.5, 2.0, len(X))
    w = torch.tensor(w_np, requires_grad=True)
    got = rk.RBFKMeans(K, random_state=0).fit(X, sample_weight=w)
    want = rk.RBFKMeans(K, random_state=0).fit(X, sample_weight=w_np)
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    assert got.score(X, sample_weight=w) == want.score(X, sample_weight=w_np)
    online = rk.RBFKMeans(K, random_state=0).partial_fit(X, sample_weight=w)
    np.testing.assert_array_equal(
        online.cluster_centers_,
        rk.RBFKMeans(K, random_state=0).partial_fit(X, sample_weight=w_np).cluster_centers_)
    assert w.grad is None
    assert torch.equal(w.detach(), torch.tensor(w_np))


def test_ragged_sample_weight_is_named(X: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"sample_weight must be a scalar or an array of "
                       r"numbers; got a list that is not one array"):
        rk.RBFKMeans(K).fit(X, sample_weight=[1.0, [2.0, 3.0]])


# -- 4. a diverging optimiser of the gradient solver ---------------------------------------------
@pytest.mark.parametrize("optimizer", [
    lambda p: torch.optim.SGD(p, lr=1e12),
    lambda p: torch.optim.SGD(p, lr=math.nan),
    lambda p: torch.optim.Adam(p, lr=1e200),
])
def test_a_diverging_optimizer_is_named(X: np.ndarray, optimizer: object) -> None:
    """It had been reported as "X holds NaN or inf ... check X" (X is finite)."""
    model = rk.RBFKMeans(K, solver="gradient", optimizer=optimizer, random_state=0)
    with pytest.raises(rk.NonFiniteError, match=r"^optimizer: (SGD|Adam) \(lr=.*\) diverged at "
                       r"iteration \d+ at temperature=.*use a smaller learning rate") as info:
        model.fit(X)
    assert "check X" not in str(info.value)


def test_a_converging_optimizer_still_fits(X: np.ndarray) -> None:
    model = rk.RBFKMeans(K, solver="gradient", random_state=0,
                         optimizer=lambda p: torch.optim.Adam(p, lr=0.1)).fit(X)
    reference = rk.RBFKMeans(K, random_state=0).fit(X)
    assert model.inertia_ == pytest.approx(reference.inertia_, rel=1e-6)


# -- 5. partial_fit after fit --------------------------------------------------------------------
def test_partial_fit_after_fit_clears_the_annealings_attributes(X: np.ndarray) -> None:
    model = rk.RBFKMeans(K, random_state=0, max_swaps=8).fit(X)
    assert math.isfinite(model.critical_temperature_)
    assert model.history_
    swaps = model.n_swaps_
    model.partial_fit(X[:50])
    assert math.isnan(model.critical_temperature_)
    assert model.history_ == []
    assert model.temperatures_.size == 0
    assert model.temperature_ == 0.0
    assert model.n_swaps_ == swaps


# -- 6. transform of float32 rows ----------------------------------------------------------------
@pytest.mark.parametrize(("box", "std", "d", "sparse"), [
    ((-100.0, 100.0), 0.1, 10, False), ((-100.0, 100.0), 0.1, 10, True),
    ((-3000.0, 3000.0), 0.05, 3, False), ((-10.0, 10.0), 0.1, 3, False),
])
def test_transform_of_float32_rows_is_accurate(box: tuple[float, float], std: float, d: int,
                                               sparse: bool) -> None:
    """Distances had been expanded in float32 about the centroids' mean: rounding of eps times
    the clusters' spread (31% of a row's distance to its own centre, 117x on the wide box)."""
    import scipy.sparse

    X, _ = make_blobs(2000, centers=8, n_features=d, cluster_std=std, center_box=box,
                      random_state=35)
    X = X.astype(np.float32)
    model = rk.RBFKMeans(8, random_state=0).fit(X)
    exact = np.sqrt(((X.astype(np.float64)[:, None] - model.cluster_centers_[None]) ** 2)
                    .sum(-1))
    got = model.transform(scipy.sparse.csr_matrix(X) if sparse else X)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=1e-6)


def test_transform_of_float64_rows_is_unchanged(X: np.ndarray) -> None:
    model = rk.RBFKMeans(K, random_state=0).fit(X)
    exact = np.sqrt(((X[:, None] - model.cluster_centers_[None]) ** 2).sum(-1))
    np.testing.assert_allclose(model.transform(X), exact, rtol=1e-12)
    assert model.transform(X).dtype == np.float64


# -- 7. history_ of an annealing on a subsample --------------------------------------------------
def test_history_of_a_subsampled_annealing_is_in_the_datas_scale() -> None:
    """It had held the subsample's sums: J about n / 4096 times too small."""
    X, _ = make_blobs(20000, centers=4, n_features=3, cluster_std=1.5, random_state=42)
    model = rk.RBFKMeans(4, random_state=0).fit(X)
    last = model.history_[-1]
    J = ((X[:, None] - last["centers"][None]) ** 2).sum(-1).min(1).sum()
    assert 0.0 < last["sample_fraction"] < 1.0
    assert last["inertia"] == pytest.approx(J, rel=0.05)
    assert last["inertia"] == pytest.approx(model.inertia_, rel=0.05)
    assert last["n_soft"] <= len(X)


def test_history_on_all_rows_is_exact() -> None:
    X, _ = make_blobs(2000, centers=4, n_features=3, cluster_std=1.5, random_state=42)
    model = rk.RBFKMeans(4, random_state=0, subsample=None).fit(X)
    for entry in model.history_:
        assert entry["sample_fraction"] == 1.0
        J = ((X[:, None] - entry["centers"][None]) ** 2).sum(-1).min(1).sum()
        assert entry["inertia"] == pytest.approx(J, rel=1e-9)


# -- 8. cosine rows whose directions average to zero ---------------------------------------------
@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax", "hard"])
def test_cosine_rows_without_a_mean_direction_fit_by_default(assignment: str) -> None:
    """The default start ("auto": the mean) had refused them, naming init='mean'."""
    X = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1], [2, 0.1], [-2, -0.1]])
    model = rk.RBFKMeans(2, metric="cosine", assignment=assignment, random_state=0).fit(X)
    nudged = X.copy()
    nudged[0, 0] += 1e-12  # a mean direction of rounding's size: the annealing from it
    reference = rk.RBFKMeans(2, metric="cosine", assignment=assignment, random_state=0).fit(nudged)
    assert model.inertia_ == pytest.approx(reference.inertia_, rel=1e-9)
    if assignment != "hard":  # (hard: plain Lloyd from k-means++, local minima included)
        hexagon = np.array([[np.cos(t), np.sin(t)] for t in np.arange(6) * np.pi / 3])
        assert rk.RBFKMeans(3, metric="cosine", assignment=assignment, random_state=0).fit(
            hexagon).inertia_ == pytest.approx(6 * (1 - np.cos(np.pi / 6)), rel=1e-9)


def test_an_explicit_mean_start_without_a_direction_is_still_named() -> None:
    X = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    with pytest.raises(ValueError, match=r"init='mean' with metric='cosine' needs a mean "
                       "direction"):
        rk.RBFKMeans(2, metric="cosine", init="mean").fit(X)


# -- 9. T_end on the event-driven ladder, fit_rows that sample nothing ---------------------------
@pytest.fixture(scope="module")
def blobs6() -> np.ndarray:
    return make_blobs(1500, n_features=5, centers=6, cluster_std=1.2, random_state=1)[0]


@pytest.mark.parametrize(("kwargs", "coldest"), [
    ({"T_start": 1000.0, "T_end": 100.0}, 100.0), ({"T_start": 5.0, "T_end": 5.0}, 5.0),
])
def test_the_event_driven_ladder_stops_at_T_end(blobs6: np.ndarray, kwargs: dict[str, float],
                                                coldest: float) -> None:
    """It had run past T_end, which only the geometric ladder read."""
    model = rk.RBFKMeans(6, random_state=0, **kwargs).fit(blobs6)
    assert model.temperatures_.min() == pytest.approx(coldest, rel=1e-12)
    assert model.temperatures_[-1] == pytest.approx(coldest, rel=1e-12)
    assert np.all(np.diff(model.temperatures_) < 0)
    geometric = rk.RBFKMeans(6, random_state=0, schedule="geometric", **kwargs).fit(blobs6)
    assert geometric.temperatures_[-1] == pytest.approx(coldest, rel=1e-12)


def test_a_T_end_below_the_ladders_end_changes_nothing(blobs6: np.ndarray) -> None:
    default = rk.RBFKMeans(6, random_state=0).fit(blobs6)
    cold = rk.RBFKMeans(6, random_state=0, T_end=1e-9).fit(blobs6)
    np.testing.assert_array_equal(cold.temperatures_, default.temperatures_)
    np.testing.assert_array_equal(cold.cluster_centers_, default.cluster_centers_)


@pytest.mark.parametrize("kwargs", [{"assignment": "hard"},
                                    {"assignment": "entmax15", "init": "k-means++"}])
def test_fit_rows_that_sample_nothing_draw_the_start_as_documented(
        kwargs: dict[str, str]) -> None:
    """fit_rows >= n samples nothing: every such value gives one fit, a valid Lloyd fixed point
    of J at most that of fit_rows=None's within 1%; its k-means++ start is drawn from 16 k rows
    (the docstring), so it equals fit_rows=None only from other starts."""
    X, _ = make_blobs(3000, n_features=4, centers=8, cluster_std=2.5, random_state=3)
    plain = rk.RBFKMeans(8, random_state=0, **kwargs).fit(X)
    at_n = rk.RBFKMeans(8, random_state=0, fit_rows=len(X), **kwargs).fit(X)
    above = rk.RBFKMeans(8, random_state=0, fit_rows=10**6, **kwargs).fit(X)
    np.testing.assert_array_equal(at_n.cluster_centers_, above.cluster_centers_)
    assert at_n.inertia_ <= plain.inertia_ * 1.01
    for start in ("mean", "random"):
        if kwargs["assignment"] == "hard" and start == "mean":
            continue
        ref = rk.RBFKMeans(8, random_state=0, **kwargs | {"init": start}).fit(X)
        got = rk.RBFKMeans(8, random_state=0, fit_rows=10**6,
                           **kwargs | {"init": start}).fit(X)
        np.testing.assert_array_equal(got.cluster_centers_, ref.cluster_centers_)
