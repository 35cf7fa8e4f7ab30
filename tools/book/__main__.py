"""``python -m tools.book build|check|pdf|refresh-outputs|colab-cells|plain-notebooks|readme|maintainers``
(``make book``, ``make book-check``, ``make book-pdf``)."""
from __future__ import annotations

import argparse
import sys

from curvature_gap.config import DEVICES, PROFILES

from . import maintainers
from .build import BookError, build, project_root
from .check import check
from .outputs import refresh_checked_outputs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.book", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="execute the notebooks and render _build/html")
    b.add_argument("--profile", choices=PROFILES, default="paper")
    b.add_argument("--device", choices=DEVICES, default="cpu")
    b.add_argument("--only", nargs="*", default=None, help="execute only these notebooks (no HTML)")
    b.add_argument("--timeout", type=int, default=None, help="seconds per notebook cell")
    c = sub.add_parser("check", help="check the built HTML (links, verdicts, raw TeX, and in Chromium: legibility)")
    c.add_argument("--no-browser", action="store_true", help="skip the headless-Chromium checks")
    c.add_argument("--shots", default=None, help="write screenshots here (default: _build/screenshots)")
    c.add_argument("--no-rerun", action="store_true", help="skip re-running every page's download from the root")
    sub.add_parser("pdf", help="the whole book as one PDF (_build/pdf/book.pdf), after build")
    r = sub.add_parser("refresh-outputs", help="store the outputs of the checked cells in the committed notebooks")
    r.add_argument("notebooks", nargs="*")
    sub.add_parser("colab-cells", help="give every notebook of the book its Colab set-up cell (tools/book/colab.py)")
    pn = sub.add_parser("plain-notebooks", help="write notebooks/plain/, the pages Colab and Binder open (tools/book/plain.py)")
    pn.add_argument("--check", action="store_true", help="only say whether they are current")
    rd = sub.add_parser("readme", help="render README.md's numbers from their sources (tools/book/numbers.py)")
    rd.add_argument("--check", action="store_true", help="only say whether they are current")
    m = sub.add_parser("maintainers", help=f"write {maintainers.PAGE} (the fault table, configuration hashes)")
    m.add_argument("--check", action="store_true", help="only say whether the committed page is current")
    args = p.parse_args(argv)
    try:
        if args.cmd == "build":
            rep = build(args.profile, args.device, only=args.only, render_html=not args.only, timeout=args.timeout)
            print(f"[book] built in {rep['seconds']} s: {rep.get('html', '(no HTML: --only)')}")
            return 0
        if args.cmd == "check":
            problems = check(browser=not args.no_browser, shots=args.shots, rerun=not args.no_rerun)
            for line in problems:
                print("  " + line)
            print(f"[book-check] {'OK' if not problems else f'{len(problems)} problem(s)'}")
            return 0 if not problems else 1
        if args.cmd == "pdf":
            from .pdf import build_pdf  # noqa: PLC0415 - Playwright only for this command
            build_pdf()
            return 0
        if args.cmd == "colab-cells":
            from . import colab  # noqa: PLC0415
            from .build import toc_notebooks  # noqa: PLC0415
            changed = colab.write_cells(project_root(), toc_notebooks(project_root()))
            print(f"[book] Colab cell written into {len(changed)} notebook(s)" + "".join(f"\n  {p.name}" for p in changed))
            return 0
        if args.cmd == "plain-notebooks":
            from . import numbers, plain  # noqa: PLC0415
            from .build import toc_notebooks  # noqa: PLC0415
            root = project_root()
            subs = numbers.substitutions(root)
            if args.check:
                stale = plain.stale_plain_notebooks(root, toc_notebooks(root), subs)
                for line in stale:
                    print(f"[book] {line}", file=sys.stderr)
                return 1 if stale else 0
            changed = plain.write_plain_notebooks(root, toc_notebooks(root), subs)
            print(f"[book] {len(changed)} plain notebook(s) written" + "".join(f"\n  {p.relative_to(root)}" for p in changed))
            return 0
        if args.cmd == "readme":
            from . import numbers  # noqa: PLC0415
            problems = numbers.render_readme(project_root(), check=args.check)
            for line in problems:
                print(f"[book] {line}", file=sys.stderr)
            if not args.check and not problems:
                print("[book] README.md's numbers rendered from their sources")
            return 1 if problems else 0
        if args.cmd == "maintainers":
            current = maintainers.write(project_root(), check=args.check)
            if args.check and not current:
                print(f"[book] {maintainers.PAGE} is out of date: run `{maintainers.COMMAND}`", file=sys.stderr)
                return 1
            print(f"[book] {maintainers.PAGE} {'is current' if current else 'written'}")
            return 0
        refresh_checked_outputs(args.notebooks)
        return 0
    except BookError as exc:
        print(f"[book] error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
