"""Suite-wide settings: the problems here are tiny, so one intra-op thread is fastest and avoids
oversubscribing small CI machines (modules that need another count set it themselves)."""

from __future__ import annotations

import torch


def pytest_configure(config: object) -> None:
    torch.set_num_threads(1)
