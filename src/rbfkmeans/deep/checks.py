"""What :class:`~rbfkmeans.deep.DeepClusterer` checks before a stage changes anything, and how a
stage that raises is undone.

A stage (``pretrain``, ``init_layer``, ``fit``) first checks the networks and the rows: the
encoder and the decoder are ``nn.Module`` s, ``X`` has the input width of an ``nn.Sequential``
encoder (read off its first layer, :func:`~rbfkmeans.deep.models.input_width`) and a
``Sequential`` decoder gives that width back. Then it
runs inside :func:`all_or_nothing`: training changes the networks in place (weights, buffers,
gradients, train/eval modes) and the clusterer's attributes one by one, so a stage that raises,
``KeyboardInterrupt`` included, puts all of them back as they were; the train/eval modes are put
back when it returns too (:func:`modes_kept`).

What the networks return is checked as it comes: :func:`check_embedding` (a 2-D floating-point
tensor of one row per input row, at least 2 wide when ``normalize`` projects it onto the unit
sphere) and :func:`check_reconstruction` (the shape of the rows it reconstructs).
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
from .._validation import check_matrix
from .models import input_width, output_width

__all__ = ["all_or_nothing", "check_embedding", "check_input_width", "check_networks",
           "check_output_width", "check_reconstruction", "modes_kept"]


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
    d = check_matrix(Xt, "X").shape[1]
    width = input_width(encoder)
    if width is not None and d != width:
        raise ValueError(f"X must have {width} features (columns), the encoder's input "
                         f"width; got {d} (X of shape {tuple(Xt.shape)})")


def check_output_width(decoder: nn.Module | None, Xt: Tensor) -> None:
    """``ValueError`` naming ``decoder`` when an ``nn.Sequential`` decoder ending in a ``Linear``
    cannot give back the features of the rows ``Xt`` (n, d)."""
    check_matrix(Xt, "X")
    width = output_width(decoder)
    if width is not None and width != Xt.shape[1]:
        raise ValueError(f"decoder must map embeddings back to X's {Xt.shape[1]} features; "
                         f"its last layer gives {width}")


def check_embedding(Z: Any, X: Tensor, normalize: bool) -> Tensor:
    """``Z``, the encoder's output on the rows ``X`` (b, d), when it is a floating-point tensor
    (b, p); ``TypeError`` naming the encoder and what it returned otherwise, ``ValueError`` for
    another shape, and for ``p = 1`` with ``normalize`` (the unit sphere of one dimension is the
    two points -1 and +1: every row would embed on one of them)."""
    check_matrix(X, "X")
    if not isinstance(Z, Tensor) or not Z.is_floating_point():
        what = f"a tensor of dtype {Z.dtype}" if isinstance(Z, Tensor) else type(Z).__name__
        raise TypeError(f"encoder must return a floating-point tensor (n, p) of embeddings; "
                        f"got {what}")
    if Z.dim() != 2 or Z.shape[0] != X.shape[0]:
        raise ValueError(f"encoder must map rows (n, d) to embeddings (n, p); got shape "
                         f"{tuple(Z.shape)} for rows of shape {tuple(X.shape)}")
    if normalize and Z.shape[1] == 1:
        raise ValueError("normalize=True projects the embeddings onto the unit sphere, which in "
                         "1 dimension is the two points -1 and +1; the encoder's embedding has "
                         "width 1: give the encoder an output width >= 2 or set normalize=False")
    return Z


def check_reconstruction(X_hat: Any, X: Tensor) -> Tensor:
    """``X_hat``, the decoder's output for the rows ``X`` (b, d), when it has ``X``'s shape;
    ``TypeError``/``ValueError`` naming the decoder and both shapes otherwise (a shape that
    broadcasts against ``X``, e.g. (b, 1), would train on another reconstruction target)."""
    if not isinstance(X_hat, Tensor) or not X_hat.is_floating_point():
        what = (f"a tensor of dtype {X_hat.dtype}" if isinstance(X_hat, Tensor)
                else type(X_hat).__name__)
        raise TypeError(f"decoder must return a floating-point tensor of the rows' shape; got "
                        f"{what}")
    if X_hat.shape != X.shape:
        raise ValueError(f"decoder must map embeddings back to rows of X's shape "
                         f"{tuple(X.shape)}; got shape {tuple(X_hat.shape)}")
    return X_hat


@contextmanager
def modes_kept(*networks: nn.Module | None) -> Iterator[None]:
    """Around a block that sets train or eval modes: the train/eval mode of every submodule of
    ``networks`` (``None`` entries skipped) is put back as it was, whether the block returns or
    raises."""
    modules = [m for m in networks if isinstance(m, nn.Module)]
    modes = [[sub.training for sub in m.modules()] for m in modules]
    try:
        yield
    finally:
        for m, mode in zip(modules, modes, strict=True):
            for sub, training in zip(m.modules(), mode, strict=True):
                sub.training = training


@contextmanager
def all_or_nothing(owner: Any, *networks: nn.Module | None) -> Iterator[None]:
    """Around a stage of ``owner``: if it raises anything (``KeyboardInterrupt`` too), every
    attribute of ``owner`` is put back (:func:`rbfkmeans._parameters.restored_on_failure`), and
    so are the weights and buffers (copies of their ``state_dict``) and the gradients of
    ``networks`` (``None`` entries skipped), which training changes in place. Their train/eval
    modes are put back whether the stage returns or raises (:func:`modes_kept`): a stage leaves
    every network in the modes it found."""
    modules = [m for m in networks if isinstance(m, nn.Module)]
    states = [_snapshot(m) for m in modules]
    grads = [[p.grad for p in m.parameters()] for m in modules]
    with restored_on_failure(owner), modes_kept(*modules):
        try:
            yield
        except BaseException:
            for m, state, grad in zip(modules, states, grads, strict=True):
                m.load_state_dict(state, strict=False)  # a lazy parameter's entry is left out
                for p, g in zip(m.parameters(), grad, strict=True):
                    p.grad = g
            raise


def _snapshot(module: nn.Module) -> dict[str, Any]:
    """Copies of ``module``'s ``state_dict`` entries; a lazy parameter not initialised yet has
    no values to copy and is left out (a failed stage that initialised it leaves it so)."""
    return {key: v.clone() if isinstance(v, Tensor) else copy.deepcopy(v)  # extra state
            for key, v in module.state_dict().items()
            if not (isinstance(v, Tensor) and is_lazy(v))}
