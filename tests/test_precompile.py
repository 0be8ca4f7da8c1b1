"""When the compiled kernels run (:mod:`rbfkmeans.precompile`): the ``RBFKMEANS_KERNELS`` modes,
the stamp, the decision a fit pins for all its passes, the background compile a fit starts only
where it pays back (and only once), the compile lock, and that :func:`warmup.warm_up` compiles
every signature the fits take (in a fresh process: no fit compiles anything after it).

References: the torch passes, which the rest of the suite checks against independent ones; a
kernel call is detected by replacing the kernels' launcher with one that records it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_iris

from rbfkmeans import RBFKMeans, kernels, precompile, warmup
from rbfkmeans.cli import main as cli_main


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """``auto`` mode with an empty cache folder and no process started yet: returns the
    argument lists of the processes started (none really is)."""
    monkeypatch.delenv(precompile.ENV, raising=False)
    monkeypatch.setattr(precompile, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(precompile, "_compiled", False)
    monkeypatch.setattr(precompile, "_checked_at", -float("inf"))
    monkeypatch.setattr(precompile, "_launched", False)
    started: list[list[str]] = []
    monkeypatch.setattr(precompile.subprocess, "Popen",
                        lambda args, **kw: started.append(list(args)))
    return started


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the kernel calls (every kernel runs inside ``kernels.launch``)."""
    calls: list[int] = []
    launch = kernels.launch

    @contextmanager
    def counted(blas: bool = False) -> Iterator[None]:
        calls.append(1)
        with launch(blas):
            yield

    monkeypatch.setattr(kernels, "launch", counted)
    return calls


@pytest.mark.parametrize(("raw", "expected"), [
    (None, "auto"), ("auto", "auto"), ("", "auto"), (" AUTO ", "auto"), ("1", "on"),
    ("on", "on"), ("0", "off"), ("Off", "off")])
def test_mode_reads_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str | None,
                                    expected: str) -> None:
    if raw is None:
        monkeypatch.delenv(precompile.ENV, raising=False)
    else:
        monkeypatch.setenv(precompile.ENV, raw)
    assert precompile.mode() == expected


@pytest.mark.parametrize("raw", ["2", "yes", "true", "auto1"])
def test_a_bad_mode_is_named(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(precompile.ENV, raw)
    with pytest.raises(ValueError, match=rf"RBFKMEANS_KERNELS.*{raw!r}"):
        precompile.mode()
    with pytest.raises(ValueError, match="RBFKMEANS_KERNELS"):
        RBFKMeans(3).fit(load_iris().data)


def test_the_stamp_decides_and_must_match_the_key(fresh: list[list[str]],
                                                  tmp_path: Path) -> None:
    assert not precompile.compiled()
    assert not kernels.enabled()
    precompile.mark_compiled(1.5)
    stamp = json.loads((tmp_path / precompile.STAMP).read_text())
    assert stamp == {"key": precompile.key(), "seconds": 1.5}
    assert precompile.compiled()
    assert kernels.enabled()
    # a stamp of other sources (or numba, or Python) does not count
    (tmp_path / precompile.STAMP).write_text(json.dumps({"key": "other", "seconds": 1}))
    precompile._compiled = False
    precompile._checked_at = -float("inf")
    assert not precompile.compiled()
    (tmp_path / precompile.STAMP).write_text("not json")
    precompile._checked_at = -float("inf")
    assert not precompile.compiled()
    assert fresh == []


def test_machine_code_of_other_sources_is_deleted_before_a_compile(
        fresh: list[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """numba checks a cached kernel against its own file only, so one that calls a kernel of
    another module would keep that module's old code: without a stamp for these sources every
    kernel module's cached code goes (other files stay), with one nothing does; warm_up clears
    first."""
    def populate() -> list[Path]:
        files = [tmp_path / f"{name}.{kernel}-12.py311{part}"
                 for name in precompile.MODULES for kernel in ("a", "b")
                 for part in (".nbi", ".1.nbc")]
        for f in files:
            f.write_bytes(b"code")
        return files

    other = tmp_path / "elsewhere.f-3.py311.nbi"
    other.write_bytes(b"code")
    files = populate()
    assert precompile.clear_stale() == len(files)  # no stamp
    assert not any(f.exists() for f in files)
    assert other.exists()
    files = populate()
    (tmp_path / precompile.STAMP).write_text(json.dumps({"key": "other", "seconds": 1}))
    assert precompile.clear_stale() == len(files)  # a stamp of other sources
    assert not any(f.exists() for f in files)
    files = populate()
    precompile.mark_compiled(1.0)
    assert precompile.clear_stale() == 0  # compiled for these sources: kept
    assert all(f.exists() for f in files)
    order: list[str] = []
    monkeypatch.setattr(precompile, "clear_stale", lambda: order.append("clear") or 0)
    monkeypatch.setattr(warmup, "_warm_calls",
                        lambda dt, w: [("kernel", lambda: order.append("compile"))])
    monkeypatch.setenv(precompile.ENV, "1")
    warmup.warm_up()
    assert order[0] == "clear"
    assert order.count("clear") == 1
    assert "compile" in order


def test_a_small_fit_takes_the_torch_passes_and_starts_nothing(
        fresh: list[list[str]], kernel_calls: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    X = load_iris().data  # n k = 450 < PAYBACK_ENTRIES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = RBFKMeans(3, random_state=0).fit(X)
    assert kernel_calls == []
    assert fresh == []
    precompile.mark_compiled(0.0)  # compiled or not: nothing to gain from loading them
    RBFKMeans(3, random_state=0).fit(X)
    assert kernel_calls == []
    monkeypatch.setenv(precompile.ENV, "1")  # the same fit on the kernels: the same result
    ref = RBFKMeans(3, random_state=0).fit(X)
    assert kernel_calls
    assert est.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)
    np.testing.assert_array_equal(est.labels_, ref.labels_)


def test_a_fit_that_pays_back_starts_one_background_compile(
        fresh: list[list[str]], kernel_calls: list[int]) -> None:
    X = load_digits().data  # n k = 17,970 >= PAYBACK_ENTRIES
    assert X.shape[0] * 10 >= precompile.PAYBACK_ENTRIES
    with pytest.warns(precompile.CompilingKernels, match="rbfkmeans kernels"):
        est = RBFKMeans(10, random_state=0).fit(X)
    assert kernel_calls == []
    assert len(fresh) == 1
    assert fresh[0][0] == sys.executable
    assert "--background" in fresh[0][-1]
    with warnings.catch_warnings():  # once per process: no second start, no second warning
        warnings.simplefilter("error")
        RBFKMeans(10, random_state=1).fit(X)
    assert len(fresh) == 1
    assert kernel_calls == []
    # once the stamp is there the next fit takes the kernels, to the same result
    precompile.mark_compiled(0.0)
    again = RBFKMeans(10, random_state=0).fit(X)
    assert kernel_calls
    assert again.inertia_ == pytest.approx(est.inertia_, rel=1e-7)


def test_a_fit_keeps_its_decision_when_the_kernels_become_ready(
        fresh: list[list[str]], kernel_calls: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamp appearing mid-fit (the background compile finishing) changes nothing until
    the next fit: every pass of one fit runs on the same path."""
    from rbfkmeans import lloyd as lloyd_module

    real = lloyd_module.lloyd

    def lloyd_then_ready(*args: object, **kwargs: object) -> object:
        precompile.mark_compiled(0.0)
        return real(*args, **kwargs)

    monkeypatch.setattr("rbfkmeans.runs.lloyd", lloyd_then_ready)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", precompile.CompilingKernels)
        RBFKMeans(10, random_state=0).fit(load_digits().data)
    assert precompile.compiled()
    assert kernel_calls == []
    assert precompile.pinned_value() is None  # the decision ended with the fit


@pytest.mark.parametrize("chosen", ["0", "1"])
def test_explicit_modes_never_start_a_compile(fresh: list[list[str]], kernel_calls: list[int],
                                              monkeypatch: pytest.MonkeyPatch,
                                              chosen: str) -> None:
    monkeypatch.setenv(precompile.ENV, chosen)
    RBFKMeans(10, random_state=0).fit(load_digits().data)
    assert fresh == []
    assert bool(kernel_calls) == (chosen == "1")


def test_pinned_scopes_nest_and_restore() -> None:
    assert precompile.pinned_value() is None
    with precompile.pinned():
        assert precompile.decide(0) == kernels.enabled()
        with precompile.pinned(False):
            assert not kernels.enabled()
        assert precompile.pinned_value() is not None
    assert precompile.pinned_value() is None


def test_the_background_compile_leaves_a_held_lock_alone(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setattr(precompile, "cache_dir", lambda: tmp_path)
    compiled: list[int] = []
    monkeypatch.setattr(precompile, "compile_all", lambda progress=None: compiled.append(1))
    monkeypatch.setattr(os, "nice", lambda inc: 0)
    with open(tmp_path / precompile.LOCK, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert precompile.main(["--background"]) == 0
        assert compiled == []  # another process compiles: nothing done twice
    assert precompile.main(["--background"]) == 0
    assert compiled == [1]
    with pytest.raises(ValueError, match="argv"):
        precompile.main(["--now"])


def test_the_command_compiles_with_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(precompile, "cache_dir", lambda: tmp_path)
    seen: list[tuple[int, int, str]] = []

    def warm_up(progress: object = None) -> None:
        assert callable(progress)
        for i in range(1, 4):
            seen.append((i, 3, f"step {i}"))
            progress(i, 3, f"step {i}")

    monkeypatch.setattr(warmup, "warm_up", warm_up)
    assert cli_main(["kernels"]) == 0
    out = capsys.readouterr().out
    assert "[3/3] step 3" in out
    assert "compiled in" in out
    assert len(seen) == 3


_FITS_AFTER_WARM_UP = r"""
import numpy as np, torch
from rbfkmeans import (RBFKMeans, _lloyd_loops, _loops, _squarem_loops, _sums_loops, _wide_loops,
                       warmup)
from numba.core.registry import CPUDispatcher
from sklearn.datasets import make_blobs

def signatures():
    out = {}
    for mod in (_loops, _lloyd_loops, _squarem_loops, _wide_loops, _sums_loops):
        for name, f in vars(mod).items():
            if isinstance(f, CPUDispatcher):
                out[f"{mod.__name__}.{name}"] = sorted(map(str, f.signatures))
    return out

warmup.warm_up()
before = signatures()
rng = np.random.default_rng(0)
narrow = make_blobs(3000, 4, centers=8, random_state=0)[0]
wide = make_blobs(3000, 40, centers=8, random_state=0)[0]
for X in (narrow, wide, narrow.astype(np.float32), wide.astype(np.float32)):
    for kw in ({}, {"assignment": "hard"}, {"assignment": "softmax"},
               {"assignment": "sparsemax"}, {"metric": "cosine"}, {"schedule": "geometric"}):
        for w in (None, rng.random(len(X))):
            est = RBFKMeans(12, random_state=0, **kw).fit(X, sample_weight=w)
            est.predict(X)
            est.partial_fit(X[:50])
after = signatures()
new = {k: sorted(set(after[k]) - set(before.get(k, []))) for k in after}
print({k: v for k, v in new.items() if v})
"""


def test_warm_up_compiles_every_signature_the_fits_take() -> None:
    """In a new process (the suite's own process has run other calls first): after warm_up,
    fits of every kind, dtype and width, weighted or not, compile nothing new."""
    env = dict(os.environ, RBFKMEANS_KERNELS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _FITS_AFTER_WARM_UP], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "{}"


def test_the_first_fit_of_a_process_needs_more_to_load_the_kernels(
        fresh: list[list[str]], kernel_calls: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between PAYBACK_ENTRIES and FIRST_PAYBACK_ENTRIES a fit takes the kernels only once they
    are loaded in the process (a one-shot command's fit does not load them)."""
    X = load_digits().data[:500]  # n k = 2,000
    assert precompile.PAYBACK_ENTRIES <= 2000 < precompile.FIRST_PAYBACK_ENTRIES
    precompile.mark_compiled(0.0)
    monkeypatch.setattr(kernels, "_pool_pid", None)
    first = RBFKMeans(4, random_state=0).fit(X)
    assert kernel_calls == []
    assert fresh == []
    monkeypatch.setattr(kernels, "_pool_pid", os.getpid())  # a kernel ran in this process
    later = RBFKMeans(4, random_state=0).fit(X)
    assert kernel_calls
    assert later.inertia_ == pytest.approx(first.inertia_, rel=1e-9)
