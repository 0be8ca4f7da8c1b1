r"""Claims 1-3: collapse of the soft fixed points onto the Lloyd fixed point, its rate, and the
Gamma-convergence sandwich of the objectives.

For a dataset with Lloyd fixed point ``C*`` and a mapping ``m`` (softmax or entmax15), each
temperature ``T`` of a ladder from ``2 lambda_max`` (hot) down to ``g_min / 60`` (cold,
``g_min = min_i d_(2) - d_(1)`` at ``C*``) gets the soft fixed point ``C_T`` of
``c_j <- m_j = sum_i r_ij x_i / sum_i r_ij``, ``R = m(-D / 2T)``, iterated from ``C*`` itself (so
``C_T`` is on the branch of fixed points through ``C*`` unless it leaves it, and
``F_T(C_T) <= F_T(C*) <= J(C*)`` because soft Lloyd descends ``F_T``). Recorded per ``T``: the gap
``max |C_T - C*|``, the objectives, the number of points whose membership is not exactly one-hot
and the number whose nearest centroid at ``C_T`` is another than at ``C*``.

Rates (the paper's Theorems 3 and 4): ``gap ~ A exp(-B/T)`` with ``B -> g_min / 2`` for softmax
(the nearest runner-up centroid of the worst point carries weight ``exp(-g_min / 2T)``), and
``gap = O(T)`` for entmax-1.5, which is *exactly* hard once ``4T <= g_min``.

Gamma-convergence: ``J(C*) - 2T (sum w) H_max <= F_T(C_T) <= J(C*)`` with ``H_max = log k``
(Shannon) or ``(4/3)(1 - k^{-1/2})`` (Tsallis-1.5), and the sandwich at one fixed ``C``,
``J(C) - 2T (sum w) H_max <= F_T(C) <= J(C)``, at ``C = C*`` and at each ``C_T``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import torch

from ..annealing import soft_lloyd
from ..assignments import get_mapping
from ..distances import shifted_scores, sq_distances
from ..objectives import entropy_bound, kmeans_objective, soft_objective
from ..passes import Data
from ..spread import covariance_eigmax
from ._common import Context, DatasetContext, fit_exponential, fit_power, margins
from .datasets import make_dataset

__all__ = ["MAPPINGS", "collapse", "exact_hard_temperature", "gamma", "rates", "rates_large_n"]

MAPPINGS = ("softmax", "entmax15")
#: gaps below this are rounding noise in float64 (coordinates are O(1))
GAP_FLOOR = 1e-14
#: squared-shift tolerance of the soft-Lloyd iterations
TOL = 1e-28


def ladder(dc: DatasetContext, n_temperatures: int) -> np.ndarray:
    """Temperatures from ``2 lambda_max`` down to ``g_min / 60``, hot to cold: geometric down to
    ``g_min``, then a third of them (at least 6) geometric in ``[g_min / 60, g_min)``, where the
    asymptotic rates live."""
    n_cold = max(6, n_temperatures // 3)
    hot = np.geomspace(2.0 * dc.lambda_max, dc.g_min, n_temperatures - n_cold + 1)[:-1]
    cold = np.geomspace(dc.g_min, dc.g_min / 60.0, n_cold)
    return np.concatenate([hot, cold])


def memberships(X: torch.Tensor, C: torch.Tensor, T: float, mapping: str) -> torch.Tensor:
    """``R = m(-D / 2T)`` (n, k), computed from row-shifted scores (exact one-hot rows stay so)."""
    D = sq_distances(X, C)  # (n, k)
    shifted = shifted_scores(D, T)
    if shifted is None:
        return torch.zeros_like(D).scatter_(1, D.argmin(1, keepdim=True), 1.0)
    return get_mapping(mapping)(shifted[0], dim=1)


def n_not_one_hot(X: torch.Tensor, C: torch.Tensor, T: float, mapping: str) -> int:
    """Number of points whose membership row is not exactly one-hot."""
    return int((memberships(X, C, T, mapping).amax(dim=1) < 1.0).sum())


def _one_dataset(dc: DatasetContext, mapping: str, temps: np.ndarray, max_iter: int) -> dict:
    X, C_star = dc.X, dc.C_star
    H = entropy_bound(mapping, dc.k)
    out: dict[str, list[Any]] = {key: [] for key in (
        "T", "centroid_gap", "n_iter", "converged", "F_T", "F_T_at_C_star", "J_at_C_T",
        "n_soft", "n_relabelled", "fixed_point_residual")}
    labels_star = sq_distances(X, C_star).argmin(dim=1)  # (n,) nearest centroid at C*
    for T in temps:
        T = float(T)
        C_T, it, _ = soft_lloyd(Data(X), C_star, T, mapping, max_iter=max_iter, tol=TOL)
        C_next, _, _ = soft_lloyd(Data(X), C_T, T, mapping, max_iter=1)
        out["T"].append(T)
        out["centroid_gap"].append(float((C_T - C_star).abs().max()))
        out["n_iter"].append(it)
        out["converged"].append(it < max_iter)
        out["F_T"].append(float(soft_objective(X, C_T, T, mapping)))
        out["F_T_at_C_star"].append(float(soft_objective(X, C_star, T, mapping)))
        out["J_at_C_T"].append(float(kmeans_objective(X, C_T)))
        out["n_soft"].append(n_not_one_hot(X, C_T, T, mapping))
        out["n_relabelled"].append(int((sq_distances(X, C_T).argmin(dim=1) != labels_star).sum()))
        out["fixed_point_residual"].append(float((C_next - C_T).abs().max()))
    res: dict[str, Any] = dict(out)
    res.update({"J_star": dc.J_star, "H_max": H, "sum_w": float(dc.n), "k": dc.k,
                "monotone_below_T": 0.1 * dc.lambda_max})
    # monotone collapse: the gap should not grow as T decreases (rounding-level steps ignored),
    # judged below 0.1 lambda_max (above, C_T may sit on another branch: merged centroids)
    gap = np.asarray(out["centroid_gap"])
    cold = np.asarray(out["T"])[1:] <= 0.1 * dc.lambda_max
    rises = (np.diff(gap) > 1e-12 + 1e-9 * gap[:-1]) & cold  # (m-1,) T decreasing
    res["monotone"] = not bool(rises.any())
    res["rises"] = [[out["T"][i], out["T"][i + 1], float(gap[i]), float(gap[i + 1])]
                    for i in np.flatnonzero(rises)]
    return res


def exact_hard_temperature(dc: DatasetContext, steps: int = 50) -> float:
    """Largest ``T`` at which ``C*`` is itself the entmax-1.5 fixed point with exactly one-hot
    memberships for every point: soft Lloyd from ``C*`` does not move (gap at rounding level) and
    no row is soft. Bisection in ``log T`` between ``g_min / 16`` and ``4 g_min``; ``nan`` if the
    predicate does not change sign there."""

    def hard(T: float) -> bool:
        C_T, _, _ = soft_lloyd(Data(dc.X), dc.C_star, T, "entmax15", max_iter=200, tol=TOL)
        still = float((C_T - dc.C_star).abs().max()) <= 1e-12
        return still and n_not_one_hot(dc.X, C_T, T, "entmax15") == 0

    lo, hi = dc.g_min / 16.0, 4.0 * dc.g_min
    if not hard(lo) or hard(hi):
        return float("nan")
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if hard(mid) else (lo, mid)
    return lo


def collapse(ctx: Context) -> dict[str, Any]:
    """Claim 1: ``collapse[dataset][mapping] = {"T": [...], "centroid_gap": [...], ...}``."""
    cfg = ctx.config
    out: dict[str, Any] = {}
    for name, dc in ctx.datasets.items():
        temps = ladder(dc, cfg.n_temperatures)
        out[name] = {}
        for mapping in MAPPINGS:
            ctx.tick(f"collapse: {name}/{mapping}")
            out[name][mapping] = _one_dataset(dc, mapping, temps, cfg.collapse_max_iter)
        out[name]["entmax15"]["T_exact_hard"] = exact_hard_temperature(dc)
        out[name]["entmax15"]["T_exact_hard_predicted"] = dc.g_min / 4.0
        out[name]["g_min"] = dc.g_min
    return out


# -- claim 2: rates --------------------------------------------------------------------------------


def _two_models(t: np.ndarray, g: np.ndarray, sel: np.ndarray) -> dict[str, Any]:
    """``gap = A exp(-B/T)`` and ``gap = A T^p`` fitted on the points ``sel`` (at least 3, else
    ``None``), the window they span and the model of the smaller RMS of ``log10 gap``."""
    res: dict[str, Any] = {"window": [float(t[sel].min()), float(t[sel].max())]
                           if sel.any() else None, "points": int(sel.sum())}
    if sel.sum() >= 3:
        res["exponential"] = fit_exponential(t[sel], g[sel])
        res["power"] = fit_power(t[sel], g[sel])
        res["better_model"] = ("exponential" if res["exponential"]["rms_log10"]
                               < res["power"]["rms_log10"] else "power")
    else:
        res["exponential"] = res["power"] = None
        res["better_model"] = None
    return res


def _rate_fits(T: list[float], gap: list[float], g_min: float, mapping: str,
               T_hard: float | None) -> dict[str, Any]:
    """Both models fitted on the cold side, gaps above the floor: on the mapping's own window,
    ``T <= g_min`` (softmax; the regime where the exponential is predicted) or
    ``T_hard < T <= 8 g_min`` (entmax15), and on the window common to both mappings,
    ``g_min / 4 < T <= 8 g_min`` (``common_window``). For softmax also the local rate
    ``B = -d log(gap) / d(1/T)`` between consecutive ladder points of its window (``B_local``:
    ``[T_colder, T_warmer, B]``, hot to cold) and at the two coldest (``B_coldest_pair``),
    against the predicted ``g_min / 2``."""
    t, g = np.asarray(T), np.asarray(gap)
    if mapping == "softmax":
        sel = (t <= g_min) & (g > GAP_FLOOR)
    else:
        sel = (t > (T_hard or 0.0)) & (t <= 8 * g_min) & (g > GAP_FLOOR)
    res = _two_models(t, g, sel)
    common = _two_models(t, g, (t > g_min / 4.0) & (t <= 8 * g_min) & (g > GAP_FLOOR))
    common["bounds"] = [g_min / 4.0, 8 * g_min]
    res["common_window"] = common
    pos = sel & (g > 0)
    res["max_gap_over_T"] = float((g[pos] / t[pos]).max()) if pos.any() else 0.0
    if mapping == "softmax":
        res["B_predicted"] = g_min / 2.0
        idx = np.flatnonzero(pos)
        res["B_local"] = [
            [float(t[j]), float(t[i]),
             float(-(math.log(g[j]) - math.log(g[i])) / (1 / t[j] - 1 / t[i]))]
            for i, j in itertools.pairwise(idx)]
        if res["B_local"]:  # local slope of log gap against 1/T at the two coldest points
            res["B_coldest_pair"] = res["B_local"][-1][2]
    return res


def _other_fixed_points(cur: dict[str, Any], T_hard: float | None) -> list[dict[str, float]]:
    """The ladder temperatures above ``T_hard`` where entmax-1.5's ``C_T`` is a Lloyd fixed point
    other than ``C*``: every row exactly one-hot (so ``C_T`` is the mean of its own hard cells)
    and the gap above the floor. Each: ``T``, ``gap``, ``J(C_T) / J*`` and the points whose
    nearest centroid differs from that at ``C*``."""
    out = []
    relabelled = cur.get("n_relabelled") or [None] * len(cur["T"])
    for temp, s, gap, J, moved in zip(cur["T"], cur["n_soft"], cur["centroid_gap"],
                                      cur["J_at_C_T"], relabelled, strict=True):
        if temp > (T_hard or 0.0) and s == 0 and gap > GAP_FLOOR:
            out.append({"T": temp, "gap": gap, "J_over_J_star": J / cur["J_star"],
                        "n_relabelled": moved})
    return out


def _check_collapse_result(collapse_result: Any, per_dataset: tuple[str, ...],
                           per_mapping: tuple[str, ...]) -> dict[str, Any]:
    """``collapse_result`` if it is what :func:`collapse` returns -- a dict of datasets, each a
    dict holding ``per_dataset`` and a dict per mapping of :data:`MAPPINGS` holding
    ``per_mapping`` -- else raise ``TypeError``/``ValueError`` naming the entry."""
    if not isinstance(collapse_result, dict):
        raise TypeError(f"collapse_result must be a dict (what collapse() returns); got "
                        f"{type(collapse_result).__name__} {collapse_result!r:.80}")
    for name, per in collapse_result.items():
        where = f"collapse_result[{name!r}]"
        if not isinstance(per, dict):
            raise TypeError(f"{where} must be a dict; got {type(per).__name__} {per!r:.80}")
        missing = [key for key in (*per_dataset, *MAPPINGS) if key not in per]
        if missing:
            raise ValueError(f"{where} must hold {', '.join(map(repr, missing))}; got keys "
                             f"{sorted(map(str, per))}")
        for mapping in MAPPINGS:
            cur = per[mapping]
            if not isinstance(cur, dict):
                raise TypeError(f"{where}[{mapping!r}] must be a dict; got "
                                f"{type(cur).__name__} {cur!r:.80}")
            missing = [key for key in per_mapping if key not in cur]
            if missing:
                raise ValueError(f"{where}[{mapping!r}] must hold "
                                 f"{', '.join(map(repr, missing))}; got keys "
                                 f"{sorted(map(str, cur))}")
    return collapse_result


def rates(collapse_result: dict[str, Any]) -> dict[str, Any]:
    """Claim 2 from the collapse curves: fitted constants of both models per dataset/mapping,
    the local softmax rate against ``g_min / 2``, the measured exact-hard temperature of
    entmax15 against ``g_min / 4`` and the ladder temperatures where entmax15's ``C_T`` sits on
    another Lloyd fixed point.
    ``collapse_result`` is what :func:`collapse` returns (else ``TypeError``/``ValueError``)."""
    _check_collapse_result(collapse_result, ("g_min",),
                           ("T", "centroid_gap", "n_soft", "J_at_C_T", "J_star"))
    out: dict[str, Any] = {}
    for name, per in collapse_result.items():
        g_min = per["g_min"]
        out[name] = {}
        for mapping in MAPPINGS:
            cur = per[mapping]
            T_hard = cur.get("T_exact_hard") if mapping == "entmax15" else None
            T_hard = T_hard if T_hard is not None and T_hard == T_hard else None  # NaN: None
            fits = _rate_fits(cur["T"], cur["centroid_gap"], g_min, mapping, T_hard)
            if mapping == "entmax15":
                fits["T_exact_hard"] = T_hard
                fits["T_exact_hard_predicted"] = g_min / 4.0
                fits["ratio"] = (T_hard / (g_min / 4.0)) if T_hard is not None else None
                # the coldest run of ladder temperatures where C_T = C* exactly, all one-hot
                top = None
                for T, s, g in zip(cur["T"][::-1], cur["n_soft"][::-1],
                                   cur["centroid_gap"][::-1], strict=True):
                    if s != 0 or g > GAP_FLOOR:
                        break
                    top = T
                fits["largest_ladder_T_exactly_hard"] = top
                fits["other_fixed_point"] = _other_fixed_points(cur, T_hard)
            out[name][mapping] = fits
    return out


def rates_large_n(ctx: Context, name: str = "moons", n: int = 20000) -> dict[str, Any]:
    """The collapse curves of a denser sample (``n`` points), where the boundary regions hold many
    points and the continuum regime ``g_min << T << cluster scale`` spans decades."""
    cfg = ctx.config
    data = make_dataset(name, n, seed=cfg.seed * 100 + 99)
    X = torch.as_tensor(data.X, dtype=torch.float64)
    from ._common import lloyd_fixed_point

    C, C0, labels, J, iters = lloyd_fixed_point(X, data.k, cfg.seed, starts=2)
    dc = DatasetContext(data, X, C, C0, labels, J, float(margins(X, C).min()),
                        covariance_eigmax(X), iters)
    temps = np.geomspace(dc.lambda_max, dc.g_min / 60.0, cfg.n_temperatures)
    out: dict[str, Any] = {"dataset": name, "n": n, "g_min": dc.g_min}
    for mapping in MAPPINGS:
        ctx.tick(f"rates, n={n}: {mapping}")
        cur = _one_dataset(dc, mapping, temps, max_iter=500)
        t, g = np.asarray(cur["T"]), np.asarray(cur["centroid_gap"])
        sel = (t > 4 * dc.g_min) & (t < 0.05 * dc.lambda_max) & (g > GAP_FLOOR)
        out[mapping] = {
            "T": cur["T"], "centroid_gap": cur["centroid_gap"], "n_soft": cur["n_soft"],
            "continuum_window": [4 * dc.g_min, 0.05 * dc.lambda_max],
            "power": fit_power(t[sel], g[sel]) if sel.sum() >= 3 else None,
            "exponential": fit_exponential(t[sel], g[sel]) if sel.sum() >= 3 else None,
        }
    return out


# -- claim 3: Gamma-convergence ------------------------------------------------------------------


def _sandwich(F: np.ndarray, J: np.ndarray, width: np.ndarray, J_ref: float) -> dict[str, Any]:
    """Largest violations, relative to ``J_ref``, of ``J - width <= F <= J`` (negative: inside)
    and whether both are at most ``1e-12``."""
    upper = float(np.max(F - J) / J_ref)
    lower = float(np.max(J - width - F) / J_ref)
    return {"max_upper_violation_rel": upper, "max_lower_violation_rel": lower,
            "holds": bool(upper <= 1e-12 and lower <= 1e-12)}


def gamma(collapse_result: dict[str, Any]) -> dict[str, Any]:
    """Claim 3: the sandwich ``J* - 2T n H_max <= F_T(C_T) <= J*`` along each ladder, its worst
    violation (relative to ``J*``) and ``(J* - F_T) / (2 T n H_max)`` (in ``[0, 1]`` when it
    holds), the temperatures where its lower bound fails (``lower_violation_T``) and whether
    ``J(C_T) < J*`` there (``lower_violation_J_below_J_star``: ``C_T`` on a better fixed point,
    where the bound against ``J*`` does not follow from the theorem); the sandwich at a fixed
    ``C``, ``J(C) - 2T n H_max <= F_T(C) <= J(C)``, at ``C*`` (``at_C_star``) and at each ``C_T``
    (``at_C_T``), with ``J(C_T) - F_T(C_T)`` at the coldest ``T``; and, over the temperatures
    where every row
    is exactly one-hot, the largest ``|J(C_T) - F_T(C_T)|`` (``one_hot_J_minus_F_max_abs``) and,
    where also ``C_T = C*`` to the floor, the largest ``|J* - F_T|``
    (``one_hot_at_C_star_J_star_minus_F_max_abs``; ``None`` where there is no such
    temperature). ``collapse_result`` is what :func:`collapse` returns (else
    ``TypeError``/``ValueError``)."""
    _check_collapse_result(collapse_result, (), (
        "T", "F_T", "F_T_at_C_star", "J_at_C_T", "J_star", "sum_w", "H_max", "n_soft",
        "centroid_gap"))
    out: dict[str, Any] = {}
    for name, per in collapse_result.items():
        out[name] = {}
        for mapping in MAPPINGS:
            cur = per[mapping]
            T = np.asarray(cur["T"])
            F = np.asarray(cur["F_T"])
            J = cur["J_star"]
            J_T = np.asarray(cur["J_at_C_T"])
            width = 2 * T * cur["sum_w"] * cur["H_max"]
            lower = J - width
            along = _sandwich(F, np.full_like(F, J), width, J)
            hard = np.asarray(cur["n_soft"]) == 0
            low = lower - F > 1e-12 * J  # (m,) lower bound against J* violated
            at_star = hard & (np.asarray(cur["centroid_gap"]) <= GAP_FLOOR)
            out[name][mapping] = {
                "T": cur["T"],
                "F_T": cur["F_T"],
                "J_star": J,
                "lower_bound": lower.tolist(),
                "J_minus_F": (J - F).tolist(),
                "bound_width": width.tolist(),
                "fraction_of_bound": ((J - F) / width).tolist(),
                **along,
                "at_C_star": _sandwich(np.asarray(cur["F_T_at_C_star"]), np.full_like(F, J),
                                       width, J),
                "at_C_T": _sandwich(F, J_T, width, J),
                "J_minus_F_at_coldest": float(J - F[-1]),
                "J_T_minus_F_at_coldest": float(J_T[-1] - F[-1]),
                "lower_violation_T": T[low].tolist(),
                "lower_violation_J_below_J_star": (J_T[low] < J * (1 - 1e-12)).tolist(),
                "one_hot_J_minus_F_max_abs": float(np.abs(J_T - F)[hard].max())
                if hard.any() else None,
                "one_hot_at_C_star_J_star_minus_F_max_abs": float(np.abs(J - F)[at_star].max())
                if at_star.any() else None,
            }
    return out
