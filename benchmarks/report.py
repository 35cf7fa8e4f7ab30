"""Render the benchmark tables of benchmarks/RESULTS.md from the committed JSON documents.

    python benchmarks/report.py            # rewrite the generated blocks of benchmarks/RESULTS.md
    python benchmarks/report.py --check    # exit 1 (with a diff) if RESULTS.md differs from what it would write

Each benchmark ``benchmarks/<name>.py`` writes ``benchmarks/<name>.json`` (the document of
``_bench.py``). Its block in RESULTS.md lies between ``<!-- begin: <name> -->`` and
``<!-- end: <name> -->`` and is generated here, entirely from that document: the run's mode, date,
command, commit, machine, software, threads and load average, then its tables and the figures derived
from its rows. Text outside the markers is hand-written and kept as it is. A block whose JSON is not
committed says so. ``--check`` uses only the standard library (well under a second); writing goes
through ``curvature_gap.io.atomic_write_text``.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"

# (name, section title used when a block is appended to a RESULTS.md that lacks it)
BENCHMARKS = (
    ("theory_block_hessian", "Closed-form block Hessian vs autograd (theory)"),
    ("hessian", "Exact Hessians: ours vs curvlinops vs torch.func"),
    ("floor", "The exact Hessian against its floor"),
    ("gpu_check", "GPU check"),
    ("encoder_layer_hessian", "Closed-form Hessian of nn.TransformerEncoderLayer vs autograd"),
    ("layer_hessian", "layer_hessian on PyTorch, timm and Hugging Face layers vs autograd"),
    ("authors_hessian", "Exact Hessian of the authors' ViT: ours vs curvlinops"),
    ("layernorm_versions", "The authors' Hessian through the fused LayerNorm, per curvlinops release"),
    ("training_cost", "What the paper profile of Figs. 6 and 12 costs: the authors' CIFAR-100 model and recipe"),
    ("bf16_cpu", "What the authors' bf16 arithmetic costs on a CPU"),
)
REQUIRED = ("benchmark", "mode", "machine", "load_average", "threads", "software", "git", "started", "rows")


def begin_mark(name: str) -> str:
    return f"<!-- begin: {name} -->"


def end_mark(name: str) -> str:
    return f"<!-- end: {name} -->"


# ====================================================================== documents
def validate(doc: dict, name: str) -> dict:
    """``doc`` if it is a benchmark document of ``name`` with every metadata field and some rows;
    otherwise ValueError naming what is wrong."""
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"{name}: the JSON document lacks {', '.join(missing)}")
    if doc["benchmark"] != name:
        raise ValueError(f"{name}: the JSON document is of benchmark {doc['benchmark']!r}")
    if doc["mode"] not in ("full", "quick"):
        raise ValueError(f"{name}: mode {doc['mode']!r} is neither 'full' nor 'quick'")
    if not isinstance(doc["load_average"], list) or len(doc["load_average"]) != 2:
        raise ValueError(f"{name}: load_average must be [start, end], not {doc['load_average']!r}")
    if not doc["rows"]:
        raise ValueError(f"{name}: the JSON document has no rows")
    return doc


def load_doc(json_dir: Path, name: str) -> dict | None:
    """The validated document ``json_dir/<name>.json``; None when the file does not exist."""
    path = Path(json_dir) / f"{name}.json"
    if not path.exists():
        return None
    return validate(json.loads(path.read_text(encoding="utf-8")), name)


# ====================================================================== number formats
def fmt(v, spec: str = "{:.3g}") -> str:
    """``spec``-formatted number, – for None."""
    return "–" if v is None else spec.format(v)


def secs(v) -> str:
    """Seconds to three figures at most: 123, 13.9, 0.029."""
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"


def num(v, digits: int = 3) -> str:
    """A number for the GPU table: – for None, ints with separators, floats to ``digits`` significant."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) < 1e-3 or abs(v) >= 1e6:
            return f"{v:.{max(digits - 1, 1)}e}"
        return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"
    return str(v)


def cell(text) -> str:
    """Text safe inside a Markdown table cell (first line, pipes escaped)."""
    return str(text).replace("|", "\\|").splitlines()[0] if str(text) else ""


# ====================================================================== the common header
def provenance(doc: dict) -> list[str]:
    """Lines stating the run's mode, time, command, commit, machine, software, threads and load."""
    m, sw, git = doc["machine"], doc["software"], doc["git"]
    lines = []
    if doc["mode"] == "quick":
        lines += ["**Quick mode** (tiny sizes, one repeat): these rows show that the benchmark runs; they are "
                  "not its figures. `make bench-all` replaces them with a full run.", ""]
    when = doc["started"].replace("T", " ")
    w = doc.get("wall_s")
    wall = "" if w is None else f", {w:.1f} s" if w < 100 else f", {w / 60:.1f} min"
    commit = git.get("commit")
    if commit:
        code = f"commit `{commit[:10]}`" + (" with uncommitted changes" if git.get("dirty") else "")
    else:
        code = "commit not recorded"
    conv = doc.get("converted_from")
    if conv:
        code += (f" (converted from the old JSON format as committed in `{conv['commit'][:10]}`, numbers "
                 f"unchanged; {conv['note']})")
    lines.append(f"{'Full' if doc['mode'] == 'full' else 'Quick'} run {when}{wall}: `{doc['command']}`, {code}.")
    mem = f", {m['memory_gib']:.0f} GiB" if m.get("memory_gib") else ""
    cpu = m.get("cpu", "?") + (" (virtual machine)" if m.get("virtual") else "")
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ""
    versions = ", ".join(f"{k} {v}" for k, v in (("Python", sw.get("python")), ("torch", sw.get("torch")),
                                                  ("curvlinops", sw.get("curvlinops-for-pytorch")),
                                                  ("NumPy", sw.get("numpy"))) if v)
    start, end = doc["load_average"]
    load = f"load average {fmt(start, '{:.2f}')} at the start and {fmt(end, '{:.2f}')} at the end"
    cpus = m.get("cpus")
    busy = [x for x in (start, end) if x is not None and cpus and x > cpus]
    if busy:
        load += f" (above the {cpus} CPUs: other work shared them, so times are inflated)"
    lines.append(f"Machine: {cpu}, {cpus} CPU(s){mem}{gpu}; {versions}; {doc['threads']} torch thread(s); {load}.")
    return lines


# ====================================================================== one renderer per benchmark
def render_theory_block_hessian(doc: dict) -> list[str]:
    st = doc.get("settings", {})
    out = [f"Median of {st.get('repeats', '?')} run(s) per side, {st.get('dtype', 'float64')}, device "
           f"{st.get('device', '?')}.", "",
           "| case | L, d_V, d_K, d_ff | weights | closed form [s] | torch.func.hessian [s] | ratio | max rel diff |",
           "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        shape = ", ".join(map(str, r["shape"]))
        out.append(f"| {r['case']} | {shape} | {r['n']} | {r['closed_s']:.3f} | {r['autograd_s']:.3f} | "
                   f"{r['closed_s'] / r['autograd_s']:.2f} | {r['rel_err']:.1e} |")
    for r in doc["rows"]:
        if r.get("literal_s") is not None:
            out += ["", f"Dense literal evaluation (every Kronecker factor formed, `block.loss_hessian_literal`) "
                        f"at the {r['case']} case: {r['literal_s']:.3f} s, max rel diff to autograd "
                        f"{r['literal_err']:.1e}."]
    return out


def _dense(rows, key, batch, dtype="float32"):
    return next((r for r in rows if r["kind"] == "dense" and r.get("key") == key and r["batch"] == batch
                 and r["dtype"] == dtype), None)


def _ok(r) -> bool:
    return r is not None and r["status"] == "ok" and r.get("seconds") is not None


def render_hessian(doc: dict) -> list[str]:
    rows, st = doc["rows"], doc.get("settings", {})
    B, b = st.get("batch"), st.get("small_batch")
    out = [f"Batches {B} and {b} (the first MNIST training images); the model has {st.get('parameters', '?'):,} "
           f"parameters; every measurement in its own process with {st.get('threads_per_method', doc['threads'])} "
           "intra-op thread(s).", "",
           "| method | batch | dtype | seconds | CPU s | peak MB | max rel err | status | note |",
           "|---|---:|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        out.append(f"| {r['method']} | {fmt(r['batch'], '{}')} | {r['dtype']} | {fmt(r['seconds'])} | "
                   f"{fmt(r.get('cpu_seconds'))} | {fmt(r['peak_mb'], '{:.0f}')} | {fmt(r['max_rel_err'], '{:.1e}')} | "
                   f"{r['status']} | {cell(r.get('note', ''))} |")
    out.append("")
    ours, cl = _dense(rows, "ours", B), _dense(rows, "curvlinops", B)
    tuned, noalloc = _dense(rows, "curvlinops+alloc", B), _dense(rows, "ours-no-alloc", B)
    best = st.get("best_chunk", {})
    bullets = []
    if _ok(ours):
        if _ok(cl):
            cpu = (f"; in CPU time {cl['cpu_seconds'] / ours['cpu_seconds']:.1f}×"
                   if cl.get("cpu_seconds") and ours.get("cpu_seconds") else "")
            bullets.append(f"Dense, batch {B}, float32: ours {secs(ours['seconds'])} s vs curvlinops (chunk "
                           f"{cl.get('chunk') or best.get(str(B), '?')}, full run) {secs(cl['seconds'])} s: "
                           f"{cl['seconds'] / ours['seconds']:.1f}× faster{cpu}.")
        if _ok(tuned):
            cpu = (f" ({tuned['cpu_seconds'] / ours['cpu_seconds']:.1f}× in CPU time)"
                   if tuned.get("cpu_seconds") and ours.get("cpu_seconds") else "")
            bullets.append(f"With the same allocator setting in both processes: curvlinops {secs(tuned['seconds'])} s, "
                           f"ours {secs(ours['seconds'])} s: {tuned['seconds'] / ours['seconds']:.1f}×{cpu}.")
        fastest = min((r for r in (cl, tuned) if _ok(r)), key=lambda r: r["seconds"], default=None)
        if fastest is not None:
            ratio = fastest["seconds"] / ours["seconds"]
            bullets.append(f"Against the fastest curvlinops configuration of this run ({fastest['method']}): "
                           f"**{ratio:.1f}×** (target ≥ 6×: {'met' if ratio >= 6 else 'not met'}).")
        if _ok(noalloc):
            bullets.append(f"Ours without the allocator setting: {secs(noalloc['seconds'])} s "
                           f"({fmt(noalloc.get('cpu_seconds'))} CPU s).")
        base = (f", of which ~{ours['base_mb']:.0f} MB is the interpreter with torch imported"
                if ours.get("base_mb") is not None else "")
        if ours.get("peak_mb") is not None:
            bullets.append(f"Peak memory of ours at batch {B}: {ours['peak_mb']:.0f} MB (target ≤ 4096){base}.")
    probes = [r for r in rows if r["kind"] == "probe"]
    if probes:
        chosen = ", ".join(f"{v} at batch {k}" for k, v in best.items())
        bullets.append(f"curvlinops chunk sizes were chosen on {st.get('probe_cols', '?')} timed columns "
                       f"(the extrapolated rows); best: {chosen}.")
    fig6 = [r for r in rows if r["kind"] == "fig6" and _ok(r)]
    if fig6:
        us = [1e6 * r["seconds"] / r["batch"] for r in fig6]
        bullets.append("Fig. 6 running means (forward passes of 1024): " + ", ".join(
            f"N={r['batch']}: {u:.1f} µs/sample" for r, u in zip(fig6, us))
            + f"; max/min ratio {max(us) / min(us):.2f} (target ≤ 1.5).")
    spectra = next((r for r in rows if r["kind"] == "spectra"), None)
    if _ok(spectra):
        params = f" ({spectra['parameters']:,} parameters)" if spectra.get("parameters") else ""
        calls = spectra.get("hvp_calls")
        each = f", {secs(spectra['seconds'] / calls)} s each" if calls else ""
        bullets.append(f"Block spectra, CIFAR-100-sized model{params}, batch {spectra['batch']}, "
                       f"{spectra.get('iters', '?')} Lanczos steps: {secs(spectra['seconds'])} s for "
                       f"{len(spectra.get('groups') or []) or '?'} blocks + overall on the CPU ({fmt(calls, '{}')} "
                       f"block products{each}).")
    out += [f"- {x}" for x in bullets]
    if _ok(spectra) and spectra.get("table"):
        out += ["", "  | block | size | λ_max | λ_min | ‖·‖₂ |", "  |---|---:|---:|---:|---:|"]
        for t in spectra["table"]:
            out.append(f"  | {t['block']} | {t['size']:,} | {t['lambda_max']:.3e} | {t['lambda_min']:.3e} | "
                       f"{t['spectral_norm']:.3e} |")
    elif _ok(spectra):
        out += ["", "  (This document does not hold the spectra's λ table.)"]
    return out


def render_floor(doc: dict) -> list[str]:
    st = doc.get("settings", {})
    q = {r["quantity"]: r for r in doc["rows"]}
    P = st["parameters"]
    fb, hvp, ours = q["forward_backward"], q["curvlinops_hvp"], q["ours_dense"]
    floor = P * fb["seconds"]
    return [
        f"The {st.get('data', '?')}, {st.get('dtype', 'float32')}, the {P:,}-parameter model at initialisation "
        f"({st.get('model', '?')}).", "",
        "| quantity | seconds |", "|---|---:|",
        f"| one forward + backward of the batch, t_fb (median of {fb['runs']}) | {secs(fb['seconds'])} |",
        f"| the floor, P · t_fb = {P:,} × t_fb | {secs(floor)} |",
        f"| one curvlinops Hessian-vector product (median of {hvp['runs']}; {hvp['seconds'] / fb['seconds']:.1f} t_fb) "
        f"| {secs(hvp['seconds'])} |",
        f"| curvlinops, all columns one at a time (extrapolated, P × HVP) | {secs(P * hvp['seconds'])} |",
        f"| `curvature_gap.hessian.hessian`, dense (median of {ours['runs']}) | "
        f"**{secs(ours['seconds'])} = {ours['seconds'] / floor:.2f} × floor** |",
    ]


# the authors' CIFAR-100 runs behind Figs. 6 and 12 (their configs/experiments/vit_classification/*.yaml and
# configs/vit_classification_cifar_100.yaml): 50,000 images in batches of 128, checkpoint at step 10,000,
# 26 epochs of the loader per figure, 100 epochs in their recipe; one test evaluation per whole epoch. The
# Table 1 CIFAR-100 run (config.RECIPES): batches of 256, 200 epochs.
CIFAR_STEPS_PER_EPOCH = 391
FIGURE_STEP, FIGURE_EPOCHS, RECIPE_EPOCHS = 10_000, 26, 100
TABLE1_STEPS_PER_EPOCH, TABLE1_EPOCHS = 196, 200


def training_costs(rows: list[dict]) -> list[tuple[str, str, str, float]]:
    """(model, what, precision, seconds) derived from the rows of ``training_cost.measure``: for the authors' model the run
    to step 10,000, the recipe's 100 epochs, and Figs. 6 and 12 together (two runs to step 10,000, two passes of
    26 epochs); for the Table 1 model (rows of model ``cifar100``, where present) its 200 epochs."""
    def of(model):
        return {(r["quantity"], r.get("precision", "float32")): r["seconds"] for r in rows
                if r.get("model", "authors_cifar100") == model}

    q, t1 = of("authors_cifar100"), of("cifar100")
    ev = q.get(("evaluation", "float32"), 0.0)
    passes = FIGURE_EPOCHS * CIFAR_STEPS_PER_EPOCH * (q[("fig6_pass", "float32")] + q[("fig12_pass", "float32")])
    out = []
    for (quantity, precision), step in q.items():
        if quantity != "step":
            continue
        to_step = FIGURE_STEP * step + FIGURE_STEP // CIFAR_STEPS_PER_EPOCH * ev
        out += [("authors_cifar100", "the authors' model: one run to step 10,000 (the checkpoint of Figs. 6 and 12)",
                 precision, to_step),
                ("authors_cifar100", "the authors' model: the recipe's 100 epochs", precision,
                 RECIPE_EPOCHS * (CIFAR_STEPS_PER_EPOCH * step + ev)),
                ("authors_cifar100", "Figs. 6 and 12 on the authors' model: two runs to step 10,000 (seeds 42, 21) and "
                 "two passes of 26 epochs", precision, 2 * to_step + passes)]
    if ("step", "float32") in t1:
        out.append(("cifar100", "the Table 1 model: its 200 epochs (Fig. 6 on the theorem's block)", "float32",
                    TABLE1_EPOCHS * (TABLE1_STEPS_PER_EPOCH * t1[("step", "float32")] + t1.get(("evaluation", "float32"), 0.0))))
    return out


def _hours(v: float) -> str:
    return f"{v / 3600:.2f} h" if v >= 3600 else f"{v / 60:.1f} min" if v >= 60 else f"{v:.1f} s"


def _gpu_rows_a(s):
    return [("passed / failed / errors", f"{s.get('passed', 0)} / {s.get('failed', 0)} / {s.get('errors', 0)}"),
            ("pytest seconds", num(s.get("pytest_seconds")))]


def _gpu_rows_b(s):
    rows = [("test accuracy", f"{100 * s['test_accuracy']:.2f} %" if s.get("test_accuracy") is not None else "–"),
            ("training seconds", num(s.get("seconds"))),
            ("steps/s (whole run, with evaluations)", num(s.get("steps_per_s"))),
            ("steps/s (steady, probe)", num(s.get("probe_steps_per_s")))]
    if s.get("seconds") is None and s.get("estimated_full_s") is not None:
        rows.append(("estimated full run [s]", num(s.get("estimated_full_s"))))
    return rows


def _gpu_rows_c(s):
    rows = []
    for dt in ("float32", "float64"):
        r = s.get(dt) or {}
        if r.get("status", "ok") != "ok":
            rows.append((f"{dt}", r.get("status", "–")))
            continue
        b = r.get("batch")
        rows += [(f"{dt}, batch {b}: GPU / CPU seconds", f"{num(r.get('gpu_s'))} / {num(r.get('cpu_s'))}"),
                 (f"{dt}, batch {b}: max rel diff", num(r.get("max_rel_diff")))]
    return rows


def _gpu_rows_d(s):
    est = s.get("full_run_estimate") or {}
    return [("images/s", num(s.get("images_per_s"))),
            ("steps/s", num(s.get("steps_per_s"))),
            ("max memory allocated [GiB]", num(s.get("max_memory_allocated_gib"))),
            (f"full run estimate ({num(est.get('total_steps'))} steps)",
             f"{num(est.get('hours'))} h" if est.get("hours") is not None else "–")]


def _gpu_rows_e(s):
    return [("seconds", num(s.get("seconds"))),
            ("overall λ_max", num(s.get("overall_lambda_max"), 4)),
            ("blocks, Hessian-vector products", f"{num(s.get('n_blocks'))}, {num(s.get('hvp_calls'))}")]


def _gpu_rows_f(s):
    rows = s.get("rows") or []
    per = [(f"{'the authors' if r['model'].startswith('authors_') else 'Table 1'}: {r['precision']} step [s]",
            num(r["seconds"])) for r in rows if r["quantity"] == "step"]
    ep = [("one whole epoch, measured [s]", num(r["seconds"])) for r in rows if r["quantity"] == "epoch"]
    return per + ep + [(f"{what} ({prec})", _hours(t)) for _, what, prec, t in training_costs(rows)]


GPU_STEP_ROWS = {"a": _gpu_rows_a, "b": _gpu_rows_b, "c": _gpu_rows_c, "d": _gpu_rows_d, "e": _gpu_rows_e,
                 "f": _gpu_rows_f}


def render_gpu_check(doc: dict) -> list[str]:
    """The steps of ``benchmarks/gpu_check.py``: one table line per quantity, status and wall time per step."""
    dev = doc.get("device") or {}
    if dev.get("count") == 0:
        device = "none (no CUDA): the steps' GPU side ran on the CPU"
    else:
        device = (f"{dev.get('name', '?')} (compute capability {num(dev.get('capability'))}, "
                  f"{num(dev.get('memory_gib'))} GiB), driver {num(dev.get('driver'))}; CUDA {dev.get('cuda', '?')}, "
                  f"cuDNN {num(dev.get('cudnn'))}")
    out = [f"Device: {device}; {num(doc.get('wall_s'))} s of a {num(doc.get('budget_s'))} s budget.", "",
           "| step | status | wall [s] | quantity | value |", "|---|---|---:|---|---:|"]
    steps = {r["step"]: r for r in doc["rows"]}
    for key in GPU_STEP_ROWS:
        s = steps.get(key)
        if s is None:
            out.append(f"| {key}. | not run | – | – | – |")
            continue
        title, wall = s.get("title", key), "–" if s.get("wall_s") is None else f"{s['wall_s']:.1f}"
        status = cell(s.get("status", "?"))[:120]
        show = s.get("status") in ("ok", "failed") or (key == "b" and s.get("probe_steps_per_s") is not None)
        lines = GPU_STEP_ROWS[key](s) if show else []
        if not lines:
            out.append(f"| {title} | {status} | {wall} | – | – |")
        for i, (q, v) in enumerate(lines):
            out.append(f"| {title} | {status} | {wall} | {q} | {v} |" if i == 0 else f"| | | | {q} | {v} |")
    notes = []
    c, d, e = steps.get("c") or {}, steps.get("d") or {}, steps.get("e") or {}
    if c.get("data"):
        notes.append(f"c: data {c['data']}; model `build_model(\"mnist\", seed=0)` ({num(c.get('parameters'))} "
                     "parameters).")
    if d.get("status") == "ok":
        notes.append(f"d: {num(d.get('steps'))} timed steps (after {num(d.get('warmup_steps'))} untimed) at batch "
                     f"{num(d.get('batch_size'))} on random uint8 images in CIFAR format ({num(d.get('n_train'))} "
                     f"written); the estimate is optimiser steps only "
                     f"({num((d.get('full_run_estimate') or {}).get('steps_per_epoch'))} steps/epoch × 200 epochs on "
                     "50,000 images), without per-epoch evaluation.")
    if e.get("status") == "ok":
        notes.append(f"e: {num(e.get('iters'))} Lanczos steps per block at batch {num(e.get('batch'))}, "
                     f"{e.get('data', 'synthetic inputs')}; model at initialisation (seed 0).")
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    return out


def peak_cell(r: dict) -> str:
    """``peak (base)`` MB of a row, – when it did not run."""
    return "–" if r.get("peak_mb") is None else f"{r['peak_mb']:.0f} ({fmt(r.get('base_mb'), '{:.0f}')})"


def closed_form_table(doc: dict, intro: str, case: list[tuple[str, str]], case_cells, speedup_line) -> list[str]:
    """A closed form against autodiff routes: ``intro``; one table line per case and method (the case's columns
    ``case``, (header, alignment) pairs, filled by ``case_cells(row)``; then method, seconds, peak MB, error,
    status); then ``speedup_line(row)`` for each closed-form row with its speed-up (``_bench.mark_speedup``)."""
    head = [h for h, _ in case] + ["method", "seconds", "peak MB (base)", "max rel err", "status"]
    align = [a for _, a in case] + ["---", "---:", "---:", "---:", "---"]
    out = [intro, "", "| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for r in doc["rows"]:
        cells = case_cells(r) + [r["method"], fmt(r.get("seconds")), peak_cell(r), fmt(r.get("max_rel_err"), "{:.1e}"),
                                 cell(r["status"])]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return out + [speedup_line(r) for r in doc["rows"] if r.get("speedup") is not None]


def render_encoder_layer_hessian(doc: dict) -> list[str]:
    """One line per case and method; per case the fastest autodiff route against the closed form."""
    st = doc.get("settings", {})
    intro = (f"Layer: {st.get('layer', '?')}, {st.get('dtype', 'float64')}; every method in its own process with "
             f"{st.get('threads_per_method', doc['threads'])} thread(s), median of {st.get('repeats', '?')} run(s) "
             f"(the loop: one); error against `{st.get('reference', '?')}`.")
    return closed_form_table(
        doc, intro, [("case", "---"), ("L, d_model, d_ff, heads", "---"), ("parameters", "---:")],
        lambda r: [r["case"], f"{r['L']}, {r['d_model']}, {r['dim_feedforward']}, {r['nhead']}",
                   fmt(r.get("parameters"), "{}")],
        lambda r: (f"- {r['case']}: closed form {secs(r['seconds'])} s vs the fastest autodiff route "
                   f"({r['fastest_autodiff']}) — **{r['speedup']:.1f}×** faster (goal ≥ 2×)."))


def render_layer_hessian(doc: dict) -> list[str]:
    """One line per size, layer, task and method; per case the fastest autodiff route against the closed form."""
    st = doc.get("settings", {})
    sizes = "; ".join(f"{k}: batch {v['N']}, L = {v['L']}, d = {v['d']}, {v['heads']} head(s), d_ff = {v['d_ff']}"
                      for k, v in st.get("sizes", {}).items())
    intro = (f"Loss {st.get('loss', '?')}, {st.get('dtype', 'float64')}, random parameters (seed {st.get('seed', 0)}); "
             f"{sizes}. Every method in {'one process' if doc['mode'] == 'quick' else 'its own process'} with "
             f"{st.get('threads_per_method', doc['threads'])} thread(s), "
             f"median of {st.get('repeats', '?')} run(s) after a warm-up (ViT-Tiny block tasks: one run); error "
             "against the first (autograd) row of its case.")
    def flops(r):
        """`` (matrix products: X GFLOP closed form, Y autodiff)`` where the benchmark counted them."""
        auto = next((a for a in doc["rows"] if (a["size"], a["layer"], a["task"], a["method"]) ==
                     (r["size"], r["layer"], r["task"], r["fastest_autodiff"])), {})
        if r.get("flops") is None or auto.get("flops") is None:
            return ""
        return (f" (matrix products: {r['flops'] / 1e9:.4g} GFLOP closed form, {auto['flops'] / 1e9:.4g} GFLOP "
                "autodiff)")

    return closed_form_table(
        doc, intro, [("size", "---"), ("layer", "---"), ("task", "---"), ("parameters", "---:")],
        lambda r: [r["size"], r["layer"], r["task"], fmt(r.get("parameters"), "{:,}")],
        lambda r: (f"- {r['size']}, {r['layer']}, {r['task']}: closed form {secs(r['seconds'])} s vs "
                   f"{r['fastest_autodiff']} — **{r['speedup']:.1f}×**{flops(r)}."))


def render_authors_hessian(doc: dict) -> list[str]:
    """curvlinops' chunk probes, both dense runs, and the speed-up of ours against curvlinops."""
    st = doc.get("settings", {})
    params = st.get("parameters")
    out = [f"Model `{st.get('model', '?')}` ({fmt(params, '{:,}')} parameters) at initialisation; data: "
           f"{st.get('data', '?')}; {st.get('dtype', 'float32')}; every method in its own process with "
           f"{st.get('threads_per_method', doc['threads'])} thread(s); error against curvlinops' dense Hessian.", "",
           "| method | batch | dtype | seconds | CPU s | peak MB (base) | max rel err | status | note |",
           "|---|---:|---|---:|---:|---:|---:|---|---|"]
    for r in doc["rows"]:
        out.append(f"| {r['method']} | {fmt(r.get('batch'), '{}')} | {r.get('dtype', '?')} | {fmt(r.get('seconds'))} | "
                   f"{fmt(r.get('cpu_seconds'))} | {peak_cell(r)} | {fmt(r.get('max_rel_err'), '{:.1e}')} | "
                   f"{cell(r['status'])} | {cell(r.get('note', ''))} |")
    out.append("")
    for r in doc["rows"]:
        if r.get("speedup") is not None:
            cl = next((c for c in doc["rows"] if c["kind"] == "dense" and c is not r and _ok(c)), None)
            cpu = f"; in CPU time {r['speedup_cpu']:.1f}×" if r.get("speedup_cpu") is not None else ""
            out.append(f"- Dense, batch {r['batch']}, {r.get('dtype', '?')}: ours {secs(r['seconds'])} s vs curvlinops "
                       f"(chunk {fmt((cl or {}).get('chunk'), '{}')}) {secs((cl or {}).get('seconds'))} s: "
                       f"**{r['speedup']:.1f}×** faster (goal ≥ {fmt(st.get('target_speedup', 4.0), '{:g}')}×){cpu}; "
                       f"max rel err {fmt(r.get('max_rel_err'), '{:.1e}')}.")
    return out


def render_layernorm_versions(doc: dict) -> list[str]:
    """Each Hessian of the authors' pipeline (exact; curvlinops per release) at each checkpoint: its error
    against the exact one and against finite differences."""
    st = doc.get("settings", {})
    out = [f"Model `{st.get('model', '?')}`, {fmt(st.get('parameters'), '{:,}')} parameters in the authors' order; "
           f"{st.get('data', '?')}; {st.get('dtype', '?')}.", "",
           "| checkpoint | Hessian | curvlinops | autodiff | max rel err | Frobenius rel err | vs finite differences | "
           "seconds | status |",
           "|---|---|---|---|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        out.append(f"| {r.get('checkpoint', '?')} | {r['method']} | {r.get('curvlinops_version', '–')} | "
                   f"{cell(r.get('autodiff', ''))} | {fmt(r.get('max_rel_err'), '{:.1e}')} | "
                   f"{fmt(r.get('fro_rel_err'), '{:.1e}')} | {fmt(r.get('fd_max_rel_err'), '{:.1e}')} | "
                   f"{fmt(r.get('seconds'))} | {cell(r['status'])} |")
    return out


def render_training_cost(doc: dict) -> list[str]:
    rows = doc["rows"]
    r0 = rows[0]
    titles = {r["model"]: r for r in rows}
    labels = {"step": "one optimiser step", "evaluation": "the test evaluation ending each epoch",
              "epoch": "one whole epoch, measured end to end", "fig6_pass": "Fig. 6's pass, per batch (forward)",
              "fig12_pass": "Fig. 12's pass, per batch (forward and backward)"}
    models = "; ".join(f"{r['title']} ({r['parameters']:,} parameters, batch {r['batch_size']})" for r in titles.values())
    lines = [f"On {r0['device']}: {models}; {doc['settings'].get('data', '')}.", "",
             "| model | measured | precision | seconds | detail |", "|---|---|---|---:|---|"]
    for r in rows:
        trainer = "`train`" if r["model"].startswith("authors_") else "`train`"
        detail = {"step": lambda: f"{trainer}: {r['steps']} timed after {r['warmup']}; {r['images_per_s']:.0f} images/s",
                  "evaluation": lambda: f"{r['images']:,} images",
                  "epoch": lambda: f"{r['steps']} steps on {r['images']:,} images + {r['test_images']:,} test images",
                  }.get(r["quantity"], lambda: f"{r['batches']} batches timed")()
        who = "the authors'" if r["model"].startswith("authors_") else "Table 1"
        lines.append(f"| {who} | {labels.get(r['quantity'], r['quantity'])} | {r.get('precision', 'float32')} | "
                     f"{secs(r['seconds'])} | {detail} |")
    q = {r["quantity"]: r for r in rows if r["model"].startswith("authors_")}
    lines += ["", "| derived from these rows | precision | time |", "|---|---|---:|"]
    lines += [f"| {what} | {prec} | **{_hours(t)}** |" for _, what, prec, t in training_costs(rows)]
    if "epoch" in q and "step" in q and "evaluation" in q:
        pred = q["epoch"]["steps"] * q["step"]["seconds"] + q["evaluation"]["seconds"]
        lines += ["", f"The measured epoch took {secs(q['epoch']['seconds'])} s against {secs(pred)} s predicted from the "
                      f"timed steps and the evaluation ({q['epoch']['seconds'] / pred:.2f}×)."]
    return lines


def render_bf16_cpu(doc: dict) -> list[str]:
    """Step times per arithmetic (loop body of ``train``, interleaved rounds, medians), the setup of a ``train()``
    call, the Fig. 12 pass, and what the paper profile's runs cost from them."""
    rows = doc["rows"]
    steps = [r for r in rows if r["what"] == "step"]
    step = {r["variant"]: r["seconds"] for r in steps}
    compiled = {r["variant"]: r["seconds"] for r in rows if r["what"] == "compile"}
    s = doc["settings"]
    lines = [f"One step of the authors' MNIST recipe (batch, augmentation, forward, loss, backward, clipping, AdamW): "
             f"the loop body of `train`, {s['steps']} steps per variant and round, {s['rounds']} interleaved rounds, "
             "median; no setup inside the clock.", "",
             "| arithmetic | ms per step | against float32 | rounds (ms per step) |", "|---|---|---|---|"]
    lines += [f"| {r['label']} | {fmt(r['seconds'] * 1e3)} | {fmt(r['ratio_to_float32'], '{:.2f}')}× | "
              f"{', '.join(fmt(t * 1e3) for t in r['rounds'])} |" for r in steps]
    if compiled:
        lines += ["", "Compiling (the first round beyond its steps; torch's on-disk cache of an earlier compilation "
                      "shortens it): " + "; ".join(f"{v} {secs(c)} s" for v, c in compiled.items()) + "."]
    setup = next((r for r in rows if r["what"] == "train_setup"), None)
    if setup:
        lines += ["", f"A `train()` call adds {fmt(setup['seconds'] * 1e3)} ms of setup to its steps (data, model, "
                      f"optimiser, checkpoint; median of {setup['calls']} calls that train no step)."]
    pas = {r["variant"]: r["seconds"] for r in rows if r["what"] == "fig12_pass"}
    lines += ["", "| one batch of the Fig. 12 pass | ms |", "|---|---|"]
    lines += [f"| {'their bf16 arithmetic' if v == 'authors' else 'float32, float64 sums'} | {fmt(t * 1e3)} |"
              for v, t in pas.items()]
    bf16, f32 = step.get("bf16"), step.get("float32")
    if bf16 and f32:
        lines += ["", "What the paper profile's runs cost at these rates (one process, one thread each; `make reproduce` "
                  "runs them side by side, one per core):", "",
                  "| run | time |", "|---|---|",
                  f"| the authors' run to step 20,000 in bf16 (Fig. 4; the Figs. 6 and 12 stand-ins) | {secs(20_000 * bf16)} s |",
                  f"| the same in float32 (the *_exact results) | {secs(20_000 * f32)} s |",
                  f"| two more bf16 runs to step 20,000 (Figs. 4 and 5 and the Fig. 12 stand-in count three runs) | "
                  f"{secs(40_000 * bf16)} s |",
                  f"| all four, on two cores side by side | {secs((60_000 * bf16 + 20_000 * f32) / 2)} s at best |"]
    return lines


RENDERERS = {"training_cost": render_training_cost, "bf16_cpu": render_bf16_cpu, "layernorm_versions": render_layernorm_versions, "theory_block_hessian": render_theory_block_hessian, "hessian": render_hessian,
             "floor": render_floor, "gpu_check": render_gpu_check, "encoder_layer_hessian": render_encoder_layer_hessian,
             "layer_hessian": render_layer_hessian,
             "authors_hessian": render_authors_hessian}
ABSENT = {
    "training_cost": "`python benchmarks/training_cost.py` (about 8 min on 2 CPU cores) writes it.",
    "gpu_check": "On a machine with CUDA, `make gpu-check` (≤ 9 min) writes it and regenerates this block.",
}


def render_block(name: str, doc: dict | None) -> str:
    """The generated block of ``name`` (markers included) from its document (None: not committed)."""
    src = f"benchmarks/{name}.json"
    lines = [begin_mark(name), f"_Generated by `python benchmarks/report.py` from `{src}`; do not edit by hand._", ""]
    if doc is None:
        lines.append(f"No run is recorded here: `{src}` is not committed. "
                     + ABSENT.get(name, f"`python benchmarks/{name}.py` writes it."))
    else:
        lines += provenance(doc) + [""] + RENDERERS[name](doc)
    lines += ["", end_mark(name)]  # the blank line ends a table before the marker
    return "\n".join(lines)


# ====================================================================== RESULTS.md
def _span(text: str, name: str) -> tuple[int, int] | None:
    """(start, end) of ``name``'s block in ``text``, markers included; None when it has none.
    ValueError on a damaged block: one marker without the other, a marker twice, end before begin."""
    b, e = begin_mark(name), end_mark(name)
    nb, ne = text.count(b), text.count(e)
    if nb == ne == 0:
        return None
    if nb != 1 or ne != 1:
        raise ValueError(f"RESULTS.md: expected one {b} and one {e}, found {nb} and {ne}")
    i, j = text.index(b), text.index(e)
    if j < i:
        raise ValueError(f"RESULTS.md: {e} comes before {b}")
    return i, j + len(e)


def generate(text: str, json_dir: Path = HERE) -> str:
    """``text`` with every benchmark's block replaced by the one rendered from ``json_dir``; a block that
    is missing is appended under its section title. A marker of an unknown benchmark is an error."""
    known = {n for n, _ in BENCHMARKS}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(("<!-- begin: ", "<!-- end: ")) and s.endswith(" -->"):
            name = s.split(": ", 1)[1][:-4]
            if name not in known:
                raise ValueError(f"RESULTS.md: marker {s} names no benchmark of {sorted(known)}")
    for name, title in BENCHMARKS:
        block = render_block(name, load_doc(json_dir, name))
        span = _span(text, name)
        if span is None:
            text = text.rstrip("\n") + f"\n\n## {title}\n\n{block}\n"
        else:
            text = text[:span[0]] + block + text[span[1]:]
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file differs from what would be written")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the Markdown file (default: %(default)s)")
    ap.add_argument("--json-dir", type=Path, default=HERE, help="where the <name>.json documents are (default: %(default)s)")
    args = ap.parse_args(argv)
    old = args.results.read_text(encoding="utf-8")
    new = generate(old, args.json_dir)
    if args.check:
        if new == old:
            print(f"{args.results}: the generated blocks agree with the JSON in {args.json_dir}")
            return 0
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{args.results} (as committed)",
                                    f"{args.results} (from the JSON)", lineterm="", n=1)
        print("\n".join(diff))
        print(f"\n{args.results} disagrees with the JSON in {args.json_dir}: run `python benchmarks/report.py`",
              file=sys.stderr)
        return 1
    if new != old:
        from curvature_gap.io import atomic_write_text  # noqa: PLC0415 - torch, only where a file is written

        atomic_write_text(args.results, new)
        print(f"rewrote the generated blocks of {args.results}")
    else:
        print(f"{args.results} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
