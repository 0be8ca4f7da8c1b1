r"""What a swap is predicted to change: the cost of removing each centroid, the gain of
splitting each cluster in two.

With ``labels`` the nearest centroid of each row and ``d^(1), d^(2)`` the squared distances to
the nearest and second-nearest centroid, deleting ``c_a`` (its rows going to their second
nearest, the other centroids held in place) raises ``J`` by exactly

.. math::

    \text{removal}[a] = \sum_{i \in S_a} w_i \,(d_i^{(2)} - d_i^{(1)}),

and splitting cluster ``j`` into parts ``P, Q`` (each given its mean) lowers it by exactly

.. math::

    \text{gain}[j] = \frac{N_P N_Q}{N_j} \lVert m_P - m_Q \rVert^2 ,\qquad
    N_P = \sum_{i \in P} w_i .

Three partitions of a cluster are scored: the cut through ``c_j`` normal to its principal axis
(power iterations on the weighted scatter, never formed); the farthest row alone
(``P = {i}``: ``w_i N_j / (N_j - w_i) ||x_i - c_j||^2``, Hartigan's move to an empty cluster);
and that row's *cell*, the rows of ``j`` nearer to it than to ``c_j`` (one Voronoi step of
2-means seeded at ``c_j`` and the far row). The axis cut is proposed unless the better far
partition gains more than ``FAR_MARGIN`` times as much.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import kernels, search_kernels
from ._validation import check_positive_int
from .passes import Data, check_data, check_labels, nearest
from .sparse import dense, is_sparse

__all__ = ["FAR_MARGIN", "removal_costs", "swap_costs"]

#: a cluster's split isolates its farthest row, or that row's cell, where the better of the two
#: gains more than this many times the axis cut. Where a cluster holds a small group of rows far
#: from the rest (a big Gaussian and a few tiny clusters far out, fewer centroids than groups)
#: the axis cut halves the big part and the group stays: 48 fits of 16 such draws (2-10
#: features) ended up to 1.111x KMeans(n_init=10)'s J, 32 at or below it; with the cells at
#: margin 2, 41, the worst 1.017x (margin 4: 38). A single row 300 times farther out than six
#: blobs gains 15-17x the cut; the rarest colours of photographs up to 2.5x (their cells up to
#: 2.4x); bench_fit's 115 default fits and the held-out 75 change on 3 and 4, within 0.5% either
#: way, as many pairs at or below the peers' J as before.
FAR_MARGIN = 2.0


def removal_costs(data: Data, C: Tensor, labels: Tensor) -> Tensor:
    """``sum_{i in S_a} w_i (d_i^(2) - d_i^(1))`` per centroid (k,), float64, over the ranks:
    the increase of ``J`` when ``c_a`` is deleted and its rows go to their second-nearest
    centroid (``labels`` the nearest of each row; ``k >= 2``)."""
    C = check_data(data).check_centroids(C)
    return _removal_and_own(data, C, _check_labels(data, labels, C))[0]


def _check_labels(data: Data, labels: Tensor, C: Tensor) -> Tensor:
    """:func:`~rbfkmeans.passes.check_labels` against ``C``'s ``k`` rows; where the labels are
    valid indices but reach past ``C`` (a ``C`` short of rows, say), the error also names ``C``
    and its shape (only on that path: nothing more is read where they fit)."""
    try:
        return check_labels(data, labels, C.shape[0])
    except ValueError as exc:
        if isinstance(labels, Tensor) and labels.shape == (data.n,) \
                and labels.dtype == torch.long and data.n and int(labels.min()) >= 0:
            raise ValueError(f"{exc}: one label per row of C, which has {C.shape[0]} rows "
                             f"(shape {tuple(C.shape)})") from None
        raise


def _removal_and_own(data: Data, C: Tensor, labels: Tensor) -> tuple[Tensor, Tensor | None]:
    """:func:`removal_costs`, and each local row's ``d_i^(1)`` (n,) where the pass computes it
    (the chunked torch pass; None from the compiled one)."""
    if kernels.usable(data.X, C.shape[0]):
        removal = search_kernels.spread_pass(data.X, C, labels, data.w, scatter=False)[0]
        data.comm.sum_(removal)
        return removal, None
    two = nearest(data, C, two=True).dist  # (n, 2)
    extra = (two[:, 1] - two[:, 0]).double()  # (n,)
    if data.w is not None:
        extra = extra * data.w.double()
    removal = torch.zeros(C.shape[0], dtype=torch.float64, device=data.X.device)
    removal.index_add_(0, labels, extra)
    data.comm.sum_(removal)
    return removal, two[:, 0]


def _scatter_times(data: Data, C: Tensor, labels: Tensor, V: Tensor) -> Tensor:
    """``U_a = Sigma_a V_a`` (k, d) over the ranks, ``Sigma_a`` the weighted scatter matrix of
    cluster ``a``, without forming it: ``sum_{i in S_a} w_i y_i (y_i . V_a)``, ``y_i = x_i - c_a``
    (float64, chunked)."""
    k, d = C.shape
    if kernels.usable(data.X, k, scores=True):  # wide data: one compiled sweep
        U = search_kernels.scatter_pass(data.X, C, labels, V, data.w)
        data.comm.sum_(U)
        return U
    U = torch.zeros(k, d, dtype=torch.float64, device=data.X.device)
    if is_sparse(data.X):  # U_a = sum w_i p_i x_i - c_a sum w_i p_i, p_i = x_i . V_a - c_a . V_a
        Cd, Vd = C.double(), V.double()
        Xd = data.X.double()
        proj = Xd.row_dot(Vd, labels) - (Cd * Vd).sum(dim=1)[labels]  # (n,)
        if data.w is not None:
            proj = proj * data.w.double()
        (Xd * proj).scatter_add_into(U, labels)
        U -= Cd * torch.zeros(k, dtype=torch.float64, device=U.device).index_add_(
            0, labels, proj).unsqueeze(1)
        data.comm.sum_(U)
        return U
    for s in data.chunks(max(k, d)):
        lab = labels[s]
        Y = (data.X[s] - C[lab]).double()  # (b, d)
        proj = (Y * V[lab]).sum(dim=1)  # (b,)
        if data.w is not None:
            proj = proj * data.w[s].double()
        U.index_add_(0, lab, Y * proj.unsqueeze(1))
    data.comm.sum_(U)
    return U


def _halves(data: Data, C: Tensor, labels: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
    """Weight (2k,) and weighted sum (2k, d) of each side of every cluster cut through ``c_a``
    normal to ``V_a`` (entry ``2a + 1`` the side ``(x - c_a).V_a > 0``), float64, local."""
    k, d = C.shape
    if kernels.usable(data.X, 2 * k, scores=True):  # wide data: one compiled sweep
        return search_kernels.halves_pass(data.X, C, labels, V, data.w)
    dev = data.X.device
    count = torch.zeros(2 * k, dtype=torch.float64, device=dev)
    total = torch.zeros(2 * k, d, dtype=torch.float64, device=dev)
    if is_sparse(data.X):  # the side from x_i . V_a - c_a . V_a, the sums from stored entries
        Xd, Vd = data.X.double(), V.double()
        side = Xd.row_dot(Vd, labels) - (C.double() * Vd).sum(dim=1)[labels] > 0
        half = 2 * labels + side.long()
        wc = torch.ones(data.n, dtype=torch.float64, device=dev) if data.w is None \
            else data.w.double()
        count.index_add_(0, half, wc)
        (Xd * wc).scatter_add_into(total, half)
        return count, total
    for s in data.chunks(max(k, d)):
        lab = labels[s]
        Xc = data.X[s].double()
        side = ((Xc - C[lab].double()) * V[lab]).sum(dim=1) > 0  # (b,)
        half = 2 * lab + side.long()  # (b,)
        wc = torch.ones_like(side, dtype=torch.float64) if data.w is None else data.w[s].double()
        count.index_add_(0, half, wc)
        total.index_add_(0, half, Xc * wc.unsqueeze(1))
    return count, total


def _far_cells(data: Data, C: Tensor, labels: Tensor, far: Tensor,
               dist: Tensor) -> tuple[Tensor, Tensor]:
    """Weight (k,) and weighted sum (k, d) of each cluster's rows strictly nearer to its far row
    ``far[j]`` (k, d) than to ``c_j``, float64, local. ``dist`` (n,): the rows' squared distances
    to their centroids; a row of the cell lies more than half as far from ``c_j`` as ``f_j``
    (``||f - c|| <= ||x - f|| + ||x - c|| < 2 ||x - c||``), so only those rows (with a margin
    for rounding) are compared, in chunks (all rows in one compiled sweep where the kernels
    serve). Sparse rows compare
    ``2 x . (c_j - f_j) < ||c_j||^2 - ||f_j||^2``, the same test without differences."""
    k, d = C.shape
    if kernels.usable(data.X, k):  # few features on the CPU: one compiled sweep
        return search_kernels.cells_pass(data.X, C, labels, far, data.w)
    dev, f64, sparse = data.X.device, torch.float64, is_sparse(data.X)
    count = torch.zeros(k, dtype=f64, device=dev)
    total = torch.zeros(k, d, dtype=f64, device=dev)
    Cd, far = C.double(), far.double()
    reach = (far - Cd).square().sum(dim=1)  # (k,) ||f_j - c_j||^2
    rows = (dist > 0.2 * reach[labels]).nonzero().squeeze(1)  # (m,) the rows that may be in it
    step = data.rows(d)
    for a in range(0, rows.numel(), step):
        idx = rows[a : a + step]
        lab = labels[idx]
        Xs = data.X[idx].double()
        if sparse:
            near = 2.0 * Xs.row_dot(Cd - far, lab) < (Cd.square().sum(dim=1)
                                                       - far.square().sum(dim=1))[lab]
        else:
            near = (Xs - far[lab]).square().sum(dim=1) < (Xs - Cd[lab]).square().sum(dim=1)
        w = None if data.w is None else data.w[idx].double()
        wn = near.double() if w is None else torch.where(near, w, 0.0)
        count.index_add_(0, lab, wn)
        if sparse:
            (Xs * wn).scatter_add_into(total, lab)
        else:
            total.index_add_(0, lab, Xs * wn.unsqueeze(1))
    return count, total


def _split_gain(size: Tensor, total: Tensor, part: Tensor, part_sum: Tensor) -> tuple[
        Tensor, Tensor, Tensor]:
    """``N_P N_Q / N_j ||m_P - m_Q||^2`` (k,) and the means ``m_P, m_Q`` (k, d) of a part
    ``P`` (weight ``part``, sum ``part_sum``) of each cluster and the rest ``Q``; 0 where a
    part is empty."""
    rest = size - part
    m_p = part_sum / part.clamp(min=1e-300).unsqueeze(1)
    m_q = (total - part_sum) / rest.clamp(min=1e-300).unsqueeze(1)
    both = (part > 0) & (rest > 0)
    gain = torch.where(both, part * rest / size.clamp(min=1e-300)
                       * (m_p - m_q).square().sum(dim=1), 0.0)
    return gain, m_p, m_q


@torch.no_grad()
def swap_costs(
    data: Data,
    C: Tensor,
    labels: Tensor,
    *,
    generator: torch.Generator | None = None,
    power_iter: int = 5,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""What removing each centroid costs and what splitting each cluster in two gains.

    With ``labels`` the nearest centroid of each point (``k >= 2``):

    * ``removal[a] = sum_{i in S_a} w_i (d_i^(2) - d_i^(1))``: the increase of ``J`` when ``c_a``
      is deleted and its points go to their second-nearest centroid (exact, others fixed);
    * ``gain[j] = (n_+ n_- / n_j) ||m_+ - m_-||^2``: the decrease of ``J`` when cluster ``j`` is
      cut by the hyperplane through ``c_j`` normal to its principal axis (``power_iter`` power
      iterations on the weighted scatter matrix, from a random start drawn from ``generator``)
      and each half gets its mean ``m_+``, ``m_-`` (exact for that partition; 0 when a half is
      empty);
    * ``halves`` (k, 2, d): those means.

    Where isolating the farthest row of cluster ``j`` (:func:`_farthest_rows`), or the rows
    nearer to it than to ``c_j`` (its cell), gains more than ``FAR_MARGIN`` times that cut,
    ``gain[j]`` is the larger of the two exact decreases and the halves are that part's mean and
    the mean of the rest: an outlier, or a small group far out, that the axis cut would leave in
    a half of thousands of rows (module docstring).

    All sums are accumulated in float64 and reduced over the ranks; nothing larger than a chunk.
    On a cosine ``data`` the costs are in the units of the spherical ``J`` (half the Euclidean
    ones of the normalised rows) and a trial starts from the halves projected onto the sphere.
    """
    C = check_data(data).check_centroids(C)
    k, d = C.shape
    labels = _check_labels(data, labels, C)
    power_iter = check_positive_int(power_iter, "power_iter")
    comm, dev = data.comm, data.X.device
    fused = kernels.usable(data.X, k, gains=k)  # few features on the CPU: two fused sweeps
    scatter: Tensor | None = None
    own: Tensor | None = None  # (n,) d_i^(1), where the removal's pass gives it
    if fused:
        removal, scatter = search_kernels.spread_pass(data.X, C, labels, data.w)
        comm.sum_(removal, scatter)
    else:
        removal, own = _removal_and_own(data, C, labels)
    V = torch.randn(k, d, generator=generator, dtype=torch.float64).to(dev)  # (k, d)
    for _ in range(power_iter):  # V_j <- Sigma_j V_j, Sigma_j the scatter of cluster j
        if scatter is not None:
            U = torch.bmm(scatter, V.unsqueeze(2)).squeeze(2)
        else:
            U = _scatter_times(data, C, labels, V)
        V = U / U.norm(dim=1, keepdim=True).clamp(min=1e-300)  # 0 for a cluster of one point
    if fused:
        count, total = search_kernels.halves_pass(data.X, C, labels, V, data.w)
    else:
        count, total = _halves(data, C, labels, V)
    comm.sum_(count, total)
    count, total = count.view(k, 2), total.view(k, 2, d)
    halves = total / count.clamp(min=1e-300).unsqueeze(2)  # (k, 2, d)
    both = (count > 0).all(dim=1)  # (k,)
    between = count.prod(dim=1) / count.sum(dim=1).clamp(min=1e-300)
    gain = torch.where(both, between * (halves[:, 0] - halves[:, 1]).square().sum(dim=1), 0.0)
    size, whole = count.sum(dim=1), total.sum(dim=1)  # (k,) N_j, (k, d) sum of cluster j
    _, far_row, far_w, dist = _farthest_rows(data, C, labels, size, own)
    row_gain, row, row_rest = _split_gain(size, whole, far_w, far_w.unsqueeze(1) * far_row)
    cell_w, cell_sum = _far_cells(data, C, labels, far_row, dist)
    comm.sum_(cell_w, cell_sum)
    cell_gain, cell, cell_rest = _split_gain(size, whole, cell_w, cell_sum)
    for use, part_gain, part, rest in (
            ((cell_gain >= row_gain) & (cell_gain > FAR_MARGIN * gain), cell_gain, cell,
             cell_rest),
            ((row_gain > cell_gain) & (row_gain > FAR_MARGIN * gain), row_gain, row, row_rest)):
        halves[use, 0], halves[use, 1], gain[use] = part[use], rest[use], part_gain[use]
    scale = data.metric.objective_scale  # in the units of the metric's J (1/2 for cosine)
    return scale * removal, scale * gain, halves.to(data.X.dtype)


def _farthest_rows(data: Data, C: Tensor, labels: Tensor, size: Tensor,
                   own: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per cluster ``j`` the row of largest gain ``w_i n_j / (n_j - w_i) ||x_i - c_j||^2``:
    the exact decrease of ``J`` when row ``i`` leaves cluster ``j`` (whose mean moves) for a
    centroid of its own (Hartigan's move to an empty cluster). Returns the gains (k,), the rows
    (k, d) and their weights (k,), float64, over all ranks (the first row of the first rank on a
    tie); a gain of 0 where no row can leave (a cluster of one row); and the local rows' squared
    distances to their centroids (n,), float64: ``own`` where a pass has them already."""
    k, d = C.shape
    dev, f64 = data.X.device, torch.float64
    best = torch.zeros(k, dtype=f64, device=dev)
    rows = torch.zeros(k, d, dtype=f64, device=dev)
    weights = torch.zeros(k, dtype=f64, device=dev)
    sparse = is_sparse(data.X)
    if sparse and own is None:  # (the sparse passes are the torch ones, which give it)
        own = nearest(data, C).dist
    compiled = kernels.usable(data.X, k)
    if compiled:  # few features on the CPU: one compiled sweep
        best, row, dist = search_kernels.far_pass(data.X, C, labels, data.w, size)
        found = (row >= 0).nonzero().squeeze(1)
        rows[found] = data.X[row[found]].double()
        weights[found] = 1.0 if data.w is None else data.w[row[found]].double()
    else:
        dist = torch.empty(data.n, dtype=f64, device=dev)
    for s in () if compiled else data.chunks(d):
        lab, Xs = labels[s], data.X[s]
        r = own[s].double() if own is not None else (Xs - C[lab]).double().square().sum(dim=1)
        dist[s] = r
        w = data.weight(s)
        w = torch.ones_like(r) if w is None else w.double()
        n_j = size[lab]
        g = torch.where(n_j - w > 0, w * n_j / (n_j - w).clamp(min=1e-300) * r, 0.0)
        top = torch.zeros(k, dtype=f64, device=dev).scatter_reduce(0, lab, g, "amax")
        better = top > best
        if not bool(better.any()):
            continue
        hit = ((g == top[lab]) & better[lab]).nonzero().squeeze(1)
        first = torch.full((k,), g.numel(), dtype=torch.long, device=dev).scatter_reduce(
            0, lab[hit], hit, "amin")
        js = better.nonzero().squeeze(1)
        picked = Xs[first[js]]
        rows[js] = (dense(picked) if sparse else picked).double()
        best[js], weights[js] = top[js], w[first[js]]
    if data.comm.active:  # the largest over the ranks (the lowest rank on a tie)
        table = data.comm.all_gather(torch.cat([best.unsqueeze(1), weights.unsqueeze(1), rows],
                                               dim=1)).view(-1, k, d + 2)
        rank = table[:, :, 0].argmax(dim=0)  # (k,) the first maximum
        pick = table[rank, torch.arange(k, device=dev)]
        best, weights, rows = pick[:, 0], pick[:, 1], pick[:, 2:]
    return best, rows, weights, dist
