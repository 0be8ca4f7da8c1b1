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
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from ._validation import (
    check_finite,
    check_matrix,
    check_positive_int,
    check_real,
    check_temperature,
    check_vector,
)
from .assignments import get_assignment
from .distances import chunk_rows, iter_chunks
from .metrics import check_metric, normalize_rows

if TYPE_CHECKING:
    from .comm import Comm

__all__ = [
    "MAX_LADDER",
    "MIN_MEAN_NORM",
    "SAMPLE_SPREAD_MIN_DIM",
    "covariance_eigmax",
    "covariance_spread",
    "critical_temperature",
    "critical_temperature_factor",
    "geometric_schedule",
    "sphere_eigmax",
    "sphere_spread",
    "top_eigenpair",
]

#: the floor on ``||mu||`` in the spherical critical temperature (:func:`sphere_eigmax`)
MIN_MEAN_NORM = 1e-3
#: the most temperatures :func:`geometric_schedule` returns
MAX_LADDER = 100_000
#: :func:`covariance_spread` may take ``lambda_max`` from a sample of rows from this many
#: features on
SAMPLE_SPREAD_MIN_DIM = 96


def critical_temperature_factor(assignment: str, n_clusters: int) -> float:
    """``T_c / lambda_max``: 1 (softmax), ``sqrt(k)`` (entmax15), ``k`` (sparsemax), 0 (hard)."""
    entry = get_assignment(assignment)
    return entry.critical_factor(check_positive_int(n_clusters, "n_clusters"))


def covariance_spread(
    X: Tensor,
    sample_weight: Tensor | None = None,
    *,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    sample: int | None = None,
) -> tuple[float, float]:
    r"""Mean feature variance and largest eigenvalue of the weighted (biased) covariance of ``X``.

    ``Sigma = sum_i w_i (x_i - mu)(x_i - mu)^T / sum_i w_i`` with ``mu`` the weighted mean: two
    chunked passes accumulated in float64 (no float64 copy of ``X``). With ``comm`` (a
    :class:`rbfkmeans.comm.Comm`) the sums run over every rank's shard. Returns
    ``(trace(Sigma) / d, lambda_max(Sigma))``; ``(0, 0)`` when the weights sum to zero.

    ``sample``: on wide data (at least :data:`SAMPLE_SPREAD_MIN_DIM` features) with more rows
    than that, in one process, the trace is still that of all rows (one ``O(n d)`` pass), but
    ``lambda_max`` is the covariance's of ``sample`` rows drawn at random (a fixed seed), found
    matrix-free (:func:`top_eigenpair`): ``O(sample d)`` per Lanczos step instead of the
    ``O(n d^2)`` of forming ``Sigma`` (2 s on MNIST's 70,000 x 784). Data with fewer rows
    than features (and at least that many) takes the matrix-free route over all its rows
    (whatever ``sample``): a TF-IDF of 60,000 words would need a 29 GB ``Sigma``.
    """
    check_finite(check_matrix(X, "X"), "X")
    n, d = X.shape
    if _matrix_free(n, d, sample) and (comm is None or not comm.active):
        return _sampled_spread(X, sample_weight, sample or n, chunk_size)
    moments = _moments(X, sample_weight, chunk_size, comm)
    if moments is None:
        return 0.0, 0.0
    _, cov = moments
    mean_var = float(cov.diagonal().clamp(min=0).mean())
    return mean_var, float(torch.linalg.eigvalsh(cov).max().clamp(min=0))


def _matrix_free(n: int, d: int, sample: int | None) -> bool:
    """Whether the spread of ``n`` rows of ``d`` features takes ``lambda_max`` matrix-free:
    wide data with more rows than ``sample``, or with fewer rows than features."""
    return d >= SAMPLE_SPREAD_MIN_DIM and ((sample is not None and n > sample) or n < d)


def _sampled_spread(X: Tensor, w: Tensor | None, sample: int,
                    chunk_size: int | None) -> tuple[float, float]:
    """:func:`covariance_spread` with ``lambda_max`` from a random sample of rows."""
    mu, tot = _weighted_mean(X, w, chunk_size)
    if tot == 0:
        return 0.0, 0.0
    n, d = X.shape
    trace = 0.0
    for s in iter_chunks(n, chunk_rows(n, d, chunk_size)):
        Y = X[s].double() - mu  # (b, d)
        sq = (Y * Y).sum(dim=1)
        trace += float(sq.sum() if w is None else sq @ w[s].double())
    return trace / tot / d, _sampled_eigmax(X, w, sample)


def _sampled_eigmax(X: Tensor, w: Tensor | None, sample: int) -> float:
    """``lambda_max`` of the weighted covariance of ``sample`` rows of ``X`` drawn at random
    (a fixed seed), matrix-free."""
    n = X.shape[0]
    rows = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:sample].to(X.device)
    Xs, ws = X[rows], None if w is None else w[rows].double()
    tot_s = float(Xs.shape[0] if ws is None else ws.sum())
    if tot_s == 0:
        return 0.0
    mu_s = (Xs.double().sum(0) if ws is None else ws @ Xs.double()) / tot_s
    u = torch.full((Xs.shape[0],), 1.0 / tot_s, dtype=torch.float64) if ws is None \
        else ws / tot_s
    return top_eigenpair(Xs - mu_s.to(Xs.dtype), u)[0]  # in the data's precision


def _weighted_mean(X: Tensor, w: Tensor | None, chunk_size: int | None) -> tuple[Tensor, float]:
    """``mu`` (d,) and ``sum w`` in float64, one chunked pass."""
    n, d = X.shape
    tot = 0.0
    s1 = torch.zeros(d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, chunk_rows(n, d, chunk_size)):
        Xc = X[s].double()
        tot += float(Xc.shape[0] if w is None else w[s].double().sum())
        s1 += Xc.sum(dim=0) if w is None else w[s].double() @ Xc
    return (s1 / tot if tot > 0 else s1), tot


def top_eigenpair(Y: Tensor, u: Tensor) -> tuple[float, Tensor]:
    r"""The largest eigenvalue and a unit eigenvector (d,) of ``A = Y^T diag(u) Y`` for rows
    ``Y`` (m, d) and non-negative weights ``u`` (m,), without forming ``A``: implicitly restarted
    Lanczos (ARPACK, to the precision of its products) on ``A v = Y^T (u * (Y v))``, ``O(m d)``
    each, in ``Y``'s dtype (float32 rows: a relative ``~1e-7``, at half the memory traffic;
    float64: to ``~1e-15``), started from ``A 1`` (deterministic, rich in the top direction).
    A zero ``A`` gives ``(0, e_1)``."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    dt = np.float32 if Y.dtype == torch.float32 else np.float64
    Yn = np.ascontiguousarray(Y.detach().cpu().numpy(), dtype=dt)
    un = u.detach().cpu().numpy().astype(dt)
    d = Yn.shape[1]

    def matvec(v: np.ndarray) -> np.ndarray:
        return (Yn.T @ (un * (Yn @ v.ravel().astype(dt)))).astype(np.float64)

    v0 = matvec(np.ones(d))
    if Yn.shape[0] == 0 or not np.any(v0):
        return 0.0, torch.eye(d, dtype=torch.float64)[0]
    if d == 1:
        return float(v0[0]), torch.ones(1, dtype=torch.float64)
    val, vec = eigsh(LinearOperator((d, d), matvec=matvec, dtype=np.float64), k=1,
                     which="LA", v0=v0, tol=0.0)
    return float(val[0]), torch.from_numpy(vec[:, 0])


def _moments(
    X: Tensor, sample_weight: Tensor | None, chunk_size: int | None, comm: Comm | None
) -> tuple[Tensor, Tensor] | None:
    """The weighted mean ``mu`` (d,) and biased covariance (d, d) in float64, two chunked passes
    (summed over ``comm``'s ranks); ``None`` when the weights sum to zero. Raises unless ``X``
    is a finite real matrix and ``sample_weight`` finite non-negative weights of its rows."""
    check_finite(check_matrix(X, "X"), "X")
    if sample_weight is not None:
        check_vector(sample_weight, "sample_weight", X.shape[0])
        check_finite(sample_weight, "sample_weight")
        if bool((sample_weight < 0).any()):
            raise ValueError("sample_weight must be >= 0; got a negative entry")
    n, d = X.shape
    rows = chunk_rows(n, d, chunk_size)
    tot = torch.zeros(1, dtype=torch.float64, device=X.device)
    s1 = torch.zeros(d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, rows):
        Xc = X[s].double()  # (b, d)
        if sample_weight is None:
            tot += Xc.shape[0]
            s1 += Xc.sum(dim=0)
        else:
            wc = sample_weight[s].double()
            tot += wc.sum()
            s1 += wc @ Xc
    if comm is not None:
        comm.sum_(tot, s1)
    if float(tot) == 0:
        return None
    mu = s1 / tot  # (d,)
    M = torch.zeros(d, d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, rows):
        Xc = X[s].double() - mu  # (b, d)
        Xw = Xc if sample_weight is None else Xc * sample_weight[s].double().unsqueeze(1)
        M.addmm_(Xw.T, Xc)
    if comm is not None:
        comm.sum_(M)
    return mu, M / tot  # (d,), (d, d)


def sphere_spread(
    X: Tensor,
    sample_weight: Tensor | None = None,
    *,
    chunk_size: int | None = None,
    comm: Comm | None = None,
    sample: int | None = None,
) -> tuple[float, float, float]:
    r"""The spread of unit rows ``X`` (n, d) that sets spherical k-means' first split.

    Returns ``(trace(Sigma) / d, lambda_max(P Sigma P), ||mu||)`` with ``mu`` the weighted mean
    of the rows, ``Sigma`` their weighted (biased) covariance and ``P = I - mu_hat mu_hat^T``
    (module docstring); the same chunked float64 passes as :func:`covariance_spread`. ``X``
    must already be normalised (:func:`rbfkmeans.metrics.normalize_rows`). ``(0, 0, 0)`` when
    the weights sum to zero; with ``mu = 0`` there is no mean direction and ``P = I``.
    ``sample``: as in :func:`covariance_spread` (``lambda_max(P Sigma P)`` of a random sample of
    rows, matrix-free, on wide data with more rows than that).
    """
    n, d = check_matrix(X, "X").shape
    if _matrix_free(n, d, sample) and (comm is None or not comm.active):
        sample = sample or n
        mean_var, _ = _sampled_spread(X, sample_weight, sample, chunk_size)
        mu, _ = _weighted_mean(X, sample_weight, chunk_size)
        r = float(mu.norm())
        rows = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:sample]
        Y = X[rows.to(X.device)].double()
        ws = None if sample_weight is None else sample_weight[rows.to(X.device)].double()
        tot_s = float(Y.shape[0] if ws is None else ws.sum())
        Y = Y - ((Y.sum(0) if ws is None else ws @ Y) / max(tot_s, 1e-300))
        if r > 0:
            u_hat = mu / r
            Y = Y - torch.outer(Y @ u_hat, u_hat)  # the rows' tangent parts: Y P
        u = torch.full((Y.shape[0],), 1.0 / max(tot_s, 1e-300), dtype=torch.float64) \
            if ws is None else ws / max(tot_s, 1e-300)
        return mean_var, top_eigenpair(Y, u)[0], r
    moments = _moments(X, sample_weight, chunk_size, comm)
    if moments is None:
        return 0.0, 0.0, 0.0
    mu, cov = moments
    r = float(mu.norm())
    P = torch.eye(X.shape[1], dtype=torch.float64, device=X.device)  # (d, d)
    if r > 0:
        u = mu / r  # (d,) mu_hat
        P -= torch.outer(u, u)
    lam = float(torch.linalg.eigvalsh(P @ cov @ P).max().clamp(min=0))
    return float(cov.diagonal().clamp(min=0).mean()), lam, r


def sphere_eigmax(tangent_eigmax: float, mean_norm: float) -> float:
    """``lambda_max(P Sigma P) / max(||mu||, MIN_MEAN_NORM)``: on the sphere, the eigenvalue
    that plays the part of ``lambda_max(Sigma)``, ``T_c = critical_temperature_factor * this``
    (module docstring)."""
    tangent_eigmax = check_real(tangent_eigmax, "tangent_eigmax", minimum=0.0)
    mean_norm = check_real(mean_norm, "mean_norm", minimum=0.0)
    return float(tangent_eigmax) / max(float(mean_norm), MIN_MEAN_NORM)


def covariance_eigmax(X: Tensor, sample_weight: Tensor | None = None, *,
                      sample: int | None = None) -> float:
    """Largest eigenvalue of the (weighted, biased) covariance of the rows of ``X``; with
    ``sample``, on wide data with more rows, that of a random sample of rows (as in
    :func:`covariance_spread`, without the trace's pass)."""
    check_finite(check_matrix(X, "X"), "X")
    n, d = X.shape
    if _matrix_free(n, d, sample):
        if sample_weight is not None:
            check_vector(sample_weight, "sample_weight", n)
        return _sampled_eigmax(X, sample_weight, sample or n)
    return covariance_spread(X, sample_weight)[1]


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
    replaces that eigenvalue."""
    if eigmax is not None:
        lam = float(eigmax)
    elif check_metric(metric) == "cosine":
        _, lam_t, r = sphere_spread(normalize_rows(X), sample_weight)
        lam = sphere_eigmax(lam_t, r)
    else:
        lam = covariance_eigmax(X, sample_weight)
    return critical_temperature_factor(assignment, n_clusters) * lam


def geometric_schedule(T_start: float, T_end: float, ratio: float) -> np.ndarray:
    r"""Temperatures ``T_start, T_start r, T_start r^2, ...`` down to (and including) ``T_end``.

    A pure function: the solver only consumes the list. ``0 < ratio < 1``, ``T_start >= T_end > 0``.
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
    temps = T_start * float(ratio) ** np.arange(n)
    if temps[-1] > T_end * (1 + 1e-12):
        temps = np.append(temps, T_end)
    return temps
