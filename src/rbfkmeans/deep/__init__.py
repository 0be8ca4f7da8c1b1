"""End-to-end clustering: an encoder and the k-means layer trained jointly by backpropagation.

``DeepClusterer`` (joint.py) trains any encoder (and optional decoder) with a
:class:`~rbfkmeans.KMeansLayer` whose centroids live in the encoder's output space; ``losses``
holds the terms of its loss and ``guard`` its collapse guard; ``metrics`` scores clusterings
(Hungarian accuracy, NMI, ARI); ``datasets`` loads real data that ships with scikit-learn;
``experiment`` is the ``rbfkmeans deep-cluster`` command's work and ``plots`` draws its figures
from the saved files.
"""

from __future__ import annotations

from .datasets import DATASETS, Dataset, load_dataset
from .joint import DeepClusterer
from .losses import (
    fenchel_young_loss,
    mapping_entropy,
    neighbor_average,
    neighbor_contrastive_loss,
    self_training_targets,
)
from .metrics import ari, cluster_acc, evaluate, nmi
from .models import mlp, mlp_autoencoder
from .start import epoch_temperatures, init_centroids

__all__ = [
    "DATASETS",
    "Dataset",
    "DeepClusterer",
    "ari",
    "cluster_acc",
    "epoch_temperatures",
    "evaluate",
    "fenchel_young_loss",
    "init_centroids",
    "load_dataset",
    "mapping_entropy",
    "mlp",
    "mlp_autoencoder",
    "neighbor_average",
    "neighbor_contrastive_loss",
    "nmi",
    "self_training_targets",
]
