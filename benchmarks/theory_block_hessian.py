"""Time the closed-form block loss Hessian (Theorem 5 + Gauss–Newton) against torch.func.hessian.

    python benchmarks/theory_block_hessian.py [--repeats 5] [--threads 1] [--device cpu] [--out PATH]
    python benchmarks/theory_block_hessian.py --quick      # two tiny instances, one repeat, seconds

Both sides compute the full 5x5-block Hessian of l = (1/(L d_V))||Z - Target||_F^2 with respect to
(W_1, W_2, W_K, W_Q, W_V) in float64 on the same random instance (``random_instance(..., seed=0)``).
Measured per case: the median wall time over ``--repeats`` runs of the closed form
(``theory.block.loss_hessian`` then ``assemble``) and of ``exact.derivatives.loss_hessian_autograd``,
and max|H_closed − H_autograd| / max|H_autograd|; for the cases marked so, also the dense literal
evaluation (``theory.block.loss_hessian_literal``: every Kronecker factor formed) and its difference.

Rows (``benchmarks/theory_block_hessian.json``): case, shape [L, d_V, d_K, d_ff], n (weights), closed_s,
autograd_s, rel_err, literal_s and literal_err (None where not measured).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from _bench import Run, add_switches, out_path
from curvature_gap.exact import derivatives as rf
from curvature_gap.exact.instances import MNIST_SHAPE, random_instance
from curvature_gap.theory import block as bk

NAME = "theory_block_hessian"
# (case, (L, d_V, d_K, d_ff), with the dense literal evaluation)
FULL_CASES = (("small", (5, 6, 3, 8), True), ("MNIST (Table 1)", MNIST_SHAPE, False))
QUICK_CASES = (("tiny", (3, 4, 2, 5), True), ("tiny, wider", (4, 4, 3, 6), False))


def _time(fn, repeats: int, device: str):
    times, out = [], None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def run(cases, repeats: int, device: str) -> list[dict]:
    """One row per case: median seconds of each side and their max relative difference."""
    rows = []
    for name, shape, with_literal in cases:
        inst = random_instance(*shape, seed=0)
        for k, v in inst.tensors().items():
            setattr(inst, k, v.to(device))
        args = [inst.X, *inst.weights]
        t_c, Hc = _time(lambda: bk.assemble(bk.loss_hessian(*args, inst.Target)), repeats, device)
        t_a, Ha = _time(lambda: rf.loss_hessian_autograd(inst), repeats, device)
        err = float((Hc - Ha).abs().max() / Ha.abs().max())
        row = {"case": name, "shape": list(shape), "n": Ha.shape[0], "closed_s": t_c, "autograd_s": t_a,
               "rel_err": err, "literal_s": None, "literal_err": None}
        if with_literal:
            t_l, Hl = _time(lambda: bk.assemble(bk.loss_hessian_literal(*args, inst.Target)), repeats, device)
            row["literal_s"] = t_l
            row["literal_err"] = float((Hl - Ha).abs().max() / Ha.abs().max())
        rows.append(row)
        print(row, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per side, median taken (default 5; 1 with --quick)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both sides (default 1)")
    ap.add_argument("--device", default="cpu")
    add_switches(ap)
    argv = sys.argv[1:] if argv is None else argv
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    bench = Run(NAME, a.quick, argv)
    repeats = 1 if a.quick else a.repeats
    cases = QUICK_CASES if a.quick else FULL_CASES
    rows = run(cases, repeats, a.device)
    bench.write(out_path(NAME, a), rows, dict(repeats=repeats, device=a.device, dtype="float64", seed=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
