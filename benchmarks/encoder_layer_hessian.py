"""Time the closed-form Hessian of nn.TransformerEncoderLayer against the fastest correct autodiff route.

    python benchmarks/encoder_layer_hessian.py [--repeats 3] [--threads 1] [--out PATH]
    python benchmarks/encoder_layer_hessian.py --quick      # L=5, d_model=8: seconds

Both sides compute the full Hessian of the MSE ``(1/(L d))||layer(X) − Target||_F²`` with respect to every
parameter of one ``nn.TransformerEncoderLayer`` (post-norm, ReLU, biases, dropout 0; random parameters,
``curvature_gap.exact.layers.random_layer(seed=0)``) on one sequence, in float64:

* ``closed form``: ``curvature_gap.layer_hessian`` (hand-written Jacobians and second
  derivatives, no autograd);
* ``autograd batched, chunk N``: reverse-over-reverse ``torch.autograd`` under the MATH attention backend,
  the gradient with ``create_graph=True`` then ``torch.autograd.grad(..., is_grads_batched=True)`` along N unit
  vectors per call (N = all: one call) — several N, since the best one depends on the size;
* ``autograd loop``: the same, one Hessian-vector product per row.

(``torch.func.hessian`` is not a candidate: it is wrong through LayerNorm on this stack, and the default
attention kernel has no double backward; see ``curvature_gap.exact.encoder_layer``.)

Every measurement runs in a fresh subprocess with ``--threads`` intra-op threads, so its peak resident memory
(VmHWM) is its own; ``base_mb`` is its high-water mark after the imports and building the layer, before
one untimed warm-up run (the loop has none) and the timed runs, so ``peak_mb − base_mb`` is the method's. Per row:
median wall seconds of ``--repeats`` runs (the loop: one run), peak MB and ``max|H − H_ref| / max|H_ref|``
against ``autograd batched, chunk all``. Per case the ratio fastest autodiff / closed form.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _bench import Run, mark_speedup, max_rel_err, out_path, peak_mb, per_process_args, run_worker, timed

NAME = "encoder_layer_hessian"
# (case, L, d_model, dim_feedforward, nhead)
FULL_CASES = (("MNIST size, 1 head", 49, 16, 64, 1), ("MNIST size, 4 heads", 49, 16, 64, 4))
QUICK_CASES = (("tiny, 1 head", 5, 8, 6, 1), ("tiny, 2 heads", 5, 8, 6, 2))
FULL_CHUNKS = (64, 256, 1024, None)
QUICK_CHUNKS = (16, None)
REFERENCE = "autograd batched, chunk all"




def _method_name(method: str, chunk) -> str:
    if method == "batched":
        return f"autograd batched, chunk {'all' if chunk is None else chunk}"
    return {"closed": "closed form", "loop": "autograd loop"}[method]


def _worker(spec: dict) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(spec["threads"])
    from curvature_gap.exact import layers as R
    from curvature_gap import layer_hessian

    layer, X, T = R.random_layer(spec["d_model"], spec["nhead"], spec["dim_feedforward"], spec["L"], seed=0)

    def loop():  # as R.hessian_autograd, one Hessian-vector product (torch.autograd.grad) per row
        ps = list(layer.parameters())
        with R.math_backend():
            g = torch.autograd.grad(R.layer_loss(layer, X, T), ps, create_graph=True)
            g = torch.cat([x.reshape(-1) for x in g])
            return torch.stack([torch.cat([h.reshape(-1) for h in torch.autograd.grad(g[i], ps, retain_graph=True)])
                                for i in range(g.numel())])

    fn = {"closed": lambda: layer_hessian(layer, X, target=T).dense,
          "batched": lambda: R.hessian_autograd(layer, X, chunk=spec["chunk"], target=T),
          "loop": loop}[spec["method"]]
    base = peak_mb()
    H, t = timed(fn, spec["repeats"], warmup=spec["method"] != "loop")  # the loop has no warm-up
    torch.save(H, spec["save"])
    return {"seconds": t["seconds"], "times": t["times"], "base_mb": base, "peak_mb": peak_mb(),
            "parameters": H.shape[0], "status": "ok"}


def run(cases, chunks, repeats: int, threads: int, tmp: Path) -> list[dict]:
    import torch

    rows = []
    for case, L, d, dff, h in cases:
        methods = [("batched", None)] + [("batched", c) for c in chunks if c is not None] + [("loop", None),
                                                                                            ("closed", None)]
        saved, case_rows = {}, []
        for method, chunk in methods:
            name = _method_name(method, chunk)
            path = tmp / f"{len(rows)}-{len(case_rows)}.pt"
            spec = dict(L=L, d_model=d, dim_feedforward=dff, nhead=h, method=method, chunk=chunk, threads=threads,
                        repeats=1 if method == "loop" else repeats, save=str(path))
            res = run_worker(__file__, spec)
            r = dict(case=case, L=L, d_model=d, dim_feedforward=dff, nhead=h, method=name, chunk=chunk,
                     repeats=spec["repeats"], seconds=res.get("seconds"), times=res.get("times"),
                     peak_mb=res.get("peak_mb"), base_mb=res.get("base_mb"), parameters=res.get("parameters"),
                     max_rel_err=None, status=res.get("status", "error"))
            if res.get("error"):
                r["note"] = res["error"]
            if r["status"] == "ok":
                saved[name] = path
            case_rows.append(r)
            print(f"{case}: {name}: {r['status']} {r['seconds']} s, peak {r['peak_mb']} MB", flush=True)
        if REFERENCE in saved:
            R = torch.load(saved[REFERENCE])
            for r in case_rows:
                if r["method"] in saved:
                    r["max_rel_err"] = max_rel_err(torch.load(saved[r["method"]]), R)
        mark_speedup(case_rows)
        rows += case_rows
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parsed = per_process_args(ap, argv, _worker, "runs per method, median taken (default 3; 1 with --quick)")
    if parsed is None:
        return 0
    a, argv = parsed
    bench = Run(NAME, a.quick, argv)
    repeats = 1 if a.quick else a.repeats
    cases, chunks = (QUICK_CASES, QUICK_CHUNKS) if a.quick else (FULL_CASES, FULL_CHUNKS)
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(cases, chunks, repeats, a.threads, Path(tmp))
    bench.write(out_path(NAME, a), rows, dict(repeats=repeats, threads_per_method=a.threads, dtype="float64", seed=0,
                                              layer="post-norm, ReLU, biases, dropout 0", reference=REFERENCE),
                threads=a.threads)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
