"""The ``reproduce`` subcommand: ``rbfkmeans reproduce --out DIR [--quick] [--seed S]``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_reproduce_parser"]


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from ..atomic_files import staged_folder
    from ..table_file import one_line
    from .runner import run_reproduction  # heavy imports only when the command runs

    t0 = time.perf_counter()
    try:
        with staged_folder(Path(args.out), args.force) as stage:
            res = run_reproduction(stage, quick=args.quick, seed=args.seed,
                                   threads=args.threads)
    except (ValueError, OSError) as exc:
        print(f"rbfkmeans reproduce: error: {one_line(exc)}", file=sys.stderr)
        return 2
    n_png = sum(1 for _ in Path(args.out).glob("*.png"))
    print(f"wrote {args.out}/results.json, {args.out}/report.md and {n_png} figures "
          f"in {time.perf_counter() - t0:.0f} s")
    gap = max(per[m]["centroid_gap"][-1] for per in res["collapse"].values()
              for m in ("softmax", "entmax15"))
    print(f"collapse gap at the coldest T: {gap:.1e}; gradient step vs Lloyd: "
          f"{res['gradient_step_equals_lloyd']['max_abs_diff']:.1e}")
    return 0


def add_reproduce_parser(sub: Any) -> None:
    """Register ``reproduce`` on the subparsers object ``sub`` of the main parser."""
    from ..cli_args import folder, integer_at_least, max_threads
    from .runner import SEED_MAX
    p = sub.add_parser(
        "reproduce",
        help="measure every claim of the paper and the interview question; write a report",
        description="Run the reproduction: results.json (raw numbers), PNG figures drawn from it, "
        "and report.md. The default run takes minutes; --quick is a small version.",
    )
    p.add_argument("--out", type=folder, required=True,
                   help="output folder: new or empty, written all or none")
    p.add_argument("--force", action="store_true",
                   help="write into a folder that holds files, replacing those of the same names")
    p.add_argument("--quick", action="store_true", help="small sizes (what the tests run)")
    p.add_argument("--seed", type=integer_at_least(0, SEED_MAX), default=0,
                   help=f"seed of the datasets and the runs (default 0, at most {SEED_MAX})")
    p.add_argument("--threads", type=integer_at_least(1, max_threads()), default=1,
                   help="torch threads while it runs (default 1: the problems are small; at "
                   f"most {max_threads()})")
    p.set_defaults(func=_cmd_reproduce)
