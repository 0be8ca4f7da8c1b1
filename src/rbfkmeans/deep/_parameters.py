"""The validation table of :class:`~rbfkmeans.deep.DeepClusterer`'s parameters: name ->
(what it must be, the check), and :func:`check_parameters`, which raises ``ValueError`` naming
the parameter, the rule and the value for the first that fails (and checks the rules between
them, the networks and the mapping)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..assignments import check_assignment
from .augment import check_image_shape
from .checks import check_networks

__all__ = ["RULES", "check_parameters"]


def _real(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "kmeans_weight": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "recon_weight": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "self_training_weight": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "T_start": ("a finite number > 0", lambda v: _real(v) and 0 < v < math.inf),
    "T_end": ("a finite number > 0", lambda v: _real(v) and 0 < v < math.inf),
    "lr": ("a finite number > 0", lambda v: _real(v) and 0 < v < math.inf),
    "pretrain_lr": ("a finite number > 0", lambda v: _real(v) and 0 < v < math.inf),
    "min_cluster_fraction": ("a number in [0, 1)", lambda v: _real(v) and 0 <= v < 1),
    "merge_tol": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "n_clusters": ("an integer >= 2", lambda v: _int(v) and v >= 2),
    "n_neighbors": ("an integer >= 0", lambda v: _int(v) and v >= 0),
    "pretrain_epochs": ("an integer >= 0", lambda v: _int(v) and v >= 0),
    "epochs": ("an integer >= 0", lambda v: _int(v) and v >= 0),
    "batch_size": ("an integer >= 1", lambda v: _int(v) and v >= 1),
    "target_update": ("an integer >= 1", lambda v: _int(v) and v >= 1),
    "contrastive_weight": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "contrastive_temperature": ("a finite number > 0", lambda v: _real(v) and 0 < v < math.inf),
    "target_balance": ("a number in [0, 1]", lambda v: _real(v) and 0 <= v <= 1),
    "normalize": ("True or False", lambda v: isinstance(v, bool)),
    "neighbor_labels": ("True or False", lambda v: isinstance(v, bool)),
    "augment": ("an integer >= 0 (pixels)", lambda v: _int(v) and v >= 0),
    "rotation": ("a number in [0, 180] (degrees)", lambda v: _real(v) and 0 <= v <= 180),
    "scaling": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "graph_dims": ("None or an integer >= 1", lambda v: v is None or (_int(v) and v >= 1)),
    "joint_graph": ("'input' or 'embedding'", lambda v: v in ("input", "embedding")),
    "consistency_weight": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "entropy_weight": ("a finite number >= 0", lambda v: _real(v) and 0 <= v < math.inf),
    "random_state": ("an integer in [0, 2**32 - 1]", lambda v: _int(v) and 0 <= v < 2**32),
}


def check_parameters(dc: Any) -> None:
    """Check every parameter of the clusterer ``dc`` against :data:`RULES`, the networks
    (:func:`~rbfkmeans.deep.checks.check_networks`), the mapping, ``T_start >= T_end``, the
    image shape, and that moves, turns and rescalings have an image shape to act on."""
    check_networks(dc.encoder, dc.decoder)
    check_assignment(dc.assignment)
    for name, (rule, ok) in RULES.items():
        value = getattr(dc, name)
        if not ok(value):
            raise ValueError(f"{name} must be {rule}; got {value!r}")
    if dc.T_start < dc.T_end:
        raise ValueError(f"T_start must be >= T_end; got T_start={dc.T_start!r}, "
                         f"T_end={dc.T_end!r}")
    if dc.image_shape is not None:
        check_image_shape(dc.image_shape)
    if dc._augments and dc.image_shape is None:
        raise ValueError(f"augment={dc.augment!r}, rotation={dc.rotation!r}, "
                         f"scaling={dc.scaling!r} transform images: they need image_shape; "
                         "got image_shape=None")
