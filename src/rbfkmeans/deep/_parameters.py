"""The validation table of :class:`~rbfkmeans.deep.DeepClusterer`'s parameters: name ->
(what it must be, the check), and :func:`check_parameters`, which raises ``ValueError`` naming
the parameter, the rule and the value for the first that fails (and checks the rules between
them, the networks and the mapping); and :func:`check_trainable`, which refuses settings under
which a stage would train on a loss with no gradient."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..assignments import check_assignment
from .augment import check_image_shape
from .checks import check_networks

__all__ = ["RULES", "check_parameters", "check_trainable"]


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


def _trains(network: Any) -> bool:
    """Whether ``network`` (an ``nn.Module`` or ``None``) has a parameter that requires a
    gradient."""
    return network is not None and any(p.requires_grad for p in network.parameters())


def check_trainable(dc: Any, n_rows: int, *, pretraining: bool, joint: bool) -> None:
    """``ValueError`` naming the parameters involved when a stage of the clusterer ``dc`` on
    ``n_rows`` rows would minimise a loss with no gradient (and stop inside ``backward``).

    * Pretraining (``pretraining``: it runs, ``pretrain_epochs > 0``) trains the encoder and the
      decoder on reconstruction (with a decoder) and the contrastive term (``contrastive_weight``
      and ``n_neighbors`` > 0, ``n_rows > 1``); where it has either term, the encoder or the
      decoder needs a parameter that requires a gradient.
    * Joint training (``joint``: ``epochs > 0``) needs a term: ``kmeans_weight``,
      ``self_training_weight`` or ``consistency_weight`` (with ``n_neighbors > 0``) > 0, each of
      which trains the centroids, or ``recon_weight > 0`` with a decoder, with a trainable
      parameter in the encoder or the decoder."""
    networks = _trains(dc.encoder) or _trains(dc.decoder)
    contrastive = dc.contrastive_weight > 0 and dc.n_neighbors > 0 and n_rows > 1
    if pretraining and dc.pretrain_epochs > 0 and (dc.decoder is not None or contrastive) \
            and not networks:
        which = "the encoder" if dc.decoder is None else "the encoder and the decoder"
        raise ValueError(f"pretrain_epochs={dc.pretrain_epochs!r} trains {which}, but no "
                         f"parameter of {which} requires a gradient: set pretrain_epochs=0 to "
                         "use them as they are, or give them trainable parameters "
                         "(requires_grad_(True))")
    if not joint or dc.epochs == 0:
        return
    recon = dc.decoder is not None and dc.recon_weight > 0
    if dc.kmeans_weight > 0 or dc.self_training_weight > 0 or (recon and networks) or (
        dc.consistency_weight > 0 and dc.n_neighbors > 0
    ):
        return
    recon_why = ("decoder=None" if dc.decoder is None else
                 f"recon_weight={dc.recon_weight!r}" if dc.recon_weight == 0 else
                 "no trainable parameter in the encoder or the decoder")
    raise ValueError(f"epochs={dc.epochs!r} trains on a loss with no term: "
                     f"kmeans_weight={dc.kmeans_weight!r}, "
                     f"self_training_weight={dc.self_training_weight!r}, "
                     f"consistency_weight={dc.consistency_weight!r} (with "
                     f"n_neighbors={dc.n_neighbors!r}) and no reconstruction ({recon_why}): "
                     "set one of the weights > 0, or epochs=0")
