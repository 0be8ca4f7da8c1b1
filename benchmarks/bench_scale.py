"""Scale: throughput of one vs two processes under torch.distributed, and peak memory against n.

Throughput (workload W: ``make_blobs`` n=200,000, d=32, k=64, float32). One clustering iteration
is one :func:`~rbfkmeans.stats.cluster_stats` pass (all-reduced over the ranks) plus the update
``c_j <- S_j / N_j``; it is timed for hard, softmax and entmax-1.5 memberships, and a whole
annealed fit (entmax-1.5, the default) is timed too, in three layouts, each in fresh processes:

* one process, 2 threads (the usual single-process run);
* one process, 1 thread;
* two processes of 1 thread each, gloo on 127.0.0.1, each holding half of the rows
  (``rbfkmeans.distributed.shard``) -- what ``torchrun --nproc_per_node 2`` runs.

Reported as points per second and as the ratio of the two-process layout to each one-process
layout, measured in one run. The machine has 2 cores (shared), so the interesting numbers are the
cost of the collectives (2 x 1 thread against 1 x 2 threads) and the scaling over 1 x 1 thread.

Memory: for n = 1e5 ... 4e6 (d=32, k=256, float32) a fresh process generates the
data, resets the kernel's peak-RSS mark (``/proc/self/clear_refs``), runs a short annealed fit
(entmax-1.5 from the mean: 4 temperatures, then the hard polish) and ``predict`` on one thread,
and reads the peak back (``VmHWM``; the kernels of :mod:`rbfkmeans.kernels` are loaded before
the reset, so numba's code is not counted). The growth over the RSS with the data loaded must stay
bounded (the target: at most 512 MB over the data). Also: hard k-means++ + Lloyd at n=1e6, a
fit reading a ``numpy.memmap`` and ``fit_batches`` streaming a memmap (there file pages count in
RSS as they are read; the anonymous RSS, sampled every 5 ms, is what the process allocates).
Each memory run is repeated (the row keeps the largest growth, and lists every run's) and run
once more with glibc's mmap threshold fixed (``MALLOC_MMAP_THRESHOLD_``): the allocator's
retention moves the default peak between runs, the fixed threshold shows what the fit holds.

Run by hand: ``python benchmarks/bench_scale.py [--quick] [--part throughput|memory|all]``; writes
``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rbfkmeans as rk
from rbfkmeans import warmup
from rbfkmeans.comm import Comm
from rbfkmeans.distributed import process_group, shard
from rbfkmeans.passes import Data
from rbfkmeans.stats import cluster_stats

RESULTS = Path(__file__).parent / "results" / "scale.json"
MB = 1 << 20


# ---------------------------------------------------------------------------------------------
# throughput
# ---------------------------------------------------------------------------------------------


def _workload(n: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(n_samples=n, n_features=d, centers=k, random_state=0)
    X = X.astype(np.float32)
    return X, X[:k].copy()  # make_blobs shuffles: the first k rows are a fair start


def _iteration_seconds(X: torch.Tensor, C: torch.Tensor, assignment: str, T: float,
                       comm: Comm, repeat: int) -> float:
    """Median over ``repeat`` of one pass + update; the slowest rank's time (max over ranks)."""
    times = []
    data = Data(X, comm=comm)
    for rep in range(repeat + 1):
        comm.sum_(torch.zeros(1))  # line the ranks up
        t0 = time.perf_counter()
        st = cluster_stats(data, C, T, assignment)
        _ = st.S / st.N.clamp(min=1e-12).unsqueeze(1)
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        if comm.active:
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if rep:  # the first is a warm-up
            times.append(float(dt))
    return statistics.median(times)


def _throughput_worker(rank: int, world: int, threads: int, port: int, cfg: dict[str, Any],
                       out: str) -> None:
    torch.set_num_threads(threads)
    warmup.warm_up()  # the kernels loaded (or compiled) before any timing, in every worker
    X, C0 = _workload(cfg["n"], cfg["d"], cfg["k"])
    ctx = process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world) if world > 1 else None
    if ctx is not None:
        ctx.__enter__()
    try:
        comm = Comm.auto()
        Xl = torch.from_numpy(np.ascontiguousarray(shard(X, world, rank)))
        C = torch.from_numpy(C0)
        res: dict[str, Any] = {}
        for assignment, T in (("hard", 0.0), ("softmax", 1.0), ("entmax15", 1.0)):
            res[f"{assignment}_iteration_s"] = _iteration_seconds(
                Xl, C, assignment, T, comm, cfg["repeat"])
        if comm.active:  # the collective of one iteration alone: N (k,), S (k, d), 3 scalars
            N, S, extra = torch.zeros(cfg["k"]), torch.zeros(cfg["k"], cfg["d"]), torch.zeros(3)
            comm.sum_(N, S, extra)
            t0 = time.perf_counter()
            for _ in range(50):
                comm.sum_(N, S, extra)
            res["allreduce_s"] = (time.perf_counter() - t0) / 50
        if cfg["fit"]:
            comm.sum_(torch.zeros(1))
            t0 = time.perf_counter()
            est = rk.RBFKMeans(cfg["k"], assignment="entmax15", random_state=0).fit(Xl.numpy())
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            if comm.active:
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            res["fit_s"] = float(dt)
            res["fit_inertia"] = est.inertia_
            res["fit_n_iter"] = est.n_iter_
        if rank == 0:
            Path(out).write_text(json.dumps(res))
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def throughput(cfg: dict[str, Any]) -> dict[str, Any]:
    layouts = {"1 process x 2 threads": (1, 2), "1 process x 1 thread": (1, 1),
               "2 processes x 1 thread (gloo)": (2, 1)}
    rows: dict[str, Any] = {}
    for name, (world, threads) in layouts.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "res.json")
            mp.start_processes(_throughput_worker, args=(world, threads, _free_port(), cfg, out),
                               nprocs=world, start_method="spawn")
            res = json.loads(Path(out).read_text())
        for key in [k for k in res if k.endswith("_iteration_s")]:
            res[key.replace("_iteration_s", "_points_per_s")] = cfg["n"] / res[key]
        rows[name] = res
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()},
              flush=True)
    two = rows["2 processes x 1 thread (gloo)"]
    ratios: dict[str, Any] = {}
    for base in ("1 process x 2 threads", "1 process x 1 thread"):
        one = rows[base]
        r = {a: one[f"{a}_iteration_s"] / two[f"{a}_iteration_s"]
             for a in ("hard", "softmax", "entmax15")}
        if "fit_s" in one:
            r["fit"] = one["fit_s"] / two["fit_s"]
        ratios[f"speed-up of 2 processes over {base}"] = r
    return {"workload": cfg, "layouts": rows, "ratios": ratios}


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------


def _status() -> dict[str, float]:
    """VmRSS, VmHWM (peak), RssAnon, RssFile of this process, in MB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out


class _AnonPeak(threading.Thread):
    """Samples RssAnon every 5 ms (the kernel keeps no peak of it)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _status()["RssAnon"])
            time.sleep(0.005)


def _make_data(n: int, d: int, out: np.ndarray | None = None) -> np.ndarray:
    """Gaussian blobs (256 centres, scale 5, unit noise), float32, generated in blocks."""
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=5.0, size=(256, d)).astype(np.float32)
    X = np.empty((n, d), dtype=np.float32) if out is None else out
    for s in range(0, n, 100_000):
        b = min(100_000, n - s)
        X[s : s + b] = centres[rng.integers(0, 256, size=b)]
        X[s : s + b] += rng.standard_normal((b, d), dtype=np.float32)
    return X


def _memory_child(n: int, mode: str, d: int, k: int) -> dict[str, Any]:
    torch.set_num_threads(1)  # memory does not depend on it; time on a shared machine does
    tmp = None
    if mode in ("memmap", "batches"):
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "X.npy")
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
        _make_data(n, d, mm)
        mm.flush()
        del mm
        X = np.load(path, mmap_mode="r")
    else:
        X = _make_data(n, d)
    warmup.warm_up()  # loaded (or compiled) before the measurement: not the fit's memory
    lam = float(np.linalg.eigvalsh(np.cov(np.asarray(X[:100_000], dtype=np.float64).T)).max())
    T0 = 1.2 * np.sqrt(k) * lam  # above the first critical temperature of entmax-1.5
    soft = {"assignment": "entmax15", "T_start": T0, "T_end": T0 * 1e-3, "cooling": 0.1,
            "max_iter_per_temperature": 1, "max_iter": 2, "random_state": 0}
    before = _status()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    sampler = _AnonPeak()
    sampler.start()
    t0 = time.perf_counter()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the short fits do not settle on purpose
        if mode in ("fit", "memmap"):
            est = rk.RBFKMeans(k, **soft).fit(X)
            est.predict(X)
        elif mode == "hard":
            est = rk.RBFKMeans(k, assignment="hard", max_iter=3, random_state=0).fit(X)
            est.predict(X)
        elif mode == "batches":
            rk.RBFKMeans(k, assignment="hard", random_state=0).fit_batches(X, batch_size=4096)
        else:
            raise ValueError(mode)
    seconds = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    after = _status()
    if tmp is not None:
        del X
        tmp.cleanup()
    data_mb = n * d * 4 / MB
    return {
        "n": n, "d": d, "k": k, "mode": mode, "seconds": round(seconds, 2),
        "data_MB": round(data_mb, 1), "rss_with_data_MB": round(before["VmRSS"], 1),
        "peak_rss_MB": round(after["VmHWM"], 1),
        "growth_over_data_MB": round(after["VmHWM"] - before["VmRSS"], 1),
        "anon_with_data_MB": round(before["RssAnon"], 1),
        "peak_anon_sampled_MB": round(sampler.peak, 1),
        "anon_growth_MB": round(sampler.peak - before["RssAnon"], 1),
    }


#: glibc's malloc with its mmap threshold fixed: every block of 128 KiB or more is mapped on
#: its own and unmapped when freed, so the peak RSS is what the fit holds at once
FIXED_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _child(n: int, mode: str, d: int, k: int, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--memory-child", str(n), mode, str(d), str(k)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory(sizes: list[int], extra: bool, d: int = 32, k: int = 256,
           repeat: int = 3) -> list[dict[str, Any]]:
    """Each run ``repeat`` times with glibc's defaults and once with :data:`FIXED_THRESHOLD`.

    With the defaults the peak RSS is what the fit holds plus what the allocator keeps: glibc
    raises its mmap threshold to the size of a freed mapped block (up to 32 MiB), so later
    blocks of that size come from the heaps, and a heap gives memory back only from its top.
    How much it keeps depends on the order in which the threads free their blocks, and moves
    between runs of the same fit; with the threshold fixed the peak is the same in every run."""
    runs = [(n, "fit") for n in sizes]
    if extra:
        runs += [(1_000_000, "hard"), (1_000_000, "memmap"), (max(sizes), "batches")]
    rows = []
    for n, mode in runs:
        runs_default = [_child(n, mode, d, k, {}) for _ in range(repeat)]
        fixed = _child(n, mode, d, k, FIXED_THRESHOLD)
        row = max(runs_default, key=lambda r: r["growth_over_data_MB"])
        row["growth_over_data_MB_runs"] = [r["growth_over_data_MB"] for r in runs_default]
        row["seconds_runs"] = [r["seconds"] for r in runs_default]
        row["growth_over_data_MB_fixed_threshold"] = fixed["growth_over_data_MB"]
        row["anon_growth_MB_fixed_threshold"] = fixed["anon_growth_MB"]
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["throughput", "memory", "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no whole fits")
    parser.add_argument("--memory-child", nargs=4, metavar=("N", "MODE", "D", "K"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        n, mode, d, k = args.memory_child
        print(json.dumps(_memory_child(int(n), mode, int(d), int(k))))
        return
    result: dict[str, Any] = {}
    if RESULTS.exists():
        result = json.loads(RESULTS.read_text())
    from machine import describe  # benchmarks/machine.py, beside this script

    machine = {"platform": platform.platform(), "cpus": os.cpu_count(),
               "torch": torch.__version__, "rbfkmeans": rk.__version__,
               "load_average_at_start": os.getloadavg(), **describe()}
    if args.part in ("throughput", "all"):
        cfg = {"n": 50_000 if args.quick else 200_000, "d": 32, "k": 64,
               "repeat": 3 if args.quick else 7, "fit": not args.quick}
        result["throughput"] = throughput(cfg)
        result["throughput_machine"] = machine  # each part records the run that measured it
    if args.part in ("memory", "all"):
        sizes = [100_000, 300_000] if args.quick else \
            [100_000, 250_000, 500_000, 1_000_000, 2_000_000, 4_000_000]
        result["memory"] = memory(sizes, extra=not args.quick, repeat=1 if args.quick else 3)
        result["memory_machine"] = machine
    machine["load_average_at_end"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
