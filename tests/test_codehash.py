"""curvature_gap.codehash: a result is stale exactly when the code that computes its numbers changes.

Each kind of edit is made to a temporary copy of the package's source and the hash is read from the
copy (in process, by pointing the hash at the copied files; and once end to end, by importing the
copy in a fresh interpreter).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from curvature_gap import checks, codehash
from curvature_gap import experiments

SRC = Path(codehash.__file__).resolve().parent
ROOT = SRC.parents[1]
NAMES = ("fig3", "fig5", "fig12", "theorem7", "trained_bounds", "fig4_authors")


def _hashes() -> dict:
    codehash.code_hash.cache_clear()
    out = {n: experiments.config_hash_of(n, profile="paper") for n in NAMES}
    out["verify"] = checks.verify_code_hash()
    return out


@pytest.fixture(scope="module")
def base():
    """The hashes of the package as it is: those of an unedited copy (the same source), computed once."""
    return _hashes()


@pytest.fixture()
def copy(tmp_path, monkeypatch):
    """A copy of the package source that the hash reads instead of the original; returns an editor
    ``edit(relative path, old, new)`` that changes one place of the copy (the old text must be there)."""
    dst = tmp_path / "curvature_gap"
    shutil.copytree(SRC, dst, ignore=shutil.ignore_patterns("__pycache__"))
    real = codehash._module_tree
    edited: set[Path] = set()

    def from_copy(module):
        """The copy's tree of an edited file; the original's (the same text, already parsed) of the others."""
        rel = Path(module.__file__).resolve().relative_to(SRC)
        if rel not in edited:
            return real(module)
        return codehash._tree(str(dst / rel), (dst / rel).stat().st_mtime_ns)

    monkeypatch.setattr(codehash, "_module_tree", from_copy)

    def edit(rel: str, old: str, new: str):
        p = dst / rel
        text = p.read_text()
        assert text.count(old) >= 1, f"{old!r} is not in {rel}: the test no longer edits what it names"
        p.write_text(text.replace(old, new, 1))
        edited.add(Path(rel))

    yield edit
    monkeypatch.setattr(codehash, "_module_tree", real)
    codehash.code_hash.cache_clear()


# what does not determine a number: (file, old, new)
UNCHANGED = {
    "plotting helper": ("plotting.py", "def new_figure(width: float = WIDTH, height: float = 4.2) -> Figure:",
                        "def new_figure(width: float = WIDTH, height: float = 4.5) -> Figure:"),
    "a result's drawing helper": ("experiments/norms.py", "def _plot_unit_bars(result, key: str, statistic: str,",
                                  "def _plot_unit_bars(result, key: str, statistic: str, /,"),
    "progress message": ("experiments/assumption.py", 'ctx.log(f"gradient norms of L_k', 'ctx.log(f"the gradient norms of L_k'),
    "error message": ("data.py", "could not be read ({exc}); ", "cannot be read ({exc}); "),
    "docstring": ("hessian/__init__.py", '"""', '"""Edited. '),
    "comment": ("model.py", "\n", "\n# a new comment\n"),
    "data download": ("data.py", "def fetch_mnist_from_pypi(root: Path, timeout_s: int = 180)",
                      "def fetch_mnist_from_pypi(root: Path, timeout_s: int = 240)"),
    "result declaration": ("experiments/heatmaps.py", '"Hessian entries at initialisation"', '"Hessian at initialisation"'),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(UNCHANGED))
def test_edits_that_cannot_change_a_number_stale_nothing(kind, base, copy):
    copy(*UNCHANGED[kind])
    assert _hashes() == base, kind


# what does: (file, old, new) -> the results that must go stale (and those that must not)
CHANGED = {
    "the model": (("model.py", "rstd = torch.rsqrt(var + eps)", "rstd = torch.rsqrt(var + eps + 0.0)"), {"fig3", "fig5", "fig12", "theorem7",
                                                                            "trained_bounds", "verify"}, set()),
    "the Hessian of Figs. 3-4": (("experiments/hessians.py", "H.detach(), time", "H.detach().clone(), time"), {"fig3", "fig5"},
                                 {"fig12", "verify"}),
    "Fig. 12's computation": (("landscape/assumption1.py", "sigma2 = max(msq - gbar2, 0.0)", "sigma2 = max(msq - gbar2, 0.0) + 0.0"), {"fig12"},
                              {"fig3", "fig5"}),
    # a figure's claim rows live in its module: they stale the verify rows, never the result they read
    "Fig. 5's claim": (("experiments/norms.py", "MUCH_SMALLER = 0.5", "MUCH_SMALLER = 0.4"), {"verify"}, {"fig3", "fig5"}),
    "training": (("train.py", "return loss / len(ds), correct / len(ds)", "return loss / len(ds), 1.0 * correct / len(ds)"),
                 {"fig3", "fig5", "fig12", "theorem7", "fig4_authors"}, set()),
    # a run's key hashes the order its recipe picks: the authors' loader stales their results only
    "the authors' loader": (("train.py", "self._epoch = 0  # the epoch", "self._epoch = 0 + 0  # the epoch"),
                            {"fig4_authors"}, {"fig3", "fig5", "fig12", "theorem7", "verify"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(CHANGED))
def test_a_changed_computation_stales_what_it_computes(kind, base, copy):
    edit, stale, fresh = CHANGED[kind]
    before = base
    copy(*edit)
    after = _hashes()
    moved = {k for k in before if before[k] != after[k]}
    assert stale <= moved, f"{kind}: {sorted(stale - moved)} should be stale"
    assert not (fresh & moved), f"{kind}: {sorted(fresh & moved)} should not be stale"


@pytest.mark.slow
def test_a_changed_bound_stales_the_rows_and_results_that_use_it(base, copy):
    before = base
    copy("bounds/formulas.py", "return L * nX * nV + nT", "return L * nX * nV + 1.0 * nT")
    after = _hashes()
    assert after["verify"] != before["verify"] and after["trained_bounds"] != before["trained_bounds"]
    assert after["fig3"] == before["fig3"] and after["fig12"] == before["fig12"]


def test_what_is_reached_and_what_is_not():
    r = codehash.reached(*experiments.computation(experiments.spec("fig3")), via=experiments.CONTEXT_VIA)
    assert all(k.startswith("curvature_gap.") for k in r), "nothing outside the package"
    names = {k.split(":")[1] for k in r}
    assert {"compute_heatmap", "hessian", "ViT", "Context.model", "Context.first_images", "load_mnist",
            "pooled_log_image"} <= names
    # the context's methods it calls (both models' protocols: one computation), not the others; never the training,
    # which the runner does before the computation (Context.train, train.ensure, the loop), and whose code enters
    # through the run's key
    assert "Context.loader_batches" in names and not {"Context", "Context.train", "ensure", "train", "LoaderOrder"} & names
    assert not {"ensure_mnist", "fetch_mnist_from_pypi", "new_figure", "plot_hessian", "save_figure"} & names
    assert not any(n.lstrip("_").startswith("plot") for n in names)


def test_roots_must_be_package_code():
    with pytest.raises(ValueError, match="roots must be functions or classes"):
        codehash.reached(json)
    with pytest.raises(ValueError, match="needs the reason"):
        codehash.not_in_code_hash("")


_PRINT = ("import json; from curvature_gap import experiments, checks; "
          "print(json.dumps({'fig3': experiments.config_hash_of('fig3', profile='paper'), 'verify': checks.verify_code_hash()}))")


def _in_copy(tmp_path, rel=None, old=None, new=None) -> dict:
    dst = tmp_path / "src" / "curvature_gap"
    if not dst.exists():
        shutil.copytree(SRC, dst, ignore=shutil.ignore_patterns("__pycache__"))
    if rel is not None:
        p = dst / rel
        assert old in p.read_text()
        p.write_text(p.read_text().replace(old, new, 1))
    out = subprocess.run([sys.executable, "-c", _PRINT], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path / "src"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_end_to_end_in_a_copied_package(tmp_path):
    """A copy imported by a fresh interpreter: with a docstring edited it gives the installed package's
    hashes; with a changed computation, other ones."""
    base = {"fig3": experiments.config_hash_of("fig3", profile="paper"), "verify": checks.verify_code_hash()}
    assert _in_copy(tmp_path, "model.py", '"""', '"""Edited. ') == base
    moved = _in_copy(tmp_path, "model.py", "rstd = torch.rsqrt(var + eps)", "rstd = torch.rsqrt(var + eps + 0.0)")
    assert moved["fig3"] != base["fig3"] and moved["verify"] != base["verify"]
