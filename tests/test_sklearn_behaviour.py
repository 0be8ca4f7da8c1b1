"""Where RBFKMeans promises scikit-learn's behaviour: empty-cluster relocation in hard Lloyd,
feature names out, dtype tags, progress, explicit inits with n_init > 1, labels of batch fits.

The reference is ``sklearn.cluster.KMeans(algorithm="lloyd")`` run from the same start.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import rbfkmeans.runs as runs_mod
from rbfkmeans import RBFKMeans


def same_centres_up_to_order(A: np.ndarray, B: np.ndarray, atol: float = 1e-9) -> bool:
    """Whether the rows of A are the rows of B in some order (greedy match, small k)."""
    left = list(range(len(B)))
    for a in A:
        d = [np.abs(a - B[j]).max() for j in left]
        j = int(np.argmin(d))
        if d[j] > atol:
            return False
        left.pop(j)
    return True


def test_empty_cluster_relocation_reproducer() -> None:
    """The point farthest from its own centre moves, and leaves its old cluster's mean."""
    X = np.array([[0.0], [1.0], [3.0], [5.0]])
    init = np.array([[3.0], [100.0]])
    km = KMeans(2, init=init, n_init=1, algorithm="lloyd").fit(X)
    est = RBFKMeans(2, assignment="hard", init=init).fit(X)
    np.testing.assert_allclose(km.cluster_centers_, [[4.0], [0.5]])
    np.testing.assert_allclose(est.cluster_centers_, km.cluster_centers_, atol=1e-12)
    assert est.inertia_ == pytest.approx(2.5)
    assert km.inertia_ == pytest.approx(2.5)


@pytest.mark.parametrize("weighted", [False, True])
def test_relocation_equals_sklearn_on_random_problems(weighted: bool) -> None:
    """200 random 30-point problems whose start has two centres far from every point (two empty
    clusters at the first iteration): the same centroids (up to order) and inertia."""
    rng = np.random.default_rng(0)
    differ = 0
    for _ in range(200):
        X = rng.normal(size=(30, 2)) * rng.uniform(0.5, 3.0)
        init = X[rng.choice(30, 4, replace=False)].copy()
        init[rng.choice(4, 2, replace=False)] += rng.choice([-1, 1], size=(2, 2)) * 1e3
        w = rng.uniform(0.5, 2.0, size=30) if weighted else None
        km = KMeans(4, init=init, n_init=1, algorithm="lloyd", tol=0.0).fit(X, sample_weight=w)
        est = RBFKMeans(4, assignment="hard", init=init, tol=0.0).fit(X, sample_weight=w)
        ok = same_centres_up_to_order(est.cluster_centers_, km.cluster_centers_) and \
            est.inertia_ == pytest.approx(km.inertia_, rel=1e-9)
        differ += not ok
    assert differ == 0


def test_feature_names_out_and_pipeline() -> None:
    X = np.random.default_rng(0).normal(size=(60, 3))
    est = RBFKMeans(4, assignment="hard", random_state=0).fit(X)
    names = est.get_feature_names_out()
    assert names.tolist() == [f"rbfkmeans{j}" for j in range(4)]
    pipe = make_pipeline(StandardScaler(), RBFKMeans(3, random_state=0)).fit(X)
    assert pipe.get_feature_names_out().tolist() == ["rbfkmeans0", "rbfkmeans1", "rbfkmeans2"]
    assert est.set_output(transform="default") is est
    assert est.transform(X).shape == (60, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_preserves_dtype_tag_is_true(dtype: type) -> None:
    est = RBFKMeans(3, random_state=0)
    assert est.__sklearn_tags__().transformer_tags.preserves_dtype == ["float64", "float32"]
    X = np.random.default_rng(1).normal(size=(50, 2)).astype(dtype)
    assert est.fit_transform(X).dtype == dtype


@pytest.mark.parametrize("assignment", ["hard", "entmax15"])
def test_verbose_shows_the_lloyd_iterations(assignment: str, capsys: pytest.CaptureFixture)\
        -> None:
    X = np.random.default_rng(2).normal(size=(80, 2))
    RBFKMeans(3, assignment=assignment, verbose=1, random_state=0).fit(X)
    err = capsys.readouterr().err
    assert ("lloyd" if assignment == "hard" else "hard polish") in err
    assert ("anneal" in err) == (assignment != "hard")
    RBFKMeans(3, assignment=assignment, verbose=0, random_state=0).fit(X)
    assert capsys.readouterr().err == ""


def test_explicit_init_with_n_init_warns_and_runs_once(monkeypatch) -> None:
    X = np.random.default_rng(3).normal(size=(60, 2))
    init = X[:3].copy()
    calls: list[int] = []
    real = runs_mod.initial_centers

    def spy(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(runs_mod, "initial_centers", spy)
    with pytest.warns(RuntimeWarning, match=r"Explicit initial center position passed: "
                                            r"performing only one init .* n_init=5"):
        est = RBFKMeans(3, assignment="hard", init=init, n_init=5).fit(X)
    assert len(calls) == 1
    ref = KMeans(3, init=init, n_init=1, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(est.cluster_centers_, ref.cluster_centers_, atol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # n_init="auto" or 1: nothing to say
        RBFKMeans(3, assignment="hard", init=init).fit(X)
        RBFKMeans(3, assignment="hard", init=init, n_init=1).fit(X)


def test_fit_on_a_dataloader_leaves_labels_and_fit_predict_works() -> None:
    X = np.random.default_rng(4).normal(size=(300, 2)).astype(np.float32)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.as_tensor(X)),
                                         batch_size=64, shuffle=False)
    est = RBFKMeans(3, assignment="hard", random_state=0)
    labels = est.fit_predict(loader)
    np.testing.assert_array_equal(labels, est.predict(X))
    np.testing.assert_array_equal(est.labels_, labels)
    assert est.n_swaps_ == 0
    arr = RBFKMeans(3, assignment="hard", random_state=0).fit_batches(X, batch_size=50)
    np.testing.assert_array_equal(arr.labels_, arr.predict(X))  # rows in their own order
    with pytest.raises(ValueError, match=r"fit_predict needs the data again .* one-shot"):
        RBFKMeans(3, assignment="hard").fit_predict(iter([X[:100], X[100:]]))
    once = RBFKMeans(3, assignment="hard", random_state=0).fit(iter([X[:100], X[100:]]))
    assert not hasattr(once, "labels_")  # a one-shot source cannot be labelled afterwards
    assert once.n_swaps_ == 0


def test_fit_batches_reads_a_dataframe_as_rows() -> None:
    """A pandas DataFrame is one 2-D array source of rows (iterating it had yielded the column
    names); a Series, one column, is refused naming its shape."""
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(6).normal(size=(300, 3))
    got = RBFKMeans(3, random_state=0).fit_batches(pd.DataFrame(X, columns=list("abc")),
                                                   batch_size=50)
    want = RBFKMeans(3, random_state=0).fit_batches(X, batch_size=50)
    assert got.n_iter_ == want.n_iter_ == 6
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    np.testing.assert_array_equal(got.labels_, want.labels_)
    with pytest.raises(ValueError, match=r"batches must be .* 2-D array; got an array of shape"):
        RBFKMeans(3).fit_batches(pd.Series(X[:, 0]))


def test_fit_batches_of_a_dataframe_keeps_its_column_names() -> None:
    """The DataFrame had been read as its values: ``feature_names_in_`` was missing (``fit`` and
    ``partial_fit`` of the same frame set it) and ``predict(df)`` warned that the model was
    fitted without feature names."""
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(6).normal(size=(300, 3))
    df = pd.DataFrame(X, columns=list("abc"))
    est = RBFKMeans(3, random_state=0).fit_batches(df, batch_size=50)
    assert list(est.feature_names_in_) == ["a", "b", "c"]
    assert list(RBFKMeans(3, random_state=0).fit(df).feature_names_in_) == ["a", "b", "c"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(est.predict(df), est.labels_)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(df.rename(columns={"a": "z"}))


def test_a_stream_shorter_than_the_seeding_rows_seeds_in_its_first_epoch() -> None:
    """A stream of fewer than 3k rows is seeded on its whole first epoch; a second epoch then
    steps batch by batch. The rows kept for seeding had carried into the second epoch (seeded
    on 15 rows of a 10-row stream) and ``inertia_`` summed 20 rows' J for a 10-row epoch.
    Reference: the mini-batch rule of the second epoch in NumPy from the first epoch's state."""
    X, _ = make_blobs(10, n_features=2, centers=4, random_state=0)
    batches = [X[:5], X[5:]]
    one = RBFKMeans(4, random_state=0).fit_batches(batches)
    two = RBFKMeans(4, random_state=0).fit_batches(batches, n_epochs=2)
    assert (one.n_iter_, two.n_iter_) == (1, 3)
    C, n = one.cluster_centers_.copy(), one._online_counts.astype(np.float64).copy()
    J = 0.0
    for B in batches:
        d = ((B[:, None, :] - C[None]) ** 2).sum(-1)  # (b, k)
        labels = d.argmin(1)
        J += float(d.min(1).sum())
        N = np.bincount(labels, minlength=4).astype(np.float64)
        S = np.zeros_like(C)
        np.add.at(S, labels, B)
        n += N
        moved = N > 0
        C[moved] += (S[moved] - N[moved, None] * C[moved]) / n[moved, None]
    np.testing.assert_allclose(two.cluster_centers_, C, rtol=0, atol=1e-9)
    assert two.inertia_ == pytest.approx(J, rel=1e-9)


def test_fit_batches_skips_batches_of_no_rows_and_names_rows_given_as_a_list() -> None:
    """A batch of no rows (``numpy.array_split``'s last parts) had stopped the fit with
    scikit-learn's 'Found array with 0 sample(s)'; it changes nothing now. A batch given as a
    list of 1-D rows had been read as ``(x, y)``: one row, 'Expected 2D array'."""
    X, _ = make_blobs(300, n_features=3, centers=4, random_state=0)
    want = RBFKMeans(4, random_state=0).fit_batches([X[:100], X[100:]])
    got = RBFKMeans(4, random_state=0).fit_batches([X[:100], X[:0], X[100:], X[:0]])
    np.testing.assert_array_equal(got.cluster_centers_, want.cluster_centers_)
    np.testing.assert_array_equal(got.labels_, want.labels_)
    assert got.n_iter_ == want.n_iter_
    with pytest.raises(TypeError, match=re.escape(
            "got a first element of shape (3,): pass each batch as one 2-D array")):
        RBFKMeans(4).fit_batches([[X[i] for i in range(300)]])
    with pytest.raises(ValueError, match="batches yielded no data"):
        RBFKMeans(4).fit_batches([X[:0], X[:0]])


def test_partial_fit_sets_n_swaps() -> None:
    X = np.random.default_rng(5).normal(size=(40, 2))
    est = RBFKMeans(3, random_state=0).partial_fit(X)
    assert est.n_swaps_ == 0
    fitted = RBFKMeans(3, random_state=0).fit(X)
    kept = fitted.n_swaps_
    assert fitted.partial_fit(X[:5]).n_swaps_ == kept  # the fit's swaps stay on record


def test_parameter_keys_compare_values_not_their_spelling() -> None:
    """The ranks compare their settings by these keys: equal values of other types agree, and
    what differs in a value (an array entry past repr's abbreviation, a partial's argument, a
    closed-over number, a function's code) disagrees."""
    import functools

    import torch

    from rbfkmeans._parameters import _value_key

    assert _value_key(3) == _value_key(np.int64(3))
    assert _value_key(1e-4) == _value_key(np.float64(1e-4))
    assert _value_key([[0, 1], [2, 3]]) == _value_key(np.array([[0.0, 1.0], [2.0, 3.0]]))
    assert _value_key(torch.arange(4.0)) == _value_key(np.arange(4.0))
    a, b = torch.zeros(40, 30), torch.zeros(40, 30)
    b[17, 3] = 1e-6
    assert repr(a) == repr(b)  # what the ranks had compared
    assert _value_key(a) != _value_key(b)
    sgd = torch.optim.SGD
    assert _value_key(functools.partial(sgd, lr=0.1)) == _value_key(functools.partial(sgd, lr=0.1))
    assert _value_key(functools.partial(sgd, lr=0.1)) != _value_key(functools.partial(sgd, lr=0.2))

    def factory(lr: float) -> object:
        return lambda params: sgd(params, lr=lr)

    assert _value_key(factory(0.1)) == _value_key(factory(0.1))
    assert _value_key(factory(0.1)) != _value_key(factory(0.2))
    assert _value_key(lambda p: sgd(p, lr=0.1)) != _value_key(lambda p: sgd(p, lr=0.2))
