"""The clusters' sums of a compiled Lloyd run: formed from labels in blocks, and kept by the rows
that move, against numpy's sums in float64."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rbfkmeans import _sums_loops


def _reference(X: np.ndarray, w: np.ndarray, labels: np.ndarray,
               k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``N``, ``S`` and the row counts of ``labels`` by numpy, in float64."""
    wd = np.ones(len(X)) if w.size == 0 else w.astype(np.float64)
    N = np.bincount(labels, weights=wd, minlength=k)
    S = np.zeros((k, X.shape[1]))
    np.add.at(S, labels, wd[:, None] * X.astype(np.float64))
    return N, S, np.bincount(labels, minlength=k)


def _case(seed: int, n: int, d: int, k: int, weighted: bool, single: bool):
    rng = np.random.default_rng(seed)
    dt = np.float32 if single else np.float64
    X = (rng.normal(size=(n, d)) * 10.0 ** rng.integers(-3, 4)).astype(dt)
    w = rng.random(n).astype(dt) + 0.1 if weighted else np.empty(0, dtype=dt)
    return rng, X, w


def _close(got: np.ndarray, want: np.ndarray, scale: float) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), d=st.integers(1, 12),
       k=st.integers(1, 40), nb=st.integers(1, 70), weighted=st.booleans(),
       single=st.booleans())
@example(seed=0, n=1, d=1, k=1, nb=64, weighted=False, single=True)
@example(seed=1, n=257, d=3, k=5, nb=64, weighted=True, single=False)
def test_label_sums_are_the_clusters_sums(seed: int, n: int, d: int, k: int, nb: int,
                                          weighted: bool, single: bool) -> None:
    """``N``, ``S`` and the counts of any labels (empty clusters included) equal numpy's
    float64 sums to rounding, and do not depend on the number of blocks beyond rounding; the
    counts exactly."""
    rng, X, w = _case(seed, n, d, k, weighted, single)
    labels = rng.integers(0, k, size=n).astype(np.int64)
    N, S, count = _sums_loops.label_sums(X, w, labels, k, nb)
    N_ref, S_ref, count_ref = _reference(X, w, labels, k)
    assert (N.shape, S.shape, count.shape) == ((k,), (k, d), (k,))
    assert (N.dtype, S.dtype, count.dtype) == (np.float64, np.float64, np.int64)
    np.testing.assert_array_equal(count, count_ref)
    scale = float(np.abs(X).astype(np.float64).sum()) + 1.0
    _close(N, N_ref, float(n) + 1.0)
    _close(S, S_ref, scale)
    N1, S1, count1 = _sums_loops.label_sums(X, w, labels, k, 1)
    np.testing.assert_array_equal(count1, count)
    _close(N1, N, float(n) + 1.0)
    _close(S1, S, scale)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), d=st.integers(1, 12),
       k=st.integers(1, 40), share=st.sampled_from([0.0, 0.01, 0.3, 1.0]),
       weighted=st.booleans(), single=st.booleans())
@example(seed=0, n=50, d=4, k=3, share=0.0, weighted=False, single=False)
def test_move_rows_turns_the_sums_into_those_of_the_new_labels(
        seed: int, n: int, d: int, k: int, share: float, weighted: bool, single: bool) -> None:
    """The sums of ``old`` updated in place by the rows whose label changed equal the sums of
    ``new`` (to rounding; the counts exactly), and the number returned is how many rows moved.
    A cluster that every row leaves keeps a count of 0."""
    rng, X, w = _case(seed, n, d, k, weighted, single)
    old = rng.integers(0, k, size=n).astype(np.int64)
    new = old.copy()
    change = rng.random(n) < share
    new[change] = rng.integers(0, k, size=int(change.sum()))
    N, S, count = _sums_loops.label_sums(X, w, old, k, 8)
    old_copy, new_copy = old.copy(), new.copy()
    moved = _sums_loops.move_rows(X, w, old, new, N, S, count)
    assert moved == int((old != new).sum())
    np.testing.assert_array_equal(old, old_copy)  # the labels are read, never written
    np.testing.assert_array_equal(new, new_copy)
    N_ref, S_ref, count_ref = _reference(X, w, new, k)
    np.testing.assert_array_equal(count, count_ref)
    scale = float(np.abs(X).astype(np.float64).sum()) + 1.0
    wsum = float(n if w.size == 0 else w.astype(np.float64).sum()) + 1.0
    np.testing.assert_allclose(N, N_ref, rtol=0, atol=1e-12 * wsum)
    np.testing.assert_allclose(S, S_ref, rtol=0, atol=1e-12 * scale)


def test_move_rows_leaves_sums_alone_when_no_label_changes() -> None:
    """No row moves: the sums come back bit for bit."""
    rng, X, w = _case(3, 100, 5, 7, True, True)
    labels = rng.integers(0, 7, size=100).astype(np.int64)
    N, S, count = _sums_loops.label_sums(X, w, labels, 7, 4)
    N0, S0, count0 = N.copy(), S.copy(), count.copy()
    assert _sums_loops.move_rows(X, w, labels, labels.copy(), N, S, count) == 0
    np.testing.assert_array_equal(N, N0)
    np.testing.assert_array_equal(S, S0)
    np.testing.assert_array_equal(count, count0)
