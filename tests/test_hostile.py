"""Hostile but ordinary input, at every public entry point: the bad-input policy as properties.

The policy (docs/index.md): a correct result, or one ``TypeError`` / ``ValueError`` that names
the parameter; no NaN out of finite input; the caller's arrays and a fitted model untouched by a
call that fails; work bounded by the data, not by extreme values of weights or temperatures.
Correct means: against scikit-learn or a float64 reference, and invariant where the mathematics
is (a translation or a power-of-two rescaling of the data changes neither the partition nor the
memberships).
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score

import rbfkmeans as rk
from rbfkmeans.frame import Frame
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data
from rbfkmeans.stats import cluster_stats

# -- every public function: a bad argument is named, never an IndexError or an AttributeError ---

_g = torch.Generator().manual_seed(0)
_X = torch.randn(30, 3, generator=_g, dtype=torch.float64)
_C = _X[:4].clone()
_DATA = Data(_X)
_HARD = lloyd(_DATA, _C, max_iter=5)

#: a valid value for every required parameter name of the functions swept below
VALID: dict[str, Any] = {
    "data": _DATA, "X": _X, "C": _C, "C0": _C, "C_new": _C, "G": _X, "z": _X, "D": _X.abs(),
    "T": 1.0, "assignment": "softmax", "n_clusters": 4, "k": 4, "m": 2, "metric": "sqeuclidean",
    "name": "softmax", "init": "k-means++", "T_start": 2.0, "T_end": 0.5, "ratio": 0.5,
    "tangent_eigmax": 1.0, "mean_norm": 0.5, "width": 4, "t": _X,
    "used": torch.tensor([3.0, 1.0, 0.0]), "temperatures": [2.0, 1.0],
    "counts": torch.zeros(4, dtype=torch.float64), "labels": _HARD.labels, "start": _HARD,
    "st": cluster_stats(_DATA, _C, 0.0, "hard", return_labels=True), "frame": Frame(),
    "empty": torch.tensor([False, True, False, False]), "exponent": -3,
    "inertia": 1.0, "J": 1.0, "N": torch.ones(4, dtype=torch.float64), "dtype": torch.float64,
}

_TENSORS = {"None": None, "a string": "abc", "a 3-D tensor": torch.zeros(2, 3, 3),
            "a complex tensor": torch.zeros(30, 3, dtype=torch.complex128)}
_REALS = {"None": None, "a string": "abc", "-1": -1.0, "nan": float("nan"),
          "inf": float("inf"), "True": True, "a 2-vector": torch.ones(2)}
_INTS = {"None": None, "a string": "3", "0": 0, "-2": -2, "2.5": 2.5, "True": True}
_NAMES = {"None": None, "3": 3, "'nope'": "nope"}
BAD: dict[str, dict[str, Any]] = {
    "data": {"a tensor": _X, "None": None, "a string": "abc"},
    **{p: _TENSORS for p in ("X", "C", "C0", "C_new", "G", "t", "counts", "labels", "used")},
    "z": {k: v for k, v in _TENSORS.items() if k != "a 3-D tensor"},  # (..., k) is valid
    "D": {k: v for k, v in _TENSORS.items() if k != "a 3-D tensor"},
    "empty": {"None": None, "a string": "abc", "a float tensor": torch.zeros(4)},
    **{p: _REALS for p in ("T", "T_start", "T_end", "ratio", "tangent_eigmax", "mean_norm")},
    **{p: {k: v for k, v in _REALS.items() if k != "-1"} for p in ("inertia", "J")},
    "N": _TENSORS,
    "dtype": {"None": None, "a string": "abc", "torch.int64": torch.int64},
    **{p: _INTS for p in ("n_clusters", "k", "m", "width")},
    **{p: _NAMES for p in ("assignment", "metric", "name")},
    "init": {"None": None, "3": 3, "'nope'": "nope", "a wrong-width array": np.zeros((4, 2))},
    "temperatures": {"None": None, "[-1.0]": [-1.0], "[nan]": [float("nan")]},
    "start": {"None": None, "a tensor": _C},
    "st": {"None": None, "a tensor": _C},
    "frame": {"None": None, "a string": "abc", "a tensor": _X},
    "exponent": {"None": None, "2.0": 2.0, "True": True},
}
#: parameters of a predicate or a converter, for which only ``None`` and strings are bad
ACCEPTED = {("kernels.usable", "X"), ("inference.to_numpy", "t"),
            ("frame.scale_by_power_of_two", "X")}  # rows (..., d): a 3-D tensor is valid

FUNCTIONS = [
    "annealing.anneal", "annealing.rebalance_duplicates", "annealing.soft_lloyd",
    "assignments.check_assignment", "assignments.get_assignment", "assignments.get_mapping",
    "costs.removal_costs", "costs.swap_costs",
    "distances.row_min", "distances.shifted_scores", "distances.sq_distances",
    "distances.membership_scores", "frame.scale_by_power_of_two", "gradient.gradient_step",
    "inference.to_numpy", "kernels.usable", "lloyd.lloyd", "mappings.entmax15",
    "mappings.entmax15_", "mappings.hardmax",
    "mappings.softmax", "mappings.softmax_", "mappings.sparsemax", "mappings.sparsemax_",
    "metrics.check_metric", "metrics.check_nonzero_rows", "metrics.cosine_similarity",
    "metrics.get_metric", "metrics.normalize_rows", "metrics.project_rows",
    "objectives.entropy_bound", "objectives.kmeans_objective",
    "objectives.objective_from_distances", "objectives.shannon_objective",
    "objectives.soft_objective", "objectives.sparsemax_objective", "objectives.tsallis_objective",
    "passes.check_labels", "stats.cluster_stats", "passes.nearest", "passes.nearest_labels",
    "quantizer.code_perplexity", "relocation.farthest_points", "relocation.hard_update",
    "relocation.mean_update", "relocation.relocate_empty", "repeats.fold_repeats",
    "residuals.cancels", "residuals.residual_sum", "residuals.settled_inertia",
    "scales.fit_scales",
    "schedules.critical_temperature",
    "schedules.critical_temperature_factor", "schedules.geometric_schedule",
    "schedules.sphere_eigmax", "seeding.initial_centers", "seeding.kmeans_plusplus",
    "seeding.weighted_mean", "splits.anneal_splits", "spread.covariance_eigmax",
    "spread.covariance_spread", "spread.sphere_spread",
    "streaming.macqueen_updates", "streaming.minibatch_step", "swaps.swap_search",
]


def _required(f: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(f).parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _cases() -> list[Any]:
    cases = []
    for qualified in FUNCTIONS:
        module, name = qualified.rsplit(".", 1)
        f = getattr(importlib.import_module(f"rbfkmeans.{module}"), name)
        params = _required(f)
        for i, p in enumerate(params):
            for label, bad in BAD.get(p, {}).items():
                if (qualified, p) in ACCEPTED and label not in ("None", "a string"):
                    continue
                cases.append(pytest.param(qualified, f, params, i, bad,
                                          id=f"{qualified}-{p}={label}"))
    return cases


def test_every_swept_function_runs_on_valid_arguments() -> None:
    """The sweep below only means something if the valid arguments are valid."""
    for qualified in FUNCTIONS:
        module, name = qualified.rsplit(".", 1)
        f = getattr(importlib.import_module(f"rbfkmeans.{module}"), name)
        args = [VALID[p] for p in _required(f)]
        if name.endswith("_"):  # in-place mappings: on a buffer of their own
            args[0] = args[0].clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f(*args)


@pytest.mark.parametrize(("qualified", "f", "params", "i", "bad"), _cases())
def test_a_bad_argument_is_named(qualified: str, f: Callable[..., Any], params: list[str],
                                 i: int, bad: Any) -> None:
    args = [VALID[p] for p in params]
    if qualified.rsplit(".", 1)[1].endswith("_") and i != 0:
        args[0] = args[0].clone()
    args[i] = bad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = f(*args)
        except (TypeError, ValueError) as exc:
            message = str(exc)
        else:
            message = None
    if message is not None:
        assert params[i] in message, f"{qualified}: the message does not name {params[i]!r}"
        return
    raise AssertionError(f"{qualified} accepted {params[i]}={bad!r} (returned "
                         f"{type(out).__name__}); it must raise TypeError or ValueError naming it")


# -- the estimator: translation and power-of-two rescaling change nothing --------------------

def _blobs(seed: int, n: int = 120, d: int = 3, k: int = 4) -> np.ndarray:
    X, _ = make_blobs(n, d, centers=k, cluster_std=0.5, random_state=seed)
    return X


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), exp=st.sampled_from([2.0, 4.0, 8.0, 9.0]),
       sign=st.sampled_from([-1.0, 1.0]))
def test_a_fit_far_from_the_origin_is_the_fit_at_the_origin(seed: int, exp: float,
                                                           sign: float) -> None:
    """float64 data shifted by up to 1e9 (spread 0.5): the same partition and inertia as at
    the origin (before the frame, a shift of 1e8 gave 1.4x scikit-learn's inertia and 1e9 an
    ARI of 0.004); scikit-learn's inertia on the shifted data is matched to 1%."""
    X = _blobs(seed)
    shift = sign * 10.0**exp * np.random.RandomState(seed).uniform(0.5, 1.0, X.shape[1])
    base = rk.RBFKMeans(4, random_state=0).fit(X)
    moved = rk.RBFKMeans(4, random_state=0).fit(X + shift)
    assert adjusted_rand_score(base.labels_, moved.labels_) == 1.0
    assert moved.inertia_ == pytest.approx(base.inertia_, rel=1e-6)
    np.testing.assert_allclose(moved.cluster_centers_ - shift, base.cluster_centers_,
                               atol=1e-9 + 1e-14 * 10.0**exp)  # the shift's own rounding
    # the shifted fit is as good as scikit-learn's there (before the frame: 1.4x); not always
    # at or below it: on seed 870 both fits end 0.077% above KMeans(n_init=10)'s minimum, at
    # the origin as far from it (the fit's quality is bench_fit's subject)
    ref = KMeans(4, n_init=10, random_state=0).fit(X + shift)
    assert moved.inertia_ <= ref.inertia_ * (1 + 1e-2)
    assert np.array_equal(moved.predict(X + shift), moved.labels_)


@pytest.mark.parametrize("offset", [2_000.0, 1e4])
def test_float32_far_from_the_origin_predicts_and_transforms_accurately(offset: float) -> None:
    """A float32 column of years (+2,000) or +1e4: ``transform`` to 1e-5 of the float64
    distances (was wrong by up to 11x), ``predict_proba`` to 1e-4 of the float64 memberships
    (was off by 0.9997), and ``predict``, ``to_layer().predict`` and the argmax of
    ``predict_proba`` agree on every row (disagreed on 8 of 300)."""
    X = (_blobs(3, n=300) + offset).astype(np.float32)
    est = rk.RBFKMeans(4, assignment="softmax", random_state=0).fit(X)
    C64 = est.cluster_centers_.astype(np.float64)
    D64 = ((X.astype(np.float64)[:, None, :] - C64[None]) ** 2).sum(-1)  # (n, k)
    np.testing.assert_allclose(est.transform(X), np.sqrt(D64), rtol=1e-5, atol=1e-3)
    T = 0.1
    Z = -D64 / (2 * T)
    P64 = np.exp(Z - Z.max(1, keepdims=True))
    P64 /= P64.sum(1, keepdims=True)
    np.testing.assert_allclose(est.predict_proba(X, temperature=T), P64, atol=1e-4)
    labels = est.predict(X)
    assert np.array_equal(labels, est.labels_)
    assert np.array_equal(est.to_layer(T).predict(torch.from_numpy(X)).numpy(), labels)
    assert np.array_equal(est.predict_proba(X, temperature=T).argmax(1), labels)


def test_objectives_far_from_the_origin() -> None:
    """``kmeans_objective(X + 1e4, C + 1e4)`` was 0.0 (true 36.4): every objective is
    translation invariant to float32 rounding of the spread."""
    X = torch.from_numpy(_blobs(5)).float()
    C = X[:4].clone()
    for f in (rk.kmeans_objective, lambda X, C: rk.shannon_objective(X, C, 0.3),
              lambda X, C: rk.tsallis_objective(X, C, 0.3),
              lambda X, C: rk.sparsemax_objective(X, C, 0.3)):
        at0 = float(f(X.double(), C.double()))
        far = float(f(X + 1e4, C + 1e4))
        assert far == pytest.approx(at0, rel=2e-3), (at0, far)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), e=st.sampled_from([-150, -60, -45, 50, 100]))
def test_power_of_two_rescaling_is_exact(seed: int, e: int) -> None:
    """``2^e X`` (float64; 2^-150 ~ 7e-46, 2^100 ~ 1e30): the same partition, centres times
    ``2^e`` exactly, inertia times ``4^e``; before, 1e-160 fitted silently wrong, 1e-170 raised
    ZeroDivisionError and 1e153 an unrelated T_start error."""
    X = _blobs(seed, n=60)
    base = rk.RBFKMeans(3, random_state=0).fit(X)
    scaled = rk.RBFKMeans(3, random_state=0).fit(np.ldexp(X, e))
    assert np.array_equal(scaled.labels_, base.labels_)
    np.testing.assert_array_equal(scaled.cluster_centers_, np.ldexp(base.cluster_centers_, e))
    assert scaled.inertia_ == pytest.approx(np.ldexp(base.inertia_, 2 * e), rel=1e-12, abs=0)
    assert not np.isnan(scaled.predict_proba(np.ldexp(X, e))).any()


@pytest.mark.parametrize("e", [60, -60])
def test_power_of_two_rescaling_scales_memberships_scores_and_online_inertia(e: int) -> None:
    """``2^e X`` (float64, fitted in a frame of its own scale) against ``X`` fitted alike: the
    memberships at temperature ``4^e T`` are those of ``X`` at ``T``, the score is ``4^e``
    times, and an online fit's ``inertia_`` is ``J`` of its last batch at its centroids."""
    X = _blobs(7, n=90)
    Xs = np.ldexp(X, e)
    base = rk.RBFKMeans(4, random_state=0).fit(X)
    scaled = rk.RBFKMeans(4, random_state=0).fit(Xs)
    assert scaled._fit_frame.exponent != 0
    for T in (30.0, 100.0, 300.0):  # some rows soft at 30, all at 100 and 300
        P = base.predict_proba(X, temperature=T)
        assert ((P > 0) & (P < 1)).any()  # soft rows: the temperature matters
        np.testing.assert_allclose(scaled.predict_proba(Xs, temperature=np.ldexp(T, 2 * e)), P,
                                   rtol=0, atol=1e-12)
    assert scaled.score(Xs) == pytest.approx(np.ldexp(base.score(X), 2 * e), rel=1e-12, abs=0)
    online = rk.RBFKMeans(4, random_state=0).partial_fit(Xs[:45]).partial_fit(Xs[45:])
    assert online._fit_frame.exponent != 0
    C = online.cluster_centers_.astype(np.float64)
    last = Xs[45:]
    D = ((last[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)  # (n, k), float64
    assert online.inertia_ == pytest.approx(D.min(axis=1).sum(), rel=1e-12, abs=0)


def test_float32_beyond_its_squares_fits_and_predicts() -> None:
    """float32 data near 1e30 (squares overflow float32) and near 1e-20 (squares underflow):
    the partition of the same data at scale 1; no NaN from predict_proba (was all NaN)."""
    X = _blobs(1, n=80)
    base = rk.RBFKMeans(4, random_state=0).fit(X.astype(np.float32))
    for scale in (1e30, 1e-20):
        Xs = (X * scale).astype(np.float32)
        est = rk.RBFKMeans(4, random_state=0).fit(Xs)
        assert adjusted_rand_score(base.labels_, est.labels_) == 1.0
        P = est.predict_proba(Xs)
        assert np.isfinite(P).all()
        np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-5)
        assert np.isfinite(est.transform(Xs)).all()


def test_float32_whose_sum_overflows_fits_without_a_warning() -> None:
    """Finite float32 rows near its largest value, of both signs: the finiteness check's sum
    overflows and scikit-learn's second check, its own sum, warned "invalid value encountered
    in reduce" (inf - inf)."""
    X = _blobs(1, n=80)
    X = X - X.mean(0)
    Xs = (X / np.abs(X).max() * 3e38).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(Xs.sum())
    base = rk.RBFKMeans(4, random_state=0).fit(X.astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = rk.RBFKMeans(4, random_state=0).fit(Xs)
        assert np.isfinite(est.predict_proba(Xs)).all()
    assert adjusted_rand_score(base.labels_, est.labels_) == 1.0


@pytest.mark.parametrize(("dtype", "e"), [(np.float64, -1050), (np.float32, -135),
                                          (np.float32, -145)])
@pytest.mark.parametrize("params", [{}, {"assignment": "hard"}, {"schedule": "geometric"}])
def test_subnormal_data_fits_as_at_scale_one(dtype: type, e: int, params: dict[str, Any]) -> None:
    """Data of subnormal size (float64 ~1e-316, float32 ~1e-40 and ~1e-43): the partition of
    the same data at scale 1, centres ``2^e`` times those to the data's own precision, and
    finite distances and memberships. The frame's factor ``2^-e`` is infinite in the data's
    dtype there: a float64 fit raised OverflowError, a float32 fit 'X must be finite'."""
    X = _blobs(3, n=90)
    Xs = np.ldexp(X, e).astype(dtype)
    base = rk.RBFKMeans(4, random_state=0, **params).fit(X.astype(dtype))
    est = rk.RBFKMeans(4, random_state=0, **params).fit(Xs)
    assert adjusted_rand_score(base.labels_, est.labels_) == 1.0
    np.testing.assert_array_equal(est.predict(Xs), est.labels_)
    info = np.finfo(dtype)  # the subnormals' spacing, in the units of X
    spacing = float(np.ldexp(1.0, int(info.minexp) - int(info.nmant) - e))
    same = [int(est.labels_[np.flatnonzero(base.labels_ == j)[0]]) for j in range(4)]
    np.testing.assert_allclose(np.ldexp(est.cluster_centers_[same].astype(np.float64), -e),
                               base.cluster_centers_, rtol=0,
                               atol=2 * spacing + 1e-5 * np.abs(X).max())
    D = est.transform(Xs)
    assert np.isfinite(D).all()
    np.testing.assert_array_equal(D.argmin(1), est.labels_)
    assert np.isfinite(est.predict_proba(Xs)).all()
    assert np.isfinite(est.score(Xs))
    online = rk.RBFKMeans(4, random_state=0).partial_fit(Xs).partial_fit(Xs)
    online_base = rk.RBFKMeans(4, random_state=0).partial_fit(X.astype(dtype)).partial_fit(
        X.astype(dtype))
    assert adjusted_rand_score(online_base.predict(X.astype(dtype)), online.predict(Xs)) == 1.0


def test_squares_beyond_float64_are_refused_by_name() -> None:
    X = _blobs(2, n=40) * 1e200
    with pytest.raises(ValueError, match=r"^X spreads too far for float64.*supported range"):
        rk.RBFKMeans(3).fit(X)


@pytest.mark.parametrize("method", ["predict", "predict_proba", "transform", "score"])
def test_rows_beyond_float64_at_inference_are_refused_by_name(method: str) -> None:
    """Rows far beyond the training data gave infinite distances (``transform``), NaN
    memberships (``predict_proba``), ``-inf`` (``score``) and arbitrary labels (``predict``);
    rows whose distances fit but whose sum would not (``score``) too. Spherical fits read the
    rows' directions only, whatever their size."""
    X = _blobs(7, n=60)
    est = rk.RBFKMeans(3, random_state=0).fit(X)
    before = _state(est)
    for far in (X * 1e300, np.repeat(X * 1e152, 10, axis=0)):
        if method != "score" and far.shape[0] > X.shape[0]:
            getattr(est, method)(far)  # each distance is finite: no error
            continue
        with pytest.raises(ValueError, match=r"^X lies too far from the centroids for "
                                             r"torch\.float64: its squared distances overflow"):
            getattr(est, method)(far)
    assert _same(_state(est), before)
    cos = rk.RBFKMeans(3, metric="cosine", random_state=0).fit(X)
    out = np.asarray(getattr(cos, method)(X * 1e300))
    assert np.isfinite(out).all()
    assert np.allclose(out, np.asarray(getattr(cos, method)(X)))


def test_online_batches_beyond_float64_are_refused_and_leave_the_model() -> None:
    """A later ``partial_fit`` batch of 1e160 left ``inertia_`` NaN; a ``fit_batches`` batch of
    1e300 after ordinary ones left ``inertia_`` infinite and the centres NaN, silently."""
    X = _blobs(8, n=60)
    est = rk.RBFKMeans(3, random_state=0).fit(X)
    before = _state(est)
    with pytest.raises(ValueError, match=r"^X lies too far from the centroids"):
        est.partial_fit(X[:10] * 1e160)
    assert _same(_state(est), before)
    with pytest.raises(ValueError, match=r"^batches: a batch lies too far"):
        est.fit_batches([X[:30], X[30:] * 1e300])
    assert _same(_state(est), before)


@pytest.mark.parametrize("method", ["fit", "partial_fit", "score"])
def test_weights_beyond_float32_on_float32_data_are_named(method: str) -> None:
    """Weights of 1e100 on float32 data overflowed in the conversion: ``partial_fit`` then said
    "X spreads too far ... nan"."""
    X = _blobs(9, n=60).astype(np.float32)
    est = rk.RBFKMeans(3, random_state=0).fit(X)
    before = _state(est)
    with pytest.raises(ValueError, match=r"^sample_weight must be finite in float32 .* 1e\+100"):
        getattr(est, method)(X, sample_weight=np.full(60, 1e100))
    assert _same(_state(est), before)


def test_set_params_with_an_unknown_name_changes_nothing() -> None:
    """scikit-learn's ``set_params`` sets the parameters one by one: ``n_clusters`` was 5
    after the call that raised on ``bogus``."""
    est = rk.RBFKMeans(3, tol=1e-3)
    with pytest.raises(ValueError, match="bogus"):
        est.set_params(n_clusters=5, tol=0.5, bogus=1)
    assert (est.n_clusters, est.tol) == (3, 1e-3)
    assert est.set_params(n_clusters=5).n_clusters == 5


def test_quantizer_inputs_beyond_its_dtype_are_refused_before_any_change() -> None:
    """``VectorQuantizer`` returned an infinite loss for finite float32 ``z`` of 1e20 (the
    squared terms overflow) and still took its training step (the codebook moved to 1e19)."""
    torch.manual_seed(0)
    Z = torch.randn(64, 4)
    vq = rk.VectorQuantizer(4, 8)
    vq.train()
    vq(Z)
    state = {k: v.clone() for k, v in vq.state_dict().items() if isinstance(v, torch.Tensor)}
    for z in (Z * 1e20, Z.double() * 1e160):
        with pytest.raises(ValueError, match=r"^z lies too far from the codes for torch"):
            vq(z)
    after = {k: v for k, v in vq.state_dict().items() if isinstance(v, torch.Tensor)}
    assert all(torch.equal(state[k], after[k]) for k in state)
    fresh = rk.VectorQuantizer(4, 8)
    fresh.train()
    with pytest.raises(ValueError, match=r"^z lies too far"):
        fresh(Z * 1e20)
    assert not bool(fresh.initialized)
    assert torch.isfinite(vq(Z * 1e15)[2])  # large but within float32's reach
    offset = Z * 1e15 + 1e17  # far from the origin, its spread within reach: the codes follow
    seeded = rk.VectorQuantizer(4, 8, update="kmeans")
    seeded.train()
    seeded(Z * 1e15)
    for _ in range(3):
        assert torch.isfinite(seeded(offset)[2])


@pytest.mark.parametrize("update", ["objective", "kmeans"])
def test_quantizer_inputs_whose_squares_underflow_are_refused_at_seeding(update: str) -> None:
    """float32 ``z`` of 1e-40 (subnormal) gave squared distances of 0 to every code: all rows
    took code 0, the loss was 0 and the codebook was seeded from them, silently. Refused by
    name before any change; once seeded, a batch of zeros or of tiny rows is data like any
    other (its distances to the codes are the codes' own size)."""
    torch.manual_seed(0)
    Z = torch.randn(64, 4)
    fresh = rk.VectorQuantizer(4, 8, update=update)
    fresh.train()
    for z in (Z * 1e-40, Z * 1e-20, Z.double() * 1e-160):
        with pytest.raises(ValueError, match=r"^z is too small for torch\.float(32|64): its "
                                             r"squared distances underflow \(largest \|z\| "):
            fresh(z)
        assert not bool(fresh.initialized)
    _, idx, loss = fresh(Z * 1e-15)  # squares of 1e-30: normal in float32
    assert torch.isfinite(loss)
    assert idx.unique().numel() > 1
    for z in (torch.zeros(8, 4), Z * 1e-40):
        assert torch.isfinite(fresh(z)[2])


# -- extreme weights and temperatures: the work does not grow with them -----------------------

@pytest.mark.parametrize("kwargs", [
    {"weight": 1e12}, {"weight": 1e100}, {"weight": 1e300},
    {"T_start": 1e-30}, {"T_start": 1e-100}, {"T_start": 1e-300},
    {"T_start": 1e-30, "float32": True},
])
def test_extreme_weights_and_starting_temperatures_take_bounded_work(
        kwargs: dict[str, Any]) -> None:
    """One weight of 1e100 took 59 s on 40 rows, T_start=1e-100 79 s (1000 temperatures,
    whose splits vanished against the coordinates): the ladder now stops at the resolution of
    the coordinates and splits overdue groups visibly. From ``T_c <= max|x|^2`` down to that
    resolution ``(64 eps max|x|)^2`` the ladder cools by at least 0.7 a step, so it holds at
    most ``2 ln(1 / (64 eps)) / ln(1 / 0.7) < 180`` temperatures in float64 whatever the
    weights; the result is as good as from the ordinary start."""
    X = _blobs(0, n=40, k=3)
    if kwargs.get("float32"):
        X = X.astype(np.float32)
    w = None
    if "weight" in kwargs:
        w = np.ones(len(X))
        w[0] = kwargs["weight"]
    est = rk.RBFKMeans(3, random_state=0, n_init=1,
                       T_start=kwargs.get("T_start")).fit(X, sample_weight=w)
    ordinary = rk.RBFKMeans(3, random_state=0, n_init=1).fit(X)
    assert len(est.temperatures_) < 180
    assert est.n_iter_ <= 15 * 180 + 10 * ordinary.n_iter_
    assert np.isfinite(est.cluster_centers_).all()
    if w is None:  # the same problem: no worse than the ordinary start's minimum, to 1%
        assert est.inertia_ <= ordinary.inertia_ * 1.01


# -- a failed call leaves the model as it was -------------------------------------------------

def _state(est: rk.RBFKMeans) -> dict[str, Any]:
    out = {}
    for key, value in vars(est).items():
        out[key] = value.copy() if isinstance(value, np.ndarray) else value
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x is not y and key != "history_":
            try:
                if x != y:
                    return False
            except (RuntimeError, ValueError):
                return False
    return True


_FAILURES = ["n < k", "negative weight", "NaN", "strings", "wrong width", "all-zero weights"]
#: valid calls there: a later partial_fit batch may be small, and fit_batches refits
_VALID_THERE = {("partial_fit", "n < k"), ("fit_batches", "wrong width")}


@pytest.mark.parametrize(("method", "bad"), [
    (m, b) for m in ("fit", "partial_fit", "fit_batches") for b in _FAILURES
    if (m, b) not in _VALID_THERE])
def test_a_failed_call_leaves_the_fitted_model_as_it_was(method: str, bad: str) -> None:
    """A fit that failed validation had changed n_features_in_ and the compute dtype (the old
    model could no longer predict); a failed fit_batches left no ``_dtype_``."""
    X = _blobs(4, n=60).astype(np.float32)
    est = rk.RBFKMeans(4, random_state=0).fit(X)
    before = _state(est)
    labels = est.predict(X)
    args: tuple[Any, ...] = {
        "n < k": (np.ones((3, 3)), None),
        "negative weight": (X.astype(np.float64), -np.ones(len(X))),
        "NaN": (np.full((10, 3), np.nan), None),
        "strings": (np.array([["a", "b", "c"]] * 10), None),
        "wrong width": (np.ones((10, 5)), None) if method != "fit" else (np.ones((3, 5)), None),
        "all-zero weights": (X.astype(np.float64), np.zeros(len(X))),
    }[bad]
    call = getattr(est, method)
    with pytest.raises((ValueError, TypeError)):
        call(args[0], sample_weight=args[1])
    assert _same(_state(est), before)
    assert np.array_equal(est.predict(X), labels)


def test_set_params_then_inference_uses_the_fitted_centres() -> None:
    """``predict_proba`` read ``n_clusters`` (the parameter) and broke after set_params; and
    partial_fit after set_params checks the parameters."""
    X = _blobs(6, n=60)
    est = rk.RBFKMeans(4, random_state=0).fit(X)
    est.set_params(n_clusters=5)
    assert est.predict_proba(X).shape == (60, 4)
    assert est.transform(X).shape == (60, 4)
    with pytest.raises(ValueError, match=r"n_clusters=5 differs from the 4 clusters"):
        est.partial_fit(X)
    est.set_params(n_clusters=4, tol=-1.0)
    with pytest.raises(ValueError, match=r"tol must be a finite number >= 0; got -1\.0"):
        est.partial_fit(X)


def test_read_only_fitted_centres_do_not_warn(tmp_path: Path) -> None:
    """A model loaded with ``joblib.load(..., mmap_mode="r")`` has read-only centres: predict
    emitted PyTorch's non-writable-array warning."""
    import joblib

    X = _blobs(7, n=80)
    path = tmp_path / "model.joblib"
    joblib.dump(rk.RBFKMeans(4, random_state=0).fit(X), path)
    est = joblib.load(path, mmap_mode="r")
    assert not est.cluster_centers_.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.predict(X)
        est.predict_proba(X)
        est.transform(X)
        est.score(X)


@pytest.mark.parametrize(("params", "match"), [
    ({"device": "nonsense"}, r"device must be None, or a torch device this machine has"),
    # a fit on the meta device had failed deep inside torch (NotImplementedError of nonzero)
    ({"device": "meta"}, r"device must be .*not 'meta'.*; got 'meta'"),
    ({"device": torch.device("meta")}, r"device must be .*not 'meta'"),
    ({"random_state": -1}, r"random_state must be None, an integer in \[0, 2\*\*32 - 1\]"),
])
def test_estimator_parameters_are_named(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rk.RBFKMeans(3, **params).fit(_blobs(0, n=30))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_cuda_without_cuda_is_named() -> None:
    with pytest.raises(ValueError, match=r"device must be .*; got 'cuda'"):
        rk.RBFKMeans(3, device="cuda").fit(_blobs(0, n=30))


def test_hard_lloyd_from_a_callable_takes_the_best_of_ten_as_scikit_learn() -> None:
    calls = []

    def init(X: np.ndarray, k: int, rs: np.random.RandomState) -> np.ndarray:
        calls.append(1)
        return X[rs.choice(len(X), k, replace=False)]

    rk.RBFKMeans(3, assignment="hard", init=init, random_state=0).fit(_blobs(0, n=60))
    assert len(calls) == 10


def test_the_callable_init_sees_the_callers_coordinates() -> None:
    """Far from the origin the fit runs centred; a callable ``init`` still receives the data
    as passed and returns centres in its coordinates."""
    X = _blobs(8, n=90) + 1e6
    seen = []

    def init(Xs: np.ndarray, k: int, rs: np.random.RandomState) -> np.ndarray:
        seen.append(float(Xs.mean()))
        return Xs[:k]

    est = rk.RBFKMeans(3, assignment="hard", init=init, n_init=1).fit(X)
    assert seen[0] == pytest.approx(float(X.mean()), rel=1e-12)
    ref = rk.RBFKMeans(3, assignment="hard", init=X[:3], n_init=1).fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, rtol=1e-12)


# -- the layer, the mappings and the quantiser ------------------------------------------------

def test_layer_nan_input_propagates_and_complex_is_refused() -> None:
    layer = rk.KMeansLayer(torch.eye(2), assignment="hard")
    R = layer(torch.tensor([[float("nan"), 0.0], [1.0, 0.0]]))
    assert torch.isnan(R[0]).all()  # was one-hot on cluster 0
    assert torch.equal(R[1], torch.tensor([1.0, 0.0]))
    for f in (layer, rk.entmax15, rk.sparsemax, rk.softmax, rk.hardmax):
        with pytest.raises(TypeError, match=r"must be real; got torch\.complex64"):
            f(torch.zeros(3, 2, dtype=torch.complex64))
    with pytest.raises(TypeError, match=r"centroids must be"):
        rk.KMeansLayer(None)


@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax"])
@pytest.mark.parametrize("T", [1e-38, 1e-40, 1e-45])
def test_tiny_temperatures_give_finite_objectives_and_gradients(assignment: str,
                                                                 T: float) -> None:
    """float32 at T near 1e-40: the Tsallis and Gini objectives were NaN (0 * inf), and the
    gradient through coincident centroids was NaN; the objective is ``J`` there."""
    X = torch.tensor([[0.2, 0.1], [0.9, 1.0], [0.0, 0.0], [3.0, -1.0]], requires_grad=True)
    layer = rk.KMeansLayer(torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]), temperature=T,
                           assignment=assignment)
    F = layer.objective(X)
    J = rk.kmeans_objective(X, layer.centroids)
    assert F.detach().item() == pytest.approx(J.detach().item(), rel=1e-6)
    F.backward()
    assert torch.isfinite(X.grad).all()
    assert torch.isfinite(layer.centroids.grad).all()
    X.grad = None
    layer.zero_grad()
    (layer(X) * torch.arange(3.0)).sum().backward()
    assert torch.isfinite(X.grad).all()
    assert torch.isfinite(layer.centroids.grad).all()
    vq = rk.VectorQuantizer(2, 3, assignment=assignment, temperature=T)
    _, _, loss = vq.train()(torch.randn(8, 2, generator=torch.Generator().manual_seed(0)))
    assert torch.isfinite(loss)


@settings(max_examples=20, deadline=None)
@given(offset=st.sampled_from([0.0, 1e3, 1e6, 1e9]), seed=st.integers(0, 1000))
def test_layer_memberships_do_not_depend_on_the_offset(offset: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(20, 3, generator=g, dtype=torch.float64)
    C = torch.randn(4, 3, generator=g, dtype=torch.float64)
    for assignment in ("softmax", "entmax15", "sparsemax"):
        R0 = rk.KMeansLayer(C, 0.5, assignment)(X)
        R = rk.KMeansLayer(C + offset, 0.5, assignment)(X + offset)
        torch.testing.assert_close(R, R0, atol=1e-6, rtol=0)


# -- the caller's data is never written ---------------------------------------------------------

@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([np.float32, np.float64]), offset=st.sampled_from([0.0, 1e5]),
       weighted=st.booleans(), repeats=st.booleans())
def test_the_callers_arrays_are_never_written(dtype: type, offset: float, weighted: bool,
                                              repeats: bool) -> None:
    """Fitting centres the data in place only on copies the fit owns (folded rows, converted
    dtypes); an array the caller passed is never one of them."""
    X = (_blobs(9, n=80) + offset).astype(dtype)
    if repeats:
        X[40:] = X[:40]
    w = np.linspace(0.5, 2.0, len(X)) if weighted else None
    X0, w0 = X.copy(), None if w is None else w.copy()
    est = rk.RBFKMeans(4, random_state=0).fit(X, sample_weight=w)
    for call in (est.predict, est.predict_proba, est.transform, est.score):
        call(X)
    est.partial_fit(X, sample_weight=w)
    assert np.array_equal(X, X0)
    assert w is None or np.array_equal(w, w0)


def test_duplicate_and_constant_data_give_no_nan() -> None:
    for X in (np.ones((20, 3)), np.repeat(_blobs(0, n=3), 10, axis=0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = rk.RBFKMeans(5, random_state=0).fit(X)
        assert np.isfinite(est.cluster_centers_).all()
        assert np.isfinite(est.predict_proba(X)).all()
        assert np.isfinite(est.inertia_)


# -- Ctrl-C ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_ctrl_c_during_a_fit_is_a_keyboard_interrupt_and_leaves_the_model() -> None:
    """SIGINT while a compiled kernel runs raised ``SystemError: CPUDispatcher(...) returned a
    result with an exception set`` in 4 of 8 runs; now a KeyboardInterrupt every time, with
    the previous model intact."""
    script = textwrap.dedent("""
        import os, signal, threading
        import numpy as np, rbfkmeans as rk
        from sklearn.datasets import make_blobs
        X, _ = make_blobs(200_000, 8, centers=64, random_state=1)
        X = X.astype(np.float32)
        # seconds of compiled Lloyd runs per fit; first a fitted model (kernels compiled)
        est = rk.RBFKMeans(64, assignment="hard", init="random", n_init=10, tol=0.0,
                           random_state=0).fit(X[:5000])
        C0, keys = est.cluster_centers_.copy(), set(vars(est))
        interrupted = other = 0
        for trial in range(6):
            timer = threading.Timer(0.1 + 0.1 * trial, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            try:
                est.fit(X)
                timer.cancel()
                print("finished first")
                break
            except KeyboardInterrupt:
                intact = np.array_equal(est.cluster_centers_, C0) and set(vars(est)) == keys
                interrupted += int(intact)
            except BaseException as exc:
                other += 1
                print("OTHER", type(exc).__name__, exc)
        print("interrupted", interrupted, "other", other)
    """)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1].split()
    assert last[0] == "interrupted", out.stdout
    assert int(last[3]) == 0, out.stdout
    assert int(last[1]) >= 3, out.stdout


@pytest.mark.parametrize("offset", [0.0, 1e7])
def test_fit_batches_starts_from_init(offset: float) -> None:
    """``fit_batches`` ignored ``init``: with one batch of all rows it takes one mini-batch
    step from the given centres, which is one Lloyd step (also far from the origin)."""
    X = _blobs(11, n=90) + offset
    C0 = X[[0, 30, 60, 89]]
    est = rk.RBFKMeans(4, init=C0, random_state=0).fit_batches(X, batch_size=len(X))
    labels = ((X[:, None, :] - C0[None]) ** 2).sum(-1).argmin(1)
    step = np.stack([X[labels == j].mean(0) for j in range(4)])
    np.testing.assert_allclose(est.cluster_centers_, step, rtol=1e-12, atol=1e-9)
    assert est.n_iter_ == 1
