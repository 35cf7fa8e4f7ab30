"""LayerNorm closed forms: Assumption 2 handling and small direct checks."""
import math

import pytest
import torch
from torch.func import jacfwd, jacrev

from curvature_gap.theory import block as bk
from curvature_gap.theory import layernorm as ln


def ref_ln(X):
    M = X - X.mean(dim=1, keepdim=True)
    return M / M.pow(2).mean(dim=1, keepdim=True).sqrt()


@pytest.mark.parametrize("fn", [ln.layernorm, ln.sigma, ln.P, ln.jacobian, ln.dP_dX, ln.hessian,
                                ln.hessian_rowwise])
def test_zero_variance_row_raises_clear_error(fn):
    X = torch.randn(3, 4, dtype=torch.float64)
    X[1] = 0.7                                  # constant row: σ_1 = 0
    with pytest.raises(ValueError) as err:
        fn(X)
    msg = str(err.value)
    assert "Assumption 2" in msg and "ε" in msg and "perturb" in msg and "row 1" in msg


def test_zero_variance_in_block_raises_not_nan():
    X = torch.randn(3, 4, dtype=torch.float64)
    zero = torch.zeros(4, 4, dtype=torch.float64)
    W_QK = torch.randn(4, 2, dtype=torch.float64)
    # W_V = 0 makes U = X; a constant token row of X then violates Assumption 2 at the first LayerNorm
    X[2] = -1.25
    with pytest.raises(ValueError, match="Assumption 2"):
        bk.first_order(X, W_QK, W_QK, zero, torch.randn(4, 6, dtype=torch.float64),
                       torch.randn(6, 4, dtype=torch.float64))


def test_nonconstant_rows_are_finite_and_match_autograd():
    X = torch.randn(4, 5, dtype=torch.float64)
    J = ln.jacobian(X)
    H = ln.hessian(X)
    assert torch.isfinite(J).all() and torch.isfinite(H).all()
    assert float((J - jacrev(ref_ln)(X).reshape(20, 20)).abs().max()) < 1e-12
    Href = jacfwd(jacrev(ref_ln))(X).reshape(400, 20)
    assert float((H - Href).abs().max()) <= 1e-10 * float(Href.abs().max())


def test_printed_dD_dX_is_off_by_sqrt_dV():
    X = torch.randn(3, 5, dtype=torch.float64)
    ratio = ln.dD_dX_printed(X) / ln.dD_dX(X)
    finite = torch.isfinite(ratio)
    assert torch.allclose(ratio[finite], torch.full_like(ratio[finite], math.sqrt(5)))


def test_printed_IL_form_is_ill_dimensioned_unless_L_equals_dV():
    with pytest.raises(ValueError, match="ill-dimensioned"):
        ln.d_PkronI_dX_printed(torch.randn(3, 4, dtype=torch.float64))
    X = torch.randn(4, 4, dtype=torch.float64)
    assert float((ln.d_PkronI_dX_printed(X) - ln.d_PkronI_dX(X)).abs().max()) < 1e-14
