r"""Sparse rows: CSR data in the passes of a fit, never densified as a whole.

Text clustering runs on TF-IDF matrices with tens of thousands of columns and a few dozen
entries a row: dense, such an ``X`` would not fit in memory, and its products would cost
``d / nnz_row`` times as much as needed. :class:`SparseRows` holds a CSR matrix (row pointers,
column indices, values as tensors) and stands in for the dense ``X`` of
:class:`rbfkmeans.passes.Data`: the passes index it by chunks and rows as they index a tensor,
and the few operations they apply to it are computed from the stored entries
(``__torch_function__``):

.. math::

    X M \ \text{(the scores)}, \qquad v^T X, \quad R^T X, \quad
    S_{a_i} \mathrel{+}= w_i x_i \ \text{(the sums)}, \qquad
    x_i \cdot y_i,\ \|x_i\|^2 \ \text{(rowwise)},

each in ``O(nnz)`` (times the width of ``M`` or ``R``), on the CPU by SciPy's CSR products and
elsewhere by ``torch.sparse``. What needs a dense row (``x_i - c_j``, a row that becomes a
centroid) gets one chunk of rows densified at a time. Any other operation raises
``TypeError`` naming it, so a pass that would silently densify cannot exist.

The fit of sparse data is not centred (centring would fill every entry): the frame
(:mod:`rbfkmeans.frame`) only rescales it, as scikit-learn's ``KMeans`` also leaves sparse data
uncentred, and refuses rows whose mean lies so far from the origin that their distances,
expanded about it, would keep too few digits (``frame.SPARSE_ROUNDING``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from .distances import WIDE_DOTS
from .errors import NonFiniteError
from .metrics import _all_unit, _zero_row_error

__all__ = ["SparseRows", "dense", "is_sparse"]


def is_sparse(X: Any) -> TypeGuard[SparseRows]:
    """Whether ``X`` is a :class:`SparseRows`."""
    return isinstance(X, SparseRows)


def dense(X: Tensor | SparseRows) -> Tensor:
    """``X`` as a dense tensor (a chunk of rows; ``X`` itself when it is one)."""
    if isinstance(X, SparseRows):
        return X.to_dense()
    if not isinstance(X, Tensor):
        raise TypeError(f"X must be a torch.Tensor or SparseRows; got {type(X).__name__}")
    return X


def _check_csr(crow: Any, col: Any, val: Any, shape: Any) -> None:
    """Raise unless ``crow``, ``col``, ``val`` and ``shape`` make a valid CSR matrix (the
    class docstring), naming the part that is wrong and the value received."""
    if not all(isinstance(t, Tensor) for t in (crow, col, val)):
        raise TypeError("crow, col and val must be tensors; got "
                        f"{', '.join(type(t).__name__ for t in (crow, col, val))}")
    try:
        n, d = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be two integers (n, d); got {shape!r}") from None
    if n < 0 or d < 0:
        raise ValueError(f"shape must be two integers >= 0; got {tuple(shape)}")
    if crow.shape != (n + 1,) or col.shape != val.shape or col.dim() != 1:
        raise ValueError(f"a CSR matrix of shape {(n, d)} needs crow ({n} + 1,) "
                         "and col, val of one length; got crow "
                         f"{tuple(crow.shape)}, col {tuple(col.shape)}, val {tuple(val.shape)}")
    for name, t in (("crow", crow), ("col", col)):
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers; got {t.dtype}")
    if val.is_complex():
        raise TypeError(f"val must hold real values; got {val.dtype}")
    if not (crow.device == col.device == val.device):
        raise ValueError(f"crow, col and val must be on one device; got {crow.device}, "
                         f"{col.device}, {val.device}")
    if val.device.type == "meta":
        raise ValueError("val must hold values; got tensors on the 'meta' device")
    nnz = int(val.numel())
    if int(crow[0]) != 0 or int(crow[-1]) != nnz:
        raise ValueError(f"crow must start at 0 and end at nnz={nnz}; got crow[0]="
                         f"{int(crow[0])}, crow[-1]={int(crow[-1])}")
    if n and bool((crow[1:] < crow[:-1]).any()):
        i = int((crow[1:] < crow[:-1]).nonzero()[0])
        raise ValueError(f"crow must be non-decreasing; got crow[{i}]={int(crow[i])} > "
                         f"crow[{i + 1}]={int(crow[i + 1])}")
    if nnz:
        lo, hi = (int(v) for v in torch.aminmax(col))
        if lo < 0 or hi >= d:
            bad = lo if lo < 0 else hi
            raise ValueError(f"col must hold column indices in [0, {d}); got {bad}")
        if not bool(torch.isfinite(val).all()):
            count = int((~torch.isfinite(val)).sum())
            raise NonFiniteError(f"val must be finite; got {count} NaN/inf entries")


class SparseRows:
    """A CSR matrix (n, d) held as tensors: ``crow`` (n + 1,) row pointers, ``col`` (nnz,)
    column indices (int64), ``val`` (nnz,) float values, on one device.

    Indexing by a slice or by row indices (a tensor, an array, a list, a boolean mask) gives
    the selected rows as another :class:`SparseRows`; the arithmetic the passes need is in
    the methods below and in ``__torch_function__`` (module docstring). Instances are never
    modified in place except by :meth:`mul_`.

    The constructor checks the structure once (``O(nnz)``): integer ``crow`` starting at 0,
    non-decreasing, ending at ``nnz``; integer ``col`` with ``0 <= col < d``; real finite
    values; ``ValueError`` / ``TypeError`` naming the part. The rows this class derives from
    checked ones (chunks, selections, conversions) skip it (``check=False``).
    """

    __slots__ = ("_rows", "_scipy", "col", "crow", "shape", "val")
    ndim = 2
    requires_grad = False
    is_sparse = True

    def __init__(self, crow: Tensor, col: Tensor, val: Tensor, shape: Sequence[int], *,
                 check: bool = True) -> None:
        if check:
            _check_csr(crow, col, val, shape)
        self.crow, self.col, self.val = crow, col, val
        self.shape = torch.Size((int(shape[0]), int(shape[1])))
        self._rows: Tensor | None = None  # entry_rows(), computed on first use
        self._scipy: sp.csr_array | None = None  # scipy(), built on first use

    @classmethod
    def from_scipy(cls, A: Any, dtype: torch.dtype | None = None,
                   device: torch.device | str | None = None) -> SparseRows:
        """The rows of a SciPy sparse matrix or array ``A`` (any format: converted to CSR with
        sorted, summed duplicate entries), copied: nothing of ``A`` is shared or modified.
        Raises ``TypeError`` for anything else and ``ValueError`` for NaN or inf entries."""
        if not sp.issparse(A) or A.ndim != 2:
            raise TypeError(f"A must be a 2-D SciPy sparse matrix or array; got "
                            f"{type(A).__name__}")
        A = sp.csr_array(A, copy=True)
        if A.dtype.kind not in "fiub":
            raise TypeError(f"A must hold real numbers; got dtype {A.dtype}")
        if not np.isfinite(A.data).all():
            raise NonFiniteError(f"A holds {int((~np.isfinite(A.data)).sum())} NaN or inf entries")
        A.sum_duplicates()
        A.sort_indices()
        val = torch.from_numpy(np.asarray(A.data))
        if dtype is not None:
            val = val.to(dtype)
        return cls(torch.from_numpy(A.indptr.astype(np.int64)).to(device),
                   torch.from_numpy(A.indices.astype(np.int64)).to(device),
                   val.to(device), A.shape)  # checked: once per user matrix

    def __repr__(self) -> str:
        return (f"SparseRows(shape={tuple(self.shape)}, nnz={self.nnz}, dtype={self.dtype}, "
                f"device={self.device})")

    # -- what a tensor says about itself ------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.val.dtype

    @property
    def device(self) -> torch.device:
        return self.val.device

    @property
    def nnz(self) -> int:
        return int(self.val.numel())

    def dim(self) -> int:
        return 2

    def size(self, i: int | None = None) -> Any:
        return self.shape if i is None else self.shape[i]

    def numel(self) -> int:
        return int(self.shape[0] * self.shape[1])

    def __len__(self) -> int:
        return int(self.shape[0])

    def is_floating_point(self) -> bool:
        return self.val.is_floating_point()

    # -- copies and conversions ---------------------------------------------------------------
    def _with(self, val: Tensor) -> SparseRows:
        """The same structure with other values."""
        out = SparseRows(self.crow, self.col, val, self.shape, check=False)
        out._rows = self._rows
        return out

    def to(self, *args: Any, **kwargs: Any) -> SparseRows:
        """As ``Tensor.to``: another dtype and/or device (the structure moves with it)."""
        val = self.val.to(*args, **kwargs)
        if val.device == self.device:
            return self._with(val)
        return SparseRows(self.crow.to(val.device), self.col.to(val.device), val, self.shape,
                          check=False)

    def double(self) -> SparseRows:
        return self._with(self.val.double())

    def cpu(self) -> SparseRows:
        return self.to("cpu")

    def contiguous(self) -> SparseRows:
        return self

    def detach(self) -> SparseRows:
        return self

    def clone(self) -> SparseRows:
        return SparseRows(self.crow.clone(), self.col.clone(), self.val.clone(), self.shape,
                          check=False)

    def to_dense(self) -> Tensor:
        """The rows as a dense tensor (n, d): for a chunk of rows, never the whole data."""
        out = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        out.view(-1).index_put_((self.entry_rows() * self.shape[1] + self.col,), self.val,
                                accumulate=True)
        return out

    def scipy(self) -> sp.csr_array:
        """The rows as a SciPy CSR array (CPU; sharing the values' memory)."""
        if self._scipy is None:
            X = self.cpu()
            self._scipy = sp.csr_array((X.val.numpy(), X.col.numpy(), X.crow.numpy()),
                                       shape=self.shape)
        return self._scipy

    def numpy(self) -> sp.csr_array:
        """A copy of :meth:`scipy` (what an ``init`` callable of the estimator receives)."""
        return self.scipy().copy()

    def entry_rows(self) -> Tensor:
        """The row of each stored entry (nnz,) (kept: every product of the passes uses it)."""
        if self._rows is None:
            counts = self.crow[1:] - self.crow[:-1]
            self._rows = torch.repeat_interleave(
                torch.arange(self.shape[0], device=self.device), counts)
        return self._rows

    # -- rows ---------------------------------------------------------------------------------
    def new_empty(self, shape: Any) -> Tensor:
        """A dense tensor of this dtype and device (as ``Tensor.new_empty``)."""
        return torch.empty(shape, dtype=self.dtype, device=self.device)

    def new_zeros(self, shape: Any) -> Tensor:
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def __getitem__(self, key: Any) -> Any:
        """Rows: a slice or an index gives :class:`SparseRows`, an integer one dense row (d,)."""
        n = self.shape[0]
        if isinstance(key, int | np.integer) or (isinstance(key, Tensor) and key.dim() == 0
                                                   and not key.is_floating_point()
                                                   and key.dtype != torch.bool):
            i = int(key)
            if not -n <= i < n:
                raise IndexError(f"row {i} is out of range for {n} rows")
            return self[slice(i % n, i % n + 1)].to_dense()[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                return self[torch.arange(start, stop, step)]
            stop = max(start, stop)
            crow = self.crow[start : stop + 1]
            a, b = int(crow[0]), int(crow[-1])
            return SparseRows(crow - a, self.col[a:b], self.val[a:b], (stop - start, self.shape[1]),
                              check=False)
        idx = torch.as_tensor(np.asarray(key) if not isinstance(key, Tensor) else key)
        if idx.dtype == torch.bool:
            idx = idx.nonzero().squeeze(1)
        if idx.dim() != 1 or idx.is_floating_point():
            raise TypeError(f"rows of SparseRows are taken by a slice or a 1-D index; got {key!r}")
        idx = idx.to(device=self.device, dtype=torch.long)
        idx = torch.where(idx < 0, idx + n, idx)
        starts = self.crow[idx]
        counts = self.crow[idx + 1] - starts
        crow = torch.zeros(idx.numel() + 1, dtype=torch.long, device=self.device)
        torch.cumsum(counts, 0, out=crow[1:])
        offset = torch.repeat_interleave(starts - crow[:-1], counts)
        pos = torch.arange(int(crow[-1]), device=self.device) + offset
        return SparseRows(crow, self.col[pos], self.val[pos], (idx.numel(), self.shape[1]),
                          check=False)

    # -- elementwise --------------------------------------------------------------------------
    def _row_scale(self, v: Any) -> SparseRows:
        """``v * X`` for a scalar or a per-row factor ``v`` (n,) or (n, 1)."""
        if not isinstance(v, Tensor) or v.numel() == 1:
            return self._with(self.val * (v if not isinstance(v, Tensor) else v.reshape(())))
        if (v.dim() == 2 and v.shape[1] != 1) or v.shape[0] != self.shape[0]:
            raise TypeError(f"SparseRows of shape {tuple(self.shape)} scale by rows (n,) or "
                            f"(n, 1); got {tuple(v.shape)}")
        return self._with(self.val * v.reshape(-1)[self.entry_rows()].to(self.dtype))

    def __mul__(self, v: Any) -> SparseRows:
        return self._row_scale(v)

    __rmul__ = __mul__

    def mul_(self, v: float) -> SparseRows:
        """Scale every value by the scalar ``v`` in place."""
        self.val.mul_(v)
        return self

    def square(self) -> SparseRows:
        return self._with(self.val.square())

    def __sub__(self, other: Any) -> Tensor:
        return self.to_dense() - other  # x - c: a dense row (module docstring)

    def __rsub__(self, other: Any) -> Tensor:
        return other - self.to_dense()

    def sum(self, dim: int | None = None, dtype: torch.dtype | None = None,
            keepdim: bool = False) -> Tensor:
        """Row sums (``dim=1``), column sums (``dim=0``) or the total."""
        val = self.val if dtype is None else self.val.to(dtype)
        if dim is None:
            return val.sum()
        dim = dim % 2
        index = self.entry_rows() if dim == 1 else self.col
        out = torch.zeros(self.shape[1 - dim], dtype=val.dtype, device=self.device)
        out.index_add_(0, index, val)
        return out.unsqueeze(dim) if keepdim else out

    def unit_rows(self, name: str = "X") -> SparseRows:
        """Every row divided by its norm (``y / ||y||`` with ``y = x / max_l |x_l|``, so no
        norm underflows or overflows); a zero row raises ``ValueError`` naming ``name``. These
        rows themselves when they are unit rows already (every ``||x||^2`` within
        ``UNIT_TOLERANCE`` eps of 1, as :func:`rbfkmeans.metrics.unit_rows` decides for dense
        rows, so that both read the same values)."""
        rows = self.entry_rows()
        if self.val.numel() and not self.val.requires_grad:
            sq = torch.zeros(self.shape[0], dtype=torch.float64, device=self.device)
            sq.index_add_(0, rows, self.val.square().double())
            if _all_unit(sq, self.dtype):
                return self
        scale = torch.zeros(self.shape[0], dtype=self.dtype, device=self.device)
        scale.scatter_reduce_(0, rows, self.val.abs(), reduce="amax")
        if bool((scale == 0).any()):
            raise _zero_row_error(scale == 0, name)
        Y = self._with(self.val / scale[rows])
        norm = Y.row_dot(Y).sqrt_()
        return self._with(Y.val / norm[rows])

    def _long_rows_in_float64(self, out: Tensor,
                              again: Callable[[SparseRows, Tensor], Tensor]) -> Tensor:
        """``out`` (n, ...), rowwise sums of these rows in their dtype, with the rows of more
        than :data:`~rbfkmeans.distances.WIDE_DOTS` stored entries replaced by ``again(those rows
        in float64, their indices)`` rounded once (a float32 chain of 300,000 products is 8e-5
        off, as for dense rows in :func:`~rbfkmeans.distances.row_dots`)."""
        if out.dtype == torch.float64:
            return out
        long = ((self.crow[1:] - self.crow[:-1]) > WIDE_DOTS).nonzero().squeeze(1)
        if long.numel():
            out[long] = again(self[long].double(), long).to(out.dtype)
        return out

    def row_dot(self, Y: Tensor | SparseRows, index: Tensor | None = None) -> Tensor:
        """``x_i . y_i`` for each row (n,) of dense ``Y`` (n, d), or ``x_i . Y[index_i]`` when
        ``index`` (n,) is given (no (n, d) gather), or ``||x_i||^2`` when ``Y`` is these rows."""
        again: Callable[[SparseRows, Tensor], Tensor]
        if index is not None:
            rows = self.entry_rows()
            prod = self.val.to(Y.dtype) * Y[index.to(self.device)[rows], self.col]
            again = lambda part, r: part.row_dot(Y.double(), index[r])  # noqa: E731
        elif isinstance(Y, SparseRows):
            if Y is not self and not (torch.equal(Y.crow, self.crow)
                                      and torch.equal(Y.col, self.col)):
                raise TypeError("rowwise products of two different SparseRows are not supported")
            prod = self.val * Y.val
            again = lambda part, _: part.row_dot(part)  # noqa: E731
        else:
            prod = self.val * Y[self.entry_rows(), self.col].to(self.dtype)
            again = lambda part, r: part.row_dot(Y[r.to(Y.device)].double())  # noqa: E731
        out = torch.zeros(self.shape[0], dtype=prod.dtype, device=self.device)
        return self._long_rows_in_float64(out.index_add_(0, self.entry_rows(), prod), again)

    def aminmax(self) -> tuple[Tensor, Tensor]:
        """The smallest and the largest entry, the zeros not stored included."""
        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        if self.nnz == 0:
            return zero, zero
        lo, hi = torch.aminmax(self.val)
        if self.nnz < self.numel():
            lo, hi = torch.minimum(lo, zero), torch.maximum(hi, zero)
        return lo, hi

    # -- products -----------------------------------------------------------------------------
    def mm(self, M: Tensor) -> Tensor:
        """``X M`` (n, m) for dense ``M`` (d, m)."""
        M = M.to(self.dtype)
        if self.device.type == "cpu":
            P = torch.from_numpy(np.asarray(self.scipy() @ M.numpy()))
        else:
            P = self._torch_csr() @ M
        return self._long_rows_in_float64(P, lambda part, _: part.mm(M.double()))

    def tmm(self, R: Tensor) -> Tensor:
        """``X^T R`` (d, m) for dense ``R`` (n, m) (``R`` (n,): ``X^T r``, (d,))."""
        R = R.to(self.dtype)
        if self.device.type == "cpu":
            return torch.from_numpy(np.ascontiguousarray(self.scipy().T @ R.numpy()))
        return (R.T @ self._torch_csr()).T

    def _torch_csr(self) -> Tensor:
        """The rows as a ``torch.sparse_csr_tensor`` (the products off the CPU)."""
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(self.crow, self.col, self.val, self.shape)

    def sq_distances(self, C: Tensor) -> Tensor:
        """``||x_i - c_j||^2 = ||x_i||^2 - 2 x_i . c_j + ||c_j||^2`` (n, k), clamped at 0 (the
        expansion about the origin: sparse rows are not centred)."""
        C = C.to(self.dtype)
        D = self.mm(C.T).mul_(-2.0).add_(C.square().sum(dim=1))
        return D.add_(self.row_dot(self).unsqueeze(1)).clamp_(min=0.0)

    def scatter_add_into(self, S: Tensor, labels: Tensor, alpha: float = 1.0) -> Tensor:
        """``S[labels[i]] += alpha x_i`` for every row (``S`` (k, d) contiguous, in place)."""
        if not S.is_contiguous():
            raise TypeError("SparseRows add into contiguous sums only")
        flat = labels.to(self.device)[self.entry_rows()] * self.shape[1] + self.col
        val = self.val.to(S.dtype)
        S.view(-1).index_add_(0, flat, val if alpha == 1.0 else alpha * val)
        return S

    # -- the torch functions the passes apply (module docstring) ------------------------------
    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        handler = _HANDLERS.get(getattr(func, "__name__", ""))
        if handler is None:
            raise TypeError(f"{getattr(func, '__name__', func)} is not supported on sparse rows "
                            "(rbfkmeans.sparse.SparseRows)")
        return handler(*args, **kwargs)


def _addmm(inp: Tensor, mat1: Any, mat2: Any, *, beta: float = 1.0, alpha: float = 1.0,
           out: Tensor | None = None) -> Tensor:
    """``beta inp + alpha mat1 mat2`` with one sparse factor."""
    if isinstance(mat1, SparseRows):
        prod = mat1.mm(mat2)
    elif isinstance(mat2, SparseRows):
        prod = mat2.tmm(mat1.T).T
    else:
        raise TypeError("addmm on SparseRows needs a sparse factor")
    result = torch.add(prod.mul_(alpha), inp.to(prod.dtype), alpha=beta) if beta != 1.0 \
        else prod.mul_(alpha).add_(inp.to(prod.dtype))
    if out is not None:
        return out.copy_(result)
    return result


def _addmm_(inp: Tensor, mat1: Any, mat2: Any, *, beta: float = 1.0,
            alpha: float = 1.0) -> Tensor:
    """In place: ``inp <- beta inp + alpha mat1 mat2``."""
    return inp.copy_(_addmm(inp, mat1, mat2, beta=beta, alpha=alpha))


def _matmul(a: Any, b: Any) -> Tensor:
    if isinstance(a, SparseRows):
        return a.mm(b) if b.dim() == 2 else a.mm(b.unsqueeze(1)).squeeze(1)
    if a.dim() == 1:  # v^T X
        return b.tmm(a)
    return b.tmm(a.T).T  # R^T X with R^T given


def _rmatmul(a: Any, b: Any) -> Tensor:
    return _matmul(b, a)


def _index_add_(S: Tensor, dim: int, index: Tensor, source: SparseRows, *,
                alpha: float = 1.0) -> Tensor:
    if dim != 0 or not isinstance(source, SparseRows):
        raise TypeError("index_add_ of SparseRows adds rows (dim 0) of the sparse source")
    return source.scatter_add_into(S, index, alpha)


def _einsum(equation: str, *operands: Any) -> Tensor:
    if equation.replace(" ", "") != "nd,nd->n" or len(operands) != 2:
        raise TypeError(f"einsum {equation!r} is not supported on sparse rows")
    a, b = operands
    return a.row_dot(b) if isinstance(a, SparseRows) else b.row_dot(a)


def _mul(a: Any, b: Any) -> SparseRows:
    return b._row_scale(a) if isinstance(b, SparseRows) else a._row_scale(b)


def _aminmax(X: SparseRows) -> tuple[Tensor, Tensor]:
    return X.aminmax()


def _cat(tensors: Any, dim: int = 0) -> SparseRows:
    """The rows of several :class:`SparseRows` one after another."""
    parts = list(tensors)
    if dim != 0 or not all(isinstance(t, SparseRows) for t in parts):
        raise TypeError("cat of SparseRows stacks sparse rows only (dim 0)")
    d = parts[0].shape[1]
    if any(t.shape[1] != d for t in parts):
        raise ValueError("cat of SparseRows needs the same number of columns")
    offsets = torch.tensor([0] + [t.nnz for t in parts], device=parts[0].device).cumsum(0)
    crow = torch.cat([parts[0].crow[:1]] + [t.crow[1:] + offsets[i] for i, t in enumerate(parts)])
    return SparseRows(crow, torch.cat([t.col for t in parts]), torch.cat([t.val for t in parts]),
                      (sum(t.shape[0] for t in parts), d), check=False)


_HANDLERS: dict[str, Callable[..., Any]] = {
    "addmm": _addmm, "addmm_": _addmm_, "matmul": _matmul, "__matmul__": _matmul,
    "__rmatmul__": _rmatmul, "mm": _matmul, "index_add_": _index_add_, "einsum": _einsum,
    "mul": _mul, "__mul__": _mul, "__rmul__": _mul, "aminmax": _aminmax, "cat": _cat,
}
