r"""Cheap image augmentations for the contrastive positives: small random translations, rotations
and rescalings.

:func:`random_shift` moves each image of a batch (rows of ``h * w`` pixels, or ``c * h * w``
channel-major) by its own integer offset ``(dy, dx)`` drawn uniformly from
``[-s, s] x [-s, s]``, filling the uncovered border with zeros (the background of digits scaled to
[0, 1]). :func:`random_affine` also turns and rescales each image about its centre: the pixel
at ``u`` (from the centre) of the output is read, bilinearly, at

.. math::

    u_{in} = \frac{1}{\sigma} R(-\theta)\,(u - t),
    \quad \theta \sim U[-r, r],\;\log \sigma \sim U[-\log(1 + m), \log(1 + m)],
    \; t \sim U[-s, s]^2,

so the content is rotated by ``theta``, magnified by ``sigma`` and moved by ``t`` pixels
(:func:`affine_images` for given parameters). A translated, slightly turned or resized digit
is still the same digit, so an encoder that maps an image and its transformed neighbour close
together learns features that ignore where the stroke sits, how it leans and how large it is,
which the pixel distances of the neighbour graph do not: on MNIST those are the styles along
which a pretrained embedding otherwise splits the 4s and 9s (``docs/deep-clustering.md``).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from .._validation import check_positive_int, check_tensor
from ..errors import NonFiniteError, value_error

__all__ = ["affine_images", "check_image_shape", "random_affine", "random_shift"]


def check_image_shape(image_shape: object, n_features: int | None = None) -> tuple[int, int, int]:
    """``image_shape`` as ``(c, h, w)`` (a pair ``(h, w)`` means one channel), checked against the
    row width ``n_features`` (an integer >= 1) when given; ``ValueError`` naming the value
    otherwise."""
    if n_features is not None:
        n_features = check_positive_int(n_features, "n_features")
    ok = (isinstance(image_shape, tuple | list) and len(image_shape) in (2, 3)
          and all(isinstance(s, Integral) and not isinstance(s, bool) and int(s) >= 1
                  for s in image_shape))
    if not ok:
        raise ValueError(f"image_shape must be (h, w) or (c, h, w) of integers >= 1; got "
                         f"{image_shape!r}")
    shape = tuple(int(s) for s in cast("tuple[Integral, ...]", image_shape))
    chw = (1, *shape) if len(shape) == 2 else shape
    if n_features is not None and chw[0] * chw[1] * chw[2] != n_features:
        raise ValueError(f"image_shape {image_shape!r} holds {chw[0] * chw[1] * chw[2]} values "
                         f"but the rows have {n_features} features")
    return chw[0], chw[1], chw[2]


def _check_images(X: object) -> None:
    if not isinstance(X, Tensor) or not X.is_floating_point():
        raise TypeError(f"X must be a floating-point torch.Tensor; got "
                        f"{getattr(X, 'dtype', type(X).__name__)}")
    if X.dim() != 2:
        raise ValueError(f"X must be a 2-D tensor of image rows (b, c*h*w); got shape "
                         f"{tuple(X.shape)}")
    if not bool(torch.isfinite(X).all()):
        raise NonFiniteError("X must be finite; got NaN or inf entries")


class _GridOverflow(ValueError):
    """The sampling grid of :func:`_affine` is not finite: ``part`` is ``"scales"`` (``1 /
    scale`` overflows) or ``"shifts"`` (the translation does)."""

    def __init__(self, part: str, message: str = "") -> None:
        super().__init__(message or part)
        self.part = part


def random_shift(X: Tensor, image_shape: tuple[int, ...], max_shift: int,
                 generator: torch.Generator | None = None) -> Tensor:
    """A new tensor (b, c*h*w): each row of ``X`` (b, c*h*w) read as a ``(c, h, w)`` image and
    translated by its own random ``(dy, dx)`` in ``[-max_shift, max_shift]`` pixels, zeros
    shifted in (module docstring). ``max_shift = 0`` returns a copy. ``X`` is not modified."""
    if isinstance(max_shift, bool) or not isinstance(max_shift, Integral) or max_shift < 0:
        raise ValueError(f"max_shift must be an integer >= 0; got {max_shift!r}")
    max_shift = int(max_shift)
    _check_images(X)
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


def affine_images(X: Tensor, image_shape: tuple[int, ...], angles: Tensor, scales: Tensor,
                  shifts: Tensor) -> Tensor:
    """A new tensor (b, c*h*w): image ``i`` of ``X`` (b, c*h*w) rotated by ``angles[i]`` radians
    (counter-clockwise as displayed, row 0 at the top), magnified by ``scales[i]`` (> 0) about
    its centre and moved by ``shifts[i] = (dy, dx)`` pixels (module docstring), read bilinearly
    with zeros outside the image; a batch of 0 rows gives (0, c*h*w). ``X`` is not modified.
    Scales so small (or shifts so large) that the sampling grid overflows ``X``'s dtype raise
    ``ValueError`` naming ``scales`` (``shifts``)."""
    _check_images(X)
    c, h, w = check_image_shape(image_shape, X.shape[1])
    b = X.shape[0]
    for name, value in (("angles", angles), ("scales", scales), ("shifts", shifts)):
        check_tensor(value, name)
        if value.dtype == torch.bool:
            raise TypeError(f"{name} must hold real numbers; got {value.dtype}")
    if angles.shape != (b,) or scales.shape != (b,) or shifts.shape != (b, 2):
        raise ValueError(f"angles, scales and shifts must have shapes ({b},), ({b},), ({b}, 2); "
                         f"got {tuple(angles.shape)}, {tuple(scales.shape)}, "
                         f"{tuple(shifts.shape)}")
    for name, value in (("angles", angles), ("scales", scales), ("shifts", shifts)):
        if not bool(torch.isfinite(value).all()):
            bad = value[~torch.isfinite(value)][0].item()
            raise NonFiniteError(f"{name} must be finite; got {bad}")
    if not bool((scales > 0).all()):
        raise ValueError(f"scales must be > 0; got {scales[scales <= 0][0].item()}")
    try:
        return _affine(X, c, h, w, angles, scales, shifts)
    except _GridOverflow as exc:
        low = float(scales.min())
        if exc.part == "scales":
            raise _GridOverflow("scales", f"scales must be large enough that 1 / scale is "
                                f"finite in {X.dtype} (the images' dtype); got {low:.6g}"
                                ) from None
        raise _GridOverflow("shifts", f"shifts must be small enough that the sampling grid is "
                            f"finite in {X.dtype} (the images' dtype); got entries up to "
                            f"{float(shifts.abs().max()):.6g} pixels with scales down to "
                            f"{low:.6g}") from None


def _affine(X: Tensor, c: int, h: int, w: int, angles: Tensor, scales: Tensor,
            shifts: Tensor) -> Tensor:
    """:func:`affine_images` on checked arguments; :class:`_GridOverflow` where the sampling
    grid is not finite in ``X``'s dtype (a scale near 0, a shift near the dtype's largest
    value): a look at the (b, 2, 3) matrices and, only where they are finite but their entries
    large, at the grid."""
    b = X.shape[0]
    if b == 0:  # no images: affine_grid takes no empty batch
        return X.clone()
    angles, scales, shifts = (v.to(device=X.device, dtype=X.dtype)
                              for v in (angles, scales, shifts))
    # affine_grid's frame: x to the right, y down, both in [-1, 1], so a pixel spans 2/w in x
    # and 2/h in y. In pixels the input point is A (u - t), A = R(-theta) / sigma; in that frame
    # A's off-diagonal entries take the aspect ratio, and t is (2 dx / w, 2 dy / h).
    cos, sin = torch.cos(angles) / scales, torch.sin(angles) / scales
    linear = torch.stack([torch.stack([cos, -sin * (h / w)], 1),
                          torch.stack([sin * (w / h), cos], 1)], 1)  # (b, 2, 2)
    t = torch.stack([shifts[:, 1] * (2.0 / w), shifts[:, 0] * (2.0 / h)], 1)  # (b, 2): (x, y)
    theta = torch.cat([linear, -(linear @ t[:, :, None])], 2)  # (b, 2, 3)
    if not bool(torch.isfinite(linear).all()):
        raise _GridOverflow("scales")
    images = X.reshape(b, c, h, w)
    grid = F.affine_grid(theta, [b, c, h, w], align_corners=False)
    # a grid point sums three entries of theta times numbers in [-1, 1]
    if not 3.0 * float(theta.abs().max()) < torch.finfo(theta.dtype).max \
            and not bool(torch.isfinite(grid).all()):
        raise _GridOverflow("shifts")
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros",
                         align_corners=False).reshape(b, c * h * w)


def random_affine(X: Tensor, image_shape: tuple[int, ...], max_shift: float = 0.0,
                  max_rotation: float = 0.0, max_scaling: float = 0.0,
                  generator: torch.Generator | None = None) -> Tensor:
    """A new tensor (b, c*h*w): each image of ``X`` turned by up to ``max_rotation`` degrees,
    rescaled by a factor in ``[1 / (1 + max_scaling), 1 + max_scaling]`` and moved by up to
    ``max_shift`` pixels in each direction, each drawn uniformly (the scale's logarithm), per
    image (module docstring); a batch of 0 rows gives (0, c*h*w). ``X`` is not modified."""
    for name, value, top in (("max_shift", max_shift, math.inf),
                             ("max_rotation", max_rotation, 180.0),
                             ("max_scaling", max_scaling, math.inf)):
        if (isinstance(value, bool) or not isinstance(value, Real)
                or not 0 <= value <= top or not math.isfinite(value)):
            raise value_error(value, f"{name} must be a finite number in [0, {top}]; got "
                                     f"{value!r}")
    if not isinstance(X, Tensor):  # the rest of X's checks: affine_images
        raise TypeError(f"X must be a floating-point torch.Tensor; got {type(X).__name__}")
    b = X.shape[0]
    u = torch.rand(b, 4, generator=generator, dtype=torch.float64) * 2 - 1  # U[-1, 1]
    angles = u[:, 0] * math.radians(max_rotation)
    scales = torch.exp(u[:, 1] * math.log1p(max_scaling))
    try:
        return affine_images(X, image_shape, angles, scales, u[:, 2:] * max_shift)
    except _GridOverflow as exc:  # the grid of a draw overflows X's dtype: name the bound
        name, value = (("max_scaling", max_scaling) if exc.part == "scales"
                       else ("max_shift", max_shift))
        raise NonFiniteError(f"{name} must be small enough that the sampling grid of every draw "
                             f"is finite in {X.dtype} (the images' dtype); got {value!r}") from None
