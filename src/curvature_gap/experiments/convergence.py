"""Fig. 6: loss-landscape convergence at the trained weights w*.

The paper's procedure: (1) train to convergence, keep w*; (2) start from the empty dataset, add data
batch by batch and take the mean loss L_k over the k batches seen; (3) plot |L_{k+1} − L_k| against k
on log-log axes with its EMA and a linear trend. Here the per-sample losses l_i(w*) are computed
once; each random order of the data then gives L_k = mean of the first k batches exactly
(``cumsum / k``), and |L_{k+1} − L_k| is averaged over ``n_permutations`` orders. The trend is a
least-squares line in log-log space through log-spaced k >= ``fit_k_min`` (theory: slope −1, from
L_{k+1} − L_k = (b_{k+1} − L_k)/(k+1) with b_{k+1} the (k+1)-th batch mean).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .common import Context, add_footer, new_figure
from .settings import ConvergenceSettings


@torch.no_grad()
def per_sample_losses(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, device, chunk: int = 1000) -> np.ndarray:
    model.eval()
    out = []
    for i in range(0, len(labels), chunk):
        x, y = images[i : i + chunk].to(device), labels[i : i + chunk].to(device)
        out.append(nn.functional.cross_entropy(model(x), y, reduction="none").double().cpu())
    return torch.cat(out).numpy()


def loss_differences(losses: np.ndarray, batch_size: int, n_permutations: int, seed: int = 0) -> np.ndarray:
    """|L_{k+1} − L_k| for k = 1..K−1 (K = full batches), one row per random order of the samples."""
    losses = np.asarray(losses, dtype=np.float64)
    K = len(losses) // batch_size
    if K < 3:
        raise ValueError(f"{len(losses)} samples make only {K} batches of {batch_size}; need at least 3")
    rng = np.random.default_rng(seed)
    k = np.arange(1, K + 1)
    rows = []
    for _ in range(n_permutations):
        perm = rng.permutation(len(losses))[: K * batch_size]
        b = losses[perm].reshape(K, batch_size).mean(1)
        L = np.cumsum(b) / k
        rows.append(np.abs(np.diff(L)))
    return np.stack(rows)


def ema(x: np.ndarray, beta: float) -> np.ndarray:
    """Exponential moving average e_i = beta e_{i-1} + (1 − beta) x_i, started at x_0."""
    out = np.empty(len(x), dtype=np.float64)
    acc = float(x[0])
    for i, v in enumerate(x):
        acc = beta * acc + (1 - beta) * float(v) if i else acc
        out[i] = acc
    return out


def loglog_ema(k: np.ndarray, y: np.ndarray, beta: float, per_decade: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """EMA of log10 y taken along log-spaced k (``per_decade`` points per decade of k).

    On log-log axes an EMA over consecutive k lags by a growing fraction of a decade at small k;
    along log-spaced k its lag is the same everywhere (beta / (1 − beta) points).
    """
    k = np.asarray(k, dtype=np.float64)
    n = max(2, int(np.ceil(np.log10(k[-1] / k[0]) * per_decade)) + 1)
    kk = np.geomspace(k[0], k[-1], n)
    ly = np.interp(np.log10(kk), np.log10(k), np.log10(y))
    return kk, 10 ** ema(ly, beta)


def fit_loglog(k: np.ndarray, y: np.ndarray, k_min: int, n_points: int) -> dict:
    """Least-squares line log10 y = a log10 k + b through log-spaced k >= k_min."""
    k = np.asarray(k)
    k_hi = int(k.max())
    k_min = min(max(1, k_min), k_hi)
    ks = np.unique(np.round(np.geomspace(k_min, k_hi, n_points)).astype(int))
    sel = np.searchsorted(k, ks)
    X, Y = np.log10(k[sel]), np.log10(y[sel])
    a, b = np.polyfit(X, Y, 1)
    resid = Y - (a * X + b)
    r2 = 1 - float(resid @ resid) / float(((Y - Y.mean()) ** 2).sum())
    return dict(slope=float(a), intercept=float(b), r2=r2, k_fit=ks.tolist())


def find_theorem7_bound():
    """(name, function) of Theorem 7's right-hand side ``rhs(k, ell_max, M, dist2)`` from
    ``curvature_gap.bounds.theorem7``, or (None, None) when that module is not available."""
    try:
        from ..bounds.theorem7 import rhs
    except Exception:  # noqa: BLE001 - a missing or broken bounds module means no overlay
        return None, None
    return "curvature_gap.bounds.theorem7.rhs", rhs


def compute_convergence(ctx: Context, s: ConvergenceSettings) -> tuple[dict, dict]:
    model, info = ctx.trained_model(s.model)
    tr = ctx.datasets_for(s.model).train
    ctx.log(f"per-sample losses at w* on {len(tr)} training images")
    losses = per_sample_losses(model, tr.images, tr.labels, ctx.torch_device)
    D = loss_differences(losses, s.batch_size, s.n_permutations, s.seed)
    mean = D.mean(0)
    k = np.arange(1, D.shape[1] + 1)
    fit = fit_loglog(k, mean, s.fit_k_min, s.fit_points)
    k_ema, y_ema = loglog_ema(k, mean, s.ema_beta)
    arrays = dict(k=k, mean_abs_diff=mean, k_ema=k_ema, ema=y_ema, diffs=D, losses=losses,
                  q10=np.quantile(D, 0.1, axis=0), q90=np.quantile(D, 0.9, axis=0))
    loss_max = float(losses.max())
    theorem7 = dict(status="not overlaid: curvature_gap.bounds.theorem7 is not available")
    name, fn = find_theorem7_bound()
    if fn is not None:
        try:
            # at w = w* the M ||w - w*||^2 term vanishes, whatever M is
            rhs = np.asarray(fn(k, loss_max, 0.0, 0.0), dtype=np.float64)
            if rhs.shape != k.shape:
                raise ValueError(f"returned shape {rhs.shape}, expected {k.shape}")
            arrays["theorem7_rhs"] = rhs
            theorem7 = dict(status="overlaid", function=name, loss_max=loss_max,
                            note="evaluated at w = w*, where the M||w - w*||^2 term vanishes: 2 l_max/(k+1) with "
                                 "l_max = max_i l_i(w*). With k counting batches the bound still holds: "
                                 "L_{k+1} - L_k = (b_{k+1} - L_k)/(k+1) with a batch mean b_{k+1} in [0, l_max].")
        except Exception as exc:  # noqa: BLE001 - report, do not fail the figure
            theorem7 = dict(status=f"not overlaid: {name}(k, l_max, M, dist2) failed ({exc})")
    check = _cross_check_running_mean(ctx, model, tr, s, losses)
    meta = dict(
        profile=ctx.profile, model=s.model, n_blocks=ctx.train_cfg(s.model).model_config().n_blocks,
        dataset="MNIST" if s.model == "mnist" else "CIFAR-100", n_samples=len(losses),
        n_batches=int(D.shape[1] + 1), batch_size=s.batch_size, n_permutations=s.n_permutations,
        fit=fit, loss_max=loss_max, loss_mean=float(losses.mean()), checkpoint=info, theorem7=theorem7,
        running_mean_cross_check=check,
        substitution=(None if s.model == "cifar100" else
                      "smoke profile: the MNIST 1-block model stands in for the paper's 8-block CIFAR-100 model"),
    )
    return arrays, meta


def _cross_check_running_mean(ctx, model, tr, s, losses) -> dict:
    """Compare L_k (identity order) with ``curvature_gap.hessian.losses.running_mean_losses`` if present."""
    try:
        from ..hessian.losses import running_mean_losses
    except ImportError:
        return dict(status="skipped: curvature_gap.hessian.losses not available")
    try:
        theirs = np.asarray(running_mean_losses(model, tr, s.batch_size, ctx.torch_device), dtype=np.float64).ravel()
        K = len(losses) // s.batch_size
        mine = np.cumsum(losses[: K * s.batch_size].reshape(K, s.batch_size).mean(1)) / np.arange(1, K + 1)
        n = min(len(mine), len(theirs))
        return dict(status="ok", max_abs_difference=float(np.abs(mine[:n] - theirs[:n]).max()), n_compared=n)
    except Exception as exc:  # noqa: BLE001
        return dict(status=f"failed: {type(exc).__name__}: {exc}")


def plot_convergence(result):
    a, meta = result.arrays, result.meta
    k, y = a["k"], a["mean_abs_diff"]
    fit = meta["fit"]
    fig = new_figure(8.5, 6.2)
    ax = fig.subplots()
    ax.fill_between(k, a["q10"], a["q90"], color="tab:blue", alpha=0.12, lw=0, label="10–90 % over orders")
    ax.plot(k, y, color="tab:blue", lw=0.6, alpha=0.45, label=f"mean over {meta['n_permutations']} orders")
    ax.plot(a["k_ema"], a["ema"], color="tab:blue", lw=2.0,
            label=f"EMA along log k (β = {result.config['settings']['ema_beta']})")
    kk = np.array([fit["k_fit"][0], k[-1]], dtype=float)
    ax.plot(kk, 10 ** (fit["slope"] * np.log10(kk) + fit["intercept"]), color="0.45", lw=1.6,
            label=f"linear trend: slope {fit['slope']:.3f} (R² {fit['r2']:.3f})")
    ax.plot(k, y[0] * (k[0] / k), color="0.7", ls=":", lw=1, label="slope −1 (theory)")
    if "theorem7_rhs" in a:
        ax.plot(k, a["theorem7_rhs"], color="tab:red", ls="--",
                label=f"Theorem 7 bound at w*: 2ℓ_max/(k+1), ℓ_max = max_i l_i(w*) = {meta['loss_max']:.2f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"k (batches of {meta['batch_size']} training samples)")
    ax.set_ylabel("|L_{k+1}(w*) − L_k(w*)|")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower left")
    data = f"{meta['dataset']}, {meta['n_blocks']}-block ViT"
    sub = f"\n{meta['substitution']}" if meta.get("substitution") else ""
    t7 = meta["theorem7"]["status"]
    t7 = ("Theorem 7 bound at w = w* (M-term vanishes) from curvature_gap.bounds.theorem7" if t7 == "overlaid"
          else f"Theorem 7 bound {t7}")
    fig.suptitle(f"Loss-landscape convergence at w*: {data}, {meta['n_samples']} samples, fitted slope "
                 f"{fit['slope']:.3f} (theory −1){sub}\n{t7}", fontsize=9)
    add_footer(fig, result)
    return fig
