"""The report's sections on claims 1-3 (collapse, rates, Gamma-convergence): what was measured,
in sentences built from ``results.json``; a sentence whose statement depends on the numbers is
printed only where they bear it out.
"""

from __future__ import annotations

from typing import Any

from ._format import cap, e, f, g_units, names, span
from .findings import claim_rows
from .findings_collapse import (
    COLLAPSE_TOL,
    MAPPINGS,
    P_BAND,
    RATE_TOL,
    entmax_orders,
    model_comparison,
    rate_ratios,
    rise_relabelled,
)

__all__ = ["collapse_texts"]


def _collapse_text(res: dict[str, Any]) -> str:
    c = res["collapse"]
    ns = names(res)
    first = c[ns[0]]["softmax"]
    n_T = len(first["T"])
    n_cold = sum(1 for temp in first["T"] if temp <= c[ns[0]]["g_min"])
    rows = claim_rows(res, "collapse")
    cold = max(c[n][m]["centroid_gap"][-1] for n in ns for m in MAPPINGS)
    non_mono = [f"{n}/{m}" for n in ns for m in MAPPINGS if not c[n][m]["monotone"]]
    moved = rise_relabelled(res)
    text = (
        f"For each dataset the Lloyd fixed point C* was computed, then the soft fixed point C_T at "
        f"{n_T} temperatures from 2 lambda_max down to g_min/60, {n_cold} of them at or below "
        f"g_min on {ns[0]} (g_min: the smallest gap d_(2) - d_(1) of a point at C*), each by soft "
        "Lloyd iterated from C* to a squared shift below 1e-28. Starting at C* makes the collapse "
        "partly a matter of construction: C_T is the fixed point soft Lloyd reaches from C*, so "
        "the measurement shows that C* is where that branch ends, not that annealing from "
        f"elsewhere finds it. {cap(rows[0]['measured'])}, "
        + ("so the collapse holds. " if cold < COLLAPSE_TOL else
           f"so the collapse is not reached (a gap >= {COLLAPSE_TOL:g}). "))
    if non_mono:
        text += ("It is not monotone everywhere: " + rows[1]["measured"]
                 + (f"; at the temperatures where the gap rises, up to {moved} points have "
                    "another nearest centroid at C_T than at C* (boundary points on the other "
                    "side)." if moved else "."))
    else:
        text += "Below 0.1 lambda_max the gap never rises as T falls on any dataset or mapping."
    return text


def _rates_text(res: dict[str, Any]) -> str:
    r = res["rates"]
    ns = names(res)
    ratios = rate_ratios(res)
    rows = claim_rows(res, "rates")
    local = []
    for n in ns:
        B = r[n]["softmax"].get("B_local") or []
        pred = r[n]["softmax"]["B_predicted"]
        if B:
            local.append(f"{n} {span([x[2] / pred for x in B], lambda v: f'{v + 0.0:.3g}')} on "
                         f"T <= g_min, {f(B[-1][2] / pred, 4)} at the coldest pair")
    fitted = "; ".join(f"{n}: B = {f(r[n]['softmax']['exponential']['B'])} fitted on T <= g_min, "
                       f"{f(r[n]['softmax'].get('B_coldest_pair'))} at the coldest pair, "
                       f"g_min/2 = {f(r[n]['softmax']['B_predicted'])}"
                       for n in ns if r[n]["softmax"].get("exponential"))
    near = all(x is not None and abs(x - 1) <= RATE_TOL for x in ratios.values())
    text = (
        "Softmax: the local rate -d log(gap)/d(1/T) between consecutive ladder points, over "
        "g_min/2: " + "; ".join(local) + ". "
        + ("At the coldest temperatures it is within "
           f"{RATE_TOL:.0%} of g_min/2 on every dataset, the rate exp(-g_min/2T) of Theorem 3 "
           "(the runner-up centroid of the worst point carries weight exp(-g_min/2T)). "
           if near else f"At the coldest pair it is not within {RATE_TOL:.0%} of g_min/2 on "
           "every dataset. ")
        + f"Fitted constants: {fitted}. Model comparison: " + model_comparison(res) + ". ")
    hard = [r[n]["entmax15"]["ratio"] for n in ns]
    if all(h is not None and abs(h - 1) < 1e-6 for h in hard):
        text += ("Entmax-1.5: " + rows[1]["measured"] + ": it becomes exactly hard at the "
                 "predicted temperature g_min/4. ")
    else:
        text += "Entmax-1.5: " + rows[1]["measured"] + ": not at the predicted g_min/4. "
    orders = entmax_orders(res)
    slower = [n for n, o in orders.items() if o["status"] == "slower"]
    jumped = [n for n in slower if orders[n]["other"]]
    text += ("Above it: " + rows[2]["measured"] + ". An exponent p in "
             f"[{P_BAND[0]}, {P_BAND[1]}] is O(T), a larger one decays faster (within an O(T) "
             "bound), a smaller one means gap/T grows as T falls. ")
    for n in jumped:
        gaps = [o["gap"] for o in orders[n]["other"]]
        text += (f"On {n} the small exponent comes with C_T leaving the branch through C*: soft "
                 "Lloyd from C* ends on another Lloyd fixed point whose rows are all one-hot"
                 + (f", a plateau (gap {span(gaps, e)} at {len(gaps)} ladder temperatures) that "
                    "does not scale with T" if len(gaps) > 1 and max(gaps) <= 1.5 * min(gaps)
                    else "") + ". ")
    big = res.get("rates_large_n")
    if big and big["entmax15"].get("power"):
        p_big = big["entmax15"]["power"]["p"]
        inside = P_BAND[0] <= p_big <= P_BAND[1]
        text += (f"With n = {big['n']} points ({big['dataset']}), on T in [4 g_min, 0.05 "
                 f"lambda_max], entmax-1.5's exponent is {f(p_big)}: "
                 + ("O(T) in that window." if inside else
                    "not O(T) in that window (gap/T grows as T falls there)."
                    if p_big < P_BAND[0] else "faster than O(T) in that window."))
    return text


def _gamma_text(res: dict[str, Any]) -> str:
    g = res["gamma_convergence"]
    c = res["collapse"]
    ns = names(res)
    cells = [g[n][m] for n in ns for m in MAPPINGS]
    along = all(x["holds"] for x in cells)
    fixed = [x[key] for x in cells for key in ("at_C_star", "at_C_T") if key in x]
    text = (
        "F_T(C_T) (from the collapse runs) was compared with J(C*) and the lower bound "
        "J(C*) - 2T(sum w)H_max, H_max = log k (Shannon) or (4/3)(1 - k^-1/2) (Tsallis-1.5); "
        "the sandwich at one fixed C, J(C) - 2T(sum w)H_max <= F_T(C) <= J(C), was checked at C* "
        "and at each C_T. The upper bound along the ladder holds partly by construction: soft "
        "Lloyd from C* only lowers F_T, so F_T(C_T) <= F_T(C*) <= J(C*); the lower bound and the "
        "fixed-C sandwich are the tests. "
        + cap(claim_rows(res, "gamma_convergence")[0]["measured"]) + ". ")
    verdict = claim_rows(res, "gamma_convergence")[0]["verdict"]
    if along and all(x["holds"] for x in fixed):
        text += "The sandwich held at every temperature, along the ladder and at fixed C. "
    elif verdict.startswith("held at fixed C"):
        text += ("The sandwich at fixed C held at every temperature; along the ladder F_T(C_T) "
                 "fell below J* - 2T(sum w)H_max on " + verdict.split(" on ", 1)[1] + ". ")
    else:
        text += f"The sandwich was violated beyond rounding (1e-12 relative): {verdict}. "
    one_hot = [g[n]["entmax15"].get("one_hot_J_minus_F_max_abs") for n in ns]
    at_star = [g[n]["entmax15"].get("one_hot_at_C_star_J_star_minus_F_max_abs") for n in ns]
    if all(x is not None for x in one_hot):
        J_star = min(g[n]["entmax15"]["J_star"] for n in ns)
        text += (f"Tsallis: where every row is one-hot, F_T(C_T) = J(C_T) to rounding "
                 f"(|J(C_T) - F_T| <= {e(max(one_hot))}, J* >= {f(J_star)})")
        if all(x is not None for x in at_star):
            text += f", and where also C_T = C*, |J* - F_T| <= {e(max(at_star))}"
        text += ". "
    parts = []
    for n in ns:
        cur = g[n]["softmax"]
        g_min = c[n]["g_min"]
        i = next((j for j, temp in enumerate(cur["T"]) if temp <= g_min), None)
        if i is not None:
            parts.append(f"{n} {e(cur['J_minus_F'][i] / cur['J_star'])} at "
                         f"{g_units(cur['T'][i], g_min)}, "
                         f"{e(cur['J_minus_F'][-1] / cur['J_star'])} at "
                         f"{g_units(cur['T'][-1], g_min)}")
    if parts:
        text += "Shannon: (J* - F_T)/J* is " + "; ".join(parts) + "."
    return text


def collapse_texts(res: dict[str, Any]) -> dict[str, str]:
    """The texts of the sections on claims 1-3 present in ``res``, by figure key."""
    txt: dict[str, str] = {}
    if "collapse" in res:
        txt["fig_collapse"] = _collapse_text(res)
    if "rates" in res:
        txt["fig_rates"] = _rates_text(res)
    if "gamma_convergence" in res and "collapse" in res:
        txt["fig_gamma"] = _gamma_text(res)
    return txt
