"""Figures of the deep-cluster experiment, drawn only from the files it saved.

``plot_embeddings`` projects the embedding before joint training (the pretrained autoencoder's)
and after it to 2-D -- t-SNE (scikit-learn, fixed seed, PCA start) up to 5,000 points, else the
first two principal axes -- coloured by cluster (top row) and by the true class (bottom row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["pca_2d", "plot_embeddings", "project_2d"]


def pca_2d(Z: np.ndarray) -> np.ndarray:
    """Coordinates (n, 2) of ``Z`` (n, p) on its two leading principal axes (signs fixed so the
    largest loading of each axis is positive)."""
    Zc = Z - Z.mean(axis=0)
    _, _, Vt = np.linalg.svd(Zc, full_matrices=False)
    V = Vt[:2].T  # (p, 2)
    V = V * np.sign(V[np.abs(V).argmax(axis=0), [0, 1]])
    P = Zc @ V  # (n, 2)
    if P.shape[1] < 2:
        P = np.hstack([P, np.zeros((P.shape[0], 2 - P.shape[1]))])
    return P


def project_2d(Z: np.ndarray, method: str = "auto", seed: int = 0) -> np.ndarray:
    """2-D coordinates (n, 2) of ``Z`` (n, p): ``"tsne"``, ``"pca"`` or ``"auto"`` (t-SNE up to
    5,000 rows)."""
    if method not in ("auto", "tsne", "pca"):
        raise ValueError(f"method must be 'auto', 'tsne' or 'pca'; got {method!r}")
    if method == "pca" or (method == "auto" and Z.shape[0] > 5000) or Z.shape[0] < 5:
        return pca_2d(Z)
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    perplexity = float(min(30.0, (Z.shape[0] - 1) / 3))
    tsne = TSNE(2, perplexity=perplexity, init="pca", random_state=seed)
    with threadpool_limits(limits=1):  # one thread: much faster than several on a busy machine
        return np.asarray(tsne.fit_transform(Z))


def plot_embeddings(
    npz_path: str | Path, png_path: str | Path, title: str = "", method: str = "auto"
) -> Path:
    """Draw ``embeddings.npz`` (keys before, after, labels_before, labels_after, y) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = np.load(npz_path)
    fig, axes = plt.subplots(2, 2, figsize=(10, 9))
    panels = [("before", "labels_before", "pretrained embedding + RBFKMeans (two-step)"),
              ("after", "labels_after", "after joint training")]
    for col, (key, lab, name) in enumerate(panels):
        P = project_2d(np.asarray(data[key], dtype=np.float64), method)
        for row, (colour, what) in enumerate([(data[lab], "cluster"), (data["y"], "true class")]):
            ax = axes[row, col]
            ax.scatter(P[:, 0], P[:, 1], c=colour, cmap="tab10", s=4, alpha=0.8, linewidths=0)
            ax.set_title(f"{name}\ncoloured by {what}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
    name = "PCA" if method == "pca" or len(data["y"]) > 5000 or len(data["y"]) < 5 else "t-SNE"
    fig.suptitle(f"{title}: 2-D {name} of the embedding, seed {int(data['seed'])}")
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
