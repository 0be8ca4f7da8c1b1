"""``benchmarks/gpu_check.py``, the one command a borrowed GPU machine runs, run here on the CPU
with ``--quick`` (as a subprocess: the tests never import the benchmarks) so that it cannot rot
between GPU sessions. The checks are on what the results file must hold: every step with a
status, finite positive time ratios, Lloyd's objective never above its start, the estimator's
hard Lloyd from the shared start at or below the plain torch Lloyd once both have converged, and
a step that fails (on purpose, through ``GPU_CHECK_FAIL_STEP``) recorded as failed while the
later steps still run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
STEPS = ("tests", "layer", "fit", "vq", "deep")
MAPPINGS = ("softmax", "entmax15", "sparsemax", "hard")


def run_script(out: Path, *args: str, fail_step: str | None = None,
               timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_FAIL_STEP"}
    if fail_step is not None:
        env["GPU_CHECK_FAIL_STEP"] = fail_step
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def positive_finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    out = tmp_path_factory.mktemp("gpu_check")
    proc = run_script(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), proc.stdout, out


def test_every_step_recorded_with_a_status(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    results, stdout, out = quick_run
    assert results["settings"]["device"] == "cpu"
    assert results["environment"]["status"] == "ok"
    assert results["environment"]["device_resolved"] == "cpu"
    assert results["environment"]["torch"]
    assert tuple(results["steps"]) == STEPS
    for step in STEPS:
        rec = results["steps"][step]
        assert rec["status"] == "ok", (step, rec.get("error"), rec.get("traceback"))
        assert rec["seconds"] >= 0
        assert f"[gpu_check] {step} " in stdout  # one line per step
    assert (out / "log.txt").read_text().count("[gpu_check]") >= len(STEPS) + 1
    assert "finished" in results


def test_the_results_name_no_path_of_the_machine(
        quick_run: tuple[dict[str, Any], str, Path]) -> None:
    """The output folder is recorded as ``<out>`` (in the command line and in the commands of
    the steps) and the package's file relative to the checkout: the committed results file had
    held ``/tmp/...`` and an absolute path of the machine that ran it."""
    results, _, out = quick_run
    text = json.dumps(results)
    assert str(out) not in text
    assert str(ROOT) not in text
    assert results["argv"][results["argv"].index("--out") + 1] == "<out>"
    assert results["environment"]["rbfkmeans"]["file"] == "src/rbfkmeans/__init__.py"
    committed = (ROOT / "benchmarks" / "results" / "gpu.json").read_text()
    assert "/tmp/" not in committed
    assert str(ROOT) not in committed


def test_tests_step_counts_the_gpu_tests(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    runs = quick_run[0]["steps"]["tests"]["runs"]
    gpu = runs["gpu_marker"]
    assert gpu["tests"] >= 1
    assert gpu["failed"] == 0
    assert gpu["errors"] == 0
    assert gpu["passed"] + gpu["skipped"] == gpu["tests"]
    hook = "RBFKMEANS_TEST_DEVICE" in (ROOT / "tests" / "conftest.py").read_text()
    if hook:
        assert runs["default_device"]["ok"]
    else:
        assert runs["default_device"]["status"] == "skipped"
        assert "hook" in runs["default_device"]["reason"]


def test_layer_ratios_for_every_mapping_and_dtype(
        quick_run: tuple[dict[str, Any], str, Path]) -> None:
    layer = quick_run[0]["steps"]["layer"]
    cases = {(c["assignment"], c["dtype"]): c for c in layer["cases"]}
    assert set(cases) == {(a, dt) for a in MAPPINGS for dt in ("float32", "bfloat16")}
    for case in cases.values():
        assert positive_finite(case["ratio_fwd"]), case
        assert positive_finite(case["ratio_fwd_bwd"]), case
        assert all(positive_finite(t) for t in case["seconds"].values())
        assert case["ratio_fwd_bwd"] == pytest.approx(
            case["seconds"]["layer_fwd_bwd"] / case["seconds"]["product_fwd_bwd"])
    # the temperature leaves entmax-1.5 partly sparse: more than one, fewer than k codes a row
    k, support = layer["settings"]["k"], layer["support"]
    assert 1.0 < support["entmax15"]["support_mean"] < k
    assert support["softmax"]["support_mean"] == k
    assert support["hard"]["one_hot_fraction"] == 1.0


def test_fit_inertias(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    cases = quick_run[0]["steps"]["fit"]["cases"]
    assert [c["name"] for c in cases] == ["W", "bench_large", "blobs_10M"]
    for case in cases:
        methods = case["methods"]
        for name in ("plain_lloyd", "rbfkmeans_hard_tol0", "rbfkmeans_hard",
                     "rbfkmeans_default"):
            assert methods[name]["status"] == "ok", (case["name"], name, methods[name])
            assert positive_finite(methods[name]["inertia"])
            assert positive_finite(methods[name]["seconds"])
        assert methods["fast_pytorch_kmeans"]["status"] in ("ok", "not installed")
        plain, hard0 = methods["plain_lloyd"], methods["rbfkmeans_hard_tol0"]
        # Lloyd never raises the objective of its start
        assert plain["inertia"] <= case["inertia_c0"] * (1 + 1e-6)
        assert hard0["inertia"] <= case["inertia_c0"] * (1 + 1e-6)
        # from the same start, both run to labels that no longer change: the same fixed point
        if plain["converged"] and hard0["stopped_before_max_iter"]:
            assert hard0["inertia"] <= plain["inertia"] * (1 + 1e-6)
        # the estimator's own objective agrees with the float64 one recomputed by the script
        for name in ("rbfkmeans_hard_tol0", "rbfkmeans_default"):
            assert methods[name]["inertia_reported"] == pytest.approx(
                methods[name]["inertia"], rel=1e-5)
        ratios = case["ratios_to_plain_lloyd"]
        assert ratios["plain_lloyd"] == {"time": 1.0, "inertia": 1.0}
    # at least one case reaches the converged comparison (the quick data is easy)
    assert any(c["methods"]["plain_lloyd"]["converged"]
               and c["methods"]["rbfkmeans_hard_tol0"]["stopped_before_max_iter"]
               for c in cases)


def test_vq_and_deep_steps(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    steps = quick_run[0]["steps"]
    vq = steps["vq"]["methods"]
    for name in ("rbfkmeans_objective", "rbfkmeans_kmeans_ema0.8"):
        assert positive_finite(vq[name]["steps_per_s"]), vq[name]
        assert 0.0 < vq[name]["usage_last20"] <= 1.0
        assert 1.0 <= vq[name]["perplexity_last20"] <= steps["vq"]["settings"]["codes"] + 1e-9
    deep = steps["deep"]
    assert deep["device_support"]
    for metric in ("acc", "nmi", "ari"):
        assert math.isfinite(deep["joint"][metric])
    assert 0.0 <= deep["joint"]["acc"] <= 1.0
    assert 0.0 <= deep["joint"]["nmi"] <= 1.0
    assert positive_finite(deep["fit_seconds"])


def test_unknown_step_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "--steps", "layer,bogus", timeout=60)
    assert proc.returncode == 2
    assert "bogus" in proc.stderr
    assert not (tmp_path / "results.json").exists()


def test_a_failing_step_is_recorded_and_the_next_ones_run(tmp_path: Path) -> None:
    # the GPU run's mode: each step in a process of its own
    proc = run_script(tmp_path, "--steps", "layer,vq", "--isolation", "process",
                      fail_step="layer")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert tuple(results["steps"]) == ("layer", "vq")
    layer, vq = results["steps"]["layer"], results["steps"]["vq"]
    assert layer["status"] == "failed"
    assert "GPU_CHECK_FAIL_STEP" in layer["error"]
    assert "Traceback" in layer["traceback"]
    assert vq["status"] == "ok"
    assert positive_finite(vq["methods"]["rbfkmeans_objective"]["steps_per_s"])
    assert (tmp_path / "layer.log").exists()
    assert (tmp_path / "vq.log").exists()
