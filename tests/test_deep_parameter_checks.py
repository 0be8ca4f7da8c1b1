"""Bad settings of DeepClusterer and bad MNIST stores raise errors that name the parameter (or the
path and the array) and the value, before any work; numpy integers and large Python numbers are
stored so that training takes them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
import torch
from sklearn.datasets import load_digits

from rbfkmeans.deep import DeepClusterer, load_dataset
from rbfkmeans.deep._parameters import check_parameters, check_trainable
from rbfkmeans.deep.datasets import read_mnist_store

zarr = pytest.importorskip("zarr")

FAST = {"hidden": (16,), "n_latent": 4, "pretrain_epochs": 1, "epochs": 1, "batch_size": 32,
        "n_neighbors": 3}


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return (load_digits().data[:60] / 16).astype(np.float32)


def _clusterer(**kwargs: object) -> DeepClusterer:
    return DeepClusterer.mlp(64, 3, **{**FAST, **kwargs})


def _store(path: Path, **arrays: np.ndarray) -> Path:
    store = zarr.storage.ZipStore(str(path), mode="w")
    group = zarr.open_group(store, mode="w")
    for name, value in arrays.items():
        group.create_array(name, shape=value.shape, dtype=value.dtype)[...] = value
    store.close()
    return path


IMAGES = np.zeros((5, 28, 28), np.uint8)
LABELS = np.arange(5, dtype=np.int64)


# -- 1. read_mnist_store and load_dataset ------------------------------------------------------
@pytest.mark.filterwarnings("ignore:The data type")  # zarr on the string labels
@pytest.mark.parametrize(("images", "labels", "message"), [
    (np.full((5, 28, 28), np.nan, np.float32), LABELS,
     "test_images must hold uint8 pixels (0-255); got dtype float32"),
    (np.full((5, 28, 28), 10**12, np.int64), LABELS,
     "test_images must hold uint8 pixels (0-255); got dtype int64"),
    (np.zeros((5, 3, 3), np.uint8), LABELS,
     "test_images must be (n, 28, 28) images, n >= 1; got shape (5, 3, 3)"),
    (np.zeros((0, 28, 28), np.uint8), np.zeros(0, np.int64),
     "test_images must be (n, 28, 28) images, n >= 1; got shape (0, 28, 28)"),
    (IMAGES, np.array([0.5, 1, np.nan, 3, 4]),
     "test_labels must hold integer labels 0-9; got dtype float64"),
    (IMAGES, np.array([0, 1, 2, 3, 10]),
     "test_labels must hold integer labels 0-9; got labels in [0, 10]"),
    (IMAGES, np.array(["0", "1", "2", "3", "x"]),
     "test_labels must hold integer labels 0-9; got dtype <U1"),
    (IMAGES, np.arange(4), "test_labels must be (5,), one label per image of test_images; "
     "got shape (4,)"),
])
def test_read_mnist_store_checks_what_it_reads(tmp_path: Path, images: np.ndarray,
                                               labels: np.ndarray, message: str) -> None:
    path = _store(tmp_path / "s.zip", test_images=images, test_labels=labels)
    with pytest.raises(ValueError, match=re.escape(f"path {str(path)!r}: {message}")):
        read_mnist_store(path, "test")


def test_read_mnist_store_names_the_split_of_other_width(tmp_path: Path) -> None:
    path = _store(tmp_path / "s.zip", train_images=IMAGES, train_labels=LABELS,
                  test_images=np.zeros((5, 27, 28), np.uint8), test_labels=LABELS)
    with pytest.raises(ValueError, match=re.escape(
            f"path {str(path)!r}: test_images must be (n, 28, 28) images, n >= 1; got shape "
            "(5, 27, 28)")):
        read_mnist_store(path)
    X, y = read_mnist_store(_store(tmp_path / "t.zip", train_images=IMAGES + 255,
                                   train_labels=LABELS), "train")
    assert X.shape == (5, 784)
    assert X.dtype == np.float32
    assert float(X.max()) == 1.0
    assert y.tolist() == [0, 1, 2, 3, 4]
    assert y.dtype == np.int64


def test_read_mnist_store_and_load_dataset_take_str_names(tmp_path: Path) -> None:
    path = _store(tmp_path / "s.zip", test_images=IMAGES, test_labels=LABELS)
    with pytest.raises(ValueError, match=re.escape(
            "split must be 'all', 'train' or 'test'; got array(['test']")):
        read_mnist_store(path, np.array(["test"]))  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"path {str(tmp_path)!r}: no such file, it is a folder")):
        read_mnist_store(tmp_path, "test")
    with pytest.raises(TypeError, match=re.escape("name must be a str, one of 'digits'")):
        load_dataset(np.array(["iris"]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("got ndarray array([]")):
        load_dataset(np.empty(0))  # type: ignore[arg-type]


# -- 2. numpy integers -----------------------------------------------------------------------
def test_numpy_integers_are_stored_as_python_ints(X: np.ndarray) -> None:
    dc = _clusterer(batch_size=np.int64(32), epochs=np.int32(1), n_neighbors=np.int64(3),
                    pretrain_epochs=np.uint8(1), random_state=np.int64(0),
                    target_update=np.int16(1))
    dc.n_clusters = np.int64(3)
    dc._check_params()
    for name in ("batch_size", "epochs", "n_neighbors", "pretrain_epochs", "random_state",
                 "target_update", "n_clusters"):
        assert type(getattr(dc, name)) is int, name
    dc.batch_size = np.int64(32)  # set after construction: fit stores it too
    dc.fit(X)
    assert type(dc.batch_size) is int
    assert dc.labels_.shape == (60,)


# -- 3. large Python numbers -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["kmeans_weight", "recon_weight", "self_training_weight",
                                  "consistency_weight", "contrastive_weight"])
def test_large_int_weights_are_floats(X: np.ndarray, name: str) -> None:
    dc = _clusterer(**{name: 2**70})
    assert getattr(dc, name) == float(2**70)
    assert type(getattr(dc, name)) is float
    assert dc.fit(X).labels_.shape == (60,)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pretrain_epochs": 2**70}, "pretrain_epochs must be an integer >= 0, at most 2**31 - 1; "
     f"got {2**70}"),
    ({"epochs": 2**31}, f"epochs must be an integer >= 0, at most 2**31 - 1; got {2**31}"),
    ({"batch_size": 2**70}, "batch_size must be an integer >= 1, at most 2**62 (a batch larger "
     f"than the rows is all of them); got {2**70}"),
    ({"kmeans_weight": 10**400}, f"kmeans_weight must be a finite number >= 0; got {10**400}"),
])
def test_large_ints_are_refused_by_name(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _clusterer(**kwargs)


def test_batch_size_beyond_rows_is_all_rows_and_augment_is_bounded(X: np.ndarray) -> None:
    dc = _clusterer(batch_size=2**62).fit(X)
    assert dc.labels_.shape == (60,)
    dc = _clusterer(image_shape=(8, 8), augment=10**9)
    with pytest.raises(ValueError, match=re.escape(
            "augment=1000000000 pads each (1, 8, 8) image to (1, 2000000008, 2000000008): a "
            "batch of 32 of them holds more than 2**63 - 1 values")):
        dc.fit(X)


# -- 4. extreme settings named -------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"contrastive_temperature": 1e-45}, "contrastive_temperature must be a finite number > 0, "
     "at least 2.94e-39 (below it 1 / tau overflows float32, the embeddings' dtype); got 1e-45"),
    ({"image_shape": (8, 8), "scaling": 1e308},
     "scaling must be a finite number >= 0, at most 1e+30 (a magnification"),
    ({"image_shape": (8, 8), "scaling": 1e20, "augment": 10**12},
     "augment=1000000000000 and scaling=1e+20 move and magnify the images past float32's range"),
])
def test_extreme_settings_are_refused_up_front(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _clusterer(**kwargs)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"lr": 1e30}, "lr=1e+30"),
    ({"pretrain_lr": 1e30}, "pretrain_lr=1e+30"),
    ({"kmeans_weight": 1e308}, "kmeans_weight=1e+308"),
    ({"recon_weight": 1e308}, "recon_weight=1e+308"),
    ({"T_start": 1e308}, "T_start=1e+308"),
])
def test_divergence_names_the_settings(X: np.ndarray, kwargs: dict[str, object],
                                       named: str) -> None:
    dc = _clusterer(**kwargs)
    before = [p.detach().clone() for p in dc.encoder.parameters()]
    with pytest.raises(ValueError, match=r"did not stay finite at epoch 0: X is finite, so a "
                       r"learning rate \((pretrain_)?lr\), weight or temperature may be too "
                       r"large \(.*" + re.escape(named)):
        dc.fit(X)
    assert all(torch.equal(a, b) for a, b in zip(before, dc.encoder.parameters(), strict=True))


def test_tiny_temperatures_quote_the_value_passed(X: np.ndarray) -> None:
    dc = _clusterer(T_start=5e-324, T_end=5e-324)
    with pytest.raises(ValueError, match=re.escape("got T_start=5e-324, which gives 0.0")):
        dc.fit(X)


# -- 5. verbose, joint_graph, random_state ---------------------------------------------------
@pytest.mark.parametrize("value", ["abc", float("nan"), [1], np.array([1, 2]), -1,
                                   torch.eye(2).to_sparse()])
def test_verbose_is_checked(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape("verbose must be a bool or an integer >= 0; "
                                                   "got ")):
        _clusterer(verbose=value)


def test_verbose_takes_bools_and_counts() -> None:
    assert _clusterer(verbose=True).verbose is True
    assert type(_clusterer(verbose=np.int64(2)).verbose) is int


@pytest.mark.parametrize("value", [np.array(["input"]), scipy.sparse.eye(2)])
def test_joint_graph_is_named(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape("joint_graph must be 'input' or 'embedding'; "
                                                   "got ")):
        _clusterer(joint_graph=value)


@pytest.mark.parametrize("make", [DeepClusterer.mlp, DeepClusterer.cnn])
def test_random_state_is_named_with_its_rule(make: object) -> None:
    first = 64 if make is DeepClusterer.mlp else (8, 8)
    with pytest.raises(ValueError, match=re.escape(
            f"random_state must be an integer in [0, 2**32 - 1]; got {2**64}")):
        make(first, 3, random_state=2**64)  # type: ignore[operator]


# -- 6. check_parameters / check_trainable -----------------------------------------------------
def test_check_functions_name_their_arguments() -> None:
    for check in (check_parameters,
                  lambda dc: check_trainable(dc, 10, pretraining=True, joint=True)):
        with pytest.raises(TypeError, match=re.escape("dc must be a DeepClusterer; got object")):
            check(object())
    dc = _clusterer()
    for value in (None, "a", [1], float("nan"), float("inf"), 0.5):
        with pytest.raises(TypeError, match=re.escape("n_rows must be an integer; got")):
            check_trainable(dc, value, pretraining=True, joint=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("n_rows must be an integer >= 0; got -1")):
        check_trainable(dc, -1, pretraining=True, joint=True)
    check_trainable(dc, np.int64(10), pretraining=True, joint=True)
