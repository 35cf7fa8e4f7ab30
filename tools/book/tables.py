"""The book's generated pages: what was found, every check, the errata, notation and reproducibility tables.

Everything here is rendered from the rows of ``curvature-gap verify`` (:mod:`curvature_gap.checks`), the
verdicts of :mod:`curvature_gap.findings`, the package's own tables (errata, notation, profiles, fault cases)
and the book's provenance tables (:mod:`tools.book.provenance_tables`); no number is typed by hand.
"""
from __future__ import annotations

import html
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

import torch

from curvature_gap.row import Row
from curvature_gap.config import TABLE1_RECIPES
from curvature_gap.faults import FAULTS
from curvature_gap.findings import RESULTS, findings, summary_sentences
from curvature_gap.captions import code_tex, plural, readable
from curvature_gap.notebook import (check_cell, code_html, md_escape, md_math, md_table, rows_md, scaling_md,
                                   sentence, text_html, verdict_html)
from curvature_gap.provenance import host
from curvature_gap.theory.errata import ERRATA, label, misprint_counts
from curvature_gap.theory.notation import NOTATION

from curvature_gap.bounds.titles import shown

from .provenance_tables import FROM_AUTHORS_CODE, UNSTATED

__all__ = ["landing_md", "verdict_md", "rows_md", "all_checks_md", "errata_md", "notation_md", "unstated_md", "from_authors_md", "profiles_md", "faults_md",
           "versions_md", "published_md", "hardware_md", "runtimes_md", "costs_md", "verdict_badge"]


def verdict_badge(key: str, verdict: str, css: str) -> str:
    """A result's verdict in the landing table, marked (``data-result``, ``data-verdict``) like the verdict
    line of its page, so that the book check can compare the two."""
    return (f'<span class="cg-badge cg-{css}" data-result="{key}" data-verdict="{html.escape(verdict)}">'
            f"{html.escape(verdict)}</span>")


def _link(page: str, text: str) -> str:
    return f"[{text}](/{page})" if page else text


# The legend of the verdict colours: one colour (CSS class of findings.VERDICT_CLASSES) per class of verdict.
LEGEND = [
    ("ok", "holds", "every check passes: closed forms agree with automatic differentiation to $10^{-10}$ (and "
     "finite differences), bounds hold on every instance tried, adversarial searches included; for a figure, the "
     "claim about it is reproduced"),
    ("corrected", "holds as corrected", "right once a misprint is corrected (see the errata), or holds while a "
     "step of its proof fails"),
    ("vacuous", "holds, but vacuous or uninformative", "looser than the exact value by more than $10^3$ "
     "everywhere, or guaranteed by the way it is checked"),
    ("repaired", "fails, with a repair", "a counter-example satisfying the assumptions violates it; a repaired "
     "statement holds under the same search"),
    ("bad", "fails", "a counter-example, or a claim nothing backs (not supported)"),
    ("notrepro", "not reproduced", "the claim about a figure does not hold, or holds only partly, in the "
     "regenerated figure"),
    ("none", "not run", "needs data or hardware this build did not have, or makes no claim"),
]


def legend_md() -> str:
    """The colours of the landing table's badges and what each class means, with the verdicts of each class."""
    from curvature_gap.findings import VERDICT_CLASSES  # noqa: PLC0415

    body = []
    for css, name, meaning in LEGEND:
        verdicts = [v for v, c in VERDICT_CLASSES.items() if c == css]
        badge = f'<span class="cg-badge cg-{css}">{html.escape(name)}</span>'
        body.append([badge, " · ".join(md_escape(v) for v in verdicts), meaning])
    return md_table(["colour", "verdicts", "meaning"], body)


# The landing's first screen: the paper's claims, each with the verdicts of the results behind it (keys of
# curvature_gap.findings.RESULTS; a figure's claim has one verdict per model, the authors' first).
CLAIMS = [
    ("Closed forms: the Jacobians and Hessians of LayerNorm, ReLU, attention and the whole block (Theorems 2–5, "
     "Lemmas 1–2, Appendix B)", ("thm2", "thm3", "sec2", "lem1", "sa_hessian", "thm4", "lem2", "thm5", "gn", "appB")),
    ("Theorem 1: a spectral-norm bound on the Hessian of self-attention", ("thm1",)),
    ("Theorem 6 (with Lemma 4 and a Proposition): a bound on the Hessian of the whole block",
     ("thm6", "lemma4", "prop")),
    ("§5: the bounds carry over to cross-entropy, “explicitly validated”", ("ce", "ce_validated")),
    ("Theorem 7 (under Assumption 1): the loss moves like $1/k$ when a $k$-th sample is added",
     ("thm7", "assumption1")),
    ("Figs. 3–4: the Values blocks of the Hessian are the largest (MNIST)",
     ("fig3_authors", "fig3", "fig4_authors", "fig4")),
    ("Figs. 5, 7–11: Keys and Values have the largest norms, also over training (MNIST)",
     ("fig5_authors", "fig5", "figs7_11")),
    ("Fig. 6: the loss difference decays like $1/k$ (CIFAR-100)", ("fig6_authors", "fig6")),
    ("Fig. 12: Assumption 1 becomes more plausible with more samples (CIFAR-100)", ("fig12_authors", "fig12")),
]
SCALING_CLAIM = "The title: implications for scaling laws"


def _model_word(key: str) -> str:
    """Which model a result's verdict is about, where its claim has a verdict per model (read from the result's
    settings: ``experiments.compared_model``), with :func:`~curvature_gap.findings.model_words`."""
    from curvature_gap.experiments import compared_model  # noqa: PLC0415
    from curvature_gap.findings import model_words  # noqa: PLC0415

    words = {"authors": "authors' model", "table1": "theorem's block"}.get(compared_model(key))
    return f"{words}, {model_words(key)}" if words else ""


def _tally(fs: list) -> str:
    """One badge per verdict the table shows, with how many results have it (in the order of the colours)."""
    from curvature_gap.findings import VERDICT_CLASSES  # noqa: PLC0415

    counts: dict[str, int] = {}
    for f in fs:
        counts[f.verdict] = counts.get(f.verdict, 0) + 1
    order = {css: i for i, (css, _, _) in enumerate(LEGEND)}
    seen = sorted(counts, key=lambda v: (order.get(VERDICT_CLASSES.get(v, "corrected"), 99), v))
    return " ".join(f'<span class="cg-badge cg-{next(f.css for f in fs if f.verdict == v)}">{html.escape(v)}: {counts[v]}'
                    "</span>" for v in seen)


def claims_md(rows: list[Row], headlines: str | None = None) -> str:
    """The landing's first screen: a tally of the verdicts of the paper's results (each verdict as its badge in the
    table reads, with its count; the companion's own results counted apart), the headline findings (``headlines``, a
    Markdown list rendered from the published results: :mod:`tools.book.numbers`), then each claim of the paper
    with the verdict badges of the results behind it (a figure's per model) and a link."""
    from curvature_gap.findings import BEYOND  # noqa: PLC0415

    all_fs = findings(rows)
    fs = {f.key: f for f in all_fs}
    paper = [f for f in all_fs if f.key not in BEYOND]
    own = [f for f in all_fs if f.key in BEYOND]
    lines = [f'<p class="cg-tally"><strong>{len(paper)} results of the paper checked:</strong> {_tally(paper)}'
             + (f"<br><small>and {plural(len(own), 'result')} of this companion's own: {_tally(own)}</small>" if own else "")
             + "</p>", ""]
    if headlines:
        lines += ["**What was found:**", "", headlines, ""]
    lines += ["| the paper claims | verdict |", "|---|---|"]
    for text, keys in CLAIMS:
        keys = [k for k in keys if k in fs]
        if not keys:
            continue
        page = fs[keys[0]].page
        badges = []
        if len(keys) > 4:  # many results behind one claim: how many have each verdict (each is in the table below)
            by: dict[tuple, int] = {}
            for k in keys:
                by[(fs[k].verdict, fs[k].css)] = by.get((fs[k].verdict, fs[k].css), 0) + 1
            badges = [f'<span class="cg-badge cg-{css}">{html.escape(v)}</span> <small>{plural(n, "result")}</small>'
                      for (v, css), n in by.items()]
            keys = []
        for k in keys:
            f = fs[k]
            who = _model_word(k)
            label = "" if len(keys) == 1 else (who or f.title.split(":")[0])
            badges.append(verdict_badge(k, f.verdict, f.css) + (f' <small>{html.escape(label)}</small>' if label else ""))
        lines.append(f"| {_link(page, md_math(text))} | {'<br>'.join(badges)} |")
    lines.append(f"| {SCALING_CLAIM} | <span class=\"cg-badge cg-bad\">not supported</span> "
                 "<small>see below</small> |")
    return "\n".join(lines) + "\n"


def landing_md(rows: list[Row], profile: str) -> str:
    """What holds and what fails (a few sentences), the legend of the colours, and the compact verdict table
    (result, verdict, evidence in words and rendered math, link)."""
    fs = findings(rows)
    lines = []
    lines += [f"- {readable(s)}" for s in summary_sentences(rows)]
    lines += ["", "**The verdicts, one colour per class:**", "", legend_md(), ""]
    lines += ["**Every result of the paper:**", ""]
    lines += ["| result | verdict | evidence |", "|---|---|---|"]
    for f in fs:
        lines.append(f"| {_link(f.page, md_escape(f.title))} | {verdict_badge(f.key, f.verdict, f.css)} | "
                     f"{md_math(sentence(f.evidence))} |")
    src = "paper-profile results (committed under `published/paper/`)"
    lines += ["", f"Verdicts about the experiments come from the {src}; the theory rows from random float64 "
                  f"instances. This build used the `{profile}` profile. {{doc}}`all_checks` lists every one of the "
                  f"{len(rows)} checks behind this table."]
    return "\n".join(lines) + "\n"


def _num(r: Row) -> str:
    """A row's number as a reader writes it (1.8 × 10⁻¹⁶, not 1.8e-16)."""
    v = r.number()
    if v is None:
        return "—"
    return "0" if v == 0 else readable(f"{v:.3g}" if abs(v) >= 1e-2 else f"{v:.1e}")


def all_checks_md(rows: list[Row], headings: bool = True) -> str:
    """Every row, grouped by result: key columns (check, verdict, number) first, the rest folded;
    ``headings=False`` for one result's rows on its own page."""
    parts = []
    titles = {k: t for k, t, _, _ in RESULTS}
    pages = {k: p for k, _, p, _ in RESULTS}
    order = [k for k, *_ in RESULTS] + sorted({r.result for r in rows} - {k for k, *_ in RESULTS})
    for key in order:
        rs = [r for r in rows if r.result == key]
        if not rs:
            continue
        title = titles.get(key, "The software itself" if key == "software" else key)
        if headings:
            parts.append(f"## {md_escape(title)}\n")
        if key in pages and headings:
            parts.append(f"Page: {{doc}}`/{pages[key]}`.\n")
        body = [[f"`{r.id}`", r.verdict, _num(r), "yes" if r.finding else ""] for r in rs]
        parts.append(md_table(["check", "verdict", "number", "finding"], body) + "\n")
        det = "".join(
            f"<dt><code>{html.escape(r.id)}</code> ({html.escape(r.kind)}, {html.escape(r.role)}, profile "
            f"{html.escape(r.profile)})</dt><dd>{text_html(r.what)}"
            + (f"<br><em>{html.escape(r.instances)}</em>" if r.instances else "")
            + (f"<br>{text_html(r.note)}" if r.note else "")
            + (f"<br>Errata: {', '.join(_erratum_link(e) for e in r.errata)}" if r.errata else "")
            + (f"<br>Run it: <code>{html.escape(r.command)}</code>" if r.command else "") + "</dd>" for r in rs)
        parts.append(f"<details><summary>What each check compares ({plural(len(rs), 'row')})</summary><dl>{det}</dl></details>\n")
    return "\n".join(parts)


def _as_printed(r: Row, erratum: dict | None = None) -> str:
    """The error of a formula as printed; a printed form that cannot be evaluated is said to be
    ill-dimensioned (its error where the shapes happen to fit, e.g. L = d_V, is no evidence that it is
    right), or what its erratum's ``as_printed`` says instead (e.g. an undefined symbol)."""
    if "not evaluable as written" in (r.note or ""):
        what = (erratum or {}).get("as_printed", "ill-dimensioned")
        where = "" if r.printed_rel_err is None else f"; {r.printed_rel_err:.2g} where the shapes fit"
        return readable(f"{what}{where}")
    return "—" if r.printed_rel_err is None else readable(f"{r.printed_rel_err:.2g}")


def _errata_intro(rows: list[Row]) -> str:
    """The counts of the E-list (:func:`~curvature_gap.theory.errata.misprint_counts`, the same the landing page
    and each result's evidence state) and the rule by which a misprinted statement is labelled."""
    mc = misprint_counts(rows)
    titles = {k: t.split(":")[0] for k, t, _, _ in RESULTS}
    per = []
    for key, *_ in RESULTS:
        c = mc.of(key)
        if c.formulas or c.notation:
            per.append(f"{md_escape(titles[key])}: {c.formulas}" + (f" and {c.notation} notational" if c.notation else ""))
    slips = ""
    if mc.notation:
        slips = (f" and {len(mc.notation)} notational slip{'s' if len(mc.notation) > 1 else ''} "
                 f"({', '.join(mc.notation)}, whose check has the verdict `notation`), listed and said to be, but not "
                 "counted among the misprinted formulas")
    wrong = ("corrected", "notation")
    n_rows = {e["id"]: sum(1 for r in rows if r.kind == "formula" and r.verdict in wrong and e["id"] in r.errata)
              for e in ERRATA}
    most = max(n_rows, key=n_rows.get) if n_rows else None
    several = (f", since one erratum can need several ({label(most)} is one misprint in {n_rows[most]} formulas)"
               if most and n_rows[most] > 1 else "")
    by = {}
    for f in findings(rows):
        by.setdefault(f.verdict, []).append(md_escape(f.title.split(":")[0]))
    corrected = ", ".join(by.get("holds as corrected", [])) or "none"
    repaired = ", ".join(by.get("fails; repaired version holds", [])) or "none"
    where = (f" Each is counted once, in the result its check belongs to ({'; '.join(per)}), and they are measured "
             f"on {mc.rows} checks{several}." if per else "")
    return (f"The first list has {mc.listed} entries: **{mc.formulas} misprinted formulas**{slips}.{where}\n\n"
            "**How a misprinted statement is labelled.** A misprint in a definition or a constant (an index, a factor, "
            "a normalisation) that, once corrected, gives a statement every check verifies makes the result *holds "
            "as corrected*: the statement is the paper's with the misprint fixed, and needs no new argument, even "
            "where the printed form has a counter-example in the second list. A statement whose corrected form "
            "still fails, so that it needs a new argument and not a correction, is *fails; repaired version "
            f"holds*. Labelled holds as corrected: {corrected}. Labelled fails; repaired version holds: {repaired}.\n")


def _errata_entries(rows: list[Row]):
    """The E-list (ERRATA, numbered) and the C-list (failing bound rows with a claim, numbered), as
    (label, anchor, title, what is wrong, effect, verdict, payload) tuples, in the order the page shows them."""
    by_id = {r.id: r for r in rows}
    fs = {f.key: f for f in findings(rows)}
    titles = {k: t for k, t, _, _ in RESULTS}
    out = []
    for k, e in enumerate(ERRATA, 1):
        r = by_id.get(e["evidence"])
        verdict = r.verdict if r else "not run"
        f = fs.get(r.result) if r else None
        if verdict == "notation":
            effect = "notation only: not counted among the misprints"
        elif f is not None:
            effect = f"{titles.get(f.key, f.key).split(':')[0]}: {f.verdict}"
        else:
            effect = "—"
        out.append((f"E{k}", f"errata-e{k}", e["title"], e["wrong"], effect, verdict, e))
    bad = [r for r in rows if r.kind == "bound" and r.verdict == "fails" and r.claim is not None]
    for k, r in enumerate(bad, 1):
        title, _ = shown(r.id)
        role = {"statement": "the statement", "repair": "the repair", "proof": "a step of the proof",
                "detail": "a step of the proof"}.get(r.role, r.role)
        f = fs.get(r.result)
        effect = f"{role} of {titles.get(r.result, r.result).split(':')[0]}" + (f" ({f.verdict})" if f else "")
        out.append((f"C{k}", f"errata-c{k}", title, f"smallest bound/exact {_num(r)} < 1", effect, "fails", r))
    return out


def _erratum_link(erratum_id: str) -> str:
    """An erratum named by its number, linked to its entry on the errata page (HTML, from a page of book/)."""
    lab = label(erratum_id)
    return f'<a href="errata.html#errata-{lab.lower()}">{lab}</a>'


def _erratum_ref(erratum_id: str) -> str:
    """An erratum named by its number on the errata page, linked ("E8"); its id only in a hover."""
    lab = label(erratum_id)
    return f"{{ref}}`{lab} <errata-{lab.lower()}>`"


def errata_md(rows: list[Row]) -> str:
    """A summary table of every entry; then the E-list (misprinted formulas, E1…) and the C-list (inequalities
    with a counter-example, C1…), each entry titled in words, its formulas rendered, its check id a small
    reference; after the counts and the labelling rule (:func:`_errata_intro`)."""
    by_id = {r.id: r for r in rows}
    entries = _errata_entries(rows)
    summary = [[f"{{ref}}`{lab} <{anchor}>`", md_math(code_tex(title)), md_math(code_tex(wrong)), md_escape(effect), verdict]
               for lab, anchor, title, wrong, effect, verdict, _ in entries]
    parts = ["## Summary\n",
             "Every entry of the two lists below, in one table: where in the paper, what is wrong, what it does to the "
             "result, and the verdict of its check (*corrected*: the printed formula is wrong and the corrected one "
             "verified; *notation*: a convention, not counted; *fails*: a counter-example).\n",
             md_table(["", "where in the paper", "what is wrong", "effect", "verdict"], summary) + "\n",
             _errata_intro(rows), "## Misprinted formulas\n"]
    for lab, anchor, title, _, _, _, e in entries:
        if not lab.startswith("E"):
            continue
        parts.append(f"({anchor})=\n### {lab}. {md_math(code_tex(title))}\n")
        parts.append(f"**Where.** {e['where']}\n")
        parts.append(f"**Printed.** {e['printed']}\n")
        parts.append(f"**What holds.** {e['holds']}\n")
        ids = [e["evidence"], *e.get("related", [])]
        found = [by_id[i] for i in ids if i in by_id]
        if found:
            body = [[check_cell(r), r.verdict, _num(r), _as_printed(r, e)] for r in found]
            parts.append(md_table(["check", "verdict", "error of the corrected form", "error as printed"], body) + "\n")
    parts.append("## Inequalities that fail, with a counter-example\n")
    for lab, anchor, title, _, effect, _, r in entries:
        if not lab.startswith("C"):
            continue
        _, tex = shown(r.id)
        # the stored counter-examples by count (their files in the small reference below, with the check id)
        ev = (f"s: {len(r.evidence)} stored instances" if len(r.evidence) > 1 else ": one stored instance" if r.evidence
              else ": in the sweeps' tables")
        ev += ", replayed by every run of the check" if r.evidence else ""
        err = (f" Depends on: {', '.join(_erratum_ref(e) for e in r.errata)}." if r.errata else "")
        parts.append(f"({anchor})=\n### {lab}. {md_math(code_tex(title))}\n\n*{md_escape(effect)}*\n\n$$\n{tex}\n$$\n\n"
                     f"Smallest bound/exact: **{_num(r)}** ({code_html(r.instances)}). Counter-example{ev}.{err}\n")
        if scaling_md(r):  # how the failure scales, not one minimum
            parts.append(f"How it scales under search:\n\n{scaling_md(r)}\n")
        files = "".join(f", <code>{html.escape(x)}</code>" for x in r.evidence)
        parts.append(f'<p class="cg-ref">check <code>{html.escape(r.id)}</code>{files}</p>\n')
    return "\n".join(parts)


def verdict_md(rows: list[Row], key: str, profile: str) -> str:
    """The verdict element of a result whose page is a Markdown page (Appendix B on the notation page)."""
    return verdict_html(key, profile, rows) + "\n"


def notation_md() -> str:
    """The one notation table: the paper's symbol, the code's name, its meaning (and the clash it resolves, where
    the paper uses one symbol twice): three columns, so that the formulas get the width they need."""
    body = [[n["paper"], "`" + n["code"].replace("|", "\\|") + "`",
             n["meaning"] + (f" *Clash resolved:* {n['clash']}" if n.get("clash") else "")] for n in NOTATION]
    return md_table(["paper", "code", "meaning"], body) + "\n"


def from_authors_md() -> str:
    """The values the authors' public experiment code states: theirs, where read, ours, and why we deviate."""
    body = [[md_escape(u["name"]), md_escape(readable(u["value"])), md_escape(u["source"]), md_escape(readable(u["ours"])),
             md_escape(readable(u["reason"]))] for u in FROM_AUTHORS_CODE]
    return md_table(["choice", "the authors' code", "read from (code/…)", "this companion", "why it differs"],
                    body) + "\n"


def unstated_md() -> str:
    body = [[md_escape(u["name"]), md_escape(readable(u["value"])), md_escape(readable(u["reason"]))] for u in UNSTATED]
    return md_table(["choice", "value used here", "reason"], body) + "\n"


def _setting(v) -> str:
    """A setting as a reader writes it: yes / no / none (not Python's True / False / None), 0 (not 0.0)."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def profiles_md() -> str:
    """Model and training settings per profile, transposed so that it fits a phone: one column per profile
    (their configuration hashes are for maintainers: ``docs/maintainers.md``)."""
    cols = list(TABLE1_RECIPES)
    keys = ["epochs", "train_subset", "batch_size", "optimizer", "lr", "weight_decay", "schedule", "crop_padding", "hflip",
            "grad_clip", "seed"]
    body = [["blocks"] + [str(TABLE1_RECIPES[c].model_config().n_blocks) for c in cols],
            ["width d_V / d_ff"] + [f"{TABLE1_RECIPES[c].model_config().d_model} / {TABLE1_RECIPES[c].model_config().d_ff}"
                                    for c in cols]]
    body += [[k.replace("_", " ")] + [md_escape(_setting(getattr(TABLE1_RECIPES[c], k))) for c in cols] for k in keys]
    return md_table(["setting"] + [f"{m} {p}" for m, p in cols], body) + "\n"


def faults_md(tests: dict[str, list[str]]) -> str:
    """The fault table: each fault, what the program does, and the tests marked with its id."""
    body = [[md_escape(f.area), f.case.replace("|", "\\|"), f.behaviour.replace("|", "\\|"),  # keep their `code`
             "<br>".join(f"`{t}`" for t in tests.get(f.id, [])) or "**no test**"] for f in FAULTS]
    return md_table(["area", "fault", "what the program does", "tests"], body) + "\n"


_VERSION_PKGS = ["torch", "torchvision", "curvlinops-for-pytorch", "numpy", "matplotlib", "jupyter-book", "sphinx",
                 "myst-nb", "sphinx-book-theme", "sphinxcontrib-bibtex", "sphinx-proof", "sphinx-mathjax-offline",
                 "papermill", "nbval", "curvature-gap"]


def versions_md(root) -> str:
    body = [["Python", platform.python_version()]]
    for p in _VERSION_PKGS:
        try:
            body.append([p, version(p)])
        except PackageNotFoundError:
            body.append([p, "not installed"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root).stdout.strip()
    if commit:
        body.append(["git commit of this build", f"`{commit}`"])
    return md_table(["package", "version"], body) + "\n"


def hardware_md(device: str) -> str:
    h = host()
    body = [["CPU", md_escape(h["cpu"]) + (" (a virtual machine)" if h.get("virtual") else "")],
            ["CPUs", f"{h['cpus']} (torch threads: {torch.get_num_threads()})"],
            ["memory", f"{h['memory_gib']:.1f} GiB" if h["memory_gib"] else "unknown"],
            ["GPU", md_escape(h["gpu"] or "none")], ["device requested for this build", f"`{device}`"]]
    return md_table(["item", "value"], body) + "\n"


def published_md(root, profile: str) -> str:
    """What the paper book renders, for readers: each result of the profile, how long it took to compute
    and on what, and when; a result that was not published is listed with what it needs (left out). Its
    configuration hash and commit are in the JSON itself (``docs/maintainers.md`` says where)."""
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from curvature_gap.experiments import SPECS  # noqa: PLC0415

    d = Path(root) / "published" / profile
    if profile != "paper" or not d.is_dir():
        return (f"This `{profile}` build computed its results while executing the notebooks (under `results/`); "
                "nothing was read from `published/`.\n")
    body = []
    for name, s in SPECS.items():
        if profile not in s.profiles:
            continue
        f = d / f"{name}.json"
        what = md_escape(s.title)
        if not f.is_file():
            body.append([f"`{name}`", what, "left out", md_escape(f"not computed here: it needs {s.needs}"), "—"])
            continue
        doc = json.loads(f.read_text())
        prov = doc.get("provenance") or {}
        h = prov.get("host") or {}
        secs = prov.get("compute_seconds")
        cpu = f", {h['cpu']}" if h.get("cpu") else ""
        took = "—" if secs is None else "under 1 †" if float(secs) < 0.5 else f"{float(secs):.0f}"
        body.append([f"`{name}`", what, took,
                     md_escape(f"{prov.get('device', '?')}{cpu}"), md_escape(str(doc.get("created", ""))[:10] or "—")])
    return ("The results it renders, how long each took to compute and on what; a result that was left out "
            "says what it needs:\n\n" + md_table(["result", "what", "compute (s)", "computed on", "date"], body)
            + "\n\n† Under a second: the result only reads what an earlier computation saved (its training run's "
            "snapshots, or the shared pass of the results it is drawn with), whose time is counted there.\n")


def costs_md(root) -> str:
    """What the paper profile of Figs. 6 and 12 costs, from the committed measurements: ``benchmarks/training_cost.json``
    (``benchmarks/training_cost.py``) and, where a GPU check was run, step f of ``benchmarks/gpu_check.json``; the
    totals are derived by ``benchmarks/report.training_costs``, as in ``benchmarks/RESULTS.md``."""
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from benchmarks.report import training_costs  # noqa: PLC0415 - the one derivation of these totals

    def hours(v):
        return f"{v / 3600:.1f} h" if v >= 3600 else f"{v / 60:.0f} min"

    sources, have_gpu = [], False
    cpu = Path(root) / "benchmarks" / "training_cost.json"
    if cpu.is_file():
        doc = json.loads(cpu.read_text())
        if doc.get("mode") == "full":
            sources.append((f"{doc['machine'].get('cpu', 'CPU')}, {doc['machine'].get('cpus', '?')} cores, "
                            f"{doc['threads']} torch thread(s), {doc['started'][:10]}", doc["rows"]))
    gpu = Path(root) / "benchmarks" / "gpu_check.json"
    if gpu.is_file():
        doc = json.loads(gpu.read_text())
        f = next((r for r in doc.get("rows", []) if r.get("step") == "f" and r.get("status") == "ok"), None)
        if f is not None and doc.get("mode") == "full":
            sources.append((f"{(doc.get('device') or {}).get('name', 'GPU')}, {doc['started'][:10]}", f["rows"]))
            have_gpu = True
    if not sources:
        return "No full measurement is committed yet: `python benchmarks/training_cost.py` writes it.\n"
    body = []
    for where, rows in sources:
        step = {(r["model"], r["precision"]): r["seconds"] for r in rows if r["quantity"] == "step"}
        epoch = next((r["seconds"] for r in rows if r["quantity"] == "epoch"), None)
        for model, what, precision, secs in training_costs(rows):
            measured = epoch is not None and precision == "float32" and model == "authors_cifar100"
            body.append([md_escape(where), md_escape(what), precision, f"{step[(model, precision)]:.3g} s",
                         f"{epoch / 60:.1f} min" if measured else "—", f"**{hours(secs)}**"])
    head = ["measured on", "run", "precision", "per step", "per epoch (measured)", "time"]
    intro = ""
    if len(sources) == 1:  # one machine: say it once, above the table
        intro = f"Measured on {sources[0][0]}:\n\n"
        head, body = head[1:], [row[1:] for row in body]
    note = ("" if have_gpu else
            "\n\nNo GPU measurement is committed yet: on a machine with CUDA, `make gpu-check` (step f) measures the "
            "same quantities in float32 and in bf16, their CUDA setting, and this table then shows them.")
    return intro + md_table(head, body) + note + "\n"


def runtimes_md(timings: dict, verify_source: str) -> str:
    """How long this build took, for readers: the rows it read and, in one line, its notebooks (each page's
    time is in ``_build/book-report.json``, for maintainers)."""
    total = sum(timings.values())
    slow = max(timings, key=timings.get) if timings else None
    body = [[f"`{verify_source}`", "—"],
            [f"executing the {plural(len(timings), 'notebook')}", f"{total:.0f}"
             + (f" (the slowest, `{slow}`: {timings[slow]:.0f})" if slow else "")]]
    return md_table(["step", "wall time (s)"], body) + "\n"
