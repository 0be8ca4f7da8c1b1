r"""The compiled scoring of Hartigan's moves behind
:func:`rbfkmeans.search_kernels.hartigan_pass` and :func:`rbfkmeans.search_kernels.hartigan_rows`
(numba; the equation is in :mod:`rbfkmeans.hartigan`).

For each row ``i`` of weight ``w_i`` in cluster ``a`` that the caller's bounds leave, it finds
the cluster ``b != a`` with the smallest ``w_i N_b / (N_b + w_i) ||x_i - c_b||^2`` and the gain
``-Delta J`` of moving it there, and for the bounds the distances to the own mean and to the two
nearest other means. :func:`gains` serves few features: the squared distances from
differences in float64 (no cancellation), the rows in parallel (each writes only its own
entries). Rows whose cluster would empty (``N_a <= w_i``) get no move.
:func:`gains_wide` serves wide data: the squared
distances ``||x_i||^2 + ||c_j||^2 - 2 x_i.c_j`` in float64 from BLAS products of ``WIDE_ROWS``
gathered rows at a time in the data's dtype (as the torch scoring also computes them in that
dtype), the rows' blocks in parallel, with what the bounds need; the gathered rows' nearest
other means and cheapest joins are found at once, centroid by centroid over the rows (on
MNIST's 64-dimensional PCA with k = 1,024, a sweep of all 70,000 rows took 61-64 ms against
98-101 ms row by row, 2 threads). An unweighted row whose leaving costs no more than
``f_min d_1`` (``f_min`` the least join factor ``N_j / (N_j + 1)``, ``d_1`` the distance to its
nearest other mean) gets no move: every join costs at least that, as the full search finds.
Only :mod:`rbfkmeans.kernels` imports this module; it needs numba.
"""

import numpy as np
from numba import njit, prange

from ._loops import WIDE_ROWS, block_products
from ._row_loops import sq_norm

__all__ = ["gains", "gains_wide"]


@njit(cache=True, nogil=True)
def _move_outputs(m):
    """What both sweeps return for ``m`` rows, before any is scored: no gain, no target (-1),
    the own distance, the nearest other cluster (0) and the distances to it and to the next
    (``inf``: none found)."""
    return (np.zeros(m), np.full(m, -1, dtype=np.int64), np.empty(m),
            np.zeros(m, dtype=np.int64), np.full(m, np.inf), np.full(m, np.inf))


@njit(parallel=True, cache=True, nogil=True)
def gains(X, C, N, labels, w, rows):
    """The best move of each row of ``rows`` (m,) of narrow data, the squared distances from
    differences in float64, the rows in parallel; returns what :func:`gains_wide` returns (the
    gain and target, and for the caller's bounds the squared distances to the own mean, the
    nearest other cluster and the squared distances to it and to the next)."""
    m = rows.shape[0]
    d = X.shape[1]
    k = C.shape[0]
    has_w = w.shape[0] > 0
    gain, target, own, near, d1, d2 = _move_outputs(m)
    for q in prange(m):
        i = rows[q]
        wi = np.float64(w[i]) if has_w else 1.0
        a = labels[i]
        best = np.inf
        to = -1
        first = np.inf
        second = np.inf
        b1 = 0
        for j in range(k):
            s = 0.0
            for t in range(d):
                diff = np.float64(X[i, t]) - C[j, t]
                s += diff * diff
            if j == a:
                own[q] = s
                continue
            if s < first:  # the two nearest other clusters, for the bounds
                second = first
                first = s
                b1 = j
            elif s < second:
                second = s
            join = wi * N[j] / (N[j] + wi) * s
            if join < best:
                best = join
                to = j
        near[q] = b1
        d1[q] = first
        d2[q] = second
        if N[a] <= wi:
            continue
        g = wi * N[a] / (N[a] - wi) * own[q] - best
        if g > 0.0:
            gain[q] = g
            target[q] = to
    return gain, target, own, near, d1, d2


@njit(cache=True, nogil=True, inline="always")
def _moves_at_once(PT, m, csq, xs, own_of, wr, N, fac, weighted, first, second, near, best, to):
    """For the ``m`` gathered rows of ``PT`` (k, m), their products ``x_i.c_j``, with squared
    norms ``xs`` (m,), clusters ``own_of`` (m,) and weights ``wr`` (m,), over the other clusters:
    the smallest squared distance ``max(||x_i||^2 + ||c_j||^2 - 2 x_i.c_j, 0)`` and its cluster,
    the second smallest (equal to the smallest on a tie), and the cheapest join
    ``f_ij ||x_i - c_j||^2`` and its cluster, ``f_ij = w_i N_j / (N_j + w_i)`` (or the
    unweighted factors ``fac`` (k,)); ties to the lowest index. Centroid by centroid over the
    rows (a loop the compiler vectorises, where a row's own minimum is a chain of dependent
    compares); the distances are rounded as the row-by-row search rounds them."""
    k = PT.shape[0]
    for r in range(m):
        first[r] = np.inf
        second[r] = np.inf
        near[r] = 0
        best[r] = np.inf
        to[r] = 0
    for j in range(k):
        cj = csq[j]
        Nj = N[j]
        fj = fac[j]
        for r in range(m):
            g = max(xs[r] + cj - 2.0 * np.float64(PT[j, r]), 0.0)
            join = wr[r] * Nj / (Nj + wr[r]) * g if weighted else fj * g
            if own_of[r] == j:
                g = np.inf
                join = np.inf
            second[r] = min(second[r], max(g, first[r]))
            if g < first[r]:
                first[r] = g
                near[r] = j
            if join < best[r]:
                best[r] = join
                to[r] = j


@njit(parallel=True, cache=True, nogil=True)
def gains_wide(X, C, N, labels, w, rows, nb):
    """:func:`gains` for the rows ``rows`` (m,) of wide data (module docstring): ``nb`` blocks of
    them in parallel, the distances of ``WIDE_ROWS`` gathered rows at a time from one BLAS
    product ``C X_b^T`` (the caller runs the BLAS on one thread), the nearest other clusters and
    the best targets found for the gathered rows at once (:func:`_moves_at_once`; ties to the
    lowest cluster, as :func:`gains`). Returns, per row of
    ``rows``, the gain and target, and for the caller's bounds the squared distance to its own
    mean, its nearest other cluster and the squared distances to that one and to the next
    (``inf`` where there is none)."""
    m = rows.shape[0]
    d = X.shape[1]
    k = C.shape[0]
    has_w = w.shape[0] > 0
    Cc = np.ascontiguousarray(C).astype(X.dtype)  # (k, d) in X's dtype
    CT = np.ascontiguousarray(C.T).astype(X.dtype)  # (d, k)
    csq = np.zeros(k)
    for j in range(k):
        for t in range(d):
            csq[j] += C[j, t] * C[j, t]
    fac = np.empty(k)  # the join factors of an unweighted row (w_i = 1), and their least
    for j in range(k):
        fac[j] = 1.0 * N[j] / (N[j] + 1.0)
    fmin = np.inf
    for j in range(k):
        fmin = min(fmin, fac[j])
    gain, target, own, near, d1, d2 = _move_outputs(m)
    block = (m + nb - 1) // nb
    for b in prange(nb):
        lo = b * block
        hi = min(m, lo + block)
        rows_b = min(WIDE_ROWS, max(hi - lo, 1))
        buf = np.empty((rows_b, d), dtype=X.dtype)
        v = np.empty(d)
        xs = np.empty(rows_b)  # the gathered rows' ||x||^2, clusters and weights
        own_of = np.empty(rows_b, dtype=np.int64)
        wr = np.empty(rows_b)
        first = np.empty(rows_b)  # their nearest other clusters,
        second = np.empty(rows_b)
        near_r = np.empty(rows_b, dtype=np.int64)
        best = np.empty(rows_b)  # and their cheapest joins
        to = np.empty(rows_b, dtype=np.int64)
        for s0 in range(lo, hi, WIDE_ROWS):
            s1 = min(hi, s0 + WIDE_ROWS)
            mr = s1 - s0
            for r in range(mr):
                i = rows[s0 + r]
                for t in range(d):
                    buf[r, t] = X[i, t]
                xs[r] = sq_norm(X, i, v)
                own_of[r] = labels[i]
                wr[r] = np.float64(w[i]) if has_w else 1.0
            PT = block_products(Cc, CT, buf[:mr])  # (k, rows)
            _moves_at_once(PT, mr, csq, xs, own_of, wr, N, fac, has_w, first, second, near_r,
                           best, to)
            for r in range(mr):
                q = s0 + r
                a = own_of[r]
                wi = wr[r]
                own[q] = max(xs[r] + csq[a] - 2.0 * np.float64(PT[a, r]), 0.0)
                if k > 1:  # the two nearest other clusters, for the bounds
                    near[q] = near_r[r]
                    d1[q] = first[r]
                    if k > 2:
                        d2[q] = second[r]
                if N[a] <= wi:
                    continue
                leave = wi * N[a] / (N[a] - wi) * own[q]
                if not has_w and leave <= fmin * d1[q]:
                    continue  # every join costs at least fmin d1 (rounding is monotone)
                gi = leave - best[r]
                if gi > 0.0:
                    gain[q] = gi
                    target[q] = to[r]
    return gain, target, own, near, d1, d2
