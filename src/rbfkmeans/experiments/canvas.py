"""The shared canvas of the reproduction's figures (:mod:`.plots`): colours and labels per
mapping, the floor for gaps at rounding level, and the helpers that make, fill and save a
figure (matplotlib's object API on an Agg canvas: no global state, no display).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

__all__ = ["COLORS", "FLOOR", "LABELS"]

COLORS = {"softmax": "tab:blue", "entmax15": "tab:orange", "sparsemax": "tab:green",
          "softmax_naive": "tab:red", "softmax_stable": "tab:blue", "hard": "tab:gray",
          "entmax_package_entmax15": "tab:purple", "softmax_flush_denormal": "tab:cyan"}
LABELS = {"softmax": "softmax", "entmax15": "entmax-1.5", "sparsemax": "sparsemax",
          "softmax_naive": "naive softmax", "softmax_stable": "stable softmax",
          "hard": "hard argmax", "entmax_package_entmax15": "entmax package (entmax15)",
          "softmax_flush_denormal": "softmax, subnormals flushed"}
FLOOR = 1e-16  # gaps at or below rounding are drawn here


def _arr(values: Sequence[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _figure(rows: int, cols: int, w: float = 5.0, h: float = 3.8) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(w * cols, h * rows), layout="constrained")
    axes = np.atleast_2d(np.asarray(fig.subplots(rows, cols, squeeze=False)))
    return fig, axes


def _save(fig: Figure, out: Path, name: str) -> str:
    fig.savefig(out / name, dpi=110)
    return name


def _datasets(res: dict[str, Any]) -> list[str]:
    return list(res["datasets"])


def _grid(n: int) -> tuple[int, int]:
    cols = 2 if n > 1 else 1
    return math.ceil(n / cols), cols


def _arr_2d(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=float)
