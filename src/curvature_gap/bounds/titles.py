"""What a reader is shown of a bound: its title in words and the inequality in TeX.

Keyed by the ``curvature-gap verify`` id of the bound row (the errata page keeps the id as a small reference;
the evidence of :mod:`curvature_gap.findings` names a step by its title, never by its id). Presentation only:
what is computed, and whether it fails, is the row's (:mod:`curvature_gap.bounds.checks`). A failing bound row
without an entry here stops the errata page from being written (:func:`shown`), so a new failure cannot reach
a reader as a bare id.
"""
from __future__ import annotations

_N = r"\lVert{}\rVert_2"  # ‖·‖₂


def _n(x: str) -> str:
    return _N.format(x)


X, WQ, WK, WV, W2 = _n(r"\mathbf X"), _n(r"\mathbf W_Q"), _n(r"\mathbf W_K"), _n(r"\mathbf W_V"), _n(r"\mathbf W_2")
SIGMA = r"\sigma_{\min}"

INEQUALITIES: dict[str, tuple[str, str]] = {
    "bounds.thm1.printed": (
        "Theorem 1 as printed, on the instances evaluated",
        _n(r"\mathbf H_i") + r"\le M\quad\text{(}M\text{ as printed in the statement)}"),
    "bounds.thm1.printed.admissible": (
        "Theorem 1 as printed, at a minimiser that satisfies every assumption",
        _n(r"\mathbf H_i(\mathbf w^*)") + r"\le M\quad\text{at loss }0\text{ and uniform attention }\mathbf A=\tfrac1L\mathbf 1\mathbf 1^\top"),
    "bounds.thm1.proof": (
        "Theorem 1, proof: the constant the proof ends with",
        _n(r"\mathbf H_i") + r"\le M_{\text{proof}}\quad\text{(constants }2\text{ and }\sqrt{\operatorname{rank}(\mathbf F-\mathbf{Target})}\text{)}"),
    "bounds.thm1.printed.maxblock": (
        "Theorem 1, proof: the step “3 max” over the four printed rows",
        r"\begin{aligned}&\max_{i,j\in\{Q,K,V\}}" + _n(r"\mathbf H(\mathbf W_i,\mathbf W_j)") + r"\le\max\big(r_{VV},r_{QQ},r_{VQ},r_{QK}\big)"
        r"\\&\text{(no row bounds the }K\text{–}K\text{ and }V\text{–}K\text{ blocks)}\end{aligned}"),
    "bounds.thm1.proof.maxblock": (
        "Theorem 1, proof: the same step over the proof's four rows",
        r"\max_{i,j\in\{Q,K,V\}}" + _n(r"\mathbf H(\mathbf W_i,\mathbf W_j)") + r"\le\max\big(r^{\text{proof}}_{VV},"
        r"r^{\text{proof}}_{QQ},r^{\text{proof}}_{VQ},r^{\text{proof}}_{QK}\big)"),
    "bounds.thm1.term.Ho_QQ": (
        "Theorem 1, proof: the Q–Q term",
        _n(r"\mathbf H_o(\mathbf W_Q,\mathbf W_Q)") + r"\le\frac{2}{L^3d_Vd_K}" + WK + "^2" + WV + "^2" + X + "^6"),
    "bounds.thm1.term.Ho_QK": (
        "Theorem 1, proof: the Q–K term",
        _n(r"\mathbf H_o(\mathbf W_Q,\mathbf W_K)") + r"\le\frac{2}{L^3d_Vd_K}" + WK + WQ + WV + "^2" + X + "^6"),
    "bounds.sa.dA_dT": (
        "Theorem 1, proof: the softmax Jacobian at any attention",
        _n(r"\partial\mathbf A/\partial\mathbf T") + r"\le\frac1L\quad\text{(its value at uniform attention, used for every attention)}"),
    "bounds.sa.Z1": (
        "Theorem 1, proof: the norm of Z₁",
        _n(r"\mathbf Z_1") + r"\le\frac{" + X + "^3}{L}"),
    "bounds.lemma4.J.stated": (
        "Lemma 4: the bound on LayerNorm's Jacobian",
        _n(r"\mathbf J_{\LN}") + r"\le\frac1{" + SIGMA + r"}+\frac{" + X + r"^2}{\sqrt n\," + SIGMA + "^3}"),
    "bounds.lemma4.H.stated": (
        "Lemma 4: the bound on LayerNorm's Hessian",
        _n(r"\mathbf H_{\LN}") + r"\le\frac{" + X + "}{" + SIGMA + r"^3}\Big(1+\sqrt{\tfrac mn}\Big)+\frac{" + X
        + r"^2}{\sqrt n\," + SIGMA + r"^3}+\frac{3" + X + r"^3}{n\," + SIGMA + "^5}"),
    "bounds.lemma4.dP.stated": (
        "Lemma 4, proof: the bound on ∂P/∂X",
        _n(r"\partial\mathbf P/\partial\mathbf X") + r"\le\frac{" + X + r"}{\sqrt n\," + SIGMA + "^3}"),
    "bounds.lemma4.d2P.stated": (
        "Lemma 4, proof: the bound on ∂²P/∂X²",
        _n(r"\partial^2\mathbf P/\partial\mathbf X^2") + r"\le\frac{" + X + r"}{\sqrt n\," + SIGMA + r"^3}+\frac{3"
        + X + r"^2}{n\," + SIGMA + "^5}"),
    "bounds.thm6.block.explicit": (
        "Theorem 6: the explicit bound on each block, as the proof states it",
        r"\begin{aligned}&" + _n(r"\mathbf H_{\rm tr}^{(i,j)}") + r"\le" + _n(r"\mathbf J_Z") + _n(r"\boldsymbol\xi_{ij}") + "+" + _n(r"\mathbf B_i")
        + _n(r"\mathbf H_Z") + _n(r"\mathbf B_j") + r"\\&\text{with every factor replaced by its App. C.6 estimate}\end{aligned}"),
    "bounds.thm6.block.exact": (
        "Theorem 6: the displayed per-block inequality",
        _n(r"\mathbf H_{\rm tr}^{(i,j)}") + r"\le" + _n(r"\mathbf J_Z") + _n(r"\boldsymbol\xi_{ij}") + "+" + _n(r"\mathbf B_i")
        + _n(r"\mathbf H_Z") + _n(r"\mathbf B_j")),
    "bounds.thm6.full.exact": (
        "Theorem 6: the displayed whole-Hessian inequality",
        _n(r"\mathbf H") + r"\le M_{\rm tr}\quad\text{(exact ingredient norms)}"),
    "bounds.thm6.full.explicit": (
        "Theorem 6: the explicit whole-Hessian bound",
        _n(r"\mathbf H") + r"\le M_{\rm tr}\quad\text{(every ingredient replaced by its App. C.6 estimate)}"),
    "bounds.thm6.GQ": (
        "Theorem 6, proof: the bound on G_Q",
        _n(r"\mathbf G_Q") + r"\le\frac{" + WV + WK + X + r"^3}{L\sqrt{d_K}}"),
    "bounds.thm6.GK": (
        "Theorem 6, proof: the bound on G_K",
        _n(r"\mathbf G_K") + r"\le\frac{" + WV + WQ + X + r"^3}{L\sqrt{d_K}}"),
    "bounds.thm6.Phi.QQ": (
        "Theorem 6, proof: the bound on Φ_QQ, as printed",
        _n(r"\boldsymbol\Phi_{QQ}") + r"\le\frac{12}{Ld_Vd_K}" + WV + WK + "^2" + X + r"^5\quad\text{(}\boldsymbol\Phi\text{ with the loss factor }\tfrac{2}{Ld_V}\text{)}"),
    "bounds.thm6.Phi.VQ": (
        "Theorem 6, proof: the bound on Φ_VQ, as printed",
        _n(r"\boldsymbol\Phi_{VQ}") + r"\le\frac{2}{L^2\sqrt{d_Vd_K}}" + WK + X + r"^3\quad\text{(}\boldsymbol\Phi\text{ with the loss factor }\tfrac{2}{Ld_V}\text{)}"),
    "bounds.thm6.Phi.VQ.no_loss_factor": (
        "Theorem 6, proof: the bound on Φ_VQ, without the loss factor",
        _n(r"\boldsymbol\Phi_{VQ}") + r"\le\frac{2}{L^2\sqrt{d_Vd_K}}" + WK + X + r"^3\quad\text{(}\boldsymbol\Phi=\partial^2\mathbf F/\partial\mathbf W_V\partial\mathbf W_Q\text{)}"),
    "bounds.thm6.Phi.QK": (
        "Theorem 6, proof: the bound on Φ_QK, as printed",
        _n(r"\boldsymbol\Phi_{QK}") + r"\le\frac{12}{Ld_Vd_K}" + WV + WK + WQ + X + r"^5+\frac{2}{L^2\sqrt{d_Vd_K}}" + WV + X + "^3"),
    "bounds.thm6.Phi.sym": (
        "Theorem 6, proof: the Φ bounds “by symmetry”, as printed",
        _n(r"\boldsymbol\Phi_{kl}") + r"\le\text{the bound of }\boldsymbol\Phi_{QQ},\boldsymbol\Phi_{VQ}\text{ or }\boldsymbol\Phi_{QK}"
        r"\text{ with }Q\leftrightarrow K,\quad kl\in\{KK,QV,VK,KV,KQ\}"),
    "bounds.thm6.Phi.sym.no_loss_factor": (
        "Theorem 6, proof: the Φ bounds “by symmetry”, without the loss factor",
        _n(r"\boldsymbol\Phi_{kl}") + r"\le\text{the same bounds, for }\boldsymbol\Phi=\partial^2\mathbf F/\partial\mathbf W_k\partial\mathbf W_l,"
        r"\quad kl\in\{KK,QV,VK,KV,KQ\}"),
    "bounds.thm6.xi21": (
        "Theorem 6, proof: the bound on ξ₂₁",
        _n(r"\boldsymbol\xi_{21}") + r"\le\sqrt{d_{\rm ff}}\," + W2),
}


def shown(row_id: str) -> tuple[str, str]:
    """(title in words, inequality in TeX) of a failing bound row; a row without an entry is an error that
    names the fix."""
    try:
        return INEQUALITIES[row_id]
    except KeyError:
        raise KeyError(f"the bound row {row_id!r} fails but has no title and TeX for the errata page: add it to "
                       "INEQUALITIES in curvature_gap/bounds/titles.py") from None


def step_title(row_id: str) -> str:
    """A step's title without the result it belongs to ("the Q–Q term" of "Theorem 1, proof: the Q–Q term");
    the words of the row's ``what`` where the row has no entry."""
    title = INEQUALITIES[row_id][0]
    return title.split(": ", 1)[1] if ": " in title else title
