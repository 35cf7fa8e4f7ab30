"""The command line: help on every verb, one-line errors with exit code 2 for bad input."""
import subprocess
import sys

import pytest

from curvature_gap.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "curvature_gap", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("verb", ["train", "data", "verify"])
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
def test_bad_choice_is_one_line_exit_2(args, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert needle in err and "choose from" in err and len(err.strip().splitlines()) == 1


def test_console_entry_point_and_module_agree():
    r = run("--help")
    assert r.returncode == 0 and "train" in r.stdout


def test_cuda_requested_without_cuda_is_clear(tmp_path, mnist_root):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = run("train", "--model", "mnist", "--profile", "smoke", "--device", "cuda", "--data-dir", str(mnist_root), "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "CUDA is not available" in r.stderr and "--device cpu" in r.stderr


def test_missing_dataset_fails_fast_with_instructions(tmp_path):
    r = run("train", "--model", "cifar100", "--profile", "smoke", "--device", "cpu", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    assert r.returncode == 1
    assert "CIFAR-100 is not available offline" in r.stderr


def test_unwritable_output_directory_is_clear(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = main(["train", "--model", "mnist", "--profile", "smoke", "--device", "cpu", "--out", str(blocker / "run")])
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot write" in err and "writable output directory" in err and len(err.strip().splitlines()) == 1
