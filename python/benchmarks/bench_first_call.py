"""The first call in a fresh process, to the result on the host: NVRTC cold, disk cache
warm, and from a bundle (with NVRTC made unloadable), for `caijit.ops.add` on two float32
PyTorch tensors (allocating its result, and into a given `out=`) and for a recorded user
template kernel; then `bundle build` times for the
kernel library and for a 50-instance manifest, serial (-j 1) and parallel.

Every figure comes from its own fresh process (the median of REPS). What a process pays
before caijit (starting Python, importing PyTorch, creating the CUDA context and the
inputs, PyTorch's first copy kernel and its first copy to the host) is outside the timed
part: "import" is `import caijit`, "first call" runs from after the import to the result
copied to the host (its values are checked after the clock stops), "the call" to the
return of the launching call. The bundle runs of the three calls take turns.

Needs a GPU and PyTorch: python python/benchmarks/bench_first_call.py
(CAIJIT_BENCH_QUICK=1: fewer repetitions, no serial bake of the kernel library;
CAIJIT_BENCH_BUNDLE_ONLY=1: only the bundle rows; CAIJIT_BENCH_BASE=DIR: the bundle rows
also for an earlier build installed in DIR, taking turns with this one.)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = os.environ.get("CAIJIT_BENCH_QUICK") == "1"
# CAIJIT_BENCH_BUNDLE_ONLY=1: only the bundle rows (a minute: no NVRTC, no bake times).
BUNDLE_ONLY = os.environ.get("CAIJIT_BENCH_BUNDLE_ONLY") == "1"
# CAIJIT_BENCH_BASE=DIR: the bundle rows also for the caijit installed in DIR (an earlier
# build of this version, `pip install --no-deps --target DIR`, which reads the bundles this
# one bakes), the two builds taking turns in every round: an A/B on one machine.
BASE = os.environ.get("CAIJIT_BENCH_BASE") and str(Path(os.environ["CAIJIT_BENCH_BASE"]).resolve())
REPS = 3 if QUICK else 7
NO_NVRTC = "/nonexistent/libnvrtc.so"
# Elements of each input (float32): a launch and a copy to the host of 256 KiB.
N = 1 << 16

# The child: inputs ready before the clock starts; then import caijit, one call, result on the host.
CHILD = r"""
import json, os, sys, time
import torch
what = sys.argv[1]
a = torch.arange(N, dtype=torch.float32, device="cuda")
b = torch.ones(N, dtype=torch.float32, device="cuda")
c = torch.empty(N, dtype=torch.float32, device="cuda")
# PyTorch's own first-time work happens here, outside the timing: its first copy kernel
# (b.clone()) and its first copy to the host.
y = b.clone()
b[:1].cpu()
import numpy as np
torch.cuda.synchronize()
t0 = time.perf_counter()
import caijit
t1 = time.perf_counter()
if what == "ops":
    r = caijit.ops.add(a, b)
    t_call = time.perf_counter()
    host = r.cpu() if hasattr(r, "cpu") else r.copy_to_host()  # ops on tensors give tensors
elif what == "ops_out":
    caijit.ops.add(a, b, out=c)
    t_call = time.perf_counter()
    host = c.cpu()
else:
    k = caijit.kernel(SRC)
    k[256, 256](np.float32(2), a, y, a.numel())
    t_call = time.perf_counter()
    host = y.cpu()
t2 = time.perf_counter()
expected = 2.0 * 12345 + 1 if what == "template" else 12346.0
ok = float(host[12345]) == expected
s = caijit._native.stats()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_ms": (t2 - t1) * 1e3, "call_ms": (t_call - t1) * 1e3,
                  "ok": ok, "compiles": s["compiles"], "bundle_hits": s["bundle_hits"], "caijit": caijit.__file__,
                  "nvrtc_mapped": "libnvrtc" in open("/proc/self/maps").read()}))
"""

SRC = r"""
template <typename T>
__global__ void axpy(T a, const T* x, T* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}
"""

# 50 instances of one template: 25 tile sizes x 2 dtypes.
MANY = r"""
template <typename T, int K>
__global__ void tile_sum(const T* x, T* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i * K >= n) return;
    T s = 0;
    #pragma unroll
    for (int j = 0; j < K; ++j) s += (i * K + j < n) ? x[i * K + j] : T(0);
    y[i] = s;
}
"""


def child(what: str, env: dict[str, str], cwd: Path) -> dict:
    code = f"SRC = {SRC!r}\nN = {N}\n" + CHILD
    r = subprocess.run([sys.executable, "-c", code, what], capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"{what}: {r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if not got["ok"]:
        raise RuntimeError(f"{what}: wrong result {got}")
    return got


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CAIJIT_RECORD", "CAIJIT_BUNDLES", "CAIJIT_NVRTC_PATH", "CAIJIT_CACHE")}
    env["CAIJIT_PACKAGED_BUNDLE"] = "0"
    return env


def scenarios(what: str, work: Path) -> dict[str, list[dict]]:
    """Cold (fresh cache each time) and warm (one cache filled first); the bundle path is
    from_bundles'."""
    out: dict[str, list[dict]] = {"NVRTC cold": [], "disk cache warm": []}
    for i in range(REPS):
        out["NVRTC cold"].append(child(what, {**base_env(), "CAIJIT_CACHE_DIR": str(work / f"cold-{what}-{i}")}, work))
    warm = {**base_env(), "CAIJIT_CACHE_DIR": str(work / f"warm-{what}")}
    child(what, warm, work)
    for _ in range(REPS):
        out["disk cache warm"].append(child(what, warm, work))
    return out


def from_bundles(
    calls: dict[str, dict[str, str]], work: Path, builds: dict[str, dict[str, str]]
) -> dict[tuple[str, str], list[dict]]:
    """Each call from its bundle (no NVRTC, a fresh disk cache) with each build (its
    environment), by (build, call): the builds and calls taking turns (one process of
    each, then the next round), so that the machine's drift (a busy start, frequency)
    falls on all of them alike."""
    out: dict[tuple[str, str], list[dict]] = {(b, what): [] for b in builds for what in calls}
    for i in range(REPS):
        # The builds in turn, first one and then the other, round by round.
        order = list(enumerate(builds.items()))
        for n, (b, build_env) in order[::-1] if i % 2 else order:
            for what, bundle_env in calls.items():
                cache = str(work / f"bundle-{n}-{what}-{i}")
                env = {**base_env(), **build_env, **bundle_env, "CAIJIT_CACHE_DIR": cache, "CAIJIT_NVRTC_PATH": NO_NVRTC}
                got = child(what, env, work)
                # (PyTorch may map the machine's own NVRTC; caijit's is made unloadable.)
                if got["compiles"] != 0:
                    raise RuntimeError(f"{what} from a bundle compiled: {got}")
                # Each build is the one its processes imported.
                if BASE and got["caijit"].startswith(BASE + os.sep) != ("PYTHONPATH" in build_env):
                    raise RuntimeError(f"{b}: its process imported caijit from {got['caijit']}")
                out[(b, what)].append(got)
        # Each round's calls as they come (stderr), so that a run cut short keeps them.
        names = {b: "" if len(builds) == 1 else f" (build {n})" for n, b in enumerate(builds)}
        done = "  ".join(f"{what}{names[b]} {runs[-1]['call_ms']:.2f}" for (b, what), runs in out.items())
        print(f"round {i + 1}/{REPS}, the call in ms: {done}", file=sys.stderr, flush=True)
    return out


def bake(args: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "caijit", "bundle", "build", *args], capture_output=True, text=True, timeout=1800, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"bundle build {args}: {r.stderr[-3000:]}")
    return time.perf_counter() - t0


def main() -> None:
    import caijit

    major, minor = caijit._native.device_info(0)[1]
    arch = f"sm_{major}{minor}"
    cpus = os.cpu_count() or 1
    rows: list[tuple[str, str, dict[str, list[dict]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # The kernel library baked for this device (as the wheel carries it, for one architecture).
        ops_bundle = work / "ops.caijit"
        t_ops = bake(["--ops", "--arch", arch, "-o", str(ops_bundle)], work)
        ops_env = {"CAIJIT_BUNDLES": str(ops_bundle)}
        # A user template kernel: record its instance, bake it, replay.
        child("template", {**base_env(), "CAIJIT_CACHE_DIR": str(work / "record"), "CAIJIT_RECORD": str(work / "app.json")}, work)
        bake([str(work / "app.json"), "--arch", arch, "-o", str(work / "app.caijit")], work)
        builds = {"bundle, no NVRTC": {}}
        if BASE and not (Path(BASE) / "caijit").is_dir():
            raise SystemExit(f"CAIJIT_BENCH_BASE={BASE} holds no caijit (pip install --no-deps --target DIR a wheel)")
        if BASE:
            path = os.pathsep.join(p for p in (BASE, os.environ.get("PYTHONPATH", "")) if p)
            builds = {f"bundle, no NVRTC, base ({BASE})": {"PYTHONPATH": path}, **builds}
        calls = {"ops": ops_env, "ops_out": ops_env, "template": {"CAIJIT_BUNDLES": str(work / "app.caijit")}}
        bundled = from_bundles(calls, work, builds)
        titles = {"ops": "caijit.ops.add, 2 x float32 tensors", "ops_out": "caijit.ops.add into a given out=", "template": "user template axpy<float>"}
        for what, title in titles.items():
            by = {} if BUNDLE_ONLY else scenarios(what, work)
            rows.append((title, what, {**by, **{b: bundled[(b, what)] for b in builds}}))

        print(f"\n## First call in a fresh process ({arch}, {N} float32 elements, median of {REPS} processes each)\n")
        print("| call | path | `import caijit` | first call to host result | of which the call | compiles |")
        print("|---|---|---|---|---|---|")
        for title, _, by in rows:
            for path, runs in by.items():
                imp = statistics.median(r["import_ms"] for r in runs)
                first = statistics.median(r["first_ms"] for r in runs)
                call = statistics.median(r["call_ms"] for r in runs)
                print(f"| {title} | {path} | {imp:.1f} ms | {first:.2f} ms | {call:.2f} ms | {runs[0]['compiles']} |")

        if BUNDLE_ONLY:
            return
        # Bake times: a 50-instance manifest (one family), and the kernel library.
        (work / "many.cu").write_text(MANY)
        manifest = work / "many.json"
        code = (
            "import caijit, torch\n"
            f"k = caijit.kernel(open({str(work / 'many.cu')!r}).read())\n"
            "for t in (torch.float32, torch.float64):\n"
            "    x = torch.ones(4096, dtype=t, device='cuda'); y = torch.empty(4096, dtype=t, device='cuda')\n"
            "    for K in range(1, 26):\n"
            "        k.specialize(f'tile_sum<{\"float\" if t == torch.float32 else \"double\"}, {K}>')[16, 256](x, y, x.numel())\n"
            "torch.cuda.synchronize()\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=work,
                           env={**base_env(), "CAIJIT_CACHE_DIR": str(work / "many-cache"), "CAIJIT_RECORD": str(manifest)})
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-3000:])
        instances = sum(1 for line in manifest.read_text().splitlines() if line.strip())
        print(f"\n## `bundle build` ({cpus} CPUs)\n")
        print("| input | architectures | -j 1 | parallel (default -j) |")
        print("|---|---|---|---|")
        archs = "sm_80,sm_90,sm_100,sm_120"
        for a, label in ((arch, arch), (archs, archs + " (+PTX)")):
            serial = bake([str(manifest), "--arch", a, "-j", "1", "-o", str(work / "m1.caijit")], work)
            par = bake([str(manifest), "--arch", a, "-o", str(work / "mN.caijit")], work)
            print(f"| {instances}-instance manifest | {label} | {serial:.1f} s | {par:.1f} s |")
        ops_serial = "-" if QUICK else f"{bake(['--ops', '--arch', arch, '-j', '1', '-o', str(work / 'o1.caijit')], work):.1f} s"
        print(f"| kernel library (`--ops`) | {arch} | {ops_serial} | {t_ops:.1f} s |")
        if not QUICK:
            t_all = bake(["--ops", "--arch", archs, "-o", str(work / "o4.caijit")], work)
            print(f"| kernel library (`--ops`), as the wheel carries it | {archs} (+PTX) | - | {t_all:.1f} s |")
            print(f"\nkernel library bundle for {archs} (+PTX): {(work / 'o4.caijit').stat().st_size / 1e6:.2f} MB")
        size = ops_bundle.stat().st_size
        print(f"kernel library bundle for {arch}: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
