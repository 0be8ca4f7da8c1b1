"""Bad input at the deep package's helpers and a few engine helpers (schedules, rowspace,
table_file, comm, costs, repeats): each raised a raw torch/numpy error, named the wrong
argument, or returned NaN/inf silently; and sums that depended on the memory layout."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from rbfkmeans import KMeansLayer
from rbfkmeans import costs as CO
from rbfkmeans import repeats as RP
from rbfkmeans import rowspace as RS
from rbfkmeans import schedules as SC
from rbfkmeans import table_file as TF
from rbfkmeans.comm import Comm
from rbfkmeans.deep import augment as A
from rbfkmeans.deep import checks as CK
from rbfkmeans.deep import graph as G
from rbfkmeans.deep import guard as GU
from rbfkmeans.deep import inputs as IN
from rbfkmeans.deep import losses as L
from rbfkmeans.deep import models as MD
from rbfkmeans.deep import start as ST
from rbfkmeans.passes import Data

_GEN = torch.Generator().manual_seed(0)
_IMG = torch.rand(6, 16, generator=_GEN)
_R = torch.softmax(torch.randn(20, 3, generator=_GEN), 1)
_NB = torch.randint(0, 20, (20, 4), generator=_GEN)


def _raises(exc: type[Exception], message: str, call: Callable[[], Any]) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        call()


# --- silent NaN/inf ------------------------------------------------------------------------


def test_random_affine_names_a_bound_whose_grid_overflows() -> None:
    """max_shift=1e308 gave all-NaN images, max_scaling=1e308 non-finite ones."""
    for name in ("max_shift", "max_scaling"):
        _raises(ValueError, f"{name} must be small enough that the sampling grid of every draw "
                            "is finite in torch.float32 (the images' dtype); got 1e+308",
                lambda name=name: A.random_affine(_IMG, (4, 4), **{name: 1e308},
                                                  generator=torch.Generator().manual_seed(0)))


def test_affine_images_names_a_scale_whose_inverse_overflows() -> None:
    """A scale of 1e-40 gave NaN images."""
    _raises(ValueError, "scales must be large enough that 1 / scale is finite in torch.float32",
            lambda: A.affine_images(_IMG, (4, 4), torch.zeros(6), torch.full((6,), 1e-40),
                                    torch.zeros(6, 2)))
    # huge but finite grids still read zeros, as before
    out = A.affine_images(_IMG, (4, 4), torch.zeros(6), torch.ones(6), torch.full((6, 2), 1e30))
    assert bool((out == 0).all())


def test_memberships_off_the_simplex_are_refused() -> None:
    """target_sizes gave [inf, inf, inf]; neighbor_average and batch_targets inf/NaN."""
    big = _R * 3e38
    _raises(ValueError, "R's rows must lie on the simplex", lambda: L.target_sizes(big))
    _raises(ValueError, "R's entries are too large to average in torch.float32",
            lambda: G.neighbor_average(big, _NB))
    _raises(ValueError, "R's entries are too large to average in torch.float32",
            lambda: L.batch_targets(big, slice(None), _NB, L.target_sizes(_R, _NB)))
    _raises(ValueError, "R's rows must lie on the simplex",
            lambda: L.batch_targets(big, slice(None), None, L.target_sizes(_R)))


def test_consistency_loss_names_an_entropy_weight_that_overflows() -> None:
    _raises(ValueError, "entropy_weight is too large for torch.float32 memberships",
            lambda: L.neighbor_consistency_loss(_R, _R.flip(0), entropy_weight=1e308))
    assert torch.isfinite(L.neighbor_consistency_loss(_R, _R.flip(0), entropy_weight=1e30))


def test_hard_fenchel_young_loss_at_a_huge_temperature_is_finite() -> None:
    """The hard loss (in distance units, T unused) was NaN at T=1e308: 2T overflowed."""
    D = torch.rand(20, 3, generator=torch.Generator().manual_seed(1))
    P = torch.nn.functional.one_hot(D.argmin(1), 3).float()
    assert abs(float(L.fenchel_young_loss(D, P, 1e308, "hard"))) < 1e-6
    assert float(L.fenchel_young_loss(D, P, 1e308, "hard")) == float(
        L.fenchel_young_loss(D, P, 1.0, "hard"))


def test_sphere_eigmax_names_an_overflowing_quotient() -> None:
    _raises(ValueError, "tangent_eigmax / max(mean_norm, 0.001) overflows float64",
            lambda: SC.sphere_eigmax(1e308, 0.5))


def test_row_space_names_nan_rows_and_points() -> None:
    X = torch.randn(5, 40, generator=torch.Generator().manual_seed(2))
    space, _ = RS.RowSpace.of(X)
    bad = X.clone()
    bad[0, 0] = float("nan")
    _raises(ValueError, "X must be finite; got 1 NaN/inf entries", lambda: RS.RowSpace.of(bad))
    _raises(ValueError, "C must be finite; got 1 NaN/inf entries (e.g. inf)",
            lambda: space.leave(torch.tensor([[float("inf"), 0.0, 0.0, 0.0, 0.0]])))


# --- memory layout ---------------------------------------------------------------------------


def _strided(t: torch.Tensor) -> torch.Tensor:
    return t.t().contiguous().t()


@pytest.mark.parametrize(("n", "k"), [(50, 7), (1000, 10), (5000, 64)])
def test_losses_do_not_depend_on_the_layout(n: int, k: int) -> None:
    g = torch.Generator().manual_seed(n)
    P = torch.softmax(torch.randn(n, k, generator=g) * 3, 1)
    D = torch.rand(n, k, generator=g) * 10
    assert bool(L.fenchel_young_loss(D, P, 0.5, "softmax")
                == L.fenchel_young_loss(D, _strided(P), 0.5, "softmax"))
    assert torch.equal(L.target_sizes(P), L.target_sizes(_strided(P)))
    assert torch.equal(L.self_training_targets(P), L.self_training_targets(_strided(P)))


@pytest.mark.parametrize(("n", "d"), [(100, 3), (1000, 50)])
def test_input_scale_does_not_depend_on_the_layout(n: int, d: int) -> None:
    X = torch.rand(n, d, generator=torch.Generator().manual_seed(n)) * 3 + 1
    assert IN.input_scale(X) == IN.input_scale(_strided(X))


def test_init_centroids_reads_a_strided_z_as_its_copy() -> None:
    Z = np.random.RandomState(0).randn(200, 4).astype(np.float32)
    a, b = ST.init_centroids(Z[::-1], 3), ST.init_centroids(np.ascontiguousarray(Z[::-1]), 3)
    assert np.array_equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])


# --- internal exceptions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "exc", "message"),
    [
        (0, TypeError, "rows must be a slice or an index tensor; got int"),
        ("a", TypeError, "rows must be a slice or an index tensor; got str"),
        (float("nan"), TypeError, "rows must be a slice or an index tensor; got float"),
        (torch.tensor([100]), ValueError,
         "rows must be integer indices in [-20, 20) of R's rows, a 1-D tensor; got torch.int64"),
        (torch.tensor([1.0]), ValueError, "got torch.float32 of shape (1,)"),
        (torch.arange(4).reshape(1, 2, 2), ValueError, "got torch.int64 of shape (1, 2, 2)"),
    ],
)
def test_neighbor_average_and_batch_targets_name_rows(rows: Any, exc: type[Exception],
                                                      message: str) -> None:
    _raises(exc, message, lambda: G.neighbor_average(_R, _NB, rows))
    _raises(exc, message, lambda: L.batch_targets(_R, rows, _NB, L.target_sizes(_R, _NB)))


def test_contrastive_loss_takes_float32_with_float64() -> None:
    """A float32 Z with a float64 Z_pos raised torch's dtype RuntimeError: now in float64."""
    Z = torch.nn.functional.normalize(torch.randn(20, 3, generator=_GEN), dim=1)
    got = L.neighbor_contrastive_loss(Z, Z.double())
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, L.neighbor_contrastive_loss(Z.double(), Z.double()))


_SP = _R.to_sparse()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: L.mapping_entropy(_SP, "softmax"), "P"),
        (lambda: L.fenchel_young_loss(_SP, _R, 0.5, "softmax"), "D"),
        (lambda: L.fenchel_young_loss(_R, _SP, 0.5, "softmax"), "P"),
        (lambda: L.target_sizes(_SP), "R"),
        (lambda: L.batch_targets(_SP, slice(None), None, _R.sum(0)), "R"),
        (lambda: L.batch_targets(_R, slice(None), None, _R.sum(0).to_sparse()), "sizes"),
        (lambda: L.self_training_targets(_SP), "R"),
        (lambda: L.neighbor_consistency_loss(_SP, _R), "R"),
        (lambda: L.neighbor_consistency_loss(_R, _SP), "R_pos"),
        (lambda: L.neighbor_contrastive_loss(_SP, _R), "Z"),
        (lambda: G.neighbor_average(_SP, _NB), "R"),
        (lambda: G.neighbor_average(_R, _NB.to_sparse()), "neighbors"),
    ],
)
def test_sparse_tensors_are_refused_by_name(call: Callable[[], Any], name: str) -> None:
    _raises(TypeError, f"{name} must be a dense (strided) tensor; got layout torch.sparse_coo",
            call)


def _layer() -> KMeansLayer:
    return KMeansLayer(torch.tensor([[0.0, 0.0], [0.01, 0.0], [5.0, 5.0]]), 0.5)


def test_collapse_guard_computes_half_precision_in_float32() -> None:
    Z = torch.randn(20, 2, generator=torch.Generator().manual_seed(3))
    a, b = _layer(), _layer()
    assert GU.collapse_guard(a, Z.half()) == GU.collapse_guard(b, Z.half().float())
    assert torch.equal(a.centroids, b.centroids)


def test_collapse_guard_names_integer_z_and_mismatched_labels() -> None:
    _raises(TypeError, "Z must be a floating-point tensor; got torch.int64",
            lambda: GU.collapse_guard(_layer(), torch.randint(0, 5, (20, 2))))
    _raises(ValueError, "labels must be (20,) integers in [0, 3), one per row of Z (shape "
                        "(20, 2)) and centroid of the layer; got shape (30,)",
            lambda: GU.collapse_guard(_layer(), torch.randn(20, 2),
                                      labels=torch.zeros(30, dtype=torch.long)))


@pytest.mark.parametrize(
    "call",
    [
        lambda X: CK.check_input_width(MD.mlp([3, 4, 2]), X),
        lambda X: CK.check_output_width(MD.mlp([3, 4, 2]), X),
        lambda X: CK.check_embedding(torch.ones(3, 2), X, False),
    ],
)
def test_width_checks_name_x(call: Callable[[Any], Any]) -> None:
    _raises(TypeError, "X must be a torch.Tensor; got NoneType", lambda: call(None))
    _raises(ValueError, "X must be a 2-D tensor (n, d); got shape (3,)",
            lambda: call(torch.ones(3)))


def test_header_warning_names_its_header() -> None:
    assert TF.header_warning(["1", "2"]) == (
        "the first row was read as a header, though 2 of its 2 fields are numbers and none is "
        "a name")
    _raises(TypeError, "header must be None or a list of strings (the field names); got [None]",
            lambda: TF.header_warning([None]))  # type: ignore[list-item]


@pytest.mark.parametrize("device", ["abc", -1])
def test_as_rows_names_the_device(device: Any) -> None:
    _raises(ValueError, f"device must name a device of this machine, such as 'cpu' or "
                        f"'cuda:0'; got {device!r}",
            lambda: IN.as_rows(torch.ones(3, 3), device))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_as_rows_names_a_device_this_machine_lacks() -> None:
    _raises(ValueError, "device must name a device of this machine, such as 'cpu' or 'cuda:0'; "
                        "got 'cuda:0'",
            lambda: IN.as_rows(torch.ones(3, 3), "cuda:0"))


# --- unclear messages ------------------------------------------------------------------------


def test_init_centroids_names_z() -> None:
    _raises(TypeError, "Z must be an array or tensor of numbers (n, p); got NoneType",
            lambda: ST.init_centroids(None, 3))  # type: ignore[arg-type]
    Z = np.random.RandomState(0).randn(20, 2)
    Z[0, 0] = np.nan
    _raises(ValueError, "Z must be finite; got 1 NaN/inf entries", lambda: ST.init_centroids(Z, 3))
    _raises(ValueError, "Z must be a 2-D array of embeddings (n, p); got ndarray of shape (20,)",
            lambda: ST.init_centroids(np.zeros(20), 3))


@pytest.mark.parametrize("shape", [None, 28.0, np.int64(28)])
def test_cnn_encoder_names_image_shape(shape: Any) -> None:
    _raises(ValueError, f"image_shape must be (h, w) or (c, h, w) of integers >= 1; got "
                        f"{shape!r}", lambda: MD.cnn_encoder(shape))


@pytest.mark.parametrize(
    ("n_features", "exc", "message"),
    [
        ("abc", TypeError, "n_features must be an integer; got str 'abc'"),
        (True, TypeError, "n_features must be an integer; got bool True"),
        (float("nan"), TypeError, "n_features must be an integer; got float nan"),
        (1.5, TypeError, "n_features must be an integer; got float 1.5"),
        (-1, ValueError, "n_features must be an integer >= 1; got -1"),
    ],
)
def test_check_image_shape_checks_n_features(n_features: Any, exc: type[Exception],
                                             message: str) -> None:
    _raises(exc, message, lambda: A.check_image_shape((4, 4), n_features=n_features))


def test_weights_of_another_length_name_x_too() -> None:
    X = torch.randn(8, 2, generator=torch.Generator().manual_seed(4))
    _raises(ValueError, "sample_weight must have shape (8,); got (10,): one weight per row of X "
                        "(shape (8, 2))",
            lambda: SC.critical_temperature(X, "softmax", 2, torch.ones(10)))
    _raises(ValueError, "sample_weight must be a tensor of shape (8,); got Tensor (10,): one "
                        "weight per row of X (shape (8, 2))",
            lambda: RP.fold_repeats(X, torch.ones(10)))


def test_batch_targets_names_r_beside_sizes() -> None:
    R2 = _R[:, :2] / _R[:, :2].sum(1, keepdim=True)
    _raises(ValueError, "sizes must have shape (2,); got (3,): one soft size per cluster, a "
                        "column of R (shape (20, 2))",
            lambda: L.batch_targets(R2, slice(None), None, _R.sum(0)))


@pytest.mark.parametrize("call", [CO.removal_costs, CO.swap_costs])
def test_costs_name_a_short_c(call: Callable[..., Any]) -> None:
    X = torch.randn(30, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    C = X[:3].clone()
    labels = torch.tensor([0, 1, 2] * 10)
    _raises(ValueError, "labels must lie in [0, 2); got values in [0, 2]: one label per row "
                        "of C, which has 2 rows (shape (2, 2))",
            lambda: call(Data(X), C[:2], labels))
    _raises(ValueError, "labels must lie in [0, 3); got values in [-1, 2]",
            lambda: call(Data(X), C, torch.tensor([-1, 1, 2] * 10)))


def test_local_comm_names_what_it_cannot_sum() -> None:
    comm = Comm()
    _raises(TypeError, "sum_ takes tensors; got str 'abc' as argument 0",
            lambda: comm.sum_("abc"))  # type: ignore[arg-type]
    _raises(TypeError, "sum_ takes tensors; got NoneType None as argument 0",
            lambda: comm.sum_(None))  # type: ignore[arg-type]
    _raises(TypeError, "sum_scalars takes real numbers; got str 'abc' as argument 0",
            lambda: comm.sum_scalars("abc"))  # type: ignore[arg-type]
    _raises(TypeError, "n_local must be an integer; got float nan",
            lambda: comm.counts(float("nan")))  # type: ignore[arg-type]
    _raises(ValueError, "n_local must be an integer >= 0; got -1", lambda: comm.counts(-1))
    assert comm.sum_scalars(1, 2.5, np.float32(0.5)) == [1.0, 2.5, 0.5]
    assert comm.counts(np.int64(7)) == [7]
