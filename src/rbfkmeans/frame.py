r"""The frame a fit computes in: the data centred and rescaled when the raw values would cost
accuracy or range.

Every pass computes ``d_ij = ||x_i||^2 - 2 x_i . c_j + ||c_j||^2`` (one matrix product). Its
terms are as large as ``||x||^2`` while the distance is as large as the spread, so rounding
leaves an absolute error of about ``eps (||x_i||^2 + ||c_j||^2)``: on data far from the origin
(a column of years, coordinates shifted by ``1e8``) the distances, and then the labels, are
wrong. And squared values overflow or underflow long before the values do (float32 data of size
``1e20`` or ``1e-20``). A translation and a power-of-two rescaling change neither the labels nor
the memberships (the temperature is rescaled with the distances), so a fit runs on

.. math::

    x' = 2^e (x - \mu), \qquad c = 2^{-e} c' + \mu, \qquad d = 2^{-2e} d', \quad T = 2^{-2e} T',

with ``mu`` the weighted mean when ``||mu||^2 > tr(Sigma)`` (the offset exceeds the spread: the
expansion would lose more than a bit; else ``mu = 0`` and no copy is made; sparse rows,
:mod:`rbfkmeans.sparse`, are never shifted), and ``e`` chosen so
that the largest ``|x'|`` is about 1 when the largest ``|x - mu|`` lies outside
``[2^-MAX_EXPONENT, 2^MAX_EXPONENT]`` (else ``e = 0``). Multiplying by a power of two is exact,
so the rescaled fit is the same fit. The rounding of a distance is then ``eps`` times the spread,
whatever the offset; data whose squared deviations (times ``4 d sum(w)``) overflow float64 have
no representable objective and are refused with a ``ValueError`` naming ``X``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from ._validation import (
    check_finite,
    check_matrix,
    check_nonnegative,
    check_tensor,
    check_vector,
    real_array,
    tensor_of,
)
from .distances import chunk_rows, iter_chunks
from .errors import NonFiniteError
from .sparse import SparseRows, is_sparse

if TYPE_CHECKING:
    from .comm import Comm

__all__ = ["MAX_EXPONENT", "Frame", "scale_by_power_of_two"]

#: dense or sparse rows (:mod:`rbfkmeans.sparse`)
Rows = TypeVar("Rows", Tensor, SparseRows)

#: sparse rows (never centred) are refused where the rounding of their distances, expanded about
#: the origin, ``2 eps (||mu||^2 + tr)``, exceeds this fraction of their spread ``tr``: in float64
#: a mean 4.7e5 spreads from the origin, in float32 20 (1e8 + N(0, 1) rows stored sparse had an
#: ``inertia_`` 38% off in float64 and two blobs merged in float32)
SPARSE_ROUNDING = 1e-4
#: data whose largest deviation from the frame's origin lies within ``2^+-MAX_EXPONENT`` is not
#: rescaled: its squared distances are far inside the range of float32
MAX_EXPONENT = 40


def scale_by_power_of_two(X: Rows, exponent: int, *, inplace: bool = False) -> Rows:
    """``2^exponent X``, exactly: in factors of ``2^+-step``, each finite in ``X``'s dtype.

    One factor would not do for data of subnormal size: ``2^133`` is infinite in float32 and
    ``2^1030`` in float64, while the products of such data with them are not. ``X`` itself when
    ``exponent`` is 0; with ``inplace`` ``X`` (a tensor the caller owns) is overwritten."""
    if not isinstance(X, SparseRows):
        check_tensor(X, "X")
    if not X.dtype.is_floating_point:
        raise TypeError(f"X must have a floating-point dtype; got {X.dtype}")
    if isinstance(exponent, bool) or not isinstance(exponent, int | np.integer):
        raise TypeError(f"exponent must be an integer; got {type(exponent).__name__} "
                        f"{exponent!r}")
    exponent = int(exponent)
    if not exponent:
        return X
    step = math.frexp(torch.finfo(X.dtype).max)[1] - 1  # 2^step is finite in X's dtype
    full, rest = divmod(abs(exponent), step)
    sign = 1 if exponent > 0 else -1
    for e in ([rest] if rest else []) + [step] * full:  # the remainder first: a shrinking
        X = X.mul_(2.0**(sign * e)) if inplace else X * 2.0**(sign * e)  # value rounds once
        inplace = True
    return X


class Frame:
    """``x' = 2^e (x - shift)``: the coordinates a fit computes in (module docstring).

    ``shift`` (d,) or None, ``exponent`` ``e``, ``trace`` the weighted trace of the covariance
    of the data it was chosen for (in the data's units; None when not computed).
    :meth:`enter` maps data or centroids into the frame, :meth:`leave` maps centroids back,
    :meth:`sq_to` and :meth:`sq_from` convert squared quantities (distances, objectives,
    temperatures). ``shift`` is None or a finite real 1-D tensor, ``exponent`` an integer,
    ``trace`` None or a finite number ``>= 0`` (else ``TypeError`` / ``ValueError`` naming it).
    """

    def __init__(self, shift: Tensor | None = None, exponent: int = 0,
                 trace: float | None = None) -> None:
        if shift is not None and check_tensor(shift, "shift").dim() != 1:
            raise ValueError(f"shift must be a 1-D tensor (d,); got shape {tuple(shift.shape)}")
        if shift is not None:
            check_finite(shift, "shift")
        if isinstance(exponent, bool) or not isinstance(exponent, int | np.integer):
            raise TypeError(f"exponent must be an integer; got {type(exponent).__name__} "
                            f"{exponent!r}")
        self.shift = shift
        self.exponent = int(exponent)
        # sum w ||x - mu||^2 / sum w of the data it was chosen for
        self.trace = None if trace is None else check_nonnegative(trace, "trace")

    @property
    def identity(self) -> bool:
        return self.shift is None and self.exponent == 0

    def __repr__(self) -> str:
        shifted = "none" if self.shift is None else f"({self.shift.numel()},)"
        return f"Frame(shift={shifted}, exponent={self.exponent})"

    @classmethod
    @torch.no_grad()
    def choose(cls, X: Tensor, sample_weight: Tensor | None = None, *,
               chunk_size: int | None = None, comm: Comm | None = None,
               name: str = "X") -> Frame:
        """The frame of the data ``X`` (n, d) with weights ``sample_weight`` (n,), summed over
        ``comm``'s ranks. Raises ``ValueError`` naming ``name`` when the data's squared
        deviations overflow float64.

        One chunked pass gathers the weighted sums of ``x`` and of ``||x||^2`` (float64) and the
        largest ``|x|``. Where that settles the frame, it is the frame: the largest ``|x|``
        within ``2^+-MAX_EXPONENT`` (no rescaling) and ``||mu||^2`` clearly below the trace
        ``E||x||^2 - ||mu||^2`` (no shift: ``2 ||mu||^2 <= (1 - 2^-10) E||x||^2``, where the
        trace is at least half of ``E||x||^2`` and loses at most a bit to cancellation).
        Otherwise a second pass sums ``||x - mu||^2`` and finds the largest ``|x - mu|``
        directly. ``X`` is a floating-point matrix (or sparse rows), ``sample_weight`` a finite
        tensor (n,), else ``TypeError`` / ``ValueError`` naming them."""
        if not is_sparse(X):
            check_matrix(X, name, "(n, d)")
        if not X.dtype.is_floating_point:
            raise TypeError(f"{name} must have a floating-point dtype; got {X.dtype}")
        if sample_weight is not None:
            check_finite(check_vector(sample_weight, "sample_weight", X.shape[0]),
                         "sample_weight")
        if is_sparse(X):
            return cls._choose_sparse(X, sample_weight, name)
        n, d = X.shape
        dev = X.device
        rows = chunk_rows(n, d, chunk_size)
        tot = torch.zeros(1, dtype=torch.float64, device=dev)
        s1 = torch.zeros(d, dtype=torch.float64, device=dev)
        s2 = torch.zeros(1, dtype=torch.float64, device=dev)  # sum_i w_i ||x_i||^2
        top = torch.zeros(1, dtype=torch.float64, device=dev)  # max |x|
        for s in iter_chunks(n, rows):
            sq = torch.linalg.vector_norm(X[s], dim=1).double().square_()  # (b,)
            if sample_weight is None:  # chunk sums in the data's precision: the shift need
                tot += s.stop - s.start  # only be near the mean (float64 where they overflow)
                part = X[s].sum(dim=0).double()
                s1 += part if bool(torch.isfinite(part).all()) else X[s].double().sum(dim=0)
                s2 += sq.sum()
            else:
                wc = sample_weight[s].double()
                tot += wc.sum()
                s1 += wc @ X[s].double()
                s2 += sq @ wc
            if s.stop > s.start:
                lo, hi = torch.aminmax(X[s])
                top = torch.maximum(top, torch.maximum(-lo, hi).double())
        if comm is not None:
            comm.sum_(tot, s1, s2)
            top = comm.all_gather(top.unsqueeze(0)).amax()
        if not float(tot) > 0:
            return cls()
        mu = s1 / tot  # (d,)
        magnitude, moment, offset = float(top), float(s2 / tot), float(mu @ mu)
        if (2.0**-MAX_EXPONENT <= magnitude <= 2.0**MAX_EXPONENT and math.isfinite(moment)
                and 2.0 * offset <= (1.0 - 2.0**-10) * moment):  # settled by the first pass
            return cls(None, 0, moment - offset)
        # per chunk: sum_i w_i ||x_i - mu||^2 and max |x - mu|
        acc = torch.zeros(1, dtype=torch.float64, device=dev)
        far = torch.zeros(1, dtype=torch.float64, device=dev)
        mu_x = mu.to(X.dtype)  # the deviations in the data's precision, summed in float64
        info = torch.finfo(X.dtype)  # squares within the precision's range, else in float64
        squares_fit, squares_exact = info.max / 16, info.tiny / info.eps
        for s in iter_chunks(n, rows):
            Xc = X[s] - mu_x  # (b, d)
            if not Xc.numel():
                continue
            lo_c, hi_c = torch.aminmax(Xc)
            m = torch.maximum(-lo_c, hi_c).double()
            if squares_exact <= float(m) * float(m) <= squares_fit / d:  # squared in Xc itself
                sq = Xc.square_().sum(dim=1).double()
            else:  # the squares would overflow or underflow the data's precision
                sq = (X[s].double() - mu).square_().sum(dim=1)
            acc += sq.sum() if sample_weight is None else sq @ sample_weight[s].double()
            far = torch.maximum(far, m)
        if comm is not None:
            comm.sum_(acc)
            far = comm.all_gather(far.unsqueeze(0)).amax()
        trace, spread = float(acc / tot), float(far)
        if not math.isfinite(trace) or not math.isfinite(float(tot) * 4.0 * d * spread * spread):
            raise NonFiniteError(
                f"{name} spreads too far for float64: its squared deviations from the mean "
                f"overflow (largest |x - mean| {spread:.3g} over {d} features and a total weight "
                f"of {float(tot):.3g}); the supported range is "
                "max |x - mean| * sqrt(4 d sum(w)) < 1.3e154. Rescale the data"
                + ("" if sample_weight is None else " or sample_weight"))
        shifted = float(mu @ mu) > trace
        largest = spread if shifted else magnitude
        exponent = 0
        if largest > 0 and not 2.0**-MAX_EXPONENT <= largest <= 2.0**MAX_EXPONENT:
            exponent = -math.frexp(largest)[1]  # 2^e largest in [0.5, 1)
        return cls(mu.to(X.dtype) if shifted else None, exponent, trace)

    @classmethod
    def _choose_sparse(cls, X: SparseRows, sample_weight: Tensor | None, name: str) -> Frame:
        """The frame of sparse rows: never shifted (centring would fill every entry), rescaled
        by the same rule from the largest ``|x|``; the trace from the stored entries."""
        d = X.shape[1]
        Xd = X.double()
        w = None if sample_weight is None else sample_weight.double()
        tot = float(X.shape[0]) if w is None else float(w.sum())
        if not tot > 0:
            return cls()
        mu = Xd.sum(dim=0) if w is None else Xd.tmm(w)  # (d,) sums
        sq = Xd.square().sum(dim=1)  # (n,)
        moment = float(sq.sum() if w is None else sq @ w)
        mu = mu / tot
        trace = max(moment / tot - float(mu @ mu), 0.0)
        magnitude = float(Xd.val.abs().max()) if X.nnz else 0.0
        if not math.isfinite(moment) or not math.isfinite(tot * 4.0 * d * magnitude**2):
            raise NonFiniteError(
                f"{name} spreads too far for float64: its squared entries overflow (largest |x| "
                f"{magnitude:.3g} over {d} features and a total weight of {tot:.3g}); the "
                "supported range is max |x| * sqrt(4 d sum(w)) < 1.3e154. Rescale the data")
        offset = float(mu @ mu)  # ||mu||^2: the distances are expanded about the origin
        if trace > 0 and 2.0 * float(torch.finfo(X.dtype).eps) * (offset + trace) > \
                SPARSE_ROUNDING * trace:
            raise ValueError(
                f"{name} lies too far from the origin for sparse rows in {X.dtype}: its mean is "
                f"{math.sqrt(offset):.3g} from the origin against a spread of "
                f"{math.sqrt(trace):.3g} (root of the trace), and sparse rows are never centred "
                "(that would fill every entry), so their distances, expanded about the origin, "
                f"would keep under {-math.log10(SPARSE_ROUNDING):.0f} digits; pass {name} as a "
                "dense array, which the fit centres, or centre it yourself")
        exponent = 0
        if magnitude > 0 and not 2.0**-MAX_EXPONENT <= magnitude <= 2.0**MAX_EXPONENT:
            exponent = -math.frexp(magnitude)[1]
        return cls(None, exponent, trace)

    # -- into and out of the frame -----------------------------------------------------------
    def _check_width(self, X: Any, name: str) -> None:
        """Raise unless ``X`` is a real tensor (or sparse rows) (..., d) of the shift's ``d``
        features (any width when the frame is not shifted), naming ``name``."""
        if not isinstance(X, SparseRows):
            check_tensor(X, name)
        if self.shift is not None and (X.dim() < 1 or X.shape[-1] != self.shift.numel()):
            raise ValueError(f"{name} must have shape (..., {self.shift.numel()}) (the frame's "
                             f"features); got {tuple(X.shape)}")

    def enter(self, X: Rows, *, inplace: bool = False) -> Rows:
        """``2^e (X - shift)`` (..., d); ``X`` itself when the frame is the identity. With
        ``inplace`` ``X`` (a tensor the caller owns) is overwritten. A sparse fit's frame is
        never shifted (:meth:`choose`): sparse rows are rescaled as they are. Sparse rows that
        enter a shifted frame (a model fitted on dense rows far from the origin) are made dense
        first: shifting the centroids alone would leave the rows behind."""
        self._check_width(X, "X")
        if self.identity:
            return X
        if self.shift is None:
            return scale_by_power_of_two(X, self.exponent, inplace=inplace)
        rows: Tensor = X.to_dense() if isinstance(X, SparseRows) else X  # (n, d)
        shift = self.shift.to(device=rows.device, dtype=rows.dtype)
        out = rows.sub_(shift) if inplace or rows is not X else rows - shift
        # sparse rows come back dense here (the TypeVar says Rows)
        return scale_by_power_of_two(out, self.exponent, inplace=True)  # type: ignore[return-value]

    def leave(self, C: Tensor) -> Tensor:
        """Centroids ``C`` (..., d) in the data's coordinates: ``2^-e C + shift`` (a new tensor
        unless the frame is the identity)."""
        self._check_width(C, "C")
        if not C.dtype.is_floating_point:
            raise TypeError(f"C must have a floating-point dtype; got {C.dtype}")
        C = scale_by_power_of_two(C, -self.exponent)
        if self.shift is not None:
            C = C + self.shift.to(device=C.device, dtype=C.dtype)
        return C

    def leave_numpy(self, C: np.ndarray) -> np.ndarray:
        """:meth:`leave` for a NumPy array (the annealing history's centroids), whatever its
        memory layout (a view with negative strides is copied)."""
        A = np.asarray(C)
        if A.dtype == np.bool_ or not np.issubdtype(A.dtype, np.number):
            raise TypeError(f"C must be an array of numbers; got {type(C).__name__} of dtype "
                            f"{A.dtype}")
        self._check_width(tensor_of(A), "C")
        if self.identity:
            return C
        return self.leave(tensor_of(A)).numpy()

    def sq_to(self, value: float) -> float:
        """A squared quantity (a temperature, a distance) in the frame's units: ``4^e value``
        (``+-inf`` where that exceeds float64, as for data of subnormal size)."""
        try:
            return math.ldexp(float(value), 2 * self.exponent)
        except OverflowError:
            return math.copysign(math.inf, float(value))

    def sq_from(self, value: float) -> float:
        """A squared quantity of the frame in the data's units: ``4^-e value``."""
        return math.ldexp(float(value), -2 * self.exponent)

    def init(self, init: Any) -> Any:
        """An estimator's ``init`` for a fit in this frame: a name as it is, an array mapped
        into the frame, a callable wrapped so that it sees and returns the data's coordinates."""
        if self.identity or isinstance(init, str):
            return init
        d = None if self.shift is None else self.shift.numel()
        if callable(init):
            user: Callable[..., Any] = init

            def framed(X: np.ndarray, k: int, random_state: Any) -> np.ndarray:
                C = real_array(user(self.leave_numpy(X), k, random_state),
                               "the array init returned")
                if not _numeric_matrix(C, d):
                    return C  # initial_centers names the problem
                return self.enter(torch.from_numpy(C.astype(np.float64))).numpy()

            return framed
        C0 = real_array(init, "init")
        if not _numeric_matrix(C0, d):
            return init  # initial_centers names the problem
        return self.enter(torch.from_numpy(C0.astype(np.float64))).numpy()


def _numeric_matrix(C: np.ndarray, d: int | None) -> bool:
    """Whether ``C`` is a finite real (k, d) matrix (``d`` None: any width)."""
    return (C.ndim == 2 and (d is None or C.shape[1] == d) and C.dtype != np.bool_
            and np.issubdtype(C.dtype, np.number) and not np.iscomplexobj(C)
            and bool(np.isfinite(C).all()))
