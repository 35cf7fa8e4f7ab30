"""Numerical checks of the paper's bounds: where each holds, how tight it is, where it fails.

The paper (Petrov et al., arXiv:2510.16927) bounds the spectral norm of the per-sample Hessian of a
single self-attention layer (Theorem 1, both as printed in §3.1 and as derived at the end of
App. C.1), of a post-norm transformer block (Theorem 6, per parameter block and overall, with the
App. C.6 estimates, Lemma 4 for LayerNorm and the Proposition for ``Y`` and ``S``) and the change of
the empirical loss with one more sample (Theorem 7, under Assumption 1).  This package evaluates
every such inequality against its exact counterpart.

Modules:

* :mod:`.instance`    — float64 problem instances (``X``, weights, target) and their JSON form;
* :mod:`.exact`       — exact counterparts by ``torch.func`` (hand-written softmax/LayerNorm);
* :mod:`.linalg`      — spectral norms: dense, Lanczos, second-derivative tensors;
* :mod:`.formulas`    — the bounds, constants as printed;
* :mod:`.checks`      — the registry (one entry per bound or lemma) and ``evaluate``;
* :mod:`.sweeps`      — σ, attention sharpness, Q/K balance, width, length, LayerNorm shape;
  summaries, slopes, counter-examples and their replay;
* :mod:`.adversarial` — gradient search for the worst instance of a check;
* :mod:`.training`    — init vs trained MNIST model (per sample and batch, curvlinops);
* :mod:`.theorem7`    — ``theorem7.run(model, dataset)``, ``theorem7.rhs(...)`` (Fig. 6 overlay);
* :mod:`.assumption1` — ``assumption1.gradient_norms(model, dataset, ks)`` (Fig. 12);
* :mod:`.run`, :mod:`.verify` — ``curvature-gap bounds`` and the ``curvature-gap verify`` rows.
"""
from . import checks, exact, formulas, instance, linalg, sweeps

__all__ = ["checks", "exact", "formulas", "instance", "linalg", "sweeps"]
