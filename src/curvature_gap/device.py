"""Device selection: ``auto`` picks CUDA when present; ``cuda`` without CUDA is a clear error."""
from __future__ import annotations

import torch

from .config import DEVICES, ConfigError, check_choice

__all__ = ["resolve_device"]


def resolve_device(name: str = "auto") -> torch.device:
    check_choice("device", name, DEVICES)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but CUDA is not available here; use --device cpu or auto")
    return torch.device(name)
