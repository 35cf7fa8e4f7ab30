"""GPU check: the package's CUDA paths, tested and timed in one call of at most ~9 minutes.

    python benchmarks/gpu_check.py [--out benchmarks/gpu_check.json] [--budget-s 540] [--data-dir data]
    python benchmarks/gpu_check.py --quick     # every step at tiny sizes, seconds; on the CPU without CUDA

Without CUDA (and without ``--quick``) it prints one line saying so, measures and writes nothing, and
exits 0. ``--quick`` runs every step below on tiny models and batches with one CPU thread, on CUDA
where present and otherwise on the CPU (then "GPU" and "CPU" in the step records are both the CPU: the numbers are
meaningless, the code paths ran); it is what the test suite runs on a machine without a GPU.
With CUDA:

a. the device-parametrised tests on the GPU (``pytest -m device --device cuda tests/test_device.py``
   in a subprocess): passed/failed counts and seconds;
b. the MNIST paper profile trained on the GPU from real MNIST (``--data-dir``): seconds, test
   accuracy, steps/s (``skipped: MNIST not in <dir>`` where the files are missing);
c. Fig. 3's Hessian (MNIST model at initialisation, first 128 training images) on the GPU and on
   the CPU in float32, and on the first 16 images in float64: seconds on each device and
   max|H_gpu − H_cpu| / max|H_cpu|;
d. the 8-block CIFAR-100 model (paper profile) trained for ``--cifar-steps`` optimiser steps on a
   CIFAR-format set of random uint8 images written here into a temporary directory: images/s,
   ``torch.cuda.max_memory_allocated`` and the estimated wall time of the full 200-epoch run on
   the 50,000-image set (steps per epoch × epochs / measured steps/s);
e. the block spectra of the 8-block model at batch 128 (``top_eigenvalues`` over every parameter
   group plus the whole Hessian, ``--lanczos-iters`` Lanczos steps): seconds and overall λ_max;
f. the paper profile of Figs. 6 and 12, the authors' 8-block CIFAR-100 model and recipe
   (``benchmarks/training_cost.py``'s ``measure`` on CUDA): seconds per optimiser step in float32 and in
   bf16 (their CUDA setting), one whole measured epoch, the test evaluation and the figures' passes, and
   from them the time of a run to step 10,000 and of the two figures together.

Time budget (``--budget-s``, counted from the start of the script): a step starts only if its
estimate (``ESTIMATE_S``, upper bounds for an H200 host; for the MNIST training, a timed probe of
the run itself) fits in what is left, otherwise it is recorded as ``skipped (budget)``; a timer
stops a step that overruns the budget (``aborted (budget)``). The steps run in the order a, c, f,
d, e, b: f early, since the GPU cost of the paper profile of Figs. 6 and 12 is measured nowhere else;
the MNIST training last, since it is the longest and least predictable, so it gets what is left and
is sized from its own probe. Every number, the device, the torch/CUDA versions and each step's wall
time go to ``--out`` (the benchmark document of ``_bench.py``, one row per step, rewritten atomically
after every step); ``benchmarks/report.py`` renders it as the section "GPU check" of RESULTS.md.
The exit status is 1 when a step failed or errored (with ``--quick``:
unless every step is ``ok``).

This file is the runner (arguments, the budget's bookkeeping, the report); the sizes, the budget and the
device description are in ``_gpu_env.py``, the steps in ``_gpu_steps.py``.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts (and _bench) beside it, also when imported

from _gpu_env import (ROOT, FULL, QUICK, ESTIMATE_S, _T_START, BudgetExceeded, Budget,  # noqa: E402

                      cuda_available, device_info)
from _gpu_steps import STEP_TITLES, Context, log, STEPS  # noqa: E402

NAME = "gpu_check"
DEFAULT_BUDGET_S = 540.0
NO_CUDA_LINE = ("gpu_check: CUDA is not available here (torch.cuda.is_available() is False); "
                "nothing was measured and nothing was written (--quick runs the steps on the CPU).")


def run_step(report: dict, key: str, est_s: float, fn, ctx: Context, save) -> None:
    """Run one step unless its estimate does not fit; record status, numbers and wall time; save."""
    budget = ctx.budget
    rec: dict = dict(title=STEP_TITLES[key], estimate_s=est_s)
    if not budget.fits(est_s):
        rec.update(status="skipped (budget)", remaining_s=round(budget.remaining(), 1), wall_s=0.0)
        log(f"{STEP_TITLES[key]}: skipped (budget): needs ≈ {est_s:.0f} s, {budget.remaining():.0f} s left")
    else:
        log(f"{STEP_TITLES[key]} ({budget.remaining():.0f} s of the budget left)")
        t0 = time.perf_counter()
        try:
            rec.update(fn(ctx))
            rec.setdefault("status", "ok")
        except BudgetExceeded:
            rec["status"] = "aborted (budget)"
            log(f"{STEP_TITLES[key]}: aborted (budget)")
        except Exception as exc:  # noqa: BLE001 - one failing step must not lose the others
            rec["status"] = f"error: {type(exc).__name__}: {exc}"[:300]
            rec["traceback"] = traceback.format_exc()[-4000:]
            log(f"{STEP_TITLES[key]}: {rec['status']}")
        rec["wall_s"] = time.perf_counter() - t0
    report["steps"][key] = rec
    save()


def _shown(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else str(path)
    except ValueError:
        return str(path)


def _in_repo(path: Path) -> str:
    """``path`` relative to the repository root when inside it (as RESULTS.md cites files), else absolute."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_args(argv):
    from _bench import add_switches

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_switches(ap)
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help="wall-clock budget in seconds for the whole call (default: %(default)s)")
    ap.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CURVATURE_GAP_DATA") or "data"),
                    help="directory holding MNIST/raw (default: $CURVATURE_GAP_DATA or ./data)")
    ap.add_argument("--cifar-steps", type=int, default=None,
                    help=f"timed optimiser steps of step d (default: {FULL.cifar_steps}; {QUICK.cifar_steps} with --quick)")
    ap.add_argument("--lanczos-iters", type=int, default=None,
                    help=f"Lanczos steps per block in step e (default: {FULL.lanczos_iters}; {QUICK.lanczos_iters} with --quick)")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="tqdm bars during training (default: when stderr is a terminal)")
    return ap.parse_args(argv)


def step_rows(report_steps: dict) -> list[dict]:
    """The step records as the document's rows, in the order of the table (a–f)."""
    return [dict(step=k, **report_steps[k]) for k in STEP_TITLES if k in report_steps]


def exit_status(rows: list[dict], quick: bool) -> int:
    """1 when a step failed, errored or was aborted; with ``quick`` also when any step is not ``ok``."""
    bad = [r for r in rows if str(r.get("status")).startswith(("error", "failed", "aborted"))
           or (quick and r.get("status") != "ok")]
    for r in bad:
        print(f"gpu_check: step {r['step']} ({r.get('title', '')}): {r.get('status')}", file=sys.stderr, flush=True)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    cuda = cuda_available()
    if not cuda and not args.quick:
        print(NO_CUDA_LINE, flush=True)
        return 0
    budget = Budget(args.budget_s, start=_T_START)
    try:  # a checkout without `pip install -e .`
        import curvature_gap  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "src"))
    from _bench import Run, out_path

    from curvature_gap.io import atomic_write_json

    device, sizes = ("cuda" if cuda else "cpu"), (QUICK if args.quick else FULL)
    if args.quick:  # tiny products only lose from thread synchronisation (badly so on shared cores)
        import torch

        torch.set_num_threads(1)
    bench = Run(NAME, args.quick, argv)
    out_json = out_path(NAME, args).resolve()
    report = dict(budget_s=args.budget_s, device=device_info(device), data_dir=str(args.data_dir), steps={},
                  outputs=dict(json=str(out_json), json_shown=_in_repo(out_json)), estimates_s=ESTIMATE_S)

    def save():
        import torch

        doc = bench.document(step_rows(report["steps"]),  # saved after each step: never empty
                             dict(budget_s=args.budget_s, device=device, sizes=dataclasses.asdict(sizes),
                                  data_dir=str(args.data_dir)), threads=torch.get_num_threads())
        doc.update({k: v for k, v in report.items() if k != "steps"}, wall_s=budget.elapsed())
        atomic_write_json(out_json, doc)

    log(f"{report['device']['name']}, torch {report['device']['torch']}, CUDA {report['device']['cuda']}; "
        f"budget {args.budget_s:.0f} s{'; quick sizes' if args.quick else ''}")
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    armed = {"on": True}

    def on_alarm(signum, frame):
        if armed["on"]:
            raise BudgetExceeded()

    have_alarm = hasattr(signal, "SIGALRM")
    if have_alarm:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(budget.remaining(), 0.01))
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
            ctx = Context(data_dir=args.data_dir, scratch=Path(scratch), budget=budget, progress=progress,
                          cifar_steps=args.cifar_steps or sizes.cifar_steps,
                          lanczos_iters=args.lanczos_iters or sizes.lanczos_iters, device=device, sizes=sizes)
            try:
                for key, est_key, fn in STEPS:
                    run_step(report, key, ESTIMATE_S[est_key], fn, ctx, save)
            except BudgetExceeded:  # fired between steps (while saving)
                for key, _, _ in STEPS:
                    report["steps"].setdefault(key, dict(title=STEP_TITLES[key], status="skipped (budget)", wall_s=0.0))
            finally:
                armed["on"] = False
                if have_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        armed["on"] = False
    report["finished"] = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    save()
    log(f"done in {budget.elapsed():.0f} s: every number in {_shown(out_json)} "
        "(`python benchmarks/report.py` renders it into RESULTS.md)")
    return exit_status(step_rows(report["steps"]), args.quick)


if __name__ == "__main__":
    sys.exit(main())
