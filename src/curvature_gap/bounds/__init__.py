"""Numerical checks of the paper's bounds: where each holds, how tight it is, where it fails.

The paper (Petrov et al., arXiv:2510.16927) bounds the spectral norm of the per-sample Hessian of a single
self-attention layer (Theorem 1, as printed in §3.1 and as derived in App. C.1) and of a post-norm transformer block
(Theorem 6, with the App. C.6 estimates, Lemma 4 for LayerNorm and the Proposition for ``Y`` and ``S``). This package
evaluates every such inequality against its exact counterpart, and the companion's repair of Theorem 1:
:mod:`.formulas` (right-hand sides), :mod:`.quantities` (exact left-hand sides), :mod:`.declarations` (each bound
declared once as a :class:`~.bound.Bound`), :mod:`.registry` (every view of them and ``evaluate``), :mod:`.sweeps`
(typical draws, summaries, counter-examples), :mod:`.search` (the worst-case search), :mod:`.training` and
:mod:`.ce` (the MNIST ViT), :mod:`.run` (``curvature-gap bounds``).
"""
from . import bound, declarations, formulas, quantities, registry, sweeps

__all__ = ["bound", "declarations", "formulas", "quantities", "registry", "sweeps"]
