"""``rbfkmeans fit``: files in, labels / memberships / centres out, one-line errors with status 2.

The reference is the estimator itself, called directly on the same array with the same seed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from rbfkmeans import RBFKMeans
from rbfkmeans.cli import main
from rbfkmeans.cli_fit import read_matrix

X, _ = make_blobs(60, n_features=2, centers=3, random_state=0)


def write_csv(path: Path, X: np.ndarray, header: str | None = None) -> Path:
    np.savetxt(path, X, delimiter=",", fmt="%.17g", header=header or "", comments="")
    if header is None:  # np.savetxt writes an empty first line for header=""
        path.write_text(path.read_text().lstrip("\n"))
    return path


def read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    lines = path.read_text().splitlines()
    return lines[0].split(","), np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


def run_ok(argv: list[str], capsys) -> str:
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return out


@pytest.mark.parametrize("header", ["a,b", None])
def test_fit_csv(tmp_path: Path, capsys, header: str | None) -> None:
    src = write_csv(tmp_path / "pts.csv", X, header)
    before = src.read_bytes()
    out = run_ok(["fit", str(src), "--n-clusters", "3", "--out", str(tmp_path / "res")], capsys)
    est = RBFKMeans(3, random_state=0).fit(X)
    res = tmp_path / "res"
    names, labels = read_csv(res / "pts_labels.csv")
    assert names == ["label"]
    np.testing.assert_array_equal(labels.ravel(), est.labels_)
    names, P = read_csv(res / "pts_memberships.csv")
    assert names == ["cluster_0", "cluster_1", "cluster_2"]
    np.testing.assert_array_equal(P, est.predict_proba(X))  # %.17g round-trips float64
    names, C = read_csv(res / "pts_centers.csv")
    assert names == (["a", "b"] if header else ["x0", "x1"])
    np.testing.assert_array_equal(C, est.cluster_centers_)
    assert src.read_bytes() == before
    for field in ("n=60", "d=2", "k=3", f"inertia={est.inertia_:.6g}",
                  f"iterations={est.n_iter_}", f"swaps={est.n_swaps_}", "time=",
                  f"temperatures={est.temperatures_.size}"):
        assert field in out
    assert len(out.splitlines()) <= 4


def test_max_swaps_is_passed_on(tmp_path: Path, capsys) -> None:
    from sklearn.datasets import load_digits

    pts = load_digits().data[::2]  # 899 x 64: the default k=30 fit keeps a swap here
    src = write_csv(tmp_path / "digits.csv", pts, None)
    fits = {s: RBFKMeans(30, random_state=0, max_swaps=s).fit(pts) for s in (0, 10, 30)}
    assert fits[10].n_swaps_ > 0
    assert fits[10].inertia_ < fits[0].inertia_
    for swaps, est in fits.items():
        out = run_ok(["fit", str(src), "-k", "30", "--max-swaps", str(swaps)], capsys)
        assert f"inertia={est.inertia_:.6g}" in out
        assert f"swaps={est.n_swaps_}" in out
    default = run_ok(["fit", str(src), "-k", "30"], capsys)  # the estimator's default
    assert f"inertia={fits[30].inertia_:.6g}" in default


def test_outputs_default_next_to_the_input(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "data.csv", X, "u,v")
    run_ok(["fit", str(src), "-k", "2", "--assignment", "hard", "--random-state", "3"], capsys)
    est = RBFKMeans(2, assignment="hard", random_state=3).fit(X)
    _, C = read_csv(tmp_path / "data_centers.csv")
    np.testing.assert_array_equal(C, est.cluster_centers_)
    _, P = read_csv(tmp_path / "data_memberships.csv")
    np.testing.assert_array_equal(P, np.eye(2)[est.labels_])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fit_npy_writes_npy(tmp_path: Path, capsys, dtype: type) -> None:
    src = tmp_path / "pts.npy"
    np.save(src, X.astype(dtype))
    out = run_ok(["fit", str(src), "-k", "3", "--assignment", "softmax", "--out",
                  str(tmp_path)], capsys)
    est = RBFKMeans(3, assignment="softmax", random_state=0).fit(X.astype(dtype))
    np.testing.assert_array_equal(np.load(tmp_path / "pts_labels.npy"), est.labels_)
    np.testing.assert_array_equal(np.load(tmp_path / "pts_memberships.npy"), est.predict_proba(
        X.astype(dtype)))
    C = np.load(tmp_path / "pts_centers.npy")
    assert C.dtype == dtype
    np.testing.assert_array_equal(C, est.cluster_centers_)
    assert "assignment=softmax" in out
    assert not list(tmp_path.glob("*.csv"))


def test_one_column_inputs(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "v.npy", X[:, 0])
    run_ok(["fit", str(tmp_path / "v.npy"), "-k", "2"], capsys)
    assert np.load(tmp_path / "v_centers.npy").shape == (2, 1)
    write_csv(tmp_path / "c.csv", X[:, :1], "value")
    run_ok(["fit", str(tmp_path / "c.csv"), "-k", "2"], capsys)
    np.testing.assert_allclose(read_csv(tmp_path / "c_centers.csv")[1],
                               np.load(tmp_path / "v_centers.npy"))


def test_csv_dialects(tmp_path: Path) -> None:
    (tmp_path / "s.csv").write_text("# points\nx;y\n\n1;2\n 3 ; 4 \n5;6e0\n")
    A, header = read_matrix(tmp_path / "s.csv", ";")
    assert header == ["x", "y"]
    np.testing.assert_array_equal(A, [[1, 2], [3, 4], [5, 6]])
    (tmp_path / "t.tsv").write_text("1\t2\n3\t4\n")
    A, header = read_matrix(tmp_path / "t.tsv")
    assert header is None
    np.testing.assert_array_equal(A, [[1, 2], [3, 4]])


def test_duplicate_points_warn_on_one_line(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "dup.csv", np.repeat([[0.0, 0.0], [1.0, 1.0]], 4, axis=0))
    assert main(["fit", str(src), "-k", "3"]) == 0
    _, err = capsys.readouterr()
    assert err.startswith("rbfkmeans fit: warning: Number of distinct clusters (2)")
    assert len(err.strip().splitlines()) == 1


BAD_CSV = {
    "words.csv": ("a,b\n1,2\n3,x\n", r"words.csv: line 3, column 2: 'x' is not a number"),
    "ragged.csv": ("1,2\n3,4,5\n", r"ragged.csv: line 2 has 3 values, expected 2"),
    "nan.csv": ("1,2\nnan,4\n", r"nan.csv: line 2, column 1: nan is not finite"),
    "inf.csv": ("a,b\n1,2\n3,-inf\n", r"inf.csv: line 3, column 2: -inf is not finite"),
    "empty.csv": ("", r"empty.csv: no data rows"),
    "header_only.csv": ("a,b\n", r"header_only.csv: no data rows"),
}


@pytest.mark.parametrize("name", BAD_CSV)
def test_bad_csv_exits_2_with_one_line(tmp_path: Path, capsys, name: str) -> None:
    text, message = BAD_CSV[name]
    (tmp_path / name).write_text(text)
    assert main(["fit", str(tmp_path / name), "-k", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("rbfkmeans fit: error: ")
    assert message in err
    assert not list(tmp_path.glob(f"{Path(name).stem}_*"))  # nothing written


@pytest.mark.parametrize(
    ("make", "argv", "message"),
    [
        (None, ["-k", "2"], "missing.csv: no such file"),
        ("csv", ["-k", "61"], "n_samples=60 should be >= n_clusters=61"),
        ("csv", ["-k", "0"], "n_clusters must be an integer >= 1; got 0"),
        ("csv", ["-k", "2", "--max-swaps", "-1"],
         "max_swaps must be an integer >= 0; got -1"),
        ("3d", ["-k", "2"], "expected a 2-D array (n, d); got shape (2, 3, 4)"),
        ("str", ["-k", "2"], "expected an integer or float array; got dtype <U1"),
        ("npynan", ["-k", "2"], "row 1, column 0: nan is not finite"),
        ("folder", ["-k", "2"], "is a folder, not a file"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys, make, argv, message) -> None:
    path = tmp_path / "missing.csv"
    if make == "csv":
        path = write_csv(tmp_path / "pts.csv", X)
    elif make in ("3d", "str", "npynan"):
        path = tmp_path / "a.npy"
        A = {"3d": np.zeros((2, 3, 4)), "str": np.array([["a"], ["b"]]),
             "npynan": np.array([[1.0], [np.nan]])}[make]
        np.save(path, A)
    elif make == "folder":
        path = tmp_path / "dir.csv"
        path.mkdir()
    assert main(["fit", str(path), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("rbfkmeans fit: error: ")
    assert message in err


def test_argparse_errors_exit_2(tmp_path: Path, capsys) -> None:
    for argv in (["fit", "x.csv"], ["fit", "x.csv", "-k", "two"],
                 ["fit", "x.csv", "-k", "2", "--assignment", "argmax"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_installed_console_script(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "rbfkmeans"
    if not exe.exists():
        pytest.skip("the rbfkmeans console script is not installed in this environment")
    src = write_csv(tmp_path / "pts.csv", X, "a,b")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(exe), "fit", str(src), "--n-clusters", "3", "--assignment",
                           "hard"], capture_output=True, text=True, timeout=120, check=False,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert "n=60 d=2 k=3" in proc.stdout
    est = RBFKMeans(3, assignment="hard", random_state=0).fit(X)
    np.testing.assert_array_equal(read_csv(tmp_path / "pts_labels.csv")[1].ravel(), est.labels_)
