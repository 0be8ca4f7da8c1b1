"""rbfkmeans: k-means as a differentiable radial-basis-function network.

Conventions (used throughout): data ``X`` (n, d), centroids ``C`` (k, d), sample weights ``w`` (n),
squared distances ``d_ij = ||x_i - c_j||^2`` (one matrix product, clamped at 0), temperature
``T >= 0``, scores ``z_ij = -d_ij / (2T)``, responsibilities ``R = m(z)`` row-wise for a simplex
mapping ``m`` (softmax, entmax-1.5, sparsemax, or hard argmax at ``T = 0``).
"""

from __future__ import annotations

from .distances import sq_distances
from .errors import NonFiniteError
from .estimator import RBFKMeans
from .layer import KMeansLayer
from .mappings import entmax15, hardmax, softmax, sparsemax
from .objectives import (
    entropy_bound,
    kmeans_objective,
    shannon_objective,
    soft_objective,
    sparsemax_objective,
    tsallis_objective,
)
from .quantizer import VectorQuantizer

__version__ = "0.1.0"

__all__ = [
    "KMeansLayer",
    "NonFiniteError",
    "RBFKMeans",
    "VectorQuantizer",
    "__version__",
    "entmax15",
    "entropy_bound",
    "hardmax",
    "kmeans_objective",
    "shannon_objective",
    "soft_objective",
    "softmax",
    "sparsemax",
    "sparsemax_objective",
    "sq_distances",
    "tsallis_objective",
]
