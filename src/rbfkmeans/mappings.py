r"""Simplex mappings: scores ``z`` (..., k) to rows ``p`` on the probability simplex.

All four solve, along ``dim``,

.. math::

    p^\star(z) = \operatorname*{argmax}_{p \in \Delta^{k-1}} \; \langle p, z \rangle + \Omega(p)

with a different regulariser :math:`\Omega`:

* ``softmax``   -- :math:`\Omega(p) = -\sum_j p_j \log p_j` (Shannon), :math:`p = e^{z} / \sum e^{z}`;
* ``entmax15``  -- :math:`\Omega(p) = \tfrac{4}{3}(1 - \sum_j p_j^{3/2})` (Tsallis-1.5),
  :math:`p = [z/2 - \tau]_+^2` (Peters, Niculae & Martins 2019);
* ``sparsemax`` -- :math:`\Omega(p) = \tfrac12(1 - \lVert p\rVert^2)`, :math:`p = [z - \tau]_+`
  (Martins & Astudillo 2016);
* ``hard``      -- :math:`\Omega = 0`: the one-hot vector of the argmax (ties to the lowest index).

In the k-means layer ``z = -d / (2T)``, so the argmax of ``z`` is the nearest centroid.

Exact sparse mappings via candidate pruning
-------------------------------------------
The threshold satisfies ``max(z)/2 - 1 <= tau`` for entmax-1.5 (and ``max(z) - 1 <= tau`` for
sparsemax), because the largest entry alone may not exceed mass one. Only entries within that band
of the row maximum can be in the support; at the low temperatures where k-means lives almost all
rows have a single candidate and are exactly one-hot. The threshold is therefore solved on the
top-``m`` entries of the rows that need it, ``m`` the largest candidate count, instead of sorting
every row: the result is the exact mapping, not an approximation.

Each mapping is a ``torch.autograd.Function`` whose backward pass is closed-form and uses the saved
output only. float16/bfloat16 inputs are computed in float32 and cast back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._validation import check_assignment, compute_dtype

__all__ = ["MAPPINGS", "entmax15", "get_mapping", "hardmax", "softmax", "sparsemax"]


# ---------------------------------------------------------------------------------------------
# kernels: operate on the last dimension of a float32/float64 tensor
# ---------------------------------------------------------------------------------------------


def _threshold_sorted(top: Tensor, kind: str) -> Tensor:
    """Threshold ``tau`` (rows, 1) from each row's candidates sorted in decreasing order.

    ``top`` holds the shifted scores (maximum 0), padded with ``-inf`` past a row's candidates.
    For entmax-1.5 ``top`` is already ``z/2 - max``.
    """
    m = top.shape[-1]
    rho = torch.arange(1, m + 1, device=top.device, dtype=top.dtype)  # (m,)
    finite = torch.isfinite(top)
    vals = torch.where(finite, top, torch.zeros((), dtype=top.dtype, device=top.device))
    csum = vals.cumsum(-1)  # (rows, m)
    if kind == "sparsemax":
        tau = (csum - 1) / rho  # (rows, m)
    else:  # entmax15: tau_s = mean - sqrt((1 - s * var) / s)
        mean = csum / rho
        mean_sq = (vals * vals).cumsum(-1) / rho
        ss = rho * (mean_sq - mean * mean)
        delta = ((1 - ss) / rho).clamp_(min=0)
        tau = mean - delta.sqrt()
    support = ((tau <= vals) & finite).sum(-1, keepdim=True).clamp_(min=1)  # (rows, 1)
    return tau.gather(-1, support - 1)


def _sparse_map(z: Tensor, kind: str) -> Tensor:
    """Exact entmax-1.5 / sparsemax of the rows of ``z`` (..., k), last dimension."""
    shape = z.shape
    z2 = z.reshape(-1, shape[-1])  # (rows, k)
    half = 0.5 if kind == "entmax15" else 1.0
    zmax = z2.amax(-1, keepdim=True)  # (rows, 1)
    if half != 1.0:
        X = (z2 - zmax).mul_(half)  # (rows, k), maximum 0
    else:
        X = z2 - zmax
    # rows of only -inf (all padding): leave X as NaN-free zeros; they are handled below
    bad = ~torch.isfinite(zmax.squeeze(-1))
    if bad.any():
        X[bad] = torch.where(torch.isneginf(z2[bad]), -torch.inf, 0.0).to(X.dtype)
    # every support entry satisfies X > tau >= -1; count candidates per row
    cand = X > -1
    counts = cand.sum(-1)  # (rows,)
    tau = torch.full((X.shape[0], 1), -1.0, dtype=X.dtype, device=X.device)  # one-hot rows
    multi = (counts > 1).nonzero().squeeze(-1)  # rows that need a threshold solve
    if multi.numel():
        m = int(counts[multi].max())
        Xm = X.index_select(0, multi)  # (r, k)
        top = Xm.topk(m, dim=-1, sorted=True).values if m < X.shape[-1] else Xm.sort(
            -1, descending=True
        ).values  # (r, m)
        top = torch.where(top > -1, top, torch.full_like(top, -torch.inf))
        tau.index_copy_(0, multi, _threshold_sorted(top, kind))
    P = (X - tau).clamp_(min=0)
    if kind == "entmax15":
        P.square_()
    return P.reshape(shape)


def _move_last(z: Tensor, dim: int) -> tuple[Tensor, int]:
    dim = dim % z.dim() if z.dim() else 0
    return (z if dim == z.dim() - 1 else z.transpose(dim, -1)), dim


# ---------------------------------------------------------------------------------------------
# autograd functions (backward from the saved output)
# ---------------------------------------------------------------------------------------------


class _Entmax15Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, dim: int) -> Tensor:
        zt, dim = _move_last(z, dim)
        P = _sparse_map(zt.contiguous(), "entmax15")
        P = P if dim == z.dim() - 1 else P.transpose(dim, -1)
        ctx.dim = dim
        ctx.save_for_backward(P)
        return P

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        (P,) = ctx.saved_tensors
        s = P.sqrt()  # Jacobian = diag(s) - s s^T / sum(s)
        sg = s * g
        dz = sg - s * (sg.sum(ctx.dim, keepdim=True) / s.sum(ctx.dim, keepdim=True))
        return dz, None


class _SparsemaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, dim: int) -> Tensor:
        zt, dim = _move_last(z, dim)
        P = _sparse_map(zt.contiguous(), "sparsemax")
        P = P if dim == z.dim() - 1 else P.transpose(dim, -1)
        ctx.dim = dim
        ctx.save_for_backward(P)
        return P

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:
        (P,) = ctx.saved_tensors
        supp = (P > 0).to(g.dtype)  # Jacobian = diag(s) - s s^T / |S|, s the support indicator
        gs = g * supp
        dz = gs - supp * (gs.sum(ctx.dim, keepdim=True) / supp.sum(ctx.dim, keepdim=True))
        return dz, None


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
        raise TypeError(f"dim must be an int; got {dim!r}")
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
    ``dz = s*g - s (s.g)/sum(s)``, ``s = sqrt(p)``.
    """
    return _in_compute_dtype(_Entmax15Function.apply, z, dim)


def sparsemax(z: Tensor, dim: int = -1) -> Tensor:
    r"""Sparsemax along ``dim``: the Euclidean projection of ``z`` onto the simplex,
    :math:`p = [z - \tau]_+`. Exactly one-hot when the top two scores differ by >= 1."""
    return _in_compute_dtype(_SparsemaxFunction.apply, z, dim)


def softmax(z: Tensor, dim: int = -1) -> Tensor:
    r"""Softmax along ``dim`` (max-subtracted, stable at any scale): :math:`p \propto e^{z}`."""
    return _in_compute_dtype(torch.softmax, z, dim)


def hardmax(z: Tensor, dim: int = -1) -> Tensor:
    """One-hot of the argmax along ``dim`` (ties to the lowest index); the ``T = 0`` limit."""
    return _in_compute_dtype(_HardmaxFunction.apply, z, dim)


#: name -> mapping; the names accepted as ``assignment`` everywhere.
MAPPINGS: dict[str, Callable[..., Tensor]] = {
    "softmax": softmax,
    "entmax15": entmax15,
    "sparsemax": sparsemax,
    "hard": hardmax,
}


def get_mapping(name: str) -> Callable[..., Tensor]:
    """The mapping called ``name`` (one of ``MAPPINGS``); raises ``ValueError`` otherwise."""
    return MAPPINGS[check_assignment(name)]
