"""curvature_gap.theory.block: Theorems 4–5 and the Gauss–Newton assembly of the loss Hessian against autograd."""
from __future__ import annotations

import pytest
import torch

from cases import tiny_instance
from curvature_gap.exact import derivatives as ad
from curvature_gap.exact.forward import block_output
from curvature_gap.exact.linalg import sym_spectral_norm
from curvature_gap.theory import block as bk

pytestmark = pytest.mark.usefixtures("one_thread")

IDX = {"Q": 1, "K": 2, "V": 3, "1": 4, "2": 5}


def _inst():
    return tiny_instance(L=3, d=3, seed=21, sharpness=2.25, away_from_kinks=True)


def test_theorem4_jacobians_equal_autograd():
    inst = _inst()
    args = [inst.X, *inst.weights]
    fo = bk.first_order(*args)
    for i in bk.BLOCK_PARAMS:
        ref = ad.jacobian(block_output, args, IDX[i])
        assert float((fo["dZ_dW"][i] - ref).abs().max()) <= 1e-11 * float(ref.abs().max()), i
    sizes = bk.param_sizes(3, 3, 3)
    assert {i: fo["dZ_dW"][i].shape[1] for i in bk.BLOCK_PARAMS} == sizes


@pytest.mark.parametrize("i, j", [("1", "2"), ("Q", "K"), ("V", "1"), ("2", "2")])
def test_theorem5_H_tr_is_the_second_derivative_of_Z(i, j):
    inst = _inst()
    args = [inst.X, *inst.weights]
    ref = ad.second_derivative(block_output, args, IDX[i], IDX[j])
    got = bk.H_tr(i, j, *args)
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) <= 1e-10 * max(float(ref.abs().max()), 1e-3)


def test_loss_hessian_contracted_and_literal_equal_autograd():
    inst = _inst()
    args = [inst.X, *inst.weights]
    ref = ad.loss_hessian_autograd(inst)                       # order BLOCK_ORDER = 1, 2, K, Q, V
    H = bk.assemble(bk.loss_hessian(*args, inst.Target))
    assert float((H - ref).abs().max()) <= 1e-11 * float(ref.abs().max())
    lit = bk.assemble(bk.loss_hessian_literal(*args, inst.Target))
    assert float((lit - ref).abs().max()) <= 1e-11 * float(ref.abs().max())


def test_diagonal_norms_under_input_scaling():
    inst = _inst()
    res = bk.diagonal_norms_under_input_scaling(inst.X, *inst.weights, inst.Target, [1.0, 2.0])
    assert list(res["scale"]) == [1.0, 2.0] and set(res["norms"]) == set(bk.BLOCK_PARAMS)
    blocks = bk.loss_hessian(2.0 * inst.X, *inst.weights, inst.Target)
    for p in bk.BLOCK_PARAMS:
        assert res["norms"][p][1] == pytest.approx(sym_spectral_norm(blocks[(p, p)]), rel=1e-12)
        assert res["decades"][p] == pytest.approx(abs(float(torch.log10(torch.tensor(res["norms"][p][1] / res["norms"][p][0])))), rel=1e-9)
