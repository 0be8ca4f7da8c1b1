r"""Bounded hard passes for wide data (numba): group bounds, BLAS scores for the rows in doubt.

On wide data a score ``||c_j||^2 - 2 x_i.c_j`` costs ``d`` products and a pass a matrix product
of the whole data; late in a Lloyd run few labels change, and bounds (Elkan 2003; Hamerly 2010;
Ding et al. 2015, "Yinyang k-means") tell which rows cannot. The ``k`` centroids are cut into
``t`` groups of nearby ones (``t = k`` is Elkan's bounds, one per centroid; ``t = 1`` Hamerly's);
each row keeps an upper bound ``u_i`` on its distance to its centroid ``c_a`` and a lower bound
``l_ig`` on its distance to every other centroid of group ``g``. After an update that moves
centroid ``j`` by ``delta_j``, ``u_i + delta_a`` and ``l_ig - max_{j in g} delta_j`` still bound
them, and the row keeps its label unless

.. math::

    u_i^2 + 2 E_i \ge \min_g l_{ig}^2, \qquad
    E_i = (2d + 4)\, \epsilon\, \lVert x_i \rVert \max_j \lVert c_j \rVert

after ``u_i`` is tightened to the row's exact distance (``E_i`` bounds the rounding of a score
computed from a matrix product in the data's dtype, ``epsilon`` its unit roundoff; every bound
is also widened by a relative :data:`RHO`). A row that fails is tested group by group (Yinyang
k-means' local filter): only groups with ``u_i^2 + 2 E_i \ge l_{ig}^2`` can hold a nearer
centroid. Where those hold few centroids (at most the argument ``limit``), the row takes its
scores against them alone (:func:`_rescore_near`) and new bounds for those groups, the others
keeping theirs; the other rows are gathered, ``WIDE_ROWS`` at a time, into one matrix product
with all centroids (BLAS), and take the label and bounds of their scores. A skipped row, or a
skipped group, provably has no score below ``c_a``'s within any rounding.
Each group's two smallest scores are found for the gathered rows at once (:func:`_group_minima`,
centroid by centroid over the rows, as the full pass finds its nearest), where a row's own
minimum over its ``k`` scores is a chain of dependent compares (on MNIST's 64-dimensional PCA
against 1,024 centroids, the 24 bounded passes of a Lloyd run after its first took 0.70 s
against 1.04 s row by row, 2 threads).
A scored row whose second smallest score is within rounding of its smallest takes its label
from :func:`rbfkmeans._row_loops.nearest_in_doubt` (the product summed in float64 in a fixed
order, among the centroids in doubt), as the full pass :func:`rbfkmeans._loops.hard_wide`
does: BLAS rounds a row's products differently when it is gathered with other rows than in a
full block, so a tie within rounding (equal centroids, a row on a boundary) could otherwise
part the two passes. Every label is the one a full pass gives. The caller keeps the sums ``N``,
``S`` and updates them by the rows whose label changed (:mod:`rbfkmeans._sums_loops`). Lower
bounds are stored in float32 (rounded down) to keep ``n t`` of them in memory.

Only :mod:`rbfkmeans._lloyd_loops` imports this module; it needs numba.
"""

import math

import numpy as np
from numba import njit, prange

from ._loops import WIDE_ROWS, block_products
from ._row_loops import (
    centroid_norms,
    nearest_in_doubt,
    sq_dist,
)

__all__ = ["LOCAL_CENTROIDS", "LOCAL_MIN_WORK", "RHO", "bounded_wide", "fold_moved", "local_limit"]

#: relative slack of the bounds (far above the few roundings each accumulates per step)
RHO = 64.0 * 2.0**-52
#: Lloyd runs score a row against the centroids its group bounds leave in doubt alone where
#: they are at most ``LOCAL_CENTROIDS`` and ``k d`` is at least ``LOCAL_MIN_WORK``
#: (:func:`local_limit`), by BLAS products with all ``k`` otherwise. The groups a row does not
#: score keep bounds that loosen pass after pass, so more rows fail the test; it pays where a
#: row's product with all centroids is long. 24 Lloyd passes from random rows, 2 threads,
#: against scoring every row in doubt by the product: MNIST's 64-dimensional PCA with
#: k = 1,024 0.54 s against about 0.70 s (at most 16 or 64 centroids: 0.67 s, 0.58 s); MNIST
#: (784 features) with k = 256 1.39-1.48 s against 2.01-2.04 s (8 or 64: 1.88-1.96 s, 1.72 s),
#: with k = 64 0.81 s against 0.88 s; slower where ``k d`` is small: the PCA with k = 128
#: 0.22 s against 0.16 s, with k = 32 0.12 s against 0.09 s, MNIST with k = 10 0.39 s
#: against 0.37 s
LOCAL_CENTROIDS = 32
LOCAL_MIN_WORK = 1 << 15
#: float32 lower bounds are stored this much below their float64 value (a float32 rounds by at
#: most 2^-24 relative)
_DOWN = 1.0 - 2.0**-20


@njit(cache=True, nogil=True, inline="always")
def local_limit(k, d):
    """The most centroids a row in doubt is scored against alone (:data:`LOCAL_CENTROIDS`;
    0, none, where ``k d`` is below :data:`LOCAL_MIN_WORK`)."""
    return LOCAL_CENTROIDS if k * d >= LOCAL_MIN_WORK else 0


@njit(cache=True, nogil=True, inline="always")
def _lower_bound(score, xs_i, E):
    """A float32 lower bound on ``||x_i - c_j||`` from the score ``||c_j||^2 - 2 x_i.c_j`` of
    a product whose rounding ``E`` bounds (``xs_i = ||x_i||^2``), rounded down."""
    return np.float32(math.sqrt(max(score + xs_i - E, 0.0)) * (1.0 - RHO) * _DOWN)


@njit(cache=True, nogil=True, inline="always")
def _upper_bound(score, xs_i, E):
    """An upper bound on ``||x_i - c_a||`` from its score (:func:`_lower_bound`)."""
    return math.sqrt(max(score + xs_i + E, 0.0)) * (1.0 + RHO)


@njit(cache=True, nogil=True)
def _members(group_of, t):
    """The centroids sorted by group (k,), in index order within each, and where each group's
    run of them starts (t + 1,)."""
    starts = np.zeros(t + 1, dtype=np.int64)
    for j in range(group_of.shape[0]):
        starts[group_of[j] + 1] += 1
    for g in range(t):
        starts[g + 1] += starts[g]
    members = np.empty(group_of.shape[0], dtype=np.int64)
    fill = starts[:t].copy()
    for j in range(group_of.shape[0]):
        members[fill[group_of[j]]] = j
        fill[group_of[j]] += 1
    return members, starts


@njit(cache=True, nogil=True, inline="always")
def _group_lows(scores, a, members, starts, lows):
    """``lows[g]``: the smallest of ``scores`` over the centroids of group ``g`` other than
    ``a`` (``inf`` for none), each group's run of :func:`_members` read in turn: a short
    chain of compares per group, where a scatter over the centroids in index order had
    updated the groups' minima one dependent step at a time."""
    for g in range(lows.shape[0]):
        low = np.inf
        for q in range(starts[g], starts[g + 1]):
            j = members[q]
            v = scores[j]
            if v < low and j != a:
                low = v
        lows[g] = low


@njit(cache=True, nogil=True, inline="always")
def _group_minima(PT, m, csq, members, starts, least, second, arg, top, near):
    """For each group ``g`` and each of ``m`` rows, the columns of ``PT`` (k, m) = ``C X_b^T``:
    the smallest score ``g_jr = ||c_j||^2 - 2 PT[j, r]`` (float64) over the group's centroids
    ``least[g, r]``, its centroid ``arg[g, r]`` (the first of equal ones in the group's run)
    and the second smallest ``second[g, r]`` (``inf`` for none; an empty group ``inf`` and
    ``-1``); over all centroids the smallest ``top[0, r]``, the second smallest ``top[1, r]``
    and the group of the smallest ``near[r]``. Centroid by centroid, each a loop over the
    ``m`` rows that the compiler vectorises, as :func:`rbfkmeans._loops.hard_wide` finds the
    nearest: a row's own minimum over its ``k`` scores is a chain of dependent compares."""
    for r in range(m):
        top[0, r] = np.inf
        top[1, r] = np.inf
        near[r] = 0
    for g in range(starts.shape[0] - 1):
        if starts[g] == starts[g + 1]:
            for r in range(m):
                least[g, r] = np.inf
                second[g, r] = np.inf
                arg[g, r] = -1
            continue
        j = members[starts[g]]
        cj = csq[j]
        for r in range(m):
            least[g, r] = cj - 2.0 * np.float64(PT[j, r])
            second[g, r] = np.inf
            arg[g, r] = j
        for q in range(starts[g] + 1, starts[g + 1]):
            j = members[q]
            cj = csq[j]
            for r in range(m):
                s = cj - 2.0 * np.float64(PT[j, r])
                second[g, r] = min(second[g, r], max(s, least[g, r]))
                if s < least[g, r]:
                    least[g, r] = s
                    arg[g, r] = j
        for r in range(m):  # the group's two smallest join the row's
            s = least[g, r]
            top[1, r] = min(top[1, r], max(s, top[0, r]), second[g, r])
            if s < top[0, r]:
                top[0, r] = s
                near[r] = g


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(v, C, j):
    """``x . c_j`` in float64 (``v``: the row in float64), summed in whatever order the compiler
    vectorises: its rounding, below ``d u ||x|| ||c_j||`` for either dtype's products, stays far
    inside the score's bound ``E_i``. (In a fixed order, as :func:`dot_chains` sums, a group
    of eight centroids of 64 features took 150 ns; vectorised, 32 ns.)"""
    s = 0.0
    for q in range(v.shape[0]):
        s += v[q] * np.float64(C[j, q])
    return s


@njit(cache=True, nogil=True, inline="always")
def _rescore_near(i, a, reach, xs_i, E, doubt, v, lower, members, starts, group_of, C, csq,
                  limit, cand, ids, vals, scores):
    """Label row ``i`` (``v``: the row in float64) from the groups its bounds leave in doubt:
    the groups ``g`` whose bound ``l_ig`` (stored, moved) does not exceed the tightened upper
    bound (``reach``: ``u_i^2 (1 + RHO) + 2 E_i``), each centroid's score
    ``||c_j||^2 - 2 x.c_j`` of those groups and of ``c_a`` summed in float64 (an error far
    below ``E_i``), a tie within ``doubt`` settled by :func:`nearest_in_doubt` among the
    centroids scored; the new bounds of the groups scored (their smallest score but at the
    label), ``c_a``'s distance joining its group's bound where the label leaves it. Every
    centroid of another group is farther than ``c_a`` by the bounds' margin, so the label is
    the one a full pass gives. Returns the label and the smallest score, or ``-1`` where the
    groups in doubt hold more than ``limit`` centroids (the row is then scored against all)."""
    t = starts.shape[0] - 1
    ng = 0
    count = 0
    for g in range(t):
        low = np.float64(lower[i, g])
        if reach >= low * low * (1.0 - RHO):
            cand[ng] = g
            ng += 1
            count += starts[g + 1] - starts[g]
            if count > limit:
                return -1, 0.0
    ga = group_of[a]
    m = 0
    a_in = False
    for h in range(ng):
        g = cand[h]
        for p in range(starts[g], starts[g + 1]):
            j = members[p]
            ids[m] = j
            vals[m] = csq[j] - 2.0 * _dot(v, C, j)
            m += 1
        a_in = a_in or g == ga
    if not a_in:
        ids[m] = a
        vals[m] = csq[a] - 2.0 * _dot(v, C, a)
        m += 1
    best = np.inf
    second = np.inf
    label = a
    for r in range(m):
        s = vals[r]
        if s < best:
            second = best
            best = s
            label = ids[r]
        elif s < second:
            second = s
    if second - best <= doubt:  # a tie within rounding, settled as hard_wide settles it
        scores[:] = np.inf
        for r in range(m):
            scores[ids[r]] = vals[r]
        label = nearest_in_doubt(C, csq, v, scores, best, doubt)
        best = scores[label]
    r = 0
    for h in range(ng):  # (a group of the label alone: inf)
        g = cand[h]
        low = np.inf
        for _ in range(starts[g + 1] - starts[g]):
            if ids[r] != label and vals[r] < low:
                low = vals[r]
            r += 1
        lower[i, g] = _lower_bound(low, xs_i, E)
    if not a_in and label != a:
        low = _lower_bound(vals[m - 1], xs_i, E)
        if low < lower[i, ga]:
            lower[i, ga] = low
    return label, best


@njit(parallel=True, cache=True, nogil=True)
def bounded_wide(X, C, old, new, upper, lower, xs, delta, group_of, t, unit, first, nb, limit):
    """One hard pass of the rows of ``X`` (n, d) against ``C`` (k, d) (module docstring) into
    ``new`` (n,) from the labels ``old`` and the bounds ``upper`` (n,), ``lower`` (n, t) set at
    centroids that have since moved by ``delta`` (k,); ``group_of`` (k,) the group of each
    centroid, ``unit`` the dtype's unit roundoff. ``first``: every row is scored (the bounds are
    set). A row whose ``old`` label is negative (its centroid gone) is scored against all. A
    row whose groups in doubt hold at most ``limit`` centroids is scored against those alone
    (0: none is). The caller keeps the sums (:func:`label_sums`, :func:`move_rows`). Returns
    the number of rows scored against all centroids."""
    n, d = X.shape
    k = C.shape[0]
    Cc = np.ascontiguousarray(C)  # (k, d) in X's dtype, for the products
    CT = np.ascontiguousarray(C.T)
    csq, cmax = centroid_norms(C)
    kappa = (2.0 * d + 4.0) * unit  # E_i = kappa ||x_i|| max_j ||c_j||
    shift = np.zeros(t)  # the most any centroid of each group moved
    for j in range(k):
        shift[group_of[j]] = max(shift[group_of[j]], delta[j])
    members, starts = _members(group_of, t)
    block = (n + nb - 1) // nb
    scored = np.zeros(nb, dtype=np.int64)
    for b in prange(nb):
        lo = b * block
        hi = min(n, lo + block)
        todo = np.empty(hi - lo, dtype=np.int64)  # the rows this block must score
        v = np.empty(d)
        cand = np.empty(t, dtype=np.int64)
        ids = np.empty(k + 1, dtype=np.int64)
        vals = np.empty(k + 1)
        scores = np.empty(k)
        m = 0
        for i in range(lo, hi):
            if first or old[i] < 0:
                todo[m] = i
                m += 1
                continue
            a = old[i]
            E = kappa * math.sqrt(xs[i]) * cmax
            u = (upper[i] + delta[a]) * (1.0 + RHO)
            glb = np.inf
            for g in range(t):
                lb = (np.float64(lower[i, g]) - shift[g]) * (1.0 - RHO)
                if lb < 0.0:
                    lb = 0.0
                lower[i, g] = np.float32(lb * _DOWN)
                glb = min(glb, np.float64(lower[i, g]))
            skip = u * u * (1.0 + RHO) + 2.0 * E < glb * glb * (1.0 - RHO)
            if not skip:  # tighten the upper bound to the row's distance, and test again
                dist = sq_dist(X, i, C, a, v)
                u = math.sqrt(dist) * (1.0 + RHO) + 4.0 * unit * math.sqrt(xs[i] + cmax * cmax)
                skip = u * u * (1.0 + RHO) + 2.0 * E < glb * glb * (1.0 - RHO)
            upper[i] = u
            if skip:
                new[i] = a
                continue
            for q in range(d):
                v[q] = np.float64(X[i, q])
            xn = math.sqrt(xs[i])
            doubt = 4.0 * (E + unit * cmax * (cmax + 2.0 * xn))
            c, best = _rescore_near(i, a, u * u * (1.0 + RHO) + 2.0 * E, xs[i], E, doubt, v,
                                    lower, members, starts, group_of, C, csq, limit, cand, ids,
                                    vals, scores)
            if c >= 0:
                new[i] = c
                upper[i] = _upper_bound(best, xs[i], E)
            else:
                todo[m] = i
                m += 1
        scored[b] = m
        rows = min(WIDE_ROWS, max(m, 1))
        buf = np.empty((rows, d), dtype=X.dtype)
        least = np.empty((t, rows))  # per group and gathered row: the smallest score,
        second = np.empty((t, rows))  # the second smallest
        arg = np.empty((t, rows), dtype=np.int64)  # and the centroid of the smallest
        top = np.empty((2, rows))  # over all groups: the smallest and second smallest score
        near = np.empty(rows, dtype=np.int64)  # and the group of the smallest
        lows = np.empty(t)
        for s0 in range(0, m, WIDE_ROWS):
            s1 = min(m, s0 + WIDE_ROWS)
            for r in range(s1 - s0):
                i = todo[s0 + r]
                for q in range(d):
                    buf[r, q] = X[i, q]
            PT = block_products(Cc, CT, buf[: s1 - s0])  # (k, rows) BLAS, in X's dtype
            _group_minima(PT, s1 - s0, csq, members, starts, least, second, arg, top, near)
            for r in range(s1 - s0):
                i = todo[s0 + r]
                xn = math.sqrt(xs[i])
                E = kappa * xn * cmax
                h = near[r]
                a = arg[h, r]
                best = top[0, r]
                for g in range(t):  # the lowest score of each group but at c_a
                    lows[g] = least[g, r]
                lows[h] = second[h, r]
                # a tie within rounding, settled as hard_wide settles it
                doubt = 4.0 * (E + unit * cmax * (cmax + 2.0 * xn))
                if top[1, r] - best <= doubt:
                    for j in range(k):
                        scores[j] = csq[j] - 2.0 * np.float64(PT[j, r])
                    for q in range(d):
                        v[q] = np.float64(X[i, q])
                    c = nearest_in_doubt(C, csq, v, scores, best, doubt)
                    if c != a:
                        a = c
                        best = scores[a]
                        _group_lows(scores, a, members, starts, lows)
                new[i] = a
                upper[i] = _upper_bound(best, xs[i], E)
                for g in range(t):  # (an empty group's inf stays inf)
                    lower[i, g] = _lower_bound(lows[g], xs[i], E)
    return scored.sum()


@njit(parallel=True, cache=True, nogil=True)
def fold_moved(X, C, moved, group_of, lower, xs, unit, nb):
    """Bounds set at other centroids made valid for ``C`` (k, d), whose rows ``moved`` are new
    (the others unchanged): each row's lower bound ``lower[i, g]`` (n, t) for the group ``g``
    of a moved centroid ``c_j`` takes ``min(l_ig, ||x_i - c_j||)``, the distance bounded below
    from the score ``||c_j||^2 - 2 x_i.c_j`` of a BLAS product and its rounding bound ``E_i``
    (module docstring). A bound over a group that lost centroids stays a bound. O(n d m)."""
    n, d = X.shape
    m = moved.shape[0]
    if m == 0:
        return
    c_sq, cmax = centroid_norms(C)
    kappa = (2.0 * d + 4.0) * unit
    CmT = np.empty((d, m), dtype=X.dtype)
    csq = np.empty(m)
    for r in range(m):
        csq[r] = c_sq[moved[r]]
        for q in range(d):
            CmT[q, r] = C[moved[r], q]
    block = (n + nb - 1) // nb
    for b in prange(nb):
        lo = b * block
        hi = min(n, lo + block)
        if hi <= lo:
            continue
        P = np.dot(X[lo:hi], CmT)  # (rows, m) BLAS, in X's dtype
        for i in range(lo, hi):
            E = kappa * math.sqrt(xs[i]) * cmax
            for r in range(m):
                g = group_of[moved[r]]
                low = _lower_bound(csq[r] - 2.0 * np.float64(P[i - lo, r]), xs[i], E)
                if low < lower[i, g]:
                    lower[i, g] = low
