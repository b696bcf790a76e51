"""Where the first caijit.ops call from a bundle spends its time: fresh processes, the
kernel library bundle given as argv[1] (CAIJIT_BUNDLES), NVRTC unloadable; each line times
import caijit, import caijit.ops, the first op into an out= (then another dtype, another op)
and the first op that allocates (in both orders), and the copy to the host; then the first
op's phases (CAIJIT_PHASE_TIMES: module.compile is finding its code in the bundle, of
which module.bundle_open opens the bundle, module.bundle_key computes the program's key and
module.bundle_read reads, inflates and describes its code; module.declarations is reading
the source's kernel declarations; module.load and module.kernel the driver's loading,
launch.* the launch itself). Needs a GPU and PyTorch:

    python -m caijit bundle build --ops --arch sm_90 -o /tmp/ops.caijit
    python python/benchmarks/probe_first_op.py /tmp/ops.caijit
"""
import json, os, subprocess, sys, time
CHILD = r'''
import sys, time, torch
order = sys.argv[1]
a = torch.arange(1 << 16, dtype=torch.float32, device="cuda"); b = torch.ones_like(a); c = torch.empty_like(a)
a64, b64, c64 = a.double(), b.double(), c.double()
torch.cuda.synchronize()
T = [("start", time.perf_counter())]
def mark(n): T.append((n, time.perf_counter()))
import caijit; mark("import caijit")
import caijit.ops as ops; mark("import caijit.ops")
if order == "out":
    ops.add(a, b, out=c); mark("first add(out=)")
    phases = {k: v for k, v in caijit._native.phase_times(reset=True).items() if v[0]}
    torch.cuda.synchronize(); mark("sync")
    ops.add(a64, b64, out=c64); mark("float64 add(out=)"); torch.cuda.synchronize(); mark("sync")
    ops.multiply(a, b, out=c); mark("multiply(out=)"); torch.cuda.synchronize(); mark("sync")
    r = ops.add(a, b); mark("add (alloc)"); torch.cuda.synchronize(); mark("sync")
else:
    r = ops.add(a, b); mark("first add (alloc)")
    phases = {k: v for k, v in caijit._native.phase_times(reset=True).items() if v[0]}
    torch.cuda.synchronize(); mark("sync")
    ops.add(a, b, out=c); mark("second add(out=)"); torch.cuda.synchronize(); mark("sync")
x = torch.as_tensor(r, device="cuda"); mark("torch.as_tensor"); x.cpu(); mark(".cpu()")
print("  ".join(f"{n}: {(t - T[i][1]) * 1e3:.2f}" for i, (n, t) in enumerate(T[1:])))
print("    first op's phases (ms):", "  ".join(f"{k}: {ns / 1e6:.2f}" for k, (_, ns) in phases.items()))
'''
env = {k: v for k, v in os.environ.items()}
env.update(CAIJIT_BUNDLES=sys.argv[1], CAIJIT_NVRTC_PATH="/nonexistent", CAIJIT_PACKAGED_BUNDLE="0", CAIJIT_PHASE_TIMES="1")
for order in ("out", "alloc", "out", "alloc"):
    env["CAIJIT_CACHE_DIR"] = f"/tmp/probe-cache-{time.time()}"
    r = subprocess.run([sys.executable, "-c", CHILD, order], env=env, capture_output=True, text=True)
    print(order, r.stdout.strip() or r.stderr[-500:])
