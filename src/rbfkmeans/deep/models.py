"""Small fully connected networks: the default encoder and decoder of the deep clusterer.

``mlp_autoencoder(64, (256, 256), 10)`` gives the encoder ``64 -> 256 -> 256 -> 10`` and the
mirrored decoder ``10 -> 256 -> 256 -> 64`` (ReLU between layers, linear in and out). Any
``nn.Module`` that maps (n, d) to (n, p) can replace them in
:class:`~rbfkmeans.deep.joint.DeepClusterer`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from .._validation import check_positive_int

__all__ = ["mlp", "mlp_autoencoder"]


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
