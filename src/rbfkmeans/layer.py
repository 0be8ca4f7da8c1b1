r"""The k-means assignment step as a one-layer network.

.. math::

    R = m\!\left(-\frac{D}{2T}\right),\qquad
    -\frac{d_{ij}}{2T} + \frac{\lVert x_i\rVert^2}{2T} = (W x_i + b)_j,\quad
    W = C / T,\; b_j = -\frac{\lVert c_j\rVert^2}{2T},

with ``m`` a simplex mapping (softmax, entmax-1.5, sparsemax; all invariant to the row constant
``||x_i||^2 / 2T``) and ``T >= 0`` the temperature; ``T = 0`` is k-means' hard nearest-centroid
rule. So ``KMeansLayer(C, T, "softmax")(X) == softmax(Linear(W, b)(X))`` exactly.

Example (the interview question): ``x = [1, 2]``, ``c_1 = [0, 0]``, ``c_2 = [2, 2]`` give
``d = (5, 1)``; the mass goes to ``c_2``, all of it as ``T -> 0``.

With ``metric="cosine"`` (spherical k-means, :mod:`rbfkmeans.metrics`) the scores are
``z_ij = <x_hat_i, c_hat_j> / T``: the Linear layer ``W = C_hat / T``, ``b = 0`` applied to the
normalised inputs ``x_hat = x / ||x||``, and the centroids are kept on the unit sphere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.module import _IncompatibleKeys

from ._validation import (
    check_bool,
    check_dense,
    check_finite,
    check_matrix,
    check_nonnegative,
    check_temperature,
    check_tensor,
    compute_dtype,
    tensor_of,
)
from .assignments import check_assignment, get_assignment
from .distances import membership_scores, sq_distances
from .errors import NonFiniteError
from .mappings import hardmax
from .metrics import check_metric, get_metric, normalize_rows
from .objectives import objective_from_distances
from .state_loading import load_all_or_nothing

__all__ = ["KMeansLayer"]


_GIVE_VALUES = " (give a meta layer values with to_empty(device=...), then load_state_dict)"
"""How a layer built on the meta device gets values, said where it is refused for lack of them."""


def _sparse_row_sq(X: Tensor) -> Tensor:
    """``||x_i||^2`` (n,) of a 2-D sparse (COO or CSR) tensor, as a dense tensor."""
    coo = X.to_sparse_coo().coalesce()
    out = torch.zeros(X.shape[0], dtype=X.dtype, device=X.device)
    return out.index_add_(0, coo.indices()[0], coo.values().square())


def _divided(t: Tensor, by: float) -> Tensor:
    """``t / by`` for a temperature factor ``by``; where ``|by|`` is below ``t``'s smallest
    normal number (subnormal, or 0 once rounded) the division runs in float64 and is cast back
    (a zero score stays 0 rather than ``0 / 0``)."""
    if abs(by) < torch.finfo(t.dtype).tiny:
        return (t.double() / by).to(t.dtype)
    return t / by


class KMeansLayer(nn.Module):
    r"""Soft (or hard) nearest-centroid assignment ``R = m(-||x - c||^2 / 2T)``.

    Parameters
    ----------
    centroids : Tensor or array (k, d)
        Initial centroids ``C``; copied into a parameter (the caller's array is not touched).
        On the meta device (or built inside ``with torch.device("meta")``) the layer has shapes
        but no values, as torch's own layers: they are neither checked nor normalised, and it
        computes nothing (``ValueError`` naming the meta device) until ``to_empty(device=...)``
        and ``load_state_dict`` give it a real layer's.
    temperature : float, default 1.0
        ``T >= 0``; ``T = 0`` gives one-hot rows of the nearest centroid (ties to the lowest index).
    assignment : {"softmax", "entmax15", "sparsemax", "hard"}, default "softmax"
        The simplex mapping ``m``. ``"hard"`` ignores ``T``.
    learnable : bool, default True
        Whether ``centroids`` is a trainable ``nn.Parameter``.
    metric : {"sqeuclidean", "cosine"}, default "sqeuclidean"
        ``"cosine"``: spherical k-means, ``R = m(cos(x, c) / T)``. The centroids are stored
        normalised (a zero row raises) and used through ``c / ||c||``, so a gradient step that
        moves them off the sphere changes only their directions; a zero input row raises.

    ``forward(X)`` takes ``X`` (n, d) (or any (..., d)) and returns ``R`` (..., k), rows on the
    simplex, differentiable in ``X`` and ``C``. float16/bfloat16 inputs are computed in float32.
    A 2-D torch sparse tensor (COO or CSR) ``X`` (n, d) is read through one sparse-dense product
    ``X C^T`` (``||x||^2`` from its stored entries), never densified; the gradient reaches ``C``.
    ``temperature`` is a number (an ``nn.Parameter`` is refused: anneal it by assignment).

    ``forward``, ``distances`` and ``scores`` scan nothing, as :func:`rbfkmeans.sq_distances`
    (a scan every step would cost about as much as the distances, and a device synchronisation):
    NaN or inf in ``X`` give NaN rows there. ``predict`` refuses them, naming ``X``, and
    ``objective`` looks at its scalar result once, as the functions of
    :mod:`rbfkmeans.objectives` do.
    """

    centroids: Tensor

    def __init__(
        self,
        centroids: Any,
        temperature: float = 1.0,
        assignment: str = "softmax",
        *,
        learnable: bool = True,
        metric: str = "sqeuclidean",
    ) -> None:
        super().__init__()
        learnable = check_bool(learnable, "learnable")
        self.metric = metric
        if isinstance(centroids, str | bytes) or centroids is None:
            raise TypeError("centroids must be a tensor or an array (k, d); got "
                            f"{type(centroids).__name__}")
        try:
            C = tensor_of(centroids).detach().clone()
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"centroids must be a tensor or an array (k, d) of numbers; got "
                            f"{type(centroids).__name__} ({exc})") from None
        check_dense(check_matrix(C, "centroids", "(k, d)"), "centroids")
        if C.shape[0] < 1 or C.shape[1] < 1:
            raise ValueError(
                f"centroids must be a non-empty (k, d) matrix; got shape {tuple(C.shape)}"
            )
        C = C.to(compute_dtype(C.dtype))
        if not C.is_meta:  # a meta tensor holds no values to check or normalise (nn.Linear's
            C = self._checked_values(C)  # way: to_empty, then load_state_dict, gives them)
        if learnable:
            self.centroids = nn.Parameter(C)
        else:
            self.register_buffer("centroids", C)
        self.temperature = temperature
        self.assignment = assignment

    def _checked_values(self, C: Tensor) -> Tensor:
        """``C`` (k, d), checked finite, and normalised for the cosine metric."""
        if not torch.isfinite(C).all():
            raise NonFiniteError("centroids must be finite; got NaN or inf entries")
        return normalize_rows(C, "centroids") if self.metric == "cosine" else C

    # -- hyper-parameters, validated on every assignment ------------------------------------
    @property
    def temperature(self) -> float:
        """``T >= 0`` (float)."""
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = check_temperature(value, "temperature")

    @property
    def assignment(self) -> str:
        """The simplex mapping's name."""
        return self._assignment

    @assignment.setter
    def assignment(self, value: str) -> None:
        self._assignment = check_assignment(value, "assignment")

    @property
    def metric(self) -> str:
        """``"sqeuclidean"`` or ``"cosine"`` (:mod:`rbfkmeans.metrics`)."""
        return self._metric

    @metric.setter
    def metric(self, value: str) -> None:
        self._metric = check_metric(value, "metric")

    @property
    def n_clusters(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.centroids.shape[1])

    def __setattr__(self, name: str, value: Any) -> None:
        # nn.Module registers a Parameter before any property setter runs: a temperature given
        # as one would skip the check and never be trained (the forward reads a float)
        if name == "temperature" and isinstance(value, nn.Parameter):
            raise TypeError("temperature must be a number (a hyper-parameter: anneal it by "
                            "assigning floats); got an nn.Parameter "
                            f"{value.detach().reshape(-1)[:4].tolist()!r}")
        super().__setattr__(name, value)

    def get_extra_state(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "assignment": self.assignment,
                "metric": self.metric}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        # all checked before any is set: a bad state leaves the layer as it was
        self._temperature, self._assignment, self._metric = _checked_state(state)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """``nn.Module.load_state_dict``, all or nothing: a state that raises (a check of this
        layer's values, or torch's ``RuntimeError`` for unexpected or missing keys and size
        mismatches) leaves the centroids and the extra state as they were, bit for bit, and
        the exception propagates (:func:`load_all_or_nothing`). This covers direct calls; a
        parent module's ``load_state_dict`` reaches the layer through
        ``_load_from_state_dict``, which checks the values (finite dense centroids, the extra
        state) before anything is copied, but leaves it to torch (copied in part) on torch's
        own errors."""
        return load_all_or_nothing(self, state_dict, lambda: super(KMeansLayer, self)
                                   .load_state_dict(state_dict, strict=strict, assign=assign))

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        C = state_dict.get(prefix + "centroids")
        if isinstance(C, Tensor):
            check_dense(C, f"{prefix}centroids in the state dict")
        if isinstance(C, Tensor) and not C.is_meta and not bool(torch.isfinite(C).all()):
            raise NonFiniteError(f"{prefix}centroids in the state dict must be finite; got NaN or "
                                 "inf entries (the layer is left as it was)")
        own = self.centroids.dtype
        if isinstance(C, Tensor) and not C.is_meta and C.is_floating_point() and C.dtype != own \
                and not bool(torch.isfinite(C.detach().to(own)).all()):  # 1e300 into float32
            raise NonFiniteError(
                f"{prefix}centroids in the state dict must be finite in the layer's "
                f"{own}; got entries beyond its range (largest |c| "
                f"{float(C.detach().abs().max()):.3g}; the layer is left as it was)")
        if prefix + "_extra_state" in state_dict:  # before torch copies anything
            _checked_state(state_dict[prefix + "_extra_state"])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return (
            f"n_clusters={self.n_clusters}, n_features={self.n_features}, "
            f"temperature={self.temperature:g}, assignment={self.assignment!r}, "
            f"metric={self.metric!r}"
        )

    # -- computation ------------------------------------------------------------------------
    def _prepare(self, X: Tensor) -> Tensor:
        """``X`` checked (a real tensor (..., d), on a device holding values) and in the
        centroids' dtype."""
        check_tensor(X, "X")
        if "meta" in (X.device.type, self.centroids.device.type):
            raise ValueError(
                "X and the centroids must hold values: a KMeansLayer does not compute on the meta "
                f"device; got X on {X.device}, the centroids on {self.centroids.device}"
                + (_GIVE_VALUES if self.centroids.is_meta else ""))
        if (X.is_sparse or X.layout == torch.sparse_csr) and X.dim() != 2:
            raise ValueError(f"sparse X must be a 2-D (n, d) tensor; got shape {tuple(X.shape)}")
        if X.dim() < 1 or X.shape[-1] != self.n_features:
            raise ValueError(
                f"X must have shape (..., {self.n_features}) to match the centroids; "
                f"got {tuple(X.shape)}"
            )
        return X.to(self.centroids.dtype) if X.dtype != self.centroids.dtype else X

    def _cosine(self, X: Tensor) -> Tensor:
        """``cos(x, c_j)`` (..., k) of ``X`` (..., d), prepared."""
        if X.is_sparse or X.layout == torch.sparse_csr:
            norms = _sparse_row_sq(X).sqrt()  # (n,)
            zero = norms == 0
            if bool(zero.any()):
                raise ValueError(f"X has a zero row (row {int(zero.nonzero()[0])}; "
                                 f"{int(zero.sum())} in all); metric='cosine' needs every row "
                                 "to have a direction (a non-zero norm)")
            C_hat = normalize_rows(self.centroids, "centroids")
            return torch.sparse.mm(X, C_hat.T) / norms.unsqueeze(1)
        lead = X.shape[:-1]
        X_hat = normalize_rows(X, "X").reshape(-1, self.n_features)  # (n, d); errors name (...)
        cos = X_hat @ normalize_rows(self.centroids, "centroids").T  # (n, k)
        return cos.reshape(*lead, self.n_clusters)

    def _sq(self, X: Tensor) -> Tensor:
        """The squared Euclidean distances the mappings see (..., k): ``D``, or for cosine
        ``||x_hat - c_hat||^2 = 2 (1 - cos)`` (the same memberships as ``cos / T``)."""
        X = self._prepare(X)
        if self.metric == "cosine":
            return (1.0 - self._cosine(X)).mul_(2.0).clamp_(min=0.0)
        if X.is_sparse or X.layout == torch.sparse_csr:  # ||x||^2 - 2 x.c + ||c||^2 (n, k)
            C = self.centroids
            D = torch.sparse.mm(X, C.T).mul(-2.0) + (C * C).sum(dim=1)
            return (D + _sparse_row_sq(X).unsqueeze(1)).clamp(min=0.0)
        lead = X.shape[:-1]
        D = sq_distances(X.reshape(-1, self.n_features), self.centroids)
        return D.reshape(*lead, self.n_clusters)

    def distances(self, X: Tensor) -> Tensor:
        """Distances (..., k) from ``X`` (..., d) to the centroids: squared Euclidean ``D``, or
        for cosine the cosine distance ``1 - cos(x, c)``."""
        if self.metric == "cosine":
            return 1.0 - self._cosine(self._prepare(X))
        return self._sq(X)

    def scores(self, X: Tensor) -> Tensor:
        """Scores ``z = -D / (2T)`` (..., k), or for cosine ``z = cos(x, c) / T``; requires
        ``T > 0``."""
        if self.temperature == 0:
            raise ValueError("scores are -D/(2T), undefined at temperature=0; use distances()")
        if self.metric == "cosine":
            return _divided(self._cosine(self._prepare(X)), self.temperature)
        return _divided(self.distances(X), -2.0 * self.temperature)

    def forward(self, X: Tensor) -> Tensor:
        """Responsibilities ``R = m(-D / 2T)`` (..., k).

        Computed as ``m(-(D - min_j D) / 2T)`` (the same rows: ``m`` ignores a per-row constant),
        so that tiny temperatures give one-hot rows rather than NaN. For cosine ``D`` is
        ``2 (1 - cos)``, so this is ``m(cos / T)``.
        """
        D = self._sq(X)
        entry = get_assignment(self.assignment)
        z = None
        if not entry.hard and self.temperature > 0:
            z = membership_scores(D, self.temperature)
        if z is None:
            return hardmax(-D, dim=-1)
        if entry.name == "softmax":
            # shifted scores are finite with maximum 0: the plain kernel needs no special-value
            # handling (and stays traceable, e.g. for ONNX export)
            return torch.softmax(z, dim=-1)
        return entry.forward(z, dim=-1)

    def predict(self, X: Tensor) -> Tensor:
        """Index of the nearest centroid (ties to the lowest index), shape (...); for cosine
        the most similar one. NaN or inf in ``X`` raise (``ValueError`` naming ``X``)."""
        D = self._sq(X)
        if not (X.is_sparse or X.layout == torch.sparse_csr):
            check_finite(X, "X")
        elif not bool(torch.isfinite(D).all()):
            raise NonFiniteError("X must be finite; its stored entries hold NaN or inf")
        return D.argmin(dim=-1)

    def objective(self, X: Tensor, sample_weight: Tensor | None = None) -> Tensor:
        """The relaxed objective of this layer's mapping at its temperature (``J`` at ``T = 0``);
        see :mod:`rbfkmeans.objectives`. Differentiable in ``X`` and the centroids. For cosine
        it is the spherical one, half that of ``D = 2 (1 - cos)``: ``J = sum_i w_i (1 - max_j
        cos_ij)`` at ``T = 0``, ``sum_i w_i (1 - T logsumexp_j(cos_ij / T))`` for softmax."""
        D = self._sq(X).reshape(-1, self.n_clusters)
        F = objective_from_distances(D, self.temperature, self.assignment, sample_weight)
        if not bool(torch.isfinite(F)):  # one look at the scalar
            raise NonFiniteError(
                f"the objective is not finite ({F.item()!r}): X holds NaN or inf, or entries "
                "whose squared distances to the centroids overflow its dtype "
                f"({self.centroids.dtype}); check X, or compute in float64")
        return F * get_metric(self.metric).objective_scale

    # -- the Linear form --------------------------------------------------------------------
    def as_linear(self) -> nn.Linear:
        """``nn.Linear(d, k)`` with ``weight = C / T`` and ``bias = -||c||^2 / (2T)``.

        ``m(layer.as_linear()(X))`` equals ``layer(X)`` for the mapping ``m``. For cosine the
        weight is ``C_hat / T`` (unit centroids over ``T``) and the bias 0, and the Linear
        expects normalised inputs: ``m(layer.as_linear()(X / ||X||))`` equals ``layer(X)``.
        """
        T = self.temperature
        if T == 0:
            raise ValueError("as_linear needs temperature > 0 (W = C/T); got temperature=0")
        if self.centroids.is_meta:
            raise ValueError("as_linear needs centroids holding values; got them on the meta "
                             "device" + _GIVE_VALUES)
        C = self.centroids.detach()
        cosine = self.metric == "cosine"
        if cosine:
            C = normalize_rows(C, "centroids")  # C_hat
        W = C / T  # (k, d)
        b = C.new_zeros(C.shape[0]) if cosine else -(C * C).sum(dim=1) / (2.0 * T)  # (k,)
        if not (torch.isfinite(W).all() and torch.isfinite(b).all()):
            raise NonFiniteError(
                f"as_linear: weight C/T or bias -||c||^2/(2T) overflows {C.dtype} at "
                f"temperature={T:g}; use a larger temperature or float64 centroids"
            )
        if bool(((W == 0) & (C != 0)).any()):  # C/T below the dtype's least subnormal
            raise ValueError(
                f"as_linear: weight C/T underflows to 0 in {C.dtype} at temperature={T:g} (the "
                "centroids would be lost); use a smaller temperature or float64 centroids"
            )
        lin = nn.Linear(self.n_features, self.n_clusters, device=C.device, dtype=C.dtype)
        with torch.no_grad():
            lin.weight.copy_(W)
            lin.bias.copy_(b)
        return lin

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        temperature: float = 1.0,
        assignment: str = "softmax",
        *,
        check_bias: bool = True,
        atol: float = 1e-5,
        rtol: float = 1e-4,
        metric: str = "sqeuclidean",
    ) -> KMeansLayer:
        """Inverse of :meth:`as_linear`: centroids ``C = T * weight``.

        With ``check_bias`` the bias must equal ``-||c||^2 / (2T)`` (to ``atol``/``rtol``, ``rtol``
        at least 16 units of the weight's dtype: 0.016 for float16): a Linear with any other
        bias is not a k-means layer and raises ``ValueError``. With
        ``metric="cosine"`` the centroids are the unit rows ``T * weight``; with ``check_bias``
        the bias must be 0 (or absent) and every row of ``T * weight`` of norm 1, as
        :meth:`as_linear` makes them (otherwise the Linear's scores are not ``cos / T``).
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear; got {type(linear).__name__}")
        T = check_temperature(temperature)
        metric = check_metric(metric)
        check_bias = check_bool(check_bias, "check_bias")
        atol, rtol = check_nonnegative(atol, "atol"), check_nonnegative(rtol, "rtol")
        # a half-precision copy rounds every weight and bias: no tighter than its dtype allows
        rtol = max(rtol, 16.0 * torch.finfo(linear.weight.dtype).eps)
        if T == 0:
            raise ValueError("from_linear needs temperature > 0 (C = T * W); got temperature=0")
        if linear.weight.is_meta:
            raise ValueError("linear.weight must hold values; got a tensor on the meta device")
        check_finite(linear.weight.detach(), "linear.weight")
        C = linear.weight.detach() * T
        if not bool(torch.isfinite(C).all()):
            raise NonFiniteError(
                f"the centroids T * weight overflow {C.dtype} at temperature={T!r}; "
                "pass the temperature used by as_linear")
        if metric == "cosine":
            if check_bias:
                _check_cosine_linear(linear, C, T, atol, rtol)
            return cls(C, temperature=T, assignment=assignment, metric=metric)
        if check_bias:
            expected = -(C * C).sum(dim=1) / (2.0 * T)
            bias = linear.bias
            if bias is None:
                raise ValueError("linear has no bias; a k-means layer needs b = -||c||^2/(2T)")
            if not torch.allclose(bias.detach(), expected, atol=atol, rtol=rtol):
                err = (bias.detach() - expected).abs().max().item()
                raise ValueError(
                    f"linear.bias is not -||c||^2/(2T) for temperature={T:g} (max deviation "
                    f"{err:.3g}); pass the temperature used by as_linear, or check_bias=False"
                )
        return cls(C, temperature=T, assignment=assignment)


def _checked_state(state: Any) -> tuple[float, str, str]:
    """The temperature, assignment and metric of a layer's extra state, each checked (states
    saved before metrics existed have none: squared Euclidean)."""
    if not isinstance(state, dict):
        raise TypeError(f"the layer's extra state must be a dict; got {type(state).__name__}")
    return (check_temperature(state.get("temperature"), "temperature"),
            check_assignment(state.get("assignment"), "assignment"),
            check_metric(state.get("metric", "sqeuclidean"), "metric"))


def _check_cosine_linear(linear: nn.Linear, C: Tensor, T: float, atol: float, rtol: float) -> None:
    """Raise unless ``linear`` is a cosine layer's Linear: bias 0 (or none), rows of norm 1/T."""
    bias = linear.bias
    if bias is not None and not torch.allclose(bias.detach(), torch.zeros_like(bias),
                                               atol=atol, rtol=rtol):
        err = bias.detach().abs().max().item()
        raise ValueError(f"linear.bias is not 0 (max |b| {err:.3g}); a cosine k-means layer "
                         "has b = 0, or pass check_bias=False")
    norms = torch.linalg.vector_norm(C, dim=1)  # (k,) ||T w_j||
    if not torch.allclose(norms, torch.ones_like(norms), atol=atol, rtol=rtol):
        err = (norms - 1.0).abs().max().item()
        raise ValueError(
            f"linear.weight rows do not have norm 1/T for temperature={T:g} (||T w_j|| deviates "
            f"from 1 by up to {err:.3g}); pass the temperature used by as_linear, or "
            "check_bias=False"
        )
