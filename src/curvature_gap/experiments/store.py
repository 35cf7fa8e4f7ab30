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
import hashlib
import io
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io import atomic_write_json, file_lock, jsonable, save_npz_atomic


class StaleResultWarning(UserWarning):
    """A cached result failed its integrity check and is being recomputed."""


class UnusableResult(ValueError):
    """A stored result cannot be used: missing, damaged, or of another configuration (the message says which)."""


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


class ResultStore:
    def __init__(self, root: str | os.PathLike = "results"):
        self.root = Path(root)

    def _path(self, figure: str, chash: str, suffix: str) -> Path:
        return self.root / figure / f"{chash}{suffix}"

    def json_path(self, figure: str, chash: str = "") -> Path:
        return self._path(figure, chash, ".json")

    def npz_path(self, figure: str, chash: str = "") -> Path:
        return self._path(figure, chash, ".npz")

    def partial_dir(self, figure: str, chash: str) -> Path:
        """A directory for resumable partial work of one result (removed by the caller when done)."""
        return self._path(figure, chash, ".partial")

    @contextlib.contextmanager
    def lock(self, figure: str, chash: str):
        """Exclusive lock for computing ``figure`` under ``chash`` (other processes wait)."""
        path = self.root / figure / f".{chash}.lock"
        with file_lock(path, f"{figure} ({chash})"):
            yield

    def read(self, figure: str, chash: str) -> Result:
        """The stored result under ``chash`` whatever its configuration; raises :class:`UnusableResult`
        (missing, edited, truncated) with the reason."""
        jp, npp = self.json_path(figure, chash), self.npz_path(figure, chash)
        if not jp.exists():
            raise UnusableResult(f"{jp} does not exist")
        try:
            doc = json.loads(jp.read_text())
            body = {k: v for k, v in doc.items() if k != "sha256"}
            if hashlib.sha256(_canonical(body)).hexdigest() != doc.get("sha256"):
                raise UnusableResult(f"{jp} does not match its sha256 (edited or truncated)")
            rec = doc["npz"]
            if not npp.exists():
                raise UnusableResult(f"{npp} is missing")
            if npp.stat().st_size != rec["size"]:
                raise UnusableResult(f"{npp} has {npp.stat().st_size} bytes, expected {rec['size']} (truncated?)")
            data = npp.read_bytes()
            if hashlib.sha256(data).hexdigest() != rec["sha256"]:
                raise UnusableResult(f"{npp} does not match its recorded sha256 (edited?)")
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UnusableResult(f"{jp} cannot be read ({type(exc).__name__}: {exc})") from exc
        return _result(figure, doc, arrays, jp, npp, True)

    def load(self, figure: str, chash: str, config: dict) -> Result | None:
        """The cached result for exactly this configuration, or None when missing; a corrupt or stale one
        warns (:class:`StaleResultWarning`) and gives None."""
        if not self.json_path(figure, chash).exists():
            return None
        try:
            r = self.read(figure, chash)
            if r.config_hash != chash or r.config != _roundtrip(config):
                raise UnusableResult(f"{r.json_path} was written by another configuration")
            return r
        except UnusableResult as exc:
            warnings.warn(f"cached result unusable: {exc}; recomputing", StaleResultWarning, stacklevel=2)
            return None

    def save(self, figure: str, chash: str, config: dict, arrays: dict, meta: dict, extra: dict | None = None,
             compress: bool = False, npz: bytes | None = None, created: str | None = None) -> Result:
        """Write a result: its ``.npz`` (``npz``: the bytes of one already on disk that holds exactly ``arrays``,
        which is then left as it is) and its ``.json`` (``created``: keep that date instead of now)."""
        jp, npp = self.json_path(figure, chash), self.npz_path(figure, chash)
        data = save_npz_atomic(npp, arrays, compress) if npz is None else npz
        body = dict(
            figure=figure, config_hash=chash, config=_roundtrip(config), meta=jsonable(meta),
            npz=dict(file=npp.name, size=len(data), sha256=hashlib.sha256(data).hexdigest()),
            created=created or time.strftime("%Y-%m-%dT%H:%M:%S%z"), **jsonable(extra or {}),
        )
        body = _roundtrip(body)
        body["sha256"] = hashlib.sha256(_canonical(body)).hexdigest()
        if not (npz is not None and jp.is_file() and _json_or_none(jp) == body):  # unchanged: not rewritten
            atomic_write_json(jp, body)
        return _result(figure, body, {k: np.asarray(v) for k, v in arrays.items()}, jp, npp, False)


class PublishedStore(ResultStore):
    """Results committed to the repository, one per figure: ``<root>/<figure>.json`` and ``.npz`` (compressed),
    used only when their configuration (settings, training configuration, code hash) equals the current one."""

    def _path(self, figure: str, chash: str, suffix: str) -> Path:
        return self.root / f"{figure}{suffix}"

    def check(self, figure: str, chash: str, config: dict) -> Result:
        """The published result of ``figure`` if it matches this configuration; else :class:`UnusableResult`
        saying what differs."""
        r = self.read(figure, chash)
        if r.config_hash != chash:
            diff = _diff(r.config, _roundtrip(config))
            raise UnusableResult(f"{r.json_path} was computed with another configuration (config {r.config_hash}, "
                                 f"now {chash}): {diff}")
        return r

    def publish(self, result: Result) -> Result:
        """Copy ``result`` (json + npz, the npz compressed) into this store. A republish whose numbers did not change
        rewrites nothing: where the published ``.npz`` holds the same arrays (names, dtypes, shapes, every bit) it is
        kept byte for byte (a compressed archive records when it was written, so writing the same numbers again would
        make a new file), and where the rest of the result is also the same, its ``.json`` too, with its date."""
        extra = {"provenance": {k: v for k, v in result.provenance.items() if k != "created"}}
        try:
            old = self.read(result.figure, "")
        except UnusableResult:  # none published yet, or a damaged one: written anew
            old = None
        same = old is not None and same_arrays(old.arrays, result.arrays)
        npz = self.npz_path(result.figure).read_bytes() if same else None
        created = None
        if same:  # the date stays when nothing else changed either (a date differs on every computation)
            doc = json.loads(self.json_path(result.figure).read_text())
            if (doc.get("config_hash"), doc.get("config"), doc.get("meta"), doc.get("provenance")) == (
                    result.config_hash, _roundtrip(result.config), _roundtrip(jsonable(result.meta)),
                    _roundtrip(jsonable(extra["provenance"]))):
                created = doc.get("created")
        return self.save(result.figure, result.config_hash, result.config, result.arrays, result.meta, extra,
                         compress=True, npz=npz, created=created)


def _result(figure: str, doc: dict, arrays: dict, jp: Path, npp: Path, from_cache: bool) -> Result:
    """The :class:`Result` of a stored JSON document ``doc`` and its ``arrays``."""
    prov = dict(doc.get("provenance") or {}, created=doc.get("created"))
    return Result(figure, doc.get("config_hash"), doc["config"], arrays, doc.get("meta", {}), jp, npp, from_cache, prov)


def same_arrays(a: dict, b: dict) -> bool:
    """Whether two results' arrays are the same numbers: the same names, and for each the same dtype, shape and
    bits (NaN equal to NaN)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


def _json_or_none(path: Path):
    """The JSON document at ``path``, or None where it cannot be read as one."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _diff(old: dict, new: dict, prefix: str = "") -> str:
    """The first few keys whose values differ between two configurations, as text."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            d = _diff(a, b, f"{prefix}{k}.")
            if d:
                out.append(d)
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} -> {b!r}")
    return "; ".join(out[:6])