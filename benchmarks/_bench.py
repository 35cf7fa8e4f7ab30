"""What every benchmark records about its run, and the two switches every benchmark has.

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
import resource
import shlex
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
