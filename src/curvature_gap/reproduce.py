"""``curvature-gap reproduce``: recompute every result, draw every figure, and report against the published numbers.

For each result: load or compute its numbers (``experiments.load_results``), draw its figures into
``figures/<stem>_<part>.pdf|png`` and record them in ``figures/manifest.json``. A result whose data cannot be obtained
here (e.g. CIFAR-100 offline) is ``blocked``; one whose training would take longer than ``LONG_RUN_S`` on the chosen
device is ``skipped`` unless ``allow_long`` is set; neither is a failure. The run ends with the reproduction report
(:mod:`curvature_gap.experiments.report`). The exit status is non-zero only if a result failed.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import shlex
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import torch

from . import checks
from . import experiments
from .config import ConfigError
from .cost import training_cost
from .data import DataUnavailable
from .device import resolve_device
from .experiments.report import compare, report_md
from .experiments.store import PublishedStore, UnusableResult
from .io import atomic_write_json, atomic_write_text, file_lock
from .provenance import git_commit, host, load_average, software
from .train import load_snapshot, run_dir, run_key, verify_checkpoint

__all__ = ["run", "publish", "parse_only", "summary_table", "timing_split", "LONG_RUN_S", "Outcome"]

MANIFEST = "manifest.json"
REPORT = "reproduction_report"
LONG_RUN_S = 30 * 60  # longer training runs need --allow-long-runs


@dataclass
class Outcome:
    figure: str
    status: str  # ok | failed | blocked (data cannot be obtained) | skipped (a long run not asked for)
    seconds: float
    device: str
    outputs: list = field(default_factory=list)
    results: list = field(default_factory=list)
    config_hash: str | None = None
    message: str = ""
    cached: bool = False
    computed: dict = field(default_factory=dict)
    result: object = None
    plot_seconds: float = 0.0


def parse_only(only, profile: str = "paper") -> list[str]:
    """Result names from ``--only`` (comma-separated); unknown names are a ConfigError."""
    valid = [n for n in experiments.RESULT_NAMES if profile in experiments.spec(n).profiles]
    if not only:
        return valid
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    bad = [n for n in names if n not in experiments.RESULT_NAMES]
    if bad:
        raise ConfigError(f"unknown figure{'s' if len(bad) > 1 else ''} {', '.join(bad)}; valid names: "
                          f"{', '.join(experiments.RESULT_NAMES)}")
    return [n for n in valid if n in names]


def _runs(name: str, ctx: experiments.Context) -> list[tuple]:
    """The training runs computing ``name`` may start: those it and the results it depends on declare
    (``experiments.runs_of``), ``(variant, step, seed)`` each, without initialisations (nothing to train) and
    without the steps already on disk."""
    out, todo, seen = [], [name], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo += list(experiments.spec(n).depends)
        for v, step, seed in experiments.runs_of(n, ctx):
            cfg = ctx.recipe(v, seed)
            there = (load_snapshot(run_dir(cfg, ctx.runs_dir), step, run_key(cfg)) is not None if step is not None
                     else verify_checkpoint(run_dir(cfg, ctx.runs_dir), run_key(cfg))[0] is not None)
            if step != 0 and not there:
                out.append((experiments.Variant(v.model, v.dataset, v.arithmetic), step, seed))
    return out


def _long_run(name: str, ctx: experiments.Context) -> str:
    """A message when computing ``name`` would start a training run longer than LONG_RUN_S, else "". A run whose
    dataset is missing raises DataUnavailable ("blocked"), its message naming the run and its measured cost: the
    run's :func:`cost.training_cost`, measured once per model shape, batch and precision in a reproduction (the seed
    does not change it) in two timed steps after one untimed (enough to tell a run over LONG_RUN_S)."""
    for v, step, seed, _ in experiments.furthest(_runs(name, ctx), ctx):
        cfg = ctx.recipe(v, seed)
        key = ("cost", cfg.model, tuple(cfg.model_overrides), cfg.batch_size, getattr(cfg, "precision", "float32"),
               str(ctx.torch_device))
        if key not in ctx._cache:
            ctx._cache[key] = training_cost(cfg, ctx.torch_device, run_steps=1, steps=2, warmup=1)
        measured = ctx._cache[key]
        cost = dataclasses.replace(measured, seed=cfg.seed,
                                   steps=measured.steps_per_epoch * cfg.epochs if step is None else int(step))
        try:
            ctx.data(v)
        except DataUnavailable as exc:  # blocked: say what the run would cost once the data is there
            then = (f" (over {LONG_RUN_S // 60} min: pass --allow-long-runs, or use a GPU with --device cuda)"
                    if cost.seconds > LONG_RUN_S else "")
            raise DataUnavailable(f"{exc} Once it is there: {cost.describe()}{then}.") from exc
        if cost.seconds > LONG_RUN_S:
            return (f"{cost.describe()}; pass --allow-long-runs (make reproduce ALLOW_LONG=1) to run it, or use a GPU "
                    "(--device cuda)")
    return ""


def _runs_to_train(names: list[str], ctx: experiments.Context, allow_long: bool) -> list[tuple]:
    """The training runs the results ``names`` (and what they depend on) will train, each once at the furthest
    step any of them reads (``experiments.furthest``): ``(variant, step, seed, snapshots)``. Runs on disk, runs
    whose data is missing and those of a result over ``LONG_RUN_S`` (unless ``allow_long``) are left out."""
    runs = []
    for name in names:
        try:
            if not allow_long and _long_run(name, ctx):
                continue
            found = _runs(name, ctx)
            for v, _, _ in found:  # the guard is off, the data check is not: a run without its dataset is not started
                ctx.data(v)
        except DataUnavailable:
            continue
        runs += found
    return [(v, step, ctx.recipe(v, seed).seed, snaps) for v, step, seed, snaps in experiments.furthest(runs, ctx)]


def _train_one(job: tuple) -> tuple[str, list]:
    """A worker of :func:`train_in_parallel`: one run, one thread, through ``Context.train`` (so the checkpoints
    are the ones the results read). Returns what it trained, in words and as the context's ``trained`` records."""
    kwargs, (v, step, seed, snapshots) = job
    torch.set_num_threads(1)
    ctx = experiments.Context(progress=False, **kwargs)
    ctx.train(v, step, seed, snapshots)
    return f"{v.model_key} (seed {seed}, {v.arithmetic} arithmetic) to " + (
        "its end" if step is None else f"step {step:,}"), ctx.trained


def train_in_parallel(names: list[str], ctx: experiments.Context, allow_long: bool, workers: int) -> None:
    """Train the runs the results need (:func:`_runs_to_train`) side by side, one process and one thread each, at
    most ``workers`` at a time, before the results are computed; the longest run then sets the training time
    instead of the sum of all. A run that fails here is trained again by the result that needs it."""
    jobs = _runs_to_train(names, ctx, allow_long) if workers > 1 else []
    if len(jobs) < 2:
        return
    kwargs = dict(profile=ctx.profile, device=ctx.device, data_dir=ctx.data_dir, runs_dir=str(ctx.runs_dir),
                  verify_md5=ctx.verify_md5)
    print(f"training {len(jobs)} runs side by side ({min(workers, len(jobs))} processes, one thread each): "
          + "; ".join(f"{v.model_key} seed {sd} {v.arithmetic}" for v, _, sd, _ in jobs), flush=True)
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(jobs)),
                                                mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_train_one, (kwargs, job)): job for job in jobs}
        for fut in concurrent.futures.as_completed(futures):
            try:
                what, trained = fut.result()
                ctx.trained += trained
                print(f"  trained {what} ({time.perf_counter() - t0:.0f} s)", flush=True)
            except Exception as exc:  # noqa: BLE001 - the result that needs the run trains it again and reports
                print(f"  training {futures[fut][0]} failed here ({type(exc).__name__}: {exc}); the results that "
                      "need it train it again", flush=True)
    ctx.phases["training (side by side)"] = time.perf_counter() - t0


def run(profile: str = "paper", only=None, device: str = "auto", data_dir=None, results_dir="results",
        figures_dir="figures", runs_dir="runs", published_dir=None, progress: bool = True, allow_long: bool = False,
        command: str | None = None, ctx_kwargs: dict | None = None) -> tuple[int, list[Outcome]]:
    """Recompute the results, draw the figures, write the report; returns (exit code, outcomes). The paper profile
    on a CPU first trains the runs it needs side by side, one process per core (:func:`train_in_parallel`)."""
    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*is deprecated", category=FutureWarning)
    names = parse_only(only, profile)
    dev = str(resolve_device(device))
    published_dir = published_dir if published_dir is not None else experiments.default_published_dir()
    ctx = experiments.Context(profile=profile, device=device, data_dir=data_dir, results_dir=results_dir, runs_dir=runs_dir,
                     published_dir=None, progress=progress, **(ctx_kwargs or {}))  # recompute: never read published
    figures_dir = Path(figures_dir)
    command = command or " ".join(shlex.quote(a) for a in ["curvature-gap", *sys.argv[1:]])
    t_all = time.perf_counter()
    load0 = load_average()
    outcomes: list[Outcome] = []
    print(f"reproducing {len(names)} result(s), profile {profile}, device {dev}: {', '.join(names)}", flush=True)
    # every result's configuration hash now, before anything is computed: the code hash reads the source files,
    # so a file edited during a long run would otherwise stamp results computed by the old code with the new hash
    for name in names:
        experiments.config_hash_of(name, ctx=ctx)
    if dev == "cpu" and profile == "paper" and not ctx_kwargs:  # its runs take minutes each; the smoke's seconds
        train_in_parallel(names, ctx, allow_long, os.cpu_count() or 1)
    for i, name in enumerate(names, 1):
        sp = experiments.spec(name)
        print(f"\n[{i}/{len(names)}] {name} ({sp.paper}: {sp.title})", flush=True)
        t0 = time.perf_counter()
        o = Outcome(name, "failed", 0.0, dev)
        try:
            if not allow_long and (why := _long_run(name, ctx)):
                o.status, o.message = "skipped", why
            else:
                res = experiments.load_results(name, ctx=ctx)
                o.result, o.config_hash, o.results, o.cached = res, res.config_hash, res.paths, res.from_cache
                o.computed = {k: res.provenance.get(k) for k in ("created", "compute_seconds", "device", "git")}
                t_plot = time.perf_counter()
                o.outputs = experiments.render(name, res, figures_dir) if sp.plots else []
                o.plot_seconds = time.perf_counter() - t_plot
                o.status = "ok"
        except DataUnavailable as exc:
            o.status, o.message = "blocked", str(exc)
        except Exception as exc:  # noqa: BLE001 - keep going past a failed result, report it, exit non-zero
            o.message = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
        o.seconds = time.perf_counter() - t0
        outcomes.append(o)
        if o.status == "ok":
            for p in o.results + o.outputs:
                print(f"  wrote {p}" if not (o.cached and p in o.results) else f"  reused {p}")
        else:
            print(f"  {o.status.upper()}: {o.message}")
        if sp.plots:
            _update_manifest(figures_dir, sp, o, profile, command)
        sys.stdout.flush()
    total = time.perf_counter() - t_all
    print("\n" + summary_table(outcomes, total))
    report = write_report(outcomes, ctx, published_dir, figures_dir, command, total, load0)
    print(f"\nmanifest: {figures_dir / MANIFEST}\nreport: {report}", flush=True)
    print(Path(report).read_text())
    return (1 if any(o.status == "failed" for o in outcomes) else 0), outcomes


def read_manifest(path: Path) -> dict:
    """The figure manifest at ``path``; a new, empty one when there is none. One that cannot be read (not
    JSON, not a manifest) warns, naming the file and what is lost, and is started anew."""
    if not path.exists():
        return {"figures": {}}
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("figures"), dict):
            raise ValueError("no 'figures' table")
        return doc
    except (OSError, ValueError) as exc:
        warnings.warn(f"the figure manifest {path} cannot be read ({type(exc).__name__}: {exc}); it is started "
                      "anew, so the entries of earlier runs are lost: rerun `curvature-gap reproduce` (results "
                      "are reused from the cache) to record every figure again", RuntimeWarning, stacklevel=2)
        return {"figures": {}}


def write_report(outcomes: list[Outcome], ctx: experiments.Context, published_dir, figures_dir: Path, command: str,
                 total: float, load0) -> str:
    """``figures/reproduction_report.md`` and ``.json``: each published number beside the recomputed one."""
    store = PublishedStore(Path(published_dir) / ctx.profile) if published_dir else None
    entries = []
    for o in outcomes:
        published = None
        if store is not None:
            try:
                published = store.read(o.figure, "")
            except UnusableResult:  # none published is normal; a damaged one is said (and how to fix it)
                experiments.warn_if_damaged(store, o.figure, stacklevel=2)
        entries.append(compare(o.figure, published, o.result if o.status == "ok" else None, o.status, o.message))
    h = host()
    header = (f"Command `{command}`, profile `{ctx.profile}`, {total:.0f} s on {h['cpu']} ({h['cpus']} CPUs"
              + (f", GPU {h['gpu']}" if h["gpu"] else "") + f"), load average {load0} at the start and "
              f"{load_average()} at the end; commit {git_commit()['commit']}. Published numbers: "
              f"`{store.root if store else 'none'}`.")
    phases = {k: round(v, 2) for k, v in ctx.phases.items()}
    phases["plotting"] = round(sum(o.plot_seconds for o in outcomes), 2)
    phases["other analysis"] = round(total - sum(phases.values()), 2)
    split = timing_split(ctx, total)
    path = figures_dir / f"{REPORT}.md"
    timing = ["", "## Where the time went", "", "| part | seconds |", "|---|---|"]
    timing += [f"| {k} | {split[k]:.1f} |" for k in ("training", "Hessians", "rest")]
    f = split["floor"]
    timing += ["", f"The training's floor: {f['steps']:,} steps of {f['runs']} run(s) × {f['step_ms']:.1f} ms per step "
                   f"(measured in the runs: batch and step, no setup, checkpoint or evaluation) ÷ {f['cores']} cores "
                   f"= {f['seconds']:.1f} s" + (f"; the training took {split['training'] / f['seconds']:.1f}× that."
                                                if f["seconds"] > 0 else "."),
               "", "| phase | seconds |", "|---|---|"]
    timing += [f"| {k} | {v:.1f} |" for k, v in phases.items()]
    timing += ["", "| result | status | wall seconds (incl. its dependencies) | plotting |", "|---|---|---|---|"]
    timing += [f"| {o.figure} | {o.status}{' (cached)' if o.cached else ''} | {o.seconds:.1f} | {o.plot_seconds:.1f} |"
               for o in outcomes]
    atomic_write_text(path, report_md(entries, header) + "\n".join(timing) + "\n")
    per_result = {o.figure: {"status": o.status, "wall_seconds": round(o.seconds, 2),
                             "plot_seconds": round(o.plot_seconds, 2), "cached": o.cached,
                             "compute_phases": (o.result.provenance or {}).get("phases") if o.result is not None
                             and not o.cached else None} for o in outcomes}
    atomic_write_json(figures_dir / f"{REPORT}.json", dict(
        command=command, profile=ctx.profile, seconds=total, git=git_commit(), phases=phases, split=split,
        per_result=per_result, host=h, load_average={"start": load0, "end": load_average()}, software=software(),
        entries=entries))
    return str(path)


def timing_split(ctx: experiments.Context, total: float) -> dict:
    """A reproduction's seconds as training (in the results and side by side), Hessians and the rest, and the
    floor of the training: the steps the runs took × their measured step time (train's ``loop``: batch and step)
    ÷ the CPU cores (or 1 on a GPU), as ``{"steps", "runs", "step_ms", "cores", "seconds"}``."""
    training = ctx.phases.get("training", 0.0) + ctx.phases.get("training (side by side)", 0.0)
    hessians = ctx.phases.get("hessian", 0.0)
    steps = sum(t["steps"] for t in ctx.trained)
    seconds = sum(t["seconds"] for t in ctx.trained)
    cores = 1 if ctx.torch_device.type == "cuda" else (os.cpu_count() or 1)
    floor = dict(steps=steps, runs=len({t["run"] for t in ctx.trained}), step_ms=1e3 * seconds / steps if steps else 0.0,
                 cores=cores, seconds=seconds / cores)
    return dict(training=round(training, 2), Hessians=round(hessians, 2), rest=round(total - training - hessians, 2),
                floor={k: round(v, 4) if isinstance(v, float) else v for k, v in floor.items()})


def _update_manifest(figures_dir: Path, sp, o: Outcome, profile: str, command: str) -> None:
    path = figures_dir / MANIFEST
    entry = dict(
        figure=o.figure, paper_figure=sp.paper, title=sp.title, status=o.status, command=command,
        profile=profile, config_hash=o.config_hash, git=git_commit(), device=o.device,
        torch_version=torch.__version__, wall_seconds=round(o.seconds, 2), outputs=o.outputs, results=o.results,
        reused_results=o.cached, results_computed=o.computed, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    if o.message:
        entry["error"] = o.message
    with file_lock(figures_dir / f".{MANIFEST}.lock", "the figure manifest"):
        doc = read_manifest(path)
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
    paint = {"ok": "\033[32m", "failed": "\033[31m", "blocked": "\033[33m", "skipped": "\033[33m"}
    rows = [("result", "status", "seconds", "device", "outputs")]
    for o in outcomes:
        outputs = f"{len(o.outputs)} files" if o.outputs else (o.message.split(". ")[0][:100] if o.message else "")
        rows.append((o.figure, o.status + (" (cached)" if o.cached and o.status == "ok" else ""), f"{o.seconds:.1f}",
                     o.device, outputs))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for j, r in enumerate(rows):
        status = r[1].ljust(w[1])
        if color and j:
            status = paint.get(r[1].split()[0], "") + status + "\033[0m"
        lines.append(f"{r[0].ljust(w[0])}  {status}  {r[2].rjust(w[2])}  {r[3].ljust(w[3])}  {r[4]}")
    lines.insert(1, "-" * min(160, max(len(lines[0]), 60)))
    tail = f"{sum(o.status == 'ok' for o in outcomes)}/{len(outcomes)} results ok"
    return "\n".join(lines + ["", tail + (f" in {total:.1f} s" if total is not None else "")])


PUBLISHED_RUN = "reproduction.json"  # published/<profile>/: the reproduction behind the published results


def publish(profile: str = "paper", results_dir="results", published_dir=None, only=None,
            figures_dir="figures") -> list[str]:
    """Copy the cached results of the current configuration into ``published/<profile>/`` (for maintainers,
    after ``reproduce``); returns the files written. Results named in ``only`` must be cached; without
    ``only``, those that are not are listed and left as they are, and the record of this profile's reproduction
    in ``figures_dir`` (what the book and the README state of it) goes beside them as :data:`PUBLISHED_RUN`."""
    published_dir = Path(published_dir if published_dir is not None else (experiments.default_published_dir() or "published"))
    ctx = experiments.Context(profile=profile, results_dir=results_dir, progress=False)
    store = PublishedStore(published_dir / profile)
    written = []
    for name in parse_only(only, profile):
        r = experiments.cached_result(name, ctx)
        if r is None:
            if only:
                raise ConfigError(f"{name} has no cached result for the current configuration; run "
                                  f"`curvature-gap reproduce --profile {profile} --only {name}` first")
            print(f"not published (no cached result of the current configuration): {name}")
            continue
        written += store.publish(r).paths
    if profile == "paper" and not only:  # the rows the paper book renders, from these results
        t0 = time.perf_counter()
        rows = checks.run(quick=False, results_dir=results_dir, published_dir=published_dir)
        path = store.root / "verify.json"
        checks.write_rows(path, rows, checks.rows_meta(False, results_dir), seconds=time.perf_counter() - t0)
        written.append(str(path))
    record = Path(figures_dir) / f"{REPORT}.json"
    if not only and record.is_file():
        doc = json.loads(record.read_text())
        if doc.get("profile") == profile:
            keep = ("command", "profile", "seconds", "git", "phases", "split", "per_result", "host", "load_average",
                    "software")
            atomic_write_json(store.root / PUBLISHED_RUN, {k: doc[k] for k in keep if k in doc})
            written.append(str(store.root / PUBLISHED_RUN))
    print(f"published {len(written)} files into {store.root}/")
    return written
