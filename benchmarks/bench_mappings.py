"""Speed of the simplex mappings on (200,000 x 64) float32 scores, against the ``entmax`` package.

Inputs (SPEC workload W): ``make_blobs`` n=200,000, d=32 (16 centres), k=64 centroids from ten
Lloyd steps; scores ``z = -D / (2T)`` for ``T`` from ``lambda_max(Cov X)`` (hot) down to
``1e-3`` of it (cold), plus standard normal scores times 1, 10, 100. For each input we time, in one
run and interleaved (median of ``--repeat``), the forward pass and forward + backward of

* ours: ``rk.entmax15``, ``rk.sparsemax``, ``rk.softmax``; ``entmax15_`` (in place, on a private
  copy of the scores, as the fitting loop calls it);
* references: ``entmax.entmax15``, ``entmax.sparsemax`` (the ``entmax`` package), ``torch.softmax``;

and report the ratios reference / ours. ``sweep_k`` gives the cost per sample of ``entmax15``
for k from 2 to 4096 at a fixed n*k budget.

Threads: ``--threads`` (2). GNU OpenMP threads spin-wait between parallel regions by default;
on a shared, oversubscribed machine every region then costs a scheduler time slice and the
timings measure the neighbours, not the code. ``--omp-wait-policy`` (default ``passive``) sets
``OMP_WAIT_POLICY`` before torch starts; it applies to both sides and is recorded in the JSON.
Use ``--omp-wait-policy default`` to keep the environment as it is.

Run by hand: ``python benchmarks/bench_mappings.py [--quick] [--sweep-k]``; writes
``benchmarks/results/mappings.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "mappings.json"


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer inputs, 3 repeats")
    parser.add_argument("--sweep-k", action="store_true", help="also run the cost-vs-k sweep")
    parser.add_argument("--no-backward", action="store_true", help="forward passes only")
    parser.add_argument(
        "--omp-wait-policy", choices=["passive", "active", "default"], default="passive"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.omp_wait_policy != "default":  # must precede the torch import
    os.environ["OMP_WAIT_POLICY"] = ARGS.omp_wait_policy.upper()

import entmax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import make_blobs  # noqa: E402

import rbfkmeans as rk  # noqa: E402
from rbfkmeans.mappings import entmax15_  # noqa: E402

Fn = Callable[[torch.Tensor], torch.Tensor]


def blob_distances(n: int, d: int = 32, k: int = 64, seed: int = 0) -> tuple[torch.Tensor, float]:
    """Squared distances D (n, k) float32 of make_blobs data to k-means-like centroids (ten Lloyd
    steps from k random points), and ``lambda_max(Cov X)``."""
    Xn, _ = make_blobs(n, d, centers=16, cluster_std=2.0, random_state=seed)
    X = torch.from_numpy(Xn.astype(np.float32))
    g = torch.Generator().manual_seed(seed)
    C = X[torch.randperm(n, generator=g)[:k]].clone()  # (k, d)
    for _ in range(10):
        D = rk.sq_distances(X, C)  # (n, k)
        lab = D.argmin(1)
        count = torch.bincount(lab, minlength=k).to(X.dtype)
        sums = torch.zeros_like(C).index_add_(0, lab, X)
        full = count > 0
        C[full] = sums[full] / count[full, None]
    lam = float(torch.linalg.eigvalsh(torch.cov(X.T.double())).max())
    return rk.sq_distances(X, C), lam


def inputs(n: int, k: int, quick: bool) -> dict[str, torch.Tensor]:
    D, lam = blob_distances(n, k=k)
    fracs = [1.0, 0.01, 0.001] if quick else [1.0, 0.1, 0.03, 0.01, 0.001]
    out = {f"blobs T={f:g} lam": -D / (2 * lam * f) for f in fracs}
    g = torch.Generator().manual_seed(1)
    for scale in [1, 10, 100]:
        out[f"normal x{scale}"] = torch.randn(n, k, generator=g) * scale
    return out


def row_stats(z: torch.Tensor) -> dict[str, float]:
    """Candidates (z within 2 of the row max), support size and one-hot fraction of entmax15."""
    cand = (z >= z.amax(1, keepdim=True) - 2).sum(1).double()
    supp = (rk.entmax15(z) > 0).sum(1).double()
    return {
        "candidates_mean": float(cand.mean()),
        "candidates_max": float(cand.max()),
        "support_mean": float(supp.mean()),
        "one_hot_fraction": float((supp == 1).double().mean()),
    }


def forward_backward(fn: Fn, z: torch.Tensor, g: torch.Tensor) -> Callable[[], Any]:
    def run() -> Any:
        x = z.detach().requires_grad_()
        return torch.autograd.grad(fn(x), x, g)

    return run


def in_place(z: torch.Tensor) -> Callable[[], Any]:
    """``entmax15_`` on a fresh private copy each call (the copy is made before the clock)."""
    buf = torch.empty_like(z)

    def run() -> Any:
        return entmax15_(buf)

    def setup() -> None:
        buf.copy_(z)

    run.setup = setup  # type: ignore[attr-defined]
    return run


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median seconds of each function, calls interleaved round-robin (after one warm-up each)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeat + 1):
        for name, fn in fns.items():
            setup = getattr(fn, "setup", None)
            if setup is not None:
                setup()
            t0 = time.perf_counter()
            fn()
            if r:  # the first round is a warm-up
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def sweep_k(
    budget: int = 1 << 23,
    ks: tuple[int, ...] = tuple(2**i for i in range(1, 13)),
    scale: float = 1.0,
    repeat: int = 3,
) -> list[dict[str, float]]:
    """Cost per sample of ``rk.entmax15`` (and the package) for each k at ``n = budget // k``,
    standard normal scores times ``scale``."""
    rows = []
    g = torch.Generator().manual_seed(2)
    for k in ks:
        n = budget // k
        z = torch.randn(n, k, generator=g) * scale
        t = interleaved(
            {"ours": lambda z=z: rk.entmax15(z), "package": lambda z=z: entmax.entmax15(z)},
            repeat,
        )
        rows.append({"k": k, "n": n, "ours_us_per_sample": t["ours"] / n * 1e6,
                     "package_us_per_sample": t["package"] / n * 1e6,
                     "speedup": t["package"] / t["ours"]})  # fmt: skip
        print(f"k={k:5d} n={n:8d} ours {rows[-1]['ours_us_per_sample']:.3f} us/sample, "
              f"package {rows[-1]['package_us_per_sample']:.3f}, x{rows[-1]['speedup']:.1f}",
              flush=True)  # fmt: skip
    return rows


def main(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    repeat = 3 if args.quick else args.repeat
    load_before = os.getloadavg()
    results: dict[str, Any] = {
        "workload": {"n": args.n, "k": args.k, "dtype": "float32", "threads": args.threads,
                     "repeat": repeat, "statistic": "median"},
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0],
                    "torch": torch.__version__, "numpy": np.__version__,
                    "entmax": getattr(entmax, "__version__", "?"), "cpu_count": os.cpu_count(),
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                    "load_average_before": load_before},
        "inputs": {},
    }  # fmt: skip
    g = torch.Generator().manual_seed(3)
    header = (f"{'input':18s} {'cand':>5s} {'onehot':>6s} | forward ms: entmax15 ours/pkg (x) | "
              "sparsemax ours/pkg (x) | softmax ours/torch | entmax15_ in place")  # fmt: skip
    print(header)
    for name, z in inputs(args.n, args.k, args.quick).items():
        entry: dict[str, Any] = {"stats": row_stats(z)}
        fwd = interleaved(
            {
                "entmax15_ours": lambda z=z: rk.entmax15(z),
                "entmax15_package": lambda z=z: entmax.entmax15(z),
                "sparsemax_ours": lambda z=z: rk.sparsemax(z),
                "sparsemax_package": lambda z=z: entmax.sparsemax(z),
                "softmax_ours": lambda z=z: rk.softmax(z),
                "softmax_torch": lambda z=z: torch.softmax(z, -1),
                "entmax15_inplace_ours": in_place(z),
            },
            repeat,
        )
        entry["forward_s"] = fwd
        entry["forward_speedup"] = {
            "entmax15": fwd["entmax15_package"] / fwd["entmax15_ours"],
            "entmax15_inplace": fwd["entmax15_package"] / fwd["entmax15_inplace_ours"],
            "sparsemax": fwd["sparsemax_package"] / fwd["sparsemax_ours"],
            "softmax_torch_over_ours": fwd["softmax_torch"] / fwd["softmax_ours"],
            "entmax15_over_torch_softmax": fwd["entmax15_ours"] / fwd["softmax_torch"],
        }
        st, sp = entry["stats"], entry["forward_speedup"]
        print(f"{name:18s} {st['candidates_mean']:5.1f} {st['one_hot_fraction']:6.3f} | "
              f"{fwd['entmax15_ours']*1e3:6.0f} / {fwd['entmax15_package']*1e3:6.0f} "
              f"(x{sp['entmax15']:4.1f}) | {fwd['sparsemax_ours']*1e3:6.0f} / "
              f"{fwd['sparsemax_package']*1e3:6.0f} (x{sp['sparsemax']:4.1f}) | "
              f"{fwd['softmax_ours']*1e3:5.0f} / {fwd['softmax_torch']*1e3:5.0f} | "
              f"{fwd['entmax15_inplace_ours']*1e3:5.0f} (x{sp['entmax15_inplace']:4.1f})",
              flush=True)  # fmt: skip
        if not args.no_backward:
            gz = torch.randn(z.shape, generator=g)
            fb = interleaved(
                {
                    "entmax15_ours": forward_backward(rk.entmax15, z, gz),
                    "entmax15_package": forward_backward(entmax.entmax15, z, gz),
                    "sparsemax_ours": forward_backward(rk.sparsemax, z, gz),
                    "sparsemax_package": forward_backward(entmax.sparsemax, z, gz),
                    "softmax_ours": forward_backward(rk.softmax, z, gz),
                    "softmax_torch": forward_backward(lambda x: torch.softmax(x, -1), z, gz),
                },
                repeat,
            )
            entry["forward_backward_s"] = fb
            entry["forward_backward_speedup"] = {
                "entmax15": fb["entmax15_package"] / fb["entmax15_ours"],
                "sparsemax": fb["sparsemax_package"] / fb["sparsemax_ours"],
                "softmax_torch_over_ours": fb["softmax_torch"] / fb["softmax_ours"],
            }
            sb = entry["forward_backward_speedup"]
            print(f"{'  + backward':18s} {'':5s} {'':6s} | "
                  f"{fb['entmax15_ours']*1e3:6.0f} / {fb['entmax15_package']*1e3:6.0f} "
                  f"(x{sb['entmax15']:4.1f}) | {fb['sparsemax_ours']*1e3:6.0f} / "
                  f"{fb['sparsemax_package']*1e3:6.0f} (x{sb['sparsemax']:4.1f}) | "
                  f"{fb['softmax_ours']*1e3:5.0f} / {fb['softmax_torch']*1e3:5.0f} |",
                  flush=True)  # fmt: skip
        results["inputs"][name] = entry
    fwd_speed = [e["forward_speedup"]["entmax15"] for e in results["inputs"].values()]
    results["summary"] = {
        "entmax15_forward_speedup_min": min(fwd_speed),
        "entmax15_forward_speedup_median": statistics.median(fwd_speed),
    }
    if not args.no_backward:
        fb_speed = [e["forward_backward_speedup"]["entmax15"] for e in results["inputs"].values()]
        results["summary"]["entmax15_forward_backward_speedup_min"] = min(fb_speed)
    if args.sweep_k:
        print("cost per sample vs k (n*k fixed), normal scores:")
        results["sweep_k"] = sweep_k(repeat=3)
    results["machine"]["load_average_after"] = os.getloadavg()
    print("summary:", json.dumps(results["summary"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    assert ARGS is not None
    main(ARGS)
