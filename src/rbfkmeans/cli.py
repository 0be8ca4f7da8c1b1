"""The ``rbfkmeans`` command line: one entry point, one subcommand per job.

While a command runs, SIGTERM (``kill``, ``timeout``, a scheduler ending a job) ends it as
Ctrl-C does, through a Python exception, so that what it was writing is removed (a report's
staging folder, an output's temporaries: :mod:`rbfkmeans.atomic_files`); it then exits with
status 143 (``128 + SIGTERM``; Ctrl-C: 130) and one line on stderr. Now and then (about one
Ctrl-C'd run in ten on a 2-core machine, after the cleanup and the line) the process ends by
the signal itself instead, which a shell reports with the same status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from .assignments import ASSIGNMENTS


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


def _cmd_kernels(args: argparse.Namespace) -> int:
    from .precompile import main as compile_kernels

    return compile_kernels([])


def _cmd_deep_cluster(args: argparse.Namespace) -> int:
    from .atomic_files import staged_folder
    from .cli_args import torch_threads
    from .deep.experiment import run_ablation, run_deep_cluster
    from .table_file import one_line

    settings = {"quick": args.quick, "progress": not args.no_progress, "hidden": args.hidden,
                "assignment": args.assignment, "epochs": args.epochs,
                "pretrain_epochs": args.pretrain_epochs}
    try:
        with torch_threads(args.threads), staged_folder(Path(args.out), args.force) as stage:
            if args.ablation:
                run_ablation(args.dataset, args.seeds, stage, **settings)
            else:
                res = run_deep_cluster(args.dataset, args.seeds, stage,
                                       figure=not args.no_figure, **settings)
    except (ValueError, OSError, ImportError) as exc:  # ImportError: an extra not installed
        print(f"rbfkmeans deep-cluster: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if args.ablation:
        print((Path(args.out) / "ablation.md").read_text())
        return 0
    for method, row in res["methods"].items():
        cells = "  ".join(f"{m.upper()} {row['mean'][m]:.3f}±{row['std'][m]:.3f}"
                          for m in ("acc", "nmi", "ari"))
        print(f"{method:11s} {cells}")
    print(f"wrote {args.out}/results.json, labels.npz "
          f"({res['runtime_s']:.0f} s wall, {res['cpu_s']:.0f} s CPU)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rbfkmeans", description="k-means as a differentiable RBF network"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the interview question's two-centroid example")
    demo.set_defaults(func=_cmd_demo)
    kernels = sub.add_parser(
        "kernels", help="compile the CPU kernels now, with progress (once per environment; "
        "fits take the torch passes until they are compiled)")
    kernels.set_defaults(func=_cmd_kernels)
    from .experiments.cli import add_reproduce_parser  # heavy imports wait until it runs

    add_reproduce_parser(sub)
    from .cli_fit import add_fit_parser  # the command's heavy imports wait until it runs

    add_fit_parser(sub)
    from .cli_args import (
        MAX_EPOCHS,
        MAX_LAYERS,
        MAX_SEEDS,
        MAX_WIDTH,
        folder,
        integer_at_least,
        max_threads,
        widths,
    )
    from .deep.datasets import DATASETS

    deep = sub.add_parser(
        "deep-cluster", help="k-means on raw features vs autoencoder then k-means vs joint training"
    )
    deep.add_argument("--dataset", choices=DATASETS, default="digits",
                      help="mnist and mnist-test need the mnist extra")
    deep.add_argument("--seeds", type=integer_at_least(1, MAX_SEEDS), default=3,
                      help=f"runs with seeds 0..N-1 (default 3, at most {MAX_SEEDS})")
    deep.add_argument("--out", type=folder, default="out/deep",
                      help="output folder, new or empty, written all or none (default out/deep)")
    deep.add_argument("--force", action="store_true", help="write into a folder that holds "
                      "files, replacing those of the same names")
    deep.add_argument("--assignment", choices=tuple(ASSIGNMENTS))
    deep.add_argument("--epochs", type=integer_at_least(0, MAX_EPOCHS),
                      help=f"joint-training epochs (at most {MAX_EPOCHS})")
    deep.add_argument("--pretrain-epochs", type=integer_at_least(0, MAX_EPOCHS),
                      help=f"autoencoder pretraining epochs (at most {MAX_EPOCHS})")
    deep.add_argument("--hidden", type=widths,
                      help=f"hidden layer widths, e.g. 256,256 (at most {MAX_LAYERS} layers of at "
                      f"most {MAX_WIDTH})")
    deep.add_argument("--quick", action="store_true", help="tiny networks and epochs (smoke test)")
    deep.add_argument("--ablation", action="store_true",
                      help="train variants of the joint method; write ablation.json/.md")
    deep.add_argument("--threads", type=integer_at_least(1, max_threads()), default=1,
                      help="torch threads (default 1: these small networks gain nothing from "
                      f"more; at most {max_threads()})")
    deep.add_argument("--no-progress", action="store_true")
    deep.add_argument("--no-figure", action="store_true")
    deep.set_defaults(func=_cmd_deep_cluster)
    from .vq.cli import add_vq_parser  # the command's heavy imports wait until it runs

    add_vq_parser(sub)
    return parser


class _Terminated(SystemExit):
    """Raised in the main thread by SIGTERM while a command runs (:func:`_signals_exit`): like
    ``KeyboardInterrupt``, it passes the commands' ``except Exception`` and runs their cleanup."""


def _raise_once(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM and SIGINT handler of :func:`_signals_exit`: raise :class:`_Terminated`
    (status ``128 + signum``) or ``KeyboardInterrupt`` once; later signals of either kind are
    ignored while the command cleans up and ends, so that the cleanup is not cut short (a
    Ctrl-C pressed twice, a supervisor that repeats SIGTERM; SIGKILL still ends the process)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise _Terminated(128 + signum)


@contextlib.contextmanager
def _signals_exit(restore: bool = True) -> Iterator[None]:
    """For the block, SIGTERM raises :class:`_Terminated` and SIGINT ``KeyboardInterrupt`` in
    the main thread, once (:func:`_raise_once`), instead of ending the process at once (SIGTERM)
    or raising again in the cleanup (SIGINT). The previous handlers are put back after, unless
    ``restore`` is false and a signal came: a process that ends then stays deaf to both until it
    has exited (a second Ctrl-C had cut the interpreter's own cleanup at exit with a traceback).
    A signal is left alone outside the main thread (Python sets handlers there only), where it
    is ignored (``SIG_IGN``, as the caller wants) or has a handler not set from Python (not
    restorable), and SIGINT where the caller set a handler of its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, None):
        previous[signal.SIGTERM] = signal.getsignal(signal.SIGTERM)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.default_int_handler
    for signum in previous:
        signal.signal(signum, _raise_once)
    signalled = False
    try:
        yield
    except (_Terminated, KeyboardInterrupt):
        signalled = True
        raise
    finally:
        if restore or not signalled:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status (143
    where SIGTERM ended the command, 130 where Ctrl-C did, its cleanup done, with one line on
    stderr rather than Python's traceback)."""
    return _run(argv, restore=True)


def entry() -> None:
    """The ``rbfkmeans`` program: :func:`main` on the process's arguments, then exit with its
    status; after SIGTERM or Ctrl-C the process ignores both until it has exited."""
    sys.exit(_run(None, restore=False))


def _run(argv: Sequence[str] | None, restore: bool) -> int:
    """:func:`main`, the handlers put back after a signal only where ``restore``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _signals_exit(restore):
            return int(args.func(args))
    except _Terminated as exc:
        print(f"rbfkmeans {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return int(exc.code or 1)
    except KeyboardInterrupt:  # Ctrl-C: the cleanup has run; one line, a shell's status
        print(f"rbfkmeans {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # the reader of stdout left (`| head`): nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush would fail again
        return 141  # a shell's status for a command ended by SIGPIPE


if __name__ == "__main__":
    entry()
