r"""The spread of the data: the trace and the largest eigenvalue of its covariance.

The critical temperatures of :mod:`rbfkmeans.schedules` are multiples of ``lambda_max`` of the
weighted (biased) covariance

.. math::

    \Sigma = \frac{1}{\sum_i w_i} \sum_i w_i (x_i - \mu)(x_i - \mu)^T, \qquad
    \mu = \frac{\sum_i w_i x_i}{\sum_i w_i},

and ``tol`` is scaled by ``tr(Sigma) / d``. The functions here compute them from one chunked
float64 pass (:func:`covariance_spread`; the ``d x d`` moments, summed over the ranks), from a
random sample of rows without forming ``Sigma`` when the data is wide (Lanczos on products
``Sigma v``, :func:`top_eigenpair`), from sparse rows without centring them
(:func:`sparse_spread`), and for unit rows the eigenvalue of ``P Sigma P`` with
``P = I - mu_hat mu_hat^T``, the tangent part that sets spherical k-means' first split
(:func:`sphere_spread`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from ._validation import (
    check_dense,
    check_finite,
    check_matrix,
    check_positive_int,
    check_vector,
    largest_magnitude,
)
from .distances import chunk_rows, iter_chunks
from .errors import NonFiniteError
from .sparse import SparseRows

if TYPE_CHECKING:
    from .comm import Comm

__all__ = ["SAMPLE_SPREAD_MIN_DIM", "covariance_eigmax", "covariance_spread", "sparse_spread",
           "sphere_spread", "top_eigenpair"]

#: :func:`covariance_spread` may take ``lambda_max`` from a sample of rows from this many
#: features on
SAMPLE_SPREAD_MIN_DIM = 96


def _check_sample(sample: int | None) -> int | None:
    """``sample`` as given (None) or an integer ``>= 1``, else raise naming it."""
    return None if sample is None else check_positive_int(sample, "sample")


def _check_weights(sample_weight: Tensor | None, n: int) -> None:
    """Raise unless ``sample_weight`` is None or finite non-negative weights (n,) (a dense
    real tensor), naming it."""
    if sample_weight is not None:
        check_vector(check_dense(sample_weight, "sample_weight"), "sample_weight", n)
        check_finite(sample_weight, "sample_weight")
        if bool((sample_weight < 0).any()):
            raise ValueError("sample_weight must be >= 0; got a negative entry")


def _overflow_error(X: Tensor, name: str = "X", w: Tensor | None = None) -> ValueError:
    """The error for data whose squared deviations overflow float64 (worded as
    :meth:`rbfkmeans.frame.Frame.choose` words it). With weights ``w`` whose sum overflows,
    or where ``X``'s squared deviations with unit weights could not overflow, the weights are
    the cause: the error names ``sample_weight``."""
    n, d = X.shape
    big = largest_magnitude(X)
    if w is not None:
        total = float(w.double().sum())
        if not math.isfinite(total) or (2 * big) ** 2 * d * max(n, 1) < np.finfo(np.float64).max:
            return ValueError(
                f"sample_weight is too large: the weighted squared deviations of X overflow "
                f"float64 (sum of the weights {total:.3g}, largest weight "
                f"{largest_magnitude(w):.3g}; largest |x| {big:.3g} over {d} features and {n} "
                "rows); rescale sample_weight")
    return ValueError(
        f"{name} spreads too far for float64: its squared deviations from the mean overflow "
        f"(largest |x| {big:.3g} over {d} features and {n} rows); the supported range is "
        "max |x - mean| * sqrt(4 d sum(w)) < 1.3e154. Rescale the data")


def _finite_eigmax(lam: float, X: Tensor) -> float:
    """``lam`` if it is finite, else the overflow error naming ``X``."""
    if not math.isfinite(lam):
        raise _overflow_error(X)
    return lam


def _eigvalsh_max(A: Tensor, X: Tensor) -> float:
    """``lambda_max`` of the symmetric float64 ``A`` (clamped at 0); the overflow error naming
    ``X`` where ``A`` (a covariance of ``X``) is not finite."""
    if not bool(torch.isfinite(A).all()):  # d x d entries: no pass over the data
        raise _overflow_error(X)
    try:
        return float(torch.linalg.eigvalsh(A).max().clamp(min=0))
    except torch.linalg.LinAlgError:  # finite but beyond LAPACK's range
        raise _overflow_error(X) from None


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
    ``sample`` must be None or an integer ``>= 1``. Data whose squared deviations overflow
    float64 raise ``ValueError`` naming ``X``.
    """
    check_finite(check_matrix(check_dense(X, "X"), "X"), "X")
    sample = _check_sample(sample)
    n, d = X.shape
    if _matrix_free(n, d, sample) and (comm is None or not comm.active):
        _check_weights(sample_weight, n)
        return _sampled_spread(X, sample_weight, sample or n, chunk_size)
    moments = _moments(X, sample_weight, chunk_size, comm)
    if moments is None:
        return 0.0, 0.0
    _, cov = moments
    mean_var = float(cov.diagonal().clamp(min=0).mean())
    return mean_var, _eigvalsh_max(cov, X)


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
    if not math.isfinite(trace):
        raise _overflow_error(X, w=w)
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
    return _finite_eigmax(_top_eigenpair(Xs - mu_s.to(Xs.dtype), u)[0], X)  # data's precision


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
    float64: to ``~1e-15``; other dtypes in float64), started from ``A 1`` (deterministic, rich
    in the top direction). A zero ``A`` gives ``(0, e_1)``.

    ``Y`` and ``u`` are dense real tensors, finite, ``u >= 0``, small enough that ``A``'s
    entries are finite in that dtype (``sum(u) d max|y|^2`` below its largest number), else
    ``TypeError``/``ValueError`` naming them: O(m d), without a pass over the device (the rows
    are copied to the host for ARPACK anyway)."""
    check_matrix(check_dense(Y, "Y"), "Y", "(m, d)")
    check_vector(check_dense(u, "u"), "u", Y.shape[0])
    return _top_eigenpair(Y, u, check=True)


def _top_eigenpair(Y: Tensor, u: Tensor, check: bool = False) -> tuple[float, Tensor]:
    """:func:`top_eigenpair` of rows and weights whose types and shapes are right; with
    ``check`` their values are checked too (on the host copies: two reductions of ``Y``, two
    of ``u``), without it not at all (the callers of :mod:`rbfkmeans.spread` have checked
    them)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    dt = np.float32 if Y.dtype == torch.float32 else np.float64
    Yn = np.ascontiguousarray(Y.detach().cpu().numpy(), dtype=dt)
    un = u.detach().cpu().numpy().astype(dt)
    d = Yn.shape[1]
    if check:
        _check_eigen_input(Y, u, Yn, un)

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


def _check_eigen_input(Y: Tensor, u: Tensor, Yn: np.ndarray, un: np.ndarray) -> None:
    """Raise naming ``Y`` or ``u`` unless the host copies ``Yn``, ``un`` (of one float dtype)
    are finite, ``un >= 0`` and ``A = Y^T diag(u) Y`` (and the products by it) are finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        lo_u = float(un.min()) if un.size else 0.0
        tot_u = float(un.sum(dtype=np.float64))
        big = max(-float(Yn.min()), float(Yn.max())) if Yn.size else 0.0
    if not (lo_u >= 0 and math.isfinite(tot_u)):
        check_finite(u, "u")
        if bool((u < 0).any()):
            raise ValueError(f"u must be >= 0 (weights); got a negative entry "
                             f"(min {float(u.min())!r})")
        raise NonFiniteError(f"u is too large: its sum overflows ({tot_u!r}); rescale u")
    if not math.isfinite(big):
        check_finite(Y, "Y")
    top = float(np.finfo(Yn.dtype).max)
    d = Yn.shape[1]
    if not (tot_u * d * big * big < top and d * big < top):
        raise NonFiniteError(
            f"Y and u are too large for {Yn.dtype}: the entries of A = Y^T diag(u) Y overflow "
            f"(largest |y| {big:.3g} over {d} features, sum(u) {tot_u:.3g}); rescale Y or u")


def _moments(
    X: Tensor, sample_weight: Tensor | None, chunk_size: int | None, comm: Comm | None
) -> tuple[Tensor, Tensor] | None:
    """The weighted mean ``mu`` (d,) and biased covariance (d, d) in float64, two chunked passes
    (summed over ``comm``'s ranks); ``None`` when the weights sum to zero. Raises unless ``X``
    is a finite real matrix and ``sample_weight`` finite non-negative weights of its rows."""
    check_finite(check_matrix(check_dense(X, "X"), "X"), "X")
    _check_weights(sample_weight, X.shape[0])
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
    if sample_weight is not None and not math.isfinite(float(tot)):  # finite weights, inf sum
        raise _overflow_error(X, w=sample_weight)
    mu = s1 / tot  # (d,)
    M = torch.zeros(d, d, dtype=torch.float64, device=X.device)
    for s in iter_chunks(n, rows):
        Xc = X[s].double() - mu  # (b, d)
        Xw = Xc if sample_weight is None else Xc * sample_weight[s].double().unsqueeze(1)
        M.addmm_(Xw.T, Xc)
    if comm is not None:
        comm.sum_(M)
    cov = M / tot
    if not (bool(torch.isfinite(mu).all()) and bool(torch.isfinite(cov).all())):  # (d,), (d, d)
        raise _overflow_error(X, w=sample_weight)
    return mu, cov  # (d,), (d, d)


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
    (:mod:`rbfkmeans.schedules`, on the sphere); the same chunked float64 passes as
    :func:`covariance_spread`. ``X`` must already be normalised
    (:func:`rbfkmeans.metrics.normalize_rows`). ``(0, 0, 0)`` when the weights sum to zero;
    with ``mu = 0`` there is no mean direction and ``P = I``.
    ``sample``: as in :func:`covariance_spread` (``lambda_max(P Sigma P)`` of a random sample of
    rows, matrix-free, on wide data with more rows than that; None or an integer ``>= 1``).
    """
    n, d = check_matrix(check_dense(X, "X"), "X").shape
    sample = _check_sample(sample)
    if _matrix_free(n, d, sample) and (comm is None or not comm.active):
        check_finite(X, "X")
        _check_weights(sample_weight, n)
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
        return mean_var, _finite_eigmax(_top_eigenpair(Y, u)[0], X), r
    moments = _moments(X, sample_weight, chunk_size, comm)
    if moments is None:
        return 0.0, 0.0, 0.0
    mu, cov = moments
    r = float(mu.norm())
    P = torch.eye(X.shape[1], dtype=torch.float64, device=X.device)  # (d, d)
    if r > 0:
        u = mu / r  # (d,) mu_hat
        P -= torch.outer(u, u)
    lam = _eigvalsh_max(P @ cov @ P, X)
    return float(cov.diagonal().clamp(min=0).mean()), lam, r


def covariance_eigmax(X: Tensor, sample_weight: Tensor | None = None, *,
                      sample: int | None = None) -> float:
    """Largest eigenvalue of the (weighted, biased) covariance of the rows of ``X``; with
    ``sample``, on wide data with more rows, that of a random sample of rows (as in
    :func:`covariance_spread`, without the trace's pass; None or an integer ``>= 1``)."""
    check_finite(check_matrix(check_dense(X, "X"), "X"), "X")
    sample = _check_sample(sample)
    n, d = X.shape
    if _matrix_free(n, d, sample):
        _check_weights(sample_weight, n)
        return _sampled_eigmax(X, sample_weight, sample or n)
    return covariance_spread(X, sample_weight)[1]


@torch.no_grad()
def sparse_spread(X: SparseRows, w: Tensor | None = None, *, sample: int | None = None,
                  seed: int = 0, tangent: bool = False) -> tuple[float, float, Tensor]:
    r"""The spread of sparse rows without centring them: the mean feature variance
    ``tr(Sigma) / d``, the largest eigenvalue of ``Sigma`` and the weighted mean ``mu`` (d,),
    all in float64, from

    .. math::

        \Sigma v = \frac{1}{\sum w} X^T (w \odot X v) - \mu (\mu \cdot v), \qquad
        \operatorname{tr} \Sigma = \frac{\sum_i w_i \|x_i\|^2}{\sum w} - \|\mu\|^2,

    the eigenvalue by Lanczos (ARPACK) on these products (of ``sample`` random rows when
    given and there are more). With ``tangent`` (unit rows: spherical k-means' first split,
    :func:`sphere_spread`) the eigenvalue is that of ``P Sigma P``,
    ``P = I - mu_hat mu_hat^T``. ``(0, 0, 0)`` when the weights sum to zero."""
    if not isinstance(X, SparseRows):
        raise TypeError(f"X must be SparseRows; got {type(X).__name__}")
    sample = _check_sample(sample)
    n, d = X.shape
    if w is not None and (not isinstance(w, Tensor) or w.shape != (n,)
                          or not bool(torch.isfinite(w).all()) or bool((w < 0).any())):
        error = (NonFiniteError if isinstance(w, Tensor) and w.shape == (n,)
                 and not bool(torch.isfinite(w).all()) else ValueError)
        raise error(f"w must be a finite non-negative tensor of shape ({n},); got "
                         f"{w if not isinstance(w, Tensor) else tuple(w.shape)}")
    ww = torch.ones(n, dtype=torch.float64, device=X.device) if w is None else w.double()
    tot = float(ww.sum())
    if not tot > 0:
        return 0.0, 0.0, torch.zeros(d, dtype=torch.float64)
    Xd = X.double()
    mu = Xd.tmm(ww) / tot  # (d,)
    trace = max(float(Xd.square().sum(dim=1) @ ww) / tot - float(mu @ mu), 0.0)
    if sample is not None and n > sample:
        rows = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:sample]
        Xs, ws = Xd[rows], ww[rows.to(ww.device)]
    else:
        Xs, ws = Xd, ww
    tot_s = float(ws.sum())
    if not tot_s > 0 or min(Xs.shape) < 1 or trace == 0.0:  # no spread: nothing to find
        return trace / d, 0.0, mu.cpu()
    A = Xs.scipy()
    mu_s = A.T @ ws.cpu().numpy() / tot_s
    u = ws.cpu().numpy() / tot_s

    mu_np = mu.cpu().numpy()
    r = float(np.linalg.norm(mu_np))
    u_hat = mu_np / r if tangent and r > 0 else None

    def apply(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v).reshape(-1)
        if u_hat is not None:
            v = v - u_hat * (u_hat @ v)
        out = A.T @ (u * (A @ v)) - mu_s * (mu_s @ v)
        return out if u_hat is None else out - u_hat * (u_hat @ out)

    from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh

    op = LinearOperator((d, d), matvec=apply, dtype=np.float64)
    if d <= 2:
        M = np.stack([apply(e) for e in np.eye(d)], axis=1)
        lam = float(np.linalg.eigvalsh(M).max())
    else:
        v0 = np.random.RandomState(seed).standard_normal(d)
        try:
            lam = float(eigsh(op, k=1, which="LA", v0=v0, tol=1e-6,
                              return_eigenvectors=False)[0])
        except ArpackNoConvergence as exc:  # the best Ritz value found
            lam = float(np.max(exc.eigenvalues)) if len(exc.eigenvalues) else trace
        except ArpackError:  # a sample without spread (the starting vector vanishes)
            lam = 0.0
    return trace / d, max(lam, 0.0) if math.isfinite(lam) else trace, mu.cpu()
