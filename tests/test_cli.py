"""``rbfkmeans fit``: files in, labels / memberships / centres out, one-line errors with status 2.

The reference is the estimator itself, called directly on the same array with the same seed.
"""

from __future__ import annotations

import csv
import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from rbfkmeans import RBFKMeans
from rbfkmeans.cli import main
from rbfkmeans.cli_fit import read_matrix
from rbfkmeans.table_file import InputError, header_warning

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
    expected = "header: a, b" if header else "no header"
    assert out.splitlines()[0] == f"read {src}: 60 rows x 2 columns, {expected}"
    assert len(out.splitlines()) <= 4


def test_max_swaps_is_passed_on(tmp_path: Path, capsys) -> None:
    from sklearn.datasets import load_digits

    pts = load_digits().data[::2]  # 899 x 64: the default k=30 fit keeps a swap here
    src = write_csv(tmp_path / "digits.csv", pts, None)
    fits = {s: RBFKMeans(30, random_state=0, max_swaps=s).fit(pts) for s in (0, 10, 30)}
    assert fits[10].n_swaps_ > 0
    assert fits[10].inertia_ < fits[0].inertia_
    for swaps, est in fits.items():
        out = run_ok(["fit", str(src), "-k", "30", "--max-swaps", str(swaps), "--force"],
                     capsys)
        assert f"inertia={est.inertia_:.6g}" in out
        assert f"swaps={est.n_swaps_}" in out
    default = run_ok(["fit", str(src), "-k", "30", "--force"], capsys)  # the estimator's
    assert f"inertia={fits[30].inertia_:.6g}" in default


def test_schedule_and_n_init_are_passed_on(tmp_path: Path, capsys) -> None:
    from sklearn.datasets import load_digits

    pts = load_digits().data[::2]
    src = write_csv(tmp_path / "digits.csv", pts, None)
    for argv, kw in ((["--schedule", "k-means++", "--n-init", "3"],
                      {"schedule": "k-means++", "n_init": 3}),
                     (["--n-init", "2"], {"n_init": 2}),
                     (["--schedule", "geometric"], {"schedule": "geometric"})):
        est = RBFKMeans(10, random_state=0, **kw).fit(pts)
        out = run_ok(["fit", str(src), "-k", "10", "--force", *argv], capsys)
        assert f"inertia={est.inertia_:.6g}" in out
        assert f"temperatures={est.temperatures_.size}" in out
    assert "temperatures=0 (a k-means++ start, not annealed)" in run_ok(
        ["fit", str(src), "-k", "10", "--force", "--schedule", "k-means++"], capsys)
    with pytest.raises(SystemExit):
        main(["fit", str(src), "-k", "10", "--n-init", "three"])
    assert ("--n-init: must be 'auto' or an integer from 1 to 1000; got 'three'"
            in capsys.readouterr().err)


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
    assert out.startswith(f"read {src}: 60 rows x 2 columns, {np.dtype(dtype)} array\n")
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
    "gap_first.csv": ("1,,3\n4,5,6\n", r"gap_first.csv: line 1, column 2: empty field"),
    "gap_lead.csv": (",2,3\n4,5,6\n", r"gap_lead.csv: line 1, column 1: empty field"),
    "gap_later.csv": ("a,b\n1,2\n3,\n", r"gap_later.csv: line 3, column 2: empty field"),
    "commas_only.csv": ("1,2\n,\n3,4\n", r"commas_only.csv: line 2, column 1: empty field"),
    # a quoted empty field in a file of one column: a missing value (it had been skipped as a
    # blank line, the rows after it moving up one)
    "quoted_empty.csv": ('1\n""\n3\n', r"quoted_empty.csv: line 2, column 1: empty field"),
    "narrow_header.csv": ("a,b,c\n1,2\n", r"narrow_header.csv: line 1: the header has 3 names, "
                          r"the rows 2 values"),
    "multiline.csv": ('"a\nb",c\n1,2\n3,x\n', r"multiline.csv: line 4, column 2: 'x' is not a "
                      r"number"),
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
        ("csv", ["-k", "2", "--n-init", "0"], "n_init must be 'auto' or an integer >= 1; got 0"),
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
    assert out in ("", f"read {path}: 60 rows x 2 columns, no header\n")  # read, then refused
    assert err.count("\n") == 1
    assert err.startswith("rbfkmeans fit: error: ")
    assert message in err


def test_argparse_errors_exit_2(tmp_path: Path, capsys) -> None:
    for argv in (["fit", "x.csv"], ["fit", "x.csv", "-k", "two"],
                 ["fit", "x.csv", "-k", "2", "--assignment", "argmax"],
                 ["fit", "x.csv", "-k", "2", "--n-init", "three"],
                 ["fit", "x.csv", "-k", "2", "--schedule", "linear"]):
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


# -- outputs: names, existing files, atomic writes -----------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (hidden ones too) with its bytes (``None`` for a folder)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def fails_with(argv: list[str], capsys, *parts: str) -> str:
    """Run ``argv``, expect status 2 and one error line holding each of ``parts``; return stdout."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1
    assert err.startswith("rbfkmeans fit: error: ")
    for part in parts:
        assert part in err
    return out


def test_outputs_named_from_the_full_stem(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "data.v2.csv", X, "a,b")
    (tmp_path / "data.csv").write_bytes(b"the user's own file\n")
    run_ok(["fit", str(src), "-k", "3"], capsys)
    est = RBFKMeans(3, random_state=0).fit(X)
    assert (tmp_path / "data.csv").read_bytes() == b"the user's own file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "data.csv", "data.v2.csv", "data.v2_centers.csv", "data.v2_labels.csv",
        "data.v2_memberships.csv"]
    np.testing.assert_array_equal(read_csv(tmp_path / "data.v2_labels.csv")[1].ravel(),
                                  est.labels_)
    np.testing.assert_array_equal(read_csv(tmp_path / "data.v2_centers.csv")[1],
                                  est.cluster_centers_)
    mask = os.umask(0o022)
    os.umask(mask)
    mode = stat.S_IMODE((tmp_path / "data.v2_centers.csv").stat().st_mode)
    assert mode == 0o666 & ~mask  # as a plain open() would create it
    np.save(tmp_path / "m.v1.npy", X)
    run_ok(["fit", str(tmp_path / "m.v1.npy"), "-k", "3"], capsys)
    np.testing.assert_array_equal(np.load(tmp_path / "m.v1_centers.npy"), est.cluster_centers_)
    assert not (tmp_path / "m.npy").exists()


def test_existing_outputs_need_force(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "pts.csv", X)
    (tmp_path / "pts_centers.csv").write_bytes(b"precious\n")
    (tmp_path / "pts_labels.csv").write_bytes(b"also precious\n")
    before = snapshot(tmp_path)
    out = fails_with(["fit", str(src), "-k", "3"], capsys,
                     f"{tmp_path / 'pts_labels.csv'}, {tmp_path / 'pts_centers.csv'} already exist",
                     "pass --force")
    assert out == ""  # refused before the file was read, let alone fitted
    assert snapshot(tmp_path) == before
    run_ok(["fit", str(src), "-k", "3", "--force"], capsys)
    est = RBFKMeans(3, random_state=0).fit(X)
    np.testing.assert_array_equal(read_csv(tmp_path / "pts_centers.csv")[1], est.cluster_centers_)
    np.testing.assert_array_equal(read_csv(tmp_path / "pts_labels.csv")[1].ravel(), est.labels_)
    assert (tmp_path / "pts.csv").read_bytes() == before["pts.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # no temporaries or kept copies left
        "pts.csv", "pts_centers.csv", "pts_labels.csv", "pts_memberships.csv"]


def test_the_input_is_never_overwritten(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "pts.csv", X)
    try:
        (tmp_path / "pts_labels.csv").symlink_to(src)
    except OSError:
        pytest.skip("no symbolic links here")
    before = snapshot(tmp_path)
    fails_with(["fit", str(src), "-k", "3", "--force"], capsys,
               f"{tmp_path / 'pts_labels.csv'}: is the input file, which is never overwritten")
    assert snapshot(tmp_path) == before
    assert (tmp_path / "pts_labels.csv").is_symlink()


def test_a_folder_in_the_way_is_an_error_even_with_force(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "pts.csv", X)
    (tmp_path / "pts_memberships.csv").mkdir()
    before = snapshot(tmp_path)
    out = fails_with(["fit", str(src), "-k", "3", "--force"], capsys,
                     f"{tmp_path / 'pts_memberships.csv'}: is a folder")
    assert out == ""
    assert snapshot(tmp_path) == before


def test_out_must_be_a_folder(tmp_path: Path, capsys) -> None:
    src = write_csv(tmp_path / "pts.csv", X)
    (tmp_path / "notes.txt").write_text("not a folder\n")
    before = snapshot(tmp_path)
    for out_arg in ("notes.txt", "notes.txt/res"):
        out = fails_with(["fit", str(src), "-k", "3", "--out", str(tmp_path / out_arg)], capsys,
                         f"{tmp_path / 'notes.txt'}: not a folder")
        assert out == ""
    assert snapshot(tmp_path) == before


def fail_on_call(monkeypatch, owner: object, name: str, when: int) -> None:
    """Make ``owner.name`` raise ENOSPC on its ``when``-th call, and work as before otherwise."""
    original = getattr(owner, name)
    calls = []

    def failing(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == when:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


@pytest.mark.parametrize("where", ["write", "move", "move-force", "new-folder"])
def test_a_failed_write_leaves_the_folder_as_it_was(tmp_path: Path, capsys, monkeypatch,
                                                     where: str) -> None:
    src = tmp_path / "pts.npy"
    np.save(src, X)
    argv = ["fit", str(src), "-k", "3"]
    if where == "move-force":
        for what in ("labels", "memberships", "centers"):
            (tmp_path / f"pts_{what}.npy").write_bytes(f"old {what}".encode())
        argv.append("--force")
    if where == "new-folder":
        argv += ["--out", str(tmp_path / "a" / "b")]
    before = snapshot(tmp_path)
    if where in ("write", "new-folder"):
        fail_on_call(monkeypatch, np, "save", 3)  # the centres, after labels and memberships
    else:
        fail_on_call(monkeypatch, os, "replace", 3)  # two outputs are already in place
    out = fails_with(argv, capsys, "_centers.npy: cannot write", os.strerror(errno.ENOSPC))
    assert out.startswith(f"read {src}: 60 rows x 2 columns")
    assert snapshot(tmp_path) == before  # with --force too: the replaced files are put back


def test_an_output_made_during_the_fit_is_not_overwritten(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    src = write_csv(tmp_path / "pts.csv", X)
    original = RBFKMeans.fit

    def fit_then_save(self: RBFKMeans, *args: object, **kwargs: object) -> RBFKMeans:
        (tmp_path / "pts_memberships.csv").write_bytes(b"saved meanwhile\n")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RBFKMeans, "fit", fit_then_save)
    fails_with(["fit", str(src), "-k", "3"], capsys,
               f"{tmp_path / 'pts_memberships.csv'} already exists; pass --force")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pts.csv", "pts_memberships.csv"]
    assert (tmp_path / "pts_memberships.csv").read_bytes() == b"saved meanwhile\n"


# -- CSV reading and writing ----------------------------------------------------------------------


def test_header_detection(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text(",a,b\n0,1.5,2\n1,3,4\n")  # an unnamed index column
    A, header = read_matrix(tmp_path / "h.csv")
    assert header == ["", "a", "b"]
    np.testing.assert_array_equal(A, [[0, 1.5, 2], [1, 3, 4]])
    (tmp_path / "n.csv").write_text("  \n# note\n1e3,-2\n 3 ,4\n")  # numbers only: no header
    A, header = read_matrix(tmp_path / "n.csv")
    assert header is None
    np.testing.assert_array_equal(A, [[1000, -2], [3, 4]])
    (tmp_path / "m.csv").write_text("id,1\n5,6\n")  # one word makes a header
    assert read_matrix(tmp_path / "m.csv")[1] == ["id", "1"]


def test_quoted_header_round_trips(tmp_path: Path, capsys) -> None:
    header = ["a,b", "c", 'say "hi"']
    pts = np.column_stack([X, X[:, 0] * 0.1])
    with (tmp_path / "q.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(pts.tolist())
    out = run_ok(["fit", str(tmp_path / "q.csv"), "-k", "3"], capsys)
    assert out.splitlines()[0] == (f"read {tmp_path / 'q.csv'}: 60 rows x 3 columns, "
                                   'header: "a,b", c, "say "hi""')
    est = RBFKMeans(3, random_state=0).fit(pts)
    with (tmp_path / "q_centers.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == header
    assert [[float(v) for v in r] for r in rows[1:]] == est.cluster_centers_.tolist()
    with (tmp_path / "q_labels.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["label"]
    assert [r[0] for r in rows[1:]] == [str(int(v)) for v in est.labels_]
    with (tmp_path / "q_memberships.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["cluster_0", "cluster_1", "cluster_2"]
    assert [[float(v) for v in r] for r in rows[1:]] == est.predict_proba(pts).tolist()


@pytest.mark.parametrize("value", ["", "ab", '"', "\n", ".", "-", "5", "e"])
def test_bad_delimiter_exits_2(tmp_path: Path, capsys, value: str) -> None:
    src = write_csv(tmp_path / "pts.csv", X)
    out = fails_with(["fit", str(src), "-k", "3", "--delimiter", value], capsys,
                     "--delimiter must be one character", f"got {value!r}")
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pts.csv"]


@pytest.mark.parametrize(("value", "sep"), [("tab", "\t"), ("\\t", "\t"), (";", ";"),
                                            (" ", " ")])
def test_delimiters(tmp_path: Path, capsys, value: str, sep: str) -> None:
    src = tmp_path / "pts.txt"
    np.savetxt(src, X, delimiter=sep, fmt="%.17g", header=sep.join(["u", "v"]), comments="")
    run_ok(["fit", str(src), "-k", "3", "--delimiter", value], capsys)
    est = RBFKMeans(3, random_state=0).fit(X)
    names, C = read_csv(tmp_path / "pts_centers.csv")
    assert names == ["u", "v"]
    np.testing.assert_array_equal(C, est.cluster_centers_)


def test_extreme_values_fit_and_no_file_holds_a_nan(tmp_path: Path) -> None:
    """float32 data near 1e30 fitted, then wrote a file of NaN memberships with exit 0; now the
    fit computes in a rescaled frame and every output is finite, and a non-finite result
    would be an error with nothing written."""
    X, _ = make_blobs(60, 3, centers=3, random_state=0)
    src = tmp_path / "huge.npy"
    np.save(src, (X * 1e30).astype(np.float32))
    assert main(["fit", str(src), "-k", "3"]) == 0
    for part in ("labels", "memberships", "centers"):
        assert np.isfinite(np.load(tmp_path / f"huge_{part}.npy")).all()


def test_table_file_functions_name_a_bad_argument() -> None:
    from rbfkmeans.table_file import check_input, is_npy, parse_delimiter

    with pytest.raises(TypeError, match=r"path must be a str or a pathlib\.Path; got int"):
        read_matrix(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"path must be a str or a pathlib\.Path; got NoneType"):
        check_input(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="delimiter must be a string or None; got int"):
        parse_delimiter(5, Path("a.csv"))  # type: ignore[arg-type]
    assert is_npy("A.NPY")
    assert parse_delimiter(None, "b.TSV") == "\t"  # type: ignore[arg-type]


# -- files that are not what they seem ------------------------------------------------------------


@pytest.mark.parametrize(("content", "what"), [
    (b"", "no NumPy header: empty"),
    (b"1,2\n3,4\n", "no NumPy header: a text or other file"),
    (b"PK\x03\x04rest", "a zip archive"),
    (b"\x1f\x8b\x08rest", "a gzip-compressed file"),
])
def test_npy_names_files_without_a_numpy_header(tmp_path: Path, capsys, content: bytes,
                                                what: str) -> None:
    """An empty .npy raised numpy's EOFError as a traceback; a CSV, a zip or a gzip file named
    .npy got numpy's message about pickled data."""
    (tmp_path / "x.npy").write_bytes(content)
    with pytest.raises(InputError, match=f"not a .npy array .*{what}"):
        read_matrix(tmp_path / "x.npy")
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_npy_refuses_timedelta_arrays(tmp_path: Path) -> None:
    """timedelta64 passed the integer check (NumPy counts it as one) and was fitted on its raw
    counts, the unit lost."""
    np.save(tmp_path / "t.npy", np.arange(6, dtype="m8[s]").reshape(3, 2))
    with pytest.raises(InputError, match=r"expected an integer or float array; got dtype "
                                         r"timedelta64\[s\]"):
        read_matrix(tmp_path / "t.npy")


@pytest.mark.parametrize("text", ["1_000", "\u0661", "\uff11", "1\u00a0000"])
def test_csv_numbers_are_ascii_decimals(tmp_path: Path, text: str) -> None:
    """Python's float reads '1_000' as 1000 and other scripts' digits ('١', '１') as numbers;
    NumPy and CSV readers do not, and neither does the table reader now."""
    (tmp_path / "d.csv").write_text(f"1.5,2\n{text},4\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 2, column 1: .* is not a number"):
        read_matrix(tmp_path / "d.csv")


def test_a_numeric_header_is_reported(tmp_path: Path, capsys) -> None:
    """A word mistyped in a first data row makes it a header, the data one row short: the
    command says so on stderr (it still reads ``id,1`` as a header, as documented); a header of
    names only says nothing."""
    rows = "\n".join(f"{x:.3f},{2 * x:.3f},{x * x:.3f}" for x in np.linspace(0, 3, 20))
    (tmp_path / "t.csv").write_text("0.5,abc,2\n" + rows + "\n")
    run_ok(["fit", str(tmp_path / "t.csv"), "-k", "2"], capsys)  # reads the header; warns
    assert main(["fit", str(tmp_path / "t.csv"), "-k", "2", "--force"]) == 0
    err = capsys.readouterr().err
    assert ("warning: " + str(tmp_path / "t.csv") + ": the first row was read as a header, "
            "though 2 of its 3 fields are numbers; if it is a data row, 'abc' is not a number"
            ) in err
    assert header_warning(["a", "b"]) is None
    assert header_warning(None) is None
    assert header_warning(["id", "1"]) is not None


@pytest.mark.parametrize(("line", "hint"), [("1\t2", "tabs"), ("1;2", "';'")])
def test_a_field_holding_another_delimiter_suggests_it(tmp_path: Path, line: str,
                                                       hint: str) -> None:
    (tmp_path / "s.csv").write_text(f"{line}\n{line}\n")
    with pytest.raises(InputError, match=f"separated by {hint}\\? pass --delimiter"):
        read_matrix(tmp_path / "s.csv")


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``rbfkmeans fit data.csv | head -1`` ended in a BrokenPipeError traceback (status 1)
    from the summary printed after the outputs were written: now status 141, as a shell reports
    a command ended by SIGPIPE, and nothing on stderr. (The command's own print is replaced by
    one that finds the pipe closed, so that the test does not depend on timing.)"""
    import subprocess
    import sys

    (tmp_path / "p.csv").write_text("\n".join(f"{i},{i % 3}" for i in range(30)) + "\n")
    script = (
        "import builtins, sys\n"
        "from rbfkmeans import cli_fit\n"
        "from rbfkmeans.cli import main\n"
        "real = builtins.print\n"
        "def closed(*a, **kw):\n"
        "    if kw.get('file') is None and str(a[0]).startswith('  wrote'):\n"
        "        raise BrokenPipeError(32, 'Broken pipe')\n"
        "    real(*a, **kw)\n"
        "cli_fit.print = closed\n"
        f"sys.exit(main(['fit', {str(tmp_path / 'p.csv')!r}, '-k', '2']))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300,
                          check=False)
    assert proc.stderr == b""
    assert proc.returncode == 141
    assert (tmp_path / "p_labels.csv").exists()  # the outputs were written before
