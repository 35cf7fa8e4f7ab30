"""curvature_gap.device, and the package's GPU-relevant code paths on ``--device`` (default cpu), each against the CPU.

    pytest -m device --device cuda tests/test_device.py     # on a machine with CUDA

They run on the CPU in the normal suite too (then both sides are the CPU: the paths still run).
Small models and batches: a few seconds each on a CPU.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from cases import TINY_MODEL
from curvature_gap.config import ConfigError, recipe_for
from curvature_gap.device import resolve_device
from curvature_gap.hessian import hessian
from curvature_gap.hessian.spectra import top_eigenvalues
from curvature_gap.model import build_model
from curvature_gap.train import Datasets, load_model, train

pytestmark = pytest.mark.device

# A small MNIST-shaped ViT (454 parameters) so that dense float64 Hessians take well under a second.
TINY = TINY_MODEL


def test_resolve_device(device):
    assert resolve_device(device.type) == device
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="choose one of: auto, cpu, cuda"):
        resolve_device("tpu")
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda"
    else:
        with pytest.raises(ConfigError, match="CUDA is not available here; use --device cpu or auto"):
            resolve_device("cuda")


def _batch(n: int, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    images = (torch.rand(n, 1, 28, 28, generator=g) * 2 - 1).to(dtype)
    labels = torch.randint(0, 10, (n,), generator=g)
    return images, labels


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def _step(model: nn.Module, images, labels, lr: float = 0.1):
    """One SGD training step; (loss, logits, {name: grad}) before the update."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    logits = model(images)
    loss = nn.functional.cross_entropy(logits, labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    return loss.detach(), logits.detach(), grads


def test_training_step_of_the_mnist_vit_matches_the_cpu(device):
    images, labels = _batch(32)
    ref = build_model("mnist", seed=0)
    dev = build_model("mnist", seed=0).to(device)
    loss_c, logits_c, grads_c = _step(ref, images, labels)
    loss_d, logits_d, grads_d = _step(dev, images.to(device), labels.to(device))
    assert loss_d.device.type == device.type
    assert math.isfinite(loss_d.item())
    assert abs(loss_d.item() - loss_c.item()) <= 1e-5 * abs(loss_c.item())
    assert _rel(logits_d, logits_c) <= 1e-5
    for name, g in grads_c.items():
        assert torch.isfinite(grads_d[name]).all(), name
        assert _rel(grads_d[name], g) <= 1e-4, name
    params_c = dict(ref.named_parameters())
    for name, p in dev.named_parameters():
        assert p.device.type == device.type
        assert (p.detach().cpu() - params_c[name].detach()).abs().max().item() <= 1e-5, name
    # the updated models still agree on the next forward pass
    with torch.no_grad():
        assert _rel(dev(images.to(device)), ref(images)) <= 1e-4


def test_hessian_on_the_device_matches_float64_cpu(device):
    images, labels = _batch(4, seed=1, dtype=torch.float64)
    ref_model = build_model("mnist", seed=0, **TINY).double()
    dev_model = build_model("mnist", seed=0, **TINY).double().to(device)
    H_cpu = hessian(ref_model, (images, labels))
    H_dev = hessian(dev_model, (images.to(device), labels.to(device)))
    P = sum(p.numel() for p in ref_model.parameters())
    assert H_dev.shape == H_cpu.shape == (P, P)
    assert H_dev.dtype == torch.float64 and H_dev.device.type == device.type
    assert torch.isfinite(H_dev).all()
    assert _rel(H_dev, H_cpu) <= 1e-10
    assert _rel(H_dev, H_dev.T) <= 1e-10  # symmetric


def test_top_eigenvalues_on_the_device_match_the_cpu(device):
    images, labels = _batch(8, seed=2, dtype=torch.float64)
    ref_model = build_model("mnist", seed=0, **TINY).double()
    dev_model = build_model("mnist", seed=0, **TINY).double().to(device)
    groups = ["block0.value", "block0.ffn2", "head"]
    sp_cpu = top_eigenvalues(ref_model, (images, labels), groups=groups, iters=12)
    sp_dev = top_eigenvalues(dev_model, (images.to(device), labels.to(device)), groups=groups, iters=12)
    lc, ld = sp_cpu.overall.lambda_max, sp_dev.overall.lambda_max
    assert math.isfinite(ld) and lc > 0
    assert abs(ld - lc) <= 1e-6 * abs(lc)
    for g in groups:
        c, d = sp_cpu.blocks[g].lambda_max, sp_dev.blocks[g].lambda_max
        assert abs(d - c) <= 1e-6 * max(abs(c), 1e-12), g


def test_two_step_training_run_on_the_device_writes_finite_weights(device, tiny_datasets, tmp_path):
    ds = Datasets(tiny_datasets.train.subset(32), tiny_datasets.test.subset(16))
    cfg = recipe_for("mnist", "smoke", epochs=1, batch_size=16, train_subset=None, test_subset=None, ckpt_every=1)
    metrics = train(cfg, tmp_path / "run", device=device.type, datasets=ds, max_steps=2, progress=False)
    assert metrics.get("steps", 2) == 2
    ckpts = [p for p in (tmp_path / "run").iterdir() if p.suffix == ".pt"]
    assert ckpts, "no checkpoint written"
    for path in ckpts:
        model, _ = load_model(path, device)
        for name, p in model.named_parameters():
            assert p.device.type == device.type
            assert torch.isfinite(p).all(), f"{path.name}: {name}"


# ---------------------------------------------------------------- the authors' arithmetic against CUDA's own
def _cuda_only(device):
    if device.type != "cuda":
        pytest.skip("compares with CUDA's own bf16 autocast and TF32 GEMMs: run with --device cuda on a GPU")


def test_cuda_tf32_gemms_round_their_operands_as_the_emulation_does(device):
    """One product per output (the other k terms are zeros): under TF32 cuBLAS returns round(a)·round(b) exactly;
    the emulation rounds to nearest, ties away from zero (precision.round_to_tf32). A kernel that kept float32
    for this shape says nothing (skipped); one that truncates or breaks ties to even fails, naming which."""
    from curvature_gap import precision

    _cuda_only(device)
    g = torch.Generator().manual_seed(0)
    a, b = torch.zeros(256, 16), torch.zeros(16, 256)
    a[:, 0], b[0, :] = torch.randn(256, generator=g), torch.randn(256, generator=g)
    a[:8, 0] = torch.tensor([1 + 2.0 ** -11 * k for k in (1, 3, 5, 7, 9, 11, 13, 15)])  # exact ties
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        got = (a.to(device) @ b.to(device)).cpu()
    finally:
        torch.set_float32_matmul_precision(prev)
    if torch.equal(got, a @ b):
        pytest.skip("cuBLAS kept float32 for this shape: no TF32 rounding to compare")
    bits = lambda t: t.view(torch.int32)  # noqa: E731
    rounders = {"to nearest, ties away (the emulation)": precision.round_to_tf32,
                "truncation": lambda t: (bits(t) & -0x2000).view(torch.float32),
                "to nearest, ties to even": lambda t: ((bits(t) + 0xFFF + ((bits(t) >> 13) & 1)) & -0x2000).view(torch.float32)}
    match = [name for name, r in rounders.items() if torch.equal(got, r(a) @ r(b))]
    assert match and match[0].endswith("(the emulation)"), f"cuBLAS's TF32 rounding is {match or 'none of these'}"


def test_the_authors_arithmetic_is_cuda_autocasts(device):
    """The package's emulation of CUDA's bf16 autocast against the real one: the authors' module tree
    (tests/authors_tree.py) under torch.autocast("cuda", bfloat16) with float32 matmul precision "medium", at the same
    bf16 weights (moved away from the initialisation, where γ = 1 and β = 0 hide much) and batches. At the start at
    least 90 % of the bf16 logits are equal bit for bit (only float32 summation orders differ: on CUDA the emulation
    runs CUDA's own LayerNorm, softmax and GELU kernels); over five AdamW steps of each (the recipe's, clipped), the
    losses agree to 0.5 % and at least 90 % of the weights stay equal bit for bit. (CPU autocast on their tree, a
    different policy, gives 67 % of the logits.)"""
    from torch.nn import functional as F

    from authors_tree import authors_tree
    from curvature_gap import precision
    from curvature_gap.params import authors_parameter_names
    from curvature_gap.train import make_optimizer, train_step

    _cuda_only(device)
    cfg = recipe_for("authors_mnist", "paper")
    model = build_model(cfg.model, seed=cfg.seed).to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((0.3 * torch.randn(p.shape, generator=g)).to(torch.bfloat16))
    model = model.to(device)
    tree = authors_tree(model)
    batches = [((torch.rand(128, 1, 28, 28, generator=g) * 2 - 1).to(device),
                torch.randint(0, 10, (128,), generator=g).to(device)) for _ in range(5)]
    prev = torch.get_float32_matmul_precision()

    def theirs(x, y=None):
        """Their forward (and with labels their training step), with their main()'s "medium": TF32 float32 GEMMs."""
        torch.set_float32_matmul_precision("medium")
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = tree(x)
                loss = None if y is None else F.cross_entropy(logits, y)
            if y is None:
                return logits
            opt_t.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(tree.parameters(), cfg.grad_clip, norm_type=2.0)
            opt_t.step()
            return loss.item()
        finally:
            torch.set_float32_matmul_precision("highest")  # the emulation rounds for TF32 itself

    opt, opt_t = make_optimizer(model, cfg), torch.optim.AdamW(tree.parameters(), lr=cfg.lr, betas=cfg.betas,
                                                                eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    try:
        torch.set_float32_matmul_precision("highest")
        with torch.no_grad():
            equal = float((precision.autocast_logits(model, batches[0][0]) == theirs(batches[0][0])).float().mean())
        losses = [(train_step(model, opt, x, y, cfg, cfg.lr, *precision.arithmetic_for("bf16"))[0], theirs(x, y))
                  for x, y in batches]
    finally:
        torch.set_float32_matmul_precision(prev)
    assert equal >= 0.9, f"{equal:.3f} of the logits equal"
    assert all(abs(a - b) <= 5e-3 * abs(b) for a, b in losses), losses
    mine, their = dict(model.named_parameters()), dict(tree.named_parameters())
    pairs = [(mine[o].detach(), their[k].detach().T if t else their[k].detach())
             for k, (o, t) in authors_parameter_names(model.cfg).items()]
    same = sum(int((a == b).sum()) for a, b in pairs) / sum(a.numel() for a, _ in pairs)
    assert same >= 0.9, f"{same:.3f} of the weights equal after five steps"
