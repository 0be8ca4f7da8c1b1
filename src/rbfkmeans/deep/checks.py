"""What :class:`~rbfkmeans.deep.DeepClusterer` checks before a stage changes anything, and how a
stage that raises is undone.

A stage (``pretrain``, ``init_layer``, ``fit``) first checks the networks and the rows: the
encoder and the decoder are ``nn.Module`` s, ``X`` has the input width of an ``nn.Sequential``
encoder (read off its first layer, :func:`~rbfkmeans.deep.models.input_width`) and a
``Sequential`` decoder gives that width back. Then it
runs inside :func:`all_or_nothing`: training changes the networks in place (weights, buffers,
gradients, train/eval modes) and the clusterer's attributes one by one, so a stage that raises,
``KeyboardInterrupt`` included, puts all of them back as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parameter import is_lazy

from .._parameters import restored_on_failure
from .models import input_width, output_width

__all__ = ["all_or_nothing", "check_input_width", "check_networks", "check_output_width"]


def check_networks(encoder: Any, decoder: Any) -> None:
    """``TypeError`` naming ``encoder`` or ``decoder`` unless they are ``nn.Module`` s (the
    decoder may be ``None``) whose floating-point parameters are float32, the dtype the rows and
    the clustering layer are trained in; ``ValueError`` for parameters on the meta device."""
    if not isinstance(encoder, nn.Module):
        raise TypeError(f"encoder must be a torch.nn.Module; got {type(encoder).__name__}")
    if decoder is not None and not isinstance(decoder, nn.Module):
        raise TypeError(f"decoder must be a torch.nn.Module or None; got "
                        f"{type(decoder).__name__}")
    for name, network in (("encoder", encoder), ("decoder", decoder)):
        for p in () if network is None else network.parameters():
            if is_lazy(p):
                continue
            if p.is_floating_point() and p.dtype != torch.float32:
                raise TypeError(f"{name} must have float32 parameters (the rows and the "
                                f"clustering layer are float32); got {p.dtype}: call "
                                f"{name}.float()")
            if p.is_meta:
                raise ValueError(f"{name} has parameters on the meta device, which hold no "
                                 f"values to train; move it to a real device first (e.g. "
                                 f"{name}.to_empty(device='cpu') and initialise it)")


def check_input_width(encoder: nn.Module, Xt: Tensor) -> None:
    """``ValueError`` naming ``X`` unless the rows ``Xt`` (n, d) have the input width of an
    ``nn.Sequential`` encoder (module docstring). Other encoders are not run to find out (a
    forward pass may initialise them from its rows or draw random numbers): rows they cannot
    take raise in the stage, which :func:`all_or_nothing` then undoes."""
    check_networks(encoder, None)
    d = Xt.shape[1]
    width = input_width(encoder)
    if width is not None and d != width:
        raise ValueError(f"X must have {width} features (columns), the encoder's input "
                         f"width; got {d} (X of shape {tuple(Xt.shape)})")


def check_output_width(decoder: nn.Module | None, Xt: Tensor) -> None:
    """``ValueError`` naming ``decoder`` when an ``nn.Sequential`` decoder ending in a ``Linear``
    cannot give back the features of the rows ``Xt``."""
    width = output_width(decoder)
    if width is not None and width != Xt.shape[1]:
        raise ValueError(f"decoder must map embeddings back to X's {Xt.shape[1]} features; "
                         f"its last layer gives {width}")


@contextmanager
def all_or_nothing(owner: Any, *networks: nn.Module | None) -> Iterator[None]:
    """Around a stage of ``owner``: if it raises anything (``KeyboardInterrupt`` too), every
    attribute of ``owner`` is put back (:func:`rbfkmeans._parameters.restored_on_failure`), and
    so are the weights and buffers (copies of their ``state_dict``), the gradients and the
    train/eval modes of ``networks`` (``None`` entries skipped), which training changes in
    place."""
    modules = [m for m in networks if isinstance(m, nn.Module)]
    states = [_snapshot(m) for m in modules]
    grads = [[p.grad for p in m.parameters()] for m in modules]
    modes = [[sub.training for sub in m.modules()] for m in modules]
    with restored_on_failure(owner):
        try:
            yield
        except BaseException:
            for m, state, grad, mode in zip(modules, states, grads, modes, strict=True):
                m.load_state_dict(state, strict=False)  # a lazy parameter's entry is left out
                for p, g in zip(m.parameters(), grad, strict=True):
                    p.grad = g
                for sub, training in zip(m.modules(), mode, strict=True):
                    sub.training = training
            raise


def _snapshot(module: nn.Module) -> dict[str, Any]:
    """Copies of ``module``'s ``state_dict`` entries; a lazy parameter not initialised yet has
    no values to copy and is left out (a failed stage that initialised it leaves it so)."""
    return {key: v.clone() if isinstance(v, Tensor) else copy.deepcopy(v)  # extra state
            for key, v in module.state_dict().items()
            if not (isinstance(v, Tensor) and is_lazy(v))}
