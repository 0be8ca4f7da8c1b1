"""What a run of the ``rbfkmeans vq`` experiment reports: the quantisers compared, the metrics
measured on held-out images, their mean and standard deviation over the seeds, the verdict on the
targets and the markdown table.

For each metric ``m`` of :data:`METRICS` and seeds ``s = 1..S``, :func:`summarize` gives the mean
``mean_m = (1/S) sum_s m_s`` and the sample standard deviation
``std_m = sqrt(sum_s (m_s - mean_m)^2 / (S - 1))`` (0 for one seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["METHODS", "METRICS", "PEER", "markdown_table", "summarize", "targets"]

#: The peer package, compared where it is installed.
PEER = "vector-quantize-pytorch"
#: The quantisers compared, in the table's order.
METHODS = ("rbfkmeans", "rbfkmeans-kmeans", PEER)
#: What is measured per seed: held-out MSE, code usage and perplexity, dead codes, time.
METRICS = ("mse", "usage", "perplexity", "dead_codes", "time_s")


def _check_per_seed(per_seed: Any) -> list[dict[str, Any]]:
    """``per_seed`` as a list if it is a non-empty sequence of dicts holding every metric of
    :data:`METRICS`, else raise naming it."""
    if isinstance(per_seed, str | bytes | dict) or not isinstance(per_seed, Sequence):
        raise TypeError(f"per_seed must be a list of per-seed result dicts; got "
                        f"{type(per_seed).__name__} {per_seed!r:.80}")
    rows = list(per_seed)
    if not rows:
        raise ValueError("per_seed must hold at least one per-seed row; got an empty list")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"per_seed[{i}] must be a dict of metrics; got "
                            f"{type(row).__name__} {row!r:.80}")
        missing = [m for m in METRICS if m not in row]
        if missing:
            raise ValueError(f"per_seed[{i}] must hold {', '.join(map(repr, missing))}; got "
                             f"keys {sorted(map(str, row))}")
    return rows


def summarize(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean and std (ddof=1 when there are several seeds) of each metric over the seeds.
    ``per_seed``: a non-empty list of dicts holding each metric (else ``TypeError`` or
    ``ValueError``)."""
    per_seed = _check_per_seed(per_seed)
    out: dict[str, dict[str, float]] = {"mean": {}, "std": {}}
    for metric in METRICS:
        v = np.array([r[metric] for r in per_seed], dtype=np.float64)
        out["mean"][metric] = float(v.mean())
        out["std"][metric] = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return out


def targets(methods: dict[str, Any]) -> dict[str, Any]:
    """The run's verdict on the targets: ``rbfkmeans`` uses >= 95% of its codes on held-out
    digits (every seed), and its mean held-out MSE is at or below the peer's."""
    ours = methods["rbfkmeans"]
    usage = [r["usage"] for r in ours["per_seed"]]
    out: dict[str, Any] = {"usage_at_least_0.95": bool(min(usage) >= 0.95),
                           "min_usage": float(min(usage))}
    if "per_seed" in methods.get(PEER, {}):
        ours_mse, peer_mse = ours["mean"]["mse"], methods[PEER]["mean"]["mse"]
        out.update(mse_at_or_below_peer=bool(ours_mse <= peer_mse),
                   mse_ratio_to_peer=ours_mse / peer_mse)
    else:
        out["mse_at_or_below_peer"] = None
    return out


def markdown_table(results: dict[str, Any]) -> str:
    """The results as a markdown table: per quantiser, mean ± std over the seeds of the held-out
    MSE, code usage, perplexity, dead codes and training time (a skipped peer says why).
    ``results``: a dict whose ``"methods"`` maps each quantiser to a dict holding ``"skipped"``
    or ``"mean"`` and ``"std"`` (as :func:`~rbfkmeans.vq.experiment.run_vq` writes it; else
    ``TypeError``/``ValueError`` naming the entry)."""
    _check_results(results)
    lines = ["| quantiser | held-out MSE | usage | perplexity | dead codes | training time |",
             "|---|---|---|---|---|---|"]
    for name, row in results["methods"].items():
        if "skipped" in row:
            lines.append(f"| {name} | {row['skipped']} |  |  |  |  |")
            continue
        m, s = row["mean"], row["std"]
        lines.append(
            f"| {name} | {m['mse']:.4f} ± {s['mse']:.4f} | {100 * m['usage']:.1f}% ± "
            f"{100 * s['usage']:.1f}% | {m['perplexity']:.1f} ± {s['perplexity']:.1f} | "
            f"{m['dead_codes']:.1f} | {m['time_s']:.1f} ± {s['time_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def _check_results(results: Any) -> None:
    """Raise naming the entry unless ``results`` is laid out as :func:`markdown_table` reads
    it."""
    if not isinstance(results, dict):
        raise TypeError(f"results must be a dict (what run_vq returns); got "
                        f"{type(results).__name__} {results!r:.80}")
    methods = results.get("methods")
    if not isinstance(methods, dict):
        raise ValueError(f"results['methods'] must be a dict of quantisers; got "
                         f"{type(methods).__name__} {methods!r:.80}")
    for name, row in methods.items():
        where = f"results['methods'][{name!r}]"
        if not isinstance(row, dict):
            raise TypeError(f"{where} must be a dict; got {type(row).__name__} {row!r:.80}")
        if "skipped" in row:
            continue
        for part in ("mean", "std"):
            cur = row.get(part)
            missing = [m for m in METRICS if not isinstance(cur, dict) or m not in cur]
            if missing:
                raise ValueError(f"{where}[{part!r}] must be a dict holding "
                                 f"{', '.join(map(repr, missing))}; got {cur!r:.80}")
