"""Closed-form Jacobians and Hessians of §2 of the paper, with their numerical verification.

Modules: :mod:`.calculus` (Appendix B), :mod:`.layernorm` (Theorems 2-3), :mod:`.ffn`
(Lemma 1, FFN Jacobians), :mod:`.attention` (self-attention Jacobians, H_o / H_f, Φ),
:mod:`.block` (Theorems 4-5 and the Gauss–Newton assembly), :mod:`.reference` (the
autograd references, the only autograd user here), :mod:`.verify` (``curvature-gap verify``),
:mod:`.errata` and :mod:`.notation` (tables for the book).
"""
from . import attention, block, calculus, ffn, layernorm

__all__ = ["attention", "block", "calculus", "ffn", "layernorm"]
