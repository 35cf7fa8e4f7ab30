"""curvature_gap.experiments.fused_ln: torch.nn.LayerNorm's fused kernel gives a wrong Hessian (beyond the paper)."""
from __future__ import annotations

import numpy as np

from curvature_gap import experiments


def test_fused_layernorm_hessian_is_wrong_while_the_forward_pass_agrees(small_run):
    _, ctx = small_run
    f = experiments.load_results("fused_ln", ctx=ctx)      # the trained model and batch of Fig. 4
    assert f["trained"] and f["checkpoint"]["steps"] == 8 and f["columns"] >= 96
    assert f["max_relative_error"] > 1e-3          # the fused kernel's second derivatives are wrong here
    assert f["fused_asymmetry"] > 1e-6 and f["exact_asymmetry"] < 1e-5
    assert abs(f["loss_difference_forward"]) < 1e-5
    G = len(f["group_names"])
    assert f["err"].shape == (G, G) and np.nanmax(f["err"]) == f["max_relative_error"]
    assert len(experiments.plot("fused_ln", f, "error").axes) >= 1
