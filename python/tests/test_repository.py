"""The repository stands alone: no tracked file points at a file outside it (CPU)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Files that lived beside the repository (or in throwaway experiments), never in it.
OUTSIDE = ["../shared", "DESIGN.md", "MEASURED.md", "STYLE.md", "exp_cast3.py"]


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f]


def test_no_tracked_file_points_outside_the_repository() -> None:
    found = []
    for name in tracked_files():
        if name == "python/tests/test_repository.py":
            continue
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path):
            continue  # deleted in the work tree, not yet in the index
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            continue  # binary (the chart)
        text = data.decode("utf-8", errors="replace")
        for i, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{i}: {needle}" for needle in OUTSIDE if needle in line]
    assert not found, "references to files outside the repository:\n" + "\n".join(found)


def test_the_example_extension_has_a_committed_lock_file() -> None:
    with open(os.path.join(ROOT, ".gitignore")) as f:
        assert "rust-extension/Cargo.lock" not in f.read()
    assert os.path.isfile(os.path.join(ROOT, "examples", "rust-extension", "Cargo.lock"))
    with open(os.path.join(ROOT, "scripts", "setup.sh")) as f:
        setup = f.read()
    assert "maturin develop --release --locked" in setup.split("examples/rust-extension", 1)[1]
