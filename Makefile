# Every target sets up its own local virtual environment (.venv) on first use, so `make demo` and `make test`
# work from a fresh clone. torch is pinned to 2.13.0 (the CPU build on this machine's disk; an unpinned torch
# pulls a multi-gigabyte CUDA build). auto-lirpa 0.3 declares torch<1.13, so it is installed with --no-deps plus
# its light dependencies; certify.lirpa patches it at import time (MATH.md section 8).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test proofs benchmarks clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet --no-deps auto-lirpa==0.3
	$(BIN)/python -m pip install --quiet appdirs pyyaml packaging tqdm
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/certify demo

# -n auto: pytest-xdist, one worker per core (tests/conftest.py gives each worker its share of the threads)
test: $(STAMP)
	$(BIN)/python -m pytest -n auto

proofs: $(STAMP)
	$(BIN)/python -m proofs

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/jacobian.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis out
