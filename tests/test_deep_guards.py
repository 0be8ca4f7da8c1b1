"""What DeepClusterer guards against, each checked against an independent computation: the
labels it reports where its neighbour graph cannot tell rows apart or its last vote empties
clusters, decoders and encoders that return the wrong thing, settings that leave no loss to
train, the train/eval modes of the caller's networks, non-finite embeddings, values beyond
float32, and the scores' labels."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from torch import nn

from rbfkmeans.deep import DeepClusterer, ari, cluster_acc, evaluate, load_dataset, nmi
from rbfkmeans.deep.metrics import contingency


def _digits(n: int = 300) -> np.ndarray:
    return load_dataset("digits").X[:n]


def _nearest(dc: DeepClusterer, X: np.ndarray) -> np.ndarray:
    """The nearest centroid of each row, in float64 numpy from the embedding and the centroids."""
    Z = dc.transform(X).astype(np.float64)
    C = dc.layer_.centroids.detach().cpu().numpy().astype(np.float64)
    return ((Z[:, None, :] - C[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)


def _filled(labels: np.ndarray, k: int) -> int:
    return int((np.bincount(labels, minlength=k) > 0).sum())


# -- labels_ ---------------------------------------------------------------------------------


def test_labels_where_every_row_neighbours_every_row_are_the_nearest_centroid() -> None:
    """With n <= n_neighbors + 1 every row's neighbourhood is every other row: the averaged
    memberships were the same for all rows and labels_ put all 12 in one cluster ([0 12 0])
    while predict spread them over three."""
    Xi = load_dataset("iris").X[np.random.default_rng(0).choice(150, 12, replace=False)]
    dc = DeepClusterer.mlp(4, 3, hidden=(16,), n_latent=4, pretrain_epochs=2, epochs=2)
    dc.fit(Xi)
    ref = _nearest(dc, Xi)
    assert _filled(ref, 3) > 1  # the rows the layer tells apart
    np.testing.assert_array_equal(dc.labels_, ref)


def test_labels_of_a_vote_that_empties_clusters_are_the_nearest_centroid() -> None:
    """n = n_neighbors + 2 rows: each neighbourhood leaves out one row, the averages are still
    nearly alike and the vote (sklearn's neighbours, numpy's mean of predict_proba) puts every
    row in one cluster, where the nearest centroid fills three: labels_ is the nearest
    centroid."""
    from sklearn.neighbors import NearestNeighbors

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, size=(6, 4)) for c in (-2.0, 0.0, 2.0)])
    X = X.astype(np.float32)
    m = X.shape[0] - 2
    dc = DeepClusterer.mlp(4, 3, hidden=(16,), n_latent=4, pretrain_epochs=2, epochs=2,
                           n_neighbors=m).fit(X)
    idx = NearestNeighbors(n_neighbors=m + 1).fit(X).kneighbors(X, return_distance=False)
    R = dc.predict_proba(X).astype(np.float64)
    vote = np.stack([R[i] + R[idx[i, 1:]].sum(axis=0) for i in range(len(X))]).argmax(axis=1)
    ref = _nearest(dc, X)
    assert _filled(vote, 3) < _filled(ref, 3)
    np.testing.assert_array_equal(dc.labels_, ref)


def test_final_labels_fill_the_clusters_the_nearest_centroid_fills() -> None:
    """The last epoch's collapse guard re-seeded two clusters and the vote taken after it left
    them empty ([60 44 19 0 32 42 0 21 43 39]): labels_ is then the nearest centroid."""
    X = _digits()
    g = DeepClusterer.mlp(64, 10, hidden=(32,), n_latent=4, pretrain_epochs=2, epochs=2,
                          random_state=0, assignment="hard").fit(X)
    ref = _nearest(g, X)
    assert _filled(g.labels_, 10) >= _filled(ref, 10)
    assert _filled(g.labels_, 10) == 10


def test_final_labels_rule_on_a_vote_that_empties_a_cluster() -> None:
    """The rule itself: a row alone near centroid 2, whose neighbours all sit at centroid 0,
    is voted into cluster 0, leaving cluster 2 empty; the labels kept are the nearest
    centroid. A vote that empties nothing is kept."""
    X = _digits(60)
    dc = DeepClusterer(nn.Sequential(nn.Linear(64, 2)), None, 3, pretrain_epochs=0, epochs=0,
                       n_neighbors=3).fit(X)
    C = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    with torch.no_grad():
        dc.layer_.centroids.copy_(C)
    Z = torch.cat([C[0].repeat(4, 1), C[1].repeat(4, 1), C[2][None]])  # (9, 2)
    neighbors = torch.tensor([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2],
                              [5, 6, 7], [4, 6, 7], [4, 5, 7], [4, 5, 6], [0, 1, 2]])
    nearest = np.array([0] * 4 + [1] * 4 + [2])
    R = dc.layer_(Z).detach().numpy().astype(np.float64)
    vote = np.stack([R[i] + R[neighbors[i].numpy()].sum(axis=0) for i in range(9)])
    assert vote.argmax(axis=1)[8] == 0  # the vote empties cluster 2
    np.testing.assert_array_equal(dc._fitted_labels(Z, neighbors).numpy(), nearest)
    kept = neighbors.clone()
    kept[8] = torch.tensor([8, 8, 8])  # row 8 votes with itself only: cluster 2 stays filled
    kept[3] = torch.tensor([4, 5, 6])  # row 3 is voted into cluster 1
    np.testing.assert_array_equal(dc._fitted_labels(Z, kept).numpy(),
                                  [0, 0, 0, 1, 1, 1, 1, 1, 2])  # the vote, kept


# -- networks that return the wrong thing ----------------------------------------------------


class _Decoder(nn.Module):
    """A decoder (not a Sequential: its width is not read off) returning ``shape(b, d)``."""

    def __init__(self, shape: Callable[[int, int], tuple[int, ...]]) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 64)
        self.shape = shape

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.lin(z)
        b, d = out.shape
        return out.reshape(-1)[: int(np.prod(self.shape(b, d)))].reshape(self.shape(b, d))


@pytest.mark.parametrize("shape", [lambda b, d: (b, 1), lambda b, d: (b, 1, d),
                                   lambda b, d: (b, 32)], ids=["b-1", "b-1-d", "b-32"])
@pytest.mark.parametrize("method", ["fit", "pretrain"])
def test_a_decoder_of_another_shape_is_named(shape: Callable[[int, int], tuple[int, ...]],
                                             method: str) -> None:
    """(b, 1) and (b, 1, d) broadcast against the rows: training reconstructed the wrong
    target with only torch's warning; (b, 32) raised torch's size mismatch."""
    X = _digits()
    enc, dec = nn.Sequential(nn.Linear(64, 4)), _Decoder(shape)
    dc = DeepClusterer(enc, dec, 3, pretrain_epochs=1, epochs=1, n_neighbors=0)
    before = {k: v.clone() for k, v in dec.state_dict().items()}
    b = min(256, X.shape[0])
    with pytest.raises(ValueError, match=r"^decoder must map embeddings back to rows of X's "
                                         rf"shape \({b}, 64\); got shape "
                                         rf"{_shape_pattern(shape(b, 64))}"):
        getattr(dc, method)(X)
    assert all(torch.equal(before[k], v) for k, v in dec.state_dict().items())


def _shape_pattern(shape: tuple[int, ...]) -> str:
    return r"\(" + ", ".join(str(s) for s in shape) + r"\)"


def test_loss_names_a_decoder_of_another_shape() -> None:
    X = _digits()
    dc = DeepClusterer(nn.Sequential(nn.Linear(64, 4)), None, 3, pretrain_epochs=0, epochs=0,
                       n_neighbors=0).fit(X)
    dc.decoder = _Decoder(lambda b, d: (b, 1))
    with pytest.raises(ValueError, match=r"decoder must map embeddings back to rows of X's "
                                         r"shape \(10, 64\); got shape \(10, 1\)"):
        dc.loss(torch.as_tensor(X[:10]))


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lin(x), x


@pytest.mark.parametrize("method", ["transform", "fit"])
def test_an_encoder_returning_a_tuple_is_named(method: str) -> None:
    """It failed with "'tuple' object has no attribute 'norm'"."""
    dc = DeepClusterer(_Pair(), None, 3, pretrain_epochs=0, epochs=1)
    with pytest.raises(TypeError, match=r"^encoder must return a floating-point tensor "
                                        r"\(n, p\) of embeddings; got tuple"):
        getattr(dc, method)(_digits())


def test_a_width_one_embedding_on_the_sphere_is_refused() -> None:
    """normalize=True maps a width-1 embedding to -1 or +1: one cluster, silently."""
    X = _digits()
    dc = DeepClusterer(nn.Sequential(nn.Linear(64, 1)), None, 3, pretrain_epochs=0, epochs=1)
    with pytest.raises(ValueError, match=r"normalize=True .* width 1"):
        dc.fit(X)
    dc.normalize = False
    dc.fit(X)
    np.testing.assert_allclose(dc.transform(X), X @ dc.encoder[0].weight.detach().numpy().T
                               + dc.encoder[0].bias.detach().numpy(), rtol=1e-5, atol=1e-5)


# -- settings that leave nothing to train ----------------------------------------------------


def _frozen() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 4)).requires_grad_(False)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: DeepClusterer(nn.Sequential(nn.Linear(64, 4)), None, 10, kmeans_weight=0.0,
                               self_training_weight=0.0, pretrain_epochs=1, epochs=2),
         r"^epochs=2 trains on a loss with no term: kmeans_weight=0.0, "
         r"self_training_weight=0.0, consistency_weight=0.0 .*decoder=None"),
        (lambda: DeepClusterer(nn.Sequential(nn.Linear(64, 4)), None, 10, kmeans_weight=0.0,
                               self_training_weight=0.0, consistency_weight=1.0, n_neighbors=0,
                               pretrain_epochs=1, epochs=2),
         r"consistency_weight=1.0 \(with n_neighbors=0\)"),
        (lambda: DeepClusterer(nn.Sequential(nn.Linear(64, 4)), nn.Sequential(nn.Linear(4, 64)),
                               10, kmeans_weight=0.0, self_training_weight=0.0, recon_weight=0.0,
                               pretrain_epochs=1, epochs=2),
         r"no reconstruction \(recon_weight=0.0\)"),
        (lambda: DeepClusterer(_frozen(), None, 10, pretrain_epochs=1, epochs=2),
         r"^pretrain_epochs=1 trains the encoder, but no parameter of the encoder requires a "
         r"gradient: set pretrain_epochs=0"),
        (lambda: DeepClusterer(nn.Sequential(nn.Flatten()), None, 10, pretrain_epochs=1,
                               epochs=2),
         r"^pretrain_epochs=1 trains the encoder, but no parameter"),
        (lambda: DeepClusterer(_frozen(), nn.Sequential(nn.Linear(4, 64)).requires_grad_(False),
                               10, pretrain_epochs=1, epochs=0),
         r"^pretrain_epochs=1 trains the encoder and the decoder, but no parameter"),
    ],
)
def test_settings_with_no_gradient_are_refused_before_any_stage(make: Callable[[], Any],
                                                                match: str) -> None:
    """Each passed validation and failed inside backward ("element 0 of tensors does not
    require grad") or at the optimizer ("got an empty parameter list")."""
    dc = make()
    with pytest.raises(ValueError, match=match):
        dc.fit(_digits())
    assert not hasattr(dc, "timings_")
    assert not hasattr(dc, "pretrain_history_")


def test_pretrain_of_networks_with_nothing_to_train_is_refused() -> None:
    dc = DeepClusterer(_frozen(), None, 3, pretrain_epochs=1)
    with pytest.raises(ValueError, match=r"^pretrain_epochs=1 trains the encoder, but no"):
        dc.pretrain(_digits())


@pytest.mark.parametrize("encoder", [_frozen, lambda: nn.Sequential(nn.Flatten())],
                         ids=["frozen", "parameter-free"])
def test_an_encoder_used_as_it_is_still_fits(encoder: Callable[[], Any]) -> None:
    """pretrain_epochs=0 with a frozen or parameter-free encoder: joint training moves the
    centroids alone, and the embedding stays the one the layer started on."""
    X = _digits()
    enc = encoder()
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    dc = DeepClusterer(enc, None, 5, pretrain_epochs=0, epochs=2).fit(X)
    assert all(torch.equal(before[k], v) for k, v in enc.state_dict().items())
    np.testing.assert_array_equal(dc.transform(X), dc.init_embedding_)
    assert dc.labels_.shape == (300,)


def test_a_frozen_encoder_with_a_trainable_decoder_pretrains_the_decoder() -> None:
    X = _digits()
    enc, dec = _frozen(), nn.Sequential(nn.Linear(4, 64))
    enc_before = {k: v.clone() for k, v in enc.state_dict().items()}
    w = dec[0].weight.detach().clone()
    DeepClusterer(enc, dec, 5, pretrain_epochs=2, epochs=1).fit(X)
    assert all(torch.equal(enc_before[k], v) for k, v in enc.state_dict().items())
    assert not torch.equal(w, dec[0].weight)


# -- train / eval modes ----------------------------------------------------------------------


def _modes(module: nn.Module) -> list[bool]:
    return [m.training for m in module.modules()]


def _mixed(module: nn.Module, training: bool) -> nn.Module:
    """``module`` in ``training`` mode with its last submodule in the other."""
    module.train(training)
    list(module.modules())[-1].train(not training)
    return module


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("method", ["transform", "predict", "predict_proba"])
def test_inference_puts_back_the_encoders_modes(method: str, training: bool) -> None:
    """transform, predict and predict_proba left the encoder in eval mode."""
    X = _digits()
    dc = DeepClusterer(nn.Sequential(nn.Linear(64, 8), nn.Dropout(0.5), nn.Linear(8, 4)), None,
                       5, pretrain_epochs=0, epochs=1).fit(X)
    enc = _mixed(dc.encoder, training)
    want = _modes(enc)
    out = getattr(dc, method)(X)
    assert _modes(enc) == want
    again = getattr(dc, method)(X)
    np.testing.assert_array_equal(out, again)  # embedded in eval mode: no dropout


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("method", ["fit", "pretrain", "init_layer"])
def test_stages_put_back_the_networks_modes(method: str, training: bool) -> None:
    """fit left the encoder in eval mode and the decoder in train mode."""
    X = _digits()
    dc = DeepClusterer.mlp(64, 5, hidden=(16,), n_latent=4, pretrain_epochs=1, epochs=1)
    enc, dec = _mixed(dc.encoder, training), _mixed(dc.decoder, training)
    want = _modes(enc), _modes(dec)
    getattr(dc, method)(X)
    assert (_modes(enc), _modes(dec)) == want


def test_the_fit_does_not_depend_on_the_modes_it_found() -> None:
    X = _digits()
    a = DeepClusterer.mlp(64, 5, hidden=(16,), n_latent=4, pretrain_epochs=2, epochs=2).fit(X)
    b = DeepClusterer.mlp(64, 5, hidden=(16,), n_latent=4, pretrain_epochs=2, epochs=2)
    b.encoder.eval()
    b.decoder.eval()
    b.fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert not b.encoder.training
    assert not b.decoder.training


# -- non-finite values -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def broken() -> tuple[DeepClusterer, np.ndarray]:
    X = _digits()
    dc = DeepClusterer.mlp(64, 5, hidden=(16,), n_latent=4, pretrain_epochs=1, epochs=1).fit(X)
    with torch.no_grad():
        dc.encoder[0].weight[0, 0] = float("nan")
    return dc, X


@pytest.mark.parametrize("method", ["transform", "predict", "predict_proba", "fit"])
def test_a_non_finite_embedding_names_the_encoder(broken: tuple[DeepClusterer, np.ndarray],
                                                  method: str) -> None:
    """transform and predict_proba returned NaN, predict blamed X ("X must be finite"), fit
    gave scikit-learn's "Input X contains NaN" (a second fit, which pretrains again, looks at
    the encoder's embedding of its first batch of 256 rows before it trains)."""
    dc, X = broken
    assert np.isfinite(X).all()
    rows = "256 of 256" if method == "fit" else "300 of 300"
    with pytest.raises(ValueError, match=r"^the encoder's embedding of X holds NaN or inf "
                                         rf"\(in {rows} rows"):
        getattr(dc, method)(X)


def test_x_beyond_float32_is_named_as_such() -> None:
    """A finite float64 1e39 was reported as "X must be finite; got NaN or inf entries"."""
    X = _digits().astype(np.float64)
    X[3, 5] = -1e39
    dc = DeepClusterer(nn.Sequential(nn.Linear(64, 4)), None, 3)
    with pytest.raises(ValueError, match=r"^X must fit float32.* got -1e\+39 at row 3, "
                                         r"column 5"):
        dc.transform(X)
    X[3, 5] = np.inf
    with pytest.raises(ValueError, match=r"^X must be finite; got NaN or inf"):
        dc.transform(X)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (lambda X: (X.numpy(),), TypeError,
         r"^X must be a floating-point torch.Tensor \(b, d\) of rows; got ndarray"),
        (lambda X: (X[:, :3],), ValueError, r"^X must have 64 features .* got 3"),
        (lambda X: (X[:0],), ValueError, r"^X must be a batch \(b, d\) of b >= 1 rows; got "
                                         r"shape \(0, 64\)"),
        (lambda X: (X, torch.ones(10, 4)), ValueError, r"^P must have shape \(10, 5\)"),
        (lambda X: (X, None, X[:5]), ValueError, r"^X_pos must have shape \(10, 64\)"),
        (lambda X: (X, [[1.0]]), TypeError, r"^P must be None or a floating-point"),
    ],
)
def test_loss_names_a_bad_argument(args: Callable[[torch.Tensor], tuple[Any, ...]], exc: type,
                                   match: str) -> None:
    """loss(numpy rows) and loss(rows of another width) raised torch's own errors."""
    X = _digits()
    dc = DeepClusterer.mlp(64, 5, hidden=(16,), n_latent=4, pretrain_epochs=0, epochs=0).fit(X)
    with pytest.raises(exc, match=match):
        dc.loss(*args(torch.as_tensor(X[:10])))


# -- the scores' labels ----------------------------------------------------------------------


def _acc_reference(y: np.ndarray, p: np.ndarray) -> float:
    """ACC by brute force over the matchings of the distinct labels (any values)."""
    ys, ps = list(np.unique(y)), list(np.unique(p))
    ps += [None] * max(0, len(ys) - len(ps))
    best = 0
    for perm in itertools.permutations(ps, len(ys)):
        best = max(best, sum(int(((y == a) & (p == b)).sum()) for a, b in zip(ys, perm, strict=True)
                             if b is not None))
    return best / len(y)


def test_scores_take_negative_labels() -> None:
    """-1 (noise) raised "must hold labels >= 0", though any integer labels are documented."""
    rng = np.random.default_rng(0)
    y = rng.integers(-1, 3, 120)
    p = rng.integers(-2, 2, 120)
    assert cluster_acc(y, p) == pytest.approx(_acc_reference(y, p), abs=1e-12)
    assert nmi(y, p) == pytest.approx(normalized_mutual_info_score(y, p), abs=1e-12)
    assert ari(y, p) == pytest.approx(adjusted_rand_score(y, p), abs=1e-12)
    assert evaluate(y, p)["acc"] == cluster_acc(y, p)
    with pytest.raises(ValueError, match=r"^y_true holds the label -1: contingency indexes"):
        contingency(y, p + 2)


def test_scores_take_uint64_labels_beyond_int64() -> None:
    """Labels above 2**63 became negative int64 (IndexError in the table)."""
    y = np.array([2**63 + 5, 0, 0, 2**63 + 5, 7], dtype=np.uint64)
    p = np.array([1, 0, 0, 1, 1])
    M = np.array([[2, 0, 0], [0, 1, 2]])  # rows p, columns y's codes 0, 7, 2**63 + 5
    rows, cols = linear_sum_assignment(M, maximize=True)
    assert cluster_acc(y, p) == M[rows, cols].sum() / 5
    assert nmi(y, p) == pytest.approx(normalized_mutual_info_score(y, p), abs=1e-12)
    assert ari(y, p) == pytest.approx(adjusted_rand_score(y, p), abs=1e-12)
    with pytest.raises(ValueError, match=r"^y_true holds labels up to 9223372036854775813"):
        contingency(y, p)


@pytest.mark.parametrize(("labels", "shown"), [([1e20, 0.0], r"1e\+20"), ([0.5, 0.0], "0.5"),
                                               ([np.nan, 0.0], "nan"), ([-1e19, 0.0], r"-1e\+19")])
@pytest.mark.parametrize("score", [cluster_acc, nmi, ari, contingency])
def test_float_labels_that_are_not_int64_are_named(score: Callable[..., Any], labels: Any,
                                                   shown: str) -> None:
    """[1e20, 0.] gave a RuntimeWarning and "got min -9223372036854775808"."""
    with pytest.raises(ValueError, match=rf"^y_true must hold integer labels .* got {shown} "):
        score(np.array(labels), np.array([0, 1]))
    if score is not contingency:  # whole floats are labels, negative ones too
        p = np.array([0, 1, 1, 0])
        assert score(np.array([3.0, -1.0, -1.0, 2.0]), p) == score(np.array([3, -1, -1, 2]), p)
