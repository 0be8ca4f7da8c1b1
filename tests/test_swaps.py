"""Swap search: the removal costs and split gains against brute force, the repair of a
misallocated Lloyd fixed point, and its invariants (J never rises, a Lloyd fixed point results,
weights act as repeated rows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from rbfkmeans import RBFKMeans
from rbfkmeans.costs import swap_costs
from rbfkmeans.lloyd import LloydResult, lloyd
from rbfkmeans.passes import Data
from rbfkmeans.swaps import swap_search


def inertia(X: np.ndarray, C: np.ndarray, w: np.ndarray | None = None) -> float:
    d = cdist(X, C, "sqeuclidean").min(axis=1)
    return float(d.sum() if w is None else d @ w)


def three_blobs(seed: int = 0, n: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blobs A, B, C and a Lloyd fixed point with two centroids in A and one between B and C."""
    rng = np.random.default_rng(seed)
    centres = np.array([[-20.0, 0.0], [10.0, 0.0], [20.0, 0.0]])
    y = np.repeat(np.arange(3), n)
    X = centres[y] + rng.normal(scale=0.5, size=(3 * n, 2))
    A = X[y == 0]
    left = A[:, 0] < A[:, 0].mean()
    C0 = np.stack([A[left].mean(0), A[~left].mean(0), X[y > 0].mean(0)])
    return X, y, C0


def test_lloyd_keeps_the_misallocation() -> None:
    X, y, C0 = three_blobs()
    res = lloyd(Data(torch.as_tensor(X)), torch.as_tensor(C0))
    assert res.converged
    C = res.C.numpy()
    assert (C[:2, 0] < -15).all()
    assert 14 < C[2, 0] < 16
    means = np.stack([X[y == c].mean(0) for c in range(3)])
    assert res.inertia > 20 * inertia(X, means)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_swap_search_repairs_a_misallocation(dtype: torch.dtype) -> None:
    X, y, C0 = three_blobs()
    Xt = torch.as_tensor(X, dtype=dtype)
    start = lloyd(Data(Xt), torch.as_tensor(C0, dtype=dtype))
    out = swap_search(Data(Xt), start, generator=torch.Generator().manual_seed(0))
    means = np.stack([X[y == c].mean(0) for c in range(3)])
    assert out.n_swaps == 1
    assert out.converged
    assert adjusted_rand_score(y, out.labels.numpy()) == 1.0
    # float32 distances come from ||x||^2 - 2 x.c + ||c||^2 at coordinates ~20: ~1e-4 relative
    assert out.inertia == pytest.approx(inertia(X, means), rel=1e-9 if dtype == torch.float64
                                        else 3e-4)
    assert out.inertia < 0.05 * start.inertia
    np.testing.assert_allclose(np.sort(out.C.double().numpy(), axis=0), np.sort(means, axis=0),
                               atol=1e-4)


def test_swap_search_keeps_an_optimum() -> None:
    X, y, _ = three_blobs(1)
    means = np.stack([X[y == c].mean(0) for c in range(3)])
    Xt = torch.as_tensor(X)
    start = lloyd(Data(Xt), torch.as_tensor(means))
    out = swap_search(Data(Xt), start, generator=torch.Generator().manual_seed(0))
    assert out.n_swaps == 0
    assert out.n_trials == 0
    assert out.inertia == start.inertia
    assert torch.equal(out.C, start.C)


@pytest.mark.parametrize(("n_far", "seed"), [(1, 0), (1, 2), (2, 3)])
def test_far_rows_are_isolated_as_scikit_learn_does(n_far: int, seed: int) -> None:
    """20,000 rows of six blobs with one or two rows 300 times farther out, k = 8: the default
    fit had ended 1.61x / 1.68x / 1.75x KMeans(n_init=10)'s J, its search never isolating the
    far row (the axis cut of its cluster gained 2-3% of what isolating it gains)."""
    X, _ = make_blobs(20_000, n_features=3, centers=6, random_state=seed)
    X[:n_far] = np.random.default_rng(seed).normal(size=(n_far, 3)) * 300
    est = RBFKMeans(8, random_state=0).fit(X)
    assert est.inertia_ <= KMeans(8, n_init=10, random_state=0).fit(X).inertia_ * (1 + 1e-4)


@pytest.mark.parametrize("seed", [3, 5])
def test_the_last_look_reaches_swaps_beyond_the_slack(seed: int) -> None:
    """Six blobs with 1% of rows scattered uniformly over a wide box, k = 6: removing any
    centroid strands far rows, so every swap was predicted above the rounds' slack and the fit
    ended 1.017x / 1.127x KMeans(n_init=10)'s J on these draws; the last look tries swaps
    predicted up to LOOK_SLACK of J."""
    X, _ = make_blobs(10_000, n_features=2, centers=6, random_state=2)
    X = np.vstack([X, np.random.default_rng(seed).uniform(-60, 60, (100, 2))])
    est = RBFKMeans(6, random_state=0).fit(X)
    assert est.inertia_ <= KMeans(6, n_init=10, random_state=0).fit(X).inertia_ * (1 + 1e-4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 5), weighted=st.booleans())
def test_swap_search_never_raises_j_and_ends_at_a_fixed_point(seed: int, k: int,
                                                              weighted: bool) -> None:
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(loc, 1.0, size=(15, 2)) for loc in rng.uniform(-8, 8, (4, 2))])
    w = torch.as_tensor(rng.uniform(0.1, 3.0, size=len(X))) if weighted else None
    Xt = torch.as_tensor(X)
    X_before = Xt.clone()
    start = lloyd(Data(Xt, w), Xt[rng.choice(len(X), k, replace=False)])
    out = swap_search(Data(Xt, w), start, slack=1.0,
                      generator=torch.Generator().manual_seed(seed))
    assert out.inertia <= start.inertia
    assert out.n_swaps <= out.n_trials
    again = lloyd(Data(Xt, w), out.C, max_iter=1)
    assert torch.equal(again.labels, out.labels)  # labels settled: a Lloyd fixed point
    np.testing.assert_allclose(again.C.numpy(), out.C.numpy(), atol=1e-12)
    wn = None if w is None else w.numpy()
    assert out.inertia == pytest.approx(inertia(X, out.C.numpy(), wn), rel=1e-10)
    assert torch.equal(Xt, X_before)


def _twelve_blobs(seed: int) -> tuple[Data, LloydResult, float]:
    """12 Gaussian blobs of 60 points, a Lloyd fixed point with k=10 from random points, and the
    estimator's tolerance (1e-4 of the mean variance)."""
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(loc, 1.0, size=(60, 2)) for loc in rng.uniform(-8, 8, (12, 2))])
    Xt = torch.as_tensor(X)
    data = Data(Xt)
    start = lloyd(data, Xt[rng.choice(len(X), 10, replace=False)])
    return data, start, 1e-4 * float(Xt.var(dim=0).mean())


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), moves=st.sampled_from([1, 3]))
def test_last_look_only_lowers_j(seed: int, moves: int) -> None:
    """The last look starts where the search would have stopped: J ends lower or equal, at a
    Lloyd fixed point, and exactly where the search ends without it when it finds nothing
    (with breathing, ``moves = 3``, its breath of depth 1 as well)."""
    data, start, tol = _twelve_blobs(seed)
    plain = swap_search(data, start, tol=tol, max_moves=moves,
                        generator=torch.Generator().manual_seed(seed))
    look = swap_search(data, start, tol=tol, last_look=5, max_moves=moves,
                       generator=torch.Generator().manual_seed(seed))
    assert look.inertia <= plain.inertia
    assert look.n_trials >= plain.n_trials
    if look.n_swaps == plain.n_swaps:
        assert torch.equal(look.C, plain.C)
    again = lloyd(data, look.C, max_iter=1)
    assert torch.equal(again.labels, look.labels)


def test_last_look_finds_a_swap_the_rounds_missed() -> None:
    """An instance (found by a search over seeds) where the three trials of the last round all
    fail and the last look's finds a lower Lloyd fixed point (two more swaps follow)."""
    data, start, tol = _twelve_blobs(253)
    plain = swap_search(data, start, tol=tol, generator=torch.Generator().manual_seed(253))
    look = swap_search(data, start, tol=tol, last_look=5,
                       generator=torch.Generator().manual_seed(253))
    assert look.inertia < plain.inertia * (1 - 1e-3)
    assert look.n_swaps > plain.n_swaps


def _two_rings() -> tuple[np.ndarray, Data, LloydResult, float]:
    """2,000 rows on each of two rings (radii 1 and 3), and the Lloyd fixed point from 3
    centroids spaced on the inner ring and 9 on the outer (the annealing's allocation at
    k = 12, 5.8% above scikit-learn's best of 10; 4 and 8 is better)."""
    rng = np.random.default_rng(0)
    t = rng.uniform(0, 2 * np.pi, 4000)
    r = np.r_[np.ones(2000), 3 * np.ones(2000)] + rng.normal(scale=0.05, size=4000)
    X = np.c_[r * np.cos(t), r * np.sin(t)]
    a3, a9 = np.arange(3) * 2 * np.pi / 3, np.arange(9) * 2 * np.pi / 9
    C0 = np.r_[np.c_[np.cos(a3), np.sin(a3)], 3 * np.c_[np.cos(a9), np.sin(a9)]]
    data = Data(torch.as_tensor(X))
    start = lloyd(data, torch.as_tensor(C0), max_iter=300)
    return X, data, start, 1e-4 * float(X.var(axis=0).mean())


def _inner(C: torch.Tensor) -> int:
    return int((torch.linalg.vector_norm(C, dim=1) < 2).sum())


def test_a_breath_of_depth_one_moves_a_centroid_between_rings() -> None:
    """Every single swap is predicted to cost more than the slack (the neighbours held in place),
    so the rounds try none; the last look's breath of depth 1 chooses its removal after Lloyd
    has spread 13 centroids, moves one centroid to the inner ring and lowers J by 5%, to
    scikit-learn's best of 10."""
    X, data, start, tol = _two_rings()
    assert _inner(start.C) == 3
    removal, gain, _ = swap_costs(data, start.C, start.labels)
    cheapest = float((removal.min() - gain.max()) / start.inertia)
    assert cheapest > 0.1  # above the default slack: no single swap is tried
    plain = swap_search(data, start, tol=tol, max_moves=3)  # breaths of depth 3 and 2 shift
    assert _inner(plain.C) == 3  # the centroids along the rings, none between them
    look = swap_search(data, start, tol=tol, max_moves=3, last_look=6)
    assert _inner(look.C) == 4
    assert look.inertia < 0.96 * plain.inertia
    best10 = KMeans(12, n_init=10, random_state=0).fit(X).inertia_
    assert look.inertia <= best10 * (1 + 1e-4)
    assert torch.equal(lloyd(data, look.C, max_iter=1).labels, look.labels)


def test_the_default_fit_allocates_centroids_between_rings() -> None:
    """The estimator on the same rows (k = 12) had ended 5.8% above KMeans(n_init=10)."""
    X, *_ = _two_rings()
    est = RBFKMeans(12, random_state=0).fit(X)
    assert est.inertia_ <= KMeans(12, n_init=10, random_state=0).fit(X).inertia_ * (1 + 1e-4)


def test_last_look_is_checked() -> None:
    data, start, tol = _twelve_blobs(0)
    with pytest.raises(ValueError, match=r"last_look must be an integer >= 0; got -1"):
        swap_search(data, start, tol=tol, last_look=-1)


def test_weights_equal_repeated_rows() -> None:
    X, _, C0 = three_blobs(2, n=20)
    reps = np.random.default_rng(0).integers(1, 4, size=len(X))
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    Xw = torch.as_tensor(X)
    w = torch.as_tensor(reps.astype(np.float64))
    a = swap_search(Data(Xw, w), lloyd(Data(Xw, w), torch.as_tensor(C0)),
                    generator=gen())
    Xr = torch.as_tensor(np.repeat(X, reps, axis=0))
    b = swap_search(Data(Xr), lloyd(Data(Xr), torch.as_tensor(C0)), generator=gen())
    assert a.n_swaps == b.n_swaps == 1
    assert a.inertia == pytest.approx(b.inertia, rel=1e-10)
    np.testing.assert_allclose(a.C.numpy(), b.C.numpy(), atol=1e-10)


def test_estimator_swaps_only_lower_the_inertia() -> None:
    # overlapping blobs where the order of the splits matters
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 1.0, size=(40, 2)) for c in rng.uniform(-6, 6, (8, 2))])
    for seed in range(3):
        on = RBFKMeans(8, random_state=seed).fit(X)
        off = RBFKMeans(8, random_state=seed, max_swaps=0).fit(X)
        assert off.n_swaps_ == 0
        assert on.inertia_ <= off.inertia_
        assert on.inertia_ == pytest.approx(inertia(X, on.cluster_centers_), rel=1e-10)
        assert (on.n_swaps_ > 0) == (on.inertia_ < off.inertia_)


def test_hard_assignment_never_swaps() -> None:
    X, _, C0 = three_blobs()
    est = RBFKMeans(3, assignment="hard", init=C0, n_init=1).fit(X)
    assert est.n_swaps_ == 0
    assert est.inertia_ > 20 * RBFKMeans(3, random_state=0).fit(X).inertia_  # stays misallocated


@pytest.mark.parametrize(("k", "schedule", "look"),
                         [(6, "splits", 5), (20, "splits", 10), (40, "splits", 12),
                          (20, "geometric", 0)])
def test_estimator_last_look_grows_with_k(k: int, schedule: str, look: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The event-driven fit's search looks at k // 2 swaps (5 to 12) before it stops; the
    geometric ladder's search takes no last look; the searches that follow Hartigan's moves
    (refine.HARTIGAN_ROUNDS) take none either, and single swaps only."""
    import rbfkmeans.refine as refine

    seen: list[int] = []

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(int(kwargs["last_look"]))  # type: ignore[call-overload]
        moves.append(int(kwargs["max_moves"]))  # type: ignore[call-overload]
        return swap_search(*args, **kwargs)  # type: ignore[arg-type]

    moves: list[int] = []
    monkeypatch.setattr(refine, "swap_search", spy)
    X = np.random.default_rng(0).normal(size=(400, 2))
    RBFKMeans(k, schedule=schedule, n_init=1, random_state=0).fit(X)
    assert seen[0] == look
    assert moves[0] == max(1, min(5, k // 4))
    assert len(seen) <= 1 + refine.HARTIGAN_ROUNDS
    assert seen[1:] == [0] * (len(seen) - 1)
    assert moves[1:] == [1] * (len(moves) - 1)


@pytest.mark.parametrize(("abbreviated", "race_rows"), [(True, 32), (True, 10**6), (False, 32)])
def test_an_abbreviated_annealing_races_a_kmeanspp_start(monkeypatch: pytest.MonkeyPatch,
                                                        abbreviated: bool, race_rows: int) -> None:
    """When the annealing is abbreviated (large ``n k d``) it races a k-means++ start, both
    polished on a subsample (``race_rows`` per centroid: 192 of 3,000 rows, or all of them;
    the probe rival is drawn from 96 other rows), and the lower J goes on to the polish and
    the search: an annealing that put every centroid in one blob (forced here) is rescued by
    the rival, to scikit-learn's KMeans(n_init=10) inertia on well-separated blobs; a full
    annealing is not second-guessed."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    from rbfkmeans import runs, starts
    from rbfkmeans.annealing import AnnealResult

    X, y = make_blobs(3000, 8, centers=6, cluster_std=0.3, center_box=(-20, 20),
                      random_state=3)
    k = 6
    inside_one = torch.as_tensor(X[y == 0][:k])  # every centroid in blob 0: a very poor start

    def poor_annealing(est, data, C, *args, **kwargs):  # type: ignore[no-untyped-def]
        return AnnealResult(inside_one.to(data.X.dtype), [1.0], 1)

    real_starts = starts.initial_centers
    drawn_from: list[int] = []

    def spy(data, n_clusters, init, **kwargs):  # type: ignore[no-untyped-def]
        if init == "k-means++":
            drawn_from.append(data.n)
        return real_starts(data, n_clusters, init, **kwargs)

    monkeypatch.setattr(runs, "annealed", poor_annealing)
    monkeypatch.setattr(starts, "ANNEAL_WORK", 0 if abbreviated else 1 << 62)
    monkeypatch.setattr(starts, "RACE_ROWS_PER_CLUSTER", race_rows)
    monkeypatch.setattr(starts, "initial_centers", spy)
    est = RBFKMeans(k, max_swaps=0, random_state=0).fit(X)
    J_ref = KMeans(k, n_init=10, random_state=0).fit(X).inertia_
    if abbreviated:
        assert est.inertia_ == pytest.approx(J_ref, rel=1e-9)
        assert adjusted_rand_score(y, est.labels_) == 1.0
        # a probe from 16 other rows per centroid wins, then the one from all rows is drawn;
        # a race on all the rows draws its rival from all of them at once
        probe = starts.RACE_PROBE_ROWS_PER_CLUSTER * k
        assert drawn_from == ([probe, len(X)] if race_rows == 32 else [len(X)])
    else:
        assert est.inertia_ > 10 * J_ref  # the forced start, polished: no rival ran
        assert drawn_from == []


def test_the_rival_from_all_rows_goes_on_only_if_it_wins_in_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A poor annealed start (forced) loses to the probe rival drawn from 16 rows per centroid;
    the rival then drawn from all the rows is poor too (forced: every centroid on one row), loses,
    and the annealed start goes on to the polish."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    from rbfkmeans import runs, starts
    from rbfkmeans.annealing import AnnealResult

    X, y = make_blobs(3000, 8, centers=6, cluster_std=0.3, center_box=(-20, 20),
                      random_state=3)
    k = 6
    inside_one = torch.as_tensor(X[y == 0][:k])
    real_starts = starts.initial_centers
    drawn_from: list[int] = []

    def poor_full_rival(data, n_clusters, init, **kwargs):  # type: ignore[no-untyped-def]
        if init == "k-means++":
            drawn_from.append(data.n)
            if data.n == len(X):
                return data.X[:n_clusters].clone() * 0.0 + data.X[0]
        return real_starts(data, n_clusters, init, **kwargs)

    monkeypatch.setattr(runs, "annealed", lambda est, data, *a, **kw: AnnealResult(
        inside_one.to(data.X.dtype), [1.0], 1))
    monkeypatch.setattr(starts, "ANNEAL_WORK", 0)
    monkeypatch.setattr(starts, "initial_centers", poor_full_rival)
    est = RBFKMeans(k, max_swaps=0, random_state=0).fit(X)
    assert drawn_from == [starts.RACE_PROBE_ROWS_PER_CLUSTER * k, len(X)]
    assert est.inertia_ > 10 * KMeans(k, n_init=10, random_state=0).fit(X).inertia_


def test_a_losing_rival_gives_up_its_polish_and_the_fit_is_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rival's polish in the race takes the annealed start's ``J`` as its target: a rival
    that loses gives up once it stalls above it, in fewer iterations than its polish to the
    end, which ends above that ``J`` too, so the fit is the one a rival polished to its end
    gives."""
    from sklearn.datasets import make_blobs

    from rbfkmeans import starts

    X, _ = make_blobs(4000, 4, centers=60, cluster_std=1.5, center_box=(-10, 10),
                      random_state=0)
    k = 40
    monkeypatch.setattr(starts, "ANNEAL_WORK", 0)
    real = starts.lloyd

    def fit(keep_target: bool) -> tuple[RBFKMeans, list[tuple[float | None, LloydResult]]]:
        calls: list[tuple[float | None, LloydResult]] = []

        def spy(data, C, **kwargs):  # type: ignore[no-untyped-def]
            if not keep_target:
                kwargs.pop("target", None)
            res = real(data, C, **kwargs)
            calls.append((kwargs.get("target"), res))
            return res

        with monkeypatch.context() as m:
            m.setattr(starts, "lloyd", spy)
            return RBFKMeans(k, random_state=0).fit(X), calls

    raced, calls = fit(True)
    (t_ours, ours), (t_rival, rival) = calls  # the annealed start won: no rival from all rows
    assert t_ours is None
    assert t_rival == ours.inertia
    assert rival.gave_up
    assert rival.inertia > ours.inertia
    full, full_calls = fit(False)
    (_, ours_full), (_, rival_full) = full_calls
    assert ours_full.inertia == ours.inertia
    assert rival_full.converged
    assert rival_full.inertia > ours.inertia
    assert rival.n_iter < rival_full.n_iter
    assert raced.inertia_ == full.inertia_
    np.testing.assert_array_equal(raced.labels_, full.labels_)


def test_a_rival_that_gave_up_below_the_annealed_start_is_polished_to_its_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The give-up rule reads ``J`` from the cluster sums, which rounding decides on rows
    within rounding of their means: a rival's polish can give up and still end below the
    annealed start (found by a property search on rows of one direction). Such a rival wins,
    and is polished to its end before its polish goes on (forced here: two iterations, then
    "given up" at half the annealed start's ``J``); it used to go on unconverged, and the fit
    warned that its polish had not settled."""
    import dataclasses

    from sklearn.datasets import make_blobs

    from rbfkmeans import starts

    X, _ = make_blobs(600, 4, centers=8, random_state=0)
    k = 6
    est = RBFKMeans(k, random_state=0).fit(X)  # an estimator with its fit's attributes
    data = Data(torch.as_tensor(X))
    real = starts.lloyd
    runs: list[LloydResult] = []

    def stalling_rival(rows, C, **kwargs):  # type: ignore[no-untyped-def]
        target = kwargs.pop("target", None)
        if target is None:  # the annealed start's polish, or the rival's settling one
            runs.append(real(rows, C, **kwargs))
            return runs[-1]
        short = real(rows, C, **dict(kwargs, max_iter=2))
        runs.append(dataclasses.replace(short, inertia=0.5 * target, converged=False,
                                        gave_up=True))
        return runs[-1]

    monkeypatch.setattr(starts, "lloyd", stalling_rival)
    monkeypatch.setattr(starts, "RACE_ROWS_PER_CLUSTER", 10**6)  # the race on all the rows
    C, polish, _ = starts.race(est, data, data.X[:k].clone(), torch.Generator().manual_seed(0),
                               0)
    _, rival, settled = runs  # the annealed start's polish, the rival's, its settling one
    assert rival.gave_up
    assert polish is settled
    assert settled.converged
    assert not settled.gave_up
    assert torch.equal(C, settled.C)
    want = real(data, rival.C, max_iter=est.max_iter, tol=0.0)
    assert settled.inertia == want.inertia
    assert torch.equal(settled.labels, want.labels)


def test_an_annealing_that_wins_the_race_goes_on_unchanged(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A rival that loses the race (forced: every k-means++ centroid in one blob) leaves the
    fit as it is without a race: the annealed centroids themselves go on to the polish."""
    from sklearn.datasets import make_blobs

    from rbfkmeans import runs, starts

    X, _ = make_blobs(3000, 8, centers=6, cluster_std=0.3, center_box=(-20, 20),
                      random_state=3)
    k = 6
    monkeypatch.setattr(starts, "ANNEAL_WORK", 0)
    with monkeypatch.context() as m:
        m.setattr(runs, "race", lambda est, search, C, gen, seed: (C, None, 0))
        unraced = RBFKMeans(k, max_swaps=0, random_state=0).fit(X)
    real_starts = starts.initial_centers
    rivals: list[int] = []

    def poor_rival(data, n_clusters, init, **kwargs):  # type: ignore[no-untyped-def]
        if init != "k-means++":
            return real_starts(data, n_clusters, init, **kwargs)
        rivals.append(data.n)
        return data.X[:n_clusters].clone() * 0.0 + data.X[0]  # k copies of one row

    monkeypatch.setattr(starts, "initial_centers", poor_rival)
    raced = RBFKMeans(k, max_swaps=0, random_state=0).fit(X)
    assert rivals == [starts.RACE_PROBE_ROWS_PER_CLUSTER * k]  # a probe of other rows; lost
    assert raced.inertia_ == unraced.inertia_
    np.testing.assert_array_equal(raced.labels_, unraced.labels_)


@pytest.mark.parametrize(("race_rows", "probe_rows"), [(32, 16), (4, 16), (8, 2)])
def test_the_probe_rival_is_drawn_from_other_rows(monkeypatch: pytest.MonkeyPatch,
                                                  race_rows: int, probe_rows: int) -> None:
    """The race's first rival is drawn from ``min(probe, race) k`` rows, none of them a race
    row (the race rows would favour a start made of them), and the race's polishes run on
    ``race k`` rows."""
    from rbfkmeans import starts

    k, n = 5, 2000
    X = torch.as_tensor(np.random.default_rng(1).normal(size=(n, 3)))
    X[:, 0] = torch.arange(n, dtype=X.dtype)  # a row's first feature names it
    data = Data(X)
    est = RBFKMeans(k)
    est.critical_temperature_ = 1.0
    monkeypatch.setattr(starts, "RACE_ROWS_PER_CLUSTER", race_rows)
    monkeypatch.setattr(starts, "RACE_PROBE_ROWS_PER_CLUSTER", probe_rows)
    real_starts, real_lloyd = starts.initial_centers, starts.lloyd
    drawn: list[set[int]] = []
    polished: list[set[int]] = []

    def spy_start(rows, n_clusters, init, **kwargs):  # type: ignore[no-untyped-def]
        drawn.append({int(v) for v in rows.X[:, 0]})
        return real_starts(rows, n_clusters, init, **kwargs)

    def spy_lloyd(rows, C, **kwargs):  # type: ignore[no-untyped-def]
        polished.append({int(v) for v in rows.X[:, 0]})
        return real_lloyd(rows, C, **kwargs)

    monkeypatch.setattr(starts, "initial_centers", spy_start)
    monkeypatch.setattr(starts, "lloyd", spy_lloyd)
    starts.race(est, data, X[:k].clone(), torch.Generator().manual_seed(0), 0)
    assert len(drawn[0]) == min(probe_rows, race_rows) * k
    assert len(polished[0]) == race_rows * k
    assert all(p == polished[0] for p in polished)  # every polish on the race rows
    assert not drawn[0] & polished[0]
    assert drawn[1:] in ([], [set(range(n))])  # then, if it won, from all the rows


def test_a_refinement_names_what_it_was_given_wrongly() -> None:
    """``refine.Refinement`` takes an estimator inside its fit, pass contexts and the polish's
    Lloyd result, and names any other argument."""
    from rbfkmeans.refine import Refinement

    X = torch.as_tensor(np.random.default_rng(0).normal(size=(40, 2)))
    data = Data(X)
    polished = lloyd(data, X[:3].clone(), max_iter=50, tol=0.0)
    est = RBFKMeans(3)
    est.critical_temperature_ = 1.0
    kw = dict(generator=torch.Generator(), seed=0, abs_tol=0.0, polish_tol=0.0,
              last_look=True, restart=False, show=False)
    with pytest.raises(TypeError, match="est must be an RBFKMeans inside its fit"):
        Refinement(RBFKMeans(3), data, data, polished, **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"search must be a rbfkmeans\.passes\.Data"):
        Refinement(est, data, X, polished, **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"final must be a rbfkmeans\.lloyd\.LloydResult"):
        Refinement(est, data, data, X, **kw)  # type: ignore[arg-type]
    refined = Refinement(est, data, data, polished, **kw).run(polished.C)
    assert refined.inertia <= polished.inertia
