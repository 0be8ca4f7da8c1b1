"""KMeansLayer: the interview example, the Linear form, limits, autograd, state, bad input.

References are independent of the library: distances by broadcasting in float64, softmax by
``torch.softmax`` of ``-d/2T``, entmax-1.5 and sparsemax from the ``entmax`` package.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import rbfkmeans as rk

entmax = pytest.importorskip("entmax")

SOFT = ["softmax", "entmax15", "sparsemax"]
ALL = [*SOFT, "hard"]


def ref_distances(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``d_ij = sum_k (x_ik - c_jk)^2`` by broadcasting, float64."""
    return ((X.double()[:, None, :] - C.double()[None, :, :]) ** 2).sum(-1)  # (n, k)


def ref_mapping(name: str, z: torch.Tensor) -> torch.Tensor:
    if name == "softmax":
        return torch.softmax(z, dim=-1)
    if name == "entmax15":
        return entmax.entmax15(z, dim=-1)
    return entmax.sparsemax(z, dim=-1)


def ref_layer(X: torch.Tensor, C: torch.Tensor, T: float, name: str) -> torch.Tensor:
    """``m(-d / 2T)`` in float64 from the broadcast distances."""
    D = ref_distances(X, C)
    if name == "hard" or T == 0:
        return torch.nn.functional.one_hot(D.argmin(-1), C.shape[0]).double()
    return ref_mapping(name, -D / (2 * T))


def problem(seed: int, n: int = 12, k: int = 4, d: int = 3, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    C = torch.randn(k, d, generator=g, dtype=torch.float64).to(dtype)
    return X, C


LINEAR_MAP = {"softmax": rk.softmax, "entmax15": rk.entmax15, "sparsemax": rk.sparsemax}


# -- the interview question ------------------------------------------------------------------------

X_INT = torch.tensor([[1.0, 2.0]])
C_INT = torch.tensor([[0.0, 0.0], [2.0, 2.0]])


def test_interview_distances() -> None:
    layer = rk.KMeansLayer(C_INT)
    assert layer.distances(X_INT).tolist() == [[5.0, 1.0]]
    assert layer.predict(X_INT).tolist() == [1]


@pytest.mark.parametrize("assignment", ALL)
def test_interview_mass_goes_to_c2(assignment: str) -> None:
    previous = 0.0
    for T in [8.0, 2.0, 1.0, 0.5, 0.1, 0.01, 1e-8, 0.0]:
        with torch.no_grad():
            R = rk.KMeansLayer(C_INT, temperature=T, assignment=assignment)(X_INT)
        assert R.shape == (1, 2)
        assert math.isclose(float(R.sum()), 1.0, abs_tol=1e-6)
        assert R[0, 1] >= R[0, 0]
        assert float(R[0, 1]) >= previous - 1e-7  # more mass to c2 as T falls
        previous = float(R[0, 1])
        torch.testing.assert_close(R.double(), ref_layer(X_INT, C_INT, T, assignment))
    assert R.tolist() == [[0.0, 1.0]]  # T = 0: all of it


def test_interview_closed_forms() -> None:
    """softmax: r_2 = 1/(1 + exp(-2/T)); entmax-1.5 is one-hot once 4 = d_1 - d_2 >= 4T;
    sparsemax once d_1 - d_2 >= 2T."""
    for T in [0.25, 1.0, 3.0]:
        R = rk.KMeansLayer(C_INT, temperature=T)(X_INT).detach()
        assert math.isclose(float(R[0, 1]), 1 / (1 + math.exp(-2 / T)), rel_tol=1e-6)
    assert rk.KMeansLayer(C_INT, 1.0, "entmax15")(X_INT).tolist() == [[0.0, 1.0]]
    assert rk.KMeansLayer(C_INT, 1.1, "entmax15")(X_INT)[0, 0] > 0
    assert rk.KMeansLayer(C_INT, 2.0, "sparsemax")(X_INT).tolist() == [[0.0, 1.0]]
    assert rk.KMeansLayer(C_INT, 2.1, "sparsemax")(X_INT)[0, 0] > 0


# -- against the independent reference -------------------------------------------------------------


@pytest.mark.parametrize("assignment", ALL)
@pytest.mark.parametrize("T", [0.05, 0.7, 5.0])
def test_matches_reference(assignment: str, T: float) -> None:
    X, C = problem(0)
    R = rk.KMeansLayer(C, temperature=T, assignment=assignment)(X)
    torch.testing.assert_close(R, ref_layer(X, C, T, assignment), rtol=1e-9, atol=1e-10)


def test_batched_leading_dims() -> None:
    X, C = problem(1, n=10)
    layer = rk.KMeansLayer(C, 0.5, "entmax15")
    R = layer(X.reshape(2, 5, 3))
    assert R.shape == (2, 5, 4)
    torch.testing.assert_close(R.reshape(10, 4), layer(X))
    assert layer(X[0]).shape == (4,)
    assert layer.distances(X.reshape(5, 2, 3)).shape == (5, 2, 4)


# -- the Linear form -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("assignment", SOFT)
def test_mapping_of_linear_equals_layer(assignment: str, dtype: torch.dtype) -> None:
    """m(W x + b) = m(-||x - c||^2 / 2T): the row constant ||x||^2/2T does not matter."""
    X, C = problem(2, dtype=dtype)
    T = 0.6
    layer = rk.KMeansLayer(C, temperature=T, assignment=assignment)
    lin = layer.as_linear()
    assert isinstance(lin, nn.Linear)
    assert lin.weight.dtype == dtype
    torch.testing.assert_close(lin.weight, C / T)
    torch.testing.assert_close(lin.bias, -(C * C).sum(1) / (2 * T))
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    with torch.no_grad():
        R_lin = LINEAR_MAP[assignment](lin(X))
        R_ref = ref_mapping(assignment, lin(X).double())  # the entmax package on the logits
        R = layer(X)
    torch.testing.assert_close(R_lin, R, rtol=tol, atol=tol)
    torch.testing.assert_close(R_ref, R.double(), rtol=tol, atol=tol)


def test_softmax_of_linear_is_the_interview_mlp() -> None:
    lin = rk.KMeansLayer(C_INT, temperature=1.0).as_linear()
    assert lin.weight.tolist() == [[0.0, 0.0], [2.0, 2.0]]
    assert lin.bias.tolist() == [0.0, -4.0]
    logits = lin(X_INT)
    assert logits.tolist() == [[0.0, 2.0]]  # -d/2 + ||x||^2/2 = (-2.5, -0.5) + 2.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("T", [0.01, 1.0, 7.5])
def test_from_linear_round_trip(dtype: torch.dtype, T: float) -> None:
    _, C = problem(3, dtype=dtype)
    layer = rk.KMeansLayer(C, temperature=T, assignment="sparsemax")
    back = rk.KMeansLayer.from_linear(layer.as_linear(), temperature=T, assignment="sparsemax")
    assert isinstance(back, rk.KMeansLayer)
    assert back.temperature == T
    assert back.assignment == "sparsemax"
    assert back.centroids.dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(back.centroids, layer.centroids, rtol=tol, atol=tol)


def test_from_linear_rejects_inconsistent_bias() -> None:
    _, C = problem(4)
    lin = rk.KMeansLayer(C, temperature=0.5).as_linear()
    with torch.no_grad():
        lin.bias[1] += 0.3
    with pytest.raises(ValueError, match=r"bias") as info:
        rk.KMeansLayer.from_linear(lin, temperature=0.5)
    assert "0.5" in str(info.value)
    # a plain (random) Linear is not a k-means layer either
    with pytest.raises(ValueError, match=r"bias"):
        rk.KMeansLayer.from_linear(nn.Linear(3, 4))
    # the wrong temperature: bias no longer -||c||^2/(2T) with c = T W
    good = rk.KMeansLayer(C, temperature=0.5).as_linear()
    with pytest.raises(ValueError, match=r"temperature=2"):
        rk.KMeansLayer.from_linear(good, temperature=2.0)
    # opting out keeps C = T W
    loose = rk.KMeansLayer.from_linear(lin, temperature=0.5, check_bias=False)
    torch.testing.assert_close(loose.centroids, C)


def test_from_linear_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"linear.*Conv1d"):
        rk.KMeansLayer.from_linear(nn.Conv1d(1, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"no bias"):
        rk.KMeansLayer.from_linear(nn.Linear(2, 2, bias=False))
    lin = rk.KMeansLayer(C_INT).as_linear()
    with pytest.raises(ValueError, match=r"temperature.*0"):
        rk.KMeansLayer.from_linear(lin, temperature=0.0)
    with pytest.raises(ValueError, match=r"temperature.*-1"):
        rk.KMeansLayer.from_linear(lin, temperature=-1.0)
    with pytest.raises(ValueError, match=r"assignment.*'gumbel'"):
        rk.KMeansLayer.from_linear(lin, assignment="gumbel")


def test_as_linear_needs_positive_finite_weights() -> None:
    with pytest.raises(ValueError, match=r"temperature=0"):
        rk.KMeansLayer(C_INT, temperature=0.0).as_linear()
    with pytest.raises(ValueError, match=r"overflows"):
        rk.KMeansLayer(C_INT + 1, temperature=1e-40).as_linear()


def test_as_linear_is_detached_copy() -> None:
    layer = rk.KMeansLayer(C_INT.clone(), temperature=2.0)
    lin = layer.as_linear()
    with torch.no_grad():
        lin.weight.zero_()
    assert layer.centroids.tolist() == [[0.0, 0.0], [2.0, 2.0]]
    assert lin.weight.requires_grad  # a fresh trainable Linear


# -- limits ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", ALL)
def test_zero_temperature_is_one_hot_argmin_ties_low(assignment: str) -> None:
    C = torch.tensor([[0.0, 0.0], [2.0, 2.0], [2.0, 0.0], [0.0, 0.0]])
    X = torch.tensor(
        [
            [1.0, 1.0],  # equidistant (2) from c1, c2, c3, c4 -> index 0
            [2.0, 1.0],  # d = (5, 1, 1, 5) -> index 1
            [0.1, 0.0],  # c1 and c4 coincide -> index 0
            [2.0, -1.0],  # c3
        ]
    )
    R = rk.KMeansLayer(C, temperature=0.0, assignment=assignment)(X)
    expected = torch.eye(4)[[0, 1, 0, 2]]
    assert torch.equal(R, expected)
    assert rk.KMeansLayer(C, 0.0, assignment).predict(X).tolist() == [0, 1, 0, 2]


def test_hard_ignores_temperature() -> None:
    X, C = problem(5)
    hard = rk.KMeansLayer(C, temperature=3.0, assignment="hard")(X)
    zero = rk.KMeansLayer(C, temperature=0.0, assignment="softmax")(X)
    assert torch.equal(hard, zero)
    assert torch.equal(hard.argmax(1), ref_distances(X, C).argmin(1))


@pytest.mark.parametrize("assignment", SOFT)
@pytest.mark.parametrize("T", [1e-8, 1e-30, 1e-44, 1e-46])
def test_tiny_temperature_float32_is_finite(assignment: str, T: float) -> None:
    g = torch.Generator().manual_seed(6)
    X = torch.randn(64, 5, generator=g) * 10
    C = torch.randn(7, 5, generator=g) * 10
    R = rk.KMeansLayer(C, temperature=T, assignment=assignment)(X)
    assert R.dtype == torch.float32
    assert torch.isfinite(R).all()
    torch.testing.assert_close(R.sum(1), torch.ones(64))
    nearest = rk.sq_distances(X, C).argmin(1)
    assert torch.equal(R.argmax(1), nearest)
    if assignment != "softmax" or T <= 1e-30:
        assert torch.equal(R, torch.eye(7)[nearest])  # exactly one-hot
    else:
        assert (R.max(1).values > 1 - 1e-6).all()


@pytest.mark.parametrize("assignment", SOFT)
def test_tiny_temperature_large_distances(assignment: str) -> None:
    """Distances ~1e20 with T = 1e-300 (float64): -D/2T is -inf in every entry of a row; the
    shifted scores keep the rows finite and one-hot on the nearest centroid (no NaN)."""
    X = torch.tensor([[1e10, 0.0], [0.0, 1e10]], dtype=torch.float64)
    C = torch.tensor([[0.0, 0.0], [1.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    assert torch.isinf(-ref_distances(X, C) / 2e-300).all()
    R = rk.KMeansLayer(C, temperature=1e-300, assignment=assignment)(X)
    assert torch.equal(R, torch.eye(3, dtype=torch.float64)[[1, 1]])
    # in float32 the three distances round to the same value (ulp(1e20) ~ 1e13): a three-way
    # tie, still a finite row on the simplex
    R32 = rk.KMeansLayer(C.float(), temperature=1e-20, assignment=assignment)(X.float())
    assert torch.isfinite(R32).all()
    torch.testing.assert_close(R32.sum(1), torch.ones(2))


@pytest.mark.parametrize("assignment", SOFT)
def test_sparse_mappings_one_hot_once_gap_large(assignment: str) -> None:
    """entmax-1.5 is exactly one-hot once the gap between a point's two smallest distances is
    >= 4T; sparsemax once it is >= 2T (z gaps of 2 and 1)."""
    X, C = problem(7, n=40, k=5)
    D = ref_distances(X, C)
    two = D.topk(2, dim=1, largest=False).values
    gap = two[:, 1] - two[:, 0]
    T = 0.05
    R = rk.KMeansLayer(C, temperature=T, assignment=assignment)(X)
    one_hot = R.max(1).values == 1
    if assignment == "softmax":
        assert not one_hot.all()
        return
    factor = 4.0 if assignment == "entmax15" else 2.0
    assert torch.equal(one_hot, gap >= factor * T)


# -- autograd --------------------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", SOFT)
def test_gradcheck_inputs_and_centroids(assignment: str) -> None:
    X, C = problem(8, n=6, k=3, d=2)
    X.requires_grad_(True)
    C.requires_grad_(True)
    layer = rk.KMeansLayer(C.detach(), temperature=0.8, assignment=assignment)

    def f(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(layer, {"centroids": c}, (x,))

    R = f(X, C)
    assert ((R > 0) & (R < 1)).any()  # not all one-hot: the Jacobian is not trivially zero
    assert torch.autograd.gradcheck(f, (X, C))


@pytest.mark.parametrize("assignment", SOFT)
def test_backward_reaches_parameter_and_input(assignment: str) -> None:
    X, C = problem(9)
    X.requires_grad_(True)
    layer = rk.KMeansLayer(C, temperature=1.0, assignment=assignment)
    (layer(X) * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    assert layer.centroids.grad is not None
    assert layer.centroids.grad.abs().sum() > 0
    assert X.grad is not None
    assert X.grad.abs().sum() > 0


def test_hard_has_zero_gradient() -> None:
    X, C = problem(10)
    layer = rk.KMeansLayer(C, temperature=1.0, assignment="hard")
    (layer(X) * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    assert layer.centroids.grad is not None
    assert torch.equal(layer.centroids.grad, torch.zeros_like(C))


# -- objective -------------------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", ALL)
@pytest.mark.parametrize("T", [0.0, 0.3])
def test_objective_matches_functions(assignment: str, T: float) -> None:
    X, C = problem(11)
    w = torch.rand(12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    layer = rk.KMeansLayer(C, temperature=T, assignment=assignment)
    expected = rk.soft_objective(X, C, T, assignment, w)
    torch.testing.assert_close(layer.objective(X, w), expected, rtol=1e-12, atol=1e-12)
    named = {
        "softmax": rk.shannon_objective,
        "entmax15": rk.tsallis_objective,
        "sparsemax": rk.sparsemax_objective,
    }
    if assignment == "hard" or T == 0:
        torch.testing.assert_close(layer.objective(X), rk.kmeans_objective(X, C))
    else:
        torch.testing.assert_close(layer.objective(X), named[assignment](X, C, T))
    layer.objective(X).backward()
    assert layer.centroids.grad is not None


# -- ownership, state, composition -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tensor", "ndarray", "list", "parameter"])
def test_caller_centroids_not_modified_or_aliased(kind: str) -> None:
    base = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    source = {
        "tensor": torch.tensor(base),
        "ndarray": base.copy(),
        "list": base.tolist(),
        "parameter": nn.Parameter(torch.tensor(base)),
    }[kind]
    layer = rk.KMeansLayer(source, temperature=1.0)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    X = torch.tensor([[1.0, 1.0], [3.0, 3.0]], dtype=torch.float64)
    X0 = X.clone()
    layer.objective(X).backward()
    opt.step()
    with torch.no_grad():
        layer.centroids.add_(1.0)
    assert not np.allclose(layer.centroids.detach().numpy(), base)
    now = source.detach().numpy() if isinstance(source, torch.Tensor) else np.asarray(source)
    np.testing.assert_array_equal(now, base)
    assert torch.equal(X, X0)
    if isinstance(source, torch.Tensor):
        assert layer.centroids.data_ptr() != source.data_ptr()


def test_float32_ndarray_centroids_keep_dtype() -> None:
    layer = rk.KMeansLayer(np.zeros((2, 3), dtype=np.float32))
    assert layer.centroids.dtype == torch.float32
    assert rk.KMeansLayer(np.zeros((2, 3), dtype=np.int64)).centroids.dtype == torch.float32


def test_state_dict_round_trip() -> None:
    _, C = problem(12)
    layer = rk.KMeansLayer(C, temperature=0.25, assignment="entmax15")
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    other = rk.KMeansLayer(torch.zeros(4, 3, dtype=torch.float64), temperature=3.0)
    other.load_state_dict(state)
    assert other.temperature == 0.25
    assert other.assignment == "entmax15"
    assert torch.equal(other.centroids, layer.centroids)
    X, _ = problem(13)
    assert torch.equal(other(X), layer(X))


def test_state_dict_with_bad_extra_state_raises() -> None:
    layer = rk.KMeansLayer(C_INT)
    state = layer.state_dict()
    state["_extra_state"] = {"temperature": -1.0, "assignment": "softmax"}
    with pytest.raises(ValueError, match=r"temperature.*-1"):
        layer.load_state_dict(state)


def test_a_bad_state_leaves_the_layer_as_it_was() -> None:
    """The extra state and the centroids are checked before anything is copied: a state with a
    good temperature but a bad assignment, or NaN centroids, changes nothing."""
    layer = rk.KMeansLayer(C_INT, temperature=0.5, assignment="entmax15")
    good = layer.state_dict()
    C0 = layer.centroids.detach().clone()
    bad_extra = {**good, "_extra_state": {"temperature": 3.0, "assignment": "bogus"}}
    with pytest.raises(ValueError, match=r"assignment.*'bogus'"):
        layer.load_state_dict(bad_extra)
    assert (layer.temperature, layer.assignment) == (0.5, "entmax15")
    nan_C = C0.clone()
    nan_C[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"centroids.*finite"):
        layer.load_state_dict({**good, "centroids": nan_C,
                               "_extra_state": {"temperature": 2.0, "assignment": "softmax"}})
    assert torch.equal(layer.centroids.detach(), C0)
    assert (layer.temperature, layer.assignment) == (0.5, "entmax15")
    with pytest.raises(TypeError, match="extra state must be a dict"):
        layer.load_state_dict({**good, "_extra_state": [0.5, "softmax"]})


def test_a_temperature_parameter_is_refused() -> None:
    """``nn.Module`` registers a Parameter before the property's check would run; the layer
    reads its temperature as a float, so a Parameter would be unchecked and never trained."""
    for value in (-1.0, 1.0):
        with pytest.raises(TypeError, match=r"temperature.*nn.Parameter"):
            rk.KMeansLayer(C_INT, torch.nn.Parameter(torch.tensor(value)))
    layer = rk.KMeansLayer(C_INT)
    with pytest.raises(TypeError, match=r"temperature.*nn.Parameter"):
        layer.temperature = torch.nn.Parameter(torch.tensor(0.5))
    assert layer.temperature == 1.0
    assert [name for name, _ in layer.named_parameters()] == ["centroids"]


def test_predict_and_objective_refuse_non_finite_rows() -> None:
    """The forward pass scans nothing (documented); ``predict`` and ``objective`` do not
    return an answer for NaN or inf rows."""
    layer = rk.KMeansLayer(C_INT, temperature=0.5)
    for bad in (math.nan, math.inf, -math.inf):
        X = torch.tensor([[0.0, 0.0], [bad, 1.0]])
        with pytest.raises(ValueError, match="X must be finite"):
            layer.predict(X)
        with pytest.raises(ValueError, match=r"objective is not finite.*X"):
            layer.objective(X)
        sparse = X.to_sparse_csr()
        with pytest.raises(ValueError, match="X must be finite"):
            layer.predict(sparse)
    X = torch.tensor([[0.0, 0.0], [3.0, 1.0]])
    assert layer.predict(X).tolist() == torch.cdist(X, layer.centroids).argmin(1).tolist()


def test_buffer_when_not_learnable() -> None:
    layer = rk.KMeansLayer(C_INT, learnable=False)
    assert list(layer.parameters()) == []
    assert "centroids" in dict(layer.named_buffers())
    assert "centroids" in layer.state_dict()


def test_inside_sequential() -> None:
    torch.manual_seed(0)
    enc = nn.Linear(5, 3)
    km = rk.KMeansLayer(torch.randn(4, 3), temperature=0.5, assignment="entmax15")
    model = nn.Sequential(enc, nn.Tanh(), km)
    X = torch.randn(8, 5)
    R = model(X)
    assert R.shape == (8, 4)
    torch.testing.assert_close(R.sum(1), torch.ones(8))
    (R[:, 0] - R[:, 1]).sum().backward()
    assert enc.weight.grad is not None
    assert enc.weight.grad.abs().sum() > 0
    assert km.centroids.grad is not None
    assert "KMeansLayer(n_clusters=4, n_features=3, temperature=0.5" in repr(model)


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("assignment", ALL)
def test_half_precision_input(low: torch.dtype, assignment: str) -> None:
    X, C = problem(14, dtype=torch.float32)
    layer = rk.KMeansLayer(C, temperature=0.5, assignment=assignment)
    R = layer(X.to(low))
    assert R.dtype == torch.float32  # computed (and returned) in float32
    torch.testing.assert_close(R, layer(X.to(low).float()))
    low_layer = rk.KMeansLayer(C.to(low), temperature=0.5, assignment=assignment)
    assert low_layer.centroids.dtype == torch.float32


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        ({"assignment": "gumbel"}, ValueError, ["assignment", "'gumbel'"]),
        ({"assignment": "Softmax"}, ValueError, ["assignment", "'Softmax'"]),
        ({"assignment": None}, ValueError, ["assignment", "None"]),
        ({"temperature": -0.5}, ValueError, ["temperature", "-0.5"]),
        ({"temperature": float("nan")}, ValueError, ["temperature", "nan"]),
        ({"temperature": float("inf")}, ValueError, ["temperature", "inf"]),
        ({"temperature": True}, TypeError, ["temperature", "True"]),
        ({"temperature": "1.0"}, TypeError, ["temperature", "'1.0'"]),
        ({"temperature": None}, TypeError, ["temperature", "None"]),
        ({"temperature": torch.tensor([1.0, 2.0])}, ValueError, ["temperature", "(2,)"]),
        ({"centroids": np.zeros(3)}, ValueError, ["centroids", "(3,)"]),
        ({"centroids": np.zeros((0, 2))}, ValueError, ["centroids", "(0, 2)"]),
        ({"centroids": np.array([[0.0, np.nan]])}, ValueError, ["centroids", "NaN"]),
        ({"centroids": np.array([[0.0, np.inf]])}, ValueError, ["centroids", "inf"]),
    ],
)
def test_bad_constructor_arguments(kwargs, exc, words) -> None:
    args = {"centroids": C_INT, "temperature": 1.0, "assignment": "softmax", **kwargs}
    with pytest.raises(exc) as info:
        rk.KMeansLayer(args.pop("centroids"), **args)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_numeric_temperature_types_accepted() -> None:
    for T in [1, np.float32(0.5), np.float64(2.0), np.int64(3), torch.tensor(0.25)]:
        layer = rk.KMeansLayer(C_INT, temperature=T)
        assert isinstance(layer.temperature, float)
        assert layer.temperature == float(T)


def test_setters_validate() -> None:
    layer = rk.KMeansLayer(C_INT)
    with pytest.raises(ValueError, match=r"temperature.*-2"):
        layer.temperature = -2.0
    with pytest.raises(ValueError, match=r"assignment.*'lloyd'"):
        layer.assignment = "lloyd"
    assert layer.temperature == 1.0
    assert layer.assignment == "softmax"
    layer.temperature = 0.0
    layer.assignment = "entmax15"
    assert layer(X_INT).tolist() == [[0.0, 1.0]]
    with pytest.raises(ValueError, match=r"temperature=0"):
        layer.scores(X_INT)


@pytest.mark.parametrize(
    ("X", "exc", "words"),
    [
        (torch.zeros(3, 5), ValueError, ["X", "(..., 2)", "(3, 5)"]),
        (torch.zeros(2, 3, 1), ValueError, ["X", "(2, 3, 1)"]),
        (torch.tensor(1.0), ValueError, ["X", "()"]),
        (np.zeros((3, 2)), TypeError, ["X", "ndarray"]),
        ([[1.0, 2.0]], TypeError, ["X", "list"]),
    ],
)
def test_bad_forward_input(X, exc, words) -> None:
    layer = rk.KMeansLayer(C_INT)
    for call in (layer, layer.distances, layer.objective, layer.predict):
        with pytest.raises(exc) as info:
            call(X)
        for w in words:
            assert w in str(info.value), (w, str(info.value))


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 20),
    k=st.integers(1, 6),
    d=st.integers(1, 4),
    logT=st.floats(-6, 3),
    assignment=st.sampled_from(ALL),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_rows_on_simplex(seed, n, k, d, logT, assignment, dtype) -> None:
    X, C = problem(seed, n, k, d, dtype=dtype)
    R = rk.KMeansLayer(C * 3, temperature=10.0**logT, assignment=assignment)(X * 3)
    assert R.shape == (n, k)
    assert R.dtype == dtype
    assert torch.isfinite(R).all()
    assert (R >= 0).all()
    assert (R <= 1).all()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(R.sum(1), torch.ones(n, dtype=dtype), rtol=0, atol=tol)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 20),
    k=st.integers(2, 6),
    d=st.integers(1, 4),
    assignment=st.sampled_from(SOFT),
)
def test_argmax_is_nearest_as_T_to_0(seed, n, k, d, assignment) -> None:
    X, C = problem(seed, n, k, d)
    D = ref_distances(X, C)
    two = D.topk(2, dim=1, largest=False).values
    gap = float((two[:, 1] - two[:, 0]).min())
    if gap < 1e-9:  # an exact tie has no unique nearest centroid
        return
    nearest = D.argmin(1)
    layer = rk.KMeansLayer(C, assignment=assignment)
    for T in [gap / 20, gap / 100, gap / 1e4]:
        layer.temperature = T
        R = layer(X)
        assert torch.equal(R.argmax(1), nearest)
        assert (R[torch.arange(n), nearest] > 1 - k * math.exp(-10)).all()
    # and mass on the nearest centroid is non-decreasing as T falls
    layer.temperature = gap / 4
    hot = layer(X)[torch.arange(n), nearest]
    layer.temperature = gap / 40
    cold = layer(X)[torch.arange(n), nearest]
    assert (cold >= hot - 1e-12).all()


# -- device ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("assignment", ALL)
def test_cuda_matches_cpu(assignment: str) -> None:
    X, C = problem(15, n=300, k=7, d=5, dtype=torch.float32)
    cpu = rk.KMeansLayer(C, temperature=0.3, assignment=assignment)
    gpu = rk.KMeansLayer(C, temperature=0.3, assignment=assignment).cuda()
    R = gpu(X.cuda())
    assert R.device.type == "cuda"
    torch.testing.assert_close(R.cpu(), cpu(X), rtol=1e-4, atol=1e-5)
    gpu.objective(X.cuda()).backward()
    cpu.objective(X).backward()
    torch.testing.assert_close(gpu.centroids.grad.cpu(), cpu.centroids.grad, rtol=1e-3, atol=1e-3)
    assert gpu.as_linear().weight.device.type == "cuda"
