r"""The compiled loops behind :mod:`rbfkmeans.kernels` (numba; the equations are there).

Each ``prange`` loop runs over at most ``nb`` blocks of consecutive rows; every block writes only
its own row of the partial sums, and :func:`sum_blocks` adds those rows in block order, so the
result does not depend on how the blocks were shared out among the threads. Scratch arrays are
allocated once per call, one row per block (allocating inside the parallel body was 2x slower),
and partial sums are added by scalar loops (array expressions there allocate temporaries). The
scores are computed in float64 from ``C^T`` unless the caller hands them in (``scores`` with
rows; wide data, where a BLAS product computes them).

Only :mod:`rbfkmeans.kernels` and :mod:`rbfkmeans._lloyd_loops` (the Lloyd runs) import this
module; it needs numba.
"""

import math

import numpy as np
from numba import njit, prange

__all__ = ["WIDE_ROWS", "group", "halves", "hard", "hard_wide", "scatter_times", "spread",
           "sum_blocks"]



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


@njit(cache=True, nogil=True, inline="always")
def _argmin(g):
    """The smallest entry of ``g`` and its index (ties to the lowest).

    From ``ARGMIN_LANES`` entries on, four running minima over the indices ``0, 1, 2, 3
    (mod 4)``, merged at the end (the smaller value, on a tie the lower index): four
    independent chains of compare-and-select, where one chain waits on each comparison's
    latency (the argmin over 1,024 scores took as long as their matrix product). The same
    result as one chain for every ``g`` without NaN."""
    k = g.shape[0]
    if k < ARGMIN_LANES:
        best = g[0]
        arg = 0
        for j in range(1, k):
            if g[j] < best:
                best = g[j]
                arg = j
        return best, arg
    b0, b1, b2, b3 = g[0], g[1], g[2], g[3]
    a0, a1, a2, a3 = 0, 1, 2, 3
    top = k - k % 4
    for j in range(4, top, 4):
        if g[j] < b0:
            b0, a0 = g[j], j
        if g[j + 1] < b1:
            b1, a1 = g[j + 1], j + 1
        if g[j + 2] < b2:
            b2, a2 = g[j + 2], j + 2
        if g[j + 3] < b3:
            b3, a3 = g[j + 3], j + 3
    for j in range(top, k):  # the last k mod 4 entries join chain 0 (their indices are larger)
        if g[j] < b0:
            b0, a0 = g[j], j
    best, arg = _merge(b0, a0, b1, a1)
    best2, arg2 = _merge(b2, a2, b3, a3)
    return _merge(best, arg, best2, arg2)


@njit(cache=True, nogil=True, inline="always")
def _argmax(z):
    """The largest entry of ``z`` and its index (ties to the lowest): :func:`_argmin`'s chains
    on ``-z`` (negation is exact)."""
    k = z.shape[0]
    if k < ARGMIN_LANES:
        best = z[0]
        arg = 0
        for j in range(1, k):
            if z[j] > best:
                best = z[j]
                arg = j
        return best, arg
    b0, b1, b2, b3 = -z[0], -z[1], -z[2], -z[3]
    a0, a1, a2, a3 = 0, 1, 2, 3
    top = k - k % 4
    for j in range(4, top, 4):
        if -z[j] < b0:
            b0, a0 = -z[j], j
        if -z[j + 1] < b1:
            b1, a1 = -z[j + 1], j + 1
        if -z[j + 2] < b2:
            b2, a2 = -z[j + 2], j + 2
        if -z[j + 3] < b3:
            b3, a3 = -z[j + 3], j + 3
    for j in range(top, k):
        if -z[j] < b0:
            b0, a0 = -z[j], j
    best, arg = _merge(b0, a0, b1, a1)
    best2, arg2 = _merge(b2, a2, b3, a3)
    best, arg = _merge(best, arg, best2, arg2)
    return -best, arg


@njit(cache=True, nogil=True, inline="always")
def _merge(b, a, c, e):
    """The smaller of two (value, index) pairs; on equal values the lower index."""
    if c < b or (c == b and e < a):
        return c, e
    return b, a


@njit(cache=True, nogil=True, inline="always")
def sq_norm(X, i):
    """``||x_i||^2`` in float64: four partial sums over the features ``t = 0, 1, 2, 3 (mod 4)``,
    added pairwise at the end. Four independent chains of additions, where one chain made a
    pass over wide rows wait on its latency; the same order on every machine."""
    d = X.shape[1]
    s0 = s1 = s2 = s3 = 0.0
    t = 0
    while t + 4 <= d:
        x0 = np.float64(X[i, t])
        x1 = np.float64(X[i, t + 1])
        x2 = np.float64(X[i, t + 2])
        x3 = np.float64(X[i, t + 3])
        s0 += x0 * x0
        s1 += x1 * x1
        s2 += x2 * x2
        s3 += x3 * x3
        t += 4
    while t < d:
        x0 = np.float64(X[i, t])
        s0 += x0 * x0
        t += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True, inline="always")
def _add_row(X, i, wi, N, S, a):
    """Row ``i`` of weight ``wi`` into cluster ``a`` of one block's sums ``N`` (k,), ``S`` (k, d);
    returns ``||x_i||^2`` (:func:`sq_norm`)."""
    N[a] += wi
    for t in range(X.shape[1]):
        S[a, t] += wi * np.float64(X[i, t])
    return sq_norm(X, i)


@njit(cache=True, nogil=True, inline="always")
def _assign_row(X, i, g, w, has_w, labels, N, S):
    """Row ``i`` to the centroid of its smallest score ``g_j`` (its label and its share of the
    sums ``N``, ``S``); returns its term ``w_i [g_min + ||x_i||^2]_+`` of ``J``."""
    best, arg = _argmin(g)
    labels[i] = arg
    wi = np.float64(w[i]) if has_w else 1.0
    xs = _add_row(X, i, wi, N, S, arg)
    return wi * max(best + xs, 0.0)


@njit(parallel=True, cache=True, nogil=True)
def hard(X, C, w, objective, labels, nb):
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    CT, csq = _centroid_terms(C)
    block = (n + nb - 1) // nb
    N = np.zeros((nb, k))
    S = np.zeros((nb, k, d))
    J = np.zeros(nb)
    G = np.empty((nb, k))  # each block's scores (scratch allocated per block is slower)
    for b in prange(nb):
        g = G[b]
        Nb = N[b]
        Sb = S[b]
        for i in range(b * block, min(n, (b + 1) * block)):
            _row_scores(X, i, CT, csq, g)
            Ji = _assign_row(X, i, g, w, has_w, labels, Nb, Sb)
            if objective:
                J[b] += Ji
    return sum_blocks(N), sum_blocks(S.reshape(nb, k * d)).reshape(k, d), \
        sum_blocks(J.reshape(nb, 1))[0]

#: rows per matrix product in :func:`hard_wide` (their scores stay in the core's cache)
WIDE_ROWS = 256


@njit(parallel=True, cache=True, nogil=True)
def hard_wide(X, C, w, objective, labels, nb):
    """:func:`hard` for wide data: each block's scores ``||c_j||^2 - 2 x_i.c_j`` from matrix
    products of ``WIDE_ROWS`` rows at a time (BLAS, in ``X``'s dtype; the caller runs the BLAS
    on one thread), then the same argmin and sums."""
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    CT = np.ascontiguousarray(C.T)  # (d, k) in X's dtype
    csq = np.zeros(k)
    for j in range(k):
        for t in range(d):
            csq[j] += np.float64(C[j, t]) * np.float64(C[j, t])
    block = (n + nb - 1) // nb
    N = np.zeros((nb, k))
    S = np.zeros((nb, k, d))
    J = np.zeros(nb)
    G = np.empty((nb, k))
    for b in prange(nb):
        g = G[b]
        Nb = N[b]
        Sb = S[b]
        end = min(n, (b + 1) * block)
        for s0 in range(b * block, end, WIDE_ROWS):
            s1 = min(end, s0 + WIDE_ROWS)
            P = np.dot(X[s0:s1], CT)  # (rows, k); allocated here, as fast as a scratch array
            for r in range(s1 - s0):
                i = s0 + r
                for j in range(k):
                    g[j] = csq[j] - 2.0 * np.float64(P[r, j])
                Ji = _assign_row(X, i, g, w, has_w, labels, Nb, Sb)
                if objective:
                    J[b] += Ji
    return sum_blocks(N), sum_blocks(S.reshape(nb, k * d)).reshape(k, d), \
        sum_blocks(J.reshape(nb, 1))[0]


#: up to this many candidates a row's are sorted by insertion (no allocation); beyond, by a
#: merge sort (at a high temperature every centroid is one, and insertion costs ``O(c^2)``)
_INSERTION_MAX = 32


@njit(cache=True, nogil=True)
def _sort_candidates(ys, ms, c):
    """The first ``c`` gaps ``ys`` in increasing order, their multiplicities ``ms`` with them;
    stable (equal gaps keep their order) either way, so both sorts give the same result."""
    if c <= _INSERTION_MAX:
        for q in range(1, c):
            y = ys[q]
            mq = ms[q]
            p = q
            while p > 0 and ys[p - 1] > y:
                ys[p] = ys[p - 1]
                ms[p] = ms[p - 1]
                p -= 1
            ys[p] = y
            ms[p] = mq
        return
    order = np.argsort(ys[:c], kind="mergesort")
    ys[:c] = ys[:c][order]  # the fancy index makes a copy first
    ms[:c] = ms[:c][order]


@njit(parallel=True, cache=True, nogil=True)
def group(
    X, C, m, T, kind, w, objective, spread, hard_tol, single, split_pos, ns, GW, wide, nb
):
    n, d = X.shape
    g = C.shape[0]
    has_w = w.shape[0] > 0
    CT, csq = _centroid_terms(C)
    CX = np.ascontiguousarray(C.T)  # (d, g) in X's dtype, for the products of wide data
    none = np.empty((0, g), dtype=X.dtype)
    h = 0.5 * csq  # ||c_j||^2 / 2
    invT = 1.0 / T
    md = m.astype(np.float64)
    logm = np.log(md)
    sqm = np.sqrt(md)
    a = 0.5 if kind == 1 else 1.0
    hard_below = np.float64(np.float32(1.0 - hard_tol)) if single else 1.0 - hard_tol
    block = (n + nb - 1) // nb
    N = np.zeros((nb, g))
    S = np.zeros((nb, g, d))
    V = np.zeros((nb, g))
    acc = np.zeros((nb, 3))
    export = GW.shape[0] > 0  # the gains' weights go out (to a BLAS product), not into A
    A = np.zeros((nb, 0 if export else ns, d, d))
    scratch = np.empty((nb, 4, g))  # per block: scores, memberships, sorted gaps, their m
    support = np.empty((nb, g), dtype=np.int64)  # per block: the centroids a row may weigh
    diff = np.empty((nb, d))
    for b in prange(nb):
        z = scratch[b, 0]
        q = scratch[b, 1]
        ys = scratch[b, 2]
        ms = scratch[b, 3]
        js = support[b]  # in increasing order: the loops over them add in the order of j
        for j in range(g):
            js[j] = j
        y_row = diff[b]
        start = b * block
        end = min(n, (b + 1) * block)
        for s0 in range(start, end, WIDE_ROWS if wide else max(1, end - start)):
            s1 = min(end, s0 + WIDE_ROWS) if wide else end
            # wide data: the rows' x_i . c_j by one BLAS product (X's dtype; one BLAS thread)
            P = np.dot(X[s0:s1], CX) if wide else none
            for i in range(s0, s1):
                xs = 0.0
                if wide:
                    if spread:  # ||x||^2 only for the spread
                        xs = sq_norm(X, i)
                    for j in range(g):
                        z[j] = (np.float64(P[i - s0, j]) - h[j]) * invT
                elif g < 8:  # few groups: one dot product per group (the same sums, in order)
                    for t in range(d):
                        x = np.float64(X[i, t])
                        xs += x * x
                    for j in range(g):
                        zj = -h[j]
                        for t in range(d):
                            zj += np.float64(X[i, t]) * CT[t, j]
                        z[j] = zj
                    for j in range(g):
                        z[j] *= invT
                else:
                    for j in range(g):
                        z[j] = -h[j]
                    for t in range(d):
                        x = np.float64(X[i, t])
                        xs += x * x
                        for j in range(g):
                            z[j] += x * CT[t, j]
                    for j in range(g):
                        z[j] *= invT
                zmax, lab = _argmax(z)
                tot = 0.0
                c = g  # the candidates js[:c]: every centroid (softmax), those with y < 1
                if kind == 0:  # softmax of z + log m
                    for j in range(g):
                        q[j] = math.exp(z[j] - zmax + logm[j])
                        tot += q[j]
                else:  # the candidates y < 1, in increasing order
                    c = 0
                    for j in range(g):
                        y = a * (zmax - z[j])
                        if y < 1.0:
                            ys[c] = y
                            ms[c] = md[j]
                            js[c] = j
                            c += 1
                    _sort_candidates(ys, ms, c)
                    M = 0.0
                    S1 = 0.0
                    S2 = 0.0
                    s = 0
                    while s < c:  # add y_s while the mass at t = y_s is below one
                        y = ys[s]
                        f = M * y * y - 2.0 * S1 * y + S2 if kind == 1 else M * y - S1
                        if f >= 1.0:
                            break
                        M += ms[s]
                        S1 += ms[s] * y
                        S2 += ms[s] * y * y
                        s += 1
                    y_s = ys[s - 1]
                    f_s = 0.0
                    U1 = 0.0
                    for r in range(s):  # the mass at y_s, summed term by term
                        u = y_s - ys[r]
                        U1 += ms[r] * u
                        f_s += ms[r] * (u * u if kind == 1 else u)
                    rest = 1.0 - f_s
                    if kind == 1:
                        t_i = y_s + rest / (U1 + math.sqrt(U1 * U1 + M * rest))
                    else:
                        t_i = y_s + rest / M
                    for r in range(c):  # every other membership is 0 (and adds nothing)
                        j = js[r]
                        r_ = t_i - a * (zmax - z[j])
                        if r_ > 0.0:
                            q[j] = md[j] * (r_ * r_ if kind == 1 else r_)
                            tot += q[j]
                        else:
                            q[j] = 0.0
                wi = np.float64(w[i]) if has_w else 1.0
                inv = 1.0 / tot
                qmax = 0.0
                gap = 0.0
                ent = 0.0
                for r in range(c):
                    j = js[r]
                    qj = q[j] * inv
                    q[j] = qj
                    if qj > 0.0:
                        wq = wi * qj
                        N[b, j] += wq
                        for t in range(d):
                            S[b, j, t] += wq * np.float64(X[i, t])
                        if qj > qmax:
                            qmax = qj
                        if not objective:  # the free energy's terms (a log per centroid)
                            continue
                        gap += qj * (zmax - z[j])
                        if kind == 0:
                            ent -= qj * (math.log(qj) - logm[j])
                        elif kind == 1:
                            ent += qj * math.sqrt(qj) / sqm[j]
                        else:
                            ent += qj * qj / md[j]
                if spread:
                    dmin = max(xs - 2.0 * T * zmax, 0.0)
                    V[b, lab] += wi * dmin
                    if objective:
                        if kind == 1:
                            ent = (4.0 / 3.0) * (1.0 - ent)
                        elif kind == 2:
                            ent = 0.5 * (1.0 - ent)
                        acc[b, 0] += wi * (dmin + 2.0 * T * (gap - ent))
                        acc[b, 1] += wi * dmin
                        if single:  # float32 data: compared as float32 memberships are
                            qmax = np.float64(np.float32(qmax))
                        if qmax < hard_below or m[lab] > 1:
                            acc[b, 2] += wi
                for r in range(c if ns > 0 else 0):  # the gain weights of the splitting groups
                    j = js[r]
                    sp = split_pos[j]
                    if sp < 0 or q[j] <= 0.0:
                        continue
                    if kind == 0:
                        gw = wi * q[j] / md[j]
                    elif kind == 1:
                        gw = wi * math.sqrt(q[j] / md[j])
                    else:
                        gw = wi
                    if export:
                        GW[i, sp] = gw
                        continue
                    for u in range(d):
                        y_row[u] = np.float64(X[i, u]) - np.float64(C[j, u])
                    for u in range(d):
                        yu = gw * y_row[u]
                        for v in range(u + 1):  # the lower triangle (what eigh reads)
                            A[b, sp, u, v] += yu * y_row[v]
    return (sum_blocks(N), sum_blocks(S.reshape(nb, g * d)).reshape(g, d), sum_blocks(V),
            sum_blocks(acc), sum_blocks(A.reshape(nb, -1)).reshape(-1, d, d))

@njit(parallel=True, cache=True, nogil=True)
def spread(X, C, labels, w, scatter, nb):
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    CT, csq = _centroid_terms(C)
    block = (n + nb - 1) // nb
    R = np.zeros((nb, k))
    W = np.zeros((nb, k if scatter else 0, d, d))
    G = np.empty((nb, k))
    Y = np.empty((nb, d))
    for b in prange(nb):
        g = G[b]
        y = Y[b]
        for i in range(b * block, min(n, (b + 1) * block)):
            _row_scores(X, i, CT, csq, g)
            xs = 0.0
            for t in range(d):
                xs += np.float64(X[i, t]) * np.float64(X[i, t])
            g1 = np.inf  # the two smallest scores (as a sorted top-2 would give them)
            g2 = np.inf
            for j in range(k):
                if g[j] < g1:
                    g2 = g1
                    g1 = g[j]
                elif g[j] < g2:
                    g2 = g[j]
            wi = np.float64(w[i]) if has_w else 1.0
            a = labels[i]
            R[b, a] += wi * (max(g2 + xs, 0.0) - max(g1 + xs, 0.0))
            if not scatter:
                continue
            for t in range(d):
                y[t] = np.float64(X[i, t]) - np.float64(C[a, t])
            for u in range(d):
                yu = wi * y[u]
                for v in range(d):
                    W[b, a, u, v] += yu * y[v]
    return sum_blocks(R), sum_blocks(W.reshape(nb, W.shape[1] * d * d)).reshape(-1, d, d)

@njit(parallel=True, cache=True, nogil=True)
def scatter_times(X, C, labels, V, w, nb):
    """``U_a = sum_{a_i = a} w_i y_i (y_i . V_a)`` (k, d), ``y_i = x_i - c_a``: each cluster's
    scatter matrix times its vector, in one sweep, never forming a matrix (float64)."""
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    block = (n + nb - 1) // nb
    U = np.zeros((nb, k, d))
    Y = np.empty((nb, d))
    for b in prange(nb):
        y = Y[b]
        for i in range(b * block, min(n, (b + 1) * block)):
            a = labels[i]
            proj = 0.0
            for t in range(d):
                y[t] = np.float64(X[i, t]) - np.float64(C[a, t])
                proj += y[t] * V[a, t]
            if has_w:
                proj *= np.float64(w[i])
            for t in range(d):
                U[b, a, t] += proj * y[t]
    return sum_blocks(U.reshape(nb, k * d)).reshape(k, d)


@njit(parallel=True, cache=True, nogil=True)
def halves(X, C, labels, V, w, nb):
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    block = (n + nb - 1) // nb
    count = np.zeros((nb, 2 * k))
    total = np.zeros((nb, 2 * k, d))
    for b in prange(nb):
        for i in range(b * block, min(n, (b + 1) * block)):
            a = labels[i]
            proj = 0.0
            for t in range(d):
                proj += (np.float64(X[i, t]) - np.float64(C[a, t])) * V[a, t]
            half = 2 * a + (1 if proj > 0.0 else 0)
            wi = np.float64(w[i]) if has_w else 1.0
            count[b, half] += wi
            for t in range(d):
                total[b, half, t] += wi * np.float64(X[i, t])
    return sum_blocks(count), sum_blocks(total.reshape(nb, 2 * k * d)).reshape(2 * k, d)
