"""Small networks: the default encoder and decoder of the deep clusterer, and a small CNN.

``mlp_autoencoder(64, (256, 256), 10)`` gives the encoder ``64 -> 256 -> 256 -> 10`` and the
mirrored decoder ``10 -> 256 -> 256 -> 64`` (ReLU between layers, linear in and out).
``cnn_encoder((28, 28), 10)`` is a two-convolution encoder for images stored as pixel rows. Any
``nn.Module`` that maps (n, d) to (n, p) can replace them in
:class:`~rbfkmeans.deep.joint.DeepClusterer`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from .._validation import check_positive_int

__all__ = ["cnn_encoder", "mlp", "mlp_autoencoder"]


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """``Linear(s0, s1) -> ReLU -> ... -> Linear(s_{m-1}, s_m)`` (no activation after the last)."""
    sizes = [check_positive_int(s, "sizes[i]") for s in sizes]
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
    hidden = [check_positive_int(h, "hidden[i]") for h in hidden]
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

    c, h, w = check_image_shape(tuple(image_shape) if not isinstance(image_shape, int)
                                else image_shape)
    n_latent = check_positive_int(n_latent, "n_latent")
    hidden = check_positive_int(hidden, "hidden")
    chans = [check_positive_int(ch, "channels[i]") for ch in channels]
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
