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
import hashlib
import numbers
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from .comm import LOCAL_ONLY, raise_if_rejected
from .errors import value_error

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
    default 0), else the CPU.

    ``LOCAL_RANK`` must be an integer ``>= 0`` (``ValueError`` naming it otherwise); with more
    processes than visible GPUs they share them, process ``LOCAL_RANK`` on GPU
    ``LOCAL_RANK % count`` (with one visible GPU, as a launcher that gives each process its own
    through ``CUDA_VISIBLE_DEVICES`` leaves it, every process uses that one).
    """
    if not torch.cuda.is_available():
        return torch.device("cpu")
    local = _env_int("LOCAL_RANK", 0)
    return torch.device("cuda", (local or 0) % max(torch.cuda.device_count(), 1))


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

    ``backend`` is a name in ``torch.distributed.Backend.backend_list`` (any case, as torch
    compares them; ``"nccl"`` needs CUDA) or a ``"cpu:gloo,cuda:nccl"`` list; ``rank`` and
    ``world_size`` (or, where they are read, ``RANK`` and ``WORLD_SIZE``) integers with
    ``0 <= rank < world_size``; ``timeout_s`` a finite number of seconds ``> 0``. Each is
    checked before any rank waits for another. The block may destroy the group itself.
    """
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of PyTorch")
    _check_group_arguments(backend, rank, world_size, timeout_s)
    if dist.is_initialized():
        yield
        return
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend.lower() == "nccl" and not torch.cuda.is_available():
        raise ValueError(f"backend {backend!r} needs CUDA, which is not available; use 'gloo'")
    if init_method in (None, "env://"):  # torch reads RANK and WORLD_SIZE where not given
        _check_environment_ranks(rank, world_size)
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=float(timeout_s))}
    if init_method is not None:
        kwargs["init_method"] = init_method
    if rank is not None:
        kwargs["rank"] = int(rank)
    if world_size is not None:
        kwargs["world_size"] = int(world_size)
    if backend.lower() == "nccl":
        torch.cuda.set_device(local_device())
    dist.init_process_group(backend, **kwargs)
    group = dist.group.WORLD
    try:
        yield
    finally:
        if dist.is_initialized() and dist.group.WORLD is group:  # unless the block destroyed it
            dist.destroy_process_group()


def _check_group_arguments(backend: Any, rank: Any, world_size: Any, timeout_s: Any) -> None:
    """Raise naming the first of :func:`process_group`'s arguments that torch would not take."""
    if backend is not None:
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a str (a torch.distributed backend name); got "
                            f"{type(backend).__name__} {backend!r}")
        known = [b for b in dist.Backend.backend_list if b != "undefined"]
        if backend.lower() not in known and "," not in backend and ":" not in backend:
            raise ValueError(f"backend must be a torch.distributed backend name "
                             f"({', '.join(known)}); got {backend!r}")
    for name, value, low in (("rank", rank, 0), ("world_size", world_size, 1)):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, int | np.integer) or value < low):
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    if rank is not None and world_size is not None and rank >= world_size:
        raise ValueError(f"rank must be less than world_size; got rank={rank} and "
                         f"world_size={world_size}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) \
            or not 0 < float(timeout_s) <= _MAX_TIMEOUT_S:
        raise value_error(timeout_s, f"timeout_s must be a finite number of seconds > 0; got "
                                     f"{timeout_s!r}")


#: the longest ``timedelta`` (999999999 days), in seconds
_MAX_TIMEOUT_S = datetime.timedelta.max.total_seconds()


def _check_environment_ranks(rank: int | None, world_size: int | None) -> None:
    """Raise naming ``RANK`` or ``WORLD_SIZE`` where the one torch's ``env://`` reads in place
    of a missing argument is not an integer, or gives a rank >= the world size."""
    rank_name, r = ("rank", rank) if rank is not None else ("RANK", _env_int("RANK", 0))
    size_name, size = (("world_size", world_size) if world_size is not None
                       else ("WORLD_SIZE", _env_int("WORLD_SIZE", 1)))
    if r is not None and size is not None and r >= size:
        raise ValueError(f"{rank_name} must be less than {size_name}; got {rank_name}={r} and "
                         f"{size_name}={size}")


def _env_int(name: str, low: int) -> int | None:
    """The environment variable ``name`` as an integer ``>= low`` (None where it is not set)."""
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise ValueError(f"the environment variable {name} must be an integer >= {low}; got "
                         f"{text!r}")
    return value


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
    ``numpy.memmap``, whose pages are then the only ones this rank reads).

    A SciPy sparse matrix whose format cannot slice rows (``coo_matrix``, DIA, BSR) is
    converted to CSR first (the block is then CSR).
    """
    if not hasattr(X, "shape") or len(X.shape) < 1:
        raise TypeError(f"X must be an array or tensor with rows; got {type(X).__name__}")
    rows = shard_bounds(int(X.shape[0]), n_shards, index)
    try:
        return X[rows]
    except (TypeError, NotImplementedError) as exc:
        if not hasattr(X, "tocsr"):
            raise TypeError(f"X must support slicing its rows (X[start:stop]); a "
                            f"{type(X).__name__} does not") from exc
    return X.tocsr()[rows]


def gather_rows(t: Tensor | np.ndarray) -> Tensor:
    """Concatenate each rank's ``t`` (n_r, ...) in rank order; ranks may hold different ``n_r``.

    Every rank receives the whole result (e.g. the full ``labels_`` of a distributed fit), a
    new tensor (without a process group, ``t`` as a tensor, copied). ``t`` is a tensor, a NumPy
    array or a (nested) list with at least one dimension, and has the same dtype and the same
    shape after the rows on every rank (a list beside a tensor of its dtype is fine); where it
    does not, or where a rank's ``t`` is not valid, every rank raises before any row moves.
    """
    if not is_distributed():
        x = _rows(t)
        return x.clone() if isinstance(t, Tensor | np.ndarray) else x  # not the caller's memory
    try:
        x, error = _rows(t), None
    except (TypeError, ValueError) as exc:
        x, error = torch.empty(0), exc  # raised on every rank by _agree
    counts, details = _agree(error, "t", f"{x.dtype} {tuple(x.shape[1:])}",
                             f"{x.dtype} of shape {tuple(x.shape)}", int(x.shape[0]))
    if details is not None:
        raise ValueError("t must have the same dtype and shape after the rows on every rank; got "
                         + ", ".join(f"rank {r}: {d}" for r, d in enumerate(details)))
    comm_device = _collective_device()
    longest = max(counts)
    padded = x.new_zeros((longest, *x.shape[1:]), device=comm_device)
    padded[: x.shape[0]] = x.to(comm_device)
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(x.device)


def _rows(t: object) -> Tensor:
    """``t`` as a tensor with rows for :func:`gather_rows`, or raise naming ``t``."""
    if not isinstance(t, Tensor | np.ndarray | list | tuple):
        hint = next((f" (use .{m}())" for m in ("toarray", "to_numpy") if hasattr(t, m)), "")
        raise TypeError(f"t must be a tensor, a NumPy array or a list; got "
                        f"{type(t).__name__}{hint}")
    if isinstance(t, np.ndarray) and any(step < 0 for step in t.strides):
        t = t.copy()  # torch takes no negative strides
    try:
        x = torch.as_tensor(t)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"t must hold numbers of one dtype; got {type(t).__name__}: {exc}") \
            from exc
    if x.ndim == 0:
        raise ValueError(f"t must have at least one dimension (its rows); got a 0-d "
                         f"{type(t).__name__}")
    if x.layout != torch.strided:
        raise TypeError(f"t must be dense; got layout {x.layout}")
    return x


@torch.no_grad()
def broadcast_module(module: nn.Module, src: int = 0) -> nn.Module:
    """Copy ``src``'s parameters and buffers into every rank's ``module`` (in place; returns it).

    ``DistributedDataParallel`` already does this when it wraps a model and keeps the parameters
    equal afterwards (gradients are averaged, buffers re-broadcast each forward); use this after
    changing a layer outside DDP, e.g. a rank-local ``partial_fit``.

    ``module`` is a :class:`torch.nn.Module` whose parameters and buffers have the same names,
    shapes and dtypes, in the same order, on every rank, and ``src`` the same integer in
    ``[0, world size)`` on every rank (0 without a process group); where they are not, every rank
    raises before anything is copied.
    """
    if not is_distributed():
        _check_module(module, src)
        return module
    try:
        _check_module(module, src)
        error = None
    except (TypeError, ValueError) as exc:
        error = exc  # raised on every rank by _agree
    lines = [] if error is not None else [f"src {src}", *(
        f"{kind} {name} {tuple(t.shape)} {t.dtype}" for kind, named in
        (("parameter", module.named_parameters()), ("buffer", module.named_buffers()))
        for name, t in named)]
    _, details = _agree(error, "module", "\n".join(lines), "\n".join(lines))
    if details is not None:
        raise _modules_differ([d.split("\n") for d in details])
    comm_device = _collective_device()
    for t in [*module.parameters(), *module.buffers()]:
        buf = t.detach().to(comm_device)
        dist.broadcast(buf, src=int(src))
        t.copy_(buf)
    return module


def _check_module(module: object, src: object) -> None:
    """Raise naming ``module`` or ``src`` where :func:`broadcast_module` cannot take them."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module; got {type(module).__name__} "
                        f"{module!r}"[:200])
    if isinstance(src, bool) or not isinstance(src, int | np.integer) \
            or not 0 <= src < world_size():
        raise ValueError(f"src must be an integer in [0, {world_size()}); got {src!r}")


def _modules_differ(lines: list[list[str]]) -> ValueError:
    """The error of :func:`broadcast_module` where the ranks' descriptions ``lines`` (``src``,
    then a line per parameter and buffer) differ: the first difference of each rank from
    ``src``'s."""
    srcs = [rank_lines[0].split()[1] for rank_lines in lines]
    if len(set(srcs)) > 1:
        return ValueError("src must be the same on every rank; got "
                          + ", ".join(f"rank {r}: {s}" for r, s in enumerate(srcs)))
    src = int(srcs[0])
    reference = [*lines[src][1:], "nothing more"]
    differences = []
    for r, rank_lines in enumerate(lines):
        mine = [*rank_lines[1:], "nothing more"]
        if mine != reference:
            i = next(i for i, (a, b) in enumerate(zip(mine, reference, strict=False))
                     if a != b)
            differences.append(f"rank {r} has {mine[i]} where rank {src} (src) has "
                               f"{reference[i]}")
    return ValueError("module must have the same parameters and buffers (names, shapes and "
                      "dtypes, in the order registered) on every rank; " + "; ".join(differences))


def _agree(error: Exception | None, what: str, key: str, detail: str,
           n: int = 0) -> tuple[list[int], list[str] | None]:
    """Every rank's ``n``, and every rank's ``detail`` where the ranks' ``key`` differ (else
    None), after each rank checked its own argument ``what`` (``error``: why it is not valid).

    One all-gather of ``n``, ``error`` and a hash of ``key``, and of the details only on the
    way to an error; a rank's ``error`` is raised there and a ``ValueError`` naming that rank on
    the others, so that no rank is left waiting in a collective.
    """
    digest = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "big")
    mine = torch.tensor([n, error is not None, digest], dtype=torch.int64,
                        device=_collective_device())
    table = [torch.zeros_like(mine) for _ in range(world_size())]
    dist.all_gather(table, mine)
    rows = [[int(v) for v in row.tolist()] for row in table]  # (ranks, 3)
    raise_if_rejected([row[1] for row in rows], error, f"{what} was")
    if all(row[2] == digest for row in rows):
        return [row[0] for row in rows], None
    details: list[Any] = [None] * world_size()
    dist.all_gather_object(details, detail)
    return [row[0] for row in rows], details


def _collective_device() -> torch.device:
    """Where collectives of the default group need their tensors (CUDA for NCCL, else CPU)."""
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
