"""Simplex mappings: exactness against the ``entmax`` package, gradients, simplex properties,
extreme temperatures, special values, half precision, in-place variants and bad input.

References: the ``entmax`` package (sort-based entmax-1.5 and sparsemax, forward and backward),
``torch.softmax``, ``torch.autograd.gradcheck`` in float64, and facts derived by hand (one-hot
thresholds: entmax-1.5 is one-hot iff the top-two gap of ``z`` is >= 2, sparsemax iff >= 1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck, gradgradcheck

import rbfkmeans as rk
from rbfkmeans import _thresholds
from rbfkmeans import assignments as A
from rbfkmeans import mappings as M

entmax = pytest.importorskip("entmax")

SPARSE = {"entmax15": (rk.entmax15, entmax.entmax15), "sparsemax": (rk.sparsemax, entmax.sparsemax)}
INPLACE = {"entmax15": M.entmax15_, "sparsemax": M.sparsemax_}
ONE_HOT_GAP = {"entmax15": 2.0, "sparsemax": 1.0}  # top-two gap of z at which rows become one-hot
ALL = ["softmax", "entmax15", "sparsemax", "hard"]


def scores(seed: int, shape: tuple[int, ...], scale: float, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# -- exactness against the entmax package ----------------------------------------------------------


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("scale", [1e-3, 1e-2, 0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1e3])
@pytest.mark.parametrize("k", [1, 2, 3, 8, 64, 257])
def test_forward_equals_entmax_package_float64(name: str, scale: float, k: int) -> None:
    ours, ref = SPARSE[name]
    z = scores(k, (300, k), scale)
    torch.testing.assert_close(ours(z), ref(z, dim=-1), rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize(
    ("shape", "dim"),
    [((7, 5), 0), ((7, 5), 1), ((7, 5), -1), ((4, 6, 5), 0), ((4, 6, 5), 1), ((4, 6, 5), -1),
     ((4, 6, 5), -2), ((9,), 0), ((2, 3, 4, 5), 2)],
)  # fmt: skip
def test_any_dim_equals_entmax_package(name: str, shape: tuple[int, ...], dim: int) -> None:
    ours, ref = SPARSE[name]
    for scale in (0.1, 1.0, 10.0):
        z = scores(len(shape) + dim, shape, scale)
        P = ours(z, dim)
        assert P.shape == z.shape
        torch.testing.assert_close(P, ref(z, dim=dim), rtol=0, atol=1e-9)
        torch.testing.assert_close(P.sum(dim), torch.ones_like(z.sum(dim)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 100.0])
def test_forward_float32_close_to_exact(name: str, scale: float) -> None:
    """float32 is within ~1e-6 of the float64 result (as the package's own float32 is)."""
    ours, ref = SPARSE[name]
    z = scores(3, (2000, 64), scale, torch.float32)
    exact = ref(z.double(), dim=-1)  # exact mapping of the same (float32) scores
    P = ours(z)
    assert P.dtype == torch.float32
    torch.testing.assert_close(P.double(), exact, rtol=0, atol=2e-6)
    torch.testing.assert_close(P, ref(z, dim=-1), rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", SPARSE)
def test_many_blocks_and_mixed_rows(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows split into many blocks (some all one-hot, some all soft) give the same exact result."""
    ours, ref = SPARSE[name]
    z = torch.cat([scores(1, (50, 16), 100.0), scores(2, (50, 16), 0.3), scores(3, (61, 16), 3.0)])
    z = z[torch.randperm(len(z), generator=torch.Generator().manual_seed(0))]
    expected = ref(z, dim=-1)
    g = scores(4, z.shape, 1.0)
    x = z.clone().requires_grad_()
    (expected_grad,) = torch.autograd.grad(ref(x, dim=-1), x, g)
    for block in (16, 16 * 7, 16 * 50, 1 << 20):
        monkeypatch.setattr(_thresholds, "_BLOCK_ELEMENTS", block)
        torch.testing.assert_close(ours(z), expected, rtol=0, atol=1e-9)
        (grad,) = torch.autograd.grad(ours(x), x, g)  # blocks of soft and of one-hot rows
        torch.testing.assert_close(grad, expected_grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", SPARSE)
def test_ties_and_non_contiguous_input(name: str) -> None:
    ours, ref = SPARSE[name]
    z = torch.tensor([[1.0, 1.0, 1.0, -5.0], [2.0, 0.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]]).double()
    torch.testing.assert_close(ours(z), ref(z, dim=-1), rtol=0, atol=1e-12)
    big = scores(5, (40, 30), 2.0)
    strided = big[::3, ::2]  # non-contiguous in both dims
    torch.testing.assert_close(ours(strided), ref(strided.contiguous(), dim=-1), rtol=0, atol=1e-9)
    torch.testing.assert_close(
        ours(strided, 0), ref(strided.contiguous(), dim=0), rtol=0, atol=1e-9
    )


@pytest.mark.parametrize("name", ALL)
def test_input_not_modified(name: str) -> None:
    z = scores(0, (20, 7), 2.0)
    before = z.clone()
    A.get_mapping(name)(z)
    A.get_mapping(name)(z, dim=0)
    assert torch.equal(z, before)


# -- gradients ---------------------------------------------------------------------------------


def away_from_kinks(name: str, z: torch.Tensor, dim: int) -> bool:
    """True if no entry sits within 1e-3 (in p) of entering or leaving the support."""
    if name == "softmax":
        return True
    fn = SPARSE[name][1]
    p = fn(z, dim=dim)
    h = 1e-4
    return bool(torch.equal(fn(z + h, dim=dim) > 0, p > 0)) and bool(((p == 0) | (p > 1e-3)).all())


@pytest.mark.parametrize("name", ["entmax15", "sparsemax", "softmax"])
@pytest.mark.parametrize(("shape", "dim"), [((6, 5), -1), ((6, 5), 0), ((3, 4, 5), 1)])
def test_gradcheck_float64(name: str, shape: tuple[int, ...], dim: int) -> None:
    fn = A.get_mapping(name)
    for seed in range(20):
        z = scores(seed, shape, 1.5).requires_grad_()
        if away_from_kinks(name, z.detach(), dim):
            break
    else:  # pragma: no cover - the seeds above always contain one
        pytest.fail("no kink-free input found")
    assert gradcheck(lambda x: fn(x, dim), (z,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["entmax15", "sparsemax", "softmax"])
@pytest.mark.parametrize("dim", [-1, 0])
def test_gradgradcheck_float64(name: str, dim: int) -> None:
    """Second derivatives (``create_graph=True``) differentiate the closed-form backward."""
    fn = A.get_mapping(name)
    for seed in range(20):
        z = scores(seed, (6, 5), 1.5).requires_grad_()
        if away_from_kinks(name, z.detach(), dim):
            break
    else:  # pragma: no cover - the seeds above always contain one
        pytest.fail("no kink-free input found")
    assert gradgradcheck(lambda x: fn(x, dim), (z,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("dim", [-1, 0])
def test_double_backward_equals_entmax_package(name: str, dim: int) -> None:
    """With ``create_graph=True`` the gradient (a differentiable graph) equals the entmax
    package's, and differentiating it again gives the central differences of the package's
    gradient ``z -> <J(z)^T g, v>``."""
    ours, ref = SPARSE[name]

    def ref_grad(z: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        z = z.clone().requires_grad_()
        (b,) = torch.autograd.grad(ref(z, dim=dim), z, g)
        return b

    checked = 0
    for seed in range(40):
        z = scores(seed, (6, 5), 1.5)
        if not away_from_kinks(name, z, dim):
            continue
        g, v = scores(100 + seed, (6, 5), 1.0), scores(200 + seed, (6, 5), 1.0)
        zg, gg = z.clone().requires_grad_(), g.clone().requires_grad_()
        (a,) = torch.autograd.grad(ours(zg, dim), zg, gg, create_graph=True)
        torch.testing.assert_close(a.detach(), ref_grad(z, g), rtol=0, atol=1e-12)
        second, by_g = torch.autograd.grad((a * v).sum(), (zg, gg), allow_unused=True)
        # linear in g with a symmetric Jacobian: d<J^T g, v>/dg = J v
        torch.testing.assert_close(by_g, ref_grad(z, v), rtol=0, atol=1e-12)
        if second is None:  # sparsemax: piecewise linear, no second derivative in z
            second = torch.zeros_like(z)
        h = 1e-6
        numeric = torch.zeros(z.numel(), dtype=z.dtype)
        for i in range(z.numel()):
            e = torch.zeros(z.numel(), dtype=z.dtype)
            e[i] = h
            e = e.view_as(z)
            numeric[i] = ((ref_grad(z + e, g) - ref_grad(z - e, g)) * v).sum() / (2 * h)
        torch.testing.assert_close(second, numeric.view_as(z), rtol=0, atol=1e-6)
        checked += 1
        if checked == 4:
            break
    else:  # pragma: no cover - the seeds above always contain four
        pytest.fail("fewer than four kink-free inputs found")


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("scale", [0.05, 1.0, 20.0])  # mostly soft rows / mixed / mostly one-hot
@pytest.mark.parametrize("dim", [-1, 0])
def test_backward_equals_entmax_package(name: str, scale: float, dim: int) -> None:
    ours, ref = SPARSE[name]
    z = scores(11, (64, 33), scale)
    g = scores(12, (64, 33), 1.0)
    z1, z2 = z.clone().requires_grad_(), z.clone().requires_grad_()
    (a,) = torch.autograd.grad(ours(z1, dim), z1, g)
    (b,) = torch.autograd.grad(ref(z2, dim=dim), z2, g)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", SPARSE)
def test_one_hot_rows_have_zero_gradient(name: str) -> None:
    ours, _ = SPARSE[name]
    z = torch.tensor([[0.0, -5.0, -9.0], [0.0, 0.3, -0.2]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], dtype=torch.float64)
    (dz,) = torch.autograd.grad(ours(z), z, g)
    assert torch.equal(dz[0], torch.zeros(3, dtype=torch.float64))
    assert dz[1].abs().sum() > 0
    torch.testing.assert_close(dz.sum(-1), torch.zeros(2, dtype=torch.float64), rtol=0, atol=1e-12)


# -- simplex properties (hypothesis) --------------------------------------------------------------

rows = st.lists(
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=1, max_size=24
)


@settings(max_examples=150, deadline=None)
@given(values=rows, name=st.sampled_from(["softmax", "entmax15", "sparsemax", "hard"]))
def test_rows_on_simplex_and_argmax_kept(values: list[float], name: str) -> None:
    z = torch.tensor(values, dtype=torch.float64)
    p = A.get_mapping(name)(z)
    assert bool((p >= 0).all())
    assert bool(torch.isfinite(p).all())
    assert abs(float(p.sum()) - 1.0) < 1e-9
    assert float(p[int(z.argmax())]) == float(p.max())  # the best score gets the most mass


@settings(max_examples=200, deadline=None)
@given(
    values=rows.filter(lambda v: len(v) >= 2),
    gap=st.floats(0.0, 4.0),
    name=st.sampled_from(list(SPARSE)),
)
def test_one_hot_iff_gap(values: list[float], gap: float, name: str) -> None:
    """entmax-1.5 is one-hot iff the top-two gap of z is >= 2; sparsemax iff it is >= 1."""
    z = torch.tensor(values, dtype=torch.float64)
    z[0] = z[1:].max() + gap  # row maximum at index 0, top-two gap ~ gap
    top2 = torch.topk(z, 2).values
    actual_gap = float(top2[0] - top2[1])
    threshold = ONE_HOT_GAP[name]
    assume(abs(actual_gap - threshold) > 1e-9 or actual_gap == threshold)
    p = SPARSE[name][0](z)
    one_hot = float(p[0]) == 1.0 and int((p > 0).sum()) == 1
    assert one_hot == (actual_gap >= threshold)
    if one_hot:
        assert torch.equal(p, M.hardmax(z))


@settings(max_examples=60, deadline=None)
@given(values=rows.filter(lambda v: len(v) >= 2), name=st.sampled_from(list(SPARSE)))
def test_matches_entmax_package_hypothesis(values: list[float], name: str) -> None:
    ours, ref = SPARSE[name]
    z = torch.tensor([values], dtype=torch.float64)
    torch.testing.assert_close(ours(z), ref(z, dim=-1), rtol=0, atol=1e-9)


# -- extreme temperatures -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("T", [1e-8, 1e-12])
def test_cold_float32_exactly_one_hot(name: str, T: float) -> None:
    """At T = 1e-8 (z ~ 1e8) and 1e-12 (z ~ 1e12) float32 rows are finite and sum to exactly 1;
    entmax-1.5 and sparsemax are exactly the one-hot argmax."""
    g = torch.Generator().manual_seed(0)
    D = torch.rand(500, 64, generator=g) + 0.5  # distances, all distinct in float32
    z = -D / (2 * T)
    assert z.dtype == torch.float32
    assert float(z.abs().min()) >= 2e7
    p = A.get_mapping(name)(z)
    assert bool(torch.isfinite(p).all())
    assert bool((p.sum(-1) == 1).all())
    assert torch.equal(p.argmax(-1), D.argmin(-1))
    if name != "softmax":
        assert torch.equal(p, M.hardmax(z))


@pytest.mark.parametrize("name", SPARSE)
def test_cold_in_place_with_scale(name: str) -> None:
    """The fitting loop's form: distances overwritten in place with scale = -1/(2T), T = 1e-8."""
    D = torch.rand(300, 32, generator=torch.Generator().manual_seed(1)) + 0.5
    R = INPLACE[name](D.clone(), scale=-1 / (2 * 1e-8))
    assert torch.equal(R, torch.nn.functional.one_hot(D.argmin(-1), 32).float())


# -- special values -----------------------------------------------------------------------------

INF = float("inf")


@pytest.mark.parametrize("name", ["softmax", "entmax15", "sparsemax"])
def test_minus_inf_is_padding(name: str) -> None:
    fn = A.get_mapping(name)
    z = scores(4, (10, 6), 1.0)
    padded = torch.cat([z[:, :2], torch.full((10, 3), -INF, dtype=z.dtype), z[:, 2:]], dim=1)
    p = fn(padded)
    assert bool((p[:, 2:5] == 0).all())
    torch.testing.assert_close(torch.cat([p[:, :2], p[:, 5:]], dim=1), fn(z), rtol=0, atol=1e-12)
    if name != "softmax":
        x = padded.clone().requires_grad_()
        (dz,) = torch.autograd.grad(fn(x), x, torch.randn_like(x))
        assert bool(torch.isfinite(dz).all())
        assert bool((dz[:, 2:5] == 0).all())


@pytest.mark.parametrize("name", ["softmax", "entmax15", "sparsemax"])
def test_all_minus_inf_row_is_uniform(name: str) -> None:
    """Documented choice: a row with no finite score has no preference, so it is uniform (the
    limit of equal scores); other rows are untouched, nothing is NaN (gradients included)."""
    fn = A.get_mapping(name)
    z = torch.tensor([[-INF, -INF, -INF, -INF], [0.0, 1.0, -INF, 3.0]])
    p = fn(z)
    torch.testing.assert_close(p[0], torch.full((4,), 0.25), rtol=0, atol=1e-6)
    torch.testing.assert_close(p[1], fn(z[1:])[0])
    x = z.clone().requires_grad_()
    (dz,) = torch.autograd.grad(fn(x), x, torch.randn(2, 4))
    assert bool(torch.isfinite(dz).all())


@pytest.mark.parametrize("name", ["softmax", "entmax15", "sparsemax"])
def test_plus_inf_and_nan(name: str) -> None:
    """+inf entries share the mass evenly; NaN propagates to its own row only."""
    fn = A.get_mapping(name)
    z = torch.tensor(
        [[1.0, INF, 2.0, INF], [0.0, INF, -INF, 5.0], [float("nan"), 1.0, 2.0, 3.0], [0, 1, 2, 3]]
    )
    p = fn(z)
    torch.testing.assert_close(p[0], torch.tensor([0.0, 0.5, 0.0, 0.5]), rtol=0, atol=1e-6)
    assert torch.equal(p[1], torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert bool(p[2].isnan().all())
    torch.testing.assert_close(p[3], fn(z[3]))
    if name == "softmax":
        return
    flipped = INPLACE[name](torch.tensor([[1.0, -INF, 2.0, 0.0], [INF, INF, INF, INF]]), -1.0)
    torch.testing.assert_close(flipped, torch.tensor([[0.0, 1, 0, 0], [0.25, 0.25, 0.25, 0.25]]))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_float32(name: str, dtype: torch.dtype) -> None:
    fn = A.get_mapping(name)
    z32 = scores(6, (200, 16), 3.0, torch.float32)
    for z in (z32.to(dtype), (z32 * 1e4).to(dtype), torch.full((3, 16), -INF, dtype=dtype)):
        p = fn(z)
        assert p.dtype == dtype
        assert not bool(p.isnan().any())
        torch.testing.assert_close(p.float().sum(-1), torch.ones(len(z)), rtol=0, atol=2e-2)
        torch.testing.assert_close(p, fn(z.float()).to(dtype), rtol=0, atol=0)
    x = z32.to(dtype).requires_grad_()
    if name in SPARSE or name == "softmax":
        (dz,) = torch.autograd.grad(fn(x).float().sum(), x)
        assert dz.dtype == dtype
        assert not bool(dz.isnan().any())


def test_hardmax_ties_to_lowest_index() -> None:
    z = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -1.0, -2.0, -1.0]])
    expected = torch.tensor([[0.0, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]])
    assert torch.equal(M.hardmax(z), expected)
    assert torch.equal(M.hardmax(z.T, dim=0), expected.T)


@pytest.mark.parametrize("name", SPARSE)
def test_small_and_empty_shapes(name: str) -> None:
    fn = SPARSE[name][0]
    assert torch.equal(fn(torch.tensor([[3.0], [-2.0]])), torch.ones(2, 1))  # k = 1
    assert fn(torch.empty(0, 5)).shape == (0, 5)  # no rows
    with pytest.raises(ValueError, match=r"at least one entry along dim=1"):
        fn(torch.empty(3, 0))


# -- in-place variants ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1.0, -1.0, 0.5, -0.37, 25.0])
def test_in_place_equals_out_of_place(name: str, dtype: torch.dtype, scale: float) -> None:
    ours = SPARSE[name][0]
    z = scores(8, (3, 50, 12), 1.0, dtype)
    buf = z.clone()
    out = INPLACE[name](buf, scale=scale)
    assert out is buf
    expected = ours(z * scale)
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    torch.testing.assert_close(out, expected, rtol=0, atol=tol)


@pytest.mark.parametrize("name", SPARSE)
def test_in_place_rejects_bad_buffers(name: str) -> None:
    fn = INPLACE[name]
    with pytest.raises(TypeError, match="z must be float32 or float64"):
        fn(torch.zeros(3, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="z must be a contiguous tensor"):
        fn(torch.zeros(4, 3).T)
    with pytest.raises(ValueError, match="z must not require grad"):
        fn(torch.zeros(3, 4, requires_grad=True))
    with pytest.raises(ValueError, match=r"scale must be finite and non-zero; got 0"):
        fn(torch.zeros(3, 4), scale=0)
    with pytest.raises(TypeError, match="scale must be a real number; got str"):
        fn(torch.zeros(3, 4), scale="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"z must be a torch\.Tensor; got ndarray"):
        fn(np.zeros((3, 4)))  # type: ignore[arg-type]


# -- bad input ----------------------------------------------------------------------------------


def test_get_mapping_names_parameter_and_value() -> None:
    assert A.get_mapping("entmax15") is rk.entmax15
    assert set(A.ASSIGNMENTS) == {"softmax", "entmax15", "sparsemax", "hard"}
    with pytest.raises(ValueError, match=r"name must be one of .*'entmax15'.*; got 'entmax'"):
        A.get_mapping("entmax")
    with pytest.raises(ValueError, match=r"name must be one of .*; got 3"):
        A.get_mapping(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ALL)
def test_dim_errors(name: str) -> None:
    fn = A.get_mapping(name)
    z = torch.zeros(3, 4)
    for dim in (2, -3, 5):
        with pytest.raises(ValueError, match=rf"dim={dim} is out of range .* shape \(3, 4\)"):
            fn(z, dim)
    with pytest.raises(TypeError, match=r"dim must be an int; got float 1.0"):
        fn(z, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"z must be a torch\.Tensor; got list"):
        fn([[1.0, 2.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"out of range for a tensor of shape \(\)"):
        fn(torch.tensor(1.0))
