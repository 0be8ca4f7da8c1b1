"""Export the k-means layer to ONNX and run it in onnxruntime, with a dynamic batch dimension.

Uses torch's default (``torch.export``-based) exporter. The legacy TorchScript exporter
(``dynamo=False``) cannot trace ``KMeansLayer`` itself: its state dict carries the temperature and
mapping as a non-tensor extra state, which that exporter's ``_unique_state_dict`` rejects; the
``as_linear()`` + ``Softmax`` form exports with either.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import rbfkmeans as rk

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

BATCHES = [1, 5, 37]


def _export(model: nn.Module, path: Path, dynamo: bool = True) -> None:
    example = (torch.randn(4, model_features(model)),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exporter deprecation/future warnings
        if dynamo:
            torch.onnx.export(
                model,
                example,
                str(path),
                input_names=["X"],
                output_names=["R"],
                dynamic_shapes=({0: torch.export.Dim("n")},),
                dynamo=True,
                verbose=False,
            )
        else:
            torch.onnx.export(
                model,
                example,
                str(path),
                input_names=["X"],
                output_names=["R"],
                dynamic_axes={"X": {0: "n"}, "R": {0: "n"}},
                dynamo=False,
            )


def model_features(model: nn.Module) -> int:
    for m in model.modules():
        if isinstance(m, rk.KMeansLayer):
            return m.n_features
        if isinstance(m, nn.Linear):
            return m.in_features
    raise AssertionError("no layer with a feature count")


def _check_runs(path: Path, model: nn.Module, d: int) -> None:
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    batch_dim = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param, "the batch dimension should be symbolic"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    g = torch.Generator().manual_seed(0)
    for n in BATCHES:
        X = torch.randn(n, d, generator=g) * 2
        (R_onnx,) = sess.run(None, {name: X.numpy()})
        with torch.no_grad():
            R = model(X).numpy()
        assert R_onnx.shape == (n, R.shape[1])
        np.testing.assert_allclose(R_onnx, R, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(R_onnx.sum(1), 1.0, rtol=0, atol=1e-5)


@pytest.fixture
def layer() -> rk.KMeansLayer:
    C = torch.randn(6, 3, generator=torch.Generator().manual_seed(1)) * 2
    return rk.KMeansLayer(C, temperature=0.7, assignment="softmax").eval()


def test_export_softmax_layer(layer: rk.KMeansLayer, tmp_path: Path) -> None:
    path = tmp_path / "kmeans_layer.onnx"
    _export(layer, path)
    _check_runs(path, layer, 3)


@pytest.mark.parametrize("dynamo", [True, False])
def test_export_linear_softmax(layer: rk.KMeansLayer, tmp_path: Path, dynamo: bool) -> None:
    """The interview's MLP: Linear(W = C/T, b = -||c||^2/2T) then Softmax, equal to the layer."""
    model = nn.Sequential(layer.as_linear(), nn.Softmax(dim=-1)).eval()
    path = tmp_path / "linear_softmax.onnx"
    _export(model, path, dynamo=dynamo)
    _check_runs(path, layer, 3)  # compared with the layer itself, not the Sequential
