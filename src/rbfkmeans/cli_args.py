"""Argument types of the command line: a bad value is argparse's one-line error naming the flag
(exit status 2), never a traceback from deep inside the run.

``type=integer_at_least(1)`` takes ``--seeds 3`` and answers ``--seeds 0`` with
``argument --seeds: must be an integer >= 1; got '0'``; ``integer_at_least(1, 1000)`` also
refuses ``--seeds 1001`` (``must be an integer from 1 to 1000``); ``type=widths`` reads
``--hidden 256,128``; ``type=folder`` refuses an empty ``--out``.

The limits of the integer flags the commands share:

- :data:`MAX_SEEDS`: runs per command (``--seeds N`` runs seeds ``0 .. N-1``);
- :func:`max_threads`: torch threads, at most :data:`MAX_THREADS` (torch crashes when asked for
  more threads than the system can start; a count above the machine's cores only oversubscribes);
- :data:`MAX_WIDTH` and :data:`MAX_LAYERS`: ``--hidden``, so that the networks fit in memory;
- :data:`MAX_EPOCHS`, :data:`MAX_STEPS`, :data:`MAX_CODES`, :data:`MAX_N_INIT`: the lengths of
  training and the codebook and restart counts.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "MAX_CODES",
    "MAX_EPOCHS",
    "MAX_LAYERS",
    "MAX_N_INIT",
    "MAX_SEEDS",
    "MAX_STEPS",
    "MAX_WIDTH",
    "folder",
    "integer_at_least",
    "max_threads",
    "torch_threads",
    "widths",
]

#: the most runs of one command (``--seeds``)
MAX_SEEDS = 1000
#: the widest hidden layer of ``--hidden``
MAX_WIDTH = 4096
#: the most hidden layers of ``--hidden``
MAX_LAYERS = 8
#: the most epochs of ``--epochs`` and ``--pretrain-epochs``
MAX_EPOCHS = 10_000
#: the most training steps of ``vq --steps``
MAX_STEPS = 1_000_000
#: the largest codebook of ``vq --codebook-size``
MAX_CODES = 1 << 20
#: the most runs of ``fit --n-init``
MAX_N_INIT = 1000


#: the most torch threads a command takes: more than any machine's cores (a command may ask for
#: more threads than this machine has, as the docs' examples do), far below the counts torch
#: refuses or crashes on (100,000 and 2**31 - 1)
MAX_THREADS = 1024


def max_threads() -> int:
    """The most torch threads a command takes (:data:`MAX_THREADS`)."""
    return MAX_THREADS


def integer_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` that reads an integer of at least ``minimum`` (and at most
    ``maximum`` unless it is None)."""
    if isinstance(minimum, bool) or not isinstance(minimum, int):
        raise TypeError(f"minimum must be an int; got {type(minimum).__name__}")
    if maximum is not None and (isinstance(maximum, bool) or not isinstance(maximum, int)):
        raise TypeError(f"maximum must be an int or None; got {type(maximum).__name__}")
    if maximum is not None and maximum < minimum:
        raise ValueError(f"maximum must be >= minimum={minimum}; got {maximum}")
    rule = (f"an integer >= {minimum}" if maximum is None
            else f"an integer from {minimum} to {maximum}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {rule}; got {text!r}")
        return value

    parse.__name__ = rule  # what argparse names in its own messages
    return parse


def widths(text: str) -> tuple[int, ...]:
    """An argparse ``type`` for layer widths: at most :data:`MAX_LAYERS` integers from 1 to
    :data:`MAX_WIDTH` separated by commas."""
    try:
        out = tuple(int(part) for part in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1 or max(out) > MAX_WIDTH or len(out) > MAX_LAYERS:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_LAYERS} integers from 1 to {MAX_WIDTH} separated by commas, "
            f"e.g. 256,128; got {text!r}")
    return out


def folder(text: str) -> Path:
    """An argparse ``type`` for an output folder: any path but the empty one (which would name
    the current folder without saying so)."""
    if not text:
        raise argparse.ArgumentTypeError("must name a folder; got ''")
    return Path(text)


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` (``--threads``) for the block, then set back; a
    count torch refuses raises ``ValueError`` naming ``--threads`` and the value."""
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(count)
    except (ValueError, TypeError, RuntimeError, OverflowError) as exc:
        raise ValueError(f"--threads {count!r}: {' '.join(str(exc).split())}") from None
    try:
        yield
    finally:
        torch.set_num_threads(before)
