"""DeepClusterer's scikit-learn parameter protocol: get_params from the constructor's signature,
set_params (unknown names refused, values checked by the next fit) and sklearn.base.clone (deep
copies of the networks as they stand, a clone fitting like a fresh construction)."""

from __future__ import annotations

import inspect
import re
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import load_digits
from torch import nn

from rbfkmeans.deep import DeepClusterer

FAST = {"pretrain_epochs": 2, "epochs": 2, "batch_size": 64, "n_neighbors": 5}
NETWORKS = ("encoder", "decoder")


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return (load_digits().data[:300] / 16).astype(np.float32)


def _signature_names() -> set[str]:
    return {p for p in inspect.signature(DeepClusterer.__init__).parameters if p != "self"}


def _same_network(a: nn.Module | None, b: nn.Module | None) -> bool:
    """``a`` and ``b`` are both None, or hold equal state_dicts."""
    if a is None or b is None:
        return a is None and b is None
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _assert_same_params(a: DeepClusterer, b: DeepClusterer) -> None:
    pa, pb = a.get_params(), b.get_params()
    assert pa.keys() == pb.keys() == _signature_names()
    for name in NETWORKS:
        if pa[name] is not None:
            assert pa[name] is not pb[name], name
        assert _same_network(pa[name], pb[name]), name
    for name in pa.keys() - set(NETWORKS):
        assert type(pa[name]) is type(pb[name]), name
        assert pa[name] == pb[name], name


def _weights(dc: DeepClusterer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in dc._params()]


def test_get_params_keys_are_the_constructor_signature() -> None:
    dc = DeepClusterer.mlp(64, 10, random_state=0)
    params = dc.get_params()
    assert set(params) == _signature_names()
    assert dc.get_params(deep=False) == params
    for name, value in params.items():
        assert value is getattr(dc, name), name
    assert params["n_clusters"] == 10
    assert params["random_state"] == 0


def test_clone_of_an_unfitted_mlp_fits_like_a_fresh_construction(X: np.ndarray) -> None:
    original = DeepClusterer.mlp(64, 10, random_state=0, **FAST)
    copy = clone(original)
    assert type(copy) is DeepClusterer
    assert copy is not original
    _assert_same_params(original, copy)
    before = _weights(original)
    copy.fit(X)  # trains the clone's networks, not the original's
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(original), strict=True))
    assert not hasattr(original, "labels_")
    original.fit(X)
    assert len(np.unique(original.labels_)) > 1
    np.testing.assert_array_equal(copy.labels_, original.labels_)
    fresh = DeepClusterer.mlp(64, 10, random_state=0, **FAST).fit(X)
    np.testing.assert_array_equal(fresh.labels_, original.labels_)


def test_clone_preserves_every_parameter() -> None:
    dc = DeepClusterer.mlp(64, 4, random_state=3, assignment="entmax15", kmeans_weight=2,
                           recon_weight=0.5, n_neighbors=np.int64(7), target_balance=1.0,
                           normalize=False, neighbor_labels=False, graph_dims=16,
                           joint_graph="embedding", consistency_weight=0.1, T_start=0.3,
                           T_end=0.01, pretrain_epochs=3, epochs=4, batch_size=32, lr=1e-2,
                           min_cluster_fraction=0.0, merge_tol=0.2, verbose=1)
    _assert_same_params(dc, clone(dc))
    cnn = DeepClusterer.cnn((8, 8), 5, channels=(4,), hidden=16, n_latent=4, augment=1,
                            rotation=10.0, scaling=0.1, random_state=2)
    copy = clone(cnn)
    _assert_same_params(cnn, copy)
    assert copy.decoder is None
    assert copy.image_shape == (8, 8)


def test_clone_of_a_fitted_model_copies_the_trained_networks_unfitted(X: np.ndarray) -> None:
    dc = DeepClusterer.mlp(64, 10, random_state=0, **FAST)
    initial = _weights(dc)
    dc.fit(X)
    copy = clone(dc)
    _assert_same_params(dc, copy)
    assert not all(torch.equal(a, b) for a, b in zip(initial, _weights(copy), strict=True))
    for name in ("labels_", "layer_", "init_labels_", "timings_", "n_features_in_"):
        assert not hasattr(copy, name), name
    assert copy.pretrained_ is False


def test_clone_keeps_a_layer_the_networks_share_shared() -> None:
    torch.manual_seed(0)
    shared = nn.Linear(16, 16)
    encoder = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), shared, nn.ReLU(), nn.Linear(16, 8))
    decoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), shared, nn.ReLU(), nn.Linear(16, 64))
    copy = clone(DeepClusterer(encoder, decoder, 10))
    assert copy.encoder[2] is copy.decoder[2]
    assert copy.encoder[2] is not shared
    assert len(copy._params()) == 10  # one optimiser entry per shared tensor, as the original


def test_set_params_sets_values_as_given_and_returns_self() -> None:
    dc = DeepClusterer.mlp(64, 10, random_state=0)
    epochs, n_clusters = np.int64(3), np.int64(4)
    assert dc.set_params() is dc
    assert dc.set_params(epochs=epochs, n_clusters=n_clusters, lr=0.5) is dc
    assert dc.epochs is epochs
    assert dc.n_clusters is n_clusters
    assert dc.lr == 0.5
    copy = clone(dc)  # the constructor stores numpy integers as ints
    assert copy.n_clusters == 4
    assert type(copy.n_clusters) is int
    assert copy.epochs == 3
    assert type(copy.epochs) is int


def test_set_params_refuses_an_unknown_name_and_sets_nothing() -> None:
    dc = DeepClusterer.mlp(64, 10, random_state=0)
    before = dict(vars(dc))
    with pytest.raises(ValueError, match=r"Invalid parameter 'n_cluster' for estimator "
                       r"DeepClusterer\. Valid parameters are: \[.*'n_clusters'.*\]"):
        dc.set_params(epochs=7, n_cluster=3)
    assert vars(dc) == before
    with pytest.raises(ValueError, match=re.escape("Invalid parameter 'encoder__weight'")):
        dc.set_params(encoder__weight=None)


def test_a_bad_value_set_is_refused_by_the_next_fit_with_nothing_changed(
        X: np.ndarray) -> None:
    dc = DeepClusterer.mlp(64, 10, random_state=0, **FAST).fit(X)
    dc.set_params(n_clusters=0)  # not checked until a stage runs
    assert dc.n_clusters == 0
    state: dict[str, Any] = dict(vars(dc))
    weights, labels, centroids = _weights(dc), dc.labels_.copy(), dc.layer_.centroids.clone()
    with pytest.raises(ValueError, match=re.escape("n_clusters must be an integer >= 2; got 0")):
        dc.fit(X)
    assert vars(dc).keys() == state.keys()
    assert all(vars(dc)[k] is v for k, v in state.items())
    assert all(torch.equal(a, b) for a, b in zip(weights, _weights(dc), strict=True))
    np.testing.assert_array_equal(dc.labels_, labels)
    assert torch.equal(dc.layer_.centroids, centroids)
    with pytest.raises(ValueError, match=re.escape("n_clusters must be an integer >= 2")):
        clone(dc)  # the constructor checks every parameter
