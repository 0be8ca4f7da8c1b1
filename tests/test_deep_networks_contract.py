"""DeepClusterer with networks a user may build: layers shared by the encoder and the decoder
(tied weights), BatchNorm encoders on data whose last batch would hold one row, and encoders that
do not say their input width (one test per defect a probe found)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from rbfkmeans.deep import DeepClusterer


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return (load_digits().data[:300] / 16).astype(np.float32)


def _tied() -> tuple[nn.Module, nn.Module, nn.Linear]:
    torch.manual_seed(0)
    shared = nn.Linear(16, 16)
    encoder = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), shared, nn.ReLU(), nn.Linear(16, 8))
    decoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), shared, nn.ReLU(), nn.Linear(16, 64))
    return encoder, decoder, shared


def test_a_shared_layer_is_one_parameter_of_the_optimiser(X: np.ndarray) -> None:
    """Listed twice, it took two Adam steps per batch (and torch warned of duplicates)."""
    encoder, decoder, shared = _tied()
    dc = DeepClusterer(encoder, decoder, 10, pretrain_epochs=1, epochs=1, batch_size=64,
                       n_neighbors=3, random_state=0)
    params = dc._params()
    assert len(params) == len({id(p) for p in params}) == 10
    assert sum(p is shared.weight for p in params) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "duplicate parameters" of torch.optim
        dc.fit(X)
    assert np.isfinite(dc.transform(X)).all()


def test_one_step_moves_a_shared_weight_once(X: np.ndarray) -> None:
    """One Adam step of lr moves each entry by at most about lr (twice as far when stepped
    twice)."""
    encoder, decoder, shared = _tied()
    before = shared.weight.detach().clone()
    lr = 1e-3
    dc = DeepClusterer(encoder, decoder, 10, pretrain_epochs=1, epochs=0, batch_size=300,
                       n_neighbors=0, contrastive_weight=0.0, pretrain_lr=lr, random_state=0)
    dc.pretrain(X)
    moved = float((shared.weight.detach() - before).abs().max())
    assert 0.0 < moved <= lr * 1.01


def _batchnorm_encoder() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 8))


@pytest.mark.parametrize("pretrain_epochs", [1, 0])
def test_a_last_batch_of_one_row_joins_the_one_before(X: np.ndarray,
                                                      pretrain_epochs: int) -> None:
    """torch's BatchNorm had failed in training on it ("Expected more than 1 value per
    channel"), naming neither batch_size nor X."""
    dc = DeepClusterer(_batchnorm_encoder(), None, 10, batch_size=64, epochs=1,
                       pretrain_epochs=pretrain_epochs, n_neighbors=3, random_state=0)
    dc.fit(X[:257])  # 4 batches of 64 and one row
    assert dc.labels_.shape == (257,)
    gen = torch.Generator().manual_seed(0)
    sizes = [b.numel() for b in dc._batches(257, gen)]
    assert sizes == [64, 64, 64, 65]
    assert sorted(torch.cat(dc._batches(257, torch.Generator().manual_seed(0))).tolist()) == \
        list(range(257))


@pytest.mark.parametrize(("n", "sizes"), [(256, [64] * 4), (258, [64] * 4 + [2]), (1, [1]),
                                          (65, [65])])
def test_batches_cover_the_rows_once(n: int, sizes: list[int]) -> None:
    dc = DeepClusterer(_batchnorm_encoder(), None, 2, batch_size=64)
    batches = dc._batches(n, torch.Generator().manual_seed(0))
    assert [b.numel() for b in batches] == sizes
    assert sorted(torch.cat(batches).tolist()) == list(range(n))


class _Linear(nn.Module):
    """An encoder that is not an ``nn.Sequential``: nothing says its input width."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class _Pooled(nn.Module):
    """An encoder that takes rows of any width (it pools them to 64 features)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(nn.functional.adaptive_avg_pool1d(x.unsqueeze(1), 64).squeeze(1))


@pytest.mark.parametrize("encoder", [_Linear, _Pooled])
@pytest.mark.parametrize("method", ["predict", "predict_proba", "transform"])
def test_rows_of_another_width_than_fitted_are_named(X: np.ndarray, encoder: type,
                                                     method: str) -> None:
    """A raw torch shape error, or (an encoder of any width) labels of 60-column rows."""
    torch.manual_seed(0)
    dc = DeepClusterer(encoder(), None, 10, pretrain_epochs=1, epochs=1, n_neighbors=3,
                       random_state=0).fit(X)
    with pytest.raises(ValueError, match=re.escape("X must have the 64 features of the rows the "
                                                   "clusterer was fitted on (n_features_in_); "
                                                   "got 60")):
        getattr(dc, method)(X[:5, :60])
    assert getattr(dc, method)(X[:5]).shape[0] == 5
