"""What the closed-form rows share: tolerances, the relative error, the random instances, the row builders.

``rel_err`` is ``max|closed − reference| / max|reference|`` over all instances (for analytically zero
objects the denominator is the size of the matching first derivative, stated in the note). Tolerances:
1e-10 against autograd, 1e-6 against finite differences. A printed form counts as wrong when its error
exceeds 1e-3 or when it is ill-dimensioned; the row is then ``corrected`` (the corrected form is what is
implemented and verified) and ``printed_rel_err`` is the printed form's error.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from typing import Callable

import torch

from ...exact.instances import Instance, random_instance
from ...row import Row

__all__ = ["TOL", "FD_TOL", "BAD", "SHARPNESS", "RESULT_OF", "ROLE", "result_of", "rel_err", "check_instance", "Accumulator",
           "formula_row", "erratum_row", "try_printed", "block_args", "checked_instances", "heavy_subset",
           "quiet_single_thread"]

TOL = 1e-10
FD_TOL = 1e-6
BAD = 1e-3
# attention far from uniform in the closed-form checks: W_Q, W_K scaled by 1.5 (scores by 2.25)
SHARPNESS = 2.25

# id prefix -> the paper's result the row is evidence for (see curvature_gap.findings)
RESULT_OF = {"appB": "appB", "sec2": "sec2", "thm2": "thm2", "thm3": "thm3", "lem1": "lem1", "thm4": "thm4",
             "noci": "thm4", "attn": "sa_hessian", "lemC1": "sa_hessian", "orm": "sa_hessian", "sa": "sa_hessian",
             "lem2": "lem2", "thm5": "thm5", "gn": "gn"}
# rows that check a formula of a detailed version or a step of a proof rather than the statement
ROLE = {
    "thm2.layernorm.dM_dX": "detail", "thm2.layernorm.dsigma_dX": "detail", "thm2.layernorm.dP_dX": "detail",
    "thm3.layernorm.d_PkronI_dX": "proof", "thm3.layernorm.d_IkronMT_dX": "proof", "thm3.layernorm.dD_dX": "proof",
    "thm3.layernorm.d2P_dX2": "proof", "thm3.layernorm.hessian_rowwise": "reference",
    "thm4.ffn.B1": "detail", "thm4.ffn.B2": "detail", "thm4.ffn.J_SY": "detail", "thm4.relu_mask": "detail",
    "noci.G_V": "proof", "noci.G_Q": "proof", "noci.G_K": "proof", "noci.uniform_dA_dT": "proof",
    "thm5.xi12_naming": "detail", "thm5.xi21_printed": "detail", "thm5.xi1k_identity": "detail",
    "thm5.proof.dW2T_commutation": "proof", "thm5.phi.uniform_zero": "proof", "thm5.symmetry": "detail",
    "thm5.phi.contracted": "reference", "gn.loss_hessian.contracted": "reference",
    "gn.loss_hessian.literal_symmetry": "reference", "lemC1.softmax.hessian_contracted": "reference",
    "appB.commutation_apply": "reference",
}


def result_of(row_id: str) -> str:
    return RESULT_OF[row_id.split(".")[0]]


def rel_err(a: torch.Tensor, b: torch.Tensor, scale: float = 0.0) -> float:
    """``max|a - b| / max(max|b|, scale)`` (absolute error when both are zero)."""
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    den = max(float(b.abs().max()) if b.numel() else 0.0, scale)
    return diff / den if den > 0 else diff


def check_instance(L: int, d_V: int, d_K: int, d_ff: int, seed: int, uniform: str | None = None) -> Instance:
    """A closed-form test instance: attention far from uniform, away from ReLU kinks, Assumption 2."""
    return random_instance(L, d_V, d_K, d_ff, seed=seed, sharpness=SHARPNESS, uniform=uniform, away_from_kinks=True)


class Accumulator:
    """Accumulates the worst error and the shapes over instances for one row."""

    def __init__(self):
        self.err = 0.0
        self.dims: list[tuple] = []
        self.obj = None
        self.printed: list[float] = []
        self.ill: list[str] = []

    def add(self, err: float, inst: Instance | None = None, obj: torch.Tensor | None = None):
        self.err = max(self.err, err)
        if inst is not None and inst.shape not in self.dims:
            self.dims.append(inst.shape)
        if obj is not None and (self.obj is None or obj.numel() > math.prod(self.obj)):
            self.obj = tuple(obj.shape)

    def shapes(self, n_inst: int | None = None) -> str:
        """E.g. ``"16 inst: L∈{3,5} dV∈{4,6} dK=3 dff∈{6,8}; compared (900, 30)"``."""
        if self.dims:
            parts = []
            for name, vals in zip(("L", "dV", "dK", "dff"), zip(*self.dims)):
                u = sorted(set(vals))
                parts.append(f"{name}={u[0]}" if len(u) == 1 else f"{name}∈{{{','.join(map(str, u))}}}")
            dims = " ".join(parts)
        else:
            dims = "random matrices"
        k = f"{n_inst} inst: " if n_inst else ""
        return f"{k}{dims}; compared {self.obj}" if self.obj else f"{k}{dims}"


def formula_row(rid: str, what: str, acc: Accumulator, tol: float = TOL, note: str = "", n_inst: int | None = None) -> Row:
    verdict = "verified" if acc.err <= tol else "fails"
    return Row(id=rid, result=result_of(rid), kind="formula", role=ROLE.get(rid, "statement"), what=what,
               verdict=verdict, expected="verified", claim="verified", rel_err=acc.err, tolerance=tol,
               instances=acc.shapes(n_inst), note=note)


def erratum_row(rid: str, what: str, acc: Accumulator, note: str = "", tol: float = TOL, n_inst: int | None = None,
                 wrong_verdict: str = "corrected") -> Row:
    """Row for a formula printed wrongly: ``acc.err`` is the corrected form's error, ``acc.printed``
    the printed form's errors where computable, ``acc.ill`` where it is ill-dimensioned.
    ``wrong_verdict`` is ``corrected`` (a real error) or ``notation`` (a notational convention)."""
    printed = max(acc.printed) if acc.printed else None
    wrong = (printed is not None and printed > BAD) or bool(acc.ill)
    if acc.err > tol:
        verdict = "fails"
    else:
        verdict = wrong_verdict if wrong else "verified"
    parts = [note] if note else []
    if printed is not None:
        parts.append(f"printed form: max rel err {printed:.3g}")
    if acc.ill:
        ill = sorted(set(acc.ill))
        more = f" (and {len(ill) - 1} more)" if len(ill) > 1 else ""
        parts.append(f"printed form not evaluable as written: {ill[0]}{more}")
    return Row(id=rid, result=result_of(rid), kind="formula", role=ROLE.get(rid, "statement"), what=what,
               verdict=verdict, expected=wrong_verdict, claim="verified", rel_err=acc.err,
               printed_rel_err=printed, tolerance=tol, instances=acc.shapes(n_inst), note=" | ".join(parts))


def try_printed(acc: Accumulator, fn: Callable[[], torch.Tensor], ref: torch.Tensor, inst: Instance | None,
                 scale: float = 0.0):
    """Evaluate a printed form; record its error, or record that it is ill-dimensioned."""
    try:
        val = fn()
        acc.printed.append(rel_err(val, ref, scale))
    except (RuntimeError, ValueError):
        acc.ill.append(("ill-dimensioned at " + inst.shape_str()) if inst is not None else "ill-dimensioned")


def block_args(inst: Instance) -> list:
    return [inst.X, *inst.weights]


# ============================================================== instance sets
def checked_instances(quick: bool) -> list:
    if quick:
        grid = [((3, 4, 3, 6), 0), ((5, 6, 3, 8), 1)]
    else:
        grid = [((L, dV, 3, dff), s) for L in (3, 5) for dV in (4, 6) for dff in (6, 8) for s in (0, 1)]
    return [check_instance(*shape, seed=s) for shape, s in grid]


def heavy_subset(insts: list[Instance], quick: bool) -> list:
    """Subset for dense literal assemblies and finite differences."""
    return insts[:1] if quick else [insts[0], insts[-1]]


# ============================================================== running
@contextlib.contextmanager
def quiet_single_thread():
    """The checks are many small dense products: run them on one thread (restored afterwards),
    which is much faster than contended multi-threading, and silence torch's deprecation chatter."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\..*")
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
            yield
    finally:
        torch.set_num_threads(n)

