"""The deep clusterer's inference half: embeddings, memberships and labels of any rows, a block
of rows at a time.

* :meth:`InferenceMixin.transform` -- embeddings ``z = f(x)`` (normalised when ``normalize``);
* :meth:`InferenceMixin.predict` -- the layer's nearest centroid;
* :meth:`InferenceMixin.predict_proba` -- the layer's memberships ``R`` at the fit's last
  temperature;
* the labels ``fit`` reports for its training rows: the argmax of the memberships averaged over
  the neighbour graph (:func:`~rbfkmeans.deep.graph.neighbor_average`), or the nearest centroid.

The vote needs a graph that tells rows apart: with ``m >= n - 1`` neighbours every row's
neighbourhood is every row, every average is the same and the vote would put all rows in one
cluster, so there the labels are the nearest centroid (:meth:`InferenceMixin._reported_labels`).
The labels ``fit`` keeps after its last epoch are the vote unless it leaves more clusters empty
than the nearest centroid does (the last epoch's collapse guard may have re-seeded centroids
that the vote, taken after it, does not reach): then the nearest centroid, which
:meth:`~InferenceMixin.predict` gives (:meth:`InferenceMixin._fitted_labels`).

Every pass embeds in eval mode and puts back the modes the encoder had; an embedding that is not
finite raises ``ValueError`` naming the encoder.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sklearn.exceptions
import torch
import torch.nn.functional as F
from torch import Tensor

from ..distances import iter_chunks
from ..errors import NonFiniteError
from .checks import check_embedding, modes_kept
from .graph import neighbor_average

__all__ = ["EMBED_ROWS", "InferenceMixin", "NotFittedError"]


class NotFittedError(sklearn.exceptions.NotFittedError, RuntimeError):
    """scikit-learn's ``NotFittedError`` (a ``ValueError`` and an ``AttributeError``), raised by
    :meth:`InferenceMixin.predict` and :meth:`InferenceMixin.predict_proba` before ``fit``; also a
    ``RuntimeError``, which they raised before."""

#: Rows embedded at once by the inference passes.
EMBED_ROWS = 4096


class InferenceMixin:
    """Inference for :class:`~rbfkmeans.deep.joint.DeepClusterer` (``self`` is the clusterer)."""

    def _embed(self: Any, X: Tensor) -> Tensor:
        """Embeddings (b, p) of the rows ``X`` (b, d), the encoder's output checked
        (:func:`~rbfkmeans.deep.checks.check_embedding`)."""
        Z = check_embedding(self.encoder(X), X, self.normalize)  # (b, p)
        return F.normalize(Z, dim=1) if self.normalize else Z

    @torch.no_grad()
    def _embed_all(self: Any, Xt: Tensor) -> Tensor:
        """Embeddings (n, p) of every row, :data:`EMBED_ROWS` rows at a time, in eval mode (the
        encoder's modes put back after); ``ValueError`` naming the encoder unless finite."""
        with modes_kept(self.encoder):
            self.encoder.eval()
            Z = torch.cat([self._embed(Xt[rows])
                           for rows in iter_chunks(Xt.shape[0], EMBED_ROWS)])
        bad = ~torch.isfinite(Z).all(dim=1)
        if bool(bad.any()):
            raise NonFiniteError(
                f"the encoder's embedding of X holds NaN or inf (in {int(bad.sum())} "
                f"of {Z.shape[0]} rows, e.g. row {int(bad.nonzero()[0, 0])}); X is "
                "finite, so the encoder's weights or its computation are not")
        return Z

    @torch.no_grad()
    def _memberships(self: Any, Z: Tensor) -> Tensor:
        """The layer's memberships ``R`` (n, k) of embeddings ``Z`` (n, p), a block at a time."""
        return torch.cat([self.layer_(Z[rows]) for rows in iter_chunks(Z.shape[0], EMBED_ROWS)])

    @torch.no_grad()
    def _nearest(self: Any, Z: Tensor) -> Tensor:
        """The layer's nearest centroid (n,) of embeddings ``Z`` (n, p), a block at a time."""
        return torch.cat([self.layer_.predict(Z[rows])
                          for rows in iter_chunks(Z.shape[0], EMBED_ROWS)])

    @torch.no_grad()
    def _reported_labels(self: Any, Z: Tensor, neighbors: Tensor | None) -> Tensor:
        """The labels ``fit`` reports for embeddings ``Z`` (n, p): the argmax of the memberships
        averaged over the ``neighbors`` (n, m) (``neighbor_labels``) where ``m < n - 1``, else
        the nearest centroid (with ``m = n - 1`` every row averages all rows: module
        docstring)."""
        if self.neighbor_labels and neighbors is not None and neighbors.shape[1] < Z.shape[0] - 1:
            return neighbor_average(self._memberships(Z), neighbors).argmax(dim=1)
        return self._nearest(Z)

    @torch.no_grad()
    def _fitted_labels(self: Any, Z: Tensor, neighbors: Tensor | None) -> Tensor:
        """The labels ``fit`` keeps for its rows' final embeddings ``Z`` (n, p): those of
        :meth:`_reported_labels`, or the nearest centroid where it leaves fewer of the
        ``n_clusters`` clusters empty than they do (module docstring)."""
        labels, nearest = self._reported_labels(Z, neighbors), self._nearest(Z)
        k = self.n_clusters
        filled = int((torch.bincount(labels, minlength=k) > 0).sum())
        return nearest if int((torch.bincount(nearest, minlength=k) > 0).sum()) > filled else labels

    def _fitted_rows(self: Any, X: Any) -> Tensor:
        """``X`` checked as the clusterer reads rows (``_as_tensor``: the encoder's width where
        an ``nn.Sequential`` says it), and of the width it was fitted on (``n_features_in_``,
        for any encoder), else ``ValueError`` naming ``X``."""
        Xt = self._as_tensor(X)
        fitted = getattr(self, "n_features_in_", None)
        if fitted is not None and Xt.shape[1] != fitted:
            raise ValueError(f"X must have the {fitted} features of the rows the clusterer was "
                             f"fitted on (n_features_in_); got {Xt.shape[1]}")
        return Xt

    def transform(self: Any, X: Any) -> np.ndarray:
        """Embeddings (n, p) of ``X`` (normalised when ``normalize``)."""
        return self._embed_all(self._fitted_rows(X)).cpu().numpy()

    def _check_fitted(self: Any) -> None:
        if not hasattr(self, "layer_"):
            raise NotFittedError("this DeepClusterer is not fitted yet: call fit first")

    def predict(self: Any, X: Any) -> np.ndarray:
        """Nearest centroid (n,) of each embedded row of ``X`` (``ValueError`` for an ``X`` of 0
    rows, as :meth:`rbfkmeans.RBFKMeans.predict`, or of another width than the encoder's)."""
        self._check_fitted()
        return self._nearest(self._embed_all(self._fitted_rows(X))).cpu().numpy()

    def predict_proba(self: Any, X: Any) -> np.ndarray:
        """Memberships ``R`` (n, k) at the last temperature of the fit (``ValueError`` for an ``X``
    of 0 rows, or of another width than the encoder's). A fit with ``epochs=0`` ran no
    temperature: the layer is hard (``T = 0``) and the rows one-hot at the nearest centroid."""
        self._check_fitted()
        return self._memberships(self._embed_all(self._fitted_rows(X))).cpu().numpy()
