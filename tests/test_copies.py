"""Equal centroids are one centroid to the torch passes (rbfkmeans.copies): their ties go to
the lowest index, in float32 too, where a matrix product may score equal centroids apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rbfkmeans import kernels
from rbfkmeans.bounds import BoundedAssignment
from rbfkmeans.copies import centroid_copies
from rbfkmeans.distances import row_norms_sq
from rbfkmeans.passes import Data
from rbfkmeans.stats import cluster_stats


def _repeated(seed: int, copies: list[int], d: int, dtype: torch.dtype
              ) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """Distinct random rows, row ``b`` repeated ``copies[b]`` times, shuffled: the rows, which
    distinct row each centroid is, and the centroids."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(len(copies), d))
    of = rng.permutation(np.repeat(np.arange(len(copies)), copies))
    return base, of, torch.as_tensor(base[of], dtype=dtype)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), copies=st.lists(st.integers(1, 4), min_size=1, max_size=30),
       d=st.integers(1, 12), dtype=st.sampled_from([torch.float32, torch.float64]),
       tie_norms=st.booleans())
def test_centroid_copies_against_numpy_unique(seed: int, copies: list[int], d: int,
                                              dtype: torch.dtype, tie_norms: bool) -> None:
    """The distinct rows' lowest indices and each one's next copy, against ``numpy.unique``
    on the rows; rows of equal norm that differ (a sign flipped) are not copies."""
    _, _, C = _repeated(seed, copies, d, dtype)
    if tie_norms:  # a row and its mirror image: equal norms, different rows
        C = torch.cat((C, -C[:1]))
    got = centroid_copies(C, row_norms_sq(C))
    Cn = C.numpy()
    _, first, inverse = np.unique(Cn, axis=0, return_index=True, return_inverse=True)
    if len(first) == len(Cn):
        assert got is None
        return
    assert got is not None
    np.testing.assert_array_equal(got.index.numpy(), np.sort(first))
    for j in np.sort(first):
        same = np.flatnonzero(inverse.ravel() == inverse.ravel()[j])
        assert int(got.next_copy[j]) == (same[1] if len(same) > 1 else len(Cn))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the same patch each
@given(seed=st.integers(0, 10_000), copies=st.lists(st.integers(1, 3), min_size=2, max_size=30),
       d=st.integers(1, 40), weighted=st.booleans())
def test_the_torch_hard_pass_gives_equal_centroids_rows_to_the_lowest_index(
        seed: int, copies: list[int], d: int, weighted: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 rows, the torch hard pass (kernels off): every row's label is the lowest index
    among the copies of its nearest distinct centroid (float64 distances; rows whose nearest
    two lie within 1e-4 are left out), later copies get no weight, and ``N`` and ``S`` are
    the sums over those labels."""
    monkeypatch.setattr(kernels, "usable", lambda *args, **kwargs: False)
    base, of, C = _repeated(seed, copies, d, torch.float32)
    rng = np.random.default_rng(seed + 1)
    X = torch.as_tensor(rng.normal(size=(400, d)), dtype=torch.float32)
    w = torch.as_tensor(rng.uniform(0.5, 2.0, size=400), dtype=torch.float32) if weighted \
        else None
    st_ = cluster_stats(Data(X, w), C, 0.0, "hard", return_labels=True)
    assert st_.labels is not None
    D = ((X.double().numpy()[:, None, :] - base[None]) ** 2).sum(2)
    gaps = np.diff(np.sort(D, axis=1), axis=1)[:, 0] if len(copies) > 1 else np.full(400, 1.0)
    lowest = np.array([np.flatnonzero(of == b)[0] for b in range(len(copies))])
    want = lowest[D.argmin(axis=1)]
    clear = gaps > 1e-4
    labels = st_.labels.numpy()
    np.testing.assert_array_equal(labels[clear], want[clear])
    later = np.setdiff1d(np.arange(len(of)), lowest)
    assert not np.isin(labels, later).any()
    ww = np.ones(400) if w is None else w.double().numpy()
    N = np.bincount(labels, weights=ww, minlength=len(of))
    np.testing.assert_allclose(st_.N.double().numpy(), N, rtol=1e-5, atol=1e-5)
    S = np.zeros((len(of), d))
    np.add.at(S, labels, ww[:, None] * X.double().numpy())
    np.testing.assert_allclose(st_.S.double().numpy(), S, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("k", [5, 20, 40])
def test_bounded_passes_with_equal_centroids_equal_the_full_pass(k: int) -> None:
    """Hamerly's bounds on float32 rows with every centroid given twice: a row's second
    nearest is its centroid's copy (a tie, so its bounds never certify it), and each pass's
    labels are the full pass's (the compiled kernel's, exact), the lowest copies."""
    g = torch.Generator().manual_seed(k)
    X = torch.randn(3000, 6, generator=g)
    half = torch.randn(k, 6, generator=g)
    C = torch.cat((half, half))
    data = Data(X)
    full = cluster_stats(data, C, 0.0, "hard", return_labels=True, objective=False)
    got = BoundedAssignment(data)(C)
    assert full.labels is not None
    assert int(full.labels.max()) < k
    assert torch.equal(got.labels, full.labels)
    torch.testing.assert_close(got.N.to(full.N.dtype), full.N)
