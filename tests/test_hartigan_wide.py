"""The compiled scoring of Hartigan's moves on wide rows
(:func:`rbfkmeans._hartigan_loops.gains_wide`: the gathered rows' nearest other clusters and
cheapest joins found at once) against every move scored directly in float64 from differences:
gains, targets, and the distances the bounds keep."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rbfkmeans import _hartigan_loops, _loops


def _problem(seed: int, n: int, d: int, k: int, weighted: bool, single: bool, empty: bool):
    """Rows around a few centres, labels mostly nearest of ``k`` seed rows, a share relabelled
    at random; the means of those labels (an empty cluster's mean anywhere)."""
    rng = np.random.default_rng(seed)
    dt = np.float32 if single else np.float64
    X = (rng.normal(size=(n, d)) + rng.integers(0, 4, size=(n, 1)) * 0.8).astype(dt)
    Xd = X.astype(np.float64)
    seeds = Xd[rng.choice(n, k, replace=n < k)] + rng.normal(size=(k, d)) * 0.01
    labels = ((Xd[:, None, :] - seeds[None]) ** 2).sum(2).argmin(1)
    flip = rng.random(n) < 0.3
    labels[flip] = rng.integers(0, k, int(flip.sum()))
    if empty and k > 1:
        labels[labels == k - 1] = 0
    w = (rng.random(n) * 2 + 0.05).astype(dt) if weighted else np.empty(0, dtype=dt)
    wd = w.astype(np.float64) if weighted else np.ones(n)
    N = np.bincount(labels, weights=wd, minlength=k)
    C = rng.normal(size=(k, d))
    for j in np.flatnonzero(N > 0):
        C[j] = np.average(Xd[labels == j], axis=0, weights=wd[labels == j])
    return X, Xd, w, wd, labels.astype(np.int64), N, C


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 400), d=st.integers(17, 48),
       k=st.integers(1, 90), weighted=st.booleans(), single=st.booleans(),
       empty=st.booleans(), share=st.sampled_from([1.0, 0.4]))
@example(seed=0, n=300, d=20, k=_loops.ROWS_FIRST_BELOW, weighted=False, single=True,
         empty=False, share=1.0)
@example(seed=1, n=400, d=24, k=_loops.ROWS_FIRST_BELOW - 1, weighted=True, single=False,
         empty=True, share=0.4)
@example(seed=2, n=50, d=17, k=2, weighted=False, single=True, empty=False, share=1.0)
@example(seed=3, n=50, d=17, k=1, weighted=True, single=True, empty=False, share=1.0)
def test_wide_scoring_equals_every_move_scored_in_float64(
        seed: int, n: int, d: int, k: int, weighted: bool, single: bool, empty: bool,
        share: float) -> None:
    """For the rows asked for (all, or a share in increasing order): the own squared distance,
    the nearest other cluster with its squared distance and the next one's, and the gain
    ``w N_a / (N_a - w) ||x - c_a||^2 - min_b w N_b / (N_b + w) ||x - c_b||^2`` with its target
    where it pays beyond rounding (no gain, target -1, where it does not or the cluster would
    empty); clusters beyond rounding of a tie are the exact ones."""
    X, Xd, w, wd, labels, N, C = _problem(seed, n, d, k, weighted, single, empty)
    rng = np.random.default_rng(seed + 1)
    rows = np.flatnonzero(rng.random(n) < share) if share < 1.0 else np.arange(n)
    rows = rows.astype(np.int64)
    gain, target, own, near, d1, d2 = _hartigan_loops.gains_wide(X, C, N, labels, w, rows, 7)
    m = rows.size
    D = ((Xd[rows, None, :] - C[None]) ** 2).sum(2)  # (m, k)
    a = labels[rows]
    r = np.arange(m)
    eps = float(np.finfo(X.dtype).eps)
    # the kernel's distances come from products in X's dtype: 64 eps (||x||^2 + ||c||^2)
    tol = 64 * eps * ((Xd[rows] ** 2).sum(1) + (C**2).sum(1).max()) + 1e-300
    assert np.all(np.abs(own - D[r, a]) <= tol)
    other = D.copy()
    other[r, a] = np.inf
    two = np.sort(other, axis=1)
    if k > 1:
        assert np.all(np.abs(d1 - two[:, 0]) <= tol)
        clear = two[:, 1] - two[:, 0] > 4 * tol
        np.testing.assert_array_equal(near[clear], other.argmin(1)[clear])
    else:
        assert np.all(np.isinf(d1))
    if k > 2:
        assert np.all(np.abs(d2 - two[:, 1]) <= tol)
    else:
        assert np.all(np.isinf(d2))
    wr = wd[rows]
    movable = N[a] > wr
    leave_f = wr * N[a] / np.where(movable, N[a] - wr, 1.0)
    join_f = wr[:, None] * N[None, :] / (N[None, :] + wr[:, None])
    join = join_f * D
    join[r, a] = np.inf
    ref = np.where(movable, leave_f * D[r, a] - join.min(1), 0.0)
    slack = 4 * tol * (leave_f + join_f.max(1))  # the distances' rounding, times the factors
    pays, stays = movable & (ref > slack), (ref < -slack) | ~movable
    assert np.all(np.abs(gain[pays] - ref[pays]) <= slack[pays])
    jt = np.sort(join, axis=1)
    sure = pays & (jt[:, 1] - jt[:, 0] > slack) if k > 1 else pays
    np.testing.assert_array_equal(target[sure], join.argmin(1)[sure])
    assert np.all(gain[stays] == 0.0)
    assert np.all(target[stays] == -1)
    assert np.all((gain > 0) == (target >= 0))
