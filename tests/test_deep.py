"""End-to-end clustering (rbfkmeans.deep): gradients through the layer, the self-training loss,
the collapse guard, the metrics, determinism and the deep-cluster command (tiny settings)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from rbfkmeans import KMeansLayer, RBFKMeans
from rbfkmeans.assignments import get_mapping
from rbfkmeans.cli import main
from rbfkmeans.deep import (
    DeepClusterer,
    cluster_acc,
    epoch_temperatures,
    evaluate,
    fenchel_young_loss,
    init_centroids,
    knn_graph,
    load_dataset,
    losses,
    mapping_entropy,
    mlp_autoencoder,
    neighbor_average,
    neighbor_contrastive_loss,
    propagate,
    random_affine,
    random_shift,
    self_training_targets,
)
from rbfkmeans.deep.experiment import run_ablation, run_deep_cluster
from rbfkmeans.deep.metrics import contingency

MAPPINGS = ("softmax", "entmax15", "sparsemax")


def blobs(n_per: int = 20, k: int = 3, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    X = np.concatenate([c + rng.normal(size=(n_per, d)) for c in centres]).astype(np.float32)
    y = np.repeat(np.arange(k), n_per)
    return X, y


def tiny(X: np.ndarray, k: int, **kw: object) -> DeepClusterer:
    params = {"hidden": (8,), "n_latent": 3, "pretrain_epochs": 3, "epochs": 3,
              "batch_size": 16, "random_state": 0}
    params.update(kw)
    return DeepClusterer.mlp(X.shape[1], k, **params)  # type: ignore[arg-type]


# -- gradients reach the encoder through the layer -------------------------------------------------


@pytest.mark.parametrize("assignment", MAPPINGS)
def test_kmeans_term_gradient_reaches_encoder_as_soft_lloyd_pull(assignment: str) -> None:
    """With only the soft k-means term, the encoder's gradient is the chain rule of the envelope
    gradient dF_T/dz_i = 2 sum_j r_ij (z_i - c_j), which only exists through the layer."""
    X, _ = blobs()
    dc = tiny(X, 3, assignment=assignment, kmeans_weight=1.0, recon_weight=0.0,
              self_training_weight=0.0)
    dc.init_layer(X)
    dc.layer_.temperature = 0.5 * dc.critical_temperature_
    Xt = torch.as_tensor(X)
    dc.loss(Xt)["total"].backward()
    grads = [p.grad for p in dc.encoder.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0
    # independent reference: analytic dL/dZ pulled back through the encoder by autograd
    for p in dc.encoder.parameters():
        p.grad = None
    Z = dc._embed(Xt)
    with torch.no_grad():
        R = dc.layer_(Z)  # (n, k)
        C = dc.layer_.centroids
        dZ = 2.0 * (Z - R @ C) / X.shape[0]  # sum_j r_ij = 1
    ref = torch.autograd.grad(Z, list(dc.encoder.parameters()), grad_outputs=dZ)
    for g, r in zip(grads, ref, strict=True):
        assert g is not None
        torch.testing.assert_close(g, r, rtol=2e-3, atol=1e-6)


def test_decoder_gets_no_gradient_from_kmeans_term_and_centroids_do() -> None:
    X, _ = blobs()
    dc = tiny(X, 3, recon_weight=0.0, self_training_weight=0.0, kmeans_weight=1.0)
    dc.init_layer(X)
    dc.layer_.temperature = 0.3 * dc.critical_temperature_
    dc.loss(torch.as_tensor(X))["total"].backward()
    assert dc.decoder is not None
    assert all(p.grad is None for p in dc.decoder.parameters())
    assert dc.layer_.centroids.grad is not None
    assert float(dc.layer_.centroids.grad.abs().sum()) > 0


@pytest.mark.parametrize("assignment", MAPPINGS)
def test_self_training_gradient_reaches_encoder(assignment: str) -> None:
    X, _ = blobs()
    dc = tiny(X, 3, assignment=assignment, kmeans_weight=0.0, recon_weight=0.0)
    dc.init_layer(X)
    dc.layer_.temperature = 0.5 * dc.critical_temperature_
    Xt = torch.as_tensor(X)
    with torch.no_grad():
        P = self_training_targets(dc.layer_(dc._embed(Xt)))
    dc.loss(Xt, P)["total"].backward()
    total = sum(float(p.grad.abs().sum()) for p in dc.encoder.parameters() if p.grad is not None)
    assert total > 0


# -- the self-training (Fenchel-Young) loss --------------------------------------------------------


def test_fenchel_young_is_kl_for_softmax() -> None:
    g = torch.Generator().manual_seed(0)
    D = torch.rand(7, 4, generator=g, dtype=torch.float64) * 3
    P = torch.softmax(torch.randn(7, 4, generator=g, dtype=torch.float64), dim=1)
    T = 0.4
    R = torch.softmax(-D / (2 * T), dim=1)
    kl = (P * (P.log() - R.log())).sum(dim=1).mean()
    torch.testing.assert_close(fenchel_young_loss(D, P, T, "softmax"), kl)


@pytest.mark.parametrize("assignment", MAPPINGS)
def test_fenchel_young_nonnegative_zero_at_R_gradient_R_minus_P(assignment: str) -> None:
    g = torch.Generator().manual_seed(1)
    T = 0.3
    D = (torch.rand(6, 5, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    R = get_mapping(assignment)(-D.detach() / (2 * T), dim=1)
    P = torch.softmax(3 * torch.randn(6, 5, generator=g, dtype=torch.float64), dim=1)
    loss = fenchel_young_loss(D, P, T, assignment)
    assert float(loss.detach()) >= -1e-12
    assert abs(float(fenchel_young_loss(D.detach(), R, T, assignment))) < 1e-10
    (gD,) = torch.autograd.grad(loss, D)
    # d/dz of l/2T is R - P, and z = -D/2T, loss is a mean over the 6 rows
    torch.testing.assert_close(gD, -(R - P) / (2 * T) / 6, rtol=1e-6, atol=1e-9)


def test_mapping_entropy_values() -> None:
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(mapping_entropy(p, "softmax"), torch.tensor([np.log(2.0)],
                               dtype=torch.float64))
    torch.testing.assert_close(mapping_entropy(p, "entmax15"),
                               torch.tensor([(4 / 3) * (1 - 2 * 0.5**1.5)], dtype=torch.float64))
    torch.testing.assert_close(mapping_entropy(p, "sparsemax"),
                               torch.tensor([0.25], dtype=torch.float64))
    assert float(mapping_entropy(p, "hard")) == 0.0


def test_self_training_targets_sharpen_and_average_neighbours() -> None:
    R = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.2, 0.8]], dtype=torch.float64)
    P = self_training_targets(R)
    torch.testing.assert_close(P.sum(dim=1), torch.ones(3, dtype=torch.float64))
    assert P[0, 0] > R[0, 0]
    assert P[2, 1] > R[2, 1]
    f = R.sum(dim=0)
    ref = R**2 / f
    torch.testing.assert_close(P, ref / ref.sum(dim=1, keepdim=True))
    nb = torch.tensor([[1], [0], [1]])
    Pn = self_training_targets(R, nb)
    Rbar = torch.stack([(R[0] + R[1]) / 2, (R[1] + R[0]) / 2, (R[2] + R[1]) / 2])
    ref = Rbar**2 / Rbar.sum(dim=0)
    torch.testing.assert_close(Pn, ref / ref.sum(dim=1, keepdim=True))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), k=st.integers(1, 5), m=st.integers(1, 6), seed=st.integers(0, 999))
def test_neighbor_average_equals_the_row_by_row_mean(n: int, k: int, m: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    R = torch.rand(n, k, generator=g, dtype=torch.float64)
    nb = torch.randint(0, n, (n, m), generator=g)
    ref = torch.stack([(R[i] + sum(R[j] for j in nb[i].tolist())) / (m + 1) for i in range(n)])
    torch.testing.assert_close(neighbor_average(R, nb), ref)
    with pytest.raises(ValueError,
                       match=r"neighbors must be a 2-D tensor \(n, m\); got shape \(\d+,\)"):
        neighbor_average(R, nb[:, 0])


@pytest.mark.parametrize("balance", [0.0, 0.5, 1.0])
def test_self_training_targets_balance_divides_by_a_power_of_cluster_sizes(balance: float) -> None:
    gen = torch.Generator().manual_seed(0)
    R = torch.softmax(torch.randn(12, 3, generator=gen, dtype=torch.float64), dim=1)
    P = self_training_targets(R, balance=balance)
    for i in range(12):  # row by row, from the definition
        raw = [float(R[i, j]) ** 2 / float(R[:, j].sum()) ** balance for j in range(3)]
        ref = torch.tensor(raw, dtype=torch.float64) / sum(raw)
        torch.testing.assert_close(P[i], ref)
    R_small = R.clone()
    R_small[:, 0] *= 0.2  # cluster 0 becomes rare: more balance -> more target mass for it
    R_small /= R_small.sum(dim=1, keepdim=True)
    if balance > 0:
        assert (self_training_targets(R_small, balance=balance)[:, 0]
                > self_training_targets(R_small, balance=0.0)[:, 0]).all()
    with pytest.raises(ValueError, match=r"balance must be a number in \[0, 1\]; got 1.5"):
        self_training_targets(R, balance=1.5)


def _infonce_reference(Z: torch.Tensor, Zp: torch.Tensor, tau: float) -> torch.Tensor:
    b = Z.shape[0]
    total = torch.zeros((), dtype=Z.dtype)
    for i in range(b):
        s_row = torch.stack([Z[i] @ Zp[l] / tau for l in range(b)])
        s_col = torch.stack([Z[l] @ Zp[i] / tau for l in range(b)])
        total = total - (s_row[i] - torch.logsumexp(s_row, 0))
        total = total - (s_col[i] - torch.logsumexp(s_col, 0))
    return total / (2 * b)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(2, 7), p=st.integers(2, 5), tau=st.floats(0.05, 2.0), seed=st.integers(0, 99))
def test_neighbor_contrastive_loss_equals_the_symmetric_infonce_sum(b: int, p: int, tau: float,
                                                                     seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    Z = torch.nn.functional.normalize(torch.randn(b, p, generator=gen, dtype=torch.float64), dim=1)
    Zp = torch.nn.functional.normalize(torch.randn(b, p, generator=gen, dtype=torch.float64), dim=1)
    expected = _infonce_reference(Z, Zp, tau)
    torch.testing.assert_close(neighbor_contrastive_loss(Z, Zp, tau), expected)


def test_neighbor_contrastive_loss_gradcheck_and_bad_input() -> None:
    gen = torch.Generator().manual_seed(1)
    Z = torch.randn(5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    Zp = torch.randn(5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: neighbor_contrastive_loss(a, b, 0.3), (Z, Zp))
    # orthonormal rows, each its own positive: the loss is log(1 + (b-1) e^{-1/tau})
    E = torch.eye(4, dtype=torch.float64)
    expected = torch.log(1 + 3 * torch.exp(torch.tensor(-1 / 0.5, dtype=torch.float64)))
    torch.testing.assert_close(neighbor_contrastive_loss(E, E, 0.5), expected)
    with pytest.raises(ValueError, match=r"tau must be a finite number > 0; got 0\.0"):
        neighbor_contrastive_loss(E, E, 0.0)
    with pytest.raises(ValueError, match=r"one shape; got \(4, 4\) and \(3, 4\)"):
        neighbor_contrastive_loss(E, E[:3], 0.5)


# -- collapse guard ----------------------------------------------------------------------------


def test_collapse_guard_reseeds_empty_cluster_and_resets_adam() -> None:
    X, _ = blobs(n_per=30, k=3, d=2, seed=3)
    dc = DeepClusterer(nn.Identity(), None, 3, normalize=False, min_cluster_fraction=0.1)
    Z = torch.as_tensor(X)
    C = torch.stack([Z[:30].mean(0), Z[30:].mean(0), torch.tensor([1e3, 1e3])])  # 3rd is empty
    dc.layer_ = KMeansLayer(C, temperature=0.1)
    opt = torch.optim.Adam([dc.layer_.centroids], lr=0.1)
    dc.layer_.objective(Z).backward()
    opt.step()
    reseeded = dc._collapse_guard(Z, opt)
    assert reseeded == [2]
    counts = torch.bincount(dc.layer_.predict(Z), minlength=3)
    assert int(counts.min()) >= 9  # >= 0.1 * n / k; the merged blobs were split
    assert torch.isfinite(dc.layer_.centroids).all()
    state = opt.state[dc.layer_.centroids]
    assert float(state["exp_avg"][2].abs().sum()) == 0.0


def test_collapse_guard_rejects_bad_input() -> None:
    from rbfkmeans.deep.guard import collapse_guard

    layer = KMeansLayer(torch.zeros(3, 2), temperature=0.1)
    with pytest.raises(ValueError, match=r"Z must be \(n, 2\) to match"):
        collapse_guard(layer, torch.zeros(5, 3))
    with pytest.raises(ValueError, match=r"min_cluster_fraction must be a number in \[0, 1\)"):
        collapse_guard(layer, torch.zeros(5, 2), min_cluster_fraction=1.0)
    with pytest.raises(ValueError, match="merge_tol must be a finite number >= 0; got -1"):
        collapse_guard(layer, torch.zeros(5, 2), merge_tol=-1)


def test_collapse_guard_counts_clusters_by_the_labels_it_is_given() -> None:
    """Centroids that are all populated by nearest centroid, but a reported labelling (a vote)
    that leaves cluster 2 empty: the guard re-seeds 2 when counting by that labelling only."""
    from rbfkmeans.deep.guard import collapse_guard

    X, _ = blobs(n_per=30, k=3, d=2, seed=3)
    Z = torch.as_tensor(X)
    C = torch.stack([Z[i * 30:(i + 1) * 30].mean(0) for i in range(3)])
    voted = torch.repeat_interleave(torch.tensor([0, 1, 1]), 30)  # blob 2 voted into cluster 1
    assert collapse_guard(KMeansLayer(C.clone(), temperature=0.1), Z) == []
    layer = KMeansLayer(C.clone(), temperature=0.1)
    assert collapse_guard(layer, Z, labels=voted) == [2]
    counts = torch.bincount(layer.predict(Z), minlength=3)
    assert int(counts.min()) >= 9  # the largest cluster by nearest centroid was split
    for bad in (voted[:-1], voted.float(), voted + 2, voted - 1):
        with pytest.raises(ValueError, match=r"labels must be \(90,\) integers in \[0, 3\)"):
            collapse_guard(KMeansLayer(C.clone(), temperature=0.1), Z, labels=bad)


def test_collapse_guard_separates_merged_centroids() -> None:
    X, _ = blobs(n_per=30, k=2, d=2, seed=4)
    Z = torch.as_tensor(X)
    C = torch.stack([Z.mean(0), Z.mean(0) + 1e-4])  # two centroids on top of each other
    dc = DeepClusterer(nn.Identity(), None, 2, normalize=False, min_cluster_fraction=0.0)
    dc.layer_ = KMeansLayer(C, temperature=0.1)
    assert len(dc._collapse_guard(Z)) == 1
    Cn = dc.layer_.centroids.detach()
    assert float((Cn[0] - Cn[1]).norm()) > 0.5
    assert dc._collapse_guard(Z) == []  # a healthy clustering is left alone


@pytest.mark.parametrize(("T", "neighbor_labels"),
                         [(0.03, True), (0.1, True), (0.3, True), (0.1, False)])
def test_fit_keeps_every_cluster_alive_under_a_collapsing_loss(T: float,
                                                              neighbor_labels: bool) -> None:
    """A huge soft k-means weight without reconstruction pulls embeddings together; the guard
    keeps all k clusters populated in the labels the fit reports (the neighbour vote, whose
    argmax can leave out a cluster that still owns points by nearest centroid, or the nearest
    centroid), at a cold and at softer temperatures."""
    X, _ = blobs(n_per=20, k=4, d=5, seed=5)
    dc = tiny(X, 4, kmeans_weight=100.0, recon_weight=0.0, self_training_weight=0.0, epochs=4,
              lr=1e-2, min_cluster_fraction=0.2, contrastive_weight=0.0, T_start=T, T_end=T,
              neighbor_labels=neighbor_labels)
    dc.fit(X)
    counts = np.bincount(dc.labels_, minlength=4)
    guarded = sum(len(h["reseeded"]) for h in dc.history_)
    assert guarded > 0  # the loss did collapse clusters ...
    assert counts.min() >= 0.2 * 80 / 4  # ... and every cluster ends populated
    assert np.isfinite(dc.predict_proba(X)).all()


# -- metrics -----------------------------------------------------------------------------------


def brute_force_acc(y: np.ndarray, p: np.ndarray) -> float:
    m = int(max(y.max(), p.max())) + 1
    best = 0
    for perm in itertools.permutations(range(m)):
        best = max(best, int(sum(perm[a] == b for a, b in zip(p, y, strict=True))))
    return best / len(y)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.lists(st.integers(0, 10**6), min_size=1,
                                                     max_size=25))
def test_cluster_acc_equals_brute_force_permutation(k_true: int, k_pred: int,
                                                    raw: list[int]) -> None:
    y = np.array([v % k_true for v in raw])
    p = np.array([(v // 7) % k_pred for v in raw])
    assert cluster_acc(y, p) == pytest.approx(brute_force_acc(y, p))


def test_metrics_on_relabelled_and_random_partitions() -> None:
    y = np.repeat(np.arange(4), 10)
    perm = np.array([2, 0, 3, 1])
    assert evaluate(y, perm[y]) == pytest.approx({"acc": 1.0, "nmi": 1.0, "ari": 1.0})
    with pytest.raises(ValueError, match="same length"):
        cluster_acc(y, y[:-1])
    assert cluster_acc(y, y - 1) == 1.0  # any integer labels: -1 .. 2 renumbered
    with pytest.raises(ValueError, match=r"y_pred holds the label -1: contingency indexes"):
        contingency(y, y - 1)


# -- schedule, initialisation, determinism -----------------------------------------------------


def test_epoch_temperatures_geometric() -> None:
    T = epoch_temperatures(1.0, 0.01, 5)
    np.testing.assert_allclose(T, [1.0, 10**-0.5, 0.1, 10**-1.5, 0.01])
    np.testing.assert_allclose(epoch_temperatures(0.3, 0.3, 4), [0.3] * 4)
    with pytest.raises(ValueError, match="T_start >= T_end"):
        epoch_temperatures(0.1, 1.0, 3)


def test_init_centroids_is_rbfkmeans() -> None:
    X, _ = blobs(seed=6)
    C, labels = init_centroids(X, 3, "entmax15", random_state=0)
    est = RBFKMeans(3, assignment="entmax15", schedule="geometric", random_state=0).fit(X)
    np.testing.assert_allclose(C, est.cluster_centers_)
    np.testing.assert_array_equal(labels, est.labels_)


def test_fit_is_deterministic_given_the_seed() -> None:
    X, _ = blobs(seed=7)
    a = tiny(X, 3, random_state=3).fit(X)
    b = tiny(X, 3, random_state=3).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    assert [h["total"] for h in a.history_] == [h["total"] for h in b.history_]


@pytest.mark.parametrize("assignment", [*MAPPINGS, "hard"])
def test_fit_with_every_mapping(assignment: str) -> None:
    X, y = blobs(seed=8)
    dc = tiny(X, 3, assignment=assignment, T_start=1.0, T_end=0.1, epochs=4).fit(X)
    assert dc.labels_.shape == (60,)
    assert dc.temperatures_.shape == (4,)
    if assignment != "hard":
        assert dc.temperatures_[0] > dc.temperatures_[-1] > 0
    R = dc.predict_proba(X)
    np.testing.assert_allclose(R.sum(axis=1), 1.0, atol=1e-5)
    assert evaluate(y, dc.labels_)["acc"] > 0.5
    assert all(np.isfinite(h["total"]) for h in dc.history_)


def test_encoder_without_decoder_and_inputs_untouched() -> None:
    X, _ = blobs(seed=9)
    X0 = X.copy()
    enc, _ = mlp_autoencoder(X.shape[1], (8,), 3, seed=0)
    dc = DeepClusterer(enc, None, 3, epochs=2, batch_size=16, recon_weight=5.0,
                       contrastive_weight=0.0).fit(X)
    assert dc.pretrain_history_ == []  # nothing to pretrain on
    assert float(dc.loss(torch.as_tensor(X))["recon"]) == 0.0
    np.testing.assert_array_equal(X, X0)


def test_encoder_without_decoder_pretrains_on_the_contrastive_term_alone() -> None:
    X, _ = blobs(seed=9)
    X0 = X.copy()
    enc, _ = mlp_autoencoder(X.shape[1], (8,), 3, seed=0)
    dc = DeepClusterer(enc, None, 3, pretrain_epochs=30, epochs=1, batch_size=16).fit(X)
    assert len(dc.pretrain_history_) == 30
    assert dc.pretrain_history_[-1] < dc.pretrain_history_[0]
    np.testing.assert_array_equal(X, X0)


def test_contrastive_pretraining_pulls_input_space_neighbours_together() -> None:
    """After pretraining with the neighbour-contrastive term, more of each row's nearest
    neighbours in the embedding are its input-space neighbours than after reconstruction alone."""
    X = load_dataset("digits").X[:300]
    Xt = torch.as_tensor(X)

    def recall(weight: float, tau: float = 1.0) -> float:
        dc = tiny(X, 10, hidden=(32,), n_latent=6, pretrain_epochs=40, batch_size=64,
                  contrastive_weight=weight, contrastive_temperature=tau).pretrain(X)
        Z = torch.as_tensor(dc.transform(X))
        nb = dc._neighbors(Xt)  # (n, m) input-space neighbours
        S = Z @ Z.T
        S.fill_diagonal_(-math.inf)
        near = S.topk(nb.shape[1], dim=1).indices  # (n, m) embedding-space neighbours
        hits = (near[:, :, None] == nb[:, None, :]).any(-1).float().mean()
        return float(hits)

    alone = recall(0.0)
    assert recall(1.0) > alone + 0.02  # the default tau = 1
    assert recall(1.0, tau=0.5) > alone + 0.05  # a sharper contrast pulls harder


# -- bad input ---------------------------------------------------------------------------------


def test_fitted_labels_are_the_neighbour_vote_and_predict_is_the_layer() -> None:
    from sklearn.neighbors import NearestNeighbors

    X, _ = blobs(n_per=15, k=3, seed=3)
    X = X + np.random.default_rng(0).normal(scale=3.0, size=X.shape).astype(np.float32)
    dc = tiny(X, 3, n_neighbors=4).fit(X)
    # an independent vote: sklearn's neighbours, numpy's mean of predict_proba
    idx = NearestNeighbors(n_neighbors=5).fit(X).kneighbors(X, return_distance=False)
    R = dc.predict_proba(X)
    vote = np.stack([R[i] + R[idx[i, 1:]].sum(axis=0) for i in range(len(X))]).argmax(axis=1)
    np.testing.assert_array_equal(dc.labels_, vote)
    layer_alone = tiny(X, 3, n_neighbors=4, neighbor_labels=False).fit(X)
    np.testing.assert_array_equal(layer_alone.labels_, layer_alone.predict(X))
    np.testing.assert_array_equal(layer_alone.predict(X), dc.predict(X))  # same training
    assert (dc.labels_ != dc.predict(X)).any()  # the vote moved some rows on this noisy data


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"n_clusters": 1}, "n_clusters must be an integer >= 2; got 1"),
        ({"recon_weight": -1.0}, "recon_weight must be a finite number >= 0; got -1.0"),
        ({"T_start": 0.1, "T_end": 0.5}, "T_start must be >= T_end"),
        ({"assignment": "gauss"}, "assignment must be one of"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1; got 0"),
        ({"normalize": 1}, "normalize must be True or False; got 1"),
        ({"neighbor_labels": "yes"}, "neighbor_labels must be True or False; got 'yes'"),
        ({"contrastive_weight": -0.5}, "contrastive_weight must be a finite number >= 0; got -0.5"),
        ({"contrastive_temperature": 0.0},
         "contrastive_temperature must be a finite number > 0; got 0.0"),
        ({"target_balance": 1.5}, r"target_balance must be a number in \[0, 1\]; got 1.5"),
        ({"target_balance": float("nan")}, r"target_balance must be a number in \[0, 1\]; got nan"),
    ],
)
def test_bad_parameters_raise(kw: dict[str, object], match: str) -> None:
    params: dict[str, object] = {"n_clusters": 3}
    params.update(kw)
    with pytest.raises(ValueError, match=match):
        DeepClusterer(nn.Linear(4, 2), None, **params)  # type: ignore[arg-type]


def test_bad_inputs_raise() -> None:
    with pytest.raises(TypeError, match=r"encoder must be a torch\.nn\.Module"):
        DeepClusterer("mlp")  # type: ignore[arg-type]
    dc = DeepClusterer(nn.Linear(4, 2), None, 3, epochs=1)
    with pytest.raises(ValueError, match="X must be finite"):
        dc.fit(np.full((10, 4), np.nan))
    with pytest.raises(ValueError, match="at least n_clusters=3 rows; got 2"):
        dc.fit(np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"2-D array \(n, d\)"):
        dc.fit(np.ones(4))
    with pytest.raises(RuntimeError, match="not fitted"):
        dc.predict(np.ones((5, 4)))
    # a float64 network had failed inside the stage with torch's dtype mismatch of mat1 and mat2
    for enc, dec, name in [(nn.Linear(4, 2).double(), None, "encoder"),
                           (nn.Linear(4, 2), nn.Linear(2, 4).double(), "decoder")]:
        with pytest.raises(TypeError, match=f"{name} must have float32 parameters.*float64"):
            DeepClusterer(enc, dec, 3, epochs=1).fit(np.ones((10, 4)))
    with pytest.raises(ValueError, match="encoder has parameters on the meta device"):
        DeepClusterer(nn.Linear(4, 2, device="meta"), None, 3, epochs=1).fit(np.ones((10, 4)))
    with pytest.raises(ValueError, match="dataset must be one of"):
        load_dataset("emnist")


def test_inputs_far_from_order_one_warn() -> None:
    """The encoder trains on features of order one about the origin (``rbfkmeans.deep.inputs``:
    on digits times 1e-6 or plus 100 the clusters collapsed): ``fit`` and ``pretrain`` warn
    where the per-feature spread ``s`` or the mean's distance from the origin in spreads ``r``
    leaves that range, naming both and the remedy; the project's datasets do not warn. ``s``
    and ``r`` against their float64 definitions."""
    import warnings

    from rbfkmeans.deep.inputs import input_scale, warn_if_unscaled

    X = load_dataset("digits").X
    Xd = X.astype(np.float64)
    mu = Xd.mean(0)
    trace = float(((Xd - mu) ** 2).sum(1).mean())
    s, r = input_scale(torch.from_numpy(X))
    assert s == pytest.approx(math.sqrt(trace / X.shape[1]), rel=1e-12)
    assert r == pytest.approx(float(np.linalg.norm(mu)) / math.sqrt(trace), rel=1e-12)
    assert input_scale(torch.ones(5, 3)) == (0.0, math.inf)
    assert input_scale(torch.zeros(5, 3)) == (0.0, 0.0)
    with pytest.raises(ValueError, match=r"X must be a non-empty 2-D tensor"):
        input_scale(torch.ones(0, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_unscaled(torch.from_numpy(X))
        warn_if_unscaled(torch.from_numpy(load_dataset("wine").X))
    for Z in (X * 1e-6, X * 1e4, X + 100.0):
        with pytest.warns(UserWarning, match=r"X's features spread by .* rescale X first"):
            warn_if_unscaled(torch.from_numpy(Z))
    dc = DeepClusterer.mlp(64, 3, random_state=0, pretrain_epochs=1, epochs=1, n_neighbors=0)
    with pytest.warns(UserWarning, match=r"spread by 2\.68e\+03 .* rescale X first"):
        dc.fit(X[:120] * 1e4)
    with pytest.warns(UserWarning, match=r"lies 370 spreads from the origin"):
        dc.pretrain(X + 100.0)


@pytest.mark.parametrize(
    ("seeds", "exc", "match"),
    [
        (0, ValueError, r"seeds must be an integer >= 1; got 0"),
        (True, TypeError, r"seeds must be an integer or a list of integers; got True"),
        ("3", TypeError, r"seeds must be an integer or a list of integers; got '3'"),
        (2.0, TypeError, r"seeds must be an integer or a list of integers; got float 2\.0"),
        ([], ValueError, r"seeds must name at least one seed"),
        ([0, -1], ValueError, r"seeds\[1\] must be an integer >= 0; got -1"),
        ([0, 1.5], TypeError, r"seeds\[1\] must be an integer; got float 1\.5"),
    ],
)
def test_experiments_reject_bad_seeds_before_running(tmp_path, seeds, exc, match) -> None:  # type: ignore[no-untyped-def]
    for run in (run_deep_cluster, run_ablation):
        with pytest.raises(exc, match=match):
            run("iris", seeds, tmp_path / "out", quick=True, progress=False)
    assert not (tmp_path / "out").exists()


def test_seeds_name_a_range_or_themselves() -> None:
    from rbfkmeans._validation import check_seeds

    assert check_seeds(3) == [0, 1, 2]
    assert check_seeds(np.int64(2)) == [0, 1]
    assert check_seeds((10, 12)) == [10, 12]
    assert check_seeds(np.array([4, 0])) == [4, 0]
    given = [1, 2]
    check_seeds(given)
    assert given == [1, 2]


# -- the command -------------------------------------------------------------------------------


def test_deep_cluster_command_writes_results_labels_and_figure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "deep"
    rc = main(["deep-cluster", "--dataset", "iris", "--seeds", "2", "--out", str(out),
               "--quick", "--no-progress", "--threads", "1"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["dataset"] == "iris"
    assert res["seeds"] == [0, 1]
    assert set(res["methods"]) == {"kmeans_raw", "two_step", "joint"}
    for row in res["methods"].values():
        assert [r["seed"] for r in row["per_seed"]] == [0, 1]
        for key in ("mean", "std", "min", "max"):
            assert set(row[key]) == {"acc", "nmi", "ari"}
    labels = np.load(out / "labels.npz")
    assert set(labels.files) == {f"{m}_seed{s}" for m in ("kmeans_raw", "two_step", "joint")
                                 for s in (0, 1)}
    y = load_dataset("iris").y
    for key in labels.files:
        method, seed = key.rsplit("_seed", 1)
        assert labels[key].shape == y.shape
        stored = res["methods"][method]["per_seed"][int(seed)]
        assert stored["acc"] == pytest.approx(cluster_acc(y, labels[key]))
    assert (out / "embedding_iris.png").stat().st_size > 0
    assert set(np.load(out / "embeddings.npz").files) >= {"before", "after", "labels_after", "y"}


def test_deep_cluster_ablation_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "abl"
    rc = main(["deep-cluster", "--dataset", "wine", "--seeds", "1", "--out", str(out), "--quick",
               "--no-progress", "--ablation", "--threads", "1"])
    assert rc == 0
    res = json.loads((out / "ablation.json").read_text())
    assert "two_step" in res["variants"]
    assert "full (defaults)" in res["variants"]
    assert "| variant | ACC | NMI | ARI |" in (out / "ablation.md").read_text()


def test_ablation_pretrains_a_variant_with_another_network_on_its_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rbfkmeans.deep.experiment import _clusterer, default_config

    variants = {"shared": {}, "mlp encoder": {"encoder": "mlp"}}
    res = run_ablation("digits", [1], tmp_path, variants=variants, quick=True, progress=False,
                       encoder="cnn", image_shape=(8, 8))
    ds = load_dataset("digits")
    # the variant equals the MLP clusterer built and trained directly, start and result
    dc = _clusterer(default_config(True, "digits", encoder="mlp", image_shape=(8, 8)),
                    64, 10, 1, False)
    assert dc.decoder is not None
    dc.fit(ds.X)
    row = res["variants"]["mlp encoder"]
    assert row["per_seed"][0]["acc"] == pytest.approx(cluster_acc(ds.y, dc.labels_))
    assert row["two_step"]["per_seed"][0]["acc"] == pytest.approx(
        cluster_acc(ds.y, dc.init_labels_))
    assert row["pretrain_seconds"] > 0
    # the shared variant trains the CNN (no decoder): its start is the shared two-step row
    cnn = _clusterer(default_config(True, "digits", encoder="cnn", image_shape=(8, 8)),
                     64, 10, 1, False)
    assert cnn.decoder is None
    cnn.fit(ds.X)
    assert res["variants"]["two_step"]["per_seed"][0]["acc"] == pytest.approx(
        cluster_acc(ds.y, cnn.init_labels_))
    assert res["variants"]["shared"]["per_seed"][0]["acc"] == pytest.approx(
        cluster_acc(ds.y, cnn.labels_))
    assert "two_step" not in res["variants"]["shared"]


def test_paired_gains_pair_rows_by_seed() -> None:
    from rbfkmeans.deep.report import gains_markdown, paired_gains

    joint = [{"seed": 3, "acc": 0.9}, {"seed": 1, "acc": 0.7}, {"seed": 7, "acc": 0.5}]
    start = [{"seed": 1, "acc": 0.75}, {"seed": 3, "acc": 0.6}, {"seed": 9, "acc": 0.1}]
    g = paired_gains(joint, start, "acc")  # seeds 1 and 3: gains -0.05 and +0.3
    assert g["n"] == 2
    assert g["above"] == 1
    assert g["mean"] == pytest.approx(0.125)
    assert g["std"] == pytest.approx(np.std([-0.05, 0.3], ddof=1))
    with pytest.raises(ValueError, match="share no seed"):
        paired_gains(joint[2:], start, "acc")
    rows = [{"seed": s, "acc": a, "nmi": a, "ari": a} for s, a in [(0, 0.5), (1, 0.7)]]
    ups = [{**r, "acc": r["acc"] + 0.1, "nmi": r["nmi"] - 0.1} for r in rows]
    line = gains_markdown({"toy": (ups, rows)}).splitlines()[2]
    assert line == ("| toy | 2 | +0.1000 ± 0.0000 | 2/2 | 0.1414 | -0.1000 ± 0.0000 | 0/2 "
                    "| 0.1414 |")


@pytest.mark.parametrize(("call", "match"), [
    (lambda r: r.summarize([]), r"per_seed must hold at least one per-seed row"),
    (lambda r: r.summarize([{"seed": 0, "acc": 1.0, "nmi": 1.0}]),
     r"per_seed\[0\] must hold 'seed' and 'ari'; got \['acc', 'nmi', 'seed'\]"),
    (lambda r: r.paired_gains([{"seed": 0, "acc": 1.0}], [{"seed": 0, "acc": 1.0}], "f1"),
     r"metric must be one of acc, nmi, ari; got 'f1'"),
    (lambda r: r.paired_gains([{"acc": 1.0}], [{"seed": 0, "acc": 1.0}], "acc"),
     r"joint\[0\] must hold 'seed' and 'acc'"),
    (lambda r: r.paired_gains([{"seed": 0, "acc": 1.0}], [], "acc"),
     r"start must hold at least one per-seed row"),
])
def test_report_names_bad_rows(call, match) -> None:  # type: ignore[no-untyped-def]
    from rbfkmeans.deep import report

    with pytest.raises(ValueError, match=match):
        call(report)


_R = torch.full((6, 3), 1.0 / 3.0)
_NAN = torch.full((6, 3), float("nan"))
_Z = torch.nn.functional.normalize(torch.randn(6, 4, generator=torch.Generator().manual_seed(0)))
_NB = torch.zeros(6, 2, dtype=torch.long)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: losses.mapping_entropy(_NAN, "softmax"), ValueError, r"P must be finite"),
        (lambda: losses.mapping_entropy(_R[0], "softmax"), ValueError, r"P must be a 2-D"),
        (lambda: losses.fenchel_young_loss(_R, _R[:3], 1.0, "softmax"), ValueError,
         r"P must have the shape of D \(6, 3\); got \(3, 3\)"),
        (lambda: losses.fenchel_young_loss(_NAN, _R, 1.0, "softmax"), ValueError,
         r"D must be finite"),
        (lambda: losses.fenchel_young_loss(_R, _R, float("nan"), "softmax"), ValueError,
         r"T must be a finite number >= 0; got nan"),
        (lambda: losses.target_sizes(_NAN), ValueError, r"R must be finite"),
        (lambda: losses.batch_targets(_R, torch.tensor([99]), None, _R.sum(0)), ValueError,
         r"rows must be integer indices in \[-6, 6\)"),
        (lambda: losses.batch_targets(_R, [0, 1], None, _R.sum(0)), TypeError,
         r"rows must be a slice or an index tensor; got list"),
        (lambda: losses.batch_targets(_R, slice(None), None, _R.sum(0)[:2]), ValueError,
         r"sizes must have shape \(3,\); got \(2,\)"),
        (lambda: losses.self_training_targets(_NAN), ValueError, r"R must be finite"),
        (lambda: losses.neighbor_contrastive_loss(_Z * float("nan"), _Z), ValueError,
         r"Z must be finite"),
        (lambda: losses.neighbor_contrastive_loss(_Z, _Z, tau=0.0), ValueError,
         r"tau must be a finite number > 0; got 0.0"),
        (lambda: losses.neighbor_consistency_loss(_R, _R[:2]), ValueError,
         r"R_pos must have the shape of R"),
        (lambda: losses.neighbor_consistency_loss(_R, _R, entropy_weight=float("nan")),
         ValueError, r"entropy_weight must be a finite number >= 0; got nan"),
        (lambda: knn_graph(_Z.numpy(), 2), TypeError, r"X must be a torch\.Tensor; got ndarray"),
        (lambda: knn_graph(_Z * float("nan"), 2), ValueError, r"X must be finite"),
        (lambda: neighbor_average(_R, _NB + 50), ValueError,
         r"neighbors must be row indices in \[0, 6\); got values from 50 to 50"),
        (lambda: neighbor_average(_R, _NB.float()), TypeError,
         r"neighbors must hold integer row indices; got torch\.float32"),
        (lambda: propagate(_NAN, _NB), ValueError, r"R must be finite"),
        (lambda: random_affine(_NAN, (2, 3), 1.0), ValueError, r"X must be finite"),
        (lambda: random_affine(_R[0], (1, 3), 1.0), ValueError, r"X must be a 2-D tensor"),
        (lambda: random_affine(_NB, (1, 2), 1.0), TypeError,
         r"X must be a floating-point torch\.Tensor; got torch\.int64"),
        (lambda: random_affine(_R, (2, 2), 1.0), ValueError,
         r"image_shape \(2, 2\) holds 4 values but the rows have 3 features"),
        (lambda: random_shift(_NAN, (1, 3), 1), ValueError, r"X must be finite"),
    ],
)
def test_loss_and_graph_functions_name_a_bad_argument(call, exc, match) -> None:  # type: ignore[no-untyped-def]
    """Every function of the deep package's ``__all__`` raises one clear error naming the bad
    argument (no IndexError, no shape RuntimeError, no NaN out of NaN in)."""
    with pytest.raises(exc, match=match):
        call()


# -- how a fit starts: the caller's grad mode, a second fit ----------------------------------------


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_fit_and_pretrain_train_whatever_the_callers_grad_mode(mode: str) -> None:
    """A fit inside ``torch.no_grad()`` or ``torch.inference_mode()`` trains as one outside (it
    failed with torch's 'element 0 of tensors does not require grad'), and leaves no gradient
    of its last batch on the networks."""
    X, _ = blobs()
    context = torch.no_grad if mode == "no_grad" else torch.inference_mode
    inside, pretrained = tiny(X, 3), tiny(X, 3)  # networks made outside, fitted inside
    with context():
        Xc = torch.as_tensor(X).clone()  # rows made inside too: an inference tensor there
        inside.fit(Xc)
        pretrained.pretrain(Xc)
    outside = tiny(X, 3).fit(X)
    np.testing.assert_array_equal(inside.labels_, outside.labels_)
    for a, b in zip(inside.encoder.parameters(), outside.encoder.parameters(), strict=True):
        assert torch.equal(a.detach(), b.detach())
    assert pretrained.pretrain_history_ == tiny(X, 3).pretrain(X).pretrain_history_
    assert all(p.grad is None for p in inside.encoder.parameters())
    assert all(p.grad is None for p in outside.decoder.parameters())
    assert inside.layer_.centroids.grad is None


def test_a_second_fit_pretrains_again_and_pretrain_then_fit_does_not() -> None:
    """``pretrained_`` says whether the networks hold a pretraining the next fit starts from:
    :meth:`pretrain` sets it and ``fit`` uses it up, so a second fit pretrains again (it had
    kept the first fit's pretraining history and skipped the stage, also after the user set
    new networks or ``pretrain_epochs``)."""
    X, _ = blobs()
    dc = tiny(X, 3).fit(X)
    assert dc.pretrained_ is False
    first = list(dc.pretrain_history_)
    dc.fit(X)
    assert len(dc.pretrain_history_) == 3
    assert dc.pretrain_history_ != first  # pretrained again, from the jointly trained weights
    fresh = tiny(X, 3)
    dc.encoder, dc.decoder = fresh.encoder, fresh.decoder
    dc.fit(X)
    assert dc.pretrain_history_ == first  # new networks, the same seed: the same pretraining
    staged = tiny(X, 3).pretrain(X)
    assert staged.pretrained_ is True
    before = [p.detach().clone() for p in staged.encoder.parameters()]
    calls: list[int] = []
    original = staged._pretrain
    staged._pretrain = lambda *a, **kw: calls.append(1) or original(*a, **kw)  # type: ignore[method-assign]
    staged.fit(X)
    assert calls == []  # pretrain() ran since the last fit: fit starts from it
    assert not all(torch.equal(a, p.detach()) for a, p in zip(before, staged.encoder.parameters(),
                                                              strict=True))
