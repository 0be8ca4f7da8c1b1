"""Cheap image augmentations for the contrastive positives: random translations by a few pixels.

:func:`random_shift` moves each image of a batch (rows of ``h * w`` pixels, or ``c * h * w``
channel-major) by its own integer offset ``(dy, dx)`` drawn uniformly from
``[-s, s] x [-s, s]``, filling the uncovered border with zeros (the background of digits scaled to
[0, 1]). A translated digit is still the same digit, so an encoder that maps an image and its
translated neighbour close together learns features that ignore where the stroke sits, which the
pixel distances of the neighbour graph do not.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["check_image_shape", "random_shift"]


def check_image_shape(image_shape: object, n_features: int | None = None) -> tuple[int, int, int]:
    """``image_shape`` as ``(c, h, w)`` (a pair ``(h, w)`` means one channel), checked against the
    row width ``n_features`` when given; ``ValueError`` naming the value otherwise."""
    ok = (isinstance(image_shape, tuple | list) and len(image_shape) in (2, 3)
          and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1
                  for s in image_shape))
    if not ok:
        raise ValueError(f"image_shape must be (h, w) or (c, h, w) of integers >= 1; got "
                         f"{image_shape!r}")
    shape: tuple[int, ...] = tuple(image_shape)  # type: ignore[arg-type]
    chw = (1, *shape) if len(shape) == 2 else shape
    if n_features is not None and chw[0] * chw[1] * chw[2] != n_features:
        raise ValueError(f"image_shape {image_shape!r} holds {chw[0] * chw[1] * chw[2]} values "
                         f"but the rows have {n_features} features")
    return chw[0], chw[1], chw[2]


def random_shift(X: Tensor, image_shape: tuple[int, ...], max_shift: int,
                 generator: torch.Generator | None = None) -> Tensor:
    """A new tensor (b, c*h*w): each row of ``X`` (b, c*h*w) read as a ``(c, h, w)`` image and
    translated by its own random ``(dy, dx)`` in ``[-max_shift, max_shift]`` pixels, zeros
    shifted in (module docstring). ``max_shift = 0`` returns a copy. ``X`` is not modified."""
    if isinstance(max_shift, bool) or not isinstance(max_shift, int) or max_shift < 0:
        raise ValueError(f"max_shift must be an integer >= 0; got {max_shift!r}")
    c, h, w = check_image_shape(image_shape, X.shape[1])
    if max_shift == 0:
        return X.clone()
    b, s = X.shape[0], max_shift
    padded = F.pad(X.reshape(b, c, h, w), (s, s, s, s))  # (b, c, h + 2s, w + 2s)
    dy = torch.randint(0, 2 * s + 1, (b,), generator=generator).to(X.device)
    dx = torch.randint(0, 2 * s + 1, (b,), generator=generator).to(X.device)
    rows = dy[:, None] + torch.arange(h, device=X.device)  # (b, h): window rows in `padded`
    cols = dx[:, None] + torch.arange(w, device=X.device)  # (b, w)
    batch = torch.arange(b, device=X.device)[:, None, None, None]
    chan = torch.arange(c, device=X.device)[None, :, None, None]
    out = padded[batch, chan, rows[:, None, :, None], cols[:, None, None, :]]  # (b, c, h, w)
    return out.reshape(b, c * h * w)
