"""Rows for the closed-form Hessian of ``torch.nn.TransformerEncoderLayer`` (beyond the paper).

One row per configuration of the family (norm_first × activation × bias × nhead × causal mask, 48 rows,
:data:`curvature_gap.exact.encoder_layer.CONFIGS`): :func:`curvature_gap.theory.encoder_layer_hessian`
against reverse-over-reverse ``torch.autograd`` of PyTorch's layer itself under the MATH attention backend,
float64, on a generic instance and one with near-one-hot attention (``quick``: that one only);
``rel_err = max|closed − autograd| / max|autograd|``, tolerance 1e-10. And one row per autodiff trap,
``holds`` while the trap is still there (a row that turns ``fails`` means PyTorch fixed it and the book's
text must change): double backward through the default CPU attention kernel raises; ``torch.func.hessian``
of the layer is wrong through LayerNorm.
"""
from __future__ import annotations

import warnings

from ..exact import encoder_layer as ref
from ..theory.encoder_layer import encoder_layer_hessian
from .row import Row
from .theory import _quiet_single_thread

__all__ = ["run_checks", "TOL", "TRAP_TOL", "RESULT", "SHAPE"]

TOL = 1e-10
TRAP_TOL = 1e-6
RESULT = "encoder_layer"
SHAPE = dict(L=5, d_model=8, dim_feedforward=6)
# (seed, sharp, x_scale): generic; near-one-hot attention with larger inputs
INSTANCES = ((0, 1.0, 1.0), (1, 8.0, 2.0))


def _layer(cfg: dict, seed: int, sharp: float, x_scale: float):
    return ref.random_layer(SHAPE["d_model"], cfg["nhead"], SHAPE["dim_feedforward"], SHAPE["L"], seed=seed,
                            norm_first=cfg["norm_first"], activation=cfg["activation"], bias=cfg["bias"],
                            sharp=sharp, x_scale=x_scale)


def _config_row(cfg: dict, quick: bool) -> Row:
    insts = INSTANCES[1:] if quick else INSTANCES
    err, n = 0.0, 0
    for seed, sharp, xs in insts:
        layer, X, T = _layer(cfg, seed, sharp, xs)
        H_ref = ref.hessian_autograd(layer, X, target=T, is_causal=cfg["causal"])
        H = encoder_layer_hessian(layer, X, target=T, is_causal=cfg["causal"]).dense
        err = max(err, ref.relative_error(H, H_ref))
        n = H.shape[0]
    cid = ref.config_id(cfg)
    what = (f"closed-form loss Hessian of nn.TransformerEncoderLayer ({'pre' if cfg['norm_first'] else 'post'}-norm, "
            f"{cfg['activation']}, bias={cfg['bias']}, nhead={cfg['nhead']}, "
            f"{'causal mask' if cfg['causal'] else 'no mask'}) vs reverse-over-reverse autograd of the layer (MATH)")
    return Row(id=f"{RESULT}.{cid}", result=RESULT, kind="formula", role="statement", what=what,
               verdict="verified" if err <= TOL else "fails", expected="verified", rel_err=err, tolerance=TOL,
               instances=(f"{len(insts)} inst: L={SHAPE['L']} d_model={SHAPE['d_model']} "
                          f"dim_feedforward={SHAPE['dim_feedforward']}; compared ({n}, {n})"),
               note="instances: " + "; ".join(f"seed {s}, Q/K weights x{a:g}, X x{b:g}" for s, a, b in insts))


def _trap_rows() -> list[Row]:
    layer, X, T = _layer(dict(norm_first=False, activation="relu", bias=True, nhead=2), 0, 1.0, 1.0)
    msg = ref.default_kernel_double_backward_error(layer, X, T)
    expected_msg = "derivative for aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented"
    a = Row(id=f"{RESULT}.trap.default_kernel_double_backward", result=RESULT, kind="software", role="reference",
            what="double backward through nn.TransformerEncoderLayer under the default CPU attention kernel raises "
                 "(so the references use the MATH backend)",
            verdict="holds" if msg is not None and expected_msg in msg else "fails", expected="holds",
            instances="L=5 d_model=8 nhead=2 dim_feedforward=6",
            note=(f"raises: {msg.splitlines()[0]}" if msg else
                  "no longer raises: PyTorch fixed it; the book text must change"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        H_func = ref.func_hessian(layer, X, target=T)
    H_ref = ref.hessian_autograd(layer, X, target=T)
    err, asym = ref.relative_error(H_func, H_ref), ref.asymmetry(H_func)
    b = Row(id=f"{RESULT}.trap.func_hessian_layernorm", result=RESULT, kind="software", role="reference",
            what="torch.func.hessian (forward-over-reverse) of the layer under MATH is wrong through LayerNorm: max "
                 "rel err vs reverse-over-reverse autograd exceeds 1e-6",
            verdict="holds" if err > TRAP_TOL else "fails", expected="holds", value=err, tolerance=TRAP_TOL,
            instances="L=5 d_model=8 nhead=2 dim_feedforward=6, post-norm",
            note=f"max rel err {err:.2e}, asymmetry max|H - Hᵀ|/max|H| {asym:.2e}"
                 + ("" if err > TRAP_TOL else "; PyTorch fixed it: the book text must change"),
            details={"rel_err": err, "asymmetry": asym})
    return [a, b]


def run_checks(quick: bool = False) -> list[Row]:
    """48 configuration rows and 2 trap rows (same ids with ``quick``, which uses one instance per row)."""
    with _quiet_single_thread():
        return [_config_row(cfg, quick) for cfg in ref.CONFIGS] + _trap_rows()
