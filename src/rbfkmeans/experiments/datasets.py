r"""The four synthetic geometries of the reproduction, generated here (seeded, sizes as options).

Each generator returns ``(X, y)``: points ``X`` (n, 2) float64 and the generating component ``y``
(n,) int (blob, moon, spiral arm or ring). ``standardize`` then centres ``X`` and scales it to unit
total variance per feature, ``trace(Cov X) / d = 1``, so that temperatures are comparable across
datasets (the critical temperature ``lambda_max(Cov X)`` then lies between 1 and 2).

* ``blobs``   -- isotropic Gaussians around ``centers`` random centres in a box;
* ``moons``   -- two interleaved half circles (unit radius) with Gaussian noise;
* ``spirals`` -- two Archimedean arms ``r = theta`` rotated by pi, with Gaussian noise;
* ``circles`` -- two concentric circles of radii 1 and ``factor``, with Gaussian noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._validation import check_nonnegative, check_positive_int, check_real
from ..errors import NonFiniteError

__all__ = ["DATASETS", "Dataset", "blobs", "circles", "make_dataset", "moons", "spirals",
           "standardize"]


def _split(n: int, parts: int) -> list[int]:
    """``n`` points shared out as evenly as possible over ``parts`` components."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


#: draws of the blob centres before :func:`blobs` gives up on the separation it was asked for
MAX_CENTER_DRAWS = 10_000


#: the most points a generator draws: numpy indexes (and sizes in bytes) its arrays with a C
#: ``intp``, and ``X`` takes 16 bytes a point
MAX_POINTS = int(np.iinfo(np.intp).max) // 16
#: the largest ``box`` of :func:`blobs`: the centres are drawn from an interval of width
#: ``2 box``, which must be finite in float64
MAX_BOX = float(np.finfo(np.float64).max) / 2


def _size(n: object) -> int:
    n = check_positive_int(n, "n")
    if n > MAX_POINTS:
        raise ValueError(f"n must be at most {MAX_POINTS} (numpy's largest arrays); got {n!r}")
    return n


def _check_noise(noise: float, jitter: np.ndarray) -> np.ndarray:
    """``jitter = noise * z`` if it is finite, else raise naming ``noise`` (a finite ``noise``
    whose draws overflow float64)."""
    if not np.isfinite(jitter).all():
        raise NonFiniteError(f"noise must be small enough that the noisy points are finite in "
                             f"float64; got noise={noise!r}, whose draws overflow")
    return jitter


def _check_points(X: np.ndarray, name: str, value: float) -> np.ndarray:
    """``X`` if it is finite, else raise naming ``name`` (whose ``value`` put it beyond
    float64's range)."""
    if not np.isfinite(X).all():
        raise NonFiniteError(f"{name} must be small enough that the points are finite in float64; "
                             f"got {name}={value!r}, whose points overflow")
    return X


def _seed(seed: object) -> int:
    return check_positive_int(seed, "seed", minimum=0)


def _cannot_place(centers: int, std: float, box: float, why: str) -> ValueError:
    return ValueError(f"cannot place centers={centers} blob centres at least 6 * std = "
                      f"{6 * std:g} apart in [-box, box]^2 with box={box:g} ({why}): lower "
                      "centers or std, or raise box")


def blobs(
    n: int = 1000, *, centers: int = 4, std: float = 0.6, box: float = 5.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``centers`` isotropic Gaussian blobs of standard deviation ``std``; centres drawn uniformly
    in ``[-box, box]^2`` (redrawn until they are at least ``6 std`` apart; ``ValueError`` when
    discs of radius ``3 std`` about them cannot fit, or after :data:`MAX_CENTER_DRAWS` draws)."""
    n, seed = _size(n), _seed(seed)
    centers = check_positive_int(centers, "centers")
    std = check_nonnegative(std, "std")
    box = check_real(box, "box", positive=True)
    if box > MAX_BOX:
        raise NonFiniteError(f"box must be at most {MAX_BOX:.6g} (the centres' interval "
                             f"[-box, box] must have a finite width in float64); got {box!r}")
    # disjoint discs of radius 3 std, centred in the box, lie in the box grown by 3 std
    if _discs_overflow(centers, std, box):
        raise _cannot_place(centers, std, box, "their discs of radius 3 * std do not fit")
    rng = np.random.default_rng(seed)
    for _ in range(MAX_CENTER_DRAWS):
        mu = rng.uniform(-box, box, size=(centers, 2))  # (c, 2)
        with np.errstate(over="ignore"):  # centres 1e154 apart: an infinite gap is wide
            gaps = np.linalg.norm(mu[:, None] - mu[None], axis=-1) + np.eye(centers) * 1e9
        if gaps.min() >= 6 * std:
            break
    else:
        raise _cannot_place(centers, std, box, f"no draw of {MAX_CENTER_DRAWS} succeeded")
    y = np.repeat(np.arange(centers), _split(n, centers))  # (n,)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow raises below
        jitter = _check_points(std * rng.standard_normal((n, 2)), "std", std)
        X = _check_points(mu[y] + jitter, "box", box)  # (n, 2)
    return X, y


def _discs_overflow(centers: int, std: float, box: float) -> bool:
    """Whether ``centers`` discs of radius ``3 std`` cannot fit in the box ``[-box, box]^2``
    grown by ``3 std`` (by area). Where the squares overflow a Python float, both sides are
    first scaled by ``2**-600`` (exact: the same comparison)."""
    try:
        return centers * math.pi * (3 * std) ** 2 > (2 * box + 6 * std) ** 2
    except OverflowError:
        s = 2.0**-600
        return centers * math.pi * (3 * std * s) ** 2 > (2 * box * s + 6 * std * s) ** 2


def moons(n: int = 1000, *, noise: float = 0.08, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half circles: ``(cos t, sin t)`` and ``(1 - cos t, 1/2 - sin t)``,
    ``t`` uniform in ``[0, pi]``, plus Gaussian noise of standard deviation ``noise``."""
    n, seed, noise = _size(n), _seed(seed), check_nonnegative(noise, "noise")
    rng = np.random.default_rng(seed)
    n0, n1 = _split(n, 2)
    t0, t1 = rng.uniform(0, np.pi, n0), rng.uniform(0, np.pi, n1)
    upper = np.stack([np.cos(t0), np.sin(t0)], axis=1)  # (n0, 2)
    lower = np.stack([1 - np.cos(t1), 0.5 - np.sin(t1)], axis=1)  # (n1, 2)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow raises naming noise
        jitter = _check_noise(noise, noise * rng.standard_normal((n, 2)))
        X = np.concatenate([upper, lower]) + jitter
        _check_noise(noise, X)
    y = np.repeat([0, 1], [n0, n1])
    return X, y


#: the most ``turns`` :func:`spirals` can draw: beyond, the angle's square overflows float64
_MAX_TURNS = (math.sqrt(np.finfo(np.float64).max) - np.pi / 2) / (2 * np.pi)


def spirals(
    n: int = 1000, *, turns: float = 1.5, noise: float = 0.25, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Two arms ``theta (cos theta, sin theta)`` and its rotation by pi, ``theta`` in
    ``[pi/2, pi/2 + 2 pi turns]`` with density uniform in arc length (roughly), plus noise.
    ``turns`` is a finite number ``> 0`` whose largest angle squares to a float64 (at most
    about 2e153)."""
    n, seed, noise = _size(n), _seed(seed), check_nonnegative(noise, "noise")
    turns = check_real(turns, "turns", positive=True)
    lo, hi = np.pi / 2, np.pi / 2 + 2 * np.pi * turns
    if not math.isfinite(hi * hi):  # theta^2 is drawn: it must be a float64
        raise NonFiniteError(f"turns must be at most {_MAX_TURNS:.3g} (the largest angle's square, "
                             f"(pi/2 + 2 pi turns)^2, must be finite in float64); got {turns!r}")
    rng = np.random.default_rng(seed)
    parts = []
    for arm, m in enumerate(_split(n, 2)):
        theta = np.sqrt(rng.uniform(lo**2, hi**2, m))  # arc length ~ theta^2
        P = theta[:, None] * np.stack([np.cos(theta), np.sin(theta)], axis=1)  # (m, 2)
        parts.append(P if arm == 0 else -P)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow raises naming noise
        jitter = _check_noise(noise, noise * rng.standard_normal((n, 2)))
        X = np.concatenate(parts) + jitter
        _check_noise(noise, X)
    y = np.repeat([0, 1], _split(n, 2))
    return X, y


def circles(
    n: int = 1000, *, factor: float = 0.5, noise: float = 0.05, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Two concentric circles of radii 1 and ``factor`` (half the points each), plus noise."""
    n, seed, noise = _size(n), _seed(seed), check_nonnegative(noise, "noise")
    factor = check_nonnegative(factor, "factor")
    rng = np.random.default_rng(seed)
    n0, n1 = _split(n, 2)
    t = rng.uniform(0, 2 * np.pi, n)
    r = np.concatenate([np.ones(n0), np.full(n1, factor)])
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow raises below
        ring = _check_points(r[:, None] * np.stack([np.cos(t), np.sin(t)], axis=1), "factor",
                             factor)
        X = ring + _check_noise(noise, noise * rng.standard_normal((n, 2)))
        _check_noise(noise, X)
    y = np.repeat([0, 1], [n0, n1])
    return X, y


def standardize(X: np.ndarray) -> np.ndarray:
    """``(X - mean) / s`` with ``s^2 = trace(Cov X) / d``: zero mean, unit average variance.
    ``X`` (n, d), an array or anything ``numpy.asarray`` takes (not modified), must be finite
    and not constant (``s > 0``). The result does not depend on ``X``'s scale: ``X`` is first
    divided by the power of two that brings its largest ``|x|`` into ``[1/2, 1)`` (exact, so
    the result is the same floats), and its squares can then neither overflow nor
    underflow."""
    arr = np.asarray(X)
    if arr.ndim != 2 or arr.size == 0 or arr.dtype.kind not in "biuf":
        raise ValueError(f"X must be a non-empty 2-D array of real numbers (n, d); got "
                         f"{arr.dtype} of shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise NonFiniteError("X must be finite; got NaN or inf entries")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)  # as X - X.mean(axis=0) promotes integers and bools
    _, e = np.frexp(np.abs(arr).max())
    arr = np.ldexp(arr, -e)  # max |x| in [1/2, 1): a new array, X is not modified
    Xc = arr - arr.mean(axis=0)
    s = np.sqrt((Xc**2).sum() / Xc.size)
    if not s > 0:
        raise ValueError("X must not be constant: all its rows are equal, so it has no spread "
                         "to scale to 1")
    return Xc / s


@dataclass(frozen=True)
class Dataset:
    """A standardised dataset ``X`` (n, 2), its components ``y`` (n,) and the ``k`` it is
    clustered with."""

    name: str
    X: np.ndarray
    y: np.ndarray
    k: int


#: name -> (generator, default number of clusters)
DATASETS: dict[str, tuple[Callable[..., tuple[np.ndarray, np.ndarray]], int]] = {
    "blobs": (blobs, 4),
    "moons": (moons, 4),
    "spirals": (spirals, 6),
    "circles": (circles, 6),
}


def make_dataset(name: str, n: int, seed: int, k: int | None = None) -> Dataset:
    """The standardised dataset ``name`` with ``n >= 2`` points drawn with ``seed``, to be
    clustered with ``k`` (default: the dataset's) clusters, ``1 <= k <= n``."""
    if not isinstance(name, str) or name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(map(repr, DATASETS))}; got {name!r}")
    n = check_positive_int(n, "n", minimum=2)
    gen, k_default = DATASETS[name]
    k = k_default if k is None else check_positive_int(k, "k")
    if k > n:
        raise ValueError(f"k must be at most n={n} (the number of points); got k={k}")
    X, y = gen(n, seed=seed)
    return Dataset(name, standardize(X), y, k)
