r"""The loss terms of joint training, as pure functions of tensors.

* :func:`fenchel_young_loss` -- the self-training term, the Fenchel-Young loss of the k-means
  layer's mapping between its memberships ``R_i`` and fixed targets ``P_i``:

  .. math::

      \ell_T(P_i; z_i, C) = \Big(\sum_j P_{ij} d_{ij} - 2T\,H(P_i)\Big) - F_{T,i} \;\ge\; 0,
      \qquad \frac{\ell_T}{2T} = \mathrm{KL}(P_i \,\|\, R_i) \text{ for softmax};

* :func:`self_training_targets` -- the targets: memberships averaged over input-space neighbours
  (:func:`neighbor_average`, ``Rbar``; also the vote that gives the fitted labels), sharpened and
  divided by a power of the soft cluster sizes,

  .. math::

      \bar R_i = \frac{1}{m+1}\Big(R_i + \sum_{l \in \mathcal N_m(i)} R_l\Big),\qquad
      P_{ij} \propto \frac{\bar R_{ij}^2}{\big(\sum_l \bar R_{lj}\big)^{\gamma}},

  ``gamma = 1`` being DEC's rule (which pulls every cluster towards the same size) and
  ``gamma = 0`` plain sharpening;
* :func:`neighbor_contrastive_loss` -- a contrastive loss on pairs ``(z_i, z_{n(i)})`` of
  embeddings of input-space neighbours, every other row of the batch a negative (symmetric
  InfoNCE on the unit sphere, temperature ``tau``):

  .. math::

      \ell_{nce} = -\frac{1}{2b}\sum_{i=1}^{b}\Big(
          \log \frac{e^{z_i^\top z'_i/\tau}}{\sum_l e^{z_i^\top z'_l/\tau}}
        + \log \frac{e^{z_i^\top z'_i/\tau}}{\sum_l e^{z_l^\top z'_i/\tau}}\Big).

  It pulls the neighbour graph's edges together and pushes the rest apart, so the embedding
  that the k-means layer starts from already has the graph's clusters;
* :func:`neighbor_consistency_loss` -- agreement of the k-means layer's memberships across the
  graph's edges, with the entropy of the batch's mean membership as a counterweight (a
  clustering head trained on neighbours, as in SCAN, Van Gansbeke et al. 2020, with the k-means
  layer as the head):

  .. math::

      \ell_{nc} = -\frac{1}{b}\sum_{i=1}^{b} \log \langle R_i, R_{n(i)} \rangle
                 + \omega \big(\log k - H(\tfrac{1}{b}\textstyle\sum_i R_i)\big).

The targets of a minibatch are built from the memberships of all rows (n, k) a block at a time
(:func:`target_sizes`, :func:`batch_targets`): no (n, k) average or target matrix is formed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .._validation import check_dense, check_finite, check_matrix, check_real
from ..assignments import get_assignment
from ..distances import iter_chunks
from ..errors import NonFiniteError
from ..objectives import objective_from_distances
from .graph import check_graph, check_rows, neighbor_average

#: how far from 1 a row sum of :func:`mapping_entropy`'s ``P`` may be (float32 rounding of ``k``
#: terms stays well inside)
SIMPLEX_TOL = 1e-3

__all__ = [
    "batch_targets",
    "fenchel_young_loss",
    "mapping_entropy",
    "neighbor_average",
    "neighbor_consistency_loss",
    "neighbor_contrastive_loss",
    "self_training_targets",
    "target_sizes",
]


def _floating(t: Tensor, name: str) -> Tensor:
    """``t`` itself if float32/float64, float16/bfloat16 as float32 (computed in float32, as
    everywhere in the package); ``TypeError`` naming ``name`` for integer or bool tensors (a dtype
    check: free, so fit for the functions the training loop calls per minibatch)."""
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor; got {t.dtype}")
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _memberships(R: object, name: str, like: Tensor | None = None,
                 like_name: str = "", shape: str = "(n, k)") -> Tensor:
    """``R`` as a real, dense, finite (n, k) floating-point tensor (float16/bfloat16 as float32;
    of ``like``'s shape when given), else raise; read contiguously (a copy only of a transposed
    or strided view), so that its sums do not depend on its memory layout."""
    R = check_finite(_floating(check_matrix(check_dense(R, name), name, shape), name), name)
    R = R.contiguous()
    if like is not None and R.shape != like.shape:
        raise ValueError(f"{name} must have the shape of {like_name} {tuple(like.shape)}; got "
                         f"{tuple(R.shape)}")
    return R


def _some_rows(t: Tensor, name: str) -> None:
    """``ValueError`` naming ``name`` and its shape when the (b, k) tensor ``t`` has no rows (the
    mean over its rows would be NaN)."""
    if t.shape[0] == 0:
        raise ValueError(f"{name} must have at least one row (a mean over its rows is taken); "
                         f"got shape {tuple(t.shape)}")


def mapping_entropy(P: Tensor, assignment: str) -> Tensor:
    r"""Row entropies ``H(P_i)`` (n,) of the mapping's regulariser: Shannon ``-sum p log p``
    (softmax), Tsallis ``(4/3)(1 - sum p^{3/2})`` (entmax15), Gini ``(1/2)(1 - sum p^2)``
    (sparsemax), ``0`` (hard). The rows of ``P`` (n, k) must lie on the simplex (entries >= 0,
    sums 1 within :data:`SIMPLEX_TOL`): ``ValueError`` naming ``P`` otherwise."""
    entry = get_assignment(assignment)
    P = _memberships(P, "P")
    _check_simplex(P, "P")
    return entry.entropy(P)


def _check_simplex(P: Tensor, name: str) -> None:
    """Raise a ``ValueError`` naming ``name`` unless the rows of ``P`` (n, k) lie on the simplex:
    entries ``>= 0``, sums 1 within :data:`SIMPLEX_TOL` (one reduction each; a row whose sum
    overflows to inf is off the simplex too)."""
    if P.numel():
        P = P.detach()
        low = float(P.min())
        off = float((P.sum(dim=1, dtype=torch.float64) - 1.0).abs().max())
        if low < 0 or not off <= SIMPLEX_TOL:
            raise ValueError(f"{name}'s rows must lie on the simplex (entries >= 0, summing to "
                             f"1); got a smallest entry {low:.6g} and a row sum off 1 by "
                             f"{off:.3g}")


def fenchel_young_loss(D: Tensor, P: Tensor, T: float, assignment: str) -> Tensor:
    r"""Mean over rows of ``l_T(P_i) / 2T`` (module docstring) from distances ``D`` (n, k),
    ``n >= 1``, and targets ``P`` (n, k) on the simplex; in distance units (no ``1/2T``) when
    ``T = 0`` or hard.

    ``l_T = (sum_j P_ij d_ij - 2T H(P_i)) - F_T,i >= 0``; for softmax ``l_T / 2T = KL(P || R)``.
    Its gradient in ``D`` is ``(P - R) / (2T n)``, so a ``T > 0`` whose ``1 / (2T)`` is beyond
    ``D``'s dtype (``T < 1.47e-39`` in float32, where the layer's memberships become constants of
    ``D``, :func:`rbfkmeans.distances.membership_scores`) raises a ``ValueError`` naming ``T``
    (its value and gradient overflow; ``T = 0`` gives the hard limit, in distance units), and so
    does a loss that overflows the dtype at a larger ``T``: nothing infinite or NaN is returned.
    """
    D = _memberships(D, "D")
    P = _memberships(P, "P", D, "D")
    _some_rows(D, "D")
    T = check_real(T, "T", minimum=0.0)
    entry = get_assignment(assignment)
    scaled = T > 0.0 and not entry.hard
    if scaled and 2.0 * T * torch.finfo(D.dtype).max < 1.0:
        raise NonFiniteError(
            f"T must be 0 or at least {0.5 / torch.finfo(D.dtype).max:.3g} for {D.dtype} "
            f"distances: the loss l_T / 2T and its gradient (P - R) / 2T overflow below; got "
            f"T={T!r} (pass T=0 for the hard limit, in distance units)")
    n = D.shape[0]
    F_sum = objective_from_distances(D, T, assignment)
    # P's rows are not checked against the simplex here (a reduction per call of the training
    # loop): mapping_entropy checks them
    at_target = (P * D).sum()
    if not entry.hard:  # the hard mapping has no entropy term (2T alone overflows at T > 9e307)
        at_target = at_target - 2.0 * T * entry.entropy(P).sum()
    gap = (at_target - F_sum) / n
    if not scaled:
        return gap
    loss = gap / (2.0 * T)
    if not bool(torch.isfinite(loss.detach())):
        raise NonFiniteError(f"the loss l_T / 2T overflows {D.dtype} at T={T!r} (l_T = "
                             f"{float(gap.detach()):.3g} in distance units): raise T, or pass T=0 "
                             f"for the hard limit")
    return loss


def target_sizes(R: Tensor, neighbors: Tensor | None = None) -> Tensor:
    r"""Soft cluster sizes ``f_j = sum_i Rbar_ij`` (k,) of the neighbour-averaged memberships,
    summed a block of rows at a time (``Rbar = R`` without ``neighbors``). The rows of ``R``
    must lie on the simplex (:func:`self_training_targets`; ``ValueError`` naming ``R``: rows
    far off it gave sums that overflow to inf)."""
    R = _memberships(R, "R")
    _check_simplex(R, "R")
    if neighbors is None:
        return R.sum(dim=0)
    f = R.new_zeros(R.shape[1])  # (k,)
    for block in iter_chunks(R.shape[0], 8192):
        f += neighbor_average(R, neighbors, block).sum(dim=0)
    return f


@torch.no_grad()
def batch_targets(R: Tensor, rows: Tensor | slice, neighbors: Tensor | None, sizes: Tensor,
                  balance: float = 1.0) -> Tensor:
    r"""The targets ``P`` (b, k) of the rows ``rows`` only (module docstring), from the
    memberships ``R`` (n, k) of every row, the graph ``neighbors`` (n, m) (optional) and the soft
    cluster sizes ``sizes`` (k,) of :func:`target_sizes`: a minibatch's targets without building
    the (n, k) targets of all rows. ``rows`` is a slice or a 1-D integer index tensor
    (:func:`~rbfkmeans.deep.graph.check_rows`); the averaged rows of the batch must lie on the
    simplex (``ValueError`` naming ``R``; one reduction of the (b, k) batch, not of ``R``)."""
    if not 0.0 <= check_real(balance, "balance") <= 1.0:
        raise ValueError(f"balance must be a number in [0, 1]; got {balance!r}")
    R = _memberships(R, "R")
    check_rows(rows, R.shape[0])
    if neighbors is not None:
        check_graph(R, neighbors)
    if isinstance(sizes, Tensor):
        check_dense(sizes, "sizes")
    sizes = check_finite(_floating(check_matrix(sizes.reshape(1, -1) if isinstance(sizes, Tensor)
                                                else sizes, "sizes", "(k,)"), "sizes"),
                         "sizes").reshape(-1)
    if sizes.numel() != R.shape[1]:
        raise ValueError(f"sizes must have shape ({R.shape[1]},); got {tuple(sizes.shape)}: "
                         f"one soft size per cluster, a column of R (shape {tuple(R.shape)})")
    if sizes.numel() and float(sizes.min()) < 0:
        j = int(sizes.argmin())
        raise ValueError(f"sizes must be soft cluster sizes >= 0 (target_sizes); got "
                         f"{float(sizes[j]):.6g} for cluster {j}")
    Rbar = R[rows] if neighbors is None else neighbor_average(R, neighbors, rows)  # (b, k)
    _check_simplex(Rbar, "R")  # the batch's rows (averaged): on the simplex when R's are
    # a size of 0 belongs to a cluster no row reaches (sizes are sums of Rbar >= 0): one the
    # batch's rows do reach has a size > 0
    reached = (sizes == 0) & (Rbar > 0).any(dim=0)  # (k,)
    if bool(reached.any()):
        j = int(reached.nonzero()[0])
        raise ValueError(f"sizes must be > 0 for every cluster the memberships reach (sizes are "
                         f"the column sums of the memberships, target_sizes); got 0 for cluster "
                         f"{j}, which rows of R reach")
    P = Rbar.square() / sizes.clamp_min(1e-12).pow(balance)  # (b, k)
    return P / P.sum(dim=1, keepdim=True).clamp_min(1e-12)


def self_training_targets(
    R: Tensor, neighbors: Tensor | None = None, balance: float = 1.0
) -> Tensor:
    r"""Targets ``P`` (n, k) from memberships ``R`` (n, k): average each row with its
    neighbours' (``neighbors`` (n, m) indices, optional), then
    ``P_ij ∝ Rbar_ij^2 / (sum_l Rbar_lj)^balance`` (``balance = 1``: DEC's rule). The rows of
    ``R`` must lie on the simplex (``ValueError`` naming ``R``: rows of zeros gave rows of zero
    targets, negative entries targets of no meaning, silently)."""
    if not 0.0 <= check_real(balance, "balance") <= 1.0:
        raise ValueError(f"balance must be a number in [0, 1]; got {balance!r}")
    _check_simplex(_memberships(R, "R"), "R")
    return batch_targets(R, slice(None), neighbors, target_sizes(R, neighbors), balance)


def neighbor_contrastive_loss(Z: Tensor, Z_pos: Tensor, tau: float = 0.5) -> Tensor:
    r"""Symmetric InfoNCE (module docstring) between rows ``Z`` (b, p), ``b >= 1``, and their
    positives ``Z_pos`` (b, p), both on the unit sphere; row ``l != i`` of the other side is a
    negative. Each log-ratio is ``z_i . z'_i / tau - logsumexp_l(z_i . z'_l / tau)``, the
    log-sum-exp taken about its largest term (finite for any finite scores). ``tau`` must be
    large enough that ``1 / tau`` is finite in ``Z``'s dtype (``tau >= 2.9e-39`` in float32),
    ``ValueError`` naming ``tau`` otherwise; scores ``z_i . z'_l / tau`` that overflow (rows far
    off the unit sphere) raise too."""
    tau = check_real(tau, "tau", positive=True)
    Z = _memberships(Z, "Z", shape="(b, p)")
    Z_pos = _memberships(Z_pos, "Z_pos", shape="(b, p)")
    if Z.shape != Z_pos.shape:
        raise ValueError(f"Z and Z_pos must be (b, p) of one shape; got {tuple(Z.shape)} and "
                         f"{tuple(Z_pos.shape)}")
    _some_rows(Z, "Z")
    dtype = torch.promote_types(Z.dtype, Z_pos.dtype)
    if tau * torch.finfo(dtype).max < 1.0:
        raise NonFiniteError(f"tau must be at least {1.0 / torch.finfo(dtype).max:.3g} for {dtype} "
                             f"rows (1 / tau overflows below); got {tau!r}")
    Z, Z_pos = Z.to(dtype), Z_pos.to(dtype)  # float32 with float64: in float64
    logits = Z @ Z_pos.T / tau  # (b, b)
    if not bool(torch.isfinite(logits.detach()).all()):
        raise NonFiniteError(
            f"the scores Z @ Z_pos.T / tau overflow {logits.dtype} at tau={tau!r} "
            f"(largest |z_i . z'_l| = {float((Z @ Z_pos.T).abs().max()):.3g}): Z and "
            f"Z_pos should be rows on the unit sphere")
    target = torch.arange(Z.shape[0], device=Z.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def neighbor_consistency_loss(R: Tensor, R_pos: Tensor, entropy_weight: float = 1.0) -> Tensor:
    r"""``-mean_i log <R_i, R'_i> + omega (log k - H(mean_i R_i))`` (module docstring): memberships
    ``R`` (b, k) of a batch and ``R_pos`` (b, k) of their positives (a neighbour, or a shifted
    copy) should agree, while the batch's mean membership stays spread over the ``k`` clusters
    (``omega = entropy_weight``; without it every row could join one cluster). ``<R_i, R'_i>`` is
    clamped at ``1e-8``, so sparse mappings with disjoint supports give a finite loss. Both must
    have ``b >= 1`` rows on the simplex (entries ``>= 0`` summing to 1 within
    :data:`SIMPLEX_TOL`), ``ValueError`` naming ``R`` or ``R_pos`` otherwise."""
    R = _memberships(R, "R")
    R_pos = _memberships(R_pos, "R_pos", R, "R")
    entropy_weight = check_real(entropy_weight, "entropy_weight", minimum=0.0)
    _some_rows(R, "R")
    _check_simplex(R, "R")
    _check_simplex(R_pos, "R_pos")
    agree = -(R * R_pos).sum(dim=1).clamp_min(1e-8).log().mean()
    mean = R.mean(dim=0)  # (k,)
    entropy = -(mean * mean.clamp_min(1e-12).log()).sum()
    loss = agree + entropy_weight * (math.log(R.shape[1]) - entropy)
    # agree <= -log(1e-8) and 0 <= log k - H <= log k: only a weight near the dtype's largest
    # value can overflow, and only then is the loss looked at (a synchronisation)
    if entropy_weight * math.log(R.shape[1]) + 19.0 >= torch.finfo(loss.dtype).max \
            and not bool(torch.isfinite(loss.detach())):
        raise NonFiniteError(f"entropy_weight is too large for {loss.dtype} memberships: the loss "
                             f"overflows (log k - H(mean R) = "
                             f"{math.log(R.shape[1]) - float(entropy):.3g}); got "
                             f"entropy_weight={entropy_weight!r}")
    return loss
