r"""Hard assignment passes that skip the points whose nearest centroid cannot have changed.

Late Lloyd iterations move the centroids a little and change few labels, yet a full pass computes
all ``n k`` distances. Following Hamerly (2010), each point keeps an upper bound on the distance
to its centroid and a lower bound on the distance to every other one,

.. math::

    u_i \ge \lVert x_i - c_{a_i} \rVert, \qquad
    l_i \le \min_{j \ne a_i} \lVert x_i - c_j \rVert ,

and when the centroids move by ``delta_j = ||c_j^new - c_j||`` the triangle inequality keeps them
valid as ``u_i <- u_i + delta_{a_i}`` and ``l_i <- l_i - max_{j != a_i} delta_j``. With
``s_j = min_{l != j} ||c_j - c_l|| / 2`` every other centroid is also at least ``2 s_{a_i} - u_i``
away, so with ``z_i = max(l_i, 2 s_{a_i} - u_i)`` a point keeps its label when

.. math::

    z_i > u_i \quad\text{and}\quad z_i^2 - u_i^2 > 2 e_i, \qquad
    e_i = 2 (d + 4)\, \epsilon\, (\lVert x_i \rVert^2 + \max_j \lVert c_j \rVert^2),

where ``e_i`` bounds the rounding error of a squared distance computed by the one-matmul
expansion: the label a full pass would compute is then the same. For the other points ``u_i`` is
first made exact (one distance); those still in doubt get all ``k`` distances (their nearest and
second-nearest centroid reset both bounds).

The statistics ``N_j, S_j`` of a cluster whose members are unchanged are kept; the others are
summed again over their members, in row order as a full pass sums them. The labels, and so the
whole Lloyd trajectory, are those of :func:`rbfkmeans.stats.cluster_stats`' hard pass except
where two centroids are within rounding of a tie for a point.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .copies import Copies, centroid_copies, distinct, least_two
from .distances import cross_term, row_dots, row_min, row_norms_sq
from .passes import Data
from .stats import Stats

__all__ = ["MOVERS", "MOVERS_MIN_K", "BoundedAssignment"]

#: With ``k >= MOVERS_MIN_K`` centroids, the points in doubt by Hamerly's test get the exact
#: distances to the ``MOVERS`` centroids that moved most (``n m d`` products where a full pass
#: takes ``n k d``); every other centroid moved at most the next largest shift. One large move
#: (a swap trial's halves, a relocated centroid) no longer loosens every point's lower bound.
MOVERS = 16
MOVERS_MIN_K = 64


def _in_doubt(z: Tensor, u: Tensor, e: Tensor) -> Tensor:
    """The indices where ``z <= u`` or ``z^2 - u^2 <= 2 e`` (the label may have changed)."""
    return ((z <= u) | ((z - u) * (z + u) <= 2.0 * e)).nonzero().squeeze(1)


def _two_nearest(data: Data, rows: Tensor | slice, C: Tensor, C_sq: Tensor,
                 copies: Copies | None) -> tuple[Tensor, Tensor, Tensor]:
    """Squared distances to the nearest and second-nearest centroid (float64) and the nearest
    index, for the rows ``rows`` (computed exactly as the hard pass computes its labels: equal
    centroids, ``copies`` of :func:`rbfkmeans.copies.centroid_copies`, as one, the lowest index
    first and its copy second, at a tie)."""
    C, C_sq = distinct(C, C_sq, copies)
    G = cross_term(data.X[rows], C, C_sq)  # (b, k')
    if copies is not None:
        g1, lab, g2, _ = least_two(G, copies)
    else:  # the second's value only: one value reduction
        g1, lab = row_min(G)
        g2 = G.scatter_(1, lab.unsqueeze(1), math.inf).amin(dim=1) if C.shape[0] > 1 \
            else torch.full_like(g1, math.inf)
    X_sq = data.X_sq[rows]
    return (g1 + X_sq).double(), (g2 + X_sq).double(), lab


class BoundedAssignment:
    """The hard pass of a Lloyd run (module docstring): call it with the centroids of each
    iteration; it returns their :class:`~rbfkmeans.stats.Stats` (``N``, ``S`` summed over the
    ranks, ``labels`` a new tensor each call; the objectives are NaN, as with
    ``objective=False``).

    Holds three per-point vectors (labels, ``u``, ``l``) and works on ``data``'s sqeuclidean
    rows; chunks of the points in doubt bound the temporaries as a full pass does.
    """

    def __init__(self, data: Data) -> None:
        if not isinstance(data, Data):
            raise TypeError(f"data must be a rbfkmeans.passes.Data; got {type(data).__name__}")
        if data.metric.name != "sqeuclidean":
            raise ValueError(f"bounded passes need sqeuclidean data; got {data.metric.name!r}")
        self.data = data
        eps = torch.finfo(data.X.dtype).eps
        self._coef = 2.0 * (data.d + 4) * eps
        self._e_x = self._coef * data.X_sq.double()  # (n,) the ||x||^2 part of e_i
        dev = data.X.device
        self.labels = torch.empty(0, dtype=torch.long, device=dev)  # (n,) after the first call
        self._u = self._l = torch.empty(0, dtype=torch.float64, device=dev)  # (n,) the bounds
        self._N = self._S = torch.empty(0, dtype=torch.float64, device=dev)  # (k,), (k, d) sums
        self._count = torch.empty(0, dtype=torch.long, device=dev)  # (k,) members
        self._C: Tensor | None = None  # the centroids of the last call
        self._CC: Tensor | None = None  # (k, k) their distances (float64, inf on the diagonal)
        self.n_full = 0  # points that got all k distances, over every call (a diagnostic)

    def distance_bounds(self) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
        """The labels, the upper bounds ``u_i >= ||x_i - c_{l_i}||``, the lower bounds
        ``l_i <= min_{j != l_i} ||x_i - c_j||`` (float64, (n,)) and the centroids they hold
        at, after a call; None before the first."""
        if self._C is None:
            return None
        return self.labels, self._u, self._l, self._C

    def start_from(self, parent: BoundedAssignment, C: Tensor, rows: Tensor) -> None:
        """Take up ``parent``'s state (on the same data) for centroids ``C`` (k', d), of which
        row ``j`` is the parent's centroid ``rows[j]`` or is new (``rows[j] = -1``; the
        parent's centroids that no row names are gone). A point keeps its label and ``u_i``
        where its centroid is kept; ``l_i`` becomes ``min(l_i, min_{j new} ||x_i - c_j||)``
        (the parent's other centroids are a superset of those kept), from ``n m d`` products
        for the ``m`` new centroids; the points of a gone centroid get all ``k'`` distances.
        The next call then scores a swap trial's start at a fraction of a full pass's cost."""
        if parent.data.X is not self.data.X or parent.data.w is not self.data.w \
                or parent._C is None:
            raise ValueError("start_from needs a parent that has scored the same rows")
        data = self.data
        C = data.check_centroids(C)
        C_sq = row_norms_sq(C)
        self._e_x = parent._e_x  # the same rows: the same (n,) slack, shared
        e = self._e_x + self._coef * float(C_sq.max())
        renumber = torch.full((parent._C.shape[0],), -1, dtype=torch.long, device=C.device)
        kept = (rows >= 0).nonzero().squeeze(1)
        renumber[rows[kept]] = kept
        self.labels = renumber[parent.labels]
        self._u, self._l = parent._u.clone(), parent._l.clone()
        new = (rows < 0).nonzero().squeeze(1)
        if new.numel():
            C_new, C_new_sq = C[new], C_sq[new]
            for s in data.chunks(int(new.numel())):
                D = cross_term(data.X[s], C_new, C_new_sq).add_(data.X_sq[s].unsqueeze(1))
                near = (D.double().amin(dim=1) - e[s]).clamp_(min=0.0).sqrt_()
                torch.minimum(self._l[s], near, out=self._l[s])
        self._rescore((self.labels < 0).nonzero().squeeze(1), C, C_sq, e)
        self._sum_all(*C.shape)
        # the state is that of the parent's centroids where kept: the next call moves them by
        # what separates them from ``C`` (nothing, or rounding where ``C`` was projected)
        self._C = C.clone()
        self._C[kept] = parent._C[rows[kept]].to(C.dtype)

    def _bounds(self, D1: Tensor, D2: Tensor, e: Tensor) -> tuple[Tensor, Tensor]:
        return (D1 + e).clamp_(min=0.0).sqrt_(), (D2 - e).clamp_(min=0.0).sqrt_()

    def _full(self, C: Tensor, C_sq: Tensor, e_c: float) -> None:
        data = self.data
        self._CC = None
        n = data.n
        self.labels = torch.empty(n, dtype=torch.long, device=data.X.device)
        self._u = torch.empty(n, dtype=torch.float64, device=data.X.device)
        self._l = torch.empty_like(self._u)
        copies = centroid_copies(C, C_sq)
        for s in data.chunks(C.shape[0]):
            D1, D2, lab = _two_nearest(data, s, C, C_sq, copies)
            self.labels[s] = lab
            self._u[s], self._l[s] = self._bounds(D1, D2, self._e_x[s] + e_c)
        self.n_full += n
        self._sum_all(*C.shape)

    def _sum_all(self, k: int, d: int) -> None:
        """The float64 sums ``N``, ``S`` and the member counts of every point, afresh."""
        dev = self.data.X.device
        self._N = torch.zeros(k, dtype=torch.float64, device=dev)
        self._S = torch.zeros(k, d, dtype=torch.float64, device=dev)
        self._count = torch.zeros(k, dtype=torch.long, device=dev)
        self._accumulate(slice(None), self.labels)

    def _rescore(self, rows: Tensor, C: Tensor, C_sq: Tensor, e: Tensor) -> None:
        """All ``k`` distances of the points ``rows``: their labels and both bounds reset."""
        step = self.data.rows(C.shape[0])
        copies = centroid_copies(C, C_sq) if rows.numel() else None
        for start in range(0, int(rows.numel()), step):
            r = rows[start : start + step]
            D1, D2, lab = _two_nearest(self.data, r, C, C_sq, copies)
            self.labels[r] = lab
            self._u[r], self._l[r] = self._bounds(D1, D2, e[r])
        self.n_full += int(rows.numel())

    def _accumulate(self, rows: Tensor | slice, labels: Tensor, sign: int = 1) -> None:
        """Add (``sign = 1``) or remove (``-1``) the points ``rows`` with labels ``labels`` to or
        from the float64 sums ``N``, ``S`` and the member counts, chunk by chunk."""
        data = self.data
        idx = rows if isinstance(rows, Tensor) else None
        total = data.n if idx is None else int(idx.numel())
        step = data.rows(self._S.shape[1])
        for start in range(0, total, step):
            part = slice(start, min(start + step, total))
            sel = part if idx is None else idx[part]
            lab = labels[part]
            Xc = data.X[sel].double()
            ones = torch.full((Xc.shape[0],), sign, dtype=torch.long, device=Xc.device)
            self._count.index_add_(0, lab, ones)
            wc = ones.double() if data.w is None else sign * data.w[sel].double()
            self._N.index_add_(0, lab, wc)
            self._S.index_add_(0, lab, Xc * wc.unsqueeze(1))

    def _update(self, C: Tensor, C_prev: Tensor, C_sq: Tensor, e_c: float) -> None:
        data = self.data
        k = C.shape[0]
        labels, u, l = self.labels, self._u, self._l
        delta = (C.double() - C_prev.double()).norm(dim=1).mul_(1.0 + 1e-12)  # (k,)
        u.add_(delta[labels])
        e = self._e_x + e_c
        if k > 1:
            top, arg = delta.topk(2)
            l_old = l.clone() if k >= MOVERS_MIN_K else l
            l.sub_(torch.where(labels == arg[0], top[1], top[0]))
            gap = self._gaps(C.double(), delta)  # (k,) 2 s_j
            z = torch.maximum(l, gap[labels] - u)
            doubt = _in_doubt(z, u, e)
            if k >= MOVERS_MIN_K and doubt.numel():
                self._movers(C, C_sq, delta, doubt, l_old, z, u, e, gap)
                doubt = doubt[_in_doubt(z[doubt], u[doubt], e[doubt])]
        else:
            z = torch.full_like(u, math.inf)
            doubt = _in_doubt(z, u, e)
        if doubt.numel() == 0:
            return
        # the exact distance to the own centroid first (one per point), in chunks of rows
        still = []
        step = data.rows(data.d)
        for start in range(0, int(doubt.numel()), step):
            rows = doubt[start : start + step]
            lab_r = labels[rows]
            dot = row_dots(data.X[rows], C[lab_r])
            e_r = e[rows]
            u_r = (data.X_sq[rows] + (C_sq[lab_r] - 2.0 * dot)).double().add_(e_r)
            u_r = u_r.clamp_(min=0.0).sqrt_()
            u[rows] = u_r
            z_r = z[rows]
            still.append(rows[_in_doubt(z_r, u_r, e_r)])
        doubt = torch.cat(still)
        if doubt.numel() == 0:
            return
        old = labels[doubt]
        self._rescore(doubt, C, C_sq, e)
        moved = (labels[doubt] != old).nonzero().squeeze(1)
        if moved.numel():
            rows = doubt[moved]
            self._accumulate(rows, old[moved], -1)  # out of the sums of their old labels
            self._accumulate(rows, labels[rows])  # into those of their new ones
            gone = self._count == 0  # exactly empty (float sums may keep a rounding residue)
            self._N[gone] = 0.0
            self._S[gone] = 0.0

    def _gaps(self, Cd: Tensor, delta: Tensor) -> Tensor:
        """Each centroid's distance to its nearest other (k,), from the centroid distances
        kept since the last call: only the rows and columns of the centroids that moved
        (``delta > 0``) are computed again (all of them on a first call, or when more than a
        quarter moved). Late in a run few clusters change, and the ``k x k`` distances cost
        ``O(k^2 d)``: 1.4 ms a call at k = 1,024, d = 64."""
        k = Cd.shape[0]
        moved = (delta > 0).nonzero().squeeze(1)
        if self._CC is None or self._CC.shape[0] != k or 4 * moved.numel() > k:
            self._CC = torch.cdist(Cd, Cd).fill_diagonal_(math.inf)
        elif moved.numel():
            D = torch.cdist(Cd[moved], Cd)  # (m, k)
            self._CC[moved] = D
            self._CC[:, moved] = D.T
            self._CC[moved, moved] = math.inf
        return self._CC.amin(dim=1)

    def _movers(self, C: Tensor, C_sq: Tensor, delta: Tensor, rows: Tensor, l_old: Tensor,
                z: Tensor, u: Tensor, e: Tensor, gap: Tensor) -> None:
        """Tighten the lower bounds of ``rows`` (in doubt by Hamerly's test) with the exact
        distances to the ``m`` centroids that moved most: their ``l_i`` becomes
        ``min(l_i - delta_(m+1), min_{j in M, j != a_i} ||x_i - c_j||)`` (``l_old`` the bounds
        before this iteration; ``delta_(m+1)`` the largest shift outside ``M``). Updates ``l``
        and ``z`` in place."""
        data = self.data
        m = min(MOVERS, C.shape[0] - 1)
        top, arg = delta.topk(m + 1)
        movers, rest = arg[:m], top[m]
        Cm, Cm_sq = C[movers], C_sq[movers]
        step = data.rows(m)
        for start in range(0, int(rows.numel()), step):
            r = rows[start : start + step]
            D = cross_term(data.X[r], Cm, Cm_sq).add_(data.X_sq[r].unsqueeze(1)).double()
            D.masked_fill_(self.labels[r].unsqueeze(1) == movers.unsqueeze(0), math.inf)
            near = (D.amin(dim=1) - e[r]).clamp_(min=0.0).sqrt_()
            l_r = torch.minimum(l_old[r] - rest, near)
            self._l[r] = l_r
            z[r] = torch.maximum(l_r, gap[self.labels[r]] - u[r])

    @torch.no_grad()
    def __call__(self, C: Tensor) -> Stats:
        data = self.data
        C = data.check_centroids(C)
        C_sq = row_norms_sq(C)
        e_c = self._coef * float(C_sq.max()) if C.shape[0] else 0.0
        if self._C is None or self._C.shape != C.shape:
            self._full(C, C_sq, e_c)
        else:
            self._update(C, self._C, C_sq, e_c)
        self._C = C.clone()
        dt = data.X.dtype
        N, S = self._N.to(dt, copy=True), self._S.to(dt, copy=True)  # reduced, not our sums
        data.comm.sum_(N, S)
        nan = math.nan
        return Stats(N, S, nan, nan, nan, self.labels.clone())
