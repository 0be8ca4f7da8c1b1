r"""How a :class:`~rbfkmeans.VectorQuantizer` keeps its codebook in training: the k-means step,
the seeding, dead codes, the statistics of each batch.

With ``update="kmeans"`` the codebook of a :class:`~rbfkmeans.VectorQuantizer` is not trained by
gradient: after each training forward it takes the mini-batch k-means step
(:mod:`rbfkmeans.streaming`), with the batch's memberships
``r_ij`` (one-hot at ``T = 0``) and running counts ``n_j``,

.. math::

    N_j = \sum_i r_{ij}, \quad S_j = \sum_i r_{ij} x_i, \quad
    n_j \leftarrow \gamma\, n_j + N_j, \quad c_j \leftarrow c_j + \frac{S_j - N_j c_j}{n_j}.

``gamma = 1`` is exact mini-batch k-means (MacQueen's rule a batch at a time, the gradient step on
``J`` with ``eta_j = 1/(2 n_j)``); ``gamma < 1`` forgets old batches and is the exponential moving
average of counts and sums: with ``s_j = n_j c_j`` it reads ``n_j <- gamma n_j + N_j``,
``s_j <- gamma s_j + S_j``, ``c_j = s_j / n_j``.

The other parts of a training step, whatever the update:

* **Initialisation.** The first training batch (or batches, until ``k`` rows have arrived)
  seeds the codebook by greedy k-means++ (:func:`rbfkmeans.seeding.kmeans_plusplus`, drawn from
  a generator seeded with ``seed``) or by a full :class:`~rbfkmeans.RBFKMeans` fit
  (``random_state=seed``); until then the buffer ``initialized`` is False, and the rows that
  wait are part of the module's state (its extra state: saved by ``state_dict``, replaced by
  ``load_state_dict``). A seeding batch with fewer distinct rows than codes seeds equal codes,
  with a ``ConvergenceWarning``.
* **Dead codes.** A code that no vector of ``dead_code_steps`` consecutive training batches was
  assigned to is reset to an input vector of the current batch, drawn without replacement in
  a uniformly random order of its rows, a row equal to a live code or to one already taken
  skipped (a revived code equals no other code; with fewer such rows than dead codes the others
  wait for a later batch); its running statistics (count ``n_j``, unused steps) restart at 0.
  A batch of no vectors (on every rank) is no step: nothing decays, no code counts as unused.
* **Statistics** of each batch in :attr:`VectorQuantizer.stats`: ``usage`` the fraction of codes
  used, ``perplexity = exp(-sum_j p_j log p_j)`` with ``p_j`` the fraction of the batch's vectors
  assigned to code ``j`` (``k`` when uniform, 1 when one code takes all), and the number of codes
  revived.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ._parameters import agree_on_parameters
from ._validation import check_tensor
from .assignments import get_assignment
from .comm import Comm
from .distances import membership_scores
from .errors import NonFiniteError
from .estimator import RBFKMeans
from .metrics import get_metric
from .passes import Data
from .quantizer_checks import distinct_rows, warn_if_codes_coincide
from .seeding import kmeans_plusplus

__all__ = ["CodebookUpdates", "code_perplexity"]


def code_perplexity(used: Tensor) -> Tensor:
    """``exp(-sum_j p_j log p_j)`` with ``p = used / sum(used)`` for code counts ``used`` (k,)."""
    check_tensor(used, "used")
    if used.dim() != 1 or used.numel() == 0:
        raise ValueError(f"used must be a non-empty 1-D tensor of code counts (k,); got shape "
                         f"{tuple(used.shape)}")
    if not bool(torch.isfinite(used).all()):
        raise NonFiniteError("used must hold finite counts >= 0; got a non-finite entry")
    if bool((used < 0).any()):
        raise ValueError("used must hold finite counts >= 0; got a negative entry")
    p = used.double() / used.double().sum().clamp_min(1.0)  # (k,)
    return torch.exp(-torch.special.xlogy(p, p).sum())


class CodebookUpdates:
    """The codebook's training steps of :class:`~rbfkmeans.VectorQuantizer` (``self`` is the
    quantiser: its ``codebook``, ``counts``, ``unused_steps`` and ``initialized`` buffers, its
    ``update``, ``decay``, ``dead_code_steps``, ``assignment``, ``temperature``, ``metric``,
    ``init`` and ``seed``, its generator and the rows awaiting the seeding)."""

    @torch.no_grad()
    def _step(self: Any, X: Tensor, D: Tensor, indices: Tensor, comm: Comm) -> None:
        """Statistics over all ranks, the k-means step, dead-code revival (module docstring)."""
        k = self.n_codes
        used = torch.bincount(indices, minlength=k).double()  # (k,) hard counts
        sums: tuple[Tensor, Tensor] | None = None
        if self.update == "kmeans":
            R = self._memberships(D)  # (n, k), None when hard (one-hot at the nearest code)
            if R is None:
                S = X.new_zeros(k, self.dim).index_add_(0, indices, X)  # (k, d)
                comm.sum_(used, S)
                sums = used.to(X.dtype), S  # N (k,), S
            else:
                sums = R.sum(dim=0), R.T @ X  # (k,), (k, d)
                comm.sum_(used, *sums)
        else:
            comm.sum_(used)
        if not bool(used.any()):  # no vector on any rank: no step (no decay, no code unused)
            self._record(used, 0)
            return
        if sums is not None:
            self._kmeans_step(*sums)
        self.unused_steps.copy_(torch.where(used > 0, 0, self.unused_steps + 1))
        revived = 0
        if self.dead_code_steps is not None:
            dead = self.unused_steps >= self.dead_code_steps  # (k,) the same on every rank
            if bool(dead.any()):
                revived = self._revive(dead, X, comm)
        self._record(used, revived)

    def _memberships(self: Any, D: Tensor) -> Tensor | None:
        """``R = m(-D / 2T)`` (n, k) of the assignment, or None for the hard (one-hot) rule."""
        entry = get_assignment(self.assignment)
        z = None if entry.hard else membership_scores(D, self.temperature)
        if z is None:
            return None
        return entry.forward(z, dim=1)

    def _kmeans_step(self: Any, N: Tensor, S: Tensor) -> None:
        """``n_j <- gamma n_j + N_j``, ``c_j <- c_j + (S_j - N_j c_j) / n_j``."""
        C = self.codebook.to(S.dtype)  # (k, d)
        self.counts.mul_(self.decay).add_(N.double())
        n = self.counts.to(S.dtype)
        rate = torch.where(n > 0, 1.0 / n.clamp_min(torch.finfo(S.dtype).tiny), 0.0)  # (k,)
        C = C + rate.unsqueeze(1) * (S - N.unsqueeze(1) * C)  # (k, d)
        # cosine: back onto the sphere (spherical k-means); a zero row keeps its old direction
        self.codebook.copy_(get_metric(self.metric).project(C, self.codebook, "codebook"))

    def _revive(self: Any, dead: Tensor, X: Tensor, comm: Comm) -> int:
        """Reset the ``dead`` codes to distinct input rows of the batches of all ranks, drawn
        without replacement: the rows in the order of one random permutation of their
        concatenation, a row equal (in the codebook's dtype) to a live code or to a row taken
        before skipped. With fewer such rows than dead codes, the lowest-indexed dead codes are
        reset and the others wait for a later batch. Returns the number of codes reset."""
        j = dead.nonzero().squeeze(1)  # (m,) codes to reset
        rows = comm.counts(X.shape[0])
        total = sum(rows)
        if total == 0:
            return 0
        m = int(j.numel())
        order = torch.randperm(total, generator=self._generator)  # (total,) global rows
        start = sum(rows[: comm.rank])
        taken = distinct_rows(self.codebook[~dead].to(X.device))  # the live codes, then the rows
        live = taken.shape[0]
        low, size = 0, m
        while taken.shape[0] < live + m and low < total:  # m rows, then twice as many, ...
            g = order[low : low + size]  # (size,) the next draws
            mine = (g >= start) & (g < start + X.shape[0])  # rows this rank holds
            drawn = X.new_zeros(g.numel(), self.dim)  # (size, d)
            drawn[mine.to(X.device)] = X[(g[mine] - start).to(X.device)]
            comm.sum_(drawn)  # one rank contributes each row
            taken = distinct_rows(torch.cat([taken, drawn.to(taken.dtype)]))[: live + m]
            low, size = low + size, 2 * size
        new = taken[live:]  # (r, d) r <= m distinct rows, none a live code
        j = j[: new.shape[0]]
        self.codebook[j.to(self.codebook.device)] = new.to(self.codebook.device)
        self.counts[j] = 0.0
        self.unused_steps[j] = 0
        return int(j.numel())

    @torch.no_grad()
    def _initialize(self: Any, X: Tensor, comm: Comm) -> None:
        """Seed the codebook once ``k`` rows have arrived (over all ranks). Under
        ``torch.distributed`` the ranks' settings are compared first (every rank raises naming
        those that differ: a different ``n_codes`` or ``dim`` had left the ranks waiting, a hard
        update beside a soft one aborted gloo)."""
        agree_on_parameters(comm, {
            "n_codes": self.n_codes, "dim": self.dim, "update": self.update,
            "assignment": self.assignment, "temperature": self.temperature,
            "metric": self.metric, "init": self.init, "decay": self.decay,
            "dead_code_steps": self.dead_code_steps}, "VectorQuantizer's")
        waiting = [*self._pending, X.clone()]  # kept only once this call cannot fail
        if comm.sum_scalars(sum(int(x.shape[0]) for x in waiting))[0] < self.n_codes:
            self._pending = waiting
            return
        rows = [x.to(X.device) for x in waiting]  # loaded ones may lie elsewhere
        X0 = torch.cat(rows) if len(rows) > 1 else rows[0]  # (m, d)
        drawn = self._generator.get_state()
        try:
            C0 = self._seed_codes(X0, comm)  # (k, d)
        except BaseException:  # Ctrl-C too: the rows wait on, the generator as it was
            self._generator.set_state(drawn)
            raise
        comm.broadcast_(C0, src=0)
        if self.init == "k-means++" and comm.rank == 0:  # RBFKMeans warns for itself
            warn_if_codes_coincide(C0.to(self.codebook.dtype), stacklevel=6)
        self.codebook.copy_(C0.to(self.codebook.dtype))
        self.counts.zero_()
        self.unused_steps.zero_()
        self._pending = []  # seeded: nothing waits (a seeding that raised kept them waiting)
        self.initialized.fill_(True)

    def _seed_codes(self: Any, X0: Tensor, comm: Comm) -> Tensor:
        """The first codebook (k, d) from the rows ``X0`` (m, d) that have arrived: a
        k-means++ draw from the quantizer's generator, or an :class:`~rbfkmeans.RBFKMeans` fit,
        on the metric's set of codes."""
        if self.init == "k-means++":
            C0 = kmeans_plusplus(Data(X0, comm=comm, validate=False), self.n_codes,
                                 generator=self._generator)  # (k, d)
        else:
            est = RBFKMeans(self.n_codes, metric=self.metric, random_state=self.seed)
            est.fit(X0.cpu().numpy())
            C0 = torch.as_tensor(np.asarray(est.cluster_centers_), dtype=X0.dtype,
                                 device=X0.device)  # (k, d)
        return get_metric(self.metric).project(C0, self.codebook, "codebook")

    @torch.no_grad()
    def _renormalize(self: Any) -> None:
        """Rescale the codes to unit length (cosine), in place, when they have left it."""
        C = self.codebook
        norms = C.norm(dim=1, keepdim=True)  # (k, 1)
        if bool(((norms - 1.0).abs() > 4 * torch.finfo(C.dtype).eps).any()):
            C.copy_(get_metric(self.metric).project(C, None, "codebook"))

    def _record(self: Any, used: Tensor, revived: int) -> None:
        """The statistics of a batch from its hard counts ``used`` (k,)."""
        self.stats = {
            "usage": (used > 0).double().mean(),
            "perplexity": code_perplexity(used),
            "revived": torch.tensor(revived),
        }
