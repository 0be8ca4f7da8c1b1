"""Figures of the reproduction, drawn from ``results.json`` alone (matplotlib, Agg canvas).

Every function takes the loaded results dict and an output folder, draws one PNG and returns its
file name. No experiment is recomputed here; only the arrays stored in the file are plotted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np

from .canvas import COLORS, FLOOR, LABELS, _arr, _arr_2d, _datasets, _figure, _grid, _save

__all__ = ["FIGURES", "draw_all"]

# -- claim 1 ---------------------------------------------------------------------------------------


def fig_collapse(res: dict[str, Any], out: Path) -> str:
    names = _datasets(res)
    rows, cols = _grid(len(names))
    fig, axes = _figure(rows, cols)
    for ax, name in zip(axes.flat, names, strict=False):
        per = res["collapse"][name]
        for m in ("softmax", "entmax15"):
            T, gap = _arr(per[m]["T"]), _arr(per[m]["centroid_gap"])
            ax.loglog(T, np.maximum(gap, FLOOR), "o-", ms=3.5, color=COLORS[m], label=LABELS[m])
        ax.axvline(per["g_min"] / 4, color=COLORS["entmax15"], ls=":", lw=1.2,
                   label=r"$g_{\min}/4$ (entmax exactly hard below)")
        ax.axhline(1e-6, color="k", ls="--", lw=0.8, label="1e-6")
        ax.axhspan(FLOOR / 3, 1e-14, color="0.9", zorder=0)
        ax.set_title(f"{name} (k={res['datasets'][name]['k']}, n={res['datasets'][name]['n']})")
        ax.set_xlabel("temperature T")
        ax.set_ylabel(r"centroid gap $\max|C_T - C^*|$")
        ax.set_ylim(FLOOR / 3, 10)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Claim 1: soft fixed points collapse onto the Lloyd fixed point "
                 "(grey band: float64 rounding)")
    return _save(fig, out, "fig1_collapse.png")


# -- claim 2 ---------------------------------------------------------------------------------------


def fig_rates(res: dict[str, Any], out: Path) -> str:
    large = res.get("rates_large_n")
    fig, axes = _figure(1, 3 if large else 2, w=5.2)
    ax_s, ax_e = axes[0, 0], axes[0, 1]
    cmap = mpl.colormaps["tab10"]
    for i, name in enumerate(_datasets(res)):
        c = cmap(i)
        per = res["collapse"][name]
        half = per["g_min"] / 2
        T, gap = _arr(per["softmax"]["T"]), _arr(per["softmax"]["centroid_gap"])
        keep = (gap > 1e-14) & (half / T < 60)
        ax_s.semilogy(half / T[keep], gap[keep], "o-", ms=3.5, lw=0.8, color=c, label=name)
        T, gap = _arr(per["entmax15"]["T"]), _arr(per["entmax15"]["centroid_gap"])
        ax_e.loglog(T / (half / 2), np.maximum(gap, FLOOR), "o-", ms=3.5, lw=0.8, color=c,
                    label=name)
    u = np.linspace(0, 45, 50)
    ax_s.semilogy(u, 1e-1 * np.exp(-u), "k--", lw=1.2, label=r"slope of $e^{-g_{\min}/2T}$")
    ax_s.set_xlabel(r"$g_{\min} / 2T$  (linear axis)")
    ax_s.set_ylabel("centroid gap (softmax)")
    ax_s.set_title("softmax: straight line = exponential in 1/T;\ndashed: predicted rate")
    ax_s.set_ylim(1e-15, 10)
    ax_s.set_xlim(-1, 35)
    ax_s.legend(fontsize=8)
    x = np.geomspace(1, 1e3, 20)
    ax_e.loglog(x, 1e-3 * x, "k:", lw=1.2, label="slope 1 (O(T))")
    ax_e.axvline(1.0, color="k", ls="--", lw=1, label=r"predicted exact-hard $T = g_{\min}/4$")
    ax_e.set_xlabel(r"$T / (g_{\min}/4)$")
    ax_e.set_ylabel("centroid gap (entmax-1.5)")
    ax_e.set_title("entmax-1.5: exactly C* below the threshold")
    ax_e.set_ylim(FLOOR / 3, 10)
    ax_e.legend(fontsize=8, loc="center right")
    if large:
        ax = axes[0, 2]
        for m in ("softmax", "entmax15"):
            T, gap = _arr(large[m]["T"]), _arr(large[m]["centroid_gap"])
            ax.loglog(T, np.maximum(gap, FLOOR), "o-", ms=3, color=COLORS[m], label=LABELS[m])
            pw = large[m].get("power")
            if pw:
                lo, hi = large[m]["continuum_window"]
                t = np.geomspace(lo, hi, 20)
                ax.loglog(t, pw["A"] * t ** pw["p"], "--", color=COLORS[m],
                          label=f"fit ~ T^{pw['p']:.2f}")
        lo, hi = large["softmax"]["continuum_window"]
        t = np.geomspace(lo, hi, 20)
        ax.loglog(t, 1e-1 * t / hi, "k:", label="slope 1 (O(T))")
        ax.axvspan(lo, hi, color="0.93", zorder=0)
        ax.set_ylim(FLOOR / 3, 10)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("centroid gap")
        ax.set_title(f"{large['dataset']}, n={large['n']}: shaded = fit window\n"
                     r"$4 g_{\min} < T < 0.05\,\lambda_{\max}$")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Claim 2: rates of collapse (Theorem 3: exp(-B/T) for softmax; "
                 "Theorem 4: O(T) for entmax-1.5)")
    return _save(fig, out, "fig2_rates.png")


# -- claim 3 ---------------------------------------------------------------------------------------


def fig_gamma(res: dict[str, Any], out: Path) -> str:
    names = _datasets(res)
    rows, cols = _grid(len(names))
    fig, axes = _figure(rows, cols)
    for ax, name in zip(axes.flat, names, strict=False):
        for m in ("softmax", "entmax15"):
            g = res["gamma_convergence"][name][m]
            T = _arr(g["T"])
            ax.loglog(T, np.maximum(_arr(g["J_minus_F"]), 1e-14), "o-", ms=3, color=COLORS[m],
                      label=rf"$J^* - F_T(C_T)$, {LABELS[m]}")
            ax.loglog(T, _arr(g["bound_width"]), "--", color=COLORS[m],
                      label=r"bound $2T\,n\,H_{\max}$" + f" ({LABELS[m]})")
        ax.set_title(name)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("objective gap")
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7.5)
    fig.suptitle(r"Claim 3: $J^* - 2T(\sum w)H_{\max} \leq F_T(C_T) \leq J^*$ "
                 "(the gap must stay under the dashed line, and vanishes as T -> 0)")
    return _save(fig, out, "fig3_gamma.png")


# -- claim 4 ---------------------------------------------------------------------------------------

PATH_STYLE = {
    "lloyd": ("Lloyd", "k", "-", 2.8),
    "gradient_per_cluster_step": (r"autograd step, $\eta_j = 1/(2|S_j|)$", "tab:orange", "--",
                                  1.4),
    "gradient_global_lr": ("autograd step, one global rate k/(2n)", "tab:green", "-", 1.2),
    "gradient_bare_loss": (r"bare loss $\sum r d$ (softmax, $T_{mid}$)", "tab:red", ":", 1.6),
    "gradient_relaxed": (r"relaxed $F_T$ (softmax, $T_{mid}$) = soft Lloyd", "tab:purple", "-.",
                         1.2),
}


def fig_gradient(res: dict[str, Any], out: Path) -> str:
    g = res["gradient_step_equals_lloyd"]
    name = g["figure_dataset"]
    per = g["per_dataset"][name]
    X = _arr_2d(res["datasets"][name]["X"])
    fig, axes = _figure(1, 2, w=5.6, h=4.6)
    ax, ax2 = axes[0, 0], axes[0, 1]
    ax.scatter(X[:, 0], X[:, 1], s=3, color="0.8")
    for key, (label, color, ls, lw) in PATH_STYLE.items():
        P = np.asarray(per["paths"][key])  # (L+1, k, d)
        for j in range(P.shape[1]):
            ax.plot(P[:, j, 0], P[:, j, 1], ls=ls, color=color, lw=lw,
                    label=label if j == 0 else None)
        ax.plot(P[-1, :, 0], P[-1, :, 1], "o", color=color, ms=4)
    P0 = np.asarray(per["paths"]["lloyd"])[0]
    ax.plot(P0[:, 0], P0[:, 1], "ks", ms=6, mfc="none", label="start C0")
    ax.set_title(f"{name}: centroid trajectories from one start")
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    ax.set_aspect("equal", adjustable="datalim")
    J_star = res["datasets"][name]["J_star"]
    for key, (label, color, ls, lw) in PATH_STYLE.items():
        J = _arr(per["J"][key])
        ax2.semilogy(np.arange(J.size), np.maximum(np.abs(J / J_star - 1), 1e-16), ls=ls,
                     color=color, lw=lw, label=label)
    ax2.set_xlabel("step")
    ax2.set_ylabel(r"$|J(C_t)/J^* - 1|$  (floor 1e-16)")
    ax2.set_title(f"max |Lloyd - gradient step| over the path: {g['max_abs_diff']:.1e}")
    ax2.legend(fontsize=7.5)
    fig.suptitle(r"Claim 4: one gradient step with $\eta_j = 1/(2|S_j|)$ is one Lloyd update")
    return _save(fig, out, "fig4_gradient_step.png")


# -- claim 5 ---------------------------------------------------------------------------------------


def fig_stability(res: dict[str, Any], out: Path) -> str:
    s = res["stability"]
    T = _arr(s["T"])
    fig, axes = _figure(2, 3, w=4.6, h=3.6)
    styles = {"float32": "--", "float64": "-"}
    zero = 1e-20
    for r, form in enumerate(("distance", "linear")):
        for dname, ls in styles.items():
            for m in ("softmax_stable", "entmax15", "softmax_naive"):
                rec = s[form][dname][m]
                lab = f"{LABELS[m]}, {dname}"
                frac = _arr(rec["nonfinite_rows"]) / s["n_points"]
                axes[r, 0].semilogx(T, frac, ls=ls, marker="o", ms=3, color=COLORS[m], label=lab)
                err = _arr(rec["step_error_vs_lloyd"])
                axes[r, 1].loglog(T, np.maximum(err, zero), ls=ls, marker="o", ms=3,
                                  color=COLORS[m], label=lab)
                gR = _arr(rec["through_R_grad_norm"])
                axes[r, 2].loglog(T, np.maximum(gR, zero), ls=ls, marker="o", ms=3,
                                  color=COLORS[m], label=lab)
        axes[r, 0].set_ylabel(f"{form} scores\nshare of rows with NaN/inf")
        axes[r, 1].set_ylabel("|gradient step - Lloyd step|\n(red line ends: NaN from there)")
        axes[r, 2].set_ylabel("|dL/dC| through R only\n(1e-20 = exactly 0)")
        for c in range(3):
            axes[r, c].set_xlabel("temperature T")
            axes[r, c].invert_xaxis()
        axes[r, 2].set_ylim(zero / 5, 1e4)
    axes[0, 0].set_title("forward: non-finite memberships")
    axes[0, 1].set_title(r"does the fit move correctly? ($\eta_j = 1/2N_j$ step)")
    axes[0, 2].set_title("gradient passed back through the mapping")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Claim 5: low temperature, T = 1 -> 1e-12 (top: z = -d/2T; bottom: z = Wx + b "
                 "of the Linear layer)")
    return _save(fig, out, "fig5_stability.png")


# -- claim 6 ---------------------------------------------------------------------------------------


def fig_critical(res: dict[str, Any], out: Path) -> str:
    names = _datasets(res)
    rows, cols = _grid(len(names))
    fig, axes = _figure(rows, cols)
    cr = res["critical_temperatures"]
    for ax, name in zip(axes.flat, names, strict=False):
        per = cr[name]
        lam = per["lambda_max"]
        for m in ("softmax", "entmax15", "sparsemax"):
            ph = per[m]["phase"]
            ax.step(_arr(ph["T"]) / lam, ph["distinct"], where="post", color=COLORS[m],
                    label=f"{LABELS[m]} (annealing)")
            ax.axvline(per[m]["T_c_predicted"] / lam, color=COLORS[m], ls="--", lw=1.2,
                       label=f"predicted $T_c$ = {per[m]['factor']:.3g} $\\lambda_{{max}}$")
            ax.plot(per[m]["linear"]["T_c_measured"] / lam, per["k"] + 0.3, "v",
                    color=COLORS[m], ms=7)
        ax.set_xscale("log")
        ax.set_xlabel(r"$T / \lambda_{\max}$")
        ax.set_ylabel("distinct centroids")
        ax.set_title(f"{name} (k={per['k']}); triangles: linearised $T_c$")
        ax.set_ylim(0.5, per["k"] + 0.8)
        ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Claim 6: phase diagram of the annealing; first split predicted at "
                 r"$\lambda_{\max}$, $\sqrt{k}\lambda_{\max}$, $k\lambda_{\max}$")
    return _save(fig, out, "fig6_critical.png")


# -- claim 7 ---------------------------------------------------------------------------------------


def fig_cost(res: dict[str, Any], out: Path) -> str:
    c = res["cost"]
    k = np.asarray(c["k"], dtype=float)
    fig, axes = _figure(1, 2, w=5.4)
    for ax, regime in zip(axes.flat, ("soft", "cold"), strict=True):
        for name, t in c[regime].items():
            ax.loglog(k, _arr(t) * 1e9, "o-", ms=3.5, color=COLORS.get(name, "k"),
                      label=LABELS.get(name, name))
        ref = _arr(c[regime]["entmax15"])[-1] * 1e9
        ax.loglog(k, ref * k * np.log2(k) / (k[-1] * np.log2(k[-1])), "k--", lw=1,
                  label="O(k log k) (through last entmax point)")
        ax.loglog(k, ref * k / k[-1], "k:", lw=1.2, label="O(k)")
        ax.set_xlabel("k (scores per row)")
        ax.set_ylabel("time per sample (ns)")
        ax.set_title(f"{regime} scores ({'z ~ N(0,1)' if regime == 'soft' else 'z ~ 100 N(0,1)'})"
                     f", {c['dtype']}, {c['threads']} thread")
        ax.legend(fontsize=7)
    fig.suptitle("Claim 7: cost of the mappings per sample against k")
    return _save(fig, out, "fig7_cost.png")


# -- claim 8 ---------------------------------------------------------------------------------------


def fig_entropy(res: dict[str, Any], out: Path) -> str:
    e = res["followups"]["entropy"]
    fig, axes = _figure(1, 2, w=5.4)
    cmap = mpl.colormaps["tab10"]
    for i, (name, rec) in enumerate(e.items()):
        T = _arr(rec["T"])
        axes[0, 0].semilogx(T, rec["shannon_fraction"], "-", color=cmap(i), label=name)
        axes[0, 0].semilogx(T, rec["softmax_one_hot"], ":", color=cmap(i))
        axes[0, 1].semilogx(T, rec["tsallis_fraction"], "-", color=cmap(i), label=name)
        axes[0, 1].semilogx(T, rec["entmax_one_hot"], ":", color=cmap(i))
    axes[0, 0].set_title("softmax: mean entropy / log k (solid),\nshare of exactly one-hot rows "
                         "(dotted)")
    axes[0, 1].set_title("entmax-1.5: mean Tsallis entropy / max (solid),\nshare of exactly "
                         "one-hot rows (dotted)")
    for ax in axes.flat:
        ax.set_xlabel("temperature T")
        ax.set_ylabel("fraction")
        ax.legend(fontsize=8)
    fig.suptitle("Claim 8a: higher T spreads the output towards uniform; lower T concentrates it "
                 "on the nearest centroid")
    return _save(fig, out, "fig8a_entropy.png")


def fig_relu(res: dict[str, Any], out: Path) -> str:
    r = res["followups"]["relu"]
    names = list(r)
    x = np.arange(len(names))
    fig, axes = _figure(1, 2, w=5.4)
    w = 0.26
    bars = [
        ("ReLU, data centred", [r[n]["centred"]["argmax_agrees"] for n in names], "tab:red"),
        ("ReLU, origin moved by (5, 5)", [r[n]["shifted"]["argmax_agrees"] for n in names],
         "tab:pink"),
        ("softmax (either origin)", [r[n]["centred"]["softmax_argmax_agrees"] for n in names],
         "tab:blue"),
    ]
    for i, (label, vals, color) in enumerate(bars):
        axes[0, 0].bar(x + (i - 1) * w, vals, w, label=label, color=color)
    axes[0, 0].set_xticks(x, names)
    axes[0, 0].set_ylim(0.7, 1.02)
    axes[0, 0].set_ylabel("argmax = nearest centroid (share of points)")
    axes[0, 0].set_title("ReLU rows that are all zero have no argmax")
    axes[0, 0].legend(fontsize=7, loc="lower left")
    for i, (label, key, color) in enumerate((("ReLU, data centred", "centred", "tab:red"),
                                             ("ReLU, origin moved", "shifted", "tab:pink"))):
        mean = np.array([r[n][key]["row_sum_mean"] for n in names])
        lo = np.array([r[n][key]["row_sum_min"] for n in names])
        hi = np.array([r[n][key]["row_sum_max"] for n in names])
        axes[0, 1].errorbar(x + (i - 0.5) * w, mean, yerr=[mean - lo, hi - mean], fmt="o",
                            capsize=4, color=color, label=label + " (mean, min-max)")
    axes[0, 1].axhline(1.0, color="tab:blue", label="softmax: every row sums to 1")
    axes[0, 1].set_yscale("symlog", linthresh=1)
    axes[0, 1].set_ylim(0, 2 * max(r[n]["shifted"]["row_sum_max"] for n in names))
    axes[0, 1].set_xticks(x, names)
    axes[0, 1].set_ylabel("row sum of the layer output (T = 1)")
    axes[0, 1].set_title("ReLU outputs are not normalised and depend on the origin")
    axes[0, 1].legend(fontsize=7)
    fig.suptitle("Claim 8b: the same Linear layer with ReLU instead of softmax")
    return _save(fig, out, "fig8b_relu.png")


def fig_online(res: dict[str, Any], out: Path) -> str:
    o = res["followups"]["online"]
    names = list(o)
    rows, cols = _grid(len(names))
    fig, axes = _figure(rows, cols)
    for ax, name in zip(axes.flat, names, strict=False):
        rec = o[name]
        s = _arr(rec["samples"])
        for key, color, label in (("partial_fit", "tab:orange", "partial_fit (MacQueen)"),
                                  ("sgd", "tab:blue", "torch.optim.SGD through the layer")):
            ax.loglog(s, np.maximum(_arr(rec[key]["error"]), 1e-8), "-", color=color,
                      label=f"{label}: to batch C*")
            ax.loglog(s, np.maximum(_arr(rec[key]["error_to_nearest_fixed_point"]), 1e-8), ":",
                      color=color, label=f"{label}: to its nearest Lloyd fixed point")
        ax.loglog(s, rec["initial_error"] * s[0] / s, "k--", lw=0.8, label="1 / samples")
        ax.set_title(name)
        ax.set_xlabel("samples seen")
        ax.set_ylabel(r"$\max_j |c_j - c^*_j|$ (matched)")
        ax.set_ylim(1e-5, 10)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Claim 8c: online learning of the centroids (shuffled passes, mini-batches) "
                 "against batch k-means from the same start")
    return _save(fig, out, "fig8c_online.png")


# -- claim 9 ---------------------------------------------------------------------------------------


def fig_trajectories(res: dict[str, Any], out: Path) -> str:
    tr = res["trajectories"]
    names = _datasets(res)
    mappings = ("softmax", "entmax15")
    fig, axes = _figure(len(names), len(mappings), w=4.4, h=4.0)
    logs = [np.log10(_arr(tr[n][m]["T"])) for n in names for m in mappings if tr[n][m]["T"]]
    norm = mpl.colors.Normalize(vmin=min(float(v.min()) for v in logs),
                                vmax=max(float(v.max()) for v in logs))
    sc = None
    for r, name in enumerate(names):
        X = _arr_2d(res["datasets"][name]["X"])
        for c, m in enumerate(mappings):
            ax = axes[r, c]
            rec = tr[name][m]
            P = np.asarray(rec["centers"])  # (L, k, 2)
            logT = np.log10(_arr(rec["T"]))
            ax.scatter(X[:, 0], X[:, 1], s=2, color="0.82")
            for j in range(P.shape[1]):
                ax.plot(P[:, j, 0], P[:, j, 1], "-", color="0.3", lw=0.8)
                sc = ax.scatter(P[:, j, 0], P[:, j, 1], c=logT, cmap="viridis", norm=norm,
                                s=9, zorder=3)
            F = np.asarray(rec["final_centers"])
            ax.plot(F[:, 0], F[:, 1], "r*", ms=10, zorder=4, label="final (after hard polish)")
            ax.plot(P[0, :, 0], P[0, :, 1], "kx", ms=8, zorder=5, label="hottest T (data mean)")
            ax.set_title(f"{name}, {LABELS[m]}: {len(rec['T'])} temperatures")
            ax.set_xlabel("x1")
            ax.set_ylabel("x2")
            ax.set_aspect("equal", adjustable="datalim")
    axes[0, 0].legend(fontsize=7, loc="lower left")
    if sc is not None:
        fig.colorbar(sc, ax=axes, shrink=0.5, label="log10 T")
    fig.suptitle("Claim 9: centroid paths through the annealing (RBFKMeans.history_, hot to cold;"
                 "\nspare coincident copies are moved to the widest cluster by the estimator's "
                 "rebalancing)")
    return _save(fig, out, "fig9_trajectories.png")


#: (results key the figure needs, drawing function)
FIGURES: list[tuple[str, Callable[[dict[str, Any], Path], str]]] = [
    ("collapse", fig_collapse),
    ("rates", fig_rates),
    ("gamma_convergence", fig_gamma),
    ("gradient_step_equals_lloyd", fig_gradient),
    ("stability", fig_stability),
    ("critical_temperatures", fig_critical),
    ("cost", fig_cost),
    ("followups", fig_entropy),
    ("followups", fig_relu),
    ("followups", fig_online),
    ("trajectories", fig_trajectories),
]


def draw_all(res: dict[str, Any], out: str | Path) -> dict[str, str]:
    """Draw every figure whose data is in ``res``; returns {function name: file name}."""
    out = Path(out)
    drawn: dict[str, str] = {}
    for key, fn in FIGURES:
        if key in res:
            drawn[fn.__name__] = fn(res, out)
    return drawn
