"""The ``vq`` subcommand: ``rbfkmeans vq --dataset digits|mnist --out DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_vq_parser"]


def _cmd_vq(args: argparse.Namespace) -> int:
    from ..atomic_files import staged_folder
    from ..cli_args import torch_threads
    from ..table_file import one_line
    from .experiment import run_vq  # heavy imports only when the command runs

    try:
        with torch_threads(args.threads), staged_folder(Path(args.out), args.force) as stage:
            res = run_vq(stage, args.dataset, args.seeds, quick=args.quick,
                         peer=not args.no_peer, progress=not args.no_progress,
                         figure=not args.no_figure, steps=args.steps,
                         codebook_size=args.codebook_size)
    except (ValueError, OSError, ImportError) as exc:  # ImportError: an extra not installed
        print(f"rbfkmeans vq: error: {one_line(exc)}", file=sys.stderr)
        return 2
    k = res["config"]["codebook_size"]
    print(f"{'quantiser':24s} {'MSE':>8s} {'usage':>7s} {'perplexity':>10s} {'dead':>5s} "
          f"{'time':>7s}")
    for method, row in res["methods"].items():
        if "per_seed" not in row:
            print(f"{method:24s} {row['skipped']}")
            continue
        m = row["mean"]
        print(f"{method:24s} {m['mse']:8.5f} {m['usage']:7.1%} {m['perplexity']:7.1f}/{k:<3d}"
              f"{m['dead_codes']:5.1f} {m['time_s']:6.1f}s")
    t = res["targets"]
    print(f"targets: usage >= 95% {'met' if t['usage_at_least_0.95'] else 'NOT met'} "
          f"(min {t['min_usage']:.1%}); MSE <= peer "
          + ("not measured" if t["mse_at_or_below_peer"] is None else
             f"{'met' if t['mse_at_or_below_peer'] else 'NOT met'} "
             f"(ratio {t['mse_ratio_to_peer']:.3f})"))
    print(f"wrote {args.out}/results.json ({res['runtime_s']:.0f} s)")
    return 0


def add_vq_parser(sub: Any) -> None:
    """Register ``vq`` on the subparsers object ``sub`` of the main parser."""
    from ..cli_args import (
        MAX_CODES,
        MAX_SEEDS,
        MAX_STEPS,
        folder,
        integer_at_least,
        max_threads,
    )
    p = sub.add_parser(
        "vq", help="a VQ autoencoder on digits or MNIST: VectorQuantizer vs "
        "vector-quantize-pytorch",
        description="Train a small VQ autoencoder with rbfkmeans.VectorQuantizer (and the "
        "vector-quantize-pytorch package when installed) on the same networks, batches and "
        "seeds; write results.json and figures drawn from it.",
    )
    p.add_argument("--dataset", choices=("digits", "mnist"), default="digits",
                   help="digits (scikit-learn) or mnist (the mnist extra)")
    p.add_argument("--out", type=folder, required=True,
                   help="output folder: new or empty, written all or none")
    p.add_argument("--force", action="store_true",
                   help="write into a folder that holds files, replacing those of the same names")
    p.add_argument("--seeds", type=integer_at_least(1, MAX_SEEDS), default=3,
                   help=f"runs with seeds 0..N-1 (default 3, at most {MAX_SEEDS})")
    p.add_argument("--steps", type=integer_at_least(1, MAX_STEPS),
                   help=f"training steps (default 3000; mnist 5000; at most {MAX_STEPS})")
    p.add_argument("--codebook-size", type=integer_at_least(1, MAX_CODES),
                   help="codes in the codebook (default 128; mnist 256; at most the training "
                   "vectors: images x 4 slots)")
    p.add_argument("--quick", action="store_true", help="tiny settings (what the tests run)")
    p.add_argument("--no-peer", action="store_true",
                   help="leave vector-quantize-pytorch out even when it is installed")
    p.add_argument("--threads", type=integer_at_least(1, max_threads()), default=1,
                   help="torch threads (default 1: these small networks gain nothing from more; "
                   f"at most {max_threads()})")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-figure", action="store_true")
    p.set_defaults(func=_cmd_vq)
