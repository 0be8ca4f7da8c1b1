"""The estimator's parameter table and the checks on what ``fit`` receives.

``RBFKMeans`` validates its parameters in ``fit`` from one declarative table, name -> (rule,
check), so that every error names the parameter, the rule and the value received (as
scikit-learn's estimators do). Under ``torch.distributed`` every rank validates its own shard and
the ranks agree on the outcome before any collective runs.
"""

from __future__ import annotations

import functools
import math
import numbers
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse
import torch

from ._validation import largest_magnitude, real_array, tensor_of
from .assignments import ASSIGNMENTS
from .comm import Comm, raise_if_rejected
from .errors import NonFiniteError
from .metrics import METRICS

__all__ = [
    "PARAMETERS",
    "SCHEDULES",
    "Shards",
    "agree_on_parameters",
    "agree_on_shards",
    "as_float32_if_half",
    "check_fits_float32",
    "check_sample_weight",
    "device_available",
    "differing_parameters",
    "is_int",
    "is_real",
    "parameters_key",
    "raise_on_every_rank",
    "restored_on_failure",
    "torch_dtype",
]


# ---------------------------------------------------------------------------------------------
# the parameter table: name -> (rule, check)
# ---------------------------------------------------------------------------------------------


#: the values of ``schedule``: the two annealing ladders, and k-means++ restarts without one
SCHEDULES = ("splits", "geometric", "k-means++")


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
    "schedule": ("'splits', 'geometric' or 'k-means++'",
                 lambda v: isinstance(v, str) and v in SCHEDULES),
    "subsample": ("None or an integer >= 1", lambda v: v is None or (is_int(v) and v >= 1)),
    "fit_rows": ("None or an integer >= 1", lambda v: v is None or (is_int(v) and v >= 1)),
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
        "None, an integer in [0, 2**32 - 1] or a numpy RandomState",
        lambda v: v is None or (is_int(v) and 0 <= v < 2**32)
        or isinstance(v, np.random.RandomState),
    ),
    "device": ("None, or a torch device this machine has ('cpu', 'cuda', 'cuda:0', ...; not "
               "'meta', which holds no values to fit)",
               lambda v: v is None or device_available(v)),
    "dtype": (
        "None, 'float32', 'float64' or the torch/numpy float32/float64 dtype",
        lambda v: v is None or torch_dtype(v) is not None,
    ),
    "verbose": (
        "a bool or an integer >= 0", lambda v: isinstance(v, bool) or (is_int(v) and v >= 0)
    ),
}


def device_available(v: Any) -> bool:
    """Whether ``v`` names a torch device (a string or ``torch.device``) that this process can
    fit on: ``"cuda"`` only with CUDA available, ``"mps"`` only with MPS, never ``"meta"``
    (its tensors hold shapes, no values)."""
    if not isinstance(v, str | torch.device):
        return False
    try:
        dev = torch.device(v)
    except (RuntimeError, ValueError):
        return False
    if dev.type == "cuda":
        return torch.cuda.is_available() and (dev.index is None
                                              or dev.index < torch.cuda.device_count())
    if dev.type == "mps":
        return bool(torch.backends.mps.is_available())
    return dev.type != "meta" and (dev.type == "cpu" or hasattr(torch, dev.type))


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
    """``X`` as an array the estimator reads: a tensor as a NumPy array (float16 and bfloat16
    as float32), a float16 array as float32, anything else as it is. A torch sparse tensor
    raises ``TypeError`` naming ``X`` (scipy's sparse matrices are the estimator's sparse
    input)."""
    if isinstance(X, torch.Tensor):
        if X.layout != torch.strided:
            raise TypeError(f"X must be a dense tensor, an array or a scipy.sparse matrix; got a "
                            f"torch tensor of layout {X.layout} (for sparse rows pass a "
                            "scipy.sparse CSR matrix; KMeansLayer takes torch sparse tensors)")
        X = X.detach().cpu()
        if X.dtype in (torch.float16, torch.bfloat16):
            X = X.float()
        return X.numpy()
    if isinstance(X, np.ndarray) and X.dtype == np.float16:
        return X.astype(np.float32)
    return X


class Shards(NamedTuple):
    """What the ranks of a fit agreed on (:func:`agree_on_shards`): the rows in all, whether
    any rank passed sample weights (the others then weigh their rows 1), and whether any shard
    is float64 (then every rank computes in float64, as one process would on the
    concatenation)."""

    total: int
    weighted: bool
    float64: bool


def parameters_key(params: dict[str, Any]) -> int:
    """A number that equal parameters give on every process, to compare the ranks' settings
    (each value by :func:`_value_key`)."""
    return zlib.crc32(";".join(f"{name}={_value_key(params[name])}"
                               for name in sorted(params)).encode())


def _value_key(value: Any) -> str:
    """Text that equal values give on every process: numbers by their value (``3`` and
    ``np.int64(3)`` alike), arrays, tensors and lists of numbers by the bytes of their float64
    values and their shape, functions by their qualified name, code and the values they close
    over, ``functools.partial`` by its function and arguments, anything else by ``repr``."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, list | tuple | np.ndarray) and not isinstance(value, str):
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return repr(value)
        return f"array{arr.shape}:{zlib.crc32(np.ascontiguousarray(arr).tobytes())}"
    if isinstance(value, functools.partial):
        return (f"partial({_value_key(value.func)}, {[_value_key(a) for a in value.args]}, "
                f"{ {k: _value_key(v) for k, v in sorted(value.keywords.items())} })")
    if callable(value):
        name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        code = getattr(value, "__code__", None)
        if code is None:
            return name
        cells = [_value_key(c.cell_contents) for c in (getattr(value, "__closure__", None) or ())]
        return f"{name}:{_code_key(code)}:{cells}"
    return repr(value)


def _code_key(code: Any) -> int:
    """A function's code: its bytecode and constants (nested code by its own key; a code
    object's ``repr`` holds a memory address)."""
    consts = [_code_key(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return zlib.crc32(code.co_code + repr(consts).encode())


def differing_parameters(comm: Comm, params: dict[str, Any]) -> list[str]:
    """The names of the parameters whose values (:func:`_value_key`) differ between the ranks;
    a collective every rank calls with the same names."""
    names = sorted(params)
    keys = torch.tensor([[float(zlib.crc32(_value_key(params[n]).encode())) for n in names]],
                        dtype=torch.float64)  # (1, p): crc32 < 2^32 is exact in float64
    table = comm.all_gather(keys)  # (ranks, p)
    return [n for j, n in enumerate(names) if len(set(table[:, j].tolist())) > 1]


def agree_on_parameters(comm: Comm, params: dict[str, Any], what: str) -> None:
    """Raise the same ``ValueError`` on every rank where ``params`` differ between them, naming
    the parameters (``what``: whose, e.g. ``"fit_batches'"``); nothing in one process."""
    if not comm.active:
        return
    differ = differing_parameters(comm, params)
    if differ:
        raise ValueError(f"{what} parameters must be the same on every rank; "
                         f"{', '.join(differ)} differ{'s' if len(differ) == 1 else ''} "
                         f"(here: {', '.join(f'{n}={params[n]!r}' for n in differ)})")


def agree_on_shards(comm: Comm, error: Exception | None, X: Any, *, weighted: bool = False,
                    float64: bool = False, key: int = 0, weight: float = 0.0,
                    params: dict[str, Any] | None = None) -> Shards:
    """What every rank needs to know of the others' shards, after each validated its own.

    Under ``torch.distributed`` a shard rejected on one rank (NaN, wrong shape, sparse rows...)
    raises on every rank instead of leaving the others waiting in a collective; so do differing
    feature counts and differing parameters (``key``: :func:`parameters_key`), and sample
    weights that are all zero on every rank (a shard may hold no rows, or weigh nothing, when
    the others do). ``weighted``, ``float64`` and ``weight`` are this rank's: whether it has
    sample weights, a float64 shard, and its rows' total weight; ``params`` the parameters
    ``key`` was taken of (the error then names those that differ).
    """
    n, d = (0, 0) if error is not None else (int(X.shape[0]), int(X.shape[1]))
    if not comm.active:
        if error is not None:
            raise error
        return Shards(n, weighted, float64)
    table = comm.all_gather(torch.tensor(
        [[float(error is not None), n, d, float(weighted), float(float64), key, weight]],
        dtype=torch.float64))  # (ranks, 7); the key (< 2^32) is exact in float64
    raise_if_rejected(table[:, 0].tolist(), error, "X was", "; no rank fits")
    widths = [int(v) for v in table[:, 2].tolist()]
    if len(set(widths)) > 1:
        raise ValueError(
            f"X must have the same number of features on every rank; got {widths} (by rank)"
        )
    if len(set(table[:, 5].tolist())) > 1:
        if params is not None:
            agree_on_parameters(comm, params, "the estimator's")
        raise ValueError("the estimator's parameters must be the same on every rank; they "
                         "differ (compare get_params() on each rank)")
    if bool(table[:, 3].any()) and not float(table[:, 6].sum()) > 0:
        raise ValueError("sample_weight must contain at least one non-zero weight over all "
                         "ranks; got all zero")
    return Shards(int(table[:, 1].sum()), bool(table[:, 3].any()), bool(table[:, 4].any()))


def raise_on_every_rank(comm: Comm, error: Exception | None, what: str) -> None:
    """Under ``torch.distributed``, ``error`` (a rank's rejection of its own arguments, or None)
    raised on its rank and a ``ValueError`` naming the rank on every other (``what``, e.g.
    ``"fit_batches' arguments were"``), so that none waits in a collective for a rank that
    stopped; in one process ``error`` itself, if any."""
    if not comm.active:
        if error is not None:
            raise error
        return
    flags = comm.all_gather(torch.tensor([[float(error is not None)]], dtype=torch.float64))
    raise_if_rejected(flags[:, 0].tolist(), error, what, "; no rank fits")


def check_fits_float32(X: Any) -> None:
    """Raise ``ValueError`` naming ``X`` unless float64 data keeps its values in float32 (the
    ``dtype='float32'`` of a fit): its largest ``|x|`` at most float32's largest number, and,
    unless every entry is 0, at least float32's smallest normal one (below, every entry would
    become 0 or lose its bits; the fit's frame rescales only after the conversion)."""
    values = X.data if scipy.sparse.issparse(X) else X  # sparse: the stored entries
    top = largest_magnitude(tensor_of(values)) if values.size else 0.0
    info = np.finfo(np.float32)
    if top > float(info.max) or 0.0 < top < float(info.tiny):
        raise ValueError(f"X does not fit dtype='float32': its largest |x| is {top:.3g}, float32 "
                         f"holds {float(info.tiny):.3g} to {float(info.max):.3g}; rescale X or "
                         "use dtype='float64'")


def check_sample_weight(sample_weight: Any, n: int, dtype: Any = np.float64, *,
                        all_zero: bool = False) -> np.ndarray:
    """``sample_weight`` as an array (n,) of ``dtype``: a scalar is every row's weight; each entry
    must be a finite real number ``>= 0``, and one of them positive unless ``all_zero`` (a
    shard of a distributed fit, whose total is checked over the ranks); else raise naming
    ``sample_weight``, the rule, the value and its index. The caller's array is never returned
    (a copy)."""
    if isinstance(sample_weight, torch.Tensor) and not sample_weight.is_complex():
        sample_weight = real_array(sample_weight, "sample_weight")  # detached (no gradient)
    try:
        sw = np.asarray(sample_weight)
    except (ValueError, TypeError) as exc:  # ragged lists
        raise ValueError(f"sample_weight must be a scalar or an array of numbers; got a "
                         f"{type(sample_weight).__name__} that is not one array "
                         f"({' '.join(str(exc).split())})") from None
    if sw.dtype == np.bool_ or not (np.issubdtype(sw.dtype, np.integer)
                                     or np.issubdtype(sw.dtype, np.floating)):
        raise TypeError(f"sample_weight must be real numbers; got {sw.dtype} "
                        f"{sample_weight!r}"[:200])
    if sw.ndim == 0:
        sw = np.full(n, sw.item())
    if sw.shape != (n,):
        raise ValueError(f"sample_weight must be a scalar or have shape ({n},) to match X; got "
                         f"shape {sw.shape}")
    values = sw.astype(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise NonFiniteError(f"sample_weight must be finite; got {sw[i].item()!r} at index {i}")
    if (values < 0).any():
        i = int(np.flatnonzero(values < 0)[0])
        raise ValueError(f"sample_weight must be >= 0; got {sw[i].item()!r} at index {i}")
    if n and not all_zero and not values.any():
        raise ValueError("sample_weight must contain at least one non-zero weight; got all zero")
    with np.errstate(over="ignore"):
        out = np.array(values, dtype=dtype)
        total = float(values.sum())
    if not np.isfinite(out).all():  # finite in float64, beyond the compute dtype (float32)
        i = int(np.flatnonzero(~np.isfinite(out))[0])
        raise NonFiniteError(f"sample_weight must be finite in {np.dtype(dtype)} (the dtype the "
                             f"fit computes in); got {sw[i].item()!r} at index {i}")
    most = float(np.finfo(out.dtype).max)
    if not total <= most:  # the fit's weighted sums are formed in the compute dtype
        i = int(values.argmax())
        raise NonFiniteError(f"sample_weight must have a sum finite in {out.dtype} (the dtype the "
                             f"fit computes in, up to {most:.3g}); got a sum of {total:.3g} (the "
                             f"largest weight {sw[i].item()!r} at index {i}, over {n} rows); "
                             "rescale sample_weight (a common factor changes no cluster)")
    tiny = float(np.finfo(out.dtype).tiny)
    if n and float(values.max()) > 0.0 and float(out.max()) < tiny:  # every weight subnormal
        i = int(values.argmax())  # (or 0) in the compute dtype: sums and means lose bits
        raise ValueError(f"sample_weight must have a largest weight of at least {tiny:.3g} (the "
                         f"smallest normal number of {out.dtype}, the dtype the fit computes in); "
                         f"got {sw[i].item()!r} at index {i}; rescale sample_weight (a common "
                         "factor changes no cluster)")
    return out


@contextmanager
def restored_on_failure(est: Any) -> Iterator[None]:
    """Around a call that changes an estimator (``fit``, ``partial_fit``, ``fit_batches``): if
    it raises anything (bad input, ``KeyboardInterrupt``), every attribute is put back as it
    was before the call, so a fitted model stays usable exactly as it was. The attributes are
    replaced, never modified in place, by those calls, so a shallow snapshot suffices."""
    state = dict(est.__dict__)
    try:
        yield
    except BaseException:
        est.__dict__.clear()
        est.__dict__.update(state)
        raise
