"""The library's own exception type.

:class:`NonFiniteError` says that a number is NaN or infinite, or that a computation would
overflow its dtype: an input with NaN or inf entries (``X``, weights, centroids, a temperature),
or values whose squares, sums or quotients leave the range of ``float32``/``float64`` (rows too
far from the centroids, a temperature too small or too large for the scores, a loss that grew
past the range while a network trained). It is a ``ValueError``, so ``except ValueError``
catches it as before; catching it alone separates "the numbers left the dtype's range" from a
broken contract (a wrong shape, a name that is not known, a negative size).

Every check of the library that finds such a value raises it, naming the parameter and the
value; a check of a rule that also admits other failures (``a finite number >= 0``) raises it
where the value is not finite and ``ValueError`` where it breaks the rest of the rule. The deep
clusterer's stages rely on it: a ``NonFiniteError`` raised while a stage trains on finite ``X``
means that its settings (a learning rate, a weight, a temperature) let the values grow past
float32, and is reported as such (:func:`rbfkmeans.deep._parameters.diverged`); any other
error of the networks propagates as raised.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["NonFiniteError", "value_error"]


class NonFiniteError(ValueError):
    """A value is NaN or infinite, or a computation would overflow its dtype (module
    docstring)."""


def value_error(value: Any, message: str) -> ValueError:
    """The error of a check whose rule ``value`` (a real number) breaks: ``NonFiniteError``
    where ``value`` is NaN or infinite, else ``ValueError``, both carrying ``message`` (a
    string; ``TypeError`` naming it otherwise)."""
    if not isinstance(message, str):
        raise TypeError(f"message must be a string; got {type(message).__name__} {message!r}")
    try:
        finite = math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        finite = True
    return ValueError(message) if finite else NonFiniteError(message)
