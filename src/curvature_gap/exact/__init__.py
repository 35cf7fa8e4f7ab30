"""The references every closed form and bound is checked against (float64, automatic differentiation).

* :mod:`.forward`     — the theory's block and self-attention layer (no biases, γ = 1, β = 0, no ε) and
  their MSE losses, built on the one forward pass in :mod:`curvature_gap.model`;
* :mod:`.derivatives` — Jacobians, second derivatives and loss Hessians by ``torch.func``, and central
  finite differences of them;
* :mod:`.instances`   — seeded random problem instances (:class:`~.instances.Instance`);
* :mod:`.linalg`      — spectral norms (dense, Lanczos) of matrices, operators and second-derivative tensors.
"""
from . import derivatives, forward, instances, linalg

__all__ = ["derivatives", "forward", "instances", "linalg"]
