"""--device is honoured (tracker issue 21, item 4): Theorem 7's ViT check runs where the context says.

This machine has no accelerator, so the tests check that the device is threaded through (spies on the
callees, a model that refuses ``.cpu()``) and that every tensor the check builds lives on the requested
device (``torch.Tensor`` construction spied on); the numbers on the CPU are unchanged by construction
(``.to(cpu)`` is a no-op) and pinned by tests/landscape/test_landscape_theorem7.py.
"""
from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cases import TINY_MODEL, random_batch
from curvature_gap.experiments import landscape_checks as lc
from curvature_gap.experiments.landscape_checks import Theorem7Settings
from curvature_gap.landscape import theorem7 as t7
from curvature_gap.model import build_model

pytestmark = pytest.mark.usefixtures("one_thread")


class _StaysPut(torch.nn.Linear):
    """A model that fails the test if anything silently moves it to the CPU."""

    def cpu(self):  # noqa: D102
        raise AssertionError("the model was moved to the CPU behind --device's back")


def test_compute_theorem7_forwards_the_context_device(monkeypatch):
    model = _StaysPut(2, 2)
    seen = {}

    def fake_vit_check(m, images, labels, hessian_n, **kw):
        seen.update(model=m, device=kw.get("device"), n=len(labels), hessian_n=hessian_n)
        return {"table": [{"direction": "random", "t": 0.0, "k": 1, "lhs": 0.5}], "paths": []}

    monkeypatch.setattr(lc, "vit_check", fake_vit_check)
    train = SimpleNamespace(images=torch.zeros(5, 1, 4, 4), labels=torch.zeros(5, dtype=torch.long))
    ctx = SimpleNamespace(torch_device=torch.device("cpu"), profile="test", log=lambda msg: None,
                          model=lambda variant, step=None, seed=None: (model, {"path": "x"}),
                          data=lambda variant: SimpleNamespace(train=train))
    s = Theorem7Settings(n_samples=4, hessian_samples=3)
    arrays, meta = lc.compute_theorem7(ctx, s)
    assert seen["model"] is model and seen["device"] == torch.device("cpu")
    assert seen["n"] == 4 and seen["hessian_n"] == 3
    np.testing.assert_array_equal(arrays["lhs"], [0.5])


def test_vit_check_forwards_the_device_to_its_parts(monkeypatch):
    seen = {}

    def spy(name, value):
        def f(*args, **kw):
            seen[name] = kw.get("device", "not passed")
            return value
        return f

    monkeypatch.setattr(t7, "per_sample_hessian_norms",
                        spy("hessian", {"max": 1.0, "norms": np.ones(2), "refined": {}, "rel_change": np.zeros(2)}))
    monkeypatch.setattr(t7, "thm6_M_ce", lambda *a, **k: np.ones(2))
    monkeypatch.setattr(t7, "path_check", spy("paths", {}))
    m = build_model("mnist", seed=0, **TINY_MODEL)
    x, y = random_batch(2, seed=0)
    t7.vit_check(m, x, y, 2, device="cpu")
    assert seen == {"hessian": torch.device("cpu"), "paths": torch.device("cpu")}
    seen.clear()
    t7.vit_check(m, x, y, 2)  # default: the model's device
    assert seen == {"hessian": torch.device("cpu"), "paths": torch.device("cpu")}


def test_device_of():
    m = torch.nn.Linear(2, 2)
    assert t7._device_of(m) == torch.device("cpu")
    assert t7._device_of(m, "meta") == torch.device("meta")


def _caller() -> str:
    """The theorem7 function that called ``.to`` directly (through comprehensions), else "elsewhere"."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_name.startswith("<"):
        f = f.f_back
    return f.f_code.co_name if f is not None and f.f_globals.get("__name__") == t7.__name__ else "elsewhere"


def test_every_operand_is_moved_to_the_requested_device(monkeypatch):
    """The model, the images, the labels and the random vectors of the Hessian power iteration and of the
    random direction go through ``.to(<requested device>)``: ``Tensor.to`` / ``Module.to`` spied on, each
    call attributed to the theorem7 function that made it (so a dropped ``.to`` is missed by its count)."""
    calls = []
    real_tensor_to, real_module_to = torch.Tensor.to, torch.nn.Module.to

    def spy(real, kind):
        def to(self, *args, **kw):
            dev = kw.get("device", args[0] if args and isinstance(args[0], (str, torch.device)) else None)
            if dev is not None:
                calls.append((kind, _caller(), torch.device(dev)))
            return real(self, *args, **kw)
        return to

    monkeypatch.setattr(torch.Tensor, "to", spy(real_tensor_to, "tensor"))
    monkeypatch.setattr(torch.nn.Module, "to", spy(real_module_to, "module"))
    m = build_model("mnist", seed=0, **TINY_MODEL)
    x, y = random_batch(4, seed=1)

    def count(kind, where):
        return sum(1 for k, w, _ in calls if k == kind and w == where)

    t7.per_sample_hessian_norms(m, x, y, iters=3, refine=1, device="cpu")
    assert {d for _, _, d in calls} == {torch.device("cpu")}
    assert count("module", "per_sample_hessian_norms") == 1
    assert count("tensor", "per_sample_hessian_norms") >= 3  # images, labels, the start vectors (one batch per chunk)
    assert count("tensor", "mv") >= 1  # the Lanczos refinement's vectors
    calls.clear()
    t7.path_check(m, x, y, {"exact": 1.0}, ts=(0.0, 0.1), directions=("random", "max-grad"), device="cpu")
    assert {d for _, _, d in calls} == {torch.device("cpu")}
    assert count("module", "path_check") == 1
    assert count("tensor", "_direction") == 5 + 2  # the random direction's 5 matrices; max-grad's images, labels
