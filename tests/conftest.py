"""Suite-wide settings: the problems here are tiny, so one intra-op thread is fastest and avoids
oversubscribing small CI machines (modules that need another count set it themselves). The
compiled kernels are built (or loaded from numba's cache) once up front, so that no test's
timing (hypothesis deadlines) or memory measurement includes the compiler.

``RBFKMEANS_TEST_DEVICE=cuda`` (or any torch device) makes it torch's default device for the
run, so that the tensors tests create (and the layer, the mappings and the objectives they
call) live there: ``benchmarks/gpu_check.py`` runs the device-agnostic test files that way.

The ``load_benchmark`` fixture imports a script of ``benchmarks/`` by name (they are not a
package), for the tests that check a benchmark's logic or the docs it generates."""

from __future__ import annotations

import os

# scipy reads SCIPY_ARRAY_API once, when it is first imported: set it before anything imports
# scipy (scikit-learn, through rbfkmeans), so that scikit-learn's array API checks run
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from rbfkmeans import warmup


def pytest_configure(config: object) -> None:
    torch.set_num_threads(1)
    warmup.warm_up()
    device = os.environ.get("RBFKMEANS_TEST_DEVICE")
    if device:
        torch.set_default_device(device)


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """``load_benchmark("bench_fit")``: the module ``benchmarks/bench_fit.py``."""
    root = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
