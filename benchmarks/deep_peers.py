"""Deep-clustering peers from ClustPy, run at one fixed budget.

Every method trains the same MLP autoencoder, ClustPy's ``FeedforwardAutoencoder`` with layers
``[d, 128, 128, 10]`` (its default LeakyReLU activations), for 200 pretraining epochs with Adam at
learning rate 1e-3 and batch size 256. The methods that go on training the network with a
clustering loss (DEC, IDEC, DCN, DKM) run 50 clustering epochs, again with Adam at 1e-3. All other
hyper-parameters are ClustPy's defaults:

* ``N2D``: UMAP (``umap-learn``) with its default settings apart from ClustPy's
  ``n_components=n_clusters``, on the embedding, then a Gaussian mixture with ``n_clusters``
  components; no clustering epochs.
* ``DDC``: 2-D t-SNE of the embedding, then DDC's density-peak clustering with ``ratio=0.1``;
  it chooses the number of clusters itself, so ``n_clusters`` is not used. No clustering epochs.
* ``DEC``: Student-t soft assignments with ``alpha=1``, k-means initialisation.
* ``IDEC``: DEC plus the reconstruction loss, weights 0.1 (clustering) and 1 (reconstruction).
* ``DCN``: k-means loss weight 0.1, reconstruction weight 1, k-means initialisation.
* ``DKM``: one annealing step, ``alphas=(1000,)``, loss weights 0.1 and 1, k-means initialisation.

A run is seeded by ``seed`` alone: Python, NumPy and torch are seeded by ClustPy from
``random_state=seed``, which is also passed to UMAP, t-SNE, k-means and the Gaussian mixture.
Computation is on the CPU with one torch thread and one BLAS/OpenMP thread.

ClustPy imports ``torchvision`` at import time, although its MLP methods use nothing from it.
When no working ``torchvision`` can be imported (none is installed, or a wheel built for a
different torch fails on import), a minimal stand-in module providing the names ClustPy imports
(``torchvision.models._api.Weights`` and ``WeightsEnum``) is registered before ClustPy is loaded.

Run by hand: ``python benchmarks/deep_peers.py`` clusters scikit-learn's digits with the four
main peers for seeds 0, 1 and 2 and prints the NMI and wall time of every run.
"""

from __future__ import annotations

import copy
import importlib.machinery
import sys
import time
import types
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

PEERS: tuple[str, ...] = ("N2D", "DDC", "DEC", "IDEC", "DCN", "DKM")
MAIN_PEERS: tuple[str, ...] = ("N2D", "DDC", "DEC", "IDEC")

HIDDEN: tuple[int, ...] = (128, 128)
EMBEDDING_SIZE = 10
PRETRAIN_EPOCHS = 200
CLUSTERING_EPOCHS = 50
BATCH_SIZE = 256
LEARNING_RATE = 1e-3


def _ensure_torchvision() -> None:
    """Make ``import torchvision`` work, registering a stand-in when the real one cannot load."""
    try:
        import torchvision  # noqa: F401

        return
    except Exception:  # absent (ImportError) or built for another torch (RuntimeError, OSError)
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]

    @dataclass
    class Weights:
        """Stand-in for torchvision's pretrained-weights record (only used in type hints)."""

        url: str
        transforms: Any
        meta: dict[str, Any]

    class WeightsEnum(Enum):
        """Stand-in for torchvision's enum of pretrained weights (only used in type hints)."""

    modules = {name: types.ModuleType(name)
               for name in ("torchvision", "torchvision.models", "torchvision.models._api")}
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    modules["torchvision"].__version__ = "0+stand-in"  # type: ignore[attr-defined]
    modules["torchvision"].models = modules["torchvision.models"]  # type: ignore[attr-defined]
    modules["torchvision.models"]._api = modules["torchvision.models._api"]  # type: ignore[attr-defined]
    modules["torchvision.models._api"].Weights = Weights  # type: ignore[attr-defined]
    modules["torchvision.models._api"].WeightsEnum = WeightsEnum  # type: ignore[attr-defined]
    sys.modules.update(modules)


def _budget(budget: dict[str, Any] | None) -> dict[str, Any]:
    return {"hidden": HIDDEN, "pretrain_epochs": PRETRAIN_EPOCHS,
            "clustering_epochs": CLUSTERING_EPOCHS, "batch_size": BATCH_SIZE, **(budget or {})}


def _network_spec(n_features: int, budget: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from clustpy.deep.neural_networks import FeedforwardAutoencoder

    return FeedforwardAutoencoder, {"layers": [n_features, *budget["hidden"], EMBEDDING_SIZE]}


def _make_estimator(name: str, n_features: int, n_clusters: int, seed: int,
                    budget: dict[str, Any] | None = None, network: Any = None) -> Any:
    """Build the ClustPy estimator ``name`` with the shared network and training budget
    (``budget`` overrides ``hidden``, ``pretrain_epochs``, ``clustering_epochs``,
    ``batch_size``); ``network``, when given, is an already pretrained autoencoder (a copy is
    trained further, the original is left as it is)."""
    b = _budget(budget)
    _ensure_torchvision()
    from clustpy import deep

    common: dict[str, Any] = {
        "batch_size": b["batch_size"],
        "pretrain_epochs": b["pretrain_epochs"],
        "pretrain_optimizer_params": {"lr": LEARNING_RATE},
        "optimizer_class": torch.optim.Adam,
        "neural_network": (_network_spec(n_features, b) if network is None
                           else copy.deepcopy(network)),
        "embedding_size": EMBEDDING_SIZE,
        "device": torch.device("cpu"),
        "random_state": seed,
    }
    if name == "DDC":
        return deep.DDC(**common)
    if name == "N2D":
        from umap import UMAP

        return deep.N2D(n_clusters, manifold_class=UMAP, **common)
    if name in ("DEC", "IDEC", "DCN", "DKM"):
        return getattr(deep, name)(n_clusters, clustering_epochs=b["clustering_epochs"],
                                   clustering_optimizer_params={"lr": LEARNING_RATE}, **common)
    raise ValueError(f"unknown peer {name!r}; expected one of {PEERS}")


def pretrained_network(X: np.ndarray, seed: int, budget: dict[str, Any] | None = None,
                       threads: int = 1) -> Any:
    """ClustPy's autoencoder of ``budget`` pretrained on ``X`` exactly as each peer pretrains
    its own (ClustPy's routine: same layers, epochs, batch size, Adam step, loss and seed), so
    that several peers can start from one pretraining (``run_peer(..., network=)``)."""
    b = _budget(budget)
    _ensure_torchvision()
    from clustpy.deep._train_utils import get_trained_network
    from clustpy.deep._utils import set_torch_seed

    torch.set_num_threads(threads)
    X = np.ascontiguousarray(X, dtype=np.float32)
    set_torch_seed(seed)  # the batches' order, as a peer's own fit seeds it
    with threadpool_limits(limits=threads):
        return get_trained_network(
            data=X, n_epochs=b["pretrain_epochs"], batch_size=b["batch_size"],
            optimizer_params={"lr": LEARNING_RATE}, optimizer_class=torch.optim.Adam,
            device=torch.device("cpu"), embedding_size=EMBEDDING_SIZE,
            neural_network=_network_spec(X.shape[1], b), random_state=seed)


def run_peer(name: str, X: np.ndarray, n_clusters: int, seed: int,
             budget: dict[str, Any] | None = None, threads: int = 1,
             network: Any = None) -> np.ndarray:
    """Cluster ``X`` (n, d) with the ClustPy method ``name`` (network and epochs: ``budget``,
    see :func:`_make_estimator`; ``network``: start from this pretrained autoencoder, see
    :func:`pretrained_network`) on ``threads`` threads; return integer labels (n,)."""
    torch.set_num_threads(threads)
    X = np.ascontiguousarray(X, dtype=np.float32)
    estimator = _make_estimator(name, X.shape[1], n_clusters, seed, budget, network)
    with threadpool_limits(limits=threads):
        estimator.fit(X)
    return np.asarray(estimator.labels_, dtype=np.int64)


def main() -> None:
    """Print NMI and wall time of the main peers on scikit-learn's digits, seeds 0-2."""
    from sklearn.datasets import load_digits
    from sklearn.metrics import normalized_mutual_info_score

    digits = load_digits()
    X, y = digits.data / 16.0, digits.target
    for name in MAIN_PEERS:
        scores = []
        for seed in range(3):
            start = time.perf_counter()
            labels = run_peer(name, X, 10, seed)
            seconds = time.perf_counter() - start
            scores.append(normalized_mutual_info_score(y, labels))
            print(f"{name:5s} seed {seed}: NMI {scores[-1]:.3f}  {seconds:6.1f} s", flush=True)
        print(f"{name:5s} mean NMI {np.mean(scores):.3f} +- {np.std(scores):.3f}", flush=True)


if __name__ == "__main__":
    main()
