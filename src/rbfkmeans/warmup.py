"""Compile every CPU kernel now: one call of each on tiny data, for every signature a fit takes.

:func:`warm_up` runs each kernel of :mod:`rbfkmeans.kernels` and :mod:`rbfkmeans.search_kernels`
once for float32 and float64 rows, weighted and not, narrow and wide, with cold and warm Lloyd
starts, so that numba compiles them (or loads them from its on-disk cache), then writes
:mod:`rbfkmeans.precompile`'s stamp: later processes in ``auto`` mode take the kernels.
``rbfkmeans kernels`` calls it with progress; the test suite and the benchmarks call it before
anything is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from . import kernels, precompile, search_kernels
from .kernels import MAX_DIM

__all__ = ["warm_up"]


def _warm_calls(dt: torch.dtype, w: Tensor | None) -> list[tuple[str, Callable[[], object]]]:
    """One call of every kernel on tiny data of dtype ``dt`` with weights ``w`` (None or ones):
    the signatures a fit compiles (narrow and wide rows, cold and warm Lloyd starts)."""
    X = torch.linspace(0.0, 1.0, 12, dtype=dt).view(6, 2)
    wide = torch.linspace(0.0, 1.0, 6 * (MAX_DIM + 1), dtype=dt).view(6, MAX_DIM + 1)
    m, labels = torch.tensor([2, 1]), torch.tensor([0, 0, 0, 1, 1, 1])
    V = torch.ones(2, 2, dtype=torch.float64)
    rows = torch.tensor([0, 2, 5])
    calls: list[tuple[str, Callable[[], object]]] = []
    for tag, Xd in (("narrow", X), ("wide", wide)):
        C = Xd[:2].clone()
        calls += [
            (f"hard pass ({tag})", partial(kernels.hard_pass, Xd, C, w,
                                           labels=torch.empty(6, dtype=torch.long),
                                           objective=True)),
            (f"Lloyd run ({tag})", partial(_warm_lloyd, Xd, C, w)),
            (f"annealing fixed point ({tag})", partial(kernels.group_fixed_point, Xd, C, m, 1.0,
                                                       "entmax15", w, 3, 0.0)),
        ]
    calls += [
        ("group pass", lambda: kernels.group_pass(
            X, X[:2].clone(), m, 1.0, "entmax15", w, objective=True, split=torch.tensor([0]),
            hard_tol=1e-7)),
        ("group pass (wide)", lambda: kernels.group_pass(
            wide, wide[:2].clone(), m, 1.0, "entmax15", w, objective=True,
            split=torch.tensor([0]), hard_tol=1e-7,
            gains_out=torch.zeros(6, 1, dtype=torch.float64))),
        ("swap costs", lambda: search_kernels.spread_pass(X, X[:2].clone(), labels, w)),
        ("swap scatter", lambda: search_kernels.scatter_pass(
            wide, wide[:2].clone(), labels, torch.ones(2, MAX_DIM + 1, dtype=torch.float64), w)),
        ("swap halves", lambda: search_kernels.halves_pass(X, X[:2].clone(), labels, V, w)),
        ("swap far rows", lambda: search_kernels.far_pass(
            X, X[:2].clone(), labels, w, torch.tensor([3.0, 3.0], dtype=torch.float64))),
        ("swap far cells", lambda: search_kernels.cells_pass(
            X, X[:2].clone(), labels, X[:2].double() + 1.0, w)),
        ("Hartigan's moves", lambda: search_kernels.hartigan_pass(
            X, X[:2].double(), m.double(), labels, w, rows)),
        ("Hartigan's moves (wide)", lambda: search_kernels.hartigan_rows(
            wide, wide[:2].double(), m.double(), labels, w, rows)),
    ]
    return calls


def _warm_lloyd(X: Tensor, C: Tensor, w: Tensor | None) -> None:
    """A Lloyd run from ``C``, then one warm-started from where it ended (the second signature
    a fit's later polish takes)."""
    run = kernels.lloyd_run(X, C, w, 3, 0.0)
    if run.finished and run.labels is not None and run.bounds is not None:
        warm = kernels.WarmStart(run.labels, run.bounds[0], run.bounds[1],
                                 torch.empty(0, dtype=torch.int64), run.C, *run.bounds[2:])
        kernels.lloyd_run(X, run.C.clone(), w, 3, 0.0, warm=warm)


def warm_up(progress: Callable[[int, int, str], None] | None = None) -> None:
    """Compile (or load from the on-disk cache) every kernel for float32 and float64 data,
    weighted and not, then write :mod:`rbfkmeans.precompile`'s stamp (later processes in
    ``auto`` mode take the kernels). ``progress(i, n, name)`` is called before each of the
    ``n`` steps. Does nothing without numba or with ``RBFKMEANS_KERNELS=0``. Machine code
    cached for other sources is deleted first (:func:`rbfkmeans.precompile.clear_stale`).
    ``progress`` must be None or callable (else ``TypeError``, before anything is done)."""
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable progress(i, n, name); got "
                        f"{type(progress).__name__} {progress!r:.80}")
    if kernels.numba is None or precompile.mode() == "off":
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
