"""Run a test's worker in a few gloo processes on 127.0.0.1 and collect what each rank wrote.

A worker is ``worker(rank, port, out_dir)``: it joins the group at ``tcp://127.0.0.1:port``,
runs its scenarios and saves a dict with :func:`save_rank`. :func:`run_ranks` starts the
processes, waits (failing the test past the deadline, the workers killed) and returns the
ranks' dicts in rank order.
"""

from __future__ import annotations

import pickle
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp


def save_rank(out_dir: str | Path, rank: int, results: dict[str, Any]) -> None:
    """Write ``results`` of ``rank`` for :func:`run_ranks`."""
    with open(Path(out_dir) / f"rank{rank}.pkl", "wb") as f:
        pickle.dump(results, f)


def run_ranks(worker: Callable[[int, int, str], None], out_dir: str | Path, *, world: int = 2,
              start_method: str = "spawn", timeout_s: float = 240.0) -> list[dict[str, Any]]:
    """``worker`` in ``world`` processes (``start_method``); the ranks' saved results."""
    with socket.socket() as s:  # a free port for the group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    ctx = mp.start_processes(worker, args=(port, str(out_dir)), nprocs=world, join=False,
                             start_method=start_method)
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the distributed workers did not finish in {timeout_s:g} s")
    results = []
    for r in range(world):
        with open(Path(out_dir) / f"rank{r}.pkl", "rb") as f:
            results.append(pickle.load(f))
    return results
