"""The wide bounded passes and their blocks: a block's products in either orientation, the group
minima of the gathered rows, and whole passes with the rows in doubt scored against all
centroids or their groups in doubt alone, against plain numpy and the full pass."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rbfkmeans import _loops, _wide_loops, kernels


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 40), d=st.integers(1, 50),
       k=st.integers(1, 130), single=st.booleans())
@example(seed=0, m=7, d=5, k=_loops.ROWS_FIRST_BELOW - 1, single=True)
@example(seed=0, m=7, d=5, k=_loops.ROWS_FIRST_BELOW, single=True)
def test_block_products_equal_the_plain_product(seed: int, m: int, d: int, k: int,
                                                single: bool) -> None:
    """``C X_b^T`` (k, m), C-contiguous, whichever way round BLAS is asked for it (the rows
    times ``C^T`` then transposed below :data:`_loops.ROWS_FIRST_BELOW` centroids): equal to
    the float64 product to the dtype's rounding."""
    rng = np.random.default_rng(seed)
    dt = np.float32 if single else np.float64
    C = rng.normal(size=(k, d)).astype(dt)
    Xb = rng.normal(size=(m, d)).astype(dt)
    PT = _loops.block_products(C, np.ascontiguousarray(C.T), Xb)
    assert PT.shape == (k, m)
    assert PT.dtype == dt
    assert PT.flags.c_contiguous
    want = C.astype(np.float64) @ Xb.astype(np.float64).T
    tol = 4 * d * float(np.finfo(dt).eps) * (np.abs(C).max() * np.abs(Xb).max() + 1e-300)
    np.testing.assert_allclose(PT, want, rtol=0, atol=tol)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 30), k=st.integers(1, 60),
       t=st.integers(1, 20), levels=st.sampled_from([2, 5, 1000]))
@example(seed=1, m=3, k=1, t=1, levels=2)  # one centroid: no second smallest anywhere
@example(seed=2, m=9, k=40, t=20, levels=2)  # ties everywhere, groups of one and two
def test_group_minima_equal_a_row_by_row_search(seed: int, m: int, k: int, t: int,
                                                levels: int) -> None:
    """For each gathered row and each group of centroids: the smallest score
    ``||c_j||^2 - 2 P[j, r]``, its centroid (the first of equal scores in the group's run of
    :func:`_wide_loops._members`, in index order), the second smallest (equal to the smallest
    when two tie; ``inf`` for a group of one); over all groups the two smallest and the group
    of the smallest (the first on ties). Scores drawn from few levels make ties common; an
    empty group (its number unused) holds ``inf`` and ``-1``."""
    rng = np.random.default_rng(seed)
    group_of = rng.integers(0, t, size=k)
    members, starts = _wide_loops._members(group_of, t)
    PT = rng.integers(0, levels, size=(k, m)).astype(np.float32)
    csq = rng.integers(0, levels, size=k).astype(np.float64)
    least, second = np.empty((t, m)), np.empty((t, m))
    arg, top, near = np.empty((t, m), np.int64), np.empty((2, m)), np.empty(m, np.int64)
    _wide_loops._group_minima(PT, m, csq, members, starts, least, second, arg, top, near)
    scores = csq[:, None] - 2.0 * PT.astype(np.float64)  # (k, m), exact
    for r in range(m):
        for g in range(t):
            js = np.flatnonzero(group_of == g)
            if js.size == 0:
                assert (least[g, r], second[g, r], arg[g, r]) == (np.inf, np.inf, -1)
                continue
            s = scores[js, r]
            assert least[g, r] == s.min()
            assert arg[g, r] == js[np.argmin(s)]
            assert second[g, r] == (np.sort(s)[1] if js.size > 1 else np.inf)
        ordered = np.sort(scores[:, r])
        assert top[0, r] == ordered[0]
        assert top[1, r] == (ordered[1] if k > 1 else np.inf)
        groups_min = np.array([scores[group_of == g, r].min() if (group_of == g).any()
                               else np.inf for g in range(t)])
        assert near[r] == np.argmin(groups_min)


def test_members_list_each_group_in_index_order() -> None:
    group_of = np.array([2, 0, 2, 2, 0, 4])  # groups 1 and 3 empty
    members, starts = _wide_loops._members(group_of, 5)
    assert starts.tolist() == [0, 2, 2, 5, 5, 6]
    assert members.tolist() == [1, 4, 0, 2, 3, 5]



def _bounded_passes(X: np.ndarray, C0: np.ndarray, limit: int, passes: int) -> None:
    """Lloyd updates (numpy means) on :func:`_wide_loops.bounded_wide` passes with ``limit``;
    after each pass the labels equal :func:`_loops.hard_wide`'s at the same centroids, the
    upper bounds are at least each row's distance to its centroid and each group bound at
    most its distance to every other centroid of the group (all in float64)."""
    n, d = X.shape
    k = C0.shape[0]
    group_of = kernels.centroid_groups(torch.from_numpy(C0), kernels.bound_groups(n, k)).numpy()
    t = int(group_of.max()) + 1
    xs = (X.astype(np.float64) ** 2).sum(1)
    unit = float(np.finfo(X.dtype).eps) / 2
    prev, lab, full = (np.zeros(n, np.int64) for _ in range(3))
    upper, lower, delta = np.empty(n), np.empty((n, t), np.float32), np.zeros(k)
    C = C0.copy()
    Xd = X.astype(np.float64)
    with kernels.launch(blas=True):
        for it in range(passes):
            _wide_loops.bounded_wide(X, C, prev, lab, upper, lower, xs, delta, group_of, t,
                                     unit, it == 0, 2, limit)
            _loops.hard_wide(X, C, np.empty(0, X.dtype), False, full, xs, unit, 2)
            np.testing.assert_array_equal(lab, full)
            dist = np.sqrt(((Xd[:, None, :] - C.astype(np.float64)[None]) ** 2).sum(2))
            assert (upper >= dist[np.arange(n), lab]).all()
            for g in range(t):
                others = np.where((group_of[None, :] == g)
                                  & (np.arange(k)[None, :] != lab[:, None]), dist, np.inf)
                assert (lower[:, g] <= others.min(1)).all()
            sums = np.zeros((k, d))
            np.add.at(sums, lab, Xd)
            size = np.bincount(lab, minlength=k)[:, None]
            Cn = np.where(size > 0, sums / np.maximum(size, 1), C).astype(X.dtype)
            delta = np.sqrt(((Cn.astype(np.float64) - C) ** 2).sum(1))
            C, prev = Cn, lab.copy()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 600), d=st.integers(17, 40),
       k=st.integers(17, 90), single=st.booleans(), spread=st.sampled_from([0.5, 4.0]),
       local=st.sampled_from([0, 1, 8, 10_000]))
@example(seed=5, n=600, d=20, k=90, single=True, spread=4.0, local=10_000)
def test_bounded_wide_passes_label_as_full_passes_at_any_limit(
        seed: int, n: int, d: int, k: int, single: bool, spread: float, local: int) -> None:
    """Rows in doubt scored against all centroids (``limit`` 0), against the groups their
    bounds leave in doubt alone (any ``limit`` up to all centroids), or either by their
    count: every pass's labels are the full pass's, and the bounds stay bounds. Repeated
    centroids make exact ties that the groups must settle as the full pass does."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(1, k // 3), d)) * spread
    X = centers[rng.integers(0, len(centers), size=n)] + rng.normal(size=(n, d))
    X = np.ascontiguousarray(X.astype(np.float32 if single else np.float64))
    C0 = X[rng.integers(0, n, size=k)].copy()
    C0[k // 2:k // 2 + 3] = C0[0]  # equal centroids, perhaps in different groups
    _bounded_passes(X, C0, local, 6)
