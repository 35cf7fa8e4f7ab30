"""curvature_gap.notebook: the helpers the notebooks call (parameters, results, verdicts, tables)."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from curvature_gap import experiments
from curvature_gap import notebook as nb
from curvature_gap.captions import code_tex, readable
from curvature_gap.row import Row
from curvature_gap.config import ConfigError
from curvature_gap.experiments.store import PublishedStore
from curvature_gap.findings import RESULTS, finding_of

EXPERIMENTS = [k for k, _, _, kind in RESULTS if kind == "experiment"]


def test_check_parameters():
    nb.check_parameters(dict(profile="paper", device="auto", seed=7, L=3, d_V=8, N=64, shape=None))
    nb.check_parameters(dict(profile="smoke", device="cuda", seed=0, shape=[12, 6, 4, 16]))
    with pytest.raises(ConfigError, match=r"notebook parameter L=2\.5 \(float\) is invalid: it must be a positive integer"):
        nb.check_parameters(dict(profile="smoke", L=2.5))


def test_setup_checks_first_then_works_from_the_checkout_root(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    (root / "src" / "curvature_gap").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root / "notebooks")
    # set, then delete: monkeypatch then restores the variable's absence too, so the value nb.setup
    # writes does not leak into later tests of this process (test_offline reads it)
    monkeypatch.setenv("CURVATURE_GAP_DATA", "unset")
    monkeypatch.delenv("CURVATURE_GAP_DATA")
    with pytest.raises(ConfigError):
        nb.setup(profile="huge")
    assert os.getcwd() == str(root / "notebooks"), "nothing happens before the parameters are checked"
    assert nb.setup(profile="smoke", device="cpu", seed=0) == root and os.getcwd() == str(root)
    assert os.environ["CURVATURE_GAP_DATA"] == str(root / "data")


def test_verdict_text_and_html_on_the_quick_rows(quick_rows):
    for key in EXPERIMENTS:
        text = nb.verdict_text(key, "smoke", quick_rows)
        assert "smoke profile" in text and "states no verdict" in text and "Verdict" not in text, key
        h = nb.verdict_html(key, "smoke", quick_rows)
        assert 'class="cg-smoke-note"' in h and f'data-result="{key}"' in h and 'data-verdict=""' in h
    t1 = finding_of("thm1", quick_rows)
    assert nb.verdict_text("thm1", "smoke", quick_rows) == f"**Verdict: {t1.verdict}.** {nb.sentence(t1.evidence)}"
    # a reader's sentence: a capital after the full stop, numbers as written, one minus sign
    assert nb.sentence("the gradient is 1.4e+05× larger, slope -0.004, x=3.1622776601683795, 0e+00") == (
        "The gradient is 1.4 × 10⁵ times larger, slope −0.004, x=3.162, 0")
    assert nb.sentence("$x$ is small") == "$x$ is small" and nb.sentence("k = 3") == "k = 3"
    h = nb.verdict_html("thm1", "paper", quick_rows)
    assert h.startswith('<div class="cg-verdict cg-repaired" data-result="thm1" data-verdict="fails; repaired version holds">')
    assert "<strong>Verdict: fails; repaired version holds.</strong>" in h and "**" not in h
    for key in ("fig6", "fig6_authors"):  # CIFAR-100 on either model
        assert 'data-verdict="not run at paper scale"' in nb.verdict_html(key, "paper", quick_rows)
    # every experiment's verdict names its model, dataset and arithmetic (the theorem's block's float32 too)
    # and a statement's names none;: the label "the theorem's block" is the MNIST model on Fig. 3's and Fig. 12's pages,
    # the CIFAR-100 one on Fig. 6's
    for fig, authors, block in (("fig3", "MNIST, at initialisation", "MNIST, at initialisation"),
                                ("fig4", "MNIST, bf16 runs", "MNIST, float32 runs"),
                                ("fig6", "CIFAR-100, bf16 runs", "CIFAR-100, float32 runs"),
                                ("fig12", "CIFAR-100, bf16 runs", "CIFAR-100, float32 runs")):
        assert (f"</strong> <em>On the authors' model ({authors}).</em>"
                in nb.verdict_html(f"{fig}_authors", "paper", quick_rows))
        assert (f"</strong> <em>On the theorem's block (the Table 1 model, {block}).</em>"
                in nb.verdict_html(fig, "paper", quick_rows))
    assert "<em>On the" not in h and "<em>On the" not in nb.verdict_html("thm7", "paper", quick_rows)
    # long evidence is folded after its first clause (split outside brackets), nothing lost
    assert '<details class="cg-more">' in h and h.count("found over the same instances") == 1
    assert nb._first_clause("a (b; c); d; e") == ("a (b; c)", "d; e") and nb._first_clause("a") == ("a", "")


def test_the_two_models_verdicts_are_compared_only_where_both_ran():
    def claim(result, verdict):
        return Row(id=f"{result}.c", result=result, kind="claim", claim="reproduced", verdict=verdict, what="w",
                   profile="paper", note="n")

    same = [claim("fig5_authors", "not reproduced"), claim("fig5", "not reproduced")]
    assert nb.agreement_text("fig5", "paper", rs=same) == "**The two models agree:** the claim is not reproduced on both."
    assert nb.agreement_text("fig5", "smoke", rs=same) == ""
    differ = [claim("fig3_authors", "not reproduced"), claim("fig3", "partly reproduced")]
    text = nb.agreement_text("fig3", "paper", why="W_O.", rs=differ)
    assert text == ("**The two models disagree:** the claim is not reproduced on the authors' model and partly "
                    "reproduced on the theorem's block. W_O.")
    missing = [claim("fig6", "reproduced"), Row(id="fig6_authors.c", result="fig6_authors", kind="claim",
                                                 claim="reproduced", verdict="not run", what="w", profile="paper")]
    assert nb.agreement_text("fig6", "paper", rs=missing) == ""


def test_the_second_reading_is_shown_beside_the_claim_per_model_and_never_on_the_smoke_profile():
    def detail(rid, verdict):
        return Row(id=rid, result=rid.split(".")[0], kind="claim", role="detail", claim=None, verdict=verdict,
                   what="w", profile="paper", note="n")

    rs = [detail("fig3_authors.values_largest", "partly reproduced"), detail("fig3.values_largest", "not run")]
    ids = ["fig3_authors.values_largest", "fig3.values_largest"]
    assert nb.second_reading_text(ids, "paper", rs) == (
        "*A second reading, the superlative ('the largest' of every block), which is not the caption's: partly "
        "reproduced on the authors' model.*")
    rs[1] = detail("fig3.values_largest", "not reproduced")
    assert nb.second_reading_text(ids, "paper", rs).endswith("partly reproduced on the authors' model; not reproduced "
                                                             "on the theorem's block.*")
    assert nb.second_reading_text(ids, "smoke", rs) == "" and nb.second_reading_text(ids, "paper", []) == ""


def test_the_figure_tables_read_the_rows_reading(monkeypatch):
    """Fig. 3's comparative table and Fig. 5's readings, from a result's numbers."""
    from types import SimpleNamespace

    from curvature_gap.experiments.hessians import STATISTICS

    shown = []
    monkeypatch.setattr(nb, "show_markdown", shown.append)
    stats = {u: {st: v for st in STATISTICS} for u, v in (("W_Q", 1.0), ("W_K", 2.0), ("W_V", 3.0))}
    seeds = [dict(seed=37, v_over_qk={st: 1.5 for st in STATISTICS}),
             dict(seed=0, v_over_qk={st: 0.5 for st in STATISTICS})]
    nb.show_values_larger(SimpleNamespace(meta={"unit_stats": stats, "seed_leads": seeds}))
    out = "".join(shown)
    assert out.count("| 1.5 | yes |") == len(STATISTICS) and "| 37 | 7/7 | 1.5–1.5 |" in out and "| 0 | 0/7 |" in out
    weights = ("W_Q", "W_K", "W_V", "W_1", "W_2")
    norms_ = {u: {"fro": 1.0 + (u in ("W_K", "W_V")), "rms": 1.0} for u in weights}
    hs = {u: {st: 1.0 for st in STATISTICS} for u in weights}
    meta = {"param_norms": {"init": norms_, "trained": norms_}, "hessian_stats": {"init": hs, "trained": hs}}
    shown.clear()
    nb.show_kv_readings(SimpleNamespace(meta=meta, config={"profile": "paper"}, json_path="f.json"), "fig5")
    out = "".join(shown)
    assert out.count("| parameter norms |") == 4 and out.count("| Hessian-block norms |") == 8
    assert "| initialised parameters, Frobenius norm | WK \\> WV \\> WQ \\> W1 \\> W2 | 0.50 | yes |" in out


def test_rows_from_the_pinned_json_match_whole_id_components(tmp_path, monkeypatch):
    def row(rid):
        return Row(id=rid, result="thm3", kind="formula", what="w", verdict="verified", rel_err=0.0).to_json()

    rows = [row("thm3.layernorm.dD_dX"), row("thm3.layernorm.hessian"), row("thm30.x"), row("thm2.a")]
    (tmp_path / "v.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    monkeypatch.setenv(nb.VERIFY_ENV, str(tmp_path / "v.json"))
    assert [r.id for r in nb.rows("thm3")] == ["thm3.layernorm.dD_dX", "thm3.layernorm.hessian"]
    assert [r.id for r in nb.rows(["thm3.layernorm.hessian", "thm2"])] == ["thm3.layernorm.hessian", "thm2.a"]
    assert nb.rows("thm") == [] and len(nb.rows()) == 4
    (tmp_path / "v.json").write_text(json.dumps(rows))          # the plain list of `verify --json`
    assert len(nb.rows()) == 4


def test_markdown_helpers_escape_math_bars_and_html():
    cell = nb.md_escape("dD/dX | with a bar, $x$ and <b>_a_</b>\nnext")
    assert cell == "dD/dX \\| with a bar, \\$x\\$ and \\<b\\>\\_a\\_\\</b\\> next"
    t = nb.md_table(["a", "b"], [[cell, "2"]])
    assert t.splitlines()[1] == "|---|---|" and t.splitlines()[2].count(" | ") == 1
    assert nb.text_html("I_{d_V} ⊗ W<K>") == '<span class="cg-text">I<sub>d<sub>V</sub></sub> ⊗ W&lt;K&gt;</span>'


def test_code_notation_reads_with_sub_and_superscripts_and_names_stay_names():
    """Where a reader reads a check's description (issue 34, item 3): no ASCII ``W_V`` or ``L_(k+1)``, and
    nothing Markdown would read as emphasis, a cell border or math."""
    c = nb.code_html
    assert c("|L_(k+1) − L_k|") == "&#124;L<sub>k+1</sub> − L<sub>k</sub>&#124;"
    assert c("∂B_1/∂W_2 = ξ_21, W_V^T, A^{∘2}, s^2.2") == ("∂B<sub>1</sub>/∂W<sub>2</sub> = ξ<sub>21</sub>, "
                                                          "W<sub>V</sub>ᵀ, A<sup>∘2</sup>, s<sup>2.2</sup>")
    assert c("d²N/dW_1dW_2 and vec_r X") == "d²N/dW<sub>1</sub>dW<sub>2</sub> and vec<sub>r</sub> X"
    assert c("(I_L⊗W_2^T)D_σ") == "(I<sub>L</sub>⊗W<sub>2</sub>ᵀ)D<sub>σ</sub>"
    assert c("w2_scale, no_loss_factor, *a* $x$ [b]") == ("w2&#95;scale, no&#95;loss&#95;factor, &#42;a&#42; &#36;x&#36; "
                                                          "&#91;b&#93;")


def test_prose_numbers_are_formatted_outside_code_math_and_tags():
    assert readable("k = 1.06e+05. Then 2.5e-3.5") == "k = 1.06 × 10⁵. Then 2.5e-3.5"
    md = nb.readable_md("off by 1.9e-02 (`eps=1e-12`, $10^{-3}$) <span title=\"1e-5\">-0.977</span> and -3e-07\n"
                        "```\nx = 1e-5\n```")
    assert md == ("off by 1.9 × 10⁻² (`eps=1e-12`, $10^{-3}$) <span title=\"1e-5\">−0.977</span> and −3 × 10⁻⁷\n"
                  "```\nx = 1e-5\n```")


def test_a_rows_note_names_its_worst_instance_in_words_and_ids_only_small():
    note = ("Theorem 1 (§3.1); 8/32 instances fail; worst at sweep=replay, x=thm1.printed@uniform, seed=1, sub=KK; "
            "slope -0.13 | see thm5.xi.21 and bounds.sa.dA_dT; I_{d_V}")
    got = nb.note_html(note, ["thm5.xi.21", "bounds.sa.dA_dT"])
    assert "worst in the stored counter-examples at " in got and "(seed 1, block (K,K))" in got
    for name in ("thm1.printed@uniform", "thm5.xi.21", "bounds.sa.dA_dT"):
        assert f'<small class="cg-id"><code>{name}</code></small>' in got
    assert "slope −0.13; see" in got and "I<sub>d<sub>V</sub></sub>" in got and "sweep=" not in got
    sigma = nb.note_html("worst at sweep=sigma, x=3.1622776601683795, seed=0; ok", [])
    assert sigma == '<span class="cg-text">worst in the sigma sweep at x = 3.162 (seed 0); ok</span>'


def test_symbols_of_code_notation_become_math_in_titles():
    assert code_tex("the commutation matrix in ∂F/∂W_K") == r"the commutation matrix in $\partial\mathbf F/\partial\mathbf W_{K}$"
    assert code_tex("the bound on Φ_QK, size d_V, $x_1$") == r"the bound on $\boldsymbol\Phi_{QK}$, size $d_{V}$, $x_1$"
    assert code_tex("w2_scale and sa_ln") == "w2_scale and sa_ln"


# ---------------------------------------------------------------------------------------------- load
@pytest.fixture
def standin(tmp_path, monkeypatch):
    """A checkout in tmp_path with a cheap registered result ``a`` (computes and counts)."""
    calls = []

    def compute(job):
        calls.append(job.config_hash)
        return {"x": np.arange(3.0)}, {"profile": job.ctx.profile}

    (a,) = experiments.FigureSpec("a", "check", "test_a", "stand-in", (experiments.Point(experiments.spec("fig12").settings),),
                                  compute, key_numbers=lambda r: {}).results
    monkeypatch.setitem(experiments.SPECS, "a", a)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "src" / "curvature_gap").mkdir(parents=True)
    (tmp_path / "published" / "smoke").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(nb.NO_COMPUTE_ENV, raising=False)
    return calls


@pytest.mark.fault("stale-published")
def test_the_paper_book_never_computes_and_refuses_a_stale_published_result(tmp_path, monkeypatch, standin):
    r = nb.load("a", "smoke", "cpu")                             # outside the book: computed and cached
    assert len(standin) == 1 and (tmp_path / r.json_path).is_file() and r.json_path.parts[0] == "results"
    store = PublishedStore(tmp_path / "published" / "smoke")
    stale = dataclasses.replace(r, config=dict(r.config, code="0000000000000000"), config_hash="000000000000")
    store.publish(stale)
    (tmp_path / "results").rename(tmp_path / "old-results")      # a fresh checkout: only published/ is there
    monkeypatch.setenv(nb.NO_COMPUTE_ENV, "1")
    with pytest.raises(nb.StaleResults) as err:
        nb.load("a", "smoke", "cpu")
    msg = str(err.value)
    assert "the published result of a cannot be used" in msg and "another configuration" in msg
    assert "code: '0000000000000000' ->" in msg and "make publish" in msg
    assert len(standin) == 1, "nothing was computed"
    assert nb.find("a") is None
    store.publish(r)                                             # published by the current code: used as it is
    got = nb.load("a", "smoke", "cpu")
    assert got.json_path == tmp_path / "published" / "smoke" / "a.json" and len(standin) == 1
    assert nb.find("a").config_hash == r.config_hash


def test_load_with_another_seed_trains_under_another_configuration(standin):
    a = nb.load("a", "smoke", "cpu")
    b = nb.load("a", "smoke", "cpu", seed=3)
    assert a.config_hash != b.config_hash and b.config["train"]["mnist"]["seed"] == 3 and len(standin) == 2
    assert nb.load("a", "smoke", "cpu", seed=0).config_hash == a.config_hash   # the profile's own seed


# ---------------------------------------------------------------------------------------------- recompute
def test_outside_the_build_a_page_reads_the_committed_rows_unless_told_to_recompute(tmp_path, monkeypatch):
    """A download shows its page's numbers: by default the committed rows (never a --quick run, whose searches
    find hundreds where the page says 12); ``recompute`` computes them, "quick" or with every search."""
    monkeypatch.delenv(nb.VERIFY_ENV, raising=False)
    monkeypatch.chdir(os.getcwd())  # setup works from the checkout's root
    monkeypatch.setattr(nb, "_ROWS", {})
    committed = [Row(id="thm1.a", result="thm1", kind="bound", what="w", verdict="fails", min_ratio=12.0)]
    seen = []
    monkeypatch.setattr(nb.checks, "published_rows", lambda path: seen.append(Path(path)) or committed)
    monkeypatch.setattr(nb.checks, "run_cached", lambda quick: [Row(id="thm1.a", result="thm1", kind="bound",
                                                                   what="w", verdict="fails",
                                                                   min_ratio=405.0 if quick else 12.5)])
    recompute = None  # the parameters cell's name, read by nb.setup from its caller, as the notebooks call it
    nb.setup(profile="paper", device="cpu")
    assert [r.min_ratio for r in nb.rows()] == [12.0] and seen[0].parts[-3:] == ("published", "paper", "verify.json")
    for mode, want in (("quick", 405.0), ("full", 12.5)):
        recompute = mode  # noqa: F841 - read from this frame by nb.setup
        nb.setup(profile="paper", device="cpu")
        assert [r.min_ratio for r in nb.rows()] == [want]
    with pytest.raises(ConfigError, match=r"recompute='fast'.*\"quick\" or \"full\""):
        nb.setup(profile="paper", device="cpu", recompute="fast")
    nb.setup(profile="paper", device="cpu", recompute=None)


def test_stale_committed_rows_stop_a_page_with_what_to_do(monkeypatch):
    monkeypatch.delenv(nb.VERIFY_ENV, raising=False)
    monkeypatch.chdir(os.getcwd())
    monkeypatch.setattr(nb, "_ROWS", {})

    def stale(path):
        raise nb.UnusableResult(f"{path} was computed by other code")

    monkeypatch.setattr(nb.checks, "published_rows", stale)
    nb.setup(profile="paper", device="cpu", recompute=None)
    with pytest.raises(nb.StaleResults, match=r'other code: the committed rows are stale.*recompute = "quick"'):
        nb.rows()


def test_a_figures_message_and_caption_write_numbers_as_a_reader_does():
    from curvature_gap.plotting import new_figure
    fig = new_figure(3.0, 2.0)
    fig.add_subplot().plot([0, 1], [0, 1])
    out = nb.figure_html(fig, "f", "Errors down to 7e-16, $10^{-3}$ marked.", "a line", "Off by up to 3e-02 of it.",
                         linked=False)
    assert "Off by up to 3 × 10⁻² of it." in out and "down to 7 × 10⁻¹⁶," in out and "e-0" not in out.split("<img")[0]
