r"""A fit's result in the data's coordinates, as the estimator publishes it.

A run computes in the coordinates the fit chose: the frame ``x' = 2^e (x - mu)``
(:mod:`rbfkmeans.frame`) and, for fewer rows than features, the coordinates ``Z`` of the rows'
span (:mod:`rbfkmeans.rowspace`). The published centroids are taken back,
``c = 2^-e c' + mu`` and ``c = mu + c_Z Q^T``, rounded to the data's dtype, and the labels and
``J = sum_i w_i min_j ||x_i - c_j||^2`` come from one more pass at *those* centroids, computed
as :meth:`~rbfkmeans.RBFKMeans.predict` computes, so that ``labels_`` and ``predict`` agree also
where rounding decides a tie (``J`` from the residuals where the pass's expanded distances would
leave it mostly rounding: :mod:`rbfkmeans.residuals`). The annealing history's centroids and
temperatures are taken back alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .frame import Frame
from .inference import to_numpy
from .passes import Data
from .residuals import settled_inertia
from .rowspace import RowSpace
from .stats import cluster_stats

__all__ = ["distinct_rows", "leave_frame", "leave_row_space"]


def leave_frame(best: dict[str, Any], frame: Frame, data: Data,
                dtype: np.dtype[Any]) -> dict[str, Any]:
    """A run's result ``best`` (centroids ``C``, ``labels``, ``inertia``, ``temperatures``,
    ``history``), fitted on ``data`` in ``frame``, in the data's coordinates and ``dtype``
    (module docstring); ``best`` itself in the identity frame."""
    if frame.identity:
        return dict(best, inertia=settled_inertia(data, best["C"], best["labels"],
                                                  best["inertia"]))
    C = torch.as_tensor(to_numpy(frame.leave(best["C"])).astype(dtype, copy=False))
    C_framed = frame.enter(C.to(data.X.dtype))
    st = cluster_stats(data, C_framed, 0.0, "hard", return_labels=True)
    assert st.labels is not None
    history = [dict(h, T=frame.sq_from(h["T"]), centers=frame.leave_numpy(h["centers"]),
                    objective=frame.sq_from(h["objective"]),
                    inertia=frame.sq_from(h["inertia"])) for h in best["history"]]
    inertia = settled_inertia(data, C_framed, st.labels, st.inertia)
    return dict(best, C=C, labels=st.labels, inertia=frame.sq_from(inertia),
                temperatures=[frame.sq_from(T) for T in best["temperatures"]],
                history=history)


def leave_row_space(best: dict[str, Any], space: RowSpace, data: Data, frame: Frame,
                    dtype: np.dtype[Any]) -> dict[str, Any]:
    """A result fitted in the coordinates of the rows' span (already out of that fit's own
    frame) in the data's: the centroids ``mu + C Q^T`` in ``dtype``, and the labels and ``J`` of
    every row of ``data`` (the rows as given, entered in ``frame``: the frame inference
    computes in) from one pass at them."""
    C = torch.as_tensor(to_numpy(space.leave(best["C"])).astype(dtype, copy=False))
    C_framed = frame.enter(C.to(data.X))
    st = cluster_stats(data, C_framed, 0.0, "hard", return_labels=True)
    assert st.labels is not None
    history = [dict(h, centers=to_numpy(space.leave(torch.as_tensor(h["centers"]))).astype(
        dtype, copy=False)) for h in best["history"]]
    inertia = settled_inertia(data, C_framed, st.labels, st.inertia)
    return dict(best, C=C, labels=st.labels, inertia=frame.sq_from(inertia), history=history)


def distinct_rows(C: np.ndarray) -> int:
    """The number of distinct rows of ``C`` (k, d), each row compared as one block of bytes:
    ``numpy.unique(C, axis=0)`` views the rows as records of ``d`` fields, which took 4 s for
    two centroids of 1,000,000 features. Adding 0 first makes ``-0.0`` the ``0.0`` it equals.
    ``C`` is a 2-D NumPy array of numbers, else ``TypeError`` / ``ValueError`` naming it."""
    if not isinstance(C, np.ndarray) or C.dtype == np.bool_ \
            or not np.issubdtype(C.dtype, np.number):
        raise TypeError(f"C must be a NumPy array of numbers; got {type(C).__name__} "
                        f"{getattr(C, 'dtype', '')}".rstrip())
    if C.ndim != 2:
        raise ValueError(f"C must be a 2-D array (k, d); got shape {C.shape}")
    C = np.ascontiguousarray(C) + C.dtype.type(0)  # (k, d) a copy
    return int(np.unique(C.view(np.dtype((np.void, C.dtype.itemsize * C.shape[1])))).size)
