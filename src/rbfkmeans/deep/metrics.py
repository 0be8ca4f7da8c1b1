r"""External clustering metrics: accuracy under the best one-to-one matching, NMI and ARI.

Clustering accuracy matches predicted clusters to classes by the permutation that maximises the
number of agreements (the Hungarian algorithm on the contingency table ``M``, ``M_ab`` = number of
points with prediction ``a`` and label ``b``):

.. math::

    \mathrm{ACC}(y, \hat y) = \max_{\pi} \frac{1}{n} \sum_i [\, y_i = \pi(\hat y_i) \,]
    = \frac{1}{n} \max_{\pi} \sum_a M_{a\,\pi(a)} .

With more clusters than classes (or the reverse) ``M`` is padded with zeros to a square, so extra
clusters match nothing. NMI (arithmetic normalisation) and ARI are scikit-learn's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

__all__ = ["ari", "cluster_acc", "contingency", "evaluate", "nmi"]


#: the most entries :func:`contingency` builds (2 GiB of int64): labels that index a larger table
#: (e.g. around 1e12) are refused there; the scores relabel them
MAX_TABLE_ENTRIES = 1 << 28


def _labels(a: Any, name: str) -> np.ndarray:
    """``a`` as a non-empty 1-D array of integer labels, in its own integer dtype (``uint64``
    too) or, for floats, as int64: floats must be integral and within int64's range. Errors name
    ``name`` and the value."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels; got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold integer labels; got dtype {arr.dtype} (e.g. "
                        f"{arr[0]!r})")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < -(2.0**63)) | (arr >= 2.0**63)
        if bad.any():
            raise ValueError(f"{name} must hold integer labels (floats: whole numbers within "
                             f"int64's range); got {float(arr[bad][0])!r} ({arr.dtype})")
        arr = arr.astype(np.int64)
    return arr


def _codes(arr: np.ndarray) -> np.ndarray:
    """The labels ``arr`` renumbered ``0 .. m-1`` in increasing order (int64): every score is the
    same under a renumbering, and the codes index a table of ``m`` rows."""
    return np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64, copy=False)


def _pair(y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
    yt, yp = _labels(y_true, "y_true"), _labels(y_pred, "y_pred")
    if yt.shape != yp.shape:
        raise ValueError(
            f"y_true and y_pred must have the same length; got {yt.shape[0]} and {yp.shape[0]}"
        )
    return yt, yp


def contingency(y_true: Any, y_pred: Any) -> np.ndarray:
    """Square contingency table ``M`` (m, m): ``M[a, b]`` = number of points predicted ``a``
    with label ``b`` (``m`` the largest label plus one; at most :data:`MAX_TABLE_ENTRIES`
    entries). The labels index the table, so they must be >= 0 (``ValueError`` naming the
    argument and the label otherwise: renumber them first, ``numpy.unique(...,
    return_inverse=True)``)."""
    yt, yp = _pair(y_true, y_pred)
    for name, arr in (("y_true", yt), ("y_pred", yp)):
        if arr.dtype.kind == "i" and arr.min() < 0:
            raise ValueError(f"{name} holds the label {int(arr.min())}: contingency indexes its "
                             "table by the labels, which must be >= 0; relabel them 0 .. k-1 "
                             "first (numpy.unique(..., return_inverse=True))")
    return _table(yt, yp, ("y_true", "y_pred"))


def _table(yt: np.ndarray, yp: np.ndarray, names: tuple[str, str]) -> np.ndarray:
    """The table of labels >= 0 (:func:`contingency`), its size checked in Python integers (a
    ``uint64`` label beyond int64 has no table)."""
    top_t, top_p = int(yt.max()), int(yp.max())
    m = max(top_t, top_p) + 1
    if m * m > MAX_TABLE_ENTRIES:
        name, top = (names[0], top_t) if top_t >= top_p else (names[1], top_p)
        raise ValueError(f"{name} holds labels up to {top}: a contingency table indexed by "
                         f"them would have {m} x {m} entries; relabel them 0 .. k-1 first "
                         "(numpy.unique(..., return_inverse=True))")
    M = np.zeros((m, m), dtype=np.int64)  # (m, m)
    np.add.at(M, (yp.astype(np.int64), yt.astype(np.int64)), 1)
    return M


def cluster_acc(y_true: Any, y_pred: Any) -> float:
    """Accuracy under the best one-to-one cluster-to-class matching (module docstring). The
    labels are first renumbered ``0 .. k-1`` in order (the zero rows and columns of unused labels
    change no matching), so any integer labels work, negative ones (e.g. -1 for noise) too."""
    yt, yp = _pair(y_true, y_pred)
    M = _table(_codes(yt), _codes(yp), ("y_true", "y_pred"))
    rows, cols = linear_sum_assignment(M, maximize=True)
    return float(M[rows, cols].sum() / M.sum())


def nmi(y_true: Any, y_pred: Any) -> float:
    """Normalised mutual information (arithmetic mean normalisation), of any integer labels
    (renumbered ``0 .. m-1`` first, which changes no score)."""
    yt, yp = _pair(y_true, y_pred)
    return float(normalized_mutual_info_score(_codes(yt), _codes(yp)))


def ari(y_true: Any, y_pred: Any) -> float:
    """Adjusted Rand index, of any integer labels (renumbered as for :func:`nmi`)."""
    yt, yp = _pair(y_true, y_pred)
    return float(adjusted_rand_score(_codes(yt), _codes(yp)))


def evaluate(y_true: Any, y_pred: Any) -> dict[str, float]:
    """``{"acc": ..., "nmi": ..., "ari": ...}`` for one clustering."""
    return {
        "acc": cluster_acc(y_true, y_pred),
        "nmi": nmi(y_true, y_pred),
        "ari": ari(y_true, y_pred),
    }
