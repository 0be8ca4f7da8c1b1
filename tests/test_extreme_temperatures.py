"""Memberships, gradients and scores at temperatures and scores near the ends of a dtype's range:
each value against the limit it must reach (the hard rule as ``T -> 0``, the uniform mean as
``T -> inf``) or a float64 computation of the same formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rbfkmeans as rk
from rbfkmeans.gradient import GradientStep, gradient_step
from rbfkmeans.mappings import softmax, softmax_
from rbfkmeans.objectives import objective_from_distances
from rbfkmeans.passes import Data
from rbfkmeans.stats import cluster_stats

_X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [10.0, 10.0]])
_C = torch.tensor([[0.0, 0.0], [10.0, 10.0]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("top", [3e9, -3e9, 1e15, 1e30, -1e30])
def test_softmax_inplace_keeps_rows_whose_maximum_is_large(dtype: torch.dtype, top: float) -> None:
    """``softmax_``'s floor ``max - margin`` rounded back to the maximum beyond ``|max|`` of
    about 2^32 (float32): every score was raised to it and the row came out uniform. Rows with
    such maxima are one-hot where the gaps are large and equal softmax of the float64 scores."""
    if dtype == torch.float32 and abs(top) > 1e30:
        top = math.copysign(1e30, top)
    z = torch.tensor([[top, top - 1e3 * max(1.0, abs(top) * 1e-7), top - 5e3 * max(
        1.0, abs(top) * 1e-7)]], dtype=dtype)
    got = softmax_(z.clone())
    assert got.tolist() == [[1.0, 0.0, 0.0]]  # the others below e^-margin: exactly 0


def test_softmax_inplace_of_distances_at_a_tiny_temperature_is_the_nearest() -> None:
    """``softmax_(D, -1/(2T))`` at ``T = 1e-10``: the nearest centroid (it was uniform), and
    rows with an infinite maximum follow :func:`softmax` (NaN rows before)."""
    D = torch.tensor([[1.0, 4.0, 9.0]])
    assert softmax_(D.clone(), -1.0 / 2e-10).tolist() == [[1.0, 0.0, 0.0]]
    inf = math.inf
    z = torch.tensor([[0.0, inf, 1.0], [inf, inf, 0.0], [-inf, -inf, -inf], [0.0, math.nan, 1.0]],
                     dtype=torch.float64)
    got = softmax_(z.clone())
    ref = softmax(z)
    assert torch.equal(got[:3], ref[:3])
    assert got[:3].tolist() == [[0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]]
    assert bool(got[3].isnan().all())  # NaN propagates to its row


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 40), st.floats(-1e4, 1e4), st.sampled_from([1.0, -0.5, -7.3]),
       st.integers(0, 2**31 - 1))
def test_softmax_inplace_is_softmax_on_ordinary_scores(k: int, shift: float, scale: float,
                                                      seed: int) -> None:
    """On ordinary scores every membership above ``e^-margin`` is ``torch.softmax``'s bit for
    bit, and every other is exactly 0."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(5, k, generator=g, dtype=torch.float32) * 30 + shift
    margin = -math.log(torch.finfo(torch.float32).tiny) - 7.0
    ref = torch.softmax(z * scale, dim=-1)
    got = softmax_(z.clone(), scale)
    kept = ref > 2 * math.exp(-margin)
    assert torch.equal(got[kept], ref[kept])
    assert bool((got[~kept] <= 2 * math.exp(-margin)).all())
    assert bool((got[ref < 0.5 * math.exp(-margin)] == 0).all())


def test_cluster_stats_at_a_tiny_temperature_are_the_hard_ones() -> None:
    """The statistics pass scores ``(x.c - ||c||^2/2) / T`` without a row shift: at ``T = 1e-9``
    (float32, unit-scale rows, 16 centroids) 16 of 200 rows had split their weight evenly."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(200, 4, generator=g)
    C = torch.randn(16, 4, generator=g)
    data = Data(X)
    hard = cluster_stats(data, C, 0.0, "hard")
    for T in (1e-9, 1e-10):
        soft = cluster_stats(data, C, T, "softmax")
        assert torch.equal(soft.N, hard.N)
        torch.testing.assert_close(soft.S, hard.S)


@pytest.mark.parametrize("T", [1e-38, 1e-40, 1e-300])
@pytest.mark.parametrize("objective", ["relaxed", "bare"])
def test_gradient_step_at_a_tiny_temperature_is_lloyds(T: float, objective: str) -> None:
    """The memberships of the step come from row-shifted scores: at ``T = 1e-40`` (float32)
    every row's scores had overflowed to ``-inf`` (N = [2, 2] for [3, 1]), at ``1e-300`` NaN."""
    hard = gradient_step(_X, _C, 0.0, "hard")
    C_new, grad, N = gradient_step(_X, _C, T, "softmax", objective=objective)
    assert N.tolist() == [3.0, 1.0]
    torch.testing.assert_close(C_new, hard[0])
    torch.testing.assert_close(grad, hard[1])


@pytest.mark.parametrize(("assignment", "T"), [("softmax", 1e300), ("entmax15", 1e38),
                                               ("sparsemax", 1e38)])
def test_gradient_step_at_a_huge_temperature_is_the_mean(assignment: str, T: float) -> None:
    """At a temperature whose objective overflows float32 the step is computed in float64 (it
    was NaN): uniform memberships, every centroid at the mean of the rows."""
    C_new, _, N = gradient_step(_X, _C, T, assignment)
    assert C_new.dtype == torch.float32
    torch.testing.assert_close(C_new, _X.mean(0).expand(2, 2))
    torch.testing.assert_close(N, torch.tensor([2.0, 2.0]))
    step = GradientStep(assignment, _C, max_iter=1)
    torch.testing.assert_close(step(Data(_X), _C, T)[0], _X.mean(0).expand(2, 2))


def test_gradient_step_names_nan_rows_and_an_overflowing_temperature() -> None:
    X = _X.clone()
    X[1, 0] = math.nan
    with pytest.raises(ValueError, match="X must be finite"):
        gradient_step(X, _C, 1.0, "softmax")
    with pytest.raises(ValueError, match="C must be finite"):
        gradient_step(_X, torch.tensor([[0.0, math.inf], [1.0, 1.0]]), 1.0, "softmax")
    with pytest.raises(ValueError, match=r"T=1e\+308 with these X and C overflows float64:"):
        gradient_step(_X.double() * 1e3, _C.double(), 1e308, "softmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax"])
def test_layer_gradients_stay_finite_near_the_cold_limit(dtype: torch.dtype,
                                                         assignment: str) -> None:
    """Two equal centroids and a row on them: just above the temperature where ``1/(2T)``
    overflows, the backward pass met ``inf - inf`` in ``dD/dc = 2c - 2x`` and returned NaN
    (float32 ``T`` from 1.5e-39 to 5e-39). Below ``1/sqrt(max)`` the memberships are constants
    of ``D``, as the hard ones: every gradient finite, here exactly 0."""
    C = torch.tensor([[1.0, 1.0], [1.0, 1.0], [3.0, 3.0]], dtype=dtype)
    cold = 0.5 / torch.finfo(dtype).max  # 1/(2T) overflows below it
    for T in (1.01 * cold, 1.5 * cold, 2.0 * cold, 3.4 * cold, 1e3 * cold):
        X = torch.tensor([[1.0, 1.0], [2.0, 2.0]], dtype=dtype, requires_grad=True)
        layer = rk.KMeansLayer(C, temperature=T, assignment=assignment)
        R = layer(X)
        (R[:, 0] * 5).sum().backward()
        torch.testing.assert_close(R.detach()[0, :2], torch.full((2,), 0.5, dtype=dtype))
        assert layer.centroids.grad is not None
        assert X.grad is not None
        assert bool(torch.isfinite(layer.centroids.grad).all())
        assert bool(torch.isfinite(X.grad).all())


def test_layer_gradients_are_unchanged_at_ordinary_temperatures() -> None:
    """Above the detach threshold the memberships keep their derivative: gradcheck in
    float64 at ``T = 1e-3`` and ``T = 10``."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    for T in (1e-3, 10.0):
        layer = rk.KMeansLayer(torch.randn(4, 3, generator=g, dtype=torch.float64),
                               temperature=T)
        assert torch.autograd.gradcheck(lambda x, lay=layer: lay(x), (X,))


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_layer_scores_at_a_temperature_below_the_dtype(metric: str) -> None:
    """``scores`` divides by ``2T`` (``T`` for cosine) in float64 where that is subnormal or 0
    in the centroids' dtype: a row on a centroid scores 0 (it was ``0 / 0 = NaN``), the
    others ``-inf``, as ``-D / (2T)`` in float64 cast to float32."""
    C = torch.tensor([[1.0, 1.0], [1.0, 1.0], [3.0, 3.0]])
    X = torch.tensor([[1.0, 1.0]])
    for T in (1e-46, 1e-300):
        layer = rk.KMeansLayer(C, temperature=T, metric=metric)
        z = layer.scores(X)
        assert not bool(z.isnan().any())
        if metric == "sqeuclidean":
            expected = (layer.distances(X).double() / (-2.0 * T)).float()
        else:
            expected = (torch.nn.functional.cosine_similarity(X.double(), C.double())
                        / T).float().unsqueeze(0)
        assert torch.equal(z, expected)
    assert torch.equal(rk.KMeansLayer(C, temperature=0.5).scores(X),
                       rk.KMeansLayer(C, temperature=0.5).distances(X) / -1.0)


def test_from_linear_and_as_linear_name_their_failures() -> None:
    layer = rk.KMeansLayer(torch.tensor([[1.0, 2.0], [3.0, -1.0]]), temperature=0.5)
    lin = layer.as_linear()
    for name, value in (("atol", -1.0), ("rtol", math.nan), ("rtol", math.inf)):
        with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0"):
            rk.KMeansLayer.from_linear(lin, 0.5, **{name: value})
    with pytest.raises(ValueError, match="overflow"):
        rk.KMeansLayer.from_linear(lin, 1e300)
    with torch.no_grad():
        lin.weight[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"linear\.weight must be finite"):
        rk.KMeansLayer.from_linear(lin, 0.5)
    with pytest.raises(ValueError, match="underflows to 0"):
        rk.KMeansLayer(torch.tensor([[1.0, 2.0], [3.0, -1.0]]), temperature=1e300).as_linear()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_objective_of_half_distances_is_computed_in_float32(dtype: torch.dtype) -> None:
    """float16/bfloat16 ``D`` are computed in float32 (SPEC): bfloat16 had given 0.0469 for
    0.0518 (its own rounding of every step)."""
    D = torch.rand(50, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    half = D.to(dtype)
    got = objective_from_distances(half, 0.3, "softmax")
    assert got.dtype == torch.float32
    ref = objective_from_distances(half.double(), 0.3, "softmax")
    assert float(got) == pytest.approx(float(ref), rel=1e-6)


@pytest.mark.parametrize("mapping", [rk.entmax15, rk.sparsemax, rk.softmax])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_mappings_return_contiguous_rows_along_any_dim(mapping, dim: int) -> None:  # type: ignore[no-untyped-def]
    """Contiguous input, contiguous output (as ``torch.softmax``): ``view`` works on it, and
    the values and the gradient are those of the mapping along the moved axis."""
    z = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64,
                    requires_grad=True)
    P = mapping(z, dim=dim)
    assert P.is_contiguous()
    assert P.view(-1).shape == (60,)
    moved = mapping(z.detach().movedim(dim, -1), dim=-1).movedim(-1, dim)
    torch.testing.assert_close(P.detach(), moved, rtol=1e-15, atol=1e-15)
    assert torch.autograd.gradcheck(lambda t: mapping(t, dim=dim), (z,))
    assert torch.autograd.gradgradcheck(lambda t: mapping(t, dim=dim), (z,))


def test_estimator_is_unchanged_by_the_shifted_gradient_memberships() -> None:
    """The estimator's gradient solver takes the row-shifted memberships; on ordinary data its
    fit still lands at the soft-Lloyd solver's centroids."""
    X = np.random.default_rng(0).normal(size=(300, 2))
    a = rk.RBFKMeans(3, solver="gradient", random_state=0).fit(X)
    b = rk.RBFKMeans(3, random_state=0).fit(X)
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_linear_takes_a_half_precision_copy_of_as_linear(dtype: torch.dtype) -> None:
    """A ``.half()`` copy of ``as_linear()`` rounds its bias by the dtype's own precision: the
    bias check allows 16 units of it (the default ``rtol`` 1e-4 had refused it), and the
    centroids come back to that precision; a bias off by 50% is still refused."""
    C = torch.tensor([[10.3, -7.1], [3.3, 12.9], [-9.7, 0.6]])
    lin = rk.KMeansLayer(C, temperature=0.7).as_linear().to(dtype)
    back = rk.KMeansLayer.from_linear(lin, 0.7)
    torch.testing.assert_close(back.centroids.float(), C, rtol=2e-2, atol=0.0)
    with torch.no_grad():
        lin.bias.mul_(1.5)
    with pytest.raises(ValueError, match=r"linear\.bias is not"):
        rk.KMeansLayer.from_linear(lin, 0.7)
