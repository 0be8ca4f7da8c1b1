r"""The compiled passes behind :mod:`rbfkmeans.kernels` (numba; the equations are there): the
hard pass (:func:`hard`, and :func:`hard_wide` from BLAS products on wide rows) and the group
pass of the annealing (:func:`group`). The per-row pieces they share are in
:mod:`rbfkmeans._row_loops`, the swap search's loops in :mod:`rbfkmeans._swap_loops`.

Each ``prange`` loop runs over at most ``nb`` blocks of consecutive rows; every block writes only
its own row of the partial sums, and :func:`sum_blocks` adds those rows in block order, so the
result does not depend on how the blocks were shared out among the threads. Scratch arrays are
allocated once per call, one row per block (allocating inside the parallel body was 2x slower),
and partial sums are added by scalar loops (array expressions there allocate temporaries). The
scores are computed in float64 from ``C^T`` unless the caller hands them in (``scores`` with
rows; wide data, where a BLAS product computes them). On wide data under a sparse mapping the
group pass finds the gathered rows' largest scores and candidates at once
(:func:`_maxima_at_once`), as :func:`hard_wide` finds their nearest centroids.

Only :mod:`rbfkmeans.kernels` and the other compiled modules (the Lloyd runs, the fixed point,
Hartigan's scoring) import this module; it needs numba.
"""

import math

import numpy as np
from numba import njit, prange

from ._row_loops import (
    _add_row,
    _argmax,
    _assign_row,
    _centroid_terms,
    _row_scores,
    centroid_norms,
    nearest_in_doubt,
    sq_norm,
    sum_blocks,
)

__all__ = ["ROWS_FIRST_BELOW", "WIDE_ROWS", "block_products", "group", "hard", "hard_wide"]


@njit(parallel=True, cache=True, nogil=True)
def hard(X, C, w, objective, labels, nb):
    """One hard pass over the rows of ``X`` (scores from ``C^T`` in float64): ``labels`` (n,)
    filled with each row's nearest centroid, and ``N``, ``S`` and (with ``objective``) ``J``
    summed in block order."""
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    CT, csq = _centroid_terms(C)
    block = (n + nb - 1) // nb
    N = np.zeros((nb, k))
    S = np.zeros((nb, k, d))
    J = np.zeros(nb)
    G = np.empty((nb, k))  # each block's scores (scratch allocated per block is slower)
    V = np.empty((nb, d))  # each block's row in float64
    for b in prange(nb):
        g = G[b]
        Nb = N[b]
        Sb = S[b]
        for i in range(b * block, min(n, (b + 1) * block)):
            _row_scores(X, i, CT, csq, g)
            Ji = _assign_row(X, i, g, w, has_w, labels, Nb, Sb, V[b])
            if objective:
                J[b] += Ji
    return sum_blocks(N), sum_blocks(S.reshape(nb, k * d)).reshape(k, d), \
        sum_blocks(J.reshape(nb, 1))[0]

#: rows per matrix product in :func:`hard_wide` (their scores stay in the core's cache)
WIDE_ROWS = 256
#: below this many centroids :func:`block_products` multiplies the rows by ``C^T`` and
#: transposes the small result: for 256 rows against 10 to 32 centroids (32 to 784 features,
#: one thread, numba's BLAS) ``X_b C^T`` took 0.55x-0.89x the time of ``C X_b^T``, and its
#: transposed copy is small beside it; from 64 centroids on the copy cost more than it saved
#: on narrow rows (64 features: 1.45x)
ROWS_FIRST_BELOW = 64


@njit(cache=True, nogil=True, inline="always")
def block_products(Cc, CT, Xb):
    """``C X_b^T`` (k, m), C-contiguous, of the rows ``X_b`` (m, d) against the centroids ``Cc``
    (k, d) (``CT`` (d, k) the same, transposed; both contiguous, in the rows' dtype) by BLAS;
    as ``(X_b C^T)^T`` copied for fewer than :data:`ROWS_FIRST_BELOW` centroids."""
    k, m = Cc.shape[0], Xb.shape[0]
    if k < ROWS_FIRST_BELOW:
        P = np.dot(Xb, CT)  # (m, k)
        PT = np.empty((k, m), dtype=P.dtype)
        for r in range(m):
            for j in range(k):
                PT[j, r] = P[r, j]
        return PT
    return np.dot(Cc, Xb.T)


@njit(parallel=True, cache=True, nogil=True)
def hard_wide(X, C, w, objective, labels, xs, unit, nb):
    r""":func:`hard` for wide data: each block's scores ``g_ij = ||c_j||^2 - 2 x_i.c_j`` from
    the matrix product ``C X_b^T`` (k, m) of ``m = WIDE_ROWS`` rows at a time (BLAS, in ``X``'s
    dtype; the caller runs the BLAS on one thread), the nearest centroids of the ``m`` rows
    found at once: centroid by centroid, each row's smallest and second smallest score kept in
    ``X``'s dtype (replaced where a score is strictly smaller: ties to the lowest index), a
    loop over the rows that the compiler vectorises where a row's own argmin is a chain of
    dependent compares. A row whose second score lies within

    .. math::  \delta_i = 4 \left( E_i + \epsilon \left(c^2 + 2 \lVert x_i \rVert c\right)
               \right), \qquad E_i = (2d + 4)\, \epsilon\, \lVert x_i \rVert c, \qquad
               c = \max_j \lVert c_j \rVert

    of its smallest (``epsilon = unit``, the dtype's unit roundoff; ``E_i`` bounds the
    product's rounding, the second term the score's own) takes its label from
    :func:`rbfkmeans._row_loops.nearest_in_doubt`, so the label does not depend on how BLAS
    shaped the product: the bounded passes of :mod:`rbfkmeans._wide_loops` give the same.
    Then the sums, in row order, and with ``objective`` ``J`` from the float64 score of each
    row's label and its ``||x_i||^2`` (summed as :func:`sq_norm` sums). ``xs`` (n,): the rows'
    squared norms for ``delta_i`` (in any float dtype, widened by their rounding; empty: each
    row's computed here before its label; ``J`` always takes the row's own)."""
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    norms = xs.shape[0] == 0  # each row's ||x_i||^2 from sq_norm, before its label
    widen = 1.0 + 4.0 * (d + 2.0) * 2.0**-24  # a float32 or float64 sum's rounding, at most
    Cc = np.ascontiguousarray(C)  # (k, d) in X's dtype
    CT = np.ascontiguousarray(C.T)
    csq, cmax = centroid_norms(C)
    csx = csq.astype(X.dtype)  # the scores in X's dtype
    kappa = (2.0 * d + 4.0) * unit * cmax  # E_i = kappa ||x_i||
    block = (n + nb - 1) // nb
    N = np.zeros((nb, k))
    S = np.zeros((nb, k, d))
    J = np.zeros(nb)
    LEAST = np.empty((nb, WIDE_ROWS), dtype=X.dtype)  # each block's smallest scores
    SECOND = np.empty((nb, WIDE_ROWS), dtype=X.dtype)  # and second smallest, of its m rows
    ARG = np.empty((nb, WIDE_ROWS), dtype=np.int32)  # the centroids of the smallest
    G = np.empty((nb, k))
    V = np.empty((nb, d))
    for b in prange(nb):
        Nb = N[b]
        Sb = S[b]
        least = LEAST[b]
        second = SECOND[b]
        arg = ARG[b]
        v = V[b]
        end = min(n, (b + 1) * block)
        for s0 in range(b * block, end, WIDE_ROWS):
            s1 = min(end, s0 + WIDE_ROWS)
            m = s1 - s0
            PT = block_products(Cc, CT, X[s0:s1])  # (k, m); allocated here, as fast as scratch
            for r in range(m):
                least[r] = csx[0] - (PT[0, r] + PT[0, r])
                second[r] = np.inf
                arg[r] = 0
            for j in range(1, k):
                cj = csx[j]
                for r in range(m):
                    g = cj - (PT[j, r] + PT[j, r])
                    second[r] = min(second[r], max(g, least[r]))
                    if g < least[r]:
                        least[r] = g
                        arg[r] = j
            for r in range(m):
                i = s0 + r
                # ||x_i||^2 for the margin: the caller's, widened, or the row's own (sq_norm;
                # v: the row in float64)
                xsi = sq_norm(X, i, v) if norms else np.float64(xs[i]) * widen
                xn = math.sqrt(xsi)
                a = np.int64(arg[r])
                doubt = 4.0 * (kappa * xn + unit * cmax * (cmax + 2.0 * xn))
                if np.float64(second[r]) - np.float64(least[r]) <= doubt:
                    g = G[b]
                    for j in range(k):
                        g[j] = csq[j] - 2.0 * np.float64(PT[j, r])
                    if not norms:
                        for t in range(d):
                            v[t] = np.float64(X[i, t])
                    a = nearest_in_doubt(Cc, csq, v, g, g[a], doubt)
                labels[i] = a
                wi = np.float64(w[i]) if has_w else 1.0
                if norms:  # the row is in v already
                    Nb[a] += wi
                    for t in range(d):
                        Sb[a, t] += wi * v[t]
                elif objective:  # the sums and the row's own ||x_i||^2 in one sweep
                    xsi = _add_row(X, i, wi, Nb, Sb, a, v)
                else:
                    Nb[a] += wi
                    for t in range(d):
                        Sb[a, t] += wi * np.float64(X[i, t])
                if objective:
                    J[b] += wi * max(csq[a] - 2.0 * np.float64(PT[a, r]) + xsi, 0.0)
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


@njit(cache=True, nogil=True, inline="always")
def _maxima_at_once(PT, h, invT, a, m, zmax, arg, count):
    """For the ``m`` rows of ``PT`` (g, m), the products ``x_i.c_j`` of gathered rows: each
    row's largest score ``z_ij = (x_i.c_j - ||c_j||^2 / 2) / T`` and its centroid (ties to the
    lowest index, as :func:`rbfkmeans._row_loops._argmax`), then how many centroids have
    ``y_ij = a (z_max - z_ij) < 1`` (the sparse mappings' candidates; the nearest among them).
    Centroid by centroid over the rows, loops the compiler vectorises, where a row's own
    maximum is a chain of dependent compares. Every ``z_ij`` is rounded as the row-by-row
    pass rounds it; a row with more than one candidate reads its scores down the column of
    ``PT`` afterwards (at the annealing's cold temperatures on MNIST's 64-dimensional PCA,
    21-37% of the rows against 1,024 centroids)."""
    g = PT.shape[0]
    for r in range(m):
        zmax[r] = (np.float64(PT[0, r]) - h[0]) * invT
        arg[r] = 0
        count[r] = 0
    for j in range(1, g):
        hj = h[j]
        for r in range(m):
            v = (np.float64(PT[j, r]) - hj) * invT
            if v > zmax[r]:
                zmax[r] = v
                arg[r] = j
    for j in range(g):
        hj = h[j]
        for r in range(m):
            v = (np.float64(PT[j, r]) - hj) * invT
            count[r] += 1 if a * (zmax[r] - v) < 1.0 else 0


@njit(parallel=True, cache=True, nogil=True)
def group(
    X, C, m, T, kind, w, objective, spread, hard_tol, single, split_pos, ns, GW, wide, nb
):
    n, d = X.shape
    g = C.shape[0]
    has_w = w.shape[0] > 0
    CT, csq = _centroid_terms(C)
    CX = np.ascontiguousarray(C.T)  # (d, g) in X's dtype, for the products of wide data
    Cc = np.ascontiguousarray(C)
    none = np.empty((0, g), dtype=X.dtype)
    # wide data under a sparse mapping: the gathered rows' maxima and candidates found at once
    at_once = wide and kind != 0
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
    ZM = np.empty((nb, WIDE_ROWS))  # per block: the gathered rows' largest scores,
    LB = np.empty((nb, WIDE_ROWS), dtype=np.int64)  # their centroids,
    CNT = np.empty((nb, WIDE_ROWS), dtype=np.int64)  # and how many centroids have y < 1
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
            if at_once:  # (g, m), the rows' maxima and candidate counts from it
                P = block_products(Cc, CX, X[s0:s1])
                _maxima_at_once(P, h, invT, a, s1 - s0, ZM[b], LB[b], CNT[b])
            elif wide:  # (m, g)
                P = np.dot(X[s0:s1], CX)
            else:
                P = none
            for i in range(s0, s1):
                xs = 0.0
                if wide:
                    if spread:  # ||x||^2 only for the spread
                        xs = sq_norm(X, i, y_row)
                    if not at_once:
                        for j in range(g):
                            z[j] = (np.float64(P[i - s0, j]) - h[j]) * invT
                    elif CNT[b, i - s0] > 1:  # the row's scores, read down the column
                        for j in range(g):
                            z[j] = (np.float64(P[j, i - s0]) - h[j]) * invT
                    else:  # one candidate: the row's nearest
                        z[LB[b, i - s0]] = ZM[b, i - s0]
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
                if at_once:
                    zmax, lab = ZM[b, i - s0], LB[b, i - s0]
                else:
                    zmax, lab = _argmax(z)
                tot = 0.0
                c = g  # the candidates js[:c]: every centroid (softmax), those with y < 1
                if kind == 0:  # softmax of z + log m
                    for j in range(g):
                        q[j] = math.exp(z[j] - zmax + logm[j])
                        tot += q[j]
                else:  # the candidates y < 1, in increasing order
                    c = 0
                    only = at_once and CNT[b, i - s0] == 1  # the nearest alone
                    for j in range(lab if only else 0, lab + 1 if only else g):
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
