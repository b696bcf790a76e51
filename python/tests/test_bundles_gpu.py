"""Kernel bundles on a GPU, in processes where NVRTC cannot be loaded (CAIJIT_NVRTC_PATH
names nothing, so neither the pip NVRTC nor the toolkit's is searched; `libnvrtc` must
not be mapped at the end): `caijit.ops` on PyTorch and CuPy arrays, a template kernel in
several dtypes and a `caijit.jax.kernel_call`, all recorded by a run with NVRTC and baked
into a bundle first; values checked against NumPy; and the error for an instance the
bundle lacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import caijit
from conftest import REQUIRE_GPU, has

gpu = pytest.mark.gpu

# Run with NVRTC (recording) and without (from the bundle): the same work, checked.
WORK = r'''
import json, sys
import numpy as np
import caijit
import caijit.ops as ops

AXPY_T = """
template <typename T> __global__ void axpy_g(T a, const T* x, T* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
done = []
rng = np.random.default_rng(0)

def check(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol=tol, atol=tol)

# A template kernel in several dtypes, deduced from its arguments.
k = caijit.kernel(AXPY_T)
for dtype in (["float32", "float64", "int32"] if "template" in sys.argv else []):
    x = (rng.uniform(-5, 5, 1000)).astype(dtype)
    y = (rng.uniform(-5, 5, 1000)).astype(dtype)
    dy = caijit.to_device(y)
    k.forall(1000)(np.dtype(dtype).type(3), caijit.to_device(x), dy, 1000)
    check(dy.copy_to_host(), 3 * x + y)
    done.append(f"axpy_g {dtype}")

if "miss" in sys.argv:
    try:
        k.forall(10)(np.int16(1), caijit.zeros(10, "int16"), caijit.zeros(10, "int16"), 10)
    except caijit.BundleError as e:
        done.append("miss: " + str(e))

# Whether caijit mapped NVRTC: read before PyTorch, CuPy or JAX are imported (they may map
# the machine's NVRTC themselves).
caijit_mapped_nvrtc = "libnvrtc" in open("/proc/self/maps").read()

if "torch" in sys.argv:
    import torch
    for dtype in [torch.float32, torch.float16]:
        a = torch.randn(300, 200, device="cuda", dtype=dtype)
        b = torch.randn(200, device="cuda", dtype=dtype)
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        check(torch.as_tensor(ops.add(a, b[None, :]), device="cuda").cpu().float(), (a + b).cpu().float(), tol)
        check(torch.as_tensor(ops.softmax(a), device="cuda").cpu().float(), torch.softmax(a.float(), -1).cpu(), tol)
        check(float(np.asarray(torch.as_tensor(ops.sum(a), device="cuda").cpu().float())), float(a.float().sum()), 0.5)
        y = torch.randn(1000, device="cuda", dtype=dtype)
        want = 2 * y.float()
        ops.axpy(1.0, y, y, out=y)
        check(y.cpu().float(), want.cpu(), tol)
        done.append(f"ops torch {dtype}")
    t = torch.randn(64, 48, device="cuda").t()
    check(torch.as_tensor(ops.ascontiguous(t), device="cuda").cpu(), t.contiguous().cpu())
    done.append("ops torch ascontiguous")

if "cupy" in sys.argv:
    import cupy as cp
    for dtype in ["float32", "float64", "int32"]:
        a = cp.asarray(rng.uniform(-9, 9, (50, 40)).astype(dtype))
        check(cp.asnumpy(cp.asarray(ops.multiply(a, a))), cp.asnumpy(a * a))
        check(cp.asnumpy(cp.asarray(ops.cast(a, "float32"))), cp.asnumpy(a.astype("float32")))
        check(cp.asnumpy(cp.asarray(ops.transpose(a))), cp.asnumpy(a.T))
        done.append(f"ops cupy {dtype}")

if "jax" in sys.argv:
    import jax
    import caijit.jax as cjax
    f = cjax.kernel_call(caijit.kernel(AXPY_T), lambda x, y: x, grid=lambda x, y: (x.size + 255) // 256, block=256,
                         input_output_aliases={1: 0}, a=np.float32(2), n=lambda x, y: x.size)
    x = jax.numpy.asarray(rng.uniform(-2, 2, 3000).astype(np.float32))
    y = jax.numpy.asarray(rng.uniform(-2, 2, 3000).astype(np.float32))
    check(jax.jit(f)(x, y), 2 * np.asarray(x) + np.asarray(y))
    done.append("jax kernel_call")

s = caijit.stats()
print(json.dumps({"done": done, "compiles": s["compiles"], "bundle_hits": s["bundle_hits"],
                  "nvrtc_mapped": caijit_mapped_nvrtc, "nvrtc_mapped_at_exit": "libnvrtc" in open("/proc/self/maps").read()}))
'''


def jax_gpus() -> int:
    code = "import jax\ntry: print(len(jax.devices('gpu')))\nexcept RuntimeError: print(0)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return int(r.stdout.strip() or 0) if r.returncode == 0 else 0


def run(tmp: Path, args: list[str], **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("CAIJIT_RECORD", "CAIJIT_BUNDLES", "CAIJIT_NVRTC_PATH")}
    r = subprocess.run([sys.executable, "work.py", *args], capture_output=True, text=True, timeout=600, cwd=tmp, env={**base, **env})
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@gpu
def test_ops_template_kernels_and_jax_launch_from_a_bundle_without_nvrtc(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(WORK)
    peers = [p for p in ("torch", "cupy") if has(p)]
    jax_ok = has("jax") and jax_gpus() > 0
    if REQUIRE_GPU and (len(peers) < 2 or not jax_ok):
        pytest.fail(f"CAIJIT_REQUIRE_GPU=1 but not all of PyTorch, CuPy and JAX on the GPU are here (found {peers}, JAX: {jax_ok})")
    recorded = run(tmp_path, ["template", *peers], CAIJIT_RECORD=str(tmp_path / "manifest.json"))
    if jax_ok:
        # JAX in its own processes (its runtime is not mixed with PyTorch's here).
        run(tmp_path, ["jax"], CAIJIT_RECORD=str(tmp_path / "manifest.json"))
    major, minor = caijit._native.device_info(0)[1]
    arch = f"sm_{major}{minor}"
    b = subprocess.run(
        [sys.executable, "-m", "caijit", "bundle", "build", "manifest.json", "--arch", arch, "-o", "app.caijit"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert b.returncode == 0, b.stderr
    no_nvrtc = {"CAIJIT_BUNDLES": str(tmp_path / "app.caijit"), "CAIJIT_NVRTC_PATH": "/nonexistent/libnvrtc.so.13"}
    # caijit alone (a template kernel in three dtypes, the miss): NVRTC is never mapped.
    replay = run(tmp_path, ["template", "miss"], **no_nvrtc)
    assert replay["compiles"] == 0 and replay["bundle_hits"] > 0, replay
    assert replay["nvrtc_mapped"] is False and replay["nvrtc_mapped_at_exit"] is False, replay
    # With PyTorch and CuPy (caijit.ops on their arrays): nothing compiled, caijit mapped no
    # NVRTC before they were imported (they may map the machine's own afterwards).
    peers_replay = run(tmp_path, ["template", *peers], **no_nvrtc)
    assert peers_replay["done"] == recorded["done"], peers_replay
    assert peers_replay["compiles"] == 0 and peers_replay["bundle_hits"] > 0 and peers_replay["nvrtc_mapped"] is False, peers_replay
    miss = replay["done"][-1]
    assert miss.startswith("miss: no loaded bundle holds the kernel instance"), miss
    assert "axpy_g<short>" in miss and "app.caijit" in miss and "CAIJIT_RECORD" in miss, miss
    if jax_ok:
        j = run(tmp_path, ["jax"], **no_nvrtc)
        assert j["done"][-1] == "jax kernel_call" and j["compiles"] == 0 and j["bundle_hits"] > 0, j


@gpu
@pytest.mark.skipif(not os.path.isfile(caijit.bundles.OPS_BUNDLE), reason="no precompiled kernel library here (scripts/build-wheel.sh bakes it)")
def test_the_precompiled_kernel_library_needs_no_nvrtc(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(WORK)
    peers = [p for p in ("torch", "cupy") if has(p)]
    if not peers:
        pytest.skip("neither PyTorch nor CuPy is installed")
    got = run(tmp_path, ["packaged", *peers], CAIJIT_NVRTC_PATH="/nonexistent/libnvrtc.so.13")
    assert any(d.startswith("ops ") for d in got["done"]), got
    assert got["compiles"] == 0 and got["bundle_hits"] > 0 and got["nvrtc_mapped"] is False, got
