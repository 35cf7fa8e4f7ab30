"""Synthetic, learnable image data for the tests (importable by name: ``from synthetic import ...``)."""
from __future__ import annotations

import numpy as np


def learnable_images(n: int, channels: int, size: int, classes: int, seed: int = 0):
    """uint8 images = a fixed random template per class + noise: a task a tiny ViT learns fast."""
    templates = np.random.default_rng(1234).integers(0, 256, (classes, channels, size, size))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    noise = rng.integers(-40, 41, (n, channels, size, size))
    images = np.clip(templates[labels] + noise, 0, 255).astype(np.uint8)
    return images, labels
