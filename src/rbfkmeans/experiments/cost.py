r"""Claim 7: cost of the mappings per sample (one row of ``k`` scores) against ``k``.

Rows of float32 scores ``z`` (``rows x k`` about ``cost_entries`` entries per call), two regimes:
``soft`` (``z ~ N(0, 1)``: many entries in the support) and ``cold`` (``z ~ 100 N(0, 1)``: as at
the temperatures where k-means lives, nearly every entmax/sparsemax row is one-hot). Timed: the
library's softmax (also with subnormals flushed to zero: at cold scores most ``exp`` results are
subnormal, which the CPU computes slowly), entmax15, sparsemax and hard argmax, and the
``entmax`` package's
``entmax15`` when it is installed (a test-only reference). Median of ``cost_repeats`` calls,
single thread. Sorting-based entmax is ``O(k log k)`` per row; softmax and argmax are ``O(k)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..mappings import entmax15, hardmax, softmax, sparsemax
from ._common import Context

__all__ = ["cost"]


def _functions() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    fns: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "softmax": lambda z: softmax(z, dim=-1),
        "entmax15": lambda z: entmax15(z, dim=-1),
        "sparsemax": lambda z: sparsemax(z, dim=-1),
        "hard": lambda z: hardmax(z, dim=-1),
        "softmax_flush_denormal": _flushed(lambda z: softmax(z, dim=-1)),
    }
    try:
        from entmax import entmax15 as ref_entmax15  # test/bench extra, optional here
    except ImportError:  # pragma: no cover - depends on the environment
        return fns
    fns["entmax_package_entmax15"] = lambda z: ref_entmax15(z, dim=-1)
    return fns


def _flushed(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn`` run with subnormal floats flushed to zero (``torch.set_flush_denormal``)."""

    def run(z: torch.Tensor) -> torch.Tensor:
        torch.set_flush_denormal(True)
        try:
            return fn(z)
        finally:
            torch.set_flush_denormal(False)

    return run


def _time(fn: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor, repeats: int) -> float:
    fn(z)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(z)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _slope(ks: list[int], t: list[float], k_min: int = 64) -> float | None:
    sel = [(k, v) for k, v in zip(ks, t, strict=True) if k >= k_min]
    if len(sel) < 2:
        return None
    lk, lt = np.log([k for k, _ in sel]), np.log([v for _, v in sel])
    return float(np.polyfit(lk, lt, 1)[0])


def cost(ctx: Context) -> dict[str, Any]:
    cfg = ctx.config
    gen = torch.Generator().manual_seed(cfg.seed)
    fns = _functions()
    ks = list(cfg.cost_ks)
    out: dict[str, Any] = {"k": ks, "dtype": "float32", "threads": torch.get_num_threads(),
                           "entries_per_call": cfg.cost_entries, "repeats": cfg.cost_repeats}
    for regime, scale in (("soft", 1.0), ("cold", 100.0)):
        out[regime] = {name: [] for name in fns}
        for k in ks:
            ctx.tick(f"cost: {regime}, k={k}")
            rows = max(16, cfg.cost_entries // k)
            z = scale * torch.randn(rows, k, generator=gen)  # (rows, k) float32
            for name, fn in fns.items():
                out[regime][name].append(_time(fn, z, cfg.cost_repeats) / rows)
        out[regime + "_slope_k_ge_64"] = {name: _slope(ks, v) for name, v in out[regime].items()}
    return out
