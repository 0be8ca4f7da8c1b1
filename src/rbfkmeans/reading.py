"""How :class:`~rbfkmeans.RBFKMeans` reads its input: ``X`` validated (scikit-learn's contract,
NaN and inf, zero rows for cosine), converted to a tensor of the dtype the fit computes in on its
device (a CSR matrix to :class:`~rbfkmeans.sparse.SparseRows`, never densified), the sample
weights checked in that dtype, and the pass context of the rows read.

The compute dtype is the estimator's ``dtype``, else float64 for float64 input and float32
otherwise (float16 and bfloat16 are read as float32); float64 input fitted in float32 must keep
its values there (:func:`~rbfkmeans._parameters.check_fits_float32`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.utils import assert_all_finite
from sklearn.utils.validation import validate_data
from torch import Tensor

from ._parameters import as_float32_if_half, check_fits_float32, check_sample_weight, torch_dtype
from ._validation import tensor_of
from .comm import Comm
from .errors import NonFiniteError
from .metrics import _zero_row_error, check_nonzero_rows, get_metric
from .passes import Data
from .sparse import SparseRows

__all__ = ["ReadingMixin"]

_X_NAMED = re.compile(r"\bX\b")


def _naming_x(exc: ValueError | TypeError) -> ValueError | TypeError:
    """``exc``, raised by scikit-learn's reading of ``X``, if its message names ``X`` (``"X has
    3 features, but ... is expecting 2"``); else an error of the same type whose message does
    and keeps scikit-learn's words after it (``"Found array with 0 sample(s) ..."``, ``"could
    not convert string to float: 'abc'"``)."""
    message = str(exc)
    if _X_NAMED.search(message):
        return exc
    return type(exc)(f"X must be a 2-D array of numbers (n_samples, n_features); {message}")


class ReadingMixin:
    """Reading ``X`` and ``sample_weight`` for :class:`~rbfkmeans.RBFKMeans` (``self`` is the
    estimator: its ``dtype``, ``device``, ``metric`` and ``chunk_size``)."""

    def _torch_device(self: Any) -> torch.device:
        return torch.device(self.device) if self.device is not None else torch.device("cpu")

    def _compute_dtype(self: Any, X: np.ndarray) -> torch.dtype:
        chosen = None if self.dtype is None else torch_dtype(self.dtype)
        return chosen or (torch.float64 if X.dtype == np.float64 else torch.float32)

    def _check_X(self: Any, X: Any, *, reset: bool, min_samples: int = 1,
                 metric: str | None = None) -> np.ndarray:
        """``X`` validated for a fit (``reset``) or for inference: scikit-learn's contract, NaN
        and inf, and for a spherical ``metric`` (default: the estimator's) no zero row."""
        metric = self.metric if metric is None else metric
        X = as_float32_if_half(X)
        try:
            X = validate_data(
                self, X, reset=reset, dtype=[np.float64, np.float32],
                ensure_min_samples=min_samples, accept_sparse="csr", copy=False,
                ensure_all_finite=False,
            )
        except (ValueError, TypeError) as exc:  # scikit-learn's message, with X named
            raise _naming_x(exc) from None
        # NaN and inf: a finite torch sum, on every core, clears X (scikit-learn's own check is
        # a sum on one core, 14 ms of a 0.13 s fit of MNIST); else scikit-learn's message
        values = X.data if sp.issparse(X) else X
        finite = values.size == 0 or bool(torch.isfinite(tensor_of(values).sum()))
        if not finite:  # NaN/inf, or finite values whose sum overflows (no error then, and
            with np.errstate(over="ignore", invalid="ignore"):  # no warning of that sum)
                try:
                    assert_all_finite(X, input_name="X", estimator_name=type(self).__name__)
                except ValueError as exc:
                    raise NonFiniteError(str(exc)) from None
        if sp.issparse(X):  # rows as stored entries (rbfkmeans.sparse), never densified
            if get_metric(metric).spherical:  # (scipy sums duplicate entries in place:
                # of a copy, never of the caller's matrix)
                A = X if X.has_canonical_format else X.copy()
                zero = np.asarray(abs(A).max(axis=1).todense()).reshape(-1) == 0
                if zero.any():
                    raise _zero_row_error(torch.from_numpy(zero), "X")
            return X
        if get_metric(metric).spherical:
            check_nonzero_rows(tensor_of(X), "X")
        return X

    def _to_torch(self: Any, X: np.ndarray) -> Tensor:
        dt = self._compute_dtype(X) if not hasattr(self, "_dtype_") else self._dtype_
        if X.dtype == np.float64 and dt == torch.float32:  # dtype='float32' on float64 X
            check_fits_float32(X)
        if sp.issparse(X):
            return SparseRows.from_scipy(X, dt, self._torch_device())  # type: ignore[return-value]
        return tensor_of(X).to(device=self._torch_device(), dtype=dt)

    def _weights(self: Any, sample_weight: Any, X: np.ndarray, all_zero: bool = False
                 ) -> Tensor | None:
        if sample_weight is None:
            return None
        dt = getattr(self, "_dtype_", None)
        dtype = X.dtype if dt is None else (np.float32 if dt == torch.float32 else np.float64)
        sw = check_sample_weight(sample_weight, X.shape[0], dtype,
                                 all_zero=all_zero)  # (n,) a copy, in the compute dtype
        return torch.from_numpy(sw).to(device=self._torch_device(), dtype=self._dtype_)

    def _data(self: Any, Xt: Tensor, w: Tensor | None = None, comm: Comm | None = None,
              metric: str | None = None) -> Data:
        """The pass context of already validated data (no second NaN scan), for ``metric``
        (default: the estimator's)."""
        return Data(Xt, w, chunk_size=self.chunk_size, comm=comm, validate=False,
                    metric=self.metric if metric is None else metric)
