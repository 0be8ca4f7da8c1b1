"""``rbfkmeans reproduce --quick``: the files it writes and the key numbers in them.

One quick run (module-scoped fixture, through the command line) feeds every test; the checks are
the claims the reproduction exists for: the soft fixed points collapse onto the Lloyd fixed point,
the per-cluster gradient step is the Lloyd step, entmax-1.5 is exactly hard below g_min/4, the
objectives stay in their sandwich, and the measured critical temperatures match the derivation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rbfkmeans.cli import main
from rbfkmeans.experiments import datasets as ds
from rbfkmeans.experiments.plots import FIGURES

pytestmark = pytest.mark.slow

DATASETS = ("blobs", "moons", "spirals", "circles")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("reproduce")
    assert main(["reproduce", "--out", str(out), "--quick", "--seed", "0"]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_files_written(run: tuple[Path, dict]) -> None:
    out, res = run
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == len(FIGURES)
    for p in pngs:
        assert (out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    for p in pngs:
        assert f"]({p})" in report  # every figure is shown in the report
    assert "| claim | measured | verdict |" in report
    # strict JSON: no NaN/Infinity tokens
    json.loads((out / "results.json").read_text(), parse_constant=pytest.fail)
    assert set(DATASETS) == set(res["datasets"])


def test_collapse_reaches_lloyd_fixed_point(run: tuple[Path, dict]) -> None:
    _, res = run
    for name in DATASETS:
        for m in ("softmax", "entmax15"):
            cur = res["collapse"][name][m]
            assert len(cur["T"]) >= 12
            assert all(a > b for a, b in zip(cur["T"], cur["T"][1:], strict=False))  # hot -> cold
            assert len(cur["centroid_gap"]) == len(cur["T"])
            assert cur["centroid_gap"][-1] < 1e-6
        # entmax-1.5 is exactly one-hot at the coldest T (< g_min/4); softmax only nearly
        assert res["collapse"][name]["entmax15"]["n_soft"][-1] == 0
        assert res["collapse"][name]["softmax"]["n_soft"][-1] <= 0.01 * res["datasets"][name]["n"]


def test_gradient_step_equals_lloyd(run: tuple[Path, dict]) -> None:
    _, res = run
    g = res["gradient_step_equals_lloyd"]
    assert g["max_abs_diff"] < 1e-9
    assert g["max_abs_diff_relaxed_vs_soft_lloyd"] < 1e-9
    assert g["relaxed_gradient_vs_formula"] < 1e-9  # autograd = 2 N_j (c_j - m_j)
    assert g["max_abs_diff_global_lr"] > 1e-3  # a single learning rate is not Lloyd
    assert g["max_abs_diff_bare_vs_relaxed"] > 1e-3  # nor is the bare loss at finite T


def test_rates_and_exact_hardness(run: tuple[Path, dict]) -> None:
    _, res = run
    for name in DATASETS:
        r = res["rates"][name]
        assert r["entmax15"]["ratio"] == pytest.approx(1.0, abs=1e-6)
        assert r["softmax"]["B_coldest_pair"] == pytest.approx(r["softmax"]["B_predicted"],
                                                                rel=0.25)


def test_gamma_sandwich(run: tuple[Path, dict]) -> None:
    _, res = run
    for name in DATASETS:
        for m in ("softmax", "entmax15"):
            g = res["gamma_convergence"][name][m]
            assert g["holds"]
            assert abs(g["J_minus_F_at_coldest"]) <= 1e-9 * g["J_star"]


def test_stability_findings(run: tuple[Path, dict]) -> None:
    _, res = run
    s = res["stability"]
    assert min(s["T"]) <= 1e-12
    for form in ("distance", "linear"):
        for dt in ("float32", "float64"):
            assert s[form][dt]["softmax_naive"]["total_nonfinite_rows"] > 0
            for m in ("softmax_stable", "entmax15"):
                assert s[form][dt][m]["total_nonfinite_rows"] == 0
                assert s[form][dt][m]["moves_at_all_T"]
                tol = 1e-12 if dt == "float64" else 1e-4
                assert s[form][dt][m]["step_error_vs_lloyd"][-1] < tol


def test_critical_temperatures(run: tuple[Path, dict]) -> None:
    _, res = run
    for name in DATASETS:
        for m in ("softmax", "entmax15", "sparsemax"):
            c = res["critical_temperatures"][name][m]
            assert c["linear_ratio"] == pytest.approx(1.0, abs=1e-6)
            assert c["consistent"]


def test_followups(run: tuple[Path, dict]) -> None:
    _, res = run
    f = res["followups"]
    for name in DATASETS:
        e = f["entropy"][name]
        assert e["shannon_fraction"][0] > 0.9
        assert e["shannon_fraction"][-1] < 1e-3
        r = f["relu"][name]
        assert r["centred"]["argmax_agrees_nonzero_rows"] == 1.0
        assert r["shifted"]["zero_rows"] == 0.0
        assert r["relu_translation_change"] > 1.0 > 1e-9 > r["softmax_translation_change"]
        o = f["online"][name]
        for key in ("partial_fit", "sgd"):
            assert o[key]["error"][-1] < o["initial_error"]
    assert all(len(v) == len(res["cost"]["k"]) for v in res["cost"]["soft"].values())


# -- the generators --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", DATASETS)
def test_datasets_seeded_and_standardised(name: str) -> None:
    a, b = ds.make_dataset(name, 200, seed=3), ds.make_dataset(name, 200, seed=3)
    c = ds.make_dataset(name, 200, seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)
    assert a.X.shape == (200, 2)
    assert a.y.shape == (200,)
    np.testing.assert_allclose(a.X.mean(axis=0), 0, atol=1e-12)
    assert math.isclose(float((a.X**2).sum() / a.X.size), 1.0, rel_tol=1e-12)


def test_make_dataset_rejects_unknown_name() -> None:
    with pytest.raises(ValueError, match="name must be one of"):
        ds.make_dataset("swissroll", 100, seed=0)
