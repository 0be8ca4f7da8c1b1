"""The frame a fit computes in (rbfkmeans.frame): Frame.choose against a float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from rbfkmeans.frame import MAX_EXPONENT, Frame, scale_by_power_of_two


def reference(X: np.ndarray, w: np.ndarray | None) -> tuple[bool, int, float, float, float]:
    """Shifted, exponent, trace, ||mu||^2 and the largest |x - mu| or |x| it is chosen from,
    all in float64 from the definition in the module docstring."""
    Xd = X.astype(np.float64)
    wd = np.ones(len(X)) if w is None else w.astype(np.float64)
    mu = wd @ Xd / wd.sum()
    trace = float(wd @ ((Xd - mu) ** 2).sum(axis=1) / wd.sum())
    offset = float(mu @ mu)
    shifted = offset > trace
    largest = float(np.abs(Xd - mu).max() if shifted else np.abs(Xd).max())
    exponent = 0
    if largest > 0 and not 2.0**-MAX_EXPONENT <= largest <= 2.0**MAX_EXPONENT:
        exponent = -math.frexp(largest)[1]
    return shifted, exponent, trace, offset, largest


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 400), d=st.integers(1, 40),
       offset=st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.5, 10.0, 1e4, 1e8]),
       scale=st.sampled_from([1e-20, 1e-3, 1.0, 1e6, 1e20]),
       dtype=st.sampled_from([np.float32, np.float64]), weighted=st.booleans(),
       chunk=st.sampled_from([None, 7]))
@example(seed=0, n=2, d=1, offset=0.0, scale=1e-20, dtype=np.float32, weighted=False,
         chunk=None)  # float32 squares of 1e-20 are subnormal: summed in float64
def test_the_frame_is_the_float64_definitions(seed: int, n: int, d: int, offset: float,
                                              scale: float, dtype: type, weighted: bool,
                                              chunk: int | None) -> None:
    """Shift, exponent and trace as the float64 definitions give them, whichever pass settles
    them: offsets from none to 1e8 spreads (around ||mu||^2 = trace, the decision's edge, at
    offsets near 1), scales from 1e-20 to 1e20, weights, chunks of 7 rows."""
    assume(dtype is np.float64 or offset <= 1e4)  # float32 rows 1e8 spreads off hold no spread
    rng = np.random.default_rng(seed)
    X = ((rng.normal(size=(n, d)) + offset * rng.normal(size=d)) * scale).astype(dtype)
    w = rng.uniform(0.0, 3.0, size=n).astype(dtype) if weighted else None
    if w is not None and not w.sum() > 0:
        w[0] = 1.0
    shifted, exponent, trace, mu_sq, largest = reference(X, w)
    frame = Frame.choose(torch.from_numpy(X), None if w is None else torch.from_numpy(w),
                         chunk_size=chunk)
    eps = float(np.finfo(dtype).eps)
    # a shifted frame measures deviations from the mean in the data's precision: off by the
    # rounding of its sums, n eps |mu| a feature at most
    rounding = d * (n * eps * math.sqrt(mu_sq)) ** 2 if shifted else 0.0
    assert frame.trace == pytest.approx(trace, rel=64 * d * eps, abs=rounding + 1e-300)
    if abs(mu_sq - trace) > 1e-3 * trace:  # away from the edge the decision is exact
        assert (frame.shift is not None) == shifted
    if frame.shift is not None:
        mu = (np.ones(n) if w is None else w.astype(np.float64)) @ X.astype(np.float64)
        mu /= n if w is None else w.astype(np.float64).sum()
        np.testing.assert_allclose(frame.shift.double().numpy(), mu, rtol=8 * eps,
                                   atol=8 * eps * float(np.abs(mu).max()))
    if frame.shift is not None or not shifted:  # the same largest |.| as the reference
        fraction = math.frexp(largest)[0]
        if 2.0**-MAX_EXPONENT * 1.01 < largest < 2.0**MAX_EXPONENT * 0.99 or \
                not (fraction < 0.501 or fraction > 0.999):  # not at a power of two's edge
            assert frame.exponent == exponent


@pytest.mark.parametrize(("offset", "shifted"), [(0.0, False), (0.5, False), (3.0, True)])
def test_one_pass_settles_centred_data_and_two_settle_offset_data(offset: float,
                                                                  shifted: bool) -> None:
    """Data whose mean lies within its spread is settled by the first pass (no shift: the
    same frame as the second would choose), data farther off takes the second: the frame's
    trace is the reference's either way."""
    rng = np.random.default_rng(1)
    X = (rng.normal(size=(5000, 16)) + offset).astype(np.float32)
    ref_shifted, _, trace, _, _ = reference(X, None)
    assert ref_shifted == shifted
    frame = Frame.choose(torch.from_numpy(X), chunk_size=300)
    assert (frame.shift is not None) == shifted
    assert frame.exponent == 0
    assert frame.trace == pytest.approx(trace, rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("exponent", [-2000, -1100, -300, -149, -1, 0, 5, 140, 300, 1100])
def test_scaling_by_a_power_of_two_is_exact_across_the_range(dtype: torch.dtype,
                                                             exponent: int) -> None:
    """``2^e x`` as ``numpy.ldexp`` rounds it, for every ``e`` (a single factor ``2^e`` is
    infinite in float32 beyond ``e = 127``): subnormal inputs included; in place or not."""
    info = torch.finfo(dtype)
    x = torch.tensor([1.0, -3.0, info.tiny, info.tiny * 2.0**-10, 0.5 * info.max, 0.0], dtype=dtype)
    with np.errstate(over="ignore"):  # rounds (to a subnormal, to 0 or inf) once, as we must
        ref = np.ldexp(x.numpy(), exponent).astype(x.numpy().dtype)
    np.testing.assert_array_equal(scale_by_power_of_two(x, exponent).numpy(), ref)
    y = x.clone()
    assert scale_by_power_of_two(y, exponent, inplace=True) is y or exponent == 0
    np.testing.assert_array_equal(y.numpy(), ref)
