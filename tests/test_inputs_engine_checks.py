"""Bad input at the fit engine's public functions: each is refused with a ``TypeError`` or a
``ValueError`` that names the parameter (or handled correctly where it is valid), and the checks
added for them are O(1) on the hot paths (their valid results are those of the other tests).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rbfkmeans import (
    annealing,
    groups,
    hartigan,
    metrics,
    objectives,
    repeats,
    schedules,
    seeding,
    splits,
    spread,
    streaming,
    swaps,
)
from rbfkmeans.atomic_files import check_out, write_outputs
from rbfkmeans.cli_fit import output_paths
from rbfkmeans.frame import Frame
from rbfkmeans.gradient import GradientStep, gradient_step
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data
from rbfkmeans.sparse import SparseRows
from rbfkmeans.stats import cluster_stats

_g = torch.Generator().manual_seed(0)
X = torch.randn(30, 3, generator=_g, dtype=torch.float64)
C = X[:3].clone()
NAN, INF = math.nan, math.inf


def _weights(value: float, n: int = 30, at: int = 0) -> torch.Tensor:
    w = torch.ones(n, dtype=torch.float64)
    w[at] = value
    return w


def _mb(**kw: Any) -> streaming.MiniBatchKMeans:
    return streaming.MiniBatchKMeans(3, 0.0, "hard", generator=torch.Generator(), **kw)


def _mb_feed(batch: torch.Tensor, w: torch.Tensor | None = None) -> None:
    fit = _mb()
    fit.feed(X)  # 30 rows >= 3k: seeded
    fit.feed(batch, w)


def _nan_at(t: torch.Tensor, i: int = 0) -> torch.Tensor:
    out = t.clone()
    out.view(-1)[i] = NAN
    return out


def _csr(crow: list[int], col: list[int], val: list[float], shape: tuple[int, int] = (2, 3)
         ) -> SparseRows:
    return SparseRows(torch.tensor(crow), torch.tensor(col), torch.tensor(val), shape)


_START = lloyd(Data(X), C, max_iter=5)

#: (id, call, error type, the parameter's name in the message)
CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # 1. schedules / spread
    *[(f"critical_temperature eigmax={v!r}",
       lambda v=v: schedules.critical_temperature(X, "softmax", 3, eigmax=v), e, "eigmax")
      for v, e in ((NAN, ValueError), (-1.0, ValueError), (INF, ValueError),
                   ("2.0", TypeError))],
    ("critical_temperature zero weights",
     lambda: schedules.critical_temperature(X, "softmax", 3, torch.zeros(30, dtype=torch.float64)),
     ValueError, "sample_weight"),
    ("critical_temperature X*1e200",
     lambda: schedules.critical_temperature(X * 1e200, "softmax", 3), ValueError, "X"),
    ("covariance_spread X*1e200", lambda: spread.covariance_spread(X * 1e200), ValueError, "X"),
    ("covariance_eigmax X*1e200", lambda: spread.covariance_eigmax(X * 1e200), ValueError, "X"),
    *[(f"{f.__name__} sample={v!r}", lambda f=f, v=v: f(X, sample=v), e, "sample")
      for f in (spread.covariance_spread, spread.covariance_eigmax, spread.sphere_spread)
      for v, e in ((-5, ValueError), (0, ValueError), ("x", TypeError), (NAN, TypeError))],
    # 2. objective_from_distances: no centroid
    ("objective_from_distances 0 columns",
     lambda: objectives.objective_from_distances(torch.ones(3, 0), 0.0, "hard"), ValueError, "D"),
    # 3. the objectives of X and C: beyond float64
    *[(f"{f.__name__} overflow", lambda f=f, a=a: f(
        torch.tensor([[1e200, 0.0]], dtype=torch.float64),
        torch.zeros(1, 2, dtype=torch.float64), *a), ValueError, "X")
      for f, a in ((objectives.kmeans_objective, ()), (objectives.shannon_objective, (1.0,)),
                   (objectives.soft_objective, (1.0, "entmax15")))],
    # 4. group multiplicities
    *[(f"group_memberships m={m}",
       lambda m=m: groups.group_memberships(torch.zeros(1, 2), torch.tensor(m), "entmax15"),
       ValueError, "m")
      for m in ([1.0, INF], [1.0, NAN], [0, 2], [1.5, 1])],
    # 5. gradient step
    *[(f"gradient_step lr={v!r}",
       lambda v=v: gradient_step(X, C, 1.0, "softmax", lr=v), e, "lr")
      for v, e in ((NAN, ValueError), (-1.0, ValueError), (INF, ValueError), (1j, TypeError),
                   ("x", TypeError), (torch.full((3, 1), NAN), ValueError),
                   (torch.ones(5, 2), ValueError))],
    ("gradient_step sample_weight shape",
     lambda: gradient_step(X, C, 1.0, "softmax", sample_weight=torch.ones(7)), ValueError,
     "sample_weight"),
    ("GradientStep C0 NaN",
     lambda: GradientStep("softmax", torch.full((2, 3), NAN)), ValueError, "C0"),
    # 6. seeding
    ("weighted_mean zero weights",
     lambda: seeding.weighted_mean(Data(X, torch.zeros(30, dtype=torch.float64))), ValueError,
     "sample_weight"),
    *[(f"initial_centers seed={v!r}",
       lambda v=v: seeding.initial_centers(Data(X), 3, "k-means++", seed=v), e, "seed")
      for v, e in ((NAN, TypeError), ("a", TypeError), (-1, ValueError), (2**32, ValueError))],
    # 7. fold_repeats' weights
    *[(f"fold_repeats w[0]={v}",
       lambda v=v: repeats.fold_repeats(X.repeat(2, 1), _weights(v, 60)), ValueError,
       "sample_weight")
      for v in (-5.0, NAN, INF)],
    # 8. streaming
    ("MiniBatchKMeans NaN batch", lambda: _mb_feed(_nan_at(X)), ValueError, "X"),
    ("MiniBatchKMeans NaN in the seeding batch", lambda: _mb().feed(_nan_at(X)), ValueError, "X"),
    ("MiniBatchKMeans negative weight",
     lambda: _mb_feed(X, _weights(-1.0)), ValueError, "w"),
    ("MiniBatchKMeans NaN weight", lambda: _mb_feed(X, _weights(NAN)), ValueError, "w"),
    ("MiniBatchKMeans chunk_size='str'", lambda: _mb(chunk_size="str"), TypeError, "chunk_size"),
    ("MiniBatchKMeans chunk_size=-1", lambda: _mb(chunk_size=-1), ValueError, "chunk_size"),
    ("MiniBatchKMeans init='bogus'", lambda: _mb(init="bogus"), ValueError, "init"),
    ("array_batches batch_size=0",
     lambda: list(streaming.array_batches(X.numpy(), None, 0, np.random.RandomState(0))),
     ValueError, "batch_size"),
    # 9. anneal_splits
    *[(f"anneal_splits {name}={v!r}",
       lambda name=name, v=v: splits.anneal_splits(Data(X), 3, "softmax", **{name: v}), e, name)
      for name, v, e in (("T_start", INF, ValueError), ("T_start", NAN, ValueError),
                         ("T_start", -1.0, ValueError), ("max_iter", "x", TypeError),
                         ("max_iter", 0, ValueError), ("tol", -INF, ValueError),
                         ("tol", NAN, ValueError), ("settled_iter", NAN, TypeError),
                         ("settled_iter", -1, ValueError), ("min_points", -1, ValueError),
                         ("points_per_group", 0, ValueError), ("stop_gap", -1.0, ValueError),
                         ("merge_tol", NAN, ValueError), ("max_temperatures", 0, ValueError))],
    # 10. passes, groups, swaps, annealing
    *[(f"cluster_stats hard_tol={v!r}",
       lambda v=v: cluster_stats(Data(X), C, 1.0, "softmax", hard_tol=v), ValueError, "hard_tol")
      for v in (NAN, -1.0, 1.0, INF)],
    ("group_stats hard_tol=nan",
     lambda: groups.group_stats(Data(X), C, torch.ones(3), 1.0, "softmax", hard_tol=NAN),
     ValueError, "hard_tol"),
    *[(f"swap_search {name}={v!r}",
       lambda name=name, v=v: swaps.swap_search(Data(X), _START, **{name: v}), e, name)
      for name, v, e in (("max_iter", "x", TypeError), ("max_iter", 0, ValueError),
                         ("tol", NAN, ValueError), ("tol", -1.0, ValueError),
                         ("slack", INF, ValueError), ("slack", NAN, ValueError))],
    *[(f"anneal temperatures={v!r}",
       lambda v=v: annealing.anneal(Data(X), C, v, "softmax"), e, "temperatures")
      for v, e in (([1.0, 2.0], ValueError), ([[2.0, 1.0]], ValueError), ("21", TypeError),
                   ([2.0, "x"], TypeError))],
    # 11. Frame
    *[(f"Frame {name}={v!r}", lambda name=name, v=v: Frame(**{name: v}), e, name)
      for name, v, e in (("trace", NAN, ValueError), ("trace", "x", ValueError),
                         ("trace", -1.0, ValueError), ("exponent", "x", TypeError),
                         ("exponent", 1.5, TypeError), ("shift", "x", TypeError),
                         ("shift", torch.zeros(2, 2), ValueError))],
    # 12. CSR structure
    ("SparseRows col=-1", lambda: _csr([0, 1, 2], [0, -1], [1.0, 2.0]), ValueError, "col"),
    ("SparseRows col=7", lambda: _csr([0, 1, 2], [0, 7], [1.0, 2.0]), ValueError, "col"),
    ("SparseRows crow starts at 1", lambda: _csr([1, 1, 2], [0, 1], [1.0, 2.0]), ValueError,
     "crow"),
    ("SparseRows crow ends short", lambda: _csr([0, 1, 1], [0, 1], [1.0, 2.0]), ValueError,
     "crow"),
    ("SparseRows crow decreasing", lambda: _csr([0, 2, 1, 2], [0, 1], [1.0, 2.0], (3, 3)),
     ValueError, "crow"),
    ("SparseRows val NaN", lambda: _csr([0, 1, 2], [0, 1], [1.0, NAN]), ValueError, "val"),
    ("SparseRows float col", lambda: SparseRows(torch.tensor([0, 1, 2]), torch.tensor([0.0, 1.0]),
                                                torch.tensor([1.0, 2.0]), (2, 3)),
     TypeError, "col"),
    # 13. holds_weight
    *[(f"holds_weight labels={name} k={k}",
       lambda lab=lab, k=k: hartigan.holds_weight(Data(X), lab, k), ValueError, p)
      for name, lab, k, p in (("5", torch.full((30,), 5), 3, "labels"),
                              ("-1", torch.full((30,), -1), 3, "labels"),
                              ("float", torch.zeros(30), 3, "labels"),
                              ("0", torch.zeros(30, dtype=torch.long), 0, "k"))],
    # 15. paths
    ("write_outputs no targets", lambda: write_outputs([], [], Path("in.csv"), False), ValueError,
     "targets"),
    ("write_outputs a writer short",
     lambda: write_outputs([Path("/nonexistent/a")], [], Path("in.csv"), False), ValueError,
     "writers"),
    ("check_out an int", lambda: check_out(3), TypeError, "out"),  # type: ignore[arg-type]
    ("output_paths an int", lambda: output_paths(3, "out"), TypeError,  # type: ignore[arg-type]
     "path"),
    # 16. meta tensors, where the engine's data are wrapped
    ("Data on meta", lambda: Data(X.to("meta")), ValueError, "X"),
]


@pytest.mark.parametrize(("call", "error", "name"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_named(call: Callable[[], Any], error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=rf"\b{re.escape(name)}\b"):
        call()


def test_inputs_not_modified_by_a_refused_call() -> None:
    w = _weights(-5.0, 60)
    Xr = X.repeat(2, 1)
    before = (w.clone(), Xr.clone())
    with pytest.raises(ValueError, match="sample_weight"):
        repeats.fold_repeats(Xr, w)
    assert torch.equal(w, before[0])
    assert torch.equal(Xr, before[1])


# -- correct results where the input is valid but unusual ---------------------------------------


@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "sparsemax", "hard"])
@pytest.mark.parametrize("g", [2, 6])
def test_group_memberships_nan_rows_stay_nan(assignment: str, g: int) -> None:
    """A row of NaN scores is NaN (as the mappings give it), never a one-hot certainty; the
    other rows are unchanged."""
    Z = torch.randn(3, g, generator=torch.Generator().manual_seed(1))
    Z[1, 0] = NAN
    m = torch.tensor([1, 2] + [1] * (g - 2))
    Q = groups.group_memberships(Z, m, assignment)
    assert bool(torch.isnan(Q[1]).all())
    ok = torch.tensor([0, 2])
    assert torch.equal(Q[ok], groups.group_memberships(Z[ok], m, assignment))
    assert torch.allclose(Q[ok].sum(dim=1), torch.ones(2, dtype=Q.dtype))


def test_float32_objective_overflow_falls_back_to_float64() -> None:
    Xf = torch.tensor([[1e20, 0.0], [0.0, 1.0]])
    J = objectives.kmeans_objective(Xf, torch.zeros(1, 2))
    assert J.dtype == torch.float64
    assert math.isfinite(float(J))
    assert float(J) == pytest.approx(float(Xf[0, 0]) ** 2 + 1.0, rel=1e-12)  # float32's 1e20


def test_objective_of_valid_input_keeps_its_dtype() -> None:
    Xf = X.float()
    J = objectives.kmeans_objective(Xf, Xf[:3])
    assert J.dtype == torch.float32


@pytest.mark.parametrize("C_dtype", [torch.long, torch.float16, torch.float32])
def test_gradient_step_converts_integer_and_half_centroids(C_dtype: torch.dtype) -> None:
    Ci = torch.tensor([[0, 0, 0], [1, 1, 1], [-1, 0, 1]]).to(C_dtype)
    C_new, _, N = gradient_step(X, Ci, 0.0, "hard")
    ref, _, N_ref = gradient_step(X, Ci.double(), 0.0, "hard")
    assert torch.allclose(C_new.double(), ref, atol=1e-6)
    assert torch.allclose(N.double(), N_ref)


def test_gradient_step_integer_weights() -> None:
    w = torch.ones(30, dtype=torch.long)
    a = gradient_step(X, C, 1.0, "softmax", sample_weight=w)[0]
    b = gradient_step(X, C, 1.0, "softmax", sample_weight=w.double())[0]
    assert torch.equal(a, b)


def test_gradient_step_per_cluster_rates() -> None:
    lr = torch.full((3, 1), 0.01, dtype=torch.float64)
    assert torch.equal(gradient_step(X, C, 1.0, "softmax", lr=lr)[0],
                       gradient_step(X, C, 1.0, "softmax", lr=0.01)[0])


@pytest.mark.parametrize("other", [torch.float16, torch.long])
def test_cosine_similarity_mixed_dtypes(other: torch.dtype) -> None:
    A = torch.tensor([[1.0, 2.0, 2.0], [3.0, 0.0, 4.0]], dtype=torch.float64)
    got = metrics.cosine_similarity(A.to(other), A)
    want = metrics.cosine_similarity(A, A)
    assert got.dtype == torch.float64
    assert torch.allclose(got, want, atol=1e-3)
    assert metrics.cosine_similarity(A.half(), A.half()).dtype == torch.float32


def test_paths_given_as_str(tmp_path: Path) -> None:
    check_out(str(tmp_path / "new"))
    assert output_paths("data.csv", str(tmp_path)) == output_paths(Path("data.csv"), tmp_path)
    target = tmp_path / "out" / "a.txt"
    write_outputs([str(target)], [lambda f: f.write(b"x")], str(tmp_path / "in.csv"), False)
    assert target.read_bytes() == b"x"


def test_anneal_empty_ladder_returns_the_start() -> None:
    """The estimator's ladder is empty where it starts below the data's resolution: kept."""
    res = annealing.anneal(Data(X), C, [], "softmax")
    assert res.temperatures == []
    assert torch.equal(res.C, C)


def test_anneal_equal_temperatures_accepted() -> None:
    res = annealing.anneal(Data(X), C, [1.0, 1.0], "softmax", stop_when_hard=False)
    assert res.temperatures == [1.0, 1.0]


def test_sparse_rows_valid_structure_and_derived_rows() -> None:
    """A valid CSR matrix is accepted (empty rows included); rows derived from it are not
    checked again and stay correct."""
    A = _csr([0, 1, 1, 3], [2, 0, 1], [1.0, 2.0, 3.0], (3, 3))
    D = A.to_dense()
    assert torch.equal(D, torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [2.0, 3.0, 0.0]]))
    assert torch.equal(A[1:].to_dense(), D[1:])
    assert torch.equal(A[torch.tensor([2, 0])].to_dense(), D[[2, 0]])
    empty = SparseRows(torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                       torch.zeros(0), (0, 4))
    assert empty.shape == (0, 4)


def test_critical_temperature_eigmax_accepted() -> None:
    assert schedules.critical_temperature(X, "softmax", 3, eigmax=2.0) == 2.0
    assert schedules.critical_temperature(X, "sparsemax", 3, eigmax=0) == 0.0
