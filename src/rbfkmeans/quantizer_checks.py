r"""The checks of :class:`~rbfkmeans.VectorQuantizer` on its parameters and inputs.

Each raises ``ValueError`` or ``TypeError`` naming the parameter, the rule and the value
received (or, for the seeding batch, warns), and modifies nothing it is given.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from numbers import Real
from typing import Any

import torch
from sklearn.exceptions import ConvergenceWarning
from torch import Tensor, nn

from ._validation import (
    check_dense,
    check_finite,
    check_matrix,
    check_positive_int,
    check_temperature,
    check_tensor,
    largest_magnitude,
)
from .errors import NonFiniteError, value_error

__all__ = [
    "CODEBOOK_DTYPES",
    "PENDING_KEY",
    "SEED_MAX",
    "SEED_MAX_RBFKMEANS",
    "check_choice",
    "check_codebook_dtype",
    "check_extra_state",
    "check_indices",
    "check_input",
    "check_loaded_state",
    "check_number",
    "check_pending_rows",
    "check_quantizer_temperature",
    "check_seed",
    "check_squares_are_normal",
    "distinct_rows",
    "warn_if_codes_coincide",
]

#: the dtypes a codebook is kept in (a conversion to another one leaves it float32)
CODEBOOK_DTYPES = (torch.float32, torch.float64)
#: the largest seed of ``torch.Generator.manual_seed`` (an unsigned 64-bit integer)
SEED_MAX = 2**64 - 1
#: the largest seed with ``init="rbfkmeans"``: ``RBFKMeans``'s ``random_state`` is numpy's
SEED_MAX_RBFKMEANS = 2**32 - 1


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices``, else raise ``ValueError``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_number(value: Any, name: str, rule: str, ok: Any) -> float:
    """``value`` as a float if it is a finite real number with ``ok(value)`` true, else raise
    (``rule`` says what ``ok`` tests)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or not ok(v):
        raise value_error(v, f"{name} must be {rule}; got {value!r}")
    return v


def check_quantizer_temperature(value: Any) -> float:
    r"""``T`` as a float if it is a finite number ``>= 0`` (a 0-d tensor is read as its value),
    else raise naming ``temperature``.

    ``T`` is a hyper-parameter, set (to anneal it) and never trained: a tensor that requires a
    gradient, an ``nn.Parameter`` above all, raises ``TypeError``. The loss would only push it
    up: ``dF_T/dT = -2 sum_i H(r_i) <= 0`` (the entropy of each row's memberships), and with
    ``update="kmeans"`` the loss does not depend on ``T``."""
    if isinstance(value, Tensor) and (isinstance(value, nn.Parameter) or value.requires_grad):
        shown = f"{value.item()!r}" if value.numel() == 1 else f"of shape {tuple(value.shape)}"
        raise TypeError(f"temperature must be a float, not a tensor that is trained; got "
                        f"{type(value).__name__} {shown} (requires_grad="
                        f"{value.requires_grad}): the temperature is a hyper-parameter, "
                        "set it (e.g. to anneal it) as a float")
    return check_temperature(value, "temperature")


def check_seed(seed: Any, init: str) -> int:
    """``seed`` if it is an integer in ``[0, 2**64 - 1]`` (what ``torch.Generator.manual_seed``
    takes), in ``[0, 2**32 - 1]`` with ``init="rbfkmeans"`` (the ``random_state`` of
    :class:`~rbfkmeans.RBFKMeans`, numpy's range), else raise naming ``seed``."""
    value = check_positive_int(seed, "seed", minimum=0)
    top, bound, why = (SEED_MAX_RBFKMEANS, "2**32 - 1", " with init='rbfkmeans'") \
        if init == "rbfkmeans" else (SEED_MAX, "2**64 - 1", "")
    if value > top:
        raise ValueError(f"seed must be an integer in [0, {bound}]{why}; got {seed!r}")
    return value


#: the keys of a quantizer's extra state (what ``get_extra_state`` returns, and may load)
EXTRA_STATE_KEYS = ("temperature", "generator")
#: the key of the rows awaiting the seeding in the extra state (absent from older checkpoints)
PENDING_KEY = "pending"
#: how the pending rows are named in the messages
_PENDING = "the pending rows in the quantizer's extra state"


def check_extra_state(state: Any, dim: int,
                      n_codes: int) -> tuple[float, Tensor, Tensor | None]:
    """The temperature, the generator state (a CPU ``uint8`` tensor) and the rows awaiting the
    seeding (:func:`check_pending_rows`; None where the state has none, as saved before they
    were kept) of a quantizer's extra state, a dict ``{"temperature": T, "generator":
    torch.Generator().get_state(), "pending": rows}``, each checked; else raise ``TypeError``
    or ``ValueError`` saying what is wrong. The generator state is tried on a generator of its
    own, so nothing is set before all is checked."""
    keys = " and ".join(map(repr, EXTRA_STATE_KEYS))
    if not isinstance(state, Mapping):
        shown = f"of shape {tuple(state.shape)}" if isinstance(state, Tensor) else repr(state)
        raise TypeError(f"the quantizer's extra state must be a dict with keys {keys}; got "
                        f"{type(state).__name__} {shown}"[:300])
    if set(state) - {PENDING_KEY} != set(EXTRA_STATE_KEYS):
        raise ValueError(f"the quantizer's extra state must be a dict with keys {keys}; got "
                         f"the keys {sorted(map(str, state))} ({PENDING_KEY!r}, the rows "
                         "awaiting the seeding, may be added)")
    T = check_quantizer_temperature(state["temperature"])
    g = _check_generator_state(state["generator"])
    rows = check_pending_rows(state[PENDING_KEY], dim, n_codes) if PENDING_KEY in state \
        else None
    return T, g, rows


def _check_generator_state(g: Any) -> Tensor:
    """``g`` detached on the CPU if it is the state of a CPU ``torch.Generator`` (tried on a
    generator of its own), else raise naming the generator of the extra state."""
    if not isinstance(g, Tensor) or g.dtype != torch.uint8:
        raise TypeError("the generator in the quantizer's extra state must be a uint8 tensor "
                        "(torch.Generator.get_state()); got "
                        f"{getattr(g, 'dtype', type(g).__name__)}")
    scratch = torch.Generator()
    try:
        if g.dim() != 1 or g.layout != torch.strided or g.is_meta:
            raise RuntimeError(f"a 1-D dense tensor with values is expected; got shape "
                               f"{tuple(g.shape)}, layout {g.layout}, device {g.device}")
        g = g.detach().cpu()
        scratch.set_state(g)
    except RuntimeError as exc:
        raise ValueError(f"the generator in the quantizer's extra state must be the state of a "
                         f"CPU torch.Generator ({scratch.get_state().numel()} bytes); got "
                         f"{g.numel()} bytes that torch refuses: {exc}") from None
    return g


def check_pending_rows(rows: Any, dim: int, n_codes: int) -> Tensor:
    """A detached copy of ``rows`` if it holds what a quantizer keeps while it waits to seed its
    codebook: a dense float32 or float64 tensor ``(m, dim)`` of ``m < n_codes`` finite rows
    (on any device), else raise ``TypeError`` or ``ValueError`` naming the pending rows of the
    extra state. The tensor given is not modified, nor kept."""
    if not isinstance(rows, Tensor) or rows.dtype not in CODEBOOK_DTYPES:
        raise TypeError(f"{_PENDING} must be a torch.float32 or torch.float64 tensor; got "
                        f"{getattr(rows, 'dtype', type(rows).__name__)}")
    check_dense(rows, _PENDING)
    if rows.dim() != 2 or rows.shape[1] != dim or rows.shape[0] >= n_codes:
        raise ValueError(f"{_PENDING} must be a 2-D tensor (m, {dim}) of m < {n_codes} rows "
                         f"(dim={dim}, n_codes={n_codes}); got shape {tuple(rows.shape)}")
    if rows.is_meta:
        raise ValueError(f"{_PENDING} must hold values; got a tensor on the meta device")
    bad = ~torch.isfinite(rows.detach())
    if bool(bad.any()):
        raise NonFiniteError(f"{_PENDING} must be finite; got {int(bad.sum())} NaN or inf "
                             "entries")
    return rows.detach().clone()


def _check_nothing_waits_once_seeded(initialized: Any, rows: Tensor | None) -> None:
    """Raise ``ValueError`` where a state's ``initialized`` flag is set while rows still wait
    to seed the codebook: the seeding takes them all (the forward never seeds again)."""
    if rows is None or rows.shape[0] == 0 or not isinstance(initialized, Tensor) \
            or initialized.is_meta or initialized.numel() != 1:
        return
    if bool(initialized.detach().reshape(())):
        raise ValueError(f"{_PENDING} must be empty when initialized is True (the codebook is "
                         f"seeded); got {rows.shape[0]} rows")


def check_loaded_state(state_dict: Mapping[str, Any], prefix: str, dtype: torch.dtype,
                       spherical: bool, *, dim: int, n_codes: int) -> None:
    """Raise ``TypeError`` or ``ValueError`` naming the key unless the quantizer's tensors in
    ``state_dict`` (under ``prefix``) hold what the module keeps: a dense real ``codebook``
    finite in the module's ``dtype`` (for cosine, every code non-zero: a direction; its norm is
    free, the forward puts the codes back on the unit sphere), ``counts`` finite and ``>= 0``,
    ``unused_steps`` integers ``>= 0``, ``initialized`` a flag (0 or 1), and the extra state
    (:func:`check_extra_state`; the rows awaiting the seeding ``(m, dim)`` with
    ``m < n_codes``, none where ``initialized`` is set). Entries that are missing, not
    tensors, on the meta device or of another shape are left to torch's own checks. Modifies
    nothing."""
    for name in ("codebook", "counts", "unused_steps", "initialized"):
        t = state_dict.get(prefix + name)
        if not isinstance(t, Tensor):
            continue
        key = f"{prefix}{name} in the state dict"
        check_dense(t, key)
        if t.is_meta or t.numel() == 0:
            continue
        t = t.detach()
        if name == "codebook":
            C = t.to(dtype)
            bad = ~torch.isfinite(C)
            if bool(bad.any()):
                what = "entries beyond its range" if bool(torch.isfinite(t).all()) \
                    else "NaN or inf entries"
                raise NonFiniteError(
                    f"{key} must be finite in {dtype}; got {int(bad.sum())} {what} "
                    "(the quantizer is left as it was)")
            if spherical and C.dim() == 2 and C.shape[1] > 0:
                zero = (C == 0).all(dim=1)  # (k,)
                if bool(zero.any()):
                    raise ValueError(f"{key} must have no zero code with metric='cosine' (a code "
                                     f"is a direction); got code {int(zero.nonzero()[0])} zero "
                                     f"({int(zero.sum())} in all)")
        elif name == "counts":
            bad = ~torch.isfinite(t.double()) | (t < 0)
            if bool(bad.any()):
                error = ValueError if bool(torch.isfinite(t.double()).all()) else NonFiniteError
                raise error(f"{key} must hold finite counts >= 0; got {int(bad.sum())} NaN, inf "
                            f"or negative entries (e.g. {t[bad][0].item()!r})")
        elif name == "unused_steps":
            bad = t < 0
            if t.is_floating_point():  # copied into int64: whole numbers in its range
                bad |= ~torch.isfinite(t) | (t != t.floor()) | (t >= 2.0**63)
            if bool(bad.any()):
                raise ValueError(f"{key} must hold integers >= 0 (the batches each code went "
                                 f"unused); got {int(bad.sum())} bad entries (e.g. "
                                 f"{t[bad][0].item()!r})")
        elif not bool(((t == 0) | (t == 1)).all()):
            raise ValueError(f"{key} must be a flag, True or False; got "
                             f"{t.reshape(-1)[:4].tolist()!r}")
    if prefix + "_extra_state" in state_dict:
        _, _, rows = check_extra_state(state_dict[prefix + "_extra_state"], dim, n_codes)
        _check_nothing_waits_once_seeded(state_dict.get(prefix + "initialized"), rows)


def check_codebook_dtype(codebook: Tensor) -> None:
    """Raise ``TypeError`` unless the codebook is float32 or float64 (a float16 codebook set
    through ``.data`` would round away the k-means steps smaller than its spacing)."""
    if check_tensor(codebook, "codebook").dtype not in CODEBOOK_DTYPES:
        raise TypeError(f"the codebook must be torch.float32 or torch.float64; got "
                        f"{codebook.dtype}: keep the quantizer in float32 (float16 and bfloat16 "
                        "inputs are computed in float32)")


def check_input(z: Any, dim: int, codebook: Tensor) -> None:
    """Raise unless ``z`` is a finite floating-point tensor (..., ``dim``) holding values and the
    ``codebook`` a float32 or float64 tensor holding values (not on the meta device); ``z``
    of a torch sparse layout raises ``TypeError`` naming it."""
    if not isinstance(z, Tensor):
        raise TypeError(f"z must be a torch.Tensor; got {type(z).__name__}")
    check_dense(z, "z")
    dim = check_positive_int(dim, "dim")
    check_codebook_dtype(codebook)
    if z.dim() < 1 or z.shape[-1] != dim:
        raise ValueError(f"z must have shape (..., {dim}) (dim={dim}); got {tuple(z.shape)}")
    if not (z.is_floating_point()):
        raise TypeError(f"z must be a floating-point tensor; got {z.dtype}")
    if "meta" in (z.device.type, codebook.device.type):  # the step reads values
        raise ValueError("z and the codebook must hold values: a VectorQuantizer does not run "
                         f"on the meta device; got z on {z.device}, the codebook on "
                         f"{codebook.device}")
    check_finite(z.detach(), "z")


def check_indices(indices: Any, n_codes: int) -> Tensor:
    """``indices`` as int64 if it is an integer tensor (of any integer dtype, uint8 included:
    code numbers, not a mask) of values in ``[0, n_codes)``, else raise naming ``indices``
    (``TypeError`` for another type or dtype, a bool tensor above all; ``ValueError`` for a
    value out of range). The tensor given is not modified."""
    if not isinstance(indices, Tensor) or indices.is_floating_point() \
            or indices.is_complex() or indices.dtype == torch.bool:
        mask = " (code numbers, not a mask)" if getattr(indices, "dtype", None) == torch.bool \
            else ""
        raise TypeError(f"indices must be an integer torch.Tensor{mask}; got "
                        f"{getattr(indices, 'dtype', type(indices).__name__)}")
    lo, hi = _integer_range(check_dense(indices, "indices"))
    if lo < 0 or hi >= n_codes:
        raise ValueError(f"indices must be in [0, {n_codes}) (n_codes={n_codes}); got values in "
                         f"[{lo}, {hi}]")
    return indices.long()


#: the integer dtypes that torch's ``min`` and ``max`` do not take
_UNSIGNED_WIDE = (torch.uint16, torch.uint32, torch.uint64)


def _integer_range(t: Tensor) -> tuple[int, int]:
    """The smallest and the largest value of the integer tensor ``t`` as Python integers
    (``(0, 0)`` when empty); the unsigned dtypes wider than uint8 are read through a sort."""
    if t.numel() == 0:
        return 0, 0
    if t.dtype in _UNSIGNED_WIDE:
        ordered = t.reshape(-1).sort().values
        return int(ordered[0].item()), int(ordered[-1].item())
    return int(t.min()), int(t.max())


def check_squares_are_normal(X: Tensor) -> None:
    """Raise a ``ValueError`` naming ``z`` where its largest entry is non-zero but its square
    is subnormal in ``X``'s dtype (``|x| < 1.1e-19`` in float32): the squared distances then
    keep few or no bits (at ``1e-40`` all are 0, and every row took code 0), and codes seeded
    from such rows would be no better."""
    largest = largest_magnitude(check_tensor(X, "z"))
    if largest > 0.0 and largest * largest < torch.finfo(X.dtype).tiny:
        raise ValueError(f"z is too small for {X.dtype}: its squared distances underflow "
                         f"(largest |z| {largest:.3g}); rescale z")


def distinct_rows(Y: Tensor) -> Tensor:
    """The distinct rows of ``Y`` (m, d) in the order of their first occurrence (exact equality;
    ``-0.0`` equals ``0.0``)."""
    if check_matrix(Y, "Y", "(m, d)").shape[0] == 0:
        return Y
    _, inverse = torch.unique(Y, dim=0, return_inverse=True)  # (m,) the distinct row of each
    position = torch.arange(Y.shape[0], device=Y.device)  # (m,)
    first = torch.full((int(inverse.max()) + 1,), Y.shape[0], device=Y.device)
    first.scatter_reduce_(0, inverse, position, reduce="amin")  # first occurrence of each
    return Y[first.sort().values]


def warn_if_codes_coincide(C: Tensor, stacklevel: int) -> None:
    """scikit-learn's ``ConvergenceWarning`` where the seeded codebook ``C`` (k, d) has fewer
    distinct codes than ``k``: the seeding batch held fewer distinct rows than codes."""
    k = int(check_matrix(C, "C", "(k, d)").shape[0])
    stacklevel = check_positive_int(stacklevel, "stacklevel")
    distinct = int(distinct_rows(C).shape[0])
    if distinct < k:
        warnings.warn(f"Number of distinct codes ({distinct}) found smaller than n_codes ({k}): "
                      "the seeding batch has fewer distinct rows than codes. Possibly due to "
                      "duplicate points in z; of equal codes only the lowest-indexed is ever "
                      "nearest (the others are revived as dead codes where dead_code_steps is "
                      "set).",
                      ConvergenceWarning, stacklevel=stacklevel + 1)
