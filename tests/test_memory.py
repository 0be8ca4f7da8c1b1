"""Bounded memory: no pass over data larger than a chunk allocates an n x k matrix, or a copy of X.

Structural checks, not timings: a ``TorchDispatchMode`` sees every tensor the library allocates
(outputs of aten ops that do not share storage with an input) and ``tracemalloc`` sees NumPy's
allocations. With ``n`` rows, ``chunk_size`` rows per chunk and ``k`` clusters, the largest single
allocation of a fit, ``predict`` or ``score`` must stay below half a copy of ``X`` and hold at
most a few chunks' worth of memberships (``4 x chunk x k``, far below ``n x k``); what may
legitimately be O(n) is a few vectors (row norms, labels, the k-means++ distances), and the
annealing subsample of the event-driven ladder (below half of ``X``, unless that copy is small:
``rbfkmeans.splits.SMALL_COPY`` entries). The
peak-RSS figures for n up to 4 million are in ``benchmarks/bench_scale.py``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import rbfkmeans as rk
from rbfkmeans import splits

N, D, K, CHUNK = 6_000, 64, 32, 500

# short fits on purpose (a few passes are enough to see every allocation)
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


class _Allocations(TorchDispatchMode):
    """Records the largest new storage (bytes) any aten op returns, its op and its numel.

    Outputs that share storage with an input (views, in-place results) are not allocations.
    Storages under ``floor`` bytes are not examined (speed)."""

    def __init__(self, floor: int = 1 << 16) -> None:
        super().__init__()
        self.floor = floor
        self.largest = 0
        self.op = ""
        self.largest_numel = 0
        self.copied_rows = 0  # the most rows of X gathered at once (the annealing subsample)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        big = [t for t in (out if isinstance(out, tuple | list) else (out,))
               if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() >= self.floor]
        if big:
            inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                      if isinstance(t, torch.Tensor)}
            for t in big:
                storage = t.untyped_storage()
                if storage.data_ptr() in inputs:
                    continue  # a view or an in-place result
                if func is torch.ops.aten.index.Tensor and t.dim() == 2 and t.shape[1] == D:
                    self.copied_rows = max(self.copied_rows, int(t.shape[0]))  # X[idx]
                    continue
                if storage.nbytes() > self.largest:
                    self.largest, self.op = storage.nbytes(), str(func)
                self.largest_numel = max(self.largest_numel, t.numel())
        return out


with _Allocations():  # first use imports what the mode needs, outside any measurement
    torch.zeros(1).add_(1)


@contextmanager
def _measured() -> Iterator[dict[str, Any]]:
    """Largest torch allocation (bytes, op) and NumPy's peak (bytes) inside the block."""
    result: dict[str, Any] = {}
    mode = _Allocations()
    tracemalloc.start()
    try:
        with mode:
            yield result
    finally:
        _, numpy_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result.update(torch=mode.largest, op=mode.op, numel=mode.largest_numel,
                      rows=mode.copied_rows, numpy=numpy_peak)


def _data(dtype: type = np.float32) -> np.ndarray:
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=5.0, size=(K, D))
    X = centers[rng.integers(0, K, size=N)] + rng.normal(size=(N, D))
    return X.astype(dtype)


def _bounds_bytes(n: int, k: int) -> int:
    """What a wide Lloyd run keeps besides its passes: ``t`` float32 lower bounds per row
    (:func:`rbfkmeans.kernels.bound_groups`: ``k / 8`` groups, ``k`` up to 16 centroids, at
    most 2^26 in all) and four length-n vectors (upper bounds, squared norms, two label
    arrays). Its result keeps them for a run that starts from it (up to
    ``kernels.KEPT_LOWER_BOUNDS``); a fit holds at most three such results at once (the swap
    search's start, its best, the last trial) besides the run under way: four sets."""
    from rbfkmeans.kernels import bound_groups

    return n * bound_groups(n, k) * 4 + 4 * n * 8


def _check(m: dict[str, Any], X: np.ndarray, numpy_bound: float = 0.5, batch: int = 0) -> None:
    """At most a few chunks' memberships (the sparse mappings keep a 4 x chunk x k scratch), a
    few length-n vectors or one streamed batch at once; never half a copy of ``X`` (besides
    the bounds of wide Lloyd runs, a fraction of a row each)."""
    # the event-driven ladder anneals on a random subsample of at most max(4096, 64 k) rows,
    # and of half the rows or more only when that copy is small
    rows = m["rows"]
    assert rows <= max(4096, 64 * K), m
    assert 2 * rows < N or rows * D <= splits.SMALL_COPY, m
    assert m["numel"] <= max(4 * CHUNK * K, 8 * N, batch * D), m  # n x k: 3 times
    assert m["torch"] < X.nbytes / 2, f"torch allocated {m['torch']} bytes in {m['op']}"
    allowed = numpy_bound * X.nbytes + (4 * _bounds_bytes(N, K) if X.shape[1] > 16 else 0)
    assert m["numpy"] < allowed, f"numpy allocated up to {m['numpy']} bytes"




_FITS: dict[str, dict[str, Any]] = {
    "hard_kmeans++": {"assignment": "hard", "max_iter": 3},
    "softmax": {"assignment": "softmax", "cooling": 0.2, "max_iter_per_temperature": 2,
                "max_iter": 2},
    "entmax15_weighted": {"assignment": "entmax15", "cooling": 0.2,
                          "max_iter_per_temperature": 2, "max_iter": 2, "w": True},
    "sparsemax_float64": {"assignment": "sparsemax", "cooling": 0.2,
                          "max_iter_per_temperature": 2, "max_iter": 2, "dtype64": True},
}


@pytest.mark.parametrize("name", list(_FITS))
def test_fit_never_holds_n_by_k(name: str) -> None:
    spec = dict(_FITS[name])
    weighted, dtype64 = spec.pop("w", False), spec.pop("dtype64", False)
    X = _data(np.float64 if dtype64 else np.float32)
    w = np.linspace(0.5, 2.0, N) if weighted else None
    est = rk.RBFKMeans(K, chunk_size=CHUNK, random_state=0, **spec)
    with _measured() as m:
        est.fit(X, sample_weight=w)
    _check(m, X)
    assert est.labels_.shape == (N,)


def test_predict_and_score_are_chunked() -> None:
    X = _data()
    est = rk.RBFKMeans(K, assignment="hard", max_iter=2, chunk_size=CHUNK, random_state=0).fit(X)
    with _measured() as m:
        labels = est.predict(X)
        score = est.score(X)
    _check(m, X)
    assert labels.shape == (N,)
    assert score == pytest.approx(-est.inertia_, rel=1e-5)


def test_memmap_is_used_in_place(tmp_path: Path) -> None:
    """A float32 memmap is read where it lies: no copy of it in NumPy or torch."""
    X = _data()
    path = tmp_path / "X.npy"
    np.save(path, X)
    mm = np.load(path, mmap_mode="r")
    est = rk.RBFKMeans(K, assignment="softmax", cooling=0.2, max_iter_per_temperature=2,
                       max_iter=2, chunk_size=CHUNK, random_state=0)
    with _measured() as m:
        est.fit(mm)
    _check(m, X)
    ref = rk.RBFKMeans(K, assignment="softmax", cooling=0.2, max_iter_per_temperature=2,
                       max_iter=2, chunk_size=CHUNK, random_state=0).fit(X)
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)


def _chunks(X: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for i in range(0, X.shape[0], size):
        yield X[i : i + size]


@pytest.mark.parametrize(
    "source",
    [
        lambda X: _chunks(X, 2_000),
        lambda X: torch.utils.data.DataLoader(  # batches of 2000 rows, one index list each
            torch.utils.data.TensorDataset(torch.from_numpy(X)), batch_size=None,
            sampler=torch.utils.data.BatchSampler(
                torch.utils.data.SequentialSampler(range(X.shape[0])), 2_000, False)),
    ],
    ids=["generator", "dataloader"],
)
def test_streaming_fit_holds_one_batch(source: Callable[[np.ndarray], Any]) -> None:
    X = _data()
    est = rk.RBFKMeans(K, assignment="hard", chunk_size=CHUNK, random_state=0)
    with _measured() as m:
        est.fit(source(X))
    _check(m, X, numpy_bound=1.0, batch=2_000)  # (numpy: Python objects count here too)
    assert est.n_iter_ == N // 2_000
    # a single pass of mini-batch steps lands near the full fit
    full = rk.RBFKMeans(K, assignment="hard", random_state=0).fit(X)
    assert -est.score(X) < 1.5 * full.inertia_


def test_recorder_sees_an_n_by_k_matrix() -> None:
    """The check itself: an unchunked distance matrix is caught."""
    X = _data()
    C = torch.from_numpy(X[:K])
    with _measured() as m:
        rk.sq_distances(torch.from_numpy(X), C)
    assert m["numel"] >= N * K
    with pytest.raises(AssertionError):
        _check(m, X)
