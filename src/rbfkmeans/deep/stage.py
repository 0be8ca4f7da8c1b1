r"""The joint stage of deep clustering: the loss ``L`` and the epochs that minimise it.

Per minibatch ``B`` (``docs/deep-clustering.md`` and :mod:`rbfkmeans.deep.joint`):

.. math::

    L = \alpha\, \frac{F_T(Z_B, C)}{|B|} + \lambda\, \mathrm{MSE}(g(Z_B), X_B)
        + \beta\, \frac{1}{|B|}\sum_{i \in B} \frac{\ell_T(P_i; z_i, C)}{2T}
        + \eta\, \ell_{nc}(R_B, R_{n(B)}),

with the targets ``P`` of the batch built from the memberships of every row, refreshed every
``target_update`` epochs (:func:`~rbfkmeans.deep.losses.batch_targets`), and after every epoch the
collapse guard (:mod:`rbfkmeans.deep.guard`). :class:`JointStageMixin` holds this stage for
:class:`~rbfkmeans.deep.joint.DeepClusterer` (``self`` is the clusterer).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..assignments import get_assignment
from ..errors import NonFiniteError, value_error
from ._parameters import diverged
from .checks import check_input_width, check_reconstruction
from .guard import collapse_guard
from .losses import (
    batch_targets,
    fenchel_young_loss,
    neighbor_consistency_loss,
    target_sizes,
)
from .pretrain import finite_loss
from .start import epoch_temperatures

__all__ = ["JointStageMixin"]


def _described(value: Any) -> str:
    """``value``'s type, and for a tensor its dtype and shape (for error messages)."""
    if isinstance(value, Tensor):
        return f"a tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
    return type(value).__name__


class JointStageMixin:
    """The joint loss and its training loop (module docstring)."""

    def loss(self: Any, X: Tensor, P: Tensor | None = None,
             X_pos: Tensor | None = None) -> dict[str, Tensor]:
        """The joint loss ``L`` (module docstring) on a batch ``X`` (b, d) with targets ``P``
        (b, k) (the self-training term is skipped without them) and positives ``X_pos`` (b, d)
        (the consistency term is skipped without them), all floating-point tensors, ``b >= 1``
        (``TypeError``/``ValueError`` naming the argument otherwise). Returns the total and its
        terms; differentiable in the encoder, the decoder and the centroids."""
        if not hasattr(self, "layer_"):
            raise RuntimeError("the k-means layer does not exist yet: call init_layer or fit first")
        self._check_batch(X, P, X_pos)
        Z = self._embed(X)  # (b, p)
        zero = Z.new_zeros(())
        terms = {"kmeans": zero, "recon": zero, "self_training": zero, "consistency": zero}
        T = self.layer_.temperature
        if self.kmeans_weight > 0:
            terms["kmeans"] = self.layer_.objective(Z) / X.shape[0]
        if self.decoder is not None and self.recon_weight > 0:
            terms["recon"] = F.mse_loss(check_reconstruction(self.decoder(Z), X), X)
        if P is not None and self.self_training_weight > 0:
            D = self.layer_.distances(Z)  # (b, k)
            terms["self_training"] = fenchel_young_loss(D, P, T, self.assignment)
        if X_pos is not None and self.consistency_weight > 0:
            R, R_pos = self.layer_(Z), self.layer_(self._embed(X_pos))  # (b, k) each
            terms["consistency"] = neighbor_consistency_loss(R, R_pos, self.entropy_weight)
        total = (
            self.kmeans_weight * terms["kmeans"]
            + self.recon_weight * terms["recon"]
            + self.self_training_weight * terms["self_training"]
            + self.consistency_weight * terms["consistency"]
        )
        return {"total": total, **terms}

    def _check_batch(self: Any, X: Any, P: Any, X_pos: Any) -> None:
        """The arguments of :meth:`loss`: ``X`` a float tensor (b, d), ``b >= 1``, of the
        encoder's input width, ``P`` ``None`` or (b, k), ``X_pos`` ``None`` or of ``X``'s
        shape."""
        if not isinstance(X, Tensor) or not X.is_floating_point():
            raise TypeError(f"X must be a floating-point torch.Tensor (b, d) of rows; got "
                            f"{_described(X)}")
        if X.dim() != 2 or X.shape[0] == 0:
            raise ValueError(f"X must be a batch (b, d) of b >= 1 rows; got shape "
                             f"{tuple(X.shape)}")
        check_input_width(self.encoder, X)
        k = self.layer_.centroids.shape[0]
        for name, value, shape in (("P", P, (X.shape[0], k)), ("X_pos", X_pos, tuple(X.shape))):
            if value is None:
                continue
            if not isinstance(value, Tensor) or not value.is_floating_point():
                raise TypeError(f"{name} must be None or a floating-point torch.Tensor {shape}; "
                                f"got {_described(value)}")
            if tuple(value.shape) != shape:
                raise ValueError(f"{name} must have shape {shape} (X has shape {tuple(X.shape)}, "
                                 f"the layer {k} clusters); got {tuple(value.shape)}")

    def _temperatures(self: Any) -> np.ndarray:
        Tc = self.critical_temperature_
        if self.epochs == 0:
            return np.zeros(0)
        if get_assignment(self.assignment).hard or Tc <= 0:
            return np.zeros(self.epochs)
        for name, value in (("T_start", self.T_start), ("T_end", self.T_end)):
            if not 0.0 < value * Tc < math.inf:  # in units of T_c: the product over/underflows
                raise value_error(
                    value * Tc, f"{name} must be a number > 0 that times the critical "
                    f"temperature T_c={Tc:.6g} of the initial embedding is a finite number > 0; "
                    f"got {name}={value!r}, which gives {value * Tc!r}")
        return epoch_temperatures(self.T_start * Tc, self.T_end * Tc, self.epochs)

    def _joint(self: Any, Xt: Tensor, neighbors: Tensor | None) -> None:
        """The joint stage: ``epochs`` epochs of Adam on ``L``, targets refreshed every
        ``target_update`` epochs, the collapse guard after each."""
        layer, n = self.layer_, Xt.shape[0]
        temps = self.temperatures_ = self._temperatures()
        gen = torch.Generator().manual_seed(int(self.random_state) + 1)
        opt = torch.optim.Adam([*self._params(), layer.centroids], lr=self.lr)
        self.history_: list[dict[str, Any]] = []
        labels = torch.as_tensor(self.init_labels_, device=self._device)
        R_all: Tensor | None = None
        sizes: Tensor | None = None
        consistency = self.consistency_weight > 0 and neighbors is not None
        bar = self._progress(self.epochs, "joint")
        for epoch in bar:
            try:
                layer.temperature = float(temps[epoch])
                if self.self_training_weight > 0 and epoch % self.target_update == 0:
                    R_all = self._memberships(self._embed_all(Xt))  # (n, k)
                    sizes = target_sizes(R_all, neighbors)  # (k,)
                self.encoder.train()
                if self.decoder is not None:
                    self.decoder.train()
                sums = dict.fromkeys(("total", "kmeans", "recon", "self_training", "consistency"),
                                     0.0)
                for idx in self._batches(n, gen):
                    P = None
                    if R_all is not None and sizes is not None:
                        P = batch_targets(R_all, idx, neighbors, sizes, self.target_balance)
                    if consistency:
                        assert neighbors is not None
                        xb, xp = self._views(Xt, idx, neighbors, gen)
                        terms = self.loss(xb, P, xp)
                    else:
                        xb = self._augment(Xt[idx], gen)
                        terms = self.loss(xb, P)
                    opt.zero_grad()
                    finite_loss(terms["total"]).backward()
                    opt.step()
                    for key in sums:
                        sums[key] += float(terms[key].detach()) * idx.numel()
                Z = self._embed_all(Xt)
                reseeded = self._collapse_guard(Z, opt, self._reported_labels(Z, neighbors))
                new_labels = self._nearest(Z)
                changed = float((new_labels != labels).float().mean())
                labels = new_labels
            except NonFiniteError as exc:  # X is finite: the settings made it overflow
                raise diverged(self, epoch, exc, pretraining=False) from exc
            record = {"epoch": epoch, "T": layer.temperature, "reseeded": reseeded,
                      "label_change": changed}
            record.update({key: v / n for key, v in sums.items()})
            self.history_.append(record)
            bar.set_postfix(T=f"{layer.temperature:.3g}", loss=f"{record['total']:.4f}",
                            changed=f"{changed:.3f}")
        opt.zero_grad(set_to_none=True)  # no gradient of the last batch left on the networks

    def _collapse_guard(self: Any, Z: Tensor, opt: torch.optim.Optimizer | None = None,
                        labels: Tensor | None = None) -> list[int]:
        """:func:`rbfkmeans.deep.guard.collapse_guard` with this clusterer's thresholds, counting
        clusters by ``labels`` (default: nearest centroid)."""
        return collapse_guard(self.layer_, Z, self.min_cluster_fraction, self.merge_tol, opt,
                              labels)
