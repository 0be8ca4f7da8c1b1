r"""Squared Euclidean distances between points and centroids.

.. math::

    d_{ij} = \lVert x_i - c_j \rVert^2
           = \lVert x_i \rVert^2 - 2\, x_i \cdot c_j + \lVert c_j \rVert^2,
    \qquad d_{ij} \leftarrow \max(d_{ij}, 0),

with ``X`` (n, d) the data, ``C`` (k, d) the centroids. The expansion costs one matrix product;
the clamp removes the small negative values that cancellation leaves when ``x_i`` coincides with
``c_j``. Its rounding error is ``eps`` times the squared norms, not the distance:
:func:`sq_distances` takes it about the centroids' mean, and the fit engine works on data it has
centred (:mod:`rbfkmeans.frame`). Large ``n`` is processed in row chunks so that no more than
``chunk_size x k`` distances exist at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from ._validation import (
    check_dense,
    check_matrix,
    check_positive_int,
    check_temperature,
    check_tensor,
    compute_dtype,
)

#: Default number of distance entries (rows x k) held at once by chunked computations: 4 MiB in
#: float32, small enough to stay in cache between the matrix product and the mapping.
DEFAULT_CHUNK_ELEMENTS = 1 << 20

#: The same budget on an accelerator (CUDA and others): 64 times larger, since there every chunk
#: costs a round of kernel launches (about twenty for a chunk of distances) and a chunk of
#: 2^20 entries is done in microseconds; at n = 1,000,000 and k = 1,024 the CPU budget cut the
#: distances into 1,099 chunks and made them 20 times slower than the matrix product on an H200.
DEVICE_CHUNK_ELEMENTS = 1 << 26


def chunk_rows(n: int, k: int, chunk_size: int | None = None,
               device: torch.device | None = None) -> int:
    """Rows per chunk: ``chunk_size`` if given, else enough rows for ~``DEFAULT_CHUNK_ELEMENTS``
    entries of ``k`` per row (:data:`DEVICE_CHUNK_ELEMENTS` when ``device`` is not the CPU)."""
    if chunk_size is not None:
        return check_positive_int(chunk_size, "chunk_size")
    budget = (DEVICE_CHUNK_ELEMENTS if device is not None and torch.device(device).type != "cpu"
              else DEFAULT_CHUNK_ELEMENTS)
    return max(256, min(max(n, 1), budget // max(k, 1)))


def iter_chunks(n: int, rows: int) -> Iterator[slice]:
    """Consecutive row slices of at most ``rows`` rows covering ``range(n)``."""
    for start in range(0, n, rows):
        yield slice(start, min(start + rows, n))


#: rows of more features than this have their products summed by :func:`row_dots` as torch's
#: reductions sum (in blocks, not one chain), unless they are float64: ``einsum`` adds a row's
#: products in one chain of the rows' dtype, whose error grows with the width (float32
#: ``||x||^2`` of normal rows: relative 1.5e-6 at 784 features, 5.6e-5 at 200,000, 4.6e-4 at
#: 1,000,000; the reduction's 1e-7 at every width, and 3x faster at 1,536)
WIDE_DOTS = 1024

#: entries of the products :func:`row_dots` forms at once for wide rows (4 MiB of float32)
WIDE_DOTS_COPY = 1 << 20


def row_dots(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``a_i . b_i`` for each row of ``A`` and ``B`` (n, d), shape (n,): one ``einsum`` up to
    :data:`WIDE_DOTS` features (or in float64, where its chain is exact enough), else the
    products of each chunk of rows (at most :data:`WIDE_DOTS_COPY` entries) formed and added by
    ``sum``'s blocked reduction. Sparse rows (:class:`rbfkmeans.sparse.SparseRows`) compute
    their own."""
    wide = A.shape[-1] > WIDE_DOTS and A.dtype != torch.float64
    if not (wide and isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor)):
        return torch.einsum("nd,nd->n", A, B)
    rows = max(1, WIDE_DOTS_COPY // A.shape[1])
    parts = [(A[s] * B[s]).sum(dim=1) for s in iter_chunks(A.shape[0], rows)]
    return torch.cat(parts) if parts else A.new_zeros(0)  # (differentiable)


def row_norms_sq(X: torch.Tensor) -> torch.Tensor:
    """``||x_i||^2`` for each row, shape (n,) (:func:`row_dots` of ``X`` with itself)."""
    return row_dots(X, X)


def cross_term(
    X: torch.Tensor, C: torch.Tensor, C_sq: torch.Tensor | None = None
) -> torch.Tensor:
    """``||c_j||^2 - 2 x_i . c_j`` (n, k): the distances less the row constant ``||x_i||^2``.

    Row-wise argmin, softmax and entmax are unchanged by that constant, so the fast paths use this
    (one fused ``addmm``) and add ``||x_i||^2`` only where absolute distances are needed.
    """
    if C_sq is None:
        C_sq = row_norms_sq(C)
    return torch.addmm(C_sq.unsqueeze(0), X, C.T, beta=1.0, alpha=-2.0)  # (n, k)


def sq_distances(
    X: torch.Tensor,
    C: torch.Tensor,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    r"""Squared distances ``d_ij = ||x_i - c_j||^2`` (n, k), via the one-matmul expansion taken
    about the centroids' mean.

    With ``r`` the mean of the rows of ``C`` (a constant: detached),

    .. math::

        d_{ij} = \lVert x_i - r \rVert^2 - 2 (x_i - r) \cdot (c_j - r) + \lVert c_j - r \rVert^2,

    the same number in exact arithmetic, but its rounding error is ``eps`` times
    ``||x_i - r||^2 + ||c_j - r||^2`` rather than ``||x_i||^2 + ||c_j||^2``: accurate relative
    to the spread of the data around the centroids, whatever their distance from the origin
    (float32 data shifted by ``1e4`` would otherwise lose every digit). The gradients are those
    of ``||x_i - c_j||^2`` (``r`` cancels). Clamped at 0. ``X`` and ``C`` are dense tensors (a
    torch sparse layout raises ``TypeError`` naming it; :class:`~rbfkmeans.KMeansLayer` takes
    sparse rows).

    Parameters
    ----------
    X : Tensor (n, d)
        Points, any device.
    C : Tensor (k, d)
        Centroids, same device as ``X``. The two are promoted to a common dtype; float16,
        bfloat16 and integers are computed (and returned) in float32.
    chunk_size : int, optional
        Rows per chunk. The result is (n, k) in any case; chunking bounds the temporaries.

    Differentiable in ``X`` and ``C`` (autograd through the matrix product).

    Only shapes and dtypes are checked: this is the distance of every forward step of the
    layer and of the quantizer, where a scan of the inputs or of the result would cost about
    as much as the distances themselves (and a device synchronisation per step). So NaN or inf
    in ``X`` or ``C`` give NaN or inf distances, and finite entries whose squares overflow the
    computing dtype (``|x - c|`` beyond about ``1.8e19`` in float32, ``1.3e154`` in float64)
    give inf (or NaN where two overflows cancel). The callers that need a checked value check:
    the objectives of :mod:`rbfkmeans.objectives` (float32 falls back to float64, beyond
    float64 ``ValueError`` names ``X``) and the estimator (which refuses such data naming ``X``
    and fits in a rescaled frame, :mod:`rbfkmeans.frame`).
    """
    check_dense(check_matrix(X, "X", "(n, d)"), "X")
    check_dense(check_matrix(C, "C", "(k, d)"), "C")
    if X.shape[1] != C.shape[1]:
        raise ValueError(
            f"X has {X.shape[1]} features but C has {C.shape[1]}; they must match "
            f"(X shape {tuple(X.shape)}, C shape {tuple(C.shape)})"
        )
    if C.shape[0] < 1:
        raise ValueError(f"C must have at least one row; got shape {tuple(C.shape)}")
    if X.is_complex() or C.is_complex():
        raise TypeError(f"X and C must be real; got {X.dtype} and {C.dtype}")
    dtype = compute_dtype(torch.promote_types(X.dtype, C.dtype))
    X, C = X.to(dtype), C.to(dtype)  # no copy when already ``dtype``
    r = reference_point(C)  # (d,) a constant
    Cr = C - r  # (k, d)
    C_sq = row_norms_sq(Cr)  # (k,)
    n, k = X.shape[0], C.shape[0]
    rows = chunk_rows(n, k + X.shape[1], chunk_size, X.device)  # a chunk's distances and rows
    if rows >= n:  # one piece, no slicing (the row count stays symbolic in a traced graph)
        return _centered_sq(X - r, Cr, C_sq)
    # split, not slices: its backward joins the chunks' gradients once, where each slice's
    # backward would add a zero-padded (n, d) gradient (quadratic in the number of chunks)
    return torch.cat([_centered_sq(Xs - r, Cr, C_sq) for Xs in X.split(rows)], dim=0)


def reference_point(C: torch.Tensor) -> torch.Tensor:
    r"""The point (d,) the distances to the centroids ``C`` (k, d) are expanded about: their mean
    rounded to a multiple of ``q = 2^floor(log2 s)``, ``s = max |c - mean|`` (detached).

    Within ``q / 2 <= s / 2`` of the mean, so the expansion's rounding stays ``eps`` times the
    spread; and a multiple of a power of two, so that ``x - r`` and ``c - r`` are exact wherever
    ``x`` and ``c`` lie on that grid (integer data stays exact, ties stay ties). One centroid, or
    coincident ones, are their own reference."""
    C = C.detach()
    if C.shape[-1] == 0:  # no features: every distance is 0 (a static shape: traceable)
        return C.new_zeros(0)
    mean = C.mean(dim=0)  # (d,)
    spread = (C - mean).abs().amax(dim=(0, 1))  # tensor operations only: no sync, traceable
    q = torch.exp2(torch.floor(torch.log2(spread)))  # the power of two at or below s
    usable = (q > 0) & torch.isfinite(q)
    return torch.where(usable, torch.round(mean / torch.where(usable, q, 1.0)) * q, C[0])


def _centered_sq(Xr: torch.Tensor, Cr: torch.Tensor, C_sq: torch.Tensor) -> torch.Tensor:
    """``||x - c||^2`` (b, k) of rows and centroids already taken about the reference point."""
    D = cross_term(Xr, Cr, C_sq)  # (b, k)
    D.add_(row_norms_sq(Xr).unsqueeze(1))
    return D.clamp_(min=0)


def shifted_scores(D: torch.Tensor, T: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    r"""Row-shifted scores ``z_ij = -(d_ij - min_l d_il) / (2T)`` (..., k) and ``min_l d_il``.

    Every simplex mapping and ``logsumexp - max`` is invariant to a per-row constant, so this is
    ``-D / (2T)`` up to that constant, with the nearest centroid at exactly 0: no overflow to
    ``-inf`` in a whole row at tiny ``T`` or large distances. The minimum is detached (a constant
    shift carries no gradient through a shift-invariant map). Returns ``None`` when ``2T`` is
    zero in ``D``'s dtype (the hard limit ``T -> 0``; e.g. ``T < 7e-46`` in float32).
    """
    check_tensor(D, "D")
    if not D.is_floating_point() or D.dim() < 1 or D.shape[-1] == 0:
        raise ValueError(f"D must be a float tensor of distances (..., k) with k >= 1; got "
                         f"{D.dtype} of shape {tuple(D.shape)}")
    T = check_temperature(T, "T")
    info = torch.finfo(D.dtype)
    half_least_subnormal = info.tiny * info.eps / 2
    two_T = 2.0 * T
    if two_T <= half_least_subnormal:  # 2T rounds to 0 in D's dtype
        return None
    D_min = D.detach().amin(dim=-1, keepdim=True)  # (..., 1)
    return (D - D_min) / -two_T, D_min


def membership_scores(D: torch.Tensor, T: float) -> torch.Tensor | None:
    r""":func:`shifted_scores` for memberships ``R = m(z)``: the scores alone, and detached from
    ``D`` when ``1 / (2T)`` exceeds the square root of ``D``'s largest value (``T < 2.7e-20`` in
    float32, ``3.7e-155`` in float64). There the derivative ``dR/dD = J_m / (-2T)``, times the
    distances' own derivatives (``dD/dc = 2c - 2x``, formed as two products) and the gradient
    arriving from the loss, leaves the dtype's range: at a tie of two equal centroids in float32
    a loss's gradient came out NaN from ``T = 3e-39`` down (``inf - inf`` where
    ``c = x``). Such memberships are treated as constants of ``D``, as the hard ones of
    ``T = 0`` are (the forward is unchanged; at these temperatures a membership moves only
    within ``2T`` of an exact tie). ``None`` in the hard limit."""
    shifted = shifted_scores(D, T)
    if shifted is None:
        return None
    if 2.0 * T * math.sqrt(torch.finfo(D.dtype).max) < 1.0:  # 1/(2T) > sqrt(max)
        return _ConstantIn.apply(shifted[0].detach(), D)
    return shifted[0]


class _ConstantIn(torch.autograd.Function):
    """``z`` (already detached) as a function of ``D`` with derivative 0: the result stays in
    the graph (a loss built on it can call ``backward``), and its gradient is exactly zero."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
        ctx.like = (D.shape, D.dtype, D.device)
        return z.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[None, torch.Tensor]:
        shape, dtype, device = ctx.like
        return None, torch.zeros(shape, dtype=dtype, device=device)


#: :func:`row_min` packs keys from this many columns on, and below ``PACKED_MAX_COLUMNS``; it
#: calls ``torch.min`` otherwise. Measured on float32 blocks of 4M scores (torch 2.13, an AMD
#: EPYC with AVX-512): with 1024 or more columns the index-carrying ``min`` took 1.9-2.5 ms on
#: 2 threads where the packed keys took 2.3-2.5x as long (1 thread: 2.3-4.9x); at 64 columns
#: the two were within 0.77x-1.32x of each other (an earlier machine: packed 14-25% faster).
PACKED_MIN_COLUMNS = 32
PACKED_MAX_COLUMNS = 128


def row_min(G: torch.Tensor, *, overwrite: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Row-wise minimum and its first index, ``(min_j g_ij, argmin_j g_ij)`` of ``G`` (n, k).

    Exactly ``torch.min(G, dim=1)`` on NaN-free ``G`` (ties to the lowest index; a NaN row's
    index may differ: the passes never hold one), computed faster for float32 on
    the CPU, where an index-carrying reduction can cost several value reductions (other dtypes
    and devices, and fewer than ``PACKED_MIN_COLUMNS`` or at least ``PACKED_MAX_COLUMNS``
    columns, call ``torch.min``, which is the faster there). With ``m_i``
    from a value reduction,

    .. math::

        e_{ij} = g_{ij} - m_i \ge 0, \qquad
        \kappa_{ij} = \operatorname{bits}(e_{ij}) \wedge \lnot(2^b - 1) \;\vee\; j,
        \qquad b = \lceil \log_2 k \rceil:

    rounding keeps ``e`` non-negative and zero only at the minimum, the bits of a non-negative
    float order like its value, so one integer minimum of ``kappa`` returns the lowest column
    ``j*`` whose ``e`` is zero up to its low ``b`` bits. When ``e_{ij*} = 0`` it is the first
    index of the minimum; the rare rows where it is not (an ``e`` below ``2^b`` subnormal units)
    take ``torch.argmin``. With ``overwrite=True`` ``G`` is replaced by ``e`` on the packed path
    (no copy; for a temporary).
    """
    check_matrix(G, "G", "(n, k)")
    if G.is_complex():
        raise TypeError(f"G must be real; got {G.dtype}")
    k = G.shape[1]
    if k == 0:
        raise ValueError(f"G must have at least one column; got shape {tuple(G.shape)}")
    if not PACKED_MIN_COLUMNS <= k < PACKED_MAX_COLUMNS or G.device.type != "cpu" \
            or G.dtype != torch.float32:
        return G.min(dim=1)
    m = G.amin(dim=1)  # (n,)
    E = G.sub_(m.unsqueeze(1)) if overwrite else torch.sub(G, m.unsqueeze(1))  # (n, k) >= 0
    b = (k - 1).bit_length()
    key = torch.bitwise_and(E.view(torch.int32), 0x7FFFFFFF & ~((1 << b) - 1))  # sign cleared
    key |= torch.arange(k, dtype=torch.int32, device=G.device)
    idx = key.amin(dim=1).bitwise_and_((1 << b) - 1).long()  # (n,)
    wrong = E.gather(1, idx.unsqueeze(1)).squeeze(1) != 0
    if bool(wrong.any()):
        rows = wrong.nonzero().squeeze(1)
        idx[rows] = E[rows].argmin(dim=1)
    return m, idx
