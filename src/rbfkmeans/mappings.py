r"""Simplex mappings: scores ``z`` (..., k) to rows ``p`` on the probability simplex.

All four solve, along ``dim``,

.. math::

    p^\star(z) = \operatorname*{argmax}_{p \in \Delta^{k-1}} \; \langle p, z \rangle + \Omega(p)

with a different regulariser :math:`\Omega`:

* ``softmax``   -- :math:`\Omega(p) = -\sum_j p_j \log p_j` (Shannon),
  :math:`p = e^{z} / \sum e^{z}`;
* ``entmax15``  -- :math:`\Omega(p) = \tfrac{4}{3}(1 - \sum_j p_j^{3/2})` (Tsallis-1.5),
  :math:`p = [z/2 - \tau]_+^2` (Peters, Niculae & Martins 2019);
* ``sparsemax`` -- :math:`\Omega(p) = \tfrac12(1 - \lVert p\rVert^2)`, :math:`p = [z - \tau]_+`
  (Martins & Astudillo 2016);
* ``hard``      -- :math:`\Omega = 0`: the one-hot vector of the argmax (ties to the lowest index).

In the k-means layer ``z = -d / (2T)``, so the argmax of ``z`` is the nearest centroid.

The sparse mappings are exact (no iteration): the threshold is solved in closed form on the
candidates of each row (``rbfkmeans._thresholds``, whose docstring has the method); at the
temperatures where k-means lives almost all rows are one-hot and the cost is a handful of passes
over ``z``, close to a softmax.

Special values: ``-inf`` scores are padding (probability 0). A row whose scores are all ``-inf``
has no preferred entry and maps to the uniform distribution (the limit of equal finite scores); a
row with ``+inf`` entries splits its mass evenly between them. NaN propagates to the row's output.
``hardmax`` breaks these ties as every other, to the lowest index. Outputs of contiguous inputs
are contiguous, along any ``dim``.

Each mapping is a ``torch.autograd.Function`` whose backward pass is closed-form and uses the saved
output only (one-hot rows have a zero Jacobian and are skipped); double backward works.
float16/bfloat16 inputs are computed in float32 and cast back.

In-place variants
-----------------
``entmax15_`` and ``sparsemax_`` compute the mapping of ``scale * z`` over the last dimension of
a contiguous float32/float64 tensor and overwrite ``z`` with the result (no autograd, no new
``n x k`` buffer); ``softmax_`` overwrites ``z`` with clipped scores and returns a new buffer of
memberships (tiny entries flushed to 0, see its docstring). They exist for the fitting loop,
which owns its score (or distance) buffer:
with ``z = D`` and ``scale = -1 / (2T)`` they map distances straight to memberships. Never call
them on a tensor a user passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import _thresholds
from ._validation import check_dense, compute_dtype
from .errors import value_error

__all__ = [
    "entmax15",
    "entmax15_",
    "hardmax",
    "softmax",
    "softmax_",
    "sparsemax",
    "sparsemax_",
]

_ENTMAX, _SPARSEMAX = _thresholds.ENTMAX, _thresholds.SPARSEMAX


def _as_rows(t: Tensor, dim: int) -> Tensor:
    """``t`` with ``dim`` moved last, as a contiguous (rows, k) tensor (a copy only if needed)."""
    return t.movedim(dim, -1).reshape(-1, t.shape[dim])


def _empty_rows(z: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """A new tensor shaped like ``z`` whose ``dim`` is the fastest axis, and its (rows, k) view."""
    moved = z.movedim(dim, -1).shape
    res = torch.empty(moved, dtype=z.dtype, device=z.device).movedim(-1, dim)
    return res, res.movedim(dim, -1).view(-1, z.shape[dim])


def _sparse_forward(ctx: Any, z: Tensor, dim: int, kind: str) -> Tensor:
    dim = dim % z.dim()
    if z.shape[dim] == 0:
        raise ValueError(
            f"z must have at least one entry along dim={dim}; got shape {tuple(z.shape)}"
        )
    P, P2 = _empty_rows(z, dim)  # (..., k, ...), (rows, k) view of the same memory
    multi = _thresholds.sparse_map_(_as_rows(z, dim), P2, kind)
    P = P.contiguous()  # along another dim than the last, the layout torch.softmax returns
    ctx.dim = dim
    ctx.save_for_backward(P, multi)
    return P


def _sparse_backward(ctx: Any, g: Tensor, kind: str) -> Tensor:
    """``dz = s*g - s (s.g) / sum(s)`` row-wise; ``s = sqrt(p)`` (entmax-1.5) or ``[p > 0]``
    (sparsemax). One-hot rows have a zero Jacobian: blocks made mostly of them are zero-filled and
    only their other rows computed."""
    P, multi = ctx.saved_tensors
    dim = ctx.dim
    if torch.is_grad_enabled():  # double backward: the same formula, differentiable in P and g
        inside = P > 0
        s = torch.where(inside, P, 1.0).sqrt() * inside if kind == _ENTMAX else inside.to(P.dtype)
        sg = s * g
        return sg - s * (sg.sum(dim, keepdim=True) / s.sum(dim, keepdim=True))
    P2, g2 = _as_rows(P, dim), _as_rows(g, dim)  # (rows, k)
    dz, dz2 = _empty_rows(g, dim)
    rows, k = P2.shape
    if rows == 0:
        return dz
    block = max(1, min(rows, _thresholds.block_rows(P2)))
    starts = range(0, rows, block)
    # multi is sorted: cut it at the block boundaries
    cuts = torch.searchsorted(multi, torch.tensor([*starts, rows], device=multi.device)).tolist()
    work = P2.new_empty(block * k)  # scratch for s, reused
    for b, i in enumerate(starts):
        Pb, gb, db = P2[i : i + block], g2[i : i + block], dz2[i : i + block]  # (b, k)
        soft = multi[cuts[b] : cuts[b + 1]] - i  # (r,) rows of this block that are not one-hot
        r = soft.numel()
        if 2 * r >= Pb.shape[0]:
            _thresholds.jacobian_vector_(Pb, gb, kind, db, work)
        else:
            db.zero_()
            if r:
                Pm, gm = Pb.index_select(0, soft), gb.index_select(0, soft)  # (r, k)
                db.index_copy_(0, soft, _thresholds.jacobian_vector_(Pm, gm, kind, gm, work))
    return dz


# ---------------------------------------------------------------------------------------------
# autograd functions (backward from the saved output)
# ---------------------------------------------------------------------------------------------


class _Entmax15Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, dim: int) -> Tensor:
        return _sparse_forward(ctx, z, dim, _ENTMAX)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        return _sparse_backward(ctx, g, _ENTMAX), None


class _SparsemaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, dim: int) -> Tensor:
        return _sparse_forward(ctx, z, dim, _SPARSEMAX)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        return _sparse_backward(ctx, g, _SPARSEMAX), None


class _HardmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, dim: int) -> Tensor:
        idx = z.argmax(dim, keepdim=True)  # first maximum: ties to the lowest index
        P = torch.zeros_like(z).scatter_(dim, idx, 1.0)
        return P.masked_fill_(z.isnan().any(dim, keepdim=True), math.nan)  # NaN propagates

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        return torch.zeros_like(g), None  # piecewise constant: zero almost everywhere


# ---------------------------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------------------------


def _in_compute_dtype(fn: Callable[[Tensor, int], Tensor], z: Tensor, dim: int) -> Tensor:
    if not isinstance(z, Tensor):
        raise TypeError(f"z must be a torch.Tensor; got {type(z).__name__}")
    check_dense(z, "z")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int; got {type(dim).__name__} {dim!r}")
    if z.is_complex():
        raise TypeError(f"z must be real; got {z.dtype}")
    if z.dim() == 0 or not -z.dim() <= dim < z.dim():
        raise ValueError(f"dim={dim} is out of range for a tensor of shape {tuple(z.shape)}")
    if z.shape[dim] == 0:
        raise ValueError(f"z must have at least one entry along dim={dim % z.dim()}; got shape "
                         f"{tuple(z.shape)}")
    cdt = compute_dtype(z.dtype)
    if cdt == z.dtype:
        return fn(z, dim)
    return fn(z.to(cdt), dim).to(z.dtype if z.is_floating_point() else cdt)


def entmax15(z: Tensor, dim: int = -1) -> Tensor:
    r"""Entmax-1.5 along ``dim``: :math:`\operatorname{argmax}_{p\in\Delta} \langle p,z\rangle
    + \tfrac43(1-\sum_j p_j^{3/2})`, i.e. :math:`p = [z/2-\tau]_+^2` with ``tau`` normalising.

    Exact (no iteration); exactly one-hot whenever the top two scores differ by >= 2. Backward:
    ``dz = s*g - s (s.g)/sum(s)``, ``s = sqrt(p)``. ``-inf`` entries are padding; an all ``-inf``
    row maps to the uniform distribution.
    """
    return _in_compute_dtype(_Entmax15Function.apply, z, dim)


def sparsemax(z: Tensor, dim: int = -1) -> Tensor:
    r"""Sparsemax along ``dim``: the Euclidean projection of ``z`` onto the simplex,
    :math:`p = [z - \tau]_+`. Exactly one-hot when the top two scores differ by >= 1.
    Backward: ``dz = s*g - s (s.g)/|S|`` with ``s`` the support indicator."""
    return _in_compute_dtype(_SparsemaxFunction.apply, z, dim)


def softmax(z: Tensor, dim: int = -1) -> Tensor:
    r"""Softmax along ``dim`` (max-subtracted, stable at any scale): :math:`p \propto e^{z}`.

    ``-inf`` entries are padding; an all ``-inf`` row is uniform and ``+inf`` entries share the
    mass, as for the sparse mappings (``torch.softmax`` returns NaN rows there).
    """
    return _in_compute_dtype(_softmax, z, dim)


def _softmax(z: Tensor, dim: int) -> Tensor:
    P = torch.softmax(z, dim)
    if P.numel() == 0:
        return P
    # a row with a +-inf maximum comes out all NaN, so one entry per row tells
    bad = P.select(dim, 0).isnan().unsqueeze(dim)  # (..., 1, ...)
    if not bool(bad.any()):
        return P
    zmax = z.detach().amax(dim, keepdim=True)
    special = bad & ~zmax.isnan()  # NaN scores keep their NaN row
    top = z.detach() == zmax  # +inf entries of a +inf row; every entry of an all -inf row
    fixed = top.to(P.dtype) / top.sum(dim, keepdim=True)
    return torch.where(special, fixed, torch.softmax(z.masked_fill(special, 0.0), dim))


def hardmax(z: Tensor, dim: int = -1) -> Tensor:
    """One-hot of the argmax along ``dim`` (ties to the lowest index); the ``T = 0`` limit."""
    return _in_compute_dtype(_HardmaxFunction.apply, z, dim)


def _check_inplace(z: Any, scale: Any) -> float:
    if not isinstance(z, Tensor):
        raise TypeError(f"z must be a torch.Tensor; got {type(z).__name__}")
    check_dense(z, "z")
    if z.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"z must be float32 or float64 for an in-place mapping; got {z.dtype}")
    if z.dim() < 1 or z.shape[-1] == 0 or not z.is_contiguous():
        raise ValueError(
            f"z must be a contiguous tensor with a non-empty last dimension; got shape "
            f"{tuple(z.shape)}, strides {z.stride()}"
        )
    if z.requires_grad and torch.is_grad_enabled():
        raise ValueError("z must not require grad: in-place mappings have no backward")
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise TypeError(f"scale must be a real number; got {type(scale).__name__} {scale!r}")
    if not math.isfinite(scale) or scale == 0:
        raise value_error(scale, f"scale must be finite and non-zero; got {scale!r}")
    return float(scale)


def softmax_(z: Tensor, scale: float = 1.0) -> Tensor:
    """``softmax(scale * z, dim=-1)`` from a buffer the caller owns, which it overwrites.

    Scores more than ``margin = -log(tiny) - 7`` below their row's maximum ``m`` are raised to
    ``m - margin - 4 eps |m|`` before the exponential and their memberships (``< e^-margin``)
    set to exactly 0 after it: a change below 2e-35 (float32) or 1e-304 (float64) per entry,
    which keeps subnormal numbers out of the exponential and of the products that follow
    (several times slower at intermediate temperatures otherwise). The ``4 eps |m|`` keeps the
    floor below ``m - margin`` once rounded (a floor ``m - margin`` rounded to ``m`` itself
    beyond ``|m|`` of 2^32 in float32, and raised every score to the maximum). Rows with an
    infinite maximum (``+inf`` entries, or all ``-inf``) are those of :func:`softmax`. Returns
    the memberships (a new tensor). No autograd.
    """
    a = _check_inplace(z, scale)
    with torch.no_grad():
        if a != 1.0:
            z.mul_(a)
        info = torch.finfo(z.dtype)
        margin = -math.log(info.tiny) - 7.0
        top = z.amax(dim=-1, keepdim=True)  # (..., 1)
        if not bool(torch.isfinite(top).all()):  # +-inf (or NaN) maxima: the general rule
            R = _softmax(z, -1)
        else:
            torch.maximum(z, top - (top.abs() * (4.0 * info.eps) + margin), out=z)
            R = torch.softmax(z, dim=-1)
        return torch.nn.functional.threshold(R, math.exp(-margin), 0.0, inplace=True)


def entmax15_(z: Tensor, scale: float = 1.0) -> Tensor:
    """In place: overwrite ``z`` with ``entmax15(scale * z, dim=-1)`` and return it.

    For buffers the caller owns (e.g. a chunk of distances ``D`` with ``scale = -1/(2T)``): no
    autograd, no new ``n x k`` allocation, one pass fewer. Never call it on a user's tensor.
    """
    return _sparse_inplace(z, scale, _ENTMAX)


def sparsemax_(z: Tensor, scale: float = 1.0) -> Tensor:
    """In place: overwrite ``z`` with ``sparsemax(scale * z, dim=-1)`` and return it.

    Same contract as :func:`entmax15_`. Never call it on a user's tensor.
    """
    return _sparse_inplace(z, scale, _SPARSEMAX)


def _sparse_inplace(z: Tensor, scale: Any, kind: str) -> Tensor:
    a = _check_inplace(z, scale)
    with torch.no_grad():
        _thresholds.sparse_map_(z.view(-1, z.shape[-1]), z.view(-1, z.shape[-1]), kind, a)
    return z
