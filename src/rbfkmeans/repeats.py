r"""Repeated rows folded into weights.

Every quantity a fit computes is a weighted sum over rows: ``J = sum_i w_i ||x_i - c_{a(i)}||^2``,
the relaxations ``F_T``, the cluster sums ``N_j = sum_{i in S_j} w_i`` and
``S_j = sum_{i in S_j} w_i x_i``. Rows ``i_1 .. i_m`` that are equal contribute exactly what one
row of weight ``w_{i_1} + ... + w_{i_m}`` does, and they share every assignment (soft or hard).
So a fit may run on the distinct rows with their summed weights and give each row the label of
its distinct row: the same objective, at a cost per pass proportional to the number of distinct
rows. Data with many repeats are common: 20,000 pixels sampled from an 8-bit photograph hold
10,000-15,000 distinct colours, a table of integer survey answers fewer still.

Rows are grouped exactly (equal in every feature, compared as floats: ``-0.0 == 0.0``), found by
sorting an integer hash of the rows' bit patterns (each entry's bits scrambled, times a random
odd multiplier per column, summed: exact in wrapping int64 arithmetic, so equal rows hash alike
wherever they lie) and comparing the neighbours whose hashes are equal. Distinct rows of equal
hash only cost compression: equal rows separated by them in that order stay apart, which
changes nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ._validation import check_finite, check_matrix, check_tensor
from .distances import chunk_rows

__all__ = ["SAMPLE_FACTOR", "SAMPLE_MIN", "Folded", "fold_repeats"]

#: Large data is first checked on a random sample of ``max(SAMPLE_MIN, SAMPLE_FACTOR sqrt(n))``
#: rows: if a tenth of the rows repeat, such a sample holds about ``0.1 SAMPLE_FACTOR^2 = 10``
#: equal pairs or more, so one without any rules folding out at the cost of the sample alone.
SAMPLE_FACTOR = 10.0
SAMPLE_MIN = 4096

#: the multipliers of :func:`_mix` (splitmix64's, as signed int64)
_M1, _M2 = -4658895280553007687, -7723592293110705685


def _mix(x: Tensor) -> Tensor:
    """A scramble of int64 entries (shifts, xors and odd multiples, splitmix64's), so that the bit
    patterns of small numbers, all zeros in their low bits, spread over every bit."""
    x = (x ^ (x >> 31)) * _M1
    x = (x ^ (x >> 29)) * _M2
    return x ^ (x >> 32)


def _equal_neighbours(X: Tensor, odd: Tensor, step: int) -> tuple[Tensor, Tensor]:
    """The rows of ``X`` (n, d) in the order of their hashes (n,), and for each neighbour pair
    in that order whether the two rows are equal (n - 1,); ``step`` rows at a time."""
    n = X.shape[0]
    as_int = torch.int32 if X.dtype == torch.float32 else torch.int64
    h = torch.empty(n, dtype=torch.int64, device=X.device)
    for s in range(0, n, step):
        bits = (X[s:s + step] + 0.0).view(as_int).long()  # + 0.0: -0.0 becomes 0.0
        h[s:s + step] = (_mix(bits) * odd).sum(dim=1)  # wraps around: the same for equal rows
    order = torch.argsort(h, stable=True)  # (n,)
    hs = h[order]
    same = torch.zeros(max(n - 1, 0), dtype=torch.bool, device=X.device)
    tied = torch.nonzero(hs[1:] == hs[:-1]).squeeze(1)  # the only pairs that can be equal
    for s in range(0, tied.numel(), step):
        t = tied[s:s + step]
        same[t] = (X[order[t + 1]] == X[order[t]]).all(dim=1)
    return order, same


@dataclass(frozen=True)
class Folded:
    """Distinct rows of ``X``: ``rows`` (m,) the index of each one's first occurrence
    (increasing), ``inverse`` (n,) the distinct row of every row (``X[rows][inverse]`` equals
    ``X``) and ``weight`` (m,) the summed weight of its occurrences, in the dtype of ``X``."""

    rows: Tensor
    inverse: Tensor
    weight: Tensor


@torch.no_grad()
def fold_repeats(X: Tensor, sample_weight: Tensor | None = None, *, min_saving: float = 0.1,
                 chunk_size: int | None = None) -> Folded | None:
    """The distinct rows of ``X`` (n, d) with their summed ``sample_weight`` (n,; default 1),
    or None when folding removes fewer than ``min_saving * n`` rows (on such data the copy of
    the distinct rows costs more than the passes save; on large data a random sample without
    a repeat already says so, see ``SAMPLE_FACTOR``). Rows are read ``chunk_size`` at a time
    (:func:`rbfkmeans.distances.chunk_rows`). Nothing passed in is modified. The weights must
    be finite and ``>= 0`` (``ValueError`` naming ``sample_weight``).

    >>> X = torch.tensor([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0]])
    >>> f = fold_repeats(X)
    >>> f.rows.tolist(), f.inverse.tolist(), f.weight.tolist()
    ([0, 1], [0, 1, 0], [2.0, 1.0])
    """
    X = check_matrix(X, "X")
    if X.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"X must be float32 or float64; got {X.dtype}")
    n = X.shape[0]
    if sample_weight is not None and (not isinstance(sample_weight, Tensor)
                                      or sample_weight.shape != (n,)):
        raise ValueError(f"sample_weight must be a tensor of shape ({n},); got "
                         f"{type(sample_weight).__name__} "
                         f"{tuple(getattr(sample_weight, 'shape', ()))}: one weight per row of "
                         f"X (shape {tuple(X.shape)})")
    if sample_weight is not None:  # one look at n weights, once per fit
        check_finite(check_tensor(sample_weight, "sample_weight"), "sample_weight")
        if bool((sample_weight < 0).any()):
            raise ValueError(f"sample_weight must be >= 0; got a negative entry "
                             f"{sample_weight.min().item()!r}")
    if isinstance(min_saving, bool) or not isinstance(min_saving, int | float) \
            or not 0.0 <= min_saving <= 1.0:
        raise ValueError(f"min_saving must be a number in [0, 1]; got {min_saving!r}")
    step = chunk_rows(n, X.shape[1], chunk_size)
    if n < 2:
        return None
    gen = torch.Generator().manual_seed(0x5EED)  # fixed: the grouping never depends on a seed
    odd = (2 * torch.randint(0, 1 << 62, (X.shape[1],), generator=gen) + 1).to(X.device)
    size = min(n, max(SAMPLE_MIN, math.ceil(SAMPLE_FACTOR * math.sqrt(n))))
    if size < n and min_saving > 0:  # a sample without one repeat: too few to be worth it
        sample = torch.randperm(n, generator=gen)[:size].to(X.device)
        if not bool(_equal_neighbours(X[sample], odd, step)[1].any()):
            return None
    order, same = _equal_neighbours(X, odd, step)
    m = n - int(same.sum())
    if n - m < min_saving * n:
        return None
    group = torch.cat([torch.zeros(1, dtype=torch.long, device=X.device),
                       torch.cumsum(~same, dim=0)])  # (n,) group of order[t]
    first = torch.full((m,), n, dtype=torch.long, device=X.device)
    first.scatter_reduce_(0, group, order, reduce="amin")  # first occurrence of each group
    rows, rank = torch.sort(first)  # distinct rows in the order they first occur
    renumber = torch.empty_like(rank)
    renumber[rank] = torch.arange(m, device=X.device)
    inverse = torch.empty(n, dtype=torch.long, device=X.device)
    inverse[order] = renumber[group]
    w = torch.ones(n, dtype=X.dtype, device=X.device) if sample_weight is None \
        else sample_weight.to(X.dtype)
    weight = torch.zeros(m, dtype=torch.float64, device=X.device)
    weight.index_add_(0, inverse, w.double())
    return Folded(rows, inverse, weight.to(X.dtype))
