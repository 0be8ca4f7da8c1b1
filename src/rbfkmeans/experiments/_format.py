"""Number formats and small readers shared by the findings table and the report."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["cap", "e", "f", "g_units", "joined", "names", "span"]


def e(x: float | None, digits: int = 1) -> str:
    """``x`` in scientific notation (``n/a`` for None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}e}"


def f(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits (``n/a`` for None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def cap(text: str) -> str:
    """``text`` with its first letter in upper case (a measured phrase opening a sentence)."""
    return text[:1].upper() + text[1:]


def names(res: dict[str, Any]) -> list[str]:
    """The datasets of the results, in their order."""
    return list(res["datasets"])


def joined(items: list[str], empty: str = "none") -> str:
    """``items`` joined by commas (``empty`` where there are none)."""
    return ", ".join(items) if items else empty


def span(values: list[float], fmt: Any = f, sep: str = "..") -> str:
    """``min..max`` of ``values`` in the format ``fmt`` (one number where they agree in it)."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}{sep}{hi}"


def g_units(T: float, g_min: float) -> str:
    """``T`` in units of ``g_min``, e.g. ``0.31 g_min``."""
    return f"{T / g_min:.2g} g_min"
