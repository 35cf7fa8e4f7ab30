"""curvature_gap.provenance (where numbers come from) and curvature_gap.io (atomic, verifiable files)."""
from __future__ import annotations

import json
import multiprocessing
import os
import time

import numpy as np
import pytest
import torch

import curvature_gap.io as cio
from curvature_gap import provenance as pv

def test_host_software_git_and_load():
    h = pv.host()
    assert set(h) >= {"cpu", "virtual", "cpus", "memory_gib", "gpu", "machine", "system"} and h["cpus"] >= 1
    s = pv.software()
    assert s["torch"] == torch.__version__ and s["numpy"] == np.__version__ and s["python"]
    g = pv.git_commit()
    assert set(g) == {"commit", "dirty"}
    assert pv.git_commit("/") == {"commit": None, "dirty": None}
    la = pv.load_average()
    assert la is None or la >= 0


# ---------------------------------------------------------------------------------------------- io
@pytest.mark.fault("killed-while-writing")
def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    cio.atomic_write_json(target, {"finished": True})
    before = target.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(cio.os, "fsync", disk_full)
        with pytest.raises(OSError, match="No space left"):
            cio.atomic_write_json(target, {"finished": False, "payload": list(range(1000))})
        with pytest.raises(OSError, match="No space left"):
            cio.save_npz_atomic(tmp_path / "result.npz", {"x": np.arange(3)})
    with pytest.raises(OSError):
        cio.atomic_write_bytes(target / "under-a-file", b"data")  # a file where a directory should be
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"], "no temporary file is left behind"


def test_json_npz_and_torch_files(tmp_path):
    cio.atomic_write_json(tmp_path / "a" / "x.json", {"b": np.float32(1.5), "a": (1, np.int64(2)), "n": float("inf"),
                                                      "arr": np.arange(2), "p": tmp_path})
    doc = json.loads((tmp_path / "a" / "x.json").read_text())
    assert doc == {"a": [1, 2], "arr": [0, 1], "b": 1.5, "n": "inf", "p": str(tmp_path)}
    assert list(doc) == ["a", "arr", "b", "n", "p"], "keys sorted"
    data = cio.save_npz_atomic(tmp_path / "x.npz", {"w": np.ones((2, 2))})
    assert (tmp_path / "x.npz").read_bytes() == data
    with np.load(tmp_path / "x.npz") as z:
        assert z["w"].sum() == 4
    state = {"w": torch.arange(4.0), "b": torch.zeros(2)}
    sha = cio.save_torch(tmp_path / "m.pt", {"model": state, "step": 3})
    assert sha == cio.sha256_bytes((tmp_path / "m.pt").read_bytes())
    assert cio.load_torch(tmp_path / "m.pt")["step"] == 3
    assert cio.state_sha256(state) == cio.state_sha256(dict(reversed(list(state.items()))))
    assert cio.state_sha256(state) != cio.state_sha256({"w": torch.arange(4.0), "b": torch.ones(2)})
    assert cio.state_sha256({"w": torch.arange(4.0)}) != cio.state_sha256({"w": torch.arange(4.0).double()})


def _hold(path, ready, seconds):
    with cio.file_lock(path, "the test"):
        ready.set()
        time.sleep(seconds)
        (path.parent / "released").write_text("the holder's last act under the lock")


def test_file_lock_serialises_processes_and_says_so(tmp_path, capfd):
    mp = multiprocessing.get_context("fork")
    ready = mp.Event()
    p = mp.Process(target=_hold, args=(tmp_path / ".lock", ready, 1.0))
    p.start()
    assert ready.wait(60)
    with cio.file_lock(tmp_path / ".lock", "the test"):
        assert (tmp_path / "released").exists(), "acquired only after the holder finished"
    p.join(30)
    assert p.exitcode == 0
    assert "waiting for another process working on the test" in capfd.readouterr().err
    with cio.file_lock(tmp_path / ".lock"):       # free again: no waiting message
        pass
    assert "waiting" not in capfd.readouterr().err
    assert os.path.exists(tmp_path / ".lock")


def test_atomic_writes_give_the_mode_open_would_give(tmp_path):
    """mkstemp creates 0600 files; a result written atomically must be readable like any other file."""
    cio.atomic_write_text(tmp_path / "a.txt", "x")
    (tmp_path / "b.txt").write_text("x")
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == (tmp_path / "b.txt").stat().st_mode & 0o777


def test_git_commit_can_leave_out_the_published_results(tmp_path):
    """verify's rows are computed from results `publish` has just written: those files alone do not make
    the rows' commit dirty, any other tracked change does."""
    import subprocess

    from curvature_gap.provenance import git_commit

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "r.json").write_text("1")
    (tmp_path / "code.py").write_text("x = 1")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    (tmp_path / "published" / "r.json").write_text("2")
    assert git_commit(tmp_path)["dirty"] is True
    assert git_commit(tmp_path, ignore=("published",))["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2")
    assert git_commit(tmp_path, ignore=("published",))["dirty"] is True
