"""Progress bars of a fit's stages (``RBFKMeans(verbose=1)``, rank 0 only): a bar per stage and
the callbacks that tick it, or None everywhere when nothing is shown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from .passes import Stats

__all__ = ["annealing_ticker", "bar", "lloyd_ticker"]


def bar(show: bool, total: int | None, desc: str) -> Any:
    """A tqdm bar of ``total`` steps (None: unknown) named ``desc``, or None if not ``show``."""
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False)


def annealing_ticker(bar: Any) -> Callable[[float, int], None] | None:
    """Progress of the annealing ladder: one tick per temperature."""
    if bar is None:
        return None

    def tick(T: float, it: int) -> None:
        bar.set_postfix(T=f"{T:.3g}", iters=it)
        bar.update(1)

    return tick


def lloyd_ticker(bar: Any, verbose: bool) -> Callable[[int, Tensor, Stats], None] | None:
    """Progress of Lloyd iterations: one tick per iteration, ``J`` as the postfix; None unless
    ``verbose``. Every rank of a distributed fit gets a callback when the fit is verbose, also
    those that show no bar: a Lloyd run with a callback takes full passes (its ``J`` every
    iteration) rather than bounded ones, and the ranks' passes must sum the same statistics
    (rank 0's bar alone had made it take other passes than the rest: gloo aborted on the
    sizes)."""
    if not verbose:
        return None

    def tick(it: int, C: Tensor, st: Stats) -> None:
        if bar is not None:
            bar.set_postfix(J=f"{st.inertia:.6g}")
            bar.update(1)

    return tick
