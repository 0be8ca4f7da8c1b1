"""The ``rbfkmeans`` command line: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _cmd_demo(args: argparse.Namespace) -> int:
    import torch

    from .layer import KMeansLayer

    C = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
    x = torch.tensor([[1.0, 2.0]])
    print("x = [1, 2], c_1 = [0, 0], c_2 = [2, 2]")
    for assignment in ("softmax", "entmax15"):
        for T in (10.0, 1.0, 0.1, 0.0):
            layer = KMeansLayer(C, temperature=T, assignment=assignment)
            R = layer(x).detach().numpy().round(4)
            print(f"  {assignment:9s} T={T:<5g} R={R.tolist()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rbfkmeans", description="k-means as a differentiable RBF network"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the interview question's two-centroid example")
    demo.set_defaults(func=_cmd_demo)
    from .cli_fit import add_fit_parser  # the command's heavy imports wait until it runs

    add_fit_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
