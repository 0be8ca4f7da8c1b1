"""Hostile inputs to rbfkmeans.deep: rows far from the origin for the neighbour graph, tiny
temperatures, empty batches and invalid memberships for the losses, extreme cooling ranges and
empty image batches. Each result is checked against an independent float64 computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rbfkmeans.deep import (
    epoch_temperatures,
    fenchel_young_loss,
    knn_graph,
    load_dataset,
    neighbor_consistency_loss,
    neighbor_contrastive_loss,
    random_affine,
    random_shift,
)
from rbfkmeans.deep.augment import affine_images
from rbfkmeans.deep.graph import CENTRING_OFFSET
from rbfkmeans.deep.losses import batch_targets
from rbfkmeans.distances import cross_term, row_norms_sq
from rbfkmeans.schedules import MAX_LADDER

MAPPINGS = ("softmax", "entmax15", "sparsemax")


# -- knn_graph ---------------------------------------------------------------------------------


def brute_force_sq(X: torch.Tensor) -> torch.Tensor:
    """Squared distances (n, n) of the rows' values, in float64 by differences (no expansion),
    with ``inf`` on the diagonal."""
    Xd = X.double()
    D = (Xd[:, None, :] - Xd[None, :, :]).square().sum(dim=2)
    return D.fill_diagonal_(math.inf)


def assert_exact_neighbours(X: torch.Tensor, G: torch.Tensor, rtol: float) -> None:
    """The distances to the chosen neighbours ``G`` (n, m) are the ``m`` smallest of each row,
    in order, up to ``rtol`` (ties of the rows' values may come in either order)."""
    D = brute_force_sq(X)
    m = G.shape[1]
    best = D.sort(dim=1).values[:, :m]
    got = D.gather(1, G)
    assert (torch.arange(X.shape[0])[:, None] != G).all()  # never a row itself
    torch.testing.assert_close(got, best, rtol=rtol, atol=0.0)


@pytest.mark.parametrize("offset", [1e3, 1e4])
@pytest.mark.parametrize("chunk", [None, 37])
def test_knn_graph_is_exact_far_from_the_origin(offset: float, chunk: int | None) -> None:
    """Rows randn + 1e3 (float32) had 44% wrong nearest neighbours, + 1e4 98%: the products
    ||x_l||^2 - 2 x_i.x_l were rounded at the scale of ||x||^2."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(200, 5, generator=gen) + offset  # float32, as the clusterer passes it
    G = knn_graph(X, 5, chunk_rows=chunk)
    assert G.shape == (200, 5)
    assert G.dtype == torch.int64
    assert_exact_neighbours(X, G, rtol=1e-5)


def test_knn_graph_is_exact_far_from_the_origin_on_principal_axes() -> None:
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(150, 8, generator=gen, dtype=torch.float64)
    X[:, :3] *= 5.0  # three leading axes
    Xf = (X + 1e4).float()
    G = knn_graph(Xf, 4, dims=3)
    # reference: the same projection, then float64 brute force on its coordinates
    Xc = Xf.double() - Xf.double().mean(dim=0)
    _, vecs = torch.linalg.eigh(Xc.T @ Xc)
    assert_exact_neighbours(Xc @ vecs[:, -3:], G, rtol=1e-4)


def test_knn_graph_keeps_float64_rows_in_float64() -> None:
    """float64 rows were rounded to float32 first: rows 1 + 1e-6 * randn became a handful of
    distinct values, and their neighbours ties of the rounding."""
    gen = torch.Generator().manual_seed(2)
    X = 1.0 + 1e-6 * torch.randn(120, 3, generator=gen, dtype=torch.float64)
    G = knn_graph(X, 3)
    assert_exact_neighbours(X, G, rtol=1e-8)
    G_near = knn_graph(X - 1.0, 3)  # the same rows about the origin
    torch.testing.assert_close(G, G_near, rtol=0, atol=0)


def _uncentred_graph(Y: torch.Tensor, m: int, rows: int | None = None) -> torch.Tensor:
    """The graph of the products ``||y_l||^2 - 2 y_i.y_l`` on the rows as they are, ``rows``
    query rows at a time (default all): the computation the graph always made."""
    n = Y.shape[0]
    rows = rows or n
    sq = row_norms_sq(Y)
    out = []
    for start in range(0, n, rows):
        D = cross_term(Y[start:start + rows], Y, sq)
        idx = torch.arange(D.shape[0])
        D[idx, idx + start] = math.inf
        out.append(D.topk(m, dim=1, largest=False, sorted=True).indices)
    return torch.cat(out)


def _offset_ratio(Y: torch.Tensor) -> float:
    Yd = Y.double()
    mu = Yd.mean(dim=0)
    return float(mu.norm() / (Yd - mu).square().sum(dim=1).mean().sqrt())


def test_knn_graph_leaves_the_rows_of_the_digits_as_they_are() -> None:
    """The project's published digits results rest on this graph: their rows lie near the origin
    (mean 1.48 root-mean-square distances from it), so they are not centred and the graph is
    the one of the products on the rows as they are, bit for bit."""
    X = torch.as_tensor(load_dataset("digits").X)
    assert X.dtype == torch.float32
    assert _offset_ratio(X) < CENTRING_OFFSET / 2
    ref = _uncentred_graph(X, 10)
    torch.testing.assert_close(knn_graph(X, 10), ref, rtol=0, atol=0)
    torch.testing.assert_close(knn_graph(X, 10, chunk_rows=100), _uncentred_graph(X, 10, 100),
                               rtol=0, atol=0)


@pytest.mark.parametrize("side", [0.9, 1.1])
def test_knn_graph_centres_only_beyond_the_offset(side: float) -> None:
    """Below CENTRING_OFFSET the rows are taken as they are, beyond it centred: the graph equals
    the one of the products on those rows, bit for bit."""
    gen = torch.Generator().manual_seed(3)
    E = torch.randn(300, 6, generator=gen)
    E = E - E.mean(dim=0)
    shift = torch.zeros(6)
    shift[0] = 1.0
    rms = float(E.double().square().sum(dim=1).mean().sqrt())
    X = E + side * CENTRING_OFFSET * rms * shift
    before = X.clone()
    G = knn_graph(X, 6)
    torch.testing.assert_close(X, before, rtol=0, atol=0)  # X is not modified
    if side < 1:
        assert _offset_ratio(X) < CENTRING_OFFSET
        torch.testing.assert_close(G, _uncentred_graph(X, 6), rtol=0, atol=0)
    else:
        assert _offset_ratio(X) > CENTRING_OFFSET
        mu = X.double().mean(dim=0).float()
        torch.testing.assert_close(G, _uncentred_graph(X - mu, 6), rtol=0, atol=0)
    assert_exact_neighbours(X, G, rtol=1e-5)


# -- fenchel_young_loss at tiny temperatures ----------------------------------------------------


@pytest.mark.parametrize("assignment", MAPPINGS)
@pytest.mark.parametrize("T", [1e-39, 1e-44])
def test_fenchel_young_loss_refuses_a_temperature_beyond_float32(assignment: str,
                                                                 T: float) -> None:
    """T=1e-39 returned 2.5e38 with NaN gradients (softmax), NaN and inf (entmax15): the
    gradient (P - R) / 2T is beyond float32 there."""
    D = torch.tensor([[0.0, 1.0], [1.0, 0.0]], requires_grad=True)
    with pytest.raises(ValueError, match=rf"T must be 0 or at least 1\.47e-39 .*got T={T!r}"):
        fenchel_young_loss(D, torch.full((2, 2), 0.5), T, assignment)


@pytest.mark.parametrize("assignment", MAPPINGS)
def test_fenchel_young_loss_is_finite_just_above_that_temperature(assignment: str) -> None:
    """At T = 2e-39 the memberships are one-hot, the loss is (sum_j P_ij d_ij - min_j d_ij) / 2T
    (up to the entropy term, negligible) and its gradient (P - R) / (2T n), all in float32."""
    T = 2e-39
    D = torch.tensor([[0.0, 1.0], [1.0, 0.0]], requires_grad=True)
    P = torch.full((2, 2), 0.5)
    loss = fenchel_young_loss(D, P, T, assignment)
    loss.backward()
    assert D.grad is not None
    Dd, Pd = D.detach().double(), P.double()
    R = torch.eye(2, dtype=torch.float64)
    ref = float(((Pd * Dd).sum(dim=1) - Dd.amin(dim=1)).mean()) / (2.0 * T)
    assert float(loss.detach()) == pytest.approx(ref, rel=1e-5)
    torch.testing.assert_close(D.grad.double(), (Pd - R) / (2.0 * T * 2), rtol=1e-5, atol=0.0)


def test_fenchel_young_loss_at_zero_temperature_stays_in_distance_units() -> None:
    D = torch.tensor([[0.0, 1.0], [3.0, 1.0]], requires_grad=True)
    P = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    loss = fenchel_young_loss(D, P, 0.0, "softmax")
    assert float(loss.detach()) == pytest.approx((0.5 + 0.0) / 2)


# -- empty batches, tiny tau, memberships off the simplex ---------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: fenchel_young_loss(torch.zeros(0, 3), torch.zeros(0, 3), 1.0, "softmax"),
         r"D must have at least one row .*got shape \(0, 3\)"),
        (lambda: neighbor_consistency_loss(torch.zeros(0, 3), torch.zeros(0, 3)),
         r"R must have at least one row .*got shape \(0, 3\)"),
        (lambda: neighbor_contrastive_loss(torch.zeros(0, 4), torch.zeros(0, 4)),
         r"Z must have at least one row .*got shape \(0, 4\)"),
    ],
)
def test_losses_refuse_an_empty_batch(call, match) -> None:  # type: ignore[no-untyped-def]
    """Each returned NaN (a mean over no rows)."""
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("tau", [1e-300, 1e-39])
def test_neighbor_contrastive_loss_refuses_a_tau_beyond_float32(tau: float) -> None:
    """tau=1e-300 passed the "> 0" check and returned NaN."""
    with pytest.raises(ValueError, match=rf"tau must be at least 2\.94e-39 .*got {tau!r}"):
        neighbor_contrastive_loss(torch.eye(3), torch.eye(3), tau=tau)


def _infonce_float64(Z: torch.Tensor, Zp: torch.Tensor, tau: float) -> float:
    S = Z.double() @ Zp.double().T / tau
    diag = S.diagonal()
    rows = torch.logsumexp(S, dim=1) - diag
    cols = torch.logsumexp(S, dim=0) - diag
    return float(0.5 * (rows.mean() + cols.mean()))


@pytest.mark.parametrize("tau", [1e-30, 1e-3, 0.5])
def test_neighbor_contrastive_loss_small_tau_matches_float64(tau: float) -> None:
    gen = torch.Generator().manual_seed(4)
    Z = torch.nn.functional.normalize(torch.randn(12, 5, generator=gen), dim=1)
    Zp = torch.nn.functional.normalize(Z + 0.3 * torch.randn(12, 5, generator=gen), dim=1)
    got = neighbor_contrastive_loss(Z, Zp, tau)
    assert math.isfinite(float(got))
    assert float(got) == pytest.approx(_infonce_float64(Z, Zp, tau), rel=1e-4, abs=1e-4)


def test_neighbor_contrastive_loss_refuses_scores_that_overflow() -> None:
    """Rows far off the unit sphere: scores of inf gave a NaN loss."""
    Z = torch.eye(3) * 1e20
    with pytest.raises(ValueError, match=r"Z @ Z_pos\.T / tau overflow .*unit sphere"):
        neighbor_contrastive_loss(Z, Z, tau=1.0)


@pytest.mark.parametrize(
    ("R", "R_pos", "name"),
    [
        (-torch.eye(3), torch.eye(3), "R"),
        (torch.eye(3), -torch.eye(3), "R_pos"),
        (2.0 * torch.eye(3), torch.eye(3), "R"),
        (torch.eye(3), torch.zeros(3, 3), "R_pos"),
        (torch.tensor([[1.5, -0.5], [0.5, 0.5]]), torch.eye(2), "R"),
    ],
)
def test_neighbor_consistency_loss_refuses_rows_off_the_simplex(R: torch.Tensor,
                                                                R_pos: torch.Tensor,
                                                                name: str) -> None:
    """-R gave a finite loss of no meaning (the agreement clamped at 1e-8)."""
    with pytest.raises(ValueError, match=rf"^{name}'s rows must lie on the simplex"):
        neighbor_consistency_loss(R, R_pos)


def test_neighbor_consistency_loss_on_the_simplex_matches_float64() -> None:
    gen = torch.Generator().manual_seed(5)
    R = torch.softmax(torch.randn(7, 4, generator=gen), dim=1)
    Rp = torch.softmax(torch.randn(7, 4, generator=gen), dim=1)
    Rd, Rpd = R.double(), Rp.double()
    mean = Rd.mean(dim=0)
    ref = float(-(Rd * Rpd).sum(dim=1).log().mean() + 1.5 * (math.log(4)
                                                            + (mean * mean.log()).sum()))
    assert float(neighbor_consistency_loss(R, Rp, 1.5)) == pytest.approx(ref, rel=1e-5)


# -- batch_targets' sizes -----------------------------------------------------------------------


def _targets_float64(Rbar: torch.Tensor, sizes: torch.Tensor, balance: float) -> torch.Tensor:
    P = Rbar.double().square() / sizes.double().clamp_min(1e-12).pow(balance)
    return P / P.sum(dim=1, keepdim=True)


@pytest.mark.parametrize(
    ("sizes", "match"),
    [
        (torch.tensor([-1.0, 2.0, 3.0]), r"sizes must be soft cluster sizes >= 0 .*got -1 for "
                                         r"cluster 0"),
        (torch.tensor([1.0, -1e-3, 3.0]), r"got -0\.001 for cluster 1"),
        (torch.zeros(3), r"sizes must be > 0 for every cluster the memberships reach.*cluster 0"),
        (torch.tensor([2.0, 0.0, 3.0]), r"got 0 for cluster 1"),
    ],
)
def test_batch_targets_refuses_sizes_that_cannot_be_cluster_sizes(sizes: torch.Tensor,
                                                                  match: str) -> None:
    """Negative and zero sizes were clamped to 1e-12: all zeros gave plain sharpening (a uniform
    balance), one zero a target all on that cluster."""
    gen = torch.Generator().manual_seed(6)
    R = torch.softmax(torch.randn(5, 3, generator=gen), dim=1)
    with pytest.raises(ValueError, match=match):
        batch_targets(R, slice(None), None, sizes, 1.0)


def test_batch_targets_accepts_a_zero_size_for_a_cluster_no_row_reaches() -> None:
    """A sparse mapping can leave a cluster without membership: its size is 0, its targets 0."""
    gen = torch.Generator().manual_seed(7)
    R = torch.softmax(torch.randn(6, 3, generator=gen), dim=1)
    R[:, 2] = 0.0
    R = R / R.sum(dim=1, keepdim=True)
    sizes = R.sum(dim=0)
    assert float(sizes[2]) == 0.0
    P = batch_targets(R, slice(None), None, sizes, 0.5)
    torch.testing.assert_close(P.double(), _targets_float64(R, sizes, 0.5))
    assert (P[:, 2] == 0).all()


# -- epoch_temperatures -------------------------------------------------------------------------


def test_epoch_temperatures_cool_across_a_range_whose_ratio_underflows() -> None:
    """(1e300, 1e-300, 6) raised "ratio must be in (0, 1); got 0.0", a parameter never passed:
    1e-300 / 1e300 underflows."""
    got = epoch_temperatures(1e300, 1e-300, 6)
    ref = 10.0 ** np.array([300.0, 180.0, 60.0, -60.0, -180.0, -300.0])
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert got[0] == 1e300
    assert got[-1] == 1e-300
    assert (np.diff(got) < 0).all()


def test_epoch_temperatures_with_a_ratio_that_rounds_to_one() -> None:
    """T_end one ulp below T_start over many epochs: the per-epoch ratio rounds to 1."""
    T_end = float(np.nextafter(1.0, 0.0))
    got = epoch_temperatures(1.0, T_end, 1000)
    assert got.shape == (1000,)
    assert got[0] == 1.0
    assert got[-1] == T_end
    assert ((got <= 1.0) & (got >= T_end)).all()
    assert (np.diff(got) <= 0).all()


def test_epoch_temperatures_beyond_the_ladder_length() -> None:
    """More epochs than a ladder may hold raised an error about a ladder and a ratio."""
    epochs = MAX_LADDER + 2
    got = epoch_temperatures(1.0, 0.5, epochs)
    ref = 0.5 ** (np.arange(epochs) / (epochs - 1))
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert got[0] == 1.0
    assert got[-1] == 0.5


def test_epoch_temperatures_ordinary_ranges_are_the_geometric_ladder() -> None:
    """The ladder of rbfkmeans.schedules, as before, where the ratio is representable."""
    from rbfkmeans.schedules import geometric_schedule

    for T_start, T_end, epochs in [(1.0, 0.03, 50), (0.3, 0.01, 10), (2.0, 1.0, 4)]:
        ratio = (T_end / T_start) ** (1.0 / (epochs - 1))
        ladder = geometric_schedule(T_start, T_end, ratio)
        idx = np.round(np.linspace(0, len(ladder) - 1, epochs)).astype(int)
        np.testing.assert_array_equal(epoch_temperatures(T_start, T_end, epochs), ladder[idx])
        np.testing.assert_allclose(epoch_temperatures(T_start, T_end, epochs),
                                   T_start * (T_end / T_start) ** (np.arange(epochs)
                                                                   / (epochs - 1)), rtol=1e-12)


# -- augmentations of an empty batch ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_augmentations_of_an_empty_batch_are_empty(dtype: torch.dtype) -> None:
    """random_affine(X[:0], ...) raised torch's "Expected non-zero, positive output size"."""
    X = torch.rand(3, 2 * 36, dtype=dtype)[:0]
    gen = torch.Generator().manual_seed(0)
    for out in (random_affine(X, (2, 6, 6), 1.0, 10.0, 0.1, gen),
                random_affine(X, (2, 6, 6)),
                random_shift(X, (2, 6, 6), 1, gen),
                affine_images(X, (2, 6, 6), torch.zeros(0), torch.ones(0), torch.zeros(0, 2))):
        assert out.shape == (0, 72)
        assert out.dtype == dtype
    with pytest.raises(ValueError, match=r"image_shape \(6, 6\) holds 36 values but the rows "
                                         r"have 72 features"):
        random_affine(X, (6, 6), 1.0)
