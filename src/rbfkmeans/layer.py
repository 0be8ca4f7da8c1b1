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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ._validation import check_matrix, check_temperature, compute_dtype
from .assignments import check_assignment, get_assignment
from .distances import shifted_scores, sq_distances
from .mappings import hardmax
from .objectives import objective_from_distances

__all__ = ["KMeansLayer"]


class KMeansLayer(nn.Module):
    r"""Soft (or hard) nearest-centroid assignment ``R = m(-||x - c||^2 / 2T)``.

    Parameters
    ----------
    centroids : Tensor or array (k, d)
        Initial centroids ``C``; copied into a parameter (the caller's array is not touched).
    temperature : float, default 1.0
        ``T >= 0``; ``T = 0`` gives one-hot rows of the nearest centroid (ties to the lowest index).
    assignment : {"softmax", "entmax15", "sparsemax", "hard"}, default "softmax"
        The simplex mapping ``m``. ``"hard"`` ignores ``T``.
    learnable : bool, default True
        Whether ``centroids`` is a trainable ``nn.Parameter``.

    ``forward(X)`` takes ``X`` (n, d) (or any (..., d)) and returns ``R`` (..., k), rows on the
    simplex, differentiable in ``X`` and ``C``. float16/bfloat16 inputs are computed in float32.
    """

    centroids: Tensor

    def __init__(
        self,
        centroids: Any,
        temperature: float = 1.0,
        assignment: str = "softmax",
        *,
        learnable: bool = True,
    ) -> None:
        super().__init__()
        C = torch.as_tensor(centroids).detach().clone()
        check_matrix(C, "centroids", "(k, d)")
        if C.shape[0] < 1 or C.shape[1] < 1:
            raise ValueError(
                f"centroids must be a non-empty (k, d) matrix; got shape {tuple(C.shape)}"
            )
        C = C.to(compute_dtype(C.dtype))
        if not torch.isfinite(C).all():
            raise ValueError("centroids must be finite; got NaN or inf entries")
        if learnable:
            self.centroids = nn.Parameter(C)
        else:
            self.register_buffer("centroids", C)
        self.temperature = temperature
        self.assignment = assignment

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
    def n_clusters(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.centroids.shape[1])

    def get_extra_state(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "assignment": self.assignment}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.temperature = state["temperature"]
        self.assignment = state["assignment"]

    def extra_repr(self) -> str:
        return (
            f"n_clusters={self.n_clusters}, n_features={self.n_features}, "
            f"temperature={self.temperature:g}, assignment={self.assignment!r}"
        )

    # -- computation ------------------------------------------------------------------------
    def _prepare(self, X: Tensor) -> Tensor:
        if not isinstance(X, Tensor):
            raise TypeError(f"X must be a torch.Tensor; got {type(X).__name__}")
        if X.dim() < 1 or X.shape[-1] != self.n_features:
            raise ValueError(
                f"X must have shape (..., {self.n_features}) to match the centroids; "
                f"got {tuple(X.shape)}"
            )
        return X.to(self.centroids.dtype) if X.dtype != self.centroids.dtype else X

    def distances(self, X: Tensor) -> Tensor:
        """Squared distances ``D`` (..., k) from ``X`` (..., d) to the centroids."""
        X = self._prepare(X)
        lead = X.shape[:-1]
        D = sq_distances(X.reshape(-1, self.n_features), self.centroids)
        return D.reshape(*lead, self.n_clusters)

    def scores(self, X: Tensor) -> Tensor:
        """Scores ``z = -D / (2T)`` (..., k); requires ``T > 0``."""
        if self.temperature == 0:
            raise ValueError("scores are -D/(2T), undefined at temperature=0; use distances()")
        return self.distances(X) / (-2.0 * self.temperature)

    def forward(self, X: Tensor) -> Tensor:
        """Responsibilities ``R = m(-D / 2T)`` (..., k).

        Computed as ``m(-(D - min_j D) / 2T)`` (the same rows: ``m`` ignores a per-row constant),
        so that tiny temperatures give one-hot rows rather than NaN.
        """
        D = self.distances(X)
        entry = get_assignment(self.assignment)
        shifted = None
        if not entry.hard and self.temperature > 0:
            shifted = shifted_scores(D, self.temperature)
        if shifted is None:
            return hardmax(-D, dim=-1)
        if entry.name == "softmax":
            # shifted scores are finite with maximum 0: the plain kernel needs no special-value
            # handling (and stays traceable, e.g. for ONNX export)
            return torch.softmax(shifted[0], dim=-1)
        return entry.forward(shifted[0], dim=-1)

    def predict(self, X: Tensor) -> Tensor:
        """Index of the nearest centroid (ties to the lowest index), shape (...)."""
        return self.distances(X).argmin(dim=-1)

    def objective(self, X: Tensor, sample_weight: Tensor | None = None) -> Tensor:
        """The relaxed objective of this layer's mapping at its temperature (``J`` at ``T = 0``);
        see :mod:`rbfkmeans.objectives`. Differentiable in ``X`` and the centroids."""
        D = self.distances(X).reshape(-1, self.n_clusters)
        return objective_from_distances(D, self.temperature, self.assignment, sample_weight)

    # -- the Linear form --------------------------------------------------------------------
    def as_linear(self) -> nn.Linear:
        """``nn.Linear(d, k)`` with ``weight = C / T`` and ``bias = -||c||^2 / (2T)``.

        ``m(layer.as_linear()(X))`` equals ``layer(X)`` for the mapping ``m``.
        """
        T = self.temperature
        if T == 0:
            raise ValueError("as_linear needs temperature > 0 (W = C/T); got temperature=0")
        C = self.centroids.detach()
        W = C / T  # (k, d)
        b = -(C * C).sum(dim=1) / (2.0 * T)  # (k,)
        if not (torch.isfinite(W).all() and torch.isfinite(b).all()):
            raise ValueError(
                f"as_linear: weight C/T or bias -||c||^2/(2T) overflows {C.dtype} at "
                f"temperature={T:g}; use a larger temperature or float64 centroids"
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
    ) -> KMeansLayer:
        """Inverse of :meth:`as_linear`: centroids ``C = T * weight``.

        With ``check_bias`` the bias must equal ``-||c||^2 / (2T)`` (to ``atol``/``rtol``): a
        Linear with any other bias is not a k-means layer and raises ``ValueError``.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear; got {type(linear).__name__}")
        T = check_temperature(temperature)
        if T == 0:
            raise ValueError("from_linear needs temperature > 0 (C = T * W); got temperature=0")
        C = linear.weight.detach() * T
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
