"""No number typed by hand (tools.book.numbers): the figures the book, the README and the CLI's notes state are
rendered from their sources, and a number in prose that no source backs fails `make book-check`."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tools.book import numbers

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = numbers.setting_values()


def flagged(text: str) -> list[str]:
    return [p.split(": ", 2)[1].split(" — ")[0] for p in numbers.prose_numbers("x.md", text, SETTINGS)]


def test_no_number_in_the_prose_lacks_a_source():
    """README.md, book/*.md, the notebooks' markdown cells and the CLI's notes (the check `make book-check` runs)."""
    assert numbers.prose_problems(ROOT) == []


def test_the_readme_numbers_are_current():
    assert numbers.render_readme(ROOT, check=True) == []


def test_the_typed_numbers_the_review_found_are_flagged():
    """The stale numbers of the reader's review: a duration, a bound ratio, a step time, an accuracy."""
    assert flagged("`make reproduce` takes 6 min 45 s from scratch.") == ["6", "45"]
    assert flagged("the repaired Theorem 1 reads 12, and a full run takes about 3 minutes") == ["12", "3"]
    assert flagged("a step: 32.7 ms in bf16, 24.7 ms in float32; 56 % against 92 % accuracy") == [
        "32.7", "24.7", "56 %", "92 %"]


def test_references_names_settings_and_the_papers_numbers_are_backed():
    text = ("Theorems 4 and 5, Figs. 3–5 and 7–11, Table 1, §3.2, Appendix C.1, Eq. (7), erratum E9; float32 and\n"
            "CIFAR-100 on an 8-block model, curvlinops 2.0.1 (3.x renamed it) from October 2024, arXiv:2510.16927;\n"
            "1. a list\n(2) a clause with a factor 3 and a 4× larger block;\n"
            "their recipe's seeds 37, 0 and 1, each to step 20,000, batch 128, for 26 epochs;\n"
            "the paper's >50% accuracy over the first 1000 training steps, `12` in code, $10^{-3}$ in maths,\n"
            "<!-- n:x -->75 min<!-- /n --> rendered, {{ y }} substituted.")
    assert flagged(text) == []
    assert 4242.0 not in SETTINGS and flagged("4242 seeds") == ["4242"], \
        "a setting's word beside a number the configuration does not hold"
    assert flagged("step 20,000 took 20,000 s") == ["20,000"], "a duration is never a setting"


def test_a_typed_number_checked_against_its_source_fails_when_stale():
    stale = numbers._checked_against("x.md", "the family's 47 configurations", numbers.numbers(ROOT))
    assert len(stale) == 1 and "'48'" in stale[0] and "47 configurations" in stale[0]
    assert numbers._checked_against("x.md", "all 48 configurations", numbers.numbers(ROOT)) == []


def test_a_number_whose_source_is_missing_says_where_it_will_come_from(tmp_path):
    """The README renders what the reproduction behind the published results measured (published/paper/
    reproduction.json, written by `make publish`); before that file exists it says so."""
    pub = tmp_path / "published" / "paper"
    pub.mkdir(parents=True)
    said = numbers.numbers(tmp_path)["reproduce_summary"].text
    assert said.startswith("is not recorded yet") and "make publish" in said
    (pub / "reproduction.json").write_text(json.dumps({
        "command": "curvature-gap reproduce --profile paper", "seconds": 4542.2,
        "phases": {"training (side by side)": 3300.0, "plotting": 20.0},
        "per_result": {"a": {"status": "ok", "cached": False}, "b": {"status": "ok", "cached": True},
                       "c": {"status": "blocked", "cached": False}},
        "host": {"cpu": "AMD EPYC", "cpus": 2}, "load_average": {"start": 4.21, "end": 5.6}}))
    assert numbers.numbers(tmp_path)["reproduce_summary"].text == (
        "took 1 h 16 min (`curvature-gap reproduce --profile paper`: 2 of 3 results, 1 of them read from the "
        "cache; 55 min of it training) on a 2-core AMD EPYC, load average 4.2 at the start and 5.6 at the end")


def test_the_readme_spans_are_rewritten_and_a_stale_one_is_a_problem(tmp_path):
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("*.py", "*.md"))
    (tmp_path / "README.md").write_text("Steps: <!-- n:step_times -->1 ms<!-- /n -->; <!-- n:nope -->?<!-- /n -->.\n")
    problems = numbers.render_readme(tmp_path, check=True)
    assert any("step_times reads '1 ms'" in p and numbers.README_COMMAND in p for p in problems)
    assert any("'nope' names no number" in p for p in problems)
    numbers.render_readme(tmp_path)
    assert numbers.numbers(tmp_path)["step_times"].text in (tmp_path / "README.md").read_text()
    assert [p for p in numbers.render_readme(tmp_path, check=True) if "step_times" in p] == []


def test_the_step_times_are_the_trained_arithmetics_of_the_benchmark(tmp_path):
    """benchmarks/bf16_cpu.json's step rows of the arithmetics `curvature-gap train` runs, by variant (its
    comparisons left to benchmarks/RESULTS.md); a run of the authors' recipe priced at the package's bf16 step."""
    from curvature_gap.experiments.heatmaps import AUTHORS_TRAINED

    (tmp_path / "benchmarks").mkdir()
    path = tmp_path / "benchmarks" / "bf16_cpu.json"
    said = numbers.numbers(tmp_path)
    assert said["authors_run_estimate"].text.startswith("not measured yet"), "the substitution is always defined"
    rows = [dict(what="step", variant="float32", seconds=0.0155), dict(what="step", variant="bf16", seconds=0.03),
            dict(what="step", variant="bf16_previous", seconds=0.0228), dict(what="fig12_pass", variant="exact", seconds=1.0)]
    path.write_text(json.dumps({"rows": rows, "machine": {"cpu": "AMD EPYC", "cpus": 2}, "load_average": [1.0, 2.0]}))
    said = numbers.numbers(tmp_path)
    assert said["step_times"].text == "15.5 ms (float32), 30.0 ms (bf16, CUDA's autocast emulated)"
    n = AUTHORS_TRAINED["paper"].step
    assert said["authors_run_estimate"].text == f"{round(n * 0.03 / 60)} minutes"
    assert numbers.numbers(ROOT)["authors_run_estimate"].text.endswith(" minutes"), "the committed benchmark prices it"


@pytest.mark.parametrize("name", sorted(numbers.numbers(ROOT)))
def test_every_rendered_number_names_its_source(name):
    n = numbers.numbers(ROOT)[name]
    assert n.text and n.source


def test_the_cli_text_is_read_as_typed(tmp_path):
    """The CLI's help and notes are read from their source: a number typed in a string is flagged, one an f-string
    renders from a constant is not."""
    src = tmp_path / "m.py"
    src.write_text('NOTE = ("a full run takes about " "3 minutes")\nLIMIT = 30\n'
                   'p.add_argument("--x", help=f"runs over {LIMIT} minutes, or over 45 minutes")\n')
    note, = numbers._typed_strings(src, assigned="NOTE")
    (line, help_), = numbers._typed_strings(src, keywords=("help",), lines=True)
    assert line == 3 and flagged(note) == ["3"] and flagged(help_) == ["45"]
