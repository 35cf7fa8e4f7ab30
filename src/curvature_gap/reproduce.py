"""``curvature-gap reproduce``: regenerate every figure, keep going past failures, summarise.

For each figure: load or compute its numbers (``experiments.load_results``: training what it needs,
reusing checkpoints and results whose config hash matches), draw it, write
``figures/<stem>.pdf|png`` and record it in ``figures/manifest.json`` (command, profile, config hash,
git commit, device, torch version, wall time, outputs). A figure that fails, e.g. because its
dataset cannot be obtained offline, is reported with its message and the run goes on; the exit
code is non-zero if any figure failed. Results, checkpoints and the manifest are written
atomically under file locks, so an interrupted run resumes and concurrent runs do not collide.
"""
from __future__ import annotations

import json
import shlex
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .config import ConfigError
from .io import atomic_write_json

MANIFEST = "manifest.json"


@dataclass
class Outcome:
    figure: str
    status: str  # ok | failed | blocked (a dataset cannot be obtained)
    seconds: float
    device: str
    outputs: list = field(default_factory=list)
    results: list = field(default_factory=list)
    config_hash: str | None = None
    message: str = ""
    cached: bool = False
    computed: dict = field(default_factory=dict)


def parse_only(only: str | list | None) -> list[str]:
    """Figure names from ``--only`` (comma-separated); unknown names are a ConfigError."""
    from .experiments import FIGURE_NAMES

    if not only:
        return list(FIGURE_NAMES)
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    bad = [n for n in names if n not in FIGURE_NAMES]
    if bad:
        raise ConfigError(f"unknown figure{'s' if len(bad) > 1 else ''} {', '.join(bad)}; valid names: {', '.join(FIGURE_NAMES)}")
    return [n for n in FIGURE_NAMES if n in names]


def run(profile: str = "paper", only=None, device: str = "auto", data_dir=None, results_dir="results",
        figures_dir="figures", runs_dir="runs", progress: bool = True, command: str | None = None,
        ctx_kwargs: dict | None = None, out=None) -> tuple[int, list[Outcome]]:
    """Regenerate the figures; returns (exit code, outcomes)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*is deprecated", category=FutureWarning)
    from . import experiments as ex
    from .data import DataUnavailable
    from .device import resolve_device

    out = out or sys.stdout
    names = parse_only(only)
    dev = str(resolve_device(device))
    ctx = ex.Context(profile=profile, device=device, data_dir=data_dir, results_dir=results_dir,
                     runs_dir=runs_dir, progress=progress, **(ctx_kwargs or {}))
    figures_dir = Path(figures_dir)
    command = command or " ".join(shlex.quote(a) for a in ["curvature-gap", *sys.argv[1:]])
    t_all = time.perf_counter()
    outcomes: list[Outcome] = []
    print(f"reproducing {len(names)} figure(s), profile {profile}, device {dev}: {', '.join(names)}", file=out, flush=True)
    for i, name in enumerate(names, 1):
        spec = ex.spec(name)
        print(f"\n[{i}/{len(names)}] {name} ({spec.paper}: {spec.title})", file=out, flush=True)
        t0 = time.perf_counter()
        o = Outcome(name, "failed", 0.0, dev)
        try:
            res = ex.load_results(name, ctx=ctx)
            o.config_hash, o.results, o.cached = res.config_hash, res.paths, res.from_cache
            o.computed = {k: res.provenance.get(k) for k in ("created", "compute_seconds", "device", "git", "software")}
            o.outputs = ex.render(name, res, figures_dir)
            o.status = "ok"
        except DataUnavailable as exc:
            o.status, o.message = "blocked", str(exc)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - keep going past a failed figure
            o.message = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
        o.seconds = time.perf_counter() - t0
        outcomes.append(o)
        if o.status == "ok":
            for p in o.results + o.outputs:
                print(f"  wrote {p}" if not (o.cached and p in o.results) else f"  reused {p}", file=out)
        else:
            print(f"  {o.status.upper()}: {o.message}", file=out)
        _update_manifest(figures_dir, spec, o, profile, command)
        out.flush()
    total = time.perf_counter() - t_all
    print("\n" + summary_table(outcomes, total), file=out)
    print(f"manifest: {figures_dir / MANIFEST}", file=out, flush=True)
    return (0 if all(o.status == "ok" for o in outcomes) else 1), outcomes


def _update_manifest(figures_dir: Path, spec, o: Outcome, profile: str, command: str) -> None:
    import torch

    from .experiments.common import git_commit
    from .experiments.store import file_lock

    path = figures_dir / MANIFEST
    entry = dict(
        figure=o.figure, paper_figure=spec.paper, title=spec.title, status=o.status, command=command,
        profile=profile, config_hash=o.config_hash, git=git_commit(), device=o.device,
        torch_version=torch.__version__, wall_seconds=round(o.seconds, 2), outputs=o.outputs, results=o.results,
        reused_results=o.cached, results_computed=o.computed, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    if o.message:
        entry["error"] = o.message
    with file_lock(figures_dir / f".{MANIFEST}.lock", "the figure manifest"):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc.get("figures"), dict):
                raise ValueError
        except (OSError, ValueError):
            doc = {"figures": {}}
        old = doc["figures"].get(o.figure) or {}
        if o.status != "ok":
            if old.get("status") != "ok":
                old = old.get("files_on_disk_from") or {}
            kept = [p for p in old.get("outputs", []) if Path(p).exists()]
            if kept:  # the files on disk are from an earlier, successful run: say which
                entry["files_on_disk_from"] = {k: old.get(k) for k in ("profile", "config_hash", "finished", "command")}
                entry["files_on_disk_from"]["outputs"] = kept
        doc["figures"][o.figure] = entry
        doc["updated"] = entry["finished"]
        atomic_write_json(path, doc)


def summary_table(outcomes: list[Outcome], total: float | None = None, color: bool | None = None) -> str:
    color = sys.stdout.isatty() if color is None else color
    paint = {"ok": "\033[32m", "failed": "\033[31m", "blocked": "\033[33m"}
    rows = [("figure", "status", "seconds", "device", "outputs")]
    for o in outcomes:
        outputs = ", ".join(o.outputs) if o.outputs else (o.message.split(". ")[0][:100] if o.message else "")
        rows.append((o.figure, o.status + (" (cached)" if o.cached and o.status == "ok" else ""), f"{o.seconds:.1f}", o.device, outputs))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for j, r in enumerate(rows):
        status = r[1].ljust(w[1])
        if color and j:
            status = paint.get(r[1].split()[0], "") + status + "\033[0m"
        lines.append(f"{r[0].ljust(w[0])}  {status}  {r[2].rjust(w[2])}  {r[3].ljust(w[3])}  {r[4]}")
    lines.insert(1, "-" * min(160, max(len(lines[0]), 60)))
    n_ok = sum(o.status == "ok" for o in outcomes)
    tail = f"{n_ok}/{len(outcomes)} figures ok"
    if total is not None:
        tail += f" in {total:.1f} s"
    return "\n".join(lines + ["", tail])


def main(args) -> int:
    """Entry point of ``curvature-gap reproduce`` (argparse namespace from cli.py)."""
    code, _ = run(profile=args.profile, only=args.only, device=args.device, data_dir=args.data_dir,
                  results_dir=args.results_dir, figures_dir=args.figures_dir, runs_dir=args.runs_dir,
                  progress=not args.no_progress)
    return code
