# Two commands matter: `make reproduce` (set up, fetch data, recompute every result at paper scale and
# write the reproduction report) and `make test` (set up, run the test suite). Each works alone on a
# fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CG     := $(VENV)/bin/curvature-gap
STAMP  := $(VENV)/.stamp-install
PROFILE ?= paper
DEVICE  ?= auto
BOOK_DEVICE ?= cpu
DATA    ?= data
export CURVATURE_GAP_DATA ?= $(abspath $(DATA))

.PHONY: install reproduce publish test test-fast book book-check book-pdf kernel data bench bench-all bench-quick gpu-check lab clean help

help:
	@echo "make reproduce [PROFILE=paper|smoke] [DEVICE=auto|cpu|cuda] [ALLOW_LONG=1]  recompute every result, reproduction report"
	@echo "make test                                                  run the test suite"
	@echo "make test-fast                                             the tests not marked slow, no notebooks (minutes)"
	@echo "make book [PROFILE=paper|smoke]                            build the Jupyter Book (_build/html); paper: from published/"
	@echo "make book-check                                            check the built book (links, verdicts, raw TeX, Chromium)"
	@echo "make book-pdf                                              the whole built book as one PDF (_build/pdf/book.pdf)"
	@echo "make publish                                               copy the recomputed paper results into published/paper/"
	@echo "make lab                                                   JupyterLab on notebooks/ (installs the lab extra on first use)"
	@echo "make bench-all                                             every benchmark at full size (~25 min, quiet machine), then RESULTS.md"
	@echo "make bench-quick                                           every benchmark in its quick mode (seconds each) into runs/bench-quick/"
	@echo "make bench                                                 the exact-Hessian benchmark alone (~20 min), then RESULTS.md"
	@echo "make gpu-check                                             on a CUDA machine: device tests, GPU timings (benchmarks/gpu_check.json)"
	@echo "make data | clean | install"

install: $(STAMP)

# EXTRAS: the optional dependencies installed with the package: dev (tests, book) and layers (timm and
# transformers, whose layers curvature_gap.layer_hessian reads; their tests skip without it). EXTRAS=dev
# installs the core alone.
EXTRAS ?= dev,layers
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

data: install
	$(CG) data --data-dir $(DATA)

# A training run the results need whose measured cost is over 30 min on this machine is skipped and named
# (reproduce.LONG_RUN_S; the cost is timed now, so a busy machine can push a 9-min run over it):
# ALLOW_LONG=1 trains it anyway.
ALLOW_LONG ?=
reproduce: install data
	$(CG) reproduce --profile $(PROFILE) --device $(DEVICE) --data-dir $(DATA) $(if $(ALLOW_LONG),--allow-long-runs)

# For maintainers, after `make reproduce`: replace the committed results the paper book renders from
# (published/paper/*.json|npz and the verify rows computed from them).
publish: install
	$(CG) publish --profile paper

# The notebooks' kernel ("python3" in their metadata) is registered inside the virtual environment,
# where it takes precedence over any user-level kernel of the same name.
KERNEL := $(VENV)/share/jupyter/kernels/python3/kernel.json

kernel: $(KERNEL)

$(KERNEL): $(STAMP)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (curvature-gap)"

# pytest runs tests/ and, through nbval (--nbval-lax, see pyproject.toml), every notebook under the
# smoke profile; the notebooks need MNIST, hence `data`. TEST_JOBS workers (pytest-xdist; 0: one process),
# each test file on one worker (--dist loadfile keeps a notebook's cells in order; tests/conftest.py hands
# out the long files first), each worker and what it starts (kernels, CLI subprocesses) on one BLAS/OpenMP
# thread: two workers with two threads each oversubscribe two cores.
TEST_JOBS ?= 2
test: install kernel data
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

# While working: tests/ without the tests marked `slow` (those over a few seconds: training runs, subprocesses,
# book builds, the rows of `verify --quick` (tests/conftest.py: SLOW_FIXTURES), the freshness of the published
# results, all but a share of the long grids (cases.slow_but)) and without the notebooks; every module of the
# package is still exercised. `make test` runs everything.
test-fast: install kernel $(DATA)/MNIST
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "not slow" tests

$(DATA)/MNIST:
	$(CG) data --only mnist --data-dir $(DATA)

# Benchmarks: each benchmarks/NAME.py writes benchmarks/NAME.json (machine, load average, threads,
# versions, commit and its rows); benchmarks/report.py renders RESULTS.md's tables from them (--check:
# compare only, as the test suite does).
BENCH_SCRIPTS := $(filter-out benchmarks/report.py benchmarks/_%.py,$(wildcard benchmarks/*.py))
BENCH_RUN     := runs/bench
BENCH_QUICK   := runs/bench-quick

bench: install data
	$(PY) benchmarks/hessian.py
	$(PY) benchmarks/report.py

# Every benchmark at full size, then RESULTS.md: about 25 minutes on 2 cores (theory_block_hessian
# < 1 min, floor ~2 min, hessian ~20 min, training_cost ~7 min; gpu_check ≤ 9 min where CUDA is present,
# else a no-op). Run it
# on a quiet machine: each document states its load average. The documents go to $(BENCH_RUN) first and
# into benchmarks/ only when every run has finished, so the commit each run records is not made dirty
# by the JSON of the run before it.
bench-all: install data
	@rm -rf $(BENCH_RUN) && mkdir -p $(BENCH_RUN)
	@set -e; for s in $(BENCH_SCRIPTS); do \
		n=$$(basename $$s .py); echo "== $$s"; $(PY) $$s --out $(BENCH_RUN)/$$n.json; done
	cp $(BENCH_RUN)/*.json benchmarks/
	$(PY) benchmarks/report.py

# Every benchmark in its quick mode (tiny sizes, seconds each: what tests/benchmarks runs), rendered
# into $(BENCH_QUICK)/RESULTS.md; the committed JSON and benchmarks/RESULTS.md are left alone.
bench-quick: install data
	@rm -rf $(BENCH_QUICK) && mkdir -p $(BENCH_QUICK)
	@set -e; for s in $(BENCH_SCRIPTS); do \
		n=$$(basename $$s .py); echo "== $$s --quick"; $(PY) $$s --quick --out $(BENCH_QUICK)/$$n.json; done
	cp benchmarks/RESULTS.md $(BENCH_QUICK)/RESULTS.md
	$(PY) benchmarks/report.py --results $(BENCH_QUICK)/RESULTS.md --json-dir $(BENCH_QUICK)

# On a CUDA machine (≤ 9 min): device tests on the GPU, MNIST training, GPU-vs-CPU Hessian, CIFAR-100
# throughput, block spectra, the authors' CIFAR-100 recipe (float32, bf16); writes benchmarks/gpu_check.json, then RESULTS.md's "GPU check" (also after
# a failed step, whose status the table shows; the exit status is then 1). Without CUDA: a no-op.
gpu-check: install
	$(PY) benchmarks/gpu_check.py --data-dir $(DATA); rc=$$?; $(PY) benchmarks/report.py && exit $$rc

# Executes every notebook with papermill (-p profile $(PROFILE)) and builds _build/html with
# jupyter-book -W -n --keep-going: any execution error or warning fails it (tools/book/build.py).
# PROFILE=paper (the default) renders the committed published/paper/ results and computes nothing;
# PROFILE=smoke computes toy-scale results on the fly (a pipeline check).
# BOOK_JOBS notebooks run at once, each kernel on one BLAS thread (default: one per CPU, at most 2).
# It needs MNIST alone (fetched once, quietly: no line about CIFAR-100 in a successful build's log).
book: install kernel $(DATA)/MNIST
	$(PY) -m tools.book build --profile $(PROFILE) --device $(BOOK_DEVICE)

# Checks the built book: links, offline MathJax, downloads, one verdict per result, no raw TeX, no number in
# prose that no source backs, and in headless Chromium legible figures and tables that fit a phone; screenshots
# in $(SHOTS) (never committed: .gitignore; CI keeps them as the run's `book-screenshots` artefact).
SHOTS ?= _build/screenshots
book-check: install
	$(PY) -m tools.book check --shots $(SHOTS)

# The whole book as one PDF, after `make book`: its staged pages rendered as a single HTML page and
# printed by the system Chromium, offline (tools/book/pdf.py says why not Jupyter Book's PDF builders).
book-pdf: install
	$(PY) -m tools.book pdf

# JupyterLab on the notebooks, in the project's kernel, with jupyterlab-myst so that their MyST (theorem boxes,
# citations, cross-references) renders as in the book. Both are the optional `lab` extra, installed here on first
# use only (never by `make install`).
lab: install kernel
	$(PY) -c 'import jupyterlab, jupyterlab_myst' 2>/dev/null || $(PY) -m pip install -q -e ".[lab]"
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

# Removes caches and build outputs, never the datasets under $(DATA).
clean:
	rm -rf results runs _build .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
