"""Checks on what a user passes in.

Every public entry point raises (never asserts) with a message that names the parameter, the rule
and the value received. Nothing here modifies its input.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real
from typing import Any

import numpy as np
import torch

from .errors import NonFiniteError, value_error


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
        raise value_error(value, f"{name} must be a finite number >= 0; got {T!r}")
    return value


def check_nonnegative(value: Any, name: str) -> float:
    """Return ``value`` as a float if it is a finite real number >= 0 (a tolerance, a noise
    level), else raise ``ValueError`` naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
            or value < 0:
        raise value_error(value, f"{name} must be a finite number >= 0; got {value!r}")
    return float(value)


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a bool if it is one (a NumPy bool included), else raise ``TypeError`` naming
    ``name``: a string such as ``"no"`` would otherwise read as true."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool (True or False); got {type(value).__name__} "
                        f"{value!r}")
    return bool(value)


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


def tensor_of(a: Any) -> torch.Tensor:
    """``torch.as_tensor(a)`` for an array the caller passed: its memory is shared where torch
    can share it and only ever read (a read-only array, such as a memmap, without torch's
    warning), and copied where torch cannot (a view with negative strides, such as ``X[::-1]``
    or ``numpy.flip(X)``)."""
    if isinstance(a, np.ndarray) and any(s < 0 for s in a.strides):
        a = np.ascontiguousarray(a)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(a)


def real_array(value: Any, name: str) -> np.ndarray:
    """``value`` (an array, nested lists, or a tensor, read detached: a gradient it carries is
    not followed) as a NumPy array of real numbers, without copying an array that is one.
    ``ValueError`` naming ``name`` where NumPy cannot read it as one array (ragged lists), where
    it is complex (its imaginary part would be dropped) or a meta tensor (no values)."""
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            raise ValueError(f"{name} must hold values; got a tensor on the meta device")
        value = value.detach().cpu()
        value = value.float() if value.dtype == torch.bfloat16 else value  # no NumPy bfloat16
        value = value.resolve_conj().numpy() if value.is_complex() else value.numpy()
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an array of numbers; got a {type(value).__name__} "
                         f"that is not one array ({' '.join(str(exc).split())})") from None
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} must hold real numbers; got complex entries (dtype "
                         f"{arr.dtype})")
    return arr


def check_tensor(t: Any, name: str) -> torch.Tensor:
    """Raise unless ``t`` is a real (not complex) tensor; no copy, no NaN scan."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.is_complex():
        raise TypeError(f"{name} must be real; got {t.dtype}")
    return t


def check_dense(t: Any, name: str) -> torch.Tensor:
    """Raise ``TypeError`` naming ``name`` and the layout unless ``t`` is a real tensor of the
    dense (strided) layout: the distances, mappings and codebooks take no torch sparse tensors
    (COO, CSR, ...). Sparse rows ``X`` go to :class:`~rbfkmeans.KMeansLayer` or the estimator."""
    if check_tensor(t, name).layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor; got layout {t.layout}")
    return t


def check_matrix(t: Any, name: str, shape: str = "(n, d)") -> torch.Tensor:
    """Raise unless ``t`` is a real 2-D tensor (no copy, no NaN scan); ``shape`` names its
    axes."""
    check_tensor(t, name)
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor {shape}; got shape {tuple(t.shape)}")
    return t


def check_vector(t: Any, name: str, size: int) -> torch.Tensor:
    """Raise unless ``t`` is a real tensor of shape ``(size,)``."""
    check_tensor(t, name)
    if tuple(t.shape) != (size,):
        raise ValueError(f"{name} must have shape ({size},); got {tuple(t.shape)}")
    return t


def check_real(value: Any, name: str, *, minimum: float | None = None,
               positive: bool = False) -> float:
    """Return ``value`` as a float if it is a finite real number (``>= minimum``, ``> 0`` with
    ``positive``), else raise naming ``name`` and the value."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or (minimum is not None and v < minimum) or (positive and v <= 0):
        rule = " > 0" if positive else (f" >= {minimum:g}" if minimum is not None else "")
        raise value_error(v, f"{name} must be a finite number{rule}; got {value!r}")
    return v


#: entries examined at once by the exact scan of :func:`check_finite`
_FINITE_BLOCK = 1 << 20


def check_finite(t: torch.Tensor, name: str) -> torch.Tensor:
    """Raise :class:`~rbfkmeans.errors.NonFiniteError` (a ``ValueError``) if ``t`` holds NaN or
    inf, saying how many and one of them.

    One sum (no temporary the size of ``t``; synchronises on a GPU): NaN and inf propagate into
    it, so a finite sum clears the tensor. Only a non-finite sum (NaN/inf, or finite entries
    whose sum overflows) takes the exact scan, block by block."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return t
    if bool(torch.isfinite(t.sum())):
        return t
    flat = t.reshape(-1)
    count, first = 0, None
    for start in range(0, flat.numel(), _FINITE_BLOCK):
        block = flat[start : start + _FINITE_BLOCK]
        bad = ~torch.isfinite(block)
        n_bad = int(bad.sum())
        if n_bad and first is None:
            first = block[bad][0].item()
        count += n_bad
    if count:
        raise NonFiniteError(f"{name} must be finite; got {count} NaN/inf entries (e.g. {first})")
    return t


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype computations run in: float16/bfloat16 (and integers) are promoted to float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def largest_magnitude(t: Any) -> float:
    """``max |t|`` of a tensor or of sparse rows (their zeros not stored included; 0 when
    empty), by one ``aminmax`` reduction that makes no temporary the size of ``t``."""
    if not t.numel():
        return 0.0
    lo, hi = torch.aminmax(t.detach())
    return max(-float(lo), float(hi))


def check_within_reach(x: float, c: float, d: int, dtype: torch.dtype, *, total: float = 1.0,
                       name: str = "X", far_from: str = "the centroids",
                       exponent: int = 0) -> None:
    """Raise :class:`~rbfkmeans.errors.NonFiniteError` naming ``name`` unless the squared
    distances between rows whose entries are at most ``x`` in magnitude and centroids whose
    entries are at most ``c``, over ``d`` features, and their sum over a total weight ``total``,
    are finite in ``dtype``:
    ``d (x + c)^2 max(total, 1) < max(dtype)`` (``x + c`` bounds every ``|x_i - c_j|`` entry;
    the expansion's terms ``||x||^2``, ``2 x.c`` and ``||c||^2`` are within the same bound).
    ``exponent`` is that of the frame the values are in (:mod:`rbfkmeans.frame`), so that the
    message reports the entries in the caller's units. O(1)."""
    reach = x + c
    if not reach * reach * d * max(total, 1.0) < torch.finfo(dtype).max:
        raise NonFiniteError(
            f"{name} lies too far from {far_from} for {dtype}: its squared distances "
            f"overflow (entries of x - c up to {math.ldexp(reach, -exponent):.3g} over "
            f"{d} features); rescale {name}")
