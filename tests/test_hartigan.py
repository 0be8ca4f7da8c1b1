"""Hartigan's moves (:mod:`rbfkmeans.hartigan`) against exact computations in float64: the
batch's change of ``J`` equals the difference of the two partitions' ``J`` (means recomputed),
the result has no paying single move (checked row by row with the exact formula), is a Lloyd
fixed point and never above its start; a hand-made Lloyd fixed point that is not a Hartigan one;
bad arguments named; the default fit ends at a Hartigan fixed point."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from rbfkmeans import RBFKMeans, kernels, search_kernels
from rbfkmeans.hartigan import _batch_change, _means, hartigan, holds_weight
from rbfkmeans.lloyd import LloydResult, distance_bounds, lloyd
from rbfkmeans.passes import Data


def _partition_J(X: np.ndarray, w: np.ndarray, labels: np.ndarray, k: int) -> float:
    """J of a partition at its weighted means, float64, one cluster at a time."""
    total = 0.0
    for j in range(k):
        rows = labels == j
        if rows.any():
            c = np.average(X[rows], axis=0, weights=w[rows])
            total += float((w[rows] * ((X[rows] - c) ** 2).sum(1)).sum())
    return total


def _paying_moves(X: np.ndarray, w: np.ndarray, labels: np.ndarray, k: int) -> list[float]:
    """Every single move's exact change of J (the partition recomputed), negative = pays."""
    base = _partition_J(X, w, labels, k)
    out = []
    for i in range(len(X)):
        a = labels[i]
        if w[labels == a].sum() - w[i] <= 1e-12:
            continue
        for b in range(k):
            if b != a:
                moved = labels.copy()
                moved[i] = b
                out.append(_partition_J(X, w, moved, k) - base)
    return out


def _problem(seed: int, n: int, d: int, k: int, weighted: bool
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.integers(0, 3, size=(n, 1)) * 1.5
    w = rng.uniform(0.2, 3.0, n) if weighted else np.ones(n)
    labels = np.concatenate([np.arange(k), rng.integers(0, k, n - k)])  # none empty
    return X, w, labels


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 40), d=st.integers(1, 4),
       k=st.integers(2, 5), weighted=st.booleans(), m=st.integers(1, 8))
def test_the_batch_change_is_the_exact_change_of_J(seed: int, n: int, d: int, k: int,
                                                   weighted: bool, m: int) -> None:
    X, w, labels = _problem(seed, n, d, k, weighted)
    data = Data(torch.from_numpy(X), torch.from_numpy(w) if weighted else None)
    lab = torch.from_numpy(labels)
    N, C = _means(data, lab, k)
    rng = np.random.default_rng(seed + 1)
    rows = torch.from_numpy(rng.choice(n, size=min(m, n), replace=False))
    target = (lab[rows] + torch.from_numpy(rng.integers(1, k, rows.numel()))) % k
    change, N_new, C_new = _batch_change(data, C, N, rows, lab[rows], target)
    moved = labels.copy()
    moved[rows.numpy()] = target.numpy()
    if np.isinf(change):  # a cluster would empty
        assert any(w[moved == j].sum() <= 1e-9 for j in range(k))
        return
    exact = _partition_J(X, w, moved, k) - _partition_J(X, w, labels, k)
    if change == 0.0:  # within rounding of the moved rows' terms: reported as no change
        assert abs(exact) <= 1e-9 * max(1.0, _partition_J(X, w, labels, k))
    else:
        assert change == pytest.approx(exact, rel=1e-9, abs=1e-9)
    N_ref, C_ref = _means(data, torch.from_numpy(moved), k)
    torch.testing.assert_close(N_new, N_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(C_new, C_ref, rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 30), d=st.integers(1, 3),
       k=st.integers(2, 4), weighted=st.booleans())
def test_the_result_has_no_paying_move_and_is_a_lloyd_fixed_point(
        seed: int, n: int, d: int, k: int, weighted: bool) -> None:
    X, w, labels = _problem(seed, n, d, k, weighted)
    data = Data(torch.from_numpy(X), torch.from_numpy(w) if weighted else None)
    start = torch.from_numpy(labels)
    res = hartigan(data, start, k, max_passes=1000)
    assert torch.equal(start, torch.from_numpy(labels))  # the caller's labels untouched
    assert res.converged
    got = res.labels.numpy()
    J = _partition_J(X, w, got, k)
    assert _partition_J(X, w, labels, k) + 1e-12 >= J
    scale = max(J, 1.0)
    assert min(_paying_moves(X, w, got, k), default=0.0) >= -1e-9 * scale
    _, C = _means(data, res.labels, k)
    torch.testing.assert_close(res.C, C, rtol=1e-9, atol=1e-9)
    D = torch.cdist(torch.from_numpy(X), C) ** 2
    own = D.gather(1, res.labels[:, None])[:, 0]
    assert bool((own <= D.min(dim=1).values + 1e-9 * (1 + own)).all())  # Lloyd fixed point


def test_a_lloyd_fixed_point_that_is_not_a_hartigan_one() -> None:
    """{-1, 1} and {2.2}: each point is nearest its own mean (J = 2), but moving 1 to the
    singleton pays: {-1} and {1, 2.2}, J = 0.72."""
    X = torch.tensor([[-1.0], [1.0], [2.2]], dtype=torch.float64)
    res = hartigan(Data(X), torch.tensor([0, 0, 1]), 2)
    assert res.labels.tolist() == [0, 1, 1]
    assert res.n_moves == 1
    assert _partition_J(X.numpy(), np.ones(3), res.labels.numpy(), 2) == pytest.approx(0.72)
    torch.testing.assert_close(res.C, torch.tensor([[-1.0], [1.6]], dtype=torch.float64))


def test_min_gain_keeps_only_batches_that_pay_more() -> None:
    """The Lloyd fixed point above has one paying move, worth 2 - 0.72 = 1.28: a ``min_gain``
    below that takes it, one above leaves the partition as it is (converged: no move pays more
    than that, no pass run beyond the first)."""
    X = torch.tensor([[-1.0], [1.0], [2.2]], dtype=torch.float64)
    start = torch.tensor([0, 0, 1])
    taken = hartigan(Data(X), start, 2, min_gain=1.27)
    assert (taken.labels.tolist(), taken.n_moves) == ([0, 1, 1], 1)
    kept = hartigan(Data(X), start, 2, min_gain=1.29)
    assert (kept.labels.tolist(), kept.n_moves, kept.n_passes, kept.converged) == \
        ([0, 0, 1], 0, 1, True)
    torch.testing.assert_close(kept.C, torch.tensor([[0.0], [2.2]], dtype=torch.float64))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 40), d=st.integers(1, 3),
       k=st.integers(2, 4), weighted=st.booleans(), share=st.floats(0.0, 0.2))
def test_every_batch_kept_under_min_gain_pays_more_than_it(
        seed: int, n: int, d: int, k: int, weighted: bool, share: float) -> None:
    """With ``min_gain = share J``: J falls by more than ``min_gain`` at every pass that
    moves (passes replayed one at a time), and the end is where a further pass keeps nothing."""
    X, w, labels = _problem(seed, n, d, k, weighted)
    data = Data(torch.from_numpy(X), torch.from_numpy(w) if weighted else None)
    floor = share * _partition_J(X, w, labels, k)
    lab = torch.from_numpy(labels)
    for _ in range(200):
        step = hartigan(data, lab, k, max_passes=1, min_gain=floor)
        if not step.n_moves:
            assert step.converged
            break
        drop = _partition_J(X, w, lab.numpy(), k) - _partition_J(X, w, step.labels.numpy(), k)
        assert drop > floor - 1e-9 * max(1.0, floor)
        lab = step.labels
    else:
        raise AssertionError("the moves did not stop")
    whole = hartigan(data, torch.from_numpy(labels), k, max_passes=1000, min_gain=floor)
    assert whole.converged
    assert torch.equal(whole.labels, lab)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"labels": torch.tensor([0, 1, 2, 0])}, r"labels must lie in \[0, 2\)"),
    ({"labels": torch.tensor([0, 1, -1, 0])}, r"labels must lie in \[0, 2\)"),
    ({"labels": torch.tensor([0, 0, 0, 0])}, r"clusters \[1\] are empty"),
    ({"labels": torch.tensor([0, 1, 0])}, r"labels must be an int64 tensor of shape \(4,\)"),
    ({"labels": torch.tensor([0.0, 1.0, 0.0, 1.0])}, "labels must be an int64"),
    ({"labels": [0, 1, 0, 1]}, "labels must be an int64"),
    ({"k": 0}, "k"),
    ({"max_passes": 0}, "max_passes"),
    ({"min_gain": -1.0}, "min_gain must be a finite number >= 0; got -1.0"),
    ({"min_gain": float("nan")}, "min_gain must be a finite number >= 0; got nan"),
    ({"start": "lloyd"}, "start must be the LloydResult whose labels are labels"),
])
def test_bad_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"data": Data(torch.arange(8.0).view(4, 2)),
                               "labels": torch.tensor([0, 1, 0, 1]), "k": 2}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        hartigan(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("weighted", [False, True])
def test_the_default_fit_ends_at_a_hartigan_fixed_point(weighted: bool) -> None:
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(size=(60, 2)) * s + c
                        for s, c in ((0.3, 0), (1.5, 3), (0.8, -4))])
    w = rng.uniform(0.5, 2.0, len(X)) if weighted else np.ones(len(X))
    est = RBFKMeans(5, random_state=0).fit(X, sample_weight=w if weighted else None)
    assert min(_paying_moves(X, w, est.labels_, 5)) >= -1e-9 * est.inertia_
    assert est.inertia_ == pytest.approx(_partition_J(X, w, est.labels_, 5), rel=1e-9)


@pytest.mark.skipif(not kernels.enabled(), reason="the compiled kernels are switched off")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 300),
       d=st.one_of(st.integers(1, 6), st.integers(17, 40)), k=st.integers(2, 40),
       weighted=st.booleans())
def test_the_compiled_scoring_equals_the_torch_scoring(seed: int, n: int, d: int, k: int,
                                                       weighted: bool) -> None:
    """The kernel and the chunked torch pass find the same candidate moves, targets and gains
    (float64; on few features the kernel from differences, on many from BLAS products of a
    few hundred rows and the four-chain argmin; torch from the expansion)."""
    import os

    from rbfkmeans.hartigan import _candidates

    k = min(k, n)
    X, w, labels = _problem(seed, n, d, k, weighted)
    data = Data(torch.from_numpy(X), torch.from_numpy(w) if weighted else None)
    lab = torch.from_numpy(labels)
    N, C = _means(data, lab, k)
    assert kernels.usable(data.X, k, scores=True)
    fused = _candidates(data, C, N, lab)
    os.environ["RBFKMEANS_KERNELS"] = "0"
    try:
        plain = _candidates(data, C, N, lab)
    finally:
        del os.environ["RBFKMEANS_KERNELS"]
    floor = 1e-9 * _partition_J(X, w, labels, k)  # gains of rounding size may differ
    big, keep = fused[2] > floor, plain[2] > floor
    assert torch.equal(fused[0][big], plain[0][keep])  # rows (beyond rounding-size gains)
    assert torch.equal(fused[1][big], plain[1][keep])
    torch.testing.assert_close(fused[2][big], plain[2][keep], rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 400),
       d=st.one_of(st.integers(1, 16), st.integers(17, 40)),
       k=st.integers(2, 24), weighted=st.booleans(), single=st.booleans(),
       compiled=st.booleans())
@example(seed=483, n=276, d=25, k=11, weighted=False, single=True, compiled=False)
@example(seed=4742, n=108, d=22, k=20, weighted=True, single=False, compiled=False)
def test_the_bounded_passes_take_the_steps_of_full_passes(
        seed: int, n: int, d: int, k: int, weighted: bool, single: bool,
        compiled: bool) -> None:
    """Scored by torch (GPU, autograd, sparse rows) or by the compiled sweep of the rows left
    (the CPU: from differences on few features, from BLAS products on many): passes that score
    only the rows the bounds leave
    reach the same labels, means, passes and moves as passes scoring every row (float64). In
    float32 a move whose gain is within rounding of zero may be taken by one and not the other:
    the products of a gathered block of rows round differently from those of a whole chunk
    (seed 483, n 276, d 25, k 11 took 21 passes and 607 moves against 20 and 601, to the same
    labels), so there both must end at the same objective."""
    import rbfkmeans.hartigan as H

    k = min(k, n)
    X, w, labels = _problem(seed, n, d, k, weighted)
    dtype = torch.float32 if single else torch.float64
    data = Data(torch.from_numpy(X).to(dtype), torch.from_numpy(w) if weighted else None)
    scored: list[int] = []
    real = H._candidates

    def spy(data, C, N, labels, bounds=None):  # type: ignore[no-untyped-def]
        out = real(data, C, N, labels, bounds)
        if bounds is not None:
            scored.append(int(torch.isfinite(bounds.upper).sum()))
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RBFKMEANS_KERNELS", "1" if compiled else "0")
        patch.setattr(H, "_candidates", spy)
        patch.setattr(H, "NARROW_BOUNDS_MIN_WORK", 0)  # bounds for every k and d
        bounded = hartigan(data, torch.from_numpy(labels), k, max_passes=1000)
        patch.setattr(H, "_Bounds", lambda n, device: None)
        full = hartigan(data, torch.from_numpy(labels), k, max_passes=1000)
    assert len(scored) == bounded.n_passes  # the bounds were in use at every pass
    if single:
        def inertia(lab: torch.Tensor) -> float:  # float64, from the labels
            total = 0.0
            for j in range(k):
                m = lab.numpy() == j
                if m.any():
                    mu = np.average(X[m], axis=0, weights=w[m])
                    total += float(w[m] @ ((X[m] - mu) ** 2).sum(axis=1))
            return total
        assert inertia(bounded.labels) == pytest.approx(inertia(full.labels), rel=1e-5)
        return
    assert torch.equal(bounded.labels, full.labels)
    assert (bounded.n_passes, bounded.n_moves) == (full.n_passes, full.n_moves)
    torch.testing.assert_close(bounded.C, full.C, rtol=0, atol=0)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_cluster_of_one_weighted_row_offers_no_move(monkeypatch: pytest.MonkeyPatch,
                                                      compiled: bool) -> None:
    """Weighted cluster sizes carried as ``N + dN`` drift by rounding. Where a cluster is left
    with one row, its size must still read as that row's weight: a size a few ulps above it
    offered a move that empties the cluster, with a gain of a rounding-size distance times
    ``N_a / (N_a - w)`` (about 1e15). That move ranked first, every batch with it was refused,
    and the polish stopped at a partition with paying moves left (found by hypothesis: 11
    passes, where 22 reach the fixed point)."""
    import rbfkmeans.hartigan as H

    monkeypatch.setenv("RBFKMEANS_KERNELS", "1" if compiled else "0")
    X, w, labels = _problem(4742, 108, 22, 20, True)
    data = Data(torch.from_numpy(X), torch.from_numpy(w))
    for bounds in (True, False):  # the full scoring of every row stalled
        if not bounds:
            monkeypatch.setattr(H, "_Bounds", lambda n, device: None)
        res = H.hartigan(data, torch.from_numpy(labels), 20, max_passes=1000)
        assert res.converged
        lab = res.labels.numpy()
        assert min(_paying_moves(X, w, lab, 20)) >= -1e-9 * _partition_J(X, w, lab, 20)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_bounds_rule_out_rows_far_from_every_boundary(
        monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    """Two far groups and one boundary row that should move: after the first pass only the
    rows near the boundary are scored again (the torch scoring, or the compiled sweep of the
    rows left)."""
    import rbfkmeans.hartigan as H

    monkeypatch.setenv("RBFKMEANS_KERNELS", "1" if compiled else "0")

    rng = np.random.default_rng(0)
    d = 32
    X = np.concatenate([rng.normal(size=(200, d)) * 0.1, rng.normal(size=(200, d)) * 0.1 + 5.0])
    labels = np.r_[np.zeros(200, dtype=np.int64), np.ones(200, dtype=np.int64)]
    labels[:3] = 1  # three rows of the first group start in the second
    data = Data(torch.from_numpy(X))
    bounds = H._Bounds(data.n, torch.device("cpu"))
    N, C = _means(data, torch.from_numpy(labels), 2)
    rows, target, _ = H._candidates(data, C, N, torch.from_numpy(labels), bounds)
    assert set(rows.tolist()) == {0, 1, 2}
    assert target.tolist() == [0, 0, 0]
    lab = torch.from_numpy(labels).clone()
    lab[rows] = target
    N2, C2 = _means(data, lab, 2)
    bounds.moved(rows, (C2 - C).norm(dim=1), lab)
    active = bounds.active(N2, lab, None)
    assert active is not None
    assert set(active.tolist()) == {0, 1, 2}  # only the moved rows


@pytest.mark.skipif(not kernels.enabled(), reason="the compiled kernels are switched off")
@pytest.mark.parametrize("empty", [False, True])
def test_the_wide_scoring_equals_every_move_scored_in_float64(empty: bool) -> None:
    """The compiled scoring of wide rows (which skips the target search of an unweighted row
    whose leaving costs at most the least join factor times its nearest other distance) gives
    every row the gain and target of all its moves scored directly: ``w N_a / (N_a - w)
    ||x - c_a||^2 - min_b w N_b / (N_b + w) ||x - c_b||^2``, in float64 from differences. With
    an empty cluster the least factor is 0 and nothing is skipped."""
    rng = np.random.default_rng(3)
    n, d, k = 600, 24, 12
    X = (rng.normal(size=(n, d)) + rng.integers(0, 4, size=(n, 1)) * 0.8).astype(np.float32)
    seeds = X[rng.choice(n, k, replace=False)].astype(np.float64)
    labels = ((X[:, None, :] - seeds[None]) ** 2).sum(2).argmin(1)  # nearest of k rows ...
    flip = rng.random(n) < 0.3
    labels[flip] = rng.integers(0, k, int(flip.sum()))  # ... a third relabelled at random
    labels[0] = 0
    labels[labels == 1] = 2
    labels[1] = 1  # a singleton, which offers no move
    if empty:
        labels[labels == 3] = 4  # cluster 3 empty: its mean sits anywhere, here at the origin
    Xd = X.astype(np.float64)
    N = np.bincount(labels, minlength=k).astype(np.float64)
    C = np.zeros((k, d))
    np.add.at(C, labels, Xd)
    C[N > 0] /= N[N > 0, None]
    data = Data(torch.from_numpy(X))
    assert kernels.usable(data.X, k, scores=True)
    gain, target = search_kernels.hartigan_rows(data.X, torch.from_numpy(C), torch.from_numpy(N),
                                         torch.from_numpy(labels), None,
                                         torch.arange(n))[:2]
    D = ((Xd[:, None, :] - C[None]) ** 2).sum(2)  # (n, k)
    rows = np.arange(n)
    a = labels
    leave = N[a] / np.maximum(N[a] - 1.0, 1e-300)
    join = N[None, :] / (N[None, :] + 1.0) * D
    join[rows, a] = np.inf
    ref = leave * D[rows, a] - join.min(1)
    ref[N[a] <= 1.0] = 0.0
    # the kernel's distances come from float32 products: rounding of 64 eps ||x||^2 + ||c||^2
    tol = 64 * np.finfo(np.float32).eps * float((Xd**2).sum(1).max() + (C**2).sum(1).max())
    pays, stays = ref > 4 * tol, ref < -4 * tol
    assert pays.sum() > 50
    assert stays.sum() > 50 or empty  # (joining an empty cluster costs nothing: all pay)
    two = np.sort(join, axis=1)
    clear = pays & (two[:, 1] - two[:, 0] > 4 * tol)  # one best target beyond rounding
    assert np.array_equal(target.numpy()[clear], join.argmin(1)[clear])
    np.testing.assert_allclose(gain.numpy()[pays], ref[pays], rtol=0, atol=4 * tol)
    assert np.all(gain.numpy()[stays] == 0.0)
    assert np.all(target.numpy()[stays] == -1)


def _lloyd_start(data: Data, k: int, compiled: bool, patch: pytest.MonkeyPatch) -> LloydResult:
    """A Lloyd run on ``data`` from ``k`` of its rows, on the compiled wide runs (which keep
    group bounds unless a cluster empties on the way) or on the torch passes' bounds."""
    patch.setenv("RBFKMEANS_KERNELS", "1" if compiled else "0")
    return lloyd(data, data.X[:: max(1, data.n // k)][:k].clone(), tol=0.0,
                 bounds=None if compiled else True)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(40, 600), d=st.integers(33, 60),
       k=st.integers(2, 24), weighted=st.booleans(), compiled=st.booleans())
def test_starting_from_a_lloyd_runs_bounds_takes_the_same_steps(
        seed: int, n: int, d: int, k: int, weighted: bool, compiled: bool) -> None:
    """The first pass taking up the bounds of the Lloyd run that ended at ``labels`` (the
    compiled wide run's group bounds, the torch passes' bounds) scores only the rows they leave
    in doubt and reaches the labels, means, passes and moves of the polish that scores every
    row first (float64)."""
    import rbfkmeans.hartigan as H

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.integers(0, 4, size=(n, 1)) * rng.uniform(0.5, 4.0)
    w = torch.from_numpy(rng.uniform(0.2, 3.0, n)) if weighted else None
    data = Data(torch.from_numpy(X), w)
    with pytest.MonkeyPatch.context() as patch:
        res = _lloyd_start(data, k, compiled, patch)
        assume(holds_weight(data, res.labels, k) and distance_bounds(res) is not None)
        taken: list[int] = []
        real = H._Bounds.take_up

        def spy(self, *args):  # type: ignore[no-untyped-def]
            taken.append(1)
            return real(self, *args)

        patch.setattr(H._Bounds, "take_up", spy)
        warm = hartigan(data, res.labels, k, max_passes=1000, start=res)
        assert taken == [1]
        cold = hartigan(data, res.labels, k, max_passes=1000)
    assert torch.equal(warm.labels, cold.labels)
    assert (warm.n_passes, warm.n_moves, warm.converged) == (cold.n_passes, cold.n_moves,
                                                            cold.converged)
    torch.testing.assert_close(warm.C, cold.C, rtol=0, atol=0)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_lloyd_start_leaves_the_first_pass_only_the_rows_in_doubt(
        compiled: bool) -> None:
    """On well-separated clusters the bounds of the Lloyd run rule out almost every row: the
    first pass scores a few where, without them, it scores all."""
    import rbfkmeans.hartigan as H

    rng = np.random.default_rng(1)
    k, d = 6, 40
    centres = rng.normal(size=(k, d)) * 6.0
    X = np.repeat(centres, 150, axis=0) + rng.normal(size=(k * 150, d))
    data = Data(torch.from_numpy(X))
    scored: list[int] = []
    real = H._candidates

    def spy(data, C, N, labels, bounds=None):  # type: ignore[no-untyped-def]
        active = None if bounds is None or bounds.first else bounds.active(N, labels, data.w)
        scored.append(data.n if active is None else int(active.numel()))
        return real(data, C, N, labels, bounds)

    with pytest.MonkeyPatch.context() as patch:
        res = _lloyd_start(data, k, compiled, patch)
        assert distance_bounds(res) is not None
        patch.setattr(H, "_candidates", spy)
        hartigan(data, res.labels, k, max_passes=1, start=res)
        hartigan(data, res.labels, k, max_passes=1)
    assert scored[1] == data.n
    assert scored[0] < data.n // 20


@pytest.mark.parametrize("weighted", [False, True])
def test_the_row_test_in_chunks_is_the_row_test_over_all_rows(
        monkeypatch: pytest.MonkeyPatch, weighted: bool) -> None:
    """``_Bounds.active`` decides ``ACTIVE_ROWS`` rows at a time (its temporaries stay small on
    millions of rows): in chunks of 7 rows it picks the rows that one chunk over all picks, in
    order, and the polish takes the same steps."""
    import rbfkmeans.hartigan as H

    monkeypatch.setenv("RBFKMEANS_KERNELS", "0")  # the torch scoring, which the bounds serve
    rng = np.random.default_rng(3)
    n, k = 500, 6
    X = rng.normal(size=(n, 4)) + rng.integers(0, 4, size=(n, 1)) * 2.0
    w = torch.from_numpy(rng.uniform(0.2, 3.0, n)) if weighted else None
    data = Data(torch.from_numpy(X), w)
    labels = lloyd(data, data.X[:k].clone(), tol=0.0).labels
    picked: dict[int, list[torch.Tensor]] = {7: [], n + 1: []}
    results = {}
    real = H._Bounds.active
    for rows in picked:
        monkeypatch.setattr(H, "ACTIVE_ROWS", rows)
        monkeypatch.setattr(H._Bounds, "active", lambda self, *a, rows=rows: (
            lambda out: picked[rows].append(out) or out)(real(self, *a)))
        results[rows] = hartigan(data, labels, k, max_passes=1000)
    assert len(picked[7]) == len(picked[n + 1]) >= 2
    for a, b in zip(picked[7], picked[n + 1], strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
    small, whole = results[7], results[n + 1]
    assert torch.equal(small.labels, whole.labels)
    assert (small.n_passes, small.n_moves) == (whole.n_passes, whole.n_moves)
    torch.testing.assert_close(small.C, whole.C, rtol=0, atol=0)


@pytest.mark.skipif(not kernels.enabled(), reason="the compiled kernels are switched off")
@pytest.mark.parametrize(("d", "k", "bounded"), [(16, 2, False), (3, 16, False), (16, 4, True),
                                                 (2, 40, True), (20, 2, True)])
def test_few_features_and_clusters_score_every_row(monkeypatch: pytest.MonkeyPatch, d: int,
                                                   k: int, bounded: bool) -> None:
    """The compiled sweep of few features takes bounds only where ``k d`` reaches
    NARROW_BOUNDS_MIN_WORK (below, scoring every row costs less than keeping them); wide rows
    and the torch scoring always do. Either way the polish ends at a Hartigan fixed point."""
    import rbfkmeans.hartigan as H

    monkeypatch.setenv("RBFKMEANS_KERNELS", "1")
    X, w, labels = _problem(7, 300, d, k, False)
    data = Data(torch.from_numpy(X))
    seen: list[bool] = []
    real = H._candidates

    def spy(data, C, N, labels, bounds=None):  # type: ignore[no-untyped-def]
        seen.append(bounds is not None)
        return real(data, C, N, labels, bounds)

    monkeypatch.setattr(H, "_candidates", spy)
    res = H.hartigan(data, torch.from_numpy(labels), k, max_passes=1000)
    assert set(seen) == {bounded}
    assert res.converged
    lab = res.labels.numpy()
    assert min(_paying_moves(X, w, lab, k)) >= -1e-9 * _partition_J(X, w, lab, k)
