"""Bad input to the helpers of :mod:`rbfkmeans.distributed`: ``gather_rows``,
``broadcast_module``, ``process_group``, ``local_device`` and ``shard`` say what is wrong, with
the parameter's name and the value, on every rank, before any data moves (a mismatch had aborted
a rank or returned garbage), and leave the caller's data alone.

Two gloo processes (one group, every scenario, a minute at most) check what the ranks must agree
on; the rest runs in this process, with the environment or CUDA's answers patched where needed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import rbfkmeans as rk
from _ranks import run_ranks, save_rank
from rbfkmeans.distributed import (
    broadcast_module,
    gather_rows,
    local_device,
    process_group,
    shard,
)

pytestmark = pytest.mark.skipif(
    not dist.is_available(), reason="torch.distributed is not available"
)

WORLD = 2


def _two_params(rank: int) -> nn.Module:
    """Parameters ``a`` and ``b`` of the same shape, registered in the other order on rank 1."""
    m = nn.Module()
    names = ["a", "b"] if rank == 0 else ["b", "a"]
    for name in names:
        m.register_parameter(name, nn.Parameter(torch.full((2,), float(rank))))
    return m


def _batch_norm(rank: int) -> dict[str, Any]:
    """A module with buffers, broadcast from rank 1: every rank ends with rank 1's values."""
    m = nn.BatchNorm1d(3)
    with torch.no_grad():
        m.running_mean += rank + 1
        m.num_batches_tracked += 5 * rank
        m.bias += rank
    broadcast_module(m, src=1)
    return {"running_mean": m.running_mean.tolist(), "tracked": int(m.num_batches_tracked),
            "bias": m.bias.tolist()}


def _scenarios(rank: int) -> dict[str, Callable[[], Any]]:
    """name: what rank ``rank`` runs (both ranks run every one, in this order)."""
    def rows(value: Any) -> Callable[[], Any]:
        return lambda: gather_rows(value).tolist()

    def module(value: Any, src: int = 0) -> Callable[[], Any]:
        return lambda: [p.tolist() for p in broadcast_module(value, src).parameters()]

    torch.manual_seed(rank)
    return {
        # gather_rows: the ranks disagree on what a row is
        "float32 vs float64": rows(torch.arange(6.0, dtype=[torch.float32, torch.float64][rank])
                                   .reshape(3, 2)),
        "int64 vs int32": rows(np.arange(3, dtype=[np.int64, np.int32][rank])),
        "[] vs [1, 2]": rows([[], [1, 2]][rank]),
        "width 2 vs 3": rows(torch.ones(3, 2 + rank)),
        "(3,) vs (3, 1)": rows([torch.ones(3), torch.ones(3, 1)][rank]),
        # gather_rows: not valid on one rank or on both
        "None on rank 1": rows([torch.ones(2), None][rank]),
        "0-d": rows(torch.tensor(float(rank))),
        "DataFrame": rows(pd.DataFrame(np.ones((3, 2)))),
        # gather_rows: valid, as before
        "list and tensor": rows([[1.0, 2.0], torch.tensor([3.0, 4.0])][rank]),
        "no rows on rank 0": rows(torch.full((3 * rank, 2), 2.0)),
        "labels": rows(np.arange(2 + rank) + 10 * rank),
        # broadcast_module: the ranks' modules or src differ
        "Linear(2, 3) vs Linear(2, 4)": module(nn.Linear(2, 3 + rank)),
        "float32 vs float64 parameters": module(
            nn.Linear(2, 2).to([torch.float32, torch.float64][rank])),
        "registration order": module(_two_params(rank)),
        "no bias on rank 1": module(nn.Linear(2, 3, bias=rank == 0)),
        "not a module on rank 1": module([nn.Linear(2, 2), "x"][rank]),
        "src out of range": module(nn.Linear(2, 2), src=2),
        "src is a bool": module(nn.Linear(2, 2), src=True),  # type: ignore[arg-type]
        "src differs": module(nn.Linear(2, 2), src=rank),
        # broadcast_module: valid, as before
        "buffers from rank 1": lambda: _batch_norm(rank),
    }


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    try:
        with process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                           world_size=WORLD, timeout_s=30):
            for name, run in _scenarios(rank).items():
                try:
                    results[name] = ("ok", run())
                except Exception as exc:  # recorded, compared by the tests
                    results[name] = ("error", type(exc).__name__, str(exc))
            dist.destroy_process_group()  # the caller ends the group inside the block
        results["exit"] = "ok"
    except Exception as exc:
        results["exit"] = ("error", type(exc).__name__, str(exc))
    save_rank(out_dir, rank, results)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    return run_ranks(_worker, tmp_path_factory.mktemp("helpers"), world=WORLD,
                     start_method=method, timeout_s=60)


def _same_error(ranks: list[dict[str, Any]], name: str, cls: str, *parts: str) -> None:
    """Both ranks raised ``cls`` with one message holding every one of ``parts``."""
    assert ranks[0][name] == ranks[1][name], name
    kind, got_cls, text = ranks[0][name]
    assert (kind, got_cls) == ("error", cls), text
    for part in parts:
        assert part in text, (part, text)


# ---------------------------------------------------------------------------------------------
# under a group of two ranks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("float32 vs float64", ["rank 0: torch.float32 of shape (3, 2)",
                                "rank 1: torch.float64 of shape (3, 2)"]),
        ("int64 vs int32", ["rank 0: torch.int64 of shape (3,)",
                            "rank 1: torch.int32 of shape (3,)"]),
        ("[] vs [1, 2]", ["rank 0: torch.float32 of shape (0,)",
                          "rank 1: torch.int64 of shape (2,)"]),
        ("width 2 vs 3", ["rank 0: torch.float32 of shape (3, 2)",
                          "rank 1: torch.float32 of shape (3, 3)"]),
        ("(3,) vs (3, 1)", ["rank 0: torch.float32 of shape (3,)",
                            "rank 1: torch.float32 of shape (3, 1)"]),
    ],
)
def test_gather_rows_of_different_dtypes_or_shapes_raises_on_every_rank(
        ranks: list[dict[str, Any]], name: str, parts: list[str]) -> None:
    """Once only the row counts were gathered: float32 beside float64 aborted a rank and gave
    the other 5.3e-315, (3,) beside (3, 1) returned results of different shapes."""
    _same_error(ranks, name, "ValueError", "t must have the same dtype and shape after the rows "
                "on every rank", *parts)


def test_gather_rows_not_valid_on_one_rank_raises_on_every_rank(
        ranks: list[dict[str, Any]]) -> None:
    kind, cls, text = ranks[1]["None on rank 1"]
    assert (kind, cls) == ("error", "TypeError")
    assert "t must be a tensor, a NumPy array or a list; got NoneType" in text
    assert ranks[0]["None on rank 1"] == (
        "error", "ValueError", "t was rejected on rank(s) [1] (see the error there)")
    _same_error(ranks, "0-d", "ValueError", "t must have at least one dimension (its rows); "
                "got a 0-d Tensor")
    _same_error(ranks, "DataFrame", "TypeError", "got DataFrame", ".to_numpy()")


def test_gather_rows_valid_input_as_before(ranks: list[dict[str, Any]]) -> None:
    for res in ranks:
        assert res["list and tensor"] == ("ok", [1.0, 2.0, 3.0, 4.0])
        assert res["no rows on rank 0"] == ("ok", [[2.0, 2.0]] * 3)
        assert res["labels"] == ("ok", [0, 1, 10, 11, 12])


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("Linear(2, 3) vs Linear(2, 4)", ["rank 1 has parameter weight (4, 2) torch.float32 "
                                          "where rank 0 (src) has parameter weight (3, 2) "
                                          "torch.float32"]),
        ("float32 vs float64 parameters", ["rank 1 has parameter weight (2, 2) torch.float64 "
                                           "where rank 0 (src) has parameter weight (2, 2) "
                                           "torch.float32"]),
        ("registration order", ["rank 1 has parameter b (2,) torch.float32 where rank 0 (src) "
                                "has parameter a (2,) torch.float32"]),
        ("no bias on rank 1", ["rank 1 has nothing more where rank 0 (src) has parameter "
                               "bias (3,) torch.float32"]),
    ],
)
def test_broadcast_module_of_different_modules_raises_on_every_rank(
        ranks: list[dict[str, Any]], name: str, parts: list[str]) -> None:
    """Tensors were paired by position: different shapes, dtypes or orders gave silently wrong
    modules, a missing bias a hang."""
    _same_error(ranks, name, "ValueError", "module must have the same parameters and buffers "
                "(names, shapes and dtypes, in the order registered) on every rank", *parts)


def test_broadcast_module_checks_module_and_src_on_every_rank(
        ranks: list[dict[str, Any]]) -> None:
    kind, cls, text = ranks[1]["not a module on rank 1"]
    assert (kind, cls) == ("error", "TypeError")
    assert "module must be a torch.nn.Module; got str 'x'" in text
    assert ranks[0]["not a module on rank 1"] == (
        "error", "ValueError", "module was rejected on rank(s) [1] (see the error there)")
    _same_error(ranks, "src out of range", "ValueError", "src must be an integer in [0, 2); got 2")
    _same_error(ranks, "src is a bool", "ValueError", "src must be an integer in [0, 2); got True")
    _same_error(ranks, "src differs", "ValueError",
                "src must be the same on every rank; got rank 0: 0, rank 1: 1")


def test_broadcast_module_valid_input_as_before(ranks: list[dict[str, Any]]) -> None:
    for res in ranks:
        assert res["buffers from rank 1"] == (
            "ok", {"running_mean": [2.0] * 3, "tracked": 5, "bias": [1.0] * 3})


def test_process_group_leaves_a_group_the_block_destroyed(ranks: list[dict[str, Any]]) -> None:
    """Destroying the group inside the block was 'AssertionError: Process group cannot be None'
    on leaving it."""
    for res in ranks:
        assert res["exit"] == "ok"


# ---------------------------------------------------------------------------------------------
# in one process
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "cls", "message"),
    [
        (None, TypeError, "t must be a tensor, a NumPy array or a list; got NoneType"),
        (pd.DataFrame(np.ones((3, 2))), TypeError, "got DataFrame (use .to_numpy())"),
        (sp.csr_matrix(np.eye(2)), TypeError, "got csr_matrix (use .toarray())"),
        (np.array([{}, 1], dtype=object), TypeError, "t must hold numbers of one dtype"),
        (torch.tensor(3.0), ValueError, "t must have at least one dimension (its rows); "
                                        "got a 0-d Tensor"),
        (torch.eye(2).to_sparse(), TypeError, "t must be dense; got layout torch.sparse_coo"),
    ],
)
def test_gather_rows_rejects(t: Any, cls: type[Exception], message: str) -> None:
    with pytest.raises(cls, match=re.escape(message)):
        gather_rows(t)


def test_gather_rows_returns_a_copy_without_a_group() -> None:
    """Without a group the result was the caller's array: writing into it changed the input."""
    for t in [np.arange(4.0), torch.arange(4.0)]:
        out = gather_rows(t)
        out[0] = -1.0
        assert t[0] == 0.0
    np.testing.assert_array_equal(gather_rows(np.arange(4.0)[::-1]), [3.0, 2.0, 1.0, 0.0])


def test_broadcast_module_checks_without_a_group() -> None:
    """Without a group a non-module came back unchanged and any src passed."""
    with pytest.raises(TypeError, match=re.escape("module must be a torch.nn.Module; got "
                                                   "str 'x'")):
        broadcast_module("x")  # type: ignore[arg-type]
    layer = rk.KMeansLayer(torch.zeros(2, 2))
    for src in [1, -1, True, "0"]:
        with pytest.raises(ValueError, match=re.escape(f"src must be an integer in [0, 1); got "
                                                       f"{src!r}")):
            broadcast_module(layer, src)  # type: ignore[arg-type]
    assert broadcast_module(layer, np.int64(0)) is layer  # type: ignore[arg-type]


class _Stop(Exception):
    """Raised by the stand-in for ``init_process_group``: the arguments passed the checks."""


@pytest.fixture
def no_init(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """``torch.distributed.init_process_group`` records its arguments and raises ``_Stop``."""
    calls: list[tuple[Any, dict[str, Any]]] = []

    def init(backend: Any, **kwargs: Any) -> None:
        calls.append((backend, kwargs))
        raise _Stop

    monkeypatch.setattr(dist, "init_process_group", init)
    for name in ["RANK", "WORLD_SIZE", "LOCAL_RANK"]:
        monkeypatch.delenv(name, raising=False)
    return calls


@pytest.mark.parametrize(
    ("kwargs", "cls", "message"),
    [
        *[({"timeout_s": v}, ValueError, f"timeout_s must be a finite number of seconds > 0; got "
                                         f"{v!r}") for v in [float("nan"), float("inf"), "1",
                                                             -1.0, 0, True]],
        ({"backend": 1}, TypeError, "backend must be a str (a torch.distributed backend name); "
                                    "got int 1"),
        ({"backend": "nccl"}, ValueError, "backend 'nccl' needs CUDA, which is not available"),
        ({"rank": True, "world_size": 2}, ValueError, "rank must be an integer >= 0; got True"),
        ({"rank": -1, "world_size": 2}, ValueError, "rank must be an integer >= 0; got -1"),
        ({"rank": 0, "world_size": 0}, ValueError, "world_size must be an integer >= 1; got 0"),
        ({"rank": 2, "world_size": 2}, ValueError, "rank must be less than world_size; got "
                                                   "rank=2 and world_size=2"),
    ],
)
def test_process_group_rejects(no_init: list[Any], monkeypatch: pytest.MonkeyPatch,
                               kwargs: dict[str, Any], cls: type[Exception],
                               message: str) -> None:
    """These went on to torch (a NaN or negative timeout, rank >= world_size waiting for the
    timeout, nccl on a machine without CUDA asking for set_device(cpu))."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    kwargs = {"backend": "gloo", "init_method": "tcp://127.0.0.1:1", **kwargs}
    with pytest.raises(cls, match=re.escape(message)), process_group(**kwargs):
        pass
    assert no_init == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "the environment variable RANK must be an integer >= "
                                           "0; got 'x'"),
        ({"RANK": "0", "WORLD_SIZE": "two"}, "the environment variable WORLD_SIZE must be an "
                                             "integer >= 1; got 'two'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK must be less than WORLD_SIZE; got RANK=2 and "
                                           "WORLD_SIZE=2"),
        ({"RANK": "3"}, "RANK must be less than world_size; got RANK=3 and world_size=2"),
    ],
)
def test_process_group_checks_the_environment(no_init: list[Any],
                                              monkeypatch: pytest.MonkeyPatch,
                                              env: dict[str, str], message: str) -> None:
    """RANK='x' was torch's 'invalid literal for int()'; RANK >= WORLD_SIZE waited for the
    timeout."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    kwargs = {"world_size": 2} if "WORLD_SIZE" not in env else {}
    with pytest.raises(ValueError, match=re.escape(message)), \
            process_group("gloo", timeout_s=2, **kwargs):
        pass
    assert no_init == []


def test_process_group_takes_what_torch_takes(no_init: list[Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Backend names in any case (as torch compares them), numbers of any real type."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(_Stop), process_group("GLOO", timeout_s=np.float64(2.5)):
        pass
    with pytest.raises(_Stop), process_group("gloo", init_method="tcp://127.0.0.1:1",
                                             rank=np.int64(1), world_size=2, timeout_s=3):
        pass
    assert [backend for backend, _ in no_init] == ["GLOO", "gloo"]
    assert no_init[0][1]["timeout"].total_seconds() == 2.5
    assert no_init[1][1]["rank"] == 1


@pytest.mark.parametrize(
    ("local_rank", "devices", "expected"),
    [
        (None, 2, "cuda:0"), ("1", 2, "cuda:1"), ("1", 1, "cuda:0"),  # one visible GPU each
        ("x", 2, "the environment variable LOCAL_RANK must be an integer >= 0; got 'x'"),
        ("-1", 2, "the environment variable LOCAL_RANK must be an integer >= 0; got '-1'"),
        ("3", 2, "cuda:1"),  # more processes than GPUs: they share them
    ],
)
def test_local_device_reads_local_rank(monkeypatch: pytest.MonkeyPatch, local_rank: str | None,
                                       devices: int, expected: str) -> None:
    """LOCAL_RANK='x' was 'invalid literal for int()', and a negative one wrapped silently;
    more processes than GPUs share them."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    if expected.startswith("cuda"):
        assert local_device() == torch.device(expected)
    else:
        with pytest.raises(ValueError, match=re.escape(expected)):
            local_device()


@pytest.mark.parametrize("fmt", ["coo", "dia", "bsr"])
def test_shard_of_a_sparse_matrix_without_row_slicing(fmt: str) -> None:
    """shard(coo_matrix) was "'coo_matrix' object is not subscriptable"."""
    X = np.arange(20.0).reshape(10, 2)
    block = shard(sp.csr_matrix(X).asformat(fmt), 3, 1)
    assert sp.issparse(block)
    np.testing.assert_array_equal(block.toarray(), X[4:7])


def test_shard_of_rows_that_cannot_be_sliced() -> None:
    class Rows:
        shape = (4, 2)

    with pytest.raises(TypeError, match=re.escape("X must support slicing its rows "
                                                  "(X[start:stop]); a Rows does not")):
        shard(Rows(), 2, 0)  # type: ignore[type-var]
