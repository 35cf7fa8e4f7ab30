"""The loss landscape as data is added: Theorem 7, Assumption 1 and the running means behind Fig. 6.

* :mod:`.losses`      — per-sample losses at given weights, running means ``L_k``, their differences;
* :mod:`.assumption1` — ``‖∇L_k(w*)‖`` over orders of the data (Fig. 12) and its exact mean over all orders;
* :mod:`.theorem7`    — Theorem 7's inequality on the trained ViT and on a single attention layer at an
  exact minimiser, with an adversarial search over ``w ≠ w*``.
"""
from . import assumption1, losses, theorem7

__all__ = ["assumption1", "losses", "theorem7"]
