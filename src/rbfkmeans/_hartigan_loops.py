r"""The compiled scoring of Hartigan's moves behind :func:`rbfkmeans.kernels.hartigan_pass`
(numba; the equation is in :mod:`rbfkmeans.hartigan`).

For each row ``i`` of weight ``w_i`` in cluster ``a`` it finds the cluster ``b != a`` with the
smallest ``w_i N_b / (N_b + w_i) ||x_i - c_b||^2`` and the gain ``-Delta J`` of moving it there,
the squared distances taken from differences in float64 (no cancellation), the rows in parallel
(each writes only its own entries). Rows whose cluster would empty (``N_a <= w_i``) get no
move. Only :mod:`rbfkmeans.kernels` imports this module; it needs numba.
"""

import numpy as np
from numba import njit, prange

__all__ = ["gains"]


@njit(parallel=True, cache=True, nogil=True)
def gains(X, C, N, labels, w):
    n, d = X.shape
    k = C.shape[0]
    has_w = w.shape[0] > 0
    gain = np.zeros(n)
    target = np.full(n, -1, dtype=np.int64)
    for i in prange(n):
        wi = np.float64(w[i]) if has_w else 1.0
        a = labels[i]
        if N[a] <= wi:
            continue
        best = np.inf
        to = -1
        own = 0.0
        for j in range(k):
            s = 0.0
            for t in range(d):
                diff = np.float64(X[i, t]) - C[j, t]
                s += diff * diff
            if j == a:
                own = s
            else:
                join = wi * N[j] / (N[j] + wi) * s
                if join < best:
                    best = join
                    to = j
        g = wi * N[a] / (N[a] - wi) * own - best
        if g > 0.0:
            gain[i] = g
            target[i] = to
    return gain, target
