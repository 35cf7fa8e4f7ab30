"""A clone a reader can afford: no large binary is tracked outside ``published/``, and ``published/`` stays small.

Screenshots of the book are taken by ``make book-check`` into ``_build/screenshots/`` and never committed (CI keeps
them as an artefact); ``published/`` holds what the pages and checks read (norms where a page plots norms, not the
dense matrices), and ``make publish`` rewrites no file whose numbers did not change
(:meth:`curvature_gap.experiments.store.PublishedStore.publish`). Every version of a tracked file stays in the
history of every clone, so a file retaken or republished on each round weighs many times its size.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_BINARY_BYTES = 1_000_000        # a tracked binary outside published/
MAX_PUBLISHED_BYTES = 20_000_000    # published/, all of it
SNIFF = 8000                        # as git itself: a file with a NUL byte in its first 8,000 is binary


def tracked_files(root: Path = ROOT) -> list[Path]:
    """The files git tracks in ``root`` (in the index), that exist in the work tree."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout ({exc}): nothing is tracked")
    return [p for p in (root / f for f in out.decode().split("\0") if f) if p.is_file() and not p.is_symlink()]


def is_binary(path: Path) -> bool:
    with open(path, "rb") as fh:
        return b"\0" in fh.read(SNIFF)


def heavy_binaries(files: list[Path], root: Path = ROOT) -> list[str]:
    """``path (N bytes)`` of each binary over :data:`MAX_BINARY_BYTES` outside ``published/``."""
    return [f"{p.relative_to(root)} ({p.stat().st_size:,} bytes)" for p in files
            if p.relative_to(root).parts[0] != "published" and p.stat().st_size > MAX_BINARY_BYTES and is_binary(p)]


def published_bytes(files: list[Path], root: Path = ROOT) -> int:
    return sum(p.stat().st_size for p in files if p.relative_to(root).parts[0] == "published")


def test_no_tracked_binary_over_1_mb_outside_published():
    heavy = heavy_binaries(tracked_files())
    assert not heavy, ("tracked binaries over 1 MB (every version stays in every clone's history; screenshots belong "
                       "under _build/screenshots/, untracked): " + ", ".join(heavy))


def test_published_stays_under_20_mb():
    n = published_bytes(tracked_files())
    assert n <= MAX_PUBLISHED_BYTES, (
        f"published/ holds {n / 1e6:.1f} MB, over {MAX_PUBLISHED_BYTES / 1e6:.0f} MB: store what the pages and checks "
        "read (norms, not dense matrices, where a page plots norms), then `make reproduce && make publish`")


def test_the_checks_see_a_heavy_binary_and_a_heavy_published(tmp_path):
    """Each check fails where it should: a 1.1 MB binary outside published/ (not a text file of that size, not one
    inside published/), and published/ over 20 MB."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "published").mkdir()
    shot = tmp_path / "docs" / "shot.png"
    shot.write_bytes(b"\x89PNG\0" + b"x" * 1_100_000)
    text = tmp_path / "docs" / "long.md"
    text.write_text("a line\n" * 200_000)
    inside = tmp_path / "published" / "r.npz"
    inside.write_bytes(b"PK\0" + b"y" * 1_100_000)
    files = [shot, text, inside]
    assert heavy_binaries(files, tmp_path) == ["docs/shot.png (1,100,005 bytes)"]
    assert published_bytes(files, tmp_path) == 1_100_003
    big = tmp_path / "published" / "big.npz"
    with open(big, "wb") as fh:
        fh.truncate(MAX_PUBLISHED_BYTES)
    assert published_bytes(files + [big], tmp_path) > MAX_PUBLISHED_BYTES
