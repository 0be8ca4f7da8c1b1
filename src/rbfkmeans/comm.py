r"""Reductions across the ranks of a ``torch.distributed`` process group.

Every statistic of a fit is a sum over points, so a fit on the shards ``X_r`` of several
processes equals a fit on their concatenation once each sum is all-reduced:

.. math::

    N_j = \sum_r N_j^{(r)}, \qquad S_j = \sum_r S_j^{(r)}, \qquad J = \sum_r J^{(r)}.

A :class:`Comm` is handed down explicitly. Low-level code is local unless it is given an active
one; only the estimator (and the mini-batch driver) detect an initialised default group, with
:meth:`Comm.auto`. This module is the bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from numbers import Integral, Real

import torch
from torch import Tensor

__all__ = ["LOCAL_ONLY", "Comm"]

#: set by :func:`rbfkmeans.distributed.local_only`: :meth:`Comm.auto` then returns a local Comm
LOCAL_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rbfkmeans_local_only", default=False
)


class Comm:
    """Sums, gathers and broadcasts over a process group; each one a no-op when not ``active``.

    ``Comm()`` is local (one process). ``Comm(active=True, group=g)`` reduces over ``g`` (the
    default group when ``g`` is None). ``Comm.auto()`` is active exactly when a default group is
    initialised, outside :func:`rbfkmeans.distributed.local_only`.
    """

    def __init__(self, *, active: bool = False, group: object | None = None) -> None:
        if not isinstance(active, bool):
            raise TypeError(f"active must be a bool; got {type(active).__name__} {active!r}")
        dist = torch.distributed
        if active and not (dist.is_available() and dist.is_initialized()):
            raise ValueError("active=True needs an initialised torch.distributed process group")
        self.active = active
        self.group = group
        self.rank = dist.get_rank(group) if active else 0  # type: ignore[arg-type]
        self.world_size = dist.get_world_size(group) if active else 1  # type: ignore[arg-type]
        # NCCL only moves CUDA tensors; gloo (and the rest) are given CPU tensors
        self.device = torch.device("cpu")
        if active and "nccl" in str(dist.get_backend(group)).lower():  # type: ignore[arg-type]
            self.device = torch.device("cuda", torch.cuda.current_device())

    @classmethod
    def auto(cls) -> Comm:
        """Active over the default group when one is initialised (and not :data:`LOCAL_ONLY`)."""
        dist = torch.distributed
        active = dist.is_available() and dist.is_initialized() and not LOCAL_ONLY.get()
        return cls(active=bool(active))

    def __repr__(self) -> str:
        return f"Comm(active={self.active}, rank={self.rank}, world_size={self.world_size})"

    def sum_(self, *tensors: Tensor) -> None:
        """In-place sum of each tensor over all ranks (one collective for all of them);
        ``TypeError`` naming the argument for anything but a tensor (a type check, no sync)."""
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"sum_ takes tensors; got {type(t).__name__} {t!r} as argument "
                                f"{i}")
        if not self.active or not tensors:
            return
        flat = torch.cat([t.reshape(-1).to(self.device, torch.float64) for t in tensors])
        torch.distributed.all_reduce(flat, group=self.group)
        offset = 0
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].reshape(t.shape).to(t.device, t.dtype))
            offset += n

    def sum_scalars(self, *values: float) -> list[float]:
        """The sums of the given numbers over all ranks (real numbers or one-element tensors;
        ``TypeError`` naming the argument otherwise)."""
        for i, v in enumerate(values):
            if not isinstance(v, Real | Tensor):
                raise TypeError(f"sum_scalars takes real numbers; got {type(v).__name__} {v!r} "
                                f"as argument {i}")
        if not self.active:
            return [float(v) for v in values]
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t, group=self.group)
        return [float(v) for v in t.tolist()]

    def all_gather(self, t: Tensor) -> Tensor:
        """Concatenate ``t`` (same shape on every rank) along dim 0 over ranks, in rank order."""
        if not self.active:
            return t
        src = t.contiguous().to(self.device)
        out = [torch.empty_like(src) for _ in range(self.world_size)]
        torch.distributed.all_gather(out, src, group=self.group)
        return torch.cat(out, dim=0).to(t.device)

    def broadcast_(self, t: Tensor, src: int = 0) -> None:
        """Overwrite ``t`` on every rank with rank ``src``'s ``t``."""
        if self.active:
            buf = t.to(self.device).contiguous()
            torch.distributed.broadcast(buf, src=src, group=self.group)  # type: ignore[arg-type]
            if buf is not t:
                t.copy_(buf)

    def counts(self, n_local: int) -> list[int]:
        """Number of rows on each rank; ``n_local`` an integer >= 0 (``TypeError``/``ValueError``
        naming it otherwise)."""
        if isinstance(n_local, bool) or not isinstance(n_local, Integral):
            raise TypeError(f"n_local must be an integer; got {type(n_local).__name__} "
                            f"{n_local!r}")
        if n_local < 0:
            raise ValueError(f"n_local must be an integer >= 0; got {n_local!r}")
        if not self.active:
            return [n_local]
        t = torch.tensor([n_local], dtype=torch.int64)
        return [int(v) for v in self.all_gather(t).tolist()]


def raise_if_rejected(flags: Iterable[float], error: Exception | None, what: str,
                      then: str = "") -> None:
    """Stop every rank together once the ranks gathered whether each rejected its own input.

    ``flags`` holds one entry per rank (non-zero: that rank's input was rejected). This rank's
    ``error`` is raised here; on the other ranks, where any flag is set, a ``ValueError`` says
    that ``what`` (e.g. ``"X was"``) was rejected there, followed by ``then``: no rank is left
    waiting in a collective for one that stopped.
    """
    if error is not None:
        raise error
    failed = [r for r, flag in enumerate(flags) if flag]
    if failed:
        raise ValueError(f"{what} rejected on rank(s) {failed} (see the error there){then}")
