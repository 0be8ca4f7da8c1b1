"""The k-means objective J and its relaxations F_T: values, bounds, variational forms, gradients.

References are independent of the library: distances by broadcasting in float64, logsumexp from
scipy, entmax-1.5 and sparsemax from the ``entmax`` package, and the variational forms
``sum w r d - 2T sum w Omega(r)`` written out directly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp, xlogy

import rbfkmeans as rk
from rbfkmeans.objectives import objective_from_distances

entmax = pytest.importorskip("entmax")

SOFT = ["softmax", "entmax15", "sparsemax"]
FUNCTIONS = {
    "softmax": rk.shannon_objective,
    "entmax15": rk.tsallis_objective,
    "sparsemax": rk.sparsemax_objective,
}
H_MAX = {
    "softmax": lambda k: math.log(k),
    "entmax15": lambda k: 4 / 3 * (1 - k**-0.5),
    "sparsemax": lambda k: 0.5 * (1 - 1 / k),
}


# -- references ------------------------------------------------------------------------------------


def ref_D(X: torch.Tensor, C: torch.Tensor) -> np.ndarray:
    X64, C64 = X.detach().double().numpy(), C.detach().double().numpy()
    return ((X64[:, None, :] - C64[None, :, :]) ** 2).sum(-1)  # (n, k)


def ref_R(name: str, D: np.ndarray, T: float) -> np.ndarray:
    """The minimising responsibilities m(-D/2T) from the reference implementations."""
    z = torch.from_numpy(-D / (2 * T))
    if name == "softmax":
        return torch.softmax(z, dim=1).numpy()
    if name == "entmax15":
        return entmax.entmax15(z, dim=1).numpy()
    return entmax.sparsemax(z, dim=1).numpy()


def omega(name: str, R: np.ndarray) -> np.ndarray:
    """The entropy Omega(r) of each row (>= 0, 0 at one-hot rows)."""
    if name == "softmax":
        return -xlogy(R, R).sum(1)
    if name == "entmax15":
        return 4 / 3 * (1 - (R**1.5).sum(1))
    return 0.5 * (1 - (R**2).sum(1))


def variational(name: str, R: np.ndarray, D: np.ndarray, T: float, w: np.ndarray) -> float:
    """sum_i w_i (sum_j r_ij d_ij - 2T Omega(r_i)); for softmax 2T sum r log r = -2T Omega."""
    return float(w @ ((R * D).sum(1) - 2 * T * omega(name, R)))


def ref_J(D: np.ndarray, w: np.ndarray) -> float:
    return float(w @ D.min(1))


def random_problem(seed: int, n: int, k: int, d: int, weighted: bool = True):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64) * 2
    C = torch.randn(k, d, generator=g, dtype=torch.float64) * 2
    w = torch.rand(n, generator=g, dtype=torch.float64) * 3 if weighted else torch.ones(n).double()
    return X, C, w


def random_stochastic(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Row-stochastic matrices of several kinds: dense, sparse, one-hot rows."""
    R = rng.dirichlet(np.full(k, rng.choice([0.1, 1.0, 10.0])), size=n)  # (n, k)
    sparse = rng.random((n, k)) < 0.3
    R2 = np.where(sparse, 0.0, R)
    R2[R2.sum(1) == 0, 0] = 1.0
    R2 /= R2.sum(1, keepdims=True)
    one_hot = np.eye(k)[rng.integers(0, k, n)]
    pick = rng.integers(0, 3, n)[:, None]
    return np.where(pick == 0, R, np.where(pick == 1, R2, one_hot))


problems = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**31 - 1),
        "n": st.integers(1, 15),
        "k": st.integers(1, 6),
        "d": st.integers(1, 3),
        "T": st.floats(1e-3, 1e2),
    }
)


# -- values ----------------------------------------------------------------------------------------


def test_kmeans_objective_interview_example() -> None:
    X = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    C = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
    assert rk.kmeans_objective(X, C).item() == 1.0
    assert rk.kmeans_objective(X, C, torch.tensor([3.0, 5.0])).item() == 3.0
    # softmax, T = 1: -2 (logsumexp(-5/2, -1/2) + logsumexp(0, -4))
    expected = -2 * (logsumexp([-2.5, -0.5]) + logsumexp([0.0, -4.0]))
    assert math.isclose(rk.shannon_objective(X.double(), C.double(), 1.0).item(), expected)


@pytest.mark.parametrize("name", [*SOFT, "hard"])
@pytest.mark.parametrize("T", [0.0, 0.05, 1.0, 20.0])
def test_values_match_reference(name: str, T: float) -> None:
    X, C, w = random_problem(0, 20, 5, 3)
    D = ref_D(X, C)
    got = rk.soft_objective(X, C, T, name, w).item()
    if name == "hard" or T == 0:
        expected = ref_J(D, w.numpy())
        assert math.isclose(got, rk.kmeans_objective(X, C, w).item(), rel_tol=1e-13)
    elif name == "softmax":
        expected = float(-2 * T * (w.numpy() @ logsumexp(-D / (2 * T), axis=1)))
    else:
        expected = variational(name, ref_R(name, D, T), D, T, w.numpy())
    assert math.isclose(got, expected, rel_tol=1e-10, abs_tol=1e-10)
    if name != "hard":
        assert math.isclose(FUNCTIONS[name](X, C, T, w).item(), got, rel_tol=1e-14)
    D_lib = rk.sq_distances(X, C)
    assert math.isclose(objective_from_distances(D_lib, T, name, w).item(), got, rel_tol=1e-14)


# -- bounds: J - 2T (sum w) H_max <= F_T <= J ------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(p=problems, name=st.sampled_from(SOFT))
def test_sandwich_bounds(p: dict, name: str) -> None:
    X, C, w = random_problem(p["seed"], p["n"], p["k"], p["d"])
    T = p["T"]
    F = FUNCTIONS[name](X, C, T, w).item()
    J = rk.kmeans_objective(X, C, w).item()
    gap = 2 * T * float(w.sum()) * H_MAX[name](p["k"])
    assert math.isclose(rk.entropy_bound(name, p["k"]), H_MAX[name](p["k"]), rel_tol=1e-15)
    tol = 1e-9 * (abs(J) + gap + 1)
    assert J - gap - tol <= F <= J + tol


@pytest.mark.parametrize("name", SOFT)
def test_bounds_are_attained(name: str) -> None:
    """Upper bound at T = 0; lower bound when all centroids coincide (R uniform, Omega = H_max)."""
    X, _, w = random_problem(1, 9, 1, 2)
    k, T = 4, 0.7
    C = torch.full((k, 2), 0.3, dtype=torch.float64)
    J = rk.kmeans_objective(X, C, w).item()
    F = FUNCTIONS[name](X, C, T, w).item()
    assert math.isclose(F, J - 2 * T * float(w.sum()) * H_MAX[name](k), rel_tol=1e-12)
    assert FUNCTIONS[name](X, C, 0.0, w).item() == J


@pytest.mark.parametrize("name", SOFT)
def test_converges_to_J_as_T_to_0(name: str) -> None:
    X, C, w = random_problem(2, 30, 4, 2)
    J = rk.kmeans_objective(X, C, w).item()
    W = float(w.sum())
    previous = -math.inf
    for T in [10.0, 1.0, 0.1, 1e-2, 1e-3, 1e-5, 1e-8]:
        F = FUNCTIONS[name](X, C, T, w).item()
        assert 0 <= J - F <= 2 * T * W * H_MAX[name](4) * (1 + 1e-9) + 1e-12
        assert previous - 1e-12 <= F  # F_T is non-increasing in T
        previous = F
    assert math.isclose(F, J, rel_tol=1e-7)


@pytest.mark.parametrize("name", SOFT)
def test_temperature_derivative_is_minus_2_entropy(name: str) -> None:
    """Envelope theorem in T: dF_T/dT = -2 sum_i w_i Omega(r_i) (central difference)."""
    X, C, w = random_problem(3, 12, 3, 2)
    T, h = 0.8, 1e-5
    dF = (FUNCTIONS[name](X, C, T + h, w) - FUNCTIONS[name](X, C, T - h, w)).item() / (2 * h)
    D = ref_D(X, C)
    expected = -2 * float(w.numpy() @ omega(name, ref_R(name, D, T)))
    assert math.isclose(dF, expected, rel_tol=1e-6, abs_tol=1e-8)


@pytest.mark.parametrize("name", SOFT)
def test_tiny_temperature_float32_is_finite(name: str) -> None:
    g = torch.Generator().manual_seed(4)
    X = torch.randn(50, 3, generator=g) * 100
    C = torch.randn(6, 3, generator=g) * 100
    J = rk.kmeans_objective(X, C).item()
    for T in [1e-8, 1e-30, 1e-46]:
        F = FUNCTIONS[name](X, C, T).item()
        assert math.isfinite(F)
        assert math.isclose(F, J, rel_tol=1e-6)


# -- variational forms -----------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(p=problems, name=st.sampled_from(SOFT))
def test_minimiser_and_variational_form(p: dict, name: str) -> None:
    """F_T = V(R*) with R* = m(-D/2T), and V(R) >= F_T for every other row-stochastic R
    (random ones, and mixtures close to R*)."""
    X, C, w = random_problem(p["seed"], p["n"], p["k"], p["d"])
    T = p["T"]
    D, wn = ref_D(X, C), w.numpy()
    F = FUNCTIONS[name](X, C, T, w).item()
    R_star = ref_R(name, D, T)
    V_star = variational(name, R_star, D, T, wn)
    scale = abs(F) + 2 * T * wn.sum() * H_MAX[name](p["k"]) + 1
    assert math.isclose(F, V_star, rel_tol=1e-10, abs_tol=1e-10 * scale)
    rng = np.random.default_rng(p["seed"])
    for _ in range(4):
        Q = random_stochastic(rng, p["n"], p["k"])
        assert variational(name, Q, D, T, wn) >= F - 1e-10 * scale
        for eps in (1e-1, 1e-3):
            near = (1 - eps) * R_star + eps * Q
            assert variational(name, near, D, T, wn) >= F - 1e-10 * scale


def test_shannon_variational_form_numerically() -> None:
    """-2T sum w logsumexp(-D/2T) = sum w r d + 2T sum w r log r at r = softmax(-D/2T)."""
    X, C, w = random_problem(5, 25, 6, 4)
    D, wn = ref_D(X, C), w.numpy()
    for T in [0.01, 0.5, 4.0]:
        R = ref_R("softmax", D, T)
        direct = float(wn @ ((R * D).sum(1) + 2 * T * xlogy(R, R).sum(1)))
        assert math.isclose(rk.shannon_objective(X, C, T, w).item(), direct, rel_tol=1e-11)


# -- gradient: dF/dc_j = 2 N_j (c_j - m_j) ---------------------------------------------------------


def lloyd_gradient(X: torch.Tensor, C: torch.Tensor, R: np.ndarray, w: torch.Tensor):
    """2 N_j (c_j - m_j) = 2 (N_j c_j - sum_i w_i r_ij x_i), N_j = sum_i w_i r_ij."""
    WR = torch.from_numpy(R) * w[:, None]  # (n, k)
    N = WR.sum(0)  # (k,)
    return 2 * (N[:, None] * C.detach() - WR.T @ X.detach())


@settings(max_examples=40, deadline=None)
@given(p=problems, name=st.sampled_from(SOFT))
def test_gradient_is_lloyd_direction(p: dict, name: str) -> None:
    X, C, w = random_problem(p["seed"], p["n"], p["k"], p["d"])
    T = p["T"]
    C.requires_grad_(True)
    FUNCTIONS[name](X, C, T, w).backward()
    R = ref_R(name, ref_D(X, C), T)
    expected = lloyd_gradient(X, C, R, w)
    torch.testing.assert_close(C.grad, expected, rtol=1e-10, atol=1e-10)


def test_hard_gradient_is_lloyd_direction() -> None:
    """J: dJ/dc_j = 2 |S_j| (c_j - mean(S_j)), weighted, at generic points (no ties)."""
    X, C, w = random_problem(6, 30, 4, 2)
    C.requires_grad_(True)
    rk.kmeans_objective(X, C, w).backward()
    D = ref_D(X, C)
    R = np.eye(4)[D.argmin(1)]
    torch.testing.assert_close(C.grad, lloyd_gradient(X, C, R, w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", SOFT)
def test_step_eta_1_over_2N_lands_on_weighted_mean(name: str) -> None:
    """c_j - dF/dc_j / (2 N_j) = m_j: one per-cluster gradient step is the Lloyd update."""
    X, C, w = random_problem(7, 40, 3, 2)
    T = 0.5
    C.requires_grad_(True)
    FUNCTIONS[name](X, C, T, w).backward()
    R = torch.from_numpy(ref_R(name, ref_D(X, C), T))
    WR = R * w[:, None]
    N = WR.sum(0)
    m = (WR.T @ X) / N[:, None]
    stepped = C.detach() - C.grad / (2 * N[:, None])
    torch.testing.assert_close(stepped, m, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", [*SOFT, "hard"])
def test_gradcheck_in_X_and_C(name: str) -> None:
    X, C, w = random_problem(8, 6, 3, 2)
    X.requires_grad_(True)
    C.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: rk.soft_objective(a, b, 0.6, name, w), (X, C))


# -- sample weights --------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    counts=st.lists(st.integers(0, 3), min_size=1, max_size=10).filter(any),
    k=st.integers(1, 5),
    T=st.floats(1e-2, 10.0),
    name=st.sampled_from([*SOFT, "hard"]),
)
@example(seed=972661, counts=[0] * 9 + [1], k=4, T=3.515625, name="softmax")
def test_integer_weights_equal_repeated_points(seed, counts, k, T, name) -> None:
    n = len(counts)
    X, C, _ = random_problem(seed, n, k, 2)
    w = torch.tensor(counts, dtype=torch.float64)
    X_rep = X.repeat_interleave(torch.tensor(counts), dim=0)
    weighted = rk.soft_objective(X, C, T, name, w).item()
    repeated = rk.soft_objective(X_rep, C, T, name).item()
    assert math.isclose(weighted, repeated, rel_tol=1e-11, abs_tol=1e-11)
    # unit weights: the same sum of per-row terms F_i = min_j d_ij + 2T (free energy), added in
    # another order. The terms can cancel (F_T near 0 while each is O(J/n + 2T H_max)), so the
    # rounding is bounded by the terms' magnitude, not by F_T's (seed 972661 gave 2e-14 relative)
    terms = rk.kmeans_objective(X, C).item() + 2.0 * T * n * max(2.0, math.log(max(k, 2)))
    assert math.isclose(
        rk.soft_objective(X, C, T, name, torch.ones(n)).item(),
        rk.soft_objective(X, C, T, name).item(),
        rel_tol=1e-14, abs_tol=64 * torch.finfo(torch.float64).eps * terms,
    )


def test_weights_as_ndarray_and_list() -> None:
    X, C, w = random_problem(9, 5, 2, 2)
    expected = rk.shannon_objective(X, C, 0.5, w).item()
    assert math.isclose(rk.shannon_objective(X, C, 0.5, w.numpy()).item(), expected)
    assert math.isclose(rk.shannon_objective(X, C, 0.5, w.tolist()).item(), expected)


# -- bad input -------------------------------------------------------------------------------------


X0 = torch.zeros(4, 2, dtype=torch.float64)
C0 = torch.ones(2, 2, dtype=torch.float64)


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (
            lambda: rk.kmeans_objective(X0, C0, torch.tensor([1.0, -2.0, 1.0, 1.0])),
            ValueError,
            ["sample_weight", "-2"],
        ),
        (
            lambda: rk.kmeans_objective(X0, C0, torch.tensor([1.0, float("nan"), 1.0, 1.0])),
            ValueError,
            ["sample_weight", "nan"],
        ),
        (
            lambda: rk.shannon_objective(X0, C0, 1.0, torch.tensor([1.0, float("inf"), 1, 1])),
            ValueError,
            ["sample_weight", "inf"],
        ),
        (
            lambda: rk.shannon_objective(X0, C0, 1.0, torch.ones(3)),
            ValueError,
            ["sample_weight", "(4,)", "(3,)"],
        ),
        (lambda: rk.shannon_objective(X0, C0, -1.0), ValueError, ["T must", "-1.0"]),
        (lambda: rk.tsallis_objective(X0, C0, float("nan")), ValueError, ["T must", "nan"]),
        (lambda: rk.sparsemax_objective(X0, C0, True), TypeError, ["T must", "True"]),
        (lambda: rk.soft_objective(X0, C0, 1.0, "gumbel"), ValueError, ["assignment", "gumbel"]),
        (lambda: rk.kmeans_objective(X0, torch.ones(2, 3)), ValueError, ["X", "C", "3", "2"]),
        (lambda: rk.kmeans_objective(X0[0], C0), ValueError, ["X", "(2,)"]),
        (lambda: rk.kmeans_objective(X0.numpy(), C0), TypeError, ["X", "ndarray"]),
        (
            lambda: rk.kmeans_objective(X0.clone().fill_(float("nan")), C0),
            ValueError,
            ["X", "finite", "nan"],
        ),
        (
            lambda: rk.shannon_objective(X0, C0.clone().fill_(float("inf")), 1.0),
            ValueError,
            ["C", "finite", "inf"],
        ),
        (
            lambda: objective_from_distances(torch.ones(4), 1.0, "softmax"),
            ValueError,
            ["D", "(4,)"],
        ),
        (lambda: rk.entropy_bound("softmax", 0), ValueError, ["k", "0"]),
        (lambda: rk.entropy_bound("softmax", 2.5), TypeError, ["k", "2.5"]),
        (lambda: rk.entropy_bound("tsallis", 3), ValueError, ["assignment", "tsallis"]),
    ],
    ids=[
        "weight-negative",
        "weight-nan",
        "weight-inf",
        "weight-shape",
        "T-negative",
        "T-nan",
        "T-bool",
        "assignment-unknown",
        "features-mismatch",
        "X-rank",
        "X-ndarray",
        "X-nan",
        "C-inf",
        "D-rank",
        "k-zero",
        "k-float",
        "bound-assignment",
    ],
)
def test_bad_input(call, exc, words) -> None:
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_inputs_not_modified() -> None:
    X, C, w = random_problem(10, 8, 3, 2)
    copies = [t.clone() for t in (X, C, w)]
    for name in [*SOFT, "hard"]:
        rk.soft_objective(X, C, 0.3, name, w)
    for t, c in zip((X, C, w), copies, strict=True):
        assert torch.equal(t, c)


def test_entropy_bound_values() -> None:
    assert rk.entropy_bound("softmax", 1) == 0.0
    assert rk.entropy_bound("hard", 5) == 0.0
    assert math.isclose(rk.entropy_bound("softmax", 8), math.log(8))
    assert math.isclose(rk.entropy_bound("entmax15", 4), 2 / 3)
    assert math.isclose(rk.entropy_bound("sparsemax", 4), 0.375)
    # H_max is Omega at the uniform row
    for name in SOFT:
        u = np.full((1, 5), 0.2)
        assert math.isclose(rk.entropy_bound(name, 5), float(omega(name, u)[0]), rel_tol=1e-12)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool])
def test_weights_that_are_not_real_numbers_are_refused(dtype: torch.dtype) -> None:
    X, C = torch.randn(5, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    w = torch.ones(5, dtype=dtype)
    for call in (lambda: rk.kmeans_objective(X, C, w),
                 lambda: rk.shannon_objective(X, C, 1.0, w)):
        with pytest.raises(TypeError, match=rf"sample_weight.*{str(dtype).split('.')[1]}"):
            call()


def test_an_overflowing_entropy_term_names_the_temperature() -> None:
    """``F_T`` of 100 points of spread 1 at ``T = 1e307`` overflows float64 through ``T H``
    alone (``J`` is about 300): the error names the temperature, not the distances."""
    X = torch.randn(100, 3, generator=torch.Generator().manual_seed(0))
    C = X[:2].clone()
    assert math.isfinite(rk.kmeans_objective(X.double(), C.double()).item())
    for objective in (rk.shannon_objective, rk.tsallis_objective):
        with pytest.raises(ValueError, match=r"temperature=1e\+307 is too large"):
            objective(X, C, 1e307)
    with pytest.raises(ValueError, match="too far apart"):  # the distances themselves overflow
        rk.kmeans_objective(X.double() * 1e160, C.double())
