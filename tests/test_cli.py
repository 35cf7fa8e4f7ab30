"""curvature_gap.cli: help on every verb, one-line errors with exit code 2 for bad input, the verbs' arguments."""
import json
import runpy
import subprocess
import sys

import pytest

from cases import subprocess_env
from curvature_gap.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "curvature_gap", *args], capture_output=True, text=True, timeout=120,
                          env=subprocess_env())


@pytest.mark.parametrize("verb", ["train", "data", "verify", "reproduce", "publish", "bounds"])
def test_help_on_every_verb(verb, capsys):
    with pytest.raises(SystemExit) as exc:
        main([verb, "--help"])
    assert exc.value.code == 0
    assert "usage: curvature-gap " + verb in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--model", "imagenet"], "invalid choice: 'imagenet'"),
        (["train", "--model", "mnist", "--profile", "huge"], "invalid choice: 'huge'"),
        (["train", "--model", "mnist", "--device", "tpu"], "invalid choice: 'tpu'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
@pytest.mark.fault("bad-choice")
def test_bad_choice_is_one_line_exit_2(args, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert needle in err and "choose from" in err and len(err.strip().splitlines()) == 1


def test_the_module_is_the_command_line(monkeypatch, capsys):
    """``python -m curvature_gap`` runs :func:`main`, in this process (the subprocess test below is slow)."""
    monkeypatch.setattr(sys, "argv", ["curvature-gap", "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("curvature_gap", run_name="__main__")
    assert exc.value.code == 0 and "usage: curvature-gap" in capsys.readouterr().out


@pytest.mark.slow
def test_console_entry_point_and_module_agree():
    r = run("--help")
    assert r.returncode == 0 and "train" in r.stdout


@pytest.mark.slow
@pytest.mark.fault("cuda-without-cuda")
def test_cuda_requested_without_cuda_is_clear(tmp_path, mnist_root):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = run("train", "--model", "mnist", "--profile", "smoke", "--device", "cuda", "--data-dir", str(mnist_root), "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "CUDA is not available" in r.stderr and "--device cpu" in r.stderr


@pytest.mark.slow
@pytest.mark.fault("dataset-missing")
def test_missing_dataset_fails_fast_with_instructions(tmp_path):
    r = run("train", "--model", "cifar100", "--profile", "smoke", "--device", "cpu", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    assert r.returncode == 1
    assert "CIFAR-100 is not available offline" in r.stderr


@pytest.mark.fault("unwritable-output")
def test_unwritable_output_directory_is_clear(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = main(["train", "--model", "mnist", "--profile", "smoke", "--device", "cpu", "--out", str(blocker / "run")])
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot write" in err and "writable output directory" in err and len(err.strip().splitlines()) == 1


def test_verbs_and_their_arguments():
    from curvature_gap.cli import VERBS, build_parser

    assert set(VERBS) == {"train", "data", "verify", "reproduce", "publish", "bounds"}
    p = build_parser()
    a = p.parse_args(["bounds", "--quick", "--out", "x", "--save-counterexamples", "ce"])
    assert a.verb == "bounds" and a.quick and a.out == "x" and a.save_counterexamples == "ce"
    a = p.parse_args(["reproduce"])
    assert (a.profile, a.device, a.only, a.allow_long_runs) == ("paper", "auto", None, False)
    assert p.parse_args(["reproduce", "--allow-long-runs", "--only", "fig3"]).allow_long_runs
    a = p.parse_args(["verify", "--quick", "--findings", "--json", "v.json"])
    assert a.quick and a.findings and a.json == "v.json" and a.results_dir == "results" and a.published_dir is None


def test_verify_findings_prints_one_verdict_per_result(monkeypatch, capsys, tmp_path):
    from curvature_gap import checks, findings
    from curvature_gap.row import Row

    rows = [Row(id="bounds.thm1.printed", result="thm1", kind="bound", what="w", verdict="fails", claim="holds",
                expected="fails", min_ratio=0.5),
            Row(id="bounds.thm1.repaired", result="thm1", kind="bound", role="repair", what="w", verdict="holds",
                expected="holds", min_ratio=2.0)]
    monkeypatch.setattr(checks, "run", lambda *a, **k: rows)
    assert main(["verify", "--findings", "--json", str(tmp_path / "v.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 2 * len(findings.RESULTS)
    assert "Theorem 1: Hessian bound for self-attention" in out and "fails; repaired version holds" in out
    assert [r["id"] for r in json.loads((tmp_path / "v.json").read_text())] == [r.id for r in rows]
    assert "--quick" not in out, "the full run says nothing about --quick"
    assert main(["verify", "--quick", "--findings"]) == 0
    quick = capsys.readouterr().out
    assert quick.rstrip().endswith(checks.quick_note()), "--quick says its searches are smaller than the book's"
    assert "larger than the book's" in checks.QUICK_NOTE and "curvature-gap verify" in checks.QUICK_NOTE
    rows[0].expected = "holds"                      # a regression: exit status 1
    assert main(["verify", "--findings"]) == 1
