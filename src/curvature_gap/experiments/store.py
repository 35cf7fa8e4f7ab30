"""The result cache: ``results/<figure>/<config-hash>.npz`` (arrays) + ``.json`` (everything else).

Integrity: the ``.npz`` is written first, then the ``.json`` that names its sha256 and size and
carries a sha256 of its own content; both by temporary file + ``os.replace``. A result is used only
when the JSON parses, its own hash checks, its config equals the requested config, and the ``.npz``
has the recorded size and hash. Anything else is reported with a warning and recomputed.

Concurrency: computing a result holds an exclusive ``fcntl.flock`` on ``.<hash>.lock`` beside it;
a second process waits, then finds the finished result in the cache.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io import atomic_write_bytes, atomic_write_json


class StaleResultWarning(UserWarning):
    """A cached result or checkpoint failed its integrity check and is being recomputed."""


@dataclass
class Result:
    """Numbers of one figure: ``arrays`` (NumPy) and ``meta`` (JSON scalars, lists, strings)."""

    figure: str
    config_hash: str
    config: dict
    arrays: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    json_path: Path | None = None
    npz_path: Path | None = None
    from_cache: bool = False
    provenance: dict = field(default_factory=dict)  # how and when the numbers were computed

    def __getitem__(self, key):
        if key in self.arrays:
            return self.arrays[key]
        return self.meta[key]

    def __contains__(self, key) -> bool:
        return key in self.arrays or key in self.meta

    @property
    def paths(self) -> list[str]:
        return [str(p) for p in (self.json_path, self.npz_path) if p is not None]


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


def _roundtrip(obj):
    """What ``obj`` looks like after being written to JSON and read back."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


class ResultStore:
    def __init__(self, root: str | os.PathLike = "results"):
        self.root = Path(root)

    def json_path(self, figure: str, chash: str) -> Path:
        return self.root / figure / f"{chash}.json"

    def npz_path(self, figure: str, chash: str) -> Path:
        return self.root / figure / f"{chash}.npz"

    def partial_dir(self, figure: str, chash: str) -> Path:
        """A directory for resumable partial work of one result (removed by the caller when done)."""
        return self.root / figure / f"{chash}.partial"

    @contextlib.contextmanager
    def lock(self, figure: str, chash: str):
        """Exclusive lock for computing ``figure`` under ``chash`` (other processes wait)."""
        path = self.root / figure / f".{chash}.lock"
        with file_lock(path, f"{figure} ({chash})"):
            yield

    def load(self, figure: str, chash: str, config: dict) -> Result | None:
        """The cached result, or None when missing; a corrupt or stale one warns and gives None."""
        jp, npp = self.json_path(figure, chash), self.npz_path(figure, chash)
        if not jp.exists():
            return None
        problem = None
        try:
            doc = json.loads(jp.read_text())
            body = {k: v for k, v in doc.items() if k != "sha256"}
            if hashlib.sha256(_canonical(body)).hexdigest() != doc.get("sha256"):
                problem = "its content does not match its sha256 (edited or truncated)"
            elif doc.get("config_hash") != chash or doc.get("config") != _roundtrip(config):
                problem = "it was written by another configuration"
            else:
                rec = doc["npz"]
                if not npp.exists():
                    problem = f"{npp.name} is missing"
                elif npp.stat().st_size != rec["size"]:
                    problem = f"{npp.name} has {npp.stat().st_size} bytes, expected {rec['size']} (truncated?)"
                else:
                    data = npp.read_bytes()
                    if hashlib.sha256(data).hexdigest() != rec["sha256"]:
                        problem = f"{npp.name} does not match its recorded sha256 (edited?)"
                    else:
                        with np.load(io.BytesIO(data), allow_pickle=False) as z:
                            arrays = {k: z[k] for k in z.files}
                        prov = dict(doc.get("provenance") or {}, created=doc.get("created"))
                        return Result(figure, chash, doc["config"], arrays, doc.get("meta", {}), jp, npp, True, prov)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problem = f"it cannot be read ({type(exc).__name__}: {exc})"
        warnings.warn(f"cached result {jp} is unusable: {problem}; recomputing", StaleResultWarning, stacklevel=2)
        return None

    def save(self, figure: str, chash: str, config: dict, arrays: dict, meta: dict, extra: dict | None = None) -> Result:
        jp, npp = self.json_path(figure, chash), self.npz_path(figure, chash)
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
        data = buf.getvalue()
        atomic_write_bytes(npp, data)
        body = dict(
            figure=figure, config_hash=chash, config=_roundtrip(config), meta=_jsonable(meta),
            npz=dict(file=npp.name, size=len(data), sha256=hashlib.sha256(data).hexdigest()),
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **_jsonable(extra or {}),
        )
        body = _roundtrip(body)
        body["sha256"] = hashlib.sha256(_canonical(body)).hexdigest()
        atomic_write_json(jp, body)
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        prov = dict(body.get("provenance") or {}, created=body.get("created"))
        return Result(figure, chash, body["config"], arrays, body["meta"], jp, npp, False, prov)


@contextlib.contextmanager
def file_lock(path: Path, what: str = ""):
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


def save_npz_atomic(path: Path, arrays: dict) -> None:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())
