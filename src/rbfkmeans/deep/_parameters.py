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

from .._validation import check_positive_int
from ..assignments import check_assignment
from ..errors import NonFiniteError, value_error
from .augment import check_image_shape
from .checks import check_networks

__all__ = ["BOUNDS", "RULES", "check_parameters", "check_trainable"]


def _real(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    """A real number whose float is finite (``10**400`` is not: ``float`` overflows)."""
    try:
        return _real(v) and math.isfinite(float(v))
    except OverflowError:
        return False


def _weight(v: Any) -> bool:
    return _finite(v) and v >= 0


#: The most epochs a stage runs: a count torch, numpy and the progress bar hold as an int32.
MAX_EPOCHS = 2**31 - 1
#: The largest ``batch_size``: any value above the number of rows is one batch of all rows.
MAX_BATCH = 2**62
#: The smallest ``contrastive_temperature``: ``1 / tau`` must be finite in float32, the dtype
#: the embeddings are trained in (:func:`~rbfkmeans.deep.losses.neighbor_contrastive_loss`).
MIN_TAU = 1.0 / float(np.finfo(np.float32).max)
#: The largest ``scaling``: a magnification of ``1 + scaling`` already sends every pixel off
#: the image, and ``1 / (1 + scaling)`` must stay within float32 (the images' dtype).
MAX_SCALING = 1e30
#: The largest number of entries a tensor holds (torch's sizes are int64).
_MAX_ENTRIES = 2**63 - 1

RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "kmeans_weight": ("a finite number >= 0", _weight),
    "recon_weight": ("a finite number >= 0", _weight),
    "self_training_weight": ("a finite number >= 0", _weight),
    "T_start": ("a finite number > 0", lambda v: _finite(v) and v > 0),
    "T_end": ("a finite number > 0", lambda v: _finite(v) and v > 0),
    "lr": ("a finite number > 0", lambda v: _finite(v) and v > 0),
    "pretrain_lr": ("a finite number > 0", lambda v: _finite(v) and v > 0),
    "min_cluster_fraction": ("a number in [0, 1)", lambda v: _real(v) and 0 <= v < 1),
    "merge_tol": ("a finite number >= 0", _weight),
    "n_clusters": ("an integer >= 2", lambda v: _int(v) and v >= 2),
    "n_neighbors": ("an integer >= 0", lambda v: _int(v) and v >= 0),
    "pretrain_epochs": ("an integer >= 0", lambda v: _int(v) and v >= 0),
    "epochs": ("an integer >= 0", lambda v: _int(v) and v >= 0),
    "batch_size": ("an integer >= 1", lambda v: _int(v) and v >= 1),
    "target_update": ("an integer >= 1", lambda v: _int(v) and v >= 1),
    "contrastive_weight": ("a finite number >= 0", _weight),
    "contrastive_temperature": ("a finite number > 0", lambda v: _finite(v) and v > 0),
    "target_balance": ("a number in [0, 1]", lambda v: _real(v) and 0 <= v <= 1),
    "normalize": ("True or False", lambda v: isinstance(v, bool)),
    "neighbor_labels": ("True or False", lambda v: isinstance(v, bool)),
    "augment": ("an integer >= 0 (pixels)", lambda v: _int(v) and v >= 0),
    "rotation": ("a number in [0, 180] (degrees)", lambda v: _real(v) and 0 <= v <= 180),
    "scaling": ("a finite number >= 0", _weight),
    "graph_dims": ("None or an integer >= 1", lambda v: v is None or (_int(v) and v >= 1)),
    "joint_graph": ("'input' or 'embedding'",
                    lambda v: isinstance(v, str) and v in ("input", "embedding")),
    "consistency_weight": ("a finite number >= 0", _weight),
    "entropy_weight": ("a finite number >= 0", _weight),
    "random_state": ("an integer in [0, 2**32 - 1]", lambda v: _int(v) and 0 <= v < 2**32),
    "verbose": ("a bool or an integer >= 0",
                lambda v: isinstance(v, bool) or (_int(v) and v >= 0)),
}

#: The natural bounds of parameters that pass their rule in :data:`RULES`: name -> (the
#: bound, the check).
BOUNDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "pretrain_epochs": ("at most 2**31 - 1", lambda v: v <= MAX_EPOCHS),
    "epochs": ("at most 2**31 - 1", lambda v: v <= MAX_EPOCHS),
    "batch_size": ("at most 2**62 (a batch larger than the rows is all of them)",
                   lambda v: v <= MAX_BATCH),
    "contrastive_temperature": (f"at least {MIN_TAU:.3g} (below it 1 / tau overflows float32, "
                                "the embeddings' dtype)", lambda v: float(v) >= MIN_TAU),
    "scaling": (f"at most {MAX_SCALING:g} (a magnification that already sends every pixel off "
                "the image)", lambda v: v <= MAX_SCALING),
}

#: The weights of the loss terms, stored as floats (``2**70`` is a weight; as an int it
#: overflows torch's scalars).
_FLOATS = ("kmeans_weight", "recon_weight", "self_training_weight", "contrastive_weight",
           "consistency_weight", "entropy_weight")


def _stored(name: str, value: Any) -> Any:
    """``value`` of the parameter ``name`` (which passed its rule) as the clusterer keeps it:
    integers as Python ints (torch takes no NumPy integer as a size), the weights as floats."""
    if name in _FLOATS:
        return float(value)
    if _int(value):
        return int(value)
    return value


def check_rule(name: str, value: Any) -> Any:
    """``value`` of the parameter ``name`` as it is stored (:func:`_stored`) when it passes
    its rule in :data:`RULES` and its bound in :data:`BOUNDS`; ``ValueError`` naming the
    parameter, the rule (and the bound) and the value otherwise."""
    rule, ok = RULES[name]
    if not ok(value):
        raise value_error(value, f"{name} must be {rule}; got {value!r}")
    bound, within = BOUNDS.get(name, ("", lambda v: True))
    if not within(value):
        raise ValueError(f"{name} must be {rule}, {bound}; got {value!r}")
    return _stored(name, value)


def _check_clusterer(dc: Any) -> None:
    from .joint import DeepClusterer  # joint imports this module

    if not isinstance(dc, DeepClusterer):
        raise TypeError(f"dc must be a DeepClusterer; got {type(dc).__name__}")


def check_parameters(dc: Any) -> None:
    """Check every parameter of the clusterer ``dc`` against :data:`RULES`, the networks
    (:func:`~rbfkmeans.deep.checks.check_networks`), the mapping, ``T_start >= T_end``, the
    image shape, and that moves, turns and rescalings have an image shape to act on (and a
    sampling grid within float32); then store the integer parameters as Python
    ints and the weights as floats (:func:`check_rule`). ``TypeError`` unless ``dc`` is a
    :class:`~rbfkmeans.deep.DeepClusterer`."""
    _check_clusterer(dc)
    check_networks(dc.encoder, dc.decoder)
    check_assignment(dc.assignment)
    stored = {name: check_rule(name, getattr(dc, name)) for name in RULES}
    if dc.T_start < dc.T_end:
        raise ValueError(f"T_start must be >= T_end; got T_start={dc.T_start!r}, "
                         f"T_end={dc.T_end!r}")
    if dc.image_shape is not None:
        check_image_shape(dc.image_shape)
        augment, scaling = stored["augment"], stored["scaling"]
        # the sampling grid moves pixels by up to augment * (1 + scaling) image widths
        if (dc.rotation > 0 or scaling > 0) and (
                augment > MAX_SCALING or (1.0 + scaling) * (1.0 + augment) > MAX_SCALING):
            raise ValueError(f"augment={dc.augment!r} and scaling={dc.scaling!r} move and "
                                 f"magnify the images past float32's range: (1 + scaling) * "
                                 f"(1 + augment) must be <= {MAX_SCALING:g}")
    if dc._augments and dc.image_shape is None:
        raise ValueError(f"augment={dc.augment!r}, rotation={dc.rotation!r}, "
                         f"scaling={dc.scaling!r} transform images: they need image_shape; "
                         "got image_shape=None")
    for name, value in stored.items():
        setattr(dc, name, value)


def settings(dc: Any, *, pretraining: bool) -> str:
    """The settings of ``dc`` under which a stage's values may grow past float32, for the
    message of a stage that did not stay finite: its learning rate, weights, temperatures."""
    names = (("pretrain_lr", "recon_weight", "contrastive_weight", "contrastive_temperature")
             if pretraining else
             ("lr", "kmeans_weight", "recon_weight", "self_training_weight",
              "consistency_weight", "entropy_weight", "T_start", "T_end"))
    return ", ".join(f"{name}={getattr(dc, name)!r}" for name in names)


def diverged(dc: Any, epoch: int, exc: Exception, *, pretraining: bool) -> NonFiniteError:
    """The error of a stage whose values stopped being finite at ``epoch`` (``exc``, a
    :class:`~rbfkmeans.errors.NonFiniteError` raised inside it; ``X`` was checked finite before
    the stage started): it names the settings that can cause it."""
    stage = "pretraining" if pretraining else "joint training"
    rate = "pretrain_lr" if pretraining else "lr"
    return NonFiniteError(f"{stage} did not stay finite at epoch {epoch}: X is finite, so a "
                          f"learning rate ({rate}), weight or temperature may be too large "
                          f"({settings(dc, pretraining=pretraining)}); {exc}")


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
      parameter in the encoder or the decoder.

    Also ``ValueError`` naming ``augment`` where a batch of ``min(batch_size, n_rows)`` images,
    each padded by ``augment`` pixels a side to be shifted, would hold more entries than
    torch's int64 sizes can count; ``TypeError`` unless ``dc`` is a
    :class:`~rbfkmeans.deep.DeepClusterer`, ``TypeError``/``ValueError`` naming ``n_rows``
    unless it is an integer >= 0."""
    _check_clusterer(dc)
    n_rows = check_positive_int(n_rows, "n_rows", minimum=0)
    if dc.image_shape is not None and dc.augment > 0 and not (dc.rotation > 0 or dc.scaling > 0):
        c, h, w = check_image_shape(dc.image_shape)
        a, rows = int(dc.augment), min(int(dc.batch_size), n_rows)
        if rows * c * (h + 2 * a) * (w + 2 * a) > _MAX_ENTRIES:
            raise ValueError(f"augment={dc.augment!r} pads each ({c}, {h}, {w}) image to "
                             f"({c}, {h + 2 * a}, {w + 2 * a}): a batch of {rows} of them holds "
                             f"more than 2**63 - 1 values (torch's sizes are int64); give a "
                             f"smaller augment (a few pixels)")
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
