"""Two gloo processes that take the compiled kernels: a distributed fit's passes run in the numba
kernels (their sums all-reduced after each pass) where a process may use them, and equal the
single-process fit on the concatenated data with the kernels too.

``tests/test_distributed.py`` forks its workers after this process ran the kernels, so they take
the torch passes (numba's thread pool does not survive a fork); here the workers are spawned,
fresh interpreters that load the compiled kernels from numba's cache, with
``RBFKMEANS_KERNELS=1``. Shards are uneven, one of them empty or a single row where that found
defects (a rank whose share of a subsample held no row failed in the wide group kernel's sums).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

import rbfkmeans as rk
from _ranks import run_ranks, save_rank
from rbfkmeans import kernels

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available(),
                       reason="torch.distributed is not available"),
    pytest.mark.skipif(not kernels.enabled(), reason="the compiled kernels are not available"),
]

WORLD = 2


def _data(d: int) -> tuple[np.ndarray, np.ndarray]:
    X, _ = make_blobs(n_samples=600, n_features=d, centers=7, cluster_std=1.5, random_state=d)
    return X, np.linspace(0.2, 3.0, 600)


#: name: (features, rows on rank 0, estimator parameters, weighted)
CASES: dict[str, tuple[int, int, dict[str, Any], bool]] = {
    "default": (3, 250, {}, True),
    "hard": (3, 250, {"assignment": "hard"}, False),
    "cosine": (3, 400, {"metric": "cosine"}, True),
    "wide": (20, 250, {}, False),
    "empty shard": (3, 600, {}, True),
    "one-row shard, fit_rows": (20, 599, {"fit_rows": 200}, False),
}


def _fit(X: np.ndarray, w: np.ndarray | None, params: dict[str, Any]) -> rk.RBFKMeans:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rk.RBFKMeans(6, random_state=0, **params).fit(X, sample_weight=w)


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ["RBFKMEANS_KERNELS"] = "1"
    torch.set_num_threads(1)
    from rbfkmeans.distributed import process_group

    results: dict[str, Any] = {}
    with process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                       world_size=WORLD, timeout_s=60):
        for name, (d, split, params, weighted) in CASES.items():
            X, w = _data(d)
            rows = slice(0, split) if rank == 0 else slice(split, None)
            try:
                est = _fit(X[rows], w[rows] if weighted else None, params)
                results[name] = {"centers": est.cluster_centers_, "inertia": est.inertia_,
                                 "kernels": est._kernel_passes}
            except Exception as exc:  # recorded, compared by the tests
                results[name] = ("error", type(exc).__name__, str(exc))
    save_rank(out_dir, rank, results)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(_worker, tmp_path_factory.mktemp("dist_kernels"), world=WORLD)


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_passes_equal_the_single_process_fit(
        ranks: list[dict[str, Any]], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    d, _, params, weighted = CASES[name]
    X, w = _data(d)
    monkeypatch.setenv("RBFKMEANS_KERNELS", "1")
    single = _fit(X, w if weighted else None, params)
    for res in ranks:
        got = res[name]
        assert not isinstance(got, tuple), got
        assert got["kernels"] is True  # the passes ran in the kernels
        np.testing.assert_allclose(got["centers"], single.cluster_centers_, rtol=0, atol=1e-8)
        assert got["inertia"] == pytest.approx(single.inertia_, rel=1e-10)
    np.testing.assert_array_equal(ranks[0][name]["centers"], ranks[1][name]["centers"])
