"""Training time: the bounds at the paper's MNIST ViT, at initialisation and after training.

Per sample (one test image ``x_i``): the tokens entering block 0, ``X_i = model.tokens(x_i)`` (L = 49, d_V = 16), and
block 0's five weight matrices form an :class:`~curvature_gap.exact.instances.Instance` of the *theory block* (no FFN
biases, LayerNorm γ = 1, β = 0; a named choice, the theorems' setting).  The MSE target is ``"perturbed"``: the output
of the same layer (Theorem 1: ``F``; Theorem 6: ``Z``) with every weight multiplied entrywise by ``1 + 0.1 N(0,1)``
(seed ``i``), i.e. an instance near its minimiser, as Theorem 1's ``w*`` suggests.

Batch rows (``thm1.printed.batch``, ``thm6.full.explicit.batch``): the Hessian of the mean MSE over ``n`` samples,
``‖(1/n) Σ_i H_i‖_2``, by Lanczos on curvlinops' ``HessianLinearOperator``, against the largest per-sample bound
``max_i M_i`` (a valid bound for the mean by the triangle inequality).
"""
from __future__ import annotations

import time
from typing import Callable

import torch
from curvlinops import HessianLinearOperator
from torch import nn

from ..exact import linalg as la
from ..exact.forward import block_forward, block_output, sa_forward
from ..exact.instances import Instance, from_model
from . import formulas, quantities, registry
from .sweeps import instance_row

__all__ = ["instances_of", "training_sweep", "batch_records", "light_bounds", "norms_of"]


def instances_of(model, images: torch.Tensor, n: int, name: str) -> list[Instance]:
    """The first ``n`` images as instances of the model's first block (targets: the perturbed block's output)."""
    return from_model(model, images[:n], target="perturbed", model=name)


def norms_of(inst: Instance) -> dict:
    """Spectral norms of ``X`` and the five weight matrices, keyed ``X, Q, K, V, 1, 2``."""
    return {k: la.spectral_norm(M) for k, M in zip(("X", "Q", "K", "V", "1", "2"), (inst.X, *inst.weights))}


def light_bounds(inst: Instance, out_curv: float | None = None, grad_norm: float | None = None) -> dict:
    """Theorem 1 (printed and repaired) and Theorem 6 (explicit, App. C.6) at ``inst`` from norms only.

    Theorem 6 is stated for the MSE (``‖∂²l/∂Z²‖ = 2/(L d_V)``, ``‖R^tr‖ = ‖Z − Target‖_F``); for another
    loss pass ``out_curv = ‖∂²l/∂Z²‖`` and ``grad_norm = ‖∂l/∂Z‖`` (see :mod:`.ce`)."""
    X, T = inst.X, inst.Target
    n = norms_of(inst)
    L, d_V, d_K, d_ff = inst.shape
    a = (n["X"], n["Q"], n["K"], n["V"], la.spectral_norm(T), L, d_V, d_K)
    fw = block_forward(X, *inst.weights)
    lnU, lnS = quantities.layernorm_inputs(fw["U"]), quantities.layernorm_inputs(fw["S"])
    relu = la.spectral_norm(torch.relu(fw["Y"] @ inst.W_1))
    R = float((fw["Z"] - T).norm()) if grad_norm is None else grad_norm
    e = formulas.theorem6_explicit(n, L, d_V, d_K, d_ff, relu, R, lnU, lnS["row_norm_min"], out_curv)
    return {"thm1": formulas.theorem1(*a, variant="printed")["M"],
            "thm1_repaired": formulas.theorem1(*a, variant="repaired")["M"],
            "thm6": e["M_tr"]}


class _Layer(nn.Module):
    """``fn(X, *weights)`` with the first ``n`` weights of ``inst`` (W_Q, W_K, W_V, W_1, W_2) as its parameters."""

    def __init__(self, inst: Instance, fn, n: int):
        super().__init__()
        self.fn, self.ws = fn, nn.ParameterList(nn.Parameter(t.clone()) for t in inst.weights[:n])

    def forward(self, X):
        return self.fn(X, *self.ws)


def _curvlinops_norm(module: nn.Module, X: torch.Tensor, T: torch.Tensor) -> float:
    """``‖∇²_w mean-MSE‖_2`` over the batch ``(X, T)`` by Lanczos on curvlinops' Hessian operator."""
    op = HessianLinearOperator(module, nn.MSELoss(), list(module.parameters()), [(X, T)],
                               check_deterministic=False).to_scipy()
    return la.arpack_extreme(op, tol=1e-8)


def batch_records(insts: list[Instance]) -> list[dict]:
    """The two batch rows for the samples ``insts`` (same weights, different X and targets)."""
    n = len(insts)
    X = torch.stack([i.X for i in insts])
    lb = [light_bounds(i) for i in insts]
    # Theorem 1: targets of the attention layer (F of the perturbed layer), Theorem 6: Z.
    T_sa = torch.stack([_perturbed_F(i) for i in insts])
    T_bl = torch.stack([i.Target for i in insts])
    h1 = _curvlinops_norm(_Layer(insts[0], sa_forward, 3), X, T_sa)
    h6 = _curvlinops_norm(_Layer(insts[0], block_output, 5), X, T_bl)
    b1 = max(light_bounds(_with_target(i, t))["thm1"] for i, t in zip(insts, T_sa))
    b6 = max(v["thm6"] for v in lb)
    return registry.records("batch", {"n": n, "M_thm1": b1, "H_sa": h1, "M_thm6": b6, "H_block": h6})


def _with_target(inst: Instance, T: torch.Tensor) -> Instance:
    return Instance(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.W_1, inst.W_2, T, dict(inst.meta))


def _perturbed_F(inst: Instance) -> torch.Tensor:
    g = torch.Generator().manual_seed(1_000_003 * int(inst.meta.get("sample", 0)) + 29)
    w = [t * (1 + 0.1 * torch.randn(t.shape, generator=g, dtype=torch.float64)) for t in (inst.W_Q, inst.W_K, inst.W_V)]
    return sa_forward(inst.X, *w).detach()


def training_sweep(models: dict, images: torch.Tensor, n_samples: int, n_batch: int, tensors: bool,
                   log: Callable[[str], None] | None = None) -> tuple[list[dict], dict]:
    """Records for each model in ``models`` (name -> ViT) and each of ``n_samples`` images, plus
    the batch rows over ``n_batch`` images.  SA rows use the attention-layer target."""
    rows, insts_out = [], {}
    for name, model in models.items():
        insts = instances_of(model, images, max(n_samples, n_batch), name)
        for i, inst in enumerate(insts[:n_samples]):
            t0 = time.perf_counter()
            sa_inst = _with_target(inst, _perturbed_F(inst))
            sa_inst.meta.update(sweep="training", x=name)
            inst.meta.update(sweep="training", x=name)
            base = instance_row("training", name, i, inst)
            recs = [dict(r, _inst="sa") for r in registry.evaluate(sa_inst, parts=("sa",))]
            recs += [dict(r, _inst="block") for r in registry.evaluate(inst, parts=("ln", "prop", "block"),
                                                                        tensors=tensors)]
            for r in recs:
                which = r.pop("_inst")
                key = f"training|{name}|{i}|{which}"
                rows.append({**base, **r, "parts": registry.BOUNDS[r["check"]].part, "tensors": tensors,
                             "ln_input": "block", "inst_key": key})
                insts_out[key] = sa_inst if which == "sa" else inst
            if log:
                log(f"  training {name} sample {i}: {len(recs)} records, {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        for r in batch_records(insts[:n_batch]):
            rows.append({**base, **r, "seed": "batch", "parts": "batch", "tensors": False, "ln_input": "block"})
        if log:
            log(f"  training {name} batch rows (n={n_batch}): {time.perf_counter() - t0:.1f}s")
    return rows, insts_out
