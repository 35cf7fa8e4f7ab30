"""The few helpers the notebooks call: check parameters, load a result, show a figure, a table, a verdict.

Inside the book build (``tools/book``) three environment variables steer them: :data:`VERIFY_ENV` (the ``curvature-gap
verify`` rows the build renders from), :data:`STATIC_ENV` (where figure files go, for click-to-enlarge and PDF links)
and :data:`NO_COMPUTE_ENV` (the paper book never computes: a stale or missing result stops the build with the command
that refreshes it). Outside the build the same calls compute what is missing.
"""
from __future__ import annotations

import base64
import html
import itertools
import json
import math
import os
import re
import sys
from pathlib import Path

from . import checks, experiments, myst
from .bounds.titles import INEQUALITIES
from .captions import code_tex, ordinal, plural, readable, split_math, unit_tex
from .config import DEVICES, MODELS, PROFILES, ConfigError, recipe_for
from .experiments import Context, UnusableResult, default_published_dir
from .experiments.heatmaps import COMPARED, v_over_qk  # Fig. 3's reading on the page, as its row's
from .experiments.hessians import SETS, STATISTICS, rankings
from .experiments.norms import keys_values
from .experiments.trajectory import LISTS  # their legend's order (a stored meta is key-sorted)
from .findings import Verdict, by_L_words, finding_of, model_words, tex_powers
from .plotting import min_font_size, plot_dynamics_summary, png_bytes
from .provenance import checkout_root
from .row import Row
from .theory.errata import label as errata_label

__all__ = ["setup", "check_parameters", "load", "published_rows", "RECOMPUTE", "show_markdown", "show_seed_leads", "show_figure", "figure", "rows", "show_rows",
           "scaling_md", "show_scaling", "by_L_words",
           "verdict_text", "verdict_html", "show_verdict", "agreement_text", "show_agreement", "show_provenance", "md_table", "StaleResults", "PARAMETER_RULES", "find",
           "show_ranking", "show_cross_check", "md_escape", "text_html", "code_html", "note_html", "rows_md",
           "check_cell", "check_words", "readable_md", "PROVENANCE_CLASS", "code_tex"]

VERIFY_ENV = "CURVATURE_GAP_VERIFY_JSON"
STATIC_ENV = "CURVATURE_GAP_BOOK_STATIC"
NO_COMPUTE_ENV = "CURVATURE_GAP_NO_COMPUTE"


class StaleResults(RuntimeError):
    """The book renders published results, and the one it needs is missing or was computed by other code."""


# What a page shows outside the book build (its ``recompute`` parameter):
#   None    — the committed results and rows (published/paper/): the page's own numbers; nothing is computed, and
#             a stale committed result stops the page with what to do;
#   "quick" — the checks as ``curvature-gap verify --quick`` computes them (fewer instances, no adversarial search,
#             ~30 s): the same verdicts, but a smallest bound/exact larger than the page's; a figure's results
#             computed at the page's profile (the cache under results/, else trained);
#   "full"  — as "quick" with every search the book's numbers come from (~3 minutes on 2 cores).
RECOMPUTE = (None, "quick", "full")
_MODE = {"recompute": None}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# What each notebook parameter must be: (test, description, example for papermill). A name not listed
# here is a size (tokens, width, samples): a positive integer.
PARAMETER_RULES = {
    "profile": (lambda v: v in PROFILES, f"one of {', '.join(PROFILES)}", "smoke"),
    "device": (lambda v: v in DEVICES, f"one of {', '.join(DEVICES)}", "cpu"),
    "seed": (lambda v: _is_int(v) and v >= 0, "a non-negative integer", "3"),
    "shape": (lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) == 4
                                      and all(_is_int(x) and x >= 1 for x in v)),
              "None or a list of 4 positive integers (L, d_V, d_K, d_ff)", "'[12, 6, 4, 16]' (with -y)"),
    "recompute": (lambda v: v in RECOMPUTE, "None (read the committed results), \"quick\" or \"full\"", "quick"),
}
_SIZE_RULE = (lambda v: _is_int(v) and v >= 1, "a positive integer", "8")


def check_parameters(params: dict) -> None:
    """Check a notebook's parameters (as papermill injected them) before anything runs: ``-p name value`` guesses
    the type from the text (``-p L 2.5`` a float), which would surface later as an unrelated error or a plausible
    result. Raises :class:`~curvature_gap.config.ConfigError` naming the parameter, its rule and a valid flag."""
    for name, value in params.items():
        ok, what, example = PARAMETER_RULES.get(name, _SIZE_RULE)
        if not ok(value):
            raise ConfigError(f"notebook parameter {name}={value!r} ({type(value).__name__}) is invalid: it must be "
                              f"{what}; e.g. papermill ... -p {name} {example}")


def setup(**params) -> Path:
    """Prepare a notebook: check its parameters (:func:`check_parameters`), note its ``recompute`` (what
    :func:`rows` and :func:`load` read: :data:`RECOMPUTE`), work from the checkout's root when there is one (so
    data/, results/ and runs/ resolve), and set the dataset directory if unset. Returns the working directory."""
    if "recompute" not in params:  # the parameters cell names it; the setup cells pass the others by name
        caller = sys._getframe(1).f_locals
        if "recompute" in caller:
            params["recompute"] = caller["recompute"]
    check_parameters(params)
    _MODE["recompute"] = params.get("recompute")
    root = checkout_root()
    if root is not None:
        os.chdir(root)
    os.environ.setdefault("CURVATURE_GAP_DATA", str(Path.cwd() / "data"))
    return Path.cwd()


# what readable_md leaves as it is: fenced code, code spans, display and inline math, HTML tags
_MD_KEEP = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|(?<!\\)\$[^$\n]+?(?<!\\)\$|<[^<>\n]+>", re.S)


def readable_md(text: str) -> str:
    """Markdown whose prose numbers read as a reader writes them (:func:`~curvature_gap.captions.readable`:
    ``1.9e-02`` as 1.9 × 10⁻², one minus sign), leaving code, math and HTML tags as they are."""
    return myst.outside(_MD_KEEP, text, lambda t: readable(t.replace("$", "\x00")).replace("\x00", "$"))


def _display(text: str, kind: str) -> None:
    """Display ``text`` as IPython's ``kind`` ("Markdown", "HTML"); printed, without tags, outside IPython."""
    try:
        from IPython import display  # noqa: PLC0415 - IPython only exists inside a kernel
    except ModuleNotFoundError:  # pragma: no cover
        print(re.sub(r"<[^>]+>", "", text) if kind == "HTML" else text)
        return
    display.display(getattr(display, kind)(text))


def show_markdown(text: str) -> None:
    """Display MyST Markdown in a notebook, its prose numbers formatted (:func:`readable_md`). Outside the book
    build (which renders MyST itself) it is shown as plain Markdown (:func:`curvature_gap.myst.to_markdown`):
    what plain Jupyter, Colab and Binder render, and what the page's download shows."""
    text = readable_md(text)
    if not os.environ.get(STATIC_ENV):
        text = myst.to_markdown(text, myst.from_checkout())
    _display(text, "Markdown")


# ---------------------------------------------------------------------------------------------- results
def load(name: str, profile: str = "smoke", device: str = "auto", seed: int | None = None):
    """A result for a page: the cache or the published results when they match the current configuration, else
    computed now — except inside the paper book's build, which never computes and stops with the command that
    refreshes a missing or stale result (:class:`StaleResults`). A ``seed`` other than the profile's training seed
    trains with it instead (another config hash: nothing under the profile's seed is reused or overwritten)."""
    mode = _MODE["recompute"]
    over = {m: {"seed": int(seed)} for m in MODELS if seed is not None and recipe_for(m, profile).seed != int(seed)}
    ctx = Context(profile=profile, device=device, progress=False, train_overrides=over,
                  published_dir=default_published_dir() if mode is None else None)
    in_build = bool(os.environ.get(NO_COMPUTE_ENV))
    if in_build or (mode is None and profile == "paper"):
        r = experiments.find_result(name, ctx=ctx)
        if r is None:
            try:
                experiments.published_check(name, ctx)
                why = "no usable result"
            except UnusableResult as exc:
                why = str(exc)
            raise StaleResults(f"the published result of {name} cannot be used ({why}): it is stale at this commit, "
                               "which the test suite reports; a maintainer refreshes it with `make reproduce && "
                               "make publish`. " + (
                                   "To read your own results meanwhile: `make reproduce`, then run this page outside "
                                   "the paper book's build" if in_build else
                                   'To compute it here instead, set recompute = "full" in the parameters cell'))
        return r
    return experiments.load_results(name, ctx=ctx)


PROVENANCE_CLASS = "cg-provenance"


def show_provenance(res) -> None:
    """Where a result's numbers come from: file, profile, how long, on which device and when they were computed."""
    prov = res.provenance or {}
    sw, git = prov.get("software") or {}, prov.get("git") or {}
    where, root = res.json_path, checkout_root()
    if root is not None and where is not None:
        where = Path(where).resolve()
        where = where.relative_to(root) if where.is_relative_to(root) else where
    # the configuration hash and the machine's CPU string are for maintainers (in the JSON itself)
    parts = [f"Numbers: `{where}` (profile `{res.config.get('profile')}`)"]
    if prov.get("compute_seconds") is not None:
        secs = float(prov["compute_seconds"])
        took = "under a second (it reads what an earlier computation saved)" if secs < 0.5 else f"{secs:.0f} s"
        parts.append(f"computed in {took} on the {prov.get('device', '?').upper()}")
    if prov.get("created"):
        parts.append(f"on {prov['created']}")
    if sw.get("torch"):
        parts.append(f"torch {sw['torch']}")
    if git.get("commit"):
        parts.append(f"commit `{str(git['commit'])[:10]}`{' (with uncommitted changes)' if git.get('dirty') else ''}")
    # folded HTML, not a MyST admonition: plain Jupyter shows it as the page does (not as a directive's source)
    show_markdown(f'<details class="{PROVENANCE_CLASS}"><summary>Provenance</summary>\n\n' + ", ".join(parts)
                  + ".\n\n</details>")


# ---------------------------------------------------------------------------------------------- figures
PHONE_MIN_PT = 7.0  # a figure's smallest text, drawn on a phone (390 px), is never below this
CSS_PX_PER_IN = 96.0


def phone_min_width(fig) -> int:
    """The narrowest width (CSS px) at which the figure's smallest text is still drawn at
    :data:`PHONE_MIN_PT`: narrower screens scroll it sideways (with a cue) rather than shrink it."""
    pt = min_font_size(fig)
    return math.ceil(PHONE_MIN_PT * fig.get_figwidth() * CSS_PX_PER_IN / pt) if math.isfinite(pt) and pt > 0 else 0


PAGE_DPI = 100  # a page's copy of a figure: 720 px for the usual 7.2 in, the column's width at 1440 px; the
#                full-size PNG (150 dpi) and the PDF stay one click away


def figure_html(fig, name: str, caption: str, alt: str, message: str, linked: bool = True,
                src: str | None = None) -> str:
    """A figure as a page element: the image (``src``, else the PNG inline) in a box that scrolls sideways below
    :func:`phone_min_width` (``cg-figure-scroll``; cg-figures.js adds the cue, so the text stays at ≥ 7 pt on a
    phone), the caption opening with the figure's ``message`` in bold (``strong.cg-message``: what to see,
    :mod:`curvature_gap.captions`), numbers as a reader writes them; with ``linked`` the figure, and links in the
    caption, open ``../_static/figures/<name>.png`` at full size and its PDF."""
    lazy = "" if src is None else ' loading="lazy"'
    src = "data:image/png;base64," + base64.b64encode(png_bytes(fig)).decode() if src is None else src
    floor = phone_min_width(fig)
    style = f' style="min-width: {floor}px"' if floor else ""
    # the legibility the book's checks read (tools/book/browser.py), also where the image is a file
    meta = f' data-width-in="{fig.get_figwidth():.3f}" data-min-pt="{min_font_size(fig):.2f}"'
    w, h = fig.get_size_inches() * CSS_PX_PER_IN
    img = (f'<img src="{src}" alt="{html.escape(alt, quote=True)}" class="cg-img" width="{w:.0f}" height="{h:.0f}"'
           f'{meta}{lazy}{style}>')
    links = ""
    if linked:
        img = f'<a href="../_static/figures/{name}.png" target="_blank" title="open at full size">{img}</a>'
        links = (f' · <a href="../_static/figures/{name}.png" target="_blank">full size</a>'
                 f' · <a href="../_static/figures/{name}.pdf">PDF</a>')
    if not message.strip():
        raise ValueError(f"figure {name} has no message: its caption must say what to see (curvature_gap.captions)")
    return (f'<figure class="cg-figure" id="fig-{name}"><div class="cg-figure-scroll">{img}</div>'
            f'<figcaption><strong class="cg-message">{html_math(readable(message))}</strong> '
            f'{html_math(readable(caption))}{links}'
            "</figcaption></figure>")


def show_figure(fig, name: str, caption: str, alt: str, message: str) -> None:
    """Show a figure (:func:`figure_html`). Inside the book build the page shows a file, not an inline image
    (22 inline figures make a 14 MB page): ``figures/<name>-page.png`` at :data:`PAGE_DPI`, loaded lazily, with
    the full-size PNG and the PDF it links to beside it in the book's static files. Outside the build the figure
    is inline (a notebook has no files beside it)."""
    static, src = os.environ.get(STATIC_ENV), None
    if static:
        d = Path(static) / "figures"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.png").write_bytes(png_bytes(fig))
        (d / f"{name}-page.png").write_bytes(png_bytes(fig, dpi=PAGE_DPI))
        fig.savefig(d / f"{name}.pdf", format="pdf")
        src = f"../_static/figures/{name}-page.png"
    _display(figure_html(fig, name, caption, alt, message, linked=bool(static), src=src), "HTML")


def figure(name: str, result, part: str, caption: str) -> None:
    """Draw one part of a result's figure (:func:`curvature_gap.experiments.plot`) and show it, its caption
    opening with the message computed from the result's numbers (:func:`curvature_gap.experiments.message`)."""
    msg = experiments.message(name, part, result)
    fig = experiments.plot(name, result, part)
    doc = (experiments.spec(name).plots[part].__doc__ or "").strip().splitlines()[0]
    plain = re.sub(r"[${}]", "", re.sub(r"\\(\w+)", r"\1", caption))  # the alt text has no TeX
    show_figure(fig, f"{name}-{part}-{result.config.get('profile')}", caption, f"{doc} ({plain})", msg)


# ---------------------------------------------------------------------------------------------- rows, verdicts
_ROWS: dict = {}


def published_rows() -> list[Row]:
    """The committed rows of ``curvature-gap verify`` (``published/paper/verify.json``, every search): what the
    paper book renders. :class:`StaleResults` when missing or computed by other code, saying what to do."""
    path = (default_published_dir() or Path("published")) / "paper" / "verify.json"
    try:
        return checks.published_rows(path)
    except UnusableResult as exc:
        raise StaleResults(f"{exc}: the committed rows are stale at this commit (the test suite reports it; a "
                           "maintainer refreshes them with `make reproduce && make publish`). To compute them here "
                           'instead, set recompute = "quick" (about half a minute) or "full" (about 3 minutes) in '
                           "the parameters cell") from exc


def rows(prefixes=None) -> list[Row]:
    """The rows of ``curvature-gap verify`` this page renders: the build's JSON when building the book; outside
    it, by the page's ``recompute`` (:data:`RECOMPUTE`), the committed rows (:func:`published_rows`), else computed
    once per kernel (:func:`curvature_gap.checks.run_cached`). ``prefixes`` keeps rows whose id starts with one of
    them, by whole dotted components (``"thm2"`` matches ``thm2.layernorm.jacobian``, not ``thm20``)."""
    pinned = os.environ.get(VERIFY_ENV)
    if pinned:
        doc = json.loads(Path(pinned).read_text())
        rs = [Row.from_json(d) for d in (doc["rows"] if isinstance(doc, dict) else doc)]
    else:
        mode = _MODE["recompute"]
        if mode not in _ROWS:
            _ROWS[mode] = published_rows() if mode is None else checks.run_cached(quick=mode == "quick")
        rs = _ROWS[mode]
    if prefixes is None:
        return rs
    prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes)
    return [r for r in rs if any(r.id == p or r.id.startswith(p + ".") for p in prefixes)]


_MD_ESCAPE = re.compile(r"([\\`*_|<>\[\]$])")


def md_escape(text: str) -> str:
    """Text for a MyST table cell: no math, emphasis or HTML, one line."""
    return _MD_ESCAPE.sub(r"\\\1", str(text)).replace("\n", " ")


def md_math(text: str) -> str:
    """Text for a MyST table cell whose ``$…$`` stay rendered math (a finding's evidence): the words escaped as
    :func:`md_escape` does, the math kept (it never holds a ``|``)."""
    return "".join(f"${p}$" if i % 2 else md_escape(p) for i, p in enumerate(split_math(text)))


def html_math(text: str) -> str:
    """Text as HTML whose ``$…$`` MathJax typesets (the span Sphinx gives inline math), the rest escaped."""
    return "".join(f'<span class="math notranslate nohighlight">\\({html.escape(p)}\\)</span>' if i % 2
                   else html.escape(p) for i, p in enumerate(split_math(text)))


# Code notation (the rows' ``what`` and ``note``: ``I_{d_V} ⊗ W_V^T``, ``|L_(k+1) − L_k|``, ``∂B_1/∂W_2``) as text
# with sub- and superscripts. A subscript follows a one-letter symbol (not inside a word: ``w2_scale`` stays a name;
# after a differential's d: ``dW_1``; Ld_V is L d_V) or vec/diag/max/min; a superscript follows anything.
_SYMBOL = (r"(?:(?:(?<![\w])|(?<=(?<![A-Za-z])d))[A-Za-zΑ-Ωα-ωϕϵ]|(?<=(?<![A-Za-z])[A-Z])d(?=_)"
           r"|\b(?:vec|diag|max|min)|‖)")
_GROUP = r"\{(?:[^{}]|\{[^{}]*\})*\}|\((?:[^()]|\([^()]*\))*\)"
# a subscript of letters ends before another symbol's "_": d_Vd_K is d_V d_K, not d_{Vd} followed by _K
_SUB = re.compile(rf"({_SYMBOL})_({_GROUP}|[0-9]+(?:[A-Za-z](?![A-Za-z]))?|[A-Za-zΑ-Ωα-ω]+[0-9]*(?!_))")
_SUP = re.compile(rf"\^({_GROUP}|[-−]?[0-9.]*[0-9](?:/[0-9]+)?|[A-Za-z](?![A-Za-z]))")
_TAGS = {"\ue000": "<sub>", "\ue001": "</sub>", "\ue002": "<sup>", "\ue003": "</sup>"}
_MD_ENTITIES = {c: f"&#{ord(c)};" for c in "\\`*_|[]$"}


def _marked(text: str) -> str:
    """``text`` with its sub- and superscripts between the private marks of :data:`_TAGS` (braces dropped)."""
    def body(g: str) -> str:
        return _marked(g[1:-1] if g[:1] in "{(" else g)

    # again until nothing changes: a symbol right after a subscript (d_Vd_K: d_K after d_V) is found on the next pass
    for _ in range(4):
        new = _SUB.sub(lambda m: f"{m.group(1)}\ue000{body(m.group(2))}\ue001", text)
        if new == text:
            break
        text = new
    return _SUP.sub(lambda m: "ᵀ" if m.group(1) == "T" else f"\ue002{body(m.group(1))}\ue003", text)


def code_html(text: str) -> str:
    """Code notation as HTML text a reader reads: ``W_V`` as W<sub>V</sub>, ``I_{d_V}`` as I<sub>d<sub>V</sub></sub>,
    ``L_(k+1)`` as L<sub>k+1</sub>, ``A^T`` as Aᵀ, ``s^2.2`` with a superscript; the characters HTML and Markdown
    read written as entities, so that it shows the same in a Markdown table cell, in HTML and in Jupyter."""
    esc = "".join(_MD_ENTITIES.get(c, c) for c in html.escape(_marked(str(text)), quote=False))
    for mark, tag in _TAGS.items():
        esc = esc.replace(mark, tag)
    return esc


_ERRATUM_ID = re.compile(r"\berratum ([a-z0-9]+(?:-[A-Za-z0-9]+)+)\b")


def erratum_labels(text: str) -> str:
    """``text`` with each erratum named by its number on the errata page (``erratum E9``), not by its id."""
    def number(m: re.Match) -> str:
        try:
            return f"erratum {errata_label(m.group(1))}"
        except KeyError:
            return m.group(0)
    return _ERRATUM_ID.sub(number, text)


def text_html(text: str) -> str:
    """A row's description (``what``, ``note``) as HTML: its code notation (``I_{d_V} ⊗ W_K``) as text with sub-
    and superscripts (:func:`code_html`), never as would-be math; errata by their number (:func:`erratum_labels`)."""
    return f'<span class="cg-text">{code_html(erratum_labels(text))}</span>'


def md_table(header: list[str], body: list[list[str]]) -> str:
    """A Markdown table (cells are inserted as given: escape them with :func:`md_escape` when needed)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def _number(r: Row) -> str:
    v = r.number()
    return "—" if v is None else "0" if v == 0 else readable(f"{v:.2g}" if abs(v) >= 1e-2 else f"{v:.1e}")


def scaling_md(r: Row) -> str:
    """How a bound row's smallest ratio moves (its ``details["scaling"]``: the searches at each L, the W₂ sweep)
    as a Markdown table: the swept value, bound/exact found there, and the law read off them."""
    tabs = r.details.get("scaling") or []

    def law(t):  # a law only where the local slopes settled, with the range it was read on
        if not t.get("law"):
            return "none stated: local slopes " + readable(" → ".join(f"{x:.2f}" for x in t["local_slopes"])) + " not settled"
        lo, hi = t["range"]
        return md_math(tex_powers(readable(t["law"]).replace("^−", "^-"))) + readable(f" on [{lo:g}, {hi:g}]")
    body = [[code_html(t["var"]), readable(", ".join(f"{x:g}: {y:.3g}" for x, y in t["points"])), law(t)] for t in tabs]
    return md_table(["as it varies", "smallest bound/exact found", "law"], body) if body else ""


def show_scaling(rs: list[Row], caption: str = "") -> None:
    """For each failing row of ``rs`` that has one, its scaling table (:func:`scaling_md`), headed by the inequality in
    words (its title, :data:`curvature_gap.bounds.titles.INEQUALITIES`, else what it compares; its id in a hover)."""
    parts = []
    for r in (r for r in rs if r.verdict == "fails" and scaling_md(r)):
        title = INEQUALITIES[r.id][0] if r.id in INEQUALITIES else re.split(r" vs |; ", r.what, maxsplit=1)[0]
        parts.append(f"{check_words(title, r.id, strong=True)}\n\n{scaling_md(r)}")
    show_markdown((f"{caption}\n\n" if caption else "") + ("\n\n".join(parts) or "*No failing step has a scaling table.*"))


# in a row's note: how the worst instance of a bound row's sweeps is named ("worst at sweep=adversarial,
# x=thm6.GQ@L=16,d=3,seed=0, seed=0, sub=QK"), and a stored counter-example's name (thm1.printed@uniform)
_WORST = re.compile(r"worst at sweep=(?P<sweep>[\w-]+), x=(?P<x>.*?), seed=(?P<seed>\d+)(?:, sub=(?P<sub>\w+))?(?=;|$)")
_CASE_NAME = re.compile(r"(?<![\w.])[A-Za-z]\w*(?:\.\w+)*@[\w=,.+-]*\w|(?<![\w.])(?:\w+\.)+\w*@[^,;\s]+")


def note_html(note: str, ids=()) -> str:
    """A row's note as a reader's text (:func:`text_html`): numbers readable, the worst instance of its sweeps
    in words, and the check ids (``ids``) and stored counter-examples it names as small references (``.cg-id``:
    for those who look them up in the every-check chapter)."""
    def worst(m):
        sweep = "the adversarial search" if m["sweep"] == "adversarial" else (
            "the stored counter-examples" if m["sweep"] == "replay" else f"the {m['sweep'].replace('_', ' ')} sweep")
        x = m["x"]
        at = "" if x == m["sweep"] else f" at \x02{x}\x03" if "@" in x or "." in x and not re.fullmatch(r"[\d.e+-]+", x) \
            else f" at x = {x}"
        block = f", block ({m['sub'][0]},{m['sub'][1:]})" if m["sub"] else ""
        return f"worst in {sweep}{at} (seed {m['seed']}{block})"

    text = _WORST.sub(worst, readable(note)).replace(" | ", "; ")  # the parts of a note, one sentence
    names = sorted({i for i in ids if i in text} | {i.split(".", 1)[1] for i in ids if i.startswith("bounds.")
                                                   and re.search(rf"(?<![\w.]){re.escape(i.split('.', 1)[1])}(?![\w])", text)},
                   key=len, reverse=True)
    pat = "|".join([r"\x02.*?\x03", _CASE_NAME.pattern] + [rf"(?<![\w.]){re.escape(i)}(?![\w])" for i in names])
    html_ = myst.outside(re.compile(pat), text, text_html,
                         lambda s: '<small class="cg-id"><code>' + html.escape(s.strip("\x02\x03")) + "</code></small>")
    return html_.replace('<span class="cg-text"></span>', "")


def rows_md(rs: list[Row], caption: str = "", ids=None) -> str:
    """A compact table of rows (what is compared, verdict, number), the details of each row folded below it (what it
    compares in full, its note, its id small); ``ids``: the check ids a note may name (all of ``rs``'s by default)."""
    if not rs:
        return "*No row of `curvature-gap verify` matches this result.*"
    ids = [r.id for r in rs] if ids is None else list(ids)
    kind = {r.kind for r in rs}
    num = "smallest bound/exact" if kind == {"bound"} else "max rel. error" if kind == {"formula"} else "number"
    body = [[check_cell(r), f"**{r.verdict}**" if r.verdict in ("fails", "corrected") else r.verdict, _number(r)]
            for r in rs]
    text = (f"{caption}\n\n" if caption else "") + md_table(["what is compared", "verdict", num], body)
    details = "".join(f"<p>{text_html(readable(r.what))}" + (f"<br>{note_html(r.note, ids)}" if r.note else "")
                      + f' <small class="cg-id">(check <code>{html.escape(r.id)}</code>)</small></p>' for r in rs)
    return (text + f"\n\n<details><summary>What each check compares, in full ({plural(len(rs), 'check')})"
            f"</summary>{details}</details>")


def show_rows(rs: list[Row], caption: str = "") -> None:
    """Show :func:`rows_md` (a note may name any check of the build's rows)."""
    show_markdown(rows_md(rs, caption, ids=[r.id for r in rows()] if rs else ()))


def check_words(words: str, check_id: str, strong: bool = False) -> str:
    """Words about a check, in code notation (:func:`code_html`), errata by their number (:func:`erratum_labels`),
    with its id in a hover only."""
    body = code_html(erratum_labels(words))
    return (f'<span class="cg-text cg-check" title="check {html.escape(check_id, quote=True)}">'
            + (f"<strong>{body}</strong>" if strong else body) + "</span>")


def check_cell(r: Row) -> str:
    """A check in a reader's table: what it compares, in its own words (up to " vs ", the reference it is
    compared with), as :func:`check_words` writes them."""
    return check_words(readable(re.split(r" vs |; |: ", r.what, maxsplit=1)[0]).strip(), r.id)


def sentence(text: str) -> str:
    """Evidence as a reader's sentence: :func:`~curvature_gap.captions.readable` numbers, and a capital first
    letter where it opens with a lowercase word (never a symbol: ``x``, ``k``, math)."""
    text = readable(text).strip()
    return text[0].upper() + text[1:] if re.match(r"[a-z][a-z'’-]+\b", text) else text


def verdict_text(key: str, profile: str, rs: list[Row] | None = None) -> str:
    """The verdict line of a result's page: ``Verdict: <verdict>. <evidence>`` — or, for an experiment on the
    smoke profile, that the page is a pipeline check at toy scale and states no verdict."""
    f: Verdict = finding_of(key, rs if rs is not None else rows())
    if f.kind == "experiment" and profile != "paper":
        return ("This page was built with the smoke profile: a pipeline check at toy scale (a few images, a "
                "model trained for seconds). Its numbers say nothing about the paper, and it states no verdict; "
                "the paper-scale book does.")
    return f"**Verdict: {f.verdict}.** {sentence(f.evidence)}"


def _first_clause(text: str) -> tuple[str, str]:
    """``text`` split at its first "; " outside brackets: (first clause, the rest); the rest "" if none."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{" and 1 or -(ch in ")]}")
        if depth == 0 and text.startswith("; ", i):
            return text[:i], text[i + 2:]
    return text, ""


def verdict_html(key: str, profile: str, rs: list[Row] | None = None) -> str:
    """The verdict line of a result as a marked HTML element (the book's checks find it by its class and
    ``data-verdict``); the same element on a result's page and on the generated pages."""
    rs = rs if rs is not None else rows()
    f = finding_of(key, rs)
    smoke = f.kind == "experiment" and profile != "paper"
    cls = "cg-smoke-note" if smoke else f"cg-verdict cg-{f.css}"
    body = html_math(verdict_text(key, profile, rs)).replace("**", "")
    if not smoke:
        # every verdict says what it was computed on: the model, dataset and arithmetic of its paper profile (its
        # settings' experiments.Variant), where it has a trained model
        variant = getattr(experiments.SPECS.get(key), "variant", None)
        on = "" if variant is None else " <em>On {}{}).</em>".format(
            "the authors' model (" if variant.model == "authors" else "the theorem's block (the Table 1 model, ",
            model_words(key))
        head = f"<strong>Verdict: {html.escape(f.verdict)}.</strong>{on}"
        # short: the verdict and the first clause of its evidence; the rest folded
        first, rest = _first_clause(body.partition(".")[2])
        body = head + first + (f".<details class=\"cg-more\"><summary>The evidence in full</summary>{sentence(rest)}"
                               "</details>" if rest else "")
    return (f'<div class="{cls}" data-result="{key}" data-verdict="{"" if smoke else html.escape(f.verdict)}">'
            f"{body}</div>")


def agreement_text(key: str, profile: str, why: str = "", rs: list[Row] | None = None) -> str:
    """Whether the verdicts of a claim on the two models (``key``, a result of the theorem's block, and the result of
    its figure on the authors' model: ``experiments.on_model``) agree, in one sentence ("" for the smoke profile,
    or where either was not run); ``why`` follows a disagreement."""
    if profile != "paper":
        return ""
    rs = rs if rs is not None else rows()
    a, t = finding_of(experiments.on_model(key, "authors"), rs), finding_of(key, rs)
    if a.verdict.startswith("not run") or t.verdict.startswith("not run"):
        return ""
    if a.verdict == t.verdict:
        return f"**The two models agree:** the claim is {a.verdict} on both."
    return (f"**The two models disagree:** the claim is {a.verdict} on the authors' model and {t.verdict} on the "
            f"theorem's block." + (f" {why}" if why else ""))


def second_reading_text(ids, profile: str, rs: list[Row] | None = None) -> str:
    """A second reading of a figure's claim, beside the caption's (rows of role ``detail`` and no claim of the paper:
    Fig. 3's superlative), its verdict on each model whose row ran, in one sentence; "" for the smoke profile or
    where none ran."""
    if profile != "paper":
        return ""
    by = {r.id: r for r in (rs if rs is not None else rows())}
    on = {"authors": "the authors' model", "table1": "the theorem's block"}
    parts = [f"{by[i].verdict} on {on[experiments.spec(by[i].result).variant.model]}" for i in ids
             if i in by and by[i].ran]
    return ("*A second reading, the superlative ('the largest' of every block), which is not the caption's: "
            + "; ".join(parts) + ".*") if parts else ""


def _shown(text_of, kind: str = "Markdown"):
    """The function that shows what ``text_of`` returns for the same arguments (nothing where it is empty), as
    MyST (:func:`show_markdown`) or as HTML."""
    def show(*args, **kwargs) -> None:
        if text := text_of(*args, **kwargs):
            show_markdown(text) if kind == "Markdown" else _display(text, kind)
    show.__name__ = show.__qualname__ = "show_" + text_of.__name__.rsplit("_", 1)[0]  # verdict_html: show_verdict
    show.__doc__ = f"Show :func:`{text_of.__name__}` (nothing where it is empty)."
    return show


show_verdict = _shown(verdict_html, "HTML")  # a result's verdict on its page
show_agreement = _shown(agreement_text)
show_second_reading = _shown(second_reading_text)


# ---------------------------------------------------------------------------------------------- figure tables
def show_ranking(result) -> None:
    """Figs. 3/4: the diagonal blocks ranked by each statistic, over each parameter set (largest first),
    with W_V's place — the table the claim's verdict is derived from."""
    stats = result.meta["unit_stats"]
    table = rankings(stats)
    head, prev = ["statistic"], []
    for s in table:  # each reading names the blocks it ranks: the weight matrices, then what each adds
        members = [u for u in SETS[s][1] if u in stats]
        added = [u for u in members if u not in prev]
        head.append(("among $" if not prev else "adding $") + ", ".join(unit_tex(u) for u in added) + "$")
        prev = members

    def cell(order):  # W_V's place (bold when first) and the three largest
        place = ordinal(order.index("W_V") + 1)
        return f"{'**' + place + '**' if place == '1st' else place} (${' > '.join(map(unit_tex, order[:3]))}$ …)"
    body = [[md_escape(label)] + [cell(table[s][st]) for s in table] for st, (label, _) in STATISTICS.items()]
    show_markdown("Place of $W_V$'s block among the diagonal blocks (the three largest in brackets):\n\n"
                  + md_table(head, body))


def show_values_larger(result) -> None:
    """Fig. 3's claim, the caption's comparative: in each statistic, the diagonal blocks of $W_Q$, $W_K$ and $W_V$ and
    $W_V$'s over the larger of the other two (:func:`~curvature_gap.experiments.heatmaps.v_over_qk`); on the authors'
    model also the same count on every initialisation its verdict counts over."""
    stats = result.meta["unit_stats"]
    ratio = v_over_qk(stats)
    body = [[md_escape(label)] + [f"{stats[u][st]:.3g}" for u in (*COMPARED, "W_V")]
            + [f"{ratio[st]:.3g}", "yes" if ratio[st] > 1 else "**no**"] for st, (label, _) in STATISTICS.items()]
    units = ["$" + unit_tex(u) + "$" for u in (*COMPARED, "W_V")]
    show_markdown("The caption's comparative, statistic by statistic: the diagonal blocks of the query, key and value "
                  "weights (their second panel), and $W_V$'s over the larger of the other two:\n\n"
                  + md_table(["statistic", *units, "$W_V$ / larger of $W_Q$, $W_K$", "larger"], body))
    seeds = result.meta.get("seed_leads") or []
    if seeds:
        show_markdown(f"The same on each of the {len(seeds)} initialisations the verdict counts over:\n\n" + md_table(
            ["seed", "$W_V$ larger than $W_Q$ and $W_K$", "$W_V$ / larger of $W_Q$, $W_K$"],
            [[str(d["seed"]), f"{sum(r > 1 for r in d['v_over_qk'].values())}/{len(STATISTICS)}",
              f"{min(d['v_over_qk'].values()):.3g}–{max(d['v_over_qk'].values()):.3g}"] for d in seeds]))


def show_kv_readings(result, name: str) -> None:
    """Fig. 5: every reading its verdict counts (the row's details,
    :func:`~curvature_gap.experiments.norms.keys_values`), its blocks largest first, the largest other over the
    smaller of Keys and Values, and whether the sentence holds."""
    d = keys_values(result, experiments.spec(name)).details
    runs = len({r["run"] for r in d["readings"]}) > 1
    ffn = any("holds_with_ffn_weights" in r for r in d["readings"])
    yes = {True: "yes", False: "no", None: "–"}
    body = [([str(r["run"])] if runs else []) + [r["panel"], md_escape(r["reading"]),
                                                 md_escape(" > ".join(u.replace("_", "") for u in r["order"])),
                                                 f"{r['ratio']:.2f}", yes[r["holds"]]]
            + ([yes[r.get("holds_with_ffn_weights")]] if ffn else []) for r in d["readings"]]
    head = (["run (seed)"] if runs else []) + ["panel", "reading", "order, largest first", "others / min(K, V)",
                                                "holds"] + (["holds, FFN weights for their FeedForward"] if ffn else [])
    show_markdown(f"Every reading the verdict counts, largest first ('much smaller' needs the largest other at most "
                  f"{d['much_smaller_factor']:g} × the smaller of Keys and Values):\n\n" + md_table(head, body))


def show_batch_spread(result) -> None:
    """Fig. 5 on the authors' model: at the last step, each list's Hessian norm on each of the five batches their
    notebook's sections draw (``spread_*``); nothing where the result has none."""
    lists = [g for g in LISTS if g in result.meta["lists"] and f"spread_{g}" in result.arrays]
    if not lists:
        return
    rows_ = [[md_escape(result.meta["lists"][g]["label"]), f"{min(v):.3g}", f"{max(v):.3g}", f"{max(v) / min(v):.2f}"]
             for g in lists for v in [result.arrays[f"spread_{g}"].tolist()]]
    show_markdown(f"How much the batch matters: at step {int(result['steps'][-1]):,} each list's Hessian norm on each "
                  "of the five batches their sections draw (the lines above use their own section's):\n\n"
                  + md_table(["list", "smallest", "largest", "largest / smallest"], rows_))


def show_seed_leads(result) -> None:
    """Figs. 3/4 on the authors' model: the reading of :func:`show_ranking` on each initialisation or training run
    the verdict counts over (``meta["seed_leads"]``): in how many statistics W_V's diagonal block is the largest
    weight matrix, which block leads otherwise, and that draw's verdict. Nothing when the result has one draw."""
    seeds = result.meta.get("seed_leads") or []
    if not seeds:
        return
    n_st = len(seeds[0]["weights_first"])
    draws = "initialisations" if result.meta.get("step", 0) == 0 else "training runs"

    def otherwise(d):
        firsts = list(d["weights_first"].values())
        rivals = sorted(set(firsts) - {"W_V"}, key=firsts.index)  # a tie goes to the first statistic's, every run
        return "$" + unit_tex(max(rivals, key=firsts.count)) + "$" if rivals else "—"

    show_markdown(f"The same reading on each of the {len(seeds)} {draws} (statistics, of {n_st}, in which "
                  "$W_V$'s diagonal block is the largest among the weight matrices; the block that leads most often "
                  "otherwise):\n\n" + md_table(["seed", "$W_V$ largest", "leads otherwise", "verdict"],
                                                 [[str(d["seed"]), f"{d['leads']['weights']}/{n_st}", otherwise(d),
                                                   d["verdict"]] for d in seeds]))


def show_dynamics_summary(results: dict, figures: dict, profile: str) -> None:
    """Figs. 7–11 in one figure (:func:`curvature_gap.plotting.plot_dynamics_summary`), its caption the message:
    which group's Hessian block is largest at the first and at the last snapshot, and how much each grew."""
    labels = {"queries": "$W_Q$", "keys": "$W_K$", "values": "$W_V$", "LayerNorm": "LayerNorms", "feed-forward": "FFN"}
    steps = [int(s) for s in next(iter(results.values()))["steps"]]
    series = {labels.get(figures[f], figures[f]): [float(v) for v in results[f]["hess_fro"]] for f in figures}
    leaders = [max(series, key=lambda k, i=i: series[k][i]) for i in range(len(steps))]
    spans = []  # each stretch of snapshots with the same largest block
    for who, run in itertools.groupby(zip(leaders, steps), key=lambda x: x[0]):
        at = [s for _, s in run]
        spans.append(f"{who} at step {at[0]}" if at[0] == at[-1] else f"{who} at steps {at[0]}–{at[-1]}")
    msg = f"The largest Hessian block (Frobenius norm) is {'; '.join(spans)}."
    caption = (f"Which block has the most curvature, snapshot by snapshot, over the first {steps[-1]} training steps. "
               "The five figures below show each block in detail.")
    fig = plot_dynamics_summary(steps, series)
    show_figure(fig, f"figs7_11-summary-{profile}", caption,
                "The Frobenius norm of each parameter group's Hessian block against the training step, log scale", msg)


def show_cross_check(result) -> None:
    """The agreement of the figure's Hessian with curvlinops (the paper's tool)."""
    cc = result.meta["cross_check"]
    f32, f64 = cc["float32"], cc["float64"]
    show_markdown(
        f"The Hessian shown is exact ({cc['method']}, {cc['method_seconds']:.0f} s). On {f32['columns']} sampled "
        f"columns covering every parameter group it agrees with curvlinops' `HessianLinearOperator` to "
        + readable(f"{f32['max_relative_difference']:.1e} relative in float32 ({f32['batch']} images, worst group ")
        + f"`{f32['worst_group']}`), and to "
        + readable(f"{f64['max_relative_difference']:.1e} in float64 on {f64['batch']} images."))


def find(name: str, profile: str = "smoke"):
    """The result of ``name`` if the cache or the published results hold one for the current configuration,
    else None; never computes (for pages that show a stand-in when a result cannot be had here)."""
    return experiments.find_result(name, ctx=Context(profile=profile, progress=False,
                                                     published_dir=default_published_dir()))
