"""benchmarks/bench_first_use.py measures in fresh processes: its fit script runs there and
reports the same fit as this process computes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris

import rbfkmeans as rk

ROOT = Path(__file__).resolve().parents[1]


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "bench_first_use", ROOT / "benchmarks" / "bench_first_use.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fresh_process_fits_iris_as_this_process_does() -> None:
    bench = _module()
    got = bench._fit("iris", None)  # the warm cache: the suite's kernels are loaded
    X = load_iris().data
    assert got["inertia"] == pytest.approx(rk.RBFKMeans(3, random_state=0).fit(X).inertia_,
                                           rel=1e-12)
    assert got["kmeans_inertia"] == pytest.approx(
        KMeans(3, n_init=10, random_state=0).fit(X).inertia_, rel=1e-12)
    for key in ("import_s", "first_fit_s", "kmeans_n_init10_s", "process_s"):
        assert got[key] > 0.0
    assert got["process_s"] > got["import_s"] + got["first_fit_s"]


def test_a_failing_process_is_an_error_with_its_output() -> None:
    bench = _module()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        bench._run([sys.executable, "-c", "1 / 0"], None)
