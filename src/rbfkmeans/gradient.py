r"""The gradient view: centroid steps by autograd on the relaxed objective.

By the envelope theorem every relaxation has ``dF_T/dc_j = 2 N_j (c_j - m_j)``
(:mod:`rbfkmeans.objectives`), so the gradient step with the per-cluster rate
``eta_j = 1 / (2 N_j)``,

.. math::

    c_j \leftarrow c_j - \eta_j \frac{\partial F_T}{\partial c_j} = m_j,

is the soft-Lloyd update, and Lloyd's update at ``T = 0``. A single global learning rate does not
do this, and neither does differentiating the bare weighted loss ``sum_ij w_i r_ij d_ij`` through
``R`` without the entropy term (``objective="bare"``). :class:`GradientStep` runs these steps (or
any ``torch.optim`` optimiser on a :class:`~rbfkmeans.KMeansLayer`) as the step of the annealing
driver, chunk by chunk and summed over ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._validation import (
    check_finite,
    check_matrix,
    check_nonnegative,
    check_positive_int,
    check_real,
    check_temperature,
    check_tensor,
    check_vector,
    compute_dtype,
)
from .assignments import Assignment, get_assignment
from .distances import membership_scores, sq_distances
from .errors import NonFiniteError
from .layer import KMeansLayer
from .objectives import objective_from_distances
from .passes import Data, check_data
from .relocation import _empty_tol, relocate_empty

__all__ = ["GradientStep", "gradient_step"]


def gradient_step(
    X: Tensor,
    C: Tensor,
    T: float,
    assignment: str | Assignment,
    *,
    sample_weight: Tensor | None = None,
    lr: float | Tensor | None = None,
    objective: str = "relaxed",
) -> tuple[Tensor, Tensor, Tensor]:
    r"""One explicit gradient step on the centroids ``C`` (k, d) through autograd, on ``X`` (n, d).

    ``objective="relaxed"`` differentiates ``F_T`` (the layer's objective, entropy included);
    ``objective="bare"`` differentiates ``sum_ij w_i r_ij d_ij`` with ``R`` depending on ``C``
    but no entropy term, which is *not* ``2 N_j (c_j - m_j)`` at finite ``T``.
    With ``lr=None`` the per-cluster step ``eta_j = 1 / (2 N_j)`` is used, which makes the step
    land on ``m_j`` (the soft-Lloyd update; Lloyd's update when hard). ``lr`` is a finite
    number ``>= 0`` or a tensor of such rates that broadcasts to ``C``'s shape (per cluster:
    ``(k, 1)``). Integer and float16/bfloat16 ``X`` and ``C`` are computed in float32, the
    distances in the two's common dtype, and ``sample_weight`` in that. Returns
    ``(C_new, grad, N)``.

    Only shapes and dtypes are checked up front (the annealing's gradient solver calls this per
    chunk and iteration), and the objective and gradient once, as scalars and ``(k, d)``: where
    they are not finite ``X``, ``C`` and ``sample_weight`` are checked for NaN and inf (named),
    and a step whose objective overflows float32 is computed again in float64 (the result cast
    back); beyond float64 ``ValueError`` names ``T``. The weights must be ``>= 0``. The
    memberships are those of the row-shifted scores (:func:`_step`), so a tiny ``T`` gives the
    hard step.
    """
    entry = get_assignment(assignment)
    T = check_temperature(T, "T")
    check_matrix(C, "C", "(k, d)")
    if check_matrix(X, "X", "(n, d)").shape[0] == 0:
        raise ValueError("X must have at least one row; got shape (0, d)")
    if objective not in ("relaxed", "bare"):
        raise ValueError(f"objective must be 'relaxed' or 'bare'; got {objective!r}")
    if sample_weight is not None:
        check_vector(sample_weight, "sample_weight", X.shape[0])
    lr = _check_lr(lr, C)
    X, C = X.to(compute_dtype(X.dtype)), C.to(compute_dtype(C.dtype))  # float32/64: as they are
    step = _step(X, C, T, entry, sample_weight, lr, objective)
    if step is not None:
        return step
    check_finite(X, "X")  # read only here: NaN or inf rows make F NaN
    check_finite(C, "C")
    if sample_weight is not None:
        check_finite(sample_weight, "sample_weight")
    # F overflowed (float32 distances, or a temperature beyond float32): again in float64
    if X.dtype != torch.float64 or C.dtype != torch.float64:
        w64 = None if sample_weight is None else sample_weight.double()
        lr64 = lr.double() if isinstance(lr, Tensor) else lr
        step = _step(X.double(), C.double(), T, entry, w64, lr64, objective)
        if step is not None:
            dtype = torch.promote_types(X.dtype, C.dtype)
            if all(bool(torch.isfinite(t.to(dtype)).all()) for t in step):
                return step[0].to(dtype), step[1].to(dtype), step[2].to(dtype)
    tried = "float64" if C.dtype == torch.float64 else f"{str(C.dtype)[6:]} and float64"
    raise NonFiniteError(f"T={T!r} with these X and C overflows {tried}: the objective is not "
                         "finite; use a smaller temperature or rescale X and C")


def _step(X: Tensor, C: Tensor, T: float, entry: Assignment, sample_weight: Tensor | None,
          lr: float | Tensor | None, objective: str) -> tuple[Tensor, Tensor, Tensor] | None:
    """:func:`gradient_step` on checked arguments, None where the objective or its gradient is
    not finite.
    The memberships are those of the row-shifted scores ``-(d_ij - min_l d_il) / (2T)``
    (:func:`~rbfkmeans.distances.membership_scores`: the mappings are shift-invariant, and no
    row overflows to ``-inf`` at tiny ``T``); where ``2T`` rounds to 0 the step is the hard one."""
    Cp = C.detach().clone().requires_grad_(True)
    D = sq_distances(X, Cp)  # (n, k); validates shapes
    if sample_weight is not None:
        sample_weight = sample_weight.to(device=D.device, dtype=D.dtype)
    w = 1 if sample_weight is None else sample_weight
    z = None if entry.hard or T == 0.0 else membership_scores(D, T)
    hard = z is None
    if hard:
        # J = sum_i w_i sum_j r_ij d_ij with R piecewise constant: its gradient is the same
        R = torch.zeros_like(D).scatter_(1, D.detach().argmin(1, keepdim=True), 1.0)
        F = ((R * D).sum(1) * w).sum()
    elif objective == "relaxed":
        F = objective_from_distances(D, T, entry, sample_weight)
    else:
        F = ((entry.forward(z, dim=1) * D).sum(1) * w).sum()
    if not bool(torch.isfinite(F)):
        return None
    (grad,) = torch.autograd.grad(F, Cp)
    if not bool(torch.isfinite(grad).all()):  # (k, d): products inside F's graph overflowed
        return None
    with torch.no_grad():
        R = (
            torch.zeros_like(D).scatter_(1, D.argmin(1, keepdim=True), 1.0)
            if hard
            else entry.forward(z.detach(), dim=1)  # type: ignore[union-attr]
        )
        w_vec = torch.ones(X.shape[0], dtype=D.dtype, device=X.device) if sample_weight is None \
            else sample_weight
        N = w_vec @ R  # (k,)
        if lr is None:
            eta = 1.0 / (2.0 * N.clamp(min=torch.finfo(N.dtype).tiny))
            C_new = torch.where((N > 0).unsqueeze(1), C - eta.unsqueeze(1) * grad, C)
        else:
            C_new = C - lr * grad
    return C_new.detach(), grad.detach(), N


def _check_lr(lr: Any, C: Tensor) -> float | Tensor | None:
    """``lr`` as given (None), a float, or a real tensor broadcasting to ``C``'s shape; finite
    and ``>= 0`` (a tensor of rates is small: at most ``C``'s size), else raise naming it."""
    if lr is None:
        return None
    if isinstance(lr, Tensor) and lr.numel() != 1:
        check_tensor(lr, "lr")
        try:
            shape = torch.broadcast_shapes(lr.shape, C.shape)
        except RuntimeError:
            shape = None
        if shape != C.shape:
            raise ValueError(f"lr must be a number or a tensor that broadcasts to C's shape "
                             f"{tuple(C.shape)}; got shape {tuple(lr.shape)}")
        if not bool(torch.isfinite(lr).all()):
            raise NonFiniteError(f"lr must be finite and >= 0; got {lr.tolist()}")
        if not bool((lr >= 0).all()):
            raise ValueError(f"lr must be finite and >= 0; got {lr.tolist()}")
        return lr
    return check_real(lr, "lr", minimum=0.0)


class GradientStep:
    r"""The iterations at one temperature by autograd on a :class:`~rbfkmeans.KMeansLayer`.

    With ``optimizer=None`` each iteration is the per-cluster step ``eta_j = 1/(2 N_j)``
    (:func:`gradient_step`, equal to the soft-Lloyd step; empty clusters relocated as there);
    otherwise ``optimizer(layer.parameters())`` (any ``torch.optim`` optimiser, its state kept
    across temperatures) steps on ``F_T / sum(w)``. Gradients are accumulated over row chunks (no
    pass holds more than a chunk's memberships and their autograd graph) and summed over ranks.
    Iterations stop when ``sum_j ||c_j^new - c_j||^2 <= tol`` or after ``max_iter``. On a cosine
    :class:`~rbfkmeans.passes.Data` the layer is a cosine one (its objective the spherical
    ``F_T``) and the per-cluster step is followed by the projection onto the sphere, which makes
    it the spherical soft-Lloyd step ``c_j <- m_j / ||m_j||``.
    """

    def __init__(
        self,
        assignment: str | Assignment,
        C0: Tensor,
        *,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        max_iter: int = 50,
        tol: float = 0.0,
    ) -> None:
        self.assignment = get_assignment(assignment)
        check_finite(check_matrix(C0, "C0", "(k, d)"), "C0")  # (k, d): small
        self.layer = KMeansLayer(C0, temperature=1.0, assignment=self.assignment.name)
        self.opt = optimizer(self.layer.parameters()) if optimizer is not None else None
        self._stepped = False  # whether the optimiser has moved the centroids yet
        if optimizer is not None and not isinstance(self.opt, torch.optim.Optimizer):
            raise TypeError("optimizer must build a torch.optim.Optimizer from the parameters "
                            f"it is given; {optimizer!r} returned {type(self.opt).__name__} "
                            f"{self.opt!r}"[:300])
        self.max_iter = check_positive_int(max_iter, "max_iter")
        self.tol = check_nonnegative(tol, "tol")

    def _lloyd_rate(self, data: Data, C: Tensor, T: float) -> Tensor:
        grad, N = torch.zeros_like(C), C.new_zeros(C.shape[0])
        for s in data.chunks(C.shape[0]):
            _, g, Nc = gradient_step(data.X[s], C, T, self.assignment,
                                     sample_weight=data.weight(s))
            grad += g
            N += Nc
        data.comm.sum_(grad, N)
        eta = 1.0 / (2.0 * N.clamp(min=torch.finfo(N.dtype).tiny))  # (k,) 1 / (2 N_j)
        C_new = torch.where((N > 0).unsqueeze(1), C - eta.unsqueeze(1) * grad, C)
        C_new = data.project(C_new, C)  # cosine: m_j / ||m_j||, the spherical soft-Lloyd step
        empty = _empty_tol(float(N.sum())) >= N  # (k,) the rule of the soft-Lloyd step
        return relocate_empty(data, C_new, empty) if bool(empty.any()) else C_new

    def _optimizer_step(self, data: Data, wsum: float, iteration: int) -> None:
        """One step of the optimiser on ``F_T / sum w``. ``NonFiniteError`` naming the optimiser
        where its steps have taken the centroids where the objective is no longer finite, or
        where a step leaves them NaN or infinite: ``X`` is finite and the annealing starts from
        centroids within its reach, so its learning rate (or another of its settings) is too
        large for the data."""
        assert self.opt is not None
        self.opt.zero_grad()
        try:
            for s in data.chunks(self.layer.n_clusters):  # d(F_T / sum w) chunk by chunk
                (self.layer.objective(data.X[s], data.weight(s)) / wsum).backward()
        except NonFiniteError as exc:
            if not self._stepped:
                raise
            raise self._diverged(iteration, "the objective at the centroids its steps reached "
                                            "is no longer finite") from exc
        if self.layer.centroids.grad is not None:
            data.comm.sum_(self.layer.centroids.grad)
        self.opt.step()
        self._stepped = True
        if not bool(torch.isfinite(self.layer.centroids.detach().sum())):  # one reduction
            raise self._diverged(iteration, "the centroids are NaN or infinite after its step")

    def _diverged(self, iteration: int, what: str) -> NonFiniteError:
        """The error of an optimiser whose steps left the finite range at ``iteration``."""
        assert self.opt is not None
        lrs = [group.get("lr") for group in self.opt.param_groups]
        lr = lrs[0] if len(lrs) == 1 else lrs
        return NonFiniteError(
            f"optimizer: {type(self.opt).__name__} (lr={lr}) diverged at iteration {iteration} "
            f"at temperature={self.layer.temperature!r}: {what}; X is finite and the annealing "
            "started within its reach, so use a smaller learning rate")

    def __call__(self, data: Data, C: Tensor, T: float) -> tuple[Tensor, int]:
        """The iterations at temperature ``T`` from the centroids ``C`` (k, d) on ``data``: the
        step's ``k`` centroids (those of ``C0``) of the data's ``d`` features, else raise naming
        ``C``. Returns the centroids reached and the iterations taken."""
        if check_data(data).d != self.layer.n_features:
            raise ValueError(f"data must have the {self.layer.n_features} features of the "
                             f"step's centroids C0; got {data.d}")
        shape = (self.layer.n_clusters, data.d)
        if tuple(check_matrix(C, "C", "(k, d)").shape) != shape:
            raise ValueError(f"C must have shape {shape} (the step's k={shape[0]} centroids of "
                             f"the data's d={shape[1]} features); got {tuple(C.shape)}")
        with torch.no_grad():
            self.layer.centroids.copy_(C)
        self.layer.temperature = T
        self.layer.metric = data.metric.name  # the data's geometry (cosine: spherical k-means)
        wsum = data.total_weight() if self.opt is not None else 1.0
        it = 0
        for it in range(1, self.max_iter + 1):
            C_old = self.layer.centroids.detach().clone()
            if self.opt is None:
                C_new = self._lloyd_rate(data, C_old, T)
                with torch.no_grad():
                    self.layer.centroids.copy_(C_new)
            else:
                self._optimizer_step(data, wsum, it)
            if float(((self.layer.centroids.detach() - C_old) ** 2).sum()) <= self.tol:
                break
        return data.project(self.layer.centroids.detach().clone(), C), it
