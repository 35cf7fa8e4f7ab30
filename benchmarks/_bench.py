"""What every benchmark records about its run, the two switches every benchmark has, and what the benchmarks
that time each method in its own process share (:func:`run_worker`, :func:`timed`, :func:`max_rel_err`,
:func:`mark_speedup`, :func:`count_flops`).

Each script under ``benchmarks/`` writes one JSON document (``--out``; for a full run the default is
``benchmarks/<name>.json``, which ``benchmarks/report.py`` renders into ``benchmarks/RESULTS.md``)::

    {"benchmark": name, "mode": "full" | "quick", "command": the command line,
     "machine": provenance.host(), "load_average": [1-min load at the start, at the end],
     "threads": torch intra-op threads of the measured code, "software": provenance.software(),
     "git": provenance.git_commit() at the start, "started": ISO time, "finished": ISO time,
     "wall_s": seconds, "settings": {...}, "rows": [...]}

``--quick`` runs the same code on tiny sizes in seconds (``tests/benchmarks`` runs every script so);
its numbers only show that the benchmark runs. Without ``--out`` a quick run writes under
``runs/bench-quick/`` and never over the committed JSON.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUICK_DIR = ROOT / "runs" / "bench-quick"


def peak_mb() -> float:
    """This process's resident-set high-water mark in MB (VmHWM). Unlike ru_maxrss it starts afresh at exec,
    so a worker does not inherit its driver's footprint through fork; ru_maxrss where /proc is absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def add_switches(ap: argparse.ArgumentParser) -> None:
    """``--quick`` and ``--out`` (what every benchmark accepts)."""
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, seconds, the same code path (checks that the benchmark runs)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON document to write (default: benchmarks/<name>.json, with --quick "
                         "runs/bench-quick/<name>.json)")


def out_path(name: str, args: argparse.Namespace) -> Path:
    """Where the document goes: ``--out``, else the committed JSON (full) or ``runs/bench-quick`` (quick)."""
    if args.out is not None:
        return args.out
    return (QUICK_DIR if args.quick else HERE) / f"{name}.json"


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


class Run:
    """One benchmark run: the facts of its origin taken when it starts, the document when it ends."""

    def __init__(self, name: str, quick: bool, argv: list[str] | None = None):
        from curvature_gap.provenance import git_commit, host, load_average, software

        argv = sys.argv[1:] if argv is None else argv
        self.name, self.quick = name, quick
        global _IN_PROCESS
        _IN_PROCESS = quick  # a quick run's numbers only show that the code runs: no interpreter per measurement
        self.command = " ".join(["python", f"benchmarks/{name}.py", *map(shlex.quote, argv)])
        self.started = _now()
        self.load_start = load_average()
        self.git = git_commit(ROOT)
        self.machine = host()
        self.software = software()
        self._t0 = time.perf_counter()

    def document(self, rows: list[dict], settings: dict, threads: int | None = None) -> dict:
        """The JSON document of this run; ``threads`` defaults to torch's current intra-op threads."""
        import torch

        from curvature_gap.provenance import load_average

        if not rows:
            raise ValueError(f"benchmark {self.name} produced no rows")
        return {
            "benchmark": self.name, "mode": "quick" if self.quick else "full", "command": self.command,
            "machine": self.machine, "load_average": [self.load_start, load_average()],
            "threads": torch.get_num_threads() if threads is None else threads, "software": self.software,
            "git": self.git, "started": self.started, "finished": _now(),
            "wall_s": time.perf_counter() - self._t0, "settings": settings, "rows": rows,
        }

    def write(self, path: Path, rows: list[dict], settings: dict, threads: int | None = None) -> dict:
        """Write the document atomically to ``path``; returns it."""
        from curvature_gap.io import atomic_write_json

        doc = self.document(rows, settings, threads)
        atomic_write_json(path, doc)
        print(f"wrote {path} ({len(rows)} rows, {doc['mode']} mode, {doc['wall_s']:.1f} s)", flush=True)
        return doc


# ----------------------------------------------------------------------------- one method, one process
def add_worker_switch(ap: argparse.ArgumentParser) -> None:
    """``--worker SPEC`` (hidden): the script measures one method (the JSON ``SPEC``) and prints its result."""
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def answer_worker(args: argparse.Namespace, worker) -> bool:
    """With ``--worker``: print ``RESULT <json of worker(spec)>`` (what :func:`run_worker` reads) and return True."""
    if args.worker is None:
        return False
    print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
    return True


def per_process_args(ap: argparse.ArgumentParser, argv: list[str] | None, worker, repeats_help: str):
    """Add ``--repeats`` (``repeats_help``), ``--threads``, ``--worker``, ``--quick`` and ``--out`` to ``ap`` and parse
    ``argv`` (None: ``sys.argv[1:]``). Returns None after answering ``--worker`` (:func:`answer_worker`), else
    ``(args, argv)``."""
    ap.add_argument("--repeats", type=int, default=3, help=repeats_help)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every measurement (default 1)")
    add_worker_switch(ap)
    add_switches(ap)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    return None if answer_worker(args, worker) else (args, argv)


# Set by a quick Run: measurements then run in this process (run_worker), which saves an interpreter start
# (about 3 s of importing torch) per measurement; a full run keeps one interpreter per measurement.
_IN_PROCESS = False


def _worker_of(script: str | Path):
    """The ``_worker`` function of benchmark ``script``, imported as a module (its ``__main__`` block does not run)."""
    import importlib.util

    path = Path(script).resolve()
    name = f"_bench_worker_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]._worker


def run_worker(script: str | Path, spec: dict, scratch: str | None = None, error_chars: int = 300) -> dict:
    """Run ``script --worker spec`` in a fresh interpreter with ``spec["threads"]`` OpenMP threads (so the peak
    resident memory is that method's alone) and return its ``RESULT``; ``{"status": "error", "error": the last
    lines of its stderr}`` when it printed none. ``scratch``: a directory put first on its ``PYTHONPATH``.
    In a quick run (without ``scratch``, which needs its own interpreter) the script's ``_worker`` runs here
    instead, and an exception it raises becomes the same ``error`` status."""
    if _IN_PROCESS and scratch is None:
        try:
            return _worker_of(script)(spec)
        except Exception as exc:  # noqa: BLE001 - reported as the row's status, as a failed subprocess is
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:error_chars]}
    cmd = [sys.executable, str(Path(script).resolve()), "--worker", json.dumps(spec)]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=str(spec["threads"]))
    if scratch:
        env["PYTHONPATH"] = scratch + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = " | ".join((p.stderr or "").strip().splitlines()[-3:])
    return {"status": "error", "error": tail[:error_chars]}


def timed(fn, repeats: int, warmup: bool = True):
    """``(the last result, {"seconds": median wall seconds, "times": each call's, "cpu_seconds": median CPU
    seconds})`` of ``repeats`` calls of ``fn``, after one untimed call when ``warmup`` (first-call setup of vmap,
    the allocator). The previous result is dropped before each call, so the peak memory is that of one."""
    if warmup:
        fn()
    out, times, cpu = None, [], []
    for _ in range(repeats):
        out = None
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return out, {"seconds": statistics.median(times), "times": times, "cpu_seconds": statistics.median(cpu)}


def count_flops(fn) -> float:
    """The floating-point operations of one call of ``fn``, as ``torch.utils.flop_counter.FlopCounterMode`` counts
    them: the matrix products (``mm``, ``bmm``, ``addmm``, convolutions, attention kernels), 2 per multiply-add,
    forward and backward alike; element-wise work is not counted. Run apart from the timed calls (the counter
    intercepts every operation), so it changes no timing."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return float(counter.get_total_flops())


def max_rel_err(a, b) -> float:
    """``max|a − b| / max|b|`` of two tensors, or over the blocks of two dicts of tensors (one scale: the largest
    entry of ``b``'s blocks); NaN when ``b`` is neither."""
    import torch

    if isinstance(b, dict):
        scale = max(float(t.abs().max()) for t in b.values())
        return max(float((a[k] - b[k]).abs().max()) for k in b) / scale
    return float((a - b).abs().max() / b.abs().max()) if isinstance(b, torch.Tensor) else float("nan")


def mark_speedup(case_rows: list[dict], closed: str = "closed form", autodiff: str = "autograd") -> None:
    """On the ``closed`` row of a case: the fastest of its ``autodiff`` rows (``fastest_autodiff``) and
    ``speedup`` = its seconds / the closed form's (rows that did not run are left out)."""
    auto = [r for r in case_rows if r["method"].startswith(autodiff) and r["status"] == "ok"]
    row = next((r for r in case_rows if r["method"] == closed and r["status"] == "ok"), None)
    if auto and row:
        best = min(auto, key=lambda r: r["seconds"])
        row["fastest_autodiff"] = best["method"]
        row["speedup"] = best["seconds"] / row["seconds"]
