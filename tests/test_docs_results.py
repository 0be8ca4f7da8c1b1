"""The figures in the docs come from the committed results files: the deep-clustering table of
docs/deep-clustering.md is exactly what ``benchmarks/bench_deep.py --table`` renders from
``benchmarks/results/deep.json``, the quality and time table of docs/estimator.md what
``benchmarks/bench_fit.py --table`` renders from ``benchmarks/results/fit.json``, the
embeddings table of docs/embeddings.md what ``benchmarks/bench_embeddings.py --table`` renders
from ``benchmarks/results/embeddings.json``, its sparse-input table what
``benchmarks/bench_sparse.py --table`` renders from ``benchmarks/results/sparse.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def test_deep_clustering_docs_table_equals_the_committed_results(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_deep")
    results = json.loads((ROOT / "benchmarks" / "results" / "deep.json").read_text())
    table = bench.markdown_table(results)
    page = (ROOT / "docs" / "deep-clustering.md").read_text()
    assert _generated(page, bench) == table


def test_deep_results_file_covers_the_benchmark_sets_and_seeds() -> None:
    results = json.loads((ROOT / "benchmarks" / "results" / "deep.json").read_text())
    assert len(results["seeds"]) >= 10
    assert {"digits", "breast_cancer"} <= set(results["datasets"])
    for r in results["datasets"].values():
        for method in ("joint", "two_step", "kmeans_raw", *results["peers"]):
            assert len(r["methods"][method]["per_seed"]) == len(results["seeds"])


def test_deep_clustering_docs_ablation_tables_equal_the_committed_results() -> None:
    from rbfkmeans.deep.report import ablation_markdown

    page = (ROOT / "docs" / "deep-clustering.md").read_text()
    files = sorted((ROOT / "benchmarks" / "results" / "ablation").glob("*.json"))
    assert {f.stem for f in files} >= {"digits", "breast_cancer"}
    for f in files:
        assert ablation_markdown(json.loads(f.read_text())).rstrip("\n") in page, f.name


def test_deep_clustering_docs_quote_the_breast_cancer_recheck_on_other_seeds() -> None:
    """The re-check of the breast-cancer margin on seeds 10-19 is quoted from its results file."""
    path = ROOT / "benchmarks" / "results" / "deep_bc_seeds10-19.json"
    results = json.loads(path.read_text())
    assert results["seeds"] == list(range(10, 20))
    methods = results["datasets"]["breast_cancer"]["methods"]

    def cell(name: str) -> str:
        return f"{methods[name]['mean']['nmi']:.3f} ± {methods[name]['std']['nmi']:.3f}"

    page = " ".join((ROOT / "docs" / "deep-clustering.md").read_text().split())
    assert f"joint {cell('joint')} against N2D {cell('N2D')}" in page
    assert f"10-19 {cell('joint')} against {cell('N2D')}" in page  # the limitations


def test_deep_clustering_docs_mnist_table_equals_the_committed_results(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_deep_mnist")
    results = json.loads((ROOT / "benchmarks" / "results" / "deep_mnist.json").read_text())
    page = (ROOT / "docs" / "deep-clustering.md").read_text()
    assert _generated(page, bench) == bench.markdown_table(results)
    assert set(results["sets"]) == set(bench.SETS)
    for entry in results["sets"].values():
        assert len(entry["methods"]["joint"]["per_seed"]) >= 5
        assert {"kmeans_raw", "two_step", "joint", *bench.PEERS} <= set(entry["methods"])


def test_deep_clustering_docs_gains_table_equals_the_committed_results() -> None:
    """The seed-by-seed gains of joint training over its start, from both results files."""
    from rbfkmeans.deep.report import gains_markdown

    mnist = json.loads((ROOT / "benchmarks" / "results" / "deep_mnist.json").read_text())
    small = json.loads((ROOT / "benchmarks" / "results" / "deep.json").read_text())
    sets = [(name, mnist["sets"][name]) for name in ("mnist", "mnist-test")]
    runs = {name: (r["methods"]["joint"]["per_seed"], r["methods"]["two_step"]["per_seed"])
            for name, r in [*sets, *small["datasets"].items()]}
    page = (ROOT / "docs" / "deep-clustering.md").read_text()
    assert gains_markdown(runs) in page


def test_quantizer_docs_mnist_table_equals_the_committed_results() -> None:
    from rbfkmeans.vq.report import PEER, markdown_table

    results = json.loads((ROOT / "benchmarks" / "results" / "vq_mnist.json").read_text())
    assert results["dataset"] == "mnist"
    assert "per_seed" in results["methods"][PEER]  # the peer ran
    page = (ROOT / "docs" / "quantizer.md").read_text()
    assert markdown_table(results) in page


def test_scale_docs_gpu_tables_equal_the_committed_results(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("gpu_check")
    results = json.loads((ROOT / "benchmarks" / "results" / "gpu.json").read_text())
    assert results["device"].startswith("NVIDIA")
    assert set(results["runs"]) >= {"before", "after"}
    page = (ROOT / "docs" / "scale.md").read_text()
    assert _generated(page, bench) == bench.markdown_table(results)


def _generated(page: str, bench: ModuleType) -> str:
    """The part of ``page`` between a benchmark's ``TABLE_BEGIN`` and ``TABLE_END`` markers,
    both included."""
    start = page.index(bench.TABLE_BEGIN)
    return page[start:page.index(bench.TABLE_END) + len(bench.TABLE_END)]


def test_estimator_docs_table_equals_the_committed_fit_results(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_fit")
    results = json.loads((ROOT / "benchmarks" / "results" / "fit.json").read_text())
    page = (ROOT / "docs" / "estimator.md").read_text()
    assert _generated(page, bench) == bench.markdown_table(results)
    summary = results["summary"]
    assert (f"On {summary['sets_at_or_below_best_peer']} of the {summary['sets']} sets"
            in page)
    assert f"{summary['geomean_time_ratio_where_kmeans_over_0.1s']:.2f}x in geometric mean" in page


def _photograph_record(name: str) -> tuple[int, int, int, int, float]:
    """Of a ``bench_fit.py`` results file: photograph sets at or below the better peer on every
    seed, those sets, seeds at or below it, seeds, the largest ratio to the better peer."""
    rows = [r for r in json.loads((ROOT / "benchmarks" / "results" / name).read_text())["rows"]
            if "pixels" in r["dataset"]]
    return (sum(r["seeds_within_1e-4"] == len(r["runs"]) for r in rows), len(rows),
            sum(r["seeds_within_1e-4"] for r in rows), sum(len(r["runs"]) for r in rows),
            max(r["ratio_to_best_peer"]["max"] for r in rows))


def test_estimator_docs_quote_the_new_photograph_samples_and_all_row_annealing() -> None:
    page = " ".join((ROOT / "docs" / "estimator.md").read_text().split())
    sets, n_sets, seeds, n_seeds, worst = _photograph_record("fit_pixels_seed1.json")
    assert (f"on {sets} of the {n_sets} photograph sets, {seeds} of {n_seeds} seeds" in page)
    assert f"worst {worst:.5f}" in page
    sets, n_sets, seeds, n_seeds, _ = _photograph_record("fit.json")
    assert f"(on the sample above: {sets} of {n_sets}, {seeds} of {n_seeds})" in page
    everything = json.loads((ROOT / "benchmarks" / "results" / "fit_all_rows.json").read_text())
    summary = everything["summary"]
    assert everything["estimator"] == {"subsample": None}
    assert f"reaches {summary['sets_at_or_below_best_peer']} of the {summary['sets']} sets" in page
    assert f"at {summary['geomean_time_ratio_where_kmeans_over_0.1s']:.2f}x" in page
    sets, n_sets, seeds, n_seeds, _ = _photograph_record("fit_all_rows_pixels_seed1.json")
    assert f"but {sets} of the {n_sets} new photograph sets ({seeds} of {n_seeds} seeds)" in page


def test_embeddings_docs_table_equals_the_committed_results(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_embeddings")
    results = json.loads((ROOT / "benchmarks" / "results" / "embeddings.json").read_text())
    page = (ROOT / "docs" / "embeddings.md").read_text()
    assert _generated(page, bench) == bench.table(results)
    assert set(results["workloads"]) == set(bench.WORKLOADS)
    assert not results["quick"]


def test_embeddings_docs_sparse_table_equals_the_committed_results(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("bench_sparse")
    results = json.loads((ROOT / "benchmarks" / "results" / "sparse.json").read_text())
    page = (ROOT / "docs" / "embeddings.md").read_text()
    assert _generated(page, bench) == bench.table(results)
    summary = results["summary"]
    flat = " ".join(page.split())
    assert (f"{summary['identical_partitions']} of {summary['pairs']} fits end in the same "
            "partition") in flat
    assert f"{summary['speedup_min']:.1f}x to" in flat
    assert f"{summary['speedup_geomean']:.1f}x in geometric mean" in flat
