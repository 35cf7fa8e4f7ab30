"""Each op of curvature_gap.hessian.ops against reverse-over-reverse autograd (<= 1e-10) and central finite
differences, in float64: its forward tangent ``ȧ``, and its adjoint tangent and parameter rows, which together are
the Hessian-vector product of ``L = φ(op(b; θ))`` with a non-linear test function φ (so both the op's own
curvature and the curvature coming from downstream enter). No forward mode anywhere in the references."""
from __future__ import annotations

import pytest
import torch

from curvature_gap.hessian.ops import activation, attention, cross_entropy, layernorm, linear

pytestmark = pytest.mark.usefixtures("one_thread")
B, n, c = 2, 5, 3
G = torch.Generator().manual_seed(0)


def r(*shape, scale=1.0):
    return scale * torch.randn(*shape, generator=G, dtype=torch.float64)


def phi_parts(a):
    """φ(a) = Σ w a + ½ Σ w2 a² (a fixed random test function): returns (φ, δa = ∂φ/∂a, the map ȧ -> δȧ)."""
    w, w2 = r(*a.shape), r(*a.shape)

    def phi(t):
        return (w * t).sum() + 0.5 * (w2 * t * t).sum()

    return phi, w + w2 * a, w2


def tok(t):
    """(c, B, n, k) directions -> the ops' token layout (B, n, c, k)."""
    return t.permute(1, 2, 0, 3)


def untok(t):
    return t.permute(2, 0, 1, 3)


def references(fn, inputs, tangents, phi):
    """Per direction j: (jvp of fn, HVP of φ∘fn per input) by reverse-over-reverse autograd, and the same by central
    finite differences of the autograd gradient (jvp: of fn itself)."""
    out = []
    for j in range(c):
        v = tuple(t[j] for t in tangents)
        _, jv = torch.autograd.functional.jvp(fn, inputs, v)
        _, hv = torch.autograd.functional.hvp(lambda *a: phi(fn(*a)), inputs, v)
        h = 1e-5

        def grad_at(s):
            a = [(x + s * t).detach().requires_grad_() for x, t in zip(inputs, v)]
            return torch.autograd.grad(phi(fn(*a)), a)

        gp, gm = grad_at(h), grad_at(-h)
        fd_h = tuple((p - m) / (2 * h) for p, m in zip(gp, gm))
        with torch.no_grad():
            fd_j = (fn(*[x + h * t for x, t in zip(inputs, v)]) - fn(*[x - h * t for x, t in zip(inputs, v)])) / (2 * h)
        out.append((jv, hv, fd_j, fd_h))
    return out


def close(a, b, tol):
    assert float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max())), float((a - b).abs().max())


def check(ours_jvp, ours_hvp, refs):
    for j, (jv, hv, fd_j, fd_h) in enumerate(refs):
        close(ours_jvp[j], jv, 1e-10)
        close(ours_jvp[j], fd_j, 1e-7)
        for o, ref, fd in zip(ours_hvp, hv, fd_h):
            close(o[j], ref, 1e-10)
            close(o[j], fd, 1e-6)


def test_linear_rules():
    x, W, b = r(B, n, 4), r(4, 6), r(6)
    dx, dW, db = r(c, B, n, 4), r(c, 4, 6), r(c, 6)
    C = x @ W + b
    phi, dC, w2 = phi_parts(C)
    dCt = linear.jvp(x, tok(dx), W, dW, db)
    ddC = w2.unsqueeze(2) * dCt
    ddx = linear.vjp_tangent(dC, ddC, W, dW)
    rows_W = linear.weight_rows(x, tok(dx), dC, ddC, W.shape, c, x)
    rows_b = linear.bias_rows(ddC, 6, c, x)
    check(untok(dCt), (untok(ddx), rows_W, rows_b), references(lambda *a: a[0] @ a[1] + a[2], (x, W, b), (dx, dW, db), phi))
    close(linear.vjp(dC, W), torch.autograd.functional.vjp(lambda t: t @ W, x, dC)[1], 1e-12)


@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_layernorm_rules(eps):
    u, gam, bet = r(B, n, 6), 1 + 0.3 * r(6), r(6)
    du, dg, dbt = r(c, B, n, 6), r(c, 6), r(c, 6)
    nh, rstd, y = layernorm.primal(u, eps, gam, bet)
    phi, d_y, w2 = phi_parts(y)
    U = lambda t: t.unsqueeze(2)  # noqa: E731
    dn, m_nu = layernorm.jvp(U(nh), U(rstd), tok(du))
    dy = layernorm.affine_jvp(U(nh), dn, gam, dg, dbt)
    ddy = U(w2) * dy
    d_n = layernorm.affine_vjp(d_y, gam)
    d_u, s = layernorm.vjp(nh, rstd, d_n)
    ddn = layernorm.affine_vjp_tangent(U(d_y), ddy, gam, dg)
    ddu = layernorm.vjp_tangent(U(nh), U(rstd), m_nu, dn, U(d_n), U(d_u), U(s), ddn)
    gw, gb = layernorm.affine_rows(U(nh), dn, U(d_y), ddy, c)
    fn = lambda u_, g_, b_: layernorm.primal(u_, eps, g_, b_)[2]  # noqa: E731
    check(untok(dy), (untok(ddu), gw, gb), references(fn, (u, gam, bet), (du, dg, dbt), phi))


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_activation_rules(act):
    h = r(B, n, 7)
    h = h + 0.2 * torch.sign(h)  # keep ReLU's kink out of the finite differences' reach
    dh = r(c, B, n, 7)
    out, a1, a2 = activation.parts(h, act)
    phi, d_r, w2 = phi_parts(out)
    dr = activation.jvp(a1, tok(dh))
    ddh = activation.vjp_tangent(a1, a2, d_r, w2.unsqueeze(2) * dr, tok(dh))
    check(untok(dr), (untok(ddh),), references(lambda t: activation.parts(t, act)[0], (h,), (dh,), phi))
    close(activation.vjp(a1, d_r), torch.autograd.functional.vjp(lambda t: activation.parts(t, act)[0], h, d_r)[1], 1e-12)


def test_attention_rules():
    q, k, x = r(B, n, 4), r(B, n, 4), r(B, n, 3)
    dq, dk, dx = r(c, B, n, 4), r(c, B, n, 4), r(c, B, n, 3)
    A = attention.primal(q, k)
    ax = A @ x
    phi, d_ax, w2 = phi_parts(ax)
    dA = attention.jvp(A, q, k, tok(dq), tok(dk), c)
    dax, dx_a = attention.mix_jvp(A, x, dA, tok(dx), c)
    adj = attention.vjp(A, x, q, k, d_ax)
    ddq, ddk, ddx = attention.vjp_tangent(A, x, q, k, ax, adj, d_ax, dA, dax, dx_a, tok(dq), tok(dk),
                                          w2.unsqueeze(2) * dax, c)
    fn = lambda q_, k_, x_: attention.primal(q_, k_) @ x_  # noqa: E731
    check(untok(dax), (untok(ddq), untok(ddk), untok(ddx)), references(fn, (q, k, x), (dq, dk, dx), phi))
    gq, gk, gx = torch.autograd.functional.vjp(fn, (q, k, x), d_ax)[1]
    close(adj.d_q, gq, 1e-12)
    close(adj.d_k, gk, 1e-12)
    close(adj.d_x, gx, 1e-12)


def test_attention_scores_bilinear_form_rules():
    """The scores as the bilinear form T = s x̃ M x̃ᵀ (M = W̃_Q W̃_Kᵀ): the forward tangent of a direction Ṁ, the
    rows of M (x fixed) and ∂L/∂M, for φ(A x) with M, x̃ = [x, 1] as the inputs."""
    x = r(B, n, 3)
    xt = torch.cat([x, torch.ones(B, n, 1, dtype=x.dtype)], -1)
    M = r(4, 4, scale=0.5)
    dM = r(c, 4, 4)
    s = attention.scale_of(torch.zeros(1, 1, 4))  # as for d_K = 4 (the query's width sets the scale)
    q = xt @ M  # then q kᵀ s = x̃ M x̃ᵀ s with k = x̃ and the scale of d_K = 4
    A = attention.primal(q, xt)
    ax = A @ x
    phi, d_ax, w2 = phi_parts(ax)
    dA = attention.jvp(A, q, xt, None, None, c, dM, xt)
    dax, dx_c = attention.mix_jvp(A, x, dA, None, c)
    adj = attention.vjp(A, x, q, xt, d_ax)
    ddTs = attention.scores_vjp_tangent(x, ax, adj, d_ax, dA, dax, dx_c, w2.unsqueeze(2) * dax, c)
    rows = attention.scores_rows(xt, ddTs, c)
    per_sample = attention.scores_rows(xt, ddTs, c, per_sample=True)
    close(per_sample.sum(0), rows, 1e-14)
    fn = lambda M_: torch.softmax(xt @ M_ @ xt.transpose(1, 2) * s, -1) @ x  # noqa: E731
    check(untok(dax), (rows,), references(fn, (M,), (dM,), phi))
    close(attention.scores_grad(xt, adj), torch.autograd.functional.vjp(fn, M, d_ax)[1], 1e-12)


def test_per_sample_rows_sum_to_the_rows():
    """The rows per sample (used to mix the embedding's columns from the positions' pass) sum to the rows."""
    x, dx, dC, ddC = r(B, n, 4), tok(r(c, B, n, 4)), r(B, n, 6), tok(r(c, B, n, 6))
    close(linear.weight_rows(x, dx, dC, ddC, (4, 6), c, x, per_sample=True).sum(0),
          linear.weight_rows(x, dx, dC, ddC, (4, 6), c, x), 1e-14)
    close(linear.weight_rows(x, None, dC, ddC, (4, 6), c, x, per_sample=True).sum(0),
          linear.weight_rows(x, None, dC, ddC, (4, 6), c, x), 1e-14)
    close(linear.bias_rows(ddC, 6, c, x, per_sample=True).sum(0), linear.bias_rows(ddC, 6, c, x), 1e-14)
    nh, dn, dy, ddy = r(B, n, 1, 6), tok(r(c, B, n, 6)), r(B, n, 1, 6), tok(r(c, B, n, 6))
    for a, b_ in zip(layernorm.affine_rows(nh, dn, dy, ddy, c, per_sample=True), layernorm.affine_rows(nh, dn, dy, ddy, c)):
        close(a.sum(0), b_, 1e-14)


def test_cross_entropy_rules():
    z, y = r(4, 5), torch.tensor([0, 3, 1, 4])
    dz = r(c, 4, 5)
    probs, loss, d_z = cross_entropy.primal(z, y)
    close(loss, torch.nn.functional.cross_entropy(z, y), 1e-15)
    close(d_z, torch.autograd.functional.vjp(lambda t: torch.nn.functional.cross_entropy(t, y), z)[1], 1e-14)
    ddz = cross_entropy.vjp_tangent(probs, dz.transpose(0, 1), 4).transpose(0, 1)
    for j in range(c):
        _, hv = torch.autograd.functional.hvp(lambda t: torch.nn.functional.cross_entropy(t, y), z, dz[j])
        close(ddz[j], hv, 1e-10)
        h = 1e-5
        g = lambda t: torch.autograd.functional.vjp(lambda s: torch.nn.functional.cross_entropy(s, y), t)[1]  # noqa: E731
        close(ddz[j], (g(z + h * dz[j]) - g(z - h * dz[j])) / (2 * h), 1e-7)


def test_a_wrong_rule_fails():
    """The check can fail: LayerNorm's adjoint tangent without its n̂̇ s term is caught."""
    u, gam, bet = r(B, n, 6), 1 + 0.3 * r(6), r(6)
    du, dg, dbt = r(c, B, n, 6), r(c, 6), r(c, 6)
    nh, rstd, y = layernorm.primal(u, 1e-5, gam, bet)
    phi, d_y, w2 = phi_parts(y)
    U = lambda t: t.unsqueeze(2)  # noqa: E731
    dn, m_nu = layernorm.jvp(U(nh), U(rstd), tok(du))
    dy = layernorm.affine_jvp(U(nh), dn, gam, dg, dbt)
    d_n = layernorm.affine_vjp(d_y, gam)
    d_u, s = layernorm.vjp(nh, rstd, d_n)
    ddn = layernorm.affine_vjp_tangent(U(d_y), U(w2) * dy, gam, dg)
    wrong = layernorm.vjp_tangent(U(nh), U(rstd), m_nu, dn, U(d_n), U(d_u), U(s) * 0, ddn)
    gw, gb = layernorm.affine_rows(U(nh), dn, U(d_y), U(w2) * dy, c)
    fn = lambda u_, g_, b_: layernorm.primal(u_, 1e-5, g_, b_)[2]  # noqa: E731
    with pytest.raises(AssertionError):
        check(untok(dy), (untok(wrong), gw, gb), references(fn, (u, gam, bet), (du, dg, dbt), phi))
