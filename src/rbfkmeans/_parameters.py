"""The estimator's parameter table and the checks on what ``fit`` receives.

``RBFKMeans`` validates its parameters in ``fit`` from one declarative table, name -> (rule,
check), so that every error names the parameter, the rule and the value received (as
scikit-learn's estimators do). Under ``torch.distributed`` every rank validates its own shard and
the ranks agree on the outcome before any collective runs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .assignments import ASSIGNMENTS
from .comm import Comm
from .metrics import METRICS

__all__ = [
    "PARAMETERS", "agree_on_shards", "as_float32_if_half", "is_int", "is_real", "torch_dtype",
]


# ---------------------------------------------------------------------------------------------
# the parameter table: name -> (rule, check)
# ---------------------------------------------------------------------------------------------


def is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


PARAMETERS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "n_clusters": ("an integer >= 1", lambda v: is_int(v) and v >= 1),
    "assignment": (
        "one of " + ", ".join(repr(a) for a in ASSIGNMENTS),
        lambda v: isinstance(v, str) and v in ASSIGNMENTS,
    ),
    "metric": (
        "one of " + ", ".join(repr(m) for m in METRICS),
        lambda v: isinstance(v, str) and v in METRICS,
    ),
    "init": (
        "'auto', 'mean', 'k-means++', 'random', an array (n_clusters, n_features) or a callable",
        lambda v: callable(v)
        or hasattr(v, "__array__")
        or isinstance(v, list | tuple)  # array-like, as scikit-learn
        or (isinstance(v, str) and v in ("auto", "mean", "k-means++", "random")),
    ),
    "n_init": ("'auto' or an integer >= 1", lambda v: v == "auto" or (is_int(v) and v >= 1)),
    "max_iter": ("an integer >= 1", lambda v: is_int(v) and v >= 1),
    "tol": ("a finite number >= 0", lambda v: is_real(v) and v >= 0),
    "T_start": ("None or a finite number > 0", lambda v: v is None or (is_real(v) and v > 0)),
    "T_end": ("None or a finite number > 0", lambda v: v is None or (is_real(v) and v > 0)),
    "schedule": ("'splits' or 'geometric'", lambda v: v in ("splits", "geometric")),
    "subsample": ("None or an integer >= 1", lambda v: v is None or (is_int(v) and v >= 1)),
    "cooling": ("None or a number in (0, 1)", lambda v: v is None or (is_real(v) and 0 < v < 1)),
    "max_iter_per_temperature": ("None or an integer >= 1",
                                 lambda v: v is None or (is_int(v) and v >= 1)),
    "stop_gap": ("a finite number >= 0", lambda v: is_real(v) and v >= 0),
    "temperature": (
        "None or a finite number >= 0", lambda v: v is None or (is_real(v) and v >= 0)
    ),
    "perturbation": ("a finite number >= 0", lambda v: is_real(v) and v >= 0),
    "max_swaps": ("an integer >= 0", lambda v: is_int(v) and v >= 0),
    "solver": ("'lloyd' or 'gradient'", lambda v: v in ("lloyd", "gradient")),
    "optimizer": ("None or a callable(params) -> torch.optim.Optimizer",
                  lambda v: v is None or callable(v)),
    "chunk_size": ("None or an integer >= 1", lambda v: v is None or (is_int(v) and v >= 1)),
    "random_state": (
        "None, an integer or a numpy RandomState",
        lambda v: v is None or is_int(v) or isinstance(v, np.random.RandomState),
    ),
    "device": ("None, a string or a torch.device",
               lambda v: v is None or isinstance(v, str | torch.device)),
    "dtype": (
        "None, 'float32', 'float64' or the torch/numpy float32/float64 dtype",
        lambda v: v is None or torch_dtype(v) is not None,
    ),
    "verbose": (
        "a bool or an integer >= 0", lambda v: isinstance(v, bool) or (is_int(v) and v >= 0)
    ),
}


def torch_dtype(v: Any) -> torch.dtype | None:
    table = {
        "float32": torch.float32, "float64": torch.float64,
        torch.float32: torch.float32, torch.float64: torch.float64,
    }
    if v in table:
        return table[v]
    try:
        name = np.dtype(v).name
    except TypeError:
        return None
    return table.get(name)


def as_float32_if_half(X: Any) -> Any:
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu()
        if X.dtype in (torch.float16, torch.bfloat16):
            X = X.float()
        return X.numpy()
    if isinstance(X, np.ndarray) and X.dtype == np.float16:
        return X.astype(np.float32)
    return X


def agree_on_shards(comm: Comm, error: Exception | None, X: Any) -> int:
    """Total number of rows over ranks, after every rank validated its shard.

    Under ``torch.distributed`` a shard rejected on one rank (NaN, wrong shape...) raises on every
    rank instead of leaving the others waiting in a collective; so do differing feature counts.
    """
    n, d = (0, 0) if error is not None else (int(X.shape[0]), int(X.shape[1]))
    if not comm.active:
        if error is not None:
            raise error
        return n
    table = comm.all_gather(torch.tensor([[float(error is not None), n, d]],
                                         dtype=torch.float64))  # (ranks, 3)
    if error is not None:
        raise error
    failed = [r for r in range(comm.world_size) if table[r, 0] > 0]
    if failed:
        raise ValueError(f"X was rejected on rank(s) {failed} (see the error there); no rank fits")
    widths = [int(v) for v in table[:, 2].tolist()]
    if len(set(widths)) > 1:
        raise ValueError(
            f"X must have the same number of features on every rank; got {widths} (by rank)"
        )
    return int(table[:, 1].sum())
