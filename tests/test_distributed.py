"""Two gloo processes on 127.0.0.1: a distributed fit equals the single-process fit on the
concatenated data, every rank ends with the same centroids, and bad input on one rank raises on
every rank instead of hanging.

One process group runs every scenario (a module fixture, a few seconds); the tests compare what
each rank wrote with a single-process run here.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.multiprocessing as mp
from sklearn.datasets import make_blobs
from torch import nn

import rbfkmeans as rk
from _ranks import run_ranks, save_rank
from rbfkmeans.distributed import (
    broadcast_module,
    gather_rows,
    is_distributed,
    local_only,
    process_group,
    shard,
    shard_bounds,
)
from rbfkmeans.starts import ANNEAL_MIN_WIDTH

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not available"
)

WORLD = 2
N, K = 500, 6
SPLIT = 230  # uneven shards: rank 0 holds X[:230], rank 1 X[230:]
#: an annealing work limit between the two shards' own (230 and 270 rows x K x the width
#: counted, ANNEAL_MIN_WIDTH for these 3 features): each rank once decided from its own rows
#: whether the annealing is abbreviated, so rank 1 raced and rank 0 did not (a collective
#: mismatch: gloo aborted both); the count is global now
RACE_UNEVEN = 250 * K * ANNEAL_MIN_WIDTH
#: clusters whose race rows (32 per cluster) are all the rows
RACE_K = 16


def _race_weights(rank: int) -> np.ndarray:
    """The weights of rank ``rank``'s rows: every third row of rank 1 weighs 0."""
    w = _part(np.linspace(0.5, 2.0, N), rank).copy()
    if rank == 1:
        w[::3] = 0.0
    return w


def _data() -> tuple[np.ndarray, np.ndarray]:
    X, _ = make_blobs(n_samples=N, n_features=3, centers=K, cluster_std=1.2, random_state=1)
    w = np.linspace(0.2, 3.0, N)
    return X, w


def _hartigan_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wide overlapping blobs, weights, and a random start in which every cluster holds rows."""
    X, _ = make_blobs(n_samples=N, n_features=24, centers=K, cluster_std=4.0, random_state=4)
    rng = np.random.default_rng(4)
    start = np.concatenate([np.arange(K), rng.integers(0, K, N - K)]).astype(np.int64)
    return X, np.linspace(0.5, 2.0, N), start


#: shards cut anywhere (none, one row, all rows on rank 0), weights of 0 on some rows or all of
#: rank 1's, wide rows, and settings that sample, race and restart: each rank once decided
#: something from its own rows in some of these and left the other in a mismatched collective
#: name: (features, rows on rank 0, weights, estimator parameters, the race forced)
SPLITS: dict[str, tuple[int, int, str, dict[str, Any], bool]] = {
    "none on rank 0, race": (3, 0, "some zero", {}, True),
    "one row on rank 0, wide": (20, 1, "none", {}, True),
    "all on rank 0, fit_rows": (3, N, "none", {"fit_rows": 150}, False),
    "one row on rank 1, cosine": (20, N - 1, "some zero", {"metric": "cosine"}, False),
    "rank 1 weightless, restarts": (3, 100, "rank 1 zero", {"schedule": "k-means++",
                                                            "n_init": 2}, True),
    "rank 1 weightless, geometric": (20, 400, "rank 1 zero", {"schedule": "geometric"}, False),
}


def _split_case(name: str) -> tuple[np.ndarray, np.ndarray | None, int]:
    """The rows, weights and rank 0's row count of a :data:`SPLITS` case."""
    d, split, weights, _, _ = SPLITS[name]
    rng = np.random.default_rng(d + split)
    X = (rng.normal(size=(K + 2, d)) * 4)[rng.integers(0, K + 2, N)] + rng.normal(size=(N, d))
    if weights == "none":
        return X, None, split
    w = rng.uniform(0.5, 2.0, N)
    if weights == "some zero":
        w[rng.random(N) < 0.3] = 0.0
    else:
        w[split:] = 0.0
    w[0] = 1.0
    return X, w, split


def _fit_split(name: str, X: np.ndarray, w: np.ndarray | None) -> rk.RBFKMeans:
    from rbfkmeans import starts

    params, race = SPLITS[name][3], SPLITS[name][4]
    work = starts.ANNEAL_WORK
    starts.ANNEAL_WORK = 0 if race else work
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return rk.RBFKMeans(K, random_state=0, **params).fit(X, sample_weight=w)
    finally:
        starts.ANNEAL_WORK = work


def _part(a: np.ndarray, rank: int) -> np.ndarray:
    return a[:SPLIT] if rank == 0 else a[SPLIT:]


#: estimator settings run under both processes and here; "w": weighted fit
FITS: dict[str, dict[str, Any]] = {
    "hard": {"assignment": "hard", "random_state": 0, "w": True},
    "softmax": {"assignment": "softmax", "random_state": 0, "w": True},
    "entmax15": {"assignment": "entmax15", "random_state": 3, "w": False},
    "sparsemax_kpp": {"assignment": "sparsemax", "init": "k-means++", "random_state": 2,
                      "w": False},
    "hard_n_init": {"assignment": "hard", "n_init": 3, "random_state": 5, "w": True},
    "kpp_restarts": {"schedule": "k-means++", "n_init": 2, "random_state": 4, "w": True},
    "chunked": {"assignment": "entmax15", "chunk_size": 64, "random_state": 0, "w": True},
    "gradient": {"assignment": "softmax", "solver": "gradient", "chunk_size": 100,
                 "max_iter_per_temperature": 10, "random_state": 0, "w": True},
    "gradient_adam": {"assignment": "entmax15", "solver": "gradient", "random_state": 0,
                      "optimizer": lambda p: torch.optim.Adam(p, lr=0.05),
                      "max_iter_per_temperature": 5, "w": False},
}


def _estimator(spec: dict[str, Any], **extra: Any) -> rk.RBFKMeans:
    params = {k: v for k, v in spec.items() if k != "w"}
    return rk.RBFKMeans(n_clusters=K, **params, **extra)


def _fitted(est: rk.RBFKMeans) -> dict[str, Any]:
    return {"centers": est.cluster_centers_, "inertia": est.inertia_, "labels": est.labels_,
            "temperatures": est.temperatures_, "n_iter": est.n_iter_}


def _swap_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three blobs and a Lloyd start with two centroids in one blob, one between the others."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), N // 3 + 1)[:N]
    X = np.array([[-20.0, 0.0], [10.0, 0.0], [20.0, 0.0]])[y] + rng.normal(size=(N, 2)) * 0.5
    C0 = np.array([[-20.5, 0.0], [-19.5, 0.0], [15.0, 0.0]])
    return X, np.linspace(0.5, 2.0, N), C0


def _far_row_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Three wide blobs and one row far out in rank 1's shard (the axis cut of its cluster
    runs through the blob); the clusters' means and nearest labels."""
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(3), N // 3 + 1)[:N]
    C = np.array([[-60.0, 0.0], [0.0, 0.0], [60.0, 0.0]])
    X = C[y] + rng.normal(size=(N, 2)) * 8.0
    w = np.linspace(0.5, 2.0, N)
    X[N - 3] = (400.0, 300.0)
    labels = np.argmin(((X[:, None] - C[None]) ** 2).sum(2), axis=1)
    C = np.stack([np.average(X[labels == j], axis=0, weights=w[labels == j]) for j in range(3)])
    return X, w, C, np.argmin(((X[:, None] - C[None]) ** 2).sum(2), axis=1)


def _batches(X: np.ndarray, size: int = 50) -> list[np.ndarray]:
    return [X[i : i + size] for i in range(0, X.shape[0], size)]


class _Model(nn.Module):
    """An encoder and the clustering layer, trained jointly (float64)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.enc = nn.Linear(3, 2, dtype=torch.float64)
        with torch.no_grad():
            self.enc.weight.copy_(torch.randn(2, 3, generator=g, dtype=torch.float64))
            self.enc.bias.zero_()
        self.cluster = rk.KMeansLayer(torch.randn(4, 2, generator=g, dtype=torch.float64),
                                      temperature=0.5, assignment="softmax")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cluster.objective(self.enc(x)) / x.shape[0]


def _sgd(model: nn.Module, lr: float = 0.05) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None


def _train(model: nn.Module, batches: list[torch.Tensor]) -> nn.Module:
    for xb in batches:
        model(xb).backward()
        _sgd(model)
    return model


def _ddp_batches(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(16, 3, generator=g, dtype=torch.float64) + rank for _ in range(4)]


# ---------------------------------------------------------------------------------------------
# what each rank runs
# ---------------------------------------------------------------------------------------------


def _scenarios(rank: int, data_dir: str) -> dict[str, Callable[[], Any]]:
    X, w = _data()
    Xl, wl = _part(X, rank), _part(w, rank)
    out: dict[str, Callable[[], Any]] = {}
    for name, spec in FITS.items():
        def fit(spec: dict[str, Any] = spec) -> Any:
            est = _estimator(spec).fit(Xl, sample_weight=wl if spec["w"] else None)
            res = _fitted(est)
            res["all_labels"] = gather_rows(est.labels_).numpy()
            return res
        out[name] = fit

    def memmap_shard() -> Any:  # each rank reads its rows of one file on disk, no copy
        mm = np.load(os.path.join(data_dir, "X.npy"), mmap_mode="r")
        Xs = shard(mm)
        return {"rows": (shard_bounds(N).start, shard_bounds(N).stop),
                **_fitted(rk.RBFKMeans(K, assignment="hard", random_state=0).fit(Xs))}

    def seed_none() -> Any:  # np.random differs between the ranks: seeds come from rank 0
        drawn: list[int] = []

        def init(A: np.ndarray, k: int, rs: np.random.RandomState) -> np.ndarray:
            drawn.append(int(rs.randint(2**31 - 1)))  # the run's seed, seen by the callable
            return A[:k]

        est = rk.RBFKMeans(K, assignment="hard", init=init, n_init=2, random_state=None)
        return {**_fitted(est.fit(Xl)), "drawn": drawn}

    def tiny_shard() -> Any:  # fewer rows on rank 0 than clusters: fine, the count is global
        Xt = X[:2] if rank == 0 else X[2:]
        return _fitted(rk.RBFKMeans(K, assignment="entmax15", random_state=0).fit(Xt))

    def empty_shard() -> Any:  # rank 1 holds no rows: the fit of rank 0's (once refused)
        est = rk.RBFKMeans(K, random_state=0).fit(
            X if rank == 0 else X[:0], sample_weight=w if rank == 0 else np.ones(0))
        return {**_fitted(est), "labels": est.labels_.copy()}

    def weightless_shard() -> Any:  # rank 1's rows all weigh 0 (once refused on that rank)
        est = rk.RBFKMeans(K, random_state=0).fit(
            Xl, sample_weight=wl if rank == 0 else np.zeros(len(Xl)))
        return _fitted(est)

    def weightless_everywhere() -> Any:
        rk.RBFKMeans(K, random_state=0).fit(Xl, sample_weight=np.zeros(len(Xl)))

    def relocation() -> Any:  # a centroid far from every point is emptied and relocated
        C0 = X[:K].copy()
        C0[0] = 1e3
        return _fitted(rk.RBFKMeans(K, assignment="hard", init=C0).fit(Xl))

    def callable_init() -> Any:  # a callable sees the shard: rank 0's result is used
        return _fitted(rk.RBFKMeans(K, assignment="hard", init=lambda A, k, rs: A[:k]).fit(Xl))

    def float32() -> Any:
        return _fitted(rk.RBFKMeans(K, assignment="softmax", random_state=0)
                       .fit(Xl.astype(np.float32)))

    def too_few() -> Any:
        rk.RBFKMeans(K, assignment="hard").fit(X[:2] if rank == 0 else X[2:3])

    def nan_on_one_rank() -> Any:
        Xb = Xl.copy()
        if rank == 1:
            Xb[3, 1] = np.nan
        rk.RBFKMeans(K, assignment="hard").fit(Xb)

    def widths_differ() -> Any:
        rk.RBFKMeans(K, assignment="hard").fit(Xl if rank == 0 else Xl[:, :2])

    def random_init() -> Any:
        rk.RBFKMeans(K, assignment="hard", init="random").fit(Xl)

    def sparse_on_one_rank() -> Any:  # rejected after the shape checks: once every rank hung
        rk.RBFKMeans(K, assignment="hard").fit(sp.csr_matrix(Xl) if rank == 0 else Xl)

    def parameters_differ() -> Any:  # k = 6 and 7: once a gloo abort (SIGABRT) or a hang
        rk.RBFKMeans(K + rank, assignment="hard").fit(Xl)

    def own_settings() -> Any:  # seeds come from rank 0; chunks and devices are each rank's
        est = rk.RBFKMeans(K, random_state=rank, chunk_size=16 if rank else 4096).fit(Xl)
        return {"centers": est.cluster_centers_, "inertia": est.inertia_}

    def weights_on_one_rank() -> Any:  # the other rank's rows weigh 1: once a deadlock
        est = rk.RBFKMeans(K, random_state=0).fit(
            Xl, sample_weight=np.full(len(Xl), 2.0) if rank == 0 else None)
        return {"centers": est.cluster_centers_, "inertia": est.inertia_}

    def dtypes_differ() -> Any:  # a float32 shard: every rank computes in float64
        est = rk.RBFKMeans(K, random_state=0).fit(Xl.astype(np.float32) if rank == 0 else Xl)
        return {"centers": est.cluster_centers_.astype(np.float64), "inertia": est.inertia_}

    def batch_weights_on_one_rank() -> Any:  # rejected before any agreement: once a hang
        rk.RBFKMeans(K, assignment="hard").fit_batches(
            Xl, sample_weight=-np.ones(len(Xl)) if rank == 1 else None)

    def dict_batches_on_one_rank() -> Any:  # rejected in the agreement: no rank left waiting
        rk.RBFKMeans(K, assignment="hard").fit_batches(
            [{"x": b} for b in _batches(Xl)] if rank == 1 else _batches(Xl))

    def batches() -> Any:  # rank 0 has 5 batches, rank 1 has 6
        est = rk.RBFKMeans(K, assignment="hard", random_state=0).fit_batches(_batches(Xl))
        return {"centers": est.cluster_centers_, "n_iter": est.n_iter_}

    def ddp() -> Any:
        model = _Model(seed=rank)  # different on each rank until DDP broadcasts rank 0's
        ddp_model = nn.parallel.DistributedDataParallel(model)
        _train(ddp_model, _ddp_batches(rank))
        return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
                if isinstance(v, torch.Tensor)}

    def broadcast() -> Any:
        layer = rk.KMeansLayer(torch.full((3, 2), float(rank + 1)), temperature=1.0)
        return broadcast_module(layer).centroids.detach().numpy().copy()

    def local() -> Any:  # this rank's data alone, inside the group
        with local_only():
            est = rk.RBFKMeans(K, assignment="hard", random_state=0).fit(Xl)
        return {**_fitted(est), "group_kept": is_distributed()}

    def rank0_messages() -> Any:  # a warning and a progress bar, once per job
        err = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            rk.RBFKMeans(K, assignment="softmax", max_iter=1, verbose=1,
                         random_state=0).fit(Xl)
        return {"warnings": [str(w.message) for w in caught], "stderr": err.getvalue()}

    def farthest() -> Any:  # fewer candidate rows in all than asked for: no padding rows
        from rbfkmeans.comm import Comm
        from rbfkmeans.passes import Data
        from rbfkmeans.relocation import farthest_points

        Xf = torch.tensor([[5.0, 5.0]]) if rank == 0 else torch.empty(0, 2)
        return farthest_points(Data(Xf, comm=Comm.auto()), torch.zeros(1, 2), 3).numpy()

    def swaps() -> Any:  # the swap search reduces its costs, gains and trials over the ranks
        from rbfkmeans.comm import Comm
        from rbfkmeans.lloyd import lloyd
        from rbfkmeans.passes import Data
        from rbfkmeans.swaps import swap_search

        Xs, ws, C0 = _swap_data()
        Xr, wr = torch.as_tensor(_part(Xs, rank)), torch.as_tensor(_part(ws, rank))
        data = Data(Xr, wr, comm=Comm.auto())
        res = swap_search(data, lloyd(data, torch.as_tensor(C0)),
                          generator=torch.Generator().manual_seed(0))
        return {"centers": res.C.numpy(), "inertia": res.inertia, "n_swaps": res.n_swaps,
                "n_trials": res.n_trials, "n_iter": res.n_iter,
                "labels": gather_rows(res.labels).numpy()}

    def far_row() -> Any:  # the farthest row of a cluster from the rank that holds it
        from rbfkmeans.comm import Comm
        from rbfkmeans.costs import swap_costs
        from rbfkmeans.passes import Data

        Xs, ws, C, labels = _far_row_data()
        data = Data(torch.as_tensor(_part(Xs, rank)), torch.as_tensor(_part(ws, rank)),
                    comm=Comm.auto())
        removal, gain, halves = swap_costs(data, torch.as_tensor(C),
                                           torch.as_tensor(_part(labels, rank)),
                                           generator=torch.Generator().manual_seed(0))
        return {"removal": removal.numpy(), "gain": gain.numpy(), "halves": halves.numpy()}

    def bounded_lloyd(k: int) -> Any:  # per-rank bounds (and, k >= 64, the movers), sums
        from rbfkmeans.comm import Comm  # reduced every call
        from rbfkmeans.lloyd import lloyd
        from rbfkmeans.passes import Data

        data = Data(torch.as_tensor(Xl), torch.as_tensor(wl), comm=Comm.auto())
        res = lloyd(data, torch.as_tensor(X[:k]), bounds=True)
        return {"centers": res.C.numpy(), "inertia": res.inertia, "n_iter": res.n_iter,
                "labels": gather_rows(res.labels).numpy()}

    def hartigan_wide() -> Any:  # Hartigan's moves on 24 features: the bounded torch scoring
        from rbfkmeans.comm import Comm
        from rbfkmeans.hartigan import hartigan
        from rbfkmeans.passes import Data

        Xh, wh, start = _hartigan_data()
        data = Data(torch.as_tensor(_part(Xh, rank)), torch.as_tensor(_part(wh, rank)),
                    comm=Comm.auto())
        res = hartigan(data, torch.as_tensor(_part(start, rank)), K)
        return {"centers": res.C.numpy(), "n_passes": res.n_passes, "n_moves": res.n_moves,
                "labels": gather_rows(res.labels).numpy()}

    def race(limit: int) -> Any:  # an abbreviated annealing races k-means++ on a subsample
        from rbfkmeans import starts  # of all ranks

        work = starts.ANNEAL_WORK
        starts.ANNEAL_WORK = limit
        try:
            est = rk.RBFKMeans(K, random_state=0).fit(Xl, sample_weight=wl)
        finally:
            starts.ANNEAL_WORK = work
        return _fitted(est)

    def race_some_weightless() -> Any:
        # rank 1 has rows of weight 0, rank 0 none, and the race's rows are all of them
        # (32 k >= N): rank 0 once raced on the data itself, rank 1 on a copy of its weighing
        # rows, and only rank 1 polished again (gloo aborted both)
        from rbfkmeans import starts

        work = starts.ANNEAL_WORK
        starts.ANNEAL_WORK = 0
        try:
            est = rk.RBFKMeans(RACE_K, random_state=0).fit(Xl, sample_weight=_race_weights(rank))
        finally:
            starts.ANNEAL_WORK = work
        return _fitted(est)

    def split(name: str) -> Any:
        Xs, ws, cut = _split_case(name)
        rows = slice(0, cut) if rank == 0 else slice(cut, N)
        return _fitted(_fit_split(name, Xs[rows], None if ws is None else ws[rows]))

    out.update({f"split: {name}": lambda name=name: split(name) for name in SPLITS})
    out.update(hartigan_wide=hartigan_wide, bounded=lambda: bounded_lloyd(K),
               movers=lambda: bounded_lloyd(70), swaps=swaps, far_row=far_row,
               race=lambda: race(0), race_uneven=lambda: race(RACE_UNEVEN),
               race_some_weightless=race_some_weightless,
               memmap_shard=memmap_shard, seed_none=seed_none,
               tiny_shard=tiny_shard, empty_shard=empty_shard,
               weightless_shard=weightless_shard, weightless_everywhere=weightless_everywhere,
               relocation=relocation, callable_init=callable_init,
               float32=float32,
               too_few=too_few, nan_on_one_rank=nan_on_one_rank, widths_differ=widths_differ,
               random_init=random_init, sparse_on_one_rank=sparse_on_one_rank,
               parameters_differ=parameters_differ, own_settings=own_settings,
               weights_on_one_rank=weights_on_one_rank, dtypes_differ=dtypes_differ,
               batch_weights_on_one_rank=batch_weights_on_one_rank,
               dict_batches_on_one_rank=dict_batches_on_one_rank, batches=batches, ddp=ddp,
               broadcast=broadcast,
               local=local, rank0_messages=rank0_messages, farthest=farthest)
    return out


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    np.random.seed(1000 + rank)  # noqa: NPY002 (random_state=None must not depend on it)
    warnings.simplefilter("ignore")
    results: dict[str, Any] = {}
    with process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                       world_size=WORLD, timeout_s=60):
        results["is_distributed"] = is_distributed()
        for name, run in _scenarios(rank, out_dir).items():
            start = time.perf_counter()
            try:
                results[name] = run()
            except Exception as exc:  # recorded, compared by the tests
                results[name] = ("error", type(exc).__name__, str(exc))
            results.setdefault("seconds", {})[name] = time.perf_counter() - start
    results["after"] = is_distributed()
    save_rank(out_dir, rank, results)


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """Tiny problems: one thread avoids OpenMP spinning on a busy machine (the workers too)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("dist")
    np.save(out / "X.npy", _data()[0])
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    if method == "fork":  # DDP imports torch._dynamo lazily: once here, not in every worker
        importlib.import_module("torch._dynamo")
    return run_ranks(_worker, out, world=WORLD, start_method=method)


def _single(spec: dict[str, Any], X: np.ndarray, w: np.ndarray | None) -> rk.RBFKMeans:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _estimator(spec).fit(X, sample_weight=w)


# ---------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------


def test_group_lifecycle(ranks: list[dict[str, Any]]) -> None:
    for res in ranks:
        assert res["is_distributed"] is True
        assert res["after"] is False  # process_group destroyed the group it created


@pytest.mark.parametrize("name", list(FITS))
def test_fit_equals_single_process_on_concatenated_data(
    ranks: list[dict[str, Any]], name: str
) -> None:
    X, w = _data()
    spec = FITS[name]
    ref = _single(spec, X, w if spec["w"] else None)
    r0, r1 = ranks[0][name], ranks[1][name]
    assert not isinstance(r0, tuple), r0
    # every rank holds the same centroids (the reduced statistics are identical)
    np.testing.assert_array_equal(r0["centers"], r1["centers"])
    assert r0["inertia"] == r1["inertia"]
    np.testing.assert_allclose(r0["centers"], ref.cluster_centers_, rtol=0, atol=1e-6)
    assert r0["inertia"] == pytest.approx(ref.inertia_, rel=1e-9)
    np.testing.assert_allclose(r0["temperatures"], ref.temperatures_, rtol=1e-9)
    assert r0["n_iter"] == ref.n_iter_
    # labels_ are this rank's rows; gathered they are the single-process labels
    np.testing.assert_array_equal(r0["labels"], ref.labels_[:SPLIT])
    np.testing.assert_array_equal(r1["labels"], ref.labels_[SPLIT:])
    np.testing.assert_array_equal(r0["all_labels"], ref.labels_)
    np.testing.assert_array_equal(r1["all_labels"], ref.labels_)


def test_memmap_shards(ranks: list[dict[str, Any]]) -> None:
    X, _ = _data()
    ref = rk.RBFKMeans(K, assignment="hard", random_state=0).fit(X)
    assert ranks[0]["memmap_shard"]["rows"] == (0, N // 2)
    assert ranks[1]["memmap_shard"]["rows"] == (N // 2, N)
    for res in ranks:
        np.testing.assert_allclose(res["memmap_shard"]["centers"], ref.cluster_centers_,
                                   rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["seed_none", "callable_init", "float32"])
def test_ranks_agree(ranks: list[dict[str, Any]], name: str) -> None:
    r0, r1 = ranks[0][name], ranks[1][name]
    assert not isinstance(r0, tuple), r0
    np.testing.assert_array_equal(r0["centers"], r1["centers"])


def test_seeds_come_from_rank_0(ranks: list[dict[str, Any]]) -> None:
    drawn = [res["seed_none"]["drawn"] for res in ranks]
    assert drawn[0] == drawn[1]
    assert len(set(drawn[0])) == 2  # one seed per run


def test_float32_matches_single_process(ranks: list[dict[str, Any]]) -> None:
    X, _ = _data()
    ref = rk.RBFKMeans(K, assignment="softmax", random_state=0).fit(X.astype(np.float32))
    np.testing.assert_allclose(ranks[0]["float32"]["centers"], ref.cluster_centers_, atol=1e-4)


def test_callable_init_uses_rank_0(ranks: list[dict[str, Any]]) -> None:
    X, _ = _data()
    ref = rk.RBFKMeans(K, assignment="hard", init=X[:K]).fit(X)
    np.testing.assert_allclose(ranks[1]["callable_init"]["centers"], ref.cluster_centers_,
                               atol=1e-6)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("tiny_shard", lambda X: rk.RBFKMeans(K, assignment="entmax15", random_state=0).fit(X)),
        ("relocation", lambda X: rk.RBFKMeans(
            K, assignment="hard", init=np.vstack([np.full((1, 3), 1e3), X[1:K]])).fit(X)),
    ],
)
def test_edge_cases_match_single_process(
    ranks: list[dict[str, Any]], name: str, make: Callable[[np.ndarray], rk.RBFKMeans]
) -> None:
    X, _ = _data()
    ref = make(X)
    assert np.abs(ref.cluster_centers_).max() < 100  # the far centroid was relocated
    for res in ranks:
        assert not isinstance(res[name], tuple), res[name]
        np.testing.assert_allclose(res[name]["centers"], ref.cluster_centers_, atol=1e-6)


def test_swap_search_equals_single_process(ranks: list[dict[str, Any]]) -> None:
    from rbfkmeans.lloyd import lloyd
    from rbfkmeans.passes import Data
    from rbfkmeans.swaps import swap_search

    X, w, C0 = _swap_data()
    data = Data(torch.as_tensor(X), torch.as_tensor(w))
    ref = swap_search(data, lloyd(data, torch.as_tensor(C0)),
                      generator=torch.Generator().manual_seed(0))
    assert ref.n_swaps == 1
    for res in ranks:
        got = res["swaps"]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.C.numpy(), atol=1e-9)
        assert got["inertia"] == pytest.approx(ref.inertia, rel=1e-9)
        assert (got["n_swaps"], got["n_trials"], got["n_iter"]) == \
            (ref.n_swaps, ref.n_trials, ref.n_iter)
        np.testing.assert_array_equal(got["labels"], ref.labels.numpy())


def test_a_far_row_on_one_rank_is_the_split_of_one_process(ranks: list[dict[str, Any]]) -> None:
    """The farthest row of a cluster lies in rank 1's shard: both ranks take it (gathered) as
    that cluster's split, as one process does."""
    from rbfkmeans.costs import swap_costs
    from rbfkmeans.passes import Data

    X, w, C, labels = _far_row_data()
    removal, gain, halves = swap_costs(Data(torch.as_tensor(X), torch.as_tensor(w)),
                                       torch.as_tensor(C), torch.as_tensor(labels),
                                       generator=torch.Generator().manual_seed(0))
    j = int(labels[N - 3])
    np.testing.assert_array_equal(halves[j, 0].numpy(), X[N - 3])  # the far row's split
    for res in ranks:
        got = res["far_row"]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["removal"], removal.numpy(), rtol=1e-9)
        np.testing.assert_allclose(got["gain"], gain.numpy(), rtol=1e-9)
        np.testing.assert_allclose(got["halves"][j], halves[j].numpy(), rtol=1e-9)


def test_hartigan_on_wide_data_equals_single_process(ranks: list[dict[str, Any]]) -> None:
    """Each rank bounds its own rows; the candidates and steps are those of one process."""
    from rbfkmeans.hartigan import hartigan
    from rbfkmeans.passes import Data

    X, w, start = _hartigan_data()
    ref = hartigan(Data(torch.as_tensor(X), torch.as_tensor(w)), torch.as_tensor(start), K)
    assert ref.n_moves > 0
    assert ref.converged
    for res in ranks:
        got = res["hartigan_wide"]
        assert not isinstance(got, tuple), got
        assert (got["n_passes"], got["n_moves"]) == (ref.n_passes, ref.n_moves)
        np.testing.assert_array_equal(got["labels"], ref.labels.numpy())
        np.testing.assert_allclose(got["centers"], ref.C.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("name", "k"), [("bounded", K), ("movers", 70)])
def test_bounded_lloyd_equals_single_process(ranks: list[dict[str, Any]], name: str,
                                             k: int) -> None:
    """Hamerly's bounds (k = 6) and, from ``bounds.MOVERS_MIN_K`` centroids on (k = 70), the
    movers' exact distances: each rank bounds its own rows, the steps are one process's."""
    from rbfkmeans.bounds import MOVERS_MIN_K
    from rbfkmeans.lloyd import lloyd
    from rbfkmeans.passes import Data

    assert (k >= MOVERS_MIN_K) == (name == "movers")
    X, w = _data()
    data = Data(torch.as_tensor(X), torch.as_tensor(w))
    ref = lloyd(data, torch.as_tensor(X[:k]), bounds=False)
    for res in ranks:
        got = res[name]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.C.numpy(), rtol=1e-12, atol=1e-12)
        assert got["inertia"] == pytest.approx(ref.inertia, rel=1e-12)
        assert got["n_iter"] == ref.n_iter
        np.testing.assert_array_equal(got["labels"], ref.labels.numpy())


@pytest.mark.parametrize(("name", "limit"), [("race", 0), ("race_uneven", RACE_UNEVEN)])
def test_the_race_of_an_abbreviated_annealing_equals_single_process(
        ranks: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, name: str,
        limit: int) -> None:
    from rbfkmeans import starts

    X, w = _data()
    monkeypatch.setattr(starts, "ANNEAL_WORK", limit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = rk.RBFKMeans(K, random_state=0).fit(X, sample_weight=w)
    for res, rows in zip(ranks, (slice(0, SPLIT), slice(SPLIT, N)), strict=True):
        got = res[name]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.cluster_centers_, rtol=0, atol=1e-6)
        assert got["inertia"] == pytest.approx(ref.inertia_, rel=1e-9)
        assert got["n_iter"] == ref.n_iter_
        np.testing.assert_array_equal(got["labels"], ref.labels_[rows])


@pytest.mark.parametrize("name", list(SPLITS))
def test_shards_cut_anywhere_equal_single_process(ranks: list[dict[str, Any]], name: str) -> None:
    X, w, cut = _split_case(name)
    ref = _fit_split(name, X, w)
    for res, rows in zip(ranks, (slice(0, cut), slice(cut, N)), strict=True):
        got = res[f"split: {name}"]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.cluster_centers_, rtol=0, atol=1e-8)
        assert got["inertia"] == pytest.approx(ref.inertia_, rel=1e-10)
        np.testing.assert_array_equal(got["labels"], ref.labels_[rows])


def test_a_race_on_rows_of_weight_zero_equals_single_process(
        ranks: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from rbfkmeans import starts

    X, _ = _data()
    w = np.r_[_race_weights(0), _race_weights(1)]
    monkeypatch.setattr(starts, "ANNEAL_WORK", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = rk.RBFKMeans(RACE_K, random_state=0).fit(X, sample_weight=w)
    for res, rows in zip(ranks, (slice(0, SPLIT), slice(SPLIT, N)), strict=True):
        got = res["race_some_weightless"]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.cluster_centers_, rtol=0, atol=1e-6)
        assert got["inertia"] == pytest.approx(ref.inertia_, rel=1e-9)
        np.testing.assert_array_equal(got["labels"], ref.labels_[rows])


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        ("too_few", ["n_samples=3 should be >= n_clusters=6"] * 2),
        ("nan_on_one_rank", ["rejected on rank(s) [1]", "NaN"]),
        ("widths_differ", ["same number of features on every rank; got [3, 2]"] * 2),
        ("random_init", ["init='random' is not supported under torch.distributed"] * 2),
        ("sparse_on_one_rank", ["sparse X is not supported", "rejected on rank(s) [0]"]),
        ("parameters_differ", ["parameters must be the same on every rank"] * 2),
        ("batch_weights_on_one_rank", ["rejected on rank(s) [1]", "sample_weight must be >= 0"]),
        ("dict_batches_on_one_rank", ["rejected on rank(s) [1]", "got a dict with keys 'x'"]),
        ("weightless_everywhere",
         ["sample_weight must contain at least one non-zero weight over all ranks"] * 2),
    ],
)
def test_bad_input_raises_on_every_rank(
    ranks: list[dict[str, Any]], name: str, messages: list[str]
) -> None:
    for res, message in zip(ranks, messages, strict=True):
        kind, cls, text = res[name]
        assert kind == "error"
        # the rank whose own rows hold NaN raises NonFiniteError (a ValueError), the others
        # ValueError naming it
        expected = ("TypeError" if "got a dict" in message
                    else "NonFiniteError" if message == "NaN" else "ValueError")
        assert cls == expected
        assert message in text


@pytest.mark.parametrize("name", ["own_settings", "weights_on_one_rank", "dtypes_differ"])
def test_shards_that_differ_in_what_they_may_fit_the_concatenation(
        ranks: list[dict[str, Any]], name: str) -> None:
    """Weights passed on one rank only (the other's rows weigh 1) had deadlocked; a float32
    shard beside a float64 one had left the ranks with different centroids (each computed in
    its own dtype). A different ``random_state`` or ``chunk_size`` per rank is allowed."""
    X, _ = _data()
    w = None
    if name == "weights_on_one_rank":
        w = np.r_[np.full(len(_part(X, 0)), 2.0), np.ones(len(_part(X, 1)))]
    if name == "dtypes_differ":
        X = np.r_[_part(X, 0).astype(np.float32).astype(np.float64), _part(X, 1)]
    ref = rk.RBFKMeans(K, random_state=0).fit(X, sample_weight=w)
    for res in ranks:
        got = res[name]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.cluster_centers_, rtol=1e-6, atol=1e-6)
        assert got["inertia"] == pytest.approx(ref.inertia_, rel=1e-9)
    np.testing.assert_array_equal(ranks[0][name]["centers"].astype(np.float32),
                                  ranks[1][name]["centers"].astype(np.float32))


@pytest.mark.parametrize("name", ["empty_shard", "weightless_shard"])
def test_a_shard_without_rows_or_weight_fits_the_others(
        ranks: list[dict[str, Any]], name: str) -> None:
    """A rank with no rows, or whose rows all weigh 0, where the others have some: the fit of
    the concatenation, on every rank (it was refused on that rank, so on every rank; with the
    refusal lifted, a subsample's empty share then failed in the wide group pass)."""
    X, w = _data()
    if name == "empty_shard":
        ref = rk.RBFKMeans(K, random_state=0).fit(X, sample_weight=w)
    else:  # the concatenation with rank 1's rows weighing nothing
        ref = rk.RBFKMeans(K, random_state=0).fit(
            X, sample_weight=np.r_[_part(w, 0), np.zeros(N - SPLIT)])
    for res in ranks:
        got = res[name]
        assert not isinstance(got, tuple), got
        np.testing.assert_allclose(got["centers"], ref.cluster_centers_, rtol=0, atol=1e-9)
        assert got["inertia"] == pytest.approx(ref.inertia_, rel=1e-9)
    if name == "empty_shard":
        np.testing.assert_array_equal(ranks[0][name]["labels"], ref.labels_)
        assert ranks[1][name]["labels"].shape == (0,)


def test_fit_batches_sums_each_step_over_ranks(ranks: list[dict[str, Any]]) -> None:
    """Step i of the distributed stream is the step on rank 0's batch i and rank 1's batch i
    together; a rank that has run out adds nothing."""
    X, _ = _data()
    b0, b1 = _batches(X[:SPLIT]), _batches(X[SPLIT:])
    merged = [np.vstack([a, b]) for a, b in zip(b0, b1, strict=False)] + b1[len(b0):]
    ref = rk.RBFKMeans(K, assignment="hard", random_state=0).fit_batches(merged)
    r0, r1 = ranks[0]["batches"], ranks[1]["batches"]
    np.testing.assert_array_equal(r0["centers"], r1["centers"])
    assert r0["n_iter"] == ref.n_iter_ == len(b1)
    np.testing.assert_allclose(r0["centers"], ref.cluster_centers_, atol=1e-9)


def test_ddp_keeps_the_layer_in_sync(ranks: list[dict[str, Any]]) -> None:
    """DistributedDataParallel broadcasts rank 0's centroids and averages their gradients: both
    ranks hold the centroids of single-process training on the mean of the ranks' losses."""
    model = _Model(seed=0)
    for x0, x1 in zip(_ddp_batches(0), _ddp_batches(1), strict=True):
        ((model(x0) + model(x1)) / 2).backward()
        _sgd(model)
    ref = {k: v.detach().numpy() for k, v in model.state_dict().items()
           if isinstance(v, torch.Tensor)}
    assert set(ranks[0]["ddp"]) == set(ref)
    assert "cluster.centroids" in ref
    for key, value in ref.items():
        np.testing.assert_array_equal(ranks[0]["ddp"][key], ranks[1]["ddp"][key])
        np.testing.assert_allclose(ranks[0]["ddp"][key], value, rtol=0, atol=1e-10)
    assert not np.allclose(ref["cluster.centroids"], _Model(seed=0).cluster.centroids.detach())


def test_broadcast_module(ranks: list[dict[str, Any]]) -> None:
    for res in ranks:
        np.testing.assert_array_equal(res["broadcast"], np.ones((3, 2), dtype=np.float32))


def test_local_only_fits_the_shard_alone(ranks: list[dict[str, Any]]) -> None:
    X, _ = _data()
    for r, res in enumerate(ranks):
        ref = rk.RBFKMeans(K, assignment="hard", random_state=0).fit(_part(X, r))
        np.testing.assert_array_equal(res["local"]["centers"], ref.cluster_centers_)
        assert res["local"]["group_kept"] is True


def test_warnings_and_progress_on_rank_0_only(ranks: list[dict[str, Any]]) -> None:
    r0, r1 = ranks[0]["rank0_messages"], ranks[1]["rank0_messages"]
    assert any("did not settle" in m for m in r0["warnings"])
    assert "anneal" in r0["stderr"]
    assert r1 == {"warnings": [], "stderr": ""}


def test_farthest_points_drops_padding(ranks: list[dict[str, Any]]) -> None:
    for res in ranks:
        np.testing.assert_array_equal(res["farthest"], [[5.0, 5.0]])


# ---------------------------------------------------------------------------------------------
# helpers without a group
# ---------------------------------------------------------------------------------------------


def test_shard_bounds_cover_rows_in_order() -> None:
    for n, parts in [(10, 3), (2, 4), (0, 2), (7, 1)]:
        bounds = [shard_bounds(n, parts, i) for i in range(parts)]
        assert [b.start for b in bounds] == [0] + [b.stop for b in bounds[:-1]]
        assert bounds[-1].stop == n
        sizes = [b.stop - b.start for b in bounds]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == [len(a) for a in np.array_split(np.arange(n), parts)]


def test_shard_is_a_view_and_single_process_defaults() -> None:
    X = np.arange(20.0).reshape(10, 2)
    assert not is_distributed()
    assert np.shares_memory(shard(X, 3, 1), X)
    np.testing.assert_array_equal(shard(X), X)  # one process: everything
    assert torch.equal(gather_rows(torch.arange(3)), torch.arange(3))
    layer = rk.KMeansLayer(torch.zeros(2, 2))
    assert broadcast_module(layer) is layer


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": -1, "n_shards": 2, "index": 0}, "n must be an integer >= 0; got -1"),
        ({"n": 5, "n_shards": 0, "index": 0}, "n_shards must be an integer >= 1; got 0"),
        ({"n": 5, "n_shards": 2, "index": 2}, "index must be an integer in [0, 2); got 2"),
    ],
)
def test_shard_bounds_rejects(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        shard_bounds(**kwargs)


def test_process_group_rejects_unknown_backend() -> None:
    with pytest.raises(ValueError, match=r"backend must be a torch\.distributed backend name"), \
            process_group("carrier-pigeon"):
        pass


def _verbose_worker(rank: int, port: int, out: str) -> None:
    """A hard cosine fit whose Lloyd runs take bounded passes (n k >= 2^20), verbose on no
    rank, on rank 0 only and on both: every rank must take the same passes."""
    import warnings

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    X = np.random.default_rng(rank).normal(size=(9000, 3)) + 0.5
    results: dict[str, Any] = {}
    with process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                       world_size=WORLD, timeout_s=60):
        for name, verbose in (("quiet", 0), ("rank0", int(rank == 0)), ("all", 1)):
            est = rk.RBFKMeans(64, assignment="hard", metric="cosine", random_state=0,
                               verbose=verbose, max_iter=30).fit(X)
            results[name] = (est.cluster_centers_, est.inertia_)
    save_rank(out, rank, results)


def test_a_verbose_rank_takes_the_passes_of_the_others(tmp_path: Path) -> None:
    """Rank 0's progress bar gave its Lloyd runs a callback, which turns bounded passes into
    full ones, while the other ranks took bounded passes: their sums differed in size and gloo
    aborted the fit ('Received data size doesn't match expected size. 520 vs 512'). Now every
    rank takes callbacks where any rank is verbose: the ranks end with one model, the quiet
    fit's up to the rounding of full passes against bounded ones."""
    ranks = run_ranks(_verbose_worker, tmp_path, world=WORLD, start_method="spawn")
    quiet_C, quiet_J = ranks[0]["quiet"]
    for name in ("quiet", "rank0", "all"):
        C, J = ranks[0][name]
        np.testing.assert_array_equal(ranks[1][name][0], C)
        assert ranks[1][name][1] == J
        np.testing.assert_allclose(C, quiet_C, rtol=1e-12, atol=1e-12)
        assert abs(J - quiet_J) <= 1e-12 * abs(quiet_J)


def _agreement_worker(rank: int, port: int, out: str) -> None:
    """Settings that differ between the ranks, and settings that only look different."""
    import functools
    import warnings

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    X = np.random.default_rng(rank).normal(size=(200, 3))
    results: dict[str, Any] = {}

    def attempt(name: str, make: Callable[[], Any]) -> None:
        try:
            make()
            results[name] = "ok"
        except ValueError as exc:
            results[name] = str(exc)

    big = torch.zeros(40, 3, dtype=torch.float64)  # differs in one entry only: its repr agrees
    big[7, 1] = 1e-6 * rank
    with process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                       world_size=WORLD, timeout_s=60):
        attempt("fb_k", lambda: rk.RBFKMeans(3 + rank, random_state=0).fit_batches([X]))
        attempt("fb_epochs", lambda: rk.RBFKMeans(3, random_state=0).fit_batches(
            [X], n_epochs=1 + rank))
        attempt("fb_dtype", lambda: rk.RBFKMeans(
            3, dtype=("float32", "float64")[rank], random_state=0).fit_batches([X]))
        attempt("fit_numpy_scalars", lambda: rk.RBFKMeans(
            (3, np.int64(3))[rank], tol=(1e-4, np.float64(1e-4))[rank], random_state=0).fit(X))
        attempt("fit_init_list", lambda: rk.RBFKMeans(
            3, init=([[0, 0, 0], [1, 1, 1], [2, 2, 2]], np.arange(9.0).reshape(3, 3) // 3)[rank],
            n_init=1, random_state=0).fit(X))
        attempt("fit_big_init", lambda: rk.RBFKMeans(40, init=big, n_init=1).fit(
            np.concatenate([X, X])))
        attempt("fit_partial_lr", lambda: rk.RBFKMeans(
            3, solver="gradient", random_state=0,
            optimizer=functools.partial(torch.optim.SGD, lr=0.1 * (1 + rank))).fit(X))
    save_rank(out, rank, results)


def test_ranks_agree_on_settings_and_name_those_that_differ(tmp_path: Path) -> None:
    """fit_batches had no agreement check (different n_clusters or n_epochs hung; a different
    dtype mixed the statistics); fit's check compared a large tensor init by its abbreviated
    repr (a differing one ran on mixed statistics), a functools.partial by its name (a
    different lr hung), and refused equal values of other types (3 and np.int64(3), a list
    and the equal array). Every rank now raises naming what differs, or fits."""
    ranks = run_ranks(_agreement_worker, tmp_path, world=WORLD, start_method="spawn")
    for r in ranks:
        assert "n_clusters differs" in r["fb_k"]
        assert "n_epochs differs" in r["fb_epochs"]
        assert "dtype differs" in r["fb_dtype"]
        assert r["fit_numpy_scalars"] == "ok"
        assert r["fit_init_list"] == "ok"
        assert "init differs" in r["fit_big_init"]
        assert "optimizer differs" in r["fit_partial_lr"]
