"""curvature_gap.theory.layernorm: Assumption 2 handling, small direct checks against autograd, and the
norms as one row of the input flattens."""
import math

import pytest
import torch
from torch.func import jacfwd, jacrev

from curvature_gap.theory import block as bk
from curvature_gap.theory import layernorm as ln

pytestmark = pytest.mark.usefixtures("one_thread")


def ref_ln(X):
    M = X - X.mean(dim=1, keepdim=True)
    return M / M.pow(2).mean(dim=1, keepdim=True).sqrt()


@pytest.mark.parametrize("fn", [ln.layernorm, ln.sigma, ln.P, ln.jacobian, ln.dP_dX, ln.hessian,
                                ln.hessian_rowwise])
@pytest.mark.fault("zero-variance-layernorm")
def test_zero_variance_row_raises_clear_error(fn):
    X = torch.randn(3, 4, dtype=torch.float64)
    X[1] = 0.7                                  # constant row: σ_1 = 0
    with pytest.raises(ValueError) as err:
        fn(X)
    msg = str(err.value)
    assert "Assumption 2" in msg and "ε" in msg and "perturb" in msg and "row 1" in msg


@pytest.mark.fault("zero-variance-layernorm")
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


def test_norms_grow_as_one_over_sigma_and_sigma_squared_as_a_row_flattens():
    X = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    res = ln.norms_as_row_flattens(X, [1.0, 0.1, 0.03, 0.01])
    # LayerNorm is invariant to each row's scale: its k-th derivative in that row scales as σ_row^(-k)
    assert res["slope_jacobian"] == pytest.approx(-1.0, abs=0.02)
    assert res["slope_hessian"] == pytest.approx(-2.0, abs=0.02)
    assert list(res["sigma_min"]) == sorted(res["sigma_min"], reverse=True)
    # the full ((L d)², L d) Hessian's norm is the largest per-row block's norm (rows are independent)
    Xc = X.clone()
    row = int(torch.argmin(ln.sigma(X)))
    Xc[row] = X[row].mean() + 0.1 * (X[row] - X[row].mean())
    full = float(torch.linalg.matrix_norm(ln.hessian(Xc), ord=2))
    assert res["hessian"][1] == pytest.approx(full, rel=1e-10)
    assert res["jacobian"][1] == pytest.approx(float(torch.linalg.matrix_norm(ln.jacobian(Xc), ord=2)), rel=1e-10)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        ln.norms_as_row_flattens(X, [0.5, 0.0])
