"""The low-level passes at the edges of the floating-point range.

Centroids or rows whose squared distances overflow the dtype, temperatures so small that
``1 / T`` or the scores overflow (``T = 1e-320`` is a valid temperature) or so large that ``2T``
does, perturbations that throw the centroids out of range, flags given as strings and batch
sources that are not arrays: each either computes the right value (compared with a float64
NumPy reference) or raises naming the parameter and the value.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from rbfkmeans import annealing, groups, objectives, passes, relocation, residuals, stats, streaming

X = torch.tensor([[0.0, 0], [1, 0], [10, 10], [11, 10]], dtype=torch.float64)
C = torch.tensor([[0.5, 0], [10.5, 10]], dtype=torch.float64)
SOFT = ["softmax", "entmax15", "sparsemax"]


def _huge(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    out[0, 0] = 1e308
    return out


def _far(name: str, other: str, dtype: str = "torch.float64", reach: str = "1e+308") -> str:
    return re.escape(f"{name} lies too far from {other} for {dtype}: its squared distances "
                     f"overflow (entries of x - c up to {reach} over 2 features); rescale {name}")


def _hard_reference(Xn: np.ndarray, Cn: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Counts, member sums and ``J`` of the nearest-centroid assignment, from the residuals."""
    D = ((Xn[:, None, :] - Cn[None, :, :]) ** 2).sum(axis=2)  # (n, k)
    lab = D.argmin(axis=1)
    k = Cn.shape[0]
    N = np.bincount(lab, minlength=k).astype(np.float64)
    S = np.stack([Xn[lab == j].sum(axis=0) for j in range(k)])
    return N, S, float(D.min(axis=1).sum())


# -- 1. centroids (or rows) whose squared distances overflow ------------------------------------

_PASSES = {
    "nearest_labels": lambda data, Cx: passes.nearest_labels(data, Cx),
    "nearest": lambda data, Cx: passes.nearest(data, Cx),
    "nearest two": lambda data, Cx: passes.nearest(data, Cx, two=True),
    "cluster_stats soft": lambda data, Cx: stats.cluster_stats(data, Cx, 1.0, "softmax"),
    "cluster_stats hard": lambda data, Cx: stats.cluster_stats(data, Cx, 0.0, "hard"),
    "minibatch_step": lambda data, Cx: streaming.minibatch_step(
        data, Cx, torch.ones(2, dtype=torch.float64), 0.0, "hard"),
    "farthest_points": lambda data, Cx: relocation.farthest_points(data, Cx, 1),
    "group_stats": lambda data, Cx: groups.group_stats(data, Cx, torch.ones(2), 1.0, "softmax"),
    "residual_sum": lambda data, Cx: residuals.residual_sum(data, Cx, torch.tensor([0, 0, 1, 1])),
    "settled_inertia": lambda data, Cx: residuals.settled_inertia(
        data, Cx, torch.tensor([0, 0, 1, 1]), 1.0),
}


@pytest.mark.parametrize("call", list(_PASSES), ids=list(_PASSES))
def test_a_centroid_out_of_reach_is_named(call: str) -> None:
    """A centroid at 1e308 gave wrong labels, NaN distances, NaN objectives and an empty
    relocation; a row at 1e308 the same, and a float64 centroid at 1e300 became inf in a
    float32 pass."""
    Ch = _huge(C)
    with pytest.raises(ValueError, match=_far("C", "the rows of X")):
        _PASSES[call](passes.Data(X), Ch)
    with pytest.raises(ValueError, match=_far("X", "the centroids C")):
        _PASSES[call](passes.Data(_huge(X)), C)
    assert Ch[0, 0] == 1e308  # nothing the caller passed is modified


def test_centroids_are_named_in_the_data_dtype() -> None:
    C64 = C.clone()
    C64[1, 1] = 1e30  # finite in float64, its squares not in float32
    with pytest.raises(ValueError, match=_far("C", "the rows of X", "torch.float32", "1e+30")):
        passes.nearest(passes.Data(X.float()), C64)


def test_far_but_representable_values_are_computed() -> None:
    """The check is the dtype's range, not a scale: values of 1e150 are computed exactly."""
    Xs, Cs = X * 1e150, C * 1e150
    near = passes.nearest(passes.Data(Xs), Cs)
    N, _, J = _hard_reference(Xs.numpy(), Cs.numpy())
    np.testing.assert_allclose(near.dist.sum().item(), J, rtol=1e-12)
    st = stats.cluster_stats(passes.Data(Xs), Cs, 0.0, "hard")
    np.testing.assert_array_equal(st.N.numpy(), N)


# -- 2. MacQueen's updates ----------------------------------------------------------------------


def test_macqueen_names_rows_or_centroids_out_of_reach() -> None:
    counts = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match=_far("X", "the centroids C")):
        streaming.macqueen_updates(_huge(X), C, counts, 1.0, "softmax")
    with pytest.raises(ValueError, match=_far("C", "the rows of X")):
        streaming.macqueen_updates(X, _huge(C), counts, 1.0, "softmax")
    Cn, cn = streaming.macqueen_updates(X * 1e150, C * 1e150, counts, 1.0, "hard")
    assert bool(torch.isfinite(Cn).all())
    assert cn.tolist() == [3.0, 3.0]


# -- 3. tiny temperatures -----------------------------------------------------------------------


def _tiny_cases() -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    g = torch.Generator().manual_seed(0)
    Xr = torch.randn(300, 3, generator=g, dtype=torch.float64)
    Cr = torch.randn(7, 3, generator=g, dtype=torch.float64)
    # 1e-320: 1 / T overflows; 1e-300 on rows of size 1e10: 1 / T does not, the scores do
    return [(X, C, 1e-320), (Xr, Cr, 1e-320), (Xr * 1e10, Cr * 1e10, 1e-300),
            (Xr.float(), Cr.float(), 1e-44)]


@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("assignment", SOFT)
def test_cluster_stats_at_a_tiny_temperature_are_the_hard_ones(case: int,
                                                               assignment: str) -> None:
    Xc, Cc, T = _tiny_cases()[case]
    N, S, J = _hard_reference(Xc.double().numpy(), Cc.double().numpy())
    st = stats.cluster_stats(passes.Data(Xc), Cc, T, assignment, return_labels=True)
    np.testing.assert_array_equal(st.N.double().numpy(), N)
    np.testing.assert_allclose(st.S.double().numpy(), S, rtol=1e-5, atol=1e-6 * abs(S).max())
    assert math.isfinite(st.objective)
    np.testing.assert_allclose([st.objective, st.inertia], [J, J], rtol=1e-5)
    C1, _, st1 = annealing.soft_lloyd(passes.Data(Xc), Cc, T, assignment, max_iter=1)
    np.testing.assert_allclose(C1.double().numpy(), S / N[:, None], rtol=1e-5)
    assert math.isfinite(st1.objective)


@pytest.mark.parametrize("assignment", SOFT)
def test_group_stats_at_a_tiny_temperature_are_the_hard_ones(assignment: str) -> None:
    """The group pass gave N = [0, 0] and J = inf (NaN on the torch path), and with the gain
    matrices a LinAlgError."""
    for Xc, Cc, T in _tiny_cases()[:3]:
        N, S, J = _hard_reference(Xc.numpy(), Cc.numpy())
        m = torch.ones(Cc.shape[0])
        m[0] = 2.0
        gs = groups.group_stats(passes.Data(Xc), Cc, m, T, assignment, critical=True)
        np.testing.assert_allclose(gs.N.numpy(), N, rtol=1e-12)
        np.testing.assert_allclose(gs.S.numpy(), S, rtol=1e-12, atol=1e-12 * abs(S).max())
        np.testing.assert_allclose([gs.objective, gs.inertia], [J, J], rtol=1e-9)
        assert gs.T_crit is not None
        assert bool(torch.isfinite(gs.T_crit).all())


def test_memberships_at_a_tiny_temperature_split_exact_ties() -> None:
    """A row equally near two centroids (exactly, in the expanded scores) splits its weight
    evenly, as the layer's rows do; every row's memberships sum to one."""
    Xt = torch.tensor([[0.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    Ct = torch.tensor([[-1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    for assignment in SOFT:
        st = stats.cluster_stats(passes.Data(Xt), Ct, 1e-320, assignment)
        np.testing.assert_allclose(st.N.numpy(), [0.5, 1.5], rtol=1e-15)
        np.testing.assert_allclose(st.N.sum().item(), Xt.shape[0], rtol=1e-15)


# -- 4. huge temperatures -----------------------------------------------------------------------


def _shannon_reference(D: np.ndarray, T: float, w: np.ndarray) -> float:
    """``-2T sum_i w_i logsumexp_j(-d_ij / 2T)``, written ``T (-2 ...)`` (2T overflows)."""
    z = -D / T / 2.0
    lse = z.max(axis=1) + np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1))
    return float(sum(T * (-2.0 * wi * li) for wi, li in zip(w, lse, strict=True)))


def test_objective_from_distances_at_a_huge_temperature_is_finite() -> None:
    """``2T`` overflows before ``2T H``: the value was -inf though it is -1.39e308."""
    D = ((X[:1, None, :] - C[None]) ** 2).sum(dim=2)  # (1, 2)
    F = objectives.objective_from_distances(D, 1e308, "softmax")
    np.testing.assert_allclose(F.item(), _shannon_reference(D.numpy(), 1e308, np.ones(1)),
                               rtol=1e-12)
    w = torch.full((4,), 0.25, dtype=torch.float64)
    D4 = ((X[:, None, :] - C[None]) ** 2).sum(dim=2)
    F4 = objectives.objective_from_distances(D4, 1e308, "softmax", w)
    np.testing.assert_allclose(F4.item(), _shannon_reference(D4.numpy(), 1e308, w.numpy()),
                               rtol=1e-12)


@pytest.mark.parametrize("assignment", SOFT)
def test_cluster_stats_at_a_huge_temperature(assignment: str) -> None:
    """At T = 1e308 the objective was NaN and J inf: each row's F is finite (the memberships
    uniform), J that of the nearest centroids; where the sum truly overflows, T is named."""
    w = torch.full((4,), 0.25, dtype=torch.float64)
    _, _, J = _hard_reference(X.numpy(), C.numpy())
    st = stats.cluster_stats(passes.Data(X, w), C, 1e308, assignment)
    np.testing.assert_allclose(st.N.numpy(), [0.5, 0.5])
    np.testing.assert_allclose(st.inertia, J / 4, rtol=1e-12)
    if assignment == "softmax":
        D = ((X[:, None, :] - C[None]) ** 2).sum(dim=2).numpy()
        np.testing.assert_allclose(st.objective, _shannon_reference(D, 1e308, w.numpy()),
                                   rtol=1e-12)
    assert math.isfinite(st.objective)
    assert st.objective < 0
    with pytest.raises(ValueError, match=re.escape(
            "T must be small enough for the objective to be finite in float64; got T=1e+308, "
            f"at which the entropy term 2T sum_i w_i H_i of the {assignment} objective "
            "overflows (got -inf) though J=1 is finite")):
        stats.cluster_stats(passes.Data(X), C, 1e308, assignment)
    gs = groups.group_stats(passes.Data(X, w), C, torch.ones(2), 1e308, assignment)
    np.testing.assert_allclose(gs.objective, st.objective, rtol=1e-12)


# -- 5. a perturbation out of range -------------------------------------------------------------


def test_anneal_names_a_perturbation_out_of_range() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "perturbation must be small enough to keep the centroids finite and within reach of "
            "X; got perturbation=1e+308, which moved them out")):
        annealing.anneal(passes.Data(X), C, [1.0], "softmax", perturbation=1e308,
                         generator=torch.Generator().manual_seed(0))


# -- 6. flags -----------------------------------------------------------------------------------

_FLAGS = {
    "validate": lambda v: passes.Data(X, validate=v),
    "return_labels": lambda v: stats.cluster_stats(passes.Data(X), C, 1.0, "softmax",
                                                    return_labels=v),
    "objective": lambda v: stats.cluster_stats(passes.Data(X), C, 1.0, "softmax",
                                                objective=v),
    "two": lambda v: passes.nearest(passes.Data(X), C, two=v),
    "critical": lambda v: groups.group_stats(passes.Data(X), C, torch.ones(2), 1.0, "softmax",
                                             critical=v),
    "rebalance": lambda v: annealing.anneal(passes.Data(X), C, [1.0], "softmax", rebalance=v),
}


@pytest.mark.parametrize("flag", list(_FLAGS))
def test_flags_must_be_bools(flag: str) -> None:
    """``"no"`` read as true."""
    for bad in ("no", 1, None):
        with pytest.raises(TypeError, match=re.escape(
                f"{flag} must be a bool (True or False); got {type(bad).__name__} {bad!r}")):
            _FLAGS[flag](bad)
    _FLAGS[flag](np.bool_(False))  # NumPy bools are bools


# -- 7. array batches ---------------------------------------------------------------------------


def test_array_batches_names_x_and_rng() -> None:
    """Both raised AttributeError (and only once the first batch was asked for)."""
    with pytest.raises(TypeError, match=re.escape(
            "X must be a 2-D array (n, d) with a shape (a NumPy array, a memmap, a DataFrame); "
            "got NoneType")):
        streaming.array_batches(None, None, 2, np.random.RandomState(0))
    with pytest.raises(TypeError, match=re.escape("got ndarray of shape (4,)")):
        streaming.array_batches(np.zeros(4), None, 2, np.random.RandomState(0))
    with pytest.raises(TypeError, match=re.escape(
            "rng must be a numpy.random.RandomState; got NoneType None")):
        streaming.array_batches(X.numpy(), None, 2, None)
    got = list(streaming.array_batches(X.numpy(), None, 3, np.random.RandomState(0)))
    rows = np.concatenate([b for b, _ in got])
    np.testing.assert_array_equal(np.sort(rows, axis=0), np.sort(X.numpy(), axis=0))
