"""caijit.autotune: candidates, keys and their validation (CPU); tuning on the GPU: the
winner known by construction, template arguments, candidates that cannot launch, the
caller's arrays untouched, results remembered across processes, several processes that
agree, and graph captures left valid.

GPU tests skip without a GPU; fail with CAIJIT_REQUIRE_GPU=1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import caijit
from caijit._autotune import _default_key

gpu = pytest.mark.gpu

# Each thread spins for `cost` cycles, unless the block has `fast` threads: the fastest
# block size is known by construction.
SPIN = r"""
extern "C" __global__ void spin(float* out, long long n, int fast, long long cost) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long c = (int)blockDim.x == fast ? 0 : cost;
    long long start = clock64();
    while (clock64() - start < c) {}
    if (i < n) out[i] = 1.0f;
}
"""

# A tile size as a template argument: the larger one spins longer.
TILED = r"""
template <int TILE>
__global__ void tiled(float* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long start = clock64();
    while (clock64() - start < TILE * 2000) {}
    if (i < n) out[i] = (float)TILE;
}
"""


# ----- candidates and keys (CPU) -----


def test_configs_are_labelled_and_checked() -> None:
    assert caijit.Config(block=128).label() == "block=(128, 1, 1) shared_mem=0"
    assert caijit.Config(block=(8, 8), shared_mem=1024, template=(4, "float32"), grid=3).label() == (
        "block=(8, 8, 1) shared_mem=1024 template=<4, float32> grid=(3, 1, 1)"
    )
    k = object()
    with pytest.raises(caijit.ArgumentError, match="configs is empty"):
        caijit.autotune(k, [])
    with pytest.raises(caijit.ArgumentError, match="configs repeat"):
        caijit.autotune(k, [caijit.Config(block=128), {"block": 128}])
    with pytest.raises(caijit.ArgumentError, match="block must be 1 to 3 positive integers"):
        caijit.autotune(k, [caijit.Config(block=0)])
    t = caijit.autotune(k, [caijit.Config(block=np.int64(128), grid=lambda x: np.int32(4))])
    assert t._candidates([np.zeros(4)])[0][1:3] == ((4, 1, 1), (128, 1, 1))


def test_grids_come_from_the_config_the_launcher_or_the_first_array() -> None:
    x = np.zeros(1000, np.float32)
    t = caijit.autotune(object(), [caijit.Config(block=256), caijit.Config(block=128, grid=lambda x, n: n), caijit.Config(block=64, grid=5)])
    (_, g1, b1, _, _), (_, g2, _, _, _), (_, g3, _, _, _) = t._candidates([x, 7])
    assert (g1, b1, g2, g3) == ((4, 1, 1), (256, 1, 1), (7, 1, 1), (5, 1, 1))
    t = caijit.autotune(object(), [caijit.Config(block=100)], grid=lambda cfg, x, n: n // cfg.block)
    assert t._candidates([x, 1000])[0][1] == (10, 1, 1)
    with pytest.raises(caijit.ArgumentError, match="no array argument"):
        caijit.autotune(object(), [caijit.Config()])._candidates([3])


def test_keys_bucket_calls() -> None:
    x, y = np.zeros((2, 3), np.float32), np.zeros(4, np.int64)
    assert _default_key([x, 2.0, y]) == (((2, 3), "float32"), ((4,), "int64"))
    t = caijit.autotune(object(), [caijit.Config()], key=lambda x, n: n.bit_length())
    assert t._key([x, 1000]) == t._key([x, 1023]) != t._key([x, 1024])


# ----- on the GPU -----


def _out(n: int) -> Any:
    return caijit.zeros(n, "float32")


@gpu
def test_the_fastest_block_size_is_chosen() -> None:
    k = caijit.kernel(SPIN, "spin")
    n = 1 << 16
    configs = [caijit.Config(block=b) for b in (128, 256, 512)]
    for fast in (128, 256, 512):
        out = _out(n)
        tuned = caijit.autotune(k, configs, key=lambda out, n, fast, cost: fast)
        r = tuned.result(out, n, fast, 200_000)
        assert r.config == f"block=({fast}, 1, 1) shared_mem=0", r.table()
        assert all("median_us" in t for t in r.trials), r.table()


@gpu
def test_a_template_argument_is_tuned() -> None:
    k = caijit.kernel(TILED, "tiled")
    out = _out(1024)
    tuned = caijit.autotune(k, [caijit.Config(block=256, template=(t,)) for t in (64, 1, 16)])
    r = tuned.result(out, 1024)
    assert r.config.endswith("template=<1>"), r.table()
    tuned(out, 1024)
    assert (out.copy_to_host() == 1.0).all()


@gpu
def test_candidates_that_cannot_launch_are_skipped_with_their_reason() -> None:
    k = caijit.kernel(SPIN, "spin")
    out = _out(4096)
    configs = [caijit.Config(block=2048), caijit.Config(block=128, shared_mem=1 << 30), caijit.Config(block=256)]
    r = caijit.autotune(k, configs).result(out, 4096, 0, 0)
    assert "failed" in r.trials[0] and "failed" in r.trials[1], r.table()
    assert r.best == 2
    assert "failed" in r.table()
    with pytest.raises(caijit.ArgumentError, match="no candidate of kernel `spin` could be launched"):
        caijit.autotune(k, configs[:2]).result(out, 4096, 0, 0)


@gpu
def test_tuning_leaves_the_callers_arrays_as_they_were() -> None:
    k = caijit.kernel(SPIN, "spin")
    out = _out(4096)
    tuned = caijit.autotune(k, [caijit.Config(block=b) for b in (128, 256)])
    tuned.result(out, 4096, 0, 0)
    assert (out.copy_to_host() == 0.0).all(), "tuning wrote the caller's array"
    tuned(out, 4096, 0, 0)
    assert (out.copy_to_host() == 1.0).all()


_PROCESS = textwrap.dedent(
    r"""
    import json, sys
    import caijit
    k = caijit.kernel(sys.argv[1], "spin")
    out = caijit.zeros(1 << 14, "float32")
    tuned = caijit.autotune(k, [caijit.Config(block=b) for b in (128, 256, 512)])
    r = tuned.result(out, 1 << 14, 256, 100_000)
    tuned(out, 1 << 14, 256, 100_000)
    ok = bool((out.copy_to_host() == 1.0).all())
    s = caijit.stats()
    print(json.dumps({"best": r.best, "tunings": s["tunings"], "tune_launches": s["tune_launches"], "from_disk": r.from_disk,
                      "source": r.source, "ok": ok, "compiles": s["compiles"]}))
    """
)


def _processes(n: int, cache: str, **env_extra: str) -> list[dict[str, Any]]:
    drop = ("CAIJIT_RECORD", "CAIJIT_BUNDLES", "CAIJIT_NVRTC_PATH")
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, "CAIJIT_CACHE_DIR": cache, **env_extra}
    procs = [subprocess.Popen([sys.executable, "-c", _PROCESS, SPIN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@gpu
def test_a_second_process_reads_the_result_and_makes_no_timing_launch(tmp_path: Any) -> None:
    first = _processes(1, str(tmp_path))[0]
    assert first["tunings"] == 1 and first["tune_launches"] > 0 and not first["from_disk"]
    second = _processes(1, str(tmp_path))[0]
    assert (second["tunings"], second["tune_launches"], second["from_disk"], second["best"]) == (0, 0, True, first["best"])


@gpu
def test_a_bundle_ships_the_result_to_a_process_without_nvrtc_or_cache(tmp_path: Any) -> None:
    manifest = tmp_path / "manifest.json"
    first = _processes(1, str(tmp_path / "cache"), CAIJIT_RECORD=str(manifest))[0]
    assert (first["source"], first["ok"]) == ("measured", True) and first["tune_launches"] > 0, first
    assert '"tuning"' in manifest.read_text()
    major, minor = caijit._native.device_info(0)[1]
    bundle = tmp_path / "app.caijit"
    cli = [sys.executable, "-m", "caijit", "bundle"]
    b = subprocess.run([*cli, "build", str(manifest), "--arch", f"sm_{major}{minor}", "-o", str(bundle)], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stderr
    info = subprocess.run([*cli, "info", str(bundle)], capture_output=True, text=True, timeout=300)
    assert info.returncode == 0 and "1 tunings" in info.stdout and "kernel spin on" in info.stdout, info.stdout + info.stderr
    # A fresh cache and no NVRTC: the bundle's result and code, nothing timed or compiled.
    no_nvrtc = {"CAIJIT_BUNDLES": str(bundle), "CAIJIT_NVRTC_PATH": "/nonexistent/libnvrtc.so.13"}
    shipped = _processes(1, str(tmp_path / "fresh"), **no_nvrtc)[0]
    assert (shipped["source"], shipped["best"], shipped["ok"]) == ("bundle", first["best"], True), shipped
    assert (shipped["tunings"], shipped["tune_launches"], shipped["compiles"]) == (0, 0, 0), shipped


@gpu
def test_processes_tuning_together_agree_and_tune_once(tmp_path: Any) -> None:
    results = _processes(4, str(tmp_path))
    assert sum(r["tunings"] for r in results) == 1, results
    assert len({r["best"] for r in results}) == 1, results


@gpu
def test_tuning_under_a_capture_is_refused_and_the_capture_stays_valid() -> None:
    torch = pytest.importorskip("torch")
    k = caijit.kernel(SPIN, "spin")
    x = torch.zeros(1024, device="cuda")
    tuned = caijit.autotune(k, [caijit.Config(block=b) for b in (128, 256)], key=lambda out, n, fast, cost: ("capture", fast))
    tuned(x, 1024, 0, 0)  # warms the kernel (and tunes this key) before the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            with pytest.raises(caijit.LaunchError, match="being captured"):
                tuned(x, 1024, 1, 0)  # an untuned key
            tuned(x, 1024, 0, 0)  # the known key: launched, captured
    x.zero_()
    g.replay()
    torch.cuda.synchronize()
    assert bool((x == 1).all())
