"""The ``rbfkmeans vq`` experiment: a small VQ autoencoder on real digits, three quantisers.

The data are scikit-learn's 8x8 digits (a stratified 80/20 split) or MNIST (``dataset="mnist"``:
its 60,000 training and 10,000 test images, 784 pixels; the ``mnist`` extra).
Each image ``x`` (64 pixels in [0, 1]) is encoded by an MLP (64 -> 128 -> ``slots * dim``) into
``slots`` vectors of length ``dim``; each vector is replaced by its nearest code of a codebook of
``codebook_size`` codes; an MLP decoder (``slots * dim`` -> 128 -> 64) reconstructs the image.
The networks are trained on ``mse(x_rec, x) + loss_vq`` with Adam, in mini-batches drawn with a
seeded generator. Per seed, the same encoder and decoder start, batches, steps and codebook size
serve every quantiser:

* ``rbfkmeans``: :class:`~rbfkmeans.VectorQuantizer` with ``update="objective"``: the codebook is
  trained by Adam on the soft k-means objective ``F_T``, ``T`` annealed linearly from ``T_start``
  to 0 over the steps (soft-to-hard);
* ``rbfkmeans-kmeans``: the same layer with ``update="kmeans"`` (mini-batch k-means steps with
  running counts forgetting at rate ``decay``);
* ``vector-quantize-pytorch``: ``VectorQuantize`` of the package of that name (its exponential
  moving-average codebook, with its k-means initialisation and dead-code replacement switched on),
  when it is installed; otherwise the column is left out with a note.

Measured on held-out digits (a stratified 20% split): reconstruction MSE (mean over pixels),
codebook usage (fraction of codes that some held-out vector uses), perplexity of the held-out
code distribution, and dead codes (codes that no training vector uses after training); and the
training time. ``DIR/results.json`` holds the numbers, the held-out code counts and a few
reconstructions; ``plots`` draws ``reconstructions.png`` and ``code_usage.png`` from that file.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import time
from collections.abc import Callable, Sequence
from os import PathLike, fspath
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._validation import check_positive_int, check_seeds
from ..cli_args import MAX_SEEDS
from ..quantizer import VectorQuantizer, code_perplexity
from ..quantizer_checks import check_number
from .report import METHODS, PEER, summarize, targets

__all__ = [
    "DATASETS",
    "DATASET_DEFAULTS",
    "DEFAULTS",
    "METHODS",
    "PEER",
    "QUICK",
    "SEED_MAX",
    "VQAutoencoder",
    "default_config",
    "load_digits_split",
    "load_split",
    "peer_version",
    "run_vq",
    "train",
]

#: The settings of a default run.
DEFAULTS: dict[str, Any] = {
    "slots": 4,  # code vectors per image
    "dim": 16,  # length of each code vector
    "hidden": 128,
    "codebook_size": 128,
    "steps": 3000,
    "batch_size": 128,
    "lr": 2e-3,
    "commitment_weight": 0.25,
    "T_start": 0.1,  # rbfkmeans: temperature annealed linearly from here to 0
    "dead_code_steps": 50,  # rbfkmeans: reset a code unused for this many steps
    "kmeans_decay": 0.99,  # rbfkmeans-kmeans: forgetting rate of the running counts
    "peer_decay": 0.8,  # vector-quantize-pytorch: its default EMA decay
    "peer_dead_code_threshold": 2.0,  # vector-quantize-pytorch: EMA cluster size below which
    "test_size": 0.2,
    "n_show": 10,  # held-out reconstructions kept for the figure
}

#: The data sets: scikit-learn's digits (a stratified split) and MNIST (its own split).
DATASETS = ("digits", "mnist")

#: Per data set: the settings that differ from :data:`DEFAULTS` (MNIST: 28x28 images, 60,000
#: training rows; a wider network and codebook, longer training, bigger batches).
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "mnist": {"hidden": 256, "codebook_size": 256, "steps": 5000, "batch_size": 256},
}

#: Tiny settings for tests and smoke runs.
QUICK: dict[str, Any] = {"steps": 30, "codebook_size": 16, "batch_size": 64, "n_show": 4}

#: The settings that are integers >= 1.
_INTEGERS = ("slots", "dim", "hidden", "codebook_size", "steps", "batch_size", "dead_code_steps",
             "n_show")

#: The settings that are real numbers: the rule each obeys, and its test.
_REALS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "lr": ("a finite number >= 0", lambda v: v >= 0),  # 0: the networks keep their start
    "commitment_weight": ("a finite number >= 0", lambda v: v >= 0),
    "T_start": ("a finite number >= 0", lambda v: v >= 0),
    "kmeans_decay": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "peer_decay": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "peer_dead_code_threshold": ("a finite number >= 0", lambda v: v >= 0),
    "test_size": ("a number in (0, 1)", lambda v: 0 < v < 1),
}

#: The largest seed of a run: the peer's codebook is drawn after seeding torch's global CPU
#: generator with ``seed + 1``, which takes seeds up to ``2**64 - 1``.
SEED_MAX = 2**64 - 2
#: The largest seed of :func:`load_digits_split` (scikit-learn's ``random_state``).
DIGITS_SEED_MAX = 2**32 - 1


def default_config(quick: bool = False, dataset: str = "digits",
                   **overrides: Any) -> dict[str, Any]:
    """:data:`DEFAULTS`, then those of ``dataset`` (:data:`DATASET_DEFAULTS`), then :data:`QUICK`
    when ``quick``, then ``overrides`` (``None`` values are ignored; an unknown name raises
    ``ValueError``). Every setting is checked, whether or not the run uses it (``peer_decay``
    without the peer): ``ValueError`` or ``TypeError`` names the setting as it was passed.

    The integers ``slots``, ``dim``, ``hidden``, ``codebook_size``, ``steps``, ``batch_size``,
    ``dead_code_steps`` and ``n_show`` are at least 1; ``lr``, ``commitment_weight``,
    ``T_start`` and ``peer_dead_code_threshold`` are >= 0; ``kmeans_decay`` and ``peer_decay``
    are in (0, 1]; ``test_size`` is in (0, 1); all are finite."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(map(repr, DATASETS))}; got "
                         f"{dataset!r}")
    cfg = dict(DEFAULTS)
    cfg.update(DATASET_DEFAULTS.get(dataset, {}))
    if quick:
        cfg.update(QUICK)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in cfg:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(sorted(cfg))}")
        cfg[key] = value
    for key in _INTEGERS:
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ValueError(f"{key} must be an integer >= 1; got {cfg[key]!r}")
    for key, (rule, ok) in _REALS.items():
        cfg[key] = check_number(cfg[key], key, rule, ok)
    return cfg


def load_digits_split(test_size: float, seed: int = 0) -> tuple[Tensor, Tensor]:
    """scikit-learn's ``load_digits`` scaled to [0, 1] (pixels / 16), split stratified by class
    into training and held-out rows: float32 tensors (n_train, 64) and (n_test, 64).
    ``test_size`` is the held-out fraction, a number in (0, 1); ``seed`` an integer from 0 to
    ``2**32 - 1`` (scikit-learn's ``random_state``); else ``TypeError``/``ValueError``."""
    test_size = check_number(test_size, "test_size", "a number in (0, 1)", lambda v: 0 < v < 1)
    seed = check_positive_int(seed, "seed", minimum=0)
    if seed > DIGITS_SEED_MAX:
        raise ValueError(f"seed must be an integer from 0 to 2**32 - 1 (scikit-learn's "
                         f"random_state); got {seed!r}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X_train, X_test = train_test_split((X / 16.0).astype(np.float32), test_size=test_size,
                                       random_state=seed, stratify=y)
    return torch.from_numpy(X_train), torch.from_numpy(X_test)


def load_split(dataset: str, test_size: float, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Training and held-out rows of ``dataset``: digits split by :func:`load_digits_split`;
    MNIST's own 60,000 training and 10,000 test images (pixels / 255; needs the ``mnist``
    extra)."""
    if dataset == "digits":
        return load_digits_split(test_size, seed)
    if dataset == "mnist":
        from ..deep.datasets import mnist_store_path, read_mnist_store

        path = mnist_store_path()
        return (torch.from_numpy(read_mnist_store(path, "train")[0]),
                torch.from_numpy(read_mnist_store(path, "test")[0]))
    raise ValueError(f"dataset must be one of {', '.join(map(repr, DATASETS))}; got {dataset!r}")


def peer_version() -> str | None:
    """The installed version of ``vector-quantize-pytorch``, or None when it is missing."""
    try:
        import vector_quantize_pytorch  # noqa: F401
    except ImportError:
        return None
    return importlib.metadata.version(PEER)


class VQAutoencoder(nn.Module):
    """MLP encoder -> ``quantizer`` on ``slots`` vectors of length ``dim`` -> MLP decoder.

    ``quantizer`` is any module with ``forward(z) -> (quantized, indices, loss)`` for ``z``
    (batch, slots, dim). ``forward(x)`` returns ``(reconstruction, indices, loss_vq)``. The
    sizes are integers >= 1 (``TypeError``/``ValueError`` naming them otherwise).
    """

    def __init__(self, n_features: int, quantizer: nn.Module, *, slots: int, dim: int,
                 hidden: int) -> None:
        n_features = check_positive_int(n_features, "n_features")
        slots = check_positive_int(slots, "slots")
        dim = check_positive_int(dim, "dim")
        hidden = check_positive_int(hidden, "hidden")
        if not isinstance(quantizer, nn.Module):
            raise TypeError(f"quantizer must be a torch.nn.Module with forward(z) -> (quantized, "
                            f"indices, loss); got {type(quantizer).__name__}")
        super().__init__()
        self.slots, self.dim = slots, dim
        self.encoder = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(),
                                     nn.Linear(hidden, slots * dim))
        self.decoder = nn.Sequential(nn.Linear(slots * dim, hidden), nn.ReLU(),
                                     nn.Linear(hidden, n_features))
        self.quantizer = quantizer

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = self.encoder(x).reshape(-1, self.slots, self.dim)  # (b, slots, dim)
        q, indices, loss = self.quantizer(z)
        x_rec = self.decoder(q.reshape(-1, self.slots * self.dim))  # (b, n_features)
        return x_rec, indices, loss.sum()


def _quantizer(method: str, cfg: dict[str, Any], seed: int) -> nn.Module:
    """The quantiser of ``method`` with the run's codebook size and commitment weight."""
    k, dim, beta = cfg["codebook_size"], cfg["dim"], cfg["commitment_weight"]
    if method == "rbfkmeans":
        return VectorQuantizer(dim, k, temperature=cfg["T_start"], commitment_weight=beta,
                               dead_code_steps=cfg["dead_code_steps"], seed=seed)
    if method == "rbfkmeans-kmeans":
        return VectorQuantizer(dim, k, update="kmeans", decay=cfg["kmeans_decay"],
                               commitment_weight=beta, dead_code_steps=cfg["dead_code_steps"],
                               seed=seed)
    if method == PEER:
        from vector_quantize_pytorch import VectorQuantize

        return VectorQuantize(dim=dim, codebook_size=k, commitment_weight=beta,
                              decay=cfg["peer_decay"], kmeans_init=True,
                              threshold_ema_dead_code=cfg["peer_dead_code_threshold"])
    raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")


def _schedule(method: str, cfg: dict[str, Any]) -> Callable[[nn.Module, int], None] | None:
    """The per-step temperature of ``rbfkmeans``: ``T_start (1 - step / steps)``."""
    if method != "rbfkmeans":
        return None

    def anneal(quantizer: nn.Module, step: int) -> None:
        assert isinstance(quantizer, VectorQuantizer)
        quantizer.temperature = cfg["T_start"] * (1.0 - step / cfg["steps"])

    return anneal


def train(method: str, cfg: dict[str, Any], X_train: Tensor, seed: int,
          progress: bool = False) -> tuple[VQAutoencoder, float]:
    """Train the autoencoder with ``method``'s quantiser; returns it (in eval mode) and the
    training time in seconds. The networks' start and the batches depend on ``seed`` only.

    The networks' layers and the peer draw from torch's global CPU generator, so it is seeded
    here, inside ``torch.random.fork_rng``: the caller's global generators are left as they
    were (the CUDA ones untouched, as nothing here runs there)."""
    with torch.random.fork_rng(devices=[]):
        return _train(method, cfg, X_train, seed, progress)


def _train(method: str, cfg: dict[str, Any], X_train: Tensor, seed: int,
           progress: bool) -> tuple[VQAutoencoder, float]:
    """:func:`train`, seeding (and advancing) torch's global CPU generator."""
    from tqdm.auto import tqdm

    torch.default_generator.manual_seed(seed)  # the same encoder and decoder for every method
    model = VQAutoencoder(X_train.shape[1], nn.Identity(), slots=cfg["slots"], dim=cfg["dim"],
                          hidden=cfg["hidden"])
    # the peer draws its codebook (and its k-means start, its revived codes) from it
    torch.default_generator.manual_seed(seed + 1)
    model.quantizer = _quantizer(method, cfg, seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    anneal = _schedule(method, cfg)
    batches = torch.Generator().manual_seed(seed)
    model.train()
    start = time.perf_counter()
    for step in tqdm(range(cfg["steps"]), desc=f"{method} seed {seed}", disable=not progress,
                     leave=False):
        if anneal is not None:
            anneal(model.quantizer, step)
        xb = X_train[torch.randint(X_train.shape[0], (cfg["batch_size"],), generator=batches)]
        x_rec, _, loss_vq = model(xb)
        loss = (x_rec - xb).square().mean() + loss_vq
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    return model.eval(), seconds


@torch.no_grad()
def evaluate(model: VQAutoencoder, X_train: Tensor, X_test: Tensor,
             k: int) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Held-out MSE, usage and perplexity, dead codes over the training set; the held-out code
    counts (k,) and reconstructions (n_test, n_features)."""
    def run(X: Tensor) -> tuple[Tensor, Tensor]:  # 8,192 rows at a time
        parts = [model(X[s : s + 8192]) for s in range(0, X.shape[0], 8192)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    X_rec, test_idx = run(X_test)
    _, train_idx = run(X_train)
    used_test = torch.bincount(test_idx.reshape(-1), minlength=k)  # (k,)
    used_train = torch.bincount(train_idx.reshape(-1), minlength=k)  # (k,)
    metrics = {
        "mse": float((X_rec - X_test).square().mean()),
        "usage": float((used_test > 0).double().mean()),
        "perplexity": float(code_perplexity(used_test)),
        "dead_codes": int((used_train == 0).sum()),
    }
    return metrics, used_test.numpy(), X_rec.numpy()


def _check_seeds(seeds: Any) -> list[int]:
    """The seeds of ``seeds`` (:func:`run_vq`), else raise naming ``seeds``."""
    if isinstance(seeds, int | np.integer) and not isinstance(seeds, bool) \
            and seeds > MAX_SEEDS:
        raise ValueError(f"seeds must be an integer from 1 to {MAX_SEEDS} or a list of seeds; "
                         f"got {seeds!r}")
    seed_list = check_seeds(seeds)
    for i, seed in enumerate(seed_list):
        if seed > SEED_MAX:
            raise ValueError(f"seeds[{i}] must be an integer from 0 to 2**64 - 2; got {seed!r}")
    return seed_list


def run_vq(
    out: str | Path,
    dataset: str = "digits",
    seeds: int | Sequence[int] = 3,
    *,
    quick: bool = False,
    peer: bool = True,
    progress: bool = True,
    figure: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """Run the experiment (module docstring) into the folder ``out``; returns the results (also
    written to ``out/results.json``). ``seeds``: ``N`` runs seeds ``0 .. N-1`` (``N`` at most
    :data:`~rbfkmeans.cli_args.MAX_SEEDS`), or a list of seeds from 0 to :data:`SEED_MAX`.
    ``peer=False`` leaves the peer out even when installed; ``overrides`` replace entries of
    :data:`DEFAULTS` (:func:`default_config` checks them). Every argument is checked before
    anything is read or written."""
    if not isinstance(out, str | PathLike):
        raise TypeError(f"out must be a path; got {type(out).__name__} {out!r}")
    if not fspath(out):
        raise ValueError("out must name a folder; got ''")
    cfg = default_config(quick, dataset, **overrides)
    seed_list = _check_seeds(seeds)
    out = Path(out)
    X_train, X_test = load_split(dataset, cfg["test_size"])
    vectors = X_train.shape[0] * cfg["slots"]  # what the codebook is trained on
    if cfg["codebook_size"] > vectors:
        raise ValueError(
            f"codebook_size={cfg['codebook_size']} exceeds the {vectors} training vectors "
            f"({X_train.shape[0]} images x {cfg['slots']} slots): codes beyond them stay unused")
    out.mkdir(parents=True, exist_ok=True)
    version = peer_version() if peer else None
    methods: dict[str, Any] = {}
    wall = time.perf_counter()
    ran = [m for m in METHODS if m != PEER or version is not None]
    if version is None:
        methods[PEER] = {"skipped": "left out (--no-peer)" if not peer else
                         "vector-quantize-pytorch is not installed; pip install "
                         "vector-quantize-pytorch to add this column"}
    per_seed: dict[str, list[dict[str, Any]]] = {m: [] for m in ran}
    for seed in seed_list:  # methods interleaved: a busy spell of the machine hits them alike
        for method in ran:
            model, seconds = train(method, cfg, X_train, seed, progress)
            metrics, used, X_rec = evaluate(model, X_train, X_test, cfg["codebook_size"])
            per_seed[method].append({**metrics, "time_s": seconds, "seed": seed})
            if seed == seed_list[0]:  # the figures show the first seed
                methods[method] = {"code_counts": used.tolist(),
                                   "reconstructions": np.round(X_rec[: cfg["n_show"]],
                                                               4).tolist()}
    for method in ran:
        methods[method] = {"per_seed": per_seed[method], **summarize(per_seed[method]),
                           **methods[method]}
    methods = {m: methods[m] for m in METHODS}
    results = {
        "dataset": dataset,
        "n_train": int(X_train.shape[0]),
        "n_test": int(X_test.shape[0]),
        "seeds": seed_list,
        "config": cfg,
        "methods": methods,
        "originals": np.round(X_test[: cfg["n_show"]].numpy(), 4).tolist(),
        "targets": targets(methods),
        "environment": {"torch": torch.__version__, PEER: version,
                        "threads": torch.get_num_threads(),
                        "python": platform.python_version(), "machine": platform.machine()},
        "runtime_s": time.perf_counter() - wall,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if figure:
        from .plots import plot_code_usage, plot_reconstructions

        plot_reconstructions(out / "results.json", out / "reconstructions.png")
        plot_code_usage(out / "results.json", out / "code_usage.png")
    return results
