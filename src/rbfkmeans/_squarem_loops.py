r"""The compiled fixed point behind :func:`rbfkmeans.kernels.group_fixed_point` (numba).

:func:`fixed_point` is the SQUAREM-accelerated fixed point of the groups' soft-Lloyd map of
:func:`rbfkmeans.splits._fixed_point` (the equations are there), each evaluation of the map one
pass of :func:`rbfkmeans._loops.group` followed by the update ``c_j <- S_j / N_j``; the loop,
the extrapolation and the safeguard ``F_T(C') <= F_T(C_1)`` run here, so the passes of one
temperature make no round trip through Python. A step that would relocate an empty group
(``N_j <= 1e-12 sum_l N_l``) hands the whole fixed point back to the caller's loop, which takes
the same steps with the relocation.

Only :mod:`rbfkmeans.kernels` imports this module; it needs numba.
"""

import math

import numpy as np
from numba import njit

from ._loops import group

__all__ = ["fixed_point"]


@njit(cache=True, nogil=True)
def _sq(A):
    """``sum A^2`` of a (g, d) array, in float64."""
    s = 0.0
    for j in range(A.shape[0]):
        for t in range(A.shape[1]):
            s += np.float64(A[j, t]) * np.float64(A[j, t])
    return s


@njit(cache=True, nogil=True)
def _step(X, C, m, T, kind, w, objective, hard_tol, single, nb, wide):
    """One evaluation of the map: ``(G(C), F_T(C), whether a group was left empty)``; ``F_T`` is
    NaN without ``objective``, and ``G(C)`` is not formed for an empty group."""
    g = C.shape[0]
    N, S, _, acc, _ = group(X, C, m, T, kind, w, objective, objective, hard_tol, single,
                            np.full(g, -1, dtype=np.int64), 0, np.zeros((0, 0)), wide, nb)
    F = acc[0] if objective else math.nan
    total = 0.0
    for j in range(g):
        total += N[j]
    C_new = np.empty_like(C)
    for j in range(g):
        if 1e-12 * total >= N[j]:
            return C_new, F, True
        for t in range(C.shape[1]):
            C_new[j, t] = S[j, t] / N[j]
    return C_new, F, False


@njit(cache=True, nogil=True)
def fixed_point(X, C0, m, T, kind, w, hard_tol, single, max_iter, tol, nb, wide):
    """SQUAREM cycles ``C_1 = G(C)``, ``C_2 = G(C_1)``, the extrapolation ``C' = C - 2 alpha r +
    alpha^2 v`` and ``G(C')`` kept only if ``F_T(C') <= F_T(C_1)``, until a step moves the
    centroids by at most ``tol`` (squared) or after ``max_iter`` evaluations. Returns the
    centroids, the evaluations run and a status: 0 done, 1 a step needs the relocation of an
    empty group (``C0`` and 0 are returned: the caller runs the fixed point itself). An
    extrapolation that empties a group but is rejected needs none."""
    C = C0.copy()
    it = 0
    while it < max_iter:
        C1, _, empty = _step(X, C, m, T, kind, w, False, hard_tol, single, nb, wide)
        if empty:
            return C0, 0, 1
        it += 1
        r = C1 - C
        sr = _sq(r)
        if sr <= tol or it >= max_iter:
            return C1, it, 0
        C2, F1, empty = _step(X, C1, m, T, kind, w, True, hard_tol, single, nb, wide)
        if empty:
            return C0, 0, 1
        it += 1
        if _sq(C2 - C1) <= tol or it >= max_iter:
            return C2, it, 0
        v = C2 - 2.0 * C1 + C
        nv = _sq(v)
        alpha = -math.sqrt(sr / nv) if nv > 0 else -1.0
        alpha = min(alpha, -1.0)
        C_ext = (C - 2.0 * alpha * r + alpha**2 * v).astype(C.dtype)
        if not np.isfinite(C_ext).all():  # an extrapolation beyond float range
            C = C2
            continue
        C3, F_ext, empty = _step(X, C_ext, m, T, kind, w, True, hard_tol, single, nb, wide)
        it += 1
        if F_ext <= F1:
            if empty:
                return C0, 0, 1
            C = C3
        else:
            C = C2
    return C, it, 0
