"""``NonFiniteError``: the ``ValueError`` of a value that is NaN, infinite or beyond its dtype.

Every check that finds such a value raises it (a rule that also fails otherwise, such as "a
finite number >= 0", raises it only for the non-finite value), and the deep clusterer's stages
decide from this type, not from the words of a message, whether an error raised while they
train means that their settings let the values overflow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import rbfkmeans as rk
from rbfkmeans.deep import DeepClusterer
from rbfkmeans.errors import NonFiniteError, value_error

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(60, 3))


def test_it_is_a_value_error_exported_at_the_top() -> None:
    assert issubclass(NonFiniteError, ValueError)
    assert rk.NonFiniteError is NonFiniteError
    assert "NonFiniteError" in rk.__all__


@pytest.mark.parametrize(("value", "non_finite"), [
    (NAN, True), (INF, True), (-INF, True), (np.float32("inf"), True), (torch.tensor(NAN), True),
    (1.0, False), (-1.0, False), (0, False), (10**400, False), ("abc", False), (None, False),
    ([1.0, NAN], False),
])
def test_value_error_picks_the_type_from_the_value(value: object, non_finite: bool) -> None:
    error = value_error(value, "message")
    assert type(error) is (NonFiniteError if non_finite else ValueError)
    assert str(error) == "message"


@pytest.mark.parametrize("message", [None, 3, b"bytes"])
def test_value_error_names_a_message_that_is_not_a_string(message: object) -> None:
    with pytest.raises(TypeError, match="message must be a string; got "):
        value_error(NAN, message)  # type: ignore[arg-type]


def _raises_nonfinite(call, match: str) -> None:
    with pytest.raises(NonFiniteError, match=match):
        call()


def test_estimator_entry_points(X: np.ndarray) -> None:
    w = np.ones(len(X))
    w[3] = INF
    _raises_nonfinite(lambda: rk.RBFKMeans(2).fit(X, sample_weight=w), "sample_weight")
    _raises_nonfinite(lambda: rk.RBFKMeans(2).fit(X * 1e200), "X spreads too far")
    _raises_nonfinite(lambda: rk.RBFKMeans(2, tol=NAN).fit(X), "tol")
    model = rk.RBFKMeans(2, random_state=0).fit(X)
    _raises_nonfinite(lambda: model.predict(X * 1e200), "X lies too far")
    _raises_nonfinite(lambda: model.predict_proba(X, temperature=INF), "temperature")


def test_rules_that_fail_otherwise_stay_plain_value_errors(X: np.ndarray) -> None:
    for call in (lambda: rk.RBFKMeans(2, tol=-1.0).fit(X),
                 lambda: rk.KMeansLayer(torch.zeros(2, 2), temperature=-1.0),
                 lambda: rk.RBFKMeans(2).fit(X, sample_weight=-np.ones(len(X)))):
        with pytest.raises(ValueError, match="must be") as info:
            call()
        assert type(info.value) is ValueError


def test_layer_quantizer_and_objectives() -> None:
    _raises_nonfinite(lambda: rk.KMeansLayer(torch.tensor([[NAN, 0.0]])), "centroids")
    _raises_nonfinite(lambda: rk.KMeansLayer(torch.zeros(2, 2), temperature=NAN), "temperature")
    layer = rk.KMeansLayer(torch.randn(3, 2, generator=torch.Generator().manual_seed(0)))
    _raises_nonfinite(lambda: layer.predict(torch.tensor([[INF, 0.0]])), "X must be finite")
    C = torch.zeros(1, 2, dtype=torch.float64)
    far = torch.tensor([[1e200, 0.0]], dtype=torch.float64)
    _raises_nonfinite(lambda: rk.kmeans_objective(far, C), "too far apart")
    vq = rk.VectorQuantizer(3, 4)
    state = {key: value.clone() for key, value in vq.state_dict().items()
             if isinstance(value, torch.Tensor)}
    state["codebook"][0, 0] = NAN
    before = vq.codebook.detach().clone()
    with pytest.raises(NonFiniteError, match="codebook"):
        vq.load_state_dict({**vq.state_dict(), "codebook": state["codebook"]})
    assert torch.equal(vq.codebook.detach(), before)


class _Refuses(nn.Module):
    """An MLP that raises its own ``ValueError``, whose words speak of finiteness, from its
    ``calls_before``-th forward on: a contract of the user's network, not an overflow."""

    def __init__(self, calls_before: int) -> None:
        super().__init__()
        self.net = nn.Linear(3, 2)
        self.calls, self.calls_before = 0, calls_before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.calls_before:
            raise ValueError("this encoder takes only batches whose values are not finite-NaN "
                             "overflow free")
        return self.net(x)


@pytest.mark.parametrize(("pretrain_epochs", "calls_before"), [(2, 1), (2, 3), (0, 1), (0, 3)])
def test_a_networks_own_value_error_propagates_as_raised(X: np.ndarray, pretrain_epochs: int,
                                                         calls_before: int) -> None:
    """The stages (pretraining; with ``pretrain_epochs=0``, the joint training) once matched
    'finite', 'NaN' and 'overflow' in the message and reported any such error as divergence of
    their settings."""
    dc = DeepClusterer(_Refuses(calls_before), nn.Linear(2, 3), 2,
                       pretrain_epochs=pretrain_epochs, epochs=2, batch_size=16, n_neighbors=3,
                       random_state=0)
    with pytest.raises(ValueError, match="this encoder takes only batches") as info:
        dc.fit(X.astype(np.float32))
    assert type(info.value) is ValueError
    assert str(info.value).startswith("this encoder takes only batches")
    assert "did not stay finite" not in str(info.value)


def test_an_overflow_while_training_is_reported_as_divergence(X: np.ndarray) -> None:
    dc = DeepClusterer(nn.Linear(3, 2), nn.Linear(2, 3), 2, pretrain_epochs=1, epochs=1,
                       batch_size=16, n_neighbors=3, pretrain_lr=1e30, random_state=0)
    with pytest.raises(NonFiniteError, match=r"pretraining did not stay finite at epoch 0: .*"
                       r"pretrain_lr=1e\+30") as info:
        dc.fit(X.astype(np.float32))
    assert isinstance(info.value.__cause__, NonFiniteError)
    assert math.isfinite(float(next(dc.encoder.parameters()).detach().abs().max()))
