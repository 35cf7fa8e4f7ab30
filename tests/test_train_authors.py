"""curvature_gap.train.train: the authors' training recipe (config.AUTHORS_RECIPES) run by our trainer.

The warm-up schedule, gradient clipping, the augmentation (same distribution as torchvision's RandomCrop and
RandomRotation), the authors' DataLoader order, the kept step-20,000 snapshot, determinism and resumption, a
smoke run that learns; and the Table-1 profiles' configuration hashes, pinned (runs and published results
are keyed by them).
"""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from torch import nn

from cases import TINY_MODEL
from curvature_gap import config as cf
from curvature_gap.codehash import reached
from curvature_gap import data as data_mod
from curvature_gap import train as tr
from curvature_gap.cli import main
from curvature_gap.data import TensorDataset, renormalised
from curvature_gap.io import load_torch
from curvature_gap.model import build_model

# computed before the authors' recipe was added (commit 3b9852c); they must never change
MNIST_FILL = tr.zero_pixel((0.1307,), (0.3081,))


def smooth_images(n: int, seed: int, classes: int = 10) -> TensorDataset:
    """``n`` MNIST-shaped images, normalised like the package's loader: one smooth (4x4 upsampled) template
    per class plus pixel noise, quantised to uint8 — learnable under shifts and small rotations."""
    g = torch.Generator().manual_seed(1234)
    templates = nn.functional.interpolate(torch.rand(classes, 1, 4, 4, generator=g), size=(28, 28),
                                          mode="bilinear", align_corners=False)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    pixels = ((templates[labels] + 0.3 * torch.rand(n, 1, 28, 28, generator=g)).clamp(0, 1) * 255).round()
    return TensorDataset(pixels.div(255).sub(0.5).div(0.5), labels)


def smooth_datasets(n_train: int = 512, n_test: int = 256) -> tr.Datasets:
    return tr.Datasets(smooth_images(n_train, 0), smooth_images(n_test, 1))


def _recipe(**kw) -> cf.Recipe:
    return cf.recipe_for("authors_mnist", "smoke", **{"train_subset": None, "test_subset": None, **kw})


# ---------------------------------------------------------------------------------------------- configs
def test_every_run_is_a_recipe_and_its_key_is_what_determines_its_weights():
    """Table 1's runs and the authors' are values of one Recipe; a run's key changes with every value that can
    change the weights and with the training code, not with names or checkpoint intervals."""
    assert all(type(c) is cf.Recipe for c in cf.RECIPES.values())
    assert len({c.hash() for c in cf.RECIPES.values()}) == len(cf.RECIPES)
    r = cf.recipe_for("authors_mnist", "smoke")
    key = tr.run_key(r)
    for same in (dict(profile="paper"), dict(ckpt_every=7), dict(snapshot_every=3), dict(source="table1")):
        assert tr.run_key(dataclasses.replace(r, **same)) == key, same
    for other in (dict(seed=1), dict(lr=2e-3), dict(precision="bf16"), dict(shuffle="epoch"), dict(hflip=True),
                  dict(warmup_steps=0), dict(train_subset=100), dict(torch_compile=True)):
        assert tr.run_key(dataclasses.replace(r, **other)) != key, other
    # the code a run's key hashes: the order and augmentation its recipe picks, not the other ones
    names = lambda rec: {k.split(":")[1] for k in reached(*tr.training_code(rec))}  # noqa: E731
    t1, au = names(cf.recipe_for("mnist", "paper")), names(r)
    assert {"train", "EpochOrder", "ViT", "module_logits"} <= t1
    assert not {"LoaderOrder", "augment", "autocast_logits", "sdpa_math"} & t1
    assert {"train", "LoaderOrder", "augment"} <= au and "EpochOrder" not in au
    assert {"autocast_logits", "autocast_cross_entropy", "sdpa_math", "_BF16Linear", "_TF32Matmul"} <= \
        names(dataclasses.replace(r, precision="bf16"))


def test_the_recipe_profiles_are_the_authors_recipe():
    for model, dataset, seed, norm, rot, flip, every in (
            ("authors_mnist", "mnist", 37, ((0.1307,), (0.3081,)), 10.0, False, 200),
            ("authors_cifar100", "cifar100", 21, ((0.5,) * 3, (0.5,) * 3), 0.0, True, 10000)):
        c = cf.recipe_for(model, "paper")
        assert (c.model, c.optimizer, c.lr, c.betas, c.adam_eps, c.weight_decay, c.warmup_steps, c.schedule) == \
            (model, "adamw", 1e-3, (0.9, 0.95), 1e-8, 0.0, 100, "constant")
        assert (c.grad_clip, c.batch_size, c.epochs, c.seed, c.shuffle, c.precision) == \
            (1.0, 128, 100, seed, "dataloader", "float32")
        assert (c.normalize, c.augments, c.crop_padding, c.rotation_degrees, c.hflip, c.snapshot_every) == \
            (norm, True, 2, rot, flip, every)
        assert (c.train_subset, c.test_subset, c.model_overrides) == (None, None, ())
        assert cf.DATASET_OF[model] == dataset and cf.recipe_for(model, "paper") == c
        s = cf.recipe_for(model, "smoke")
        assert dataclasses.replace(s, profile="paper", epochs=100, train_subset=None, test_subset=None) == c
        assert s.epochs == 1 and 100 <= s.train_subset <= 512
        assert tr.recipe_from_dict(c.to_dict()) == c and tr.recipe_from_dict(s.to_dict()) == s
    assert tr.recipe_from_dict(cf.RECIPES[("mnist", "paper")].to_dict()) == cf.RECIPES[("mnist", "paper")]
    assert cf.MODELS == ("mnist", "cifar100") and cf.TRAIN_MODELS == cf.MODELS + cf.RECIPE_MODELS


@pytest.mark.parametrize("bad, message", [
    (dict(shuffle="random"), "unknown shuffle 'random'"),
    (dict(precision="fp16"), "unknown precision 'fp16'"),
    (dict(betas=(0.9,)), "betas must be two numbers"),
    (dict(warmup_steps=-1), "warmup_steps must be an integer >= 0"),
    (dict(normalize=((0.5, 0.5), (0.5, 0.5))), "normalize must be (mean, std) with 1 value(s)"),
    (dict(rotation_degrees=200.0), "rotation_degrees must be in [0, 180]"),
])
def test_invalid_recipe_settings_are_clear_errors(bad, message):
    with pytest.raises(cf.ConfigError, match=re.escape(message)):
        _recipe(**bad)
    with pytest.raises(cf.ConfigError, match="unknown model 'vit'"):
        cf.recipe_for("vit", "paper")


def test_step_20000_is_kept_by_both_recipes():
    """The authors' notebooks/hessian_visualization.ipynb loads their step-20,000 checkpoint."""
    for model, n_train in (("authors_mnist", 60000), ("authors_cifar100", 50000)):
        c = cf.recipe_for(model, "paper")
        total = math.ceil(n_train / c.batch_size) * c.epochs
        assert total >= 20000 and c.snapshot_every and 20000 % c.snapshot_every == 0, model


@pytest.mark.slow
def test_snapshots_every_n_steps_and_on_request(tmp_path):
    ds = smooth_datasets(128, 64)
    cfg = _recipe(epochs=2, batch_size=32, snapshot_every=3, model_overrides=tuple(sorted(TINY_MODEL.items())))
    m = tr.train(cfg, tmp_path, datasets=ds, device="cpu", progress=False, snapshot_steps=(0, 5, 8))
    assert m["steps"] == 8
    names = sorted(p.name for p in (tmp_path / tr.SNAPSHOT_DIR).iterdir())
    assert names == [f"step_{s:07d}.pt" for s in (0, 3, 5, 6, 8)]
    final = load_torch(tmp_path / tr.MODEL_NAME)
    snap = tr.load_snapshot(tmp_path, 8, tr.run_key(cfg))
    assert snap is not None and all(torch.equal(snap[k], final["model"][k]) for k in final["model"])
    assert not all(torch.equal(tr.load_snapshot(tmp_path, 6, tr.run_key(cfg))[k], final["model"][k]) for k in snap)


# ---------------------------------------------------------------------------------------------- schedule
def test_the_warmup_schedule():
    cfg = cf.recipe_for("authors_mnist", "paper")
    want = {0: 0.0, 1: 1e-5, 50: 5e-4, 99: 9.9e-4, 100: 1e-3, 1000: 1e-3}
    for s, lr in want.items():
        assert tr.lr_at(cfg, s, 46900) == pytest.approx(lr, rel=1e-12, abs=1e-15), s
    assert tr.warmup_factor(0, 0) == 1.0 == tr.warmup_factor(7, 0)


def test_the_warmup_is_the_lambdalr_the_authors_step_after_every_optimiser_step():
    """transformers' get_constant_schedule_with_warmup is LambdaLR(f), f(t) = t / max(1, W) below W, else 1;
    the authors call scheduler.step() after optimizer.step(). The rate each step runs at is ours."""
    cfg = cf.recipe_for("authors_mnist", "paper")
    w = cfg.warmup_steps
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: t / max(1, w) if t < w else 1.0)
    for s in range(250):
        assert opt.param_groups[0]["lr"] == pytest.approx(tr.lr_at(cfg, s, 46900), rel=1e-12, abs=1e-15), s
        p.grad = torch.ones(1)
        opt.step()
        sched.step()


def test_the_first_step_runs_at_lr_zero_the_second_does_not(tmp_path):
    ds = smooth_datasets(256, 64)
    cfg = _recipe(epochs=1, model_overrides=tuple(sorted(TINY_MODEL.items())))
    init = build_model(cfg.model, seed=cfg.seed, **TINY_MODEL).state_dict()
    for steps, moved in ((1, False), (2, True)):
        tr.train(cfg, tmp_path / str(steps), datasets=ds, device="cpu", progress=False, max_steps=steps)
        w = load_torch(tmp_path / str(steps) / tr.CKPT_NAME)["model"]
        assert any(not torch.equal(w[k], init[k]) for k in init) is moved


# ---------------------------------------------------------------------------------------------- clipping
def test_gradients_are_clipped_to_global_norm():
    x = smooth_images(64, 3)
    model = build_model("authors_mnist", seed=0)
    for clip in (1e-3, None):
        model.load_state_dict(build_model("authors_mnist", seed=0).state_dict())
        opt = torch.optim.AdamW(model.parameters())
        _, before = tr.train_step(model, opt, x.images, x.labels, _recipe(grad_clip=clip), 1e-3)
        after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
        assert before > 0.01
        if clip is None:
            assert after == pytest.approx(before, rel=1e-5)
        else:
            assert after == pytest.approx(clip, rel=1e-4), "the gradient's global 2-norm is clipped to grad_clip"


def test_clipping_changes_the_update(tmp_path):
    """Through the training loop: a tiny clip moves the weights less in the first steps after the warm-up
    (Adam normalises a constant scale away, but not one that changes step to step)."""
    ds = smooth_datasets(256, 64)
    runs = {}
    for clip in (1e-4, None):
        cfg = _recipe(epochs=1, batch_size=32, warmup_steps=0, grad_clip=clip)
        tr.train(cfg, tmp_path / str(clip), datasets=ds, device="cpu", progress=False)
        runs[clip] = load_torch(tmp_path / str(clip) / tr.MODEL_NAME)["model"]
    assert any(not torch.equal(runs[1e-4][k], runs[None][k]) for k in runs[None])


# ---------------------------------------------------------------------------------------------- augmentation
def _aug(images, seed, pad=2, deg=10.0, flip=False, fill=MNIST_FILL):
    return tr.augment(images, torch.Generator().manual_seed(seed), pad, deg, flip, fill)


def test_augmentation_is_deterministic_per_seed_and_keeps_shapes():
    x = renormalised(smooth_images(32, 0), (0.1307,), (0.3081,)).images
    a, b, c = _aug(x, 5), _aug(x, 5), _aug(x, 6)
    assert a.shape == x.shape and a.dtype == x.dtype and torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a, x)
    # values are pixels of the image or the zero pixel (crop and nearest rotation only move and fill)
    assert torch.isin(a, torch.cat([x.flatten(), MNIST_FILL])).all()
    rgb = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    out = _aug(rgb, 1, pad=2, deg=0.0, flip=True, fill=tr.zero_pixel((0.5,) * 3, (0.5,) * 3))
    assert out.shape == rgb.shape and torch.isin(out, torch.cat([rgb.flatten(), torch.tensor([-1.0])])).all()
    flipped = [i for i in range(4) if torch.equal(out[i, :, 2:-2, 2:-2], rgb[i, :, 2:-2, 2:-2].flip(-1))]
    plain = [i for i in range(4) if torch.equal(out[i, :, 2:-2, 2:-2], rgb[i, :, 2:-2, 2:-2])]
    assert len(flipped) + len(plain) <= 4


def _sequential_augment(images, g, pad, deg, flip, fill):
    """The augmentation as the package computed it before its batch-wide form, step after step: the padded batch
    cropped by advanced indexing; the rotation as two ``grid_sample`` calls (image, then a mask of ones); the flip as
    a ``where`` over the flipped batch."""
    b, c, h, w = images.shape
    fill = fill.to(images).view(1, c, 1, 1)
    out = images
    if pad:
        padded = fill.expand(b, c, h + 2 * pad, w + 2 * pad).clone()
        padded[:, :, pad:pad + h, pad:pad + w] = images
        dy, dx = torch.randint(0, 2 * pad + 1, (b,), generator=g), torch.randint(0, 2 * pad + 1, (b,), generator=g)
        rows, cols = dy[:, None] + torch.arange(h)[None], dx[:, None] + torch.arange(w)[None]
        out = padded.permute(0, 2, 3, 1)[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
        out = out.permute(0, 3, 1, 2).contiguous()
    if deg:
        a = torch.deg2rad(torch.empty(b, dtype=torch.float64).uniform_(-deg, deg, generator=g))
        theta = torch.zeros(b, 2, 3, dtype=torch.float64)
        theta[:, 0, 0], theta[:, 0, 1] = torch.cos(a), -torch.sin(a) * h / w
        theta[:, 1, 0], theta[:, 1, 1] = torch.sin(a) * w / h, torch.cos(a)
        grid = nn.functional.affine_grid(theta.float(), [b, c, h, w], align_corners=False)
        rotated = nn.functional.grid_sample(out, grid, mode="nearest", padding_mode="zeros", align_corners=False)
        inside = nn.functional.grid_sample(torch.ones(b, 1, h, w), grid, mode="nearest", padding_mode="zeros",
                                           align_corners=False) > 0.5
        out = torch.where(inside, rotated, fill)
    if flip:
        out = torch.where((torch.rand(b, generator=g) < 0.5)[:, None, None, None], out.flip(-1), out)
    return out


@pytest.mark.parametrize("pad, deg, flip, channels", [(2, 10.0, False, 1), (2, 0.0, True, 3), (4, 0.0, True, 3),
                                                      (3, 12.0, True, 3), (0, 12.0, True, 1), (0, 0.0, True, 3),
                                                      (2, 0.0, False, 1), (0, 180.0, False, 1)])
def test_the_batch_wide_augmentation_is_the_sequential_one_bit_for_bit(pad, deg, flip, channels):
    """200 batches per setting (the authors' MNIST and CIFAR-100 settings first): one gather, one grid_sample and
    the flip folded into whichever reads last give the very images of cropping, rotating and flipping in turn."""
    x = torch.randn(64, channels, 28, 28, generator=torch.Generator().manual_seed(3))
    fill = tr.zero_pixel((0.1307,) * channels, (0.3081,) * channels)
    for seed in range(200):
        a = tr.augment(x, torch.Generator().manual_seed(seed), pad, deg, flip, fill)
        b = _sequential_augment(x, torch.Generator().manual_seed(seed), pad, deg, flip, fill)
        assert torch.equal(a, b), seed


def _landing(out: torch.Tensor) -> list:
    """(row, col) of the bright pixel of each (H, W) image (the first if two), None where none is left."""
    flat = out.flatten(1)
    return [(int(i) // out.shape[-1], int(i) % out.shape[-1]) if m > 1 else None
            for m, i in zip(*flat.max(1))]


def _histogram(points, n) -> dict:
    h = {}
    for p in points:
        h[p] = h.get(p, 0) + 1 / n
    return h


def _tv(h1: dict, h2: dict) -> float:
    return 0.5 * sum(abs(h1.get(k, 0) - h2.get(k, 0)) for k in set(h1) | set(h2))


def test_crop_offsets_are_uniform_within_two_pixels_as_torchvision_random_crop():
    from torchvision import transforms
    n = 3000
    img = torch.full((n, 1, 28, 28), float(MNIST_FILL))
    img[:, 0, 14, 14] = 3.0
    land = _landing(_aug(img, 0, pad=2, deg=0.0)[:, 0])
    offsets = _histogram([(r - 14, c - 14) for r, c in land], n)
    assert set(offsets) == {(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)}
    assert max(abs(f - 1 / 25) for f in offsets.values()) < 0.015
    crop = transforms.RandomCrop(28, padding=2, fill=float(MNIST_FILL))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        theirs = _histogram([(r - 14, c - 14) for r, c in _landing(torch.stack([crop(img[0]) for _ in range(n)])[:, 0])], n)
    assert _tv(offsets, theirs) < 0.08


@pytest.mark.slow
def test_rotation_stays_within_ten_degrees_and_matches_torchvision():
    from torchvision import transforms
    n = 3000
    img = torch.full((n, 1, 28, 28), float(MNIST_FILL))
    img[:, 0, 13, 26] = 3.0  # 12.5 px right of the centre (13.5, 13.5), 0.5 px above
    out = _aug(img, 0, pad=0, deg=10.0)[:, 0]
    assert torch.isin(out, torch.tensor([3.0, float(MNIST_FILL)])).all()
    land = _landing(out)
    assert sum(p is None for p in land) < 0.05 * n  # a rotated pixel can fall between output pixels
    angle0 = math.atan2(-(13 - 13.5), 26 - 13.5)
    radius0 = math.hypot(13 - 13.5, 26 - 13.5)
    tol = math.degrees(math.asin(math.sqrt(0.5) / radius0))  # a nearest pixel is within √½ px
    angles = []
    for r, c in filter(None, land):
        angles.append(math.degrees(math.atan2(-(r - 13.5), c - 13.5) - angle0))
        assert abs(math.hypot(r - 13.5, c - 13.5) - radius0) <= math.sqrt(0.5) + 1e-9
    assert max(abs(a) for a in angles) <= 10 + tol
    assert min(angles) < -8 and max(angles) > 8, "the angles cover ±10 degrees"
    rot = transforms.RandomRotation(10, fill=float(MNIST_FILL))  # NEAREST, its default
    assert rot.interpolation == transforms.InterpolationMode.NEAREST
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        theirs = _histogram(_landing(torch.stack([rot(img[0]) for _ in range(n)])[:, 0]), n)
    assert _tv(_histogram(land, n), theirs) < 0.08


@pytest.mark.parametrize("angle", [-10.0, -3.3, 7.0, 10.0])
def test_rotate_nearest_is_torchvisions_rotate(angle):
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF
    x = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(2))
    ref = TF.rotate(x, angle, interpolation=InterpolationMode.NEAREST, fill=[float(MNIST_FILL)])
    assert torch.equal(tr.rotate_nearest(x, torch.full((3,), angle), MNIST_FILL), ref)


def test_the_loop_augments_each_epoch_afresh_and_never_the_test_split(tmp_path, monkeypatch):
    n = 64
    ds = smooth_datasets(n, 32)
    cfg = _recipe(epochs=2, batch_size=n, model_overrides=tuple(sorted(TINY_MODEL.items())))
    seen, evaluated = [], []
    step, evaluate = tr.train_step, tr.evaluate
    monkeypatch.setattr(tr, "train_step", lambda model, opt, x, y, *a: (seen.append((x, y)), step(model, opt, x, y, *a))[1])
    monkeypatch.setattr(tr, "evaluate", lambda model, split, dev, **kw: (evaluated.append(split),
                                                                         evaluate(model, split, dev, **kw))[1])
    tr.train(cfg, tmp_path, datasets=ds, device="cpu", progress=False)
    order = tr.LoaderOrder(n, n, cfg.seed)
    clean = renormalised(ds.train, *cfg.normalize).images
    per_epoch = []
    for e, (x, y) in enumerate(seen):
        perm = order.order(e)
        assert torch.equal(y, ds.train.labels[perm]) and x.shape == clean.shape
        per_epoch.append(x[torch.argsort(perm)])
        assert (per_epoch[-1] != clean).flatten(1).any(1).float().mean() > 0.9, "augmented"
    assert (per_epoch[0] != per_epoch[1]).flatten(1).any(1).float().mean() > 0.9, "fresh each epoch"
    test = renormalised(ds.test, *cfg.normalize)
    assert len(evaluated) == 3  # after each epoch, then the training split
    assert all(torch.equal(s.images, test.images) for s in evaluated[:2])
    assert torch.equal(evaluated[2].images, clean)
    # n copies of one image: the shuffle cannot hide a draw repeated at the same position of each epoch
    seen.clear()
    one = tr.Datasets(TensorDataset(ds.train.images[:1].repeat(n, 1, 1, 1), ds.train.labels), ds.test)
    tr.train(cfg, tmp_path / "one", datasets=one, device="cpu", progress=False)
    assert (seen[0][0] != seen[1][0]).flatten(1).any(1).float().mean() > 0.9


def test_renormalised_is_torchvisions_to_tensor_then_normalize():
    from torchvision.transforms import functional as TF
    u = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16).repeat(2, 1, 1, 1)
    ours = renormalised(TensorDataset(u.float().div(255).sub(0.5).div(0.5), torch.zeros(2)), (0.1307,), (0.3081,))
    ref = torch.stack([TF.normalize(TF.to_tensor(img.permute(1, 2, 0).numpy()), (0.1307,), (0.3081,)) for img in u])
    assert torch.equal(ours.images, ref)
    same = TensorDataset(u.float(), torch.zeros(2))
    assert renormalised(same, (0.5,), (0.5,)) is same


# ---------------------------------------------------------------------------------------------- order, determinism
def test_the_order_is_the_authors_dataloaders():
    n, bs, seed = 300, 128, 37
    g = torch.Generator()
    g.manual_seed(seed)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(n)), batch_size=bs,
                                         shuffle=True, generator=g, num_workers=0)
    theirs = [torch.cat([b[0] for b in loader]) for _ in range(3)]
    ours = tr.LoaderOrder(n, bs, seed)
    assert all(torch.equal(ours.order(e), theirs[e]) for e in range(3))
    assert not torch.equal(theirs[0], theirs[1]) and sorted(theirs[0].tolist()) == list(range(n))
    later = tr.LoaderOrder(n, bs, seed)
    assert torch.equal(later.order(2), theirs[2])
    with pytest.raises(ValueError, match="passed already"):
        later.order(1)


def test_deterministic_and_resumes_to_the_same_weights(tmp_path):
    ds = smooth_datasets(192, 64)
    cfg = _recipe(epochs=3, batch_size=64, ckpt_every=2, model_overrides=tuple(sorted(TINY_MODEL.items())))
    a = tr.train(cfg, tmp_path / "a", datasets=ds, device="cpu", progress=False)
    b = tr.train(cfg, tmp_path / "b", datasets=ds, device="cpu", progress=False)
    assert a["weights_sha256"] == b["weights_sha256"]
    assert tr.train(cfg, tmp_path / "c", datasets=ds, device="cpu", progress=False, max_steps=4)[
        "interrupted_at_step"] == 4
    c = tr.train(cfg, tmp_path / "c", datasets=ds, device="cpu", progress=False)
    assert c["weights_sha256"] == a["weights_sha256"] and c["steps"] == 9
    other = tr.train(dataclasses.replace(cfg, seed=38), tmp_path / "d", datasets=ds, device="cpu",
                            progress=False)
    assert other["weights_sha256"] != a["weights_sha256"]
    with pytest.raises(tr.CheckpointMismatch):
        tr.train(dataclasses.replace(cfg, seed=38), tmp_path / "a", datasets=ds, device="cpu", progress=False)
    model, state = tr.load_model(tmp_path / "a" / tr.MODEL_NAME)
    assert tr.recipe_from_dict(state["config"]) == cfg and isinstance(tr.recipe_from_dict(state["config"]), cf.Recipe)


def test_bf16_trains_bf16_weights_and_keeps_them_widened(tmp_path):
    ds = smooth_datasets(64, 32)
    cfg = _recipe(epochs=1, batch_size=32, precision="bf16", model_overrides=tuple(sorted(TINY_MODEL.items())))
    m = tr.train(cfg, tmp_path, datasets=ds, device="cpu", progress=False)
    w = load_torch(tmp_path / tr.MODEL_NAME)["model"]
    assert m["precision"] == "bf16" and load_torch(tmp_path / tr.CKPT_NAME)["model"]["head.weight"].dtype == torch.bfloat16
    assert all(v.dtype == torch.float32 and torch.equal(v, v.bfloat16().float()) for v in w.values())  # widened exactly
    assert math.isfinite(m["test_loss"])


# ---------------------------------------------------------------------------------------------- smoke runs
@pytest.mark.slow
def test_a_short_run_of_the_recipe_lowers_the_loss(tmp_path):
    """The full authors_mnist model and recipe (warm-up, clipping, augmentation) on 512 images, 200 steps."""
    cfg = _recipe(epochs=50)
    m = tr.train(cfg, tmp_path, datasets=smooth_datasets(), device="cpu", progress=False)
    first, last = m["history"][0], m["history"][-1]
    assert m["steps"] == 200 and m["n_parameters"] == 3642
    assert last["test_loss"] < first["test_loss"] - 0.2 and last["train_loss_ema"] < first["train_loss_ema"] - 0.2
    assert m["test_accuracy"] > 0.15  # 10 classes: chance is 0.1


def test_the_smoke_profile_trains_from_the_cli(tmp_path, mnist_root, capsys, monkeypatch):
    """From the IDX files through torchvision's reader (md5 check off: the test writes its own files)."""
    real = data_mod.load_mnist
    monkeypatch.setattr(data_mod, "load", lambda name, root, train=True, allow_download=False:
                        real(data_mod.data_dir(root), train, verify_md5=False))
    out = tmp_path / "run"
    assert main(["train", "--model", "authors_mnist", "--profile", "smoke", "--device", "cpu", "--data-dir",
                 str(mnist_root), "--out", str(out), "--no-progress"]) == 0
    state = load_torch(out / tr.MODEL_NAME)
    assert state["config_hash"] == tr.run_key(cf.recipe_for("authors_mnist", "smoke")) and state["step"] == 2
    assert tr.verify_checkpoint(out, state["config_hash"])[0] is not None
    assert '"source": "authors"' in capsys.readouterr().out

    bf = tmp_path / "run_bf16"
    assert main(["train", "--model", "authors_mnist", "--profile", "smoke", "--device", "cpu", "--data-dir",
                 str(mnist_root), "--out", str(bf), "--no-progress", "--precision", "bf16"]) == 0
    state = load_torch(bf / tr.MODEL_NAME)
    assert state["config_hash"] == tr.run_key(cf.recipe_for("authors_mnist", "smoke", precision="bf16"))
    # bf16 weights, saved widened to float32: every entry is a bf16 number
    floats = [v for v in state["model"].values() if v.is_floating_point()]
    assert floats and all(torch.equal(v, v.to(torch.bfloat16).to(v.dtype)) for v in floats)


def test_precision_is_a_value_of_every_recipe():
    """bf16 is a value of any recipe, Table 1's included (the authors' arithmetic on the theorem's block)."""
    r = cf.recipe_for("mnist", "smoke", precision="bf16")
    assert r.precision == "bf16" and tr.run_key(r) != tr.run_key(cf.recipe_for("mnist", "smoke"))
    with pytest.raises(cf.ConfigError, match="precision"):
        cf.recipe_for("mnist", "smoke", precision="fp8")


def test_the_cifar_recipe_runs_on_cifar_shaped_tensors(tmp_path):
    g = torch.Generator().manual_seed(0)
    def split(n):
        u = torch.randint(0, 256, (n, 3, 32, 32), generator=g).float()
        return TensorDataset(u.div(255).sub(0.5).div(0.5), torch.randint(0, 100, (n,), generator=g))
    cfg = cf.recipe_for("authors_cifar100", "smoke", model_overrides=(("n_blocks", 1),))
    m = tr.train(cfg, tmp_path, datasets=tr.Datasets(split(256), split(64)), device="cpu", progress=False)
    assert m["steps"] == 2 and math.isfinite(m["test_loss"])


# ---------------------------------------------------------------------------------------------- for the figures
def test_the_first_batch_and_the_step_checkpoint_are_what_the_trainer_saw(tmp_path, monkeypatch):
    """pass_batches' first is the batch train trains on at step 0; ensure(step=k) returns the
    weights after k steps (step 0: the seeded initialisation, no training) and continues the run for later k."""
    ds = smooth_datasets(96, 32)
    cfg = _recipe(epochs=1, batch_size=32, model_overrides=tuple(sorted(TINY_MODEL.items())))
    seen, step = [], tr.train_step
    monkeypatch.setattr(tr, "train_step", lambda model, opt, x, y, *a: (seen.append((x, y)), step(model, opt, x, y, *a))[1])
    x0, y0 = tr.pass_batches(cfg, tr.load_datasets(cfg, datasets=ds), 1)[0]
    s0, info0 = tr.ensure(cfg, tmp_path, 0, "cpu", datasets=ds, progress=False, log=lambda m: None)
    init = build_model(cfg.model, seed=cfg.seed, **dict(cfg.model_overrides)).state_dict()
    assert not seen and info0["step"] == 0 and all(torch.equal(s0[k], init[k]) for k in init)
    s2, info2 = tr.ensure(cfg, tmp_path, 2, "cpu", datasets=ds, progress=False, log=lambda m: None)
    assert len(seen) == 2 and torch.equal(seen[0][0], x0) and torch.equal(seen[0][1], y0)
    assert info2["step"] == 2 and any(not torch.equal(s2[k], init[k]) for k in init)
    again, _ = tr.ensure(cfg, tmp_path, 2, "cpu", datasets=ds, progress=False, log=lambda m: None)
    assert len(seen) == 2 and all(torch.equal(again[k], s2[k]) for k in s2), "read from the snapshot"
    tr.ensure(cfg, tmp_path, 3, "cpu", datasets=ds, progress=False, log=lambda m: None)
    assert len(seen) == 3, "continued from step 2, not restarted"


def test_the_loader_of_figs_6_and_12_is_the_one_the_trainer_reads(tmp_path, monkeypatch):
    """loader yields, batch for batch over two epochs (a smaller last batch included), what
    train trains on: the same order, augmentation and step numbers."""
    ds = smooth_datasets(80, 16)
    cfg = _recipe(epochs=2, batch_size=32, model_overrides=tuple(sorted(TINY_MODEL.items())))
    seen = []
    monkeypatch.setattr(tr, "train_step", lambda model, opt, x, y, *a: (seen.append((x, y)), (0.0, 0.0))[1])
    tr.train(cfg, tmp_path, "cpu", datasets=ds, progress=False)
    rds = tr.load_datasets(cfg, datasets=ds)
    loaded = list(tr.loader(cfg, rds, 2))
    assert [s for s, _, _ in loaded] == list(range(6)) and [len(y) for _, _, y in loaded] == [32, 32, 16] * 2
    assert len(seen) == 6 and all(torch.equal(x, a) and torch.equal(y, b) for (_, x, y), (a, b) in zip(loaded, seen))
    assert not torch.equal(loaded[0][1], loaded[3][1]), "each epoch is shuffled and augmented afresh"


def test_a_step_the_run_has_passed_without_its_snapshot_is_replayed_apart(tmp_path):
    """ensure(step=k) on a run already past k with no snapshot of k: the weights after k steps, from
    a replay beside the run (which is left as it was), the snapshot kept in the run, the replay removed."""
    ds = smooth_datasets(96, 32)
    cfg = _recipe(epochs=1, batch_size=32, model_overrides=tuple(sorted(TINY_MODEL.items())))
    quiet = dict(device="cpu", datasets=ds, progress=False, log=lambda m: None)
    ref, _ = tr.ensure(cfg, tmp_path / "ref", 1, **quiet)
    tr.ensure(cfg, tmp_path / "run", 3, **quiet)
    d = tr.run_dir(cfg, tmp_path / "run")
    last = load_torch(d / tr.CKPT_NAME)["step"]
    assert last == 3 and tr.load_snapshot(d, 1, tr.run_key(cfg)) is None
    got, info = tr.ensure(cfg, tmp_path / "run", 1, **quiet)
    assert info["step"] == 1 and all(torch.equal(got[k], ref[k]) for k in ref)
    assert load_torch(d / tr.CKPT_NAME)["step"] == last and not (d / "replay").exists()
    assert tr.load_snapshot(d, 1, tr.run_key(cfg)) is not None


@pytest.mark.slow
def test_a_compiled_run_trains_as_the_eager_one_up_to_the_last_bits(tmp_path):
    """torch_compile=True (inductor, bf16 casts kept): a run of its own key whose weights after a few bf16 steps are
    nearly all the eager run's, bit for bit (compilation takes seconds here)."""
    ds = smooth_datasets(64, 32)
    cfg = _recipe(epochs=1, batch_size=16, warmup_steps=0, precision="bf16",
                  model_overrides=tuple(sorted(TINY_MODEL.items())))
    w = {}
    for compiled in (False, True):
        run = dataclasses.replace(cfg, torch_compile=compiled)
        tr.train(run, tmp_path / str(compiled), datasets=ds, device="cpu", progress=False)
        w[compiled] = load_torch(tmp_path / str(compiled) / tr.MODEL_NAME)["model"]
    assert tr.run_key(dataclasses.replace(cfg, torch_compile=True)) != tr.run_key(cfg)
    same = sum(int((w[True][k] == w[False][k]).sum()) for k in w[False]) / sum(v.numel() for v in w[False].values())
    assert same >= 0.9, same
