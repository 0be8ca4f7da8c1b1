"""Bad input to the deep package and the reproduction's helpers: every public entry point raises
ValueError or TypeError naming the parameter, never hangs or returns NaN, and a failed
DeepClusterer.fit / pretrain / init_layer leaves the clusterer exactly as it was."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from rbfkmeans import KMeansLayer
from rbfkmeans.deep import (
    DeepClusterer,
    ari,
    cluster_acc,
    epoch_temperatures,
    evaluate,
    mapping_entropy,
    neighbor_consistency_loss,
    neighbor_contrastive_loss,
    nmi,
    self_training_targets,
)
from rbfkmeans.deep.augment import affine_images, check_image_shape, random_affine
from rbfkmeans.deep.datasets import read_mnist_store
from rbfkmeans.deep.graph import neighbor_average, principal_projection
from rbfkmeans.deep.guard import collapse_guard
from rbfkmeans.deep.inputs import as_rows, input_scale
from rbfkmeans.deep.losses import batch_targets, fenchel_young_loss, target_sizes
from rbfkmeans.deep.metrics import contingency
from rbfkmeans.deep.models import cnn_encoder, input_width, mlp_autoencoder, output_width
from rbfkmeans.experiments import datasets as exp_datasets
from rbfkmeans.experiments._common import fit_exponential, fit_power, match_max_error
from rbfkmeans.experiments.critical import distinct_count

NAN, INF = float("nan"), float("inf")


# -- experiments.datasets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"centers": 12}, ValueError, r"cannot place centers=12 .* std .* box"),
        ({"centers": 5, "std": 1.0}, ValueError, r"cannot place centers=5"),
        ({"centers": 400, "std": 1.0}, ValueError, r"discs of radius 3 \* std do not fit"),
        ({"box": 0.0}, ValueError, r"box must be a finite number > 0; got 0.0"),
        ({"box": INF}, ValueError, r"box must be a finite number > 0; got inf"),
        ({"std": NAN}, ValueError, r"std must be a finite number >= 0; got nan"),
        ({"std": INF}, ValueError, r"std must be a finite number >= 0; got inf"),
        ({"std": -1.0}, ValueError, r"std must be a finite number >= 0; got -1.0"),
        ({"centers": 0}, ValueError, r"centers must be an integer >= 1; got 0"),
        ({"centers": 2.5}, TypeError, r"centers must be an integer; got float 2.5"),
        ({"seed": -1}, ValueError, r"seed must be an integer >= 0; got -1"),
    ],
)
def test_blobs_rejects_arguments_it_cannot_honour(kwargs: dict[str, Any], exc: type,
                                                  match: str) -> None:
    """``blobs(100, centers=12)`` (and box=0, std=nan/inf) looped forever."""
    with pytest.raises(exc, match=match):
        exp_datasets.blobs(100, **kwargs)


def test_blobs_valid_draws_are_unchanged() -> None:
    """The bounded loop draws what the unbounded one drew (same generator, same order)."""
    rng = np.random.default_rng(3)
    while True:
        mu = rng.uniform(-5.0, 5.0, size=(4, 2))
        gaps = np.linalg.norm(mu[:, None] - mu[None], axis=-1) + np.eye(4) * 1e9
        if gaps.min() >= 6 * 0.6:
            break
    y = np.repeat(np.arange(4), 25)
    ref = mu[y] + 0.6 * rng.standard_normal((100, 2))
    X, labels = exp_datasets.blobs(100, seed=3)
    np.testing.assert_array_equal(X, ref)
    np.testing.assert_array_equal(labels, y)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: exp_datasets.make_dataset("blobs", 100, 0, k=-1), ValueError,
         r"k must be an integer >= 1; got -1"),
        (lambda: exp_datasets.make_dataset("blobs", 100, 0, k=0), ValueError,
         r"k must be an integer >= 1; got 0"),
        (lambda: exp_datasets.make_dataset("blobs", 10, 0, k=11), ValueError,
         r"k must be at most n=10 .* got k=11"),
        (lambda: exp_datasets.make_dataset("blobs", 100, 0, k=2.5),  # type: ignore[arg-type]
         TypeError,
         r"k must be an integer; got float"),
        (lambda: exp_datasets.make_dataset("moons", 1, 0), ValueError,
         r"n must be an integer >= 2; got 1"),
        (lambda: exp_datasets.make_dataset(["moons"], 10, 0), ValueError,  # type: ignore[arg-type]
         r"name must be one of"),
        (lambda: exp_datasets.moons(10, noise=NAN), ValueError, r"noise must be a finite"),
        (lambda: exp_datasets.spirals(10, turns=0.0), ValueError, r"turns must be a finite"),
        (lambda: exp_datasets.circles(10, factor=INF), ValueError, r"factor must be a finite"),
        (lambda: exp_datasets.circles(0), ValueError, r"n must be an integer >= 1; got 0"),
        (lambda: exp_datasets.standardize(np.ones((5, 2))), ValueError,
         r"X must not be constant"),
        (lambda: exp_datasets.standardize(np.array([[1.0, NAN], [0.0, 1.0]])), ValueError,
         r"X must be finite"),
    ],
)
def test_dataset_helpers_name_a_bad_argument(call: Callable[[], Any], exc: type,
                                             match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


# -- experiments._common / critical --------------------------------------------------------------


@pytest.mark.parametrize("fit", [fit_power, fit_exponential])
@pytest.mark.parametrize(
    ("T", "gap", "exc", "match"),
    [
        ([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], ValueError, r"gap must hold finite numbers > 0"),
        ([1.0, 2.0, 3.0], [1.0, NAN, 2.0], ValueError, r"gap must hold .* got nan at index 1"),
        ([1.0, -2.0, 3.0], [1.0, 1.0, 2.0], ValueError, r"T must hold .* got -2.0 at index 1"),
        ([1.0, 2.0], [1.0, 1.0, 2.0], ValueError, r"T and gap must have one length"),
        ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], ValueError, r"T must hold at least two distinct"),
        ([[1.0, 2.0]], [[1.0, 2.0]], ValueError, r"T must be 1-D"),
        (["a", "b"], [1.0, 2.0], TypeError, r"T must be a sequence of real numbers"),
    ],
)
def test_rate_fits_reject_what_has_no_logarithm(fit: Callable[..., dict[str, float]], T: Any,
                                                gap: Any, exc: type, match: str) -> None:
    """fit_power(T, zeros) returned a dict of NaN."""
    with pytest.raises(exc, match=match):
        fit(T, gap)


def test_rate_fits_on_valid_input_are_unchanged() -> None:
    T = np.array([0.1, 0.2, 0.4, 0.8])
    gap = 3.0 * T**1.5
    res = fit_power(T, gap)
    assert res["p"] == pytest.approx(1.5)
    assert res["A"] == pytest.approx(3.0)
    res = fit_exponential(T, 2.0 * np.exp(-0.5 / T))
    assert res["B"] == pytest.approx(0.5)
    assert res["A"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("C", "C_ref", "exc", "match"),
    [
        (torch.zeros(3, 2), torch.zeros(2, 2), ValueError, r"C and C_ref must have one shape"),
        (torch.full((2, 2), NAN), torch.zeros(2, 2), ValueError, r"C must be finite"),
        (torch.zeros(2, 2), torch.full((2, 2), INF), ValueError, r"C_ref must be finite"),
        (torch.zeros(2), torch.zeros(2), ValueError, r"C must be a 2-D tensor"),
        (np.zeros((2, 2)), torch.zeros(2, 2), TypeError, r"C must be a torch\.Tensor"),
        (torch.zeros(0, 2), torch.zeros(0, 2), ValueError, r"C must hold at least one"),
    ],
)
def test_match_max_error_rejects_unmatched_or_non_finite(C: Any, C_ref: Any, exc: type,
                                                         match: str) -> None:
    """3 centroids against 2 returned 0.0."""
    with pytest.raises(exc, match=match):
        match_max_error(C, C_ref)


def test_distinct_count_rejects_non_finite_centroids() -> None:
    """NaN centroids counted as 3 groups."""
    with pytest.raises(ValueError, match=r"C must be finite"):
        distinct_count(torch.full((3, 2), NAN))
    with pytest.raises(ValueError, match=r"tol must be a finite number >= 0; got nan"):
        distinct_count(torch.zeros(3, 2), NAN)
    assert distinct_count(torch.tensor([[0.0, 0.0], [0.0, 1e-3], [1.0, 1.0]])) == 2


# -- deep.losses ---------------------------------------------------------------------------------


@pytest.mark.parametrize("P", [torch.full((2, 4), -0.25), torch.full((2, 4), 0.5),
                               torch.tensor([[1.5, -0.5], [0.5, 0.5]])])
@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax"])
def test_mapping_entropy_rejects_rows_off_the_simplex(P: torch.Tensor, assignment: str) -> None:
    """A row of -0.25s gave NaN."""
    with pytest.raises(ValueError, match=r"P's rows must lie on the simplex"):
        mapping_entropy(P, assignment)


@pytest.mark.parametrize("R", [torch.zeros(5, 3), -torch.ones(5, 3) / 3,
                               torch.tensor([[0.7, 0.7], [0.5, 0.5]])])
def test_self_training_targets_reject_rows_off_the_simplex(R: torch.Tensor) -> None:
    """Rows of zeros gave rows of zero targets, negative entries uniform targets, and rows
    summing to 1.4 targets of no meaning, silently; memberships on the simplex pass."""
    with pytest.raises(ValueError, match=r"^R's rows must lie on the simplex"):
        self_training_targets(R)
    P = self_training_targets(torch.softmax(torch.randn(6, 3, generator=torch.Generator(
        ).manual_seed(0)), dim=1))
    torch.testing.assert_close(P.sum(dim=1), torch.ones(6))


_R3 = torch.full((3, 2), 0.5)
_NB3 = torch.tensor([[1], [0], [1]])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda R: neighbor_contrastive_loss(R, _R3), "Z"),
        (lambda R: neighbor_contrastive_loss(_R3, R), "Z_pos"),
        (lambda R: self_training_targets(R), "R"),
        (lambda R: self_training_targets(R, _NB3), "R"),
        (lambda R: target_sizes(R), "R"),
        (lambda R: target_sizes(R, _NB3), "R"),
        (lambda R: batch_targets(R, slice(None), None, torch.ones(2)), "R"),
        (lambda R: batch_targets(_R3, slice(None), None, R[0]), "sizes"),
        (lambda R: neighbor_consistency_loss(R, _R3), "R"),
        (lambda R: fenchel_young_loss(R, _R3, 1.0, "softmax"), "D"),
        (lambda R: mapping_entropy(R, "softmax"), "P"),
        (lambda R: neighbor_average(R, _NB3), "R"),
    ],
)
def test_losses_name_an_integer_or_bool_tensor(call: Callable[[torch.Tensor], Any], name: str,
                                               dtype: torch.dtype) -> None:
    """Integer and bool inputs raised raw torch RuntimeErrors (or returned integer results)."""
    with pytest.raises(TypeError, match=rf"^{name} must be a floating-point tensor"):
        call(torch.ones(3, 2).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_losses_compute_half_precision_in_float32(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    R = torch.softmax(torch.randn(6, 3, generator=gen), dim=1)
    Z = torch.nn.functional.normalize(torch.randn(6, 4, generator=gen), dim=1)
    nb = torch.tensor([[1], [0], [3], [2], [5], [4]])
    Rh, Zh = R.to(dtype), Z.to(dtype)
    for got, ref in [
        (neighbor_contrastive_loss(Zh, Zh), neighbor_contrastive_loss(Zh.float(), Zh.float())),
        (self_training_targets(Rh, nb), self_training_targets(Rh.float(), nb)),
        (target_sizes(Rh, nb), target_sizes(Rh.float(), nb)),
        (neighbor_consistency_loss(Rh, Rh), neighbor_consistency_loss(Rh.float(), Rh.float())),
    ]:
        assert got.dtype == torch.float32
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, ref)


# -- deep.augment --------------------------------------------------------------------------------

_IMG = torch.rand(2, 64)


@pytest.mark.parametrize(
    ("angles", "scales", "shifts", "exc", "match"),
    [
        (torch.tensor([NAN, 0.0]), torch.ones(2), torch.zeros(2, 2), ValueError,
         r"angles must be finite; got nan"),
        (torch.zeros(2), torch.ones(2), torch.tensor([[0.0, NAN], [0.0, 0.0]]), ValueError,
         r"shifts must be finite; got nan"),
        (torch.zeros(2), torch.tensor([INF, 1.0]), torch.zeros(2, 2), ValueError,
         r"scales must be finite; got inf"),
        (torch.zeros(2), torch.tensor([0.0, 1.0]), torch.zeros(2, 2), ValueError,
         r"scales must be > 0; got 0.0"),
        (torch.zeros(2, dtype=torch.complex64), torch.ones(2), torch.zeros(2, 2), TypeError,
         r"angles must be real"),
        (torch.zeros(2), torch.ones(2, dtype=torch.complex64), torch.zeros(2, 2), TypeError,
         r"scales must be real"),
        ([0.0, 0.0], torch.ones(2), torch.zeros(2, 2), TypeError,
         r"angles must be a torch\.Tensor; got list"),
        (torch.zeros(2), torch.ones(2), torch.zeros(2, 2, dtype=torch.bool), TypeError,
         r"shifts must hold real numbers"),
    ],
)
def test_affine_images_rejects_non_finite_or_complex_parameters(
        angles: Any, scales: Any, shifts: Any, exc: type, match: str) -> None:
    """A NaN angle or shift gave NaN images; scales=inf and complex angles were accepted."""
    with pytest.raises(exc, match=match):
        affine_images(_IMG, (8, 8), angles, scales, shifts)


def test_image_shape_accepts_numpy_integers() -> None:
    assert check_image_shape((np.int64(8), np.int64(8)), 64) == (1, 8, 8)
    assert check_image_shape([np.int32(1), 8, np.uint8(8)]) == (1, 8, 8)
    assert all(type(s) is int for s in check_image_shape((np.int64(8), np.int64(8))))
    for bad in ((8, 8.0), (True, 8), (8, 0), (8,)):
        with pytest.raises(ValueError, match=r"image_shape must be \(h, w\) or \(c, h, w\)"):
            check_image_shape(bad)


def test_random_affine_names_a_non_tensor_x() -> None:
    with pytest.raises(TypeError, match=r"X must be a floating-point torch\.Tensor; got list"):
        random_affine([[0.0] * 4], (2, 2), 1.0)  # type: ignore[arg-type]


# -- deep.start, inputs, datasets, guard, models, graph ------------------------------------------


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((1.0, -1.0, 3), ValueError, r"T_end must be a finite number > 0; got -1.0"),
        ((1.0, 0.0, 3), ValueError, r"T_end must be a finite number > 0; got 0.0"),
        ((-1.0, -2.0, 3), ValueError, r"T_start must be a finite number > 0; got -1.0"),
        ((INF, 1.0, 3), ValueError, r"T_start must be a finite number > 0; got inf"),
        ((1.0, NAN, 3), ValueError, r"T_end must be a finite number > 0; got nan"),
        (("1", 0.5, 3), TypeError, r"T_start must be a real number"),
        ((1.0, 0.5, 0), ValueError, r"epochs must be an integer >= 1; got 0"),
        ((1.0, 0.5, 2.0), TypeError, r"epochs must be an integer; got float"),
        ((1.0, 0.5, True), TypeError, r"epochs must be an integer; got bool"),
    ],
)
def test_epoch_temperatures_rejects_bad_temperatures_and_counts(args: tuple[Any, ...], exc: type,
                                                               match: str) -> None:
    """(1.0, -1.0, 3) returned [-1, -1, -1]."""
    with pytest.raises(exc, match=match):
        epoch_temperatures(*args)


def test_epoch_temperatures_valid_values_unchanged() -> None:
    np.testing.assert_array_equal(epoch_temperatures(0.3, 0.3, 4), np.full(4, 0.3))
    np.testing.assert_array_equal(epoch_temperatures(np.float64(0.5), 0.5, 1), [0.5])


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_input_scale_names_non_finite_x(bad: float) -> None:
    """NaN in X gave (nan, 0.0)."""
    X = torch.ones(4, 3)
    X[2, 1] = bad
    with pytest.raises(ValueError, match=r"X must be finite; got 1 NaN/inf entries"):
        input_scale(X)
    with pytest.raises(TypeError, match=r"X must be real"):
        input_scale(torch.ones(4, 3, dtype=torch.complex64))


def test_as_rows_reads_a_view_with_negative_strides() -> None:
    """``numpy.flip(X)`` had been refused as "X must be an array or tensor of numbers"."""
    X = np.arange(12.0).reshape(4, 3)
    got = as_rows(np.flip(X), torch.device("cpu"))
    torch.testing.assert_close(got, torch.from_numpy(X[::-1, ::-1].copy()).float(),
                               rtol=0, atol=0)


def test_read_mnist_store_names_a_missing_or_foreign_path(tmp_path: Path) -> None:
    """A missing path gave an AttributeError from zarr."""
    with pytest.raises(FileNotFoundError, match=r"path '/nonexistent/x': no such file"):
        read_mnist_store("/nonexistent/x")
    with pytest.raises(FileNotFoundError, match=r"no such file"):
        read_mnist_store(tmp_path)
    junk = tmp_path / "junk.zip"
    junk.write_text("not a zip")
    with pytest.raises(ValueError, match=r"path '.*junk\.zip' is not a zip file"):
        read_mnist_store(junk)
    with pytest.raises(TypeError, match=r"path must be a str or a path; got int"):
        read_mnist_store(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("labels", "exc", "match"),
    [
        (np.array(["a", "b", "a"]), TypeError, r"must hold integer labels; got dtype <U1"),
        (np.array([None, 1, 0], dtype=object), TypeError,
         r"must hold integer labels; got dtype object"),
        (np.array([1j, 0, 1]), TypeError, r"must hold integer labels; got dtype complex128"),
    ],
)
@pytest.mark.parametrize("side", ["y_true", "y_pred"])
@pytest.mark.parametrize("score", [cluster_acc, nmi, ari, evaluate, contingency])
def test_metrics_name_non_numeric_labels(score: Callable[..., Any], side: str, labels: Any,
                                         exc: type, match: str) -> None:
    """String and object labels raised numpy's ufunc TypeError, naming neither side."""
    good = np.array([0, 1, 1])
    args = (labels, good) if side == "y_true" else (good, labels)
    with pytest.raises(exc, match=rf"^{side} {match}"):
        score(*args)


def test_metrics_accept_large_labels_and_keep_ordinary_results() -> None:
    """Labels around 1e12 gave "array is too big": the scores relabel them."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 200)
    p = rng.integers(0, 7, 200)
    ref = evaluate(y, p)
    big = evaluate(y * 10**12 + 7, p * 10**11 + 3)
    assert big == ref
    assert evaluate(y, p) == ref
    # ACC from an independent brute force over matchings of the 5 classes to the 7 clusters
    import itertools

    best = max(sum(int(((p == c) & (y == k)).sum()) for k, c in enumerate(perm))
               for perm in itertools.permutations(range(7), 5))
    assert ref["acc"] == best / 200
    M = contingency(y, p)
    assert M.shape == (7, 7)
    assert M[p[0], y[0]] >= 1
    with pytest.raises(ValueError, match=r"y_true holds labels up to 1000000000000: .* relabel"):
        contingency(np.array([10**12, 0]), np.array([0, 1]))


def test_collapse_guard_names_non_finite_embeddings() -> None:
    """inf in Z gave torch's LinAlgError."""
    layer = KMeansLayer(torch.randn(3, 2, generator=torch.Generator().manual_seed(0)))
    C = layer.centroids.detach().clone()
    Z = torch.randn(10, 2)
    for bad in (INF, NAN):
        Zb = Z.clone()
        Zb[4, 0] = bad
        with pytest.raises(ValueError, match=r"Z must be finite"):
            collapse_guard(layer, Zb)
        assert torch.equal(layer.centroids.detach(), C)
    with pytest.raises(TypeError, match=r"Z must be a torch\.Tensor"):
        collapse_guard(layer, Z.numpy())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"min_cluster_fraction must be a real number"):
        collapse_guard(layer, Z, "0.1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"merge_tol must be a finite number >= 0; got nan"):
        collapse_guard(layer, Z, 0.1, NAN)
    with pytest.raises(TypeError, match=r"labels must be a torch\.Tensor or None; got list"):
        collapse_guard(layer, Z, labels=[0] * 10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seed", "exc", "match"),
    [
        ("str", TypeError, r"seed must be an integer; got str 'str'"),
        (INF, TypeError, r"seed must be an integer; got float inf"),
        (1.0, TypeError, r"seed must be an integer; got float 1.0"),
        (True, TypeError, r"seed must be an integer; got bool"),
        (-1, ValueError, r"seed must be an integer >= 0; got -1"),
        (2**64, ValueError, r"seed must be an integer in \[0, 2\*\*64 - 1\]"),
    ],
)
@pytest.mark.parametrize("make", [lambda seed: mlp_autoencoder(4, (3,), 2, seed=seed),
                                  lambda seed: cnn_encoder((4, 4), 2, channels=(2,), hidden=3,
                                                           seed=seed)])
def test_models_validate_the_seed(make: Callable[[Any], Any], seed: Any, exc: type,
                                  match: str) -> None:
    """seed='str' was accepted as far as torch; seed=inf raised OverflowError."""
    with pytest.raises(exc, match=match):
        make(seed)


def test_models_accept_numpy_integer_seeds_and_read_widths() -> None:
    a, _ = mlp_autoencoder(4, (3,), 2, seed=np.int64(5))  # type: ignore[arg-type]
    b, _ = mlp_autoencoder(4, (3,), 2, seed=5)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(TypeError, match=r"hidden must be a sequence of integers >= 1; got int"):
        mlp_autoencoder(4, 3, 2)  # type: ignore[arg-type]
    assert input_width(a) == 4
    assert output_width(a) == 2
    assert input_width(cnn_encoder((6, 6), 2, channels=(2,), hidden=3)) == 36
    assert input_width(nn.Linear(3, 2)) is None  # not a Sequential: not read off


def test_graph_functions_take_integer_rows_as_float32() -> None:
    X = torch.arange(12).reshape(6, 2)
    torch.testing.assert_close(principal_projection(X, 1), principal_projection(X.float(), 1))


# -- DeepClusterer -------------------------------------------------------------------------------


def _digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data[:200] / 16


@pytest.fixture(scope="module")
def fitted() -> tuple[DeepClusterer, np.ndarray]:
    X = _digits()
    dc = DeepClusterer.mlp(64, 5, hidden=(32,), n_latent=4, pretrain_epochs=2, epochs=2,
                           n_neighbors=5, batch_size=64, random_state=0).fit(X)
    return dc, X


def _snapshot(dc: DeepClusterer) -> dict[str, Any]:
    """Every fitted attribute (deep copies) and every state_dict tensor (clones)."""
    snap: dict[str, Any] = {f"attr:{k}": copy.deepcopy(v) for k, v in vars(dc).items()
                            if k.endswith("_") and k != "layer_"}
    for name in ("encoder", "decoder", "layer_"):
        module = getattr(dc, name)
        snap[f"id:{name}"] = id(module)
        for key, v in module.state_dict().items():
            snap[f"{name}:{key}"] = (v.detach().clone() if isinstance(v, torch.Tensor)
                                     else copy.deepcopy(v))
        snap[f"mode:{name}"] = [m.training for m in module.modules()]
    snap["T"] = dc.layer_.temperature
    return snap


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y), key
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, key
            assert np.array_equal(x, y), key
        else:
            assert repr(x) == repr(y), key


@pytest.mark.parametrize("method", ["fit", "pretrain", "init_layer", "predict", "predict_proba",
                                    "transform"])
def test_wrong_feature_count_names_x_and_changes_nothing(
        fitted: tuple[DeepClusterer, np.ndarray], method: str) -> None:
    """fit(X[:, :10]) raised torch's "mat1 and mat2 shapes cannot be multiplied" after
    replacing timings_ (pretrain: after wiping pretrain_history_)."""
    dc, X = fitted
    before = _snapshot(dc)
    with pytest.raises(ValueError, match=r"^X must have 64 features .* got 10"):
        getattr(dc, method)(X[:, :10])
    _assert_same(before, _snapshot(dc))


def test_another_encoder_is_never_run_to_check_the_width() -> None:
    """An encoder whose width cannot be read off (not a Sequential) was tried on two rows in
    eval mode before every stage and every ``transform``: an encoder that initialises itself
    from its first rows (ActNorm-like) then did so from those two (digits ACC 0.835 -> 0.796),
    and one that draws random numbers shifted the caller's stream. Now it is not run: rows of
    the wrong width raise inside the stage, which leaves everything as it was."""

    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = nn.Linear(8, 3)
            self.inp = nn.Linear(64, 8)  # registered second: the order is no guide
            self.rows: list[int] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.rows.append(int(x.shape[0]))
            return self.out(torch.relu(self.inp(x)))

    enc = Enc()
    dc = DeepClusterer(enc, None, 3, pretrain_epochs=0, epochs=1, n_neighbors=0)
    X = _digits()
    enc.train()
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    with pytest.raises(RuntimeError):
        dc.fit(X[:, :10])
    assert enc.training
    assert not hasattr(dc, "timings_")
    assert all(torch.equal(before[k], v) for k, v in enc.state_dict().items())
    enc.rows.clear()
    dc.fit(X)  # the right width is taken
    assert dc.labels_.shape == (200,)
    assert 2 not in enc.rows  # no two-row trial
    enc.rows.clear()
    dc.predict(X[:5])
    assert enc.rows == [5]  # one forward, of the rows asked for


def test_a_lazy_encoder_trains() -> None:
    """Copying the state of an encoder with a ``LazyLinear`` not initialised yet failed
    ("Attempted to use an uninitialized parameter"), so no stage could run."""
    dc = DeepClusterer(nn.Sequential(nn.LazyLinear(4)), None, 3, pretrain_epochs=1, epochs=1,
                       n_neighbors=5, random_state=0)
    dc.fit(_digits())
    assert dc.labels_.shape == (200,)


def test_decoder_of_another_width_is_named(fitted: tuple[DeepClusterer, np.ndarray]) -> None:
    _, X = fitted
    enc, _ = mlp_autoencoder(64, (8,), 3, seed=0)
    _, dec = mlp_autoencoder(10, (8,), 3, seed=0)
    dc = DeepClusterer(enc, dec, 3, pretrain_epochs=1, epochs=1, n_neighbors=0)
    for method in ("fit", "pretrain"):
        with pytest.raises(ValueError, match=r"decoder must map embeddings back to X's 64 "
                                             r"features; its last layer gives 10"):
            getattr(dc, method)(X)
        assert not hasattr(dc, "pretrain_history_")


@pytest.mark.parametrize(
    ("name", "value", "exc", "match"),
    [
        ("epochs", -1, ValueError, r"epochs must be an integer >= 0; got -1"),
        ("lr", NAN, ValueError, r"lr must be a finite number > 0; got nan"),
        ("batch_size", True, ValueError, r"batch_size must be an integer >= 1; got True"),
        ("pretrain_lr", -1.0, ValueError, r"pretrain_lr must be a finite number > 0"),
        ("T_end", 1.0, ValueError, r"T_start must be >= T_end"),
        ("assignment", "gauss", ValueError, r"assignment must be one of"),
        ("random_state", "x", ValueError, r"random_state must be an integer in \[0, 2\*\*32"),
        ("random_state", None, ValueError, r"random_state must be an integer"),
        ("n_clusters", 1, ValueError, r"n_clusters must be an integer >= 2; got 1"),
        ("image_shape", (3, 3), ValueError, r"image_shape \(3, 3\) holds 9 values but the rows"),
        ("encoder", "mlp", TypeError, r"encoder must be a torch\.nn\.Module; got str"),
        ("decoder", 3, TypeError, r"decoder must be a torch\.nn\.Module or None; got int"),
    ],
)
@pytest.mark.parametrize("method", ["fit", "pretrain", "init_layer"])
def test_parameters_set_after_construction_are_checked_before_anything_changes(
        fitted: tuple[DeepClusterer, np.ndarray], method: str, name: str, value: Any,
        exc: type, match: str) -> None:
    """After dc.epochs = -1 or dc.lr = nan, fit raised only after replacing layer_,
    init_embedding_, init_labels_, critical_temperature_, temperatures_; batch_size = True gave
    a torch TypeError."""
    dc, X = fitted
    before = _snapshot(dc)
    old = getattr(dc, name)
    setattr(dc, name, value)
    try:
        with pytest.raises(exc, match=match):
            getattr(dc, method)(X)
    finally:
        setattr(dc, name, old)
    _assert_same(before, _snapshot(dc))


class _Interrupt(BaseException):
    pass


@pytest.mark.parametrize(
    ("method", "stage", "exc"),
    [
        ("fit", "_collapse_guard", KeyboardInterrupt),  # mid joint training
        ("fit", "_collapse_guard", _Interrupt),
        ("fit", "_pretrain_step", KeyboardInterrupt),  # mid pretraining (pretrained_ reset)
        ("fit", "_init_layer", RuntimeError),
        ("pretrain", "_pretrain_step", KeyboardInterrupt),
    ],
)
def test_a_failed_fit_or_pretrain_leaves_everything_as_it_was(
        fitted: tuple[DeepClusterer, np.ndarray], monkeypatch: pytest.MonkeyPatch, method: str,
        stage: str, exc: type) -> None:
    """fit and pretrain are all or nothing: an exception (KeyboardInterrupt too) after the
    networks and the layer were trained in place restores every fitted attribute and every
    state_dict tensor bit for bit."""
    dc, X = fitted
    before = _snapshot(dc)
    original = getattr(dc, stage)
    calls = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        out = original(*args, **kwargs)  # the step runs (and changes things) first
        if calls["n"] >= 2 or stage != "_pretrain_step":
            raise exc("interrupted")
        return out

    monkeypatch.setattr(dc, stage, failing)
    was_pretrained = dc.pretrained_
    if stage == "_pretrain_step" and method == "fit":
        dc.pretrained_ = False  # so that fit pretrains again
        before["attr:pretrained_"] = False
    try:
        with pytest.raises(exc, match="interrupted"):
            getattr(dc, method)(X)
    finally:
        monkeypatch.undo()
    _assert_same(before, _snapshot(dc))
    dc.pretrained_ = was_pretrained
    assert calls["n"] >= 1


def test_failed_call_then_the_same_fit_gives_the_same_result(
        fitted: tuple[DeepClusterer, np.ndarray]) -> None:
    """After a failed call the model is usable exactly as before: predictions are unchanged."""
    dc, X = fitted
    pred = dc.predict(X)
    proba = dc.predict_proba(X)
    with pytest.raises(ValueError, match=r"X must have 64 features"):
        dc.fit(X[:, :10])
    np.testing.assert_array_equal(dc.predict(X), pred)
    np.testing.assert_array_equal(dc.predict_proba(X), proba)


@pytest.mark.parametrize("method", ["predict", "predict_proba"])
def test_unfitted_predict_raises_not_fitted_error(method: str) -> None:
    """Before fit, predict raised a bare RuntimeError; now sklearn's NotFittedError (a
    ValueError; still a RuntimeError)."""
    from sklearn.exceptions import NotFittedError

    dc = DeepClusterer.mlp(64, 3, hidden=(8,), n_latent=2)
    for kind in (NotFittedError, ValueError, RuntimeError):
        with pytest.raises(kind, match=r"not fitted yet: call fit first"):
            getattr(dc, method)(np.zeros((4, 64)))


@pytest.mark.parametrize("method", ["predict", "predict_proba", "transform"])
@pytest.mark.parametrize("shape", [(0, 64), (5, 0)])
def test_empty_x_is_a_value_error_naming_x(fitted: tuple[DeepClusterer, np.ndarray],
                                           method: str, shape: tuple[int, int]) -> None:
    """predict(X[:0]) raised torch.cat's "expected a non-empty list of Tensors"; as
    RBFKMeans.predict, 0 rows are refused with a ValueError."""
    dc, _ = fitted
    before = _snapshot(dc)
    with pytest.raises(ValueError, match=r"^X must have at least one row and one feature"):
        getattr(dc, method)(np.zeros(shape))
    _assert_same(before, _snapshot(dc))


def test_input_scale_digits_value_is_finite() -> None:
    s, r = input_scale(torch.as_tensor(_digits()))
    assert math.isfinite(s)
    assert math.isfinite(r)


def test_a_numpy_integer_seed_is_the_same_seed() -> None:
    """``random_state=np.int64(3)`` passed the parameter check and then failed in pretraining
    (``torch.Generator().manual_seed`` takes only Python ints)."""
    X = _digits()
    runs = [DeepClusterer.mlp(64, 3, pretrain_epochs=1, epochs=1, n_neighbors=5,
                              random_state=seed).fit(X).labels_
            for seed in (np.int64(3), 3)]
    assert np.array_equal(runs[0], runs[1])
