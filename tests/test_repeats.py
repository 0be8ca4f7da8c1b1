"""Repeated rows folded into weights (:mod:`rbfkmeans.repeats`) and the fit on them.

References: ``numpy.unique`` over rows for the grouping, ``numpy.bincount`` for the summed
weights, and the fit of the distinct rows with those weights passed explicitly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

import rbfkmeans.estimator as estimator_module
from rbfkmeans import RBFKMeans, repeats
from rbfkmeans.repeats import fold_repeats


def _repeating(seed: int, n: int, d: int, levels: int) -> np.ndarray:
    """Rows of small integers: many rows repeat when ``levels ** d`` is small next to ``n``."""
    return np.random.default_rng(seed).integers(0, levels, size=(n, d)).astype(np.float64)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 300), d=st.integers(1, 5),
       levels=st.integers(1, 4), weighted=st.booleans(), chunk=st.sampled_from([None, 1, 7]))
def test_fold_matches_numpy_unique(seed: int, n: int, d: int, levels: int, weighted: bool,
                                   chunk: int | None) -> None:
    Xn = _repeating(seed, n, d, levels)
    wn = np.random.default_rng(seed + 1).uniform(0.5, 2.0, size=n) if weighted else None
    X = torch.tensor(Xn)
    w = None if wn is None else torch.tensor(wn)
    f = fold_repeats(X, w, min_saving=0.0, chunk_size=chunk)
    assert f is not None
    _, first, inverse = np.unique(Xn, axis=0, return_index=True, return_inverse=True)
    assert f.rows.tolist() == sorted(first.tolist())  # the first occurrences, in row order
    assert torch.equal(X[f.rows][f.inverse], X)  # every row is its distinct row
    distinct = X[f.rows].numpy()
    assert np.unique(distinct, axis=0).shape[0] == distinct.shape[0]  # no group split in two
    # the same grouping as numpy's (up to the numbering of the groups)
    np.testing.assert_array_equal(f.inverse.numpy(), _renumbered(inverse.reshape(-1)))
    _check_weights(f, wn, n)


def _renumbered(groups: np.ndarray) -> np.ndarray:
    """Group ids renumbered in the order groups first occur."""
    order: dict[int, int] = {}
    return np.array([order.setdefault(int(g), len(order)) for g in groups])


def _check_weights(f, wn: np.ndarray | None, n: int) -> None:
    expected = np.bincount(f.inverse.numpy(), weights=np.ones(n) if wn is None else wn)
    np.testing.assert_allclose(f.weight.numpy(), expected, rtol=1e-12)


def test_too_few_repeats_is_none() -> None:
    X = torch.arange(200.0).reshape(100, 2)
    X[7] = X[3]  # one repeat in a hundred rows
    assert fold_repeats(X) is None
    f = fold_repeats(X, min_saving=0.0)
    assert f is not None
    assert f.rows.numel() == 99
    assert f.weight[3] == 2.0
    assert fold_repeats(X[:1]) is None


def test_signed_zeros_are_one_row_and_inputs_untouched() -> None:
    X = torch.tensor([[0.0, 1.0], [-0.0, 1.0], [2.0, 2.0], [0.0, 1.0]], dtype=torch.float32)
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float32)
    X0, w0 = X.clone(), w.clone()
    f = fold_repeats(X, w)
    assert f is not None
    assert f.rows.tolist() == [0, 2]
    assert f.inverse.tolist() == [0, 0, 1, 0]
    assert f.weight.tolist() == [7.0, 3.0]
    assert f.weight.dtype == torch.float32
    assert torch.equal(X, X0)
    assert torch.equal(w, w0)
    assert torch.equal(torch.signbit(X), torch.signbit(X0))


@pytest.mark.parametrize(("kwargs", "exc", "words"), [
    ({"X": np.zeros((3, 2))}, TypeError, "X must be a torch.Tensor"),
    ({"X": torch.zeros(3)}, ValueError, "X must be a 2-D tensor"),
    ({"X": torch.zeros(3, 2, dtype=torch.float16)}, TypeError, "X must be float32 or float64"),
    ({"sample_weight": torch.ones(4)}, ValueError, "sample_weight must be a tensor of shape (3,)"),
    ({"sample_weight": [1.0, 1.0, 1.0]}, ValueError, "sample_weight must be a tensor"),
    ({"min_saving": -0.1}, ValueError, "min_saving must be a number in [0, 1]; got -0.1"),
    ({"min_saving": 2}, ValueError, "min_saving must be a number in [0, 1]; got 2"),
    ({"min_saving": True}, ValueError, "min_saving"),
    ({"min_saving": "0.1"}, ValueError, "min_saving"),
    ({"chunk_size": 0}, ValueError, "chunk_size"),
])
def test_bad_input_is_named(kwargs: dict, exc: type, words: str) -> None:
    args = {"X": torch.zeros(3, 2)} | kwargs
    X = args.pop("X")
    w = args.pop("sample_weight", None)
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        fold_repeats(X, w, **args)


def _pixels(seed: int = 0, n: int = 1500) -> np.ndarray:
    """Colour-like data: a few blobs of 5-bit values, so many rows repeat."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(40, 215, size=(6, 3))
    X = centres[rng.integers(0, 6, size=n)] + rng.normal(scale=6.0, size=(n, 3))
    return np.clip(np.round(X / 8.0) * 8.0, 0, 255) / 255.0


@pytest.mark.parametrize("params", [{}, {"assignment": "hard"}, {"assignment": "softmax"}])
@pytest.mark.parametrize("weighted", [False, True])
def test_fit_equals_the_fit_of_distinct_rows_with_their_weights(params: dict,
                                                                weighted: bool) -> None:
    X = _pixels()
    w = np.random.default_rng(3).uniform(0.5, 2.0, size=X.shape[0]) if weighted else None
    _, first, inverse = np.unique(X, axis=0, return_index=True, return_inverse=True)
    assert first.size < 0.5 * X.shape[0]  # the data repeat: the fit runs on the distinct rows
    rows = np.sort(first)
    group = {tuple(X[i]): j for j, i in enumerate(rows)}
    to_distinct = np.array([group[tuple(x)] for x in X])
    w_distinct = np.bincount(to_distinct, weights=np.ones(X.shape[0]) if w is None else w)
    est = RBFKMeans(5, random_state=0, **params).fit(X, sample_weight=w)
    ref = RBFKMeans(5, random_state=0, **params).fit(X[rows], sample_weight=w_distinct)
    np.testing.assert_array_equal(est.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(est.labels_, ref.labels_[to_distinct])
    assert est.inertia_ == ref.inertia_
    assert est.n_iter_ == ref.n_iter_
    # inertia_ is the objective over all the rows (recomputed in float64)
    d2 = ((X[:, None, :] - est.cluster_centers_[None]) ** 2).sum(-1)
    assert np.array_equal(est.labels_, d2.argmin(1))
    J = float(((d2.min(1)) * (1.0 if w is None else w)).sum())
    assert est.inertia_ == pytest.approx(J, rel=1e-9)
    assert inverse.size == X.shape[0]  # numpy's grouping covers every row


def test_memmap_is_fit_as_it_is(tmp_path, monkeypatch) -> None:
    X = _pixels(n=600)
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=X.dtype, shape=X.shape)
    mm[:] = X
    mm.flush()
    seen: list[int] = []
    real = estimator_module.fold_repeats
    monkeypatch.setattr(estimator_module, "fold_repeats",
                        lambda X, *a, **k: seen.append(X.shape[0]) or real(X, *a, **k))
    RBFKMeans(3, random_state=0, assignment="hard").fit(np.load(tmp_path / "x.npy",
                                                                 mmap_mode="r"))
    assert seen == []
    RBFKMeans(3, random_state=0, assignment="hard").fit(X)
    assert seen == [600]


def test_fewer_distinct_rows_than_clusters_fits_all_rows() -> None:
    X = np.repeat(np.eye(3), 20, axis=0)  # 3 distinct rows, k = 4
    with pytest.warns(ConvergenceWarning, match="distinct clusters"):
        est = RBFKMeans(4, random_state=0, assignment="hard").fit(X)
    assert est.labels_.shape == (60,)
    assert np.unique(est.cluster_centers_, axis=0).shape[0] == 3


@pytest.mark.parametrize("share", [0.0, 0.004, 0.2, 0.6])
def test_large_data_checked_on_a_sample_first(share: float) -> None:
    """Above ``SAMPLE_MIN`` rows a sample without a repeat ends the check; the answer is the
    full rule's all the same: folded exactly when at least a tenth of the rows repeat."""
    rng = np.random.default_rng(5)
    n = 50_000
    assert n > repeats.SAMPLE_MIN
    X = rng.normal(size=(n, 4))
    copies = rng.choice(n, size=int(share * n), replace=False)
    X[copies] = X[rng.integers(0, n, size=copies.size)]  # rows overwritten by other rows
    f = fold_repeats(torch.tensor(X))
    distinct = np.unique(X, axis=0).shape[0]
    if n - distinct < 0.1 * n:
        assert f is None
    else:
        assert f is not None
        assert f.rows.numel() == distinct
        assert torch.equal(torch.tensor(X)[f.rows][f.inverse], torch.tensor(X))
