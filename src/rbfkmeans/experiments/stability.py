r"""Claim 5: numerical behaviour at low temperature, ``T = 1`` down to ``T = 1e-12``.

Scores in two forms, both exactly the layer of the interview question:

* ``distance``: ``z_ij = -d_ij / (2T)`` (``d`` by the one-matmul expansion, clamped at 0);
* ``linear``:   ``z_ij = (W x_i + b)_j`` with ``W = C / T``, ``b_j = -||c_j||^2 / (2T)``
  (the ``torch.nn.Linear`` of ``KMeansLayer.as_linear``; ``z`` is the distance form plus the row
  constant ``||x_i||^2 / 2T``, which is huge at small ``T``).

Three mappings, in float32 and float64: a naive softmax ``exp(z) / sum exp(z)`` (no max
subtraction), the stable softmax (``torch.softmax``, max-subtracted) and entmax-1.5. For each we
record the rows of ``R`` holding NaN/inf, the gradient ``dF_T/dC`` by autograd of the relaxed
objective written with that mapping (naive: ``-2T sum log sum exp z``; stable:
``-2T sum logsumexp z``; entmax: ``-2T sum (<r, z> + H_1.5(r))``, the conjugate form), its norm
and non-finite entries, and whether the fit still moves: the step ``c_j <- c_j - dF/dc_j / 2N_j``
(finite? how far from the exact Lloyd step from the same ``C0``?). Also the gradient of a
downstream loss ``sum_ij r_ij g_ij`` (``g = +-1``) that reaches ``C`` only through ``R``: what the
layer passes back through the mapping's Jacobian.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..distances import sq_distances
from ..mappings import entmax15, softmax
from ._common import Context

__all__ = ["MAPPINGS", "stability"]

MAPPINGS = ("softmax_naive", "softmax_stable", "entmax15")
FORMS = ("distance", "linear")
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _scores(X: torch.Tensor, C: torch.Tensor, T: float, form: str) -> torch.Tensor:
    if form == "distance":
        return sq_distances(X, C) / (-2.0 * T)  # (n, k)
    W = C / T  # (k, d)
    b = -(C * C).sum(dim=1) / (2.0 * T)  # (k,)
    return X @ W.T + b  # (n, k)


def _map_and_objective(
    z: torch.Tensor, T: float, mapping: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``R`` (n, k) and the relaxed objective (up to a C-independent constant)."""
    if mapping == "softmax_naive":
        e = torch.exp(z)
        s = e.sum(dim=1, keepdim=True)
        return e / s, -2.0 * T * torch.log(s).sum()
    if mapping == "softmax_stable":
        return softmax(z, dim=1), -2.0 * T * torch.logsumexp(z, dim=1).sum()
    R = entmax15(z, dim=1)
    H = (4.0 / 3.0) * (1.0 - R.pow(1.5).sum(dim=1))  # Tsallis-1.5 entropy (n,)
    return R, -2.0 * T * ((R * z).sum(dim=1) + H).sum()


def _lloyd_step(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The exact hard Lloyd update from ``C`` (float64 reference)."""
    lab = sq_distances(X, C).argmin(dim=1)  # (n,)
    k = C.shape[0]
    N = torch.bincount(lab, minlength=k).to(X.dtype)  # (k,)
    S = torch.zeros_like(C).index_add_(0, lab, X)  # (k, d)
    return torch.where(N.unsqueeze(1) > 0, S / N.clamp(min=1).unsqueeze(1), C)


def _one(X64: torch.Tensor, C0_64: torch.Tensor, T: float, form: str, mapping: str,
         dtype: torch.dtype, C_ref: torch.Tensor) -> dict[str, Any]:
    X = X64.to(dtype)
    C = C0_64.to(dtype).clone().requires_grad_(True)
    z = _scores(X, C, T, form)
    R, F = _map_and_objective(z, T, mapping)
    bad_rows = int((~torch.isfinite(R)).any(dim=1).sum())
    (grad,) = torch.autograd.grad(F, C, retain_graph=True)
    # a downstream loss that reaches C only through R: sum_ij R_ij G_ij, G fixed (+-1 pattern)
    G = torch.ones_like(R)
    G[:, ::2] = -1.0
    (grad_R,) = torch.autograd.grad((R * G).sum(), C)
    with torch.no_grad():
        bad_grad = int((~torch.isfinite(grad)).sum())
        N = R.sum(dim=0)  # (k,)
        C1 = C.detach() - grad / (2.0 * N.unsqueeze(1))  # the eta_j = 1/(2 N_j) step
        finite = bool(torch.isfinite(C1).all())
        err = float((C1.double() - C_ref).abs().max()) if finite else None
        moved = float((C1 - C.detach()).abs().max()) if finite else None
        one_hot = float((R.amax(dim=1) == 1.0).double().mean()) if bad_rows == 0 else None
    return {
        "nonfinite_rows": bad_rows,
        "nonfinite_grad": bad_grad,
        "grad_norm": float(grad.double().norm()) if bad_grad == 0 else None,
        "through_R_grad_norm": float(grad_R.double().norm())
        if bool(torch.isfinite(grad_R).all()) else None,
        "step_finite": finite,
        "step_moved": moved,
        "step_error_vs_lloyd": err,
        "one_hot_fraction": one_hot,
    }


def stability(ctx: Context) -> dict[str, Any]:
    """Pooled over the datasets: per form, dtype and mapping, lists over ``T``."""
    cfg = ctx.config
    temps = np.logspace(0, -cfg.stability_decades,
                        cfg.stability_decades * cfg.stability_per_decade + 1).tolist()
    gen = torch.Generator().manual_seed(cfg.seed)
    starts = {}
    for name, dc in ctx.datasets.items():
        C0 = dc.C_star + 0.05 * torch.randn(dc.C_star.shape, generator=gen, dtype=torch.float64)
        starts[name] = (dc.X, C0, _lloyd_step(dc.X, C0))
    n_total = sum(dc.n for dc in ctx.datasets.values())
    out: dict[str, Any] = {"T": temps, "n_points": n_total, "datasets": list(ctx.datasets)}
    for form in FORMS:
        out[form] = {}
        for dname, dtype in DTYPES.items():
            out[form][dname] = {}
            for mapping in MAPPINGS:
                ctx.tick(f"stability: {form}/{dname}/{mapping}")
                rec: dict[str, Any] = {key: [] for key in (
                    "nonfinite_rows", "nonfinite_grad", "grad_norm", "through_R_grad_norm",
                    "step_error_vs_lloyd", "fit_moves", "one_hot_fraction")}
                for T in temps:
                    parts = [_one(X, C0, T, form, mapping, dtype, ref)
                             for X, C0, ref in starts.values()]
                    rec["nonfinite_rows"].append(sum(p["nonfinite_rows"] for p in parts))
                    rec["nonfinite_grad"].append(sum(p["nonfinite_grad"] for p in parts))
                    norms = [p["grad_norm"] for p in parts]
                    rec["grad_norm"].append(None if None in norms else max(norms))
                    gR = [p["through_R_grad_norm"] for p in parts]
                    rec["through_R_grad_norm"].append(None if None in gR else max(gR))
                    errs = [p["step_error_vs_lloyd"] for p in parts]
                    rec["step_error_vs_lloyd"].append(None if None in errs else max(errs))
                    rec["fit_moves"].append(all(p["step_finite"] and (p["step_moved"] or 0) > 0
                                                for p in parts))
                    oh = [p["one_hot_fraction"] for p in parts]
                    rec["one_hot_fraction"].append(None if None in oh else float(np.mean(oh)))
                first_bad = next((T for T, b in zip(temps, rec["nonfinite_rows"], strict=True)
                                  if b > 0), None)
                rec["first_T_with_nonfinite"] = first_bad
                rec["total_nonfinite_rows"] = int(sum(rec["nonfinite_rows"]))
                rec["moves_at_all_T"] = all(rec["fit_moves"])
                out[form][dname][mapping] = rec
    return out
