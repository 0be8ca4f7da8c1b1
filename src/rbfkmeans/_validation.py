"""Checks on what a user passes in.

Every public entry point raises (never asserts) with a message that names the parameter, the rule
and the value received. Nothing here modifies its input.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import torch


def check_temperature(T: Any, name: str = "temperature") -> float:
    """Return ``T`` as a float if it is a finite number >= 0, else raise."""
    if isinstance(T, torch.Tensor):
        if T.numel() != 1:
            raise ValueError(f"{name} must be a scalar; got a tensor of shape {tuple(T.shape)}")
        T = T.item()
    if isinstance(T, bool) or not isinstance(T, Real):
        raise TypeError(f"{name} must be a real number; got {type(T).__name__} {T!r}")
    value = float(T)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {T!r}")
    return value


def check_nonnegative(value: Any, name: str) -> float:
    """Return ``value`` as a float if it is a finite real number >= 0 (a tolerance, a noise
    level), else raise ``ValueError`` naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0; got {value!r}")
    return float(value)


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum``, else raise."""
    if isinstance(value, bool) or not isinstance(value, int | torch.SymInt):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(
                f"{name} must be an integer; got {type(value).__name__} {value!r}"
            ) from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def check_seeds(seeds: Any, name: str = "seeds") -> list[int]:
    """The seeds an experiment runs: an integer ``N >= 1`` names ``0 .. N-1``, a non-empty
    sequence of integers ``>= 0`` names its own; else raise naming ``name`` and the value."""
    if isinstance(seeds, bool | str | bytes):
        raise TypeError(f"{name} must be an integer or a list of integers; got {seeds!r}")
    try:
        return list(range(check_positive_int(seeds, name)))
    except TypeError:
        pass
    try:
        values = list(seeds)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer or a list of integers; got {type(seeds).__name__} {seeds!r}"
        ) from None
    if not values:
        raise ValueError(f"{name} must name at least one seed; got an empty list")
    return [check_positive_int(v, f"{name}[{i}]", minimum=0) for i, v in enumerate(values)]


def check_matrix(t: Any, name: str, shape: str = "(n, d)") -> torch.Tensor:
    """Raise unless ``t`` is a 2-D tensor (no copy, no NaN scan); ``shape`` names its axes."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor {shape}; got shape {tuple(t.shape)}")
    return t


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise ``ValueError`` if ``t`` holds NaN or inf (one reduction; synchronises on a GPU)."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        count = int(bad.sum())
        first = t[bad].flatten()[0].item()
        raise ValueError(f"{name} must be finite; got {count} NaN/inf entries (e.g. {first})")
    return t


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype computations run in: float16/bfloat16 (and integers) are promoted to float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32
