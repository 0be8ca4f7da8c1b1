"""The report's sections on claims 4-9 (gradient step, stability, critical temperatures, cost,
the follow-ups, annealing paths): what was measured, in sentences built from ``results.json``;
a sentence whose statement depends on the numbers is printed only where they bear it out.
"""

from __future__ import annotations

from typing import Any

from ._format import cap, e, f, joined, names, span
from .findings import SLOPE_MAX, claim_rows, ladder_brackets, reference_slopes

__all__ = ["other_texts"]

CRITICAL = (("softmax", "lambda_max"), ("entmax15", "sqrt(k) lambda_max"),
            ("sparsemax", "k lambda_max"))


def _gradient_text(res: dict[str, Any]) -> str:
    g = res["gradient_step_equals_lloyd"]
    p = g["per_dataset"][g["figure_dataset"]]
    small = max(max(v["max_abs_diff_small_T_vs_lloyd"].values())
                for v in g["per_dataset"].values())
    glob = g["max_abs_diff_global_lr"]
    return (
        f"From k random data points, {p['iterations']} steps of (a) Lloyd and (b) an autograd "
        "gradient step on J with eta_j = 1/(2|S_j|) agree to "
        f"{e(g['max_abs_diff'])} ({e(g['max_rel_diff'])} relative to the largest coordinate) "
        "over all trajectories of all datasets (float64); the relaxed gradient (softmax and "
        f"entmax-1.5) at T = 1e-9 lambda_max differs from Lloyd's path by at most {e(small)}. "
        + (f"(c) One global rate k/(2n) follows another path (max difference {e(glob)})"
           if glob > 1e-6 else f"(c) One global rate k/(2n) gives the same path to {e(glob)}")
        + ", and (d) the bare loss sum r d differentiated through R at T = "
        f"{f(p['T_mid'])} differs from the relaxed F_T (whose step is soft Lloyd to "
        f"{e(g['max_abs_diff_relaxed_vs_soft_lloyd'])}) by "
        f"{p['bare_vs_relaxed_gradient_rel']:.1%} in gradient norm at the start.")


def _zero_from(values: list[float | None], temps: list[float]) -> float | None:
    """The warmest ``T`` from which ``values`` are exactly 0 at every colder ``T``."""
    top = None
    for T, v in zip(temps[::-1], values[::-1], strict=True):
        if v != 0:
            break
        top = T
    return top


def _stability_text(res: dict[str, Any]) -> str:
    s = res["stability"]
    forms, dtypes = ("distance", "linear"), ("float32", "float64")
    total = {m: sum(s[fo][d][m]["total_nonfinite_rows"] for fo in forms for d in dtypes)
             for m in ("softmax_naive", "softmax_stable", "entmax15")}
    text = cap(claim_rows(res, "stability")[0]["measured"]) + ". "
    lin32 = s["linear"]["float32"]["softmax_naive"]["first_T_with_nonfinite"]
    dist32 = s["distance"]["float32"]["softmax_naive"]["first_T_with_nonfinite"]
    if lin32 is not None and (dist32 is None or lin32 > dist32):
        text += (f"The naive softmax on the Linear layer's logits Wx + b (float32) fails already "
                 f"at T = {e(lin32)}, a warmer T than on the distance scores (the logits carry "
                 "the row constant ||x||^2/2T, and exp overflows). ")
    if total["softmax_naive"] and not total["softmax_stable"] and not total["entmax15"]:
        text += ("What the paper attributes to softmax is the missing max subtraction: "
                 "torch.softmax is as stable as entmax-1.5 here. ")
    zero = {m: _zero_from(s["distance"]["float64"][m]["through_R_grad_norm"], s["T"])
            for m in ("softmax_stable", "entmax15")}
    if all(v is not None for v in zero.values()):
        text += (f"Both stop passing gradient through R at low T: the gradient of a loss on R "
                 f"is exactly 0 from T = {e(zero['softmax_stable'])} (softmax) and "
                 f"{e(zero['entmax15'])} (entmax-1.5) down (float64). ")
    moves = all(s[fo][d][m]["moves_at_all_T"] for fo in forms for d in dtypes
                for m in ("softmax_stable", "entmax15"))
    if moves:
        text += ("The centroid step with eta_j = 1/(2N_j) (gradient 2N_j(c_j - m_j)) moves the "
                 "centroids at every T for both.")
    return text


def _critical_text(res: dict[str, Any]) -> str:
    c = res["critical_temperatures"]
    ns = names(res)
    cfg = res["meta"]["config"]
    ph0 = c[ns[0]]["softmax"]["phase"]
    max_iter = ph0.get("max_iter", cfg["phase_max_iter"])
    parts: list[str] = []
    held: list[str] = []
    notheld: list[str] = []
    capped: list[bool] = []
    wobbly: list[tuple[str, int, int]] = []
    rows = claim_rows(res, "critical_temperatures")
    for (m, form), row in zip(CRITICAL, rows, strict=True):
        lin = [c[n][m]["linear_ratio"] for n in ns]
        br = sorted({tuple(c[n][m]["split_bracket"]) for n in ns}, key=str)
        between = " / ".join(f"{a} and {b}" for a, b in br)
        parts.append(f"{m} (T_c = {form}): linearised T_c = prediction to "
                     f"{e(max(abs(x - 1) for x in lin))} (relative), nonlinear split between "
                     f"{between} x T_c")
        (held if row["verdict"].startswith("held") else notheld).append(m)
        for n in ns:
            ph = c[n][m]["phase"]
            i = next((j for j, d in enumerate(ph["distinct"]) if d > 1), None)
            if i and "n_iter" in ph:
                capped.append(ph["n_iter"][i - 1] >= max_iter)
            d = ph["distinct"]
            falls = [j for j in range(1, len(d)) if d[j] < d[j - 1]]
            if falls:
                full = [ph["n_iter"][j] >= max_iter for j in falls] if "n_iter" in ph else []
                wobbly.append((f"{n}/{m}", sum(full), len(falls)))
    lad_all = [v for m, _ in CRITICAL for v in ladder_brackets(res, m).values()]
    prev = [v[0] for v in lad_all if v[0] is not None]
    split = [v[1] for v in lad_all if v[1] is not None]
    text = (
        "The first critical temperature was measured three ways: the spectral radius of the "
        "soft-Lloyd Jacobian at the all-mean configuration (triangles), soft Lloyd from the mean "
        f"plus a {c['eps']:g} perturbation at T = "
        f"{', '.join(f'{r:g}' for r in c['ratios'])} x T_c, and an annealing ladder (from "
        f"1.5 T_c, cooling {cfg['phase_cooling']:g}, at most {max_iter} soft-Lloyd iterations per "
        f"step, no rebalancing) counting distinct centroids (tolerance {c['distinct_tol']:g}). "
        + "; ".join(parts) + ". ")
    if split:
        text += (f"The ladder first shows distinct centroids at {span(split)} x T_c; the step "
                 f"before, at {span(prev)} x T_c, still has one group. " if prev else "")
        if prev and max(prev) < 1:
            text += ("So the split shows on the ladder only below the first step under T_c"
                     + (f"; at that step soft Lloyd ran its full {max_iter} iterations on "
                        f"{sum(capped)} of {len(capped)} runs, without the perturbation passing "
                        "the tolerance" if capped and any(capped) else "")
                     + ". The ladder brackets the split to its own step; the value of T_c rests "
                     "on the linearised and the nonlinear runs. ")
    text += (f"The derivation in schedules.py is confirmed for {joined(held)}"
             + (f" and not for {joined(notheld)}" if notheld else "") + ". ")
    if wobbly:
        n_full, steps = sum(w[1] for w in wobbly), sum(w[2] for w in wobbly)
        text += ("The count of distinct centroids goes down again along the ladder on "
                 + ", ".join(f"{w[0]}" for w in wobbly)
                 + f"; soft Lloyd ran its full {max_iter} iterations at {n_full} of those "
                 f"{steps} steps" + (" (the counts there are those of unsettled iterates)."
                                     if n_full == steps else "."))
    return text


def _cost_text(res: dict[str, Any]) -> str:
    cc = res["cost"]
    sl = cc["soft_slope_k_ge_64"]
    ref = reference_slopes(cc["k"])
    text = cap(claim_rows(res, "cost")[0]["measured"]) + ". "
    ent, sm = sl.get("entmax15"), sl.get("softmax")
    text += ("The library's entmax-1.5 sorts only the rows that are not one-hot, and only their "
             "candidates (gap to the maximum below 1)")
    if ent is not None and sm is not None:
        text += ("; its slope is " + ("within 0.15 of" if abs(ent - sm) <= 0.15 else
                                      "below" if ent < sm else "above") + " softmax's")
    text += ". "
    if ref:
        text += (f"Over these k, O(k) and O(k log k) differ in slope by only "
                 f"{ref[1] - ref[0]:.2f}, so the verdict says only whether a slope exceeds "
                 f"{SLOPE_MAX:g} (worse than k log k). ")
    last = {reg: {name: v[-1] for name, v in cc[reg].items()} for reg in ("soft", "cold")}
    h, en = (last["soft"].get("hard"), last["soft"]["entmax15"])
    if h is not None:
        r_h, r_e = h / last["soft"]["softmax"], en / last["soft"]["softmax"]
        text += (f"Hard argmax, which does not sort, takes {r_h:.3g}x softmax's time on soft "
                 f"rows (entmax-1.5: {r_e:.3g}x)"
                 + (", so the entmax-1.5 / softmax ratio is not the cost of sorting alone. "
                    if r_h >= 0.5 * r_e else ". "))
    slow = {reg: last[reg]["softmax"] / last[reg]["softmax_flush_denormal"]
            for reg in ("soft", "cold") if "softmax_flush_denormal" in last[reg]}
    if len(slow) == 2:
        text += (f"Softmax takes {slow['cold']:.3g}x the time of softmax with subnormal floats "
                 f"flushed to zero on cold scores, {slow['soft']:.3g}x on soft scores"
                 + (" (subnormal exp() results are slow to compute). "
                    if slow["cold"] > 1.5 * slow["soft"] else ". "))
    return text + ("Timings come from one run on one machine and vary between runs and "
                   "machines; the ratios, not the seconds, are the result.")


def _entropy_text(res: dict[str, Any]) -> str:
    ent = res["followups"]["entropy"]
    ns = names(res)
    text = cap(claim_rows(res, "followups")[0]["measured"]) + " (softmax rows at C*). "
    tops = {n: _zero_from([1.0 - x for x in ent[n]["entmax_one_hot"]], ent[n]["T"]) for n in ns}
    if all(v is not None for v in tops.values()):
        text += ("Entmax-1.5 rows are all exactly one-hot from T = "
                 + ", ".join(f"{tops[n] / res['datasets'][n]['g_min']:.2g} g_min ({n})"
                             for n in ns) + " down. ")
    sm = [ent[n]["softmax_one_hot"][-1] for n in ns]
    text += (f"Softmax rows exactly one-hot at the coldest T: {min(sm):.1%}..{max(sm):.1%} (a "
             "softmax row is exactly one-hot only where exp underflows).")
    return text


def _relu_text(res: dict[str, Any]) -> str:
    relu = res["followups"]["relu"]
    ns = names(res)
    text = "relu(Wx + b) = relu((||x||^2 - d_ij)/2T): " + claim_rows(res, "followups")[1][
        "measured"] + ". "
    nz = [relu[n]["centred"]["argmax_agrees_nonzero_rows"] for n in ns]
    if all(v is not None and v >= 1 - 1e-12 for v in nz):
        text += "ReLU is monotone, so where a row is non-zero its argmax is the nearest centroid. "
    moved = min(relu[n]["relu_translation_change"] for n in ns)
    sm = max(relu[n]["softmax_translation_change"] for n in ns)
    if moved > 1e-6 and sm < 1e-9:
        text += (f"Its output moves with the origin; softmax's output is translation-invariant "
                 f"to {e(sm)}.")
    return text


def _online_text(res: dict[str, Any]) -> str:
    on = res["followups"]["online"]
    ns = names(res)
    n0 = on[ns[0]]
    text = (f"{n0['epochs']} shuffled passes in batches of {n0['batch']}: "
            + claim_rows(res, "followups")[2]["measured"] + ". ")
    own = [on[n][k]["final_error_to_nearest_fixed_point"] for n in ns
           for k in ("partial_fit", "sgd")]
    closer = all(on[n][k]["final_error_to_nearest_fixed_point"] < on[n]["initial_error"]
                 for n in ns for k in ("partial_fit", "sgd"))
    text += (f"Distance to the Lloyd fixed point reached from each learner's final centroids "
             f"(dotted): {e(min(own))}..{e(max(own))} at the end"
             + (", below the starting error everywhere" if closer else "") + "; ")
    same = [n for n in ns if on[n]["partial_fit"]["nearest_fixed_point_is_C_star"]]
    text += f"for partial_fit that fixed point is C* itself on {joined(same)}. "
    iters = {n: res["datasets"][n].get("lloyd_iterations") for n in ns}
    text += ("Batch Lloyd from the same start took " + ", ".join(f"{n} {iters[n]}" for n in ns)
             + " iterations. ")
    near = [n for n in ns if (s := on[n]["partial_fit"].get("error_loglog_slope")) is not None
            and abs(s + 1) <= 0.2]
    text += ("partial_fit's error falls about like 1/samples (log-log slope within 0.2 of -1) "
             f"on {joined(near)}.")
    return text


def _trajectories_text(res: dict[str, Any]) -> str:
    t = res["trajectories"]
    ns = names(res)
    above = all(t[n][m]["T"] and t[n][m]["T"][0] > t[n][m]["T_c"] for n in ns
                for m in ("softmax", "entmax15"))
    return (f"RBFKMeans (cooling {res['meta']['config']['anneal_cooling']:g}, from the data mean"
            + (" above T_c" if above else "") + ") for each dataset and mapping; paths coloured "
            "by log10 T, red stars after the hard polish. "
            + claim_rows(res, "trajectories")[0]["measured"] + " (<= 1 means as good or better).")


def other_texts(res: dict[str, Any]) -> dict[str, str]:
    """The texts of the sections on claims 4-9 present in ``res``, by figure key."""
    txt: dict[str, str] = {}
    if "gradient_step_equals_lloyd" in res:
        txt["fig_gradient"] = _gradient_text(res)
    if "stability" in res:
        txt["fig_stability"] = _stability_text(res)
    if "critical_temperatures" in res:
        txt["fig_critical"] = _critical_text(res)
    if "cost" in res:
        txt["fig_cost"] = _cost_text(res)
    if "followups" in res:
        txt["fig_entropy"] = _entropy_text(res)
        txt["fig_relu"] = _relu_text(res)
        txt["fig_online"] = _online_text(res)
    if "trajectories" in res:
        txt["fig_trajectories"] = _trajectories_text(res)
    return txt
