"""Devices and reduced-precision input.

The estimator computes on ``device`` (any torch device) and always returns NumPy arrays;
float16/bfloat16 data (NumPy or torch, any device) is computed in float32. The CUDA tests are
skipped when no GPU is present; the NCCL one needs two GPUs.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from sklearn.datasets import make_blobs

import rbfkmeans as rk

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")




def _blobs(n: int = 400, d: int = 4, k: int = 5, seed: int = 0) -> np.ndarray:
    X, _ = make_blobs(n_samples=n, n_features=d, centers=k, random_state=seed)
    return X


def _outputs(est: rk.RBFKMeans, X: Any) -> dict[str, Any]:
    return {
        "centers": est.cluster_centers_, "labels": est.labels_, "inertia": est.inertia_,
        "predict": est.predict(X), "proba": est.predict_proba(X), "transform": est.transform(X),
        "score": est.score(X),
    }


# ---------------------------------------------------------------------------------------------
# CPU: explicit devices, reduced precision
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
def test_cpu_device_spellings_agree(device: Any) -> None:
    X = _blobs()
    ref = _outputs(rk.RBFKMeans(5, assignment="entmax15", random_state=0).fit(X), X)
    got = _outputs(rk.RBFKMeans(5, assignment="entmax15", random_state=0, device=device)
                   .fit(X), X)
    for key, value in ref.items():
        np.testing.assert_array_equal(got[key], value)
        if isinstance(value, np.ndarray):
            assert isinstance(got[key], np.ndarray)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_precision_tensor_is_fitted_in_float32(half: torch.dtype) -> None:
    Xh = torch.from_numpy(_blobs()).to(half)
    X32 = Xh.float()  # the values the reduced-precision data actually holds
    est = rk.RBFKMeans(5, assignment="softmax", random_state=0).fit(Xh)
    ref = rk.RBFKMeans(5, assignment="softmax", random_state=0).fit(X32)
    assert est.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(est.predict(Xh), ref.predict(X32))
    proba = est.predict_proba(Xh)
    assert proba.dtype == np.float32
    assert np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    assert Xh.dtype == half  # the caller's tensor is untouched


def test_float16_numpy_and_explicit_float64() -> None:
    X16 = _blobs().astype(np.float16)
    before = X16.copy()
    est = rk.RBFKMeans(5, assignment="hard", random_state=0).fit(X16)
    ref = rk.RBFKMeans(5, assignment="hard", random_state=0).fit(X16.astype(np.float32))
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(X16, before)
    est64 = rk.RBFKMeans(5, assignment="hard", random_state=0, dtype="float64").fit(X16)
    assert est64.cluster_centers_.dtype == np.float32  # returned in the input's (float32) dtype
    np.testing.assert_allclose(est64.cluster_centers_, ref.cluster_centers_, atol=1e-4)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_precision_batches(half: torch.dtype) -> None:
    X = torch.from_numpy(_blobs(n=600)).to(half)
    est = rk.RBFKMeans(5, assignment="hard", random_state=0).fit(iter(X.split(100)))
    ref = rk.RBFKMeans(5, assignment="hard", random_state=0).fit(iter(X.float().split(100)))
    assert est.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)


def test_half_precision_layer_and_partial_fit() -> None:
    X = torch.from_numpy(_blobs()).to(torch.bfloat16)
    est = rk.RBFKMeans(5, assignment="hard", random_state=0).partial_fit(X[:50])
    est.partial_fit(X[50:100])
    assert est.cluster_centers_.dtype == np.float32
    layer = est.to_layer(temperature=1.0, assignment="softmax")
    R = layer(X)
    assert R.dtype == torch.float32
    torch.testing.assert_close(R.sum(dim=1), torch.ones(X.shape[0]))


@pytest.mark.parametrize("device", ["not-a-device", 3.5])
def test_bad_device_is_named(device: Any) -> None:
    with pytest.raises((ValueError, RuntimeError), match="device"):
        rk.RBFKMeans(5, device=device).fit(_blobs())


# ---------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("assignment", ["hard", "softmax", "entmax15", "sparsemax"])
def test_cuda_fit_matches_cpu(assignment: str) -> None:
    X = _blobs(n=2000, d=8, k=6)
    kwargs = {"assignment": assignment, "random_state": 0, "chunk_size": 500}
    cpu = rk.RBFKMeans(6, **kwargs).fit(X)
    gpu = rk.RBFKMeans(6, device="cuda", **kwargs).fit(X)
    np.testing.assert_allclose(gpu.cluster_centers_, cpu.cluster_centers_, atol=1e-8)
    assert gpu.inertia_ == pytest.approx(cpu.inertia_, rel=1e-9)
    out = _outputs(gpu, X)
    ref = _outputs(cpu, X)
    for key in ("labels", "predict"):
        np.testing.assert_array_equal(out[key], ref[key])
    for key in ("proba", "transform"):
        assert isinstance(out[key], np.ndarray)
        np.testing.assert_allclose(out[key], ref[key], atol=1e-8)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_cuda_half_tensor_input(half: torch.dtype) -> None:
    Xh = torch.from_numpy(_blobs(n=1000)).to("cuda", half)
    est = rk.RBFKMeans(5, assignment="entmax15", random_state=0, device="cuda").fit(Xh)
    ref = rk.RBFKMeans(5, assignment="entmax15", random_state=0).fit(Xh.float().cpu())
    assert est.cluster_centers_.dtype == np.float32
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, atol=1e-3)
    np.testing.assert_array_equal(est.predict(Xh), ref.predict(Xh.float().cpu()))


@pytest.mark.gpu
@needs_cuda
def test_cuda_streaming_gradient_and_layer() -> None:
    X = _blobs(n=3000, d=8, k=6)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(X)),
                                         batch_size=500)
    gpu = rk.RBFKMeans(6, assignment="hard", random_state=0, device="cuda").fit(loader)
    cpu = rk.RBFKMeans(6, assignment="hard", random_state=0).fit(loader)
    np.testing.assert_allclose(gpu.cluster_centers_, cpu.cluster_centers_, atol=1e-8)
    grad = rk.RBFKMeans(6, assignment="softmax", solver="gradient", random_state=0,
                        device="cuda", max_iter_per_temperature=5).fit(X[:500])
    assert np.isfinite(grad.cluster_centers_).all()
    layer = rk.KMeansLayer(torch.from_numpy(X[:6]).cuda(), temperature=0.5,
                           assignment="entmax15")
    x = torch.from_numpy(X[:64]).cuda().requires_grad_(True)
    layer(x).pow(2).sum().backward()
    assert x.grad is not None
    assert layer.centroids.grad is not None
    assert layer.centroids.grad.is_cuda


def _nccl_worker(rank: int, port: int, X: np.ndarray, out: dict[int, Any]) -> None:
    from rbfkmeans.distributed import process_group, shard

    os.environ["LOCAL_RANK"] = str(rank)
    with process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2):
        est = rk.RBFKMeans(6, assignment="entmax15", random_state=0,
                           device=f"cuda:{rank}").fit(shard(X))
        out[rank] = est.cluster_centers_


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_nccl_two_gpus_match_one_process() -> None:
    X = _blobs(n=2000, d=8, k=6)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    manager = mp.get_context("spawn").Manager()
    out = manager.dict()
    mp.start_processes(_nccl_worker, args=(port, X, out), nprocs=2, start_method="spawn")
    ref = rk.RBFKMeans(6, assignment="entmax15", random_state=0).fit(X)
    for r in range(2):
        np.testing.assert_allclose(out[r], ref.cluster_centers_, atol=1e-6)
