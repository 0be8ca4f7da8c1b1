"""The verdicts of the reproduction report can fail, and its text follows its own numbers.

The verdict functions of :mod:`rbfkmeans.experiments.findings` are run on small synthetic
results dicts built so that a claim fails (a local softmax rate 30% off g_min/2, an entmax-1.5
exponent of 0.4, one mapping above the inertia threshold, a gradient path 1e-10 off Lloyd's ...)
or holds; then one quick reproduction is rendered as it is and with numbers changed, and every
sentence that depends on a number is checked against ``results.json``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from rbfkmeans.experiments.findings import claim_rows
from rbfkmeans.experiments.report import TITLES, render_report

NAMES = ("a", "b")


def _base(**claims: Any) -> dict[str, Any]:
    res: dict[str, Any] = {
        "datasets": {n: {"n": 100, "k": 3, "g_min": 0.1, "lloyd_iterations": 4} for n in NAMES},
        "meta": {"config": {"phase_cooling": 0.9, "anneal_cooling": 0.9, "large_n": 0,
                            "quick": False, "seed": 0, "phase_max_iter": 150}},
    }
    res.update(claims)
    return res


def _row(res: dict[str, Any], key: str, row: int = 0) -> dict[str, str]:
    return claim_rows(res, key)[row]


# -- claim 2: rates --------------------------------------------------------------------------------


def _rates(local: tuple[float, float] = (1.0, 1.0), p: tuple[float, float] = (1.0, 1.0),
           other: dict[str, list[dict[str, float]]] | None = None) -> dict[str, Any]:
    rates, collapse = {}, {}
    for n, x, pp in zip(NAMES, local, p, strict=True):
        window = {"better_model": "power", "points": 8}
        rates[n] = {
            "softmax": {"B_coldest_pair": 0.05 * x, "B_predicted": 0.05,
                        "better_model": "exponential", "exponential": {"B": 0.05},
                        "power": {"p": 4.0}, "max_gap_over_T": 1.0, "common_window": window},
            "entmax15": {"ratio": 1.0, "power": {"p": pp}, "better_model": "power",
                         "max_gap_over_T": 1.0, "largest_ladder_T_exactly_hard": 0.01,
                         "other_fixed_point": (other or {}).get(n, []),
                         "common_window": window},
        }
        collapse[n] = {"g_min": 0.1}
    return _base(rates=rates, collapse=collapse)


def test_softmax_rate_rests_on_the_local_rate_at_the_coldest_pair() -> None:
    held = _row(_rates(local=(1.0, 1.05)), "rates")
    assert held["verdict"].startswith("held")
    assert "1.000" in held["measured"]
    assert "1.050" in held["measured"]
    # the exponential fits better everywhere, but the local rate is 30% off g_min/2: not held
    off = _row(_rates(local=(1.0, 1.3)), "rates")
    assert off["verdict"].startswith("not held on b")
    assert "1.300" in off["measured"]


def test_model_comparison_reports_both_mappings_on_the_common_window() -> None:
    measured = _row(_rates(), "rates")["measured"]
    assert "common window" in measured
    assert "softmax 0/2" in measured
    assert "entmax-1.5 0/2" in measured


@pytest.mark.parametrize(("p", "start"), [
    ((1.0, 1.1), "held"),
    ((3.0, 1.0), "held (faster than O(T) on a)"),
    ((1.0, 0.4), "held on a; not held (b: slower than O(T))"),
    ((0.4, 0.4), "not held"),
])
def test_entmax_order_is_judged_per_dataset(p: tuple[float, float], start: str) -> None:
    row = _row(_rates(p=p), "rates", 2)
    assert row["verdict"].startswith(start)
    if min(p) < 0.8:
        assert "gap/T grows as T falls" in row["measured"]


def test_entmax_jump_to_another_fixed_point_is_named() -> None:
    other = {"b": [{"T": 0.05, "gap": 0.015, "J_over_J_star": 0.9999, "n_relabelled": 4},
                   {"T": 0.03, "gap": 0.015, "J_over_J_star": 0.9999, "n_relabelled": 4}]}
    row = _row(_rates(p=(1.0, 0.3), other=other), "rates", 2)
    assert "another Lloyd fixed point" in row["verdict"]
    assert "b: C_T is another Lloyd fixed point at T = 0.3..0.5 g_min" in row["measured"]
    assert "J(C_T)/J* = 0.999900" in row["measured"]


# -- claims 3, 4 -----------------------------------------------------------------------------------


def _gamma(fixed_ok: bool = True, along_ok: bool = True,
           better: bool = False) -> dict[str, Any]:
    cell = {"holds": along_ok, "max_lower_violation_rel": -1e-4 if along_ok else 1e-3,
            "max_upper_violation_rel": 1e-16, "J_minus_F_at_coldest": 1e-14, "J_star": 100.0,
            "J_T_minus_F_at_coldest": 1e-14, "lower_violation_T": [] if along_ok else [0.1],
            "lower_violation_J_below_J_star": [] if along_ok else [better],
            "at_C_star": {"holds": fixed_ok, "max_upper_violation_rel": 0.0 if fixed_ok else 1e-3,
                          "max_lower_violation_rel": -1e-5},
            "at_C_T": {"holds": True, "max_upper_violation_rel": 0.0,
                       "max_lower_violation_rel": -1e-5}}
    return _base(gamma_convergence={n: {m: copy.deepcopy(cell) for m in ("softmax", "entmax15")}
                                    for n in NAMES})


def test_gamma_fails_where_the_fixed_c_sandwich_fails() -> None:
    assert _row(_gamma(), "gamma_convergence")["verdict"] == "held"
    row = _row(_gamma(fixed_ok=False), "gamma_convergence")
    assert row["verdict"] == "not held: at a fixed C"
    assert "1.0e-03" in row["measured"]


@pytest.mark.parametrize(("better", "start"), [
    (True, "held at fixed C; along the ladder F_T(C_T) is below J* - 2T(sum w)H_max on a/softmax"),
    (False, "not held: along the ladder on a/softmax"),
])
def test_gamma_along_the_ladder_names_a_better_fixed_point(better: bool, start: str) -> None:
    row = _row(_gamma(along_ok=False, better=better), "gamma_convergence")
    assert row["verdict"].startswith(start)


@pytest.mark.parametrize(("diff", "held"), [(1.3e-15, True), (1e-10, False)])
def test_gradient_step_is_exact_to_rounding(diff: float, held: bool) -> None:
    res = _base(gradient_step_equals_lloyd={
        "max_abs_diff": diff, "max_rel_diff": diff / 2.0, "max_abs_diff_global_lr": 0.4,
        "max_abs_diff_bare_vs_relaxed": 0.3})
    assert _row(res, "gradient_step_equals_lloyd")["verdict"].startswith(
        "held" if held else "not held")


# -- claim 6 ---------------------------------------------------------------------------------------


def _critical(first_split: int) -> dict[str, Any]:
    ladder = [1.5 * 0.9**i for i in range(12)]
    distinct = [1] * first_split + [3] * (12 - first_split)
    per = {"linear_ratio": 1.0, "consistent": True, "split_bracket": [0.95, 1.05],
           "T_c_predicted": 1.0,
           "phase": {"T": ladder, "distinct": distinct, "n_iter": [150] * 12, "max_iter": 150,
                     "first_split_T": ladder[first_split]}}
    crit: dict[str, Any] = {"ratios": [1.1, 1.05, 0.95, 0.9], "eps": 1e-4, "distinct_tol": 0.02}
    for n in NAMES:
        crit[n] = {m: copy.deepcopy(per) for m in ("softmax", "entmax15", "sparsemax")}
    return _base(critical_temperatures=crit)


def test_critical_ladder_reports_its_bracket_not_a_resolution_it_lacks() -> None:
    row = _row(_critical(first_split=5), "critical_temperatures")
    assert "first ladder step below T_c" not in row["measured"]
    assert "one group down to 0.984 x T_c" in row["measured"]
    assert "distinct centroids first at 0.886 x T_c" in row["measured"]
    assert "2 ladder step(s) below T_c" in row["measured"]
    assert row["verdict"].startswith("held")


def test_critical_fails_where_the_ladder_splits_above_t_c() -> None:
    row = _row(_critical(first_split=2), "critical_temperatures")  # 1.215 T_c
    assert row["verdict"] == "not held: the ladder split above T_c or never"


# -- claim 7 ---------------------------------------------------------------------------------------


def _cost(slope: float) -> dict[str, Any]:
    ks = [2**i for i in range(1, 13)]
    times = {name: [1e-7 * k**s for k in ks] for name, s in (
        ("softmax", 1.0), ("entmax15", slope), ("hard", 1.0), ("softmax_flush_denormal", 1.0))}
    return _base(cost={"k": ks, "soft": times, "cold": copy.deepcopy(times), "threads": 1,
                       "repeats": 5,
                       "soft_slope_k_ge_64": {"softmax": 1.0, "entmax15": slope, "hard": 1.0}})


def test_cost_verdict_says_only_what_the_slope_decides() -> None:
    row = _row(_cost(1.05), "cost")
    assert "no worse than k log k" in row["verdict"]
    assert "O(k log k): held" not in row["verdict"]
    assert "k itself: 1.00, k log k: 1.17" in row["measured"]
    assert "worse than k log k" in _row(_cost(1.5), "cost")["verdict"]
    assert "no worse" not in _row(_cost(1.5), "cost")["verdict"]


# -- claim 8 ---------------------------------------------------------------------------------------


def _followups(entropy: list[float], row_sum: float = 3.0, pf_error: float = 1e-4,
               pf_at_c_star: bool = True) -> dict[str, Any]:
    sides = {o: {"zero_rows": 0.05 if o == "centred" else 0.0, "argmax_agrees_nonzero_rows": 1.0,
                 "row_sum_min": 0.0 if row_sum != 1.0 else 1.0, "row_sum_max": row_sum,
                 "softmax_row_sum_error": 1e-16, "normalised_rows_T1_vs_T1e-3": 1e-16}
             for o in ("centred", "shifted")}
    learner = {"final_error": 1e-4, "nearest_fixed_point_is_C_star": True,
               "final_error_to_nearest_fixed_point": 1e-4, "error_loglog_slope": -1.0}
    online = {n: {"partial_fit": {**learner, "final_error": pf_error,
                                  "nearest_fixed_point_is_C_star": pf_at_c_star},
                  "sgd": dict(learner), "initial_error": 0.5, "epochs": 3, "batch": 20}
              for n in NAMES}
    return _base(followups={
        "entropy": {n: {"shannon_fraction": list(entropy)} for n in NAMES},
        "relu": {n: {**copy.deepcopy(sides), "relu_translation_change": 30.0,
                     "softmax_translation_change": 1e-16} for n in NAMES},
        "online": online})


def test_entropy_verdict_fails_where_entropy_rises_as_t_falls() -> None:
    assert _row(_followups([0.99, 0.5, 1e-6]), "followups", 0)["verdict"] == "held"
    assert _row(_followups([0.99, 0.2, 0.5, 1e-6]), "followups", 0)["verdict"].startswith(
        "not held")


def test_relu_verdict_fails_where_the_rows_sum_to_one() -> None:
    assert _row(_followups([0.99, 1e-6]), "followups", 1)["verdict"].startswith("held (lost: "
                                                                                "normalisation")
    assert _row(_followups([0.99, 1e-6], row_sum=1.0), "followups", 1)["verdict"] == (
        "not held: the rows sum to 1")


@pytest.mark.parametrize(("at_c_star", "status"), [(True, "short of C*"),
                                                    (False, "near another fixed point")])
def test_online_verdict_names_where_each_learner_ended(at_c_star: bool, status: str) -> None:
    verdict = _row(_followups([0.99, 1e-6], pf_error=0.05, pf_at_c_star=at_c_star),
                   "followups", 2)["verdict"]
    assert verdict == (f"held on none; not reached (a: partial_fit {status}; "
                       f"b: partial_fit {status})")


# -- claim 9 ---------------------------------------------------------------------------------------


def test_inertia_is_judged_per_mapping() -> None:
    traj = {n: {"sklearn_inertia": 100.0, "softmax": {"inertia": 100.007},
                "entmax15": {"inertia": 100.162 if n == "b" else 100.0}} for n in NAMES}
    row = _row(_base(trajectories=traj), "trajectories")
    assert row["verdict"] == "softmax held; entmax-1.5 not held on b (1.00162)"
    assert "softmax: a 1.00007, b 1.00007" in row["measured"]
    assert "entmax-1.5: a 1.00000, b 1.00162" in row["measured"]


# -- the quick report against its own results ------------------------------------------------------


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    from rbfkmeans.experiments.runner import load_results, run_reproduction

    out: Path = tmp_path_factory.mktemp("quick")
    run_reproduction(out, quick=True, progress=False)
    return load_results(out), (out / "report.md").read_text()


def _sections(report: str) -> dict[str, str]:
    return {part.split("\n", 1)[0]: part for part in report.split("\n## ")[1:]}


FIGURES = {key: f"{key}.png" for key in TITLES}


@pytest.mark.slow
def test_quick_report_prints_its_own_cooling_and_no_absent_run(
        quick: tuple[dict[str, Any], str]) -> None:
    res, report = quick
    cfg = res["meta"]["config"]
    assert cfg["large_n"] == 0
    assert "rates_large_n" not in res
    assert "20000" not in report
    assert "dense sample" not in report
    sec = _sections(report)
    assert f"cooling {cfg['phase_cooling']:g}," in sec[TITLES["fig_critical"]]
    assert f"cooling {cfg['anneal_cooling']:g}," in sec[TITLES["fig_trajectories"]]
    printed = {float(x) for x in re.findall(r"cooling ([0-9.]+[0-9])", report)}
    assert printed <= {cfg["phase_cooling"], cfg["anneal_cooling"]}


@pytest.mark.slow
def test_quick_report_online_text_follows_the_data(quick: tuple[dict[str, Any], str]) -> None:
    res, report = quick
    text = _sections(report)[TITLES["fig_online"]]
    for n, d in res["datasets"].items():
        assert f"{n} {d['lloyd_iterations']}" in text
    assert "many" not in text
    assert "few" not in text
    on = res["followups"]["online"]
    near = [n for n in res["datasets"]
            if abs(on[n]["partial_fit"]["error_loglog_slope"] + 1) <= 0.2]
    assert f"(log-log slope within 0.2 of -1) on {', '.join(near) or 'none'}." in text


@pytest.mark.slow
def test_quick_report_verdicts_match_its_numbers(quick: tuple[dict[str, Any], str]) -> None:
    res, report = quick
    table = {line.split(" | ")[0][2:]: line for line in report.splitlines()
             if line.startswith("| ") and " | " in line}
    t = res["trajectories"]
    for m, label in (("softmax", "softmax"), ("entmax15", "entmax-1.5")):
        over = [n for n in res["datasets"] if t[n][m]["inertia"] / t[n]["sklearn_inertia"] > 1.001]
        row = table["9. annealing from the data mean ends on a k-means solution"]
        assert (f"{label} held" in row) == (not over)
    r = res["rates"]
    for n in res["datasets"]:
        ratio = r[n]["softmax"]["B_coldest_pair"] / r[n]["softmax"]["B_predicted"]
        assert f"{n} {ratio:.3f}" in report
    g = res["gradient_step_equals_lloyd"]
    assert g["max_rel_diff"] <= 1e-12
    gamma = res["gamma_convergence"]
    one_hot = max(gamma[n]["entmax15"]["one_hot_at_C_star_J_star_minus_F_max_abs"]
                  for n in res["datasets"])
    assert f"|J* - F_T| <= {one_hot:.1e}" in report


@pytest.mark.slow
def test_report_sentences_change_with_the_numbers(quick: tuple[dict[str, Any], str]) -> None:
    res, _ = quick
    base = render_report(res, FIGURES)
    assert "so the collapse holds" in base
    assert "The sandwich held at every temperature" in base
    bad = copy.deepcopy(res)
    name = next(iter(bad["datasets"]))
    bad["collapse"][name]["softmax"]["centroid_gap"][-1] = 1e-3
    bad["gamma_convergence"][name]["entmax15"]["holds"] = False
    bad["meta"]["config"]["phase_cooling"] = 0.77
    bad["meta"]["config"]["anneal_cooling"] = 0.66
    for m in ("softmax", "entmax15"):
        bad["trajectories"][name][m]["inertia"] = 2 * bad["trajectories"][name]["sklearn_inertia"]
    text = render_report(bad, FIGURES)
    assert "so the collapse holds" not in text
    assert "so the collapse is not reached" in text
    assert "The sandwich held at every temperature" not in text
    assert "cooling 0.77," in _sections(text)[TITLES["fig_critical"]]
    assert "RBFKMeans (cooling 0.66," in text
    assert f"softmax not held on {name} (2.00000)" in text
