"""The ``rbfkmeans deep-cluster`` experiment: three ways to cluster a real data set, per seed.

* ``kmeans_raw`` -- :class:`~rbfkmeans.RBFKMeans` on the (preprocessed) input features;
* ``two_step``   -- an MLP autoencoder pretrained on reconstruction, then RBFKMeans on its
  embedding (this is also the starting point of the joint method);
* ``joint``      -- :class:`~rbfkmeans.deep.joint.DeepClusterer`: encoder, decoder and k-means
  layer trained together from that start.

Writes ``DIR/results.json`` (ACC, NMI, ARI per method and seed; mean, std, min, max over seeds;
the configuration and timings), ``DIR/labels.npz`` (one predicted-label array per method and
seed, keys ``<method>_seed<S>``), ``DIR/embeddings.npz`` (the first seed's embedding before and
after joint training) and, drawn from those files only, ``DIR/embedding_<dataset>.png``.
``run_ablation`` trains variants of the joint method from the same pretrained networks and writes
``DIR/ablation.json`` and ``DIR/ablation.md`` (the tables: :mod:`rbfkmeans.deep.report`).
"""

from __future__ import annotations

import copy
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._validation import check_seeds
from .datasets import load_dataset
from .joint import DeepClusterer
from .metrics import evaluate
from .report import ablation_markdown, summarize

__all__ = [
    "ABLATIONS",
    "DATASET_DEFAULTS",
    "METHODS",
    "default_config",
    "peak_rss_mb",
    "run_ablation",
    "run_deep_cluster",
]

METHODS = ("kmeans_raw", "two_step", "joint")

#: Settings shared by every data set (only the network's input width follows the data).
_DEFAULTS: dict[str, Any] = {
    "hidden": (128, 128),
    "n_latent": 10,
    "assignment": "softmax",
    "pretrain_epochs": 200,
    "epochs": 50,
    "batch_size": 256,
    "kmeans_weight": 0.01,
    "recon_weight": 1.0,
    "self_training_weight": 1.0,
    "n_neighbors": 10,
    "contrastive_weight": 1.0,
    "contrastive_temperature": 1.0,
    "target_balance": 0.5,
    "neighbor_labels": True,
    "T_start": 0.03,
    "T_end": 0.03,
}

#: Settings every data set shares unless :data:`DATASET_DEFAULTS` says otherwise (they keep the
#: small sets on the method above: an MLP, no shifts, the input-space graph, no consistency term).
_DEFAULTS.update({"encoder": "mlp", "image_shape": None, "augment": 0, "rotation": 0.0,
                  "scaling": 0.0, "graph_dims": None,
                  "joint_graph": "input", "consistency_weight": 0.0, "entropy_weight": 5.0,
                  "lr": 1e-3})

_MNIST: dict[str, Any] = {
    "encoder": "cnn", "image_shape": (28, 28), "augment": 2, "rotation": 15.0, "scaling": 0.1,
    "graph_dims": 50,
    "joint_graph": "embedding", "pretrain_epochs": 20, "epochs": 10, "batch_size": 512,
    "kmeans_weight": 0.0, "self_training_weight": 0.0, "consistency_weight": 1.0,
    "entropy_weight": 5.0, "T_start": 0.3, "T_end": 0.3,
}

#: Per data set: the settings that differ from the shared ones (MNIST: 28x28 images, 70,000 rows).
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {"mnist": _MNIST, "mnist-test": _MNIST}

#: Tiny settings for tests and smoke runs.
_QUICK: dict[str, Any] = {"hidden": (32,), "n_latent": 4, "pretrain_epochs": 2, "epochs": 2}

#: name -> overrides of the joint method's settings, for the ablation table.
ABLATIONS: dict[str, dict[str, Any]] = {
    "full (defaults)": {},
    "no contrastive pretraining (mu=0)": {"contrastive_weight": 0.0},
    "DEC's size balance (gamma=1)": {"target_balance": 1.0},
    "no contrastive term, gamma=1": {"contrastive_weight": 0.0, "target_balance": 1.0},
    "contrastive tau=0.5": {"contrastive_temperature": 0.5},
    "labels from the layer alone (no neighbour vote)": {"neighbor_labels": False},
    "no self-training (beta=0)": {"self_training_weight": 0.0},
    "DEC targets (no neighbours)": {"n_neighbors": 0},
    "no soft k-means term (alpha=0)": {"kmeans_weight": 0.0},
    "soft k-means term alpha=1": {"kmeans_weight": 1.0},
    "no reconstruction (lambda=0)": {"recon_weight": 0.0},
    "lambda=10": {"recon_weight": 10.0},
    "annealed T: 1.0 -> 0.03 T_c": {"T_start": 1.0, "T_end": 0.03},
    "mapping entmax15": {"assignment": "entmax15"},
    "mapping sparsemax": {"assignment": "sparsemax"},
}

#: MNIST's variants: what the turns and rescalings, and the CNN encoder, each add (the MLPs
#: have a decoder, so their pretraining adds reconstruction to the contrastive term).
_MNIST_ABLATIONS: dict[str, dict[str, Any]] = {
    "full (MNIST settings)": {},
    "moves only (no turns or rescalings)": {"rotation": 0.0, "scaling": 0.0},
    "MLP encoder 784-128-128-10": {"encoder": "mlp"},
    "MLP encoder 784-500-500-2000-10 (DEC's)": {"encoder": "mlp", "hidden": (500, 500, 2000)},
}

#: Per data set: the ablation's variants where they differ from :data:`ABLATIONS`.
DATASET_ABLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "mnist": _MNIST_ABLATIONS, "mnist-test": _MNIST_ABLATIONS,
}

_MODEL_KEYS = ("hidden", "n_latent", "encoder")

#: Settings that change pretraining: a variant touching one is pretrained on its own (the
#: others, ``n_neighbors`` included, train from the shared pretrained networks).
_PRETRAIN_KEYS = ("contrastive_weight", "contrastive_temperature", "pretrain_epochs",
                  "pretrain_lr", "batch_size", "normalize", "augment", "rotation", "scaling",
                  "graph_dims")


def default_config(quick: bool = False, dataset: str | None = None,
                   **overrides: Any) -> dict[str, Any]:
    """The experiment's settings: :data:`_DEFAULTS`, then those of ``dataset``
    (:data:`DATASET_DEFAULTS`), then the quick ones, then ``overrides`` (``None`` values are
    ignored)."""
    cfg = dict(_DEFAULTS)
    cfg.update(DATASET_DEFAULTS.get(dataset or "", {}))
    if quick:
        cfg.update(_QUICK)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in cfg:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(sorted(cfg))}")
        cfg[key] = value
    cfg["hidden"] = tuple(int(h) for h in cfg["hidden"])
    if cfg["image_shape"] is not None:
        cfg["image_shape"] = tuple(int(h) for h in cfg["image_shape"])
    return cfg


def _clusterer(cfg: dict[str, Any], n_features: int, k: int, seed: int, verbose: bool,
               **overrides: Any) -> DeepClusterer:
    kwargs = {key: v for key, v in cfg.items() if key not in _MODEL_KEYS}
    kwargs.update(overrides)
    if cfg["encoder"] == "cnn":
        kwargs.pop("image_shape")
        return DeepClusterer.cnn(cfg["image_shape"], k, n_latent=cfg["n_latent"],
                                 random_state=seed, verbose=verbose, **kwargs)
    return DeepClusterer.mlp(
        n_features, k, hidden=cfg["hidden"], n_latent=cfg["n_latent"], random_state=seed,
        verbose=verbose, **kwargs,
    )


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (``getrusage``; 0 where unavailable)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if platform.system() == "Darwin" else peak / 1024


def _environment() -> dict[str, Any]:
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "python": platform.python_version(), "machine": platform.machine()}


def run_deep_cluster(
    dataset: str = "digits",
    seeds: int | Sequence[int] = 3,
    out: str | Path = "out/deep",
    *,
    quick: bool = False,
    progress: bool = True,
    figure: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """Run the three methods on ``dataset`` for each seed; write the files of the module
    docstring to ``out`` and return the results dictionary (also ``results.json``)."""
    from tqdm.auto import tqdm

    from ..estimator import RBFKMeans

    cfg = default_config(quick, dataset, **overrides)
    seed_list = check_seeds(seeds)
    ds = load_dataset(dataset)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    X, y, k = ds.X, ds.y, ds.n_clusters
    per_seed: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    labels: dict[str, np.ndarray] = {}
    timings: list[dict[str, float]] = []
    t_all, cpu_all = time.perf_counter(), time.process_time()
    for seed in tqdm(seed_list, desc=f"deep-cluster {dataset}", disable=not progress):
        t0 = time.perf_counter()
        raw = RBFKMeans(k, assignment=cfg["assignment"], schedule="geometric",
                        random_state=seed).fit(X).labels_
        t1 = time.perf_counter()
        dc = _clusterer(cfg, X.shape[1], k, seed, progress)
        t2 = time.perf_counter()  # pretraining is timed inside fit, among the stages
        dc.fit(X)
        t3 = time.perf_counter()
        preds = {"kmeans_raw": np.asarray(raw), "two_step": dc.init_labels_, "joint": dc.labels_}
        for method, pred in preds.items():
            labels[f"{method}_seed{seed}"] = np.asarray(pred, dtype=np.int64)
            per_seed[method].append({"seed": seed, **evaluate(y, pred)})
        reseeded = sum(len(h["reseeded"]) for h in dc.history_)
        timings.append({"seed": seed, "kmeans_raw_s": t1 - t0, **dc.timings_,
                        "build_s": t2 - t1, "total_s": t3 - t0, "peak_rss_mb": peak_rss_mb(),
                        "reseeded": reseeded})
        if seed == seed_list[0]:
            np.savez_compressed(
                out / "embeddings.npz", before=dc.init_embedding_, after=dc.transform(X),
                labels_before=dc.init_labels_, labels_after=dc.labels_, y=y,
                centers_after=dc.layer_.centroids.detach().cpu().numpy(), seed=seed,
            )
    results = {
        "dataset": dataset,
        "description": ds.description,
        "n_samples": int(X.shape[0]),
        "n_features": int(X.shape[1]),
        "n_clusters": k,
        "seeds": seed_list,
        "config": {key: list(v) if isinstance(v, tuple) else v for key, v in cfg.items()},
        "methods": {
            m: {"per_seed": per_seed[m], **summarize(per_seed[m])} for m in METHODS
        },
        "timings": timings,
        "runtime_s": time.perf_counter() - t_all,
        "cpu_s": time.process_time() - cpu_all,
        "environment": _environment(),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    np.savez_compressed(out / "labels.npz", **labels)  # type: ignore[arg-type]
    if figure:
        from .plots import plot_embeddings

        plot_embeddings(out / "embeddings.npz", out / f"embedding_{dataset}.png", title=dataset)
    return results


def run_ablation(
    dataset: str = "digits",
    seeds: int | Sequence[int] = 3,
    out: str | Path = "out/deep",
    *,
    variants: dict[str, dict[str, Any]] | None = None,
    quick: bool = False,
    progress: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """Train each variant of the joint method (overrides of the defaults) from the same pretrained
    autoencoder per seed; write ``ablation.json`` and the markdown table ``ablation.md``.

    A variant that changes the network (``encoder``, ``hidden``, ``n_latent``) or its
    pretraining (:data:`_PRETRAIN_KEYS`) is pretrained on its own; its entry then holds its own
    two-step start (``two_step``) and pretraining seconds beside the joint result. The shared
    row ``two_step`` is the start of the variants that share the pretrained network."""
    from tqdm.auto import tqdm

    cfg = default_config(quick, dataset, **overrides)
    if variants is None:
        variants = DATASET_ABLATIONS.get(dataset, ABLATIONS)
    seed_list = check_seeds(seeds)
    ds = load_dataset(dataset)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, float]]] = {"two_step": []}
    rows.update({name: [] for name in variants})
    starts: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    seconds: dict[str, float] = {name: 0.0 for name in variants}
    pretrain_seconds: dict[str, float] = {"two_step": 0.0}
    for seed in tqdm(seed_list, desc=f"ablation {dataset}", disable=not progress):
        base = _clusterer(cfg, ds.X.shape[1], ds.n_clusters, seed, False)
        t0 = time.perf_counter()
        base.pretrain(ds.X)
        pretrain_seconds["two_step"] += time.perf_counter() - t0
        two_step_done = False
        for name, change in tqdm(variants.items(), desc=f"seed {seed}", disable=not progress,
                                 leave=False):
            model = {key: v for key, v in change.items() if key in _MODEL_KEYS}
            rest = {key: v for key, v in change.items() if key not in _MODEL_KEYS}
            own = bool(model) or any(key in _PRETRAIN_KEYS for key in rest)
            if own:  # another network, or other pretraining: pretrained on its own
                dc = _clusterer(default_config(quick, dataset, **{**overrides, **model}),
                                ds.X.shape[1], ds.n_clusters, seed, False, **rest)
                t0 = time.perf_counter()
                dc.pretrain(ds.X)
                pretrain_seconds[name] = pretrain_seconds.get(name, 0.0) + time.perf_counter() - t0
            else:
                dc = copy.deepcopy(base)
                for key, value in change.items():
                    setattr(dc, key, value)
                dc._check_params()
            t0 = time.perf_counter()
            dc.fit(ds.X)
            seconds[name] += time.perf_counter() - t0
            if not two_step_done and not own and dc.assignment == cfg["assignment"]:
                rows["two_step"].append({"seed": seed, **evaluate(ds.y, dc.init_labels_)})
                two_step_done = True
            if own:
                starts[name].append({"seed": seed, **evaluate(ds.y, dc.init_labels_)})
            rows[name].append({"seed": seed, **evaluate(ds.y, dc.labels_)})
    table = {name: {"overrides": variants.get(name, {}), "per_seed": r, **summarize(r),
                    "joint_seconds": seconds.get(name),
                    "pretrain_seconds": pretrain_seconds.get(name)} for name, r in rows.items()
             if r}
    for name, start in starts.items():
        if start:  # the variant's own two-step start, on its own pretrained network
            table[name]["two_step"] = {"per_seed": start, **summarize(start)}
    result = {"dataset": dataset, "seeds": seed_list,
              "config": {key: list(v) if isinstance(v, tuple) else v for key, v in cfg.items()},
              "variants": table, "environment": _environment()}
    (out / "ablation.json").write_text(json.dumps(result, indent=2))
    (out / "ablation.md").write_text(ablation_markdown(result))
    return result
