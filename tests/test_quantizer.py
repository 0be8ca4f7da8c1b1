"""VectorQuantizer: the nearest code, the straight-through gradient, the codebook's objective
gradient and k-means step against slow references, initialisation, dead-code revival, cosine,
half precision, two gloo processes, and every error message."""

from __future__ import annotations

import doctest
import gc
import math
import re
import warnings
from pathlib import Path
from typing import Any

import entmax
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning
from torch import Tensor, nn

import rbfkmeans as rk
from _ranks import run_ranks, save_rank
from rbfkmeans.passes import Data
from rbfkmeans.quantizer import VectorQuantizer, code_perplexity
from rbfkmeans.seeding import kmeans_plusplus
from rbfkmeans.streaming import minibatch_step

F64 = torch.float64
DOCS = Path(__file__).resolve().parents[1] / "docs" / "quantizer.md"


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _with_codebook(C: Tensor, **kwargs: Any) -> VectorQuantizer:
    """A quantiser holding the codebook ``C`` (k, d), marked initialised (no seeding)."""
    vq = VectorQuantizer(C.shape[1], C.shape[0], dtype=C.dtype, **kwargs)
    with torch.no_grad():
        vq.codebook.copy_(C)
    vq.initialized.fill_(True)
    return vq


def _blobs(n: int, seed: int = 0) -> Tensor:
    """``n`` float64 points (n, 3) around three well-separated centres."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 0.0, 0.0], [6.0, 0.0, 0.0], [0.0, 6.0, 0.0]], dtype=F64)
    labels = torch.randint(3, (n,), generator=g)
    return centres[labels] + 0.5 * torch.randn(n, 3, generator=g, dtype=F64)


# ---------------------------------------------------------------------------------------------
# the forward pass
# ---------------------------------------------------------------------------------------------


def test_public_name() -> None:
    assert rk.VectorQuantizer is VectorQuantizer
    assert "VectorQuantizer" in rk.__all__


def test_eval_forward_is_the_nearest_code_of_a_brute_force_reference() -> None:
    vq = VectorQuantizer(4, 7, seed=1).eval()
    z = _randn(3, 5, 4, seed=2)
    q, indices, loss = vq(z)
    assert q.shape == (3, 5, 4)
    assert indices.shape == (3, 5)
    assert indices.dtype == torch.long
    reference = torch.cdist(z.reshape(-1, 4).double(), vq.codebook.double()).argmin(dim=1)
    assert torch.equal(indices.reshape(-1), reference)
    assert torch.equal(q, vq.codebook[indices])
    assert torch.equal(q, vq.lookup(indices))
    assert loss.shape == ()
    assert not bool(vq.initialized)  # evaluation never seeds the codebook


def test_the_meta_device_is_named_before_any_change() -> None:
    """A meta tensor holds no values, and the training step reads them: z on the meta device
    failed in ``Tensor.item()``, a meta codebook with 'not on the expected device meta'."""
    vq = VectorQuantizer(4, 3)
    vq.train()
    with pytest.raises(ValueError, match=r"does not run on the meta device; got z on meta, "
                                         r"the codebook on cpu"):
        vq(torch.zeros(5, 4, device="meta"))
    assert not bool(vq.initialized)
    on_meta = VectorQuantizer(4, 3).to("meta")
    with pytest.raises(ValueError, match=r"got z on cpu, the codebook on meta"):
        on_meta.distances(torch.zeros(5, 4))


def test_ties_go_to_the_lowest_index() -> None:
    C = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [5.0, 5.0]])
    vq = _with_codebook(C).eval()
    z = torch.tensor([[1.0, 0.0], [0.5, 0.0], [3.0, 2.5]])  # a duplicate, a midpoint, 1 vs 3
    _, indices, _ = vq(z)
    assert indices.tolist() == [1, 0, 1]


def test_training_output_is_the_codebook_as_it_was_when_the_forward_began() -> None:
    vq = VectorQuantizer(3, 4, temperature=0.2)
    vq(_randn(20, 3))  # seeds the codebook
    C = vq.codebook.detach().clone()
    q, indices, _ = vq(_randn(20, 3, seed=5))
    assert torch.equal(q, C[indices])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_property_integer_problems(data: st.DataObject) -> None:
    """Integer points and codes (exact distances): the nearest code with ties to the lowest
    index, ``quantized = codebook[indices]``, and at ``T = 0`` ``loss = (1 + beta) mse``."""
    d = data.draw(st.integers(1, 4))
    k = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(1, 10))
    ints = st.integers(-4, 4)
    C = torch.tensor(data.draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=k,
                                        max_size=k)), dtype=F64)
    z = torch.tensor(data.draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=n,
                                        max_size=n)), dtype=F64)
    beta = data.draw(st.sampled_from([0.0, 0.25, 1.0]))
    vq = _with_codebook(C, commitment_weight=beta)
    q, indices, loss = vq.eval()(z)
    dist = ((z[:, None, :] - C[None, :, :]) ** 2).sum(-1)  # (n, k), exact
    expected = [min(range(k), key=lambda j, i=i: (float(dist[i, j]), j)) for i in range(n)]
    assert indices.tolist() == expected
    assert torch.equal(q, C[indices])
    mse = ((z - q) ** 2).mean()
    assert float(loss.detach()) == pytest.approx(float((1.0 + beta) * mse), abs=1e-12)


# ---------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------


def test_straight_through_the_encoder_gets_dL_dq() -> None:
    vq = VectorQuantizer(3, 5, temperature=0.1)
    vq(_randn(30, 3))  # seeds the codebook
    z = _randn(2, 8, 3, seed=1).requires_grad_()
    q, _, _ = vq(z)
    q.retain_grad()
    w = _randn(2, 8, 3, seed=2)
    ((w * q).sum() + (q**3).sum()).backward()
    assert q.grad is not None
    assert z.grad is not None
    assert torch.equal(z.grad, q.grad)


def test_straight_through_with_cosine_goes_through_the_normalisation() -> None:
    vq = VectorQuantizer(3, 5, metric="cosine")
    vq(_randn(30, 3))
    z = _randn(8, 3, seed=1).requires_grad_()
    w = _randn(8, 3, seed=2)
    q, _, _ = vq(z)
    (w * q).sum().backward()
    z2 = z.detach().clone().requires_grad_()
    (w * (z2 / z2.norm(dim=1, keepdim=True))).sum().backward()
    assert z.grad is not None
    assert z2.grad is not None
    assert torch.allclose(z.grad, z2.grad, atol=1e-6)


def _slow_shannon(X: Tensor, C: Tensor, T: float) -> Tensor:
    """``F_T`` by its definition, one term at a time (``J`` at ``T = 0``)."""
    total = X.new_zeros(())
    for i in range(X.shape[0]):
        d = torch.stack([((X[i] - C[j]) ** 2).sum() for j in range(C.shape[0])])  # (k,)
        total = total + (d.min() if T == 0 else -2.0 * T * torch.logsumexp(-d / (2.0 * T), 0))
    return total


@pytest.mark.parametrize("T", [0.0, 0.05, 0.7, 20.0])
def test_codebook_gradient_is_autograd_of_the_slow_objective(T: float) -> None:
    C = _randn(4, 3, seed=3, dtype=F64)
    X = _randn(12, 3, seed=4, dtype=F64)
    beta = 0.3
    vq = _with_codebook(C, temperature=T, commitment_weight=beta)
    z = X.clone().requires_grad_()
    _, indices, loss = vq(z)
    loss.backward()
    C_ref = C.clone().requires_grad_()
    (_slow_shannon(X, C_ref, T) / X.numel()).backward()
    assert vq.codebook.grad is not None
    assert C_ref.grad is not None
    assert torch.allclose(vq.codebook.grad, C_ref.grad, atol=1e-12, rtol=1e-10)
    # the loss itself: commitment plus F_T, per entry
    q = C[indices]
    expected = (beta * ((X - q) ** 2).sum() + _slow_shannon(X, C, T)) / X.numel()
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-12)


def test_codebook_gradient_entmax15_is_the_soft_lloyd_direction() -> None:
    """``dF_T/dc_j = 2 (N_j c_j - S_j)`` with the memberships of the ``entmax`` package."""
    T = 0.4
    C = _randn(5, 2, seed=5, dtype=F64)
    X = _randn(16, 2, seed=6, dtype=F64)
    vq = _with_codebook(C, temperature=T, assignment="entmax15")
    vq(X)[2].backward()
    d = ((X[:, None, :] - C[None]) ** 2).sum(-1)  # (n, k)
    R = entmax.entmax15(-d / (2.0 * T), dim=1)  # (n, k)
    N, S = R.sum(0), R.T @ X
    expected = 2.0 * (N[:, None] * C - S) / X.numel()
    assert vq.codebook.grad is not None
    assert torch.allclose(vq.codebook.grad, expected, atol=1e-12)


def test_kmeans_update_has_no_codebook_gradient() -> None:
    vq = VectorQuantizer(3, 4, update="kmeans")
    assert "codebook" not in dict(vq.named_parameters())
    assert "codebook" in dict(vq.named_buffers())
    z = _randn(20, 3).requires_grad_()
    _, _, loss = vq(z)
    loss.backward()
    assert z.grad is not None


# ---------------------------------------------------------------------------------------------
# the k-means step
# ---------------------------------------------------------------------------------------------


def _slow_kmeans_step(C: Tensor, counts: Tensor, X: Tensor, decay: float,
                      T: float) -> tuple[Tensor, Tensor]:
    """``n_j <- decay n_j + N_j``, ``c_j <- c_j + (S_j - N_j c_j) / n_j``, one code at a time."""
    k, n = C.shape[0], X.shape[0]
    d = [[float(((X[i] - C[j]) ** 2).sum()) for j in range(k)] for i in range(n)]
    R = torch.zeros(n, k, dtype=F64)
    for i in range(n):
        if T == 0:
            R[i, min(range(k), key=lambda j, i=i: (d[i][j], j))] = 1.0
        else:
            e = [math.exp(-(d[i][j] - min(d[i])) / (2.0 * T)) for j in range(k)]
            R[i] = torch.tensor([v / sum(e) for v in e], dtype=F64)
    C_new, counts_new = C.clone(), counts.clone()
    for j in range(k):
        N_j = float(R[:, j].sum())
        S_j = (R[:, j : j + 1] * X).sum(0)
        counts_new[j] = decay * counts[j] + N_j
        if counts_new[j] > 0:
            C_new[j] = C[j] + (S_j - N_j * C[j]) / counts_new[j]
    return C_new, counts_new


@pytest.mark.parametrize(("decay", "T"), [(1.0, 0.0), (0.8, 0.0), (0.9, 0.6)])
def test_kmeans_update_equals_a_slow_reference(decay: float, T: float) -> None:
    C = _randn(4, 3, seed=7, dtype=F64) * 3.0
    vq = _with_codebook(C, update="kmeans", decay=decay, temperature=T, dead_code_steps=None)
    counts = torch.zeros(4, dtype=F64)
    for step in range(4):
        X = _randn(9, 3, seed=10 + step, dtype=F64) * 3.0
        C, counts = _slow_kmeans_step(C, counts, X, decay, T)
        vq(X)
        assert torch.allclose(vq.codebook, C, atol=1e-12)
        assert torch.allclose(vq.counts, counts, atol=1e-12)


def test_kmeans_update_equals_the_streaming_minibatch_step() -> None:
    C = _blobs(4, seed=1)
    vq = _with_codebook(C, update="kmeans", dead_code_steps=None)
    counts = torch.zeros(4, dtype=F64)
    for step in range(3):
        X = _blobs(40, seed=2 + step)
        C, counts, _ = minibatch_step(Data(X), C, counts, 0.0, "hard")
        vq(X)
        assert torch.allclose(vq.codebook, C, atol=1e-12)
        assert torch.allclose(vq.counts, counts, atol=1e-12)


def test_kmeans_update_with_cosine_stays_on_the_sphere() -> None:
    vq = VectorQuantizer(3, 4, update="kmeans", metric="cosine", decay=0.9)
    for step in range(3):
        vq(_randn(16, 3, seed=step) + 1.0)
        assert torch.allclose(vq.codebook.norm(dim=1), torch.ones(4), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# initialisation, revival, statistics
# ---------------------------------------------------------------------------------------------


def test_initialisation_by_kmeans_plusplus_waits_for_k_rows_and_is_reproducible() -> None:
    vq = VectorQuantizer(3, 6, seed=4, dtype=F64)
    assert not bool(vq.initialized)
    first, second = _blobs(4, seed=1), _blobs(10, seed=2)
    vq(first)  # 4 rows < 6 codes: kept, not seeded
    assert not bool(vq.initialized)
    vq(second)
    assert bool(vq.initialized)
    g = torch.Generator().manual_seed(4)
    torch.randn(6, 3, generator=g, dtype=F64)  # the random codebook drawn at construction
    expected = kmeans_plusplus(Data(torch.cat([first, second])), 6, generator=g)
    assert torch.equal(vq.codebook.detach(), expected)
    again = VectorQuantizer(3, 6, seed=4, dtype=F64)
    again(first)
    again(second)
    assert torch.equal(again.codebook, vq.codebook)


def test_initialisation_by_rbfkmeans() -> None:
    X = _blobs(60, seed=3)
    vq = VectorQuantizer(3, 3, init="rbfkmeans", seed=2, dtype=F64)
    vq(X)
    est = rk.RBFKMeans(3, random_state=2).fit(X.numpy())
    assert np.allclose(vq.codebook.detach().numpy(), est.cluster_centers_)


@pytest.mark.parametrize("init", ["k-means++", "rbfkmeans"])
def test_cosine_initialisation_gives_unit_codes_on_the_directions(init: str) -> None:
    X = _blobs(60, seed=8)[:, :2] + torch.tensor([3.0, 3.0], dtype=F64)  # three directions
    vq = VectorQuantizer(2, 3, metric="cosine", init=init, seed=1, dtype=F64)
    vq(X * torch.linspace(0.5, 4.0, 60, dtype=F64).unsqueeze(1))  # lengths must not matter
    assert torch.allclose(vq.codebook.norm(dim=1), torch.ones(3, dtype=F64), atol=1e-12)
    X_hat = X / X.norm(dim=1, keepdim=True)
    assert float(vq.distances(X).detach().min(dim=1).values.max()) < 0.1  # each direction near
    _, indices, _ = vq.eval()(X_hat)
    assert len(set(indices.tolist())) == 3


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
@pytest.mark.parametrize("n_distinct", [1, 2])
def test_a_seeding_batch_with_fewer_distinct_rows_than_codes_warns(metric: str,
                                                                   n_distinct: int) -> None:
    """k-means++ on a batch of fewer distinct rows than codes seeds equal codes: the warning
    names how many distinct codes there are, as RBFKMeans does for its clusters."""
    X = torch.ones(10, 3, dtype=F64)
    if n_distinct == 2:
        X[7:] = torch.tensor([1.0, 2.0, 3.0], dtype=F64)  # another direction too
    assert torch.unique(X, dim=0).shape[0] == n_distinct  # the reference count
    vq = VectorQuantizer(3, 4, metric=metric, seed=1, dtype=F64)
    with pytest.warns(ConvergenceWarning, match=re.escape(
            f"Number of distinct codes ({n_distinct}) found smaller than n_codes (4)")):
        vq(X)
    seeded = {tuple(c) for c in vq.codebook.detach().tolist()}
    expected = X / X.norm(dim=1, keepdim=True) if metric == "cosine" else X
    assert len(seeded) == n_distinct
    assert seeded <= {tuple(c) for c in expected.tolist()} or metric == "cosine"


def test_a_seeding_batch_of_distinct_rows_does_not_warn() -> None:
    vq = VectorQuantizer(3, 6, seed=2, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        vq(_blobs(30, seed=1))
    assert torch.unique(vq.codebook.detach(), dim=0).shape[0] == 6


def test_rbfkmeans_seeding_of_constant_data_warns_once() -> None:
    """The RBFKMeans fit warns for itself; the quantiser adds no second warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        VectorQuantizer(3, 4, init="rbfkmeans", dtype=F64)(torch.ones(10, 3, dtype=F64))
    assert [w.category for w in caught] == [ConvergenceWarning]


def test_dead_code_is_reset_to_a_batch_row_with_its_statistics() -> None:
    C = torch.tensor([[0.0, 0.0, 0.0], [6.0, 0.0, 0.0], [0.0, 6.0, 0.0], [1e3, 1e3, 1e3]],
                     dtype=F64)
    vq = _with_codebook(C, update="kmeans", dead_code_steps=2)
    X = _blobs(30, seed=4)
    vq(X)
    assert vq.unused_steps.tolist() == [0, 0, 0, 1]
    assert vq.codebook[3].tolist() == [1e3, 1e3, 1e3]
    assert vq.counts[3] == 0
    assert int(vq.stats["revived"]) == 0
    X2 = _blobs(30, seed=5)
    vq(X2)
    assert int(vq.stats["revived"]) == 1
    revived = vq.codebook[3]
    assert bool((revived == X2).all(dim=1).any())  # one of the current batch's rows
    assert vq.counts[3] == 0
    assert vq.counts[:3].min() > 0
    assert vq.unused_steps.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("update", ["kmeans", "objective"])
def test_an_empty_training_batch_is_not_a_step(update: str) -> None:
    """A batch of no vectors (on every rank) changes nothing: it had counted as a step in which
    no code was used, so every code neared its reset and the running counts decayed; after
    ``dead_code_steps`` empty batches the next real one replaced every code."""
    C = torch.tensor([[0.0, 0.0, 0.0], [6.0, 0.0, 0.0], [0.0, 6.0, 0.0]], dtype=F64)
    plain = _with_codebook(C, update=update, dead_code_steps=2, decay=0.9)
    gapped = _with_codebook(C, update=update, dead_code_steps=2, decay=0.9)
    for seed in (4, 5):
        X = _blobs(30, seed=seed)
        plain(X)
        gapped(X)
        for _ in range(3):
            q, idx, loss = gapped(X[:0])
            assert q.shape == (0, 3)
            assert idx.shape == (0,)
            assert float(loss.detach()) == 0.0
    assert int(gapped.stats["revived"]) == 0
    torch.testing.assert_close(gapped.codebook, plain.codebook, rtol=0.0, atol=0.0)
    torch.testing.assert_close(gapped.counts, plain.counts, rtol=0.0, atol=0.0)
    assert gapped.unused_steps.tolist() == plain.unused_steps.tolist() == [0, 0, 0]


def test_more_dead_codes_than_rows_revive_each_row_once_and_the_rest_wait() -> None:
    """Four dead codes and a batch of two rows: two codes take the two rows, and the other
    two wait, dead, for the next batch (no two revived codes equal)."""
    C = torch.tensor([[0.0, 0.0], [5.0, 5.0]] + [[1e3, 1e3]] * 4, dtype=F64)
    vq = _with_codebook(C, update="kmeans", dead_code_steps=1)
    vq.counts[:2] = 100.0  # the live codes move by 1/101 of the way to their row
    X = torch.tensor([[0.5, 0.0], [5.0, 5.5]], dtype=F64)
    vq(X)
    assert int(vq.stats["revived"]) == 2
    revived = vq.codebook[2:4]
    assert sorted(map(tuple, revived.tolist())) == sorted(map(tuple, X.tolist()))
    assert vq.codebook[4:].tolist() == [[1e3, 1e3]] * 2  # waiting
    assert vq.unused_steps.tolist() == [0, 0, 0, 0, 1, 1]
    assert vq.counts[2:].tolist() == [0.0] * 4
    # one row for each live code: codes 2 and 3 (count 0) move onto theirs, and the two
    # waiting codes take the other two rows (a row equal to a live code is not taken)
    X2 = torch.tensor([[-0.3, 0.0], [5.0, 4.7], [0.8, 0.0], [5.0, 5.9]], dtype=F64)
    vq(X2)
    assert vq.codebook[2:4].tolist() == X2[2:].tolist()
    assert int(vq.stats["revived"]) == 2
    assert sorted(map(tuple, vq.codebook[4:].tolist())) == sorted(map(tuple, X2[:2].tolist()))
    assert torch.unique(vq.codebook, dim=0).shape[0] == 6


def _duplicated_batch() -> tuple[Tensor, Tensor]:
    """A codebook (3, 3) with two dead codes, and a batch of 12 rows: 11 copies of ``r`` and
    one ``s`` (row 9)."""
    C = torch.tensor([[0.0, 0.0, 0.0], [1e3, 1e3, 1e3], [-1e3, 1e3, 1e3]], dtype=F64)
    X = torch.tensor([[0.5, 0.0, 0.0]], dtype=F64).repeat(12, 1)
    X[9] = torch.tensor([0.0, 0.5, 0.0], dtype=F64)
    return C, X


def _revive_duplicates(X: Tensor) -> VectorQuantizer:
    C, _ = _duplicated_batch()
    vq = _with_codebook(C, update="kmeans", dead_code_steps=1, seed=0)
    vq.counts[0] = 100.0
    vq(X)
    return vq


def test_revival_skips_rows_equal_to_one_drawn_before() -> None:
    """Two dead codes and a batch that is mostly one row: the first two draws are both ``r``
    (rows 2 and 4 with seed 0), and the draws go on past the copies of ``r`` until they reach
    ``s``, so the two codes take ``r`` and ``s``."""
    _, X = _duplicated_batch()
    vq = _revive_duplicates(X)
    assert int(vq.stats["revived"]) == 2
    assert sorted(map(tuple, vq.codebook[1:].tolist())) == [(0.0, 0.5, 0.0), (0.5, 0.0, 0.0)]


def test_dead_code_revival_in_objective_mode_keeps_backward_working() -> None:
    C = torch.tensor([[0.0, 0.0, 0.0], [6.0, 0.0, 0.0], [0.0, 6.0, 0.0], [1e3, 1e3, 1e3]])
    vq = _with_codebook(C, dead_code_steps=1, temperature=0.5)
    z = _blobs(30).float().requires_grad_()
    q, _, loss = vq(z)
    assert int(vq.stats["revived"]) == 1
    (loss + q.sum()).backward()  # the graph holds a copy of the codebook
    assert vq.codebook.grad is not None
    assert torch.isfinite(vq.codebook.grad).all()


def test_usage_and_perplexity_of_the_batch() -> None:
    C = _blobs(5, seed=6)
    vq = _with_codebook(C, dead_code_steps=None)
    X = _blobs(25, seed=7)
    _, indices, _ = vq(X)
    used = torch.bincount(indices, minlength=5).double()
    p = used / used.sum()
    entropy = -sum(float(v) * math.log(float(v)) for v in p if v > 0)
    assert vq.usage == pytest.approx(float((used > 0).sum()) / 5)
    assert vq.perplexity == pytest.approx(math.exp(entropy))
    assert float(code_perplexity(torch.ones(8))) == pytest.approx(8.0)
    assert float(code_perplexity(torch.tensor([0.0, 5.0, 0.0]))) == pytest.approx(1.0)
    assert math.isnan(VectorQuantizer(2, 3).usage)


def test_state_dict_round_trip_keeps_the_codebook_and_the_temperature() -> None:
    vq = VectorQuantizer(3, 4, update="kmeans", temperature=0.3)
    vq(_randn(20, 3))
    other = VectorQuantizer(3, 4, update="kmeans", seed=9)
    other.load_state_dict(vq.state_dict())
    assert bool(other.initialized)
    assert other.temperature == 0.3
    assert torch.equal(other.codebook, vq.codebook)
    assert torch.equal(other.counts, vq.counts)


# ---------------------------------------------------------------------------------------------
# cosine, precision
# ---------------------------------------------------------------------------------------------


def test_cosine_scores_and_indices_equal_a_direct_normalised_computation() -> None:
    vq = VectorQuantizer(4, 6, metric="cosine", temperature=0.3, seed=3).eval()
    z = _randn(10, 4, seed=8) * 5.0
    C = vq.codebook.detach()
    expected = (z / z.norm(dim=1, keepdim=True)) @ (C / C.norm(dim=1, keepdim=True)).T / 0.3
    assert torch.allclose(vq.scores(z), expected, atol=1e-5)
    q, indices, _ = vq(z)
    assert torch.equal(indices, expected.argmax(dim=1))
    assert torch.equal(q, vq.codebook[indices])
    assert torch.allclose(vq.distances(z), 2.0 - 2.0 * expected * 0.3, atol=1e-5)


def test_cosine_codebook_is_renormalised_after_an_optimiser_step() -> None:
    vq = VectorQuantizer(3, 4, metric="cosine", temperature=0.2)
    opt = torch.optim.SGD(vq.parameters(), lr=5.0)
    for step in range(3):
        vq(_randn(16, 3, seed=step))[2].backward()
        opt.step()
        opt.zero_grad()
    assert not torch.allclose(vq.codebook.norm(dim=1), torch.ones(4), atol=1e-3)
    vq(_randn(16, 3, seed=9))
    assert torch.allclose(vq.codebook.norm(dim=1), torch.ones(4), atol=1e-6)


def test_sqeuclidean_scores_are_minus_d_over_2T() -> None:
    vq = VectorQuantizer(3, 4, temperature=0.5)
    z = _randn(6, 3)
    d = torch.cdist(z, vq.codebook.detach()) ** 2
    assert torch.allclose(vq.scores(z), -d, atol=1e-5)
    assert torch.allclose(vq.distances(z), d, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("update", ["objective", "kmeans"])
def test_half_precision_inputs_are_computed_in_float32(dtype: torch.dtype, update: str) -> None:
    vq = VectorQuantizer(8, 16, update=update, temperature=0.01)
    z = (_randn(64, 8) * 100.0).to(dtype).requires_grad_()  # squared distances ~1e5
    q, _, loss = vq(z)
    loss.backward()
    assert q.dtype == dtype  # returned in z's dtype; the loss stays in float32
    assert loss.dtype == torch.float32
    assert torch.isfinite(q).all()
    assert torch.isfinite(loss)
    assert z.grad is not None
    assert torch.isfinite(z.grad).all()


def test_bfloat16_autocast_gives_finite_outputs_and_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 8), nn.Unflatten(1, (2, 4)))
    vq = VectorQuantizer(4, 8, temperature=0.05)
    x = _randn(32, 10) * 30.0
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = model(x)
            assert z.dtype == torch.bfloat16
            q, _, loss = vq(z)
            out = (q**2).mean() + loss
        out.backward()
        assert torch.isfinite(out)
        assert all(torch.isfinite(p.grad).all() for p in [*model.parameters(), vq.codebook]
                   if p.grad is not None)
    assert vq.codebook.dtype == torch.float32


def test_dtype_conversions_keep_the_counts_float64_and_the_codebook_float32() -> None:
    """``.half()`` leaves the state in its precision: the counts stay exact (they reached inf
    in float16 at 65,504 rows, and the codebook stopped moving), and the training equals a
    quantiser never converted."""
    g = torch.Generator().manual_seed(0)
    first = torch.randn(10, 2, generator=g)
    batches = [torch.randn(4000, 2, generator=g) for _ in range(20)]
    converted = VectorQuantizer(2, 2, update="kmeans", dead_code_steps=None)
    plain = VectorQuantizer(2, 2, update="kmeans", dead_code_steps=None)
    converted(first)
    plain(first)
    converted.half()
    assert converted.counts.dtype == F64
    assert converted.codebook.dtype == torch.float32
    for X in batches:
        converted(X)
        plain(X)
    assert float(converted.counts.sum()) == 10 + 20 * 4000  # each row counted once, exactly
    assert torch.equal(converted.counts, plain.counts)
    assert torch.equal(converted.codebook, plain.codebook)
    converted(batches[0].half())  # float16 inputs: computed in float32
    converted.counts.fill_(2.0**24 + 1)  # not a float32 number
    for convert in (converted.float, lambda: converted.to(torch.bfloat16)):
        convert()
        assert converted.counts.tolist() == [2.0**24 + 1] * 2
        assert converted.codebook.dtype == torch.float32
    converted.double()
    assert converted.codebook.dtype == F64
    assert converted.counts.dtype == F64
    converted.to("meta")  # device moves are followed
    assert converted.counts.device.type == converted.codebook.device.type == "meta"
    assert converted.counts.dtype == F64


def test_half_keeps_the_codebook_parameter_its_values_and_its_gradient() -> None:
    vq = VectorQuantizer(3, 4, temperature=0.5)
    opt = torch.optim.SGD(vq.parameters(), lr=0.1)
    vq(_randn(20, 3))[2].backward()
    codebook, before = vq.codebook, vq.codebook.detach().clone()
    grad = vq.codebook.grad.clone()
    vq.half()
    assert vq.codebook is codebook  # the optimiser's parameter
    assert torch.equal(vq.codebook.detach(), before)  # not rounded to float16
    assert vq.codebook.grad is not None
    assert torch.equal(vq.codebook.grad, grad)
    opt.step()
    assert torch.equal(vq.codebook.detach(), before - 0.1 * grad)


def test_a_codebook_of_another_dtype_is_refused_by_forward() -> None:
    vq = VectorQuantizer(3, 4, update="kmeans")
    vq.codebook.data = vq.codebook.data.half()
    with pytest.raises(TypeError, match=re.escape(
            "the codebook must be torch.float32 or torch.float64; got torch.float16")):
        vq(_randn(5, 3))


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"dim": 0}, ValueError, "dim must be an integer >= 1; got 0"),
        ({"dim": 2.5}, TypeError, "dim must be an integer; got float 2.5"),
        ({"n_codes": 0}, ValueError, "n_codes must be an integer >= 1; got 0"),
        ({"assignment": "argmax"}, ValueError, "assignment must be one of 'softmax'"),
        ({"temperature": -1.0}, ValueError, "temperature must be a finite number >= 0; got -1.0"),
        ({"temperature": "hot"}, TypeError, "temperature must be a real number; got str 'hot'"),
        ({"metric": "l1"}, ValueError,
         "metric must be one of 'sqeuclidean', 'cosine'; got 'l1'"),
        ({"commitment_weight": -0.5}, ValueError,
         "commitment_weight must be a finite number >= 0; got -0.5"),
        ({"commitment_weight": None}, TypeError,
         "commitment_weight must be a real number; got NoneType None"),
        ({"update": "ema"}, ValueError, "update must be one of 'objective', 'kmeans'; got 'ema'"),
        ({"decay": 0.0}, ValueError, "decay must be a number in (0, 1]; got 0.0"),
        ({"decay": 1.5}, ValueError, "decay must be a number in (0, 1]; got 1.5"),
        ({"init": "random"}, ValueError, "init must be one of 'k-means++', 'rbfkmeans'; got"),
        ({"dead_code_steps": 0}, ValueError, "dead_code_steps must be an integer >= 1; got 0"),
        ({"seed": -1}, ValueError, "seed must be an integer >= 0; got -1"),
        ({"seed": 1.5}, TypeError, "seed must be an integer; got float 1.5"),
        ({"seed": 2**70}, ValueError,
         "seed must be an integer in [0, 2**64 - 1]; got 1180591620717411303424"),
        ({"seed": 2**32, "init": "rbfkmeans"}, ValueError,
         "seed must be an integer in [0, 2**32 - 1] with init='rbfkmeans'; got 4294967296"),
        ({"dtype": torch.float16}, TypeError,
         "dtype must be torch.float32 or torch.float64; got torch.float16"),
    ],
)
def test_bad_parameters_name_the_parameter_and_the_value(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    params: dict[str, Any] = {"dim": 3, "n_codes": 4, **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        VectorQuantizer(params.pop("dim"), params.pop("n_codes"), **params)


def test_bad_inputs_name_the_problem() -> None:
    vq = VectorQuantizer(3, 4)
    with pytest.raises(ValueError, match=re.escape("z must have shape (..., 3) (dim=3); "
                                                   "got (5, 4)")):
        vq(torch.zeros(5, 4))
    with pytest.raises(ValueError, match=re.escape("z must have shape (..., 3) (dim=3); got ()")):
        vq(torch.tensor(1.0))
    z = torch.zeros(5, 3)
    z[2, 1] = float("nan")
    with pytest.raises(ValueError, match=re.escape("z must be finite; got 1 NaN/inf entries")):
        vq(z)
    with pytest.raises(TypeError, match=re.escape("z must be a torch.Tensor; got list")):
        vq([[1.0, 2.0, 3.0]])
    with pytest.raises(TypeError,
                       match=re.escape("z must be a floating-point tensor; got torch.int64")):
        vq(torch.ones(2, 3, dtype=torch.long))
    cos = VectorQuantizer(3, 4, metric="cosine")
    z = torch.ones(4, 3)
    z[1] = 0.0
    with pytest.raises(ValueError, match=re.escape(
            "z has a zero row (row 1; 1 in all); metric='cosine' needs every row to have a "
            "direction (a non-zero norm)")):
        cos(z)
    with pytest.raises(ValueError, match=re.escape("z has a zero row (row (0, 2); 1 in all)")):
        cos(torch.ones(2, 3, 3).index_fill_(1, torch.tensor([2]), 0.0)[:1])
    with pytest.raises(ValueError, match=re.escape("temperature must be a finite number >= 0; "
                                                   "got inf")):
        vq.temperature = float("inf")
    with pytest.raises(ValueError, match="scores are -d/\\(2T\\), undefined at temperature=0"):
        vq.scores(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=re.escape("indices must be in [0, 4) (n_codes=4); "
                                                   "got values in [0, 4]")):
        vq.lookup(torch.tensor([0, 4]))
    with pytest.raises(TypeError, match=re.escape(
            "indices must be an integer torch.Tensor; got torch.float32")):
        vq.lookup(torch.tensor([0.0]))


def test_seeds_at_the_ends_of_their_range_are_used() -> None:
    top = VectorQuantizer(3, 4, seed=2**64 - 1, dtype=F64)
    g = torch.Generator().manual_seed(2**64 - 1)
    assert torch.equal(top.codebook.detach(), torch.randn(4, 3, generator=g, dtype=F64))
    X = _blobs(60, seed=3)
    vq = VectorQuantizer(3, 3, init="rbfkmeans", seed=np.int64(2**32 - 1), dtype=F64)
    vq(X)
    est = rk.RBFKMeans(3, random_state=2**32 - 1).fit(X.numpy())
    assert np.allclose(vq.codebook.detach().numpy(), est.cluster_centers_)


@pytest.mark.parametrize("value", [
    nn.Parameter(torch.tensor(-1.0)),
    nn.Parameter(torch.tensor(0.5)),
    nn.Parameter(torch.tensor(0.5), requires_grad=False),
    torch.tensor(0.5, requires_grad=True),
])
def test_a_trained_temperature_is_refused_at_construction_and_on_assignment(
        value: Tensor) -> None:
    """The temperature is a hyper-parameter: ``dF_T/dT <= 0``, so a trained one would only
    grow. A Parameter had skipped the checks (nn.Module registered it) and was never used."""
    message = re.escape("temperature must be a float, not a tensor that is trained; got "
                        f"{type(value).__name__} {value.item()!r}")
    with pytest.raises(TypeError, match=message):
        VectorQuantizer(3, 4, temperature=value)
    vq = VectorQuantizer(3, 4, temperature=0.3)
    with pytest.raises(TypeError, match=message):
        vq.temperature = value
    assert vq.temperature == 0.3
    assert [name for name, _ in vq.named_parameters()] == ["codebook"]


def test_a_tensor_temperature_without_gradient_is_checked_and_read_as_a_float() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "temperature must be a finite number >= 0; got -1.0")):
        VectorQuantizer(3, 4, temperature=torch.tensor(-1.0))
    vq = VectorQuantizer(3, 4, temperature=torch.tensor(0.25))
    assert type(vq.temperature) is float
    assert vq.temperature == 0.25
    vq.temperature = torch.tensor(0.5, dtype=F64)
    assert vq.temperature == 0.5
    assert "temperature" in vq.state_dict()["_extra_state"]


def test_temperature_is_settable() -> None:
    vq = VectorQuantizer(3, 4, temperature=1.0)
    vq.temperature = 0
    assert vq.temperature == 0.0
    assert "temperature=0" in repr(vq)


# ---------------------------------------------------------------------------------------------
# the documentation page's session
# ---------------------------------------------------------------------------------------------


def test_docs_session_runs_as_shown() -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    session = "\n".join(b for b in blocks if b.lstrip().startswith(">>>"))
    assert session.count(">>>") >= 5
    test = doctest.DocTestParser().get_doctest(session, {}, "quantizer.md", str(DOCS), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


# ---------------------------------------------------------------------------------------------
# two gloo processes
# ---------------------------------------------------------------------------------------------

WORLD = 2
STEPS = 5


def _global_batches() -> list[Tensor]:
    """Batches of 12 rows; rank 0 holds the first 7 of each, rank 1 the other 5."""
    return [_blobs(12, seed=20 + s) for s in range(STEPS)]


def _kmeans_quantizer() -> VectorQuantizer:
    # 6 codes on 3 blobs and a one-step patience: codes die and are revived along the way
    return VectorQuantizer(3, 6, update="kmeans", decay=0.9, temperature=0.0,
                           dead_code_steps=1, seed=3, dtype=F64)


def _kmeans_trace(vq: VectorQuantizer, batches: list[Tensor]) -> dict[str, Any]:
    trace: dict[str, Any] = {"codebook": [], "counts": [], "revived": []}
    for X in batches:
        vq(X)
        trace["codebook"].append(vq.codebook.clone())
        trace["counts"].append(vq.counts.clone())
        trace["revived"].append(int(vq.stats["revived"]))
    return trace


def _ddp_model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 3, dtype=F64),
                         VectorQuantizer(3, 5, temperature=0.1, dead_code_steps=2, seed=1,
                                         dtype=F64))


def _ddp_scenario(rank: int) -> dict[str, Any]:
    """Four DDP steps of a linear layer and a quantizer from different starts on the ranks.

    A function of its own: the last step's graph (``out``, ``loss``) holds hooks of DDP's
    reducer, and a reducer destroyed after its process group (at the worker's exit) can abort
    the process; here everything of DDP dies when the function returns."""
    torch.manual_seed(100 + rank)  # different starts until DDP broadcasts rank 0's
    model = _ddp_model()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(4):
        x = torch.randn(10, 3, generator=g, dtype=F64) * (1 + rank)
        out = ddp(x)
        loss = out[2] + out[0].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    vq = model[1]
    return {"codebook": vq.codebook.detach().clone(), "initialized": bool(vq.initialized),
            "unused_steps": vq.unused_steps.clone()}


def _worker(rank: int, port: int, out_dir: str) -> None:
    from rbfkmeans.distributed import process_group

    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    with process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                       world_size=WORLD, timeout_s=60):
        part = slice(0, 7) if rank == 0 else slice(7, 12)
        results["kmeans"] = _kmeans_trace(_kmeans_quantizer(),
                                          [X[part] for X in _global_batches()])
        results["revive"] = _revive_duplicates(_duplicated_batch()[1][part]).codebook.clone()
        for name, kw in (("n_codes", {"n_codes": 4 + rank}),
                         ("update", {"n_codes": 4, "update": ("kmeans", "objective")[rank]})):
            try:  # settings that differ between the ranks: named on every rank
                VectorQuantizer(3, seed=0, dtype=F64, **kw)(torch.randn(8, 3, dtype=F64))
                results[f"mismatch_{name}"] = "ok"
            except ValueError as exc:
                results[f"mismatch_{name}"] = str(exc)
        results["ddp"] = _ddp_scenario(rank)
        gc.collect()  # DDP's reducer may sit in a reference cycle: gone before the group
        torch.distributed.barrier()
    save_rank(out_dir, rank, results)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    # fresh interpreters: a fork of the test process can inherit the thread pools that the
    # tests before this one started, and a forked worker may then wait on them forever
    return run_ranks(_worker, tmp_path_factory.mktemp("vq_dist"), world=WORLD,
                     timeout_s=120)


def test_two_processes_equal_one_process_on_the_concatenated_batches(
    ranks: list[dict[str, Any]],
) -> None:
    """k-means++ seeding, the all-reduced k-means step and the revival draws: both ranks hold
    the codebook of one process fed the whole batches."""
    single = _kmeans_trace(_kmeans_quantizer(), _global_batches())
    assert sum(single["revived"]) > 0  # the revival path is exercised
    for res in ranks:
        assert res["kmeans"]["revived"] == single["revived"]
        for C, C_ref in zip(res["kmeans"]["codebook"], single["codebook"], strict=True):
            assert torch.allclose(C, C_ref, atol=1e-12)
        for n, n_ref in zip(res["kmeans"]["counts"], single["counts"], strict=True):
            assert torch.allclose(n, n_ref, atol=1e-12)


def test_two_processes_revive_the_distinct_rows_of_one_process(
    ranks: list[dict[str, Any]],
) -> None:
    """The revival draws over both ranks' rows skip the copies of a row on either rank."""
    single = _revive_duplicates(_duplicated_batch()[1]).codebook
    for res in ranks:
        assert torch.equal(res["revive"], single)
        assert sorted(map(tuple, res["revive"][1:].tolist())) == [(0.0, 0.5, 0.0),
                                                                  (0.5, 0.0, 0.0)]


def test_two_processes_under_ddp_hold_identical_codebooks(ranks: list[dict[str, Any]]) -> None:
    a, b = ranks[0]["ddp"], ranks[1]["ddp"]
    assert a["initialized"]
    assert b["initialized"]
    assert torch.equal(a["codebook"], b["codebook"])
    assert torch.equal(a["unused_steps"], b["unused_steps"])


def test_ranks_with_different_quantizer_settings_raise_naming_them(
        ranks: list[dict[str, Any]]) -> None:
    """A different n_codes on the two ranks had left them waiting; every rank now raises at
    the first training forward, naming the settings that differ."""
    for r in ranks:
        assert "VectorQuantizer's parameters must be the same on every rank; n_codes differs" \
            in r["mismatch_n_codes"]
        assert "update differs" in r["mismatch_update"]
