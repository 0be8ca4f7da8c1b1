"""Three defects of :class:`~rbfkmeans.VectorQuantizer` and one of the ``vq`` experiment:

1. ``quantized`` comes back in ``z``'s dtype (it had stayed in the compute dtype: float32 for a
   float16 network, which a float16 decoder refused), the straight-through gradient intact;
2. ``lookup`` reads integer indices of any integer dtype as indices (uint8 had been taken for a
   boolean mask) and refuses a boolean tensor naming ``indices``;
3. the rows waiting to seed the codebook are part of the module's state: saved, restored and
   replaced by ``load_state_dict`` (they had survived a load and were missing from a
   checkpoint);
4. ``rbfkmeans.vq.experiment.train`` leaves the caller's global random generator as it was.
"""

from __future__ import annotations

import copy
import io
import pickle
import re
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import rbfkmeans as rk
from rbfkmeans import VectorQuantizer

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = F32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _bits(t: Tensor) -> bytes:
    return t.detach().cpu().numpy().tobytes()


# ---------------------------------------------------------------------------------------------
# 1. quantized in z's dtype
# ---------------------------------------------------------------------------------------------

# (codebook dtype, z dtype, compute dtype: that of the loss)
DTYPES = [(F32, F16, F32), (F32, BF16, F32), (F32, F32, F32), (F32, F64, F64),
          (F64, F32, F64), (F64, F16, F64), (F64, F64, F64)]


@pytest.mark.parametrize(("codebook", "dtype", "compute"), DTYPES)
@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_quantized_comes_back_in_z_s_dtype(codebook: torch.dtype, dtype: torch.dtype,
                                          compute: torch.dtype, metric: str) -> None:
    vq = VectorQuantizer(4, 8, dtype=codebook, metric=metric, update="kmeans")
    z = _randn(3, 20, 4).to(dtype)
    for training in (True, False):
        vq.train(training)
        q, indices, loss = vq(z)
        assert q.dtype == dtype
        assert q.shape == z.shape
        assert loss.dtype == compute  # the loss stays in the compute dtype
        assert indices.dtype == torch.long
    assert vq.codebook.dtype == codebook
    assert torch.equal(q, vq.codebook[indices].to(dtype))  # eval: the codes, cast to z's dtype
    assert torch.equal(q, vq.lookup(indices).to(dtype))


def test_the_probe_s_half_network_runs() -> None:
    vq = rk.VectorQuantizer(4, 8).half()
    dec = nn.Linear(4, 8).half()
    q, _, loss = vq(_randn(64, 4).half())
    assert q.dtype == F16
    assert dec(q).dtype == F16
    assert loss.dtype == F32
    assert vq.codebook.dtype == F32


@pytest.mark.parametrize(("codebook", "dtype"), [(F32, F16), (F32, BF16), (F64, F32)])
@pytest.mark.parametrize("update", ["objective", "kmeans"])
def test_the_straight_through_gradient_still_reaches_z_as_the_identity(
        codebook: torch.dtype, dtype: torch.dtype, update: str) -> None:
    vq = VectorQuantizer(4, 8, dtype=codebook, update=update)
    z = _randn(2, 10, 4).to(dtype).requires_grad_(True)
    weight = _randn(2, 10, 4, seed=1).to(dtype)
    q, _, loss = vq(z)
    ((q * weight).sum() + loss.to(dtype) * 0).backward()
    assert z.grad is not None
    assert z.grad.dtype == dtype
    assert torch.equal(z.grad, weight)
    if update == "objective":
        assert vq.codebook.grad is not None
        assert vq.codebook.grad.dtype == codebook


def test_a_float32_network_with_a_float64_codebook_gets_float32_codes() -> None:
    vq = VectorQuantizer(4, 8, dtype=F64).eval()
    z = _randn(16, 4)
    q, indices, loss = vq(z)
    assert q.dtype == F32
    assert loss.dtype == F64
    assert torch.equal(q, vq.codebook[indices].float())


@pytest.mark.parametrize("metric", ["sqeuclidean", "cosine"])
def test_distances_and_scores_of_half_z_are_the_float32_computation(metric: str) -> None:
    """As ``loss``: half-precision ``z`` is computed, and answered, in float32 (squared
    distances of float16 rows of size 300 would overflow float16's 65,504)."""
    vq = VectorQuantizer(4, 8, metric=metric, temperature=0.5).eval()
    z = (_randn(16, 4) * 300).half()
    D, S = vq.distances(z), vq.scores(z)
    assert D.dtype == F32
    assert S.dtype == F32
    assert torch.isfinite(D).all()
    assert torch.isfinite(S).all()
    torch.testing.assert_close(D, vq.distances(z.float()), rtol=0, atol=0)
    torch.testing.assert_close(S, vq.scores(z.float()), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# 2. lookup of integer indices of any integer dtype
# ---------------------------------------------------------------------------------------------

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                  torch.uint16, torch.uint32, torch.uint64]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@pytest.mark.parametrize("values", [[1, 0, 2, 3], [1, 0, 2], [[3, 3], [0, 1]], [2], []])
def test_lookup_reads_integers_of_any_dtype_as_indices(dtype: torch.dtype,
                                                       values: list[Any]) -> None:
    v = VectorQuantizer(3, 4)
    indices = torch.tensor(values, dtype=torch.int64).to(dtype)
    given = indices.clone()
    codes = v.lookup(indices)
    assert codes.shape == (*indices.shape, 3)
    assert torch.equal(codes, v.codebook.detach()[indices.long()])
    assert indices.dtype == dtype  # the caller's tensor untouched
    assert torch.equal(indices, given)


def test_the_probe_s_uint8_indices_are_indices_not_a_mask() -> None:
    v = rk.VectorQuantizer(3, 4)
    assert v.lookup(torch.tensor([1, 0, 2, 3], dtype=torch.uint8)).shape == (4, 3)
    assert v.lookup(torch.tensor([1, 0, 2], dtype=torch.uint8)).shape == (3, 3)


@pytest.mark.parametrize(("indices", "shown"), [
    (torch.tensor([0, 4], dtype=torch.uint8), "[0, 4]"),
    (torch.tensor([255, 1], dtype=torch.uint8), "[1, 255]"),
    (torch.tensor([-1, 2], dtype=torch.int8), "[-1, 2]"),
    (torch.tensor([7, 2], dtype=torch.int32).to(torch.uint32), "[2, 7]"),
    (torch.tensor([2**63 + 5], dtype=torch.uint64), f"[{2**63 + 5}, {2**63 + 5}]"),
])
def test_lookup_refuses_indices_out_of_range_naming_them(indices: Tensor, shown: str) -> None:
    v = VectorQuantizer(3, 4)
    with pytest.raises(ValueError, match=re.escape(
            f"indices must be in [0, 4) (n_codes=4); got values in {shown}")):
        v.lookup(indices)


def test_lookup_refuses_a_boolean_mask_naming_indices() -> None:
    v = VectorQuantizer(3, 4)
    with pytest.raises(TypeError, match=re.escape(
            "indices must be an integer torch.Tensor (code numbers, not a mask); got "
            "torch.bool")):
        v.lookup(torch.tensor([True, False, True, True]))


# ---------------------------------------------------------------------------------------------
# 3. the rows awaiting the seeding are part of the state
# ---------------------------------------------------------------------------------------------

Z = _randn(100, 3)


def _kmeans(**kwargs: Any) -> VectorQuantizer:
    return VectorQuantizer(3, 8, update="kmeans", **kwargs)


def _assert_same(a: VectorQuantizer, b: VectorQuantizer) -> None:
    """``a`` and ``b`` hold the same state, bit for bit, the rows awaiting the seeding
    included."""
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        if isinstance(sa[key], Tensor):
            assert _bits(sa[key]) == _bits(sb[key]), key
    ea, eb = sa["_extra_state"], sb["_extra_state"]
    assert set(ea) == set(eb)
    assert ea["temperature"] == eb["temperature"]
    for name in ("generator", "pending"):
        assert ea[name].dtype == eb[name].dtype, name
        assert ea[name].shape == eb[name].shape, name
        assert _bits(ea[name]) == _bits(eb[name]), name


def _load(vq: VectorQuantizer, state: dict[str, Any], how: str) -> None:
    """Load ``state`` into ``vq`` directly (``how="direct"``) or through a parent module."""
    if how == "direct":
        vq.load_state_dict(state)
    else:
        nn.Sequential(vq).load_state_dict({f"0.{key}": v for key, v in state.items()})


def test_the_probe_s_load_clears_the_pending_rows() -> None:
    sd0 = copy.deepcopy(_kmeans().state_dict())
    a = _kmeans()
    a(Z[50:55])
    a.load_state_dict(sd0)
    b = _kmeans()
    a(Z[:4])
    b(Z[:4])
    assert not bool(a.initialized)
    assert not bool(b.initialized)
    _assert_same(a, b)


def test_the_probe_s_resumed_quantizer_seeds_as_the_uninterrupted_one() -> None:
    p = _kmeans()
    p(Z[:3])
    saved = copy.deepcopy(p.state_dict())
    r = _kmeans(seed=4)
    r.load_state_dict(saved)
    _assert_same(r, p)
    for batch in (Z[3:10], Z[10:30], Z[30:40]):
        for got, want in zip(r(batch), p(batch), strict=True):
            assert _bits(got) == _bits(want)
        _assert_same(r, p)
    assert bool(r.initialized)


@pytest.mark.parametrize("kwargs", [
    {}, {"metric": "cosine"}, {"dtype": F64}, {"init": "rbfkmeans"}, {"decay": 0.9}])
def test_a_checkpoint_saved_while_seeding_resumes_exactly(kwargs: dict[str, Any]) -> None:
    batches = [Z[:2], Z[2:5], Z[5:7], Z[7:20], Z[20:40]]
    for cut in range(1, len(batches)):
        p = _kmeans(**kwargs)
        for batch in batches[:cut]:
            p(batch)
        buffer = io.BytesIO()
        torch.save(nn.Sequential(p).state_dict(), buffer)  # through a parent, on disk
        buffer.seek(0)
        r = _kmeans(**kwargs)
        nn.Sequential(r).load_state_dict(torch.load(buffer))
        for batch in batches[cut:]:
            for got, want in zip(r(batch), p(batch), strict=True):
                assert _bits(got) == _bits(want)
            _assert_same(r, p)


def test_the_pending_rows_are_in_the_extra_state() -> None:
    vq = _kmeans()
    assert vq.state_dict()["_extra_state"]["pending"].shape == (0, 3)
    vq(Z[:2])
    vq(Z[2:5])
    pending = vq.state_dict()["_extra_state"]["pending"]
    assert torch.equal(pending, Z[:5])
    vq(Z[5:20])  # seeds: nothing waits any more
    assert bool(vq.initialized)
    assert vq.state_dict()["_extra_state"]["pending"].shape == (0, 3)


def test_a_float64_batch_waits_in_float64() -> None:
    vq = _kmeans()
    vq(Z[:3].double())
    pending = vq.state_dict()["_extra_state"]["pending"]
    assert pending.dtype == F64
    assert torch.equal(pending, Z[:3].double())


def test_an_old_checkpoint_without_pending_rows_loads_and_clears_them() -> None:
    old = _kmeans()
    old(Z[60:62])
    state = old.state_dict()
    state["_extra_state"] = {key: v for key, v in state["_extra_state"].items()
                             if key != "pending"}  # as saved before the rows were kept
    for load in ("direct", "parent"):
        vq = _kmeans()
        vq(Z[50:55])  # rows that the load must discard
        _load(vq, state, load)
        assert vq.state_dict()["_extra_state"]["pending"].shape == (0, 3)
        fresh = _kmeans()
        fresh.load_state_dict(state)
        vq(Z[:4])
        fresh(Z[:4])
        _assert_same(vq, fresh)


def test_the_loaded_rows_are_the_module_s_own_copy() -> None:
    p = _kmeans()
    p(Z[:3])
    state = p.state_dict()
    r = _kmeans()
    r.load_state_dict(state)
    state["_extra_state"]["pending"].fill_(7.0)
    assert torch.equal(r.state_dict()["_extra_state"]["pending"], Z[:3])


def test_deepcopy_and_pickle_keep_the_pending_rows() -> None:
    p = _kmeans()
    p(Z[:3])
    for other in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        _assert_same(other, p)
        for got, want in zip(other(Z[3:12]), copy.deepcopy(p)(Z[3:12]), strict=True):
            assert _bits(got) == _bits(want)
        assert bool(other.initialized)


def _pending_state(pending: Any, **extra: Any) -> dict[str, Any]:
    vq = _kmeans()
    vq(Z[:2])
    state = dict(vq.state_dict())
    state["_extra_state"] = {**state["_extra_state"], "pending": pending}
    state.update(extra)
    return state


@pytest.mark.parametrize(("pending", "extra", "error", "message"), [
    (Z[:3, :2], {}, ValueError, "the pending rows in the quantizer's extra state must be a 2-D "
     "tensor (m, 3) of m < 8 rows (dim=3, n_codes=8); got shape (3, 2)"),
    (Z[:8], {}, ValueError, "must be a 2-D tensor (m, 3) of m < 8 rows (dim=3, n_codes=8); "
     "got shape (8, 3)"),
    (Z[:3].reshape(-1), {}, ValueError, "got shape (9,)"),
    (Z[:3].half(), {}, TypeError, "the pending rows in the quantizer's extra state must be a "
     "torch.float32 or torch.float64 tensor; got torch.float16"),
    (torch.zeros(2, 3, dtype=torch.long), {}, TypeError, "got torch.int64"),
    ([[0.0, 1.0, 2.0]], {}, TypeError, "the pending rows in the quantizer's extra state must "
     "be a torch.float32 or torch.float64 tensor; got list"),
    (None, {}, TypeError, "got NoneType"),
    (Z[:3].to_sparse(), {}, TypeError, "must be a dense (strided) tensor; got layout "
     "torch.sparse_coo"),
    (torch.tensor([[0.0, float("nan"), 1.0]]), {}, ValueError,
     "the pending rows in the quantizer's extra state must be finite; got 1 NaN or inf entries"),
    (Z[:3], {"initialized": torch.tensor(True)}, ValueError,
     "the pending rows in the quantizer's extra state must be empty when initialized is True "
     "(the codebook is seeded); got 3 rows"),
])
def test_bad_pending_rows_are_refused_and_change_nothing(pending: Any, extra: dict[str, Any],
                                                         error: type[Exception],
                                                         message: str) -> None:
    state = _pending_state(pending, **extra)
    for load in ("direct", "parent"):
        vq = _kmeans()
        vq(Z[40:43])
        ref = copy.deepcopy(vq)
        with pytest.raises(error, match=re.escape(message)):
            _load(vq, state, load)
        _assert_same(vq, ref)


def test_set_extra_state_refuses_bad_rows_before_setting_anything() -> None:
    vq = _kmeans(temperature=0.3)
    vq(Z[:2])
    ref = copy.deepcopy(vq)
    extra = {"temperature": 0.9, "generator": torch.Generator().get_state(), "pending": Z[:3, :1]}
    with pytest.raises(ValueError, match=re.escape("got shape (3, 1)")):
        vq.set_extra_state(extra)
    assert vq.temperature == 0.3
    _assert_same(vq, ref)


def test_a_refused_load_puts_the_pending_rows_back() -> None:
    vq = _kmeans()
    vq(Z[:3])
    ref = copy.deepcopy(vq)
    other = _kmeans(seed=3)
    other(Z[10:15])
    with pytest.raises(RuntimeError, match=re.escape('Unexpected key(s) in state_dict: "x"')):
        vq.load_state_dict({**other.state_dict(), "x": torch.ones(1)})
    _assert_same(vq, ref)


def test_the_extra_state_keys_are_named_when_wrong() -> None:
    vq = _kmeans()
    with pytest.raises(ValueError, match=re.escape(
            "got the keys ['generator', 'rows', 'temperature'] ('pending', the rows awaiting "
            "the seeding, may be added)")):
        vq.set_extra_state({"temperature": 0.0, "generator": torch.Generator().get_state(),
                            "rows": Z[:2]})


# ---------------------------------------------------------------------------------------------
# 4. the vq experiment leaves the global generator alone
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["rbfkmeans", "rbfkmeans-kmeans"])
def test_train_leaves_the_caller_s_global_generator_as_it_was(method: str) -> None:
    from rbfkmeans.vq.experiment import default_config, train

    cfg = default_config(quick=True, steps=3)
    X = _randn(40, 64).abs().clamp(max=1.0)
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    first, _ = train(method, cfg, X, seed=5)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(99)  # another global state: the same networks
    second, _ = train(method, cfg, X, seed=5)
    for (key, a), b in zip(first.state_dict().items(), second.state_dict().values(),
                           strict=True):
        if isinstance(a, Tensor):
            assert _bits(a) == _bits(b), key


@pytest.mark.parametrize("kwargs", [{}, {"init": "k-means++"}])
def test_an_interrupted_seeding_leaves_the_waiting_rows(kwargs: dict[str, Any],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows had been cleared before the seeding ran: a Ctrl-C inside it lost them (and the
    batch that arrived). Now the quantizer is as it was, and a retry seeds as an uninterrupted
    one."""
    from rbfkmeans import codebook

    interrupted, plain = _kmeans(**kwargs), _kmeans(**kwargs)
    for vq in (interrupted, plain):
        vq(Z[:5])
    before = copy.deepcopy(interrupted.state_dict())

    def stop(*args: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(codebook, "kmeans_plusplus", stop)
        mp.setattr(codebook.RBFKMeans, "fit", stop)
        with pytest.raises(KeyboardInterrupt):
            interrupted(Z[5:12])
    after = interrupted.state_dict()
    assert _bits(after["_extra_state"]["pending"]) == _bits(before["_extra_state"]["pending"])
    assert not bool(interrupted.initialized)
    interrupted(Z[5:12])
    plain(Z[5:12])
    assert bool(plain.initialized)
    _assert_same(interrupted, plain)
