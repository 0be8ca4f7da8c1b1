"""Real labelled data sets that ship inside scikit-learn (nothing is downloaded at run time).

=================  ======  ==  ==  ===============================================================
name               n       d   k   preprocessing
=================  ======  ==  ==  ===============================================================
``digits``         1,797   64  10  8x8 handwritten digits (UCI optdigits test set), pixels / 16
``wine``           178     13  3   wine cultivars from chemical analysis, features z-scored
``breast_cancer``  569     30  2   Wisconsin diagnostic breast cancer, features z-scored
``iris``           150     4   3   Fisher's iris, features z-scored
=================  ======  ==  ==  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DATASETS", "Dataset", "load_dataset"]

DATASETS = ("digits", "wine", "breast_cancer", "iris")


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


def load_dataset(name: str) -> Dataset:
    """Load one of :data:`DATASETS` (module docstring), preprocessed, as float32."""
    from sklearn import datasets as skd

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
    else:
        raise ValueError(f"dataset must be one of {', '.join(map(repr, DATASETS))}; got {name!r}")
    y = np.asarray(y, dtype=np.int64)
    return Dataset(name, np.ascontiguousarray(X, dtype=np.float32), y, int(y.max()) + 1, desc)
