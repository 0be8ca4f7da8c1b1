"""The fit engine's modules: the registry, the pass context, the reducers, and the validation of
every public solver function.

References: brute-force distances (``torch.cdist`` in float64), the ``entmax`` package and
``scipy`` for the mappings, a slow reimplementation of duplicate rebalancing, and the maths of
the registry entries (entropies of the uniform row, the free energy as a minimum over the
simplex).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import xlogy

from rbfkmeans import assignments as A
from rbfkmeans import kernels
from rbfkmeans.annealing import SoftLloydStep, anneal, rebalance_duplicates, soft_lloyd
from rbfkmeans.comm import Comm, raise_if_rejected
from rbfkmeans.costs import swap_costs
from rbfkmeans.lloyd import lloyd
from rbfkmeans.passes import Data, nearest
from rbfkmeans.relocation import farthest_points, relocate_empty
from rbfkmeans.schedules import critical_temperature_factor
from rbfkmeans.seeding import initial_centers, kmeans_plusplus
from rbfkmeans.stats import cluster_stats
from rbfkmeans.streaming import macqueen_updates, minibatch_step
from rbfkmeans.swaps import swap_search

entmax = pytest.importorskip("entmax")

SOFT = ["softmax", "entmax15", "sparsemax"]


def problem(n: int = 40, d: int = 3, k: int = 4, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64) * 3
    C = X[:k].clone() + 0.1
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    return X, C, w


# -- the registry ---------------------------------------------------------------------------------


def ref_entropy(name: str, R: np.ndarray) -> np.ndarray:
    if name == "softmax":
        return -xlogy(R, R).sum(-1)
    if name == "entmax15":
        return 4 / 3 * (1 - (R**1.5).sum(-1))
    if name == "sparsemax":
        return 0.5 * (1 - (R**2).sum(-1))
    return np.zeros(R.shape[:-1])


def ref_mapping(name: str, z: torch.Tensor) -> torch.Tensor:
    if name == "softmax":
        return torch.softmax(z, -1)
    if name == "entmax15":
        return entmax.entmax15(z, dim=-1)
    if name == "sparsemax":
        return entmax.sparsemax(z, dim=-1)
    return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).to(z.dtype)


def test_registry_names_and_lookup_errors() -> None:
    assert list(A.ASSIGNMENTS) == ["softmax", "entmax15", "sparsemax", "hard"]
    assert A.get_assignment("hard").hard
    assert not any(A.get_assignment(n).hard for n in SOFT)
    entry = A.get_assignment("entmax15")
    assert A.get_assignment(entry) is entry
    with pytest.raises(ValueError, match=r"assignment must be one of 'softmax', .*; got 'soft'"):
        A.get_assignment("soft")
    with pytest.raises(ValueError, match=r"mapping must be one of .*; got None"):
        A.check_assignment(None, "mapping")


@pytest.mark.parametrize("name", list(A.ASSIGNMENTS))
def test_registry_entry_matches_references(name: str) -> None:
    entry = A.get_assignment(name)
    z = torch.randn(50, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    R = entry.forward(z, dim=-1)
    torch.testing.assert_close(R, ref_mapping(name, z), atol=1e-12, rtol=0)
    np.testing.assert_allclose(entry.entropy(R).numpy(), ref_entropy(name, R.numpy()),
                               atol=1e-12)
    if entry.inplace is not None:
        torch.testing.assert_close(entry.inplace(z.clone()), R, atol=1e-12, rtol=0)
    for k in (1, 2, 7):  # H_max is the entropy of the uniform row
        u = np.full((1, k), 1.0 / k)
        assert entry.max_entropy(k) == pytest.approx(float(ref_entropy(name, u)[0]), abs=1e-12)
    assert entry.critical_factor(9) == critical_temperature_factor(name, 9)


@pytest.mark.parametrize("name", list(A.ASSIGNMENTS))
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_free_energy_is_the_minimum_over_the_simplex(name: str, seed: int) -> None:
    """free_energy(g, m(-g)) = min_p <p, g> - H(p): attained at m(-g), below any other p."""
    entry = A.get_assignment(name)
    rng = np.random.default_rng(seed)
    G = torch.as_tensor(rng.exponential(2.0, size=(8, 5)))
    G = G - G.amin(dim=1, keepdim=True)  # gaps: 0 at the nearest centroid
    R = ref_mapping(name, -G)
    fe = entry.free_energy(G, R)
    at_R = (R * G).sum(-1) - torch.as_tensor(ref_entropy(name, R.numpy()))
    torch.testing.assert_close(fe, at_R, atol=1e-10, rtol=0)
    P = torch.as_tensor(rng.dirichlet(np.ones(5), size=8))
    other = (P * G).sum(-1) - torch.as_tensor(ref_entropy(name, P.numpy()))
    assert bool((fe <= other + 1e-12).all())


# -- the pass context and the reducers ------------------------------------------------------------


def test_data_validates_what_it_holds() -> None:
    X, _, w = problem()
    with pytest.raises(TypeError, match=r"X must be a torch\.Tensor; got ndarray"):
        Data(X.numpy())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"X must be a 2-D tensor \(n, d\); got shape \(40,\)"):
        Data(X[:, 0])
    with pytest.raises(TypeError, match=r"X must be float32 or float64; got torch\.int64"):
        Data(X.long())
    bad = X.clone()
    bad[3, 1] = math.nan
    with pytest.raises(ValueError, match=r"X must be finite; got 1 NaN/inf"):
        Data(bad)
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(40,\); got \(39,\)"):
        Data(X, w[:-1])
    with pytest.raises(ValueError, match=r"sample_weight must be >= 0; got a negative entry -1"):
        Data(X, torch.cat([w[:-1], torch.tensor([-1.0], dtype=w.dtype)]))
    with pytest.raises(ValueError, match=r"chunk_size must be an integer >= 1; got 0"):
        Data(X, chunk_size=0)
    with pytest.raises(TypeError, match=r"comm must be a rbfkmeans\.comm\.Comm; got str"):
        Data(X, comm="gloo")  # type: ignore[arg-type]
    data = Data(X, w)
    assert not data.comm.active
    assert data.total_weight() == pytest.approx(float(w.sum()))
    with pytest.raises(ValueError, match=r"C must have shape \(k, 3\) with k >= 1 to match X; "
                                         r"got \(2, 4\)"):
        data.check_centroids(torch.zeros(2, 4, dtype=torch.float64))


def test_comm_is_local_unless_asked() -> None:
    assert not Comm().active
    assert not Comm.auto().active  # no process group in this process
    with pytest.raises(ValueError, match=r"active=True needs an initialised torch\.distributed"):
        Comm(active=True)
    with pytest.raises(TypeError, match="active must be a bool; got int 1"):
        Comm(active=1)  # type: ignore[arg-type]


def test_a_rejection_stops_every_rank_naming_where_it_happened() -> None:
    """The rank that rejected its input raises its own error; the others name the ranks."""
    own = TypeError("X must be an array; got str")
    with pytest.raises(TypeError) as info:
        raise_if_rejected([0.0, 1.0], own, "X was")
    assert info.value is own
    with pytest.raises(ValueError, match=re.escape(
            "X was rejected on rank(s) [1, 3] (see the error there); no rank fits")):
        raise_if_rejected([0.0, 1.0, 0.0, 2.0], None, "X was", "; no rank fits")
    raise_if_rejected([0.0, 0.0], None, "X was")  # nothing rejected: every rank goes on


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_nearest_against_brute_force(chunk_size: int | None) -> None:
    X, C, _ = problem(n=53)
    D = torch.cdist(X, C).square()
    one = nearest(Data(X, chunk_size=chunk_size), C)
    torch.testing.assert_close(one.dist, D.amin(1), atol=1e-10, rtol=0)
    assert torch.equal(one.labels, D.argmin(1))
    two = nearest(Data(X, chunk_size=chunk_size), C, two=True)
    ref = D.sort(dim=1)
    torch.testing.assert_close(two.dist, ref.values[:, :2], atol=1e-10, rtol=0)
    assert torch.equal(two.labels[:, 0], D.argmin(1))
    assert torch.equal(two.labels[:, 1], ref.indices[:, 1])  # no ties in this draw
    with pytest.raises(ValueError, match=r"two nearest centroids need k >= 2; got C of shape"):
        nearest(Data(X), C[:1], two=True)


@pytest.mark.parametrize("k", [5, 40, 300])  # both sides of row_min's packed range
def test_two_nearest_ties_go_to_the_lowest_indices(k: int) -> None:
    # float32, every centroid twice: each point's two nearest are a tied pair, and the
    # pair's lower index comes first
    gen = torch.Generator().manual_seed(k)
    X = torch.randn(200, 6, generator=gen)
    half = torch.randn(k, 6, generator=gen)
    C = torch.cat((half, half))  # c_j = c_{j + k}
    two = nearest(Data(X), C, two=True)
    D = torch.cdist(X.double(), half.double()).square()
    assert torch.equal(two.labels[:, 0], D.argmin(1))
    assert torch.equal(two.labels[:, 1], D.argmin(1) + k)
    assert torch.equal(two.dist[:, 0], two.dist[:, 1])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), copies=st.lists(st.integers(1, 3), min_size=2, max_size=40),
       d=st.integers(1, 40), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_nearest_hands_equal_centroids_to_their_lowest_index(
        seed: int, copies: list[int], d: int, dtype: torch.dtype) -> None:
    """Distinct random centroids, each repeated 1-3 times in a shuffled order: every row's
    nearest is the lowest index among the copies of its nearest distinct centroid (float64
    distances), and its second the next copy at the same distance, or else the lowest copy of
    the second nearest; rows whose nearest distinct centroids lie within 1e-4 of each other
    are left out (rounding may decide those)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(len(copies), d))
    of = rng.permutation(np.repeat(np.arange(len(copies)), copies))  # centroid j is base[of[j]]
    C = torch.as_tensor(base[of], dtype=dtype)
    X = torch.as_tensor(rng.normal(size=(300, d)), dtype=dtype)
    D = ((X.double().numpy()[:, None, :] - base[None]) ** 2).sum(2)  # (n, distinct)
    order = np.argsort(D, axis=1)
    gaps = np.diff(np.sort(D, axis=1), axis=1)
    lowest = np.array([np.flatnonzero(of == b)[0] for b in range(len(copies))])
    twin = np.array([np.flatnonzero(of == b)[1] if copies[b] > 1 else -1
                     for b in range(len(copies))])
    got = nearest(Data(X), C, two=True)
    clear = gaps[:, 0] > 1e-4
    want1 = lowest[order[:, 0]]
    np.testing.assert_array_equal(got.labels[clear, 0].numpy(), want1[clear])
    b1 = order[:, 0]
    has = twin[b1] >= 0
    np.testing.assert_array_equal(got.labels[clear & has, 1].numpy(), twin[b1][clear & has])
    assert torch.equal(got.dist[torch.from_numpy(clear & has), 0],
                       got.dist[torch.from_numpy(clear & has), 1])
    if gaps.shape[1] > 1:
        other = clear & ~has & (gaps[:, 1] > 1e-4)
        np.testing.assert_array_equal(got.labels[other, 1].numpy(), lowest[order[:, 1]][other])
    one = nearest(Data(X), C)
    np.testing.assert_array_equal(one.labels[clear].numpy(), want1[clear])


def test_farthest_points_and_relocation() -> None:
    X, C, _ = problem()
    far = farthest_points(Data(X), C, 3)
    dmin = torch.cdist(X, C).square().amin(1)
    torch.testing.assert_close(far, X[dmin.argsort(descending=True)[:3]])
    empty = torch.tensor([False, True, False, False])
    out = relocate_empty(Data(X), C, empty)
    assert torch.equal(out[[0, 2, 3]], C[[0, 2, 3]])
    others = torch.cdist(X, C[[0, 2, 3]]).square().amin(1)
    torch.testing.assert_close(out[1], X[others.argmax()])
    with pytest.raises(ValueError, match=r"m must be an integer >= 1; got 0"):
        farthest_points(Data(X), C, 0)
    # points of weight 0 are never taken (a centroid there would stay empty), and with fewer
    # points of positive weight than asked for, fewer come back
    w = torch.ones(len(X), dtype=X.dtype)
    order = dmin.argsort(descending=True)
    w[order[:2]] = 0.0
    torch.testing.assert_close(farthest_points(Data(X, w), C, 3), X[order[2:5]])
    out = relocate_empty(Data(X, w), C, empty)
    torch.testing.assert_close(out[1], X[others.masked_fill(w == 0, -1.0).argmax()])
    w[:] = 0.0
    w[order[-1]] = 1.0
    torch.testing.assert_close(farthest_points(Data(X, w), C, 3), X[order[-1:]])


@pytest.mark.parametrize("kernels_mode", ["0", "1"])
def test_lloyd_relocates_empty_clusters_to_points_that_weigh_something(
        kernels_mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The only point away from the weighted ones weighs nothing: an empty cluster moved there
    stays empty, and the run took it there and back at every other iteration until
    ``max_iter``. Relocations take points of positive weight only: the cluster lands on the
    weighted point (there is no other), and the run settles with ``J = 0``."""
    monkeypatch.setenv("RBFKMEANS_KERNELS", kernels_mode)
    X = torch.tensor([[0.0], [0.0], [0.0], [5.0]], dtype=torch.float64)
    w = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    res = lloyd(Data(X, w), torch.tensor([[0.0], [100.0]], dtype=torch.float64), max_iter=50)
    assert res.converged
    assert res.n_iter < 10
    assert res.C[:, 0].tolist() == [0.0, 0.0]
    assert res.inertia == 0.0


def test_lloyd_stops_where_two_iterations_repeat() -> None:
    """Unit rows within rounding of each other (a cosine fit of five such rows, five clusters;
    its polish's start): a relocated centroid takes two of the points from their cluster and
    gives them back in turn, labels and centroids repeating every other iteration, and the run
    went on to ``max_iter``. That is a fixed point too: the run stops there, at the objective
    of its own labels."""
    X = torch.tensor([[0.5773502630562413, 0.5773502752556526, 0.5773502692569833],
                      [0.5773502687527641, 0.5773502671477304, 0.5773502716683829],
                      [0.5773502687431415, 0.5773502672073898, 0.5773502716183458],
                      [0.5773502630292983, 0.5773502752171626, 0.5773502693224163],
                      [0.577350268664237, 0.5773502672208614, 0.577350271683779]],
                     dtype=torch.float64)
    C0 = torch.tensor([[0.5773502658602392, 0.5773502712382571, 0.5773502704703812],
                       [0.5773502630562413, 0.5773502752556526, 0.5773502692569833],
                       [0.5773502668322725, 0.5773502698710595, 0.5773502708655454],
                       [0.5773502668322725, 0.5773502698710595, 0.5773502708655454],
                       [0.5773502630292983, 0.5773502752171626, 0.5773502693224163]],
                      dtype=torch.float64)
    data = Data(X, metric="cosine")
    assert data.X is X  # unit rows, read as they are
    res = lloyd(data, C0, max_iter=300, bounds=False)
    assert res.converged
    assert res.n_iter < 20
    cos = X @ res.C.T
    own = cos.gather(1, res.labels[:, None]).squeeze(1)  # nearest up to rounding: all tie
    assert bool((own >= cos.amax(dim=1) - 1e-15).all())
    assert res.inertia == pytest.approx(float((1.0 - own).sum()), abs=1e-12)


@pytest.mark.parametrize("path", ["compiled", "torch", "bounds"])
def test_lloyd_stops_where_rounding_decides_the_labels(path: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 cosine rows of nearly one direction (1e5 plus unit noise: ``1 - cos`` of order
    1e-10, below float32's resolution of the products): on the torch passes the labels wander
    with the rounding, and once ``J`` of the labels is within ``RESOLUTION eps sum w`` of 0
    the run stops, converged, from ``RESOLUTION_AFTER`` iterations on. The compiled run on
    these 17 features settles every tie within the products' rounding by the scores summed
    in float64 (``nearest_in_doubt``), so its labels stop moving before the rule is needed.
    Well-resolved data never meets the rule (its labels and ``J`` as before)."""
    from rbfkmeans import lloyd as lloyd_mod

    rng = np.random.default_rng(0)
    X = torch.as_tensor(1e5 + rng.normal(size=(200, 17)), dtype=torch.float32)
    data = Data(X, metric="cosine")
    if path == "torch":
        monkeypatch.setattr(kernels, "usable", lambda *args, **kwargs: False)
    elif path == "compiled" and not kernels.usable(data.X, 4, scores=True):
        pytest.skip("the compiled kernels are not available")
    res = lloyd(data, data.X[:4].clone(), max_iter=300, bounds=path == "bounds")
    assert res.converged
    if path == "compiled":
        assert res.n_iter < lloyd_mod.RESOLUTION_AFTER
    else:
        assert lloyd_mod.RESOLUTION_AFTER <= res.n_iter < 300
    assert res.inertia <= lloyd_mod.RESOLUTION * np.finfo(np.float32).eps * 200
    Y = torch.as_tensor(rng.normal(size=(2000, 3)) + 4.0 * rng.integers(0, 3, (2000, 1)))
    exact = lloyd(Data(Y), Y[:3].clone(), max_iter=300)
    assert exact.converged
    assert exact.n_iter < 300
    assert exact.inertia > 1e3 * lloyd_mod.RESOLUTION * np.finfo(np.float64).eps * float(
        Y.square().sum())


# -- validation of the solver functions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda d, C: cluster_stats(d, C, 1.0, "sparsemx"), ValueError,
         r"assignment must be one of .*; got 'sparsemx'"),
        (lambda d, C: cluster_stats(d, C, -1.0, "softmax"), ValueError,
         r"T must be a finite number >= 0; got -1\.0"),
        (lambda d, C: cluster_stats(d, C[:, :2], 1.0, "softmax"), ValueError,
         r"C must have shape \(k, 3\)"),
        (lambda d, C: soft_lloyd(d, C, 1.0, "entmax"), ValueError,
         r"assignment must be one of .*; got 'entmax'"),
        (lambda d, C: soft_lloyd(d, C, -0.5, "softmax"), ValueError,
         r"T must be a finite number >= 0; got -0\.5"),
        (lambda d, C: soft_lloyd(d, C, 1.0, "softmax", max_iter=0), ValueError,
         r"max_iter must be an integer >= 1; got 0"),
        (lambda d, C: soft_lloyd(d, C, 1.0, "softmax", tol=-1.0), ValueError,
         r"tol must be a finite number >= 0; got -1\.0"),
        (lambda d, C: anneal(d, C, [1.0], "tsallis"), ValueError,
         r"assignment must be one of .*; got 'tsallis'"),
        (lambda d, C: anneal(d, C, [1.0, -2.0], "softmax"), ValueError,
         r"temperatures must be a finite number >= 0; got -2\.0"),
        (lambda d, C: anneal(d, C, [1.0], "hard"), ValueError,
         r"anneal needs a soft assignment .*; got assignment='hard'"),
        (lambda d, C: anneal(d, C, [1.0], "softmax", perturbation=math.inf), ValueError,
         r"perturbation must be a finite number >= 0; got inf"),
        (lambda d, C: lloyd(d, C * math.nan), ValueError, r"C0 must be finite"),
        (lambda d, C: lloyd(d, C, max_iter=-3), ValueError,
         r"max_iter must be an integer >= 1; got -3"),
        (lambda d, C: lloyd(d, C, tol=math.nan), ValueError,
         r"tol must be a finite number >= 0; got nan"),
        (lambda d, C: lloyd(d, C, target=math.inf), ValueError,
         r"target must be a finite number or None; got inf"),
        (lambda d, C: lloyd(d, C, target="1"), ValueError,
         r"target must be a finite number or None; got '1'"),
        (lambda d, C: swap_search(d, C), TypeError, r"start must be a LloydResult; got Tensor"),
        (lambda d, C: swap_search(d, lloyd(d, C), max_swaps=-1), ValueError,
         r"max_swaps must be an integer >= 0; got -1"),
        (lambda d, C: swap_costs(d, C, torch.zeros(3, dtype=torch.long)), ValueError,
         r"labels must be an int64 tensor of shape \(40,\)"),
        (lambda d, C: swap_costs(d, C, torch.full((40,), 9)), ValueError,
         r"labels must lie in \[0, 4\); got values in \[9, 9\]"),
        (lambda d, C: kmeans_plusplus(d, 0), ValueError,
         r"n_clusters must be an integer >= 1; got 0"),
        (lambda d, C: kmeans_plusplus(d, 41), ValueError,
         r"n_samples=40 should be >= n_clusters=41"),
        (lambda d, C: initial_centers(d, 4, "kmeans++"), ValueError,
         r"init must be one of 'mean', 'k-means\+\+', 'random', an array or a callable; "
         r"got 'kmeans\+\+'"),
        (lambda d, C: initial_centers(d, 4, np.zeros((3, 3))), ValueError,
         r"init array must have shape \(n_clusters, n_features\) = \(4, 3\); got \(3, 3\)"),
        (lambda d, C: rebalance_duplicates(d, C, -1.0), ValueError,
         r"T must be a finite number >= 0; got -1\.0"),
        (lambda d, C: minibatch_step(d, C, torch.zeros(3), 0.0, "hard"), ValueError,
         r"counts must have shape \(4,\)"),
        (lambda d, C: macqueen_updates(d.X, C, torch.zeros(4), 1.0, "softmx"), ValueError,
         r"assignment must be one of .*; got 'softmx'"),
        (lambda d, C: SoftLloydStep("softmax", max_iter=0), ValueError,
         r"max_iter must be an integer >= 1; got 0"),
    ],
)
def test_solver_entry_points_name_the_bad_parameter(call, exc, match) -> None:
    X, C, w = problem()
    data = Data(X, w)
    X_before, C_before = X.clone(), C.clone()
    with pytest.raises(exc, match=match):
        call(data, C)
    assert torch.equal(X, X_before)
    assert torch.equal(C, C_before)


# -- duplicate rebalancing ------------------------------------------------------------------------


def slow_rebalance(X: torch.Tensor, C: torch.Tensor, T: float, gen: torch.Generator,
                   merge_tol: float = 1e-6) -> torch.Tensor:
    """The rule of :func:`rebalance_duplicates`, written plainly with Python loops."""
    k = C.shape[0]
    d2 = [[float(((C[i] - C[j]) ** 2).sum()) for j in range(k)] for i in range(k)]
    rep = list(range(k))
    for j in range(k):
        for i in range(j):
            if rep[i] == i and d2[i][j] <= merge_tol * T:
                rep[j] = i
                break
    reps = sorted(set(rep))
    if len(reps) == k:
        return C
    R = C[reps]
    lab = torch.cdist(X, R).argmin(1)
    V = {g: float(((X[lab == i] - R[i]) ** 2).sum()) for i, g in enumerate(reps)}
    copies = {g: [j for j in range(k) if rep[j] == g] for g in reps}
    C = C.clone()
    while True:
        donors = [g for g in reps if len(copies[g]) > 1]
        if not donors:
            return C
        low = min(donors, key=lambda g: V[g] / (len(copies[g]) - 1))
        high = max(reps, key=lambda g: V[g] / len(copies[g]))
        if high == low or not V[low] / (len(copies[low]) - 1) < V[high] / len(copies[high]):
            return C
        j = copies[low].pop()
        u = torch.randn(C.shape[1], generator=gen, dtype=torch.float64)
        C[j] = C[high] + 1e-3 * math.sqrt(T) * u / u.norm()
        copies[high].append(j)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), copies=st.lists(st.integers(1, 4), min_size=2, max_size=5))
def test_rebalance_equals_the_plain_rule(seed: int, copies: list[int]) -> None:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(len(copies), 2))
    spreads = rng.uniform(0.2, 3.0, size=len(copies))
    X = torch.as_tensor(np.concatenate([c + s * rng.normal(size=(20, 2))
                                        for c, s in zip(centres, spreads, strict=True)]))
    C = torch.as_tensor(np.repeat(centres, copies, axis=0))
    C = C[torch.as_tensor(rng.permutation(len(C)))]
    got = rebalance_duplicates(Data(X), C, 1.0, generator=torch.Generator().manual_seed(seed))
    ref = slow_rebalance(X, C, 1.0, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)


def test_rebalance_leaves_distinct_centroids_alone() -> None:
    X, C, _ = problem()
    out = rebalance_duplicates(Data(X), C, 1.0)
    assert torch.equal(out, C)


# -- the annealing driver and its step ------------------------------------------------------------


@pytest.mark.parametrize("name", SOFT)
def test_anneal_with_the_default_step_equals_soft_lloyd_per_temperature(name: str) -> None:
    X, C, w = problem()
    data = Data(X, w)
    temps = [4.0, 2.0, 1.0]
    res = anneal(data, C, temps, name, max_iter=30, tol=1e-12, rebalance=False,
                 stop_when_hard=False)
    Cr = C
    for T, h in zip(temps, res.history, strict=True):
        Cr, it, st_ = soft_lloyd(data, Cr, T, name, max_iter=30, tol=1e-12)
        torch.testing.assert_close(h["C"], Cr)  # type: ignore[arg-type]
        assert h["n_iter"] == it
        assert h["objective"] == pytest.approx(st_.objective, rel=1e-12)
    assert res.temperatures == temps


@pytest.mark.parametrize("assignment", ["softmax", "entmax15", "hard"])
def test_macqueen_updates_of_far_float32_rows_equal_float64(assignment: str) -> None:
    """Rows whose squared distances overflow float32 (``|x - c|`` near 3e19 and 6e19) move the
    centroids as in float64: the point goes to its nearest centroid, not half to each."""
    X = torch.tensor([[3e19, 0.0], [-2e19, 1e19]])
    C = torch.tensor([[0.0, 0.0], [-3e19, 0.0]])
    C32, n32 = macqueen_updates(X, C, torch.ones(2), 0.5, assignment)
    C64, n64 = macqueen_updates(X.double(), C.double(), torch.ones(2, dtype=torch.float64), 0.5,
                                assignment)
    assert C32.dtype == n32.dtype == torch.float32
    assert n64.tolist() == [2.0, 2.0]  # one row each: the nearest centroid takes all its weight
    torch.testing.assert_close(n32, n64.float())
    torch.testing.assert_close(C32, C64.float())


def test_macqueen_updates_compute_in_the_wider_dtype() -> None:
    X, C = torch.randn(6, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    counts = torch.ones(2, dtype=torch.float64)
    reference, _ = macqueen_updates(X, C, counts, 0.7, "softmax")
    low, _ = macqueen_updates(X.half(), C.half(), counts, 0.7, "softmax")  # float16: float32
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, macqueen_updates(X.half().float(), C.half().float(),
                                                     counts, 0.7, "softmax")[0])
    mixed, _ = macqueen_updates(X.float(), C, counts, 0.7, "softmax")  # float64 C stays float64
    assert mixed.dtype == torch.float64
    torch.testing.assert_close(mixed, macqueen_updates(X.float().double(), C, counts, 0.7,
                                                       "softmax")[0])
    torch.testing.assert_close(mixed, reference, rtol=1e-6, atol=1e-6)


def test_kmeans_plusplus_needs_weight_to_draw_from() -> None:
    """Weights of total 0 gave ``k`` copies of row 0 (every draw lands on the first row of a
    zero cumulative sum); a positive total draws only rows of positive weight."""
    X = torch.randn(10, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"sample_weight must have a positive sum .* 0\.0"):
        kmeans_plusplus(Data(X, torch.zeros(10, dtype=torch.float64)), 3)
    w = torch.zeros(10, dtype=torch.float64)
    w[[2, 5, 7]] = 1.0
    C = kmeans_plusplus(Data(X, w), 3, generator=torch.Generator().manual_seed(1))
    assert sorted(int((X - c).abs().sum(1).argmin()) for c in C) == [2, 5, 7]
