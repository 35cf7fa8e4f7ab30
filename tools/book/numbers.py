"""No number typed by hand: every measured or computed figure in the book, the README and the CLI's notes is
rendered from its source, and :func:`prose_problems` fails on a number in prose that no source backs.

**Rendering.** :func:`numbers` names each figure the prose states, with the source it is read from: the rows of
``curvature-gap verify`` (``published/paper/verify.json``), the committed benchmarks (``benchmarks/*.json``), the
record of the reproduction behind the published results (``published/paper/reproduction.json``, written by
``make publish`` from ``figures/reproduction_report.json``). Where a source does not hold the figure yet, its text
says so. They reach the reader three ways:

* the book: MyST substitutions, ``{{ name }}`` in ``book/*.md`` and in the notebooks' markdown cells (the build
  sets them: :func:`substitutions`; the plain copies and the downloads are written with them);
* the README: a rendered span ``<!-- n:name -->text<!-- /n -->`` (``python -m tools.book readme`` rewrites
  every span from its source; ``--check``, and the test suite, fail on one out of date);
* the CLI: its notes are plain strings, checked like the prose (below).

**The check.** A number in prose (``README.md``, ``book/*.md``, the notebooks' markdown cells, the CLI's notes in
:data:`CLI_NOTES` and the help of its commands and options) is backed when it is

1. not prose: in code, maths, an HTML tag or comment, a link's target, a MyST directive's option, a role's
   target, a substitution or a rendered README span;
2. a reference or a name: the number of a theorem, lemma, figure, table, assumption, equation, section or
   appendix (``Figs. 3–5 and 7–11``), part of a name (``float32``, ``CIFAR-100``, ``8-block``, ``E9``), a version
   (``2.0.1``, ``3.x``), a year or a date, or a list's enumerator;
3. a small whole number (0 to 10): a count or a constant of the argument, not a measurement;
4. a setting: the number of a setting (seed, step, epoch, batch, width, …) within three words of that word, equal
   to a value of the configuration (the models, the recipes and every result's settings, both profiles:
   :func:`setting_values`);
5. a number of the paper's statements, listed in :data:`PAPER` with where the paper prints it.

Everything else is reported with its place and the fix: render it from its source, or, for the paper's own
numbers, add it to :data:`PAPER`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import nbformat

__all__ = ["Number", "numbers", "substitutions", "PAPER", "CLI_NOTES", "SETTING_WORDS", "setting_values",
           "prose_sources", "prose_numbers", "prose_problems", "render_readme", "README_COMMAND", "STEP_WORDS",
           "RUN_VARIANT"]

README_COMMAND = "python -m tools.book readme"


# ====================================================================== what is rendered, from where
@dataclasses.dataclass(frozen=True)
class Number:
    """A figure the prose states: its text as a reader reads it, and where it is read from."""

    text: str
    source: str


def _duration(seconds: float) -> str:
    s = round(float(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s < 600 else f"{round(s / 60)} min"
    m = round(s / 60)
    return f"{m // 60} h {m % 60} min"


def _rows(root: Path) -> list[dict]:
    p = root / "published" / "paper" / "verify.json"
    if not p.is_file():
        return []
    doc = json.loads(p.read_text())
    return doc["rows"] if isinstance(doc, dict) else doc


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _machine(doc: dict) -> str:
    m = doc.get("machine") or doc.get("host") or {}
    load = doc.get("load_average")
    if isinstance(load, dict):
        load = [load.get("start"), load.get("end")]
    cpu = f"a {m.get('cpus', '?')}-core {m.get('cpu', 'CPU')}"
    return cpu + (f", load average {load[0]:.1f} at the start and {load[1]:.1f} at the end"
                  if isinstance(load, (list, tuple)) and len(load) == 2 and None not in load else "")


def _row_numbers(root: Path) -> dict[str, Number]:
    out = {}
    src = "published/paper/verify.json"
    for r in _rows(root):
        if r["id"] == "bounds.thm1.repaired" and r.get("min_ratio") is not None:
            out["thm1_repaired_min_ratio"] = Number(f"{float(r['min_ratio']):.4g}",
                                                    f"{src}, row bounds.thm1.repaired (min_ratio)")
    return out


def _reproduction_numbers(root: Path) -> dict[str, Number]:
    """The reproduction behind the published results (``published/paper/reproduction.json``), as the end of a
    sentence opening "The reproduction behind the published results …"."""
    src = "published/paper/reproduction.json"
    doc = _json(root / src)
    if doc is None:
        return {"reproduce_summary": Number(f"is not recorded yet: `make reproduce && make publish` records it in "
                                            f"`{src}`", src)}
    phases = doc.get("phases") or {}
    training = sum(v for k, v in phases.items() if k.startswith("training"))
    per = doc.get("per_result") or {}
    ok = sum(1 for v in per.values() if v.get("status") == "ok")
    reused = sum(1 for v in per.values() if v.get("status") == "ok" and v.get("cached"))
    split = doc.get("split") or {}
    floor = split.get("floor") or {}
    parts = ""
    if split:
        parts = (f"; training {_duration(split['training'])}, Hessians {_duration(split['Hessians'])}, the rest "
                 f"{_duration(split['rest'])}")
        if floor.get("seconds"):
            parts += (f"; the training's floor, {floor['steps']:,} steps × {floor['step_ms']:.1f} ms ÷ {floor['cores']} "
                      f"cores, is {_duration(floor['seconds'])}")
    elif training:
        parts = f"; {_duration(training)} of it training"
    return {"reproduce_summary": Number(
        f"took {_duration(doc['seconds'])} (`{doc.get('command', 'make reproduce')}`: {ok} of {len(per)} results"
        + (f", {reused} of them read from the cache" if reused else "") + parts
        + f") on {_machine(doc)}", f"{src} (seconds, command, per_result, split, host, load_average)")}


# the step rows of benchmarks/bf16_cpu.json the prose states: the arithmetics `curvature-gap train` runs
# (--precision, --compile), in the reader's words; its other variants (bf16 on PyTorch's own GEMM kernels, the
# package's previous bf16 arithmetic) are comparisons, tabled in benchmarks/RESULTS.md
STEP_WORDS = {"float32": "float32", "bf16": "bf16, CUDA's autocast emulated",
              "float32_compiled": "float32, torch.compile", "bf16_compiled": "bf16, CUDA's autocast emulated, torch.compile"}
RUN_VARIANT = "bf16"  # the authors' runs train in the package's bf16 arithmetic: their step time prices a run


def _bench_numbers(root: Path) -> dict[str, Number]:
    """The step times of ``benchmarks/bf16_cpu.json`` (rows ``what == "step"`` of the variants in
    :data:`STEP_WORDS`), a run of the authors' recipe at the :data:`RUN_VARIANT` step time, and the CIFAR-100
    runs' costs derived from ``benchmarks/training_cost.json`` as ``benchmarks/RESULTS.md`` derives them."""
    out = {}
    src = "benchmarks/bf16_cpu.json"
    doc = _json(root / src)
    steps = {r["variant"]: r for r in (doc or {}).get("rows", []) if r.get("what") == "step"
             and r.get("variant") in STEP_WORDS and r.get("seconds") is not None}
    missing = Number(f"not measured yet (`python benchmarks/bf16_cpu.py` writes `{src}`)", src)
    out["step_times"] = out["step_machine"] = out["authors_run_estimate"] = missing
    if steps:
        out["step_times"] = Number(", ".join(f"{1e3 * float(steps[v]['seconds']):.1f} ms ({words})"
                                             for v, words in STEP_WORDS.items() if v in steps),
                                   f"{src} (rows: step, variants {', '.join(v for v in STEP_WORDS if v in steps)})")
        out["step_machine"] = Number(_machine(doc), f"{src} (machine, load_average)")
    if RUN_VARIANT in steps:  # a run of the authors' recipe to the step their figures read
        from curvature_gap.experiments.heatmaps import AUTHORS_TRAINED  # noqa: PLC0415 - Fig. 4's checkpoint

        n = AUTHORS_TRAINED["paper"].step
        out["authors_run_estimate"] = Number(f"{round(n * float(steps[RUN_VARIANT]['seconds']) / 60)} minutes",
                                             f"{src} (step: {RUN_VARIANT}) × {n:,} steps")
    src = "benchmarks/training_cost.json"
    doc = _json(root / src)
    if doc is not None and doc.get("mode") == "full":
        from benchmarks.report import training_costs  # noqa: PLC0415 - the one derivation of these totals

        for model, what, precision, secs in training_costs(doc["rows"]):
            key = ("cost_authors_cifar_run" if model == "authors_cifar100" and "one run to step" in what else
                   "cost_table1_cifar_run" if model == "cifar100" else None)
            if key and precision == "float32":
                out[key] = Number(f"{secs / 3600:.1f} h", f"{src}, as benchmarks/report.training_costs derives it: {what}")
    return out


def _result_numbers(root: Path) -> dict[str, Number]:
    """What the published results record of the models: their parameter counts and block sizes, the MNIST model's
    test accuracy."""
    out = {}
    pub = root / "published" / "paper"
    doc = _json(pub / "fig3_authors.json")
    if doc is not None:
        m, src = doc["meta"], "published/paper/fig3_authors.json"
        out["authors_mnist_parameters"] = Number(f"{m['n_parameters_model']:,}", f"{src} (meta n_parameters_model)")
        out["authors_mnist_listed"] = Number(f"{m['n_parameters']:,}", f"{src} (meta n_parameters)")
        out["authors_mnist_left_out"] = Number(f"{m['n_parameters_model'] - m['n_parameters']:,}",
                                               f"{src} (n_parameters_model − n_parameters)")
    doc = _json(pub / "fig3.json")
    if doc is not None:
        m, src = doc["meta"], "published/paper/fig3.json"
        size = {n: int(math.prod(s)) for n, s in zip(m["param_names"], m["param_shapes"])}
        out["mnist_wv_entries"] = Number(f"{size['blocks.0.value']:,}", f"{src} (meta param_shapes: blocks.0.value)")
        out["mnist_w1_entries"] = Number(f"{size['blocks.0.ffn1.weight']:,}",
                                         f"{src} (meta param_shapes: blocks.0.ffn1.weight)")
        out["mnist_ln_entries"] = Number(f"{size['blocks.0.ln1.weight'] + size['blocks.0.ln1.bias']:,}",
                                         f"{src} (meta param_shapes: blocks.0.ln1)")
    doc = _json(pub / "fig4.json")
    if doc is not None:
        acc = doc["meta"]["checkpoint"]["test_accuracy"]
        out["mnist_test_accuracy"] = Number(f"{100 * acc:.1f} %", "published/paper/fig4.json (meta checkpoint test_accuracy)")
    return out


def _code_numbers() -> dict[str, Number]:
    """Numbers the code fixes: the long-run guard of ``make reproduce``, the search of Theorem 7's rows, the
    configurations of the encoder-layer checks."""
    import inspect  # noqa: PLC0415

    from curvature_gap import reproduce  # noqa: PLC0415
    from curvature_gap.exact import encoder_layer  # noqa: PLC0415
    from curvature_gap.landscape import theorem7  # noqa: PLC0415

    steps = inspect.signature(theorem7.sa_check).parameters["steps"].default
    return {"long_run_limit": Number(f"{reproduce.LONG_RUN_S // 60} min", "curvature_gap.reproduce.LONG_RUN_S"),
            "theorem7_search_steps": Number(f"{steps}", "curvature_gap.landscape.theorem7.sa_check (steps)"),
            "encoder_layer_configurations": Number(f"{len(encoder_layer.CONFIGS)}",
                                                   "curvature_gap.exact.encoder_layer.CONFIGS")}


def _layer_numbers(root: Path) -> dict[str, Number]:
    """The ViT-Tiny layer of ``benchmarks/layer_hessian.json``: its parameters, the dense Hessian's size, its tokens."""
    src = "benchmarks/layer_hessian.json"
    doc = _json(root / src)
    if doc is None:
        return {}
    size = (doc.get("settings") or {}).get("sizes", {}).get("ViT-Tiny size")
    n = next((r["parameters"] for r in doc["rows"] if r.get("size") == "ViT-Tiny size" and r.get("parameters")), None)
    out = {}
    if n:
        out["vit_tiny_parameters"] = Number(f"{n:,}", f"{src} (rows: ViT-Tiny size, parameters)")
        out["vit_tiny_dense_float64"] = Number(f"{n * n * 8 / 1e12:.1f} TB", f"{src} (parameters² × 8 bytes)")
    if size:
        out["vit_tiny_tokens"] = Number(f"{size['L']}", f"{src} (settings: ViT-Tiny size, L)")
    return out


def _headline_numbers(root: Path) -> dict[str, Number]:
    """The headline findings, in plain words, each with its number and arithmetic: the README's first screen and the
    landing's top (``headline_findings``, a Markdown list). From the published rows and results; a finding whose
    source is not published is left out."""
    rows = {r["id"]: r for r in _rows(root)}
    pub = root / "published" / "paper"

    def ratio(rid):
        r = rows.get(rid)
        return None if r is None or r.get("min_ratio") is None else float(r["min_ratio"])

    def value(rid):
        r = rows.get(rid)
        return None if r is None or r.get("value") is None else float(r["value"])

    out, srcs = [], ["published/paper/verify.json"]
    a, rep = ratio("bounds.thm1.printed.admissible"), ratio("bounds.thm1.repaired")
    if a is not None and rep is not None:
        out.append(f"**Theorem 1 fails where every assumption holds**: its bound falls to {a:.2g} of the exact Hessian norm "
                   "at an exact minimiser with exactly uniform attention (float64). It has no row for the Key–Key and "
                   "Value–Key blocks, and its proof bounds the softmax Jacobian by 1/L, true only for uniform attention; "
                   f"with both repaired the bound holds wherever searched (smallest ratio {rep:.3g}).")
    e, fix, const = ratio("bounds.thm6.block.explicit"), ratio("bounds.thm6.block.explicit.repaired"), \
        ratio("bounds.thm6.full.explicit")
    if e is not None and fix is not None and const is not None:
        out.append("**Theorem 6 holds as displayed, but its proof does not prove its explicit constant**: the explicit "
                   f"bound on block (2,1) fails (down to {e:.2g} of the exact norm, float64) and the proof's own estimate "
                   f"of the mirror block repairs it (smallest ratio {fix:.3g}); the explicit whole-Hessian constant holds "
                   f"wherever searched (smallest ratio {const:.3g}) while other steps of its proof fail.")
    l4, l4s = ratio("bounds.lemma4.H.stated"), ratio("bounds.lemma4.H.std")
    if l4 is not None and l4s is not None:
        out.append("**Lemma 4 defines σ_min as a row norm where its proof needs the row standard deviation** (a factor √n): "
                   f"as printed its LayerNorm-Hessian bound falls to {l4:.2g} of the exact norm; as the proof reads it, "
                   f"it holds (smallest ratio {l4s:.3g}).")
    z = value("assumption1.zero")
    if z is not None:
        out.append("**Assumption 1 does not hold literally**: at the trained MNIST model the full-data gradient is "
                   f"{z:.2g} of a typical per-sample gradient, not 0 (float32 training, float64 sums).")
    b, drift = value("fig12_authors_mnist.bf16_over_exact"), value("fig12_authors_mnist.exact_drift")
    if b is not None and drift is not None:
        out.append("**Fig. 12's decline comes from summing in bf16**: on the authors' MNIST model the running sum in their "
                   f"bf16 arithmetic ends at {b:.2f} of the float64 sum of the same gradients, while the float64 norm "
                   f"does not decline ({drift:.2f} of its earlier value).")
    bf, ex = _json(pub / "fig4_authors.json"), _json(pub / "fig4_authors_exact.json")
    if bf is not None and ex is not None:
        g = bf["meta"]["layernorm_gamma"]
        acc = lambda d: d["meta"]["checkpoint"]["test_accuracy"]  # noqa: E731
        out.append(f"**bf16 training freezes LayerNorm's γ at 1.0**: an AdamW step is below half a bf16 ulp under 1.0, so "
                   f"{g['exactly_one']} of {g['total']} γ entries of the authors' MNIST model never move, and it reaches "
                   f"{100 * acc(bf):.0f} % test accuracy in their bf16 arithmetic against {100 * acc(ex):.0f} % in float32.")
        srcs += ["published/paper/fig4_authors.json", "published/paper/fig4_authors_exact.json"]
    if not out:
        return {}
    return {"headline_findings": Number("\n".join(f"- {x}" for x in out), ", ".join(srcs))}


def numbers(root: Path) -> dict[str, Number]:
    """Name -> :class:`Number` of every figure the book, the README and the CLI's notes render (module doc)."""
    root = Path(root)
    return {**_row_numbers(root), **_reproduction_numbers(root), **_bench_numbers(root), **_result_numbers(root),
            **_code_numbers(), **_layer_numbers(root), **_headline_numbers(root)}


def substitutions(root: Path) -> dict[str, str]:
    """Name -> text: the MyST substitutions of the book (and of its plain copies and downloads)."""
    return {k: n.text for k, n in numbers(root).items()}


# ====================================================================== the README's rendered spans
_SPAN = re.compile(r"<!-- n:([\w-]+) -->(.*?)<!-- /n -->", re.S)


def render_readme(root: Path, check: bool = False) -> list[str]:
    """Rewrite every rendered span of ``README.md`` from its source (``check``: only compare); returns the problems
    (a span out of date, with ``check``; a span naming no number)."""
    path = Path(root) / "README.md"
    text = path.read_text()
    values = substitutions(root)
    problems = []

    def span(m: re.Match) -> str:
        name = m.group(1)
        if name not in values:
            problems.append(f"README.md: the span {name!r} names no number of tools/book/numbers.py")
            return m.group(0)
        if m.group(2) != values[name]:
            problems.append(f"README.md: {name} reads {m.group(2)!r}, its source gives {values[name]!r}: run "
                            f"`{README_COMMAND}`")
        return f"<!-- n:{name} -->{values[name]}<!-- /n -->"

    new = _SPAN.sub(span, text)
    if not check:
        if new != text:
            path.write_text(new)
        problems = [p for p in problems if "names no number" in p]
    return problems


# ====================================================================== the check
# The paper's own numbers, each with where the paper prints it (arXiv:2510.16927): what a page quotes of its
# statements. A regular expression of the number in its words -> where it is printed.
PAPER = {
    r"printed 6 and 12": "Theorem 1, the (Q,Q) row of its bound (12/(d_V d_K)) and the bound on the softmax's second "
                         "derivative its proof uses (6; Appendix C.1)",
    r"all\s+25\b": "Theorem 5: its 25 blocks (i, j = 1, …, 5 over W_Q, W_K, W_V, W_1, W_2)",
    r">\s?50\s?%": "§5 (the MNIST and the CIFAR-100 models: 'pretty high accuracy on a validation dataset (>50%)')",
    r"first 1,?000 (?:training )?steps": "Appendix A.1 ('the first 1000 training steps'), the window of Figs. 7–11",
    r"128 examples": "the caption of Fig. 5 ('one batch containing 128 examples')",
}

# Numbers of the authors' experiment code (config.AUTHORS_CODE), each with the file that prints it.
AUTHORS_CODE = {
    r"seeds\s+307, 42 and 21": "code/notebooks/assumption_1.ipynb: Fig. 12 draws the mean and spread of three runs",
}

# Numbers typed in pages whose owners render them later: each phrase -> the name of its :func:`numbers` entry,
# whose text the phrase must hold (so a stale one fails like an unbacked one).
CHECKED_AGAINST = {
    r"[\d,]+ configurations": "encoder_layer_configurations",
    r"has [\d,]+ parameters": "vit_tiny_parameters",
    r"[\d.]+ TB in float64": "vit_tiny_dense_float64",
    r"batch \d+ of \d+ tokens": "vit_tiny_tokens",
}

# The CLI's notes (module attribute paths), read as typed in their module (an f-string's fields are rendered).
CLI_NOTES = ("curvature_gap.checks.QUICK_NOTE", "tools.book.plain.FIRST_CELL")

# the words a setting's number stands beside (rule 4 of the module doc)
SETTING_WORDS = ("seed", "seeds", "step", "steps", "epoch", "epochs", "batch", "batches", "width", "patch",
                 "head", "heads", "block", "blocks", "images", "examples", "samples", "tokens", "snapshots",
                 "layers", "runs", "draws", "passes", "warm-up", "warmup", "rate", "instances", "starts")

_NOT_PROSE = re.compile(
    r"<!-- n:[\w-]+ -->.*?<!-- /n -->"              # the README's rendered spans
    r"|<!--.*?-->"                                  # comments
    r"|^(`{3,}|~{3,}|:{3,}).*?^\1[ \t]*$"           # fenced code and directives' fences (their bodies are kept below)
    r"|`[^`\n]*`"                                   # code spans, roles' targets
    r"|\$\$.*?\$\$|(?<![\\$])\$[^$\n]+?(?<!\\)\$"   # maths
    r"|\\begin\{(\w+\*?)\}.*?\\end\{\2\}"          # amsmath environments
    r"|<[^<>\n]+>"                                  # HTML tags
    r"|\]\([^)\s]*\)|https?://\S+"                  # link targets, URLs
    r"|\{\{[^}]*\}\}"                               # substitutions
    r"|^:[\w-]+:.*$"                                # a directive's options
    r"|\{[\w:-]+\}",                                # a role's or a directive's name
    re.S | re.M)
_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{[\w:-]+\}[^\n]*\n(?P<body>.*?)^\1[ \t]*$", re.S | re.M)
_NUMBER = re.compile(r"(?<![\w.,/\\^_-])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s?%)?")
_REFERENCE = re.compile(
    r"(?:(?:\b(?:Theorems?|Lemmas?|Figures?|Figs?\.|Tables?|Assumptions?|Eqs?\.|Equations?|Sections?|Appendix|"
    r"Appendices|App\.|Corollary|Propositions?|Definitions?|Remarks?|Chapters?)|§)\s*\(?)"
    r"(?:[\dA-Z][\d.]*\)?\s*(?:,|–|-|and|or|to)\s*\(?)*$")
_MONTHS = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"


def _mask(text: str, pattern: re.Pattern) -> str:
    """``text`` with every match of ``pattern`` blanked (newlines kept, so that line numbers stay)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _prose(text: str) -> str:
    """The prose of a Markdown/MyST text, the rest blanked: a directive's body is prose (a theorem's statement, an
    admonition), its fence and options are not."""
    keep = []

    def body(m):
        keep.append((m.start("body"), m.group("body")))
        return m.group(0)

    _DIRECTIVE.sub(body, text)
    masked = _mask(text, _NOT_PROSE)
    for at, b in keep:  # the bodies, masked on their own
        masked = masked[:at] + _prose(b) + masked[at + len(b):]
    return masked


def prose_sources(root: Path) -> list[tuple[str, str]]:
    """(where, text) of every prose the check reads: README.md, book/*.md, each markdown cell of the book's
    notebooks, each CLI note."""
    import importlib  # noqa: PLC0415

    from .build import toc_notebooks  # noqa: PLC0415

    root = Path(root)
    out = [("README.md", (root / "README.md").read_text())]
    out += [(p.relative_to(root).as_posix(), p.read_text()) for p in sorted((root / "book").glob("*.md"))]
    for nb_path in toc_notebooks(root):
        nb = nbformat.read(root / nb_path, as_version=4)
        out += [(f"{nb_path.as_posix()} (cell {i})", c.source) for i, c in enumerate(nb.cells)
                if c.cell_type == "markdown"]
    for dotted in CLI_NOTES:
        module, name = dotted.rsplit(".", 1)
        out += [(dotted, text) for text in _typed_strings(_module_file(module), assigned=name)]
    out += [(f"curvature_gap/cli.py:{line}", text) for line, text in
            _typed_strings(_module_file("curvature_gap.cli"), keywords=("help", "description"), lines=True)]
    return out


def _module_file(module: str) -> Path:
    import importlib.util  # noqa: PLC0415

    return Path(importlib.util.find_spec(module).origin)


def _typed_strings(path: Path, assigned: str | None = None, keywords=(), lines: bool = False) -> list:
    """What is typed of the strings of a module (``path``): the string assigned to the name ``assigned``, or those
    passed as the ``keywords`` arguments of a call; each as its literal text, an f-string's fields blanked (what
    they render comes from a source). With ``lines``: (line, text) pairs."""
    import ast  # noqa: PLC0415

    def literal(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else " " for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = literal(node.left), literal(node.right)
            return None if a is None or b is None else a + b
        return None

    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if assigned and isinstance(node, ast.Assign) and any(isinstance(x, ast.Name) and x.id == assigned
                                                             for x in node.targets):
            text = literal(node.value)
            if text is not None:
                out.append((node.lineno, text))
        if keywords and isinstance(node, ast.Call):
            out += [(k.value.lineno, literal(k.value)) for k in node.keywords
                    if k.arg in keywords and literal(k.value) is not None]
    return out if lines else [text for _, text in out]


def setting_values() -> set[float]:
    """Every number of the configuration: the models, the recipes (Table 1's and the authors', both profiles) and
    the settings of every result, both profiles."""
    from curvature_gap import config  # noqa: PLC0415
    from curvature_gap import experiments  # noqa: PLC0415

    found: set[float] = set()

    def walk(v):
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            found.add(float(v))
        elif dataclasses.is_dataclass(v):
            for f in dataclasses.fields(v):
                walk(getattr(v, f.name))
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple, set)):
            for x in v:
                walk(x)

    walk(config.MODEL_CONFIGS)
    walk(config.AUTHORS_RECIPES)
    for model in config.TRAIN_MODELS:
        for profile in config.PROFILES:
            walk(config.recipe_for(model, profile))
    for s in (*experiments.SPECS.values(), *experiments.INTERNAL.values()):
        walk(s.settings)
    return found


def _value(token: str) -> float | None:
    try:
        return float(token.replace(",", "").rstrip("% "))
    except ValueError:
        return None


def _backed(prose: str, m: re.Match, settings: set[float]) -> bool:
    token, before, after = m.group(0), prose[:m.start()], prose[m.end():]
    near_before, near_after = before[-60:], after[:40]
    if _REFERENCE.search(near_before):                                   # Theorem 6, Figs. 3–5 and 7–11
        return True
    if re.match(r"-[A-Za-z]|\.\d|\.x\b|[A-Za-z_]", after) or re.search(r"[A-Za-z]-$|arXiv:$", before):
        return True                                                      # 8-block, 2.0.1, CIFAR-100, arXiv:2510.16927
    if re.search(r"(?:^|\n)[ \t]*\(?$", before) and re.match(r"[.)]\s", after):                  # list enumerators
        return True
    if re.match(rf"\s{_MONTHS}", after) or re.search(rf"{_MONTHS}\s$", before):                 # dates
        return True
    v = _value(token)
    if v is None:
        return True
    if re.fullmatch(r"(?:19|20)\d\d", token):                                                    # years
        return True
    unit = re.match(r"\s?(?:%|ms\b|s\b|min\b|h\b|minutes?\b|hours?\b|seconds?\b|MB\b|GB\b|TB\b|GiB\b)", after)
    if v == int(v) and 0 <= v <= 10 and "." not in token and not token.endswith("%") and not unit:
        return True                                                      # a count, a constant, a whole factor (4×)
    if v in settings and not unit:
        words = re.findall(r"[\w-]+", near_before)[-4:] + re.findall(r"[\w-]+", near_after)[:3]
        if any(w.lower() in SETTING_WORDS for w in words):
            return True
    return any(q.start() <= m.start() and m.end() <= q.end()
               for p in (*PAPER, *AUTHORS_CODE, *CHECKED_AGAINST) for q in re.finditer(p, prose))


def _checked_against(where: str, text: str, values: dict[str, Number]) -> list[str]:
    """Each phrase of :data:`CHECKED_AGAINST` in ``text``'s prose whose number is not its source's."""
    prose, out = _prose(text), []
    for pattern, name in CHECKED_AGAINST.items():
        for q in re.finditer(pattern, prose):
            want = values[name].text if name in values else None
            if want is None or want not in q.group(0):
                line = prose.count("\n", 0, q.start()) + 1
                out.append(f"{where}:{line}: {q.group(0)!r} — its source ({values[name].source if want else name}) "
                           f"gives {want!r}")
    return out


def prose_numbers(where: str, text: str, settings: set[float]) -> list[str]:
    """``where:line: number — context`` of each number of ``text``'s prose that nothing backs."""
    prose = _prose(text)
    out = []
    for m in _NUMBER.finditer(prose):
        if _backed(prose, m, settings):
            continue
        line = prose.count("\n", 0, m.start()) + 1
        context = re.sub(r"\s+", " ", text.splitlines()[line - 1] if text.splitlines() else "").strip()
        out.append(f"{where}:{line}: {m.group(0).strip()} — {context[:160]}")
    return out


def prose_problems(root: Path) -> list[str]:
    """Every number in prose that no source backs (module doc), with what to do."""
    settings, values = setting_values(), numbers(root)
    sources = prose_sources(root)
    found = [p for where, text in sources for p in prose_numbers(where, text, settings)]
    stale = [p for where, text in sources for p in _checked_against(where, text, values)]
    return ([f"a number in prose that no source backs (render it from its source: tools/book/numbers.py; a number of "
             f"the paper's statements goes into numbers.PAPER with where the paper prints it): {p}" for p in found]
            + [f"a number in prose that its source no longer gives: {p}" for p in stale])
