"""Fit RBFKMeans over several processes, or several machines, with torch.distributed.

One machine, two processes (gloo on CPUs; NCCL when every process has a GPU)::

    torchrun --standalone --nproc_per_node 2 examples/distributed_fit.py --check

Two machines with two processes each; run on both, with ``--node_rank 0`` on the first machine,
``--node_rank 1`` on the second, and ``HOST`` the first machine's address (reachable from the
second on port 29500)::

    torchrun --nnodes 2 --nproc_per_node 2 --node_rank 0 \\
        --master_addr HOST --master_port 29500 examples/distributed_fit.py
    torchrun --nnodes 2 --nproc_per_node 2 --node_rank 1 \\
        --master_addr HOST --master_port 29500 examples/distributed_fit.py

Every process reads only its own rows: here they are generated from a seed (the same data on
every rank, of which each keeps its block); with ``--data X.npy`` each rank memory-maps the file
and touches only its block. ``RBFKMeans.fit`` sees an initialised process group and reduces
every statistic over the ranks, so all ranks end with the same centroids, equal to a
single-process fit on the whole data (``--check`` verifies it on rank 0, for small data).
Without ``torchrun`` the script runs as one process.

Threads: ``torchrun`` sets ``OMP_NUM_THREADS=1`` when ``--nproc_per_node > 1``; on a machine with
more cores than processes, set ``OMP_NUM_THREADS`` to cores / processes before ``torchrun``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import numpy as np
import torch

import rbfkmeans as rk
from rbfkmeans.distributed import (
    gather_rows,
    local_device,
    local_only,
    process_group,
    rank,
    shard,
    world_size,
)


def make_data(n: int, d: int, k: int, seed: int = 0) -> np.ndarray:
    """Gaussian blobs, float32 (the same array on every rank)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    return (centres[rng.integers(0, k, size=n)] + rng.normal(size=(n, d))).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help=".npy file (n, d), memory-mapped; default: synthetic")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--clusters", type=int, default=16)
    parser.add_argument("--assignment", default="entmax15")
    parser.add_argument("--backend", default=None, help="gloo or nccl (default: nccl with GPUs)")
    parser.add_argument("--check", action="store_true",
                        help="rank 0 also fits the whole data alone and compares")
    args = parser.parse_args()

    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = local_device() if backend == "nccl" else torch.device("cpu")

    with process_group(backend) if under_torchrun else contextlib.nullcontext():
        if args.data:
            X = np.load(args.data, mmap_mode="r")
        else:
            X = make_data(args.rows, args.features, args.clusters)
        X_local = shard(X)  # this rank's contiguous block of rows (a view)
        est = rk.RBFKMeans(args.clusters, assignment=args.assignment, random_state=0,
                           device=device)
        start = time.perf_counter()
        est.fit(X_local)
        seconds = time.perf_counter() - start
        labels = gather_rows(est.labels_)  # labels_ are local; gathered in rank order
        if rank() == 0:
            print(f"{world_size()} process(es), backend {backend if under_torchrun else '-'}: "
                  f"n={X.shape[0]} d={X.shape[1]} k={args.clusters} fitted in {seconds:.2f} s, "
                  f"inertia {est.inertia_:.6g}, {est.n_iter_} iterations, "
                  f"{len(est.temperatures_)} temperatures, {labels.shape[0]} labels")
        if args.check and rank() == 0:
            with local_only():  # rank 0 alone, on all the rows
                ref = rk.RBFKMeans(args.clusters, assignment=args.assignment, random_state=0,
                                   device=device).fit(np.asarray(X))
            gap = float(np.abs(ref.cluster_centers_ - est.cluster_centers_).max())
            print(f"single-process fit on all rows: inertia {ref.inertia_:.6g}, "
                  f"max |centroid difference| {gap:.3g}, labels equal: "
                  f"{bool(np.array_equal(ref.labels_, labels.numpy()))}")


if __name__ == "__main__":
    main()
