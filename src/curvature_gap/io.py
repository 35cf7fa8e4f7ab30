"""Atomic, verifiable files: nothing half-written is ever read as complete."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import torch


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_torch(path, obj) -> str:
    """Atomically ``torch.save`` ``obj``; returns the sha256 of the bytes written."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    atomic_write_bytes(path, data)
    return sha256_bytes(data)


def load_torch(path, map_location="cpu"):
    """``torch.load`` with ``weights_only=True``: checkpoints hold tensors and plain values only."""
    return torch.load(path, map_location=map_location, weights_only=True)


def state_sha256(state_dict: dict) -> str:
    """Hash of a model's weights (names, shapes, dtypes and exact bytes), order-independent."""
    h = hashlib.sha256()
    for k in sorted(state_dict):
        t = state_dict[k].detach().cpu().contiguous()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()
