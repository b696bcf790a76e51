"""Peers' first elementwise add in a fresh process, for bench_first_call.py's rows: PyTorch
(its kernels are in its library, loaded when first launched) and CuPy (its kernel cache on
disk filled by two earlier processes). As there, the inputs (65,536 float32 elements), the
library's first copy kernel and its first copy to the host come before the clock; timed are
the call (allocating its result, or into out=) and then the copy of the result to the host.
Median of 7 fresh processes each, taking turns. Needs a GPU, PyTorch and CuPy:

    python python/benchmarks/probe_first_peers.py
"""
import json
import statistics
import subprocess
import sys

CHILD = r'''
import sys, time, json
lib, mode = sys.argv[1], sys.argv[2]
N = 1 << 16
if lib == "torch":
    import torch
    a = torch.arange(N, dtype=torch.float32, device="cuda"); b = torch.ones(N, dtype=torch.float32, device="cuda"); c = torch.empty_like(a)
    y = b.clone(); b[:1].cpu(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = torch.add(a, b) if mode == "alloc" else torch.add(a, b, out=c)
    t1 = time.perf_counter(); h = (r if mode == "alloc" else c).cpu(); t2 = time.perf_counter()
else:
    import cupy
    a = cupy.arange(N, dtype=cupy.float32); b = cupy.ones(N, dtype=cupy.float32); c = cupy.empty_like(a)
    y = b.copy(); b[:1].get(); cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    r = cupy.add(a, b) if mode == "alloc" else cupy.add(a, b, out=c)
    t1 = time.perf_counter(); h = (r if mode == "alloc" else c).get(); t2 = time.perf_counter()
assert float(h[12345]) == 12346.0
print(json.dumps({"call": (t1 - t0) * 1e3, "host": (t2 - t0) * 1e3}))
'''


def run(lib: str, mode: str) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, lib, mode], capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise SystemExit(f"{lib} {mode}: {r.stderr[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    run("cupy", "alloc")  # CuPy's kernel cache on disk, filled
    run("cupy", "out")
    res: dict[tuple[str, str], list[dict]] = {}
    for _ in range(7):
        for lib in ("torch", "cupy"):
            for mode in ("alloc", "out"):
                res.setdefault((lib, mode), []).append(run(lib, mode))
    print("| peer, first add in a fresh process | the call (median of 7) | to the host |")
    print("|---|---|---|")
    for (lib, mode), r in res.items():
        what = "allocating" if mode == "alloc" else "into out="
        print(f"| {lib} {what} | {statistics.median(x['call'] for x in r):.2f} ms | {statistics.median(x['host'] for x in r):.2f} ms |")


if __name__ == "__main__":
    main()
