"""The time-quality curve of ``benchmarks/bench_curve.py``: its points, the peers' curves and
the "on or below" rule, on hand-made results; the docs' table and summary are exactly what the
committed results file gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("bench_curve")


def _row(runs: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """A results row from setting -> [(inertia, seconds) per seed]."""
    return {"dataset": "toy, k=2", "k": 2, "design": False,
            "runs": {s: [{"seed": i, "inertia": j, "seconds": t} for i, (j, t) in enumerate(r)]
                     for s, r in runs.items()}}


@pytest.fixture
def row() -> dict[str, Any]:
    return _row({
        "RBFKMeans": [(100.0, 1.0), (200.0, 1.2)],
        "RBFKMeans(n_init=3)": [(99.0, 4.0), (200.0, 4.4)],
        "KMeans(n_init=1)": [(110.0, 0.1), (220.0, 0.1)],
        "KMeans(n_init=10)": [(101.0, 1.0), (200.0, 1.0)],
        "BKMeans": [(99.0, 2.0), (198.0, 2.0)],
        "faiss(nredo=1)": [(100.0, 0.5), (202.0, 0.5)],
    })


def test_points_are_mean_time_and_mean_ratio_to_each_seeds_best(
        bench: ModuleType, row: dict[str, Any]) -> None:
    pts = bench.points(row)
    # the best-known J per seed: 99 (n_init=3, BKMeans) and 198 (BKMeans)
    assert pts["RBFKMeans"] == pytest.approx((1.1, (100 / 99 + 200 / 198) / 2))
    assert pts["BKMeans"] == pytest.approx((2.0, 1.0))
    assert pts["faiss(nredo=1)"] == pytest.approx((0.5, (100 / 99 + 202 / 198) / 2))


def test_a_peers_curve_is_its_best_setting_at_most_as_slow(
        bench: ModuleType, row: dict[str, Any]) -> None:
    pts = bench.points(row)
    assert bench.peer_at(pts, "KMeans", 1.1) == pytest.approx(pts["KMeans(n_init=10)"][1])
    assert bench.peer_at(pts, "KMeans", 0.5) == pytest.approx(pts["KMeans(n_init=1)"][1])
    assert bench.peer_at(pts, "KMeans", 0.05) is None
    assert bench.peer_at(pts, "BKMeans", 1.1) is None  # no setting that fast


def test_on_or_below_means_no_peer_setting_at_most_as_slow_is_lower(
        bench: ModuleType, row: dict[str, Any]) -> None:
    pts = bench.points(row)
    # KMeans(n_init=10): as slow, 101/99 vs 100/99 on seed 0 and equal on seed 1: above ours
    assert bench.on_or_below(pts) == {"KMeans": True, "BKMeans": True, "faiss": True}
    slower = dict(pts, RBFKMeans=(2.5, pts["RBFKMeans"][1]))  # BKMeans now as fast and lower
    assert bench.on_or_below(slower)["BKMeans"] is False
    # within the tolerance counts as on the curve
    tied = dict(pts, RBFKMeans=(2.5, pts["BKMeans"][1] * (1 + 0.5 * bench.TOLERANCE)))
    assert bench.on_or_below(tied)["BKMeans"] is True


def test_summary_counts_pairs_against_the_better_baseline(
        bench: ModuleType, row: dict[str, Any]) -> None:
    runs = row["runs"]
    for name in bench.OURS:
        runs.setdefault(name, runs["RBFKMeans"])
    out = bench.summarize([row])
    default = out["RBFKMeans"]
    # seed 0: 100 vs min(101, 99) = 99 above; seed 1: 200 vs 198 above
    assert (default["pairs"], default["pairs_at_or_below"]) == (2, 0)
    assert default["worst_excess"] == pytest.approx(100 / 99 - 1)
    assert out["RBFKMeans(n_init=3)"]["pairs_at_or_below"] == 1
    assert default["geomean_time_over_kmeans10"] == pytest.approx(1.1)
    assert out["default_on_or_below_every_peer"] == 1


def test_docs_table_and_figure_come_from_the_committed_results(bench: ModuleType) -> None:
    results = json.loads((ROOT / "benchmarks" / "results" / "curve.json").read_text())
    page = (ROOT / "docs" / "estimator.md").read_text()
    start = page.index(bench.TABLE_BEGIN)
    assert page[start:page.index(bench.TABLE_END) + len(bench.TABLE_END)] == \
        bench.markdown_table(results)
    assert summary_sentence(results["summary"]) in " ".join(page.split())
    assert (ROOT / "docs" / "figures" / "fit_curves.png").is_file()
    assert len(results["seeds"]) >= 5
    assert {s for r in results["rows"] for s in r["runs"]} == set(results["settings"])


def test_docs_quote_the_held_out_photographs(bench: ModuleType) -> None:
    results = json.loads((ROOT / "benchmarks" / "results" / "curve_pixels_seed1.json")
                         .read_text())
    assert results["pixel_seed"] == 1
    summary = results["summary"]
    page = " ".join((ROOT / "docs" / "estimator.md").read_text().split())
    assert (f"every peer's curve on {summary['default_on_or_below_every_peer']} of the "
            f"{summary['sets']} sets, and the pairs" in page)
    cells = [f"{summary[name]['pairs_at_or_below']}"
             f"{' of 75' if name == bench.DEFAULT else ''} with "
             for name in bench.OURS]
    assert all(cell in page for cell in cells)
    for name in bench.OURS:
        assert f"({summary[name]['geomean_time_over_kmeans10']:.2f}x)" in page


def summary_sentence(summary: dict[str, Any]) -> str:
    return (f"the default lies on or below every peer's curve on "
            f"{summary['default_on_or_below_every_peer']} of the {summary['sets']} sets")
