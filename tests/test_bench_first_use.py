"""benchmarks/bench_first_use.py measures in fresh processes: its fit script runs there and
reports the same fit as this process computes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris

import rbfkmeans as rk


def test_the_fresh_process_fits_iris_as_this_process_does(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_first_use")
    got = bench._fit("iris", None)  # the warm cache: the suite's kernels are loaded
    X = load_iris().data
    assert got["inertia"] == pytest.approx(rk.RBFKMeans(3, random_state=0).fit(X).inertia_,
                                           rel=1e-12)
    assert got["kmeans_inertia"] == pytest.approx(
        KMeans(3, n_init=10, random_state=0).fit(X).inertia_, rel=1e-12)
    for key in ("import_s", "first_fit_s", "kmeans_n_init10_s", "process_s"):
        assert got[key] > 0.0
    assert got["process_s"] > got["import_s"] + got["first_fit_s"]


def test_a_failing_process_is_an_error_with_its_output(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_first_use")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        bench._run([sys.executable, "-c", "1 / 0"], None)
