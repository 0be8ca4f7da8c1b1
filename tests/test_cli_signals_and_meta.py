"""Three defects a probe found: SIGTERM left a report command's staging folder behind (and the
next run refused the folder), ``KMeansLayer`` could not be built on the meta device, and
``rbfkmeans fit --metric cosine`` named a zero row by its 0-based index instead of the file's
line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import rbfkmeans as rk
from rbfkmeans.atomic_files import OutputError, check_report_folder, staged_folder
from rbfkmeans.cli import main

STAGE = ".rbfkmeans-report.*.tmp"
"""The name pattern of :func:`staged_folder`'s temporary folder."""

# -- SIGTERM during a report command --------------------------------------------------------------


def _wait_for_stage(out: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    """Return once ``out`` holds a staging folder; fail if ``proc`` ends or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.is_dir() and any(out.glob(STAGE)):
            return
        if proc.poll() is not None:
            pytest.fail(f"the command ended (status {proc.returncode}) before staging: "
                        f"{proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    pytest.fail(f"no staging folder in {out} after {timeout} s")


def _signalled_vq(out: Path, signum: int, repeats: int = 0) -> tuple[int, str]:
    """Start ``rbfkmeans vq --out out`` (many quick seeds: a run that outlasts the test, staged
    before its first seed), send ``signum`` once it is into the training, and again up to
    ``repeats`` times 10 ms apart while it ends; its status and stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "rbfkmeans.cli", "vq", "--out", str(out), "--quick",
            "--seeds", "1000", "--no-peer", "--no-progress", "--no-figure"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        _wait_for_stage(out, proc, timeout=120.0)
        time.sleep(0.2)  # into the training, some files may be staged
        proc.send_signal(signum)
        for _ in range(repeats):
            time.sleep(0.01)
            if proc.poll() is not None:
                break
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is not a catchable signal there")
@pytest.mark.parametrize(("signum", "said"), [(signal.SIGTERM, "terminated (SIGTERM)"),
                                              (signal.SIGINT, "interrupted (Ctrl-C)")])
def test_a_signal_removes_the_staging_folder(tmp_path: Path, signum: int, said: str) -> None:
    """``timeout 8 rbfkmeans vq --out DIR`` left ``DIR/.rbfkmeans-report.*.tmp``, and the next
    run without --force refused DIR as 'already holds files'; Ctrl-C cleaned up but printed
    Python's traceback."""
    out = tmp_path / "report"
    status, err = _signalled_vq(out, signum)
    # status 128 + signum, or (rarely, about one run in ten here) the end by the signal itself
    # once the cleanup and the line are done: a shell reports both as 128 + signum
    assert status in (128 + signum, -signum), err[-2000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"rbfkmeans vq: {said}"
    assert not out.exists()  # the folder made for the report removed with its staging folder
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is not a catchable signal there")
@pytest.mark.parametrize(("signum", "said"), [(signal.SIGTERM, "terminated (SIGTERM)"),
                                              (signal.SIGINT, "interrupted (Ctrl-C)")])
def test_a_second_signal_while_the_command_cleans_up_is_ignored(
        tmp_path: Path, signum: int, said: str) -> None:
    """Signals a moment apart (a Ctrl-C pressed twice, a supervisor that repeats SIGTERM): the
    command still removes its staging folder and ends with its one line, no traceback and a
    shell's status ``128 + signum`` (signals after the first are ignored until the process has
    exited: a repeated Ctrl-C had cut the interpreter's cleanup at exit with a traceback)."""
    out = tmp_path / "report"
    status, err = _signalled_vq(out, signum, repeats=5)
    assert status in (128 + signum, -signum), err[-2000:]  # (as above)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"rbfkmeans vq: {said}"
    assert not out.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="os.kill of SIGINT ends the process there")
@pytest.mark.parametrize("restore", [True, False])
def test_ctrl_c_raises_once_then_is_ignored_until_the_end(restore: bool) -> None:
    """A Ctrl-C pressed twice cut the command's cleanup, or the interpreter's own cleanup at exit,
    with a traceback: the first SIGINT raises KeyboardInterrupt, the next ones (and SIGTERM) are
    ignored; ``main`` puts Python's handlers back after, the program (``restore=False``)
    stays deaf to both until it has exited."""
    from rbfkmeans import cli

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert before[0] is signal.default_int_handler
    cleaned = []

    def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)  # the handler runs here
            pytest.fail("SIGINT raised nothing")
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C during the cleanup
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            cleaned.append(True)

    try:
        with pytest.raises(KeyboardInterrupt), cli._signals_exit(restore):
            command()
        assert cleaned == [True]
        after = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        assert after == (before if restore else (signal.SIG_IGN, signal.SIG_IGN))
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


@pytest.mark.parametrize("restore", [True, False])
def test_a_command_without_a_signal_puts_the_handlers_back(restore: bool) -> None:
    """Inside the block both signals take the raise-once handler; a command that ends without a
    signal leaves both handlers as it found them (the program's ``restore=False`` included)."""
    from rbfkmeans import cli

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with cli._signals_exit(restore):
        assert signal.getsignal(signal.SIGINT) is cli._raise_once
        assert signal.getsignal(signal.SIGTERM) is cli._raise_once
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_stale_staging_folder_does_not_block_the_next_run(tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves its staging folder (nothing can remove it): the next run
    must not refuse the folder for it, nor touch it (it may be another run's, still going)."""
    out = tmp_path / "report"
    stale = out / ".rbfkmeans-report.k1ll3d.tmp"
    stale.mkdir(parents=True)
    (stale / "results.json").write_text("partial")
    check_report_folder(out, False)
    with staged_folder(out, force=False) as stage:
        (stage / "results.json").write_text("{}")
    assert (out / "results.json").read_text() == "{}"
    assert (stale / "results.json").read_text() == "partial"


def test_other_hidden_entries_still_count_as_files(tmp_path: Path) -> None:
    """Only the tool's own staging folders are ignored: a file of that name, or a user's
    hidden file, still makes the folder one that holds files."""
    for name in (".rbfkmeans-report.x.tmp", ".notes"):
        out = tmp_path / name.strip(".")
        out.mkdir()
        (out / name).write_text("mine")
        with pytest.raises(OutputError, match="already holds files"):
            check_report_folder(out, False)


# -- KMeansLayer on the meta device ---------------------------------------------------------------

ASSIGNMENTS = ("softmax", "entmax15", "sparsemax", "hard")


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_a_layer_is_built_on_the_meta_device(metric: str) -> None:
    """``KMeansLayer(torch.randn(4, 3).to("meta"))`` raised 'Tensor.item() cannot be called on
    meta tensors', as did building one inside ``with torch.device("meta")``."""
    layer = rk.KMeansLayer(torch.randn(4, 3, device="meta"), metric=metric)
    assert layer.centroids.is_meta
    assert tuple(layer.centroids.shape) == (4, 3)
    assert isinstance(layer.centroids, torch.nn.Parameter)
    with torch.device("meta"):
        fixed = rk.KMeansLayer(torch.randn(4, 3), metric=metric, learnable=False)
        half = rk.KMeansLayer(torch.randn(4, 3, dtype=torch.float16), metric=metric)
    assert fixed.centroids.is_meta
    assert "centroids" in dict(fixed.named_buffers())
    assert half.centroids.dtype == torch.float32  # computed in float32, as on any device


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_meta_layer_loads_a_real_layers_state(metric: str, assignment: str) -> None:
    """``to_empty`` then ``load_state_dict``: the layer equals the real one, values, extra state
    and outputs."""
    gen = torch.Generator().manual_seed(0)
    real = rk.KMeansLayer(torch.randn(5, 3, generator=gen, device="cpu"), temperature=0.7,
                          assignment=assignment, metric=metric)
    device = real.centroids.device
    with torch.device("meta"):
        layer = rk.KMeansLayer(torch.randn(5, 3), metric=metric)
    layer.to_empty(device=device)
    layer.load_state_dict(real.state_dict())
    assert torch.equal(layer.centroids, real.centroids)
    assert (layer.temperature, layer.assignment, layer.metric) == (0.7, assignment, metric)
    X = torch.randn(8, 3, generator=gen, device="cpu").to(device)
    assert torch.equal(layer(X), real(X))
    assert torch.equal(layer.predict(X), real.predict(X))


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_meta_layer_names_the_meta_device_when_it_computes(metric: str,
                                                             assignment: str) -> None:
    """A meta layer holds no values to compute with: every computation raises one clear error
    (as VectorQuantizer does) rather than torch's ``Tensor.item()`` from inside a check."""
    with torch.device("meta"):
        layer = rk.KMeansLayer(torch.randn(4, 3), assignment=assignment, metric=metric)
    X = torch.zeros(6, 3, device="meta")
    calls = (layer, layer.distances, layer.scores, layer.predict, layer.objective)
    for call in calls:
        with pytest.raises(ValueError, match=r"does not compute on the meta device; got X on "
                                             r"meta, the centroids on meta"):
            call(X)
    on_cpu = rk.KMeansLayer(torch.randn(4, 3), assignment=assignment, metric=metric)
    with pytest.raises(ValueError, match=r"got X on meta, the centroids on "):
        on_cpu(X)
    with pytest.raises(ValueError, match=r"got X on \w+.*, the centroids on meta \(give a meta "
                                         r"layer values with to_empty"):
        layer(torch.zeros(6, 3))
    with pytest.raises(ValueError, match=r"as_linear needs centroids holding values; got them "
                                         r"on the meta device"):
        layer.as_linear()
    with pytest.raises(ValueError, match=r"linear.weight must hold values; got a tensor on the "
                                         r"meta device"):
        rk.KMeansLayer.from_linear(torch.nn.Linear(3, 4, device="meta"), metric=metric)


# -- the line of a zero row under --metric cosine -------------------------------------------------


def _fit_error(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line error of ``rbfkmeans fit PATH -k 2 --metric cosine`` (which must fail)."""
    out = path.parent / "out"
    assert main(["fit", str(path), "-k", "2", "--metric", "cosine", "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(("text", "line"), [
    ("1,2\n0,0\n3,4\n", 2),  # no header
    ("a,b\n1,2\n0,0\n3,4\n", 3),  # a header
    ("# made by hand\n\na,b\n1,2\n\n# a zero row next\n0,-0.0\n3,4\n", 7),  # skipped lines
])
def test_a_zero_row_is_named_by_its_line(tmp_path: Path, text: str, line: int,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``fit --metric cosine`` said 'X has a zero row (row 1 ...)', the row's 0-based index,
    where every other message about the file names its line."""
    path = tmp_path / "z.csv"
    path.write_text(text)
    err = _fit_error(path, capsys)
    assert err.startswith(f"rbfkmeans fit: error: {path}: line {line}: ")
    assert "zero row" in err
    assert "--metric cosine" in err


def test_a_zero_row_of_an_npy_file_is_named_by_its_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.npy`` file has no lines: its rows are named from 0, as its other messages do."""
    path = tmp_path / "z.npy"
    np.save(path, np.array([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [0.0, 0.0]], dtype=np.float32))
    err = _fit_error(path, capsys)
    assert "zero row (row 2; 2 in all)" in err
