r"""Exact entmax-1.5 and sparsemax by candidate pruning: the row kernels of the mappings.

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

The Jacobian-vector product of the backward pass is ``dz = s*g - s (s.g) / sum(s)`` row-wise,
``s = sqrt(p)`` (entmax-1.5) or ``[p > 0]`` (sparsemax). Only :mod:`rbfkmeans.mappings` imports
this module.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["ENTMAX", "SPARSEMAX", "block_rows", "jacobian_vector_", "sparse_map_"]

ENTMAX, SPARSEMAX = "entmax15", "sparsemax"

#: entries per block of rows (one thread): the passes over a block run in cache and its scratch
#: is reused (fresh n x k buffers cost more in page faults than in arithmetic). With several
#: threads blocks are 2x larger (measured best): every op is then an OpenMP region ending in a
#: barrier, so fewer, larger ops pay fewer synchronisations.
_BLOCK_ELEMENTS = 1 << 20


def block_rows(z: Tensor) -> int:
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
    if kind == ENTMAX:  # f_rho = sum_{i<=rho} (y_rho - y_i)^2 = S2 + y (rho y - 2 S1)
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
        f.add_(d.square_() if kind == ENTMAX else d)
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
    if kind == ENTMAX:
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
    """One block of :func:`sparse_map_`; returns the indices of its rows that are not one-hot."""
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
    if kind == ENTMAX:
        torch.ops.aten.mse_loss.out(Y, t.expand_as(Y), 0, out=Y)
    else:
        torch.sub(t, Y, out=Y)
    return multi


def sparse_map_(z: Tensor, out: Tensor, kind: str, scale: float = 1.0) -> Tensor:
    """Exact entmax-1.5 / sparsemax of ``scale * z`` along the last dim of ``z`` (rows, k).

    ``z`` and ``out`` are contiguous (rows, k) of one float dtype; ``out`` may be ``z`` itself
    (then ``z`` is overwritten). Works block by block (rows of ~``_BLOCK_ELEMENTS`` entries on
    the CPU) and returns the indices (r,) of the rows that are not one-hot.
    """
    rows, k = z.shape
    if rows == 0:
        return z.new_empty(0, dtype=torch.long)
    a = scale * (0.5 if kind == ENTMAX else 1.0)  # y = a (max z - z)
    block = max(1, min(rows, block_rows(z)))
    scratch = _Scratch(z, 4 * block * k)
    multi = [
        _sparse_block_(z[i : i + block], out[i : i + block], kind, a, scratch).add_(i)
        for i in range(0, rows, block)
    ]
    return multi[0] if len(multi) == 1 else torch.cat(multi)


def jacobian_vector_(P: Tensor, g: Tensor, kind: str, out: Tensor, work: Tensor) -> Tensor:
    """Rows of ``J g`` (r, k) for the rows ``P`` into ``out`` (may be ``g``); ``work`` scratch."""
    s = work[: P.numel()].view(P.shape)  # (r, k)
    if kind == ENTMAX:
        if P.device.type == "cpu":
            np.sqrt(P.detach().numpy(), out=s.numpy())  # torch's CPU sqrt is ~20x slower on zeros
        else:
            torch.sqrt(P, out=s)
    else:
        torch.gt(P, 0, out=s)  # support indicator
    sg = torch.mul(s, g, out=out)
    q = sg.sum(-1, keepdim=True).div_(s.sum(-1, keepdim=True))  # (r, 1)
    return sg.addcmul_(s, q, value=-1.0)
