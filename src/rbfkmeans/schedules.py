r"""Temperature schedules for deterministic annealing (Rose 1998), in this project's convention.

With scores ``z = -d / (2T)`` the softmax memberships are Gaussian posteriors of variance ``T``.
At high ``T`` every centroid sits at the (weighted) data mean ``mu`` and every row of ``R`` is
uniform. The mapping's Jacobian at a row of equal scores is ``gamma (I - 11^T/k)`` with
``gamma = 1/k`` (softmax), ``1/sqrt(k)`` (entmax-1.5: ``s = sqrt(p) = k^{-1/2}``) and ``1``
(sparsemax). Linearising the soft-Lloyd map ``c_j <- m_j`` there, a zero-sum perturbation
``c_j = mu + e_j`` evolves as ``e_j <- (k gamma / T) Sigma e_j`` with ``Sigma`` the data covariance.
The mean becomes unstable, and the centroids split, once the gain exceeds one:

.. math::

    T_c^{\text{softmax}} = \lambda_{\max}(\Sigma), \qquad
    T_c^{\text{entmax15}} = \sqrt{k}\,\lambda_{\max}(\Sigma), \qquad
    T_c^{\text{sparsemax}} = k\,\lambda_{\max}(\Sigma).

The softmax value is the classical ``2 lambda_max`` of Rose's convention (there ``exp(-d/T)``).
The entmax-1.5 and sparsemax values are derived here, not taken from the paper; the reproduction
report (``rbfkmeans reproduce``, critical temperatures) measures the first split numerically and
compares it with these predictions.

**On the sphere** (``metric="cosine"``, :mod:`rbfkmeans.metrics`) the points are the unit rows
``x_hat_i``, the scores ``z_ij = <x_hat_i, c_j> / T`` and the map is
``c_j <- m_j / ||m_j||``. Let ``mu = sum_i w_i x_hat_i / sum_i w_i`` (``||mu|| <= 1``),
``mu_hat = mu / ||mu||``, ``Sigma`` the weighted covariance of the ``x_hat_i`` and
``P = I - mu_hat mu_hat^T`` the projection onto the tangent space at ``mu_hat``. At high ``T`` every
centroid sits at the mean direction ``mu_hat`` (a fixed point: uniform rows give ``m_j = mu``).
Perturb ``c_j = mu_hat + e_j`` with ``e_j`` tangent (``P e_j = e_j``: the centroids stay unit to
first order) and, as above, zero-sum (a common ``e`` leaves the rows uniform and is undone at
once). Then ``r_ij = 1/k + (gamma / T) <x_hat_i, e_j>``; ``N_j`` has no first-order term, because
``sum_i w_i <x_hat_i, e_j> = (sum w) <mu, e_j> = 0``; and
``S_j / (sum w) = mu / k + (gamma / T) E[x_hat x_hat^T] e_j`` with
``E[x_hat x_hat^T] e_j = (Sigma + mu mu^T) e_j = Sigma e_j``. So ``m_j = mu + (k gamma / T)
Sigma e_j``, and the normalisation keeps only the tangent part of the change, divided by the
length of ``mu``: ``m_j / ||m_j|| = mu_hat + P (m_j - mu) / ||mu|| + O(e^2)``. Hence

.. math::

    e_j \leftarrow \frac{k\gamma}{T\,\lVert\mu\rVert}\, P\Sigma P\, e_j, \qquad
    T_c^{\cos} = k\gamma\, \frac{\lambda_{\max}(P \Sigma P)}{\lVert \mu \rVert}

(``k gamma`` = 1, ``sqrt(k)``, ``k`` as above). Compared with the Euclidean ``lambda_max(Sigma)``
of the normalised rows, the radial direction ``mu_hat`` drops out (the normalisation removes it)
and the gain grows by ``1 / ||mu||``: the less the directions agree, the hotter the first split.
Example: two tight groups at angles ``+-a`` from their mean direction give
``lambda_max(P Sigma P) = sin^2 a`` and ``||mu|| = cos a``, so ``T_c = sin^2 a / cos a`` for
softmax, which is also what the exact map ``tan b' = tanh(sin a sin b / T) tan a`` of the half
angle ``b`` between the centroids linearises to. When ``||mu||`` vanishes (directions spread
evenly) the mean direction is not a stable state at any temperature; :func:`sphere_eigmax`
floors ``||mu||`` at :data:`MIN_MEAN_NORM` so that the ladder still starts at a finite ``T``.
"""

from __future__ import annotations

import math

import numpy as np
from torch import Tensor

from ._validation import check_positive_int, check_real, check_temperature
from .assignments import get_assignment
from .errors import NonFiniteError
from .metrics import check_metric, normalize_rows
from .spread import covariance_eigmax, sphere_spread

__all__ = [
    "MAX_LADDER",
    "MIN_MEAN_NORM",
    "critical_temperature",
    "critical_temperature_factor",
    "geometric_schedule",
    "sphere_eigmax",
]

#: the floor on ``||mu||`` in the spherical critical temperature (:func:`sphere_eigmax`)
MIN_MEAN_NORM = 1e-3
#: the most temperatures :func:`geometric_schedule` returns
MAX_LADDER = 100_000
#: how far above 1 :func:`sphere_eigmax` takes ``||mu||`` to be rounding: float32 rows count as
#: unit rows within 16 eps of a squared norm of 1 (:func:`rbfkmeans.metrics.unit_rows`), so the
#: norm of their mean may exceed 1 by 1e-6
_MEAN_NORM_SLACK = 1e-5


def critical_temperature_factor(assignment: str, n_clusters: int) -> float:
    """``T_c / lambda_max``: 1 (softmax), ``sqrt(k)`` (entmax15), ``k`` (sparsemax), 0 (hard)."""
    entry = get_assignment(assignment)
    return entry.critical_factor(check_positive_int(n_clusters, "n_clusters"))


def sphere_eigmax(tangent_eigmax: float, mean_norm: float) -> float:
    """``lambda_max(P Sigma P) / max(||mu||, MIN_MEAN_NORM)``: on the sphere, the eigenvalue
    that plays the part of ``lambda_max(Sigma)``, ``T_c = critical_temperature_factor * this``
    (module docstring). ``mean_norm``, the norm of a mean of unit rows, lies in ``[0, 1]`` (up
    to rounding: 1e-5 above 1 is taken as 1's rounding); more raises ``ValueError``, and so does
    a ``tangent_eigmax`` whose quotient overflows float64 (that of unit rows is at most 1)."""
    tangent_eigmax = check_real(tangent_eigmax, "tangent_eigmax", minimum=0.0)
    mean_norm = check_real(mean_norm, "mean_norm", minimum=0.0)
    if mean_norm > 1.0 + _MEAN_NORM_SLACK:
        raise ValueError(f"mean_norm must be <= 1 (the norm of a mean of unit rows); got "
                         f"{mean_norm!r}")
    value = float(tangent_eigmax) / max(float(mean_norm), MIN_MEAN_NORM)
    if not math.isfinite(value):
        raise NonFiniteError(
            f"tangent_eigmax / max(mean_norm, {MIN_MEAN_NORM:g}) overflows float64 "
            f"(the eigenvalue of unit rows' covariance is at most 1); got "
            f"tangent_eigmax={tangent_eigmax!r}, mean_norm={mean_norm!r}")
    return value


def critical_temperature(
    X: Tensor,
    assignment: str,
    n_clusters: int,
    sample_weight: Tensor | None = None,
    *,
    eigmax: float | None = None,
    metric: str = "sqeuclidean",
) -> float:
    """First critical temperature ``T_c`` (module docstring) of data ``X`` (n, d): the factor
    times ``lambda_max(Cov X)``, or for ``metric="cosine"`` times
    ``lambda_max(P Sigma P) / ||mu||`` of the normalised rows (:func:`sphere_eigmax`). ``eigmax``
    replaces that eigenvalue (a finite number ``>= 0``; ``X`` and ``sample_weight`` are then
    not read). Raises ``ValueError`` naming ``X`` when it has no rows, naming ``sample_weight``
    when the weights sum to zero (no data, no spread), and naming ``X`` when its squared
    deviations overflow float64."""
    if eigmax is None and isinstance(X, Tensor) and isinstance(sample_weight, Tensor) \
            and X.dim() == 2 and tuple(sample_weight.shape) != (X.shape[0],):
        raise ValueError(f"sample_weight must have shape ({X.shape[0]},); got "
                         f"{tuple(sample_weight.shape)}: one weight per row of X (shape "
                         f"{tuple(X.shape)})")
    if eigmax is not None:
        lam = check_real(eigmax, "eigmax", minimum=0.0)
    elif check_metric(metric) == "cosine":
        _, lam_t, r = sphere_spread(normalize_rows(X), sample_weight)
        lam = sphere_eigmax(lam_t, r)
    else:
        lam = covariance_eigmax(X, sample_weight)
    if eigmax is None and X.shape[0] == 0:  # X is a checked (n, d) tensor here
        raise ValueError("X must have at least one row (there is no spread to take a critical "
                         f"temperature from); got shape {tuple(X.shape)}")
    if eigmax is None and isinstance(sample_weight, Tensor) \
            and not bool((sample_weight > 0).any()):
        raise ValueError("sample_weight must have a positive entry (the weights sum to zero: "
                         "there is no spread to take a critical temperature from); got all "
                         "zeros")
    return critical_temperature_factor(assignment, n_clusters) * lam


def geometric_schedule(T_start: float, T_end: float, ratio: float) -> np.ndarray:
    r"""Temperatures ``T_start, T_start r, T_start r^2, ...`` down to (and including) ``T_end``.

    A pure function: the solver only consumes the list. ``0 < ratio < 1``, ``T_start >= T_end > 0``.
    Every temperature is positive, over all of float64's range (``1e300`` to ``1e-300``): a
    rung whose ``ratio^i`` underflows is ``exp(log T_start + i log ratio)``.
    """
    T_start = check_temperature(T_start, "T_start")
    T_end = check_temperature(T_end, "T_end")
    ratio = check_real(ratio, "ratio")
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"ratio must be in (0, 1); got {ratio!r}")
    if T_end <= 0.0 or T_start < T_end:
        raise ValueError(
            f"need T_start >= T_end > 0; got T_start={T_start!r}, T_end={T_end!r}"
        )
    # logs of each end (their quotient can underflow: 1e-300 / 1e300)
    steps = (math.log(T_end) - math.log(T_start)) / math.log(ratio)
    if steps > MAX_LADDER:
        raise ValueError(
            f"the ladder from T_start={T_start!r} to T_end={T_end!r} at ratio={ratio!r} would "
            f"hold {steps:.3g} temperatures (at most {MAX_LADDER}); narrow the range or cool "
            "faster")
    n = math.floor(steps + 1e-9) + 1
    powers = float(ratio) ** np.arange(n)  # (n,)
    temps = T_start * powers
    # where ratio^i leaves float64's normal range (it underflows: 0.5^1075 = 0) while
    # T_start ratio^i does not, the rung from logs instead (to a relative ~1e-13)
    lost = powers < np.finfo(np.float64).tiny
    if lost.any():
        temps[lost] = np.exp(math.log(T_start) + np.flatnonzero(lost) * math.log(ratio))
    if temps[-1] > T_end * (1 + 1e-12):
        temps = np.append(temps, T_end)
    return temps
