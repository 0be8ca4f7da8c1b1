r"""The clusters' sums of a Lloyd run's labels, formed once and kept by the rows that move (numba).

For labels ``a_i`` the sums are ``N_j = sum_{a_i = j} w_i``, ``S_j = sum_{a_i = j} w_i x_i`` and
the row counts ``n_j``, in float64. :func:`label_sums` forms them from all rows in blocks fixed by
``n`` and the cache (each block's partial sums added in block order, so they do not depend on
the number of threads); :func:`move_rows` turns the sums of one labelling into those of the next
by the rows whose label changed, ``O(m d)`` for ``m`` moved rows where a new pass would cost
``O(n d)``. Late in a Lloyd run few rows move; the run forms the sums from all rows again
where a cluster may have emptied, so that its sums are exact (:func:`rbfkmeans._lloyd_loops.lloyd`).

Only :mod:`rbfkmeans._lloyd_loops` imports this module; it needs numba.
"""

import numpy as np
from numba import njit, prange

from ._row_loops import sum_block_count, sum_blocks

__all__ = ["label_sums", "move_rows"]


@njit(cache=True, nogil=True)
def move_rows(X, w, old, new, N, S, count):
    """The sums ``N`` (k,), ``S`` (k, d) and row counts ``count`` (k,) of the labels ``old``
    turned in place into those of ``new``: each row whose label changed leaves its old cluster
    and joins its new one (float64, in row order). Returns how many moved."""
    has_w = w.shape[0] > 0
    moved = 0
    for i in range(X.shape[0]):
        a, b = old[i], new[i]
        if a == b:
            continue
        moved += 1
        count[a] -= 1
        count[b] += 1
        wi = np.float64(w[i]) if has_w else 1.0
        N[a] -= wi
        N[b] += wi
        for q in range(X.shape[1]):
            x = wi * np.float64(X[i, q])
            S[a, q] -= x
            S[b, q] += x
    return moved


@njit(parallel=True, cache=True, nogil=True)
def label_sums(X, w, labels, k, nb):
    """``N`` (k,), ``S`` (k, d) and the row counts (k,) of the clusters ``labels`` (n,), each
    block's partial sums added in block order; at most ``nb`` blocks, fewer where their
    partial sums would outgrow the cache (:func:`rbfkmeans._row_loops.sum_block_count`)."""
    n, d = X.shape
    nb = sum_block_count(nb, k * d)
    has_w = w.shape[0] > 0
    block = (n + nb - 1) // nb
    N = np.zeros((nb, k))
    S = np.zeros((nb, k, d))
    cnt = np.zeros((nb, k))
    for b in prange(nb):
        for i in range(b * block, min(n, (b + 1) * block)):
            a = labels[i]
            wi = np.float64(w[i]) if has_w else 1.0
            N[b, a] += wi
            cnt[b, a] += 1.0
            for q in range(d):
                S[b, a, q] += wi * np.float64(X[i, q])
    return sum_blocks(N), sum_blocks(S.reshape(nb, k * d)).reshape(k, d), \
        sum_blocks(cnt).astype(np.int64)
