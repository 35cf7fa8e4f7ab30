"""Closed-form Jacobians and Hessians of the paper, as it prints them (corrected where it is wrong).

Modules: :mod:`.calculus` (Appendix B), :mod:`.layernorm` (Theorems 2-3), :mod:`.ffn`
(Lemma 1, FFN Jacobians), :mod:`.attention` (self-attention Jacobians, H_o / H_f, Φ),
:mod:`.block` (Theorems 4-5 and the Gauss–Newton assembly), :mod:`.errata` (the paper's
misprints) and :mod:`.notation` (one notation for the book). Beyond the paper: :mod:`.encoder_layer`
(the paper's and the authors' blocks as points of ``torch.nn.TransformerEncoderLayer``'s family, and
:func:`encoder_layer_hessian`, its Hessian under PyTorch's argument names, by the engine of
:mod:`curvature_gap.hessian`). The autograd references they are checked against live in
:mod:`curvature_gap.exact`; the checks themselves in :mod:`curvature_gap.checks.theory`.
"""
from . import attention, block, calculus, encoder_layer, ffn, layernorm
from .encoder_layer import encoder_layer_hessian

__all__ = ["attention", "block", "calculus", "ffn", "layernorm", "encoder_layer", "encoder_layer_hessian"]
