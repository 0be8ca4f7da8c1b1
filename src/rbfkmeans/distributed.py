r"""Running a fit over several processes or machines with ``torch.distributed``.

The fit itself needs nothing from this module: once a default process group is initialised
(``torchrun`` plus ``torch.distributed.init_process_group``), ``RBFKMeans.fit(X_local)`` treats
``X_local`` as this rank's shard of the data ``X = concat_r X_r`` and reduces every statistic of
the soft-Lloyd step over ranks with ``all_reduce``:

.. math::

    N_j = \sum_r \sum_{i \in X_r} w_i r_{ij}, \qquad S_j = \sum_r \sum_{i \in X_r} w_i r_{ij} x_i,
    \qquad F_T = \sum_r F_T^{(r)},

so every rank ends with the same centroids ``C`` (k, d), equal to a single-process fit on ``X``
(up to the order of floating-point sums). ``labels_`` stay local (this rank's rows).

This module holds the small helpers around that: a context manager that creates and destroys a
group (:func:`process_group`), contiguous sharding of rows (:func:`shard`, :func:`shard_bounds`),
gathering variable-length per-rank rows (:func:`gather_rows`), the device a rank should use
(:func:`local_device`), fitting on this rank's data alone (:func:`local_only`) and
broadcasting a module's parameters and buffers (:func:`broadcast_module`, for a
:class:`~rbfkmeans.KMeansLayer` updated outside ``DistributedDataParallel``).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from .comm import LOCAL_ONLY

__all__ = [
    "broadcast_module",
    "gather_rows",
    "is_distributed",
    "local_device",
    "local_only",
    "process_group",
    "rank",
    "shard",
    "shard_bounds",
    "world_size",
]

A = TypeVar("A", np.ndarray, Tensor)


def is_distributed() -> bool:
    """Whether a default ``torch.distributed`` process group is initialised (fits then reduce
    over its ranks)."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank in the default group (0 without one)."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """Number of ranks in the default group (1 without one)."""
    return dist.get_world_size() if is_distributed() else 1


def local_device() -> torch.device:
    """``cuda:LOCAL_RANK`` when CUDA is available (``LOCAL_RANK`` as set by ``torchrun``,
    default 0), else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(
            torch.cuda.device_count(), 1))
    return torch.device("cpu")


@contextmanager
def process_group(
    backend: str | None = None,
    *,
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    timeout_s: float = 300.0,
) -> Iterator[None]:
    """Initialise the default process group for the ``with`` block, destroy it afterwards.

    Without arguments it reads the ``torchrun`` environment (``MASTER_ADDR``, ``MASTER_PORT``,
    ``RANK``, ``WORLD_SIZE``). ``backend`` defaults to ``"nccl"`` when CUDA is available and
    ``"gloo"`` otherwise. A group that is already initialised is used as it is and left alone.
    """
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of PyTorch")
    if dist.is_initialized():
        yield
        return
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("gloo", "nccl", "mpi", "ucc", "xccl") and "," not in backend:
        raise ValueError(f"backend must be a torch.distributed backend name; got {backend!r}")
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=timeout_s)}
    if init_method is not None:
        kwargs["init_method"] = init_method
    if rank is not None:
        kwargs["rank"] = rank
    if world_size is not None:
        kwargs["world_size"] = world_size
    if backend == "nccl":
        torch.cuda.set_device(local_device())
    dist.init_process_group(backend, **kwargs)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextmanager
def local_only() -> Iterator[None]:
    """Inside the block, fits use this process's data only, even under a process group
    (e.g. a per-rank estimator inside a DDP job); outside, they reduce over the ranks again."""
    token = LOCAL_ONLY.set(True)
    try:
        yield
    finally:
        LOCAL_ONLY.reset(token)


def shard_bounds(n: int, n_shards: int | None = None, index: int | None = None) -> slice:
    """Rows ``[start, stop)`` of shard ``index`` when ``n`` rows are split into ``n_shards``
    contiguous blocks whose sizes differ by at most one (as ``numpy.array_split``).

    Defaults: the group's world size and this process's rank.
    """
    n_shards = world_size() if n_shards is None else n_shards
    index = rank() if index is None else index
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be an integer >= 0; got {n!r}")
    if isinstance(n_shards, bool) or not isinstance(n_shards, int | np.integer) or n_shards < 1:
        raise ValueError(f"n_shards must be an integer >= 1; got {n_shards!r}")
    if isinstance(index, bool) or not isinstance(index, int | np.integer) \
            or not 0 <= index < n_shards:
        raise ValueError(f"index must be an integer in [0, {n_shards}); got {index!r}")
    base, extra = divmod(int(n), int(n_shards))
    start = index * base + min(index, extra)
    return slice(start, start + base + (1 if index < extra else 0))


def shard(X: A, n_shards: int | None = None, index: int | None = None) -> A:
    """This rank's contiguous block of the rows of ``X`` (a view: no copy; works on a
    ``numpy.memmap``, whose pages are then the only ones this rank reads)."""
    if not hasattr(X, "shape") or len(X.shape) < 1:
        raise TypeError(f"X must be an array or tensor with rows; got {type(X).__name__}")
    return X[shard_bounds(int(X.shape[0]), n_shards, index)]


def gather_rows(t: Tensor | np.ndarray) -> Tensor:
    """Concatenate each rank's ``t`` (n_r, ...) in rank order; ranks may hold different ``n_r``.

    Every rank receives the whole result (e.g. the full ``labels_`` of a distributed fit).
    Without a process group returns ``t`` as a tensor.
    """
    x = torch.as_tensor(t)
    if not is_distributed():
        return x
    comm_device = _collective_device()
    n_local = torch.tensor([x.shape[0]], dtype=torch.int64, device=comm_device)
    sizes = [torch.zeros_like(n_local) for _ in range(world_size())]
    dist.all_gather(sizes, n_local)
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    padded = x.new_zeros((longest, *x.shape[1:]), device=comm_device)
    padded[: x.shape[0]] = x.to(comm_device)
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(x.device)


@torch.no_grad()
def broadcast_module(module: nn.Module, src: int = 0) -> nn.Module:
    """Copy ``src``'s parameters and buffers into every rank's ``module`` (in place; returns it).

    ``DistributedDataParallel`` already does this when it wraps a model and keeps the parameters
    equal afterwards (gradients are averaged, buffers re-broadcast each forward); use this after
    changing a layer outside DDP, e.g. a rank-local ``partial_fit``.
    """
    if not is_distributed():
        return module
    comm_device = _collective_device()
    for t in [*module.parameters(), *module.buffers()]:
        buf = t.detach().to(comm_device)
        dist.broadcast(buf, src=src)
        t.copy_(buf)
    return module


def _collective_device() -> torch.device:
    """Where collectives of the default group need their tensors (CUDA for NCCL, else CPU)."""
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
