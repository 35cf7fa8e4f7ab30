"""Shared cases of the test suite (importable by name: ``from cases import ...``).

Synthetic, learnable image data; the small model shapes several modules use; seeded batches and theory
instances; relative errors. Nothing here downloads anything or reads the repository's data.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from curvature_gap.data import TensorDataset

REPO = Path(__file__).resolve().parents[1]


def slow_but(values, keep, ids=None) -> list:
    """``values`` as ``pytest.param``s, each marked ``slow`` unless ``keep(i, value)`` (``i`` its index): ``make
    test-fast`` runs the kept share of a long grid, ``make test`` all of it. ``ids``: as pytest's (a list or a
    function of the value)."""
    import pytest

    out = []
    for i, v in enumerate(values):
        pid = (ids(v) if callable(ids) else ids[i]) if ids is not None else None
        out.append(pytest.param(*(v if isinstance(v, tuple) else (v,)), id=pid,
                                marks=() if keep(i, v) else pytest.mark.slow))
    return out


def recipe_code(section: str) -> str:
    """The first Python code block of the CONTRIBUTING.md section titled ``section``."""
    import re

    text = (REPO / "CONTRIBUTING.md").read_text()
    return re.search(rf"## {re.escape(section)}.*?```python\n(.*?)```", text, re.S).group(1)


def run_recipe(section: str, code: str | None = None) -> dict:
    """Execute a CONTRIBUTING.md recipe (``code``, default the section's own block); its namespace."""
    ns: dict = {"__name__": "contributing_recipe"}
    exec(compile(recipe_code(section) if code is None else code, f"CONTRIBUTING.md ({section})", "exec"), ns)
    return ns


def mutated_recipe(section: str, old: str, new: str) -> str:
    """The recipe's code with its one occurrence of ``old`` replaced by ``new``."""
    code = recipe_code(section)
    assert code.count(old) == 1, old
    return code.replace(old, new)


def subprocess_env(**extra) -> dict:
    """The environment for a Python subprocess of a test: this checkout's package, ``tools`` and these cases
    first on ``PYTHONPATH`` (absolute: a subprocess may run elsewhere, and an installed copy must not win)."""
    import os

    paths = [str(REPO / "src"), str(REPO), str(REPO / "tests")]
    old = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths + ([old] if old else [])), **extra)

def run_book(root: Path, *args, timeout: float = 600):
    """``python -m tools.book <args>`` in ``root`` (this checkout's tools and package), as ``make book`` runs it."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tools.book", *args], cwd=root, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def session_root(tmp_path_factory) -> Path:
    """The temporary root of this test session, shared by its pytest-xdist workers (each worker's own
    ``getbasetemp()`` is a folder of it)."""
    import os

    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_session(tmp_path_factory, name: str, compute):
    """``compute(folder)``'s value (picklable by reference to an importable module), computed by one worker of the
    session and read by the others: a file lock in :func:`session_root` serialises them; ``folder`` is the
    session's folder ``name``."""
    import pickle

    from filelock import FileLock

    root = session_root(tmp_path_factory)
    done = root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            folder = root / name
            folder.mkdir(exist_ok=True)
            done.write_bytes(pickle.dumps(compute(folder)))
    return pickle.loads(done.read_bytes())


# ---------------------------------------------------------------------------------------------- images
def learnable_images(n: int, channels: int, size: int, classes: int, seed: int = 0):
    """uint8 images = a fixed random template per class + noise: a task a tiny ViT learns fast."""
    templates = np.random.default_rng(1234).integers(0, 256, (classes, channels, size, size))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    noise = rng.integers(-40, 41, (n, channels, size, size))
    images = np.clip(templates[labels] + noise, 0, 255).astype(np.uint8)
    return images, labels


def mnist_tensors(n: int, seed: int) -> TensorDataset:
    """``n`` learnable MNIST-shaped images, normalised like the package's loader (to [-1, 1])."""
    imgs, labels = learnable_images(n, 1, 28, 10, seed)
    x = torch.from_numpy(imgs).float().div(255).sub(0.5).div(0.5)
    return TensorDataset(x, torch.from_numpy(labels).long())


def mnist_datasets(n_train: int = 512, n_test: int = 128):
    """A ``train.Datasets`` of learnable MNIST-shaped tensors."""
    from curvature_gap.train import Datasets

    return Datasets(mnist_tensors(n_train, 0), mnist_tensors(n_test, 1))


def random_batch(n: int, seed: int = 0, dtype=torch.float32, channels: int = 1, size: int = 28, classes: int = 10):
    """Uniform images in [-1, 1] and random labels (no structure: for Hessians and gradients)."""
    g = torch.Generator().manual_seed(seed)
    images = (torch.rand(n, channels, size, size, generator=g) * 2 - 1).to(dtype)
    labels = torch.randint(0, classes, (n,), generator=g)
    return images, labels


# ---------------------------------------------------------------------------------------------- models
# The paper's MNIST architecture, narrower: patch 7 (16 tokens).
TINY_MODEL = dict(d_model=4, d_k=4, d_ff=8, patch_size=7)                # 454 parameters
SMALL_MODEL = dict(d_model=8, d_k=8, d_ff=16, patch_size=7)              # 1,122 parameters
TWO_BLOCKS = dict(d_model=4, d_k=4, d_ff=8, n_blocks=2, patch_size=7)    # two blocks, 0.6k parameters
TINY_TRAIN = dict(model_overrides=tuple(sorted(TINY_MODEL.items())), epochs=1, batch_size=32, train_subset=256,
                  test_subset=64, ckpt_every=100)


def perturbed_model(seed: int = 0, dtype=torch.float64, **overrides):
    """An MNIST ViT whose biases and LayerNorm affines are non-trivial (so every Hessian term is exercised)."""
    from curvature_gap.model import build_model

    m = build_model("mnist", seed=seed, **overrides).to(dtype)
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "bias" in name or "ln" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return m


# ---------------------------------------------------------------------------------------------- theory

def reverse_over_reverse(m, x, y) -> torch.Tensor:
    """The dense Hessian of the mean cross-entropy of ``m`` on (x, y), by differentiating each gradient entry
    again in reverse mode (``torch.autograd.grad`` twice, no forward mode anywhere): the reference the fast
    routes are checked against (forward-over-reverse through PyTorch's LayerNorm is wrong)."""
    params = list(m.parameters())
    g = torch.autograd.grad(torch.nn.functional.cross_entropy(m(x), y), params, create_graph=True)
    g = torch.cat([t.reshape(-1) for t in g])
    rows = [torch.cat([t.reshape(-1) for t in torch.autograd.grad(g[i], params, retain_graph=True)])
            for i in range(g.numel())]
    return torch.stack(rows)


def tiny_instance(L: int = 3, d: int = 2, seed: int = 0, **kw):
    """A random float64 instance of the theory's block, small enough for dense autograd references."""
    from curvature_gap.exact.instances import random_instance

    return random_instance(L=L, d_V=d, d_ff=3, seed=seed, **kw)


def randn(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- numbers
def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max|a − b| / max|b|`` on the CPU in float64."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


# ---------------------------------------------------------------------------------------------- experiments
def experiments_context(tmp_path, datasets=None, runs_dir=None, **settings):
    """A smoke-profile ``experiments.Context`` on test-written data and the tiny model (454 parameters):
    results under ``tmp_path/results``, checkpoints under ``runs_dir`` (default ``tmp_path/runs``)."""
    from curvature_gap.experiments import Context

    return Context(profile="smoke", device="cpu", results_dir=tmp_path / "results", runs_dir=runs_dir or tmp_path / "runs",
                   published_dir=tmp_path / "published", progress=False,
                   datasets={"mnist": datasets or mnist_datasets(512, 128)}, train_overrides={"mnist": TINY_TRAIN},
                   settings_overrides=settings)


# 512 tangents per pass: the whole tiny model in one pass of the exact method (cost only, same numbers)
SMALL_RUN_SETTINGS = dict(init_heatmap=dict(fast_chunk=512), trained_heatmap=dict(fast_chunk=512),
                          trajectory=dict(batch_size=4, n_steps=6, steps=[0, 3, 5, 9], display_steps=[0, 6],
                                          fast_chunk=512))


# ---------------------------------------------------------------------------------------------- the book
GOOD = ["x = 1 + 1", "print('fine', x)"]
BROKEN = ["x = 1", "raise RuntimeError('deliberately broken notebook')", "print('never reached')"]


def notebook(cells, checked_output: str | None = None):
    """A notebook with a title, a parameters cell, ``cells`` and (``checked_output`` not None) a cell nbval checks."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell('profile = "smoke"\ndevice = "cpu"')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# A page"), p] + [nbformat.v4.new_code_cell(c) for c in cells]
    if checked_output is not None:
        c = nbformat.v4.new_code_cell("print('checked')")
        c.metadata["tags"] = ["nbval-check-output"]
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=checked_output)] if checked_output else []
        c.execution_count = 1 if checked_output else None
        nb.cells.append(c)
    return nb


def fake_project(root: Path, notebooks: dict, bad_link: bool = False) -> None:
    """A tiny book: _config.yml, _toc.yml, one page, the given notebooks, and cached quick rows (one row)."""
    import json
    import shutil

    import nbformat

    from curvature_gap import checks
    from curvature_gap.row import Row

    rows = [Row(id="thm2.layernorm.jacobian", result="thm2", kind="formula", what="J", verdict="verified",
                expected="verified", claim="verified", rel_err=1e-16, tolerance=1e-10)]
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "src" / "curvature_gap").mkdir(parents=True, exist_ok=True)  # what marks a checkout (checkout_root)
    shutil.copy(REPO / "_config.yml", root / "_config.yml")
    (root / "book").mkdir(exist_ok=True)
    shutil.copy(REPO / "book" / "references.bib", root / "book" / "references.bib")
    shutil.copytree(REPO / "book" / "_ext", root / "book" / "_ext", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))  # _config.yml's local Sphinx extension
    (root / "book" / "_static").mkdir(exist_ok=True)
    shutil.copy(REPO / "book" / "_static" / "favicon.svg", root / "book" / "_static")  # _config.yml's html.favicon
    shutil.copytree(REPO / "book" / "_search", root / "book" / "_search", dirs_exist_ok=True)  # html_search_scorer
    link = "{doc}`missing-page`" if bad_link else "a page"
    (root / "book" / "intro.md").write_text(f"# Intro\n\nProfile {{{{ profile }}}}; $x^2$; {link}.\n")
    (root / "notebooks").mkdir(exist_ok=True)
    toc = "format: jb-book\nroot: book/intro\nchapters:\n" + "".join(f"  - file: notebooks/{n}\n" for n in notebooks)
    (root / "_toc.yml").write_text(toc)
    for name, nb in notebooks.items():
        nbformat.write(nb, root / "notebooks" / f"{name}.ipynb")
    res = root / "results" / "book"
    res.mkdir(parents=True, exist_ok=True)
    (res / "verify-quick.json").write_text(json.dumps({"meta": checks.rows_meta(True),
                                                       "rows": [r.to_json() for r in rows]}))


