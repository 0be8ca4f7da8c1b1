r"""The rows a :class:`~rbfkmeans.deep.DeepClusterer` reads, checked, and a warning where their
scale leaves the encoder little to learn from.

The encoder reads its inputs as they are: its first layer computes ``W x + b`` with weights
drawn for features of order one, so rows whose features vary by ``1e-6`` embed alike up to the
biases, and rows a hundred spreads away from the origin put every unit in the same regime.
Either trains into a few clusters, often fewer than ``k``. Measured on digits (pixels / 16,
``DeepClusterer.mlp(64, 10, random_state=0)``): ACC 0.897 as given; 0.10 times ``1e-20``, 0.20
times ``1e-6``, 0.31 times ``1e4``, 0.53 plus 100, 0.10 plus ``1e6``, with an empty cluster in
three of the five.

:func:`warn_if_unscaled` measures the per-feature spread and the mean's distance from the
origin in units of the total spread,

.. math::

    s = \sqrt{\operatorname{tr}\Sigma / d}, \qquad
    r = \lVert\mu\rVert / \sqrt{\operatorname{tr}\Sigma},

(``mu`` and ``Sigma`` the rows' mean and covariance, in float64, two passes of blocks of rows)
and warns where ``s`` lies outside ``SPREAD_RANGE`` or ``r`` exceeds ``OFFSET_RATIO``. The
project's datasets lie well inside (digits: ``s = 0.27, r = 1.5``; MNIST pixels / 255:
``s = 0.26, r = 0.8``; z-scored tables: ``s = 1, r = 0``; the raw iris, wine and breast cancer
tables too: ``r`` 3.6, 2.4, 1.7).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._validation import check_finite, check_tensor, tensor_of
from ..errors import NonFiniteError
from .augment import check_image_shape

__all__ = ["OFFSET_RATIO", "SPREAD_RANGE", "as_rows", "input_scale", "warn_if_unscaled"]

#: the per-feature spread ``s`` outside which :func:`warn_if_unscaled` warns
SPREAD_RANGE = (1e-3, 1e3)
#: and the distance of the mean from the origin, in spreads, beyond which it warns
OFFSET_RATIO = 10.0
#: rows per block of the two passes
_BLOCK_ROWS = 8192


def as_rows(X: Any, device: torch.device, image_shape: Any = None) -> Tensor:
    """``X`` (n, d) as a float32 tensor on ``device``: an array or tensor of real numbers, 2-D,
    finite and within float32's range (a finite float64 value beyond it is named as such),
    ``d`` matching ``image_shape`` when one is given. Errors name ``X``, or ``device`` when it
    names no device (``'abc'``, ``-1``) or one this machine does not have."""
    if isinstance(X, Tensor):
        Xt = X.detach()
    else:
        try:
            Xt = tensor_of(np.asarray(X))
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"X must be an array or tensor of numbers; got {type(X).__name__}"
            ) from exc
    if Xt.dim() != 2:
        raise ValueError(f"X must be a 2-D array (n, d); got shape {tuple(Xt.shape)}")
    if Xt.shape[0] == 0 or Xt.shape[1] == 0:
        raise ValueError(f"X must have at least one row and one feature; got shape "
                         f"{tuple(Xt.shape)}")
    if not (Xt.is_floating_point() or Xt.dtype in (torch.int32, torch.int64, torch.uint8)):
        raise TypeError(f"X must hold real numbers; got dtype {Xt.dtype}")
    given = Xt
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)  # a device this machine has (and torch was built for)
    except (TypeError, ValueError, RuntimeError, AssertionError) as exc:
        raise ValueError(f"device must name a device of this machine, such as 'cpu' or "
                         f"'cuda:0'; got {device!r} ({' '.join(str(exc).split())})") from None
    Xt = Xt.to(device=dev, dtype=torch.float32)
    if not torch.isfinite(Xt).all():
        if given.is_floating_point() and not torch.isfinite(given).all():
            raise NonFiniteError("X must be finite; got NaN or inf entries")
        big = given.abs().argmax()
        raise ValueError(f"X must fit float32, in which the encoder reads it (largest magnitude "
                         f"{torch.finfo(torch.float32).max:.4g}); got "
                         f"{float(given.flatten()[big]):.4g} at row {int(big) // given.shape[1]}, "
                         f"column {int(big) % given.shape[1]}: rescale X")
    if image_shape is not None:
        check_image_shape(image_shape, Xt.shape[1])
    return Xt


def _row_moments(X: Tensor) -> tuple[Tensor, float]:
    r"""The mean ``mu = (1/n) sum_i x_i`` (d,) of the rows of ``X`` (n, d), in float64, and the
    mean squared distance to it, ``tr Sigma = (1/n) sum_i ||x_i - mu||^2``: two passes of blocks
    of :data:`_BLOCK_ROWS` rows, accumulated in float64 (no (n, d) float64 copy). ``X`` must be a
    real 2-D tensor with at least one row (the callers check it)."""
    blocks = X.detach().split(_BLOCK_ROWS)
    mu = sum(b.sum(0, dtype=torch.float64) for b in blocks) / X.shape[0]  # (d,)
    trace = float(sum(float((b.double() - mu).square().sum()) for b in blocks)) / X.shape[0]
    return mu, trace


def input_scale(X: Tensor) -> tuple[float, float]:
    """``(s, r)`` of the rows ``X`` (n, d) (module docstring); ``r`` is inf for rows that are all
    equal and off the origin, 0 for rows all at the origin. ``ValueError`` naming ``X`` for NaN
    or inf entries. ``X`` is read contiguously (its layout does not change the result)."""
    if not isinstance(X, Tensor) or X.dim() != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError("X must be a non-empty 2-D tensor (n, d); got "
                         f"{type(X).__name__} {tuple(getattr(X, 'shape', ()))}")
    X = check_tensor(X, "X").contiguous()  # sums that do not depend on the memory layout
    mu, trace = _row_moments(X)
    norm = float(torch.linalg.vector_norm(mu))
    if not (math.isfinite(trace) and math.isfinite(norm)):
        check_finite(X, "X")  # NaN or inf in X (else finite values whose squares overflow)
    spread = math.sqrt(trace / X.shape[1])
    if trace > 0:
        return spread, norm / math.sqrt(trace)
    return spread, (math.inf if norm > 0 else 0.0)


def warn_if_unscaled(X: Tensor) -> None:
    """A ``UserWarning`` naming the spread and the offset of ``X`` when either is outside what the
    encoder trains on well (module docstring), with the remedy: rescale the features."""
    s, r = input_scale(X)
    low, high = SPREAD_RANGE
    if low <= s <= high and r <= OFFSET_RATIO:
        return
    warnings.warn(
        f"X's features spread by {s:.3g} (root mean square about their mean) and their mean "
        f"lies {r:.3g} spreads from the origin; the encoder reads X as it is and trains well on "
        f"features of order 1 about the origin (spread in [{low:g}, {high:g}], at most "
        f"{OFFSET_RATIO:g} spreads away): rescale X first (e.g. "
        "sklearn.preprocessing.StandardScaler, or pixels / 255), or the clusters may collapse",
        UserWarning, stacklevel=3)
