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

Exact sparse mappings via candidate pruning
-------------------------------------------
Write ``a = 1/2`` for entmax-1.5 (``a = 1`` for sparsemax) and ``y_j = a (max_i z_i - z_j) >= 0``
(the gap to the row maximum), so that ``p_j = [t - y_j]_+^2`` (resp. ``[t - y_j]_+``) with
``t = a max(z) - tau`` the threshold in gap units. The largest entry alone may not exceed mass one,
hence ``t <= 1``: only *candidates* ``y_j < 1`` can be in the support, and a row whose only
candidate is its maximum is exactly one-hot (``t = 1``). The forward pass, block by block of rows
(1-2M entries, so that the passes over a block run in cache and its scratch buffers are reused):

1. forms ``y`` clipped to ``[0, 1]`` (clipping changes no output: clipped entries get ``p = 0``);
2. spots the one-hot rows by one row sum (a row is one-hot iff ``sum_j min(y_j, 1) = k - 1``);
3. solves the threshold exactly, only on the other rows. Let
   ``f(y_j) = sum_i [y_j - y_i]_+^2`` (resp. ``sum_i [y_j - y_i]_+``), the mass at ``t = y_j``:
   ``f`` is nondecreasing and ``y_j`` is in the support iff ``f(y_j) < 1``. For ``k > 8`` each row
   is sorted (``y_(1) <= y_(2) <= ...``, NumPy's SIMD sort on the CPU, ~15x faster than
   ``torch.sort``) and ``f(y_(rho)) = S2 - 2 y S1 + rho y^2`` from prefix sums ``S1, S2`` of
   ``y, y^2``; for ``k <= 8`` ``f`` is summed pairwise, without sorting. With the support size
   ``s``, its largest gap ``y_s`` and ``u_i = y_s - y_i``, ``t = y_s + delta`` where ``delta >= 0``
   solves ``s delta^2 + 2 delta sum(u) + sum(u^2) = 1`` (resp. ``s delta + sum(u) = 1``), taken in
   a cancellation-free closed form;
4. writes ``p`` in place of ``y`` (two passes).

This is the exact mapping, not an approximation. At the temperatures where k-means lives almost
all rows are one-hot and the cost is a handful of passes over ``z``, close to a softmax.

Special values: ``-inf`` scores are padding (probability 0). A row whose scores are all ``-inf``
has no preferred entry and maps to the uniform distribution (the limit of equal finite scores); a
row with ``+inf`` entries splits its mass evenly between them. NaN propagates to the row's output.

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

import numpy as np
import torch
from torch import Tensor

from ._validation import compute_dtype

__all__ = [
    "entmax15",
    "entmax15_",
    "hardmax",
    "softmax",
    "softmax_",
    "sparsemax",
    "sparsemax_",
]

_ENTMAX, _SPARSEMAX = "entmax15", "sparsemax"


# ---------------------------------------------------------------------------------------------
# kernels: rows of a contiguous (rows, k) float32/float64 tensor
# ---------------------------------------------------------------------------------------------


#: entries per block of rows (one thread): the passes over a block run in cache and its scratch
#: is reused (fresh n x k buffers cost more in page faults than in arithmetic). With several
#: threads blocks are 2x larger (measured best): every op is then an OpenMP region ending in a
#: barrier, so fewer, larger ops pay fewer synchronisations.
_BLOCK_ELEMENTS = 1 << 20


def _block_rows(z: Tensor) -> int:
    """Rows per block of the (rows, k) tensor ``z`` on the CPU; all of them on accelerators
    (where blocks would only add launches)."""
    if z.device.type != "cpu":
        return z.shape[0]
    threaded = torch.get_num_threads() > 1
    return (_BLOCK_ELEMENTS * (2 if threaded else 1)) // z.shape[1]


class _Scratch:
    """Scratch memory of ``size`` entries like ``like``, allocated on first use (cold blocks of
    one-hot rows need none) and shared by the blocks of one call."""

    def __init__(self, like: Tensor, size: int) -> None:
        self.like, self.size = like, size
        self.buf: Tensor | None = None

    def get(self) -> Tensor:
        if self.buf is None:
            self.buf = self.like.new_empty(self.size)
        return self.buf


def _sort_rows_(Y: Tensor) -> Tensor:
    """Sort each row of the contiguous (r, k) tensor ``Y`` in increasing order, in place."""
    if Y.device.type == "cpu":
        # NumPy's SIMD sort is ~10-20x faster than torch.sort on the CPU; Y is private scratch.
        Y.numpy().sort(axis=-1)
    else:
        Y.copy_(torch.sort(Y, dim=-1).values)
    return Y


#: up to this many columns the support is found without sorting (pairwise masses)
_PAIRWISE_MAX_K = 8


def _threshold(Y: Tensor, kind: str, work: Tensor) -> Tensor:
    """Threshold ``t`` (r, 1) of rows of gaps ``Y`` (r, k) in ``[0, 1]`` (``Y`` gets sorted).

    Every row holds a 0 (its maximum). ``work`` is scratch with room for ``3 r k`` entries.
    """
    Y = _sort_rows_(Y)  # (r, k) increasing: y_(1) = 0
    r, k = Y.shape
    # the most candidates (y < 1) in a row (a column-wise min; not worth it for small k)
    m = int(Y.amin(0).lt(1.0).sum()) if k > 32 else k
    V = Y[:, :m]  # (r, m) every row's candidates (and some 1s, which never enter a support)
    rho = torch.arange(1, m + 1, dtype=Y.dtype, device=Y.device)  # (m,)
    S1, S2, W = (work[i * r * m : (i + 1) * r * m].view(r, m) for i in range(3))
    torch.cumsum(V, -1, out=S1)  # (r, m) prefix sums of y
    # f_rho: the mass of the first rho entries at t = y_rho (nondecreasing in rho, f_1 = 0)
    if kind == _ENTMAX:  # f_rho = sum_{i<=rho} (y_rho - y_i)^2 = S2 + y (rho y - 2 S1)
        f = torch.mul(V, V, out=S2).cumsum_(-1)  # (r, m) prefix sums of y^2 ...
        f.addcmul_(V, torch.mul(V, rho, out=W).sub_(S1, alpha=2.0))  # ... then f, in place
        free = W
    else:  # f_rho = sum_{i<=rho} (y_rho - y_i) = rho y - S1
        f = torch.mul(V, rho, out=W).sub_(S1)
        free = S2
    # support size: the number of rho with f_rho < 1 (f_1 = 0), i.e. of entries y < t
    size = torch.lt(f, 1.0, out=free).sum(-1, keepdim=True)  # (r, 1) as floats
    idx = size.long().sub_(1)  # (r, 1)
    return _threshold_from_support(
        size, V.gather(-1, idx), f.gather(-1, idx), S1.gather(-1, idx), kind
    )


def _threshold_pairwise(YT: Tensor, kind: str, work: Tensor) -> Tensor:
    """Threshold ``t`` (1, r) of columns of gaps ``YT`` (k, r) (small ``k``), without sorting.

    ``y_j`` is in the support iff ``f_j = sum_i (y_j - y_i)_+^2 < 1`` (resp. ``(.)_+``), the
    mass at ``t = y_j``. ``work`` has room for ``2 k r`` entries.
    """
    k, r = YT.shape
    f, d = work[: k * r].view(k, r), work[k * r : 2 * k * r].view(k, r)
    f.zero_()
    for i in range(k):  # f_j += (y_j - y_i)_+^p
        torch.sub(YT, YT[i], out=d).clamp_(min=0.0)
        f.add_(d.square_() if kind == _ENTMAX else d)
    inside = torch.lt(f, 1.0, out=d)  # (k, r) support indicator, as floats
    size = inside.sum(0, keepdim=True)  # (1, r)
    U2 = f.mul_(inside).amax(0, keepdim=True)  # (1, r) f of the largest support gap (f grows)
    gaps = inside.mul_(YT)  # (k, r) support gaps, 0 elsewhere
    y_s, S1 = gaps.amax(0, keepdim=True), gaps.sum(0, keepdim=True)  # (1, r) largest, sum
    return _threshold_from_support(size, y_s, U2, S1, kind)


def _threshold_from_support(size: Tensor, y_s: Tensor, U2: Tensor, S1: Tensor, kind: str) -> Tensor:
    """``t = y_s + delta`` from the support size ``s``, its largest gap ``y_s``, ``f_s`` (``U2``)
    and the sum of its gaps ``S1``: with ``u_i = y_s - y_i`` over the support, ``delta >= 0``
    solves ``s delta^2 + 2 delta sum(u) + sum(u^2) = 1`` (entmax-1.5) or
    ``s delta + sum(u) = 1`` (sparsemax), where ``sum(u^2) = f_s`` (resp. ``sum(u) = f_s``)."""
    rest = U2.neg_().add_(1.0)  # 1 - f_s > 0
    if kind == _ENTMAX:
        U1 = torch.addcmul(S1, size, y_s, value=-1.0).neg_()  # sum(u) = s y_s - S1 >= 0
        root = (U1 * U1).addcmul_(size, rest).sqrt_().add_(U1)
        return rest.div_(root).add_(y_s)  # the quadratic's root, in a cancellation-free form
    return rest.div_(size).add_(y_s)


def _fix_special_rows(Y: Tensor, rows: Tensor, zext: Tensor) -> Tensor:
    """Gaps of the rows ``rows`` of ``Y`` whose score maximum is +-inf or NaN; returns those rows
    that still need a threshold (the NaN ones keep NaN gaps, hence NaN output)."""
    finite_max = ~zext.index_select(0, rows).squeeze(-1).isnan()  # (b,)
    rows = rows[finite_max]
    Yb = Y.index_select(0, rows)  # (b, k) NaN exactly at the entries equal to the +-inf maximum
    # those share the mass (gap 0), the rest gets none (gap 1); all -inf: all NaN -> uniform
    Y.index_copy_(0, rows, torch.where(Yb.isnan(), 0.0, 1.0).to(Y.dtype))
    return rows


def _sparse_block_(z: Tensor, out: Tensor, kind: str, a: float, scratch: _Scratch) -> Tensor:
    """One block of :func:`_sparse_map_`; returns the indices of its rows that are not one-hot."""
    rows, k = z.shape
    zext = z.amax(-1, keepdim=True) if a > 0 else z.amin(-1, keepdim=True)  # (rows, 1)
    Y = out
    if a in (0.5, 1.0, -0.5, -1.0):  # products by a power of two are exact: one fused pass
        torch.add(zext * a, z, alpha=-a, out=Y)  # (rows, k) y = a max(z) - a z >= 0
    else:  # max(z) - z first, so that the maximum's gap is exactly 0
        torch.sub(zext, z, out=Y).mul_(a)  # (rows, k)
    Y.clamp_(max=1.0)  # non-candidates y >= 1 get p = 0 whatever t <= 1 is
    # a one-hot row sums to exactly k - 1 (a sum of integers); a NaN sum flags a +-inf/NaN max
    row_sum = Y.sum(-1)  # (rows,)
    multi = row_sum.ge(k - 1).logical_not_().nonzero().squeeze(-1)  # (r,) rows to solve
    t = torch.ones(rows, 1, dtype=Y.dtype, device=Y.device)  # (rows, 1) one-hot threshold
    if multi.numel():
        solve = multi
        special = row_sum.index_select(0, multi).isnan()  # (r,)
        if bool(special.any()):
            solve = torch.cat([multi[~special], _fix_special_rows(Y, multi[special], zext)])
        r, work = solve.numel(), scratch.get()
        if k <= _PAIRWISE_MAX_K:
            YT = torch.index_select(Y.T, 1, solve, out=work[: r * k].view(k, r))  # (k, r)
            t.index_copy_(0, solve, _threshold_pairwise(YT, kind, work[r * k :]).view(r, 1))
        else:
            Ym = torch.index_select(Y, 0, solve, out=work[: r * k].view(r, k))  # (r, k)
            t.index_copy_(0, solve, _threshold(Ym, kind, work[r * k :]))
    # p = [t - y]_+ (sparsemax), [t - y]_+^2 (entmax-1.5; one fused pass: mse_loss is (a - b)^2)
    Y.clamp_(max=t)
    if kind == _ENTMAX:
        torch.ops.aten.mse_loss.out(Y, t.expand_as(Y), 0, out=Y)
    else:
        torch.sub(t, Y, out=Y)
    return multi


def _sparse_map_(z: Tensor, out: Tensor, kind: str, scale: float = 1.0) -> Tensor:
    """Exact entmax-1.5 / sparsemax of ``scale * z`` along the last dim of ``z`` (rows, k).

    ``z`` and ``out`` are contiguous (rows, k) of one float dtype; ``out`` may be ``z`` itself
    (then ``z`` is overwritten). Works block by block (rows of ~``_BLOCK_ELEMENTS`` entries on
    the CPU) and returns the indices (r,) of the rows that are not one-hot.
    """
    rows, k = z.shape
    if rows == 0:
        return z.new_empty(0, dtype=torch.long)
    a = scale * (0.5 if kind == _ENTMAX else 1.0)  # y = a (max z - z)
    block = max(1, min(rows, _block_rows(z)))
    scratch = _Scratch(z, 4 * block * k)
    multi = [
        _sparse_block_(z[i : i + block], out[i : i + block], kind, a, scratch).add_(i)
        for i in range(0, rows, block)
    ]
    return multi[0] if len(multi) == 1 else torch.cat(multi)


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
    multi = _sparse_map_(_as_rows(z, dim), P2, kind)
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
    block = max(1, min(rows, _block_rows(P2)))
    starts = range(0, rows, block)
    # multi is sorted: cut it at the block boundaries
    cuts = torch.searchsorted(multi, torch.tensor([*starts, rows], device=multi.device)).tolist()
    work = P2.new_empty(block * k)  # scratch for s, reused
    for b, i in enumerate(starts):
        Pb, gb, db = P2[i : i + block], g2[i : i + block], dz2[i : i + block]  # (b, k)
        soft = multi[cuts[b] : cuts[b + 1]] - i  # (r,) rows of this block that are not one-hot
        r = soft.numel()
        if 2 * r >= Pb.shape[0]:
            _jacobian_vector_(Pb, gb, kind, db, work)
        else:
            db.zero_()
            if r:
                Pm, gm = Pb.index_select(0, soft), gb.index_select(0, soft)  # (r, k)
                db.index_copy_(0, soft, _jacobian_vector_(Pm, gm, kind, gm, work))
    return dz


def _jacobian_vector_(P: Tensor, g: Tensor, kind: str, out: Tensor, work: Tensor) -> Tensor:
    """Rows of ``J g`` (r, k) for the rows ``P`` into ``out`` (may be ``g``); ``work`` scratch."""
    s = work[: P.numel()].view(P.shape)  # (r, k)
    if kind == _ENTMAX:
        if P.device.type == "cpu":
            np.sqrt(P.detach().numpy(), out=s.numpy())  # torch's CPU sqrt is ~20x slower on zeros
        else:
            torch.sqrt(P, out=s)
    else:
        torch.gt(P, 0, out=s)  # support indicator
    sg = torch.mul(s, g, out=out)
    q = sg.sum(-1, keepdim=True).div_(s.sum(-1, keepdim=True))  # (r, 1)
    return sg.addcmul_(s, q, value=-1.0)


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
        return torch.zeros_like(z).scatter_(dim, idx, 1.0)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        return torch.zeros_like(g), None  # piecewise constant: zero almost everywhere


# ---------------------------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------------------------


def _in_compute_dtype(fn: Callable[[Tensor, int], Tensor], z: Tensor, dim: int) -> Tensor:
    if not isinstance(z, Tensor):
        raise TypeError(f"z must be a torch.Tensor; got {type(z).__name__}")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int; got {type(dim).__name__} {dim!r}")
    if z.dim() == 0 or not -z.dim() <= dim < z.dim():
        raise ValueError(f"dim={dim} is out of range for a tensor of shape {tuple(z.shape)}")
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
        raise ValueError(f"scale must be finite and non-zero; got {scale!r}")
    return float(scale)


def softmax_(z: Tensor, scale: float = 1.0) -> Tensor:
    """``softmax(scale * z, dim=-1)`` from a buffer the caller owns, which it overwrites.

    Scores more than ``margin = -log(tiny) - 7`` below their row's maximum are raised to that
    level before the exponential and their memberships (``<= e^-margin``) set to exactly 0 after
    it: a change below 2e-35 (float32) or 1e-304 (float64) per entry, which keeps subnormal
    numbers out of the exponential and of the products that follow (several times slower at
    intermediate temperatures otherwise). Returns the memberships (a new tensor). No autograd.
    """
    a = _check_inplace(z, scale)
    with torch.no_grad():
        if a != 1.0:
            z.mul_(a)
        margin = -math.log(torch.finfo(z.dtype).tiny) - 7.0
        torch.maximum(z, z.amax(dim=-1, keepdim=True) - margin, out=z)
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
        _sparse_map_(z.view(-1, z.shape[-1]), z.view(-1, z.shape[-1]), kind, a)
    return z
