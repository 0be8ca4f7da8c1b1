"""Suite-wide settings: the problems here are tiny, so one intra-op thread is fastest and avoids
oversubscribing small CI machines (modules that need another count set it themselves). The
compiled kernels are built (or loaded from numba's cache) once up front, so that no test's
timing (hypothesis deadlines) or memory measurement includes the compiler.

``RBFKMEANS_TEST_DEVICE=cuda`` (or any torch device) makes it torch's default device for the
run, so that the tensors tests create (and the layer, the mappings and the objectives they
call) live there: ``benchmarks/gpu_check.py`` runs the device-agnostic test files that way."""

from __future__ import annotations

import os

import torch

from rbfkmeans import kernels


def pytest_configure(config: object) -> None:
    torch.set_num_threads(1)
    kernels.warm_up()
    device = os.environ.get("RBFKMEANS_TEST_DEVICE")
    if device:
        torch.set_default_device(device)
