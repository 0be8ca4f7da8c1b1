r"""Fused CPU kernels (numba) for the passes every fit repeats: hard, group, swap costs, Lloyd.

A pass written as torch operations makes one sweep over memory per operation, and on the CPU a
pass of the annealing (a few thousand rows, a few dozen groups) is dominated by the fixed cost of
its ~100 operations, not by its arithmetic. These kernels make one sweep over the rows instead:
each row's scores, its memberships and its share of the sums are computed while the row is in
cache, in float64, the rows split into at most ``MAX_BLOCKS`` blocks (from ``n`` alone, so the
result does not depend on the number of threads) whose partial sums are added in block order.

:func:`hard_pass` is one Lloyd assignment (:func:`rbfkmeans.passes.cluster_stats` at ``T = 0``):

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
``A_j = sum_i w_i gamma_ij (x_i - c_j)(x_i - c_j)^T``. :func:`spread_pass` and
:func:`halves_pass` are the two sweeps of :func:`rbfkmeans.costs.swap_costs` (removal costs from
the two smallest distances and each cluster's scatter matrix; the weights and sums of each
cluster's halves), :func:`far_pass` and :func:`cells_pass` its far rows and their cells,
:func:`lloyd_run` runs whole Lloyd iterations (assignment, update,
stopping rules) in compiled code for :func:`rbfkmeans.lloyd.lloyd`, and
:func:`group_fixed_point` the annealing's SQUAREM fixed point at one temperature (group passes,
updates, extrapolations and their safeguard) for :func:`rbfkmeans.splits.anneal_splits`. The
loops are in the private ``rbfkmeans._loops`` (the passes), ``rbfkmeans._swap_loops`` (the
swap search's sweeps), ``rbfkmeans._lloyd_loops`` (the Lloyd runs),
``rbfkmeans._squarem_loops`` (the fixed point) and ``rbfkmeans._hartigan_loops`` (Hartigan's
scoring), with the per-row pieces they share in ``rbfkmeans._row_loops``; this module holds
the rule, the threads and the typed wrappers.

They run on CPU tensors. Up to ``MAX_DIM`` features they compute the scores row by row; for
wider data a BLAS matrix product beats a per-row loop, so each block of rows takes its scores
from products of ``WIDE_ROWS`` rows at a time inside the kernel (the gain matrices, ``d x d`` per
group, are then formed by the caller's matrix products). The
results equal the torch passes' up to rounding (the tests compare them in float64). Without
numba, with ``RBFKMEANS_KERNELS=0`` in the environment, in a process forked after the kernels'
thread pool started (numba's OpenMP layer does not survive it), or, by default, until every
kernel is compiled into numba's on-disk cache, every pass takes the torch path:
:mod:`rbfkmeans.precompile` holds that rule and compiles them in a background process;
:func:`warm_up` compiles them in this one.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import NamedTuple

import numpy as np
import torch
from threadpoolctl import ThreadpoolController
from torch import Tensor

from . import precompile
from ._validation import check_positive_int

try:  # pragma: no cover - exercised by whichever environment runs the suite
    import numba

    from . import _hartigan_loops, _lloyd_loops, _loops, _squarem_loops, _swap_loops
except ImportError:  # pragma: no cover
    numba = None  # type: ignore[assignment]

#: the switch and the rule are public; the pass functions below are the engine's, called by
#: the passes of :mod:`rbfkmeans.passes`, :mod:`rbfkmeans.groups`, :mod:`rbfkmeans.swaps` and
#: :mod:`rbfkmeans.lloyd` once :func:`usable` holds (they do not check their arguments again)
__all__ = ["MAX_DIM", "enabled", "usable", "warm_up"]

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


def _blocks(n: int, entries: int = 0) -> int:
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
    are cut into fewer blocks, :func:`_blocks`). It does not depend on ``n``, so every rank of
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
def _launch(blas: bool = False) -> Iterator[None]:
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


def _array(t: Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy())


#: an empty array of each dtype: the weights of unweighted data (one compiled kernel for both)
_NO_WEIGHTS: dict[torch.dtype, np.ndarray] = {torch.float32: np.empty(0, np.float32),
                                             torch.float64: np.empty(0, np.float64)}


def _weights(w: Tensor | None, X: Tensor) -> np.ndarray:
    """The weights as an array of ``X``'s dtype; empty when unweighted."""
    return _NO_WEIGHTS[X.dtype] if w is None else _array(w.to(X.dtype))


def hard_pass(X: Tensor, C: Tensor, w: Tensor | None, *, labels: Tensor | None,
              objective: bool) -> tuple[Tensor, Tensor, Tensor]:
    """One hard assignment of the rows of ``X`` (n, d) to ``C`` (k, d) (module docstring).

    Writes the nearest centroid of each row into ``labels`` (an (n,) int64 CPU tensor) when
    given, and returns ``N`` (k,) and ``S`` (k, d) in ``X``'s dtype and ``J`` as a float64 0-d
    tensor (0 unless ``objective``). Beyond ``MAX_DIM`` features the scores come from BLAS
    products of a few hundred rows inside the kernel. Call only where :func:`usable` holds
    (with ``scores=True`` for wide data)."""
    Xn = _array(X)
    out = labels.numpy() if labels is not None else np.empty(Xn.shape[0], dtype=np.int64)
    wide = Xn.shape[1] > MAX_DIM
    with _launch(blas=wide):
        N, S, J = (_loops.hard_wide if wide else _loops.hard)(
            Xn, _array(C.to(X.dtype)), _weights(w, X), bool(objective), out,
            _blocks(Xn.shape[0], int(C.shape[0]) * Xn.shape[1]))
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
    Xn = _array(X)
    g = C.shape[0]
    split_pos = np.full(g, -1, dtype=np.int64)
    ns = 0
    if split is not None and split.numel():
        idx = split.cpu().numpy()
        split_pos[idx] = np.arange(idx.size)
        ns = int(idx.size)
    wide = Xn.shape[1] > MAX_DIM
    with _launch(blas=wide):
        N, S, V, acc, A = _loops.group(
            Xn, _array(C.to(X.dtype)), _array(m.to(torch.int64)), float(T), _KINDS[kind],
            _weights(w, X), bool(objective), bool(objective or split is not None), float(hard_tol),
            X.dtype == torch.float32, split_pos, ns,
            np.zeros((0, ns)) if gains_out is None else gains_out.numpy(), wide,
            _blocks(Xn.shape[0], g * Xn.shape[1] + (0 if wide else ns * Xn.shape[1] ** 2)))
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
    Xn = _array(X)
    wide = Xn.shape[1] > MAX_DIM
    with _launch(blas=wide):
        C_out, it, status = _squarem_loops.fixed_point(
            Xn, _array(C.to(X.dtype)), _array(m.to(torch.int64)), float(T), _KINDS[kind],
            _weights(w, X), 1e-7, X.dtype == torch.float32, int(max_iter), float(tol),
            _blocks(Xn.shape[0], int(C.shape[0]) * Xn.shape[1]), wide)
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
    Xn = _array(X)
    wide = Xn.shape[1] > MAX_DIM
    none_i, none_f = np.empty(0, dtype=np.int64), np.empty(0)
    lab0, up0, lo0, moved = (none_i, none_f, none_f, none_i) if warm is None else (
        _array(warm.labels), _array(warm.upper), none_f if wide else _array(warm.lower),
        _array(warm.moved))
    warm_C = np.empty((0, 0), Xn.dtype) if warm is None else _array(warm.continued.to(X.dtype))
    lower_g, xs = np.empty((0, 0), dtype=np.float32), none_f
    if wide and warm is not None:
        assert warm.xs is not None
        lower_g, xs = _array(warm.lower), _array(warm.xs)
    if not wide:
        group_of = none_i
    elif warm is not None:
        assert warm.group_of is not None
        group_of = _array(warm.group_of)
    else:
        group_of = centroid_groups(C, bound_groups(int(X.shape[0]), int(C.shape[0]))).numpy()
    unit = torch.finfo(X.dtype).eps / 2
    with _launch(blas=wide):
        C_out, labels, J, it, status, upper, lower, lower_g, xs = _lloyd_loops.lloyd(
            Xn, _array(C.to(X.dtype)), _weights(w, X), int(max_iter), float(tol),
            _blocks(int(X.shape[0]), int(C.shape[0]) * int(X.shape[1])), wide, float(target),
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


def spread_pass(X: Tensor, C: Tensor, labels: Tensor, w: Tensor | None, *,
                scatter: bool = True) -> tuple[Tensor, Tensor]:
    """What the swap search needs of a clustering (:func:`rbfkmeans.costs.swap_costs`), in one
    sweep over the rows of ``X`` (n, d) labelled ``labels`` (n,) among ``C`` (k, d), float64:
    ``removal[a] = sum_{a_i = a} w_i (d_i^(2) - d_i^(1))`` (k,), with ``d^(1) <= d^(2)`` the two
    smallest squared distances of the row, and the scatter matrices
    ``W_a = sum_{a_i = a} w_i (x_i - c_a)(x_i - c_a)^T`` (k, d, d; (0, d, d) without
    ``scatter``). Needs ``k >= 2``; call only where :func:`usable` holds (with ``gains=k``)."""
    with _launch():
        R, W = _swap_loops.spread(_array(X), _array(C.to(X.dtype)), _array(labels),
                                  _weights(w, X), bool(scatter),
                                  _blocks(int(X.shape[0]), int(C.shape[0]) * (
                                      int(X.shape[1]) ** 2 if scatter else 1)))
    return torch.from_numpy(R), torch.from_numpy(W)


def scatter_pass(X: Tensor, C: Tensor, labels: Tensor, V: Tensor,
                 w: Tensor | None) -> Tensor:
    """``U_a = Sigma_a V_a`` (k, d) float64: the scatter matrix of each cluster (rows of ``X``
    labelled ``labels`` around ``C``) times its row of ``V`` (k, d), in one sweep, no matrix
    formed: the power iterations of :func:`rbfkmeans.costs.swap_costs` on wide data."""
    k, d = int(C.shape[0]), int(X.shape[1])
    with _launch():
        U = _swap_loops.scatter_times(_array(X), _array(C.to(X.dtype)), _array(labels),
                                      _array(V.to(torch.float64)), _weights(w, X),
                                      _blocks(int(X.shape[0]), k * d))
    return torch.from_numpy(U)


def halves_pass(X: Tensor, C: Tensor, labels: Tensor, V: Tensor,
                w: Tensor | None) -> tuple[Tensor, Tensor]:
    """The halves of every cluster cut through ``c_a`` normal to the axis ``V_a`` (k, d): the
    weight ``count`` (2k,) and weighted sum ``total`` (2k, d) of the rows on each side (entry
    ``2a`` the side ``(x - c_a).V_a <= 0``, ``2a + 1`` the other), float64."""
    with _launch():
        count, total = _swap_loops.halves(_array(X), _array(C.to(X.dtype)), _array(labels),
                                          _array(V.to(torch.float64)), _weights(w, X),
                                          _blocks(int(X.shape[0]),
                                                  2 * int(C.shape[0]) * int(X.shape[1])))
    return torch.from_numpy(count), torch.from_numpy(total)


def far_pass(X: Tensor, C: Tensor, labels: Tensor, w: Tensor | None,
             size: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each cluster's farthest row by the gain ``w_i N_a / (N_a - w_i) ||x_i - c_a||^2`` of
    isolating it (``size`` (k,) the clusters' weights ``N_a``): the gains (k,), the first such
    row's index (k; -1 where no gain is positive) and every row's squared distance to its
    centroid (n,), float64 (:func:`rbfkmeans.costs.swap_costs`)."""
    with _launch():
        top, row, dist = _swap_loops.far_rows(_array(X), _array(C.to(X.dtype)), _array(labels),
                                              _weights(w, X), _array(size.to(torch.float64)),
                                              _blocks(int(X.shape[0]), int(C.shape[0])))
    return torch.from_numpy(top), torch.from_numpy(row), torch.from_numpy(dist)


def cells_pass(X: Tensor, C: Tensor, labels: Tensor, far: Tensor,
               w: Tensor | None) -> tuple[Tensor, Tensor]:
    """The weight (k,) and weighted sum (k, d) of each cluster's rows strictly nearer to its row
    ``far[a]`` (k, d) than to ``c_a``, float64 (:func:`rbfkmeans.costs.swap_costs`)."""
    k, d = int(C.shape[0]), int(X.shape[1])
    with _launch():
        count, total = _swap_loops.far_cells(_array(X), _array(C.to(X.dtype)), _array(labels),
                                             _array(far.to(torch.float64)), _weights(w, X),
                                             _blocks(int(X.shape[0]), k * d))
    return torch.from_numpy(count), torch.from_numpy(total)


def _warm_calls(dt: torch.dtype, w: Tensor | None) -> list[tuple[str, Callable[[], object]]]:
    """One call of every kernel on tiny data of dtype ``dt`` with weights ``w`` (None or ones):
    the signatures a fit compiles (narrow and wide rows, cold and warm Lloyd starts)."""
    X = torch.linspace(0.0, 1.0, 12, dtype=dt).view(6, 2)
    wide = torch.linspace(0.0, 1.0, 6 * (MAX_DIM + 1), dtype=dt).view(6, MAX_DIM + 1)
    m, labels = torch.tensor([2, 1]), torch.tensor([0, 0, 0, 1, 1, 1])
    V = torch.ones(2, 2, dtype=torch.float64)
    calls: list[tuple[str, Callable[[], object]]] = []
    for tag, Xd in (("narrow", X), ("wide", wide)):
        C = Xd[:2].clone()
        calls += [
            (f"hard pass ({tag})", partial(hard_pass, Xd, C, w,
                                           labels=torch.empty(6, dtype=torch.long),
                                           objective=True)),
            (f"Lloyd run ({tag})", partial(_warm_lloyd, Xd, C, w)),
            (f"annealing fixed point ({tag})", partial(group_fixed_point, Xd, C, m, 1.0,
                                                       "entmax15", w, 3, 0.0)),
        ]
    calls += [
        ("group pass", lambda: group_pass(X, X[:2].clone(), m, 1.0, "entmax15", w,
                                          objective=True, split=torch.tensor([0]),
                                          hard_tol=1e-7)),
        ("group pass (wide)", lambda: group_pass(
            wide, wide[:2].clone(), m, 1.0, "entmax15", w, objective=True,
            split=torch.tensor([0]), hard_tol=1e-7,
            gains_out=torch.zeros(6, 1, dtype=torch.float64))),
        ("swap costs", lambda: spread_pass(X, X[:2].clone(), labels, w)),
        ("swap scatter", lambda: scatter_pass(wide, wide[:2].clone(), labels,
                                              torch.ones(2, MAX_DIM + 1, dtype=torch.float64),
                                              w)),
        ("swap halves", lambda: halves_pass(X, X[:2].clone(), labels, V, w)),
        ("swap far rows", lambda: far_pass(X, X[:2].clone(), labels, w,
                                           torch.tensor([3.0, 3.0], dtype=torch.float64))),
        ("swap far cells", lambda: cells_pass(X, X[:2].clone(), labels,
                                              X[:2].double() + 1.0, w)),
        ("Hartigan's moves", lambda: hartigan_pass(X, X[:2].double(), m.double(), labels, w,
                                                   torch.tensor([0, 2, 5]))),
        ("Hartigan's moves (wide)", lambda: hartigan_rows(wide, wide[:2].double(), m.double(),
                                                          labels, w, torch.tensor([0, 2, 5]))),
    ]
    return calls


def _warm_lloyd(X: Tensor, C: Tensor, w: Tensor | None) -> None:
    """A Lloyd run from ``C``, then one warm-started from where it ended (the second signature
    a fit's later polish takes)."""
    run = lloyd_run(X, C, w, 3, 0.0)
    if run.finished and run.labels is not None and run.bounds is not None:
        lloyd_run(X, run.C.clone(), w, 3, 0.0,
                  warm=WarmStart(run.labels, run.bounds[0], run.bounds[1],
                                 torch.empty(0, dtype=torch.int64), run.C, *run.bounds[2:]))


def hartigan_pass(X: Tensor, C: Tensor, N: Tensor, labels: Tensor, w: Tensor | None,
                  rows: Tensor) -> tuple[Tensor, ...]:
    """The best single move of the rows ``rows`` (m, int64) of ``X`` (n, d) labelled ``labels``
    among the means ``C`` (k, d, float64) of weights ``N`` (k, float64), one sweep
    (:mod:`rbfkmeans.hartigan`): the gain ``-Delta J`` (m, float64; 0 where no move pays), the
    target cluster (m, int64; -1 there), and for the bounds the squared distances (float64) to
    the own mean, the nearest other cluster and the squared distances to it and to the next
    (``inf`` where there is none). Call only where :func:`usable` holds (few features)."""
    with _launch():
        out = _hartigan_loops.gains(_array(X), _array(C.to(torch.float64)),
                                    _array(N.to(torch.float64)), _array(labels),
                                    _weights(w, X), _array(rows.to(torch.long)))
    return tuple(torch.from_numpy(a) for a in out)


def hartigan_rows(X: Tensor, C: Tensor, N: Tensor, labels: Tensor, w: Tensor | None,
                  rows: Tensor) -> tuple[Tensor, ...]:
    """:func:`hartigan_pass` for the rows ``rows`` (m, int64) of wide ``X``, from BLAS products
    of a few hundred of them at a time (:func:`rbfkmeans._hartigan_loops.gains_wide`): their
    gains and targets, and for the bounds of :mod:`rbfkmeans.hartigan` their squared distances
    (float64) to their own mean, their nearest other cluster and the squared distances to it
    and to the next. Call only where :func:`usable` holds with ``scores=True``."""
    with _launch(blas=True):
        out = _hartigan_loops.gains_wide(_array(X), _array(C.to(torch.float64)),
                                         _array(N.to(torch.float64)), _array(labels),
                                         _weights(w, X), _array(rows.to(torch.long)),
                                         _blocks(int(rows.numel())))
    return tuple(torch.from_numpy(a) for a in out)


def warm_up(progress: Callable[[int, int, str], None] | None = None) -> None:
    """Compile (or load from the on-disk cache) every kernel for float32 and float64 data,
    weighted and not, then write :mod:`rbfkmeans.precompile`'s stamp (later processes in
    ``auto`` mode take the kernels). ``progress(i, n, name)`` is called before each of the
    ``n`` steps. Does nothing without numba or with ``RBFKMEANS_KERNELS=0``. Machine code
    cached for other sources is deleted first (:func:`rbfkmeans.precompile.clear_stale`)."""
    if numba is None or precompile.mode() == "off":
        return
    t0 = time.perf_counter()
    precompile.clear_stale()
    steps = [(f"{name}, {str(dt).removeprefix('torch.')}{', weighted' if w else ''}", call)
             for dt in (torch.float32, torch.float64)
             for w in (False, True)
             for name, call in _warm_calls(dt, torch.ones(6, dtype=dt) if w else None)]
    for i, (name, call) in enumerate(steps, 1):
        if progress is not None:
            progress(i, len(steps), name)
        call()
    precompile.mark_compiled(time.perf_counter() - t0)
