"""Loading a state into a :class:`~rbfkmeans.VectorQuantizer` or a
:class:`~rbfkmeans.KMeansLayer`: every value is checked (naming its key) before anything is
copied, the quantizer's extra state is checked whole before any of it is set, and a direct
``load_state_dict`` that raises (torch's errors included) leaves the module as it was, bit for
bit: its parameters (the same objects), buffers, temperature, generator and next forward."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from rbfkmeans import KMeansLayer, VectorQuantizer

F64 = torch.float64


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _trained_quantizer(**kwargs: Any) -> VectorQuantizer:
    """A quantizer whose state is not its initial one: seeded, stepped, temperature 0.3."""
    vq = VectorQuantizer(3, 4, temperature=0.3, dead_code_steps=1, **kwargs)
    for seed in range(3):
        vq(_randn(20, 3, seed=seed))
    return vq


def _bits(t: Tensor) -> bytes:
    return t.detach().cpu().numpy().tobytes()


def _assert_same_state(module: nn.Module, ref: nn.Module) -> None:
    """``module`` holds ``ref``'s state bit for bit, and its next (training) forward gives the
    same output and leaves the same state."""
    for _ in range(2):  # before, and after one forward each
        state, expected = module.state_dict(), ref.state_dict()
        assert list(state) == list(expected)
        for key, value in expected.items():
            if isinstance(value, Tensor):
                assert state[key].dtype == value.dtype, key
                assert _bits(state[key]) == _bits(value), key
            else:
                assert set(state[key]) == set(value)
                for name, v in value.items():
                    got = state[key][name]
                    assert _bits(got) == _bits(v) if isinstance(v, Tensor) else got == v, name
        if isinstance(module, VectorQuantizer):
            z = _randn(12, 3, seed=7)
            for got, want in zip(module(z), ref(z), strict=True):
                assert _bits(got) == _bits(want)
        else:
            X = _randn(6, 3, seed=7)
            assert _bits(module(X)) == _bits(ref(X))


# ---------------------------------------------------------------------------------------------
# 1. the quantizer's values, checked before anything is copied
# ---------------------------------------------------------------------------------------------

NAN_CODES = torch.full((4, 3), math.nan)
BAD_VALUES = [
    ({"codebook": NAN_CODES, "counts": torch.tensor([math.nan, -1.0, 2.0, 0.0], dtype=F64)},
     ValueError, "codebook in the state dict must be finite in torch.float32; got 12 NaN or "
     "inf entries (the quantizer is left as it was)"),
    ({"codebook": torch.full((4, 3), 1e300, dtype=F64)}, ValueError,
     "codebook in the state dict must be finite in torch.float32; got 12 entries beyond its "
     "range (the quantizer is left as it was)"),
    ({"codebook": _randn(4, 3).to_sparse()}, TypeError,
     "codebook in the state dict must be a dense (strided) tensor; got layout "
     "torch.sparse_coo"),
    ({"codebook": _randn(4, 3).to(torch.complex64)}, TypeError,
     "codebook in the state dict must be real; got torch.complex64"),
    ({"counts": torch.tensor([math.nan, -1.0, 2.0, 0.0], dtype=F64)}, ValueError,
     "counts in the state dict must hold finite counts >= 0; got 2 NaN, inf or negative "
     "entries (e.g. nan)"),
    ({"counts": torch.tensor([1.0, -1.0, 2.0, 0.0], dtype=F64)}, ValueError,
     "counts in the state dict must hold finite counts >= 0; got 1 NaN, inf or negative "
     "entries (e.g. -1.0)"),
    ({"counts": torch.tensor([1.0, math.inf, 2.0, 0.0], dtype=F64)}, ValueError,
     "counts in the state dict must hold finite counts >= 0; got 1 NaN, inf or negative "
     "entries (e.g. inf)"),
    ({"unused_steps": torch.tensor([0, -1, 0, 0])}, ValueError,
     "unused_steps in the state dict must hold integers >= 0 (the batches each code went "
     "unused); got 1 bad entries (e.g. -1)"),
    ({"unused_steps": torch.tensor([0.0, 1.5, 0.0, 0.0])}, ValueError,
     "unused_steps in the state dict must hold integers >= 0 (the batches each code went "
     "unused); got 1 bad entries (e.g. 1.5)"),
    ({"unused_steps": torch.tensor([0.0, math.nan, 0.0, 0.0])}, ValueError,
     "unused_steps in the state dict must hold integers >= 0 (the batches each code went "
     "unused); got 1 bad entries (e.g. nan)"),
    ({"initialized": torch.tensor(0.5)}, ValueError,
     "initialized in the state dict must be a flag, True or False; got [0.5]"),
    ({"initialized": torch.tensor(2)}, ValueError,
     "initialized in the state dict must be a flag, True or False; got [2]"),
    ({"_extra_state": {"temperature": 0.7, "generator": torch.zeros(5, dtype=torch.uint8)}},
     ValueError, "the generator in the quantizer's extra state must be the state of a CPU "
     "torch.Generator (5056 bytes); got 5 bytes that torch refuses: Expected a "
     "CPUGeneratorImplState of size 5056 but found the input RNG state size to be 5"),
    ({"_extra_state": {"temperature": -1.0, "generator": torch.Generator().get_state()}},
     ValueError, "temperature must be a finite number >= 0; got -1.0"),
    ({"_extra_state": {}}, ValueError, "the quantizer's extra state must be a dict with keys "
     "'temperature' and 'generator'; got the keys []"),
    ({"_extra_state": None}, TypeError, "the quantizer's extra state must be a dict with keys "
     "'temperature' and 'generator'; got NoneType None"),
]


@pytest.mark.parametrize(("entries", "error", "message"), BAD_VALUES)
@pytest.mark.parametrize("update", ["kmeans", "objective"])
def test_a_bad_value_is_refused_naming_its_key_and_changes_nothing(
        entries: dict[str, Any], error: type[Exception], message: str, update: str) -> None:
    vq = _trained_quantizer(update=update)
    ref = copy.deepcopy(vq)
    with pytest.raises(error, match=re.escape(message)):
        vq.load_state_dict({**vq.state_dict(), **entries})
    _assert_same_state(vq, ref)


@pytest.mark.parametrize(("entries", "error", "message"), BAD_VALUES)
def test_a_parent_module_s_load_checks_the_quantizer_s_values_too(
        entries: dict[str, Any], error: type[Exception], message: str) -> None:
    """A parent's ``load_state_dict`` reaches the quantizer through ``_load_from_state_dict``:
    the same checks, the key with its prefix, nothing of the quantizer copied."""
    vq = _trained_quantizer(update="kmeans")
    ref = copy.deepcopy(vq)
    parent = nn.Sequential(vq)
    state = {**parent.state_dict(), **{f"0.{key}": v for key, v in entries.items()}}
    prefixed = message if message.startswith(("the ", "temperature")) else "0." + message
    with pytest.raises(error, match=re.escape(prefixed)):
        parent.load_state_dict(state)
    _assert_same_state(vq, ref)


def test_the_probe_s_nan_state_no_longer_reaches_the_forward() -> None:
    vq = VectorQuantizer(3, 3)
    vq(_randn(20, 3))
    state = vq.state_dict()
    state["codebook"] = torch.full((3, 3), math.nan)
    state["counts"] = torch.tensor([math.nan, -1.0, 2.0], dtype=F64)
    with pytest.raises(ValueError, match=re.escape("codebook in the state dict must be finite")):
        vq.load_state_dict(state)
    quantized, _, loss = vq(_randn(20, 3, seed=1))
    assert bool(torch.isfinite(quantized).all())
    assert bool(torch.isfinite(loss))


def test_a_zero_code_is_refused_for_cosine() -> None:
    vq = _trained_quantizer(metric="cosine", update="kmeans")
    ref = copy.deepcopy(vq)
    C = vq.codebook.detach().clone()
    C[2] = 0.0
    with pytest.raises(ValueError, match=re.escape(
            "codebook in the state dict must have no zero code with metric='cosine' (a code is "
            "a direction); got code 2 zero (1 in all)")):
        vq.load_state_dict({**vq.state_dict(), "codebook": C})
    _assert_same_state(vq, ref)


# ---------------------------------------------------------------------------------------------
# 2. set_extra_state: all checked before anything is set
# ---------------------------------------------------------------------------------------------

GOOD_GENERATOR = torch.Generator().manual_seed(5).get_state()


@pytest.mark.parametrize(("state", "error", "message"), [
    ({"temperature": 0.7, "generator": torch.zeros(5, dtype=torch.uint8)}, ValueError,
     "the generator in the quantizer's extra state must be the state of a CPU torch.Generator "
     "(5056 bytes); got 5 bytes that torch refuses"),
    ({"temperature": 0.7, "generator": torch.zeros(5056, dtype=torch.uint8)}, ValueError,
     "got 5056 bytes that torch refuses: Invalid mt19937 state"),
    ({"temperature": 0.7, "generator": GOOD_GENERATOR.reshape(2, -1)}, ValueError,
     "a 1-D dense tensor with values is expected; got shape (2, 2528)"),
    ({"temperature": 0.7, "generator": GOOD_GENERATOR.float()}, TypeError,
     "the generator in the quantizer's extra state must be a uint8 tensor "
     "(torch.Generator.get_state()); got torch.float32"),
    ({"temperature": 0.7, "generator": [1, 2]}, TypeError,
     "the generator in the quantizer's extra state must be a uint8 tensor "
     "(torch.Generator.get_state()); got list"),
    ({"temperature": -0.5, "generator": GOOD_GENERATOR}, ValueError,
     "temperature must be a finite number >= 0; got -0.5"),
    ({"temperature": "hot", "generator": GOOD_GENERATOR}, TypeError,
     "temperature must be a real number; got str 'hot'"),
    ({}, ValueError, "the quantizer's extra state must be a dict with keys 'temperature' and "
     "'generator'; got the keys []"),
    ({"temperature": 0.7}, ValueError, "the quantizer's extra state must be a dict with keys "
     "'temperature' and 'generator'; got the keys ['temperature']"),
    ({"temperature": 0.7, "generator": GOOD_GENERATOR, "seed": 3}, ValueError,
     "got the keys ['generator', 'seed', 'temperature']"),
    (torch.ones(2), TypeError, "the quantizer's extra state must be a dict with keys "
     "'temperature' and 'generator'; got Tensor of shape (2,)"),
    (None, TypeError, "the quantizer's extra state must be a dict with keys 'temperature' and "
     "'generator'; got NoneType None"),
    ("abc", TypeError, "got str 'abc'"),
    ([1], TypeError, "got list [1]"),
])
def test_a_bad_extra_state_raises_and_sets_nothing(state: Any, error: type[Exception],
                                                   message: str) -> None:
    vq = _trained_quantizer(update="kmeans")
    ref = copy.deepcopy(vq)
    with pytest.raises(error, match=re.escape(message)):
        vq.set_extra_state(state)
    assert vq.temperature == 0.3
    _assert_same_state(vq, ref)


def test_a_good_extra_state_sets_the_temperature_and_the_generator() -> None:
    vq = _trained_quantizer(update="kmeans")
    vq.set_extra_state({"temperature": torch.tensor(0.7, dtype=F64), "generator": GOOD_GENERATOR})
    assert vq.temperature == 0.7
    assert type(vq.temperature) is float
    assert torch.equal(vq._generator.get_state(), GOOD_GENERATOR)


# ---------------------------------------------------------------------------------------------
# 3. a direct load_state_dict is all or nothing
# ---------------------------------------------------------------------------------------------


def _modules() -> list[nn.Module]:
    return [KMeansLayer(_randn(4, 3), 0.5, "entmax15"),
            KMeansLayer(_randn(4, 3), 0.5, learnable=False, metric="cosine"),
            _trained_quantizer(update="kmeans"),
            _trained_quantizer(update="objective", metric="cosine")]


def _other_state(module: nn.Module) -> dict[str, Any]:
    """A good state of ``module``'s kind with every value different from its own."""
    if isinstance(module, KMeansLayer):
        other = KMeansLayer(_randn(4, 3, seed=9), 2.0, "sparsemax", metric=module.metric)
    else:
        other = VectorQuantizer(3, 4, update=module.update, metric=module.metric, seed=9)
        other(_randn(20, 3, seed=9))
    return dict(other.state_dict())


def _failures(module: nn.Module) -> list[tuple[dict[str, Any], str]]:
    """States that torch refuses after copying what it could, and its message."""
    good = _other_state(module)
    first = next(iter(good))  # the first key torch copies
    short = {key: v for key, v in good.items() if key != "_extra_state"}
    last = [key for key, v in good.items() if isinstance(v, Tensor)][-1]  # the last copied
    longer = torch.zeros(5, *good[last].shape[1:], dtype=good[last].dtype)
    return [({**good, "bogus": torch.ones(1)}, 'Unexpected key(s) in state_dict: "bogus"'),
            (short, 'Missing key(s) in state_dict: "_extra_state"'),
            ({**good, last: longer}, f"size mismatch for {last}: copying a param with shape"),
            ({**good, first: good[first][:2]},
             f"size mismatch for {first}: copying a param with shape")]


@pytest.mark.parametrize("which", range(4))
def test_a_refused_load_leaves_the_module_as_it_was(which: int) -> None:
    module = _modules()[which]
    for state, message in _failures(module):
        ref = copy.deepcopy(module)
        params = list(module.parameters())
        optimizer = torch.optim.SGD(params or [torch.zeros(1, requires_grad=True)], lr=0.1)
        with pytest.raises(RuntimeError, match=re.escape(message)):
            module.load_state_dict(state)
        assert all(p is q for p, q in zip(module.parameters(), params, strict=True))
        if params:
            assert all(p is q for p, q in zip(optimizer.param_groups[0]["params"], params,
                                              strict=True))
        _assert_same_state(module, ref)


@pytest.mark.parametrize("which", range(4))
def test_a_refused_load_with_assign_puts_back_the_same_tensors(which: int) -> None:
    module = _modules()[which]
    ref = copy.deepcopy(module)
    held = dict(module.named_parameters()) | dict(module.named_buffers())
    state = {key: v.clone() if isinstance(v, Tensor) else v
             for key, v in _other_state(module).items()}
    given = {key: _bits(v) for key, v in state.items() if isinstance(v, Tensor)}
    with pytest.raises(RuntimeError, match=re.escape('Unexpected key(s) in state_dict: "x"')):
        module.load_state_dict({**state, "x": torch.ones(1)}, assign=True)
    assert all(t is held[name] for name, t in
               (dict(module.named_parameters()) | dict(module.named_buffers())).items())
    assert given == {key: _bits(state[key]) for key in given}  # the caller's tensors untouched
    _assert_same_state(module, ref)


@pytest.mark.parametrize("which", range(4))
def test_an_interrupted_load_leaves_the_module_as_it_was(which: int) -> None:
    """A ``KeyboardInterrupt`` once torch has copied everything (a post hook) restores it."""
    module = _modules()[which]
    ref = copy.deepcopy(module)

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    handle = module.register_load_state_dict_post_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        module.load_state_dict(_other_state(module))
    handle.remove()
    _assert_same_state(module, ref)


def test_a_good_load_still_copies_into_the_same_tensors() -> None:
    for module in _modules():
        params = list(module.parameters())
        state = _other_state(module)
        module.load_state_dict(state)
        assert all(p is q for p, q in zip(module.parameters(), params, strict=True))
        for key, value in state.items():
            if isinstance(value, Tensor):
                assert _bits(module.state_dict()[key]) == _bits(value), key


def test_sparse_centroids_in_a_layer_s_state_are_named() -> None:
    layer = KMeansLayer(_randn(3, 3), 0.5)
    ref = copy.deepcopy(layer)
    with pytest.raises(TypeError, match=re.escape(
            "centroids in the state dict must be a dense (strided) tensor; got layout "
            "torch.sparse_coo")):
        layer.load_state_dict({**layer.state_dict(), "centroids": _randn(3, 3).to_sparse()})
    _assert_same_state(layer, ref)


def test_the_probe_s_layer_reproducer_keeps_the_centroids() -> None:
    layer = KMeansLayer(_randn(3, 3), 0.5)
    old = layer.centroids.detach().clone()
    state = dict(layer.state_dict(), centroids=torch.zeros(3, 3), bogus=torch.ones(1))
    with pytest.raises(RuntimeError, match=re.escape('Unexpected key(s) in state_dict: "bogus"')):
        layer.load_state_dict(state)
    assert torch.equal(old, layer.centroids.detach())


# ---------------------------------------------------------------------------------------------
# states saved today load as before
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {"update": "kmeans"}, {"update": "objective"}, {"metric": "cosine", "update": "kmeans"},
    {"dtype": F64, "update": "kmeans"}, {"init": "rbfkmeans", "update": "kmeans"}])
def test_saved_states_load_directly_and_through_a_parent(kwargs: dict[str, Any]) -> None:
    vq = _trained_quantizer(**kwargs)
    for load in ("direct", "parent"):
        other = VectorQuantizer(3, 4, dead_code_steps=1, seed=5, **kwargs)
        if load == "direct":
            other.load_state_dict(vq.state_dict())
        else:
            nn.Sequential(other).load_state_dict(nn.Sequential(vq).state_dict())
        _assert_same_state(other, copy.deepcopy(vq))


def test_a_cosine_codebook_an_optimiser_moved_off_the_sphere_loads() -> None:
    """With ``update="objective"`` the optimiser moves the codes off the unit sphere between
    forwards (each forward puts them back): such a state is good."""
    vq = _trained_quantizer(metric="cosine", update="objective")
    optimizer = torch.optim.SGD(vq.parameters(), lr=100.0)
    _, _, loss = vq(_randn(20, 3, seed=4))
    loss.backward()
    optimizer.step()
    norms = vq.codebook.detach().norm(dim=1)
    assert bool(((norms - 1.0).abs() > 0.01).any())
    other = VectorQuantizer(3, 4, metric="cosine", dead_code_steps=1, seed=5)
    other.load_state_dict(vq.state_dict())
    _assert_same_state(other, copy.deepcopy(vq))


def test_layer_refuses_centroids_beyond_its_dtype() -> None:
    """float64 centroids of 1e300 loaded into a float32 layer had become inf silently."""
    layer = KMeansLayer(torch.randn(3, 2), 0.5)
    before = layer.centroids.detach().clone()
    state = layer.state_dict()
    state["centroids"] = torch.full((3, 2), 1e300, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape(
            "centroids in the state dict must be finite in the layer's torch.float32; got "
            "entries beyond its range (largest |c| 1e+300; the layer is left as it was)")):
        layer.load_state_dict(state)
    assert torch.equal(layer.centroids.detach(), before)
    state["centroids"] = torch.full((3, 2), 1e30, dtype=torch.float64)  # within float32: loads
    layer.load_state_dict(state)
    assert torch.equal(layer.centroids.detach(), torch.full((3, 2), 1e30))
