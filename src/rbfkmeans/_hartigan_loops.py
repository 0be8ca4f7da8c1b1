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
dtype), the rows' blocks in parallel, with what the bounds need. An unweighted row skips the
search for its target where leaving costs no more than ``f_min d_1`` (``f_min`` the least join
factor ``N_j / (N_j + 1)``, ``d_1`` the distance to its nearest other mean): every join costs at
least that, so no move pays, as the full search would find. Only :mod:`rbfkmeans.kernels`
imports this module; it needs numba.
"""

import numpy as np
from numba import njit, prange

from ._loops import WIDE_ROWS
from ._row_loops import _argmin, sq_norm

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


@njit(parallel=True, cache=True, nogil=True)
def gains_wide(X, C, N, labels, w, rows, nb):
    """:func:`gains` for the rows ``rows`` (m,) of wide data (module docstring): ``nb`` blocks of
    them in parallel, the distances of ``WIDE_ROWS`` gathered rows at a time from one BLAS
    product (the caller runs the BLAS on one thread), the best target by
    :func:`rbfkmeans._row_loops._argmin` (ties to the lowest cluster, as :func:`gains`). Returns,
    per row of ``rows``, the gain and target, and for the caller's bounds the squared distance
    to its own mean, its nearest other cluster and the squared distances to that one and to
    the next (``inf`` where there is none)."""
    m = rows.shape[0]
    d = X.shape[1]
    k = C.shape[0]
    has_w = w.shape[0] > 0
    CT = np.ascontiguousarray(C.T).astype(X.dtype)  # (d, k) in X's dtype
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
    G = np.empty((nb, k))  # each block's distances, then join costs
    for b in prange(nb):
        g = G[b]
        lo = b * block
        hi = min(m, lo + block)
        buf = np.empty((min(WIDE_ROWS, max(hi - lo, 1)), d), dtype=X.dtype)
        v = np.empty(d)
        for s0 in range(lo, hi, WIDE_ROWS):
            s1 = min(hi, s0 + WIDE_ROWS)
            for r in range(s1 - s0):
                i = rows[s0 + r]
                for t in range(d):
                    buf[r, t] = X[i, t]
            P = np.dot(buf[: s1 - s0], CT)  # (rows, k)
            for r in range(s1 - s0):
                q = s0 + r
                i = rows[q]
                wi = np.float64(w[i]) if has_w else 1.0
                a = labels[i]
                xs = sq_norm(X, i, v)
                for j in range(k):
                    g[j] = max(xs + csq[j] - 2.0 * np.float64(P[r, j]), 0.0)
                own[q] = g[a]
                g[a] = np.inf
                if k > 1:  # the two nearest other clusters, for the bounds
                    first, b1 = _argmin(g)
                    near[q] = b1
                    d1[q] = first
                    if k > 2:
                        g[b1] = np.inf
                        d2[q] = _argmin(g)[0]
                        g[b1] = first
                if N[a] <= wi:
                    continue
                leave = wi * N[a] / (N[a] - wi) * own[q]
                if has_w:
                    for j in range(k):
                        g[j] = wi * N[j] / (N[j] + wi) * g[j]
                else:  # every join costs at least fmin d1 (rounding is monotone): no move pays
                    if leave <= fmin * d1[q]:
                        continue
                    for j in range(k):
                        g[j] = fac[j] * g[j]
                best, to = _argmin(g)
                gi = leave - best
                if gi > 0.0:
                    gain[q] = gi
                    target[q] = to
    return gain, target, own, near, d1, d2
