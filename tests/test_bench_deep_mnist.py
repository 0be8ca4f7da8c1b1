"""benchmarks/bench_deep_mnist.py: how runs are recorded, the verdicts and the docs' table
(on made-up runs: the benchmark itself is run by hand)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest


def _empty(*names: str) -> dict[str, Any]:
    """A results dictionary whose sets already hold their shapes (so nothing loads MNIST)."""
    shape = {"mnist": 70_000, "mnist-test": 10_000}
    return {"sets": {n: {"methods": {}, "stages": [], "n_samples": shape[n], "n_features": 784,
                         "n_clusters": 10} for n in names}}


def _ours(seed: int, acc: float, seconds: float) -> dict[str, Any]:
    scores = {m: {"seed": seed, "acc": acc - d, "nmi": acc - d - 0.03, "ari": acc - d - 0.05}
              for m, d in (("kmeans_raw", 0.4), ("two_step", 0.03), ("joint", 0.0))}
    return {"scores": scores, "timings": {"seed": seed, "pretrain_s": 1.0}, "config": {},
            "seconds": seconds, "peak_rss_mb": 900.0 + seed}


def _peers(seed: int) -> dict[str, Any]:
    scores = {p: {"seed": seed, "acc": 0.8 + 0.01 * i, "nmi": 0.7, "ari": 0.6}
              for i, p in enumerate(("N2D", "DEC", "IDEC"))}
    return {"scores": scores, "seconds": {"N2D": 30.0, "DEC": 20.0 + seed, "IDEC": 25.0},
            "peer_pretrain_s": 10.0 + seed, "peak_rss_mb": 700.0}


def test_runs_are_recorded_per_method_and_seed_and_replaced_on_rerun(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_deep_mnist")
    results = _empty("mnist-test")
    for seed, acc in ((0, 0.98), (1, 0.96), (0, 0.99)):  # seed 0 twice: the rerun replaces it
        bench._record(results, "mnist-test", _ours(seed, acc, 100.0 + seed))
        bench._record(results, "mnist-test", _peers(seed))
    entry = results["sets"]["mnist-test"]
    assert list(entry["methods"]) == ["kmeans_raw", "two_step", "joint", "N2D", "DEC", "IDEC"]
    joint = entry["methods"]["joint"]
    assert [r["seed"] for r in joint["per_seed"]] == [0, 1]
    assert joint["mean"]["acc"] == pytest.approx((0.99 + 0.96) / 2)
    assert joint["std"]["acc"] == pytest.approx(0.0212132, rel=1e-5)
    assert joint["min"]["acc"] == pytest.approx(0.96)
    # each peer keeps its own seconds (shared pretraining plus its stage)
    assert [r["seconds"] for r in entry["methods"]["DEC"]["per_seed"]] == [20.0, 21.0]
    assert [r["seconds"] for r in joint["per_seed"]] == [100.0, 101.0]
    assert entry["peer_pretraining"] == [{"seed": 0, "seconds": 10.0},
                                         {"seed": 1, "seconds": 11.0}]
    assert [s["seed"] for s in entry["stages"]] == [0, 1]
    v = entry["verdicts"]
    assert v["seeds"] == 2
    assert v["joint_over_two_step_acc"] == pytest.approx(0.03)
    assert v["ahead_of_IDEC_acc_by_more_than_std"] is True
    assert "acc_mean_at_least_0.98" not in v  # the MNIST-full targets only


def test_full_set_verdicts_read_the_targets(load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_deep_mnist")
    results = _empty("mnist")
    for seed, acc in ((0, 0.985), (1, 0.975)):
        bench._record(results, "mnist", _ours(seed, acc, 800.0 + 200 * seed))
    v = results["sets"]["mnist"]["verdicts"]
    assert v["acc_mean_at_least_0.98"] is True
    assert v["nmi_mean_at_least_0.95"] is True  # 0.95 exactly
    assert v["every_seed_acc_at_least_0.97"] is True
    assert v["seed_within_15_min"] is False  # seed 1 took 1,000 s
    assert v["peak_memory_under_4_gb"] is True


def test_table_lists_every_method_with_its_seed_count_and_the_papers(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_deep_mnist")
    results = {**_empty("mnist"), "seeds_note": "0, 1", "threads": 2}
    for seed in (0, 1):
        bench._record(results, "mnist", _ours(seed, 0.98, 300.0))
    bench._record(results, "mnist", _peers(0))
    table = bench.markdown_table(results)
    assert table.startswith(bench.TABLE_BEGIN)
    assert table.endswith(bench.TABLE_END)
    assert "| **joint** (2) | 0.980 ± 0.000 |" in table
    assert "| DEC (1) | 0.810 ± 0.000 |" in table
    assert "*published: N2D (McConville et al. 2020)* | 0.979 | 0.942 |" in table
