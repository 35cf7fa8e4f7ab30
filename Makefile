# Two commands matter: `make reproduce` (set up, fetch data, regenerate every figure)
# and `make test` (set up, run the test suite). Each works alone on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CG     := $(VENV)/bin/curvature-gap
STAMP  := $(VENV)/.stamp-install
PROFILE ?= paper
DEVICE  ?= auto
DATA    ?= data
export CURVATURE_GAP_DATA ?= $(abspath $(DATA))

.PHONY: install reproduce test book data bench clean help

help:
	@echo "make reproduce [PROFILE=paper|smoke] [DEVICE=auto|cpu|cuda]  regenerate every figure"
	@echo "make test                                                  run the test suite"
	@echo "make book [PROFILE=smoke|paper]                            build the Jupyter Book"
	@echo "make data | bench | clean | install"

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

data: install
	$(CG) data --data-dir $(DATA)

reproduce: install data
	$(CG) reproduce --profile $(PROFILE) --device $(DEVICE) --data-dir $(DATA)

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) benchmarks/hessian.py

book: install
	$(PY) -m curvature_gap.book --profile $(PROFILE)

# Removes caches and build outputs, never the datasets under $(DATA).
clean:
	rm -rf results runs _build .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
