r"""The per-row pieces every compiled pass shares (numba): a row's scores against the
centroids, the argmin and argmax of those scores, its squared norm, its share of a block's sums,
and the block sums added in block order.

The loops of :mod:`rbfkmeans._loops`, :mod:`rbfkmeans._swap_loops`,
:mod:`rbfkmeans._lloyd_loops`, :mod:`rbfkmeans._wide_loops`,
:mod:`rbfkmeans._sums_loops` and :mod:`rbfkmeans._hartigan_loops` call them (the per-row ones
inlined), and they alone import this module; it needs numba.
"""

import math

import numpy as np
from numba import njit

__all__ = ["ARGMIN_LANES", "SUM_ENTRIES", "centroid_norms", "dot_chains", "nearest_in_doubt",
           "sq_dist", "sq_norm", "sum_block_count", "sum_blocks"]


@njit(cache=True, nogil=True)
def sum_blocks(P):
    """The rows of ``P`` (blocks, m) added in block order (scalar loops: no temporaries),
    so the sums do not depend on how the blocks were shared out among the threads."""
    out = np.zeros(P.shape[1])
    for b in range(P.shape[0]):
        for j in range(P.shape[1]):
            out[j] += P[b, j]
    return out


@njit(cache=True, nogil=True)
def _centroid_terms(C):
    """``C^T`` (d, k) and ``||c_j||^2`` (k,) in float64, for the score loops."""
    k, d = C.shape
    CT = np.empty((d, k))
    csq = np.zeros(k)
    for j in range(k):
        for t in range(d):
            CT[t, j] = C[j, t]
            csq[j] += np.float64(C[j, t]) * np.float64(C[j, t])
    return CT, csq


@njit(cache=True, nogil=True, inline="always")
def _row_scores(X, i, CT, csq, g):
    """``g_j = ||c_j||^2 - 2 x_i.c_j`` (k,) in float64, the features added in order."""
    for j in range(g.shape[0]):
        g[j] = csq[j]
    for t in range(X.shape[1]):
        xt = -2.0 * np.float64(X[i, t])
        for j in range(g.shape[0]):
            g[j] += xt * CT[t, j]


#: from this many scores on, :func:`_argmin` runs four chains (below, one: on 10 scores the
#: four took 6 ns a row to one chain's 4 ns, on 256 87 ns to 193 ns)
ARGMIN_LANES = 16
#: the sweeps that sum rows into per-cluster partial sums keep at most this many float64 of
#: them (:func:`sum_block_count`)
SUM_ENTRIES = 1 << 21


@njit(cache=True, nogil=True, inline="always")
def _arg_least(g, s):
    """The entry of ``g`` with the smallest ``s g_j`` (``s = 1`` or ``-1``: negation is exact)
    and its index, ties to the lowest index.

    From ``ARGMIN_LANES`` entries on, four running minima over the indices ``0, 1, 2, 3
    (mod 4)``, merged at the end (the smaller value, on a tie the lower index): four
    independent chains of compare-and-select, where one chain waits on each comparison's
    latency (the argmin over 1,024 scores took as long as their matrix product). The same
    result as one chain for every ``g`` without NaN. Inlined with a constant ``s``, the
    products by ``s`` fold into the comparisons."""
    k = g.shape[0]
    if k < ARGMIN_LANES:
        best = s * g[0]
        arg = 0
        for j in range(1, k):
            v = s * g[j]
            if v < best:
                best = v
                arg = j
        return s * best, arg
    b0, b1, b2, b3 = s * g[0], s * g[1], s * g[2], s * g[3]
    a0, a1, a2, a3 = 0, 1, 2, 3
    top = k - k % 4
    for j in range(4, top, 4):
        v0, v1, v2, v3 = s * g[j], s * g[j + 1], s * g[j + 2], s * g[j + 3]
        if v0 < b0:
            b0, a0 = v0, j
        if v1 < b1:
            b1, a1 = v1, j + 1
        if v2 < b2:
            b2, a2 = v2, j + 2
        if v3 < b3:
            b3, a3 = v3, j + 3
    for j in range(top, k):  # the last k mod 4 entries join chain 0 (their indices are larger)
        v0 = s * g[j]
        if v0 < b0:
            b0, a0 = v0, j
    best, arg = _merge(b0, a0, b1, a1)
    best2, arg2 = _merge(b2, a2, b3, a3)
    best, arg = _merge(best, arg, best2, arg2)
    return s * best, arg


@njit(cache=True, nogil=True, inline="always")
def _argmin(g):
    """The smallest entry of ``g`` and its index (ties to the lowest): :func:`_arg_least`."""
    return _arg_least(g, 1.0)


@njit(cache=True, nogil=True, inline="always")
def _argmax(z):
    """The largest entry of ``z`` and its index (ties to the lowest): :func:`_arg_least` on
    ``-z``."""
    return _arg_least(z, -1.0)


@njit(cache=True, nogil=True, inline="always")
def _merge(b, a, c, e):
    """The smaller of two (value, index) pairs; on equal values the lower index."""
    if c < b or (c == b and e < a):
        return c, e
    return b, a


@njit(cache=True, nogil=True, inline="always")
def dot_chains(u, v, d):
    """``sum_t u_t v_t`` over the first ``d`` entries (float64): four partial sums over ``t = 0,
    1, 2, 3 (mod 4)``, added pairwise at the end. Four independent chains of additions, where
    one chain made a pass over wide rows wait on its latency; the same order on every
    machine."""
    s0 = s1 = s2 = s3 = 0.0
    t = 0
    while t + 4 <= d:
        s0 += u[t] * v[t]
        s1 += u[t + 1] * v[t + 1]
        s2 += u[t + 2] * v[t + 2]
        s3 += u[t + 3] * v[t + 3]
        t += 4
    while t < d:
        s0 += u[t] * v[t]
        t += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True)
def centroid_norms(C):
    """``||c_j||^2`` (k,) in float64, each summed in feature order, and ``max_j ||c_j||``."""
    k, d = C.shape
    csq = np.zeros(k)
    cmax = 0.0
    for j in range(k):
        for q in range(d):
            csq[j] += np.float64(C[j, q]) * np.float64(C[j, q])
        cmax = max(cmax, csq[j])
    return csq, math.sqrt(cmax)


@njit(cache=True, nogil=True, inline="always")
def nearest_in_doubt(C, csq, v, g, best, margin):
    r"""The nearest centroid of a row whose BLAS scores ``g`` (k,) put another centroid within
    ``margin`` of the smallest, ``best``: among the centroids ``j`` with ``g_j <= best +
    margin``, the one of least

    .. math::  s_j = \lVert c_j \rVert^2 - 2\, x \cdot c_j,

    the product summed in float64 by :func:`dot_chains` (``v``: the row in float64), ties to
    the lowest index. A BLAS product's rounding depends on the shape of the call and on the
    machine's kernels (a row scored in a block of 256 and the same row gathered with 3 others
    can round differently, and two equal centroids can get different scores); ``s_j`` does not.
    With ``margin`` at least twice the largest difference between the two kinds of scores, the
    centroid of least ``s_j`` over all ``k`` is always among the candidates, so the label is
    that centroid whatever the BLAS call was: the wide passes agree row for row."""
    d = v.shape[0]
    arg = -1
    least = np.inf
    for j in range(g.shape[0]):
        if g[j] <= best + margin:
            s = csq[j] - 2.0 * dot_chains(v, C[j], d)
            if s < least:
                least = s
                arg = j
    return arg


@njit(cache=True, nogil=True, inline="always")
def _chains(v, d):
    """``sum_t v_t^2`` over ``v[:d]`` by :func:`dot_chains`."""
    return dot_chains(v, v, d)


@njit(cache=True, nogil=True, inline="always")
def sum_block_count(nb, entries):
    """At most ``nb`` blocks, and few enough that their partial sums of ``entries`` float64
    each stay within :data:`SUM_ENTRIES` (16 MB; on MNIST against 256 centroids 41 blocks of
    1.6 MB took twice the time of 10: the rows' additions left the cache); at least one."""
    return max(1, min(nb, SUM_ENTRIES // max(entries, 1)))


@njit(cache=True, nogil=True, inline="always")
def sq_norm(X, i, v):
    """``||x_i||^2`` in float64 by :func:`_chains`, the row first converted into the scratch
    ``v`` (d,) float64: the conversion loop vectorises and the chains then read float64 (on
    784 float32 features 4x faster than converting inside the chains)."""
    d = X.shape[1]
    for t in range(d):
        v[t] = np.float64(X[i, t])
    return _chains(v, d)


@njit(cache=True, nogil=True, inline="always")
def sq_dist(X, i, C, a, v):
    """``||x_i - c_a||^2`` with the differences in float64 (into the scratch ``v``), summed as
    :func:`sq_norm` sums."""
    d = X.shape[1]
    for t in range(d):
        v[t] = np.float64(X[i, t]) - np.float64(C[a, t])
    return _chains(v, d)


@njit(cache=True, nogil=True, inline="always")
def _add_row(X, i, wi, N, S, a, v):
    """Row ``i`` of weight ``wi`` into cluster ``a`` of one block's sums ``N`` (k,), ``S`` (k, d);
    returns ``||x_i||^2`` (:func:`sq_norm`, through the scratch ``v``)."""
    N[a] += wi
    d = X.shape[1]
    for t in range(d):
        x = np.float64(X[i, t])
        v[t] = x
        S[a, t] += wi * x
    return _chains(v, d)


@njit(cache=True, nogil=True, inline="always")
def _assign_row(X, i, g, w, has_w, labels, N, S, v):
    """Row ``i`` to the centroid of its smallest score ``g_j`` (its label and its share of the
    sums ``N``, ``S``; ``v`` (d,) scratch); returns its term ``w_i [g_min + ||x_i||^2]_+`` of
    ``J``."""
    best, arg = _argmin(g)
    labels[i] = arg
    wi = np.float64(w[i]) if has_w else 1.0
    xs = _add_row(X, i, wi, N, S, arg, v)
    return wi * max(best + xs, 0.0)
