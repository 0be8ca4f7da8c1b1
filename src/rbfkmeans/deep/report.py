"""Summaries of the experiments' per-seed scores, and their markdown tables.

``summarize`` gives the mean, std, min and max over seeds; ``paired_gains`` compares joint training
with its own start seed by seed, ``g_s = joint_s - start_s``; ``gains_markdown`` and
``ablation_markdown`` are the tables of docs/deep-clustering.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["METRICS", "ablation_markdown", "gains_markdown", "paired_gains", "summarize"]

#: the scores each per-seed row holds (:func:`rbfkmeans.deep.evaluate`)
METRICS = ("acc", "nmi", "ari")


def _scores(rows: Sequence[dict[str, float]], metric: str, name: str) -> np.ndarray:
    """``rows[i][metric]`` as float64, with an error naming ``name`` where a row lacks it."""
    if len(rows) == 0:
        raise ValueError(f"{name} must hold at least one per-seed row")
    missing = [i for i, r in enumerate(rows) if metric not in r or "seed" not in r]
    if missing:
        raise ValueError(f"{name}[{missing[0]}] must hold 'seed' and {metric!r}; got "
                         f"{sorted(rows[missing[0]])}")
    return np.array([r[metric] for r in rows], dtype=np.float64)


def summarize(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean, std (ddof=1 when there are several seeds), min and max of each metric."""
    out: dict[str, dict[str, float]] = {"mean": {}, "std": {}, "min": {}, "max": {}}
    for metric in METRICS:
        v = _scores(per_seed, metric, "per_seed")
        out["mean"][metric] = float(v.mean())
        out["std"][metric] = float(v.std(ddof=1)) if v.size > 1 else 0.0
        out["min"][metric] = float(v.min())
        out["max"][metric] = float(v.max())
    return out


def paired_gains(joint: Sequence[dict[str, float]], start: Sequence[dict[str, float]],
                 metric: str) -> dict[str, float]:
    """Joint training's gain over its own start, seed by seed: ``g_s = joint_s - start_s`` for
    each seed ``s`` both lists hold; the mean and std (ddof=1) of ``g``, how many seeds gained
    (``g_s > 0``) and how many were compared."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
    _scores(joint, metric, "joint")
    _scores(start, metric, "start")
    by_seed = {r["seed"]: r[metric] for r in start}
    g = np.array([r[metric] - by_seed[r["seed"]] for r in joint if r["seed"] in by_seed],
                 dtype=np.float64)
    if g.size == 0:
        raise ValueError("joint and start share no seed")
    return {"mean": float(g.mean()), "std": float(g.std(ddof=1)) if g.size > 1 else 0.0,
            "above": int((g > 0).sum()), "n": int(g.size)}


def gains_markdown(runs: dict[str, tuple[Sequence[dict[str, float]],
                                         Sequence[dict[str, float]]]]) -> str:
    """The table of :func:`paired_gains` per data set (``name -> (joint rows, start rows)``):
    the mean gain ± the std of the per-seed gains, the seeds that gained, and the std of the
    start across seeds (the unpaired yardstick) for ACC and NMI."""
    lines = ["| data | seeds | ACC gain | seeds up | start's ACC std | NMI gain | seeds up | "
             "start's NMI std |", "|---|---|---|---|---|---|---|---|"]
    for name, (joint, start) in runs.items():
        cells = []
        for metric in ("acc", "nmi"):
            g = paired_gains(joint, start, metric)
            spread = summarize(start)["std"][metric]
            cells += [f"{g['mean']:+.4f} ± {g['std']:.4f}", f"{g['above']}/{g['n']}",
                      f"{spread:.4f}"]
        lines.append(f"| {name} | {len(joint)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ablation_markdown(result: dict[str, Any]) -> str:
    """The ablation table (mean ± std over seeds) as markdown."""
    lines = [
        f"Ablation on `{result['dataset']}`, seeds {result['seeds']} (mean ± std over seeds).",
        "",
        "| variant | ACC | NMI | ARI |",
        "|---|---|---|---|",
    ]
    for name, row in result["variants"].items():
        cells = [f"{row['mean'][m]:.3f} ± {row['std'][m]:.3f}" for m in ("acc", "nmi", "ari")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
