"""``rbfkmeans reproduce``: run every experiment, write ``results.json``, the figures and
``report.md``.

Each experiment is a pure function of the shared :class:`~._common.Context` returning a
JSON-serialisable dict; the runner calls them in turn under one progress bar (its description says
what is running), writes ``results.json`` after each (so a partial run leaves its numbers), then
draws the figures from the file alone and writes the report from it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ._common import Config, Context, build_context, dataset_summary, sanitize

__all__ = ["SEED_MAX", "load_results", "run_reproduction"]

#: The largest ``seed`` of a reproduction: the runs seed their generators with up to
#: ``10 * seed + 9`` (and ``1000 * seed + 999`` for torch's), and scikit-learn's and the
#: estimator's ``random_state`` must be below ``2**32``.
SEED_MAX = 2**32 // 10 - 1


def _steps(config: Config) -> list[tuple[str, Callable[[Context, dict[str, Any]], Any]]]:
    from . import collapse, cost, critical, followups, gradient, stability, trajectories

    steps: list[tuple[str, Callable[[Context, dict[str, Any]], Any]]] = [
        ("collapse", lambda ctx, res: collapse.collapse(ctx)),
        ("rates", lambda ctx, res: collapse.rates(res["collapse"])),
        ("gamma_convergence", lambda ctx, res: collapse.gamma(res["collapse"])),
        ("gradient_step_equals_lloyd", lambda ctx, res: gradient.gradient_vs_lloyd(ctx)),
        ("stability", lambda ctx, res: stability.stability(ctx)),
        ("critical_temperatures", lambda ctx, res: critical.critical_temperatures(ctx)),
        ("cost", lambda ctx, res: cost.cost(ctx)),
        ("followups", lambda ctx, res: followups.followups(ctx)),
        ("trajectories", lambda ctx, res: trajectories.trajectories(ctx)),
    ]
    if config.large_n:
        steps.insert(2, ("rates_large_n",
                         lambda ctx, res: collapse.rates_large_n(ctx, n=config.large_n)))
    return steps


def _write_json(path: Path, results: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(sanitize(results), allow_nan=False))
    os.replace(tmp, path)


def load_results(out: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``results.json`` of a run directory."""
    return json.loads((Path(out) / "results.json").read_text())


def run_reproduction(
    out: str | os.PathLike[str], *, quick: bool = False, seed: int = 0, progress: bool = True,
    threads: int = 1,
) -> dict[str, Any]:
    """Run the reproduction into ``out`` (created); returns the results as written.

    ``seed`` is an integer from 0 to :data:`SEED_MAX`. ``threads`` bounds torch's intra-op
    threads while it runs (the problems are small; on a shared machine one thread is much faster
    than several fighting for cores): an integer from 1 to
    :data:`rbfkmeans.cli_args.MAX_THREADS` (1024, however many cores the machine has).
    ``quick`` (the small configuration of the tests) and ``progress`` (a progress bar) are
    bools. A bad argument raises ``TypeError`` / ``ValueError`` naming it before ``out`` is
    created.
    """
    from tqdm.auto import tqdm

    from .._validation import check_positive_int
    from ..cli_args import max_threads

    if not isinstance(out, str | os.PathLike):
        raise TypeError(f"out must be a path; got {type(out).__name__} {out!r}")
    if not os.fspath(out):
        raise ValueError("out must name a folder; got ''")
    for flag, value in (("quick", quick), ("progress", progress)):
        if not isinstance(value, bool):
            raise TypeError(f"{flag} must be a bool; got {type(value).__name__} {value!r}")
    seed = check_positive_int(seed, "seed", minimum=0)
    if seed > SEED_MAX:
        raise ValueError(f"seed must be an integer from 0 to {SEED_MAX}; got {seed!r}")
    threads = check_positive_int(threads, "threads")
    if threads > max_threads():
        raise ValueError(f"threads must be an integer from 1 to {max_threads()}; got "
                         f"{threads!r}")
    config = Config.quick_config(seed) if quick else Config.default(seed)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    steps = _steps(config)
    bar = tqdm(total=len(steps) + 3, desc="reproduce", disable=not progress, unit="step")
    results: dict[str, Any] = {
        "meta": {
            "config": config.as_dict(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "timings_s": {},
        }
    }
    t_start = time.perf_counter()
    try:
        def tick(what: str) -> None:
            bar.set_description(what)

        t0 = time.perf_counter()
        ctx = build_context(config, tick)
        results["datasets"] = dataset_summary(ctx)
        results["meta"]["timings_s"]["datasets"] = time.perf_counter() - t0
        bar.update(1)
        for name, fn in steps:
            tick(name)
            t0 = time.perf_counter()
            results[name] = fn(ctx, results)
            results["meta"]["timings_s"][name] = time.perf_counter() - t0
            _write_json(json_path, results)
            bar.update(1)
    finally:
        torch.set_num_threads(old_threads)
    results["meta"]["total_compute_s"] = time.perf_counter() - t_start
    _write_json(json_path, results)

    from .plots import draw_all
    from .report import write_report

    bar.set_description("figures")
    stored = load_results(out_dir)  # the figures and the report see only the file
    figures = draw_all(stored, out_dir)
    bar.update(1)
    bar.set_description("report")
    write_report(stored, out_dir, figures)
    bar.update(1)
    bar.set_description("done")
    bar.close()
    return stored
