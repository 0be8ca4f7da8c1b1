"""Progress bars of a fit's stages (``RBFKMeans(verbose=1)``, rank 0 only): a bar per stage and
the callbacks that tick it, or None everywhere when nothing is shown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from ._validation import check_bool, check_positive_int
from .stats import Stats

__all__ = ["annealing_ticker", "bar", "lloyd_ticker"]


def _check_bar(bar: Any) -> None:
    """Raise ``TypeError`` naming ``bar`` unless it is None or a progress bar (callable
    ``update`` and ``set_postfix``, as tqdm's)."""
    if bar is not None and not (callable(getattr(bar, "update", None))
                                and callable(getattr(bar, "set_postfix", None))):
        raise TypeError(f"bar must be None or a progress bar (tqdm's, as bar() makes it); got "
                        f"{type(bar).__name__} {bar!r:.80}")


def bar(show: bool, total: int | None, desc: str) -> Any:
    """A tqdm bar of ``total`` steps (None: unknown; else an integer >= 0) named ``desc`` (a
    str), or None if not ``show`` (a bool); else ``TypeError``/``ValueError`` naming them."""
    show = check_bool(show, "show")
    if total is not None:
        total = check_positive_int(total, "total", minimum=0)
    if not isinstance(desc, str):
        raise TypeError(f"desc must be a str; got {type(desc).__name__} {desc!r:.80}")
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=False)


def annealing_ticker(bar: Any) -> Callable[[float, int], None] | None:
    """Progress of the annealing ladder: one tick per temperature; None when ``bar`` is (else
    ``bar`` must be a progress bar)."""
    _check_bar(bar)
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
    sizes). ``bar``: None or a progress bar; ``verbose``: a bool."""
    _check_bar(bar)
    if not check_bool(verbose, "verbose"):
        return None

    def tick(it: int, C: Tensor, st: Stats) -> None:
        if bar is not None:
            bar.set_postfix(J=f"{st.inertia:.6g}")
            bar.update(1)

    return tick
