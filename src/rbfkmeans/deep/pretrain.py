r"""Pretraining of the deep clusterer's networks, and the positives both stages draw.

``L_pre = MSE(g(z), x) + mu * l_nce(z, z+; tau)`` per minibatch
(:func:`~rbfkmeans.deep.losses.neighbor_contrastive_loss`), for ``pretrain_epochs`` epochs with
Adam. The positive ``x+`` of a row is one of its ``m`` nearest neighbours in input space, drawn
at random each time; on images (``image_shape``) with ``augment``, ``rotation`` or ``scaling``
set, the row and its positive are each moved by up to ``augment`` pixels, turned by up to
``rotation`` degrees and rescaled by up to ``1 + scaling`` (:mod:`rbfkmeans.deep.augment`), so
the pair differs by more than the graph's edge. Reconstruction always targets the unshifted row.

:class:`PretrainMixin` holds this stage for :class:`~rbfkmeans.deep.joint.DeepClusterer`; it
reads the clusterer's settings and networks and writes ``pretrain_history_`` and
``pretrained_``; its batches, progress bars and positives serve the joint stage too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import NonFiniteError
from ._parameters import check_trainable, diverged
from .augment import random_affine, random_shift
from .checks import check_output_width, check_reconstruction
from .inputs import warn_if_unscaled
from .losses import neighbor_contrastive_loss

__all__ = ["PretrainMixin"]


@contextmanager
def training() -> Iterator[None]:
    """Autograd on and inference mode off, whatever the caller's modes: the stages train (inside
    ``torch.no_grad()`` or ``torch.inference_mode()`` a fit had failed in its first
    ``backward``)."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def training_rows(Xt: Tensor) -> Tensor:
    """``Xt``, or a normal copy of it where it was made in inference mode (autograd cannot save
    an inference tensor for the backward pass)."""
    return Xt.clone() if Xt.is_inference() else Xt


def finite_loss(loss: Tensor) -> Tensor:
    """``loss`` (a scalar) when it is finite; else :class:`~rbfkmeans.errors.NonFiniteError` (a
    weight times a term overflowed float32), which the stages report as
    :func:`~rbfkmeans.deep._parameters.diverged`."""
    if not bool(torch.isfinite(loss.detach())):
        raise NonFiniteError(f"the loss is not finite ({float(loss.detach())!r})")
    return loss


class PretrainMixin:
    """The pretraining stage (module docstring) of :class:`~rbfkmeans.deep.joint.DeepClusterer`
    (``self`` is the clusterer: its networks, settings and helpers)."""

    def _batches(self: Any, n: int, gen: torch.Generator) -> list[Tensor]:
        """A random order of the ``n`` rows (drawn from ``gen``), in minibatches of
        ``batch_size``: the batches of an epoch of either stage. A last batch of one row joins
        the one before it (batch statistics, as a BatchNorm layer's in training, need two)."""
        perm = torch.randperm(n, generator=gen).to(self._device)
        batches = list(perm.split(self.batch_size))
        if len(batches) > 1 and batches[-1].numel() == 1:
            batches[-2:] = [torch.cat(batches[-2:])]
        return batches

    def _progress(self: Any, total: int, desc: str) -> Any:
        """The ``total`` epochs of a stage, with a progress bar when ``verbose``."""
        from tqdm.auto import tqdm

        return tqdm(range(total), desc=desc, disable=not self.verbose, leave=False)

    @property
    def _augments(self: Any) -> bool:
        return self.augment > 0 or self.rotation > 0 or self.scaling > 0

    def _augment(self: Any, X: Tensor, gen: torch.Generator) -> Tensor:
        """``X`` (b, d) itself, or its images randomly moved, turned and rescaled
        (``augment``, ``rotation``, ``scaling``; :mod:`rbfkmeans.deep.augment`)."""
        if self.rotation > 0 or self.scaling > 0:
            return random_affine(X, self.image_shape, self.augment, self.rotation, self.scaling,
                                 gen)
        if self.augment > 0:
            return random_shift(X, self.image_shape, self.augment, gen)
        return X

    def _views(self: Any, Xt: Tensor, idx: Tensor, neighbors: Tensor,
               gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """The rows ``idx`` of ``Xt`` and one random neighbour of each (from ``neighbors``
        (n, m)), both transformed by :meth:`_augment`: (b, d) and (b, d)."""
        pick = torch.randint(neighbors.shape[1], (idx.numel(),), generator=gen)
        xb, xp = Xt[idx], Xt[neighbors[idx, pick.to(idx.device)]]
        return self._augment(xb, gen), self._augment(xp, gen)

    def pretrain(self: Any, X: Any) -> Any:
        """Train encoder and decoder on ``L_pre`` (module docstring): reconstruction plus
        ``contrastive_weight`` times the neighbour-contrastive loss, for ``pretrain_epochs``.
        The parameters and ``X`` are checked first (``ValueError`` where no parameter of the
        networks would train: :func:`~rbfkmeans.deep._parameters.check_trainable`); a call that
        raises (``KeyboardInterrupt`` too) leaves the clusterer and its networks exactly as they
        were, and one that returns leaves the networks in the train/eval modes they had."""
        self._check_params()
        Xt = self._as_tensor(X)
        check_output_width(self.decoder, Xt)
        check_trainable(self, Xt.shape[0], pretraining=True, joint=False)
        with self._all_or_nothing(), training():
            warn_if_unscaled(Xt)
            return self._pretrain(training_rows(Xt), None)

    def _pretrain(self: Any, Xt: Tensor, neighbors: Tensor | None) -> Any:
        """:meth:`pretrain` on a checked ``Xt``, with its kNN graph when the caller has it."""
        self.pretrain_history_: list[float] = []
        contrastive = self.contrastive_weight > 0 and self.n_neighbors > 0 and Xt.shape[0] > 1
        if self.pretrain_epochs == 0 or (self.decoder is None and not contrastive):
            self.pretrained_ = True
            return self
        self._embed_all(Xt[: self.batch_size])  # NaN weights named as the encoder's, not Z's
        if not contrastive:
            neighbors = None
        elif neighbors is None:
            neighbors = self._neighbors(Xt)
        gen = torch.Generator().manual_seed(int(self.random_state))
        opt = torch.optim.Adam(self._params(), lr=self.pretrain_lr)
        self.encoder.train()
        if self.decoder is not None:
            self.decoder.train()
        bar = self._progress(self.pretrain_epochs, "pretrain")
        for epoch in bar:
            total = 0.0
            for idx in self._batches(Xt.shape[0], gen):
                try:
                    loss = finite_loss(self._pretrain_step(Xt, idx, neighbors, gen))
                except NonFiniteError as exc:  # X is finite: the settings made it overflow
                    raise diverged(self, epoch, exc, pretraining=True) from exc
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * idx.numel()
            self.pretrain_history_.append(total / Xt.shape[0])
            bar.set_postfix(loss=f"{self.pretrain_history_[-1]:.4f}")
        opt.zero_grad(set_to_none=True)  # no gradient of the last batch left on the networks
        self.pretrained_ = True
        return self

    def _pretrain_step(self: Any, Xt: Tensor, idx: Tensor, neighbors: Tensor | None,
                       gen: torch.Generator) -> Tensor:
        """``L_pre`` of the minibatch ``idx``."""
        if neighbors is None:
            xb = Xt[idx]
            zb = self._embed(xb)
            return F.mse_loss(check_reconstruction(self.decoder(zb), xb), xb)
        xb, xp = self._views(Xt, idx, neighbors, gen)
        zb = self._embed(xb)
        loss = zb.new_zeros(())
        if self.decoder is not None:
            z_clean = zb if not self._augments else self._embed(Xt[idx])
            x_clean = Xt[idx]
            loss = loss + F.mse_loss(check_reconstruction(self.decoder(z_clean), x_clean),
                                     x_clean)
        z_pos = self._embed(xp)
        return loss + self.contrastive_weight * neighbor_contrastive_loss(
            F.normalize(zb, dim=1), F.normalize(z_pos, dim=1), self.contrastive_temperature)
