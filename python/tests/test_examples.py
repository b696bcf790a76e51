"""The examples: type-checked with mypy --strict against the stubs (CPU), run on the GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import gpu_unavailable_reason, jax_missing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Type-checked for the lowest Python caijit supports (pyproject.toml's requires-python).
LOWEST_PYTHON = ["--python-version", "3.10"]
EXAMPLES = sorted(os.path.join(ROOT, "examples", f) for f in os.listdir(os.path.join(ROOT, "examples")) if f.endswith(".py"))


# The type checks read JAX's types (caijit.jax, example 05): no JAX, no check (there is no
# JAX for Python 3.10 that caijit.jax works with; CI checks on 3.13, for --python-version 3.10).
def _why_no_type_check() -> str | None:
    if importlib.util.find_spec("mypy") is None:
        return "mypy is not installed: pip install './python[typecheck]' (scripts/setup.sh installs it)"
    return jax_missing()


NO_TYPE_CHECK = _why_no_type_check() is not None


@pytest.mark.skipif(NO_TYPE_CHECK, reason=str(_why_no_type_check()))
def test_examples_type_check_strictly() -> None:
    plain = [e for e in EXAMPLES if "torch" not in os.path.basename(e)]
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *LOWEST_PYTHON, "--ignore-missing-imports", "--no-incremental", *plain],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_runs(path: str) -> None:
    if "distributed" in os.path.basename(path):
        pytest.skip("one process per GPU: test_multi_gpu.py runs it where two GPUs are present")
    for lib in ("torch", "cupy", "jax"):
        if lib in os.path.basename(path) and importlib.util.find_spec(lib) is None:
            pytest.skip(f"{lib} is not installed")
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=600, cwd="/tmp")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_without_a_gpu_says_what_it_needs(path: str) -> None:
    """Where an example cannot run (no GPU, or a library it needs is missing), it says so
    in one line and exits with status 0, without a traceback."""
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: test_example_runs runs the examples")
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300, cwd="/tmp")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("this example needs "), r.stdout + r.stderr


@pytest.mark.skipif(NO_TYPE_CHECK, reason=str(_why_no_type_check()))
def test_package_type_checks_strictly() -> None:
    pkg = os.path.join(ROOT, "python", "caijit")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *LOWEST_PYTHON, "--no-incremental", pkg], capture_output=True, text=True, cwd=os.path.join(ROOT, "python")
    )
    assert r.returncode == 0, r.stdout + r.stderr
