"""Atomic, verifiable files: nothing half-written is ever read as complete.

Every file the package writes (checkpoints, results, manifests, JSON rows) goes through a temporary file in the same
directory, ``fsync`` and ``os.replace``; :func:`file_lock` serialises work on one output between processes.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "jsonable", "sha256_bytes",
           "save_torch", "load_torch", "state_sha256", "file_lock", "save_npz_atomic"]


_UMASK = os.umask(0)  # read the process's umask (os.umask sets it and returns the old one), then restore it
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; the file gets the mode open() would give it
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def jsonable(x):
    """``x`` with NumPy scalars/arrays, tuples and non-finite floats made JSON-safe (inf -> "inf")."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        return jsonable(x.item())
    if isinstance(x, Path) or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    return x


def atomic_write_json(path, obj, indent: int | None = 2) -> None:
    """Write ``jsonable(obj)`` as JSON (keys sorted, UTF-8) atomically."""
    text = json.dumps(jsonable(obj), indent=indent, sort_keys=True, ensure_ascii=False, default=str)
    atomic_write_bytes(path, (text + "\n").encode())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_dumped(path, dump) -> bytes:
    """``dump(file)`` into memory, then written to ``path`` atomically; returns the bytes written."""
    buf = io.BytesIO()
    dump(buf)
    atomic_write_bytes(path, buf.getvalue())
    return buf.getvalue()


def save_torch(path, obj) -> str:
    """Atomically ``torch.save`` ``obj``; returns the sha256 of the bytes written."""
    return sha256_bytes(_write_dumped(path, lambda f: torch.save(obj, f)))


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


def save_npz_atomic(path, arrays: dict, compress: bool = False) -> bytes:
    """Write ``arrays`` as an ``.npz`` (uncompressed unless ``compress``) atomically; returns the bytes written."""
    save = np.savez_compressed if compress else np.savez
    return _write_dumped(path, lambda f: save(f, **{k: np.asarray(v) for k, v in arrays.items()}))


@contextlib.contextmanager
def file_lock(path, what: str = ""):
    """Exclusive ``fcntl.flock`` on ``path``, announcing when another process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process working on {what or path} (lock {path})", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
