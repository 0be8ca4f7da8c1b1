"""Small networks: the default encoder and decoder of the deep clusterer, and a small CNN.

``mlp_autoencoder(64, (256, 256), 10)`` gives the encoder ``64 -> 256 -> 256 -> 10`` and the
mirrored decoder ``10 -> 256 -> 256 -> 64`` (ReLU between layers, linear in and out).
``cnn_encoder((28, 28), 10)`` is a two-convolution encoder for images stored as pixel rows. Any
``nn.Module`` that maps (n, d) to (n, p) can replace them in
:class:`~rbfkmeans.deep.joint.DeepClusterer`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .._validation import check_positive_int

__all__ = ["cnn_encoder", "input_width", "mlp", "mlp_autoencoder", "output_width"]

#: layers that leave a row's width as it is (skipped when reading a network's widths)
_SAME_WIDTH = (nn.Identity, nn.Flatten, nn.Dropout, nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid,
               nn.LeakyReLU)


def _layers(module: object) -> list[nn.Module] | None:
    """The layers of an ``nn.Sequential`` in call order, nested ones flattened; ``None`` for
    anything else (whose order of calls its registration need not follow)."""
    if not isinstance(module, nn.Sequential):
        return None
    out: list[nn.Module] = []
    for m in module:
        inner = _layers(m)
        out.extend(inner if inner is not None else [m])
    return out


def input_width(module: object) -> int | None:
    """The number of features of the rows an ``nn.Sequential`` network reads, from its first
    ``Linear`` (``in_features``) or ``Unflatten(1, (c, h, w))`` (``c * h * w``), layers that
    keep the width skipped; ``None`` when it cannot be read off (another network, another first
    layer, a lazy ``Linear``)."""
    layers = _layers(module)
    for m in layers or []:
        if isinstance(m, nn.Linear) and not isinstance(m, nn.LazyLinear):
            return int(m.in_features)
        if isinstance(m, nn.Unflatten):
            size = m.unflattened_size
            if m.dim != 1 or not all(isinstance(s, int) and s > 0 for s in size):
                return None
            return math.prod(size)
        if not isinstance(m, _SAME_WIDTH):
            return None
    return None


def output_width(module: object) -> int | None:
    """The number of features an ``nn.Sequential`` network ending in a ``Linear`` (layers that
    keep the width skipped) gives (``out_features``); ``None`` otherwise."""
    layers = _layers(module)
    for m in reversed(layers or []):
        if isinstance(m, nn.Linear) and not isinstance(m, nn.LazyLinear):
            return int(m.out_features)
        if not isinstance(m, _SAME_WIDTH):
            return None
    return None


def _check_seed(seed: object) -> int | None:
    """``seed`` as an int: ``None`` or an integer in ``[0, 2**64 - 1]`` (torch's seeds; numpy
    integers too), else ``TypeError``/``ValueError`` naming ``seed`` and the value."""
    if seed is None:
        return None
    value = check_positive_int(seed, "seed", minimum=0)
    if value >= 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64 - 1]; got {seed!r}")
    return value


def _sizes(values: Any, name: str) -> list[int]:
    """``values`` (a sequence of integers >= 1) as a list, each checked; errors name ``name``."""
    try:
        if isinstance(values, str | bytes):
            raise TypeError
        items = list(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of integers >= 1; got "
                        f"{type(values).__name__} {values!r}") from None
    return [check_positive_int(v, f"{name}[{i}]") for i, v in enumerate(items)]


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """``Linear(s0, s1) -> ReLU -> ... -> Linear(s_{m-1}, s_m)`` (no activation after the last)."""
    sizes = _sizes(sizes, "sizes")
    if len(sizes) < 2:
        raise ValueError(f"sizes must list at least an input and an output size; got {sizes!r}")
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def mlp_autoencoder(
    n_features: int,
    hidden: Sequence[int] = (256, 256),
    n_latent: int = 10,
    *,
    seed: int | None = None,
) -> tuple[nn.Sequential, nn.Sequential]:
    """An MLP encoder ``n_features -> hidden -> n_latent`` and its mirrored decoder.

    ``seed`` fixes the initial weights without touching torch's global random state.
    """
    n_features = check_positive_int(n_features, "n_features")
    n_latent = check_positive_int(n_latent, "n_latent")
    hidden = _sizes(hidden, "hidden")
    seed = _check_seed(seed)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        encoder = mlp([n_features, *hidden, n_latent])
        decoder = mlp([n_latent, *reversed(hidden), n_features])
    return encoder, decoder


def cnn_encoder(
    image_shape: Sequence[int] = (28, 28),
    n_latent: int = 10,
    *,
    channels: Sequence[int] = (16, 32),
    hidden: int = 256,
    seed: int | None = None,
) -> nn.Sequential:
    """A small convolutional encoder for images stored as rows of ``c * h * w`` pixels.

    Each entry of ``channels`` is a 5x5 convolution with stride 2 (padding 2, so each halves the
    height and width, rounding up) and a ReLU; then a ``Linear`` to ``hidden`` units, a ReLU and a
    ``Linear`` to ``n_latent``. With the defaults on 28x28 digits: 1 -> 16 -> 32 channels at 14x14
    and 7x7, 1,568 -> 256 -> 10, about 1.1 million multiply-adds an image (the MLP
    784-512-512-10 takes 0.67 million). ``seed`` fixes the initial weights without touching
    torch's global random state.
    """
    from .augment import check_image_shape

    shape: object = image_shape
    # a sequence (a tuple, a list, a torch.Size, an array); anything else is named below
    with contextlib.suppress(TypeError):
        shape = tuple(image_shape)
    c, h, w = check_image_shape(shape)
    n_latent = check_positive_int(n_latent, "n_latent")
    hidden = check_positive_int(hidden, "hidden")
    chans = _sizes(channels, "channels")
    seed = _check_seed(seed)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        layers: list[nn.Module] = [nn.Unflatten(1, (c, h, w))]
        for a, b in itertools.pairwise([c, *chans]):
            layers += [nn.Conv2d(a, b, 5, stride=2, padding=2), nn.ReLU()]
            h, w = (h + 1) // 2, (w + 1) // 2
        layers += [nn.Flatten(), nn.Linear((chans[-1] if chans else c) * h * w, hidden),
                   nn.ReLU(), nn.Linear(hidden, n_latent)]
        return nn.Sequential(*layers)
