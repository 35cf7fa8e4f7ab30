"""Closed-form Jacobians and Hessians of the paper, as it prints them (corrected where it is wrong).

Modules: :mod:`.calculus` (Appendix B), :mod:`.layernorm` (Theorems 2-3), :mod:`.ffn` (Lemma 1, FFN Jacobians),
:mod:`.attention` (self-attention Jacobians, H_o / H_f, Φ), :mod:`.block` (Theorems 4-5, Gauss–Newton assembly),
:mod:`.errata` (the paper's misprints) and :mod:`.notation` (one notation for the book).
"""
from . import attention, block, calculus, ffn, layernorm

__all__ = ["attention", "block", "calculus", "ffn", "layernorm"]
