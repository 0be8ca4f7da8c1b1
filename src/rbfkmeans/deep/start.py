"""The start of joint training: the first centroids and the temperatures of the joint epochs.

* :func:`init_centroids` -- :class:`~rbfkmeans.RBFKMeans` on the pretrained embedding, with the
  layer's mapping (the "two-step" result and the centroids joint training starts from);
* :func:`epoch_temperatures` -- one temperature per joint epoch, cooling geometrically,
  ``T_e = T_start (T_end / T_start)^{e / (E - 1)}`` (read off
  :func:`rbfkmeans.schedules.geometric_schedule`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .._validation import check_finite, check_positive_int, check_real, tensor_of
from ..schedules import MAX_LADDER, geometric_schedule

__all__ = ["epoch_temperatures", "init_centroids"]


def epoch_temperatures(T_start: float, T_end: float, epochs: int) -> np.ndarray:
    """``epochs`` temperatures cooling geometrically from ``T_start`` to ``T_end`` (constant when
    they are equal), drawn from :func:`rbfkmeans.schedules.geometric_schedule`; where the ratio
    ``(T_end / T_start)^{1 / (E - 1)}`` underflows or rounds to 1 (``1e300`` to ``1e-300``), or
    the ladder would exceed :data:`rbfkmeans.schedules.MAX_LADDER`, from the logarithms of the
    ends. Both must be finite and > 0 (a hard mapping has no temperatures to cool through),
    ``T_start >= T_end``, ``epochs >= 1``."""
    T_start = check_real(T_start, "T_start", positive=True)
    T_end = check_real(T_end, "T_end", positive=True)
    epochs = check_positive_int(epochs, "epochs")
    if T_start < T_end:
        raise ValueError(f"need T_start >= T_end; got T_start={T_start!r}, T_end={T_end!r}")
    if epochs == 1 or T_start == T_end:
        return np.full(epochs, T_start)
    ratio = (T_end / T_start) ** (1.0 / (epochs - 1))
    if 0.0 < ratio < 1.0 and epochs <= MAX_LADDER:
        ladder = geometric_schedule(T_start, T_end, ratio)
        idx = np.round(np.linspace(0, len(ladder) - 1, epochs)).astype(int)
        return ladder[idx]
    # the quotient underflows (1e-300 / 1e300 is 0), the ratio rounds to 1 (T_end a few ulps
    # below T_start, many epochs) or the ladder would be too long: the same geometric
    # temperatures, log T_e = log T_start + (e / (E - 1)) (log T_end - log T_start)
    temps = np.exp(np.linspace(math.log(T_start), math.log(T_end), epochs))
    temps[0], temps[-1] = T_start, T_end
    return np.minimum.accumulate(np.clip(temps, T_end, T_start))


def init_centroids(
    Z: np.ndarray, n_clusters: int, assignment: str = "softmax", random_state: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Centroids (k, p) and labels (n,) of :class:`~rbfkmeans.RBFKMeans` (annealed on the
    geometric ladder, then a hard Lloyd polish and the swap search) fitted to embeddings ``Z``
    (n, p) with the same mapping. ``Z`` (an array or a dense tensor of real numbers, 2-D and
    finite; ``TypeError``/``ValueError`` naming ``Z`` otherwise) is read contiguously: its
    memory layout does not change the result."""
    from ..estimator import RBFKMeans

    Z = _embeddings(Z)
    est = RBFKMeans(n_clusters, assignment=assignment, schedule="geometric",
                    random_state=random_state).fit(Z)
    return np.asarray(est.cluster_centers_), np.asarray(est.labels_)


def _embeddings(Z: Any) -> Any:
    """``Z`` checked for :func:`init_centroids`: a 2-D array or dense tensor of real numbers,
    finite, C-contiguous (a copy only where it is not); else ``TypeError``/``ValueError`` naming
    ``Z`` and what it is (the estimator's own messages name its ``X``)."""
    if isinstance(Z, torch.Tensor):
        if Z.layout != torch.strided:
            raise TypeError(f"Z must be a dense (strided) tensor; got layout {Z.layout}")
        Zt = Z.detach()
    else:
        try:
            Zt = tensor_of(np.asarray(Z))
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"Z must be an array or tensor of numbers (n, p); got "
                            f"{type(Z).__name__}") from None
    if Zt.dtype == torch.bool or not (Zt.is_floating_point() or Zt.dtype in (
            torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise TypeError(f"Z must hold real numbers (n, p); got {type(Z).__name__} of dtype "
                        f"{Zt.dtype}")
    if Zt.dim() != 2:
        raise ValueError(f"Z must be a 2-D array of embeddings (n, p); got {type(Z).__name__} "
                         f"of shape {tuple(Zt.shape)}")
    check_finite(Zt, "Z")
    if isinstance(Z, torch.Tensor):
        return Z.contiguous()
    return np.ascontiguousarray(Z)
