"""Argument checks of the helpers: the synthetic datasets, the spread, the collapse claims, the
VQ experiment's summaries, the progress bars and the kernels' precompile step (SPEC 5: a
``TypeError``/``ValueError`` naming the parameter and the value)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from rbfkmeans import precompile, progress, spread, warmup
from rbfkmeans.experiments import collapse, critical, datasets
from rbfkmeans.vq import experiment as vq_experiment
from rbfkmeans.vq import report as vq_report

# -- datasets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("gen", [datasets.moons, datasets.spirals, datasets.circles])
def test_noise_that_overflows_names_noise(gen):
    with pytest.raises(ValueError, match=re.escape("noise must be small enough that the noisy "
                                                   "points are finite in float64; got "
                                                   "noise=1e+308")):
        gen(10, noise=1e308)


def test_blobs_box_and_n_are_bounded():
    with pytest.raises(ValueError, match=re.escape("box must be at most 8.98847e+307")):
        datasets.blobs(10, box=1e308)
    with pytest.raises(ValueError, match=re.escape(
            f"n must be at most {datasets.MAX_POINTS} (numpy's largest arrays); got {2**70}")):
        datasets.blobs(2**70)
    for gen in (datasets.moons, datasets.spirals, datasets.circles):
        with pytest.raises(ValueError, match=re.escape("n must be at most")):
            gen(2**70)
    X, _ = datasets.blobs(10, box=8e307, centers=2)  # the largest boxes still draw
    assert np.isfinite(X).all()


# -- spread -----------------------------------------------------------------------------------


def _rows() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(30, 4, dtype=torch.float64, generator=gen), \
        torch.ones(30, dtype=torch.float64)


def test_top_eigenpair_checks_u():
    Y, u = _rows()
    u_before = (-u).clone()
    neg = -u
    with pytest.raises(ValueError, match=re.escape("u must be >= 0 (weights); got a negative "
                                                   "entry (min -1.0)")):
        spread.top_eigenpair(Y, neg)
    assert torch.equal(neg, u_before)
    with pytest.raises(ValueError, match=re.escape("u must have shape (30,); got (29,)")):
        spread.top_eigenpair(Y, u[:29])
    with pytest.raises(ValueError, match=re.escape("u must be finite; got 30 NaN/inf")):
        spread.top_eigenpair(Y, u * float("nan"))
    with pytest.raises(ValueError, match=re.escape("u is too large: its sum overflows")):
        spread.top_eigenpair(Y, u * 1e308)
    with pytest.raises(TypeError, match=re.escape("u must be a torch.Tensor; got NoneType")):
        spread.top_eigenpair(Y, None)


@pytest.mark.parametrize("Y", [None, [[1.0, 2.0]], np.ones((30, 4))])
def test_top_eigenpair_checks_the_type_of_y(Y):
    with pytest.raises(TypeError, match=re.escape(f"Y must be a torch.Tensor; got "
                                                  f"{type(Y).__name__}")):
        spread.top_eigenpair(Y, torch.ones(30, dtype=torch.float64))


def test_top_eigenpair_checks_the_values_of_y():
    Y, u = _rows()
    bad = Y.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match=re.escape("Y must be finite; got 1 NaN/inf entries")):
        spread.top_eigenpair(bad, u)
    bad[3, 1] = 1e308
    with pytest.raises(ValueError, match=re.escape(
            "Y and u are too large for float64: the entries of A = Y^T diag(u) Y overflow "
            "(largest |y| 1e+308")):
        spread.top_eigenpair(bad, u)
    with pytest.raises(ValueError, match=re.escape("Y must be a 2-D tensor (m, d); got shape "
                                                   "(30,)")):
        spread.top_eigenpair(Y[:, 0], u)
    with pytest.raises(TypeError, match=re.escape("Y must be a dense (strided) tensor; got "
                                                  "layout torch.sparse_coo")):
        spread.top_eigenpair(Y.to_sparse(), u)
    lam, _ = spread.top_eigenpair(Y.half(), u)  # float16 rows: computed in float64
    assert lam == pytest.approx(float(torch.linalg.eigvalsh(Y.half().double().T
                                                            @ Y.half().double())[-1]))


def test_top_eigenpair_result_is_the_unchecked_one():
    Y, u = _rows()
    assert spread.top_eigenpair(Y, u)[0] == spread._top_eigenpair(Y, u)[0]


@pytest.mark.parametrize("call", [
    lambda S: spread.covariance_spread(S),
    lambda S: spread.covariance_eigmax(S),
    lambda S: spread.sphere_spread(S),
    lambda S: critical.distinct_count(S),
])
def test_sparse_tensors_are_named(call):
    S = torch.randn(30, 4, dtype=torch.float64).to_sparse()
    with pytest.raises(TypeError, match=re.escape("must be a dense (strided) tensor; got layout "
                                                  "torch.sparse_coo")):
        call(S)


def test_covariance_spread_names_overflowing_weights():
    Y, _ = _rows()
    w = torch.full((30,), 1e308, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape("sample_weight is too large: the weighted "
                                                   "squared deviations of X overflow float64")):
        spread.covariance_spread(Y, w)
    with pytest.raises(TypeError, match=re.escape("sample_weight must be a dense (strided) "
                                                  "tensor")):
        spread.covariance_spread(Y, w.to_sparse())


@pytest.mark.parametrize("call", [spread.covariance_spread, spread.sphere_spread])
def test_wide_spread_checks_its_weights(call):
    X = torch.randn(50, 100, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=re.escape("sample_weight must be >= 0; got a negative "
                                                   "entry")):
        call(X, -torch.ones(50, dtype=torch.float64))


# -- collapse ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [collapse.rates, collapse.gamma])
def test_collapse_result_is_named(fn):
    with pytest.raises(TypeError, match=re.escape("collapse_result must be a dict (what "
                                                  "collapse() returns); got NoneType None")):
        fn(None)
    with pytest.raises(TypeError, match=re.escape("collapse_result['moons'] must be a dict; got "
                                                  "int 3")):
        fn({"moons": 3})
    with pytest.raises(ValueError, match=re.escape("collapse_result['moons'] must hold")):
        fn({"moons": {}})


# -- VQ experiment ----------------------------------------------------------------------------


def test_vq_summarize_and_table_check_their_input():
    with pytest.raises(TypeError, match=re.escape("per_seed must be a list of per-seed result "
                                                  "dicts; got ndarray")):
        vq_report.summarize(np.ones((2, 2)))
    with pytest.raises(ValueError, match=re.escape("per_seed must hold at least one per-seed "
                                                   "row; got an empty list")):
        vq_report.summarize([])
    with pytest.raises(ValueError, match=re.escape("per_seed[0] must hold 'usage'")):
        vq_report.summarize([{"mse": 1.0}])
    with pytest.raises(TypeError, match=re.escape("results must be a dict (what run_vq returns); "
                                                  "got int64")):
        vq_report.markdown_table(np.int64(3))
    with pytest.raises(ValueError, match=re.escape("results['methods']['a']['mean'] must be a "
                                                   "dict holding 'mse'")):
        vq_report.markdown_table({"methods": {"a": {"mean": {}}}})


def test_load_digits_split_names_seed_and_test_size():
    with pytest.raises(ValueError, match=re.escape("seed must be an integer >= 0; got -1")):
        vq_experiment.load_digits_split(0.2, seed=-1)
    with pytest.raises(ValueError, match=re.escape("seed must be an integer from 0 to 2**32 - 1 "
                                                   f"(scikit-learn's random_state); got {2**40}")):
        vq_experiment.load_digits_split(0.2, seed=2**40)
    with pytest.raises(TypeError, match=re.escape("test_size must be a real number; got NoneType "
                                                  "None")):
        vq_experiment.load_digits_split(None)
    with pytest.raises(ValueError, match=re.escape("test_size must be a number in (0, 1); got "
                                                   "1.5")):
        vq_experiment.load_digits_split(1.5)


# -- progress ---------------------------------------------------------------------------------


def test_progress_checks_its_arguments():
    sparse = torch.ones(2).to_sparse()
    with pytest.raises(TypeError, match=re.escape("desc must be a str; got int64")):
        progress.bar(True, 3, np.int64(3))
    with pytest.raises(TypeError, match=re.escape("show must be a bool (True or False); got "
                                                  "Tensor")):
        progress.bar(sparse, 3, "a")
    with pytest.raises(ValueError, match=re.escape("total must be an integer >= 0; got -1")):
        progress.bar(True, -1, "a")
    with pytest.raises(TypeError, match=re.escape("bar must be None or a progress bar (tqdm's, "
                                                  "as bar() makes it); got float 1.5")):
        progress.annealing_ticker(1.5)
    with pytest.raises(TypeError, match=re.escape("verbose must be a bool (True or False); got "
                                                  "Tensor")):
        progress.lloyd_ticker(None, sparse)
    assert progress.bar(False, None, "a") is None
    assert progress.annealing_ticker(None) is None
    assert progress.lloyd_ticker(None, False) is None


# -- precompile and warm-up (the checks raise before any compile work) -------------------------


@pytest.mark.parametrize(("entries", "exc", "message"), [
    (None, TypeError, "entries must be an integer; got NoneType None"),
    ("abc", TypeError, "entries must be an integer; got str 'abc'"),
    (float("nan"), TypeError, "entries must be an integer; got float nan"),
    (-1, ValueError, "entries must be an integer >= 0; got -1"),
])
def test_ready_for_and_decide_check_entries(entries, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        precompile.ready_for(entries)
    with precompile.pinned(), pytest.raises(exc, match=re.escape(message)):
        precompile.decide(entries)


def test_decide_checks_comm():
    with precompile.pinned(), pytest.raises(TypeError, match=re.escape(
            "comm must be None or a rbfkmeans.comm.Comm; got str 'abc'")):
        precompile.decide(10, comm="abc")


@pytest.mark.parametrize("argv", [5, np.empty(0), "--background", ["--background", 3]])
def test_precompile_main_checks_argv(argv, monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("the compile step ran")

    monkeypatch.setattr(precompile, "compile_all", no_compile)
    monkeypatch.setattr(precompile, "cache_dir", no_compile)
    with pytest.raises(TypeError, match=re.escape("argv must be None or a list of str (the "
                                                  "arguments); got")):
        precompile.main(argv)


def test_warm_up_checks_progress_first(monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("warm_up did work before checking progress")

    monkeypatch.setattr(precompile, "clear_stale", no_work)
    monkeypatch.setattr(precompile, "mode", no_work)
    with pytest.raises(TypeError, match=re.escape("progress must be None or a callable "
                                                  "progress(i, n, name); got str 'abc'")):
        warmup.warm_up(progress="abc")


@pytest.mark.parametrize(("change", "error", "message"), [
    ({"n_features": 0}, ValueError, "n_features must be an integer >= 1; got 0"),
    ({"slots": "a"}, TypeError, "slots must be an integer; got str 'a'"),
    ({"dim": -1}, ValueError, "dim must be an integer >= 1; got -1"),
    ({"hidden": 1.5}, TypeError, "hidden must be an integer; got float 1.5"),
    ({"quantizer": None}, TypeError, "quantizer must be a torch.nn.Module with forward(z)"),
])
def test_vq_autoencoder_checks_its_sizes_and_quantizer(change: dict, error: type,
                                                        message: str) -> None:
    """A zero width had built a network of empty layers (Linear(0, h)); other bad sizes failed
    inside torch or Python's arithmetic."""
    kwargs = {"n_features": 4, "quantizer": torch.nn.Identity(), "slots": 2, "dim": 2,
              "hidden": 8, **change}
    with pytest.raises(error, match=re.escape(message)):
        vq_experiment.VQAutoencoder(kwargs.pop("n_features"), kwargs.pop("quantizer"), **kwargs)
    from rbfkmeans import VectorQuantizer
    model = vq_experiment.VQAutoencoder(4, VectorQuantizer(2, 3), slots=2, dim=2, hidden=8)
    assert model(torch.randn(6, 4))[0].shape == (6, 4)
