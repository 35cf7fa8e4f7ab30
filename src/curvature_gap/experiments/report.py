"""The reproduction report: each published number beside the recomputed one.

For every result, :data:`KEY_NUMBERS` names the numbers a reader would cite (the checkpoint's
accuracy, block statistics, slopes, cross-check agreements, ratios). ``compare`` puts the published
value (``published/<profile>/``) beside the value just computed, with the relative difference, and says
what differs: nothing, the numbers (beyond ``RTOL``, e.g. another machine's float rounding), or the
configuration (another setting, seed or code: then the numbers are not expected to agree).
"""
from __future__ import annotations

import math

__all__ = ["KEY_NUMBERS", "key_numbers", "compare", "report_md", "RTOL"]

RTOL = 1e-4  # CPU runs of the same code and settings agree to rounding; GPU runs to about float32 precision


def _heat(r) -> dict:
    m = r.meta
    out = {"loss on the batch": m["loss"],
           "curvlinops agreement, float32 (max rel. diff.)": m["cross_check"]["float32"]["max_relative_difference"],
           "curvlinops agreement, float64 (max rel. diff.)": m["cross_check"]["float64"]["max_relative_difference"]}
    for u in ("W_Q", "W_K", "W_V", "W_1", "W_2", "LN1", "LN2"):
        out[f"mean abs(H) of the {u} block"] = m["unit_stats"][u]["mean"]
    if m["trained"]:
        out["test accuracy of the trained model"] = m["checkpoint"].get("test_accuracy")
    return out


def _norms(r) -> dict:
    m = r.meta
    out = {}
    for u in ("W_Q", "W_K", "W_V", "W_1", "W_2"):
        out[f"‖{u}‖_F trained"] = m["param_norms"]["trained"][u]["fro"]
        out[f"‖H_{u}‖_2 trained"] = m["hessian_stats"]["trained"][u]["spectral"]
    return out


def _conv(r) -> dict:
    m = r.meta
    return {"fitted slope": m["fit"]["slope"], "R²": m["fit"]["r2"], "ℓ_max = max loss at w*": m["loss_max"],
            "mean loss at w*": m["loss_mean"]}


def _dyn(r) -> dict:
    a = r.arrays
    return {"‖H‖_F at the last step": float(a["hess_fro"][-1]), "‖H‖_2 at the last step": float(a["hess_spec"][-1]),
            "‖W‖_F at the last step": float(a["param_fro"][-1])}


def _a1(r) -> dict:
    m = r.meta
    return {"‖∇L_N(w*)‖": m["grad_norm_full"], "rms per-sample gradient norm": m["rms_per_sample_grad_norm"],
            "slope at small k": m["slope_small_k"]}


def _fused(r) -> dict:
    m = r.meta
    return {"max relative error of the fused Hessian": m["max_relative_error"],
            "asymmetry of the fused Hessian": m["fused_asymmetry"]}


def _enc(r) -> dict:
    fro = r.arrays["fro"]
    out = {}
    for i, c in enumerate(r.meta["configs"]):
        for t, when in enumerate(r.meta["times"]):
            out[f"largest block Frobenius norm, {c}, {when}"] = float(fro[i, t].max())
    return out


def _t7(r) -> dict:
    m = r.meta
    out = {"ℓ_max": m["ell_max"], "M exact": m["M"]["exact"], "M (Theorem 6, cross-entropy)": m["M"]["thm6_ce"]}
    for name in ("exact", "thm6_ce"):
        out[f"min rhs/lhs, M = {name}"] = min(p[f"min_ratio_{name}"] for p in m["paths"])
    return out


def _tb(r) -> dict:
    out = {}
    for rec in r.meta["records"]:
        k = f"min bound/exact {rec['check']}"
        out[k] = min(out.get(k, math.inf), rec["ratio"])
    return out


KEY_NUMBERS = {"fig3": _heat, "fig4": _heat, "fig5": _norms, "fig6": _conv, "fig6_mnist": _conv, "fig7": _dyn,
               "fig8": _dyn, "fig9": _dyn, "fig10": _dyn, "fig11": _dyn, "fig12": _a1, "fused_ln": _fused,
               "theorem7": _t7, "trained_bounds": _tb,
               "encoder_family": _enc}


def key_numbers(name: str, result) -> dict:
    return {k: (float(v) if v is not None else None) for k, v in KEY_NUMBERS[name](result).items()}


def _rel(a, b) -> float | None:
    if a is None or b is None:
        return None
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def compare(name: str, published, recomputed, status: str = "ok", message: str = "") -> dict:
    """One report entry: the key numbers side by side and what differs."""
    entry = {"result": name, "status": status, "numbers": []}
    if recomputed is None:
        entry["differs"] = f"not reproduced: {message}" if message else "not reproduced"
        if published is not None:
            entry["numbers"] = [dict(name=k, published=v, recomputed=None, rel_diff=None)
                                for k, v in key_numbers(name, published).items()]
        return entry
    new = key_numbers(name, recomputed)
    if published is None:
        entry["differs"] = "nothing published to compare with"
        entry["numbers"] = [dict(name=k, published=None, recomputed=v, rel_diff=None) for k, v in new.items()]
        return entry
    old = key_numbers(name, published)
    entry["numbers"] = [dict(name=k, published=old.get(k), recomputed=v, rel_diff=_rel(old.get(k), v))
                        for k, v in new.items()]
    same_config = published.config_hash == recomputed.config_hash
    worst = max((n["rel_diff"] for n in entry["numbers"] if n["rel_diff"] is not None), default=0.0)
    if not same_config:
        entry["differs"] = "the configuration (settings, training or code) differs from the published one"
    elif worst > RTOL:
        entry["differs"] = f"numbers differ by up to {worst:.1e} relative (same configuration: another machine?)"
    else:
        entry["differs"] = "nothing" if worst == 0 else f"nothing beyond rounding (≤ {worst:.0e})"
    return entry


def _fmt(v) -> str:
    if v is None:
        return "—"
    return f"{v:.6g}"


def report_md(entries: list[dict], header: str = "") -> str:
    """The report as Markdown: one section per result, a table of its key numbers."""
    lines = ["# Reproduction report", ""]
    if header:
        lines += [header, ""]
    lines += ["| result | status | what differs |", "|---|---|---|"]
    lines += [f"| {e['result']} | {e['status']} | {e['differs'].replace('|', '/')} |" for e in entries]
    for e in entries:
        if not e["numbers"]:
            continue
        lines += ["", f"## {e['result']}", "", "| number | published | recomputed | rel. diff. |", "|---|---|---|---|"]
        for n in e["numbers"]:
            rd = "—" if n["rel_diff"] is None else f"{n['rel_diff']:.1e}"
            lines.append(f"| {n['name']} | {_fmt(n['published'])} | {_fmt(n['recomputed'])} | {rd} |")
    return "\n".join(lines) + "\n"
