"""Shared pieces of the reproduction: the run configuration, the per-dataset context (data,
the Lloyd fixed point ``C*``, its margin ``g_min``), fits, matching and JSON hygiene."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from .._validation import check_finite, check_matrix
from ..distances import sq_distances
from ..errors import NonFiniteError, value_error
from ..lloyd import lloyd
from ..passes import Data
from ..seeding import kmeans_plusplus
from ..spread import covariance_eigmax
from .datasets import DATASETS, Dataset, make_dataset

__all__ = [
    "Config",
    "Context",
    "DatasetContext",
    "Tick",
    "build_context",
    "fit_exponential",
    "fit_power",
    "margins",
    "match_max_error",
    "sanitize",
]

#: progress callback: a short description of what is running now
Tick = Callable[[str], None]


def _noop(_: str) -> None:
    return None


@dataclass(frozen=True)
class Config:
    """Sizes of one reproduction run (``quick()`` for the tests, ``default()`` for the report)."""

    quick: bool
    seed: int = 0
    n: int = 1000  # points per dataset
    datasets: tuple[str, ...] = tuple(DATASETS)
    n_temperatures: int = 24  # collapse ladder (>= 12)
    collapse_max_iter: int = 1000
    stability_decades: int = 12  # T = 1 ... 1e-12
    stability_per_decade: int = 2
    critical_ratios: tuple[float, ...] = (1.1, 1.05, 0.95, 0.9)
    critical_max_iter: int = 800
    phase_cooling: float = 0.9
    phase_max_iter: int = 150
    gradient_iters: int = 30
    cost_ks: tuple[int, ...] = tuple(2**i for i in range(1, 13))
    cost_entries: int = 1 << 19  # rows x k per timed call
    cost_repeats: int = 5
    online_epochs: int = 8
    online_batch: int = 20
    anneal_cooling: float = 0.9
    large_n: int = 0  # rates on a denser sample of this size (0: skip)

    @classmethod
    def default(cls, seed: int = 0) -> Config:
        return cls(quick=False, seed=seed, large_n=20000)

    @classmethod
    def quick_config(cls, seed: int = 0) -> Config:
        return cls(
            quick=True, seed=seed, n=300, n_temperatures=12, collapse_max_iter=200,
            stability_decades=12, stability_per_decade=1, critical_ratios=(1.25, 0.75),
            critical_max_iter=300, phase_cooling=0.8, phase_max_iter=30, gradient_iters=12,
            cost_ks=(2, 16, 128, 1024), cost_entries=1 << 15, cost_repeats=2,
            online_epochs=3, online_batch=20, anneal_cooling=0.8, large_n=0,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def margins(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Per point ``d_(2) - d_(1)`` (n,): the gap between its two smallest squared distances.
    ``C`` (k, d) must hold at least two centroids."""
    if check_matrix(C, "C", "(k, d)").shape[0] < 2:
        raise ValueError("C must hold at least two centroids (a margin is the gap between the "
                         f"two nearest); got shape {tuple(C.shape)}")
    D = sq_distances(X, C)  # (n, k)
    two = D.topk(2, dim=1, largest=False).values  # (n, 2)
    return two[:, 1] - two[:, 0]


@dataclass
class DatasetContext:
    """One dataset with its Lloyd fixed point ``C*`` (best of a few k-means++ starts)."""

    data: Dataset
    X: torch.Tensor  # (n, 2) float64
    C_star: torch.Tensor  # (k, 2) float64
    C0: torch.Tensor  # (k, 2) the k-means++ start Lloyd went from to C*
    labels: torch.Tensor  # (n,)
    J_star: float
    g_min: float  # min_i (d_(2) - d_(1)) at C*
    lambda_max: float
    lloyd_iters: int

    @property
    def k(self) -> int:
        return self.data.k

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


@dataclass
class Context:
    config: Config
    datasets: dict[str, DatasetContext] = field(default_factory=dict)
    tick: Tick = _noop


def lloyd_fixed_point(
    X: torch.Tensor, k: int, seed: int, starts: int = 5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, int]:
    """Best (lowest ``J``) converged Lloyd run over ``starts`` k-means++ seeds:
    ``(C*, C0, labels, J*, iterations)``."""
    best: tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, int] | None = None
    for s in range(starts):
        gen = torch.Generator().manual_seed(seed * 1000 + s)
        C0 = kmeans_plusplus(Data(X), k, generator=gen)
        res = lloyd(Data(X), C0, max_iter=1000)
        if not res.converged:
            continue
        if best is None or res.inertia < best[3]:
            best = (res.C, C0, res.labels, res.inertia, res.n_iter)
    if best is None:
        raise RuntimeError("no Lloyd run converged in 1000 iterations")
    return best


def build_context(config: Config, tick: Tick = _noop) -> Context:
    """Generate the datasets and compute ``C*``, ``J*``, ``g_min`` and ``lambda_max`` for each."""
    ctx = Context(config, tick=tick)
    for i, name in enumerate(config.datasets):
        tick(f"datasets: {name}")
        data = make_dataset(name, config.n, seed=config.seed * 100 + i)
        X = torch.as_tensor(data.X, dtype=torch.float64)
        C, C0, labels, J, iters = lloyd_fixed_point(X, data.k, config.seed)
        g = float(margins(X, C).min())
        ctx.datasets[name] = DatasetContext(
            data, X, C, C0, labels, J, g, covariance_eigmax(X), iters
        )
    return ctx


def dataset_summary(ctx: Context) -> dict[str, Any]:
    """The datasets as stored in results.json (points rounded to 1e-5 for the figures)."""
    out: dict[str, Any] = {}
    for name, dc in ctx.datasets.items():
        out[name] = {
            "n": dc.n,
            "k": dc.k,
            "lambda_max": dc.lambda_max,
            "g_min": dc.g_min,
            "J_star": dc.J_star,
            "lloyd_iterations": dc.lloyd_iters,
            "C_star": dc.C_star.tolist(),
            "X": np.round(dc.data.X, 5).tolist(),
            "y": dc.data.y.tolist(),
        }
    return out


# -- fits ------------------------------------------------------------------------------------------


def _linfit(u: np.ndarray, v: np.ndarray) -> tuple[float, float, float]:
    """Least squares ``v = a + b u``: ``(a, b, rms residual)``, for ``u`` of at least two
    distinct values. Where rounding leaves the design ``[1, u]`` of rank one (``u`` of a scale
    far from 1, as ``1/T`` at ``T = 1e-300``, or spread over a sliver of its size) the fit is
    taken on ``z = (u - c) / h`` (``c`` the midrange, ``h`` the half range: ``z`` in
    ``[-1, 1]``) and mapped back, ``b = b_z / h``, ``a = a_z - b_z c / h``."""
    A = np.stack([np.ones_like(u), u], axis=1)
    coef, _, rank, _ = np.linalg.lstsq(A, v, rcond=None)
    if rank < 2:
        lo, hi = float(u.min()), float(u.max())
        c, h = lo / 2 + hi / 2, hi / 2 - lo / 2  # halves first: no overflow
        A = np.stack([np.ones_like(u), (u - c) / h], axis=1)
        coef, *_ = np.linalg.lstsq(A, v, rcond=None)
        resid = v - A @ coef
        b_z = float(coef[1])
        return float(coef[0]) - b_z * (c / h), b_z / h, float(np.sqrt(np.mean(resid**2)))
    resid = v - A @ coef
    return float(coef[0]), float(coef[1]), float(np.sqrt(np.mean(resid**2)))


def _power_of_ten(a: float, t: np.ndarray, g: np.ndarray) -> float:
    """``10^a``, the fitted ``A``; ``ValueError`` naming ``T`` and ``gap`` where it overflows
    float64."""
    try:
        return 10.0**a
    except OverflowError:
        raise NonFiniteError(
            f"the fitted A = 10^{a:.6g} overflows float64: T (from {float(t.min())!r} to "
            f"{float(t.max())!r}) and gap (from {float(g.min())!r} to {float(g.max())!r}) lie "
            "too far apart in scale; rescale T or gap") from None


def _positive_series(T: Any, gap: Any) -> tuple[np.ndarray, np.ndarray]:
    """``T`` and ``gap`` as float arrays: 1-D, of one length, finite and > 0 (both enter through
    logarithms), with at least two distinct temperatures; else ``ValueError`` naming them."""
    out = []
    for name, v in (("T", T), ("gap", gap)):
        try:
            a = np.asarray(v, float)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a sequence of real numbers; got "
                            f"{type(v).__name__}") from None
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D; got shape {a.shape}")
        bad = ~(np.isfinite(a) & (a > 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise value_error(a[i], f"{name} must hold finite numbers > 0 (a logarithm is "
                                    f"fitted); got {float(a[i])!r} at index {i}")
        out.append(a)
    t, g = out
    if t.shape != g.shape:
        raise ValueError(f"T and gap must have one length; got {t.size} and {g.size}")
    if np.unique(t).size < 2:
        raise ValueError(f"T must hold at least two distinct temperatures; got {t.tolist()!r}")
    return t, g


def _abscissae(u: np.ndarray, t: np.ndarray, what: str, symbol: str) -> np.ndarray:
    """``u``, a function of the temperatures ``t`` that a fit is taken against, if it is finite
    and holds two distinct values; else ``ValueError`` naming ``T``."""
    if not np.isfinite(u).all():
        i = int(np.flatnonzero(~np.isfinite(u))[0])
        raise NonFiniteError(f"T must hold numbers whose {what} are finite ({symbol} is fitted); "
                             f"got {float(t[i])!r} at index {i}")
    if np.unique(u).size < 2:
        raise ValueError(f"T must hold at least two temperatures of distinct {what} in float64 "
                         f"({symbol} is fitted); got {t.tolist()!r}")
    return u


def fit_exponential(T: Sequence[float] | np.ndarray, gap: Sequence[float] | np.ndarray
                    ) -> dict[str, float]:
    """``gap = A exp(-B / T)``: least squares on ``log10 gap`` against ``1/T`` (``T`` and
    ``gap`` finite and > 0, at least two distinct finite ``1/T``; ``ValueError`` naming them,
    and where ``A`` overflows float64)."""
    t, g = _positive_series(T, gap)
    with np.errstate(over="ignore"):
        u = _abscissae(1.0 / t, t, "reciprocals", "1/T")
    a, b, rms = _linfit(u, np.log10(g))
    return {"A": _power_of_ten(a, t, g), "B": -b * math.log(10.0), "rms_log10": rms,
            "points": int(t.size)}


def fit_power(T: Sequence[float] | np.ndarray, gap: Sequence[float] | np.ndarray
              ) -> dict[str, float]:
    """``gap = A T^p``: least squares on ``log10 gap`` against ``log10 T`` (``T`` and ``gap``
    finite and > 0, at least two distinct ``log10 T``; ``ValueError`` naming them, and where
    ``A`` overflows float64)."""
    t, g = _positive_series(T, gap)
    a, p, rms = _linfit(_abscissae(np.log10(t), t, "logarithms", "log10 T"), np.log10(g))
    return {"A": _power_of_ten(a, t, g), "p": p, "rms_log10": rms, "points": int(t.size)}


def match_max_error(C: torch.Tensor, C_ref: torch.Tensor) -> float:
    """``max_j ||c_j - c*_pi(j)||`` for the assignment ``pi`` minimising the total distance;
    ``C`` and ``C_ref`` finite (k, d) tensors of one shape."""
    for name, M in (("C", C), ("C_ref", C_ref)):
        check_finite(check_matrix(M, name, "(k, d)"), name)
    if C.shape != C_ref.shape:
        raise ValueError(f"C and C_ref must have one shape (k, d) to be matched one to one; got "
                         f"{tuple(C.shape)} and {tuple(C_ref.shape)}")
    if C.shape[0] == 0:
        raise ValueError("C must hold at least one centroid; got shape (0, d)")
    Dm = torch.cdist(C.double(), C_ref.double()).cpu().numpy()  # (k, k)
    rows, cols = linear_sum_assignment(Dm)
    return float(Dm[rows, cols].max())


# -- JSON ------------------------------------------------------------------------------------------


def sanitize(obj: Any) -> Any:
    """A strict-JSON copy of ``obj``: tensors and arrays to lists, NaN/inf floats to ``None``."""
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [sanitize(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return sanitize(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return sanitize(obj.tolist())
    if isinstance(obj, np.generic):
        return sanitize(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj
