r"""Coincident centroids as groups with multiplicities: the mass-constrained form of a pass.

During annealing most of the ``k`` centroids coincide: above the first critical temperature all
sit at the mean, and they part in groups as clusters split. A group ``j`` of ``m_j`` coincident
copies at ``c_j`` gets, per point, the total membership ``q_ij = m_j p_ij`` of its copies, where
``p`` is the mapping of the ``k`` copies' scores. Written with the ``g`` distinct centroids only,
with scores ``z_ij = -d_ij / 2T`` and ``a_j = 1/2`` (entmax-1.5) or ``1`` (sparsemax):

.. math::

    \text{softmax:}\quad q_{ij} = \frac{m_j e^{z_{ij}}}{\sum_l m_l e^{z_{il}}}
        = \operatorname{softmax}(z_i + \log m)_j, \qquad
    \text{entmax-1.5:}\quad q_{ij} = m_j [z_{ij}/2 - \tau_i]_+^2, \qquad
    \text{sparsemax:}\quad q_{ij} = m_j [z_{ij} - \tau_i]_+,

with the threshold ``tau_i`` solving ``sum_j m_j [a z_ij - tau_i]_+^(1/a) = 1`` (the threshold
equation of the ``k`` copies, each group counted ``m_j`` times). The relaxed objective is that of
the copies too: with gaps ``g_ij = (d_ij - min_l d_il) / 2T``,
``F_T,i = min_l d_il + 2T (sum_j q_ij g_ij - H_i)``, ``H_i`` the copies' entropy
``-sum_j q_ij log(q_ij / m_j)`` (Shannon), ``(4/3)(1 - sum_j q_ij^{3/2} m_j^{-1/2})`` (Tsallis-1.5),
``(1/2)(1 - sum_j q_ij^2 / m_j)`` (Gini). So a pass costs ``O(n g d)`` instead of ``O(n k d)``,
and gives exactly the statistics of the ``k`` copies (``N_j``, ``S_j`` of a group are the sums of
its copies').

**When a group splits.** Linearise the soft-Lloyd map ``c <- m(c)`` of the copies of group ``j``
around their common position, for a perturbation ``e_a`` of copy ``a`` with ``sum_a e_a = 0``
(which leaves the group's mass unchanged). The mapping's Jacobian acts on such a perturbation as
the scalar ``gamma_ij``: ``p_ij = q_ij / m_j`` (softmax), ``sqrt(q_ij / m_j)`` (entmax-1.5),
``1[q_ij > 0]`` (sparsemax). With ``dz_ij = (x_i - c_j).e / T``, the copies' centroids move by
``e <- A_j e / T`` with the gain matrix

.. math::

    A_j = \frac{m_j}{N_j} \sum_i w_i \gamma_{ij} (x_i - c_j)(x_i - c_j)^\top ,

so the group splits below its own critical temperature ``T_j = lambda_max(A_j)`` (0 for a group of
one), along the top eigenvector of ``A_j``. For softmax ``A_j`` is the group's posterior
covariance (Rose 1998, in this project's convention); for a single group of ``k`` copies at the
mean this is ``T_c = lambda_max``, ``sqrt(k) lambda_max`` and ``k lambda_max``
(:mod:`rbfkmeans.schedules`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from . import kernels
from ._validation import check_bool, check_matrix, check_temperature, check_tensor
from .assignments import Assignment, get_assignment
from .distances import chunk_rows, row_norms_sq
from .passes import Data, check_data
from .spread import top_eigenpair
from .stats import check_hard_tol, check_objectives, scores_in_range, shifted_scores

__all__ = ["GroupStats", "group_memberships", "group_stats"]


def _check_multiplicities(m: Tensor, g: int) -> Tensor:
    check_tensor(m, "m")
    if m.shape != (g,):
        raise ValueError(f"m (the multiplicities) must be a tensor of shape ({g},); got "
                         f"{tuple(m.shape)}")
    # one reduction over the g multiplicities: NaN fails ``m >= 1``, inf the finite test
    if not bool((torch.isfinite(m) & (m >= 1) & (m == m.round())).all()):
        raise ValueError(f"m (the multiplicities) must be integers >= 1; got "
                         f"{m.tolist()}")
    return m


#: up to this many groups a sparse mapping's threshold is solved on the groups themselves (all
#: pairs of entries); beyond, the scores are expanded to the ``k`` copies for the in-place kernel
_PAIRWISE_GROUPS = 4


def _threshold_memberships(Z: Tensor, m: Tensor, a: float, power: int) -> Tensor:
    """``q_ij = m_j [t_i - y_ij]_+^power`` with ``y = a (max_l z_il - z_ij)`` and ``t_i`` solving
    ``sum_j m_j [t_i - y_ij]_+^power = 1`` (power 2: entmax-1.5, 1: sparsemax), in float64: the
    mass at ``t = y_j`` is ``f_j = sum_i m_i [y_j - y_i]_+^power`` (nondecreasing in ``y_j``),
    the support is ``{j : f_j < 1}``, and its sums give ``t`` in closed form."""
    md = m.double()
    zmax = Z.amax(dim=1, keepdim=True)  # (b, 1); NaN where a row holds NaN
    Y_all = a * (zmax - Z)  # (b, g) >= 0
    # only gaps below 1 can be in the support (t <= 1); a row with one such entry is one-hot
    cand = (Y_all < 1.0).sum(dim=1)  # (b,)
    Q = torch.zeros_like(Z)
    Q.scatter_(1, Y_all.argmin(dim=1, keepdim=True), 1.0)
    Q.add_(zmax * 0.0)  # a row with NaN scores is NaN, as the mappings give it (not one-hot)
    rows = (cand > 1).nonzero().squeeze(1)
    if rows.numel() == 0:
        return Q
    Y = Y_all[rows].double()  # (r, g)
    gaps = (Y.unsqueeze(2) - Y.unsqueeze(1)).clamp_(min=0.0)  # (r, g, g): y_j - y_i
    f = (gaps.pow_(power) * md).sum(dim=2)  # (r, g)
    supp = (f < 1.0).to(Y.dtype) * md  # (r, g) multiplicity of each support member
    M = supp.sum(dim=1, keepdim=True)
    S1 = (supp * Y).sum(dim=1, keepdim=True)
    if power == 1:
        t = (1.0 + S1) / M
    else:
        S2 = (supp * Y.square()).sum(dim=1, keepdim=True)
        t = (S1 + (S1.square() - M * (S2 - 1.0)).clamp(min=0.0).sqrt()) / M
    Qr = md * (t - Y).clamp(min=0.0).pow(power)
    Q[rows] = (Qr / Qr.sum(dim=1, keepdim=True)).to(Z.dtype)  # rounding only: rows sum to one
    return Q


def group_memberships(Z: Tensor, m: Tensor, assignment: str | Assignment) -> Tensor:
    """Group memberships ``Q`` (b, g) (module docstring) from scores ``Z`` (b, g), any per-row
    shift of ``-D / 2T``, and integer multiplicities ``m`` (g,). ``Z`` is not modified. A row
    of ``Z`` holding NaN gives a row of NaN (as :mod:`rbfkmeans.mappings` does); ``Z`` is not
    scanned otherwise (the passes call this per chunk)."""
    entry = get_assignment(assignment)
    check_matrix(Z, "Z", "(b, g)")
    m = _check_multiplicities(m, Z.shape[1])
    g = Z.shape[1]
    if entry.hard:
        Q = torch.nn.functional.one_hot(Z.argmax(dim=1), g).to(Z.dtype)
        return Q.add_(Z.amax(dim=1, keepdim=True) * 0.0)  # NaN rows stay NaN
    if entry.name == "softmax":
        return torch.softmax(Z + m.to(Z.dtype).log(), dim=1)
    if g <= _PAIRWISE_GROUPS:
        entmax = entry.name == "entmax15"
        return _threshold_memberships(Z, m, 0.5 if entmax else 1.0, 2 if entmax else 1)
    assert entry.inplace is not None
    if bool((m == 1).all()):
        return entry.inplace(Z.contiguous().clone())
    # (k,) the group of each copy (m is integral, of any dtype)
    copy_of = torch.repeat_interleave(torch.arange(g, device=Z.device), m.long())
    R = entry.inplace(Z[:, copy_of])  # (b, k) the copies' memberships (a gather: about 2x
    # faster than index_select along columns on the CPU)
    return torch.zeros_like(Z).index_add_(1, copy_of, R)


def _group_entropy(Q: Tensor, m: Tensor, name: str) -> Tensor:
    """The copies' entropy per row (module docstring)."""
    md = m.to(Q.dtype)
    if name == "softmax":
        return -(torch.special.xlogy(Q, Q) - Q * md.log()).sum(dim=1)
    if name == "entmax15":
        Qp = Q.clamp(min=0)
        return (4.0 / 3.0) * (1.0 - (Qp * Qp.sqrt() / md.sqrt()).sum(dim=1))
    if name == "sparsemax":
        return 0.5 * (1.0 - (Q.square() / md).sum(dim=1))
    return Q.new_zeros(Q.shape[0])


@dataclass
class GroupStats:
    """Statistics of one group pass (summed over ranks): ``N`` (g,), ``S`` (g, d), the relaxed
    objective ``F_T`` and ``J`` of the copies, the soft-point weight, ``V`` (g,) the weighted
    squared distances of each group's nearest points to it, and (when asked) the critical
    temperature ``T_crit`` (g,) and top eigenvector ``axis`` (g, d) of each group's gain
    matrix."""

    N: Tensor
    S: Tensor
    objective: float
    inertia: float
    n_soft: float
    V: Tensor
    T_crit: Tensor | None = None
    axis: Tensor | None = None


@torch.no_grad()
def group_stats(
    data: Data,
    C: Tensor,
    m: Tensor,
    T: float,
    assignment: str | Assignment,
    *,
    objective: bool = True,
    critical: bool = False,
    hard_tol: float = 1e-7,
) -> GroupStats:
    """One chunked pass over ``data`` with the ``g`` distinct centroids ``C`` (g, d) of
    multiplicities ``m`` (g,) at ``T > 0`` (module docstring). ``critical=True`` also
    accumulates the gain matrices ``A_j`` (float64) and returns each group's critical
    temperature and principal axis. On the CPU the sums come from the fused kernel of
    :mod:`rbfkmeans.kernels` (the same values up to rounding): in one sweep up to
    :data:`rbfkmeans.kernels.MAX_DIM` features, with the scores from BLAS products inside the
    kernel (and the gain matrices from matrix products over each group's rows) beyond. At a
    temperature so far from the data's scale that the scores or the entropy terms may leave the
    dtype's range (:func:`rbfkmeans.stats.scores_in_range`) the sums come from the chunked
    torch pass on shifted scores (:func:`rbfkmeans.stats.shifted_scores`)."""
    check_data(data)
    entry = get_assignment(assignment)
    T = check_temperature(T, "T")
    if T == 0 or entry.hard:
        raise ValueError(f"group passes need T > 0 and a soft assignment; got T={T!r}, "
                         f"assignment={entry.name!r}")
    objective = check_bool(objective, "objective")
    critical = check_bool(critical, "critical")
    C, reach = data.centroids_in_reach(C)
    m = _check_multiplicities(check_tensor(m, "m").to(C.device), C.shape[0])
    hard_tol = check_hard_tol(hard_tol)
    plain = scores_in_range(reach, C.shape[1], int(m.sum()), T, data.X.dtype)
    stats = group_stats_unchecked(data, C, m, T, entry, objective, critical, hard_tol, plain)
    if objective:
        check_objectives(stats.objective, stats.inertia, T, entry.name)
    return stats


def group_stats_unchecked(data: Data, C: Tensor, m: Tensor, T: float, entry: Assignment,
                 objective: bool = True, critical: bool = False,
                 hard_tol: float = 1e-7, plain: bool = True) -> GroupStats:
    """:func:`group_stats` on arguments it has checked (or that the annealing built): ``C``
    finite in the data's dtype and device, ``m`` integers >= 1 on that device, ``T > 0``, a
    soft ``entry``. The annealing's passes call it directly (their checks cost as much as a
    pass on a few thousand rows). ``plain=False`` (scores that may leave the dtype's range, see
    :func:`rbfkmeans.stats.scores_in_range`) takes the chunked torch pass on shifted
    scores."""
    g, d = C.shape
    dev, dt = data.X.device, data.X.dtype
    split = (m > 1).nonzero().squeeze(1) if critical else None  # the groups that can split
    gains = 0 if split is None else int(split.numel())
    supports: list[tuple[Tensor, Tensor]] | None = None
    if not plain:
        N, S, V, acc, A = _torch_sums(data, C, m, T, entry, objective, split, hard_tol,
                                      plain=False)
    elif kernels.usable(data.X, g, gains=gains):  # few features: one sweep
        N, S, V, acc, A_k = kernels.group_pass(data.X, C, m, T, entry.name, data.w,
                                               objective=objective, split=split,
                                               hard_tol=hard_tol)
        A = A_k if split is not None else None
    elif kernels.usable(data.X, g, scores=True):  # wide data: scores by BLAS products
        matrix_free = (split is not None and d >= MATRIX_FREE_MIN_DIM
                       and not data.comm.active)
        N, S, V, acc, A, supports = _kernel_sums_wide(data, C, m, T, entry, objective, split,
                                                      hard_tol, matrix_free)
    else:
        N, S, V, acc, A = _torch_sums(data, C, m, T, entry, objective, split, hard_tol)
    stacked = [N, S, V, acc] + ([A] if A is not None else [])
    data.comm.sum_(*stacked)
    T_crit = axis = None
    if (A is not None or supports is not None) and split is not None:
        T_crit = torch.zeros(g, dtype=torch.float64, device=dev)
        axis = torch.zeros(g, d, dtype=dt, device=dev)
        if split.numel():
            # m_j / N_j; 0 for a group that holds no mass (m_j / tiny would overflow to inf,
            # and inf times its zero gain matrix is NaN): it has nothing to split
            N_split = N[split].double()
            scale = torch.where(N_split > 0, m[split].double() / N_split.clamp(min=1.0e-300),
                                torch.zeros_like(N_split))
            if supports is not None:  # A_j v from the group's rows, never A_j itself
                top_val, top = _top_eigenpairs_matrix_free(data.X, C, split, supports, scale)
            else:
                assert A is not None
                top_val, top = _top_eigenpairs(A * scale.view(-1, 1, 1))
            T_crit[split] = top_val.clamp(min=0.0)
            # (g', d), each of either sign: make its largest entry positive
            sign = top.gather(1, top.abs().argmax(dim=1, keepdim=True)).sign()
            axis[split] = (top * sign).to(dt)
    F, J, n_soft = acc.tolist() if objective else [math.nan] * 3
    return GroupStats(N, S, float(F), float(J), float(n_soft), V, T_crit, axis)


#: from this many features on (one process, the kernels' wide passes), a group's critical
#: temperature and axis come from Lanczos iterations on products ``A_j v`` with the rows of its
#: support (``O(n_j d)`` each) instead of its ``d x d`` gain matrix (``O(n_j d^2)`` to form,
#: ``O(d^3)`` to decompose): the same eigenpair, to rounding
MATRIX_FREE_MIN_DIM = 96

#: from this many features on, the top eigenpair of a CPU gain matrix comes from LAPACK's
#: subset solver (``scipy.linalg.eigh(subset_by_index=...)``: measured 3x faster than a full
#: ``torch.linalg.eigh`` at d = 64; slower below d ~ 16)
SUBSET_EIGH_MIN_DIM = 24


def _top_eigenpairs(A: Tensor) -> tuple[Tensor, Tensor]:
    """The largest eigenvalue (g',) and a unit eigenvector (g', d) of each symmetric ``A``
    (g', d, d), float64."""
    d = A.shape[-1]
    if d < SUBSET_EIGH_MIN_DIM or A.device.type != "cpu":
        evals, evecs = torch.linalg.eigh(A)  # ascending
        return evals[:, -1], evecs[:, :, -1]
    import scipy.linalg

    pairs = [scipy.linalg.eigh(a, subset_by_index=[d - 1, d - 1], driver="evx",
                               check_finite=False) for a in A.numpy()]
    return (torch.tensor([float(val[0]) for val, _ in pairs], dtype=torch.float64),
            torch.from_numpy(np.stack([vec[:, 0] for _, vec in pairs])))


def _kernel_sums_wide(
    data: Data, C: Tensor, m: Tensor, T: float, entry: Assignment, objective: bool,
    split: Tensor | None, hard_tol: float, matrix_free: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None, list[tuple[Tensor, Tensor]] | None]:
    """The sums of :func:`group_stats` for wide data: the kernel (its scores from BLAS products
    inside it) in one call, or for a critical pass chunk by chunk, each row's gain weight
    ``w_i gamma_ij`` going out of the kernel, either to one matrix product per splitting group
    for ``A_j = sum_i w_i gamma_ij y_ij y_ij^T`` (float64) over that group's support, or
    (``matrix_free``) kept as that support: its rows and their gain weights, for
    :func:`_top_eigenpairs_matrix_free`. Returns ``N, S, V, acc``, ``A`` (or None) and the
    supports (or None)."""
    if split is None:
        N, S, V, acc, _ = kernels.group_pass(data.X, C, m, T, entry.name, data.w,
                                             objective=objective, split=None, hard_tol=hard_tol)
        return N, S, V, acc, None, None
    g, d = C.shape
    ns = int(split.numel())
    parts = []
    rows_of: list[Tensor] = []
    cols_of: list[Tensor] = []
    weights_of: list[Tensor] = []
    # a rank without rows (a subsample can leave it none) sums zeros from one empty chunk
    for s in list(data.chunks(g)) or [slice(0, 0)]:
        Xc = data.X[s]
        gw = torch.zeros(Xc.shape[0], ns, dtype=torch.float64)
        parts.append(kernels.group_pass(Xc, C, m, T, entry.name, data.weight(s),
                                        objective=objective, split=split, hard_tol=hard_tol,
                                        gains_out=gw)[:4])
        r, c = gw.nonzero(as_tuple=True)  # each (row, splitting group) of a support
        rows_of.append(r + s.start)
        cols_of.append(c)
        weights_of.append(gw[r, c])
    N, S, V, acc = (torch.stack(t).sum(dim=0) for t in zip(*parts, strict=True))
    rows, cols, weights = torch.cat(rows_of), torch.cat(cols_of), torch.cat(weights_of)
    order = torch.argsort(cols, stable=True)  # grouped by splitting group, rows in order
    rows, cols, weights = rows[order], cols[order], weights[order]
    bounds = torch.searchsorted(cols, torch.arange(ns + 1)).tolist()
    supports = [(rows[bounds[i] : bounds[i + 1]], weights[bounds[i] : bounds[i + 1]])
                for i in range(ns)]
    if matrix_free:
        return N, S, V, acc, None, supports
    A = torch.zeros(ns, d, d, dtype=torch.float64)
    for i, j in enumerate(split.tolist()):  # products over group j's support, by chunks
        r, u = supports[i]
        step = chunk_rows(max(1, r.numel()), d, data.chunk_size)
        for b in range(0, r.numel(), step):
            Y = data.X[r[b : b + step]].double() - C[j].double()  # (b_j, d)
            A[i].addmm_((Y * u[b : b + step].unsqueeze(1)).T, Y)
    return N, S, V, acc, A, None


def _top_eigenpairs_matrix_free(X: Tensor, C: Tensor, split: Tensor,
                                supports: list[tuple[Tensor, Tensor]],
                                scale: Tensor) -> tuple[Tensor, Tensor]:
    r"""The largest eigenvalue (g',) and a unit eigenvector (g', d) of each gain matrix
    ``scale_j A_j``, ``A_j = sum_i u_i (x_i - c_j)(x_i - c_j)^T`` over the support ``(rows,
    u)`` of group ``split[j]``: :func:`rbfkmeans.spread.top_eigenpair` of the support's rows
    less ``c_j``, ``O(n_j d)`` per Lanczos step, no ``d x d`` matrix."""
    vals = torch.zeros(len(supports), dtype=torch.float64)
    vecs = torch.zeros(len(supports), C.shape[1], dtype=torch.float64)
    for i, (j, (rows, u)) in enumerate(zip(split.tolist(), supports, strict=True)):
        # in the data's precision (float32 rows: T_j to ~1e-7, the rows' own resolution)
        vals[i], vecs[i] = top_eigenpair(X[rows] - C[j].to(X.dtype), u * scale[i])
    return vals, vecs


def _torch_sums(data: Data, C: Tensor, m: Tensor, T: float, entry: Assignment, objective: bool,
                split: Tensor | None, hard_tol: float, plain: bool = True
                ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """The sums of :func:`group_stats` by chunked torch operations: ``N``, ``S``, ``V``,
    ``acc = [F_T, J, soft weight]`` and the gain matrices of the groups ``split`` (None
    without). ``plain=False``: from shifted scores, the objective in an order that overflows
    only where its value does (:func:`rbfkmeans.stats.shifted_scores`)."""
    g, d = C.shape
    dev, dt = data.X.device, data.X.dtype
    critical = split is not None
    C_sq = row_norms_sq(C)
    N = torch.zeros(g, dtype=dt, device=dev)
    S = torch.zeros(g, d, dtype=dt, device=dev)
    V = torch.zeros(g, dtype=torch.float64, device=dev)
    acc = torch.zeros(3, dtype=torch.float64, device=dev)  # F_T, J, soft weight
    A = torch.zeros(len(split), d, d, dtype=torch.float64, device=dev) \
        if split is not None else None
    for s in data.chunks(g if data.w is None else max(g, d)):  # weighted rows are copied (Xw)
        Xc = data.X[s]  # (b, d)
        w = data.weight(s)
        if plain:
            Z = torch.addmm(C_sq.unsqueeze(0), Xc, C.T, beta=-0.5 / T, alpha=1.0 / T)  # (b, g)
            lift = None
        else:  # (b, g) with row maxima 0, lift (b,) = T max_l Z_il
            Z, lift = shifted_scores(Xc, C, C_sq, T)
        Q = group_memberships(Z, m, entry)  # (b, g)
        Xw = Xc if w is None else Xc * w.unsqueeze(1)
        N += Q.sum(dim=0) if w is None else w @ Q
        S.addmm_(Q.T, Xw)
        if objective or critical:
            zmax, lab = Z.max(dim=1)  # (b,) the nearest group (only these passes need it)
            top = 2.0 * T * zmax if lift is None else 2.0 * lift  # (b,) 2T max_l Z_il
            dmin = (data.X_sq[s] - top).clamp_(min=0.0)  # (b,)
            wd = torch.ones_like(dmin, dtype=torch.float64) if w is None else w.double()
            V.index_add_(0, lab, dmin.double() * wd)
        if objective:
            gap = zmax.unsqueeze(1) - Z  # (b, g) = (d_ij - dmin_i) / 2T
            if lift is None:
                row = dmin + 2.0 * T * ((Q * gap).sum(dim=1) - _group_entropy(Q, m, entry.name))
            else:  # gaps of inf (memberships 0) capped: 0 * max, not 0 * inf; 2T may overflow
                gap.clamp_(max=torch.finfo(gap.dtype).max)
                energy = (Q * gap).sum(dim=1) - _group_entropy(Q, m, entry.name)  # (b,)
                row = dmin + T * (2.0 * energy)
            soft = (Q.amax(dim=1) < 1.0 - hard_tol) | (m[lab] > 1)  # a group of copies is soft
            acc += torch.stack([row.double() @ wd, dmin.double() @ wd, soft.double() @ wd])
        if A is not None and split is not None and split.numel():
            Qs, ms = Q[:, split], m[split].to(Q.dtype)  # (b, g'), (g',)
            if entry.name == "softmax":
                gamma = Qs / ms
            elif entry.name == "entmax15":
                gamma = (Qs / ms).clamp(min=0).sqrt()
            else:
                gamma = (Qs > 0).to(Q.dtype)
            gw = gamma.double() * (1.0 if w is None else w.double().unsqueeze(1))  # (b, g')
            Xd = Xc.double()
            for i, j in enumerate(split.tolist()):  # one (b, d) buffer at a time
                Y = Xd - C[j].double()  # (b, d)
                A[i].addmm_((Y * gw[:, i : i + 1]).T, Y)  # (d, d)
    return N, S, V, acc, A
