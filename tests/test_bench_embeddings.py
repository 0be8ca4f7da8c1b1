"""The bookkeeping of ``benchmarks/bench_embeddings.py``: a ``--methods`` rerun replaces only
the rows it ran, drops the rows of methods no longer benchmarked and notes itself; the table
marks the rows of the earlier run. The faster setting it times is the one the docs give."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("bench_embeddings")


def _results(rows: dict[str, float]) -> dict[str, Any]:
    table = {m: {"seconds": t, "inertia": 100.0} for m, t in rows.items()}
    return {"seed": 0, "quick": False, "machine": "m", "torch": "t", "workloads": {
        "mnist-k10": {"n": 10, "d": 2, "k": 10, "euclidean": table,
                      "passes": {"hard": 1.0, "softmax": 1.0, "entmax15": 1.0,
                                 "product": 1.0}}}}


def test_a_methods_rerun_replaces_its_rows_and_is_noted(bench: ModuleType) -> None:
    old = _results({"KMeans(n_init=1)": 2.0, "faiss": 0.5, "RBFKMeans(fit_rows=2560)": 1.0,
                    "RBFKMeans": 1.5})
    new = _results({"faiss": 0.25, "RBFKMeans(faster)": 0.125})
    del new["workloads"]["mnist-k10"]["passes"]
    merged = bench._merge_methods(old, new, "mnist-k10", ["faiss", "RBFKMeans(faster)"])
    rows = merged["workloads"]["mnist-k10"]["euclidean"]
    assert rows["faiss"]["seconds"] == 0.25  # replaced
    assert rows["RBFKMeans(faster)"]["seconds"] == 0.125  # added
    assert rows["KMeans(n_init=1)"]["seconds"] == 2.0  # kept
    assert rows["RBFKMeans"]["seconds"] == 1.5
    assert "RBFKMeans(fit_rows=2560)" not in rows  # no longer a method of the benchmark
    assert merged["workloads"]["mnist-k10"]["passes"]["product"] == 1.0
    assert merged["reruns"] == [{"workload": "mnist-k10", "methods": ["RBFKMeans(faster)",
                                                                     "faiss"],
                                 "geometries": ["euclidean"], "machine": "m", "torch": "t"}]
    assert rows["faiss"]["rerun"] == rows["RBFKMeans(faster)"]["rerun"] == 0
    assert "rerun" not in rows["KMeans(n_init=1)"]
    text = bench.table(merged)
    assert "| KMeans(n_init=1) (earlier run) | 1.00x |" in text
    assert "| faiss | 0.12x | 1.0000 | 0.25 |" in text  # (0.25 / 2.0), rerun: unmarked
    assert "| RBFKMeans (earlier run) | 0.75x |" in text
    assert "The pass timings below are from the first run." in text
    merged["reruns"].append({"workload": "mnist-k10", "methods": ["passes"], "machine": "m",
                             "torch": "t"})
    assert "The pass timings below are rerun (`--passes-only`)." in bench.table(merged)
    one_run = _results({"KMeans(n_init=1)": 2.0, "faiss": 0.5})
    assert "(earlier run)" not in bench.table(one_run)  # a file of one run marks nothing
    repeated = dict(_results({"faiss": 0.25}), repeat=3, once_over=60.0)
    merged = bench._merge_methods(merged, repeated, "mnist-k10", ["faiss"])
    assert merged["reruns"][-1]["repeat"] == 3  # how the rerun was timed
    assert merged["reruns"][-1]["once_over"] == 60.0


def test_the_table_marks_rows_not_timed_with_the_reference(bench: ModuleType) -> None:
    """Once ``KMeans(n_init=1)`` is rerun, a row is of the same run when it was rerun with it:
    rows of an earlier rerun of the same methods are marked too."""
    merged = _results({"KMeans(n_init=1)": 2.0, "faiss": 0.5, "RBFKMeans": 1.5})
    for names, seconds in ((["faiss", "RBFKMeans"], 0.25), (["KMeans(n_init=1)", "RBFKMeans"],
                                                             1.0)):
        new = _results(dict.fromkeys(names, seconds))
        merged = bench._merge_methods(merged, new, "mnist-k10", names)
    rows = merged["workloads"]["mnist-k10"]["euclidean"]
    assert [rows[m]["rerun"] for m in ("faiss", "RBFKMeans", "KMeans(n_init=1)")] == [0, 1, 1]
    text = bench.table(merged)
    assert "| KMeans(n_init=1) | 1.00x |" in text
    assert "| RBFKMeans | 1.00x |" in text
    assert "| faiss (earlier run) | 0.25x |" in text  # rerun, but not with the reference


def test_the_faster_setting_is_the_documented_one(bench: ModuleType) -> None:
    assert bench.faster_setting(256) == {"assignment": "hard", "fit_rows": 65536,
                                         "max_iter": 25}
    page = (ROOT / "docs" / "embeddings.md").read_text()
    assert 'RBFKMeans(k, assignment="hard", fit_rows=256 * k, max_iter=25)' in page
