"""Run a test's worker in a few gloo processes on 127.0.0.1 and collect what each rank wrote.

A worker is ``worker(rank, port, out_dir)``: it joins the group at ``tcp://127.0.0.1:port``,
runs its scenarios and saves a dict with :func:`save_rank`. :func:`run_ranks` starts the
processes, waits (failing the test past the deadline, the workers killed) and returns the
ranks' dicts in rank order. Each rank's stderr goes to ``out_dir/rank{r}.err``; a rank that
dies (an exception, or a signal such as gloo's abort) fails the test with the tail of every
rank's stderr, which a spawned process would otherwise print where pytest does not show it.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

Worker = Callable[[int, int, str], None]


def save_rank(out_dir: str | Path, rank: int, results: dict[str, Any]) -> None:
    """Write ``results`` of ``rank`` for :func:`run_ranks`."""
    with open(Path(out_dir) / f"rank{rank}.pkl", "wb") as f:
        pickle.dump(results, f)


def _logged(rank: int, worker: Worker, port: int, out_dir: str) -> None:
    """``worker`` with this process's stderr (Python's and the C++ runtime's) in a file."""
    err = os.open(Path(out_dir) / f"rank{rank}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stderr.flush()
    os.dup2(err, 2)
    os.close(err)
    worker(rank, port, out_dir)


def _stderr_tails(out_dir: str | Path, world: int, chars: int = 4000) -> str:
    parts = []
    for r in range(world):
        path = Path(out_dir) / f"rank{r}.err"
        text = path.read_text(errors="replace") if path.exists() else "(no stderr file)"
        parts.append(f"--- rank {r} stderr ---\n{text[-chars:] or '(empty)'}")
    return "\n".join(parts)


def run_ranks(worker: Worker, out_dir: str | Path, *, world: int = 2,
              start_method: str = "spawn", timeout_s: float = 240.0) -> list[dict[str, Any]]:
    """``worker`` in ``world`` processes (``start_method``); the ranks' saved results."""
    with socket.socket() as s:  # a free port for the group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    ctx = mp.start_processes(_logged, args=(worker, port, str(out_dir)), nprocs=world,
                             join=False, start_method=start_method)
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                pytest.fail(f"the distributed workers did not finish in {timeout_s:g} s\n"
                            + _stderr_tails(out_dir, world))
    except ProcessException as exc:
        pytest.fail(f"{exc}\n{_stderr_tails(out_dir, world)}")
    results = []
    for r in range(world):
        with open(Path(out_dir) / f"rank{r}.pkl", "rb") as f:
            results.append(pickle.load(f))
    return results
