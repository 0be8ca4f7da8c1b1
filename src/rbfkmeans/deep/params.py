"""scikit-learn's parameter protocol for :class:`~rbfkmeans.deep.DeepClusterer`: ``get_params``,
``set_params`` and the ``__sklearn_clone__`` that :func:`sklearn.base.clone` calls.

The parameters are the constructor's arguments, read off the signature of ``__init__`` as
scikit-learn's ``BaseEstimator`` reads them. ``set_params`` stores values as they are given, as
setting an attribute does: the stages check every parameter before they change anything. A clone
is the constructor called on deep copies of the parameters, taken with one memo, so that a layer
the encoder and the decoder share (tied weights) is one layer of the clone too.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, TypeVar

__all__ = ["ParamsMixin"]

_Self = TypeVar("_Self", bound="ParamsMixin")


class ParamsMixin:
    """``get_params``, ``set_params`` and ``__sklearn_clone__`` from the signature of
    ``__init__`` (module docstring)."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The names of the constructor's parameters, sorted (``self`` and ``**kwargs`` left
        out)."""
        signature = inspect.signature(cls.__init__)
        return sorted(p.name for p in signature.parameters.values()
                      if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every constructor parameter by name, its value as stored. ``deep`` is accepted for
        scikit-learn and changes nothing: no parameter is an estimator (the networks are torch
        modules, returned as they are)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self: _Self, **params: Any) -> _Self:
        """Set the named parameters and return ``self``; ``ValueError`` naming an unknown name
        and listing the valid ones (none is set then). Values are stored as given and checked by
        the next ``fit``, ``pretrain`` or ``init_layer``, which refuses a bad one by name before
        it changes anything."""
        valid = self._get_param_names()
        for name in params:
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator "
                                 f"{type(self).__name__}. Valid parameters are: {valid!r}.")
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def __sklearn_clone__(self: _Self) -> _Self:
        """A new, unfitted clusterer of the same parameters: the constructor called on deep
        copies of them, taken with one memo (networks that share a layer share its copy)."""
        memo: dict[int, Any] = {}
        params = {name: copy.deepcopy(value, memo) for name, value in self.get_params().items()}
        return type(self)(**params)
