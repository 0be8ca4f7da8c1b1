"""Argument types of the command line: a bad value is argparse's one-line error naming the flag
(exit status 2), never a traceback from deep inside the run.

``type=integer_at_least(1)`` takes ``--seeds 3`` and answers ``--seeds 0`` with
``argument --seeds: must be an integer >= 1; got '0'``; ``type=widths`` reads ``--hidden
256,128``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["integer_at_least", "widths"]


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` that reads an integer of at least ``minimum``."""
    if isinstance(minimum, bool) or not isinstance(minimum, int):
        raise TypeError(f"minimum must be an int; got {type(minimum).__name__}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}; got {text!r}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # what argparse names in its own messages
    return parse


def widths(text: str) -> tuple[int, ...]:
    """An argparse ``type`` for layer widths: positive integers separated by commas."""
    try:
        out = tuple(int(part) for part in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(
            f"must be positive integers separated by commas, e.g. 256,128; got {text!r}")
    return out
