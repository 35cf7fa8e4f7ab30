"""Numerical checks of the paper's bounds: where each holds, how tight it is, where it fails.

The paper (Petrov et al., arXiv:2510.16927) bounds the spectral norm of the per-sample Hessian of a
single self-attention layer (Theorem 1, both as printed in §3.1 and as derived at the end of
App. C.1), of a post-norm transformer block (Theorem 6, per parameter block and overall, with the
App. C.6 estimates, Lemma 4 for LayerNorm and the Proposition for ``Y`` and ``S``). This package
evaluates every such inequality against its exact counterpart, and the companion's repair of
Theorem 1.

Modules:

* :mod:`.formulas`    — the bounds, constants as printed (and Theorem 1 repaired);
* :mod:`.quantities`  — the exact left-hand sides (``torch.func``, float64);
* :mod:`.bound`       — what a bound is: ``Bound``, one declaration holding everything about one inequality;
* :mod:`.declarations` — the bounds, each declared once;
* :mod:`.registry`    — every view of the declared bounds (verdicts expected, titles, search lists) and ``evaluate``;
* :mod:`.titles`      — the title and TeX of a bound row, for the errata page (read from the declarations);
* :mod:`.sweeps`      — σ, attention sharpness, Q/K balance (also at a minimiser and under uniform
  attention), width, length, LayerNorm shape; summaries, slopes, counter-examples and their replay;
* :mod:`.search` — the one worst-case search of every bound (multi-start Adam on log(bound/exact));
* :mod:`.training`    — init vs trained MNIST model (per sample and batch, curvlinops);
* :mod:`.ce`          — Theorem 6 for the cross-entropy loss through the ViT's head;
* :mod:`.run`         — ``curvature-gap bounds``: tables, summaries and counter-examples on disk.
"""
from . import bound, declarations, formulas, quantities, registry, sweeps

__all__ = ["bound", "declarations", "formulas", "quantities", "registry", "sweeps"]
