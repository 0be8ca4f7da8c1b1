r"""Vector quantisation with a k-means codebook: :class:`VectorQuantizer`.

The layer replaces each input vector by its nearest code. With the input ``z`` (..., d) read as
rows ``x_i`` of ``X`` (n, d) and the codebook ``C`` (k, d),

.. math::

    a_i = \operatorname*{argmin}_j d_{ij}, \qquad d_{ij} = \lVert x_i - c_j \rVert^2, \qquad
    q_i = c_{a_i}

(ties to the lowest index). Training moves the encoder and the codebook with

.. math::

    \hat q_i = q_i + (x_i - \operatorname{sg}(x_i)), \qquad
    \mathcal{L} = \frac{1}{nd}\Big(\beta \sum_i \lVert x_i - \operatorname{sg}(q_i)\rVert^2
        + F_T\big(C;\, \operatorname{sg}(X)\big)\Big),

where ``sg`` stops the gradient. ``q_hat`` has the value ``q_i`` exactly and the derivative
``dq_hat/dx = I``: the straight-through estimator (the same one as ``x + sg(q - x)``, without its
rounding). ``beta`` is the commitment weight. ``F_T`` is the relaxed k-means objective of the
assignment (:mod:`rbfkmeans.objectives`; softmax:
``F_T = -2T sum_i logsumexp_j(-d_ij / 2T)``), whose gradient is the soft-Lloyd direction
``dF_T/dc_j = 2 N_j (c_j - m_j)`` with ``N_j = sum_i r_ij``, ``m_j = sum_i r_ij x_i / N_j``.
Since ``J - 2T n H_max <= F_T <= J``, annealing ``T -> 0`` turns it into
``J = sum_i ||sg(x_i) - q_i||^2``, the codebook loss of VQ-VAE (van den Oord et al. 2017):
soft-to-hard quantisation.

With ``update="kmeans"`` the codebook is not trained by gradient: after each training forward it
takes the mini-batch k-means step of :mod:`rbfkmeans.codebook`, which also seeds the codebook,
revives dead codes and records each batch's statistics.

``metric="cosine"`` quantises directions: inputs and codes are normalised,
``x_hat = x/||x||``, ``c_hat = c/||c||``, with scores ``<x_hat_i, c_hat_j> / T`` and distances
``d_ij = ||x_hat_i - c_hat_j||^2 = 2 - 2 <x_hat_i, c_hat_j>`` (so ``-d_ij / 2T`` is the score less
the row constant ``1/T``: the same mappings and objectives apply). The codebook is kept on the
unit sphere, and the layer outputs (and commits) the normalised ``x_hat``. (Its ``F_T`` is that of
the normalised rows, twice the spherical objective of :mod:`rbfkmeans.metrics`.)

Under ``torch.distributed`` (``DistributedDataParallel`` or not) a training forward reduces every
statistic over the ranks of the default group (:meth:`rbfkmeans.comm.Comm.auto`): the counts, the
sums and the memberships are all-reduced, the k-means++ draws and the revived vectors are picked
from the concatenation of the ranks' batches with the same generator on every rank, and the
initial codebook is broadcast from rank 0. Every rank then holds the same codebook, equal to a
single process fed the concatenated batches. Every rank must call the training forward the same
number of times; evaluation (``model.eval()``) is local.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

import torch
from torch import Tensor, nn
from torch.nn.modules.module import _IncompatibleKeys

from ._validation import check_positive_int, compute_dtype
from .assignments import check_assignment
from .codebook import CodebookUpdates, code_perplexity
from .comm import Comm
from .distances import sq_distances
from .errors import NonFiniteError
from .inference import check_reach
from .metrics import check_metric, get_metric
from .objectives import objective_from_distances
from .quantizer_checks import (
    CODEBOOK_DTYPES,
    PENDING_KEY,
    check_choice,
    check_extra_state,
    check_indices,
    check_input,
    check_loaded_state,
    check_number,
    check_quantizer_temperature,
    check_seed,
    check_squares_are_normal,
)
from .state_loading import load_all_or_nothing

__all__ = ["INITS", "UPDATES", "VectorQuantizer", "code_perplexity"]

#: the names accepted as ``update``
UPDATES = ("objective", "kmeans")
#: the names accepted as ``init``
INITS = ("k-means++", "rbfkmeans")


class VectorQuantizer(CodebookUpdates, nn.Module):
    r"""Nearest-code quantiser with a k-means codebook (module docstring for the equations).

    Parameters
    ----------
    dim : int
        ``d``, the length of the vectors quantised (the last dimension of the input).
    n_codes : int
        ``k``, the number of codes.
    assignment : {"softmax", "entmax15", "sparsemax", "hard"}, default "softmax"
        The simplex mapping of the relaxed objective ``F_T`` (``update="objective"``) or of the
        memberships of the k-means step (``update="kmeans"``). The output is always the nearest
        code.
    temperature : float, default 0.0
        ``T >= 0`` of ``F_T``, in units of squared distance (of ``d = 2 - 2 cos`` for cosine).
        ``T = 0`` (or ``assignment="hard"``) gives the hard ``J``. Settable, to anneal it; a
        hyper-parameter, not trained: a tensor that requires a gradient (an ``nn.Parameter``)
        raises ``TypeError`` (``dF_T/dT <= 0``, so the loss would only push ``T`` up).
    metric : {"sqeuclidean", "cosine"}, default "sqeuclidean"
        Nearest in ``||x - c||^2``, or in angle (inputs and codes normalised; a zero input vector
        raises ``ValueError``).
    commitment_weight : float, default 0.25
        ``beta >= 0``, the weight of ``||x - sg(q)||^2`` in the loss.
    update : {"objective", "kmeans"}, default "objective"
        ``"objective"``: the codebook is an ``nn.Parameter`` trained by the optimiser on
        ``F_T`` (it is in ``loss``). ``"kmeans"``: a buffer moved by the mini-batch k-means step
        after each training forward (``loss`` then holds the commitment term only).
    decay : float, default 1.0
        ``gamma`` in ``(0, 1]`` of the running counts of ``update="kmeans"``: 1 is exact
        mini-batch k-means, less is the exponential moving average.
    init : {"k-means++", "rbfkmeans"}, default "k-means++"
        How the first batch(es) seed the codebook: greedy k-means++ (fast) or an annealed
        :class:`~rbfkmeans.RBFKMeans` fit (slower, better codebooks on the first batch).
    dead_code_steps : int or None, default 50
        Reset a code unused by ``dead_code_steps`` consecutive training batches (``None``: never).
    seed : int, default 0
        Seeds the initial random codebook, the k-means++ draws and the revival draws (the same
        on every rank): an integer in ``[0, 2**64 - 1]``, in ``[0, 2**32 - 1]`` with
        ``init="rbfkmeans"`` (the fit's ``random_state``).
    dtype : torch.dtype, default torch.float32
        The codebook's dtype (float32 or float64); inputs are computed in it, or in float64 when
        they are float64. float16 and bfloat16 inputs, and ``torch.autocast`` regions, are
        computed in float32. ``.half()``, ``.bfloat16()`` and ``.to(dtype)`` keep this rule:
        they leave the codebook float32 (``.double()`` makes it float64) and the running counts
        float64, and move both between devices; a codebook of another dtype set through
        ``.data`` is refused (``TypeError``) by ``forward``.

    ``forward(z)`` takes ``z`` (..., d) and returns ``(quantized, indices, loss)``: ``quantized``
    (..., d) is ``codebook[indices]`` (as the codebook was when the forward began) in ``z``'s
    dtype (a float16 network gets float16 codes) with the straight-through gradient to ``z``,
    ``indices`` (...) the nearest codes (int64), ``loss`` the scalar ``L`` in the compute dtype
    (float32, or float64 when ``z`` or the codebook is float64: its sums over the batch would
    lose their precision, or overflow, in float16). A training forward then updates the
    statistics, the codebook (``update="kmeans"``) and revives dead codes.
    """

    codebook: Tensor
    initialized: Tensor
    counts: Tensor
    unused_steps: Tensor

    def __init__(
        self,
        dim: int,
        n_codes: int,
        *,
        assignment: str = "softmax",
        temperature: float = 0.0,
        metric: str = "sqeuclidean",
        commitment_weight: float = 0.25,
        update: str = "objective",
        decay: float = 1.0,
        init: str = "k-means++",
        dead_code_steps: int | None = 50,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.n_codes = check_positive_int(n_codes, "n_codes")
        if dtype not in CODEBOOK_DTYPES:
            raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype}")
        itemsize = torch.finfo(dtype).bits // 8
        if self.n_codes * self.dim >= 2**62 // itemsize:  # no memory holds such a codebook
            raise ValueError(f"n_codes * dim must be < 2**62 / {itemsize} (the entries of a "
                             f"{dtype} codebook that memory can hold); got n_codes={n_codes}, "
                             f"dim={dim}")
        self.assignment = assignment
        self.temperature = temperature
        self.metric = check_metric(metric, "metric")
        self._spherical = get_metric(self.metric).spherical
        self.commitment_weight = check_number(commitment_weight, "commitment_weight",
                                              "a finite number >= 0", lambda v: v >= 0)
        self.update = check_choice(update, "update", UPDATES)
        self.decay = check_number(decay, "decay", "a number in (0, 1]", lambda v: 0 < v <= 1)
        self.init = check_choice(init, "init", INITS)
        self.dead_code_steps = None if dead_code_steps is None \
            else check_positive_int(dead_code_steps, "dead_code_steps")
        self.seed = check_seed(seed, self.init)
        self._generator = torch.Generator().manual_seed(self.seed)
        C = torch.randn(self.n_codes, self.dim, generator=self._generator, dtype=dtype)  # (k, d)
        C = get_metric(self.metric).project(C, None, "codebook")
        if self.update == "objective":
            self.codebook = nn.Parameter(C)
        else:
            self.register_buffer("codebook", C)
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self.register_buffer("counts", torch.zeros(self.n_codes, dtype=torch.float64))  # n_j
        self.register_buffer("unused_steps", torch.zeros(self.n_codes, dtype=torch.long))
        self._pending: list[Tensor] = []  # rows kept until the codebook can be seeded
        self.stats: dict[str, Tensor] = {}

    # -- hyper-parameters ---------------------------------------------------------------------
    @property
    def temperature(self) -> float:
        """``T >= 0`` of the codebook objective (settable: anneal it towards 0)."""
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = check_quantizer_temperature(value)

    def __setattr__(self, name: str, value: Any) -> None:
        # the temperature's checks first: nn.Module would register a Parameter under its name
        if name == "temperature":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _apply(self, fn: Any, recurse: bool = True) -> VectorQuantizer:
        """``nn.Module._apply`` (``.to``, ``.half``, ``.double``, ``.cuda``, ...) keeping the
        precision of the state: the counts ``n_j`` stay float64 and the codebook (and its
        gradient) float32 or float64, a conversion to float16 or bfloat16 leaving it float32;
        both follow the device moves."""
        kept = [(self.counts, (torch.float64,)), (self.codebook, CODEBOOK_DTYPES),
                (self.codebook.grad, CODEBOOK_DTYPES)]

        def keep(t: Tensor) -> Tensor:
            out = fn(t)
            for held, dtypes in kept:
                if t is held and isinstance(out, Tensor) and out.dtype not in dtypes:
                    return t.to(device=out.device, dtype=dtypes[0])
            return out

        super()._apply(keep, recurse)
        return self

    @property
    def assignment(self) -> str:
        """The simplex mapping's name."""
        return self._assignment

    @assignment.setter
    def assignment(self, value: str) -> None:
        self._assignment = check_assignment(value, "assignment")

    @property
    def usage(self) -> float:
        """Fraction of the codes used by the last batch (NaN before the first forward)."""
        return float(self.stats["usage"]) if self.stats else math.nan

    @property
    def perplexity(self) -> float:
        """``exp`` of the entropy of the last batch's code distribution (NaN before any)."""
        return float(self.stats["perplexity"]) if self.stats else math.nan

    def get_extra_state(self) -> dict[str, Any]:
        """The state kept outside the buffers: the temperature, the generator's state and the
        rows awaiting the seeding (``_pending_rows``)."""
        return {"temperature": self.temperature, "generator": self._generator.get_state(),
                PENDING_KEY: self._pending_rows()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Set the temperature, the generator and the rows awaiting the seeding (replaced:
        none where ``state`` has none, as states saved before they were kept), all checked
        (:func:`~rbfkmeans.quantizer_checks.check_extra_state`) before any is set: a bad state
        leaves the quantizer as it was."""
        temperature, generator, rows = check_extra_state(state, self.dim, self.n_codes)
        self._generator.set_state(generator)
        self._temperature = temperature
        self._pending = [] if rows is None or rows.shape[0] == 0 else [rows]

    def _pending_rows(self) -> Tensor:
        """The rows (m, d) that training forwards gave while fewer than ``n_codes`` had arrived
        and that wait to seed the codebook, on the codebook's device (a copy; ``m = 0`` once
        it is seeded, an empty one in the codebook's dtype). Part of the extra state."""
        if not self._pending:
            return self.codebook.new_zeros(0, self.dim).detach()
        return torch.cat([x.to(self.codebook.device) for x in self._pending])

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """``nn.Module.load_state_dict``, all or nothing: a state that raises (a check of the
        quantizer's values, or torch's ``RuntimeError`` for unexpected or missing keys and size
        mismatches) leaves the codebook, the buffers, the temperature and the generator as
        they were, bit for bit (the rows awaiting the seeding too: a load that succeeds
        replaces them), and the exception propagates
        (:func:`~rbfkmeans.state_loading.load_all_or_nothing`). This covers direct calls; a parent
        module's ``load_state_dict`` reaches the quantizer through ``_load_from_state_dict``,
        which checks the values (:func:`~rbfkmeans.quantizer_checks.check_loaded_state`)
        before anything is copied, but leaves it to torch (copied in part) on torch's own
        errors."""
        return load_all_or_nothing(self, state_dict, lambda: super(VectorQuantizer, self)
                                   .load_state_dict(state_dict, strict=strict, assign=assign))

    def _load_from_state_dict(self, state_dict: Mapping[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        # every value checked (naming its key) before torch copies anything
        check_loaded_state(state_dict, prefix, self.codebook.dtype, self._spherical,
                           dim=self.dim, n_codes=self.n_codes)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, n_codes={self.n_codes}, metric={self.metric!r}, "
                f"update={self.update!r}, assignment={self.assignment!r}, "
                f"temperature={self.temperature:g}")

    # -- the computation ----------------------------------------------------------------------
    def _rows(self, z: Any) -> Tensor:
        """``z`` (..., d) checked and flattened to ``X`` (n, d) in the compute dtype."""
        check_input(z, self.dim, self.codebook)
        dt = compute_dtype(torch.promote_types(self.codebook.dtype, z.dtype))
        # x, or x_hat = x / ||x|| (differentiable; a zero row raises) for cosine
        return get_metric(self.metric).prepare(z.to(dt), "z").reshape(-1, self.dim)  # (n, d)

    def _distances(self, X: Tensor, C: Tensor) -> Tensor:
        """``d_ij`` (n, k): ``||x - c||^2``, or ``2 - 2 <x_hat, c_hat>`` for cosine."""
        if self._spherical:
            C_hat = get_metric(self.metric).project(C, None, "codebook")  # (k, d)
            return (2.0 - 2.0 * (X @ C_hat.T)).clamp_min(0.0)  # (n, k)
        return sq_distances(X, C)  # (n, k)

    def _raise_overflow(self, X: Tensor, q: Tensor, D: Tensor) -> NoReturn:
        """Name the cause of a loss that overflows ``X``'s dtype: the temperature where the
        loss at ``T = 0`` (the commitment term and ``J``) is finite, so that only the entropy
        term ``T H`` of ``F_T`` overflows; else ``z``, whose squared terms do not fit."""
        hard = self.commitment_weight * (X - q).square().sum() \
            + objective_from_distances(D, 0.0, "hard")
        if self.update == "objective" and bool(torch.isfinite(hard)):
            raise NonFiniteError(
                f"temperature={self.temperature!r} is too large for {X.dtype}: the "
                "loss overflows (its entropy term does) though z lies within reach "
                "of the codes; use a smaller temperature")
        raise NonFiniteError(f"z lies too far from the codes for {X.dtype}: the loss overflows "
                             "(its squared terms do not fit); rescale z")

    def distances(self, z: Tensor) -> Tensor:
        """Distances ``d`` (..., k) from ``z`` (..., d) to the codes (no statistics kept), in the
        compute dtype as ``loss`` is (float32 for half-precision ``z``, whose range squared
        distances would leave)."""
        X = self._rows(z)
        with torch.autocast(X.device.type, enabled=False):
            D = self._distances(X, self.codebook.to(X.dtype))  # (n, k)
        return D.reshape(*z.shape[:-1], self.n_codes)

    def scores(self, z: Tensor) -> Tensor:
        """Scores (..., k): ``-d / 2T``, or ``<x_hat, c_hat> / T`` for cosine; needs ``T > 0``.
        In the compute dtype, as :meth:`distances`."""
        if self.temperature == 0:
            raise ValueError("scores are -d/(2T), undefined at temperature=0; use distances()")
        X = self._rows(z)
        with torch.autocast(X.device.type, enabled=False):
            C = self.codebook.to(X.dtype)
            if self._spherical:
                C_hat = get_metric(self.metric).project(C, None, "codebook")  # (k, d)
                S = (X @ C_hat.T) / self.temperature  # (n, k)
            else:
                S = sq_distances(X, C) / (-2.0 * self.temperature)  # (n, k)
        return S.reshape(*z.shape[:-1], self.n_codes)

    def lookup(self, indices: Tensor) -> Tensor:
        """The codes ``codebook[indices]`` (..., d) of integer ``indices`` (...) of any integer
        dtype, e.g. tokens (uint8 ones are indices too, not a mask; a bool tensor raises)."""
        return self.codebook.detach()[check_indices(indices, self.n_codes)]

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(quantized, indices, loss)`` for ``z`` (..., d) (class docstring)."""
        X = self._rows(z)  # (n, d), x_hat for cosine
        lead = z.shape[:-1]
        with torch.autocast(X.device.type, enabled=False):
            comm = Comm.auto() if self.training else Comm()
            if self._spherical:
                self._renormalize()
            X_d = X.detach()
            seeding = self.training and not bool(self.initialized)
            if seeding and not self._spherical:  # refused before the codebook is seeded from
                # z: its codes lie within max|x| of the origin, so |x - c| <= 2 max|x|
                check_reach(X_d, self.codebook.detach(), total=4 * X.shape[0], name="z",
                            dtype=X.dtype)
                check_squares_are_normal(X_d)
            if seeding:
                self._initialize(X_d, comm)
            # a copy: the graph keeps it, so the in-place updates below leave backward intact
            C = self.codebook.to(X.dtype, copy=True)  # (k, d)
            D = self._distances(X_d, C)  # (n, k), differentiable in C only
            indices = D.detach().argmin(dim=1)  # (n,) nearest code, ties to the lowest index
            q = self.codebook.detach()[indices].to(X.dtype)  # (n, d) exactly the codes
            # (n, d) value q, gradient straight through to z; returned in z's dtype
            quantized = (q + (X - X_d)).to(z.dtype)
            loss = self.commitment_weight * (X - q).square().sum()
            if self.update == "objective":
                loss = loss + objective_from_distances(D, self.temperature, self.assignment)
            loss = loss / max(X.numel(), 1)
            if not bool(torch.isfinite(loss.detach())):  # z is finite (checked)
                self._raise_overflow(X_d, q, D.detach())
            if self.training:
                self._step(X_d, D.detach(), indices, comm)
            else:
                self._record(torch.bincount(indices, minlength=self.n_codes).double(), 0)
        return quantized.reshape(*lead, self.dim), indices.reshape(lead), loss

