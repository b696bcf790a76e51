"""The repository stands alone: no tracked file points at a file outside it (CPU)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A document named anywhere, or a script named in the docs, is one of the repository's.
DOCUMENT = re.compile(r"(?<![$\w/.-])([\w./-]+\.md)\b")
SCRIPT = re.compile(r"`([\w./-]+\.(?:py|sh|cu|rs))`")
# A relative path that climbs: it must stay inside the repository.
CLIMB = re.compile(r"(?:\.\./)+[\w.-]+")


def tracked_files() -> list[str]:
    """The repository's files: tracked ones, and those of the work tree git does not ignore
    (a copy of a work tree whose index lags behind its files has them too; a clean clone
    has none)."""
    if shutil.which("git") is None or not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    return sorted({f for f in out.stdout.decode().split("\0") if f})


def text_of(name: str) -> str | None:
    path = os.path.join(ROOT, name)
    if not os.path.isfile(path):
        return None  # deleted in the work tree, not yet in the index
    with open(path, "rb") as f:
        data = f.read()
    return None if b"\0" in data[:8192] else data.decode("utf-8", errors="replace")


def outside_references(name: str, text: str, files: set[str]) -> list[str]:
    """The references of file `name` (tracked, with contents `text`) to files the
    repository does not have: documents by name anywhere; scripts, and climbing relative
    paths, in the docs and the scripts."""
    basenames = {os.path.basename(f) for f in files}
    found = [m for m in DOCUMENT.findall(text) if os.path.basename(m) not in basenames]
    if name.endswith((".md", ".sh", ".toml")):
        found += [m for m in SCRIPT.findall(text) if os.path.basename(m) not in basenames]
    if name.endswith(".md"):  # (a script's paths are relative to where it cd's)
        here = os.path.dirname(os.path.join(ROOT, name))
        found += [m for m in CLIMB.findall(text) if not os.path.abspath(os.path.join(here, m)).startswith(ROOT + os.sep)]
    return found


def test_no_tracked_file_points_outside_the_repository() -> None:
    files = set(tracked_files())
    found = []
    for name in sorted(files - {"python/tests/test_repository.py"}):  # (its own examples)
        text = text_of(name)
        if text is not None:
            found += [f"{name}: {ref}" for ref in outside_references(name, text, files)]
    assert not found, "references to files the repository does not have:\n" + "\n".join(found)


def test_the_check_sees_documents_scripts_and_paths_beside_the_repository() -> None:
    files = {"README.md", "docs/benchmarks.md", "python/benchmarks/bench_ops.py"}
    readme = "See `docs/benchmarks.md`, `python/benchmarks/bench_ops.py` and ../cai-runtime/src."
    assert outside_references("docs/x.md", readme, files) == []
    beside = "The contract: ../beside/CONTRACT.md; the notes in NOTES.md; `exp_cast9.py`."
    assert outside_references("README.md", beside, files) == ["../beside/CONTRACT.md", "NOTES.md", "exp_cast9.py", "../beside"]


def test_the_example_extension_has_a_committed_lock_file() -> None:
    with open(os.path.join(ROOT, ".gitignore")) as f:
        assert "rust-extension/Cargo.lock" not in f.read()
    assert os.path.isfile(os.path.join(ROOT, "examples", "rust-extension", "Cargo.lock"))
    with open(os.path.join(ROOT, "scripts", "setup.sh")) as f:
        setup = f.read()
    assert "maturin develop --release --locked" in setup.split("examples/rust-extension", 1)[1]
