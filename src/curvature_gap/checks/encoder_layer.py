"""Rows for the closed-form Hessian of ``torch.nn.TransformerEncoderLayer`` (beyond the paper).

One row per configuration (norm_first × activation × bias × nhead × causal mask, 48 rows, one :class:`LayerCheck`
each): :func:`curvature_gap.layer_hessian` against reverse-over-reverse autograd of PyTorch's layer itself (MATH
backend, float64), ``rel_err = max|closed − autograd| / max|autograd|``, tolerance 1e-10. One row per autodiff trap,
``holds`` while the trap is still there (``fails`` means PyTorch fixed it and the book's text must change). And the
rows of the repaired Theorem 1 extended to h heads with ``W_O`` (:mod:`curvature_gap.bounds.multihead`): the bound,
each block, the softmax lemma it uses, and its exact quantity against autograd of ``nn.MultiheadAttention``.
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import torch

from ..bounds import multihead as mhb
from ..bounds import registry as bck
from ..bounds import search, sweeps
from ..exact import encoder_layer as ref
from ..exact import layers
from ..hessian.layers import layer_hessian
from ..row import Declared, OneRow, Row
from .battery import Inputs, Topic
from .theory import TOL, quiet_single_thread  # the closed forms' tolerance against autograd

__all__ = ["run", "TOPIC", "LayerCheck", "LAYERS", "TRAPS", "MH_CHECKS", "TOL", "TRAP_TOL", "RESULT", "SHAPE"]

TRAP_TOL = 1e-6
RESULT = "encoder_layer"
SHAPE = dict(L=5, d_model=8, dim_feedforward=6)
# (seed, sharp, x_scale): generic; near-one-hot attention with larger inputs
INSTANCES = ((0, 1.0, 1.0), (1, 8.0, 2.0))


def _layer(cfg: dict, seed: int, sharp: float, x_scale: float):
    return layers.random_layer(SHAPE["d_model"], cfg["nhead"], SHAPE["dim_feedforward"], SHAPE["L"], seed=seed,
                            norm_first=cfg["norm_first"], activation=cfg["activation"], bias=cfg["bias"],
                            sharp=sharp, x_scale=x_scale)


@dataclass(frozen=True)
class LayerCheck(OneRow):
    """One configuration of ``nn.TransformerEncoderLayer`` (of :data:`curvature_gap.exact.encoder_layer.CONFIGS`),
    checked on :data:`INSTANCES` (``quick``: the second only)."""

    norm_first: bool
    activation: str
    bias: bool
    nhead: int
    causal: bool
    result = RESULT
    role = "statement"
    kind = "formula"

    @property
    def cfg(self) -> dict:
        return asdict(self)

    @property
    def id(self) -> str:
        return f"{RESULT}.{ref.config_id(self.cfg)}"

    def row(self, quick: bool) -> Row:
        insts = INSTANCES[1:] if quick else INSTANCES
        err, n = 0.0, 0
        for seed, sharp, xs in insts:
            layer, X, T = _layer(self.cfg, seed, sharp, xs)
            H_ref = layers.hessian_autograd(layer, X, target=T, is_causal=self.causal)
            H = layer_hessian(layer, X, target=T, is_causal=self.causal).dense
            err = max(err, ref.relative_error(H, H_ref))
            n = H.shape[0]
        what = (f"closed-form loss Hessian of nn.TransformerEncoderLayer ({'pre' if self.norm_first else 'post'}-norm, "
                f"{self.activation}, bias={self.bias}, nhead={self.nhead}, "
                f"{'causal mask' if self.causal else 'no mask'}) vs reverse-over-reverse autograd of the layer (MATH)")
        return Row(id=self.id, result=RESULT, kind=self.kind, role=self.role, what=what,
                   verdict="verified" if err <= TOL else "fails", expected="verified", rel_err=err, tolerance=TOL,
                   instances=(f"{len(insts)} inst: L={SHAPE['L']} d_model={SHAPE['d_model']} "
                              f"dim_feedforward={SHAPE['dim_feedforward']}; compared ({n}, {n})"),
                   note="instances: " + "; ".join(f"seed {s}, Q/K weights x{a:g}, X x{b:g}" for s, a, b in insts))


# the family's grid: one declaration per configuration
LAYERS = tuple(LayerCheck(**cfg) for cfg in ref.CONFIGS)
TRAPS = (Declared(f"{RESULT}.trap.default_kernel_double_backward", RESULT, "software", role="reference", expected="holds"),
         Declared(f"{RESULT}.trap.func_hessian_layernorm", RESULT, "software", role="reference", expected="holds"))


def _trap_rows() -> list[Row]:
    layer, X, T = _layer(dict(norm_first=False, activation="relu", bias=True, nhead=2), 0, 1.0, 1.0)
    msg = ref.default_kernel_double_backward_error(layer, X, T)
    expected_msg = "derivative for aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented"
    a = TRAPS[0].row(
            what="double backward through nn.TransformerEncoderLayer under the default CPU attention kernel raises "
                 "(so the references use the MATH backend)",
            verdict="holds" if msg is not None and expected_msg in msg else "fails",
            instances="L=5 d_model=8 nhead=2 dim_feedforward=6",
            note=(f"raises: {msg.splitlines()[0]}" if msg else
                  "no longer raises: PyTorch fixed it; the book text must change"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        H_func = ref.func_hessian(layer, X, target=T)
    H_ref = layers.hessian_autograd(layer, X, target=T)
    err, asym = ref.relative_error(H_func, H_ref), ref.asymmetry(H_func)
    b = TRAPS[1].row(
            what="torch.func.hessian (forward-over-reverse) of the layer under MATH is wrong through LayerNorm: max "
                 "rel err vs reverse-over-reverse autograd exceeds 1e-6",
            verdict="holds" if err > TRAP_TOL else "fails", value=err, tolerance=TRAP_TOL,
            instances="L=5 d_model=8 nhead=2 dim_feedforward=6, post-norm",
            note=f"max rel err {err:.2e}, asymmetry max|H - Hᵀ|/max|H| {asym:.2e}"
                 + ("" if err > TRAP_TOL else "; PyTorch fixed it: the book text must change"),
            details={"rel_err": err, "asymmetry": asym})
    return [a, b]


MH = f"{RESULT}.mh_bound"
# the repaired Theorem 1 for h heads with W_O: the bound, its blocks, the softmax lemma (each found by the search's
# summary key), and the bound's exact quantity against PyTorch's layer
MH_CHECKS = {"mh": Declared(MH, RESULT, "bound", expected="holds"),
             "mh.blocks": Declared(f"{MH}.blocks", RESULT, "bound", role="proof", expected="holds"),
             "softmax_d2": Declared(f"{MH}.softmax_d2", RESULT, "bound", role="proof", expected="holds"),
             "exact_vs_pytorch": Declared(f"{MH}.exact_vs_pytorch", RESULT, "formula", role="reference",
                                          expected="verified")}


def _bound_row(check: Declared, s: dict, what: str, details: dict | None = None) -> Row:
    """The row of ``check`` from its search summary ``s`` (:func:`curvature_gap.bounds.sweeps.summarize`)."""
    w = s["worst"]
    where = ", ".join(f"{k}={w[k]}" for k in ("x", "sub") if w.get(k) not in (None, ""))
    note = f"worst at {where}"
    if s.get("searched_by_L"):
        note += "; by L: " + ", ".join(f"{L}: {v:.3g}" for L, v in s["searched_by_L"].items())
    if s.get("degenerate"):
        note += f"; {s['degenerate']['min_ratio']:.3g} at the degenerate L = 1 (A ≡ 1), reported apart"
    if s.get("at_minimiser"):
        note += f"; {s['at_minimiser']['min_ratio']:.3g} at an exact minimiser (loss 0)"
    d = {k: s[k] for k in ("searched_by_L", "degenerate", "at_minimiser", "won_by", "scaling") if s.get(k)}
    return check.row(what=what, verdict=s["verdict"], min_ratio=s["min_ratio"], median_ratio=s["median_ratio"],
                     tolerance=bck.RTOL, instances=f"{s['n_records']} records", note=note,
                     details={**d, **(details or {})})


def _mh_rows(quick: bool) -> list[Row]:
    """The multi-head bound, its blocks and the softmax lemma, each searched by the one worst-case search
    (:mod:`curvature_gap.bounds.search`; ``quick``: its coverage budget)."""
    budget = search.QUICK_BUDGET if quick else search.BUDGET
    recs, _ = search.records_of(search.search_all([*search.MH_OBJECTIVES, search.SOFTMAX_OBJECTIVE], budget))
    s = {x["id"]: x for x in sweeps.summarize(recs, ("mh", "mh.blocks", "softmax_d2"))}
    mh = {"searched": search.extent(budget, "mh")}
    whats = {"mh": ("‖H‖_2 ≤ M_h = 4 max over ten rows 2/(Ld)(g_i g_j + ρ φ_ij): the repaired Theorem 1 extended to h "
                    "heads with W_O (Hessian of (1/(Ld))‖F − Target‖_F² w.r.t. W_Q, W_K, W_V, W_O)", mh),
             "mh.blocks": ("‖H(W_i, W_j)‖_2 ≤ row ij for each of the ten block pairs (the step before the 4×4 block "
                           "inequality)", mh),
             "softmax_d2": ("‖∂²a/∂z²[t, s]‖_2 ≤ ‖t‖_2‖s‖_2 for a softmax row a = softmax(z) (the lemma the bound's "
                            "second-order rows use)", {"searched": search.extent(budget, "softmax")})}
    return [_bound_row(MH_CHECKS[k], s[k], what, extra) for k, (what, extra) in whats.items()] + [_pytorch_row()]


def _pytorch_row() -> Row:
    err = 0.0
    for h in (1, 2, 4):
        inst = mhb.instance(5, 4, h, 0)
        inst.W_Q, inst.W_K = 8 * inst.W_Q, 8 * inst.W_K  # near-one-hot attention
        L = inst.L
        for causal in (False, True):
            mask = torch.triu(torch.full((L, L), float("-inf"), dtype=torch.float64), 1) if causal else None
            H = mhb.exact(*inst.tensors(), h, mask)["H"]
            err = max(err, ref.relative_error(H, mhb.pytorch_hessian(inst, causal)))
    return MH_CHECKS["exact_vs_pytorch"].row(
        what="the bound's exact quantity (torch.func.hessian of the hand-written multi-head layer) against "
             "reverse-over-reverse autograd of nn.MultiheadAttention(bias=False) itself (MATH backend)",
        verdict="verified" if err <= TOL else "fails", rel_err=err, tolerance=TOL,
        instances="L=5, d=4, h ∈ {1, 2, 4}, no mask and causal; Q/K weights x8")


def run(inputs: Inputs) -> list[Row]:
    """48 configuration rows, 2 trap rows and 4 rows of the multi-head bound (same ids with ``inputs.quick``, which
    uses one instance per configuration row and a shorter search)."""
    with quiet_single_thread():
        return [c.row(inputs.quick) for c in LAYERS] + _trap_rows() + _mh_rows(inputs.quick)


TOPIC = Topic("nn.TransformerEncoderLayer", run, checks=lambda: (*LAYERS, *TRAPS, *MH_CHECKS.values()))
