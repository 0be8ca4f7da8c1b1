"""The report commands (``reproduce``, ``deep-cluster``, ``vq``) never replace a user's file
unless asked, write their folder all or none, and answer a bad flag with argparse's one-line
error naming it (exit 2), before any work and without leaving a folder behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rbfkmeans import cli_args
from rbfkmeans.atomic_files import OutputError, check_report_folder, staged_folder
from rbfkmeans.cli import main

#: each command with its fastest arguments, and the library function it runs (to fail it)
COMMANDS = {
    "reproduce": (["--quick"], "rbfkmeans.experiments.runner.run_reproduction"),
    "deep-cluster": (["--dataset", "iris", "--seeds", "1", "--quick", "--no-progress",
                      "--no-figure"], "rbfkmeans.deep.experiment.run_deep_cluster"),
    "vq": (["--quick", "--seeds", "1", "--no-peer", "--no-progress", "--no-figure"],
           "rbfkmeans.vq.experiment.run_vq"),
}


def _user_folder(tmp_path: Path) -> Path:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.json").write_text('{"mine": 1}')
    (out / "notes.txt").write_text("precious")
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_with_files_is_refused_without_force(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``deep-cluster``, ``vq`` and ``reproduce`` replaced a user's results.json (and any file of
    a name they write) without asking."""
    out = _user_folder(tmp_path)
    args, _ = COMMANDS[command]
    assert main([command, "--out", str(out), *args]) == 2
    assert "already holds files; pass --force" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "results.json"]
    assert (out / "results.json").read_text() == '{"mine": 1}'


@pytest.mark.parametrize("command", ["deep-cluster", "vq"])
def test_force_writes_the_report_and_keeps_other_files(command: str, tmp_path: Path) -> None:
    out = _user_folder(tmp_path)
    args, _ = COMMANDS[command]
    assert main([command, "--out", str(out), "--force", *args]) == 0
    assert (out / "notes.txt").read_text() == "precious"
    assert (out / "results.json").read_text() != '{"mine": 1}'
    assert not [p for p in (*tmp_path.iterdir(), *out.iterdir())
                if p.name.startswith(".")]  # no temporaries


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("existing", [False, True])
def test_a_run_that_fails_leaves_the_folder_as_it_was(
        command: str, existing: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``reproduce`` rewrote results.json after every step, and ``deep-cluster`` wrote its
    embeddings inside the seed loop: a run that failed part-way left partial outputs."""
    args, target = COMMANDS[command]
    module, name = target.rsplit(".", 1)

    def fails_half_way(out: Any, *a: Any, **kw: Any) -> None:
        folder = out if command != "deep-cluster" else a[1]
        (Path(folder) / "results.json").write_text("{}")
        raise ValueError("failed half-way")

    monkeypatch.setattr(f"{module}.{name}", fails_half_way)
    out = _user_folder(tmp_path) if existing else tmp_path / "new" / "report"
    before = {p.name: p.read_text() for p in out.iterdir()} if existing else None
    assert main([command, "--out", str(out), "--force", *args]) == 2
    assert "failed half-way" in capsys.readouterr().err
    if existing:
        assert {p.name: p.read_text() for p in out.iterdir()} == before
    else:
        assert not (tmp_path / "new").exists()  # the folders made for it are gone too
    assert [p.name for p in tmp_path.iterdir()] == (["mine"] if existing else [])


@pytest.mark.parametrize(("argv", "flag"), [
    (["deep-cluster", "--seeds", "0"], "--seeds"),
    (["deep-cluster", "--epochs", "-1"], "--epochs"),
    (["deep-cluster", "--pretrain-epochs", "-5"], "--pretrain-epochs"),
    (["deep-cluster", "--hidden", "a,b"], "--hidden"),
    (["deep-cluster", "--hidden", ""], "--hidden"),
    (["deep-cluster", "--threads", "0"], "--threads"),
    (["reproduce", "--quick", "--seed", "-1"], "--seed"),
    (["reproduce", "--quick", "--threads", "0"], "--threads"),
    (["vq", "--seeds", "0"], "--seeds"),
    (["vq", "--steps", "0"], "--steps"),
    (["vq", "--codebook-size", "0"], "--codebook-size"),
    (["vq", "--threads", "x"], "--threads"),
])
def test_a_bad_flag_is_named_before_any_work(
        argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """These printed tracebacks (``--hidden a,b``: "invalid literal for int()", ``--seed -1``:
    numpy's "expected non-negative integer") and left an empty output folder behind."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(out)])
    assert exc.value.code == 2
    assert f"argument {flag}: must be" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_path_that_is_a_file_is_refused(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--out`` naming an existing file raised a FileExistsError traceback."""
    path = tmp_path / "a-file"
    path.write_text("mine")
    args, _ = COMMANDS[command]
    assert main([command, "--out", str(path), "--force", *args]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert path.read_text() == "mine"


def test_a_codebook_larger_than_the_training_vectors_is_refused(tmp_path: Path) -> None:
    """``vq --codebook-size 100000`` on digits ran for two minutes and reported 0% usage."""
    from rbfkmeans.vq.experiment import run_vq

    with pytest.raises(ValueError, match=r"^codebook_size=100000 exceeds the \d+ training "
                                         r"vectors"):
        run_vq(tmp_path / "vq", quick=True, peer=False, codebook_size=100000)
    assert not (tmp_path / "vq").exists()


def _interrupted_report(out: Path) -> None:
    with staged_folder(out, force=True) as stage:
        (stage / "a.json").write_text("2")
        raise KeyboardInterrupt


def test_staged_folder_moves_every_file_or_none(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with staged_folder(out, force=False) as stage:
        assert stage.parent == out  # on out's file system, whatever its parent's
        (stage / "a.json").write_text("1")
        (stage / "b.png").write_bytes(b"\x89PNG")
    assert sorted(p.name for p in out.iterdir()) == ["a.json", "b.png"]
    assert [p.name for p in tmp_path.iterdir()] == ["report"]
    with pytest.raises(OutputError, match="already holds files"):
        check_report_folder(out, False)
    with pytest.raises(KeyboardInterrupt):
        _interrupted_report(out)
    assert (out / "a.json").read_text() == "1"
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


def test_check_report_folder_names_its_argument(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="out must be a path"):
        check_report_folder(3, False)  # type: ignore[arg-type]
    check_report_folder(str(tmp_path), False)  # a str is a path too
    check_report_folder(tmp_path / "new", False)  # absent: fine
    check_report_folder(tmp_path, False)  # empty: fine


@pytest.mark.parametrize(("text", "minimum", "value"), [("3", 1, 3), ("0", 0, 0)])
def test_integer_at_least_reads_integers(text: str, minimum: int, value: int) -> None:
    assert cli_args.integer_at_least(minimum)(text) == value


def test_widths_reads_positive_integers() -> None:
    assert cli_args.widths("256,128") == (256, 128)
    with pytest.raises(TypeError, match="minimum must be an int"):
        cli_args.integer_at_least(1.5)  # type: ignore[arg-type]
