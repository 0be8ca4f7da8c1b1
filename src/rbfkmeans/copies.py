r"""Equal centroids, one centroid to a pass.

A hard pass hands a point whose nearest centroid appears several times in ``C`` (a start with
repeated rows, a centroid given twice) to the lowest of its indices, and where it wants the two
nearest, the next copy at the same distance, as ``argmin`` over exact distances would. A matrix
product need not score equal centroids equally: the scores

.. math::  g_{ij} = \lVert c_j \rVert^2 - 2\, x_i \cdot c_j

of two equal rows ``c_j = c_l`` come from different lanes of the product's kernel, which may
round them differently (MKL's float32 kernels on AVX-512 do), and a point's tie then went to
either copy by its rounding. So the torch passes score the distinct centroids only
(:func:`centroid_copies`) and hand each label back to the lowest copy (:func:`least`,
:func:`least_two`). The compiled wide passes settle every tie within rounding by a fixed-order
sum instead (:func:`rbfkmeans._row_loops.nearest_in_doubt`); the narrow ones sum in a fixed
order already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .distances import row_min

__all__ = ["Copies", "centroid_copies", "least", "least_two"]


@dataclass(frozen=True)
class Copies:
    """The equal rows of centroids ``C`` (k, d): ``index`` (k',) the lowest index of each
    distinct row, ascending; ``next_copy`` (k,) for each such index the next index of an equal
    row (``k`` where it has none; other entries unused)."""

    index: Tensor
    next_copy: Tensor


def centroid_copies(C: Tensor, C_sq: Tensor) -> Copies | None:
    """The copies among the centroids ``C`` (k, d) with squared norms ``C_sq`` (k,); ``None``
    when every row differs (the common case, decided from the norms alone: equal rows have
    equal norms, each summed by the same loop, so only rows of a shared norm are compared, by
    value). O(k log k) plus the rows of shared norms."""
    k = C.shape[0]
    _, inverse, counts = torch.unique(C_sq, return_inverse=True, return_counts=True)
    shared = (counts[inverse] > 1).nonzero().squeeze(1)  # candidates, in index order
    if shared.numel() == 0:
        return None
    _, group = torch.unique(C[shared], dim=0, return_inverse=True)
    if group.unique().numel() == shared.numel():  # equal norms, different rows
        return None
    lowest = torch.full((shared.numel(),), k, dtype=torch.long, device=C.device)
    lowest.scatter_reduce_(0, group, shared, reduce="amin")
    first = torch.arange(k, device=C.device)
    first[shared] = lowest[group]  # (k,) the lowest index of each row's equals
    own = first == torch.arange(k, device=C.device)
    later = (~own).nonzero().squeeze(1)
    next_copy = torch.full((k,), k, dtype=torch.long, device=C.device)
    next_copy.scatter_reduce_(0, first[later], later, reduce="amin")
    return Copies(own.nonzero().squeeze(1), next_copy)


def distinct(C: Tensor, C_sq: Tensor, copies: Copies | None) -> tuple[Tensor, Tensor]:
    """The centroids ``C`` (k, d) and their squared norms ``C_sq`` (k,) restricted to the
    distinct rows of ``copies`` (k', the lowest index of each), as the scores of
    :func:`least` and :func:`least_two` take them; unchanged for ``None``."""
    return (C, C_sq) if copies is None else (C[copies.index], C_sq[copies.index])


def least(G: Tensor, copies: Copies | None, *, overwrite: bool = False) -> tuple[Tensor, Tensor]:
    """Each row's least score of ``G`` (b, k') over the distinct centroids (``copies``; all
    ``k`` centroids when ``None``) and its centroid, the lowest index of its copies
    (:func:`rbfkmeans.distances.row_min`; ``overwrite`` as there)."""
    g, lab = row_min(G, overwrite=overwrite)
    return g, lab if copies is None else copies.index[lab]


def least_two(G: Tensor, copies: Copies | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each row's two least scores of ``G`` (b, k') over the distinct centroids and their
    centroids: the nearest as :func:`least`, then its next copy at the same score where it has
    one, else the least of the other distinct centroids (its lowest copy). ``G`` is
    overwritten; with one distinct centroid every centroid must have a copy."""
    g1, lab1 = row_min(G)  # the least, then the least of the others (two reductions beat
    if G.shape[1] > 1:  # topk's sort)
        g2, lab2 = row_min(G.scatter_(1, lab1.unsqueeze(1), math.inf), overwrite=True)
    else:  # one distinct centroid: every row's second is a copy of it
        g2, lab2 = g1.clone(), lab1.clone()
    if copies is None:
        return g1, lab1, g2, lab2
    lab1, lab2 = copies.index[lab1], copies.index[lab2]
    twin = copies.next_copy[lab1]
    has = twin < copies.next_copy.shape[0]  # the nearest has a copy: the second, at a tie
    return g1, lab1, torch.where(has, g1, g2), torch.where(has, twin, lab2)
