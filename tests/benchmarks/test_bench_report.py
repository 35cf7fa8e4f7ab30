"""benchmarks/report.py: RESULTS.md's generated blocks agree with the committed JSON, and ``--check``
fails when a table or a document is changed without the other."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "RESULTS.md"


def _report(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(BENCH / "report.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _json_copy(tmp_path: Path) -> Path:
    d = tmp_path / "json"
    d.mkdir()
    for p in BENCH.glob("*.json"):
        shutil.copy(p, d / p.name)
    return d


def test_committed_results_agree_with_the_committed_json():
    proc = _report("--check")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_every_committed_document_is_complete(report):
    names = [n for n, _ in report.BENCHMARKS]
    for p in BENCH.glob("*.json"):
        assert p.stem in names, f"{p.name} belongs to no benchmark of report.py"
        report.validate(json.loads(p.read_text()), p.stem)


@pytest.mark.slow
def test_a_tampered_table_is_detected_and_regenerated(tmp_path):
    text = RESULTS.read_text()
    blocks = re.findall(r"<!-- begin: (\w+) -->.*?<!-- end: \1 -->", text, flags=re.S)
    assert blocks, "RESULTS.md has no generated block"
    m = re.search(r"<!-- begin: \w+ -->.*?\n(\|[^\n]*\d[^\n]*\|)\n", text, flags=re.S)
    assert m, "no table row with a number inside a generated block"
    row = m.group(1)
    digit = re.search(r"\d", row.split("|", 2)[2])  # a digit after the first column
    cut = len(row.split("|", 2)[0]) + len(row.split("|", 2)[1]) + 2 + digit.start()
    tampered_row = row[:cut] + str((int(row[cut]) + 1) % 10) + row[cut + 1:]
    copy = tmp_path / "RESULTS.md"
    copy.write_text(text.replace(row, tampered_row, 1))
    proc = _report("--check", "--results", copy)
    assert proc.returncode == 1
    assert "-" + tampered_row in proc.stdout and "+" + row in proc.stdout
    assert "disagrees with the JSON" in proc.stderr
    assert _report("--results", copy).returncode == 0  # the generator puts it right
    assert copy.read_text() == text


def test_a_changed_document_is_detected(tmp_path):
    jd = _json_copy(tmp_path)
    path = next(p for p in sorted(jd.glob("*.json")))
    doc = json.loads(path.read_text())
    row = doc["rows"][0]
    key = next(k for k, v in row.items() if isinstance(v, float))
    row[key] *= 1.5
    path.write_text(json.dumps(doc))
    copy = tmp_path / "RESULTS.md"
    shutil.copy(RESULTS, copy)
    assert _report("--check", "--results", copy, "--json-dir", jd).returncode == 1
    again = tmp_path / "again"
    again.mkdir()
    assert _report("--check", "--results", copy, "--json-dir", _json_copy(again)).returncode == 0  # unchanged copy


def test_a_removed_document_is_detected(tmp_path):
    jd = _json_copy(tmp_path)
    victim = sorted(jd.glob("*.json"))[0]
    victim.unlink()
    copy = tmp_path / "RESULTS.md"
    shutil.copy(RESULTS, copy)
    proc = _report("--check", "--results", copy, "--json-dir", jd)
    assert proc.returncode == 1 and f"`benchmarks/{victim.name}` is not committed" in proc.stdout


def test_hand_written_text_outside_the_markers_is_kept(tmp_path, report):
    copy = tmp_path / "RESULTS.md"
    edited = RESULTS.read_text().replace("# Benchmark results\n", "# Benchmark results\n\nA note by hand.\n", 1)
    copy.write_text(edited)
    assert _report("--check", "--results", copy).returncode == 0
    assert report.generate(edited, BENCH) == edited


@pytest.mark.parametrize("bad", [
    "x\n<!-- begin: floor -->\nno end\n",
    "x\n<!-- end: floor -->\n<!-- begin: floor -->\n",
    "<!-- begin: floor -->\na\n<!-- end: floor -->\n<!-- begin: floor -->\nb\n<!-- end: floor -->\n",
    "<!-- begin: no_such_benchmark -->\n<!-- end: no_such_benchmark -->\n",
])
def test_damaged_or_unknown_markers_are_refused(report, bad, tmp_path):
    with pytest.raises(ValueError, match="RESULTS.md"):
        report.generate(bad, tmp_path)


def test_missing_blocks_are_appended_once(report, tmp_path):
    text = report.generate("# Benchmark results\n", tmp_path)  # no JSON at all
    for name, title in report.BENCHMARKS:
        assert text.count(report.begin_mark(name)) == text.count(report.end_mark(name)) == 1
        assert f"## {title}\n" in text and f"`benchmarks/{name}.json` is not committed" in text
    assert report.generate(text, tmp_path) == text


def _doc(**over):
    doc = dict(benchmark="floor", mode="full", command="python benchmarks/floor.py",
               machine=dict(cpu="Some CPU", virtual=True, cpus=2, memory_gib=23.5, gpu=None),
               load_average=[0.5, 3.25], threads=2, software=dict(python="3.11.7", torch="2.14.1"),
               git=dict(commit="0123456789abcdef0123456789abcdef01234567", dirty=False),
               started="2026-12-01T10:00:00+00:00", wall_s=90.0,
               settings=dict(batch=4, parameters=100, dtype="float32", model="m", data="first 4 images"),
               rows=[dict(quantity="forward_backward", seconds=0.01, runs=5),
                     dict(quantity="curvlinops_hvp", seconds=0.05, runs=3),
                     dict(quantity="ours_dense", seconds=0.5, runs=1)])
    doc.update(over)
    return doc


@pytest.mark.parametrize("change, message", [
    (dict(rows=[]), "no rows"), (dict(benchmark="hessian"), "of benchmark 'hessian'"),
    (dict(mode="fast"), "neither 'full' nor 'quick'"), (dict(load_average=1.0), r"\[start, end\]"),
])
def test_incomplete_documents_are_refused(report, change, message):
    with pytest.raises(ValueError, match=message):
        report.validate(_doc(**change), "floor")
    doc = _doc()
    del doc["git"]
    with pytest.raises(ValueError, match="lacks git"):
        report.validate(doc, "floor")


def test_the_block_states_mode_machine_load_threads_and_commit(report):
    block = report.render_block("floor", report.validate(_doc(), "floor"))
    assert "Full run 2026-12-01 10:00:00+00:00, 90.0 s: `python benchmarks/floor.py`, commit `0123456789`." in block
    assert ", 5.0 min: `python" in report.render_block("floor", _doc(wall_s=300.0))
    assert "Some CPU (virtual machine), 2 CPU(s), 24 GiB" in block and "2 torch thread(s)" in block
    assert "load average 0.50 at the start and 3.25 at the end (above the 2 CPUs" in block
    assert "| the floor, P · t_fb = 100 × t_fb | 1.0 |" in block  # derived from the rows: 100 × 0.01 s
    assert "**0.5 = 0.50 × floor**" in block
    quick = report.render_block("floor", _doc(mode="quick", git=dict(commit="f" * 40, dirty=True)))
    assert "**Quick mode**" in quick and "with uncommitted changes" in quick


def test_gpu_check_table(report):
    steps = [
        dict(step="a", title="a. device tests on CUDA", status="ok", wall_s=40.0, passed=4, failed=0, errors=0,
             pytest_seconds=20.5),
        dict(step="b", title="b. MNIST paper training", status="skipped: MNIST not in data", wall_s=0.1),
        dict(step="c", title="c. Fig. 3 Hessian, GPU vs CPU", status="ok", wall_s=60.0,
             data="first 128 MNIST training images", parameters=4186,
             float32=dict(status="ok", batch=128, gpu_s=1.5, cpu_s=30.0, max_rel_diff=3.2e-7),
             float64=dict(status="skipped (budget)", batch=16)),
        dict(step="d", title="d. CIFAR-100 8-block training", status="ok", wall_s=50.0, images_per_s=12345.6,
             steps_per_s=48.2, max_memory_allocated_gib=1.25, full_run_estimate=dict(total_steps=39200, hours=0.226)),
        dict(step="e", title="e. block spectra, 8-block model", status="skipped (budget)", wall_s=0.0),
    ]
    doc = _doc(benchmark="gpu_check", command="python benchmarks/gpu_check.py --data-dir data", rows=steps,
               budget_s=540.0, device=dict(name="NVIDIA H200", capability="9.0", memory_gib=139.8, cuda="13.0",
                                           cudnn=91000))
    block = report.render_block("gpu_check", report.validate(doc, "gpu_check"))
    assert "`python benchmarks/gpu_check.py --data-dir data`" in block and "NVIDIA H200" in block
    table = [ln for ln in block.splitlines() if ln.startswith("|")]
    assert all(ln.count("|") == 6 for ln in table), table  # 5 columns everywhere
    assert "4 / 0 / 0" in block and "3.20e-07" in block and "skipped: MNIST not in data" in block
    assert "| e. block spectra, 8-block model | skipped (budget) |" in block
    assert "float64 | skipped (budget)" in block


def _cost_rows(device="cpu", bf16=None):
    common = dict(model="authors_cifar100", title="the authors' 8-block CIFAR-100 model", parameters=1_600_228,
                  batch_size=128, device=device)
    rows = [dict(common, quantity="step", precision="float32", seconds=0.5, steps=40, warmup=5, images_per_s=256.0)]
    if bf16 is not None:
        rows.append(dict(common, quantity="step", precision="bf16", seconds=bf16, steps=40, warmup=5,
                         images_per_s=128 / bf16))
    rows += [dict(common, quantity="evaluation", precision="float32", seconds=20.0, images=10_000),
             dict(common, quantity="epoch", precision="float32", seconds=210.0, steps=391, images=50_000,
                  test_images=10_000),
             dict(common, quantity="fig6_pass", precision="float32", seconds=0.2, batches=20),
             dict(common, quantity="fig12_pass", precision="float32", seconds=0.6, batches=20),
             dict(common, model="cifar100", title="the 8-block CIFAR-100 model of Table 1", parameters=1_478_372,
                  batch_size=256, quantity="step", precision="float32", seconds=1.0, steps=40, warmup=5,
                  images_per_s=256.0),
             dict(common, model="cifar100", title="the 8-block CIFAR-100 model of Table 1", parameters=1_478_372,
                  batch_size=256, quantity="evaluation", precision="float32", seconds=10.0, images=10_000)]
    return rows


def test_training_costs_are_derived_from_the_measured_rows(report):
    costs = {(w.split(":")[0].split(" (")[0], p): t for _, w, p, t in report.training_costs(_cost_rows(bf16=0.1))}
    # to step 10,000: 10,000 steps and 25 whole-epoch evaluations; the figures: two such runs and two passes of
    # 26 epochs of 391 batches; the recipe: 100 epochs with one evaluation each; Table 1: 200 epochs of 196 steps
    assert costs[("the authors' model", "float32")] == pytest.approx(100 * (391 * 0.5 + 20))  # the last of the two
    run = [t for _, w, p, t in report.training_costs(_cost_rows()) if "one run to step 10,000" in w]
    assert run == [pytest.approx(10_000 * 0.5 + 25 * 20)]
    assert costs[("Figs. 6 and 12 on the authors' model", "float32")] == pytest.approx(2 * 5500 + 26 * 391 * 0.8)
    assert costs[("Figs. 6 and 12 on the authors' model", "bf16")] == pytest.approx(2 * (1000 + 25 * 20) + 26 * 391 * 0.8)
    assert costs[("the Table 1 model", "float32")] == pytest.approx(200 * (196 * 1.0 + 10))
    doc = _doc(benchmark="training_cost", command="python benchmarks/training_cost.py", rows=_cost_rows(),
               settings=dict(data="random images"))
    block = report.render_block("training_cost", report.validate(doc, "training_cost"))
    assert "**1.53 h**" in block and "**5.31 h**" in block and "**11.44 h**" in block
    assert "The measured epoch took 210 s against 216 s predicted" in block
    table = [ln for ln in block.splitlines() if ln.startswith("| the authors' |") or ln.startswith("| Table 1 |")]
    assert len(table) == 7 and all(ln.count("|") == 6 for ln in table)


def test_gpu_check_shows_the_authors_recipe_in_both_precisions(report):
    steps = [dict(step="f", title="f. the authors' CIFAR-100 recipe (Figs. 6, 12)", status="ok", wall_s=70.0,
                  rows=_cost_rows("cuda", bf16=0.01))]
    doc = _doc(benchmark="gpu_check", command="python benchmarks/gpu_check.py", rows=steps, budget_s=540.0,
               device=dict(name="NVIDIA H200", capability="9.0", memory_gib=139.8, cuda="13.0", cudnn=91000))
    block = report.render_block("gpu_check", report.validate(doc, "gpu_check"))
    assert "the authors: float32 step [s] | 0.5 |" in block and "the authors: bf16 step [s] | 0.01 |" in block
    assert "Figs. 6 and 12 on the authors' model: two runs to step 10,000 (seeds 42, 21) and two passes of 26 epochs (bf16)" in block
