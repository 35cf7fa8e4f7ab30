"""Worker for the kill-and-resume test: trains on test-made data into the directory argv[1].

argv[2], optional, is where it holds to be killed (tests/reliability/hold.py): ``step:N`` right after the N-th
optimiser step, ``write:N`` while writing the checkpoint of step N (its bytes in the temporary file, not yet
renamed into ``last.pt``). Without it the run trains to its end and prints the sha256 of its weights.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from cases import learnable_images  # noqa: E402
from hold import hold_after_step, hold_while_writing  # noqa: E402

from curvature_gap.config import recipe_for  # noqa: E402
from curvature_gap.data import TensorDataset  # noqa: E402
from curvature_gap.train import CKPT_NAME, Datasets, train  # noqa: E402


def datasets():
    def make(n, seed):
        imgs, labels = learnable_images(n, 1, 28, 10, seed)
        return TensorDataset(torch.from_numpy(imgs).float().div(255).sub(0.5).div(0.5), torch.from_numpy(labels).long())

    return Datasets(make(512, 0), make(64, 1))


# 512 images in batches of 16: 32 steps an epoch, 128 in all; last.pt every 5 steps and at each epoch's end
CFG = recipe_for("mnist", "smoke", epochs=4, train_subset=None, test_subset=None, batch_size=16, ckpt_every=5)


def hold_while_writing_checkpoint(step: int) -> None:
    """Armed by the ``step``-th optimiser step (a post hook): the next write of ``last.pt`` (the checkpoint of that
    step) holds in its fsync. Nothing of the package is replaced, so the run's key is that of an unpatched run and
    the resumed process accepts the checkpoint."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    count = 0

    def post(optimizer, args, kwargs):
        nonlocal count
        count += 1
        if count == step:
            hold_while_writing(lambda path: Path(path).name == CKPT_NAME, f"writing {CKPT_NAME} of step {step}")

    register_optimizer_step_post_hook(post)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if len(sys.argv) > 2:
        kind, n = sys.argv[2].split(":")
        {"step": hold_after_step, "write": hold_while_writing_checkpoint}[kind](int(n))
    m = train(CFG, sys.argv[1], datasets=datasets(), device="cpu", progress=False)
    print(m["weights_sha256"])
