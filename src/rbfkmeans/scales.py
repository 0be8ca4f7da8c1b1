r"""The two scales of a fit, in the units of the frame it computes in.

With the weighted covariance ``Sigma`` of the fit's rows (:mod:`rbfkmeans.spread`),

.. math::

    v = \frac{\operatorname{tr} \Sigma}{d}, \qquad \lambda = \lambda_{\max}(\Sigma):

``tol`` is in units of the mean feature variance ``v`` (``abs_tol = tol v``) and the first
critical temperature is ``T_c = factor * lambda`` (:mod:`rbfkmeans.schedules`). Which estimate
serves depends on the data:

* sparse rows: both from the stored entries, matrix-free (:func:`~rbfkmeans.spread.sparse_spread`),
  ``lambda`` from a sample of ``SPREAD_SAMPLE`` rows;
* a hard fit anneals nothing: ``v`` alone, ``lambda = 0`` (for dense unit rows
  ``v = (1 - ||mu||^2) / d``, ``mu`` their weighted mean);
* unit rows (``metric="cosine"``): the tangent spread at the mean direction,
  ``lambda = lambda_max(P Sigma P) / ||mu||`` (:func:`~rbfkmeans.spread.sphere_spread`,
  :func:`~rbfkmeans.schedules.sphere_eigmax`);
* wide dense rows (at least ``SAMPLE_SPREAD_MIN_DIM`` features, more than ``SPREAD_SAMPLE``
  rows or fewer rows than features, one process): ``v`` from the trace the frame measured when it
  was chosen, ``lambda`` from a random sample of ``SPREAD_SAMPLE`` rows, no ``d x d`` matrix;
* otherwise both exactly, from the ``d x d`` moments of all rows summed over the ranks.
"""

from __future__ import annotations

from .frame import Frame
from .passes import Data, check_data
from .schedules import sphere_eigmax
from .seeding import weighted_mean
from .sparse import is_sparse
from .spread import (
    SAMPLE_SPREAD_MIN_DIM,
    covariance_eigmax,
    covariance_spread,
    sparse_spread,
    sphere_spread,
)

__all__ = ["SPREAD_SAMPLE", "fit_scales"]

#: wide or sparse data with more rows than this takes ``lambda`` from a random sample of this
#: many rows
SPREAD_SAMPLE = 4096


def fit_scales(data: Data, frame: Frame, *, hard: bool = False) -> tuple[float, float]:
    """``(v, lambda)`` of the rows of ``data`` (module docstring), in the units of ``frame``,
    the frame ``data``'s rows are in (``Frame()`` for unit rows); ``hard``: a fit that anneals
    nothing (``lambda = 0``)."""
    data = check_data(data)
    if not isinstance(frame, Frame):
        raise TypeError(f"frame must be a rbfkmeans.frame.Frame; got {type(frame).__name__}")
    if not isinstance(hard, bool):
        raise TypeError(f"hard must be a bool; got {type(hard).__name__}")
    spherical, sparse = data.metric.spherical, is_sparse(data.X)
    chunk, comm = data.chunk_size, data.comm
    if sparse:  # both from the stored entries, in one pass (lambda unused by a hard fit)
        mean_var, lam, mu = sparse_spread(data.X, data.w, sample=SPREAD_SAMPLE,
                                          tangent=spherical)
        if hard:
            return mean_var, 0.0
        return mean_var, sphere_eigmax(lam, float(mu.norm())) if spherical else lam
    if hard:
        if spherical:
            mu = weighted_mean(data).double()
            return max(0.0, 1.0 - float(mu.square().sum())) / data.d, 0.0
        if frame.trace is not None and not comm.active:
            return frame.sq_to(frame.trace) / data.d, 0.0
        return covariance_spread(data.X, data.w, chunk_size=chunk, comm=comm)[0], 0.0
    if spherical:
        mean_var, lam_t, mu_norm = sphere_spread(data.X, data.w, chunk_size=chunk, comm=comm,
                                                 sample=SPREAD_SAMPLE)
        return mean_var, sphere_eigmax(lam_t, mu_norm)
    if (frame.trace is not None and not comm.active
            and (data.n > SPREAD_SAMPLE or data.n < data.d)
            and data.d >= SAMPLE_SPREAD_MIN_DIM):
        return frame.sq_to(frame.trace) / data.d, \
            covariance_eigmax(data.X, data.w, sample=SPREAD_SAMPLE)
    return covariance_spread(data.X, data.w, chunk_size=chunk, comm=comm)
