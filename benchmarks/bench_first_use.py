"""First use: what a user waits for before the first result, in fresh processes.

Every measurement runs in a new Python process (2 threads), so nothing is imported or loaded
before it starts:

* ``import``: ``import rbfkmeans`` alone, and ``import torch`` alone (the floor under it);
* ``fit``: ``import rbfkmeans``, then the first ``RBFKMeans(k).fit`` on iris (k = 3), digits
  (k = 10) and 200,000 x 32 blobs (k = 64, float32; workload W of the other benchmarks), each in
  its own process, then ``KMeans(k, n_init=10)`` on the same data in the same process (its first
  fit: scikit-learn's own start-up included);
* ``cli``: ``rbfkmeans fit data.csv -k 3`` on a 1,000-row, 4-column CSV, wall time of the whole
  command, against ``python -c "import torch"``.

Each is measured with the kernel cache warm (numba's on-disk cache as a previous run left it;
the benchmark loads every kernel once first) and, for the fits and the command, with an empty
cache (``NUMBA_CACHE_DIR`` a new empty folder: a fresh environment). In the default mode
(:mod:`rbfkmeans.precompile`) a fit with an empty cache takes the torch passes, and one of at
least ``PAYBACK_ENTRIES`` point-centroid pairs starts the compile in a background process: the
benchmark waits for that process after the fit (it must not share the cores with the next
measurement) and records how long it compiled. The fastest of ``--repeat`` processes for the
warm cases, one process each for the cold ones.

Run by hand, alone: ``python benchmarks/bench_first_use.py``; writes
``benchmarks/results/first_use.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "first_use.json"
THREADS = 2
FITS = {"iris": 3, "digits": 10, "blobs-200k": 64}

_FIT = """
import time
t0 = time.perf_counter()
import rbfkmeans as rk
t_import = time.perf_counter() - t0
import numpy as np
from sklearn.cluster import KMeans
name, k = {name!r}, {k}
if name == "iris":
    from sklearn.datasets import load_iris
    X = load_iris().data
elif name == "digits":
    from sklearn.datasets import load_digits
    X = load_digits().data
else:
    from sklearn.datasets import make_blobs
    X = make_blobs(200_000, 32, centers=64, random_state=0)[0].astype(np.float32)
t1 = time.perf_counter()
ours = rk.RBFKMeans(k, random_state=0).fit(X)
t_fit = time.perf_counter() - t1
t2 = time.perf_counter()
theirs = KMeans(k, n_init=10, random_state=0).fit(X)
t_sk = time.perf_counter() - t2
from rbfkmeans import precompile
print("RESULT", t_import, t_fit, t_sk, ours.inertia_, theirs.inertia_, int(precompile._launched))
"""


def _env(cache: str | None) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS),
               OPENBLAS_NUM_THREADS=str(THREADS), NUMBA_NUM_THREADS=str(THREADS))
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = cache
    return env


def _run(args: list[str], cache: str | None, cwd: str | None = None) -> tuple[float, str]:
    """Wall seconds of one process and its standard output; raises if it fails."""
    t0 = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=_env(cache), cwd=cwd,
                         timeout=1800)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{args[:3]} failed ({out.returncode}): {out.stderr[-2000:]}")
    return seconds, out.stdout


def _fit(name: str, cache: str | None) -> dict[str, Any]:
    wall, out = _run([sys.executable, "-c", _FIT.format(name=name, k=FITS[name])], cache)
    line = next(s for s in out.splitlines() if s.startswith("RESULT"))
    t_import, t_fit, t_sk, j_ours, j_sk, started = map(float, line.split()[1:])
    got: dict[str, Any] = {"import_s": t_import, "first_fit_s": t_fit,
                           "kmeans_n_init10_s": t_sk, "process_s": wall, "inertia": j_ours,
                           "kmeans_inertia": j_sk, "background_compile": bool(started)}
    if started and cache is not None:
        got["background_compile_s"] = _background_compile(Path(cache))
    return got


def _background_compile(cache: Path, patience: float = 120.0) -> float | None:
    """Wait for the background compile a fit started in ``cache`` to finish (it outlives the
    fit's process, and must not share the cores with the next measurement); the seconds its
    stamp records, None if no stamp appeared."""
    import fcntl

    from rbfkmeans import precompile

    t0 = time.monotonic()
    while True:
        stamps = list(cache.rglob(precompile.STAMP))
        if stamps:
            return float(json.loads(stamps[0].read_text())["seconds"])
        locks = list(cache.rglob(precompile.LOCK))
        if locks:  # held while it compiles: wait for the release, then read the stamp
            with open(locks[0], "a+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
            stamps = list(cache.rglob(precompile.STAMP))
            return float(json.loads(stamps[0].read_text())["seconds"]) if stamps else None
        if time.monotonic() - t0 > patience:  # it never took the lock
            return None
        time.sleep(0.5)


def _fastest(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return min(runs, key=lambda r: r[key])


def measure(repeat: int) -> dict[str, Any]:
    import numpy as np

    results: dict[str, Any] = {"threads": THREADS, "repeat": repeat,
                               "python": sys.version.split()[0],
                               "machine": platform.processor() or platform.machine()}
    # the warm cache: every kernel loaded (or compiled) once by a process of its own
    _run([sys.executable, "-c", "from rbfkmeans import warmup; warmup.warm_up()"], None)
    imports = {}
    for label, code in (("torch", "import torch"), ("rbfkmeans", "import rbfkmeans")):
        imports[label] = min(_run([sys.executable, "-c", code], None)[0] for _ in range(repeat))
    results["import_process_s"] = imports
    print("import (whole process):", {k: round(v, 2) for k, v in imports.items()}, flush=True)

    results["fit"] = {}
    for name in FITS:
        warm = _fastest([_fit(name, None) for _ in range(repeat)], "first_fit_s")
        with tempfile.TemporaryDirectory() as empty:
            cold = _fit(name, empty)
        results["fit"][name] = {"warm": warm, "cold": cold}
        print(f"{name}: first fit {warm['first_fit_s']:.2f} s warm, {cold['first_fit_s']:.2f} s "
              f"with an empty cache; KMeans(n_init=10) {warm['kmeans_n_init10_s']:.2f} s",
              flush=True)

    with tempfile.TemporaryDirectory() as work:
        X = np.random.default_rng(0).normal(size=(1000, 4)) + \
            np.repeat(np.arange(3), [334, 333, 333])[:, None] * 4.0
        np.savetxt(Path(work) / "data.csv", X, delimiter=",", fmt="%.6f")
        script = Path(sys.executable).with_name("rbfkmeans")  # the command a user types
        cli = [str(script)] if script.exists() else [sys.executable, "-m", "rbfkmeans.cli"]
        cli += ["fit", "data.csv", "-k", "3", "--force"]
        warm_cli = min(_run(cli, None, work)[0] for _ in range(repeat))
        with tempfile.TemporaryDirectory() as empty:
            cold_cli = _run(cli, empty, work)[0]
    results["cli"] = {"warm_s": warm_cli, "cold_s": cold_cli}
    print(f"rbfkmeans fit (1,000 rows): {warm_cli:.2f} s warm, {cold_cli:.2f} s with an empty "
          "cache", flush=True)

    fit = results["fit"]
    results["targets"] = {
        "cold_iris_fit_after_import_s": fit["iris"]["cold"]["first_fit_s"],
        "cold_over_warm_blobs_200k": fit["blobs-200k"]["cold"]["first_fit_s"]
        / fit["blobs-200k"]["warm"]["first_fit_s"],
        "warm_iris_fit_after_import_s": fit["iris"]["warm"]["first_fit_s"],
        "cli_over_import_torch_plus_1s": warm_cli / (imports["torch"] + 1.0),
    }
    print("targets:", {k: round(v, 2) for k, v in results["targets"].items()}, flush=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="processes per warm measurement")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1; got {args.repeat}")
    results = measure(args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
