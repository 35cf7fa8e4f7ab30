"""The companion book: the pipeline behind ``make book`` and the helpers its notebooks call.

Pipeline (``python -m curvature_gap.book --profile smoke``), each step failing loudly:

1. **stage** -- copy ``_config.yml``, ``_toc.yml`` and ``book/`` into ``_build/stage/``;
2. **verify** -- run ``curvature-gap verify --json`` (``--quick`` under the ``smoke`` profile) once and
   cache its JSON under ``results/book/`` (keyed by a hash of the checked source files);
3. **execute** -- run every notebook of the table of contents through papermill with
   ``-p profile <PROFILE> -p device <DEVICE>`` into ``_build/stage/notebooks/`` (an execution error
   stops the pipeline with a non-zero exit status);
4. **tables** -- write the generated Markdown (verify summary, every check, errata, notation, unstated
   choices, profiles, runtimes, versions) into ``_build/stage/book/_generated/``;
5. **render** -- ``jupyter-book build _build/stage --path-output . -W -n --keep-going --all``, so the
   HTML lands in ``_build/html`` and any warning fails the build.

Notebook helpers (thin, so that each notebook stays a parameters cell, calls, and a figure):
:func:`setup`, :func:`verify_rows`, :func:`show_rows`, :func:`verdict_lines`, :func:`show_markdown`.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .config import DEVICES, PROFILES

__all__ = [
    "project_root", "setup", "check_parameters", "verify_rows", "verify_json", "show_rows", "show_groups", "groups_md", "show_markdown",
    "verdict_lines", "rows_md", "load_figure", "show_provenance", "provenance_md", "show_figure",
    "RESULTS", "summarize", "verify_summary_md", "all_checks_md", "errata_md", "notation_md",
    "unstated_md", "faults_md", "profiles_md", "versions_md", "hardware_md", "runtimes_md", "toc_notebooks",
    "execute_notebook", "build", "main", "BookError", "check", "check_links", "check_offline",
    "check_summary_table", "check_downloads", "browser_check",
]

VERDICTS = ("verified", "corrected", "holds", "fails")
KERNEL = "python3"
VERIFY_ENV = "CURVATURE_GAP_VERIFY_JSON"   # set by the build for its notebooks: the verify JSON to read


class BookError(RuntimeError):
    """A step of the book pipeline failed (the message says which, and why)."""


# ====================================================================== locations
def project_root(start: str | os.PathLike | None = None) -> Path:
    """The checkout root: the first directory upwards holding ``_config.yml`` and ``pyproject.toml``.

    Searched from ``start`` (default: the current directory), then from this file (editable install).
    """
    candidates = [Path(start or os.getcwd()).resolve(), Path(__file__).resolve().parent]
    for c in candidates:
        for d in (c, *c.parents):
            if (d / "_config.yml").is_file() and (d / "pyproject.toml").is_file():
                return d
    raise BookError("cannot find the project root (a directory with _config.yml and pyproject.toml)")


def _results_dir(root: Path) -> Path:
    return root / "results" / "book"


# ====================================================================== verify (cached)
def _verify_sources(root: Path) -> list[Path]:
    pkg = root / "src" / "curvature_gap"
    files = [pkg / "cli.py"]
    for sub in ("theory", "bounds", "hessian"):
        d = pkg / sub
        if d.is_dir():
            files += sorted(d.rglob("*.py"))
    bounds_file = pkg / "bounds.py"
    if bounds_file.is_file():
        files.append(bounds_file)
    return [f for f in files if f.is_file()]


def _verify_key(root: Path, quick: bool) -> str:
    h = hashlib.sha256(f"quick={quick}".encode())
    for f in _verify_sources(root):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def verify_json(profile: str = "smoke", root: Path | None = None, force: bool = False,
                log=print) -> tuple[Path, dict]:
    """Path of the ``curvature-gap verify --json`` output for ``profile`` and its metadata.

    Runs the command (``--quick`` under ``smoke``) when no cached output matches the current
    sources. Raises :class:`BookError` when the command wrote no JSON (it crashed); rows that do
    not have their expected verdict are *not* an error here: the book shows them.
    """
    _check_profile(profile)
    root = root or project_root()
    quick = profile == "smoke"
    out_dir = _results_dir(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"verify-{profile}.json"
    meta_path = out_dir / f"verify-{profile}.meta.json"
    key = _verify_key(root, quick)
    if not force and path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key:
            meta["cached"] = True
            return path, meta
    tmp = out_dir / f".verify-{profile}.json.tmp"
    tmp.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "curvature_gap", "verify", "--json", str(tmp)] + (["--quick"] if quick else [])
    log(f"[book] running: curvature-gap verify --json {path.relative_to(root)}{' --quick' if quick else ''}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    (out_dir / f"verify-{profile}.log").write_text(proc.stdout + proc.stderr)
    if not tmp.is_file():
        raise BookError(f"curvature-gap verify wrote no JSON (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = json.loads(tmp.read_text())
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "id" in r for r in rows):
        raise BookError("curvature-gap verify wrote JSON that is not a list of rows")
    os.replace(tmp, path)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    meta = {"key": key, "profile": profile, "quick": quick, "seconds": round(seconds, 1),
            "returncode": proc.returncode, "summary": summary, "n_rows": len(rows),
            "command": "curvature-gap verify --json " + str(path.relative_to(root)) + (" --quick" if quick else ""),
            "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    log(f"[book] verify: {len(rows)} rows in {seconds:.0f} s, exit {proc.returncode}: {summary}")
    meta["cached"] = False
    return path, meta


def verify_rows(profile: str = "smoke", prefixes=None, root: Path | None = None) -> list[dict]:
    """Rows of ``curvature-gap verify`` (cached), optionally only those whose id starts with a prefix.

    A prefix matches whole dotted components: ``"thm2"`` matches ``thm2.layernorm.jacobian``,
    ``"orm.Ho"`` matches ``orm.Ho.VV``; it does not match ``thm20``.
    """
    pinned = os.environ.get(VERIFY_ENV)
    if pinned and Path(pinned).is_file() and root is None:
        path = Path(pinned)       # inside `make book`: exactly the JSON the build renders
    else:
        path, _ = verify_json(profile, root=root, log=lambda *a: None)
    rows = json.loads(Path(path).read_text())
    if prefixes is None:
        return rows
    if isinstance(prefixes, str):
        prefixes = [prefixes]
    return [r for r in rows if any(r["id"] == p or r["id"].startswith(p + ".") for p in prefixes)]


# ====================================================================== notebook helpers
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape_ok(v) -> bool:
    return v is None or (isinstance(v, (list, tuple)) and len(v) == 4 and all(_is_int(x) and x >= 1 for x in v))


# What each notebook parameter must be: (test, description, example for papermill). A name not listed
# here is a size (tokens, width, samples): a positive integer.
PARAMETER_RULES = {
    "profile": (lambda v: v in PROFILES, f"one of {', '.join(PROFILES)}", "smoke"),
    "device": (lambda v: v in DEVICES, f"one of {', '.join(DEVICES)}", "cpu"),
    "seed": (lambda v: _is_int(v) and v >= 0, "a non-negative integer", "3"),
    "shape": (_shape_ok, "None or a list of 4 positive integers (L, d_V, d_K, d_ff)", "'[12, 6, 4, 16]' (with -y)"),
}
_SIZE_RULE = (lambda v: _is_int(v) and v >= 1, "a positive integer", "8")


def check_parameters(params: dict) -> None:
    """Check a notebook's parameters (as papermill injected them) before anything runs.

    Papermill's ``-p name value`` guesses the type from the text (``-p seed abc`` gives a str,
    ``-p L 2.5`` a float); a wrong type would otherwise surface later as an unrelated error or,
    worse, as a plausible result. Raises :class:`~curvature_gap.config.ConfigError` naming the
    parameter, what it must be, and a valid papermill flag."""
    from .config import ConfigError

    for name, value in params.items():
        ok, what, example = PARAMETER_RULES.get(name, _SIZE_RULE)
        if not ok(value):
            raise ConfigError(f"notebook parameter {name}={value!r} ({type(value).__name__}) is invalid: it must be "
                              f"{what}; e.g. papermill ... -p {name} {example}")


def setup(root: str | os.PathLike | None = None, **params) -> Path:
    """Prepare a notebook: check its parameters (:func:`check_parameters`), work from the project root
    (data/, results/, runs/ resolve), set the dataset directory if unset, and a plotting style that
    reads well in the book. Returns the root."""
    import warnings

    check_parameters(params)
    r = project_root(root)
    os.chdir(r)
    # torch's own forward-mode AD machinery emits this deprecation notice on first use; it says
    # nothing about the computation, and would otherwise appear under the first cell that uses jvp.
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
    # tqdm.auto looks for ipywidgets in a kernel; the notebooks show no progress bars anyway
    warnings.filterwarnings("ignore", message=r"IProgress not found")
    os.environ.setdefault("CURVATURE_GAP_DATA", str(r / "data"))
    try:
        import matplotlib

        matplotlib.rcParams.update({
            "figure.dpi": 110, "savefig.dpi": 110, "figure.figsize": (7.5, 4.2), "axes.grid": True,
            "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False, "font.size": 10,
        })
    except ImportError:  # pragma: no cover
        pass
    return r


def show_markdown(text: str):
    """Display Markdown in a notebook (falls back to print outside IPython)."""
    try:
        from IPython.display import Markdown, display

        display(Markdown(text))
    except ImportError:  # pragma: no cover
        print(text)


def load_figure(figure: str, profile: str = "smoke", device: str = "auto", seed: int | None = None):
    """``experiments.load_results`` for a figure page: cached numbers when intact, else computed now.

    ``seed`` other than the profile's training seed trains both models with that seed instead; the
    results then have another config hash, so nothing cached under the profile's seed is reused or
    overwritten."""
    from . import experiments as ex
    from .config import MODELS, train_config

    kw: dict = {"device": device, "progress": False}
    if seed is not None:
        over = {m: {"seed": int(seed)} for m in MODELS if train_config(m, profile).seed != int(seed)}
        if over:
            kw["train_overrides"] = over
    return ex.load_results(figure, profile, **kw)


def provenance_md(res) -> str:
    """Where a figure's numbers come from: file, config hash, how and when they were computed."""
    prov, created = {}, ""
    try:
        doc = json.loads(Path(res.json_path).read_text())
        prov, created = doc.get("provenance", {}) or {}, doc.get("created", "")
    except (OSError, TypeError, ValueError):
        pass
    try:
        rel = Path(res.json_path).resolve().relative_to(project_root())
    except (ValueError, TypeError, BookError):
        rel = res.json_path
    how = "read from the cache" if getattr(res, "from_cache", False) else "computed while this page was built"
    secs = prov.get("compute_seconds")
    sw = prov.get("software", {}) or {}
    git = prov.get("git", {}) or {}
    parts = [f"Numbers: `{rel}` (config hash `{res.config_hash}`), {how}"]
    if secs is not None:
        parts.append(f"originally computed in {float(secs):.0f} s on `{prov.get('device', '?')}`")
    if created:
        parts.append(f"on {created}")
    if sw.get("torch"):
        parts.append(f"with torch {sw.get('torch')}")
    if git.get("commit"):
        parts.append(f"at commit `{str(git['commit'])[:10]}`{' (uncommitted changes)' if git.get('dirty') else ''}")
    return ", ".join(parts) + "."


def show_provenance(res):
    show_markdown(provenance_md(res))


def show_figure(fig, dpi: int = 110):
    """Display a matplotlib Figure as a PNG (the experiment plots are built without pyplot, so no
    inline backend is involved) and release it."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    try:
        from IPython.display import Image, display

        display(Image(data=buf.getvalue(), format="png"))
    except ImportError:  # pragma: no cover
        pass
    try:
        import matplotlib.pyplot as plt

        plt.close(fig)
    except Exception:  # noqa: BLE001 - a Figure built without pyplot is not registered
        pass


def _fmt_err(x) -> str:
    if x is None:
        return "—"
    try:
        x = float(x)
    except (TypeError, ValueError):
        return _md(str(x))
    return "0" if x == 0 else f"{x:.1e}"


def rows_md(rows: list[dict], cols=("id", "verdict", "max_rel_err", "what")) -> str:
    """A Markdown table of verify rows."""
    bounds_only = bool(rows) and all(r.get("verdict") in ("holds", "fails") for r in rows)
    head = {"id": "check", "verdict": "verdict", "expected": "expected",
            "max_rel_err": "smallest ratio bound/exact" if bounds_only else "max rel. error",
            "what": "what is compared", "shapes": "instances", "note": "note"}
    lines = ["| " + " | ".join(head.get(c, c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if c == "id":
                cells.append(f"`{v}`")
            elif c == "verdict":
                cells.append(_verdict_badge(v, r.get("expected")))
            elif c == "max_rel_err":
                cells.append(_fmt_err(v))
            else:
                cells.append(_md(str(v if v is not None else "")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def show_rows(rows: list[dict], cols=("id", "verdict", "max_rel_err", "what")):
    """Display verify rows as a table in a notebook."""
    if not rows:
        show_markdown("*No row of `curvature-gap verify` matches this result.*")
        return
    show_markdown(rows_md(rows, cols))


def groups_md(rows: list[dict], depth: int = 2) -> str:
    """Rows grouped by the first ``depth`` components of their id: count, verdicts, worst error."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(".".join(r["id"].split(".")[:depth]), []).append(r)
    lines = ["| group of checks | checks | verdicts | worst error of a closed form |", "|---|---|---|---|"]
    for g, rs in groups.items():
        counts = ", ".join(f"{sum(r['verdict'] == v for r in rs)} {v}" for v in VERDICTS
                           if any(r["verdict"] == v for r in rs))
        errs = [float(r["max_rel_err"]) for r in rs if r["verdict"] in ("verified", "corrected")
                and r.get("max_rel_err") is not None]
        lines.append(f"| `{g}` | {len(rs)} | {counts} | {_fmt_err(max(errs)) if errs else '—'} |")
    return "\n".join(lines)


def show_groups(rows: list[dict], depth: int = 2):
    """Display :func:`groups_md` in a notebook."""
    show_markdown(groups_md(rows, depth) if rows else "*No row of `curvature-gap verify` matches.*")


def verdict_lines(rows: list[dict], ids=None) -> str:
    """Deterministic text for nbval: one ``id: verdict`` line per row (``ids`` fixes which, in order),
    then whether each row has the verdict it is expected to have. Raises if an id is missing."""
    by_id = {r["id"]: r for r in rows}
    ids = list(ids) if ids is not None else [r["id"] for r in rows]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise KeyError(f"verify has no row {missing}")
    out = []
    for i in ids:
        r = by_id[i]
        ok = r["verdict"] == r.get("expected", r["verdict"])
        out.append(f"{i}: {r['verdict']}" + ("" if ok else f"  (expected {r.get('expected')})"))
    n_ok = sum(by_id[i]["verdict"] == by_id[i].get("expected", by_id[i]["verdict"]) for i in ids)
    out.append(f"{n_ok} of {len(ids)} as expected")
    return "\n".join(out)


# ====================================================================== Markdown generation
_MD_ESCAPE = re.compile(r"([\\`*_|<>\[\]$])")


def _md(text: str) -> str:
    """Escape text for a MyST Markdown table cell (no math, no emphasis, no HTML, one line)."""
    return _MD_ESCAPE.sub(r"\\\1", text).replace("\n", " ")


def _md_code(text: str) -> str:
    """Like :func:`_md`, but `backticked` spans stay inline code (a ``|`` in them is still escaped)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # unbalanced: treat everything as text
        return _md(text)
    return "".join(_md(t) if i % 2 == 0 else "`" + t.replace("|", "\\|") + "`" for i, t in enumerate(parts))


def _verdict_badge(verdict, expected=None) -> str:
    v = str(verdict)
    s = f"**{v}**" if v in ("corrected", "fails") else v
    if expected and expected != verdict:
        s += f" (expected {expected})"
    return s


# (id prefix, result as the paper names it, page of the book). The closed-form rows of
# `curvature-gap verify` are named by their first id component (``thm2.layernorm.jacobian``), the rows
# of the bounds by their first two (``bounds.thm1.printed``).
RESULTS: list[tuple[str, str, str]] = [
    ("appB", "Appendix B: the vec_r matrix-calculus identities", "book/notation"),
    ("sec2", "§2: the definition of LayerNorm", "notebooks/layernorm"),
    ("thm2", "Theorem 2: Jacobian of LayerNorm", "notebooks/layernorm"),
    ("thm3", "Theorem 3: Hessian of LayerNorm", "notebooks/layernorm"),
    ("lem1", "Lemma 1: derivatives of ReLU", "notebooks/ffn_relu"),
    ("attn", "Row-softmax Jacobian", "notebooks/self_attention"),
    ("lemC1", "Row-softmax Hessian (Ormaniec et al., Lemma C.1)", "notebooks/self_attention"),
    ("noci", "Self-attention Jacobians (Noci et al., Lemmas A.2–A.3)", "notebooks/self_attention"),
    ("orm", "Self-attention Hessian H_o + H_f (Ormaniec et al., Thms 3.1–3.2)", "notebooks/self_attention"),
    ("sa", "Self-attention loss Hessian, all nine blocks", "notebooks/self_attention"),
    ("bounds.thm1", "Theorem 1: spectral-norm bound for self-attention", "notebooks/self_attention"),
    ("bounds.sa", "Theorem 1, steps of the proof", "notebooks/self_attention"),
    ("thm4", "Theorem 4: Jacobians of the Transformer block", "notebooks/transformer_block"),
    ("lem2", "Lemma 2: Φ from the functional Hessian", "notebooks/transformer_block"),
    ("thm5", "Theorem 5: Hessian of the Transformer block", "notebooks/transformer_block"),
    ("gn", "Gauss–Newton decomposition of the loss Hessian", "notebooks/transformer_block"),
    ("bounds.thm6", "Theorem 6: spectral-norm bound for the Transformer block", "notebooks/norm_bounds"),
    ("bounds.lemma4", "Lemma 4: LayerNorm norm bounds", "notebooks/norm_bounds"),
    ("bounds.prop", "Proposition: norms of Y, FFN(Y) and S", "notebooks/norm_bounds"),
    ("bounds.thm7", "Theorem 7: convergence of the loss landscape", "notebooks/landscape_convergence"),
    ("bounds.assumption1", "Assumption 1: shared minimiser", "notebooks/landscape_convergence"),
]
# results the paper states; a missing one is reported as "no check yet" rather than dropped
_STATED = {"bounds.thm1", "thm2", "thm3", "thm4", "thm5", "bounds.thm6", "bounds.thm7", "lem1", "lem2",
           "bounds.lemma4"}


def _prefix(row_id: str) -> str:
    """The result a verify row belongs to: its first id component, or its first two for ``bounds.*``."""
    parts = row_id.split(".")
    return ".".join(parts[:2]) if parts[0] == "bounds" and len(parts) > 1 else parts[0]


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per result: counts per verdict, worst error of the closed forms, the overall verdict
    (``fails`` > ``corrected`` > ``holds`` > ``verified``) and whether every row is as expected."""
    known = {p for p, _, _ in RESULTS}
    order = list(RESULTS) + [(p, p, "") for p in dict.fromkeys(_prefix(r["id"]) for r in rows) if p not in known]
    out = []
    for prefix, title, page in order:
        rs = [r for r in rows if _prefix(r["id"]) == prefix]
        if not rs and prefix not in _STATED:
            continue
        counts = {v: sum(r["verdict"] == v for r in rs) for v in VERDICTS}
        other = len(rs) - sum(counts.values())
        errs = [float(r["max_rel_err"]) for r in rs
                if r["verdict"] in ("verified", "corrected") and r.get("max_rel_err") is not None]
        if not rs:
            verdict = "no check yet"
        elif counts["fails"]:
            verdict = "fails"
        elif counts["corrected"]:
            verdict = "corrected"
        elif counts["holds"]:
            verdict = "holds"
        else:
            verdict = "verified"
        out.append({"prefix": prefix, "result": title, "page": page, "checks": len(rs), **counts,
                    "other": other, "worst_err": max(errs) if errs else None, "verdict": verdict,
                    "as_expected": all(r["verdict"] == r.get("expected", r["verdict"]) for r in rs)})
    return out


def verify_summary_md(rows: list[dict], meta: dict | None = None) -> str:
    """The introduction's summary table, generated from ``curvature-gap verify --json``."""
    lines = [
        "| result | checks | verified | corrected | holds | fails | worst rel. error | verdict | as expected |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summarize(rows):
        # role text is literal (no Markdown escapes); only a backtick or "<" could break the role
        title = s["result"].replace("`", "'").replace("<", "‹")
        link = f"{{doc}}`{title} </{s['page']}>`" if s["page"] else f"`{s['prefix']}`"
        if not s["checks"]:
            lines.append(f"| {link} | 0 | — | — | — | — | — | no check yet | — |")
            continue
        lines.append(
            f"| {link} | {s['checks']} | {s['verified']} | {s['corrected']} | {s['holds']} | {s['fails']} | "
            f"{_fmt_err(s['worst_err'])} | {_verdict_badge(s['verdict'])} | {'yes' if s['as_expected'] else '**no**'} |")
    n = len(rows)
    c = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    ok = sum(r["verdict"] == r.get("expected", r["verdict"]) for r in rows)
    lines += ["", f"In total: **{n} checks**, {c['verified']} verified, {c['corrected']} corrected, "
                  f"{c['holds']} holds, {c['fails']} fails; {ok} of {n} have the verdict they are expected to have."]
    if meta:
        lines += ["", f"Source: `{meta.get('command', 'curvature-gap verify --json')}`"
                      f" ({'cached run' if meta.get('cached') else 'run for this build'}, "
                      f"{meta.get('seconds', '?')} s, {meta.get('created', '')}). "
                      "The raw rows are in {download}`verify.json </_static/verify.json>`."]
    return "\n".join(lines) + "\n"


def all_checks_md(rows: list[dict]) -> str:
    """Every verify row, grouped by result."""
    parts = []
    for s in summarize(rows):
        rs = [r for r in rows if _prefix(r["id"]) == s["prefix"]]
        if not rs:
            continue
        link = f" ({{doc}}`page </{s['page']}>`)" if s["page"] else ""
        parts.append(f"## {s['result']}{link}\n")
        parts.append(rows_md(rs, ("id", "verdict", "max_rel_err", "what", "shapes", "note")) + "\n")
    return "\n".join(parts)


def _find_ids(text: str, ids: set[str]) -> list[str]:
    found = []
    for tok in re.findall(r"[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)+", text):
        if tok in ids and tok not in found:
            found.append(tok)
    return found


def errata_md(errata: list[dict], rows: list[dict]) -> str:
    """One section per erratum: where, what is printed, what holds, and the evidence -- with the
    verdict and error of every ``curvature-gap verify`` row the evidence names."""
    by_id = {r["id"]: r for r in rows}
    parts = []
    for k, e in enumerate(errata, 1):
        where = _md(str(e.get("where", "")))
        parts.append(f"### E{k}. {where}\n")
        parts.append(f"*Erratum id:* `{e.get('id', k)}`\n")
        parts.append(f"**Printed.** {_md(str(e.get('printed', '')))}\n")
        parts.append(f"**What holds.** {_md(str(e.get('holds', '')))}\n")
        ev = e.get("evidence", "")
        ev_list = (list(ev) if isinstance(ev, (list, tuple)) else [ev]) + list(e.get("related", []) or [])
        text = "; ".join(str(x) for x in ev_list)
        ids = [x for x in ev_list if isinstance(x, str) and x in by_id] or _find_ids(text, set(by_id))
        prose = [str(x) for x in ev_list if not (isinstance(x, str) and x in by_id)]
        if prose and any(p.strip() for p in prose):
            parts.append("**Evidence.** " + _md(" ".join(prose)) + "\n")
        if ids:
            parts.append("Checks behind it (from `curvature-gap verify`):\n")
            parts.append(rows_md([by_id[i] for i in ids], ("id", "verdict", "max_rel_err", "note")) + "\n")
    return "\n".join(parts)


def notation_md(notation: list[dict]) -> str:
    """The notation table: the paper's symbol, the code's name, its meaning, and the clash it resolves."""
    lines = ["| paper | code | meaning | clash resolved |", "|---|---|---|---|"]
    for n in notation:
        code_name = str(n.get("code", "") or "").replace("`", "'")
        lines.append(f"| {_md(str(n.get('paper', '')))} | `{code_name}` | {_md(str(n.get('meaning', '')))} | "
                     f"{_md(str(n.get('clash', '') or ''))} |")
    return "\n".join(lines) + "\n"


def unstated_md(unstated: list[dict]) -> str:
    lines = ["| choice | value used here | reason |", "|---|---|---|"]
    for u in unstated:
        lines.append(f"| {_md(u['name'])} | {_md(str(u['value']))} | {_md(u['reason'])} |")
    return "\n".join(lines) + "\n"


def faults_md(faults=None) -> str:
    """The fault-case table of the reproducibility chapter, from :data:`curvature_gap.faults.FAULTS`."""
    if faults is None:
        from .faults import FAULTS as faults
    lines = ["| area | fault | what the program does | proved by |", "|---|---|---|---|"]
    for f in faults:
        tests = "<br>".join(f"`{t.removeprefix('tests/')}`" for t in f.tests)
        lines.append(f"| {_md(f.area)} | {_md_code(f.case)} | {_md_code(f.behaviour)} | {tests} |")
    return "\n".join(lines) + "\n"


def profiles_md() -> str:
    from .config import PROFILE_CONFIGS

    keys = ["optimizer", "lr", "weight_decay", "schedule", "batch_size", "epochs", "train_subset", "test_subset",
            "augment", "grad_clip", "seed"]
    lines = ["| model | profile | blocks | d_V | d_ff | " + " | ".join(keys) + " | config hash |",
             "|" + "---|" * (len(keys) + 6)]
    for (model, profile), cfg in PROFILE_CONFIGS.items():
        mc = cfg.model_config()
        vals = [_md(str(getattr(cfg, k))) for k in keys]
        lines.append(f"| {model} | {profile} | {mc.n_blocks} | {mc.d_model} | {mc.d_ff} | " + " | ".join(vals)
                     + f" | `{cfg.hash()}` |")
    return "\n".join(lines) + "\n"


_VERSION_PKGS = ["torch", "torchvision", "curvlinops-for-pytorch", "numpy", "matplotlib", "jupyter-book", "sphinx",
                 "myst-nb", "sphinx-book-theme", "sphinxcontrib-bibtex", "sphinx-proof", "sphinx-mathjax-offline",
                 "papermill", "nbval", "ipykernel", "curvature-gap"]


def versions_md() -> str:
    from importlib.metadata import PackageNotFoundError, version

    lines = ["| package | version |", "|---|---|", f"| Python | {platform.python_version()} |"]
    for p in _VERSION_PKGS:
        try:
            v = version(p)
        except PackageNotFoundError:
            v = "not installed"
        lines.append(f"| {p} | {v} |")
    lines.append("| MathJax (served from the book) | 3.2.2 (from sphinx-mathjax-offline) |")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=project_root(), timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=project_root(), timeout=10).stdout.strip()
        if commit:
            lines.append(f"| git commit of this build | `{commit}`{' (with uncommitted changes)' if dirty else ''} |")
    except (OSError, subprocess.SubprocessError):
        pass
    return "\n".join(lines) + "\n"


def hardware_md(device: str = "auto") -> str:
    from .device import host

    h = host()
    cpu = h["cpu"]
    mem = f"{h['memory_gib']:.1f} GiB" if h["memory_gib"] else "unknown"
    gpu = "none"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        threads = "?"
    return "\n".join([
        "| item | value |", "|---|---|",
        f"| operating system | {_md(platform.platform())} |",
        f"| CPU | {_md(cpu)} |",
        f"| CPU cores visible | {os.cpu_count()} (torch threads: {threads}) |",
        f"| memory | {mem} |",
        f"| GPU | {_md(gpu)} |",
        f"| device requested for this build | `{device}` |",
    ]) + "\n"


def runtimes_md(timings: dict, verify_meta: dict | None, manifest: dict | list | None = None) -> str:
    lines = ["| step | wall time (s) |", "|---|---|"]
    if verify_meta:
        how = "read from cache" if verify_meta.get("cached") else "computed in this build"
        lines.append(f"| `{verify_meta.get('command', 'curvature-gap verify')}` ({how}) | "
                     f"{verify_meta.get('seconds', '?')} |")
    for name, sec in timings.items():
        lines.append(f"| notebook `{name}` (papermill) | {sec:.1f} |")
    out = "\n".join(lines) + "\n"
    entries = _manifest_entries(manifest)
    if entries:
        keys = [k for k in ("figure", "paper_figure", "profile", "device", "status", "wall_seconds", "reused_results",
                            "finished", "config_hash") if any(k in e for e in entries)]
        if keys:
            out += ("\nThe last run of `curvature-gap reproduce` on this machine, as recorded in "
                    "`figures/manifest.json` (it may predate this build, and its profile may differ):\n\n")
            out += "| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n"
            for e in entries:
                out += "| " + " | ".join(_md(_short(e.get(k, ""))) for k in keys) + " |\n"
    return out


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.1f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    return str(v)


def _manifest_entries(manifest) -> list[dict]:
    if not manifest:
        return []
    if isinstance(manifest, list):
        return [e for e in manifest if isinstance(e, dict)]
    if isinstance(manifest, dict):
        if isinstance(manifest.get("figures"), list):
            return [e for e in manifest["figures"] if isinstance(e, dict)]
        if isinstance(manifest.get("figures"), dict):
            manifest = manifest["figures"]
        return [{"figure": k, **v} for k, v in manifest.items() if isinstance(v, dict)]
    return []


# ====================================================================== pipeline
def _check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise BookError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")


def toc_notebooks(root: Path) -> list[Path]:
    """The notebooks named in ``_toc.yml``, in book order (relative to the root). A missing one is an error."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc.get("parts", toc.get("chapters", [])))
    out = []
    for f in files:
        p = Path(f)
        if p.suffix == "":
            if (root / p.with_suffix(".ipynb")).is_file():
                out.append(p.with_suffix(".ipynb"))
            elif not (root / p.with_suffix(".md")).is_file():
                raise BookError(f"_toc.yml names {f}, but neither {f}.ipynb nor {f}.md exists")
        elif p.suffix == ".ipynb":
            out.append(p)
    return out


def ensure_kernel(log=print) -> None:
    """Make the ``python3`` kernel resolve to this interpreter (register it in this environment if not)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL)
        exe = spec.argv[0]
        if exe == "{python}":          # a spec that means "the interpreter that launches it"
            return
        found = shutil.which(exe) if os.sep not in exe else exe
        # compare without following symlinks: a venv's python links to the base interpreter
        if found and os.path.abspath(found) == os.path.abspath(sys.executable):
            return
    except NoSuchKernel:
        pass
    log(f"[book] registering the {KERNEL} kernel for {sys.executable}")
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
                    "--display-name", "Python 3 (curvature-gap)"], check=True, capture_output=True)


def execute_notebook(src: Path, dst: Path, parameters: dict, cwd: Path, timeout: int | None = None) -> float:
    """Execute ``src`` with papermill into ``dst``; returns the wall time. Raises :class:`BookError` on
    any execution error (the partly executed copy with the traceback stays at ``dst``)."""
    import papermill as pm

    dst.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(str(src), str(dst), parameters=parameters, kernel_name=KERNEL, cwd=str(cwd),
                            progress_bar=False, log_output=False, execution_timeout=timeout,
                            report_mode=False)
    except pm.PapermillExecutionError as exc:
        raise BookError(f"{src} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}\n"
                        f"(executed copy with the traceback: {dst})") from exc
    except Exception as exc:  # kernel death, timeout, bad notebook
        raise BookError(f"{src} could not be executed: {type(exc).__name__}: {exc}") from exc
    return time.perf_counter() - t0


def _load_attr(module: str, attr: str):
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _placeholder(what: str, module: str) -> str:
    return (f"```{{note}}\nThe {what} is generated from `{module}`, which this build could not import; "
            f"this section stays empty rather than holding numbers no code computed.\n```\n")


def write_tables(gen: Path, profile: str, device: str, rows: list[dict], verify_meta: dict,
                 timings: dict, root: Path) -> list[str]:
    """Write every generated Markdown file into ``gen``; returns the names of the sections that had
    to be left as placeholders because a module was missing."""
    gen.mkdir(parents=True, exist_ok=True)
    missing = []
    (gen / "verify_summary.md").write_text(verify_summary_md(rows, verify_meta))
    (gen / "all_checks.md").write_text(all_checks_md(rows))
    appb = [r for r in rows if _prefix(r["id"]) == "appB"]
    (gen / "appB_rows.md").write_text(rows_md(appb) + "\n" if appb else
                                      "*`curvature-gap verify` produced no Appendix B rows in this build.*\n")
    bad = [r for r in rows if r["verdict"] in ("corrected", "fails")]
    (gen / "corrected_rows.md").write_text(rows_md(bad, ("id", "verdict", "max_rel_err", "what", "note")) + "\n"
                                           if bad else "*No check is corrected or failing in this build.*\n")
    errata = _load_attr("curvature_gap.theory.errata", "ERRATA")
    if errata is None:
        missing.append("errata")
        (gen / "errata.md").write_text(_placeholder("errata list", "curvature_gap.theory.errata"))
    else:
        (gen / "errata.md").write_text(errata_md(errata, rows))
    notation = _load_attr("curvature_gap.theory.notation", "NOTATION")
    if notation is None:
        missing.append("notation")
        (gen / "notation.md").write_text(_placeholder("notation table", "curvature_gap.theory.notation"))
    else:
        (gen / "notation.md").write_text(notation_md(notation))
    from .config import UNSTATED

    (gen / "unstated.md").write_text(unstated_md(UNSTATED))
    (gen / "faults.md").write_text(faults_md())
    (gen / "profiles.md").write_text(profiles_md())
    (gen / "versions.md").write_text(versions_md())
    (gen / "hardware.md").write_text(hardware_md(device))
    manifest = None
    mpath = root / "figures" / "manifest.json"
    if mpath.is_file():
        try:
            manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError:
            manifest = None
    (gen / "runtimes.md").write_text(runtimes_md(timings, verify_meta, manifest))
    (gen / "profile.md").write_text(f"`{profile}`")
    return missing


def _stage(root: Path, stage: Path, substitutions: dict) -> None:
    """Copy the book sources into ``stage``; the staged ``_config.yml`` gets the build's substitutions
    (``{{ profile }}`` etc. in the pages)."""
    import yaml

    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    shutil.copy2(root / "_toc.yml", stage / "_toc.yml")
    cfg = yaml.safe_load((root / "_config.yml").read_text())
    subs = dict(cfg.setdefault("parse", {}).get("myst_substitutions") or {})
    subs.update(substitutions)
    cfg["parse"]["myst_substitutions"] = subs
    (stage / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    shutil.copytree(root / "book", stage / "book",
                    ignore=shutil.ignore_patterns("_generated", "__pycache__", "_static"))
    # book/_static (the book's CSS) becomes the source root's _static, which Jupyter Book serves
    if (root / "book" / "_static").is_dir():
        shutil.copytree(root / "book" / "_static", stage / "_static")
    (stage / "notebooks").mkdir()


def _jupyter_book() -> list[str]:
    exe = Path(sys.executable).parent / "jupyter-book"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("jupyter-book")
    if not found:
        raise BookError("jupyter-book is not installed (pip install -e '.[dev]')")
    return [found]


def render(root: Path, stage: Path, log=print) -> tuple[int, list[str]]:
    """Run ``jupyter-book build -W -n --keep-going``; returns (exit status, warning lines)."""
    html = root / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    cmd = _jupyter_book() + ["build", str(stage), "--path-output", str(root), "--builder", "html",
                             "-W", "-n", "--keep-going", "--all"]
    log("[book] " + " ".join(["jupyter-book"] + cmd[1:]))
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    (root / "_build" / "jupyter-book.log").write_text(out)
    warnings = [ln for ln in out.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", ln)]
    return proc.returncode, warnings


def build(profile: str = "smoke", device: str = "auto", only: list[str] | None = None, render_html: bool = True,
          timeout: int | None = None, log=print) -> dict:
    """The whole pipeline; returns a report dict. Raises :class:`BookError` on the first failure."""
    _check_profile(profile)
    t_start = time.perf_counter()
    root = project_root()
    stage = root / "_build" / "stage"
    _stage(root, stage, {"profile": f"`{profile}`", "device": f"`{device}`"})
    ensure_kernel(log)
    vpath, vmeta = verify_json(profile, root=root, log=log)
    rows = json.loads(vpath.read_text())
    static = stage / "_static"          # the book's html_static_path: copied to _build/html/_static
    static.mkdir(parents=True, exist_ok=True)
    shutil.copy2(vpath, static / "verify.json")
    # every notebook of this build reads the very rows the introduction's table is made from, even if
    # the checked sources change while the build runs
    os.environ[VERIFY_ENV] = str(static / "verify.json")
    notebooks = toc_notebooks(root)
    if only:
        notebooks = [n for n in notebooks if any(o in n.stem for o in only)]
    timings: dict[str, float] = {}
    for nb in notebooks:
        log(f"[book] papermill {nb} -p profile {profile} -p device {device}")
        sec = execute_notebook(root / nb, stage / nb, {"profile": profile, "device": device}, cwd=root,
                               timeout=timeout)
        timings[nb.name] = sec
        log(f"[book]   done in {sec:.1f} s")
    missing = write_tables(stage / "book" / "_generated", profile, device, rows, vmeta, timings, root)
    report = {"profile": profile, "device": device, "notebooks": timings, "verify": vmeta,
              "placeholders": missing, "warnings": [], "returncode": None}
    if render_html:
        if only:
            raise BookError("--only executes a subset; the book itself is rendered only from all notebooks")
        rc, warnings = render(root, stage, log)
        report.update(returncode=rc, warnings=warnings, html=str(root / "_build" / "html" / "index.html"))
        if warnings:
            log(f"[book] {len(warnings)} warning(s):")
            for w in warnings:
                log("  " + w)
        if rc != 0 or warnings:
            report["seconds"] = round(time.perf_counter() - t_start, 1)
            _write_report(root, report)
            raise BookError(f"jupyter-book build failed (exit {rc}, {len(warnings)} warnings); "
                            f"see _build/jupyter-book.log")
    report["seconds"] = round(time.perf_counter() - t_start, 1)
    _write_report(root, report)
    return report


def _write_report(root: Path, report: dict) -> None:
    (root / "_build").mkdir(exist_ok=True)
    (root / "_build" / "book-report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")


# ====================================================================== checked outputs
def _is_checked(cell) -> bool:
    return cell.get("cell_type") == "code" and "NBVAL_CHECK_OUTPUT" in "".join(cell.get("source", ""))


def refresh_checked_outputs(paths: list[Path], executed_dir: Path | None = None, log=print) -> None:
    """Store, in each notebook itself, only the outputs of its ``# NBVAL_CHECK_OUTPUT`` cells (the
    references nbval compares against); every other output and execution count is cleared.

    The outputs come from executing the notebook under its default parameters (``smoke``), or, with
    ``executed_dir``, from the copies a ``smoke`` build already executed there (``_build/stage/notebooks``)."""
    import nbformat

    root = project_root()
    if executed_dir is None:
        ensure_kernel(log)
    for p in paths:
        p = (root / p) if not p.is_absolute() else p
        if executed_dir is None:
            out = root / "_build" / "refresh" / p.name
            log(f"[book] executing {p.relative_to(root)} for its checked outputs")
            execute_notebook(p, out, {}, cwd=root)
        else:
            out = Path(executed_dir) / p.name
            if not out.is_file():
                raise BookError(f"{out} does not exist: build the book with PROFILE=smoke first")
        ran = nbformat.read(out, as_version=4)
        inj = ran.metadata.get("papermill", {}).get("parameters", {})
        if inj.get("profile", "smoke") != "smoke":
            raise BookError(f"{out} was executed with profile {inj.get('profile')!r}; nbval runs smoke")
        ran_code = [c for c in ran.cells if c.cell_type == "code"
                    and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
        nb = nbformat.read(p, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if [c.source for c in code] != [c.source for c in ran_code]:
            raise BookError(f"{out} was executed from a different version of {p.name}")
        for c, r in zip(code, ran_code):
            c.execution_count = None
            c.outputs = []
            if _is_checked(c):
                if any(o.get("output_type") == "error" for o in r.outputs):
                    raise BookError(f"{p}: a checked cell raised an error")
                c.outputs = [o for o in r.outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]
                # nbval refuses stored outputs of a cell that claims never to have run
                c.execution_count = r.execution_count or 1
        nbformat.write(nb, p)
        log(f"[book] stored the checked outputs of {p.relative_to(root)}")


def strip_outputs(paths: list[Path]) -> None:
    """Clear every output except those of ``# NBVAL_CHECK_OUTPUT`` cells (what the repository holds)."""
    import nbformat

    for p in paths:
        nb = nbformat.read(p, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code" and not _is_checked(c):
                c.execution_count = None
                c.outputs = []
        nb.metadata.pop("papermill", None)
        nbformat.write(nb, p)


# ====================================================================== checks of the built HTML
class _LinkParser:
    """Collects ids/names and href/src targets of one HTML file (stdlib ``html.parser``)."""

    def __init__(self, text: str):
        from html.parser import HTMLParser

        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self.tables: list[list[list[str]]] = []
        outer = self

        class P(HTMLParser):
            def __init__(self):
                super().__init__(convert_charrefs=True)
                self.cell = None
                self.row = None

            def handle_starttag(self, tag, attrs):
                a = dict(attrs)
                for k in ("id", "name"):
                    if a.get(k):
                        outer.ids.add(a[k])
                for k in ("href", "src"):
                    if a.get(k) and tag in ("a", "img", "script", "link", "source", "iframe"):
                        outer.links.append((tag, a[k]))
                if tag == "table":
                    outer.tables.append([])
                elif tag == "tr" and outer.tables:
                    self.row = []
                    outer.tables[-1].append(self.row)
                elif tag in ("td", "th") and self.row is not None:
                    self.cell = []

            def handle_endtag(self, tag):
                if tag in ("td", "th") and self.cell is not None and self.row is not None:
                    self.row.append(" ".join("".join(self.cell).split()))
                    self.cell = None

            def handle_data(self, data):
                if self.cell is not None:
                    self.cell.append(data)

        P().feed(text)


def _pages(html_dir: Path) -> list[Path]:
    """The book's pages: every ``.html`` except theme templates shipped under ``_static/``."""
    return sorted(p for p in Path(html_dir).rglob("*.html") if "_static" not in p.relative_to(html_dir).parts)


def check_links(html_dir: Path) -> list[str]:
    """Every internal ``href``/``src`` of every page must name an existing file (and anchor).

    Returns the broken ones as ``page: target (why)``; external URLs are not followed (the book must
    not need them: see :func:`check_offline`)."""
    from urllib.parse import unquote, urlsplit

    html_dir = Path(html_dir)
    pages = _pages(html_dir)
    parsed = {p: _LinkParser(p.read_text(encoding="utf-8", errors="replace")) for p in pages}
    broken = []
    for page, lp in parsed.items():
        for tag, target in lp.links:
            u = urlsplit(target)
            if u.scheme or target.startswith("//") or target.startswith("#") and not target[1:]:
                continue
            path = unquote(u.path)
            dest = page if not path else (page.parent / path).resolve()
            if path and not dest.exists():
                broken.append(f"{page.relative_to(html_dir)}: {target} (no such file)")
                continue
            if dest.is_dir():
                dest = dest / "index.html"
                if not dest.exists():
                    broken.append(f"{page.relative_to(html_dir)}: {target} (directory without index.html)")
                    continue
            if u.fragment and dest.suffix == ".html":
                ids = parsed[dest].ids if dest in parsed else _LinkParser(dest.read_text(errors="replace")).ids
                if unquote(u.fragment) not in ids:
                    broken.append(f"{page.relative_to(html_dir)}: {target} (no anchor #{u.fragment})")
    return broken


def check_offline(html_dir: Path) -> list[str]:
    """No page loads a script, stylesheet or image from the network, and MathJax is served locally."""
    from urllib.parse import urlsplit

    html_dir = Path(html_dir)
    problems = []
    if not (html_dir / "_static" / "mathjax" / "tex-chtml.js").is_file():
        problems.append("_static/mathjax/tex-chtml.js is missing: MathJax is not served from the book")
    for page in _pages(html_dir):
        for tag, target in _LinkParser(page.read_text(encoding="utf-8", errors="replace")).links:
            if tag in ("script", "img", "link", "source", "iframe") and (
                    urlsplit(target).scheme in ("http", "https") or target.startswith("//")):
                problems.append(f"{page.relative_to(html_dir)}: <{tag}> loads {target} from the network")
    return problems


def check_downloads(html_dir: Path) -> list[str]:
    """Every notebook page links to its own ``.ipynb`` (the executed copy), and the file is there."""
    html_dir = Path(html_dir)
    problems = []
    pages = [p for p in _pages(html_dir) if p.parent.name == "notebooks"]
    if not pages:
        problems.append("no notebook pages in the book")
    for page in pages:
        nb = html_dir / "_sources" / "notebooks" / (page.stem + ".ipynb")
        links = [t for _, t in _LinkParser(page.read_text(encoding="utf-8", errors="replace")).links]
        if not nb.is_file():
            problems.append(f"{nb.relative_to(html_dir)} is missing: no notebook to download")
        elif not any(t.split("#")[0].endswith(f"_sources/notebooks/{page.stem}.ipynb") for t in links):
            problems.append(f"{page.relative_to(html_dir)} has no download link to its notebook")
    return problems


def check_summary_table(html_dir: Path, rows: list[dict]) -> list[str]:
    """The introduction's summary table must say, row by row, what :func:`summarize` says of ``rows``."""
    intro = Path(html_dir) / "book" / "intro.html"
    if not intro.is_file():
        return [f"{intro} is missing"]
    lp = _LinkParser(intro.read_text(encoding="utf-8"))
    table = next((t for t in lp.tables if t and t[0][:2] == ["result", "checks"]), None)
    if table is None:
        return ["the introduction has no summary table (header 'result | checks | ...')"]
    body = [r for r in table[1:] if r]
    expected = summarize(rows)
    problems = []
    if len(body) != len(expected):
        problems.append(f"summary table has {len(body)} rows, verify output gives {len(expected)} results")
    def norm(t: str) -> str:  # Sphinx turns ' and " into typographic quotes
        return " ".join(t.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"').split())

    for got, exp in zip(body, expected):
        want_title = norm(exp["result"])
        if norm(got[0]) != want_title:
            problems.append(f"row '{got[0]}': expected result '{want_title}'")
            continue
        if got[1] != str(exp["checks"]):
            problems.append(f"{want_title}: {got[1]} checks in the table, {exp['checks']} in the verify output")
        if exp["checks"]:
            counts = [got[2], got[3], got[4], got[5]]
            want = [str(exp[v]) for v in VERDICTS]
            if counts != want:
                problems.append(f"{want_title}: verdict counts {counts} in the table, {want} in the verify output")
        if exp["verdict"] not in got[7]:
            problems.append(f"{want_title}: verdict '{got[7]}' in the table, '{exp['verdict']}' in the verify output")
    return problems


class _DevTools:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (stdlib only)."""

    def __init__(self, chromium: str, width: int = 1440, height: int = 1500):
        r_cmd, w_cmd = os.pipe()     # we write commands, the browser reads them on fd 3
        r_evt, w_evt = os.pipe()     # the browser writes replies/events on fd 4

        def child_fds():  # pragma: no cover - runs in the child
            os.dup2(r_cmd, 3)
            os.dup2(w_evt, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             "--allow-file-access-from-files", f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=child_fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(r_cmd)
        os.close(w_evt)
        self.w = os.fdopen(w_cmd, "wb", buffering=0)
        self.r = os.fdopen(r_evt, "rb", buffering=0)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []
        self.session = None
        self.width, self.height = width, height

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise BookError("headless Chromium did not answer in time")
            ready, _, _ = select.select([self.r], [], [], left)
            if ready:
                chunk = os.read(self.r.fileno(), 1 << 20)
                if not chunk:
                    raise BookError("headless Chromium closed the DevTools pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60.0) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self.w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise BookError(f"DevTools {method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60.0) -> dict:
        deadline = time.time() + timeout
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def open(self):
        tid = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": tid, "flatten": True},
                                 session=False)["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Network.enable"):
            self.call(m)
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False})

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=10)
        except (BookError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_PAGE_PROBE = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  await Promise.all([...document.images].map(i => i.complete ? null : new Promise(r => { i.onload = r; i.onerror = r; })));
  await new Promise(r => setTimeout(r, 300));
  const imgs = [...document.images];
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
  const skip = 'pre, code, script, style, mjx-container, textarea, .highlight, .output';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT,
      {acceptNode: n => (n.parentElement && n.parentElement.closest(skip)) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  let text = '';
  while (walker.nextNode()) text += walker.currentNode.nodeValue + ' ';
  const raw = ['$$', '\\frac', '\\mathbf', '\\begin{', '\\(', '\\[', '\\operatorname', '\\partial'].filter(s => text.includes(s));
  return JSON.stringify({
    title: document.title,
    mathjax: window.MathJax ? (MathJax.version || 'loaded') : null,
    n_math: document.querySelectorAll('mjx-container').length,
    math_errors: document.querySelectorAll('mjx-merror').length,
    n_img: imgs.length, broken_images: broken, raw_tex: raw,
    height: Math.ceil(document.documentElement.scrollHeight)
  });
})()
"""


def browser_check(html_dir: Path, pages, shots_dir: Path, chromium: str | None = None,
                  max_height: int = 7000, log=print) -> dict:
    """Open each page in headless Chromium; report math rendering, images and network requests, and
    save a full-page screenshot ``shots_dir/<page stem>.png``. ``pages`` is a list (every page strict)
    or ``{page: strict}``; a strict page must show rendered math and an image. Returns ``{page: report}``."""
    if not isinstance(pages, dict):
        pages = {p: True for p in pages}
    import base64

    chromium = chromium or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chromium:
        raise BookError("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    shots_dir = Path(shots_dir)
    shots_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    dt = _DevTools(chromium)
    try:
        dt.open()
        for page in pages:
            path = (Path(html_dir) / page).resolve()
            if not path.is_file():
                out[page] = {"problems": [f"{page} does not exist"]}
                continue
            dt.events.clear()
            dt.call("Page.navigate", {"url": path.as_uri()})
            dt.wait_event("Page.loadEventFired", timeout=60)
            res = dt.call("Runtime.evaluate", {"expression": _PAGE_PROBE, "awaitPromise": True,
                                               "returnByValue": True}, timeout=120)
            if "exceptionDetails" in res:
                raise BookError(f"probe failed on {page}: {res['exceptionDetails']}")
            rep = json.loads(res["result"]["value"])
            external = sorted({e["params"]["request"]["url"] for e in dt.events
                               if e.get("method") == "Network.requestWillBeSent"
                               and e["params"]["request"]["url"].split(":", 1)[0] in ("http", "https")})
            rep["external_requests"] = external
            h = min(int(rep.get("height") or dt.height), max_height)
            dt.call("Emulation.setDeviceMetricsOverride", {"width": dt.width, "height": h, "deviceScaleFactor": 1,
                                                           "mobile": False})
            time.sleep(0.3)
            shot = dt.call("Page.captureScreenshot", {"format": "png"}, timeout=120)
            png = shots_dir / (Path(page).stem + ".png")
            png.write_bytes(base64.b64decode(shot["data"]))
            dt.call("Emulation.setDeviceMetricsOverride", {"width": dt.width, "height": dt.height,
                                                           "deviceScaleFactor": 1, "mobile": False})
            problems = []
            strict = pages[page]
            if strict and not rep["mathjax"]:
                problems.append("MathJax did not load")
            if strict and rep["n_math"] == 0:
                problems.append("no rendered math (mjx-container) on the page")
            if rep["math_errors"]:
                problems.append(f"{rep['math_errors']} MathJax errors")
            if rep["raw_tex"]:
                problems.append(f"raw TeX left in the text: {rep['raw_tex']}")
            if rep["broken_images"]:
                problems.append(f"images that did not load: {rep['broken_images']}")
            if strict and rep["n_img"] == 0:
                problems.append("no image on the page")
            if external:
                problems.append(f"requests to the network: {external}")
            rep.update(screenshot=str(png), problems=problems)
            out[page] = rep
            log(f"[book-check] {page}: {rep['n_math']} math elements, {rep['n_img']} images, "
                f"{'OK' if not problems else 'PROBLEMS: ' + '; '.join(problems)}; screenshot {png}")
    finally:
        dt.close()
    return out


# page -> strict: a theorem page and a figure page must show rendered math and at least one image; the
# other pages must merely have no raw TeX, no broken image and no network request.
CHECK_PAGES = {"notebooks/layernorm.html": True, "notebooks/fig03_hessian_init.html": True,
               "book/intro.html": False, "book/notation.html": False, "book/errata.html": False}


def check(profile: str | None = None, pages: list[str] | None = None, browser: bool = True, log=print) -> list[str]:
    """All checks of the built book in ``_build/html``; returns the problems (empty: all good).

    ``profile`` defaults to the one the book was built with (``_build/book-report.json``)."""
    root = project_root()
    html = root / "_build" / "html"
    if not (html / "index.html").exists():
        raise BookError(f"{html} holds no built book; run `make book` first")
    if profile is None:
        try:
            profile = json.loads((root / "_build" / "book-report.json").read_text())["profile"]
        except (OSError, ValueError, KeyError):
            profile = "smoke"
    problems = []
    broken = check_links(html)
    log(f"[book-check] internal links: {len(broken)} broken")
    problems += [f"broken link: {b}" for b in broken]
    offline = check_offline(html)
    log(f"[book-check] offline: {len(offline)} problems")
    problems += offline
    downloads = check_downloads(html)
    log(f"[book-check] notebook downloads: {len(downloads)} problems")
    problems += downloads
    vjson = html / "_static" / "verify.json"
    rows = json.loads(vjson.read_text()) if vjson.is_file() else []
    if not rows:
        problems.append("_static/verify.json is missing from the book")
    cached = _results_dir(root) / f"verify-{profile}.json"
    if cached.is_file() and json.loads(cached.read_text()) != rows:
        problems.append(f"the book's verify.json differs from {cached.relative_to(root)} (rebuild the book)")
    table = check_summary_table(html, rows)
    log(f"[book-check] summary table vs curvature-gap verify --json: {len(table)} mismatches")
    problems += table
    if browser:
        reports = browser_check(html, pages or CHECK_PAGES, root / "_build" / "screenshots", log=log)
        for page, rep in reports.items():
            problems += [f"{page}: {p}" for p in rep.get("problems", [])]
        (root / "_build" / "book-check.json").write_text(json.dumps(reports, indent=2) + "\n")
    return problems


# ====================================================================== CLI
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m curvature_gap.book", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=PROFILES, default=None,
                   help="run profile of the notebooks (default: smoke; with --check: the built book's)")
    p.add_argument("--device", default="auto", help="passed to every notebook as `device` (default: auto)")
    p.add_argument("--only", nargs="*", help="execute only notebooks whose name contains one of these "
                   "(no HTML is rendered)")
    p.add_argument("--no-render", action="store_true", help="stage and execute, but do not run jupyter-book")
    p.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds (default: none)")
    p.add_argument("--check", action="store_true", help="check the built book instead of building it: internal "
                   "links, offline MathJax, the summary table against the verify JSON, and headless Chromium on "
                   "a theorem page and a figure page (screenshots under _build/screenshots/)")
    p.add_argument("--no-browser", action="store_true", help="with --check: skip the Chromium part")
    p.add_argument("--from-stage", action="store_true", help="with --refresh-checked-outputs: take the outputs from "
                   "the copies a smoke build executed in _build/stage/notebooks instead of executing again")
    p.add_argument("--refresh-checked-outputs", nargs="*", metavar="NOTEBOOK",
                   help="re-execute these notebooks (default: all) and store the outputs of their "
                        "# NBVAL_CHECK_OUTPUT cells as nbval's references")
    args = p.parse_args(argv)
    try:
        if args.check:
            problems = check(args.profile, browser=not args.no_browser)
            for pr in problems:
                print(f"[book-check] PROBLEM: {pr}", file=sys.stderr)
            print(f"[book-check] {'OK' if not problems else f'{len(problems)} problem(s)'}")
            return 0 if not problems else 1
        if args.refresh_checked_outputs is not None:
            root = project_root()
            paths = [Path(x) for x in args.refresh_checked_outputs] or toc_notebooks(root)
            refresh_checked_outputs(paths, root / "_build" / "stage" / "notebooks" if args.from_stage else None)
            return 0
        report = build(args.profile or "smoke", args.device, only=args.only,
                       render_html=not (args.no_render or args.only), timeout=args.timeout)
    except BookError as exc:
        print(f"[book] FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"[book] built in {report['seconds']:.0f} s with {len(report['warnings'])} warnings"
          + (f"; sections waiting on a module: {', '.join(report['placeholders'])}" if report["placeholders"] else "")
          + (f"; open {report['html']}" if report.get("html") else ""))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
