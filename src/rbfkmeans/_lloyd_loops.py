r"""The compiled Lloyd runs behind :func:`rbfkmeans.kernels.lloyd_run` (numba).

:func:`lloyd` iterates assignment and update with the stopping rules of
:func:`rbfkmeans.lloyd.lloyd`. On few features its passes are :func:`bounded` (Hamerly 2010):
each row keeps an upper bound ``u_i`` on the distance to its centroid ``c_a`` and a lower bound
``l_i`` on the distance to every other, moved by the centroids' shifts ``delta`` after each
update (``u_i + delta_a``, ``l_i - max_{j != a} delta_j``), and the row is recomputed only unless

.. math::

    u_i^2 + 2 E_i < \max(l_i, s_a - u_i)^2, \qquad
    E_i = 16 (d + 4) \epsilon \left(\lVert x_i \rVert^2 + \max_j \lVert c_j \rVert^2\right),

with ``s_a`` the distance from ``c_a`` to its nearest other centroid and ``E_i`` a bound on the
rounding error of one score ``||c_j||^2 - 2 x_i.c_j`` (``epsilon = 2^-52``; every bound is also
widened by a relative ``64 epsilon``). A row that passes has the strictly smallest computed score
at ``c_a``, so it keeps the label a full pass gives it; the others take the scores, argmin and
sums of :func:`rbfkmeans._loops.hard` in the same order: labels, sums and iterations equal those
of full passes bit for bit. On wide data the passes are :func:`rbfkmeans._loops.hard_wide`.
A run ends with one more pass at the centroids it reached, for their labels and ``J`` (a bounded
one computes each skipped row's own score as the full pass does, so ``J`` is the full pass's
too): the caller needs no pass of its own.

Only :mod:`rbfkmeans.kernels` imports this module; it needs numba.
"""

import math

import numpy as np
from numba import njit, prange

from ._loops import hard_wide
from ._row_loops import (
    _add_row,
    _centroid_terms,
    _row_scores,
    dot_chains,
    sq_dist,
    sq_norm,
    sum_blocks,
)
from ._sums_loops import label_sums, move_rows
from ._wide_loops import bounded_wide, fold_moved, local_limit

__all__ = ["bounded", "lloyd"]

#: relative slack of the bounds (far above the few roundings each of them accumulates per step)
_RHO = 64.0 * 2.0**-52


@njit(parallel=True, cache=True, nogil=True)
def bounded(X, C, w, old, new, upper, lower, xs, delta, first, objective, moved, nb):
    """One hard pass that skips the rows whose label provably stays (Hamerly 2010): ``upper``
    bounds the distance of row ``i`` to its centroid ``old[i]``, ``lower`` the distance to every
    other (both refreshed here by the moves ``delta`` (k,) of the centroids since they were
    set); a row is recomputed unless ``upper^2 + 2 E_i < max(lower, s_a - upper)^2``, with
    ``s_a`` the distance of ``c_a`` to its nearest other centroid and ``E_i`` a bound on the
    rounding error of a score. Rows recomputed take the scores, argmin and sums of :func:`hard`
    in the same order, so labels and sums equal its bit for bit; with ``objective`` a skipped
    row's own score is computed as :func:`hard` computes it, so ``J`` does too. ``first``:
    every row. ``moved``: centroids the bounds do not cover (a run started from another run's
    bounds): each row's distance to them is computed and joins its lower bound; a row whose
    ``old`` label is negative or among them is recomputed. Returns ``N``, ``S`` and ``J`` (0
    without ``objective``)."""
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    CT, csq = _centroid_terms(C)
    cmax = 0.0
    for j in range(k):
        cmax = max(cmax, csq[j])
    kappa = 16.0 * (d + 4) * 2.0**-52  # E_i = kappa (||x_i||^2 + max_j ||c_j||^2)
    sep = np.full(k, np.inf)  # a lower bound on the distance of c_a to its nearest other
    for a in range(k):
        for j in range(a + 1, k):
            s2 = 0.0
            for t in range(d):
                dt = np.float64(C[a, t]) - np.float64(C[j, t])
                s2 += dt * dt
            s = math.sqrt(s2) * (1.0 - _RHO)
            sep[a] = min(sep[a], s)
            sep[j] = min(sep[j], s)
    uncovered = np.zeros(k, dtype=np.bool_)
    for q in range(moved.shape[0]):
        uncovered[moved[q]] = True
    top = -1  # the centroid that moved most and the two largest moves
    d1 = 0.0
    d2 = 0.0
    for j in range(k):
        if delta[j] > d1:
            d2 = d1
            d1 = delta[j]
            top = j
        elif delta[j] > d2:
            d2 = delta[j]
    block = (n + nb - 1) // nb
    N = np.zeros((nb, k))
    S = np.zeros((nb, k, d))
    J = np.zeros(nb)
    G = np.empty((nb, k))
    V = np.empty((nb, d))
    for b in prange(nb):
        g = G[b]
        Nb = N[b]
        Sb = S[b]
        for i in range(b * block, min(n, (b + 1) * block)):
            a = old[i]
            E = kappa * (xs[i] + cmax)
            ga = np.inf  # the row's own score, once computed
            if not first and a >= 0 and not uncovered[a]:
                u = (upper[i] + delta[a]) * (1.0 + _RHO)
                l = max((lower[i] - (d2 if a == top else d1)) * (1.0 - _RHO), 0.0)
                for q in range(moved.shape[0]):  # the centroids the bounds do not cover
                    gm = _own_score(X, i, CT, csq, moved[q])
                    l = min(l, math.sqrt(max(gm + xs[i] - E, 0.0)) * (1.0 - _RHO))
                L = max(l, (sep[a] - u) * (1.0 - _RHO))
                skip = u * u * (1.0 + _RHO) + 2.0 * E < L * L * (1.0 - _RHO)
                if not skip or objective:  # the own score: tighten the bound (and test again)
                    ga = _own_score(X, i, CT, csq, a)
                if not skip:
                    u = math.sqrt(max(ga + xs[i], 0.0) + E) * (1.0 + _RHO)
                    skip = u * u * (1.0 + _RHO) + 2.0 * E < L * L * (1.0 - _RHO)
                upper[i] = u
                lower[i] = l
            else:
                skip = False
            if not skip:
                _row_scores(X, i, CT, csq, g)
                g1 = g[0]
                g2 = np.inf
                a = 0
                for j in range(1, k):
                    if g[j] < g1:
                        g2 = g1
                        g1 = g[j]
                        a = j
                    elif g[j] < g2:
                        g2 = g[j]
                ga = g1
                upper[i] = math.sqrt(max(g1 + xs[i], 0.0) + E) * (1.0 + _RHO)
                lower[i] = math.sqrt(max(g2 + xs[i] - E, 0.0)) * (1.0 - _RHO)
            new[i] = a
            wi = np.float64(w[i]) if has_w else 1.0
            _add_row(X, i, wi, Nb, Sb, a, V[b])
            if objective:  # the term of hard's J: the row's smallest score is its own
                J[b] += wi * max(ga + xs[i], 0.0)
    return sum_blocks(N), sum_blocks(S.reshape(nb, k * d)).reshape(k, d), \
        sum_blocks(J.reshape(nb, 1))[0]


@njit(cache=True, nogil=True, inline="always")
def _own_score(X, i, CT, csq, a):
    """``g_a = ||c_a||^2 - 2 x_i.c_a`` in the order of :func:`rbfkmeans._row_loops._row_scores`."""
    ga = csq[a]
    for t in range(X.shape[1]):
        ga += -2.0 * np.float64(X[i, t]) * CT[t, a]
    return ga


@njit(parallel=True, cache=True, nogil=True)
def _moments(X, w, xs, nb, given):
    """``sum_i w_i ||x_i||^2`` (summed by blocks of rows in block order: the same on any number
    of threads), filling ``xs`` (n,) with ``||x_i||^2`` unless it is empty (``given``: ``xs``
    holds them already; the same sum, without reading ``X``)."""
    n, d = X.shape
    block = (n + nb - 1) // nb
    part = np.zeros((nb, 1))
    V = np.empty((nb, 0 if given else d))
    for b in prange(nb):
        total = 0.0
        for i in range(b * block, min(n, (b + 1) * block)):
            # as the passes' sums compute it: J's terms agree bit for bit
            s = xs[i] if given else sq_norm(X, i, V[b])
            if xs.shape[0] and not given:
                xs[i] = s
            total += s * (np.float64(w[i]) if w.shape[0] else 1.0)
        part[b, 0] = total
    return sum_blocks(part)[0]


@njit(cache=True, nogil=True)
def _shifts(C_new, C, delta):
    """Each centroid's move ``delta_j = ||c_j^new - c_j||`` (widened by the bounds' relative
    slack), the differences in float64; returns ``sum_j ||c_j^new - c_j||^2``, summed entry by
    entry in row order, as the Python loop sums it."""
    k, d = C.shape
    shift = 0.0
    for j in range(k):
        move = 0.0
        for t in range(d):
            step = np.float64(C_new[j, t]) - np.float64(C[j, t])
            shift += step * step
            move += step * step
        delta[j] = math.sqrt(move) * (1.0 + _RHO)
    return shift


@njit(parallel=True, cache=True, nogil=True)
def _labelled_J(X, C, w, labels, nb, spherical):
    """``J = sum_i w_i ||x_i - c_{l_i}||^2``, the differences in float64, block sums added in
    block order (as :func:`rbfkmeans.lloyd._labelled_inertia` computes it for the torch
    passes); ``spherical``: ``sum_i w_i (1 - x_i . c_{l_i})`` of unit rows and centroids, the
    products in float64."""
    n, d = X.shape
    block = (n + nb - 1) // nb
    part = np.zeros((nb, 1))
    V = np.empty((nb, d))
    for b in prange(nb):
        total = 0.0
        for i in range(b * block, min(n, (b + 1) * block)):
            if spherical:  # the row in float64, the centroid's entries widened as they are read
                for t in range(d):
                    V[b, t] = np.float64(X[i, t])
                r = 1.0 - dot_chains(V[b], C[labels[i]], d)
            else:
                r = sq_dist(X, i, C, labels[i], V[b])
            total += r * (np.float64(w[i]) if w.shape[0] else 1.0)
        part[b, 0] = total
    return sum_blocks(part)[0]


@njit(cache=True, nogil=True)
def lloyd(X, C0, w, max_iter, tol, nb, wide, target, stall, floor, floor_after, warm_labels,
          warm_upper, warm_lower, moved, group_of, unit, spherical, warm_lower_g, warm_xs, warm_C):
    """Lloyd iterations on bounded passes (:func:`bounded`; ``wide``: full passes of
    :func:`hard_wide`) with the stopping rules of :func:`rbfkmeans.lloyd.lloyd` (status 1), its
    give-up rule for a finite ``target`` (status 3: ``J_t - target > stall (J_{t-1} - J_t)``
    from the third iteration, ``J_t = sum_i w_i ||x_i||^2 - sum_j ||S_j||^2 / N_j`` the
    objective of the pass's labels at their means), from iteration ``floor_after`` on the
    resolution rule (status 1: ``J_t <= floor sum_i w_i ||x_i||^2``; ``floor`` 0: never) or
    ``max_iter`` (status 0), then one more
    pass at the centroids reached for their labels and ``J`` (those of :func:`hard` bit for
    bit; on grouped wide runs a bounded pass, the same labels, and ``J`` from them by
    :func:`_labelled_J`: a full pass of MNIST's 784 features against 256 centroids took
    160 ms, as much as the rest of a Lloyd call from a near fixed point). Stops before
    relocating an empty cluster (status 2, returning the labels of the pass
    before and no ``J``). Returns ``C``, the labels, ``J``, the iterations, the status and the
    bounds at ``C``: upper, lower (n,; on grouped wide data the upper bounds and an empty
    lower), the group bounds (n, t) and ``||x_i||^2`` (n,) of grouped wide data (empty
    otherwise); all empty after status 2 and on ungrouped wide data.

    ``warm_labels`` (n,; empty: a cold start) with ``warm_upper``, ``warm_lower`` are the labels
    and bounds a finished run left at its centroids ``warm_C`` (k, d; renumbered to ``C0``'s
    rows, -1 where that centroid is gone), which ``C0`` continues except the rows ``moved``
    (new centroids; their row of ``warm_C`` is their own): the bounds move by
    ``||c_j - c_j^warm||`` as after an update, and the first pass starts from them
    (:func:`bounded` with ``moved``) instead of scoring every row against every centroid; its
    labels and sums are those of a full pass all the same. On
    grouped wide data the parent's group bounds ``warm_lower_g`` (n, t) and ``warm_xs`` come
    too, and ``group_of`` keeps its groups (a moved centroid in any of them): the moved
    centroids' distances join the bounds (:func:`rbfkmeans._wide_loops.fold_moved`), and
    the first pass scores only the rows they leave in doubt.

    Wide data with ``group_of`` (k,; the group of each centroid, empty: full passes) runs on
    :func:`rbfkmeans._wide_loops.bounded_wide` (``unit``: the dtype's unit roundoff): the same
    labels as full passes, the sums kept by the rows that move (equal to a full pass's to
    rounding; recomputed in full when a cluster may have emptied).

    ``spherical``: spherical k-means on unit rows: the nearest unit centroid in distance is
    the most similar in cosine, and the update is the normalised sum ``c_j = S_j / ||S_j||``;
    a cluster whose sum is zero stops the run as an empty one does. The give-up rule then
    judges ``J_t = sum_i w_i - sum_j ||S_j||`` (the spherical objective at the mean
    directions), and ``J`` is the spherical objective ``sum_i w_i (1 - cos)`` at ``C``, its
    products in float64."""
    n = X.shape[0]
    k, d = C0.shape
    C = C0.copy()
    lab = np.empty(n, dtype=np.int64)
    prev = np.zeros(n, dtype=np.int64)
    grouped = wide and group_of.shape[0] == k
    warm_wide = grouped and warm_labels.shape[0] == n
    if warm_wide:  # the parent's ||x_i||^2, and the moments summed from them as _moments does
        xs = warm_xs
        moments = _moments(X, w, xs, nb, True)
    else:
        xs = np.empty(0 if wide and not grouped else n)  # the bounds' ||x_i||^2
        moments = _moments(X, w, xs, nb, False) \
            if np.isfinite(target) or not wide or grouped else 0.0
    total_w = n * 1.0
    if w.shape[0]:
        total_w = 0.0
        for i in range(n):
            total_w += np.float64(w[i])
    if spherical:  # unit rows: sum_i w_i ||x_i||^2 is their weight
        moments = total_w
    ngroups = 0
    if grouped:
        for j in range(k):
            ngroups = max(ngroups, group_of[j] + 1)
    if warm_wide:  # the parent's groups, some perhaps emptied
        ngroups = warm_lower_g.shape[1]
        lower_g = warm_lower_g.copy()
        upper_g = warm_upper.copy()
        prev[:] = warm_labels
        fold_moved(X, C, moved, group_of, lower_g, xs, unit, nb)
    else:
        lower_g = np.empty((n if grouped else 0, max(ngroups, 1)), dtype=np.float32)
        upper_g = np.empty(n if grouped else 0)
    N = np.zeros(k)
    S = np.zeros((k, d))
    count = np.zeros(k, dtype=np.int64)
    J_prev = np.inf
    upper = np.empty(xs.shape[0])
    lower = np.empty(xs.shape[0])
    warm = not wide and warm_labels.shape[0] == n
    if warm:
        prev[:] = warm_labels
        upper[:] = warm_upper
        lower[:] = warm_lower
    none = np.empty(0, dtype=np.int64)
    delta = np.zeros(k)
    if warm or warm_wide:  # the bounds move by what separates C0 from the parent's centroids
        _shifts(C, warm_C, delta)
    status = 0
    iters = max_iter
    total_sq = -1.0  # sum_i w_i ||x_i||^2 for the resolution rule, once needed
    for it in range(1, max_iter + 1):
        if grouped:
            bounded_wide(X, C, prev, lab, upper_g, lower_g, xs, delta, group_of, ngroups, unit,
                         it == 1 and not warm_wide, nb, local_limit(k, d))
            if it == 1:
                N, S, count = label_sums(X, w, lab, k, nb)
            else:
                move_rows(X, w, prev, lab, N, S, count)
                for j in range(k):  # a cluster that may have emptied: its sums exactly
                    if count[j] == 0 or N[j] <= 1e-9 * total_w:
                        N, S, count = label_sums(X, w, lab, k, nb)
                        break
        elif wide:
            N, S, _ = hard_wide(X, C, w, False, lab, xs, unit, nb)
        else:
            N, S, _ = bounded(X, C, w, prev, lab, upper, lower, xs, delta, it == 1 and not warm,
                              False, moved if it == 1 and warm else none, nb)
        scale = N.copy()  # the update divides the sums by it: N_j, or ||S_j|| on the sphere
        if spherical:
            for j in range(k):
                sq = 0.0
                for t in range(d):
                    sq += S[j, t] * S[j, t]
                scale[j] = math.sqrt(sq) if N[j] != 0.0 else 0.0
        for j in range(k):
            if scale[j] == 0.0:  # an empty cluster: its relocation is left to the caller
                return C, prev, np.nan, it - 1, 2, np.empty(0), np.empty(0), \
                    np.empty((0, 0), dtype=np.float32), np.empty(0)
        C_new = np.empty_like(C)
        for j in range(k):
            for t in range(d):
                C_new[j, t] = S[j, t] / scale[j]
        shift = _shifts(C_new, C, delta)
        C = C_new
        same = it > 1
        if same:
            for i in range(n):
                if lab[i] != prev[i]:
                    same = False
                    break
        prev, lab = lab, prev  # prev: this pass's labels
        if same or (tol > 0.0 and shift <= tol):
            status, iters = 1, it
            break
        if floor > 0.0 and it >= floor_after:  # J_t within rounding of 0
            if total_sq < 0.0:  # once, O(n d): the run has made floor_after passes already
                total_sq = total_w if spherical else _moments(X, w, np.empty(0), nb, False)
            between = 0.0
            for j in range(k):
                if spherical:
                    between += scale[j]
                    continue
                sq = 0.0
                for t in range(d):
                    sq += S[j, t] * S[j, t]
                between += sq / N[j]
            if total_sq - between <= floor * total_sq:
                status, iters = 1, it
                break
        if np.isfinite(target):
            J = moments
            for j in range(k):
                if spherical:  # J_t = sum_i w_i - sum_j ||S_j||
                    J -= scale[j]
                    continue
                sq = 0.0
                for t in range(d):
                    sq += S[j, t] * S[j, t]
                J -= sq / N[j]
            if it >= 3 and J - target > stall * (J_prev - J):
                status, iters = 3, it
                break
            J_prev = J
    if grouped:  # the labels at C by one more bounded pass (the last update's moves in
        # delta; after a converged run few rows are in doubt), J from them, O(n d)
        bounded_wide(X, C, prev, lab, upper_g, lower_g, xs, delta, group_of, ngroups, unit,
                     False, nb, local_limit(k, d))
        return C, lab, _labelled_J(X, C, w, lab, nb, spherical), iters, status, upper_g, \
            np.empty(0), lower_g, xs
    no_groups = np.empty((0, 0), dtype=np.float32)
    if wide:  # the labels and J at C: the pass of rbfkmeans.kernels.hard_pass
        J = hard_wide(X, C, w, not spherical, lab, xs, unit, nb)[2]
        if spherical:
            J = _labelled_J(X, C, w, lab, nb, True)
        return C, lab, J, iters, status, np.empty(0), np.empty(0), no_groups, np.empty(0)
    J = bounded(X, C, w, prev, lab, upper, lower, xs, delta, False, not spherical, none, nb)[2]
    if spherical:
        J = _labelled_J(X, C, w, lab, nb, True)
    return C, lab, J, iters, status, upper, lower, no_groups, np.empty(0)
