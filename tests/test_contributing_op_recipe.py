"""The "Adding an operation" recipe of CONTRIBUTING.md works: its code block, taken from the file itself, writes a new
op (SiLU) to the engine's protocol, checks every rule with the one harness (reverse-over-reverse autograd and central
differences) and uses it in a program whose exact Hessian equals autograd's in float64. Its checks catch a wrong
second-order rule, a wrong first-order rule and a tolerance no float64 Hessian meets."""
from __future__ import annotations

import re

import pytest

from cases import REPO

pytestmark = pytest.mark.usefixtures("one_thread")


def _recipe_code() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    return re.search(r"## Adding an operation.*?```python\n(.*?)```", text, re.S).group(1)


def _run(code: str) -> dict:
    ns: dict = {"__name__": "contributing_op_recipe"}
    exec(compile(code, "CONTRIBUTING.md (Adding an operation)", "exec"), ns)
    return ns


def _mutated(old: str, new: str) -> str:
    code = _recipe_code()
    assert code.count(old) == 1, old
    return code.replace(old, new)


def test_the_recipe_writes_checks_and_uses_an_op():
    ns = _run(_recipe_code())
    err = ns["err"]
    assert max(err[k] for k in ("vjp", "jvp", "hvp")) <= 1e-10 and 0 < err["hvp_fd"] <= 1e-6
    H, ref = ns["H"], ns["ref"]
    P = sum(p.numel() for p in ns["mlp"].parameters())
    assert H.shape == ref.shape == (P, P) and 0 < float((H - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    assert [nd.op.__class__.__name__ for nd in ns["program"].nodes] == ["Linear", "SiLU", "Linear", "MSE"]


def test_a_wrong_second_derivative_fails_the_recipe():
    with pytest.raises(AssertionError):
        _run(_mutated("(2 + h * (1 - 2 * s))", "(2 + h * (1 - s))"))


def test_a_wrong_first_derivative_fails_the_recipe():
    with pytest.raises(AssertionError):
        _run(_mutated('return [d_y * ctx["a1"]]', 'return [d_y * ctx["a1"] * 1.001]'))


def test_a_tolerance_no_float64_hessian_meets_fails_the_recipe():
    with pytest.raises(AssertionError):
        _run(_mutated("assert ((H - ref).abs().max() / ref.abs().max()).item() <= 1e-10",
                      "assert ((H - ref).abs().max() / ref.abs().max()).item() <= 1e-18"))
