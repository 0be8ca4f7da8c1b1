# Two entry points for a new machine (see README):
#   make report  -> virtual environment, install, run the reproduction report into ./report
#   make test    -> virtual environment, install with test extras, run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv report test lint docs bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel; the project then only asks for torch>=2.3
	$(BIN)/pip install -q torch==2.13.0

venv: $(BIN)/python
	$(BIN)/pip install -q -e ".[test,dev]"

report: venv
	$(BIN)/rbfkmeans reproduce --out report --force

test: venv
	$(BIN)/python -m pytest -q

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

# the documentation site with the API reference from the docstrings, into ./site
docs: venv
	$(BIN)/pip install -q -e ".[docs]"
	$(BIN)/mkdocs build --strict --site-dir site

bench: venv
	$(BIN)/pip install -q -e ".[bench]"
	# ClustPy's deep-clustering peers: --no-deps, or pip would replace the pinned torch
	$(BIN)/pip install -q --no-deps clustpy==0.0.3
	$(BIN)/python benchmarks/bench_mappings.py
	$(BIN)/python benchmarks/bench_iterations.py
	$(BIN)/python benchmarks/bench_fit.py
	$(BIN)/python benchmarks/bench_curve.py
	$(BIN)/python benchmarks/bench_blobs.py
	$(BIN)/python benchmarks/bench_scale.py
	$(BIN)/python benchmarks/bench_large.py
	$(BIN)/python benchmarks/bench_deep.py
	$(BIN)/python benchmarks/bench_sparse.py

clean:
	rm -rf $(VENV) build dist site *.egg-info
