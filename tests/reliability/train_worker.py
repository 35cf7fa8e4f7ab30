"""Worker for the kill-and-resume test: trains on test-made data into the directory argv[1]."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from cases import learnable_images  # noqa: E402

from curvature_gap.config import train_config  # noqa: E402
from curvature_gap.data import TensorDataset  # noqa: E402
from curvature_gap.train import Datasets, train  # noqa: E402


def datasets():
    def make(n, seed):
        imgs, labels = learnable_images(n, 1, 28, 10, seed)
        return TensorDataset(torch.from_numpy(imgs).float().div(255).sub(0.5).div(0.5), torch.from_numpy(labels).long())

    return Datasets(make(512, 0), make(64, 1))


CFG = train_config("mnist", "smoke", epochs=4, train_subset=None, test_subset=None, batch_size=16, ckpt_every=5)

if __name__ == "__main__":
    torch.set_num_threads(1)
    m = train(CFG, sys.argv[1], datasets=datasets(), device="cpu", progress=False)
    print(m["weights_sha256"])
