"""sq_distances against a direct ``sum_k (x_ik - c_jk)^2`` in float64, chunking, clamp, autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rbfkmeans as rk
from rbfkmeans import distances as dist_mod
from rbfkmeans.distances import shifted_scores, sq_distances


def direct_sq_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Reference: ``d_ij = sum_k (x_ik - c_jk)^2`` by broadcasting, in float64 (no expansion)."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    return ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=-1)  # (n, k)


def rounding_bound(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Cancellation error allowed by the expansion: a few ulps of ``||x||^2 + ||c||^2``."""
    eps = torch.finfo(X.dtype).eps
    d = X.shape[1]
    X64, C64 = X.double(), C.double()
    scale = (X64 * X64).sum(1)[:, None] + (C64 * C64).sum(1)[None, :]  # (n, k)
    return 4 * (d + 2) * eps * scale + 1e-300


def random_problem(seed: int, n: int, k: int, d: int, dtype: torch.dtype, scale: float = 3.0):
    g = torch.Generator().manual_seed(seed)
    X = (torch.randn(n, d, generator=g, dtype=torch.float64) * scale + 1.0).to(dtype)
    C = (torch.randn(k, d, generator=g, dtype=torch.float64) * scale - 0.5).to(dtype)
    return X, C


# -- values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "k", "d"), [(1, 1, 1), (7, 3, 2), (50, 9, 5), (33, 16, 32)])
def test_matches_direct_reference(dtype: torch.dtype, n: int, k: int, d: int) -> None:
    X, C = random_problem(n * 100 + k, n, k, d, dtype)
    D = sq_distances(X, C)
    assert D.shape == (n, k)
    assert D.dtype == dtype
    ref = torch.from_numpy(direct_sq_distances(X.double().numpy(), C.double().numpy()))
    err = (D.double() - ref).abs()
    assert (err <= rounding_bound(X, C)).all(), err.max()
    if dtype == torch.float64:
        torch.testing.assert_close(D, ref, rtol=1e-12, atol=1e-12)


def test_interview_example() -> None:
    X = torch.tensor([[1.0, 2.0]])
    C = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
    assert sq_distances(X, C).tolist() == [[5.0, 1.0]]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 40),
    k=st.integers(1, 8),
    d=st.integers(1, 6),
    chunk=st.integers(1, 45),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_chunked_equals_unchunked(seed, n, k, d, chunk, dtype) -> None:
    X, C = random_problem(seed, n, k, d, dtype)
    full = sq_distances(X, C)
    chunked = sq_distances(X, C, chunk_size=chunk)
    assert chunked.shape == full.shape
    # the rows of a matrix product do not depend on the other rows, up to kernel blocking
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(chunked, full, rtol=tol, atol=tol * float(full.abs().max() + 1))


def test_default_chunking_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a small element budget the default path splits rows; the answer does not change."""
    X, C = random_problem(0, 700, 8, 3, torch.float64)
    full = sq_distances(X, C)
    monkeypatch.setattr(dist_mod, "DEFAULT_CHUNK_ELEMENTS", 256 * 8)
    assert dist_mod.chunk_rows(700, 8) == 256
    chunked = sq_distances(X, C)
    torch.testing.assert_close(chunked, full, rtol=1e-12, atol=1e-12)


def test_chunked_equals_whole() -> None:
    X, C = random_problem(1, 20, 4, 3, torch.float64)
    D = sq_distances(X, C)
    D2 = sq_distances(X, C, chunk_size=6)
    torch.testing.assert_close(D2, D, rtol=1e-12, atol=1e-12)


def test_iter_chunks_cover_rows() -> None:
    slices = list(dist_mod.iter_chunks(10, 3))
    assert [(s.start, s.stop) for s in slices] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert list(dist_mod.iter_chunks(0, 3)) == []


# -- the clamp -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_coinciding_points_are_zero_up_to_rounding(dtype: torch.dtype) -> None:
    """x_i == c_j: the expansion cancels to within rounding of ||x||^2, never below 0.

    The clamp removes negative residuals; positive ones of a few ulps of ||x||^2 remain (the
    matrix product and the row norms sum in different orders), so the bound is checked, with
    exactly 0 in the cases the arithmetic makes exact.
    """
    C = random_problem(3, 1, 12, 6, dtype, scale=50.0)[1]
    D = sq_distances(C, C)
    diag = D.diagonal()
    assert (diag >= 0).all()
    assert (diag <= rounding_bound(C, C).diagonal().to(dtype)).all()
    # a point with integer coordinates: every product and sum is exact -> exactly 0
    Xi = torch.tensor([[3.0, -4.0, 12.0]], dtype=dtype)
    assert sq_distances(Xi, Xi).item() == 0.0
    # the interview point against itself and its neighbour
    x = torch.tensor([[1.0, 2.0]], dtype=dtype)
    assert sq_distances(x, torch.cat([x, x + 1])).tolist() == [[0.0, 2.0]]


def test_clamp_is_applied_and_the_expansion_is_taken_about_the_centroids() -> None:
    """Points far from the origin: the plain expansion about 0 cancels to garbage (negative
    entries, errors of the size of eps ||x||^2); the expansion about the centroids' mean is
    non-negative and accurate to eps times the spread, against a float64 direct difference."""
    g = torch.Generator().manual_seed(7)
    C = torch.randn(200, 16, generator=g) * 100 + 3000  # float32, far from 0: big cancellation
    raw = dist_mod.cross_term(C, C) + dist_mod.row_norms_sq(C)[:, None]  # (k, k) about 0
    assert (raw.diagonal() < 0).any(), "test data should exercise the cancellation"
    D = sq_distances(C, C)
    assert (D >= 0).all()
    ref = torch.from_numpy(direct_sq_distances(C.double().numpy(), C.double().numpy()))
    eps = torch.finfo(torch.float32).eps
    spread = float(((C.double() - C.double().mean(0)) ** 2).sum(1).max())
    err_ours = float((D.double() - ref).abs().max())
    err_raw = float((raw.double() - ref).abs().max())
    assert err_ours <= 8 * eps * spread
    assert err_raw > 10 * err_ours


@pytest.mark.parametrize(("dtype", "offset"), [
    (torch.float32, 2e3), (torch.float32, 1e4),  # float32 holds the points to ~1e-3 there
    (torch.float64, 2e3), (torch.float64, 1e4), (torch.float64, 1e8),
])
def test_distances_do_not_depend_on_the_offset(dtype: torch.dtype, offset: float) -> None:
    """Translating points and centroids together leaves the distances as they were (to eps times
    the spread), however far from the origin."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(300, 5, generator=g, dtype=torch.float64) * 0.5
    C = torch.randn(7, 5, generator=g, dtype=torch.float64) * 0.5
    Xs, Cs = (X + offset).to(dtype), (C + offset).to(dtype)
    ref = torch.from_numpy(direct_sq_distances(Xs.double().numpy(), Cs.double().numpy()))
    D = sq_distances(Xs, Cs)
    eps = torch.finfo(dtype).eps
    assert float((D.double() - ref).abs().max()) <= 64 * eps * 10.0  # spread ~ 10 here
    assert torch.equal(D.argmin(1), ref.argmin(1))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    offset=st.sampled_from([0.0, 1.0, 1e3, -1e4]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_never_negative_with_duplicates(seed: int, offset: float, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(5, 4, generator=g, dtype=torch.float64) + offset
    idx = torch.randint(0, 5, (30,), generator=g)
    noise = torch.randn(30, 4, generator=g, dtype=torch.float64) * 1e-7
    noise[::2] = 0  # half the points coincide exactly with a centroid
    X = (C[idx] + noise).to(dtype)
    C = C.to(dtype)
    D = sq_distances(X, C, chunk_size=7)
    assert torch.isfinite(D).all()
    assert (D >= 0).all()
    same = torch.arange(0, 30, 2)  # the exact coincidences
    assert (D[same, idx[same]] <= rounding_bound(X, C)[same, idx[same]]).all()


# -- dtypes, inputs untouched ----------------------------------------------------------------------


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_float32(low: torch.dtype) -> None:
    X, C = random_problem(4, 10, 3, 4, torch.float32)
    Xl, Cl = X.to(low), C.to(low)
    D = sq_distances(Xl, Cl)
    assert D.dtype == torch.float32
    ref = sq_distances(Xl.float(), Cl.float())
    torch.testing.assert_close(D, ref)


def test_mixed_dtypes_promote() -> None:
    X, C = random_problem(5, 6, 3, 2, torch.float64)
    D = sq_distances(X.float(), C)
    assert D.dtype == torch.float64
    ref = direct_sq_distances(X.float().double().numpy(), C.numpy())
    np.testing.assert_allclose(D.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_inputs_not_modified() -> None:
    X, C = random_problem(6, 9, 4, 3, torch.float32)
    X0, C0 = X.clone(), C.clone()
    sq_distances(X, C, chunk_size=4)
    sq_distances(X, C)
    for a, b in [(X, X0), (C, C0)]:
        assert torch.equal(a, b)


# -- autograd --------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_gradcheck(chunk_size: int | None) -> None:
    X, C = random_problem(8, 7, 4, 3, torch.float64)  # generic points: no zero distance
    X.requires_grad_(True)
    C.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: sq_distances(a, b, chunk_size=chunk_size), (X, C))
    assert torch.autograd.gradgradcheck(lambda a, b: sq_distances(a, b), (X, C))


def test_gradient_matches_closed_form() -> None:
    """d/dC of sum_ij G_ij d_ij = sum_i G_ij 2 (c_j - x_i); d/dX = sum_j G_ij 2 (x_i - c_j)."""
    X, C = random_problem(9, 6, 3, 2, torch.float64)
    G = torch.rand(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    X.requires_grad_(True)
    C.requires_grad_(True)
    (sq_distances(X, C) * G).sum().backward()
    Xd, Cd = X.detach(), C.detach()
    gC = 2 * (G.sum(0)[:, None] * Cd - G.T @ Xd)
    gX = 2 * (G.sum(1)[:, None] * Xd - G @ Cd)
    torch.testing.assert_close(C.grad, gC, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(X.grad, gX, rtol=1e-12, atol=1e-12)


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("X", "C", "kwargs", "exc", "words"),
    [
        (torch.zeros(4, 3), torch.zeros(2, 2), {}, ValueError, ["X", "3", "C", "2", "features"]),
        (torch.zeros(4), torch.zeros(2, 4), {}, ValueError, ["X", "2-D", "(4,)"]),
        (torch.zeros(4, 2), torch.zeros(1, 2, 2), {}, ValueError, ["C", "2-D", "(1, 2, 2)"]),
        (np.zeros((4, 2)), torch.zeros(2, 2), {}, TypeError, ["X", "ndarray"]),
        (torch.zeros(4, 2), [[0.0, 0.0]], {}, TypeError, ["C", "list"]),
        (torch.zeros(4, 2), torch.zeros(2, 2), {"chunk_size": 0}, ValueError, ["chunk_size", "0"]),
        (
            torch.zeros(4, 2),
            torch.zeros(2, 2),
            {"chunk_size": 2.5},
            TypeError,
            ["chunk_size", "2.5"],
        ),
        (
            torch.zeros(4, 2),
            torch.zeros(2, 2),
            {"chunk_size": True},
            TypeError,
            ["chunk_size", "True"],
        ),
    ],
)
def test_bad_input(X, C, kwargs, exc, words) -> None:
    with pytest.raises(exc) as info:
        sq_distances(X, C, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_numpy_integer_chunk_size_accepted() -> None:
    X, C = random_problem(10, 5, 2, 2, torch.float64)
    torch.testing.assert_close(sq_distances(X, C, chunk_size=np.int64(2)), sq_distances(X, C))


# -- shifted scores --------------------------------------------------------------------------------


def test_shifted_scores() -> None:
    D = torch.tensor([[5.0, 1.0], [2.0, 2.0]])
    out = shifted_scores(D, 0.5)
    assert out is not None
    z, D_min = out
    assert z.tolist() == [[-4.0, 0.0], [0.0, 0.0]]
    assert D_min.tolist() == [[1.0], [2.0]]
    # tiny T: finite, the nearest centroid at 0, the others -inf at worst
    z_tiny = shifted_scores(torch.tensor([[1e30, 3.0]]), 1e-30)
    assert z_tiny is not None
    assert z_tiny[0][0, 1] == 0
    assert z_tiny[0][0, 0] == -torch.inf
    # 2T below float32's smallest subnormal: the hard limit
    assert shifted_scores(D, 1e-46) is None
    assert shifted_scores(D.double(), 1e-46) is not None


def test_public_name() -> None:
    assert rk.sq_distances is sq_distances


# -- row_min: the packed-key row minimum equals torch.min ----------------------------------------


def _assert_row_min_equals_torch(G: torch.Tensor) -> None:
    ref_values, ref_idx = G.min(dim=1)
    before = G.clone()
    for overwrite in (False, True):
        values, idx = dist_mod.row_min(G.clone(), overwrite=overwrite)
        assert torch.equal(idx, ref_idx)
        assert torch.equal(values, ref_values)
        assert idx.dtype == torch.long
    values, idx = dist_mod.row_min(G)
    assert torch.equal(G, before)  # not overwritten by default


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    k=st.integers(dist_mod.PACKED_MIN_COLUMNS, dist_mod.PACKED_MAX_COLUMNS + 64),
    levels=st.integers(1, 6),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e6]),
    seed=st.integers(0, 2**31 - 1),
)
def test_row_min_equals_torch_min_with_ties(n, k, levels, scale, seed):
    # few distinct values per row: ties at the minimum everywhere, signs mixed
    g = torch.Generator().manual_seed(seed)
    G = torch.randint(-levels, levels + 1, (n, k), generator=g).to(torch.float32) * scale
    G += torch.randn(n, k, generator=g) * scale * (seed % 2)  # half the cases untied
    _assert_row_min_equals_torch(G)


def test_row_min_edge_values():
    k = 64
    G = torch.randn(6, k)
    G[0] = 0.0  # all tied at zero
    G[1] = -0.0
    G[1, 40] = 0.0  # -0 and +0 compare equal: the first index wins
    G[2, 10] = torch.finfo(torch.float32).tiny * 2**-20  # a subnormal minimum
    G[2, 3] = G[2, 10]
    G[3] = torch.finfo(torch.float32).max / 4
    G[3, 60] = -torch.finfo(torch.float32).max / 4
    G[4, :] = 1.0
    G[4, 5] = 1.0 - 2**-24 * 2  # one ulp below: the minimum by the smallest margin
    G[5, 33] = G[5].min() - 1e-7
    _assert_row_min_equals_torch(G)


def test_row_min_near_ties_take_the_fallback():
    # differences below the 2^b subnormal units the packed key drops: the packed winner is
    # column 0 (lowest index among equal keys), not the minimum, so only the fallback is right
    G = torch.zeros(3, 40)
    G[:, 1:] = 1e-44  # subnormals a few units above the true minimum at column 0 ...
    G[:, 0] = 0.0
    G[:, 2] = -1e-44  # ... and a smaller one at column 2
    _assert_row_min_equals_torch(G)


@pytest.mark.parametrize(("dtype", "k"), [(torch.float64, 64), (torch.float32, 8),
                                          (torch.float32, dist_mod.PACKED_MAX_COLUMNS)])
def test_row_min_other_inputs_use_torch_min(dtype, k):
    G = torch.randn(50, k, dtype=dtype)
    G[:, 3] = G.min(dim=1).values
    _assert_row_min_equals_torch(G)


def test_chunked_gradients_equal_the_whole_and_stay_linear_in_the_chunks() -> None:
    """Chunks are ``X.split`` pieces: their backward joins the pieces' gradients once (a
    slice's backward would add a zero-padded (n, d) gradient per chunk)."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(300, 5, dtype=torch.float64, generator=g, requires_grad=True)
    C = torch.randn(4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    W = torch.randn(300, 4, dtype=torch.float64, generator=g)
    whole = torch.autograd.grad((sq_distances(X, C) * W).sum(), (X, C))
    D = sq_distances(X, C, chunk_size=7)
    chunked = torch.autograd.grad((D * W).sum(), (X, C))
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b)
    names: set[str] = set()
    seen: set[int] = set()
    todo = [D.grad_fn]
    while todo:  # every node of the backward graph, once
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(node.name())
        todo += [f for f, _ in node.next_functions]
    assert any("Split" in name for name in names)
    assert not any(name.startswith("SliceBackward") for name in names)


def test_chunk_rows_takes_a_larger_budget_off_the_cpu() -> None:
    assert dist_mod.chunk_rows(10**6, 1152) == dist_mod.DEFAULT_CHUNK_ELEMENTS // 1152
    assert dist_mod.chunk_rows(10**6, 1152, device=torch.device("cpu")) == \
        dist_mod.DEFAULT_CHUNK_ELEMENTS // 1152
    assert dist_mod.chunk_rows(10**6, 1152, device="meta") == \
        dist_mod.DEVICE_CHUNK_ELEMENTS // 1152
    assert dist_mod.chunk_rows(10**6, 1152, 77, device="meta") == 77  # an explicit size wins


# -- row_dots: wide float32 rows summed in float64 -----------------------------------------------


@pytest.mark.parametrize("d", [dist_mod.WIDE_DOTS + 1, 20_000, 300_000])
def test_wide_float32_row_dots_are_summed_by_blocks(d: int) -> None:
    # a float32 chain of 300,000 products is 8e-5 off; the blocked reduction about 1e-7
    g = torch.Generator().manual_seed(d)
    A = torch.randn(9, d, generator=g) + 0.5
    B = torch.randn(9, d, generator=g) + 0.5
    for got, ref in ((dist_mod.row_dots(A, B), (A.double() * B.double()).sum(1)),
                     (dist_mod.row_norms_sq(A), A.double().square().sum(1))):
        assert got.dtype == torch.float32
        assert torch.allclose(got.double(), ref, rtol=5e-7, atol=0.0)


def test_row_dots_up_to_the_width_and_in_float64_are_einsum() -> None:
    g = torch.Generator().manual_seed(1)
    for dtype, d in ((torch.float32, dist_mod.WIDE_DOTS), (torch.float64, 5_000)):
        A = torch.randn(33, d, generator=g, dtype=dtype)
        B = torch.randn(33, d, generator=g, dtype=dtype)
        assert torch.equal(dist_mod.row_dots(A, B), torch.einsum("nd,nd->n", A, B))


def test_wide_row_dots_chunk_rows_and_keep_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist_mod, "WIDE_DOTS_COPY", 3 * 2_000 + 1)  # three rows a chunk
    g = torch.Generator().manual_seed(2)
    A = torch.randn(8, 2_000, generator=g, requires_grad=True)
    B = torch.randn(8, 2_000, generator=g)
    P = torch.nn.Parameter(torch.randn(8, 2_000, generator=g))  # a layer's centroids
    out = dist_mod.row_dots(A, B)
    assert torch.allclose(out.double(), (A.double() * B.double()).sum(1), rtol=5e-7, atol=0.0)
    out.sum().backward()
    assert torch.equal(A.grad, B)
    assert torch.allclose(dist_mod.row_norms_sq(P).double(), P.double().square().sum(1),
                          rtol=5e-7, atol=0.0)
    assert dist_mod.row_dots(A[:0], B[:0]).shape == (0,)


def test_wide_float32_distances_and_fit_inertia_against_float64() -> None:
    # 6 rows of 300,000 features: the expansion's norms were 1.7% off the distances of
    # centroids near the rows, and a fit's inertia_ 1.7e-4 below the float64 value. The
    # products' own float32 rounding over 300,000 terms depends on the BLAS kernel (up to
    # 2.0e-4 relative with MKL on AVX-512, less elsewhere): within 1e-3, 17x below the fault
    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 300_000, generator=g)
    C = X[:3] + 0.1 * torch.randn(3, 300_000, generator=g)
    ref = torch.cdist(X.double(), C.double()).square()
    assert torch.allclose(sq_distances(X, C).double(), ref, rtol=1e-3, atol=0.0)
    fit = rk.RBFKMeans(2, random_state=0).fit(X.numpy())
    X64, C64 = X.double().numpy(), fit.cluster_centers_.astype(np.float64)
    J = sum(float(((X64[i] - C64[fit.labels_[i]]) ** 2).sum()) for i in range(6))
    assert fit.inertia_ == pytest.approx(J, rel=1e-6)
    assert -fit.score(X.numpy()) == pytest.approx(J, rel=1e-6)


def test_no_features_gives_zero_distances() -> None:
    """With ``d = 0`` every point coincides with every centroid: ``D = 0`` (n, k), and the
    objectives built on it are those of zero distances (``J = 0``, ``F_T = -2T n log k``)."""
    X, C = torch.zeros(4, 0, dtype=torch.float64), torch.zeros(3, 0, dtype=torch.float64)
    assert torch.equal(sq_distances(X, C), torch.zeros(4, 3, dtype=torch.float64))
    assert rk.kmeans_objective(X, C).item() == 0.0
    torch.testing.assert_close(rk.shannon_objective(X, C, 0.5),
                               torch.tensor(-2 * 0.5 * 4 * np.log(3), dtype=torch.float64))
