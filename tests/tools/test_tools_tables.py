"""tools.book.tables: the generated pages, rendered from the rows, the findings and the package's own tables."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from curvature_gap.config import RECIPES
from curvature_gap.faults import FAULTS
from curvature_gap.findings import BEYOND, RESULTS, findings
from curvature_gap.checks.bounds import COUNTEREXAMPLES as CE_DIR
from curvature_gap.captions import code_tex
from curvature_gap.notebook import md_math, verdict_html
from curvature_gap.theory.errata import ERRATA, misprint_counts
from curvature_gap.theory.notation import NOTATION
from tools.book import tables
from tools.book.provenance_tables import UNSTATED
from tools.book.build import fault_tests
from curvature_gap.bounds.titles import INEQUALITIES

ROOT = Path(__file__).resolve().parents[2]
BADGE = re.compile(r'<span class="cg-badge cg-(\w+)" data-result="([^"]*)" data-verdict="([^"]*)">([^<]*)</span>')
MARK = re.compile(r'data-verdict="([^"]*)"')


def _table_rows(md: str) -> list[str]:
    return [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| result |")]


def test_the_landing_table_shows_for_every_result_the_verdict_of_its_page(quick_rows):
    md = tables.landing_md(quick_rows, "paper")
    legend = md[md.index("| colour |"):md.index("| result |")]
    rows = [ln for ln in _table_rows(md) if ln not in legend]
    assert len(rows) == len(RESULTS)
    for (key, title, page, _), line in zip(RESULTS, rows):
        (css, result, marked, verdict), = BADGE.findall(line)
        assert result == key and marked == verdict, "the badge is marked like the verdict line of its page"
        assert verdict == MARK.search(verdict_html(key, "paper", quick_rows)).group(1), key
        assert f"(/{page})" in line, key
        f = next(x for x in findings(quick_rows) if x.key == key)
        assert css == f.css
    assert f"every one of the {len(quick_rows)} checks" in md
    assert md.startswith("- "), "what was found, in a few sentences, comes first"


def test_all_checks_lists_every_row_once(quick_rows):
    md = tables.all_checks_md(quick_rows)
    for r in quick_rows:
        assert md.count(f"| `{r.id}` |") == 1, r.id
    assert md.count("## ") == len({r.result for r in quick_rows})
    assert "## The software itself" in md
    one = tables.all_checks_md([r for r in quick_rows if r.result == "appB"], headings=False)
    assert "## " not in one and "Page:" not in one


def test_errata_page_lists_every_erratum_with_its_evidence_and_every_counterexample(quick_rows):
    md = tables.errata_md(quick_rows)
    assert md.index("## Summary") < md.index("## Misprinted formulas") < md.index("## Inequalities that fail")
    summary = md[md.index("## Summary"):md.index("## Misprinted formulas")]
    for k, e in enumerate(ERRATA, 1):
        # titled in words and named by its number, never by its id (readers read E9); one summary row each
        # symbols of code notation in the titles rendered as math (∂F/∂W_K as $\partial\mathbf F/…$)
        assert f"### E{k}. {md_math(code_tex(e['title']))}\n" in md and e["id"] not in md.replace(f"#{e['id']}", "")
        assert (f"| {{ref}}`E{k} <errata-e{k}>` | {md_math(code_tex(e['title']))} | {md_math(code_tex(e['wrong']))} |"
                in summary)
        assert f'title="check {e["evidence"]}"' in md, "the check in words, its id in a hover"
    failing = [r for r in quick_rows if r.kind == "bound" and r.verdict == "fails" and r.claim is not None]
    assert md.count("### C") == len(failing) and summary.count("| {ref}`C") == len(failing)
    first = md[md.index("### C1."):md.index("### C2.")]
    title, tex = INEQUALITIES["bounds.thm1.printed"]
    # the heading is words, the inequality rendered math, the check id a reference below
    assert first.startswith(f"### C1. {title}\n") and f"$$\n{tex}\n$$" in first
    assert "check <code>bounds.thm1.printed</code>" in first and "### C1. `" not in md
    # the stored counter-examples counted in words, their files in the small reference with the check id
    n_files = sum(1 for p in CE_DIR.glob("*.json") if json.loads(p.read_text())["check"] == "thm1.printed")
    assert n_files >= 4 and f"Counter-examples: {n_files} stored instances" in first
    assert '<p class="cg-ref">check <code>bounds.thm1.printed</code>, ' in first
    assert "<code>curvature_gap/bounds/counterexamples/thm1.printed@minimiser.json</code>" in first
    assert "e-0" not in md and "e+0" not in md, "numbers as a reader writes them (4.9 × 10⁻⁵)"


def test_a_failing_bound_without_words_stops_the_errata_page(quick_rows):
    r = next(r for r in quick_rows if r.kind == "bound" and r.verdict == "fails" and r.claim is not None)
    fake = dataclasses.replace(r, id="bounds.new.unnamed")
    with pytest.raises(KeyError, match=r"bounds\.new\.unnamed.*INEQUALITIES in curvature_gap/bounds/titles\.py"):
        tables.errata_md([*quick_rows, fake])


def test_every_failing_bound_of_the_published_rows_has_its_words_and_math():
    rows = json.loads((ROOT / "published" / "paper" / "verify.json").read_text())["rows"]
    failing = {r["id"] for r in rows if r["kind"] == "bound" and r["verdict"] == "fails" and r.get("claim") is not None}
    assert failing and failing <= set(INEQUALITIES), sorted(failing - set(INEQUALITIES))


def test_an_ill_dimensioned_printed_form_is_never_shown_as_a_small_error(quick_rows):
    """E5's printed form fits only when L = d_V, where it coincides with the correction: the page must say
    it is ill-dimensioned, not show its 1e-16 as if the printed formula were right."""
    md = tables.errata_md(quick_rows)
    row = next(line for line in md.splitlines() if 'title="check thm3.layernorm.d_PkronI_dX"' in line)
    assert "ill-dimensioned" in row.split("|")[4]


def test_package_tables():
    nt = tables.notation_md()
    assert len(_table_rows(nt)) == len(NOTATION) + 1           # + the header's own line
    un = tables.unstated_md()
    assert un.count("\n") == len(UNSTATED) + 2 and "\\|" not in un.splitlines()[0]
    pr = tables.profiles_md()
    assert not any(c.hash() in pr for c in RECIPES.values()), "config hashes are for maintainers"
    assert "mnist smoke" in pr.splitlines()[0]
    assert "| torch |" in tables.versions_md(ROOT)
    assert "device requested for this build" in tables.hardware_md("cpu")
    assert "| `curvature-gap verify --quick` | — |" in tables.runtimes_md({"a.ipynb": 2.0}, "curvature-gap verify --quick")
    rt = tables.runtimes_md({"a.ipynb": 2.0, "b.ipynb": 7.4}, "x")
    assert "| executing the 2 notebooks | 9 (the slowest, `b.ipynb`: 7) |" in rt, "per-page times are for maintainers"
    hw = tables.hardware_md("cpu")
    assert "glibc" not in hw and "operating system" not in hw
    cells = {c.strip() for ln in pr.splitlines()[2:] for c in ln.split("|")[2:]}
    assert not cells & {"None", "True", "False", "0.0"}, "settings in words: none, yes, no, 0"
    assert "nothing was read from `published/`" in tables.published_md(ROOT / "nonexistent", "smoke")


def test_the_readers_table_of_published_results_says_how_long_where_and_what_was_left_out(tmp_path):
    from curvature_gap.experiments import SPECS
    d = tmp_path / "published" / "paper"
    d.mkdir(parents=True)
    (d / "fig3.json").write_text('{"config_hash": "abcdef123456", "created": "2026-11-30T10:00:00", '
                                 '"provenance": {"compute_seconds": 24.4, "device": "cpu", "host": {"cpu": "Xeon"}, '
                                 '"git": {"commit": "ee7ebe927b15f827"}}}')
    md = tables.published_md(tmp_path, "paper")
    assert md.startswith("The results it renders, how long each took")
    assert "\n| result | what | compute (s) | computed on | date |\n" in md
    assert "| `fig3` | Hessian entries at initialisation | 24 | cpu, Xeon | 2026-11-30 |" in md
    (d / "fig4.json").write_text('{"created": "2026-11-30", "provenance": {"compute_seconds": 0.02, "device": "cpu"}}')
    md = tables.published_md(tmp_path, "paper")
    assert "| `fig4` | " in md and "| under 1 † |" in md and "† Under a second: the result only reads" in md
    assert "abcdef123456" not in md and "ee7ebe927b" not in md, "hashes and commits are for maintainers"
    left = [ln for ln in md.splitlines() if "| left out |" in ln]
    assert len(left) == sum("paper" in s.profiles for s in SPECS.values()) - 2  # fig3 and fig4 published
    assert any(ln.startswith("| `fig6` |") and "needs CIFAR-100" in ln for ln in left)


def test_the_cost_table_is_read_from_the_committed_measurements(tmp_path):
    """Reproducibility's "what the CIFAR-100 runs cost": the committed benchmark, the GPU check's step f where one
    ran, and a clear line where neither is there."""
    assert "No full measurement is committed yet" in tables.costs_md(tmp_path)
    (tmp_path / "benchmarks").mkdir()
    doc = json.loads((ROOT / "benchmarks" / "training_cost.json").read_text())
    (tmp_path / "benchmarks" / "training_cost.json").write_text(json.dumps(doc))
    md = tables.costs_md(tmp_path)
    step = next(r["seconds"] for r in doc["rows"] if r["quantity"] == "step" and r["model"] == "authors_cifar100")
    line = next(ln for ln in md.splitlines() if "one run to step 10,000" in ln)
    assert f"| {step:.3g} s |" in line and "| float32 |" in line and " h** |" in line
    assert any("the Table 1 model" in ln for ln in md.splitlines())
    assert "No GPU measurement is committed yet" in md and "make gpu-check" in md
    gpu = dict(mode="full", started="2026-12-03T10:00:00", device=dict(name="NVIDIA H200"),
               rows=[dict(step="f", status="ok", rows=[dict(r, device="cuda") for r in doc["rows"]])])
    (tmp_path / "benchmarks" / "gpu_check.json").write_text(json.dumps(gpu))
    md = tables.costs_md(tmp_path)
    assert "No GPU measurement" not in md and sum("NVIDIA H200, 2026-12-03" in ln for ln in md.splitlines()) == 4


def test_verdict_md_is_the_verdict_element_of_a_markdown_page(quick_rows):
    assert tables.verdict_md(quick_rows, "appB", "smoke") == verdict_html("appB", "smoke", quick_rows) + "\n"


def test_the_fault_table_lists_every_case_with_the_tests_that_prove_it():
    tests = fault_tests(ROOT)
    md = tables.faults_md(tests)
    rows = _table_rows(md)[1:]
    assert len(rows) == len(FAULTS)
    for f, row in zip(FAULTS, rows):
        assert tests.get(f.id), f"{f.id} has no test"
        for t in tests[f.id]:
            assert f"`{t}`" in row
        assert "**no test**" not in row
    assert "**no test**" in tables.faults_md({})


def test_inline_code_of_the_fault_table_stays_code():
    md = tables.faults_md(fault_tests(ROOT))
    assert "| `make clean` |" in md and "\\`" not in md


def test_the_errata_page_states_the_counts_and_the_labelling_rule(quick_rows):
    """The E-list's counts are misprint_counts() (those of the landing and of each result), and the rule that
    tells 'holds as corrected' from 'fails; repaired version holds' is stated once, before the lists."""
    md = tables.errata_md(quick_rows)
    intro, lists = md.split("## Misprinted formulas", 1)
    intro = intro.split("| verdict |", 1)[1].split("\n\n", 1)[1]  # what follows the summary table
    mc = misprint_counts(quick_rows)
    assert intro.startswith(f"The first list has {mc.listed} entries: **{mc.formulas} misprinted formulas** and 1 "
                            f"notational slip ({mc.notation[0]}, whose check has the verdict `notation`)")
    assert f"Lemma 2: {mc.of('lem2').formulas};" in intro and mc.of("lem2").formulas == 2
    assert f"measured on {mc.rows} checks" in intro
    assert "**How a misprinted statement is labelled.**" in intro and "needs a new argument" in intro
    assert "Labelled fails; repaired version holds: Theorem 1" in intro
    assert intro.count("How a misprinted statement is labelled") == 1 and "labelled" not in lists


def test_an_undefined_symbol_is_not_called_ill_dimensioned(quick_rows):
    """E3's printed 1/n has the right shapes; its n is defined nowhere: the page says so."""
    md = tables.errata_md(quick_rows)
    row = next(line for line in md.splitlines() if 'title="check noci.uniform_dA_dT"' in line)
    assert "undefined symbol" in row.split("|")[4] and "ill-dimensioned" not in row


def test_the_c_list_reports_how_a_failure_scales():
    from curvature_gap.row import Row
    from tools.book.tables import errata_md
    from curvature_gap.bounds.sweeps import law_of
    sc = [{"var": "L", **law_of([(4, 0.5), (8, 0.25), (16, 0.125)], "L", +1)}]
    r = Row(id="bounds.thm6.GQ", result="thm6", kind="bound", role="proof", what="w", verdict="fails", claim="holds",
            min_ratio=0.125, details={"scaling": sc})
    md = errata_md([r])
    assert "How it scales under search" in md and "≈ 2/L" in md and "16: 0.125" in md


def test_the_legend_gives_every_verdict_class_one_colour_and_a_meaning():
    from curvature_gap.findings import VERDICT_CLASSES

    classes = [css for css, _, _ in tables.LEGEND]
    assert len(classes) == len(set(classes)) and set(classes) == set(VERDICT_CLASSES.values())
    md = tables.legend_md()
    for css, name, _ in tables.LEGEND:
        assert f'<span class="cg-badge cg-{css}">{name}</span>' in md
    css_text = (ROOT / "book" / "_static" / "custom.css").read_text()
    colours = [re.search(rf"\.cg-badge\.cg-{c} {{ background: (#[0-9a-f]+); }}", css_text) for c in classes]
    assert all(colours) and len({m.group(1) for m in colours}) == len(classes), "one colour per class"


def test_the_authors_code_table_cites_a_file_for_every_value():
    from tools.book.provenance_tables import FROM_AUTHORS_CODE

    md = tables.from_authors_md()
    body = [ln for ln in md.splitlines()[2:] if ln.startswith("| ")]
    assert len(body) == len(FROM_AUTHORS_CODE) and all(u["source"] for u in FROM_AUTHORS_CODE)
    assert md.splitlines()[0] == "| choice | the authors' code | read from (code/…) | this companion | why it differs |"
    assert "{" not in md, "no raw TeX-like braces in a reader's table"


def test_the_landing_s_first_screen_gives_each_claim_its_verdict_badges(quick_rows):
    """The paper's claims with badges (not a paragraph): a tally of every verdict colour, then each claim with the
    verdicts of the results behind it, a figure's per model and dataset, each the verdict its page shows."""
    keys = {k for k, *_ in RESULTS}
    assert {k for _, ks in tables.CLAIMS for k in ks} <= keys, "every claim names results that exist"
    md = tables.claims_md(quick_rows)
    tally = md.splitlines()[0]
    fs = findings(quick_rows)
    counts = [int(n) for n in re.findall(r": (\d+)</span>", tally)]
    own = [f for f in fs if f.key in BEYOND]
    assert sum(counts) == len(fs) and f"{len(fs) - len(own)} results of the paper checked" in tally
    assert not own or "of this companion's own" in tally, "the companion's own results counted apart"
    lines = _table_rows(md)[1:]
    assert len(lines) == len(tables.CLAIMS) + 1 and "not supported" in lines[-1]
    for css, key, marked, verdict in BADGE.findall(md):
        assert marked == verdict == MARK.search(verdict_html(key, "paper", quick_rows)).group(1), key
    fig6 = next(ln for ln in lines if ln.startswith("| [Fig. 6"))
    assert "authors&#x27; model, CIFAR-100" in fig6 and "theorem&#x27;s block, CIFAR-100" in fig6
    fig12 = next(ln for ln in lines if ln.startswith("| [Fig. 12"))
    assert "authors&#x27; model, CIFAR-100" in fig12 and "theorem&#x27;s block, CIFAR-100" in fig12
    closed = lines[0]
    assert "data-result" not in closed and re.search(r"<small>\d+ results?</small>", closed), "counted, not listed"
