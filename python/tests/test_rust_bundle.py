"""The Rust example that ships its kernels in a bundle (examples/rust-bundle), on the CPU:
its bundle baked with the CLI (`--instantiate`), the example built against cai-runtime without
the `nvrtc` feature (so CI proves that build compiles and links no NVRTC code), and run
with `--inspect`: the template's instances deduced and laid out from the embedded bundle,
with NVRTC nowhere to be found. scripts/gpu-run.sh runs it on a GPU (values checked)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import nvrtc_missing

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rust-bundle"


pytestmark = [
    pytest.mark.skipif(shutil.which("cargo") is None, reason="no cargo: the example is built where Rust is (the GPU machine runs the binary)"),
    pytest.mark.skipif(nvrtc_missing() is not None, reason=str(nvrtc_missing())),
]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's binary, built (debug, in the workspace's target directory, whose
    dependencies it reuses) around a bundle of its kernel's float and double instances."""
    tmp = tmp_path_factory.mktemp("rust-bundle")
    bake = [sys.executable, "-m", "caijit", "bundle", "build", str(EXAMPLE / "kernels" / "axpy.cu"), "--instantiate", "axpy<float>"]
    bake += ["--instantiate", "axpy<double>", "--arch", "sm_90", "--no-ptx", "-o", str(tmp / "axpy.caijit")]
    r = subprocess.run(bake, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    # The file's program and its two instances' (one source: compiled as one).
    assert "3 programs as 1 for sm_90" in r.stdout, r.stdout
    env = {**os.environ, "CAIJIT_EXAMPLE_BUNDLE": str(tmp / "axpy.caijit"), "CARGO_TARGET_DIR": str(REPO / "target")}
    build = ["cargo", "build", "--locked", "--manifest-path", str(EXAMPLE / "Cargo.toml")]
    r = subprocess.run(build, capture_output=True, text=True, timeout=1500, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return REPO / "target" / "debug" / "rust-bundle-example"


def run(binary: Path, arch: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAIJIT_NVRTC_PATH": "/nonexistent/libnvrtc.so", "CAIJIT_ARCH": arch, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([str(binary), "--inspect"], capture_output=True, text=True, timeout=120, env=env)


def test_the_example_has_no_nvrtc_code_and_serves_its_template_from_the_bundle(example: Path) -> None:
    # cudarc's NVRTC loader (and caijit's) names every NVRTC function it resolves: none is
    # in a build without the feature.
    assert b"nvrtcCompileProgram" not in example.read_bytes()
    r = run(example, "sm_90")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "float32: axpy<float>(float a, const float* x, float* y, long long n) for sm_90, from the bundle" in r.stdout, r.stdout
    assert "float64: axpy<double>(double a, const double* x, double* y, long long n) for sm_90, from the bundle" in r.stdout
    assert "no libnvrtc in /proc/self/maps" in r.stdout and r.stdout.strip().endswith("rust-bundle example: OK")


def test_an_architecture_the_bundle_lacks_is_an_error_and_a_failure(example: Path) -> None:
    r = run(example, "sm_75")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no code for this device's architecture sm_75" in r.stderr and "(it has: sm_90)" in r.stderr, r.stderr
    assert r.stdout.strip().endswith("rust-bundle example: FAILED")
