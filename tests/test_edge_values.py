"""Extreme but legal values, and bad ones, at the schedules, the metrics, inference's helpers and
the experiments' helpers: a correct result at the ends of float64's range, or an error that names
the parameter and the value received (never NaN, a raw ``OverflowError`` or a library's own
``RuntimeError``)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from rbfkmeans import inference, metrics, schedules
from rbfkmeans.experiments import _common as common
from rbfkmeans.experiments import datasets, runner

NAN, INF = math.nan, math.inf

# -- schedules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T_start", "T_end", "ratio"), [
    (1e300, 1e-300, 0.5), (1e300, 1e-300, 1e-300), (1.7e308, 1e-308, 0.5),
    (1e-300, 5e-324, 0.5), (1.0, 1e-10, 5e-324), (1e300, 1e-300, 0.1),
])
def test_a_ladder_across_float64s_range_is_positive_and_ends_at_T_end(
        T_start: float, T_end: float, ratio: float) -> None:
    """``T_start * ratio**arange(n)`` underflowed: 1e300 -> 1e-300 at 0.5 ended in 919 zeros
    without T_end, and at ratio 1e-300 read [1e300, 1, 0]."""
    temps = schedules.geometric_schedule(T_start, T_end, ratio)
    assert temps[0] == T_start
    assert (temps > 0).all()
    assert (np.diff(temps) < 0).all()
    assert temps[-1] == pytest.approx(T_end, rel=1e-12)
    steps = (math.log(T_start) - math.log(T_end)) / -math.log(ratio)
    assert len(temps) in (math.floor(steps + 1e-9) + 1, math.floor(steps + 1e-9) + 2)
    rungs = temps[:-1]  # every rung but an appended T_end is T_start ratio^i, to rounding
    normal = rungs >= np.finfo(np.float64).tiny  # (subnormal ones hold fewer digits)
    expected = math.log(T_start) + np.arange(rungs.size) * math.log(ratio)
    np.testing.assert_allclose(np.log(rungs[normal]), expected[normal], rtol=1e-13, atol=1e-12)


def test_the_ladder_of_ordinary_temperatures_is_the_product_it_always_was() -> None:
    for T_start, T_end, ratio in [(1.0, 0.1, 0.5), (10.0, 1e-5, 0.1), (3.7, 1e-12, 0.9),
                                  (1e150, 1e-150, 0.5), (1.0, 0.125, 0.5)]:
        temps = schedules.geometric_schedule(T_start, T_end, ratio)
        steps = (math.log(T_end) - math.log(T_start)) / math.log(ratio)
        n = math.floor(steps + 1e-9) + 1
        np.testing.assert_array_equal(temps[:n], T_start * ratio ** np.arange(n))
        assert len(temps) == n + (temps[n - 1] > T_end * (1 + 1e-12))


def test_critical_temperature_of_no_rows_is_an_error_naming_X() -> None:
    """It returned 0.0 for an empty X (while all-zero weights raised)."""
    for metric in ("sqeuclidean", "cosine"):
        with pytest.raises(ValueError, match=r"X must have at least one row.*got shape \(0, 2\)"):
            schedules.critical_temperature(torch.zeros(0, 2), "softmax", 2, metric=metric)
    with pytest.raises(ValueError, match=r"X must have at least one row"):
        schedules.critical_temperature(torch.zeros(0, 2), "softmax", 2, torch.zeros(0))
    assert schedules.critical_temperature(torch.ones(1, 2), "softmax", 2) == 0.0  # one row: 0
    assert schedules.critical_temperature(torch.zeros(0, 2), "softmax", 2, eigmax=1.5) == 1.5


def test_sphere_eigmax_refuses_a_mean_norm_above_one() -> None:
    """A mean of unit rows has norm at most 1; mean_norm=5 was accepted."""
    for bad in (5.0, 1.001, 1.0001):
        with pytest.raises(ValueError, match=rf"mean_norm must be .*<= 1.*got {bad!r}"):
            schedules.sphere_eigmax(0.5, bad)
    assert schedules.sphere_eigmax(0.5, 1.0) == 0.5
    assert schedules.sphere_eigmax(0.5, 1.0 + 1e-7) == 0.5 / (1.0 + 1e-7)  # rounding: accepted
    rows = metrics.normalize_rows(torch.ones(5, 3, dtype=torch.float32))
    mu = float(rows.double().mean(dim=0).norm())  # float32 unit rows: a hair above 1 at most
    assert schedules.sphere_eigmax(0.5, mu) == pytest.approx(0.5)


# -- metrics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_normalize_rows_names_a_non_finite_row(bad: float, dtype: torch.dtype) -> None:
    """NaN and inf rows came back as rows of NaN."""
    X = torch.tensor([[1.0, 2.0], [bad, 1.0]], dtype=dtype)
    with pytest.raises(ValueError, match=r"Z must be finite; got 1 NaN/inf"):
        metrics.normalize_rows(X, "Z")
    with pytest.raises(ValueError, match=r"X must be finite"):
        metrics.unit_rows(X)
    with pytest.raises(ValueError, match=r"C must be finite"):
        metrics.project_rows(X)


@pytest.mark.parametrize("bad", [NAN, INF])
def test_cosine_similarity_names_the_non_finite_argument(bad: float) -> None:
    ok, nonfinite = torch.ones(2, 2), torch.tensor([[1.0, bad], [1.0, 0.0]])
    with pytest.raises(ValueError, match=r"X must be finite"):
        metrics.cosine_similarity(nonfinite, ok)
    with pytest.raises(ValueError, match=r"C must be finite"):
        metrics.cosine_similarity(ok, nonfinite)


def test_bool_rows_are_rows_of_zeros_and_ones() -> None:
    """Bool rows raised a raw NotImplementedError (abs_cpu); the module computes integers as
    numbers, so bools are 0/1 as cosine_similarity already took them."""
    B = torch.tensor([[True, False], [True, True]])
    expected = metrics.normalize_rows(B.to(torch.float32))
    assert torch.equal(metrics.normalize_rows(B), expected)
    assert torch.equal(metrics.unit_rows(B), expected)
    assert torch.equal(metrics.project_rows(B), expected)
    assert torch.equal(metrics.project_rows(B, B.to(torch.float32)), expected)
    assert torch.equal(metrics.cosine_similarity(B, B), expected @ expected.T)
    metrics.check_nonzero_rows(B)
    metrics.check_nonzero_rows(torch.tensor([[3, 4]]))
    with pytest.raises(ValueError, match=r"X has a zero row \(row 1"):
        metrics.check_nonzero_rows(torch.tensor([[True], [False]]))
    with pytest.raises(ValueError, match=r"X has a zero row \(row 0"):
        metrics.check_nonzero_rows(torch.tensor([[0, 0], [1, 2]]))
    with pytest.raises(ValueError, match=r"X has a zero row"):
        metrics.normalize_rows(torch.tensor([[False, False]]))


@pytest.mark.parametrize(("fallback", "exc", "match"), [
    (torch.ones(1, 2), ValueError, r"fallback must have the shape of C \(2, 2\); got \(1, 2\)"),
    (torch.ones(2, 3), ValueError, r"fallback must have the shape of C \(2, 2\); got \(2, 3\)"),
    (torch.ones(2), ValueError, r"fallback must have the shape of C \(2, 2\); got \(2,\)"),
    ([[1.0, 0.0], [1.0, 0.0]], TypeError, r"fallback must be a torch\.Tensor; got list"),
    (torch.ones(2, 2, dtype=torch.complex64), TypeError, r"fallback must be real"),
])
def test_project_rows_checks_its_fallback(fallback: object, exc: type, match: str) -> None:
    """A wrong shape was broadcast silently, another gave a raw RuntimeError, a list an
    AttributeError."""
    C = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(exc, match=match):
        metrics.project_rows(C, fallback)  # type: ignore[arg-type]
    with pytest.raises(exc, match=match):  # checked whether or not a row is zero
        metrics.project_rows(torch.ones(2, 2), fallback)  # type: ignore[arg-type]


# -- inference -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_check_reach_calls_non_finite_rows_non_finite(bad: float) -> None:
    """NaN rows were said to lie "too far from the centroids": rescale X."""
    C = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"Z must be finite; got NaN/inf entries") as info:
        inference.check_reach(torch.tensor([[bad, 0.0]]), C, name="Z")
    assert "rescale" not in str(info.value)
    with pytest.raises(ValueError, match=r"C must be finite; got NaN/inf entries"):
        inference.check_reach(torch.zeros(2, 2), torch.tensor([[bad, 0.0]]))
    with pytest.raises(ValueError, match=r"X lies too far"):  # finite and far: as before
        inference.check_reach(torch.full((4, 2), 1e160, dtype=torch.float64), C.double())


@pytest.mark.parametrize(("total", "exc", "match"), [
    ("a", TypeError, r"total must be a real number; got str 'a'"),
    (None, TypeError, r"total must be a real number; got NoneType None"),
    (NAN, ValueError, r"total must be a finite number >= 0; got nan"),
    (-1.0, ValueError, r"total must be a finite number >= 0; got -1\.0"),
])
def test_check_reach_names_a_bad_total(total: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        inference.check_reach(torch.zeros(2, 2), torch.zeros(3, 2), total=total)  # type: ignore[arg-type]
    inference.check_reach(torch.zeros(2, 2), torch.zeros(3, 2), total=np.int64(4))


def test_to_numpy_takes_bfloat16_in_float32() -> None:
    """NumPy has no bfloat16: it raised a raw TypeError."""
    t = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16, requires_grad=True)
    out = inference.to_numpy(t)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.5, -2.0, 3.0])
    assert inference.to_numpy(torch.ones(2, dtype=torch.float16)).dtype == np.float16


# -- experiments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e-160, 1e160, 1e200, 1e300, 2.0**1000])
def test_standardize_is_scale_free(scale: float) -> None:
    """Data at 1e200 came back all zeros (the squares overflowed); at 1e-200 it was called
    constant (they underflowed)."""
    X = np.array([[1.0, 0.0], [-1.0, 1.0], [0.5, -2.0]])
    expected = datasets.standardize(X)
    np.testing.assert_allclose(datasets.standardize(X * scale), expected, rtol=1e-14, atol=1e-15)
    Xf = np.float32(X) * np.float32(1e20)  # float32: its squares overflowed
    np.testing.assert_allclose(datasets.standardize(Xf), expected, rtol=1e-6, atol=1e-6)


def test_standardize_takes_array_likes_and_keeps_them() -> None:
    """A list gave AttributeError ('list' object has no attribute 'mean')."""
    rows = [[1.0, 2.0], [3.0, 5.0], [0.0, 1.0]]
    out = datasets.standardize(rows)  # type: ignore[arg-type]
    np.testing.assert_array_equal(out, datasets.standardize(np.array(rows)))
    assert rows == [[1.0, 2.0], [3.0, 5.0], [0.0, 1.0]]
    assert datasets.standardize(np.array([[3, 1], [1, 3]], dtype=np.int8)).tolist() == \
        [[1.0, -1.0], [-1.0, 1.0]]
    with pytest.raises(ValueError, match=r"X must not be constant"):
        datasets.standardize([[1e-300, 2.0], [1e-300, 2.0]])  # type: ignore[arg-type]


def test_spirals_name_turns_too_large_for_float64() -> None:
    """turns=1e300 raised a raw OverflowError."""
    for turns in (1e300, 1e160):
        with pytest.raises(ValueError, match=rf"turns must be .*; got {re.escape(repr(turns))}"):
            datasets.spirals(4, turns=turns)
    X, _ = datasets.spirals(4, turns=1e100, noise=0.0)
    assert np.isfinite(X).all()


def test_fit_exponential_scales_its_abscissae() -> None:
    """At T = 1e-300, 2e-300 the unscaled least squares gave A = 1, B = -2.8e-301 (rms 0.19)
    where the two points fit exactly with A = 4, B = ln(2) / 5e299."""
    res = common.fit_exponential([1e-300, 2e-300], [1.0, 2.0])
    assert res["A"] == pytest.approx(4.0, rel=1e-12)
    assert res["B"] == pytest.approx(math.log(2.0) / 5e299, rel=1e-12)
    assert res["rms_log10"] < 1e-12
    T = np.array([1e-300, 1.5e-300, 2e-300])
    res = common.fit_exponential(T, 3.0 * np.exp(-7e-301 / T))
    assert (res["A"], res["B"]) == (pytest.approx(3.0, rel=1e-10), pytest.approx(7e-301,
                                                                                 rel=1e-10))
    res = common.fit_power([1.0, 1.0 + 2**-52], [1.0, 1.0 + 2**-50])  # nearly equal T
    assert res["p"] == pytest.approx(4.0, rel=1e-6)


@pytest.mark.parametrize(("fit", "T", "gap", "match"), [
    (common.fit_power, [1e-320, 2e-320], [1.0, 2.0], r"A = 10\^320"),
    (common.fit_exponential, [1.0, 2.0], [1e-300, 1e300], r"A = 10\^"),
    (common.fit_exponential, [1e-320, 2e-320], [1.0, 2.0], r"T must hold numbers whose "
     r"reciprocals are finite .* got 1e-320"),
    (common.fit_exponential, [7.0, np.nextafter(7.0, 8.0)], [1.0, 2.0],
     r"T must hold at least two temperatures of distinct reciprocals"),
    # adjacent floats whose log10 (180.6, one ulp 2.8e-14) differ by 1e-16 before rounding: the
    # same number under any faithful libm (log10 of 11 and the next float, 0.3 ulp apart,
    # rounded apart on one host's libm)
    (common.fit_power, [2.0**600, np.nextafter(2.0**600, np.inf)], [1.0, 2.0],
     r"T must hold at least two temperatures of distinct logarithms"),
])
def test_rate_fits_name_what_overflows(fit: object, T: list[float], gap: list[float],
                                       match: str) -> None:
    """fit_power(T ~ 1e-320) raised a raw OverflowError (A = 10^320)."""
    with pytest.raises(ValueError, match=match) as info:
        fit(T, gap)  # type: ignore[operator]
    assert "T" in str(info.value)


def test_margins_needs_two_centroids() -> None:
    """k = 1 raised a raw RuntimeError from topk."""
    with pytest.raises(ValueError, match=r"C must hold at least two centroids.*got shape "
                                         r"\(1, 2\)"):
        common.margins(torch.zeros(3, 2), torch.zeros(1, 2))
    assert common.margins(torch.zeros(1, 2), torch.tensor([[1.0, 0.0], [0.0, 3.0]])).tolist() \
        == [8.0]


@pytest.mark.parametrize("param", ["quick", "progress"])
@pytest.mark.parametrize("bad", [1, "yes", None])
def test_run_reproduction_names_a_non_bool_flag(param: str, bad: object, tmp_path) -> None:
    with pytest.raises(TypeError, match=rf"{param} must be a bool; got {type(bad).__name__}"):
        runner.run_reproduction(tmp_path / "out", **{param: bad})
    assert not (tmp_path / "out").exists()


def test_run_reproduction_says_how_it_caps_threads() -> None:
    """The docstring said "at most the machine's CPUs"; the code caps at MAX_THREADS."""
    from rbfkmeans.cli_args import MAX_THREADS

    doc = runner.run_reproduction.__doc__ or ""
    assert "machine's CPUs" not in doc
    assert "MAX_THREADS" in doc
    with pytest.raises(ValueError, match=rf"threads must be an integer from 1 to {MAX_THREADS}"):
        runner.run_reproduction("unused", threads=MAX_THREADS + 1)
