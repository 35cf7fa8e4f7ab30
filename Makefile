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

.PHONY: install reproduce test book book-check kernel data bench gpu-check lab clean help

help:
	@echo "make reproduce [PROFILE=paper|smoke] [DEVICE=auto|cpu|cuda]  regenerate every figure"
	@echo "make test                                                  run the test suite"
	@echo "make book [PROFILE=smoke|paper]                            build the Jupyter Book (_build/html)"
	@echo "make book-check                                            links, offline math, summary table, headless Chromium"
	@echo "make lab                                                   JupyterLab on notebooks/ (installs the lab extra on first use)"
	@echo "make gpu-check                                             on a CUDA machine: device tests, GPU timings (benchmarks/gpu.json)"
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

# The notebooks' kernel ("python3" in their metadata) is registered inside the virtual environment,
# where it takes precedence over any user-level kernel of the same name.
KERNEL := $(VENV)/share/jupyter/kernels/python3/kernel.json

kernel: $(KERNEL)

$(KERNEL): $(STAMP)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (curvature-gap)"

# pytest runs tests/ and, through nbval (--nbval-lax, see pyproject.toml), every notebook under the
# smoke profile; the notebooks need MNIST, hence `data`.
test: install kernel data
	$(PY) -m pytest -q

bench: install
	$(PY) benchmarks/hessian.py

# On a CUDA machine (≤ 9 min): device tests on the GPU, MNIST training, GPU-vs-CPU Hessian, CIFAR-100
# throughput, block spectra; writes benchmarks/gpu.json and RESULTS.md's "GPU check". Without CUDA: a no-op.
gpu-check: install
	$(PY) benchmarks/gpu_check.py --data-dir $(DATA)

# Executes every notebook with papermill (-p profile $(PROFILE)) and builds _build/html with
# jupyter-book -W -n --keep-going: any execution error or warning fails it.
book: install kernel data
	$(PY) -m curvature_gap.book --profile $(PROFILE) --device $(DEVICE)

# Checks the built book: internal links, offline MathJax, the introduction's table against the verify
# JSON, and (headless Chromium) rendered math and loaded images; screenshots in _build/screenshots/.
book-check: install
	$(PY) -m curvature_gap.book --check

# JupyterLab on the notebooks, in the project's kernel. jupyterlab is the optional `lab` extra, installed
# here on first use only (never by `make install`).
lab: install kernel
	$(PY) -c 'import jupyterlab' 2>/dev/null || $(PY) -m pip install -q -e ".[lab]"
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

# Removes caches and build outputs, never the datasets under $(DATA).
clean:
	rm -rf results runs _build .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
