"""Training: lowers the loss, is deterministic, resumes to the same weights, stops on divergence."""
import json

import pytest
import torch

from curvature_gap.config import train_config
from curvature_gap.io import load_torch
from curvature_gap.train import CheckpointMismatch, TrainingDiverged, augment, train


def _cfg(**kw):
    base = dict(epochs=2, train_subset=None, test_subset=None, ckpt_every=3, batch_size=64, lr=3e-3)
    base.update(kw)
    return train_config("mnist", "smoke", **base)


def test_smoke_training_lowers_loss_and_writes_metrics(tmp_path, tiny_datasets):
    cfg = _cfg(epochs=3)
    m = train(cfg, tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False)
    hist = m["history"]
    assert hist[-1]["test_loss"] < hist[0]["test_loss"] < 2.5
    assert m["test_accuracy"] > 0.3  # 10 classes: chance is 0.1
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for key in ("final_train_loss", "test_accuracy", "epochs", "wall_seconds", "device", "torch_version", "weights_sha256"):
        assert key in saved
    state = load_torch(tmp_path / "run" / "model.pt")  # weights_only=True
    assert state["config_hash"] == cfg.hash()


def test_same_seed_same_weights_other_seed_differs(tmp_path, tiny_datasets):
    a = train(_cfg(epochs=1), tmp_path / "a", datasets=tiny_datasets, device="cpu", progress=False)
    b = train(_cfg(epochs=1), tmp_path / "b", datasets=tiny_datasets, device="cpu", progress=False)
    c = train(_cfg(epochs=1, seed=1), tmp_path / "c", datasets=tiny_datasets, device="cpu", progress=False)
    assert a["weights_sha256"] == b["weights_sha256"] != c["weights_sha256"]


@pytest.mark.parametrize("stop_at", [4, 8])  # mid-epoch (4, after a checkpoint at 3) and at an epoch boundary (8)
def test_interrupted_run_resumes_to_identical_weights(tmp_path, tiny_datasets, stop_at):
    cfg = _cfg()
    full = train(cfg, tmp_path / "full", datasets=tiny_datasets, device="cpu", progress=False)
    part = train(cfg, tmp_path / "part", datasets=tiny_datasets, device="cpu", progress=False, max_steps=stop_at)
    assert part == {"interrupted_at_step": stop_at}
    resumed = train(cfg, tmp_path / "part", datasets=tiny_datasets, device="cpu", progress=False)
    assert resumed["weights_sha256"] == full["weights_sha256"]
    assert resumed["history"] == full["history"]


def test_checkpoint_of_another_config_is_refused(tmp_path, tiny_datasets):
    train(_cfg(), tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False, max_steps=3)
    with pytest.raises(CheckpointMismatch, match="another --out directory"):
        train(_cfg(lr=1e-2), tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False)


def test_nan_loss_stops_with_step_and_last_checkpoint(tmp_path, tiny_datasets):
    cfg = _cfg(lr=1e6, ckpt_every=2)
    with pytest.raises(TrainingDiverged, match=r"at step \d+ .*last good checkpoint"):
        train(cfg, tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False)


def test_augment_is_a_seeded_crop_or_flip():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a, b = augment(x, g1, pad=0), augment(x, g2, pad=0)
    assert torch.equal(a, b)
    for i in range(2):  # with no padding only identity or a horizontal flip remain
        assert torch.equal(a[i], x[i]) or torch.equal(a[i], x[i].flip(-1))


def test_cifar100_smoke_config_trains_on_a_cifar_format_set(tmp_path, cifar_root):
    """The CIFAR-100 code path end to end: torchvision's loader, the 2-block smoke model, augmentation."""
    from curvature_gap import data
    from curvature_gap.train import Datasets

    ds = Datasets(data.load("cifar100", cifar_root, train=True, verify_md5=False),
                  data.load("cifar100", cifar_root, train=False, verify_md5=False))
    cfg = train_config("cifar100", "smoke", augment=True, epochs=1)
    m = train(cfg, tmp_path / "run", datasets=ds, device="cpu", progress=False)
    assert m["n_parameters"] == 48 * 128 + 128 + 64 * 128 + 2 * (3 * 128**2 + 2 * 128 * 512 + 512 + 128 + 4 * 128) + 128 * 100 + 100
    assert m["steps"] == 2 and 0 <= m["test_accuracy"] <= 1 and m["final_train_loss"] < 10
