"""Bad input at the public entry points: a clear TypeError/ValueError naming the parameter and
the value (SPEC.md section 5), for the probe's reproducers, one test per defect."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import rbfkmeans as rk
from rbfkmeans import (
    frame,
    gradient,
    hartigan,
    passes,
    publish,
    quantizer_checks,
    refine,
    runs,
    seeding,
    splits,
    subspace,
)


def _X() -> torch.Tensor:
    return torch.tensor([[0.0, 0], [1, 0], [10, 10], [11, 10]], dtype=torch.float64)


def _C() -> torch.Tensor:
    return torch.tensor([[0.5, 0], [10.5, 10]], dtype=torch.float64)


@pytest.fixture(scope="module")
def fitted() -> tuple[rk.RBFKMeans, np.ndarray]:
    X = np.random.default_rng(0).normal(size=(20, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rk.RBFKMeans(2, random_state=0).fit(X), X


# -- 1. GradientStep checks the centroids' shape and the data ----------------------------------
@pytest.mark.parametrize("C", [_C()[:1], _C()[:, :1], _C().repeat(2, 1)])
def test_gradient_step_refuses_centroids_of_another_shape(C: torch.Tensor) -> None:
    step = gradient.GradientStep("softmax", _C())
    with pytest.raises(ValueError, match=re.escape(
            f"C must have shape (2, 2) (the step's k=2 centroids of the data's d=2 features); "
            f"got {tuple(C.shape)}")):
        step(passes.Data(_X()), C, 1.0)


def test_gradient_step_refuses_data_of_another_width() -> None:
    step = gradient.GradientStep("softmax", _C())
    with pytest.raises(ValueError, match=re.escape(
            "data must have the 2 features of the step's centroids C0; got 1")):
        step(passes.Data(_X()[:, :1]), _C(), 1.0)


def test_gradient_step_names_data() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "data must be a rbfkmeans.passes.Data (the pass context: Data(X, sample_weight)); "
            "got NoneType")):
        gradient.GradientStep("softmax", _C())(None, _C(), 1.0)  # type: ignore[arg-type]


def test_gradient_step_still_steps() -> None:
    C, it = gradient.GradientStep("softmax", _C())(passes.Data(_X()), _C(), 0.0)
    torch.testing.assert_close(C, torch.tensor([[0.5, 0], [10.5, 10]], dtype=torch.float64))
    assert it >= 1


# -- 2. bool parameters ------------------------------------------------------------------------
def test_layer_learnable_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "learnable must be a bool (True or False); got str 'no'")):
        rk.KMeansLayer(_C(), learnable="no")  # type: ignore[arg-type]
    assert not rk.KMeansLayer(_C(), learnable=np.bool_(False)).centroids.requires_grad
    assert rk.KMeansLayer(_C(), learnable=True).centroids.requires_grad


def test_from_linear_check_bias_must_be_a_bool() -> None:
    lin = rk.KMeansLayer(_C()).as_linear()
    with pytest.raises(TypeError, match=re.escape(
            "check_bias must be a bool (True or False); got str 'no'")):
        rk.KMeansLayer.from_linear(lin, check_bias="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            "check_bias must be a bool (True or False); got int 0")):
        rk.KMeansLayer.from_linear(lin, check_bias=0)  # type: ignore[arg-type]
    rk.KMeansLayer.from_linear(lin, check_bias=np.bool_(True))


# -- 3. to_layer(assignment='') ---------------------------------------------------------------
def test_to_layer_refuses_an_empty_mapping_name(
        fitted: tuple[rk.RBFKMeans, np.ndarray]) -> None:
    est, _ = fitted
    with pytest.raises(ValueError, match=re.escape(
            "assignment must be one of 'softmax', 'entmax15', 'sparsemax', 'hard'; got ''")):
        est.to_layer(assignment="")
    assert est.to_layer().assignment == est.assignment
    assert est.to_layer(assignment="hard").assignment == "hard"


# -- 4. predict checks sample_weight as score does --------------------------------------------
def test_predict_checks_sample_weight(fitted: tuple[rk.RBFKMeans, np.ndarray]) -> None:
    est, X = fitted
    for call in (est.predict, est.score):
        with pytest.raises(TypeError, match=re.escape("sample_weight must be real numbers; got")):
            call(X, sample_weight="abc")
        with pytest.raises(ValueError, match=re.escape(
                "sample_weight must be a scalar or have shape (20,) to match X; got shape (7,)")):
            call(X, sample_weight=np.full(7, np.nan))
    with pytest.raises(ValueError, match=re.escape("sample_weight")):
        est.predict(X, sample_weight=np.full(20, np.nan))
    np.testing.assert_array_equal(est.predict(X, sample_weight=np.ones(20)), est.predict(X))


# -- 5. critical_temperature_ documented as NaN after online fits ------------------------------
def test_critical_temperature_doc_says_when_it_is_nan() -> None:
    doc = rk.RBFKMeans.__doc__ or ""
    entry = doc[doc.index("critical_temperature_ : float"):doc.index("history_ : list")]
    assert "NaN" in entry
    assert "partial_fit" in entry
    assert "fit_batches" in entry
    X = np.random.default_rng(1).normal(size=(20, 2))
    assert np.isnan(rk.RBFKMeans(3).partial_fit(X).critical_temperature_)


# -- 6. rbfkmeans.frame -----------------------------------------------------------------------
def test_frame_choose_refuses_nan_weights() -> None:
    w = torch.tensor([1.0, float("nan"), 1, 1], dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape(
            "sample_weight must be finite; got 1 NaN/inf entries (e.g. nan)")):
        frame.Frame.choose(_X(), w)


def test_frame_refuses_a_nan_shift() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "shift must be finite; got 1 NaN/inf entries (e.g. nan)")):
        frame.Frame(shift=torch.tensor([float("nan"), 1.0], dtype=torch.float64))


def test_frame_choose_refuses_integer_X() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "X must have a floating-point dtype; got torch.int64")):
        frame.Frame.choose(_X().long())


def test_frame_choose_names_the_weights() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "sample_weight must have shape (4,); got (3,)")):
        frame.Frame.choose(_X(), torch.ones(3, dtype=torch.float64))
    with pytest.raises(TypeError, match=re.escape(
            "sample_weight must be a torch.Tensor; got str")):
        frame.Frame.choose(_X(), "abc")  # type: ignore[arg-type]


def test_leave_numpy_does_not_depend_on_the_layout() -> None:
    F = frame.Frame(torch.tensor([1.0, 1], dtype=torch.float64), 1)
    Cn = np.array([[1.0, 2], [3, 4]])
    flipped = Cn[::-1].copy()[::-1]  # the same values through negative strides
    np.testing.assert_array_equal(F.leave_numpy(flipped), F.leave_numpy(Cn))
    np.testing.assert_array_equal(flipped, Cn)  # not modified


@pytest.mark.parametrize(("method", "name"), [("enter", "X"), ("leave", "C")])
def test_frame_enter_and_leave_name_their_argument(method: str, name: str) -> None:
    F = frame.Frame(torch.tensor([1.0, 1], dtype=torch.float64), 1)
    for bad in (None, [[1.0, 2.0]]):
        with pytest.raises(TypeError, match=re.escape(
                f"{name} must be a torch.Tensor; got {type(bad).__name__}")):
            getattr(F, method)(bad)
    with pytest.raises(ValueError, match=re.escape(
            f"{name} must have shape (..., 2) (the frame's features); got (2, 3)")):
        getattr(F, method)(torch.ones(2, 3, dtype=torch.float64))


def test_frame_leave_numpy_names_its_argument() -> None:
    F = frame.Frame(torch.tensor([1.0, 1], dtype=torch.float64), 1)
    with pytest.raises(TypeError, match=re.escape(
            "C must be an array of numbers; got NoneType of dtype object")):
        F.leave_numpy(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(
            "C must have shape (..., 2) (the frame's features); got (2, 3)")):
        F.leave_numpy(np.ones((2, 3)))


# -- 7. torch sparse tensors where they are not supported --------------------------------------
def _sparse() -> torch.Tensor:
    return torch.eye(3).to_sparse()


@pytest.mark.parametrize("name", ["kmeans_objective", "shannon_objective",
                                  "tsallis_objective", "sparsemax_objective"])
@pytest.mark.parametrize("which", ["X", "C"])
def test_objectives_refuse_sparse_tensors(name: str, which: str) -> None:
    dense = torch.eye(3)
    X, C = (_sparse(), dense[:2]) if which == "X" else (dense, _sparse())
    args = (X, C) if name == "kmeans_objective" else (X, C, 1.0)
    with pytest.raises(TypeError, match=re.escape(
            f"{which} must be a dense (strided) tensor; got layout torch.sparse_coo")):
        getattr(rk, name)(*args)


@pytest.mark.parametrize("which", ["X", "C"])
def test_soft_objective_and_sq_distances_refuse_sparse_tensors(which: str) -> None:
    dense = torch.eye(3)
    X, C = (_sparse(), dense[:2]) if which == "X" else (dense, _sparse())
    message = re.escape(f"{which} must be a dense (strided) tensor; got layout torch.sparse_coo")
    with pytest.raises(TypeError, match=message):
        rk.soft_objective(X, C, 1.0, "softmax")
    with pytest.raises(TypeError, match=message):
        rk.sq_distances(X, C)
    with pytest.raises(TypeError, match=re.escape(
            f"{which} must be a dense (strided) tensor; got layout torch.sparse_csr")):
        rk.sq_distances(*((X.to_sparse_csr(), C) if which == "X" else (X, C.to_sparse_csr())))


@pytest.mark.parametrize("method", ["forward", "distances", "scores"])
def test_quantizer_refuses_sparse_z(method: str) -> None:
    vq = rk.VectorQuantizer(3, 2, temperature=1.0)
    with pytest.raises(TypeError, match=re.escape(
            "z must be a dense (strided) tensor; got layout torch.sparse_coo")):
        getattr(vq, method)(_sparse())


@pytest.mark.parametrize("name", ["softmax", "entmax15", "sparsemax", "hardmax"])
def test_mappings_refuse_sparse_tensors(name: str) -> None:
    """torch's own 'Could not run aten::_softmax ... SparseCPU' (and the like) had surfaced."""
    with pytest.raises(TypeError, match=re.escape(
            "z must be a dense (strided) tensor; got layout torch.sparse_coo")):
        getattr(rk, name)(_sparse())
    inplace = getattr(rk.mappings, f"{name}_", None)
    if inplace is not None:  # the in-place forms the passes use
        with pytest.raises(TypeError, match=re.escape(
                "z must be a dense (strided) tensor; got layout torch.sparse_coo")):
            inplace(_sparse().double())


def test_layer_refuses_sparse_centroids_but_takes_sparse_rows() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "centroids must be a dense (strided) tensor; got layout torch.sparse_coo")):
        rk.KMeansLayer(_sparse())
    layer = rk.KMeansLayer(torch.eye(3))
    torch.testing.assert_close(layer(_sparse()), layer(torch.eye(3)))
    torch.testing.assert_close(layer(torch.eye(3).to_sparse_csr()), layer(torch.eye(3)))


# -- 8. absurd sizes are refused by name before any allocation ---------------------------------
def test_quantizer_refuses_a_codebook_no_memory_holds() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "n_codes * dim must be < 2**62 / 4 (the entries of a torch.float32 codebook that "
            "memory can hold); got n_codes=4, dim=1000000000000000000")):
        rk.VectorQuantizer(10**18, 4)
    with pytest.raises(ValueError, match=re.escape("n_codes * dim must be < 2**62 / 8")):
        rk.VectorQuantizer(2**30, 2**30, dtype=torch.float64)


def test_kmeans_plusplus_bounds_the_trials_by_the_rows() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "n_local_trials must be at most the number of rows n_samples=4 (each trial draws a "
            "row); got 1000000000000000000")):
        seeding.kmeans_plusplus(passes.Data(_X()), 2, n_local_trials=10**18)
    assert seeding.kmeans_plusplus(passes.Data(_X()), 2, n_local_trials=4).shape == (2, 2)


def test_hartigan_bounds_k_by_the_rows() -> None:
    labels = torch.tensor([0, 0, 1, 1])
    message = re.escape("k must be at most the number of rows n_samples=4 (every cluster holds "
                        "a row); got 1000000000000000000")
    with pytest.raises(ValueError, match=message):
        hartigan.holds_weight(passes.Data(_X()), labels, 10**18)
    with pytest.raises(ValueError, match=message):
        hartigan.hartigan(passes.Data(_X()), labels, 10**18)
    assert hartigan.holds_weight(passes.Data(_X()), labels, 2)


def test_anneal_splits_bounds_the_clusters_by_the_rows() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "n_samples=4 should be >= n_clusters=1000000000000000000")):
        splits.anneal_splits(passes.Data(_X()), 10**18, "softmax")


# -- 9. wrong types and values named -----------------------------------------------------------
def test_search_rows_checks_its_counts() -> None:
    with pytest.raises(ValueError, match=re.escape("d must be an integer >= 1; got 0")):
        runs.search_rows(3, 0)
    with pytest.raises(TypeError, match=re.escape("k must be an integer; got float inf")):
        runs.search_rows(float("inf"), 3)  # type: ignore[arg-type]
    assert runs.search_rows(np.int64(3), 32) == runs.search_rows(3, 32)


def test_subsample_names_data() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "data must be a rbfkmeans.passes.Data (the pass context")):
        splits.Subsample(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            "generator must be None or a torch.Generator; got int 3")):
        splits.Subsample(passes.Data(_X()), 3)  # type: ignore[arg-type]


def test_principal_subspace_checks_rows() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "rows must be an integer torch.Tensor of row indices; got NoneType")):
        subspace.principal_subspace(passes.Data(_X()), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(
            "rows must be row indices in [0, 4) (n=4); got 99")):
        subspace.principal_subspace(passes.Data(_X()), torch.tensor([0, 99]))


def test_publish_distinct_rows_names_C() -> None:
    with pytest.raises(TypeError, match=re.escape("C must be a NumPy array of numbers; got "
                                                  "NoneType")):
        publish.distinct_rows(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("C must be a 2-D array (k, d); got shape (3,)")):
        publish.distinct_rows(np.zeros(3))
    assert publish.distinct_rows(np.array([[0.0, 1], [-0.0, 1], [2, 2]])) == 2


def test_sample_misjudges_names_its_arguments() -> None:
    with pytest.raises(TypeError, match=re.escape(
            "sample must be a rbfkmeans.passes.Data (the pass context")):
        refine.sample_misjudges(None, passes.Data(_X()), 1.0, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape(
            "J_all must be a finite number; got nan")):
        refine.sample_misjudges(passes.Data(_X()), passes.Data(_X()), 1.0, float("nan"))


@pytest.mark.parametrize("bad", [None, [[1.0, 2.0]], np.float64(1.0)])
def test_quantizer_checks_name_their_arguments(bad: object) -> None:
    with pytest.raises(TypeError, match=re.escape(
            f"codebook must be a torch.Tensor; got {type(bad).__name__}")):
        quantizer_checks.check_codebook_dtype(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            f"codebook must be a torch.Tensor; got {type(bad).__name__}")):
        quantizer_checks.check_input(torch.zeros(3, 2), 2, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            f"z must be a torch.Tensor; got {type(bad).__name__}")):
        quantizer_checks.check_input(bad, 2, torch.zeros(2, 2))
    with pytest.raises(TypeError, match=re.escape(
            f"z must be a torch.Tensor; got {type(bad).__name__}")):
        quantizer_checks.check_squares_are_normal(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            f"C must be a torch.Tensor; got {type(bad).__name__}")):
        quantizer_checks.warn_if_codes_coincide(bad, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape(
            f"Y must be a torch.Tensor; got {type(bad).__name__}")):
        quantizer_checks.distinct_rows(bad)  # type: ignore[arg-type]


def test_check_input_checks_dim() -> None:
    with pytest.raises(TypeError, match=re.escape("dim must be an integer; got NoneType None")):
        quantizer_checks.check_input(torch.zeros(3, 2), None, torch.zeros(2, 2))  # type: ignore[arg-type]


# -- 10. the quantizer's loss overflow names the temperature where it is the cause -------------
def test_quantizer_overflow_names_the_temperature() -> None:
    vq = rk.VectorQuantizer(2, 2, temperature=1e308, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape("=1e+308")) as caught:  # T or temperature
        vq(_X())
    assert "use a smaller temperature" in str(caught.value)
    assert "rescale z" not in str(caught.value)
    vq = rk.VectorQuantizer(2, 2, temperature=1.0, dtype=torch.float64).eval()
    with pytest.raises(ValueError, match=re.escape(
            "z lies too far from the codes for torch.float64: the loss overflows")):
        vq(torch.full((2, 2), 1e200, dtype=torch.float64))


# -- X as scikit-learn reads it: its messages named X only where they said so ------------------
@pytest.mark.parametrize(("X", "kind", "words"), [
    ("abc", ValueError, "could not convert string to float: 'abc'"),
    (np.empty((0, 3)), ValueError, "Found array with 0 sample(s)"),
    (np.zeros((3, 0)), ValueError, "Found array with 0 feature(s)"),
    (np.arange(5.0), ValueError, "Expected 2D array, got 1D array"),
    ([[{"a": 1}, 2.0]], TypeError, "float() argument must be a string or a real number"),
])
def test_fit_names_X_in_scikit_learns_messages(X: object, kind: type, words: str) -> None:
    with pytest.raises(kind, match=r"^X must be a 2-D array of numbers \(n_samples, "
                       r"n_features\); " + re.escape(words)):
        rk.RBFKMeans(2).fit(X)


def test_messages_that_name_X_are_kept() -> None:
    model = rk.RBFKMeans(2, random_state=0).fit(np.random.default_rng(0).random((10, 3)))
    with pytest.raises(ValueError, match=r"^X has 2 features, but RBFKMeans is expecting 3"):
        model.predict(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"^X must be a 2-D array of numbers .*Found array with "
                       r"0 sample\(s\)"):
        model.predict(np.empty((0, 3)))
    with pytest.raises(rk.NonFiniteError, match="Input X contains NaN"):
        model.predict(np.full((2, 3), np.nan))
