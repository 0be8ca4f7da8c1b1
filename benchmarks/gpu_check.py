"""One command for a borrowed GPU machine: does the package work there, and how fast is it?

Run once on a machine with a CUDA device (nothing is installed, nothing is downloaded)::

    python benchmarks/gpu_check.py                     # about 7-8 minutes on one H200
    python benchmarks/gpu_check.py --steps layer,fit   # some steps only
    python benchmarks/gpu_check.py --device cpu --quick --out out/gpu   # the smoke run (seconds)

It writes ``results.json`` and ``log.txt`` (plus one log per step) into ``--out`` (default
``benchmarks/results/gpu_run/``): the device (``torch.cuda.get_device_name``), the torch, CUDA and
library versions, which optional peers are installed, and per step its status (``ok``,
``partial``: a case failed and the others ran, ``failed``, ``timeout``, ``skipped``), its time and
its measurements. Nothing stops the run: every step runs in its own process under a time limit
(its share of ``--budget-s``; time a step leaves unused goes to the later ones; ``--quick`` runs
them all in one process, one torch thread, unless ``--isolation process``), every case inside a
step in ``try``/``except`` (errors and tracebacks are recorded), ``results.json`` is
rewritten after every step and each step's own ``step_<name>.json`` after every case, so a run
cut short still leaves what it measured. Setting
``GPU_CHECK_FAIL_STEP=<step>`` makes that step fail on purpose (the test of this script uses it).

Steps (``--quick``: tiny sizes everywhere, and only ``tests/test_devices.py -m gpu``):

1. ``tests``: ``pytest -m gpu`` (junit XML: passed / failed / skipped counts, the failures'
   names), then tests/test_layer.py, test_mappings.py, test_quantizer.py and test_objectives.py
   with ``RBFKMEANS_TEST_DEVICE=<device>``, if ``tests/conftest.py`` reads that variable (else
   recorded as skipped). The numba kernels are compiled first (recorded), so that neither the
   tests' time limit nor a later step pays for the compiler.
2. ``layer``: forward and forward + backward of ``KMeansLayer(C, temperature=T, assignment=a)``
   for ``a`` in softmax, entmax15, sparsemax, hard at n = 1,000,000, d = 128, k = 1,024, float32
   and bfloat16 (``X`` requires grad, ``C`` a parameter), as ratios to ``X @ C.T`` of the same
   shapes and dtype timed in the same run, interleaved (CUDA events on a GPU, ``perf_counter``
   on the CPU; one warm-up, the median of the repetitions). ``T`` is a quarter of the median gap
   between the nearest and the eighth-nearest centroid (entmax-1.5 then keeps about eight
   candidates a row; the support sizes are recorded). A case that runs out of memory is retried
   in row chunks (recorded as ``row_chunks``).
3. ``fit``: on workload W (``make_blobs`` 200,000 x 32, k = 64), the data of
   ``bench_large.py`` (1,000,000 x 32, k = 256) and 10,000,000 x 128 blobs (k = 1,024; every
   method capped at 30 iterations there), from one k-means++ start ``C0`` (computed on the
   device): a plain chunked torch Lloyd written here (``addmm``, ``argmin``, ``index_add_``,
   until the labels stop changing), ``RBFKMeans(k, assignment="hard", init=C0, device=dev)``
   with ``tol=0`` (the same stopping rule) and with its default ``tol``,
   ``fast_pytorch_kmeans.KMeans`` if installed (from ``C0`` where its API allows; recorded), and
   the default ``RBFKMeans(k, device=dev, random_state=0)``. Wall time (synchronised; the
   estimator's includes the copy of ``X`` to the device, timed alone as ``h2d_copy_s``),
   inertia recomputed here in float64, iterations, and the peak device memory of each method.
4. ``vq``: training steps (forward, backward, Adam step) of a small linear VQ autoencoder with
   ``VectorQuantizer`` (gradient-trained codebook, and ``update="kmeans", decay=0.8``) and, if
   installed, ``vector_quantize_pytorch.VectorQuantize`` (its defaults: EMA 0.8): steps per
   second, the codes used in the last 20 steps, their perplexity, the reconstruction error.
5. ``deep``: one seed of ``DeepClusterer`` on digits with the ``rbfkmeans deep-cluster``
   defaults, on the device (moved there with its encoder when it has no ``device`` argument):
   ACC / NMI / ARI (:func:`rbfkmeans.deep.evaluate`) and the wall time.

Times are ratios measured in one run, or wall times of one run on that machine; nothing here is
meant to be compared across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
#: the output folder as the results file records it (a path of the machine says nothing to a
#: reader of the file)
OUT_MARK = "<out>"


def _recorded_argv(argv: list[str]) -> list[str]:
    """The command line as the results file records it: the output folder as ``OUT_MARK``."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--out" and i + 1 < len(out):
            out[i + 1] = OUT_MARK
        elif a.startswith("--out="):
            out[i] = f"--out={OUT_MARK}"
    return out


def _package_file(module: Any) -> str:
    """Where ``module`` was imported from: relative to this repository when it is this
    checkout's, else its folder's name and the file's (an installed copy)."""
    path = Path(module.__file__).resolve()
    try:
        return str(path.relative_to(BENCH.parent))
    except ValueError:
        return f"{path.parent.name}/{path.name} (installed)"
ROOT = BENCH.parent
DEFAULT_OUT = BENCH / "results" / "gpu_run"
STEPS = ("tests", "layer", "fit", "vq", "deep")
#: each step's share of the time left when it starts, against the steps still to run
SHARES = {"tests": 0.28, "layer": 0.12, "fit": 0.36, "vq": 0.08, "deep": 0.16}
#: a step always gets at least this long, even past the budget
MIN_STEP_S = 20.0
#: the child stops its own work this long before the parent kills it
GRACE_S = 8.0
FAIL_ENV = "GPU_CHECK_FAIL_STEP"
TEST_DEVICE_ENV = "RBFKMEANS_TEST_DEVICE"
DEVICE_TEST_FILES = ("tests/test_layer.py", "tests/test_mappings.py", "tests/test_quantizer.py",
                     "tests/test_objectives.py")
OPTIONAL = ("fast_pytorch_kmeans", "vector_quantize_pytorch", "entmax", "triton", "numba",
            "sklearn", "pytest", "hypothesis", "faiss")
MAPPINGS = ("softmax", "entmax15", "sparsemax", "hard")


# ---------------------------------------------------------------------------------------------
# JSON, logs, subprocesses
# ---------------------------------------------------------------------------------------------


def _plain(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings and unknown objects as their ``str``: strict
    JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    return str(obj)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_plain(obj), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def error_record(exc: BaseException) -> dict[str, str]:
    return {"error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(exc))[-6000:]}


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def run_logged(cmd: list[str], timeout: float, log: Path,
               env: dict[str, str] | None = None) -> tuple[int | None, bool, float]:
    """Run ``cmd`` in the repository root with stdout and stderr into ``log``; kill its whole
    process group after ``timeout`` seconds. Returns (exit code, timed out, seconds)."""
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=max(1.0, timeout))
            timed_out = False
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, timed_out = None, True
    return rc, timed_out, time.perf_counter() - t0


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the subprocesses: this working tree's ``src`` first on the path (the
    machine may not have the package installed), plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


class Log:
    """The run's log: the parent's lines, then each step's output as it finishes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def line(self, text: str, echo: bool = True) -> None:
        with self.path.open("a") as fh:
            fh.write(text + "\n")
        if echo:
            print(text, flush=True)

    def append_file(self, title: str, path: Path) -> None:
        with self.path.open("a") as fh:
            fh.write(f"----- {title} ({path.name}) -----\n{tail(path, 200_000)}\n")


# ---------------------------------------------------------------------------------------------
# what a step sees
# ---------------------------------------------------------------------------------------------


class Context:
    """A step's settings and its record, saved to ``step_<name>.json`` after every case."""

    def __init__(self, step: str, device: str, quick: bool, out: Path, deadline: float) -> None:
        self.step, self.device_name, self.quick, self.out = step, device, quick, out
        self.deadline = deadline
        self.path = out / f"step_{step}.json"
        self.record: dict[str, Any] = {"step": step, "status": "running", "device": device,
                                       "quick": quick}
        self.save()

    def save(self) -> None:
        write_json(self.path, self.record)

    def time_left(self) -> float:
        return self.deadline - time.time()

    @property
    def device(self) -> Any:
        import torch

        return torch.device(self.device_name)

    @property
    def cuda(self) -> bool:
        return self.device_name.startswith("cuda")


def sync(ctx: Context) -> None:
    if ctx.cuda:
        import torch

        torch.cuda.synchronize()


def wall(ctx: Context, fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time, the device synchronised before and after."""
    sync(ctx)
    t0 = time.perf_counter()
    out = fn()
    sync(ctx)
    return out, time.perf_counter() - t0


def interleaved(ctx: Context, fns: dict[str, Callable[[], Any]], repeat: int,
                warmup: int = 1) -> dict[str, float]:
    """Median seconds of each function, called round-robin after ``warmup`` rounds: CUDA events
    on a GPU, ``perf_counter`` on the CPU (where the calls are synchronous)."""
    import torch

    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(warmup + repeat):
        for name, fn in fns.items():
            if ctx.cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                fn()
                seconds = time.perf_counter() - t0
            if r >= warmup:
                times[name].append(seconds)
    return {name: statistics.median(ts) for name, ts in times.items()}


def reset_peak(ctx: Context) -> int:
    """Start a peak-memory window; returns the bytes allocated now (0 off the GPU)."""
    if not ctx.cuda:
        return 0
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return int(torch.cuda.memory_allocated())


def peak_mb(ctx: Context, base: int) -> dict[str, float | None]:
    if not ctx.cuda:
        return {"peak_mb": None, "peak_over_start_mb": None}
    import torch

    peak = int(torch.cuda.max_memory_allocated())
    return {"peak_mb": peak / 2**20, "peak_over_start_mb": (peak - base) / 2**20}


def free_memory(ctx: Context) -> None:
    import gc

    gc.collect()
    if ctx.cuda:
        import torch

        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    import torch

    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    return isinstance(exc, oom) or "out of memory" in str(exc)


def blob_rows(n: int, d: int, centres: int, seed: int, device: Any,
              chunk: int = 1 << 20) -> Any:
    """(n, d) float32 rows around ``centres`` random centres (spread 4, unit noise), generated
    on ``device`` from ``seed`` in chunks."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    mu = 4.0 * torch.randn(centres, d, generator=gen, device=device)  # (centres, d)
    X = torch.empty(n, d, device=device)
    for s in range(0, n, chunk):
        b = min(chunk, n - s)
        lab = torch.randint(centres, (b,), generator=gen, device=device)
        X[s : s + b] = mu[lab] + torch.randn(b, d, generator=gen, device=device)
    return X


def version(module: str) -> str | None:
    """The installed version of ``module`` (a distribution name guessed from it), or None when
    it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    from importlib import metadata

    for dist in (module, module.replace("_", "-"), {"sklearn": "scikit-learn",
                                                     "faiss": "faiss-cpu"}.get(module, module)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "installed (version unknown)"


# ---------------------------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------------------------


def step_env(ctx: Context) -> None:
    """The machine, the versions, the device this run uses, the optional peers."""
    rec = ctx.record
    rec["python"] = sys.version.split()[0]
    rec["platform"] = platform.platform()
    rec["cpu_count"] = os.cpu_count()
    rec["optional_packages"] = {m: version(m) or "not installed" for m in OPTIONAL}
    try:
        rec["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                           capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rec["git_commit"] = None
    import numpy as np
    import torch

    rec["numpy"] = np.__version__
    rec["torch"] = torch.__version__
    rec["torch_cuda"] = torch.version.cuda
    rec["cuda_available"] = torch.cuda.is_available()
    rec["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    device = ctx.device_name
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    rec["device_resolved"] = device
    if device.startswith("cuda"):
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        rec["device_name"] = torch.cuda.get_device_name(dev)
        rec["device_capability"] = list(torch.cuda.get_device_capability(dev))
        rec["device_memory_gb"] = props.total_memory / 2**30
        rec["device_count"] = torch.cuda.device_count()
        rec["cudnn"] = torch.backends.cudnn.version()
    else:
        rec["device_name"] = platform.processor() or platform.machine()
    import rbfkmeans

    rec["rbfkmeans"] = {"version": rbfkmeans.__version__, "file": _package_file(rbfkmeans)}
    rec["summary"] = f"{rec['device_name']}, torch {torch.__version__}, CUDA {torch.version.cuda}"


# ---------------------------------------------------------------------------------------------
# 1. tests
# ---------------------------------------------------------------------------------------------


def junit_counts(path: Path) -> dict[str, Any]:
    """Counts and failure names from a pytest junit XML file."""
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[str] = []
    skips: dict[str, str] = {}
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        counts["tests"] += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        skipped = case.find("skipped")
        if case.find("failure") is not None:
            counts["failed"] += 1
            failures.append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            failures.append(name + " (error)")
        elif skipped is not None:
            counts["skipped"] += 1
            skips[name] = (skipped.get("message") or "")[:200]
        else:
            counts["passed"] += 1
    return {**counts, "failures": failures, "skipped_reasons": skips}


def run_pytest(ctx: Context, name: str, args: list[str], timeout: float,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    junit = ctx.out / f"junit_{name}.xml"
    junit.unlink(missing_ok=True)
    log = ctx.out / f"pytest_{name}.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={junit}", *args]
    rc, timed_out, seconds = run_logged(cmd, timeout, log, child_env(env))
    command = " ".join(cmd[2:]).replace(str(ctx.out), OUT_MARK)  # no path of this machine
    run: dict[str, Any] = {"command": command, "returncode": rc,
                           "timed_out": timed_out, "seconds": seconds, "timeout_s": timeout,
                           "log": log.name}
    if env:
        run["env"] = env
    if junit.exists():
        run.update(junit_counts(junit))
    else:
        run["output_tail"] = tail(log)
    # pytest's exit codes: 0 all passed, 1 some failed, 5 nothing collected
    run["ok"] = not timed_out and rc in (0, 5)
    return run


def step_tests(ctx: Context) -> None:
    rec = ctx.record
    if importlib.util.find_spec("pytest") is None:
        rec["status"] = "skipped"
        rec["reason"] = "pytest is not installed"
        return
    if ctx.quick:
        rec["kernels_warm_up"] = "not run under --quick (the suite's conftest loads them)"
    else:  # compile (or load) the numba kernels first: the conftest and the CPU fits need them
        warm_log = ctx.out / "kernels_warm_up.log"
        rc, timed_out, seconds = run_logged(
            [sys.executable, "-c", "from rbfkmeans import warmup; warmup.warm_up()"],
            max(10.0, 0.6 * ctx.time_left()), warm_log, child_env())
        rec["kernels_warm_up"] = {"returncode": rc, "timed_out": timed_out, "seconds": seconds}
        if rc != 0:
            rec["kernels_warm_up"]["output_tail"] = tail(warm_log)
    ctx.save()
    runs: dict[str, Any] = {}
    rec["runs"] = runs
    hook = TEST_DEVICE_ENV in (ROOT / "tests" / "conftest.py").read_text()
    gpu_args = ["-m", "gpu", "tests/test_devices.py"] if ctx.quick else ["-m", "gpu"]
    runs["gpu_marker"] = run_pytest(ctx, "gpu", gpu_args,
                                    (0.45 if hook else 1.0) * ctx.time_left() - 2.0)
    ctx.save()
    if not hook:
        runs["default_device"] = {
            "status": "skipped",
            "reason": f"tests/conftest.py has no default-device hook (it does not read "
                      f"{TEST_DEVICE_ENV}); the files {', '.join(DEVICE_TEST_FILES)} were not "
                      f"run on the device"}
    else:
        files = ["tests/test_layer.py", "-k", "from_linear"] if ctx.quick \
            else list(DEVICE_TEST_FILES)
        runs["default_device"] = run_pytest(ctx, "default_device", files,
                                            ctx.time_left() - 2.0,
                                            {TEST_DEVICE_ENV: ctx.device_name})
    ran = [r for r in runs.values() if "ok" in r]
    rec["status"] = "ok" if all(r["ok"] for r in ran) else "partial"
    rec["summary"] = "; ".join(
        f"{name}: " + (f"{r.get('passed', '?')} passed, {r.get('failed', '?')} failed, "
                       f"{r.get('errors', '?')} errors, {r.get('skipped', '?')} skipped"
                       + (" (timed out)" if r.get("timed_out") else "")
                       if "ok" in r else r["status"])
        for name, r in runs.items())


# ---------------------------------------------------------------------------------------------
# 2. the layer against the matrix product
# ---------------------------------------------------------------------------------------------


def layer_temperature(X: Any, C: Any) -> float:
    """A quarter of the median gap between the nearest and the eighth-nearest centroid over a
    sample of rows: entmax-1.5 (support ``d_j - d_min < 4T``) keeps about eight candidates in
    the median row, sparsemax fewer, softmax all (with most of the mass on a few)."""
    import torch

    import rbfkmeans as rk

    D = rk.sq_distances(X[:4096].float(), C.float())  # (b, k)
    m = min(8, C.shape[0])
    near = D.topk(m, dim=1, largest=False).values  # (b, m) increasing
    return float(torch.median(near[:, -1] - near[:, 0]).clamp_min(1e-6)) / 4.0


def support_stats(X: Any, C: Any, T: float) -> dict[str, dict[str, float]]:
    """Mean non-zero memberships per row and the one-hot fraction of each mapping (sample)."""
    import rbfkmeans as rk

    out = {}
    for a in MAPPINGS:
        R = rk.KMeansLayer(C.float(), temperature=T, assignment=a)(X[:4096].float()).detach()
        nnz = (R > 0).sum(dim=1).double()
        out[a] = {"support_mean": float(nnz.mean()), "one_hot_fraction": float((nnz == 1)
                                                                                 .double().mean())}
    return out


def time_layer_case(ctx: Context, X: Any, C: Any, T: float, assignment: str, chunks: int,
                    repeat: int) -> dict[str, Any]:
    """Forward and forward + backward of the layer and of ``X @ C.T`` on ``chunks`` row chunks
    (1: all rows at once); the gradients are taken with respect to ``X`` and ``C``."""
    import torch

    import rbfkmeans as rk

    n, k = X.shape[0], C.shape[0]
    rows = -(-n // chunks)
    leaves = [X[s : s + rows].detach().clone().requires_grad_() for s in range(0, n, rows)]
    layer = rk.KMeansLayer(C, temperature=T, assignment=assignment).to(X.device)
    Cp = torch.nn.Parameter(C.detach().clone())  # the product's C, in the data's dtype
    gen = torch.Generator(device=X.device).manual_seed(1)
    G = torch.randn(rows, k, generator=gen, device=X.device)  # upstream gradient, reused
    Gp = G.to(X.dtype)

    def layer_fwd() -> None:
        for x in leaves:
            layer(x)

    def product_fwd() -> None:
        for x in leaves:
            x @ Cp.T

    def layer_fwd_bwd() -> None:
        for x in leaves:
            R = layer(x)
            torch.autograd.grad(R, (x, layer.centroids), G[: x.shape[0]].to(R.dtype))

    def product_fwd_bwd() -> None:
        for x in leaves:
            P = x @ Cp.T
            torch.autograd.grad(P, (x, Cp), Gp[: x.shape[0]])

    base = reset_peak(ctx)
    t = interleaved(ctx, {"layer_fwd": layer_fwd, "product_fwd": product_fwd,
                          "layer_fwd_bwd": layer_fwd_bwd, "product_fwd_bwd": product_fwd_bwd},
                    repeat)
    return {"seconds": t, "ratio_fwd": t["layer_fwd"] / t["product_fwd"],
            "ratio_fwd_bwd": t["layer_fwd_bwd"] / t["product_fwd_bwd"],
            "row_chunks": chunks, "layer_dtype": str(layer.centroids.dtype),
            "output_dtype": str(layer(leaves[0][:2]).dtype), **peak_mb(ctx, base)}


def step_layer(ctx: Context) -> None:
    import torch

    rec = ctx.record
    n, d, k = (2048, 16, 32) if ctx.quick else (1_000_000, 128, 1024)
    repeat = 2 if ctx.quick else 5
    X32 = blob_rows(n, d, max(4, k // 16), 0, ctx.device)  # (n, d)
    gen = torch.Generator(device=ctx.device).manual_seed(2)
    C32 = X32[torch.randperm(n, generator=gen, device=ctx.device)[:k]].clone()  # (k, d)
    T = layer_temperature(X32, C32)
    rec["settings"] = {"n": n, "d": d, "k": k, "temperature": T, "repeat": repeat,
                       "warmup": 1, "statistic": "median",
                       "timer": "cuda events" if ctx.cuda else "perf_counter",
                       "reference": "X @ C.T, same shapes and dtype (forward; forward + "
                                    "backward to X and C)",
                       "note": "bfloat16 inputs are computed in float32 by the layer (its "
                               "centroids are float32); the product runs in bfloat16"}
    rec["support"] = support_stats(X32, C32, T)
    cases: list[dict[str, Any]] = []
    rec["cases"] = cases
    ctx.save()
    failed = 0
    for dtype in (torch.float32, torch.bfloat16):
        X, C = X32.to(dtype), C32.to(dtype)
        for a in MAPPINGS:
            case: dict[str, Any] = {"assignment": a, "dtype": str(dtype).replace("torch.", "")}
            chunks, retry = 1, True
            while retry:
                retry = False
                try:
                    case.update(time_layer_case(ctx, X, C, T, a, chunks, repeat))
                except Exception as exc:
                    if is_oom(exc) and chunks < 64:  # again, on row chunks
                        case.setdefault("oom_at_row_chunks", []).append(chunks)
                        chunks *= 2
                        retry = True
                    else:
                        case.update(error_record(exc))
                        failed += 1
                free_memory(ctx)  # out of the except clause: the failed call's frames are gone
            if chunks > 1 and "ratio_fwd" in case:
                case["note"] = f"the (n, k) matrices did not fit at once: {chunks} row chunks"
            cases.append(case)
            ctx.save()
            print(f"layer {a:9s} {case['dtype']:8s} " + (
                f"fwd x{case['ratio_fwd']:.2f}  fwd+bwd x{case['ratio_fwd_bwd']:.2f}"
                if "ratio_fwd" in case else case.get("error", "")), flush=True)
    rec["status"] = "ok" if not failed else ("failed" if failed == len(cases) else "partial")
    good = [c for c in cases if "ratio_fwd_bwd" in c]
    rec["summary"] = ", ".join(f"{c['assignment']}/{c['dtype']} x{c['ratio_fwd_bwd']:.2f}"
                               for c in good) + " (fwd+bwd / product)"


# ---------------------------------------------------------------------------------------------
# 3. the estimator on the device
# ---------------------------------------------------------------------------------------------


def inertia64(X: Any, C: Any) -> float:
    """``sum_i min_j ||x_i - c_j||^2`` in float64, one exact chunked pass on ``X``'s device."""
    import torch

    C = torch.as_tensor(C).to(device=X.device, dtype=torch.float64)  # (k, d)
    C_sq = (C * C).sum(dim=1)
    rows = max(1, (1 << 25) // C.shape[0])
    total = torch.zeros((), dtype=torch.float64, device=X.device)
    for s in range(0, X.shape[0], rows):
        x = X[s : s + rows].double()
        D = torch.addmm(C_sq.unsqueeze(0), x, C.T, alpha=-2.0)  # (b, k) ||c||^2 - 2 x.c
        D.add_((x * x).sum(dim=1, keepdim=True))
        total += D.amin(dim=1).clamp_(min=0.0).sum()
    return float(total)


def plain_lloyd(X: Any, C0: Any, max_iter: int, rows: int) -> dict[str, Any]:
    """The Lloyd iteration a user writes in torch: per chunk one ``addmm`` for
    ``||c||^2 - 2 x.c``, ``argmin``, ``index_add_`` of the rows; until the labels stop changing
    (an empty cluster keeps its centroid)."""
    import torch

    n, k = X.shape[0], C0.shape[0]
    C = C0.clone()
    labels = torch.empty(n, dtype=torch.long, device=X.device)
    previous = None
    empty_events = 0
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - read after the loop
        S = torch.zeros_like(C)
        N = torch.zeros(k, dtype=C.dtype, device=X.device)
        C_sq = (C * C).sum(dim=1)
        for s in range(0, n, rows):
            lab = torch.addmm(C_sq.unsqueeze(0), X[s : s + rows], C.T, alpha=-2.0).argmin(1)
            labels[s : s + rows] = lab
            S.index_add_(0, lab, X[s : s + rows])
            N += torch.bincount(lab, minlength=k).to(C.dtype)
        if previous is not None and torch.equal(labels, previous):
            converged = True
            break
        previous = labels.clone()
        empty_events += int((N == 0).sum())
        C = torch.where(N.unsqueeze(1) > 0, S / N.clamp(min=1).unsqueeze(1), C)
    return {"C": C, "n_iter": it, "converged": converged, "empty_cluster_events": empty_events,
            "chunk_rows": rows}


def fast_pytorch_kmeans_fit(X: Any, C0: Any, max_iter: int) -> dict[str, Any]:
    from fast_pytorch_kmeans import KMeans

    km = KMeans(n_clusters=C0.shape[0], max_iter=max_iter, mode="euclidean")
    params = inspect.signature(km.fit_predict).parameters
    if "centroids" in params:
        km.fit_predict(X, centroids=C0.clone())
        start = "C0 (fit_predict(X, centroids=C0))"
    else:
        km.fit_predict(X)
        start = f"its own init ({getattr(km, 'init_method', '?')}): fit_predict takes no start"
    return {"C": km.centroids, "n_iter": getattr(km, "n_iter_", None), "start": start,
            "tol": getattr(km, "tol", None),
            "api": {"KMeans": str(inspect.signature(KMeans)),
                    "fit_predict": str(inspect.signature(km.fit_predict))}}


def fit_cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        return [{"name": "W", "n": 2000, "d": 8, "k": 8, "max_iter": 300},
                {"name": "bench_large", "n": 3000, "d": 32, "k": 16, "max_iter": 300},
                {"name": "blobs_10M", "n": 3000, "d": 16, "k": 16, "max_iter": 30}]
    return [{"name": "W", "n": 200_000, "d": 32, "k": 64, "max_iter": 300},
            {"name": "bench_large", "n": 1_000_000, "d": 32, "k": 256, "max_iter": 300},
            {"name": "blobs_10M", "n": 10_000_000, "d": 128, "k": 1024, "max_iter": 30}]


def fit_data(ctx: Context, case: dict[str, Any]) -> tuple[Any, Any, str]:
    """The case's data on the host (NumPy, what the estimator takes) and on the device."""
    import numpy as np
    import torch

    n, d, k = case["n"], case["d"], case["k"]
    if case["name"] == "W":
        from sklearn.datasets import make_blobs

        Xh = make_blobs(n, d, centers=k, random_state=0)[0].astype(np.float32)
        how = f"make_blobs({n}, {d}, centers={k}, random_state=0), float32"
    elif case["name"] == "bench_large":
        sys.path.insert(0, str(BENCH))
        from bench_large import D, make_data

        if d != D:
            raise ValueError(f"bench_large's data has d={D}; the case asks for d={d}")
        Xh = make_data(n, 0)
        how = f"benchmarks/bench_large.py make_data({n}, seed=0), float32"
    else:
        Xd = blob_rows(n, d, k, 3, ctx.device)
        return Xd.cpu().numpy(), Xd, f"{k} blobs (spread 4, unit noise) generated on the device"
    return Xh, torch.from_numpy(Xh).to(ctx.device), how


def fit_methods(ctx: Context, k: int, max_iter: int, Xh: Any, Xd: Any, C0: Any
                ) -> dict[str, Callable[[], dict[str, Any]]]:
    """The methods compared on one case, in the order they run (if the step runs out of time,
    the last ones are lost: the hard fit with the default ``tol`` differs least from the one
    with ``tol=0``)."""
    from rbfkmeans import RBFKMeans

    C0h = C0.cpu().numpy()
    dev = ctx.device_name
    rows = max(1, (1 << 26 if ctx.cuda else 1 << 20) // k)  # plain Lloyd: 256 MB chunks on a GPU
    capped = {} if max_iter == 300 else {"max_iter": max_iter}

    def estimator(**kwargs: Any) -> dict[str, Any]:
        est = RBFKMeans(k, device=dev, **kwargs).fit(Xh)
        return {"C": est.cluster_centers_, "n_iter": int(est.n_iter_),
                "stopped_before_max_iter": int(est.n_iter_) < est.max_iter,
                "inertia_reported": float(est.inertia_), "n_swaps": int(est.n_swaps_)}

    return {
        "plain_lloyd": lambda: plain_lloyd(Xd, C0, max_iter, rows),
        "rbfkmeans_hard_tol0": lambda: estimator(assignment="hard", init=C0h, tol=0.0,
                                                 max_iter=max_iter),
        "fast_pytorch_kmeans": lambda: fast_pytorch_kmeans_fit(Xd, C0, max_iter),
        "rbfkmeans_default": lambda: estimator(random_state=0, **capped),
        "rbfkmeans_hard": lambda: estimator(assignment="hard", init=C0h, **capped),
    }


def fit_case(ctx: Context, spec: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """One data set: its data, the shared start, every method. Returns the case's record and
    the counts of failed and attempted parts."""
    import torch

    from rbfkmeans.passes import Data
    from rbfkmeans.seeding import kmeans_plusplus

    case: dict[str, Any] = dict(spec)
    k, max_iter = spec["k"], spec["max_iter"]
    try:
        (Xh, Xd, case["data"]), case["data_s"] = wall(ctx, lambda: fit_data(ctx, spec))
        _, case["h2d_copy_s"] = wall(ctx, lambda: torch.from_numpy(Xh).to(ctx.device))
        C0, case["c0_s"] = wall(ctx, lambda: kmeans_plusplus(
            Data(Xd, validate=False), k, generator=torch.Generator().manual_seed(0)))
        case["c0"] = "rbfkmeans.seeding.kmeans_plusplus (greedy) on the device, seed 0"
        case["inertia_c0"] = inertia64(Xd, C0)
    except Exception as exc:
        case.update(error_record(exc))
        return case, 1, 1
    results: dict[str, Any] = {}
    case["methods"] = results
    failed = 0
    methods = fit_methods(ctx, k, max_iter, Xh, Xd, C0)
    for name, fn in methods.items():
        if name == "fast_pytorch_kmeans" and version("fast_pytorch_kmeans") is None:
            results[name] = {"status": "not installed"}
            continue
        if ctx.time_left() < 5.0:
            results[name] = {"status": "skipped", "reason": "the step's time ran out"}
            continue
        base = reset_peak(ctx)
        try:
            out, seconds = wall(ctx, fn)
            res = {"status": "ok", "seconds": seconds, **peak_mb(ctx, base)}
            res["inertia"] = inertia64(Xd, out.pop("C"))
            res.update(out)
        except Exception as exc:
            res = {"status": "failed", **error_record(exc)}
            failed += 1
        free_memory(ctx)
        results[name] = res
        ctx.save()
        print(f"fit {spec['name']:11s} {name:20s} " + (
            f"{res['seconds']:8.2f} s  J={res['inertia']:.6g}  it={res.get('n_iter')}"
            if res["status"] == "ok" else res.get("error", res["status"])), flush=True)
    ok = {m: r for m, r in results.items() if r.get("status") == "ok"}
    if "plain_lloyd" in ok:
        ref = ok["plain_lloyd"]
        case["ratios_to_plain_lloyd"] = {
            m: {"time": r["seconds"] / ref["seconds"], "inertia": r["inertia"] / ref["inertia"]}
            for m, r in ok.items()}
    return case, failed, len(methods)


def step_fit(ctx: Context) -> None:
    rec = ctx.record
    rec["settings"] = {
        "timing": "wall time, device synchronised before and after; the estimator's includes "
                  "validating X on the host and copying it to the device (h2d_copy_s alone)",
        "inertia": "recomputed here in float64 from the returned centroids",
        "plain_lloyd": "torch addmm + argmin + index_add_ per chunk, until the labels stop "
                       "changing or max_iter",
    }
    if not ctx.cuda:  # the CPU fits use the compiled kernels: loaded (or built) before timing
        from rbfkmeans import warmup

        _, rec["kernels_warm_up_s"] = wall(ctx, warmup.warm_up)
    cases: list[dict[str, Any]] = []
    rec["cases"] = cases
    failed = total = 0
    for spec in fit_cases(ctx.quick):
        case, f, t = fit_case(ctx, spec)
        cases.append(case)
        failed, total = failed + f, total + t
        free_memory(ctx)
        ctx.save()
    rec["status"] = "ok" if not failed else ("failed" if failed == total else "partial")
    rec["summary"] = "; ".join(
        f"{c['name']}: " + ", ".join(f"{m} {r['time']:.2f}x/{r['inertia']:.5f}"
                                     for m, r in c.get("ratios_to_plain_lloyd", {}).items()
                                     if m != "plain_lloyd")
        for c in cases) + " (time / inertia vs plain Lloyd)"


# ---------------------------------------------------------------------------------------------
# 4. vector quantisation
# ---------------------------------------------------------------------------------------------


def vq_train(ctx: Context, make_vq: Callable[[], Any], call: Callable[[Any, Any], tuple[Any, Any]],
             settings: dict[str, int]) -> dict[str, Any]:
    """Train a linear autoencoder ``x -> enc -> vq -> dec`` with Adam on reconstruction plus the
    quantiser's loss; steps per second after the warm-up steps, codes used in the last 20."""
    import torch

    dev = ctx.device
    D_in, d, k = settings["D_in"], settings["dim"], settings["codes"]
    batch, steps, warmup = settings["batch"], settings["steps"], settings["warmup"]
    data = blob_rows(settings["rows"], D_in, 64, 5, dev)  # (rows, D_in)
    torch.manual_seed(0)
    enc, dec = torch.nn.Linear(D_in, d).to(dev), torch.nn.Linear(d, D_in).to(dev)
    vq = make_vq().to(dev).train()
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters(), *vq.parameters()], lr=1e-3)
    gen = torch.Generator(device=dev).manual_seed(6)
    last: list[Any] = []

    def step() -> None:
        x = data[torch.randint(data.shape[0], (batch,), generator=gen, device=dev)]
        q, idx, loss_vq = call(vq, enc(x))
        loss = torch.nn.functional.mse_loss(dec(q), x) + loss_vq
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last.append(idx.detach().reshape(-1))
        del last[:-20]

    for _ in range(warmup):
        step()
    _, seconds = wall(ctx, lambda: [step() for _ in range(steps)])
    used = torch.bincount(torch.cat(last), minlength=k).double()
    p = used / used.sum()
    with torch.no_grad():
        vq.eval()
        x = data[:batch]
        mse = float(torch.nn.functional.mse_loss(dec(call(vq, enc(x))[0]), x))
    return {"steps_per_s": steps / seconds, "seconds": seconds, "steps": steps,
            "codes_used_last20": int((used > 0).sum()), "usage_last20": float((used > 0)
                                                                              .double().mean()),
            "perplexity_last20": float(torch.exp(-torch.special.xlogy(p, p).sum())),
            "recon_mse": mse}


def step_vq(ctx: Context) -> None:
    import rbfkmeans as rk

    rec = ctx.record
    settings = ({"D_in": 16, "dim": 8, "codes": 16, "batch": 256, "steps": 15, "warmup": 3,
                 "rows": 4096} if ctx.quick else
                {"D_in": 64, "dim": 32, "codes": 1024, "batch": 8192, "steps": 300,
                 "warmup": 10, "rows": 262_144})
    rec["settings"] = {**settings, "model": "Linear(D_in, dim) -> quantiser -> Linear(dim, D_in), "
                       "Adam 1e-3 on MSE + the quantiser's loss; data: 64 blobs"}

    def ours(vq: Any, z: Any) -> tuple[Any, Any, Any]:
        return vq(z)

    def peer(vq: Any, z: Any) -> tuple[Any, Any, Any]:
        out = vq(z.unsqueeze(0))  # (1, b, d): its (batch, sequence, dim) layout
        return out[0].squeeze(0), out[1].squeeze(0), out[2].sum()

    d, k = settings["dim"], settings["codes"]
    variants: dict[str, tuple[Callable[[], Any], Callable[[Any, Any], Any]]] = {
        "rbfkmeans_objective": (lambda: rk.VectorQuantizer(d, k), ours),
        "rbfkmeans_kmeans_ema0.8": (lambda: rk.VectorQuantizer(d, k, update="kmeans",
                                                               decay=0.8), ours),
    }
    if version("vector_quantize_pytorch") is not None:
        def make_peer() -> Any:
            from vector_quantize_pytorch import VectorQuantize

            return VectorQuantize(dim=d, codebook_size=k)

        variants["vector_quantize_pytorch"] = (make_peer, peer)
    else:
        rec["vector_quantize_pytorch"] = "not installed"
    results: dict[str, Any] = {}
    rec["methods"] = results
    failed = 0
    for name, (make, call) in variants.items():
        try:
            results[name] = vq_train(ctx, make, call, settings)
        except Exception as exc:
            results[name] = error_record(exc)
            failed += 1
        free_memory(ctx)
        ctx.save()
    rec["status"] = "ok" if not failed else ("failed" if failed == len(variants) else "partial")
    rec["summary"] = ", ".join(f"{m} {r['steps_per_s']:.1f} steps/s, usage {r['usage_last20']:.2f}"
                               for m, r in results.items() if "steps_per_s" in r)


# ---------------------------------------------------------------------------------------------
# 5. deep clustering
# ---------------------------------------------------------------------------------------------


def step_deep(ctx: Context) -> None:
    from rbfkmeans import warmup
    from rbfkmeans.deep import DeepClusterer, evaluate, load_dataset
    from rbfkmeans.deep.experiment import _clusterer as build_clusterer
    from rbfkmeans.deep.experiment import default_config

    rec = ctx.record
    _, rec["kernels_warm_up_s"] = wall(ctx, warmup.warm_up)  # the CPU start fit uses them
    cfg = default_config(quick=ctx.quick)
    ds = load_dataset("digits")
    has_device = "device" in inspect.signature(DeepClusterer.__init__).parameters
    overrides = {"device": ctx.device_name} if has_device else {}
    dc = build_clusterer(cfg, ds.X.shape[1], ds.n_clusters, 0, False, **overrides)
    if has_device:
        rec["device_support"] = "DeepClusterer(device=...)"
    else:
        rec["device_support"] = ("no device argument: the clusterer computes where its "
                                 "encoder's parameters are, so encoder and decoder were moved "
                                 "to the device")
        dc.encoder.to(ctx.device)
        if dc.decoder is not None:
            dc.decoder.to(ctx.device)
    rec["config"] = {key: list(v) if isinstance(v, tuple) else v for key, v in cfg.items()}
    rec["seed"] = 0
    _, rec["fit_seconds"] = wall(ctx, lambda: dc.fit(ds.X))
    rec["layer_device"] = str(dc.layer_.centroids.device)
    rec["joint"] = evaluate(ds.y, dc.labels_)
    rec["two_step"] = evaluate(ds.y, dc.init_labels_)
    rec["status"] = "ok"
    rec["summary"] = (f"joint ACC {rec['joint']['acc']:.3f} NMI {rec['joint']['nmi']:.3f} in "
                      f"{rec['fit_seconds']:.1f} s (layer on {rec['layer_device']})")


STEP_FUNCTIONS: dict[str, Callable[[Context], None]] = {
    "env": step_env, "tests": step_tests, "layer": step_layer, "fit": step_fit, "vq": step_vq,
    "deep": step_deep}


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------


def execute(step: str, device: str, quick: bool, out: Path, deadline: float) -> None:
    """Run one step in this process, never raising; its record goes to ``step_<name>.json``."""
    ctx = Context(step, device, quick, out, deadline)
    t0 = time.perf_counter()
    if str(ROOT / "src") not in sys.path:  # this working tree's package, as in the children
        sys.path.insert(0, str(ROOT / "src"))
    try:
        if quick and step != "tests":  # tiny problems: one thread beats several on a busy CPU
            import torch

            torch.set_num_threads(1)
            ctx.record["torch_threads"] = 1
        if os.environ.get(FAIL_ENV) == step:
            raise RuntimeError(f"failure injected on purpose ({FAIL_ENV}={step})")
        STEP_FUNCTIONS[step](ctx)
        if ctx.record["status"] == "running":
            ctx.record["status"] = "ok"
    except BaseException as exc:
        ctx.record.update({"status": "failed", **error_record(exc)})
        traceback.print_exc()
    ctx.record["step_seconds"] = time.perf_counter() - t0
    ctx.save()


def run_step(step: str, device: str, args: argparse.Namespace, timeout: float,
             log: Log) -> dict[str, Any]:
    """One step, in a process of its own (killed after ``timeout`` seconds) or in this one."""
    path = args.out / f"step_{step}.json"
    path.unlink(missing_ok=True)
    deadline = time.time() + timeout - GRACE_S
    if args.isolation == "none":
        t0 = time.perf_counter()
        execute(step, device, args.quick, args.out, deadline)
        rc, timed_out, seconds = 0, False, time.perf_counter() - t0
        step_log = None
    else:
        step_log = args.out / f"{step}.log"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", step, "--device", device,
               "--out", str(args.out), "--deadline", str(deadline)]
        if args.quick:
            cmd.append("--quick")
        rc, timed_out, seconds = run_logged(cmd, timeout, step_log, child_env())
        log.append_file(step, step_log)
    rec = read_json(path) or {"step": step}
    if timed_out:
        rec["status"] = "timeout"
        rec["error"] = f"stopped after its time limit of {timeout:.0f} s"
    elif rec.get("status") in (None, "running"):
        rec["status"] = "failed"
        rec["error"] = f"the step's process exited with code {rc} before recording a result"
        if step_log is not None:
            rec["log_tail"] = tail(step_log)
    rec.update({"seconds": seconds, "timeout_s": timeout, "returncode": rc,
                "log": None if step_log is None else step_log.name})
    return rec


def parse_steps(text: str) -> list[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        raise argparse.ArgumentTypeError(
            f"unknown step(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"choose from {', '.join(STEPS)}")
    return [s for s in STEPS if s in steps]  # the fixed order


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog="Module docstring: what each step measures.")
    parser.add_argument("--device", default=None,
                        help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes everywhere (seconds)")
    parser.add_argument("--table", type=Path, default=None,
                        help="print the docs' tables from this results file and exit")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument("--steps", type=parse_steps, default=list(STEPS),
                        help=f"comma-separated subset of {','.join(STEPS)}")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="total time for all steps (default 450, --quick 300)")
    parser.add_argument("--isolation", choices=("process", "none"), default=None,
                        help="run each step in a process of its own, killed at its time limit "
                             "(default), or all in this process (the default with --quick)")
    parser.add_argument("--child", choices=sorted(STEP_FUNCTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=math.inf, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


TABLE_BEGIN = "<!-- gpu table: begin (generated by benchmarks/gpu_check.py --table FILE) -->"
TABLE_END = "<!-- gpu table: end -->"


def markdown_table(committed: dict[str, Any]) -> str:
    """The docs' GPU tables from ``benchmarks/results/gpu.json`` (runs ``before`` and, where it
    has the step, ``after`` a change): the layer's forward + backward as multiples of the matrix
    product, and each fit's time and inertia as multiples of the plain torch Lloyd's."""
    runs = committed["runs"]

    def layer_cases(run: dict[str, Any]) -> dict[str, float]:
        step = run["steps"].get("layer", {})
        return {f"{c['assignment']}, {c['dtype']}": c["ratio_fwd_bwd"]
                for c in step.get("cases", []) if "ratio_fwd_bwd" in c}

    before = {**layer_cases(runs["before"]), **layer_cases(runs.get("before_layer", {"steps": {}}))}
    after = layer_cases(runs["after"])
    lines = [TABLE_BEGIN, "", f"Device: {committed['device']}, torch {committed['torch']}, CUDA "
             f"{committed['cuda']}.", "",
             "| layer forward + backward (n = 1,000,000, d = 128, k = 1,024) | before | after |",
             "|---|---|---|"]
    for case in after or before:
        cell = f"{before[case]:.1f}x" if case in before else "-"
        lines.append(f"| {case} | {cell} | {after.get(case, float('nan')):.2f}x |")

    def fit_cases(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
        step = run["steps"].get("fit", {})
        return {(c["name"], m): r for c in step.get("cases", [])
                for m, r in c.get("ratios_to_plain_lloyd", {}).items() if m != "plain_lloyd"}

    fb, fa = fit_cases(runs["before"]), fit_cases(runs["after"])
    lines += ["", "| fit: data, method | time / plain Lloyd, before | after | inertia / plain "
              "Lloyd, after |", "|---|---|---|---|"]
    for key in fa or fb:
        b, a = fb.get(key), fa.get(key, {})
        lines.append(f"| {key[0]}, {key[1]} | {b['time']:.2f}x | {a.get('time', float('nan')):.2f}x"
                     f" | {a.get('inertia', float('nan')):.5f} |" if b else
                     f"| {key[0]}, {key[1]} | - | {a['time']:.2f}x | {a['inertia']:.5f} |")
    lines += ["", TABLE_END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table is not None:
        print(markdown_table(json.loads(args.table.read_text())))
        return 0
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        execute(args.child, args.device or "auto", args.quick, args.out, args.deadline)
        return 0
    if args.isolation is None:
        args.isolation = "none" if args.quick else "process"
    budget = args.budget_s if args.budget_s is not None else (300.0 if args.quick else 450.0)
    t_end = time.time() + budget
    log = Log(args.out / "log.txt")
    results: dict[str, Any] = {
        "script": "benchmarks/gpu_check.py",
        "argv": _recorded_argv(sys.argv[1:]),
        "settings": {"device": args.device, "quick": args.quick, "budget_s": budget,
                     "steps": args.steps, "shares": SHARES, "isolation": args.isolation,
                     "fail_env": os.environ.get(FAIL_ENV)},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": {},
        "steps": {step: {"status": "pending"} for step in args.steps}}
    results_path = args.out / "results.json"
    write_json(results_path, results)
    env = run_step("env", args.device or "auto", args, 90.0, log)
    results["environment"] = env
    device = args.device or env.get("device_resolved") or "cpu"
    results["settings"]["device"] = device
    write_json(results_path, results)
    log.line(f"[gpu_check] env    {env['status']:8s} {env['seconds']:6.1f} s  "
             f"{env.get('summary', env.get('error', ''))}")
    for i, step in enumerate(args.steps):
        left = t_end - time.time()
        share = SHARES[step] / sum(SHARES[s] for s in args.steps[i:])
        rec = run_step(step, device, args, max(MIN_STEP_S, left * share), log)
        results["steps"][step] = rec
        write_json(results_path, results)
        log.line(f"[gpu_check] {step:6s} {rec['status']:8s} {rec['seconds']:6.1f} s  "
                 f"{rec.get('summary', rec.get('error', ''))}")
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json(results_path, results)
    log.line(f"[gpu_check] wrote {results_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
