"""Loading a module's state all or nothing.

``nn.Module.load_state_dict`` copies every key it can before it raises for an unexpected or a
missing key or a size mismatch, leaving the module half loaded. :func:`load_all_or_nothing`
wraps such a load with a snapshot of what it may write and puts it back where the load raises:
:class:`~rbfkmeans.KMeansLayer` and :class:`~rbfkmeans.VectorQuantizer` load this way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

__all__ = ["load_all_or_nothing"]

_Result = TypeVar("_Result")


def _same_bits(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same bits (``-0.0`` is not ``0.0``, a NaN equals
    itself), for tensors of one dtype, shape and device."""
    if a.is_floating_point():
        as_int = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
        bits = as_int[a.element_size()]
        return torch.equal(a.view(bits), b.view(bits))
    return torch.equal(a, b)


def load_all_or_nothing(module: nn.Module, state_dict: Mapping[str, Any],
                        load: Callable[[], _Result]) -> _Result:
    """``load()`` (``module``'s ``nn.Module.load_state_dict`` of ``state_dict``), all or
    nothing: if it raises anything (torch's ``RuntimeError`` for unexpected or missing keys and
    size mismatches, after it has copied what it could; a check of a value; a
    ``KeyboardInterrupt``), every parameter and buffer of ``module`` (and of its submodules)
    named in ``state_dict`` is put back, in place (``copy_`` under ``no_grad``, so that the
    references others hold, an optimiser's above all, stay valid; a tensor that
    ``assign=True`` replaced is put back itself), and so is the extra state of every module
    that keeps one; the exception then propagates unchanged.

    A snapshot of those tensors is kept for the call (one copy of each)."""
    held = []  # (store, name, tensor, copy): the tensors the load may write
    for path, m in module.named_modules():
        for store in (m._parameters, m._buffers):
            for name, t in store.items():
                if t is not None and (f"{path}.{name}" if path else name) in state_dict:
                    held.append((store, name, t, t.detach().clone()))
    extra = [(m, m.get_extra_state()) for m in module.modules()
             if type(m).set_extra_state is not nn.Module.set_extra_state]
    try:
        return load()
    except BaseException:
        with torch.no_grad():
            for store, name, t, saved in held:
                if store.get(name) is not t:  # replaced (assign=True)
                    store[name] = t
                if not t.is_meta and not _same_bits(t.detach(), saved):
                    t.copy_(saved)
            for m, state in extra:
                m.set_extra_state(state)
        raise
