"""The "Adding an operation" recipe of CONTRIBUTING.md works: its code block, taken from the file itself, writes a new
op (SiLU) to the engine's protocol, checks every rule with the one harness (reverse-over-reverse autograd and central
differences) and uses it in a program whose exact Hessian equals autograd's in float64. Its checks catch a wrong
second-order rule, a wrong first-order rule and a tolerance no float64 Hessian meets."""
from __future__ import annotations

import pytest

from cases import mutated_recipe, run_recipe

pytestmark = pytest.mark.usefixtures("one_thread")
SECTION = "Adding an operation"


def test_the_recipe_writes_checks_and_uses_an_op():
    ns = run_recipe(SECTION)
    err = ns["err"]
    assert max(err[k] for k in ("vjp", "jvp", "hvp")) <= 1e-10 and 0 < err["hvp_fd"] <= 1e-6
    H, ref = ns["H"], ns["ref"]
    P = sum(p.numel() for p in ns["mlp"].parameters())
    assert H.shape == ref.shape == (P, P) and 0 < float((H - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    assert [nd.op.__class__.__name__ for nd in ns["program"].nodes] == ["Linear", "SiLU", "Linear", "MSE"]


def test_a_wrong_second_derivative_fails_the_recipe():
    with pytest.raises(AssertionError):
        run_recipe(SECTION, mutated_recipe(SECTION, "(2 + h * (1 - 2 * s))", "(2 + h * (1 - s))"))


def test_a_wrong_first_derivative_fails_the_recipe():
    with pytest.raises(AssertionError):
        run_recipe(SECTION, mutated_recipe(SECTION, 'return [d_y * ctx["a1"]]', 'return [d_y * ctx["a1"] * 1.001]'))


def test_a_tolerance_no_float64_hessian_meets_fails_the_recipe():
    with pytest.raises(AssertionError):
        run_recipe(SECTION, mutated_recipe(SECTION, "assert ((H - ref).abs().max() / ref.abs().max()).item() <= 1e-10",
                      "assert ((H - ref).abs().max() / ref.abs().max()).item() <= 1e-18"))
