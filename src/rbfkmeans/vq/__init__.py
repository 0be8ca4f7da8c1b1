"""Vector quantisation in an autoencoder: the ``rbfkmeans vq`` demonstration.

``experiment`` trains a small VQ autoencoder on scikit-learn's digits with
:class:`~rbfkmeans.VectorQuantizer` (and, side by side, the ``vector-quantize-pytorch`` package
when it is installed) and writes ``results.json``; ``report`` summarises the seeds and writes the
table; ``plots`` draws its figures from that file; ``cli`` registers the subcommand.
"""

from __future__ import annotations

from .experiment import METHODS, PEER, VQAutoencoder, default_config, run_vq

__all__ = ["METHODS", "PEER", "VQAutoencoder", "default_config", "run_vq"]
