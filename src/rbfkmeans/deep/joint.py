r"""Clustering and representation learned together: an encoder trained through a k-means layer.

An encoder ``f`` (any ``nn.Module``) maps inputs ``x_i`` to embeddings ``z_i = f(x_i)`` (projected
onto the unit sphere when ``normalize=True``), a :class:`~rbfkmeans.KMeansLayer` with centroids
``C`` (k, p) in that space assigns them, ``R = m(-D / 2T)``, and an optional decoder ``g``
reconstructs the input. Training has three stages.

1. **Pretraining** of encoder and decoder on reconstruction plus a neighbour-contrastive term
   (weight ``mu``, ``contrastive_weight``;
   :func:`~rbfkmeans.deep.losses.neighbor_contrastive_loss`), each row's positive a random one
   of its ``m = n_neighbors`` nearest neighbours in input space:

   .. math::

       L_{pre} = \frac{1}{|B|\,d} \sum_{i \in B} \lVert g(z_i) - x_i \rVert^2
                 \;+\; \mu\, \ell_{nce}\big(\{z_i\}, \{z_{n(i)}\}; \tau\big).

2. **The start**: ``C`` from :class:`~rbfkmeans.RBFKMeans` (same mapping) on the pretrained
   embedding.
3. **Joint training** of encoder, decoder and centroids with Adam on

   .. math::

       L = \alpha\, \frac{F_T(Z_B, C)}{|B|}
           \;+\; \lambda\, \frac{1}{|B|\,d} \sum_{i \in B} \lVert g(z_i) - x_i \rVert^2
           \;+\; \beta\, \frac{1}{|B|} \sum_{i \in B} \frac{\ell_T(P_i; z_i, C)}{2T},

   ``F_T`` the layer's relaxed k-means objective at temperature ``T`` (:mod:`rbfkmeans.objectives`)
   and ``l_T`` the Fenchel-Young loss of the mapping between the memberships ``R_i`` and targets
   ``P_i`` (for softmax ``l_T / 2T = KL(P_i || R_i)``: DEC/IDEC's self-training with the layer's
   Gaussian memberships as ``q``). The targets, refreshed every ``target_update`` epochs, sharpen
   memberships averaged over the same input-space neighbours, divided by the soft cluster sizes
   to the power ``gamma`` (``target_balance``; 1 is DEC's rule):
   ``P_ij ∝ Rbar_ij^2 / (sum_l Rbar_lj)^gamma`` (:mod:`rbfkmeans.deep.losses`).

   With ``consistency_weight`` ``eta > 0`` the loss also has ``eta * l_nc``, the agreement of the
   layer's memberships of each row and of one of its neighbours (both randomly moved, turned and
   rescaled on images: ``augment``, ``rotation``, ``scaling``), against the entropy of the
   batch's mean membership (:func:`~rbfkmeans.deep.losses.neighbor_consistency_loss`).

The neighbour graph (:func:`~rbfkmeans.deep.graph.knn_graph`: exact, by blocked products, on the
inputs or on their ``graph_dims`` leading principal axes) gives the contrastive positives; the
joint stage's targets, positives and vote use it too, or (``joint_graph="embedding"``) the graph
of the pretrained embedding. No stage forms an (n, n) matrix, and the per-epoch passes over all
rows (embeddings, memberships, targets, labels) go a block of rows at a time.

The fitted labels of the training rows are the argmax of ``Rbar``, the memberships averaged
over the same neighbours (the vote the targets sharpen; ``neighbor_labels``), or the nearest
centroid where the graph cannot tell rows apart or the vote leaves more clusters empty
(:mod:`~rbfkmeans.deep.inference`); :meth:`predict`, for any rows, is the nearest centroid.

The temperature cools geometrically from ``T_start`` to ``T_end`` across the joint epochs
(:func:`rbfkmeans.schedules.geometric_schedule`; both in units of the first critical temperature
``T_c`` of the initial embedding under the mapping); after every epoch a collapse guard re-seeds
any cluster that has become (nearly) empty in the labels ``fit`` reports, or whose centroid has
merged with another, by splitting the largest cluster along its principal axis.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..assignments import check_assignment
from ..errors import NonFiniteError
from ..layer import KMeansLayer
from ..schedules import critical_temperature
from ._parameters import check_parameters, check_rule, check_trainable, diverged
from .checks import all_or_nothing, check_input_width, check_output_width
from .graph import knn_graph
from .inference import InferenceMixin
from .inputs import as_rows, warn_if_unscaled
from .params import ParamsMixin
from .pretrain import PretrainMixin, training, training_rows
from .stage import JointStageMixin
from .start import init_centroids

__all__ = ["DeepClusterer"]


class DeepClusterer(ParamsMixin, PretrainMixin, JointStageMixin, InferenceMixin):
    r"""Joint training of an encoder, an optional decoder and a k-means layer (module docstring).

    Parameters
    ----------
    encoder : nn.Module
        Maps (n, d) to embeddings (n, p). Trained in place.
    decoder : nn.Module or None
        Maps embeddings (n, p) back to (n, d). Without one there is no reconstruction term
        (``recon_weight`` is ignored) and pretraining is the contrastive term alone (none when
        ``contrastive_weight`` or ``n_neighbors`` is 0: the encoder should then come pretrained).
    n_clusters : int, default 10
    assignment : {"softmax", "entmax15", "sparsemax", "hard"}, default "softmax"
        The layer's simplex mapping (and the one RBFKMeans initialises with).
    kmeans_weight, recon_weight, self_training_weight : float
        ``alpha``, ``lambda``, ``beta`` of the joint loss.
    n_neighbors : int, default 10
        Input-space neighbours: the positives of the contrastive pretraining and the rows
        averaged into the self-training targets (0: no contrastive term, DEC's targets).
    contrastive_weight : float, default 1.0
        ``mu``, the weight of the neighbour-contrastive term in pretraining (0: reconstruction
        only).
    contrastive_temperature : float, default 1.0
        ``tau`` of that term (cosine similarities are divided by it).
    target_balance : float in [0, 1], default 0.5
        ``gamma``: the self-training targets are divided by the soft cluster sizes to this power
        (1: DEC's rule, which pulls clusters towards equal sizes; 0: plain sharpening).
    normalize : bool, default True
        Project embeddings onto the unit sphere (so distances, hence ``T``, have a fixed scale).
    neighbor_labels : bool, default True
        ``labels_`` of the training rows as the argmax of their memberships averaged with their
        ``n_neighbors`` input-space neighbours' (``Rbar``, the average the targets sharpen:
        :func:`~rbfkmeans.deep.losses.neighbor_average`); ``False``, or ``n_neighbors = 0``:
        the layer's nearest centroid, as :meth:`predict` gives for any rows (also where the
        graph cannot tell rows apart or the vote leaves more clusters empty than it:
        :mod:`~rbfkmeans.deep.inference`).
    augment : int, default 0
        Images only (``image_shape``): each contrastive or consistency positive, and its row,
        translated by a random offset of up to this many pixels
        (:func:`~rbfkmeans.deep.augment.random_shift`); 0: none.
    rotation : float, default 0.0
        Images only: each of them also turned by a random angle of up to this many degrees.
    scaling : float, default 0.0
        Images only: each of them also magnified by a random factor in
        ``[1 / (1 + scaling), 1 + scaling]`` (with ``rotation`` or ``scaling`` > 0 the images are
        resampled bilinearly, :func:`~rbfkmeans.deep.augment.random_affine`).
    image_shape : (h, w) or (c, h, w), optional
        How a row of ``X`` is an image (needed by ``augment``, ``rotation``, ``scaling``).
    graph_dims : int, optional
        Build the input-space neighbour graph on the rows' leading ``graph_dims`` principal axes
        (default: on the full rows).
    joint_graph : {"input", "embedding"}, default "input"
        The graph of the joint stage's targets, positives and vote: the input-space graph, or the
        kNN graph of the pretrained embedding.
    consistency_weight : float, default 0.0
        ``eta``: weight of the neighbour-consistency term in the joint loss (0: none).
    entropy_weight : float, default 5.0
        ``omega`` of that term: weight of the batch's mean-membership entropy.
    T_start, T_end : float
        Temperatures of the first and last joint epoch, in units of the critical temperature
        ``T_c`` of the initial embedding (:func:`rbfkmeans.schedules.critical_temperature`).
        ``T_start == T_end`` disables annealing.
    pretrain_epochs, epochs, batch_size, lr, pretrain_lr : training lengths and Adam steps.
    target_update : int, default 1
        Epochs between refreshes of the self-training targets.
    min_cluster_fraction : float, default 0.1
        Collapse guard: a cluster with fewer than ``min_cluster_fraction * n / k`` points is
        re-seeded (``0`` re-seeds only empty clusters).
    merge_tol : float, default 0.05
        Collapse guard: two centroids closer (squared) than ``merge_tol`` times the mean squared
        distance of the points to their centroid count as merged; the smaller is re-seeded.
    random_state : int, default 0
        Seeds batch order and the k-means initialisation (the modules' initial weights are the
        caller's: see :meth:`mlp`).
    verbose : bool or int >= 0, default False
        A progress bar per epoch.

    Attributes (after ``fit``)
    --------------------------
    layer_ : KMeansLayer
    labels_ : ndarray (n,)           cluster of each training row after joint training (the
                                     neighbour vote, or the nearest centroid: ``neighbor_labels``,
                                     :mod:`~rbfkmeans.deep.inference`)
    init_labels_ : ndarray (n,)      RBFKMeans labels on the pretrained embedding ("two-step")
    init_embedding_ : ndarray (n, p) the pretrained embedding
    critical_temperature_ : float    ``T_c`` of the initial embedding
    temperatures_ : ndarray          absolute temperature of each joint epoch
    history_ : list of dict          per epoch: T, loss terms, re-seeded clusters, label changes
    pretrain_history_ : list of float
    n_features_in_ : int             the number of features of the rows fitted
    timings_ : dict                  seconds of each stage

    ``fit``, ``pretrain`` and ``init_layer`` check every parameter (also one set as an attribute
    after construction) and ``X`` before changing anything, and are all or nothing: one that
    raises leaves the attributes, the networks' weights and the layer as they were.

    ``get_params``/``set_params`` follow scikit-learn (:mod:`~rbfkmeans.deep.params`).
    :func:`sklearn.base.clone` gives an unfitted clusterer whose networks are deep copies of the
    networks as they stand, trained weights included once fitted (they are trained in place):
    clone an unfitted clusterer with fresh networks (e.g. :meth:`mlp`) to repeat its fit.
    """

    def __init__(
        self,
        encoder: nn.Module,
        decoder: nn.Module | None = None,
        n_clusters: int = 10,
        *,
        assignment: str = "softmax",
        kmeans_weight: float = 0.01,
        recon_weight: float = 1.0,
        self_training_weight: float = 1.0,
        n_neighbors: int = 10,
        contrastive_weight: float = 1.0,
        contrastive_temperature: float = 1.0,
        target_balance: float = 0.5,
        normalize: bool = True,
        neighbor_labels: bool = True,
        augment: int = 0,
        rotation: float = 0.0,
        scaling: float = 0.0,
        image_shape: tuple[int, ...] | None = None,
        graph_dims: int | None = None,
        joint_graph: str = "input",
        consistency_weight: float = 0.0,
        entropy_weight: float = 5.0,
        T_start: float = 0.03,
        T_end: float = 0.03,
        pretrain_epochs: int = 200,
        epochs: int = 50,
        batch_size: int = 256,
        lr: float = 1e-3,
        pretrain_lr: float = 1e-3,
        target_update: int = 1,
        min_cluster_fraction: float = 0.1,
        merge_tol: float = 0.05,
        random_state: int = 0,
        verbose: bool = False,
    ) -> None:
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be a torch.nn.Module; got {type(encoder).__name__}")
        if decoder is not None and not isinstance(decoder, nn.Module):
            raise TypeError(
                f"decoder must be a torch.nn.Module or None; got {type(decoder).__name__}"
            )
        self.encoder = encoder
        self.decoder = decoder
        self.n_clusters = n_clusters
        self.assignment = check_assignment(assignment)
        self.kmeans_weight = kmeans_weight
        self.recon_weight = recon_weight
        self.self_training_weight = self_training_weight
        self.n_neighbors = n_neighbors
        self.contrastive_weight = contrastive_weight
        self.contrastive_temperature = contrastive_temperature
        self.target_balance = target_balance
        self.normalize = normalize
        self.neighbor_labels = neighbor_labels
        self.augment = augment
        self.rotation = rotation
        self.scaling = scaling
        self.image_shape = image_shape
        self.graph_dims = graph_dims
        self.joint_graph = joint_graph
        self.consistency_weight = consistency_weight
        self.entropy_weight = entropy_weight
        self.T_start = T_start
        self.T_end = T_end
        self.pretrain_epochs = pretrain_epochs
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.pretrain_lr = pretrain_lr
        self.target_update = target_update
        self.min_cluster_fraction = min_cluster_fraction
        self.merge_tol = merge_tol
        self.random_state = random_state
        self.verbose = verbose
        self._check_params()
        self.pretrained_ = False

    @classmethod
    def mlp(
        cls,
        n_features: int,
        n_clusters: int,
        *,
        hidden: tuple[int, ...] = (128, 128),
        n_latent: int = 10,
        random_state: int = 0,
        **kwargs: Any,
    ) -> DeepClusterer:
        """A clusterer with a fresh MLP autoencoder (:func:`rbfkmeans.deep.models.mlp_autoencoder`)
        whose weights are seeded by ``random_state`` (checked by its rule first)."""
        from .models import mlp_autoencoder

        random_state = check_rule("random_state", random_state)
        encoder, decoder = mlp_autoencoder(n_features, hidden, n_latent, seed=random_state)
        return cls(encoder, decoder, n_clusters, random_state=random_state, **kwargs)

    @classmethod
    def cnn(
        cls,
        image_shape: tuple[int, ...],
        n_clusters: int,
        *,
        channels: tuple[int, ...] = (16, 32),
        hidden: int = 256,
        n_latent: int = 10,
        random_state: int = 0,
        **kwargs: Any,
    ) -> DeepClusterer:
        """A clusterer with a fresh small CNN encoder (:func:`rbfkmeans.deep.models.cnn_encoder`,
        seeded by ``random_state``) and no decoder, for images stored as rows of pixels of
        ``image_shape``: pretraining is the contrastive term alone."""
        from .models import cnn_encoder

        random_state = check_rule("random_state", random_state)
        encoder = cnn_encoder(image_shape, n_latent, channels=channels, hidden=hidden,
                              seed=random_state)
        return cls(encoder, None, n_clusters, image_shape=tuple(image_shape),
                   random_state=random_state, **kwargs)

    def _check_params(self) -> None:
        """Every parameter (:func:`~rbfkmeans.deep._parameters.check_parameters`): at
        construction, and again at the start of :meth:`fit`, :meth:`pretrain` and
        :meth:`init_layer`, before anything changes (one may have been set since)."""
        check_parameters(self)

    # -- helpers ------------------------------------------------------------------------------
    @property
    def _device(self) -> torch.device:
        p = next(self.encoder.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def _as_tensor(self, X: Any) -> Tensor:
        """``X`` checked (:func:`~rbfkmeans.deep.inputs.as_rows`) and of the encoder's width."""
        Xt = as_rows(X, self._device, self.image_shape)
        check_input_width(self.encoder, Xt)
        return Xt

    def _all_or_nothing(self) -> AbstractContextManager[None]:
        return all_or_nothing(self, self.encoder, self.decoder, getattr(self, "layer_", None))

    def _params(self) -> list[Tensor]:
        """The parameters of the encoder and the decoder, each once: a layer the two share
        (tied weights) would otherwise take two optimiser steps per batch."""
        decoder = [] if self.decoder is None else list(self.decoder.parameters())
        return list({id(p): p for p in [*self.encoder.parameters(), *decoder]}.values())

    def _neighbors(self, Xt: Tensor) -> Tensor:
        """The input-space graph (n, m) (:func:`~rbfkmeans.deep.graph.knn_graph`)."""
        return knn_graph(Xt, self.n_neighbors, dims=self.graph_dims, progress=self.verbose)

    # -- stages -------------------------------------------------------------------------------
    def init_layer(self, X: Any) -> DeepClusterer:
        """Initialise the k-means layer: RBFKMeans on the current embedding of ``X``; sets
        ``layer_``, ``init_labels_``, ``init_embedding_``, ``critical_temperature_`` (all or
        none of them)."""
        self._check_params()
        Xt = self._as_tensor(X)
        k = self.n_clusters
        if Xt.shape[0] < k:
            raise ValueError(f"X must have at least n_clusters={k} rows; got {Xt.shape[0]}")
        with self._all_or_nothing():
            return self._init_layer(Xt)

    def _init_layer(self, Xt: Tensor) -> DeepClusterer:
        """:meth:`init_layer` on a checked ``Xt``."""
        k = self.n_clusters
        Z = self.transform(Xt)  # (n, p)
        C, labels = init_centroids(Z, k, self.assignment, int(self.random_state))
        Zt = torch.as_tensor(Z)
        self.critical_temperature_ = critical_temperature(Zt, self.assignment, k)
        self.layer_ = KMeansLayer(
            torch.as_tensor(C, dtype=torch.float32), temperature=0.0, assignment=self.assignment
        ).to(self._device)
        self.init_labels_ = labels.astype(np.int64)
        self.init_embedding_ = Z
        return self

    def fit(self, X: Any, y: Any = None) -> DeepClusterer:
        """Pretrain (unless :meth:`pretrain` ran since the last fit), initialise the layer, then
        train jointly (module docstring). ``y`` is ignored. ``timings_`` holds the seconds of each
        stage. The networks are the caller's and are trained in place: a second ``fit`` pretrains
        again from where the first left them (``pretrained_`` is False after a fit), it does not
        start from their first weights. Training runs with gradients whatever the caller's grad
        mode (``torch.no_grad()`` or ``inference_mode`` around ``fit``), and leaves no gradient
        of its last batch on the parameters.

        The parameters and ``X`` are checked before anything changes (settings that leave the
        loss of a stage without a gradient raise ``ValueError``), a call that raises
        (``KeyboardInterrupt`` too) leaves the clusterer, its networks and its layer exactly as
        they were, and one that returns leaves the networks in the train/eval modes they had."""
        t0 = time.perf_counter()
        self._check_params()
        Xt = self._as_tensor(X)
        n, k = Xt.shape[0], self.n_clusters
        if n < k:
            raise ValueError(f"X must have at least n_clusters={k} rows; got {n}")
        check_output_width(self.decoder, Xt)
        check_trainable(self, n, pretraining=not self.pretrained_, joint=True)
        with self._all_or_nothing(), training():
            return self._fit(training_rows(Xt), t0)

    def _fit(self, Xt: Tensor, t0: float) -> DeepClusterer:
        """:meth:`fit` on a checked ``Xt``, its clock started at ``t0``."""
        warn_if_unscaled(Xt)
        neighbors = self._neighbors(Xt) if self.n_neighbors > 0 else None  # (n, m)
        self.timings_: dict[str, float] = {"graph_s": time.perf_counter() - t0}
        t0 = time.perf_counter()
        if not self.pretrained_:
            self._pretrain(Xt, neighbors)
        self.timings_["pretrain_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            self._init_layer(Xt)
        except NonFiniteError as exc:  # the pretrained encoder's embedding is not finite
            if not getattr(self, "pretrain_history_", None):
                raise
            raise diverged(self, self.pretrain_epochs - 1, exc, pretraining=True) from exc
        if neighbors is not None and self.joint_graph == "embedding":
            neighbors = knn_graph(torch.as_tensor(self.init_embedding_, device=self._device),
                                  self.n_neighbors, progress=self.verbose)
        self.timings_["start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._joint(Xt, neighbors)
        self.labels_ = self._fitted_labels(self._embed_all(Xt), neighbors).cpu().numpy()
        self.n_features_in_ = Xt.shape[1]
        self.timings_["joint_s"] = time.perf_counter() - t0
        self.pretrained_ = False  # the networks now hold the joint training: a new fit pretrains
        return self

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).labels_
