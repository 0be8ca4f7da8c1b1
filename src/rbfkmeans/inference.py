r"""The inference half of :class:`~rbfkmeans.RBFKMeans`: what a fitted estimator computes.

``predict`` is the hard rule ``argmin_j ||x - c_j||^2``; ``predict_proba`` the soft assignment
of the layer, ``R = m(-D / 2T)`` with ``D_ij = ||x_i - c_j||^2`` and ``m`` the estimator's
simplex mapping (``cos(x, c) / T`` for the cosine metric); ``transform`` the distances;
``score`` minus ``J``; ``to_layer`` the :class:`~rbfkmeans.KMeansLayer` holding the centroids.
The methods live in a mixin that the estimator inherits; they use its validation and
conversion helpers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted
from torch import Tensor

from . import precompile
from ._validation import check_real, check_temperature, check_within_reach, largest_magnitude
from .assignments import get_assignment
from .distances import shifted_scores, sq_distances
from .errors import NonFiniteError
from .frame import Frame, scale_by_power_of_two
from .layer import KMeansLayer
from .mappings import hardmax
from .metrics import cosine_similarity, get_metric, normalize_rows
from .passes import Data, nearest_labels
from .residuals import settled_inertia
from .sparse import SparseRows, is_sparse
from .stats import cluster_stats

__all__ = ["InferenceMixin", "check_reach", "to_numpy"]


def _sq_distances(X: Tensor | SparseRows, C: Tensor) -> Tensor:
    """``||x_i - c_j||^2`` (b, k) of a chunk of rows, dense or sparse."""
    return X.sq_distances(C) if isinstance(X, SparseRows) else sq_distances(X, C)


def check_reach(Xf: Tensor | SparseRows, C: Tensor, exponent: int = 0, total: float = 1.0,
                name: str = "X", dtype: torch.dtype = torch.float64) -> None:
    """Raise a ``ValueError`` naming ``name`` unless the squared distances between the rows
    ``Xf`` (n, d) and the centroids ``C`` (k, d), and their sum over a total weight ``total``,
    are finite in ``dtype``: rows far beyond the data a fit's frame (:mod:`rbfkmeans.frame`,
    of exponent ``exponent``) was chosen for would otherwise give infinite distances, NaN
    memberships and arbitrary labels. NaN or inf entries raise ``ValueError`` naming ``name``
    (or ``C``) as not finite. ``total`` must be a finite real number ``>= 0``. One reduction
    over each, no copy."""
    if not isinstance(Xf, Tensor | SparseRows) or not isinstance(C, Tensor) or C.dim() != 2:
        raise TypeError("Xf must be a tensor or SparseRows and C a 2-D tensor; got "
                        f"{type(Xf).__name__} and {type(C).__name__}")
    total = check_real(total, "total", minimum=0.0)
    x, c = largest_magnitude(Xf), largest_magnitude(C)
    for what, big in ((name, x), ("C", c)):
        if not math.isfinite(big):
            raise NonFiniteError(f"{what} must be finite; got NaN/inf entries (largest magnitude "
                                 f"{big})")
    check_within_reach(x, c, C.shape[1], dtype, total=total, name=name, exponent=exponent)


def to_numpy(t: Tensor) -> np.ndarray:
    """``t`` as a NumPy array on the CPU (detached; no copy for a CPU tensor). bfloat16, which
    NumPy lacks, comes back in float32 (a copy; every bfloat16 is a float32)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"t must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.detach().cpu().numpy()


class InferenceMixin:
    """``predict``, ``predict_proba``, ``transform``, ``score`` and ``to_layer`` for
    :class:`~rbfkmeans.RBFKMeans` (``self`` is the fitted estimator)."""

    def _centers_t(self: Any) -> Tensor:
        """``cluster_centers_`` as a tensor of the fit's dtype and device (a copy: the fitted
        array may be read-only, e.g. loaded with ``joblib.load(..., mmap_mode="r")``)."""
        C = np.array(self.cluster_centers_, dtype=np.float64 if self._dtype_ == torch.float64
                     else np.float32)  # (k, d)
        return torch.from_numpy(C).to(device=self._torch_device())

    @property
    def _fitted_metric(self: Any) -> str:
        """The metric the centroids were fitted under (``metric`` may have been changed by
        ``set_params`` since): the geometry every inference method computes in."""
        return getattr(self, "_metric_", self.metric)

    def _checked(self: Any, X: Any) -> np.ndarray:
        """``X`` validated for inference under the fitted metric."""
        return self._check_X(X, reset=False, metric=self._fitted_metric)

    def _inference_data(self: Any, Xf: Tensor, w: Tensor | None = None) -> Data:
        """The pass context of rows read for inference, under the fitted metric."""
        return self._data(Xf, w, metric=self._fitted_metric)

    @property
    def _fit_frame(self: Any) -> Frame:
        """The frame the fit computed in (:mod:`rbfkmeans.frame`); inference computes in it."""
        frame = getattr(self, "_frame_", None)
        return frame if frame is not None else Frame()

    def _framed(self: Any, X: np.ndarray, total: float = 1.0) -> tuple[Tensor, Tensor]:
        """``X`` and the centroids in the fit's frame, as tensors of its dtype and device,
        checked to be within float64's reach of each other unless the metric is spherical
        (:func:`check_reach`; ``total`` the weight a sum of the distances takes)."""
        frame = self._fit_frame
        Xf, C = frame.enter(self._to_torch(X)), frame.enter(self._centers_t())
        if not get_metric(self._fitted_metric).spherical:  # unit rows are always within reach
            check_reach(Xf, C, frame.exponent, total, dtype=C.dtype)  # the model's dtype
        return Xf, C

    def predict(self: Any, X: Any, sample_weight: Any = None) -> np.ndarray:
        """Index of the nearest centroid of each row of ``X`` (ties to the lowest index), by the
        passes the fit took (the kernels or torch's): on the rows of the fit, ``labels_``. A row
        equally near two centroids up to rounding may take the other of them where the fit's
        last Lloyd pass was a bounded one on wide data (more than 16 features), whose rows in
        doubt are scored by products of other shapes: both are then nearest.

        ``sample_weight`` is not used (the nearest centroid does not depend on it, as in
        ``sklearn.cluster.KMeans.predict``), but it is checked as :meth:`score` checks it."""
        check_is_fitted(self)
        X = self._checked(X)
        self._weights(sample_weight, X)  # checked, unused
        Xf, C = self._framed(X)
        with precompile.pinned(getattr(self, "_kernel_passes", None)):
            return to_numpy(nearest_labels(self._inference_data(Xf), C))

    def predict_proba(self: Any, X: Any, temperature: float | None = None) -> np.ndarray:
        """Memberships ``R = m(-D / 2T)`` (n, k) at ``temperature`` (default: the estimator's
        ``temperature``, else the last temperature of the fit). Rows sum to one; entmax15 and
        sparsemax rows are sparse (exact zeros). ``T = 0`` or ``assignment="hard"``: one-hot.
        For cosine ``R = m(cos(x, c) / T)``."""
        check_is_fitted(self)
        X = self._checked(X)
        T = self._fit_frame.sq_to(self._proba_temperature(temperature))  # in the frame's units
        Xf, C = self._framed(X)
        data, k = self._inference_data(Xf), C.shape[0]
        entry = get_assignment(self.assignment)
        out = np.empty((X.shape[0], k), dtype=X.dtype)
        with torch.no_grad():
            for s in data.chunks(k):
                D = _sq_distances(data.X[s], C)  # (b, k)
                shifted = None if T == 0.0 or entry.hard else shifted_scores(D, T)
                R = hardmax(-D, dim=1) if shifted is None else entry.forward(shifted[0], dim=1)
                out[s] = to_numpy(R)
        return out

    def _proba_temperature(self: Any, temperature: float | None) -> float:
        if temperature is not None:
            return check_temperature(temperature)
        if self.temperature is not None:
            return check_temperature(self.temperature)
        return self.temperature_

    def transform(self: Any, X: Any) -> np.ndarray:
        """Euclidean distances (n, k) to the centroids (as ``sklearn.cluster.KMeans``); for
        ``metric="cosine"`` the cosine distances ``1 - cos(x_i, c_j)``."""
        check_is_fitted(self)
        X = self._checked(X)
        with torch.no_grad():
            if get_metric(self._fitted_metric).spherical:
                Xt = self._to_torch(X)
                D = 1.0 - (cosine_similarity(Xt, self._centers_t()) if not is_sparse(Xt)
                           else Xt.unit_rows("X").mm(normalize_rows(self._centers_t()).T))
                return to_numpy(D).astype(X.dtype, copy=False)  # (n, k)
            Xf, C = self._framed(X)
            data, C64 = self._inference_data(Xf), C.double()
            out = np.empty((X.shape[0], C.shape[0]), dtype=X.dtype)
            # in float64, as scikit-learn: the expansion's rounding in float32 is eps times the
            # spread between clusters, which swamps the distance of a row to its own centre;
            # chunks of max(k, d) entries a row, as each chunk's rows are copied
            for s in data.chunks(max(C.shape[0], data.d)):
                Xs = data.X[s].double()
                D = (Xs.sq_distances(C64) if is_sparse(Xs) else sq_distances(Xs, C64)).sqrt_()
                out[s] = to_numpy(scale_by_power_of_two(D, -self._fit_frame.exponent,
                                                        inplace=True))  # (b, k)
        return out

    def score(self: Any, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """Minus the (weighted) k-means objective ``J`` of ``X`` at the fitted centroids (for
        cosine the spherical one, ``sum_i w_i (1 - max_j cos)``)."""
        check_is_fitted(self)
        X = self._checked(X)
        w = self._weights(sample_weight, X)
        Xf, C = self._framed(X, float(X.shape[0]) if w is None else float(w.sum()))
        data = self._inference_data(Xf, w)
        st = cluster_stats(data, C, 0.0, "hard", return_labels=True)
        assert st.labels is not None
        return -self._fit_frame.sq_from(settled_inertia(data, C, st.labels, st.inertia))

    @property
    def _n_features_out(self: Any) -> int:
        """Output columns of :meth:`transform` (one distance per centroid)."""
        return int(self.cluster_centers_.shape[0])

    def to_layer(self: Any, temperature: float | None = None, assignment: str | None = None
    ) -> KMeansLayer:
        """A :class:`KMeansLayer` holding the fitted centroids, at ``temperature`` (default as
        :meth:`predict_proba`) with this estimator's mapping (``assignment=None``) or
        ``assignment``, and its metric."""
        check_is_fitted(self)
        T = self._proba_temperature(temperature)
        return KMeansLayer(
            self._centers_t().cpu(),
            temperature=T,
            assignment=self.assignment if assignment is None else assignment,
            metric=self._fitted_metric,
        )
