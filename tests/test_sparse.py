"""Sparse input: ``SparseRows`` against dense tensors, and fits of CSR data against the same fits
of the densified data.

References: every operation of :class:`rbfkmeans.sparse.SparseRows` against the same operation
on ``to_dense()`` (computed by SciPy/NumPy where it is an independent computation); the spread
and principal subspace against ``numpy.linalg.eigh`` of the dense covariance; every fit, its
labels (up to a renumbering), centroids, ``J``, ``predict``, ``transform``, ``predict_proba``
and ``score`` against the estimator on ``X.toarray()``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.metrics import adjusted_rand_score

from rbfkmeans import RBFKMeans
from rbfkmeans.frame import Frame
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data, nearest
from rbfkmeans.sparse import SparseRows, dense, is_sparse
from rbfkmeans.spread import sparse_spread
from rbfkmeans.stats import cluster_stats
from rbfkmeans.subspace import principal_subspace


def random_csr(n: int, d: int, density: float, seed: int, dtype: type = np.float64
               ) -> sp.csr_array:
    return sp.random_array((n, d), density=density, format="csr", dtype=dtype, rng=seed)


def clustered_csr(n: int = 900, d: int = 400, k: int = 5, seed: int = 0,
                  dtype: type = np.float64) -> tuple[sp.csr_array, np.ndarray]:
    """Rows drawn around ``k`` sparse centres (each on its own block of columns) plus sparse
    noise: ``k`` well-separated clusters, every row non-zero."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, k, n)
    block = d // k
    rows, cols, vals = [], [], []
    for i, c in enumerate(y):
        on = rng.choice(block, size=max(3, block // 5), replace=False) + c * block
        rows += [i] * on.size
        cols += on.tolist()
        vals += (1.0 + rng.rand(on.size)).tolist()
    X = sp.csr_array((vals, (rows, cols)), shape=(n, d), dtype=dtype)
    return sp.csr_array(X + random_csr(n, d, 0.01, seed + 1, dtype) * 0.3), y


def rows_of(A: sp.csr_array, dtype: torch.dtype = torch.float64) -> SparseRows:
    return SparseRows.from_scipy(A, dtype)


def matched_max_diff(A: np.ndarray, B: np.ndarray) -> float:
    """Largest entry of ``|A - B|`` after the best matching of the rows of ``A`` to ``B``."""
    r, c = linear_sum_assignment(cdist(A, B))
    return float(np.abs(A[r] - B[c]).max())


# -- SparseRows against dense tensors -----------------------------------------------------------

shapes = st.tuples(st.integers(1, 30), st.integers(1, 25), st.floats(0.0, 1.0),
                   st.integers(0, 10_000))


@settings(max_examples=60, deadline=None)
@given(shapes)
def test_rows_equal_the_dense_rows(shape: tuple[int, int, float, int]) -> None:
    n, d, density, seed = shape
    A = random_csr(n, d, density, seed)
    X, D = rows_of(A), torch.from_numpy(A.toarray())
    rng = np.random.RandomState(seed)
    torch.testing.assert_close(X.to_dense(), D, rtol=0, atol=0)
    lo, hi = int(rng.randint(0, n + 1)), int(rng.randint(0, n + 1))
    torch.testing.assert_close(X[lo:hi].to_dense(), D[lo:hi], rtol=0, atol=0)
    idx = rng.randint(-n, n, size=rng.randint(0, 2 * n + 1))
    torch.testing.assert_close(X[torch.from_numpy(idx)].to_dense(), D[idx], rtol=0, atol=0)
    mask = rng.rand(n) < 0.5
    torch.testing.assert_close(X[torch.from_numpy(mask)].to_dense(), D[mask], rtol=0, atol=0)
    i = int(rng.randint(-n, n))
    torch.testing.assert_close(X[i], D[i], rtol=0, atol=0)
    torch.testing.assert_close(X[::2].to_dense(), D[::2], rtol=0, atol=0)
    lo_d, hi_d = torch.aminmax(D)
    lo_x, hi_x = torch.aminmax(X)  # type: ignore[call-overload]
    assert (float(lo_x), float(hi_x)) == (float(lo_d), float(hi_d))


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 6))
def test_products_equal_the_dense_products(shape: tuple[int, int, float, int], k: int) -> None:
    n, d, density, seed = shape
    A = random_csr(n, d, density, seed)
    X, D = rows_of(A), torch.from_numpy(A.toarray())
    g = torch.Generator().manual_seed(seed)
    C = torch.randn(k, d, generator=g, dtype=torch.float64)
    R = torch.rand(n, k, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64)
    lab = torch.randint(0, k, (n,), generator=g)
    close = {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(X.mm(C.T), torch.from_numpy(A @ C.numpy().T), **close)
    torch.testing.assert_close(X @ C.T, D @ C.T, **close)  # type: ignore[operator]
    torch.testing.assert_close(w @ X, w @ D, **close)  # type: ignore[operator]
    torch.testing.assert_close(X.tmm(R), D.T @ R, **close)
    C_sq = (C * C).sum(1)
    torch.testing.assert_close(torch.addmm(C_sq.unsqueeze(0), X, C.T, alpha=-2.0),  # type: ignore[arg-type]
                               torch.addmm(C_sq.unsqueeze(0), D, C.T, alpha=-2.0), **close)
    S1, S2 = torch.rand(k, d, dtype=torch.float64, generator=g), None
    S2 = S1.clone()
    S1.addmm_(R.T, X * w.unsqueeze(1))  # type: ignore[arg-type]
    S2.addmm_(R.T, D * w.unsqueeze(1))
    torch.testing.assert_close(S1, S2, **close)
    S1.index_add_(0, lab, X)  # type: ignore[arg-type]
    S2.index_add_(0, lab, D)
    torch.testing.assert_close(S1, S2, **close)
    torch.testing.assert_close(torch.einsum("nd,nd->n", X, X), (D * D).sum(1), **close)  # type: ignore[arg-type]
    torch.testing.assert_close(torch.einsum("nd,nd->n", X, C[lab]), (D * C[lab]).sum(1), **close)  # type: ignore[arg-type]
    torch.testing.assert_close(X.row_dot(C, lab), (D * C[lab]).sum(1), **close)
    torch.testing.assert_close(X.sum(dim=0), D.sum(0), **close)
    torch.testing.assert_close(X.sum(dim=1), D.sum(1), **close)
    torch.testing.assert_close(X.square().sum(dim=1), (D * D).sum(1), **close)
    torch.testing.assert_close(X - C[lab], D - C[lab], **close)  # type: ignore[operator]
    torch.testing.assert_close(X.sq_distances(C), torch.from_numpy(
        cdist(A.toarray(), C.numpy(), "sqeuclidean")), rtol=1e-9, atol=1e-9)


def test_unit_rows_and_zero_rows() -> None:
    A = random_csr(40, 12, 0.4, 3) * 1e-200
    A = sp.csr_array(A + sp.csr_array(np.eye(40, 12)) * 1e-200)
    U = rows_of(A).unit_rows().to_dense().numpy()
    Ad = A.toarray() / 1e-200
    np.testing.assert_allclose(U, Ad / np.linalg.norm(Ad, axis=1, keepdims=True), rtol=1e-12)
    Z = sp.csr_array(np.vstack([np.ones((2, 3)), np.zeros((1, 3))]))
    with pytest.raises(ValueError, match=r"X has a zero row \(row 2"):
        rows_of(Z).unit_rows("X")


def test_other_operations_are_refused_by_name() -> None:
    X = rows_of(random_csr(5, 4, 0.5, 0))
    with pytest.raises(TypeError, match="cdist is not supported on sparse rows"):
        torch.cdist(X, torch.zeros(2, 4))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="einsum 'nd,kd->nk' is not supported"):
        torch.einsum("nd,kd->nk", X, torch.zeros(2, 4))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="slice or a 1-D index"):
        X[torch.zeros(2, 2, dtype=torch.long)]
    Y = rows_of(random_csr(3, 4, 0.5, 1))
    torch.testing.assert_close(torch.cat([X, Y]).to_dense(),  # type: ignore[arg-type]
                               torch.cat([X.to_dense(), Y.to_dense()]))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil", "dok", "bsr", "dia"])
def test_every_format_is_read_and_the_callers_matrix_left_alone(fmt: str) -> None:
    A = random_csr(30, 8, 0.4, 1).asformat(fmt)
    before = A.copy()
    X = SparseRows.from_scipy(A, torch.float32)
    X.mul_(3.0)
    assert X.dtype == torch.float32
    np.testing.assert_allclose(X.to_dense().numpy(), 3.0 * A.toarray(), rtol=1e-6)
    assert (before != A).nnz == 0


# -- the spread, the subspace and the frame ----------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("tangent", [False, True])
def test_spread_equals_the_dense_covariance(weighted: bool, tangent: bool) -> None:
    A = random_csr(300, 40, 0.2, 5)
    D = A.toarray()
    w = np.random.RandomState(0).rand(300) if weighted else np.ones(300)
    mu = w @ D / w.sum()
    cov = ((D - mu).T * w) @ (D - mu) / w.sum()
    if tangent:
        u = mu / np.linalg.norm(mu)
        P = np.eye(40) - np.outer(u, u)
        top = np.linalg.eigvalsh(P @ cov @ P).max()
    else:
        top = np.linalg.eigvalsh(cov).max()
    mean_var, lam, mu_s = sparse_spread(rows_of(A), torch.from_numpy(w) if weighted else None,
                                        tangent=tangent)
    assert mean_var == pytest.approx(np.trace(cov) / 40, rel=1e-10)
    assert lam == pytest.approx(top, rel=1e-6)
    np.testing.assert_allclose(mu_s.numpy(), mu, rtol=1e-10, atol=1e-14)


def reference_subspace(D: np.ndarray) -> tuple[np.ndarray, float]:
    """The top principal directions of the rows ``D`` by ``numpy.linalg.eigh`` of their
    covariance, as many as the subspace keeps, and the share of the variance they hold."""
    from rbfkmeans.subspace import MAX_DIM, MIN_DIM, VARIANCE

    Y = D - D.mean(0)
    vals, vecs = np.linalg.eigh(Y.T @ Y / D.shape[0])
    vals, vecs = np.clip(vals[::-1], 0, None), vecs[:, ::-1]
    share = np.cumsum(vals) / vals.sum()
    p = max(MIN_DIM, min(int((share[:MAX_DIM] < VARIANCE).sum()) + 1, MAX_DIM))
    return vecs[:, :p], float(share[p - 1])


@pytest.mark.parametrize("sparse", [True, False])
def test_principal_subspace_spans_the_top_eigenvectors(sparse: bool) -> None:
    """Fewer rows than features (150 x 300): the Gram matrix, exact."""
    A = random_csr(150, 300, 0.05, 2)
    D = A.toarray()
    V_ref, held = reference_subspace(D)
    X = rows_of(A) if sparse else torch.from_numpy(D)
    space = principal_subspace(Data(X), torch.arange(150))
    p = space.dim
    assert p == V_ref.shape[1]
    V = space.V.numpy()
    np.testing.assert_allclose(V.T @ V, np.eye(p), atol=1e-8)
    # the same span up to the last kept direction (whose neighbour may be near-degenerate)
    P, P_ref = V[:, : p - 1] @ V[:, : p - 1].T, V_ref[:, : p - 1] @ V_ref[:, : p - 1].T
    assert np.abs(P - P_ref).max() < 1e-6
    assert space.held == pytest.approx(held, rel=1e-8)
    np.testing.assert_allclose(space.project(X[:20]).numpy(),
                               (D[:20] - D.mean(0)) @ V, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(700, 300), (400, 900)])
def test_randomised_subspace_holds_the_variance_of_the_top_eigenvectors(
        shape: tuple[int, int]) -> None:
    """Both sides beyond 2 MAX_DIM: the randomised range finder, whose directions hold at
    least 99% of the variance the exact top directions hold (on a flat spectrum, the hard
    case), orthonormal."""
    n, d = shape
    A = random_csr(n, d, 0.05, 3)
    D = A.toarray()
    Y = D - D.mean(0)
    cov = Y.T @ Y / n
    evals = np.linalg.eigvalsh(cov)[::-1]
    space = principal_subspace(Data(rows_of(A)), torch.arange(n))
    V = space.V.numpy()
    p = V.shape[1]
    np.testing.assert_allclose(V.T @ V, np.eye(p), atol=1e-8)
    held = np.trace(V.T @ cov @ V)
    assert held >= 0.99 * evals[:p].sum()
    # the share reported is that of the Ritz values, a lower bound of what they hold
    assert 0.99 * held / evals.sum() <= space.held <= held / evals.sum() + 1e-12


def test_frame_of_sparse_rows_rescales_and_never_shifts() -> None:
    A = sp.csr_array(random_csr(50, 6, 0.5, 0) * 1e30 + sp.csr_array(np.eye(50, 6)) * 1e30)
    frame = Frame.choose(rows_of(A))
    assert frame.shift is None
    assert frame.exponent < 0
    inside = frame.enter(rows_of(A))
    assert is_sparse(inside)
    assert 0.5 <= float(inside.val.abs().max()) < 1.0
    D = torch.from_numpy(A.toarray())
    assert frame.trace == pytest.approx(float(((D - D.mean(0)) ** 2).sum(1).mean()), rel=1e-9)


def test_pass_statistics_equal_the_dense_passes() -> None:
    A, _ = clustered_csr(300, 60, 4)
    w = torch.from_numpy(np.random.RandomState(1).rand(300))
    ds, dd = Data(rows_of(A), w), Data(torch.from_numpy(A.toarray()), w)
    C = torch.from_numpy(A[:4].toarray())
    for T, assignment in [(0.0, "hard"), (0.5, "softmax"), (0.5, "entmax15")]:
        a, b = cluster_stats(ds, C, T, assignment), cluster_stats(dd, C, T, assignment)
        torch.testing.assert_close(a.N, b.N)
        torch.testing.assert_close(a.S, b.S)
        assert a.objective == pytest.approx(b.objective, rel=1e-10)
    torch.testing.assert_close(nearest(ds, C, two=True).dist, nearest(dd, C, two=True).dist)


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_bounded_lloyd_runs_and_their_warm_starts_equal_the_dense_ones(metric: str) -> None:
    """The torch passes with bounds on CSR rows: a run, then a swap trial started from its
    bounds (``warm``), give the labels, iterations and ``J`` of the same runs on dense rows."""
    A, _ = clustered_csr(400, 60, 6)
    ds = Data(rows_of(A), metric=metric)
    dd = Data(torch.from_numpy(A.toarray()), metric=metric)
    C0 = torch.from_numpy(A[:8].toarray())
    a, b = lloyd(ds, C0, bounds=True), lloyd(dd, C0, bounds=True)
    assert torch.equal(a.labels, b.labels)
    assert a.inertia == pytest.approx(b.inertia, rel=1e-9)
    C = a.C.clone()
    C[2] = torch.from_numpy(A[[100]].toarray()[0])
    rows = torch.arange(8)
    rows[2] = -1
    Cb = b.C.clone()
    Cb[2] = C[2]
    a2, b2 = lloyd(ds, C, bounds=True, warm=(a, rows)), lloyd(dd, Cb, bounds=True, warm=(b, rows))
    assert torch.equal(a2.labels, b2.labels)
    assert a2.n_iter == b2.n_iter
    assert a2.inertia == pytest.approx(b2.inertia, rel=1e-9)


# -- the estimator on CSR data against the same fit of the densified data -----------------------

FITS = [
    {}, {"metric": "cosine"}, {"assignment": "hard"}, {"schedule": "geometric"},
    {"assignment": "softmax"}, {"n_init": 2}, {"fit_rows": 500}, {"init": "k-means++"},
    {"schedule": "k-means++", "n_init": 2},
]


@pytest.mark.parametrize("params", FITS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items())
                         or "default")
@pytest.mark.parametrize("weighted", [False, True])
def test_fit_equals_the_fit_of_the_dense_data(params: dict, weighted: bool) -> None:
    A, y = clustered_csr()
    w = np.random.RandomState(2).rand(A.shape[0]) + 0.5 if weighted else None
    a = RBFKMeans(5, random_state=0, **params).fit(A, sample_weight=w)
    b = RBFKMeans(5, random_state=0, **params).fit(A.toarray(), sample_weight=w)
    assert adjusted_rand_score(a.labels_, b.labels_) == 1.0
    if params.get("assignment") != "hard":  # one plain Lloyd run may stop in a local minimum
        assert adjusted_rand_score(a.labels_, y) == 1.0
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-9)
    assert matched_max_diff(a.cluster_centers_, b.cluster_centers_) < 1e-9
    # inference of one fitted model on the sparse and the dense rows
    B = A[::3]
    np.testing.assert_array_equal(a.predict(B), a.predict(B.toarray()))
    np.testing.assert_allclose(a.transform(B), a.transform(B.toarray()), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(a.predict_proba(B), a.predict_proba(B.toarray()), atol=1e-9)
    assert a.score(B) == pytest.approx(a.score(B.toarray()), rel=1e-10)


def test_float32_and_large_fits_take_the_search_subsample_without_densifying(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 rows of 3,000 features: the polish and the swap search on a subsample, then on all
    rows, with Hartigan's moves; no more than a chunk of rows is ever made dense."""
    A, y = clustered_csr(20_000, 3_000, 20, seed=4, dtype=np.float32)
    largest = [0]
    to_dense = SparseRows.to_dense

    def tracked(self: SparseRows) -> torch.Tensor:
        largest[0] = max(largest[0], self.shape[0] * self.shape[1])
        return to_dense(self)

    monkeypatch.setattr(SparseRows, "to_dense", tracked)
    a = RBFKMeans(20, random_state=0).fit(A)
    assert a.cluster_centers_.dtype == np.float32
    assert adjusted_rand_score(a.labels_, y) == 1.0
    assert largest[0] <= (1 << 22)  # at most a few MB, against 60,000,000 entries of X
    monkeypatch.setattr(SparseRows, "to_dense", to_dense)
    b = RBFKMeans(20, random_state=0).fit(A.toarray())
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-5)  # float32 sums in another order


def test_partial_fit_and_fit_batches_equal_dense() -> None:
    # rows that share many columns: no exact ties of cosine 0 between centroids, which rounding
    # would break differently in the two layouts
    A = sp.csr_array(random_csr(400, 30, 0.6, 7) + sp.csr_array(np.eye(400, 30)))
    for metric in ("sqeuclidean", "cosine"):
        a = RBFKMeans(4, random_state=0, metric=metric).partial_fit(A[:200]).partial_fit(A[200:])
        b = RBFKMeans(4, random_state=0, metric=metric).partial_fit(
            A[:200].toarray()).partial_fit(A[200:].toarray())
        np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10,
                                   atol=1e-12)
        for size in (200, 5):  # batches of 5 rows: the seeding keeps and stacks 3 of them
            c = RBFKMeans(4, random_state=0, metric=metric).fit_batches(
                [A[i : i + size] for i in range(0, 400, size)])
            e = RBFKMeans(4, random_state=0, metric=metric).fit_batches(
                [A[i : i + size].toarray() for i in range(0, 400, size)])
            np.testing.assert_allclose(c.cluster_centers_, e.cluster_centers_, rtol=1e-10,
                                       atol=1e-12)


@pytest.mark.filterwarnings("ignore:Constructing a DIA matrix")
@pytest.mark.parametrize("fmt", ["csc", "coo", "lil", "dok", "bsr", "dia"])
def test_estimator_takes_every_format_and_64_bit_indices(fmt: str) -> None:
    A, _ = clustered_csr(200, 50, 3)
    B = A.asformat(fmt)
    before = B.copy()
    a = RBFKMeans(3, random_state=0).fit(B)
    b = RBFKMeans(3, random_state=0).fit(A)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert (before != B).nnz == 0  # the caller's matrix is not modified
    C = sp.csr_array(A)
    C.indices, C.indptr = C.indices.astype(np.int64), C.indptr.astype(np.int64)
    np.testing.assert_array_equal(RBFKMeans(3, random_state=0).fit(C).labels_, b.labels_)
    np.testing.assert_array_equal(a.predict(B), b.labels_)


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_duplicate_entries_fit_as_their_sums_and_stay_in_the_callers_matrix(metric: str) -> None:
    """A CSR matrix that stores an entry as several parts (non-canonical: built from raw
    arrays, or by a library that appends): the fit of its sums, and every method leaves the
    parts as stored. A cosine fit's zero-row check took ``abs(X)``, and scipy sums duplicates
    in place: the caller's matrix lost half its entries."""
    A, _ = clustered_csr(120, 20, 3)
    A = sp.csr_matrix(A)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    order = np.argsort(np.r_[rows, rows], kind="stable")  # each row's parts, then their twins
    data = np.r_[A.data * 0.25, A.data * 0.75][order]
    indices = np.r_[A.indices, A.indices][order]
    ref = RBFKMeans(3, random_state=0, metric=metric).fit(A)
    for method in ("fit", "fit_predict", "partial_fit", "fit_batches", "predict", "transform",
                   "predict_proba", "score"):
        U = sp.csr_matrix((data.copy(), indices.copy(), 2 * A.indptr), shape=A.shape)
        assert not U.has_canonical_format
        est = RBFKMeans(3, random_state=0, metric=metric).fit(A)
        out = getattr(est, method)(U)
        assert U.nnz == 2 * A.nnz
        np.testing.assert_array_equal(U.data, data)
        np.testing.assert_array_equal(U.indices, indices)
        if method == "fit":
            np.testing.assert_array_equal(out.labels_, ref.labels_)
            np.testing.assert_allclose(out.cluster_centers_, ref.cluster_centers_, rtol=1e-12,
                                       atol=1e-12)
        if method == "transform":
            np.testing.assert_allclose(out, ref.transform(A), rtol=1e-12, atol=1e-12)


def test_bad_sparse_input_is_refused_by_name() -> None:
    A = sp.csr_array(random_csr(20, 5, 0.5, 0))
    A.data[3] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        RBFKMeans(2).fit(A)
    Z = sp.csr_array(np.vstack([np.ones((4, 3)), np.zeros((1, 3))]))
    with pytest.raises(ValueError, match=r"X has a zero row \(row 4"):
        RBFKMeans(2, metric="cosine").fit(Z)
    fitted = RBFKMeans(2, random_state=0).fit(np.ones((4, 3)) + np.eye(4, 3))
    with pytest.raises(ValueError, match="X has 2 features"):
        fitted.predict(sp.csr_array(np.ones((3, 2))))


def test_dense_helper() -> None:
    A = random_csr(4, 3, 0.5, 0)
    T = torch.ones(2, 2)
    assert dense(T) is T
    torch.testing.assert_close(dense(rows_of(A)), torch.from_numpy(A.toarray()))


# -- the layer on torch sparse tensors ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "hard"])
def test_layer_on_sparse_rows_equals_dense(layout: str, metric: str, assignment: str) -> None:
    from rbfkmeans import KMeansLayer

    g = torch.Generator().manual_seed(0)
    X = torch.randn(12, 7, generator=g, dtype=torch.float64)
    X[X < 0.4] = 0.0
    X[:, 0] = 1.0  # no zero row
    S = X.to_sparse() if layout == "coo" else X.to_sparse_csr()
    C = torch.randn(4, 7, generator=g, dtype=torch.float64)
    layer = KMeansLayer(C, temperature=0.6, assignment=assignment, metric=metric)
    close = {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(layer(S), layer(X), **close)
    torch.testing.assert_close(layer.distances(S), layer.distances(X), **close)
    torch.testing.assert_close(layer.predict(S), layer.predict(X))
    torch.testing.assert_close(layer.objective(S), layer.objective(X), **close)
    # the gradient reaches the centroids through the sparse-dense product: the dense one
    grads = []
    for rows in (S, X):
        layer.zero_grad()
        layer.objective(rows).backward()
        assert layer.centroids.grad is not None
        grads.append(layer.centroids.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], **close)


def test_layer_refuses_sparse_input_it_cannot_read() -> None:
    from rbfkmeans import KMeansLayer

    layer = KMeansLayer(torch.eye(2, 3, dtype=torch.float64), temperature=1.0, metric="cosine")
    Z = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64).to_sparse()
    with pytest.raises(ValueError, match=r"X has a zero row \(row 1"):
        layer(Z)
    with pytest.raises(ValueError, match="sparse X must be a 2-D"):
        layer(torch.ones(2, 2, 3).to_sparse())


def test_products_off_the_cpu_path_equal_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch.sparse products (taken on other devices) against the SciPy ones, on the CPU."""
    A = random_csr(30, 9, 0.3, 4)
    X = rows_of(A)
    C = torch.randn(4, 9, dtype=torch.float64)
    R = torch.randn(30, 4, dtype=torch.float64)
    want = X.mm(C.T), X.tmm(R)
    monkeypatch.setattr(SparseRows, "device", property(lambda self: torch.device("meta")))
    # with the device reported as another one the torch path runs (the tensors stay on the CPU)
    got = SparseRows.mm(X, C.T), SparseRows.tmm(X, R)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_public_functions_refuse_bad_input_by_name() -> None:
    with pytest.raises(TypeError, match=r"X must be a torch\.Tensor or SparseRows; got NoneType"):
        dense(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="A must be a 2-D SciPy sparse matrix or array; got "
                                        "ndarray"):
        SparseRows.from_scipy(np.ones((2, 2)))
    bad = sp.csr_array(np.array([[1.0, np.nan], [np.inf, 0.0]]))
    with pytest.raises(ValueError, match="A holds 2 NaN or inf entries"):
        SparseRows.from_scipy(bad)
    with pytest.raises(ValueError, match="needs crow"):
        SparseRows(torch.zeros(2, dtype=torch.long), torch.zeros(1, dtype=torch.long),
                   torch.zeros(1), (3, 2))
    with pytest.raises(TypeError, match="crow, col and val must be tensors"):
        SparseRows(None, None, None, (1, 1))  # type: ignore[arg-type]
    X = rows_of(random_csr(5, 3, 0.5, 0))
    with pytest.raises(TypeError, match="X must be SparseRows; got Tensor"):
        sparse_spread(torch.ones(3, 3))  # type: ignore[arg-type]
    for w in (torch.ones(4), -torch.ones(5), torch.full((5,), float("nan")), [1.0] * 5):
        with pytest.raises(ValueError, match=r"w must be a finite non-negative tensor of shape "
                                             r"\(5,\)"):
            sparse_spread(X, w)  # type: ignore[arg-type]
    assert not is_sparse(torch.ones(2))
    assert is_sparse(X)


@pytest.mark.parametrize("shape", [(50, 10), (300, 500)])
def test_constant_sparse_data_fits_as_dense(shape: tuple[int, int]) -> None:
    """No spread at all (every entry zero, some stored): every centroid at the origin, J = 0,
    as for the dense zeros (no eigenproblem on a zero operator)."""
    n, d = shape
    A = sp.csr_array((np.zeros(5), (np.arange(5), np.zeros(5, int))), shape=shape)
    assert sparse_spread(rows_of(A))[:2] == (0.0, 0.0)
    with pytest.warns(Warning, match="Number of distinct clusters"):
        a = RBFKMeans(3, random_state=0).fit(A)
    assert a.inertia_ == 0.0
    np.testing.assert_array_equal(a.cluster_centers_, np.zeros((3, d)))
    np.testing.assert_array_equal(a.predict(A), np.zeros(n, dtype=np.int64))


@pytest.mark.parametrize("fmt", ["csr_matrix", "csr_array", "coo_matrix", "csc_array"])
def test_fit_batches_reads_one_sparse_matrix_as_an_array_source(fmt: str) -> None:
    """One sparse matrix is a 2-D array source read ``batch_size`` rows at a time, as the dense
    array is (iterating a CSR matrix had yielded one-row batches; COO was not subscriptable)."""
    A = random_csr(300, 12, 0.7, 3) + sp.csr_array(np.eye(300, 12))
    source = getattr(sp, fmt)(A)
    got = RBFKMeans(4, random_state=0).fit_batches(source, batch_size=64, n_epochs=2)
    want = RBFKMeans(4, random_state=0).fit_batches(A.toarray(), batch_size=64, n_epochs=2)
    assert got.n_iter_ == want.n_iter_ == 2 * 5  # blocks of 64 rows: 5 steps an epoch
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_array_equal(got.labels_, want.labels_)


# -- rows of many stored entries: their rowwise sums in float64 ----------------------------------


def _long_and_short_rows(seed: int = 0) -> sp.csr_array:
    """float32 rows of 20,000 stored entries (rows 1 and 4) among rows of 40 (offset +1: the
    float32 chains of the long rows drift)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(6):
        nnz = 20_000 if i in (1, 4) else 40
        cols = np.sort(rng.choice(30_000, nnz, replace=False))
        rows.append(sp.csr_array((rng.normal(size=nnz) + 1.0, (np.zeros(nnz, int), cols)),
                                 shape=(1, 30_000)))
    return sp.csr_array(sp.vstack(rows), dtype=np.float32)


def test_long_rows_are_summed_in_float64_and_short_rows_as_before() -> None:
    A = _long_and_short_rows()
    S = SparseRows.from_scipy(A)
    D64 = torch.from_numpy(A.toarray()).double()
    g = torch.Generator().manual_seed(1)
    Y = torch.randn(6, 30_000, generator=g)
    C = torch.randn(3, 30_000, generator=g)
    index = torch.tensor([2, 0, 1, 1, 0, 2])
    short = torch.tensor([0, 2, 3, 5])
    cases = (
        (S.row_dot(S), (D64 * D64).sum(1)),
        (S.row_dot(Y), (D64 * Y.double()).sum(1)),
        (S.row_dot(C, index), (D64 * C.double()[index]).sum(1)),
        (S.mm(C.T), D64 @ C.double().T),
    )
    long = torch.tensor([1, 4])
    for got, ref in cases:
        assert got.dtype == torch.float32
        torch.testing.assert_close(got[long].double(), ref[long], rtol=2e-7, atol=0.0)
    # the short rows keep the float32 sums they had (nothing else moves)
    plain = torch.zeros(6).index_add_(0, S.entry_rows(), S.val * S.val)
    assert torch.equal(S.row_dot(S)[short], plain[short])
    assert torch.equal(S.mm(C.T)[short], torch.from_numpy(A[short.numpy()] @ C.T.numpy()))


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_fit_of_long_float32_rows_against_float64(metric: str) -> None:
    # every row stored in full (100,000 entries): the inertia was 4.4e-5 (cosine 2.9e-6) off
    rng = np.random.default_rng(0)
    dense_rows = (rng.normal(size=(6, 100_000)) + 1.0).astype(np.float32)
    fit = RBFKMeans(2, metric=metric, random_state=0).fit(sp.csr_array(dense_rows))
    A, C = dense_rows.astype(np.float64), fit.cluster_centers_.astype(np.float64)
    if metric == "cosine":
        A = A / np.linalg.norm(A, axis=1, keepdims=True)
        J = float((1.0 - (A * C[fit.labels_]).sum(1)).sum())
    else:
        J = float(((A - C[fit.labels_]) ** 2).sum())
    assert fit.inertia_ == pytest.approx(J, rel=1e-6)
    assert -fit.score(sp.csr_array(dense_rows)) == pytest.approx(J, rel=1e-6)


def test_a_model_fitted_far_from_the_origin_reads_sparse_rows_in_its_frame() -> None:
    """A dense fit of rows around 10 computes in a shifted frame; sparse rows had entered it
    unshifted (the centroids shifted): predict agreed with the dense rows' labels on 30% of the
    rows, score was 150x too large, partial_fit moved the centres 4.6 away, and fit_batches of
    dense then sparse blocks ended 15x the inertia. Now the same answers as the dense rows."""
    rng = np.random.default_rng(0)
    X = 10 + rng.normal(size=(200, 3))
    S = sp.csr_matrix(X)
    model = RBFKMeans(3, random_state=0).fit(X)
    assert model._frame_.shift is not None  # the case: a shifted frame
    np.testing.assert_array_equal(model.predict(S), model.predict(X))
    assert model.score(S) == pytest.approx(model.score(X), rel=1e-12)
    np.testing.assert_allclose(model.transform(S), model.transform(X), rtol=1e-12)
    np.testing.assert_allclose(model.predict_proba(S, temperature=0.5),
                               model.predict_proba(X, temperature=0.5), rtol=1e-10, atol=1e-15)
    dense_next = RBFKMeans(3, random_state=0).fit(X).partial_fit(X[:50])
    sparse_next = RBFKMeans(3, random_state=0).fit(X).partial_fit(S[:50])
    np.testing.assert_allclose(sparse_next.cluster_centers_, dense_next.cluster_centers_,
                               rtol=1e-12)
    blocks = RBFKMeans(3, random_state=0).fit_batches([X[:100], S[100:150], S[150:]])
    plain = RBFKMeans(3, random_state=0).fit_batches([X[:100], X[100:150], X[150:]])
    np.testing.assert_allclose(blocks.cluster_centers_, plain.cluster_centers_, rtol=1e-12)
    assert blocks.inertia_ == pytest.approx(plain.inertia_, rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparse_rows_far_from_the_origin_are_refused(dtype: type) -> None:
    """Sparse rows are never centred and their distances are expanded about the origin: three
    blobs 1e8 out, stored sparse, had an inertia_ 38% off in float64 and two blobs merged (one
    cluster empty, inertia_ 0) in float32. They are refused by name; the dense rows fit."""
    rng = np.random.default_rng(0)
    X = (1e8 + np.repeat(np.eye(3) * 10, 100, axis=0) + rng.normal(size=(300, 3))).astype(dtype)
    with pytest.raises(ValueError, match=r"X lies too far from the origin for sparse rows .* "
                                         r"pass X as a dense array"):
        RBFKMeans(3, random_state=0).fit(sp.csr_matrix(X))
    model = RBFKMeans(3, random_state=0).fit(X)
    assert np.bincount(model.labels_, minlength=3).tolist() == [100, 100, 100]


def test_torch_sparse_tensors_are_refused_by_name() -> None:
    X = torch.randn(30, 3)
    model = RBFKMeans(3, random_state=0).fit(X.numpy())
    for call in (lambda: RBFKMeans(3).fit(X.to_sparse()), lambda: model.predict(X.to_sparse()),
                 lambda: model.transform(X.to_sparse_csr())):
        with pytest.raises(TypeError, match=r"X must be a dense tensor.*layout torch\.sparse"):
            call()
    with pytest.raises(TypeError, match=r"batches must be dense when a tensor"):
        RBFKMeans(3).fit_batches(X.to_sparse())
