r"""The registry of assignments: everything the package needs to know about a simplex mapping.

An assignment ``m`` maps scores ``z = -d / 2T`` (rows of length ``k``) to memberships
``r = m(z)``, the maximiser of ``<r, z> + H(r)`` over the simplex for its entropy ``H``
(:mod:`rbfkmeans.mappings`). For each name the registry holds

* ``forward(z, dim)``: the differentiable mapping;
* ``inplace(z)``: the same along the last dimension of a buffer the caller owns (no autograd; the
  fitting passes use it);
* ``entropy(r)``: ``H`` of each row, and ``max_entropy(k)``, its largest value ``H_max``, so that
  ``J - 2T (sum w) H_max <= F_T <= J`` (:mod:`rbfkmeans.objectives`);
* ``free_energy(g, r)``: ``min_r <r, g> - H(r) = <r, g> - H(r)`` at ``r = m(-g)``, per row, for the
  gaps ``g_ij = (d_ij - min_l d_il) / 2T >= 0``, so that ``F_T,i = min_l d_il + 2T free_energy``
  with nothing cancelling at small ``T`` (softmax: ``-log sum_j exp(-g_ij)``);
* ``critical_factor(k)``: ``T_c / lambda_max`` of the first split (:mod:`rbfkmeans.schedules`).

Adding a mapping is one :class:`Assignment` entry in :data:`ASSIGNMENTS` (and its tests): the
objectives, the fitting passes, the layer, deep clustering and the command line read this table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .mappings import entmax15, entmax15_, hardmax, softmax, softmax_, sparsemax, sparsemax_

__all__ = ["ASSIGNMENTS", "Assignment", "check_assignment", "get_assignment", "get_mapping"]


@dataclass(frozen=True)
class Assignment:
    """One simplex mapping and its facts (module docstring). ``hard`` marks the ``T = 0`` rule."""

    name: str
    forward: Callable[..., Tensor]
    inplace: Callable[[Tensor], Tensor] | None
    entropy: Callable[[Tensor], Tensor]
    max_entropy: Callable[[int], float]
    free_energy: FreeEnergy
    critical_factor: Callable[[int], float]
    hard: bool = False
    #: whether ``free_energy`` reads the memberships (softmax's closed form does not)
    free_energy_uses_R: bool = True

    def __repr__(self) -> str:
        return f"Assignment({self.name!r})"


def _shannon(R: Tensor) -> Tensor:
    return -torch.special.xlogy(R, R).sum(dim=-1)


def _tsallis15(R: Tensor) -> Tensor:
    return (4.0 / 3.0) * (1.0 - R.clamp_min(0).pow(1.5).sum(dim=-1))


def _gini(R: Tensor) -> Tensor:
    return 0.5 * (1.0 - R.square().sum(dim=-1))


def _zero(R: Tensor) -> Tensor:
    return R.new_zeros(R.shape[:-1])


FreeEnergy = Callable[[Tensor, Tensor | None], Tensor]


def _free_energy_from(entropy: Callable[[Tensor], Tensor]) -> FreeEnergy:
    def free_energy(G: Tensor, R: Tensor | None) -> Tensor:
        if R is None:
            raise ValueError("this mapping's free energy needs the memberships R")
        # gaps beyond the dtype's range (scores of -inf at a tiny T) sit where r = 0: capped,
        # they add 0 * max = 0 instead of 0 * inf = NaN
        G = G.clamp(max=torch.finfo(G.dtype).max)
        return torch.einsum("...k,...k->...", R, G) - entropy(R)

    return free_energy


def _softmax_free_energy(G: Tensor, R: Tensor | None) -> Tensor:
    return -torch.logsumexp(-G, dim=-1)


def _hard_free_energy(G: Tensor, R: Tensor | None) -> Tensor:
    return G.amin(dim=-1)


#: name -> :class:`Assignment`; the names accepted as ``assignment`` everywhere, in this order.
ASSIGNMENTS: dict[str, Assignment] = {
    a.name: a
    for a in (
        Assignment("softmax", softmax, softmax_, _shannon, lambda k: math.log(k),
                   _softmax_free_energy, lambda k: 1.0, free_energy_uses_R=False),
        Assignment("entmax15", entmax15, entmax15_, _tsallis15,
                   lambda k: (4.0 / 3.0) * (1.0 - k**-0.5), _free_energy_from(_tsallis15),
                   lambda k: math.sqrt(k)),
        Assignment("sparsemax", sparsemax, sparsemax_, _gini, lambda k: 0.5 * (1.0 - 1.0 / k),
                   _free_energy_from(_gini), lambda k: float(k)),
        Assignment("hard", hardmax, None, _zero, lambda k: 0.0, _hard_free_energy,
                   lambda k: 0.0, hard=True, free_energy_uses_R=False),
    )
}


def check_assignment(assignment: Any, name: str = "assignment") -> str:
    """Return ``assignment`` if it names a registered mapping, else raise ``ValueError`` naming
    the parameter ``name`` and the value received."""
    if not isinstance(assignment, str) or assignment not in ASSIGNMENTS:
        names = ", ".join(repr(a) for a in ASSIGNMENTS)
        raise ValueError(f"{name} must be one of {names}; got {assignment!r}")
    return assignment


def get_assignment(assignment: Any, name: str = "assignment") -> Assignment:
    """The registry entry of ``assignment`` (an :class:`Assignment` is returned as it is)."""
    if isinstance(assignment, Assignment):
        return assignment
    return ASSIGNMENTS[check_assignment(assignment, name)]


def get_mapping(name: Any) -> Callable[..., Tensor]:
    """The differentiable mapping ``forward(z, dim=-1)`` registered as ``name``."""
    return get_assignment(name, "name").forward
