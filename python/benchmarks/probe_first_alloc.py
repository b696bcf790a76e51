"""Driver-level first-call costs, without caijit, in a fresh process after PyTorch made its
context (ctypes calls of libcuda): a private stream-ordered pool's creation and its first
allocations (argv[3]: the pool's maximum size), the default pool's, cuMemAlloc's,
torch.empty's, and the load of the smallest and the largest CUBIN of a bundle. Needs a GPU
and PyTorch:

    python -m caijit bundle build --ops --arch sm_90 -o /tmp/ops.caijit
    for m in pool default plain torch module; do
        python python/benchmarks/probe_first_alloc.py /tmp/ops.caijit $m
    done
"""
import ctypes, struct, sys, time, zlib
import torch
a = torch.arange(1 << 16, dtype=torch.float32, device="cuda"); torch.cuda.synchronize()
cu = ctypes.CDLL("libcuda.so.1")
def t(f):
    s = time.perf_counter(); r = f(); return (time.perf_counter() - s) * 1e3, r
def chk(r, what):
    if r != 0: raise SystemExit(f"{what} failed {r}")
mode = sys.argv[2]
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
out = []
if mode == "pool":
    class Props(ctypes.Structure):
        _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("locType", ctypes.c_int), ("locId", ctypes.c_int),
                    ("win32", ctypes.c_void_p), ("maxSize", ctypes.c_size_t), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]
    p = Props(); p.allocType = 1; p.locType = 1; p.locId = 0
    if len(sys.argv) > 3: p.maxSize = int(sys.argv[3])
    pool = ctypes.c_void_p()
    ms, r = t(lambda: cu.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(p))); chk(r, "create"); out.append(f"cuMemPoolCreate {ms:.3f}")
    thr = ctypes.c_uint64(2**64 - 1)
    ms, r = t(lambda: cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(thr))); chk(r, "attr"); out.append(f"setattr {ms:.3f}")
    for i in range(3):
        ptr = ctypes.c_uint64()
        ms, r = t(lambda: cu.cuMemAllocFromPoolAsync(ctypes.byref(ptr), 1 << 18, pool, stream)); chk(r, "alloc"); out.append(f"alloc{i} {ms:.3f}")
    ms, r = t(lambda: cu.cuStreamSynchronize(stream)); out.append(f"sync {ms:.3f}")
elif mode == "default":
    for i in range(3):
        ptr = ctypes.c_uint64()
        ms, r = t(lambda: cu.cuMemAllocAsync(ctypes.byref(ptr), 1 << 18, stream)); chk(r, "alloc"); out.append(f"allocasync{i} {ms:.3f}")
elif mode == "plain":
    for i in range(3):
        ptr = ctypes.c_uint64()
        ms, r = t(lambda: cu.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 18)); chk(r, "alloc"); out.append(f"memalloc{i} {ms:.3f}")
elif mode == "torch":
    ms, r = t(lambda: torch.empty(1 << 16, device="cuda")); out.append(f"torch.empty {ms:.3f}")
elif mode == "module":
    b = open(sys.argv[1], "rb").read()
    count = struct.unpack_from("<I", b, 12)[0]
    toc = [struct.unpack_from("<IIQQQ", b, 16 + 64 * i) for i in range(count)]
    cubins = [(z[2], z[3], z[1]) for z in toc if z[0] == 2]
    sizes = []
    for off, stored, flags in cubins[:40]:
        raw = b[off:off + stored]
        sizes.append(zlib.decompress(raw, -15) if flags & 1 else raw)
    big = max(sizes, key=len); small = min(sizes, key=len)
    for name, img in (("small", small), ("big", big), ("big again", big)):
        mod = ctypes.c_void_p()
        ms, r = t(lambda: cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(img))); chk(r, "load"); out.append(f"load {name} {len(img)}B {ms:.3f}")
print(mode, " ".join(out))
