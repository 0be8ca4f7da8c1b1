"""Suite-wide settings: the problems here are tiny, so one intra-op thread is fastest and avoids
oversubscribing small CI machines (modules that need another count set it themselves). The
compiled kernels are built (or loaded from numba's cache) once up front, so that no test's
timing (hypothesis deadlines) or memory measurement includes the compiler."""

from __future__ import annotations

import torch

from rbfkmeans import kernels


def pytest_configure(config: object) -> None:
    torch.set_num_threads(1)
    kernels.warm_up()
