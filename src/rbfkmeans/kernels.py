r"""Fused CPU kernels (numba) for the passes every fit repeats: hard, group, swap costs, Lloyd.

A pass written as torch operations makes one sweep over memory per operation, and on the CPU a
pass of the annealing (a few thousand rows, a few dozen groups) is dominated by the fixed cost of
its ~100 operations, not by its arithmetic. These kernels make one sweep over the rows instead:
each row's scores, its memberships and its share of the sums are computed while the row is in
cache, in float64, the rows split into at most ``MAX_BLOCKS`` blocks (from ``n`` alone, so the
result does not depend on the number of threads) whose partial sums are added in block order.

:func:`hard_pass` is one Lloyd assignment (:func:`rbfkmeans.stats.cluster_stats` at ``T = 0``):

.. math::

    a_i = \operatorname{argmin}_j \left(\lVert c_j \rVert^2 - 2 x_i \cdot c_j\right), \quad
    N_j = \sum_{a_i = j} w_i, \quad S_j = \sum_{a_i = j} w_i x_i, \quad
    J = \sum_i w_i \left[\lVert x_i \rVert^2 + \lVert c_{a_i} \rVert^2
        - 2 x_i \cdot c_{a_i}\right]_+,

ties to the lowest index. :func:`group_pass` is the accumulation of
:func:`rbfkmeans.groups.group_stats` (its module docstring has the equations): per row the
scores ``z_ij = (x_i . c_j - ||c_j||^2 / 2) / T``, the group memberships ``q_ij`` with
multiplicities ``m_j`` (softmax of ``z_i + log m``; entmax-1.5 and sparsemax from the threshold
``t_i`` of ``sum_j m_j [t_i - y_ij]_+^p = 1``, ``y_ij = a (max_l z_il - z_ij)``, found by sorting
the candidates ``y_ij < 1`` and adding them while the mass at the next one is below 1), then
``N``, ``S``, and on request the objectives, the nearest-group spread ``V`` and the gain matrices
``A_j = sum_i w_i gamma_ij (x_i - c_j)(x_i - c_j)^T``. :func:`lloyd_run` runs whole Lloyd
iterations (assignment, update, stopping rules) in compiled code for
:func:`rbfkmeans.lloyd.lloyd`, and :func:`group_fixed_point` the annealing's SQUAREM fixed point
at one temperature (group passes, updates, extrapolations and their safeguard) for
:func:`rbfkmeans.splits.anneal_splits`. The loops are in the private ``rbfkmeans._loops`` (the
passes), ``rbfkmeans._lloyd_loops``, ``rbfkmeans._wide_loops`` and ``rbfkmeans._sums_loops``
(the Lloyd runs) and
``rbfkmeans._squarem_loops`` (the fixed point), with the per-row pieces they share in
``rbfkmeans._row_loops``; this module holds the rule, the threads and the typed wrappers.
The sweeps of the swap search and of Hartigan's moves have their wrappers in
:mod:`rbfkmeans.search_kernels` (on the same rule and threads), and :mod:`rbfkmeans.warmup`
compiles every kernel.

They run on CPU tensors. Up to ``MAX_DIM`` features they compute the scores row by row; for
wider data a BLAS matrix product beats a per-row loop, so each block of rows takes its scores
from products of ``WIDE_ROWS`` rows at a time inside the kernel (the gain matrices, ``d x d`` per
group, are then formed by the caller's matrix products). The
results equal the torch passes' up to rounding (the tests compare them in float64). Without
numba, with ``RBFKMEANS_KERNELS=0`` in the environment, in a process forked after the kernels'
thread pool started (numba's OpenMP layer does not survive it), or, by default, until every
kernel is compiled into numba's on-disk cache, every pass takes the torch path:
:mod:`rbfkmeans.precompile` holds that rule and compiles them in a background process;
:func:`rbfkmeans.warmup.warm_up` compiles them in this one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import NamedTuple

import numpy as np
import torch
from threadpoolctl import ThreadpoolController
from torch import Tensor

from . import precompile
from ._validation import check_positive_int

try:  # pragma: no cover - exercised by whichever environment runs the suite
    import numba

    from . import _lloyd_loops, _loops, _squarem_loops
except ImportError:  # pragma: no cover
    numba = None  # type: ignore[assignment]

#: the switch and the rule are public; the pass functions below are the engine's, called by
#: the passes of :mod:`rbfkmeans.stats`, :mod:`rbfkmeans.passes`, :mod:`rbfkmeans.groups`,
#: :mod:`rbfkmeans.splits` and :mod:`rbfkmeans.lloyd` once :func:`usable` holds (they do not
#: check their arguments again),
#: and :func:`launch`, :func:`as_array`, :func:`weights_array` and :func:`blocks` are the
#: calling convention every wrapper shares (:mod:`rbfkmeans.search_kernels` too)
__all__ = ["MAX_DIM", "enabled", "usable"]

#: the kernels compute the scores row by row up to this many features (measured: at d = 32 a
#: BLAS matrix product is faster); wider data takes them from BLAS products inside the kernel
MAX_DIM = 16
#: the rows are cut into at most this many blocks, each with its own partial sums
MAX_BLOCKS = 64
#: the partial sums may hold at most this many float64 entries (``blocks x g x d``, times ``d``
#: for the gain matrices); larger problems take the torch path
MAX_PARTIAL_ENTRIES = 1 << 23
#: the minimum rows per block
_BLOCK_ROWS = 512

_KINDS = {"softmax": 0, "entmax15": 1, "sparsemax": 2}


class LloydRun(NamedTuple):
    """What :func:`lloyd_run` returns: the centroids reached, labels, ``J`` (NaN unless
    ``finished``), iterations run, whether they converged or gave up on the target, and whether
    the run finished (False: it stopped before relocating an empty cluster), and the bounds at
    ``C`` a later run may start from (None unfinished): upper, lower (n,) on few features; on
    wide data upper (n,), the group bounds (n, t) float32, the group of each centroid (k,) and
    ``||x_i||^2`` (n,), up to :data:`KEPT_LOWER_BOUNDS` group bounds (None beyond)."""

    C: Tensor
    labels: Tensor | None
    inertia: float
    n_iter: int
    converged: bool
    gave_up: bool
    finished: bool
    bounds: tuple[Tensor, ...] | None


class WarmStart(NamedTuple):
    """Where :func:`lloyd_run` starts from a finished run (its ``warm``): that run's labels
    renumbered to the rows of the new ``C`` (-1 where their centroid is gone), its upper
    bounds (n,) and lower bounds (n,) on few features, its group bounds (n, t) on wide data,
    the rows of ``C`` that are new (int64), the parent's centroid that each row of ``C``
    continues (k, d; a new one its own); on wide data also the group of each row of ``C``
    (the parent's groups; a new centroid in any) and the parent's ``||x_i||^2`` (n,)."""

    labels: Tensor
    upper: Tensor
    lower: Tensor
    moved: Tensor
    continued: Tensor
    group_of: Tensor | None = None
    xs: Tensor | None = None


#: the process whose threads ran the first kernel (None before): a child forked after that
#: inherits a thread pool it cannot use (numba's OpenMP layer terminates it), so it takes the
#: torch passes
_pool_pid: int | None = None


def enabled() -> bool:
    """Whether the kernels may be used: numba imports, ``RBFKMEANS_KERNELS`` is not ``0``, this
    process is not a child forked after the kernels' thread pool started, and the fit under way
    decided for them (:func:`rbfkmeans.precompile.pinned`) or, outside a fit, they are compiled
    (``RBFKMEANS_KERNELS=1``: compiled at their first call if need be)."""
    if numba is None or precompile.mode() == "off":
        return False
    if _pool_pid is not None and _pool_pid != os.getpid():
        return False
    use = precompile.pinned_value()
    if use is not None:
        return use
    return precompile.mode() == "on" or precompile.compiled()


def blocks(n: int, entries: int = 0) -> int:
    """The blocks ``n`` rows are cut into: one per ``_BLOCK_ROWS`` rows, at most ``MAX_BLOCKS``,
    and at most as many as partial sums of ``entries`` (float64) each fit in
    ``MAX_PARTIAL_ENTRIES``; at least one. It depends on the problem's sizes only (never on
    the threads), so the sums are the same on any machine."""
    most = MAX_PARTIAL_ENTRIES // entries if entries else MAX_BLOCKS
    return max(1, min(MAX_BLOCKS, most, -(-n // _BLOCK_ROWS)))


def usable(X: Tensor, width: int, *, gains: int = 0, scores: bool = False) -> bool:
    """Whether a pass over ``X`` (n, d) with ``width`` centroids (and ``gains`` gain matrices)
    runs in a kernel: :func:`enabled`, a CPU float tensor without autograd, at most
    ``MAX_DIM`` features unless the pass takes its ``scores`` from matrix products (BLAS
    inside the kernel: a hard pass, a Lloyd run, a group pass) and accumulates no gain
    matrix, and the partial sums of two blocks within ``MAX_PARTIAL_ENTRIES`` (larger problems
    are cut into fewer blocks, :func:`blocks`). It does not depend on ``n``, so every rank of
    a distributed fit decides alike. Sparse rows never run in a kernel."""
    if getattr(X, "is_sparse", False) and not isinstance(X, Tensor):
        return False  # rbfkmeans.sparse.SparseRows: the passes' sparse products
    if not isinstance(X, Tensor):
        raise TypeError(f"X must be a torch.Tensor; got {type(X).__name__}")
    width = check_positive_int(width, "width")
    gains = check_positive_int(gains, "gains", minimum=0)
    if not enabled() or X.device.type != "cpu" or X.requires_grad:
        return False
    if X.dtype not in (torch.float32, torch.float64) or X.dim() != 2:
        return False
    d = int(X.shape[1])
    if d > MAX_DIM and (gains or not scores):
        return False
    return width * d + gains * d * d <= MAX_PARTIAL_ENTRIES // 2  # two blocks at least


#: the BLAS libraries of this process (threadpoolctl's controllers), found at the first wide
#: kernel
_blas: list[object] | None = None


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """The BLAS that numba's matrix products call (SciPy's), on one thread while a wide kernel
    runs: each of the kernel's threads calls it on its own rows (a threaded BLAS inside the
    parallel region would oversubscribe the cores, and OpenBLAS warns it may hang). Each
    library's count is read and put back directly (2 us; ``threadpool_limits`` takes 20)."""
    global _blas
    if _blas is None:
        import scipy.linalg.cython_blas  # noqa: F401  (what numba's np.dot calls)

        _blas = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    before = [lib.get_num_threads() for lib in _blas]  # type: ignore[attr-defined]
    for lib in _blas:
        lib.set_num_threads(1)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for lib, n in zip(_blas, before, strict=True):
            if n is not None:
                lib.set_num_threads(n)  # type: ignore[attr-defined]


@contextmanager
def launch(blas: bool = False) -> Iterator[None]:
    """Around a kernel call: numba's thread count set to torch's (at most numba's), this process
    recorded as the pool's owner, and torch's thread count put back afterwards: the first
    parallel region of numba's OpenMP pool resets the count of the OpenMP runtime that torch
    shares (a user's ``torch.set_num_threads(1)`` would silently become the core count). With
    ``blas``, the BLAS runs on one thread meanwhile (:func:`_one_blas_thread`)."""
    global _pool_pid
    assert numba is not None
    threads = torch.get_num_threads()
    _pool_pid = os.getpid()
    most = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    numba.set_num_threads(max(1, min(threads, most)))
    try:
        with _one_blas_thread() if blas else nullcontext():
            yield
    except SystemError as exc:
        # Ctrl-C while a kernel runs: Python's handler raises when the compiled call returns,
        # which CPython reports as "returned a result with an exception set" with the
        # KeyboardInterrupt only as its cause; give the caller the KeyboardInterrupt itself
        if _interrupted(exc):
            raise KeyboardInterrupt from None
        raise
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _interrupted(exc: BaseException) -> bool:
    """Whether a ``KeyboardInterrupt`` is among the causes or contexts of ``exc``."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def as_array(t: Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy())


#: an empty array of each dtype: the weights of unweighted data (one compiled kernel for both)
_NO_WEIGHTS: dict[torch.dtype, np.ndarray] = {torch.float32: np.empty(0, np.float32),
                                             torch.float64: np.empty(0, np.float64)}


def weights_array(w: Tensor | None, X: Tensor) -> np.ndarray:
    """The weights as an array of ``X``'s dtype; empty when unweighted."""
    return _NO_WEIGHTS[X.dtype] if w is None else as_array(w.to(X.dtype))


def hard_pass(X: Tensor, C: Tensor, w: Tensor | None, *, labels: Tensor | None,
              objective: bool, x_sq: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """One hard assignment of the rows of ``X`` (n, d) to ``C`` (k, d) (module docstring).

    Writes the nearest centroid of each row into ``labels`` (an (n,) int64 CPU tensor) when
    given, and returns ``N`` (k,) and ``S`` (k, d) in ``X``'s dtype and ``J`` as a float64 0-d
    tensor (0 unless ``objective``). Beyond ``MAX_DIM`` features the scores come from BLAS
    products of a few hundred rows inside the kernel; ``x_sq`` (n,), the rows' squared norms
    where the caller has them (:attr:`rbfkmeans.passes.Data.X_sq`), spares the wide kernel
    computing them for its rounding margin before each row's label (``J`` takes each row's
    own, summed with its share of the sums). Call only where :func:`usable` holds (with
    ``scores=True`` for wide data)."""
    Xn = as_array(X)
    out = labels.numpy() if labels is not None else np.empty(Xn.shape[0], dtype=np.int64)
    wide = Xn.shape[1] > MAX_DIM
    with launch(blas=wide):
        args = (Xn, as_array(C.to(X.dtype)), weights_array(w, X), bool(objective), out)
        nb = blocks(Xn.shape[0], int(C.shape[0]) * Xn.shape[1])
        xs = _NO_WEIGHTS[X.dtype] if x_sq is None else as_array(x_sq.to(X.dtype))
        N, S, J = _loops.hard_wide(*args, xs, torch.finfo(X.dtype).eps / 2, nb) if wide \
            else _loops.hard(*args, nb)
    dt = X.dtype
    return (torch.from_numpy(N).to(dt), torch.from_numpy(S).to(dt),
            torch.tensor(J, dtype=torch.float64))


def group_pass(X: Tensor, C: Tensor, m: Tensor, T: float, kind: str, w: Tensor | None, *,
               objective: bool, split: Tensor | None, hard_tol: float,
               gains_out: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The accumulation of one group pass (module docstring) over the rows of ``X`` (n, d) with
    the ``g`` groups ``C`` (g, d) of multiplicities ``m`` (g,) at ``T > 0`` for the mapping
    ``kind`` (``"softmax"``, ``"entmax15"``, ``"sparsemax"``).

    Returns ``N`` (g,) and ``S`` (g, d) in ``X``'s dtype, and in float64 ``V`` (g,) (zeros
    unless ``objective`` or ``split`` is given), ``acc`` = ``[F_T, J, soft weight]`` (zeros
    unless ``objective``) and the gain matrices ``A`` (g', d, d) of the groups ``split`` (g',),
    empty without it. With ``gains_out`` (a zero (n, g') float64 CPU tensor) ``A`` is not
    accumulated: ``gains_out[i, s] = w_i gamma_ij`` for the ``s``-th group of ``split``, for a
    matrix product to form it (wide data). Beyond ``MAX_DIM`` features the scores come from
    BLAS products of ``WIDE_ROWS`` rows inside the kernel (as in :func:`hard_pass`). Call only
    where :func:`usable` holds (with ``scores=True`` for wide data, and ``gains=0`` when
    ``gains_out`` is given)."""
    Xn = as_array(X)
    g = C.shape[0]
    split_pos = np.full(g, -1, dtype=np.int64)
    ns = 0
    if split is not None and split.numel():
        idx = split.cpu().numpy()
        split_pos[idx] = np.arange(idx.size)
        ns = int(idx.size)
    wide = Xn.shape[1] > MAX_DIM
    with launch(blas=wide):
        N, S, V, acc, A = _loops.group(
            Xn, as_array(C.to(X.dtype)), as_array(m.to(torch.int64)), float(T), _KINDS[kind],
            weights_array(w, X), bool(objective), bool(objective or split is not None),
            float(hard_tol),
            X.dtype == torch.float32, split_pos, ns,
            np.zeros((0, ns)) if gains_out is None else gains_out.numpy(), wide,
            blocks(Xn.shape[0], g * Xn.shape[1] + (0 if wide else ns * Xn.shape[1] ** 2)))
    dt = X.dtype
    A_t = torch.from_numpy(A)  # the kernel fills the lower triangle: mirror it
    if A_t.numel():
        A_t = A_t.tril() + A_t.tril(-1).transpose(1, 2)
    return (torch.from_numpy(N).to(dt), torch.from_numpy(S).to(dt), torch.from_numpy(V),
            torch.from_numpy(acc), A_t)


def group_fixed_point(X: Tensor, C: Tensor, m: Tensor, T: float, kind: str, w: Tensor | None,
                      max_iter: int, tol: float) -> tuple[Tensor, int, bool]:
    """The SQUAREM fixed point of the groups' soft-Lloyd map at ``T`` from ``C`` (g, d) with
    multiplicities ``m`` (:func:`rbfkmeans.splits.anneal_splits`' rule, its passes those of
    :func:`group_pass`), all in compiled code unless a step needs an empty group relocated.

    Returns the centroids reached (in ``X``'s dtype), the evaluations of the map run, and whether
    it finished (False: a step needs the relocation; ``C`` and 0 come back, and the caller runs
    the fixed point itself). Single process only; call only where :func:`usable` holds
    (``scores=True``)."""
    Xn = as_array(X)
    wide = Xn.shape[1] > MAX_DIM
    with launch(blas=wide):
        C_out, it, status = _squarem_loops.fixed_point(
            Xn, as_array(C.to(X.dtype)), as_array(m.to(torch.int64)), float(T), _KINDS[kind],
            weights_array(w, X), 1e-7, X.dtype == torch.float32, int(max_iter), float(tol),
            blocks(Xn.shape[0], int(C.shape[0]) * Xn.shape[1]), wide)
    return torch.from_numpy(C_out), int(it), status == 0


def lloyd_run(X: Tensor, C: Tensor, w: Tensor | None, max_iter: int, tol: float,
              target: float = math.inf, stall: float = 0.0,
              warm: WarmStart | None = None,
              spherical: bool = False, floor: float = 0.0, floor_after: int = 0) -> LloydRun:
    """Lloyd iterations from ``C`` (k, d) on the rows of ``X``, all in compiled code, with the
    stopping rules of :func:`rbfkmeans.lloyd.lloyd` (labels unchanged, or ``tol > 0`` and a
    squared shift of at most ``tol``, or ``max_iter`` iterations, or, with a finite ``target``,
    its give-up rule with ratio ``stall``, or from iteration ``floor_after`` on ``J_t`` of the
    labels at most ``floor sum_i w_i ||x_i||^2``), then the labels and ``J`` at the centroids
    reached
    (those of :func:`hard_pass` bit for bit); or up to the first pass that leaves a cluster
    empty, whose relocation the caller does (``finished`` False: the labels of the pass before
    that one, None if none, and no ``J``). ``warm``: the state a finished run left
    (:class:`WarmStart`, from :attr:`LloydRun.bounds`): the first pass starts from it, with
    the same labels.
    ``spherical``: spherical k-means on unit rows ``X`` and unit ``C`` (the
    update ``S_j / ||S_j||``; the give-up rule on ``J_t = sum_i w_i - sum_j ||S_j||``), its
    ``J`` the spherical objective ``sum_i w_i (1 - cos)`` (the products in float64). Single
    process only; call only where :func:`usable` holds."""
    Xn = as_array(X)
    wide = Xn.shape[1] > MAX_DIM
    none_i, none_f = np.empty(0, dtype=np.int64), np.empty(0)
    lab0, up0, lo0, moved = (none_i, none_f, none_f, none_i) if warm is None else (
        as_array(warm.labels), as_array(warm.upper), none_f if wide else as_array(warm.lower),
        as_array(warm.moved))
    warm_C = np.empty((0, 0), Xn.dtype) if warm is None else as_array(warm.continued.to(X.dtype))
    lower_g, xs = np.empty((0, 0), dtype=np.float32), none_f
    if wide and warm is not None:
        assert warm.xs is not None
        lower_g, xs = as_array(warm.lower), as_array(warm.xs)
    if not wide:
        group_of = none_i
    elif warm is not None:
        assert warm.group_of is not None
        group_of = as_array(warm.group_of)
    else:
        group_of = centroid_groups(C, bound_groups(int(X.shape[0]), int(C.shape[0]))).numpy()
    unit = torch.finfo(X.dtype).eps / 2
    with launch(blas=wide):
        C_out, labels, J, it, status, upper, lower, lower_g, xs = _lloyd_loops.lloyd(
            Xn, as_array(C.to(X.dtype)), weights_array(w, X), int(max_iter), float(tol),
            blocks(int(X.shape[0]), int(C.shape[0]) * int(X.shape[1])), wide, float(target),
            float(stall), float(floor), int(floor_after), lab0, up0, lo0, moved,
            group_of, unit, bool(spherical), lower_g, xs, warm_C)
    finished = status != 2
    bounds: tuple[Tensor, ...] | None = None
    if finished and wide and 0 < lower_g.size <= KEPT_LOWER_BOUNDS:
        bounds = (torch.from_numpy(upper), torch.from_numpy(lower_g),
                  torch.from_numpy(group_of), torch.from_numpy(xs))
    elif finished and not wide and upper.shape[0]:  # (a wide run past the cap keeps none)
        bounds = (torch.from_numpy(upper), torch.from_numpy(lower))
    return LloydRun(torch.from_numpy(C_out),
                    torch.from_numpy(labels) if finished or it > 0 else None, float(J), int(it),
                    status == 1, status == 3, finished, bounds)


#: wide Lloyd runs keep one lower bound per centroid (Elkan) up to this many centroids
ELKAN_MAX_K = 16
#: and at most this many float32 lower bounds in all (256 MB)
MAX_LOWER_BOUNDS = 1 << 26
#: a wide run's result keeps its group bounds, for a run that starts from it, up to this many
#: (64 MB; a fit holds a few such results at once: the swap search's best and its trials).
#: Beyond, as on 262,144 rows against 1,024 centroids (128 groups, 128 MB), runs start cold.
KEPT_LOWER_BOUNDS = 1 << 24


def bound_groups(n: int, k: int) -> int:
    """How many groups of centroids a wide Lloyd run on ``n`` rows keeps lower bounds for:
    ``k`` (Elkan's bounds) up to :data:`ELKAN_MAX_K` centroids, else ``k / 8`` (Yinyang
    k-means uses ``k / 10``), within :data:`MAX_LOWER_BOUNDS` bounds in all; at least 1."""
    t = k if k <= ELKAN_MAX_K else max(ELKAN_MAX_K, k // 8)
    return max(1, min(t, MAX_LOWER_BOUNDS // max(n, 1)))


def centroid_groups(C: Tensor, t: int) -> Tensor:
    """The group (k,) int64 of each centroid of ``C`` (k, d): ``t`` groups of nearby centroids by
    a few Lloyd iterations on the centroids (from ``t`` of them evenly spaced in index order:
    deterministic), numbered ``0 .. t'-1`` with no group empty; each centroid its own group
    when ``t >= k``."""
    k = int(C.shape[0])
    if t >= k:
        return torch.arange(k, dtype=torch.int64)
    Cd = C.detach().double().cpu()
    centers = Cd[torch.linspace(0, k - 1, t).round().long()].clone()
    for _ in range(10):
        labels = torch.cdist(Cd, centers).argmin(dim=1)
        sums = torch.zeros_like(centers).index_add_(0, labels, Cd)
        sizes = torch.bincount(labels, minlength=t).unsqueeze(1)
        centers = torch.where(sizes > 0, sums / sizes.clamp(min=1), centers)
    labels = torch.cdist(Cd, centers).argmin(dim=1)
    return torch.unique(labels, return_inverse=True)[1].to(torch.int64)
