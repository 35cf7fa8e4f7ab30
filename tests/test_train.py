"""curvature_gap.train: training lowers the loss, is deterministic, resumes to the same weights, stops on
divergence, refuses foreign checkpoints; ensure reuses, verifies and retrains; snapshots."""
import json

import pytest
import torch

from cases import TINY_MODEL
from curvature_gap.config import recipe_for
from curvature_gap.io import load_torch, state_sha256
from curvature_gap.train import (CheckpointMismatch, StaleCheckpointWarning, TrainingDiverged, ensure,
                                 load_model, load_snapshot, run_dir, run_key, train, verify_checkpoint)

TINY = tuple(sorted(TINY_MODEL.items()))


def _cfg(**kw):
    base = dict(epochs=2, train_subset=None, test_subset=None, ckpt_every=3, batch_size=64, lr=3e-3)
    base.update(kw)
    return recipe_for("mnist", "smoke", **base)


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
    assert state["config_hash"] == run_key(cfg)
    model, st = load_model(tmp_path / "run" / "model.pt")
    assert state_sha256(model.state_dict()) == saved["weights_sha256"] and st["step"] == m["steps"] == 24


@pytest.mark.fault("same-command-twice")
def test_same_seed_same_weights_other_seed_differs(tmp_path, tiny_datasets):
    a = train(_cfg(epochs=1, model_overrides=TINY), tmp_path / "a", datasets=tiny_datasets, device="cpu", progress=False)
    b = train(_cfg(epochs=1, model_overrides=TINY), tmp_path / "b", datasets=tiny_datasets, device="cpu", progress=False)
    c = train(_cfg(epochs=1, model_overrides=TINY, seed=1), tmp_path / "c", datasets=tiny_datasets, device="cpu",
              progress=False)
    assert a["weights_sha256"] == b["weights_sha256"] != c["weights_sha256"]
    assert a["history"] == b["history"]


@pytest.mark.parametrize("stop_at", [4, 8])  # mid-epoch (4, after a checkpoint at 3) and at an epoch boundary (8)
@pytest.mark.fault("training-killed")
def test_interrupted_run_resumes_to_identical_weights(tmp_path, tiny_datasets, stop_at):
    cfg = _cfg(model_overrides=TINY)
    full = train(cfg, tmp_path / "full", datasets=tiny_datasets, device="cpu", progress=False)
    part = train(cfg, tmp_path / "part", datasets=tiny_datasets, device="cpu", progress=False, max_steps=stop_at)
    assert part["interrupted_at_step"] == stop_at and part["loop"]["steps"] == stop_at and part["loop"]["seconds"] > 0
    assert load_torch(tmp_path / "part" / "last.pt")["step"] == stop_at
    resumed = train(cfg, tmp_path / "part", datasets=tiny_datasets, device="cpu", progress=False)
    assert resumed["weights_sha256"] == full["weights_sha256"]
    assert resumed["history"] == full["history"]


@pytest.mark.fault("foreign-checkpoint")
def test_checkpoint_of_another_config_is_refused(tmp_path, tiny_datasets):
    cfg = _cfg(model_overrides=TINY)
    train(cfg, tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False, max_steps=3)
    before = (tmp_path / "run" / "last.pt").read_bytes()
    other = _cfg(model_overrides=TINY, lr=1e-2)
    with pytest.raises(CheckpointMismatch, match="another --out directory") as err:
        train(other, tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False)
    assert run_key(cfg) in str(err.value) and run_key(other) in str(err.value)      # both config hashes named
    assert (tmp_path / "run" / "last.pt").read_bytes() == before, "nothing is overwritten"


@pytest.mark.fault("loss-diverges")
def test_nan_loss_stops_with_step_and_last_checkpoint(tmp_path, tiny_datasets):
    cfg = _cfg(lr=1e6, ckpt_every=2, model_overrides=TINY)
    with pytest.raises(TrainingDiverged, match=r"at step \d+ .*last good checkpoint .*last\.pt at step \d+"):
        train(cfg, tmp_path / "run", datasets=tiny_datasets, device="cpu", progress=False)


def test_cifar100_smoke_config_trains_on_a_cifar_format_set(tmp_path, cifar_root):
    """The CIFAR-100 code path end to end: torchvision's loader, the 2-block smoke model, augmentation."""
    from curvature_gap import data
    from curvature_gap.train import Datasets

    ds = Datasets(data.load("cifar100", cifar_root, train=True, verify_md5=False),
                  data.load("cifar100", cifar_root, train=False, verify_md5=False))
    cfg = recipe_for("cifar100", "smoke", crop_padding=4, hflip=True, epochs=1)
    m = train(cfg, tmp_path / "run", datasets=ds, device="cpu", progress=False)
    assert m["n_parameters"] == 48 * 128 + 128 + 64 * 128 + 2 * (3 * 128**2 + 2 * 128 * 512 + 512 + 128 + 4 * 128) + 128 * 100 + 100
    assert m["steps"] == 2 and 0 <= m["test_accuracy"] <= 1 and m["final_train_loss"] < 10


# ---------------------------------------------------------------------------------------------- ensure
def _tiny_cfg():
    return recipe_for("mnist", "smoke", model_overrides=TINY, epochs=1, batch_size=64, train_subset=None,
                        test_subset=None, ckpt_every=100)


def test_ensure_reuses_an_intact_checkpoint_and_saves_snapshots(tmp_path, tiny_datasets):
    cfg = _tiny_cfg()
    state, info = ensure(cfg, tmp_path, device="cpu", datasets=tiny_datasets, progress=False, snapshot_steps=(0, 3))
    d = run_dir(cfg, tmp_path)
    assert info["run_dir"] == str(d) and info["steps"] == 8 and info["weights_sha256"] == state_sha256(state)
    assert verify_checkpoint(d, run_key(cfg))[1] == ""
    snap = load_snapshot(d, 3, run_key(cfg))
    part = train(cfg, tmp_path / "three", device="cpu", datasets=tiny_datasets, max_steps=3, progress=False)
    assert part["interrupted_at_step"] == 3 and set(part) == {"interrupted_at_step", "loop"}
    assert state_sha256(snap) == state_sha256(load_torch(tmp_path / "three" / "last.pt")["model"])
    assert load_snapshot(d, 5, run_key(cfg)) is None
    with pytest.warns(StaleCheckpointWarning, match="not step 3 of run another"):
        assert load_snapshot(d, 3, "another") is None
    stamp = (d / "model.pt").stat().st_mtime_ns
    again, info2 = ensure(cfg, tmp_path, device="cpu", datasets=tiny_datasets, progress=False)
    assert info2 == {k: v for k, v in info.items() if k != "loop"} and (d / "model.pt").stat().st_mtime_ns == stamp, \
        "reused, not retrained"
    assert info["loop"]["steps"] == 8 and "loop" not in info2, "the training call says what it trained; reuse nothing"


@pytest.mark.fault("damaged-checkpoint")
def test_damaged_checkpoint_is_detected_and_retrained_to_the_same_weights(tmp_path, tiny_datasets):
    cfg = _tiny_cfg()
    _, info = ensure(cfg, tmp_path, device="cpu", datasets=tiny_datasets, progress=False)
    mp = run_dir(cfg, tmp_path) / "model.pt"
    mp.write_bytes(mp.read_bytes()[: mp.stat().st_size // 2])
    assert "cannot be loaded" in verify_checkpoint(mp.parent, run_key(cfg))[1]
    with pytest.warns(StaleCheckpointWarning, match="model.pt cannot be loaded.*retraining"):
        _, info2 = ensure(cfg, tmp_path, device="cpu", datasets=tiny_datasets, progress=False)
    assert info2["weights_sha256"] == info["weights_sha256"]


@pytest.mark.fault("damaged-checkpoint")
def test_a_checkpoint_that_is_not_one_at_all_is_retrained_or_refused(tmp_path, tiny_datasets):
    cfg = _tiny_cfg()
    d = run_dir(cfg, tmp_path)
    d.mkdir(parents=True)
    (d / "model.pt").write_text("not a checkpoint")              # not even a zip file
    assert "cannot be loaded (UnpicklingError" in verify_checkpoint(d, run_key(cfg))[1]
    (d / "snapshots").mkdir()
    (d / "snapshots" / "step_0000003.pt").write_text("x")
    assert load_snapshot(d, 3, run_key(cfg)) is None
    with pytest.raises(CheckpointMismatch, match="model.pt cannot be loaded .*use another --out directory"):
        train(cfg, d, datasets=tiny_datasets, device="cpu", progress=False)
    with pytest.warns(StaleCheckpointWarning, match="retraining"):
        _, info = ensure(cfg, tmp_path, device="cpu", datasets=tiny_datasets, progress=False)
    assert info["steps"] == 8 and verify_checkpoint(d, run_key(cfg))[1] == ""


def test_verify_checkpoint_reasons(tmp_path, tiny_datasets):
    cfg = _tiny_cfg()
    ensure(cfg, tmp_path, device="cpu", datasets=tiny_datasets, progress=False)
    d = run_dir(cfg, tmp_path)
    assert verify_checkpoint(tmp_path / "nothing", run_key(cfg)) == (None, "missing")
    assert "is not run 000000000000" in verify_checkpoint(d, "000000000000")[1]
    metrics = json.loads((d / "metrics.json").read_text())
    metrics["weights_sha256"] = "0" * 64
    (d / "metrics.json").write_text(json.dumps(metrics))
    assert "do not match the sha256" in verify_checkpoint(d, run_key(cfg))[1]


def test_an_unreadable_or_foreign_snapshot_is_reported_not_dropped(tmp_path):
    from curvature_gap.train import SNAPSHOT_DIR, StaleCheckpointWarning, load_snapshot
    d = tmp_path / SNAPSHOT_DIR
    d.mkdir()
    assert load_snapshot(tmp_path, 5, "abc") is None  # no file: nothing to report
    (d / "step_0000005.pt").write_bytes(b"not a torch file")
    with pytest.warns(StaleCheckpointWarning, match=r"(?s)cannot be loaded.*replayed"):
        assert load_snapshot(tmp_path, 5, "abc") is None
    torch.save({"config_hash": "other", "step": 5, "model": {}}, d / "step_0000005.pt")
    with pytest.warns(StaleCheckpointWarning, match="not step 5 of run abc"):
        assert load_snapshot(tmp_path, 5, "abc") is None
