"""Figures of the ``rbfkmeans vq`` experiment, drawn only from its ``results.json``.

``plot_reconstructions`` shows a few held-out digits (top row) and their reconstructions through
each quantiser (one row per method, first seed); ``plot_code_usage`` shows how many held-out
vectors each code receives, codes sorted from most to least used, one panel per method.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_code_usage", "plot_reconstructions"]


def _load(json_path: str | Path) -> tuple[dict[str, Any], list[str]]:
    results = json.loads(Path(json_path).read_text())
    ran = [m for m, r in results["methods"].items() if "per_seed" in r]
    return results, ran


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_reconstructions(json_path: str | Path, png_path: str | Path) -> Path:
    """Held-out digits and their reconstructions (rows: original, then each method)."""
    plt = _pyplot()
    results, ran = _load(json_path)
    originals = np.asarray(results["originals"])  # (n_show, 64)
    rows = [("held-out digit", originals)]
    rows += [(f"{m}\nMSE {results['methods'][m]['mean']['mse']:.4f}",
              np.asarray(results["methods"][m]["reconstructions"])) for m in ran]
    n_show = originals.shape[0]
    side = round(float(np.sqrt(originals.shape[1])))
    fig, axes = plt.subplots(len(rows), n_show, figsize=(1.1 * n_show + 1.6, 1.2 * len(rows)),
                             squeeze=False)
    for r, (label, images) in enumerate(rows):
        for c in range(n_show):
            ax = axes[r, c]
            ax.imshow(np.clip(images[c], 0, 1).reshape(side, side), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r, 0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    cfg = results["config"]
    fig.suptitle(f"{cfg['slots']} codes of {cfg['codebook_size']} per digit, "
                 f"{cfg['steps']} steps (first seed)", fontsize=9)
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path


def plot_code_usage(json_path: str | Path, png_path: str | Path) -> Path:
    """Held-out vectors per code, codes sorted by use, one panel per method."""
    plt = _pyplot()
    results, ran = _load(json_path)
    fig, axes = plt.subplots(1, len(ran), figsize=(4.2 * len(ran), 3.0), squeeze=False,
                             sharey=True)
    for ax, m in zip(axes[0], ran, strict=True):
        counts = np.sort(np.asarray(results["methods"][m]["code_counts"]))[::-1]
        k = counts.size
        ax.bar(np.arange(k), counts, width=1.0, color="tab:blue")
        ax.axhline(counts.sum() / k, color="k", lw=0.8, ls="--", label="uniform")
        mean = results["methods"][m]["mean"]
        ax.set_title(f"{m}\nusage {mean['usage']:.1%}, perplexity {mean['perplexity']:.1f} "
                     f"of {k}", fontsize=9)
        ax.set_xlabel("code (sorted by use)")
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("held-out vectors")
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
