"""A graph replay's host side, checked without a GPU: what each kernel node is given.

The replay runs in a child process against the stand-in driver of the launch-cost counter
(python/benchmarks/count_launch/stub_cuda.c), which keeps the first parameters each kernel
node was last given, at capture or by `cuGraphExecKernelNodeSetParams`. Random rebinds of a
chain of kernels (new arrays, new scalar values, any subset of the inputs) must leave every
node with exactly the arguments an eager launch would get, update only the nodes whose
bytes changed, and a refused rebind must change nothing; and around other captures, what a
graph keeps alive and refuses. What the GPU computes from them is test_graphs.py's part."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import nvrtc_missing

STUB = Path(__file__).resolve().parents[1] / "benchmarks" / "count_launch" / "stub_cuda.c"
SRC = 'extern "C" __global__ void step(const float* x, float* y, long long n) {}'

#: What both child scripts start with: the stand-in driver's records, the kernel, and a
#: check that a call is refused with `message` (an `ArgumentError`).
PRELUDE = r"""
import ctypes, sys
import caijit

SRC = sys.argv[1]
stub = ctypes.CDLL("libcuda.so.1")
stub.stub_node_param.restype = stub.stub_template_param.restype = ctypes.c_ulonglong
stub.stub_record(3)
k = caijit.kernel(SRC)
step = k[1, 32]
ptr = lambda a: a.__cuda_array_interface__["data"][0]

def refused(call, message):
    try:
        call()
    except caijit.ArgumentError as e:
        assert message in str(e), str(e)
    else:
        raise AssertionError(f"accepted: {message}")
"""

CHILD = PRELUDE + r"""
import random

K = 10
names = [f"b{i}" for i in range(K + 1)]
sets = [[caijit.zeros(32) for _ in names] for _ in range(3)]
first = stub.stub_nodes()
with caijit.graph() as g:
    bufs = [g.input(name, b) for name, b in zip(names, sets[0])]
    n = g.input("n", 32)
    for i in range(K):
        step(bufs[i], bufs[i + 1], n)
assert stub.stub_nodes() - first == K, stub.stub_nodes()

bound, scalar = list(sets[0]), 32
def nodes():
    return [tuple(stub.stub_node_param(first + i, p) for p in range(3)) for i in range(K)]
def expected():
    return [(ptr(bound[i]), ptr(bound[i + 1]), scalar) for i in range(K)]
updates = lambda: caijit.stats()["graph_node_updates"]
assert nodes() == expected()

rng = random.Random(int(sys.argv[2]))
for turn in range(400):
    chosen = rng.sample(range(K + 1), rng.randint(0, K + 1))
    new = {names[j]: sets[rng.randrange(3)][j] for j in chosen}
    new_scalar = rng.choice([scalar, rng.randrange(1 << 40)]) if rng.random() < 0.3 else None
    if new_scalar is not None:
        new["n"] = new_scalar
    was, before = expected(), updates()
    if rng.random() < 0.1:
        # A refused rebind, after good ones in the same call: nothing changes.
        bad = dict(new, **{names[rng.randrange(K + 1)]: caijit.zeros(32, "float64")})
        try:
            g(**bad)
        except caijit.ArgumentError:
            pass
        else:
            raise AssertionError(f"turn {turn}: a float64 array was bound to a float* parameter")
        assert (nodes(), updates()) == (was, before), f"turn {turn}: a refused rebind changed the graph"
        continue
    given = dict(new)
    lead = 0
    while lead <= K and names[lead] in given and rng.random() < 0.8:
        lead += 1
    # The leading inputs by position (in the order they were named), the rest by keyword.
    leading = [given.pop(names[j]) for j in range(lead)]
    g(*leading, **given)
    for j in chosen:
        bound[j] = new[names[j]]
    scalar = new_scalar if new_scalar is not None else scalar
    now = expected()
    assert nodes() == now, f"turn {turn}: rebinding {sorted(new)} left nodes {nodes()} for {now}"
    changed = sum(a != b for a, b in zip(was, now))
    assert updates() - before == changed, f"turn {turn}: {updates() - before} node updates for {changed} changed nodes"
for call, message in (
    (lambda: g(*sets[1], 32, 32), "the graph has 12 inputs"),
    (lambda: g(sets[1][0], b0=sets[1][0]), "graph input `b0` is given twice"),
    (lambda: g(c=sets[1][0]), "the graph has no input `c`"),
):
    before = (nodes(), updates())
    refused(call, message)
    assert (nodes(), updates()) == before
print("OK")
"""


#: What a graph keeps alive, and what it refuses, around other captures.
CHILD_CAPTURES = PRELUDE + r"""
import gc, threading, weakref

class Iface:
    # A foreign array (one a weak reference can watch) over a caijit array.
    def __init__(self, base):
        self.base, self.__cuda_array_interface__ = base, base.__cuda_array_interface__

# A launch on the graph's stream from another thread is captured: its arguments live as
# long as the graph.
y, seen = caijit.zeros(32), {}
def other_thread(stream):
    t = Iface(caijit.zeros(32))
    seen["weak"], seen["ptr"] = weakref.ref(t), ptr(t)
    k[1, 32, stream](t, y, 1)
first = stub.stub_nodes()
with caijit.graph() as g0:
    th = threading.Thread(target=other_thread, args=(g0.stream,))
    th.start()
    th.join()
gc.collect()
assert stub.stub_node_param(first, 0) == seen["ptr"] and seen["weak"]() is not None, "the other thread's array was freed"

# A replay's conversion errors name the input.
a, b = caijit.zeros(32), caijit.zeros(32)
inner = stub.stub_nodes()
with caijit.graph() as g1:
    step(g1.input("a", a), b, g1.input("n", 1))
g1()
refused(lambda: g1(a="3"), "graph input `a`: cannot pass a str")
class Masked:
    __cuda_array_interface__ = dict(a.__cuda_array_interface__, mask=a)
try:
    g1(a=Masked())
except caijit.InterfaceError as e:
    assert str(e).startswith("graph input `a`: ") and "mask" in str(e), str(e)
else:
    raise AssertionError("a masked array was bound")

# Replayed inside another caijit capture, a graph is a copy: it may not read that graph's
# inputs (a rebinding of them could not follow), and nothing is added when it is refused.
x, c = caijit.zeros(32), Iface(caijit.zeros(32))
children = stub.stub_children()
with caijit.graph() as g2:
    gx, s = g2.input("x", x), g2.input("s", 5)
    refused(lambda: g1(a=gx), "graph input `x` of the graph being captured is read by a replay of another graph")
    refused(lambda: g1(n=s), "scalar input `s` of the graph being captured is given to a replay of another graph")
    # Its own arrays it may read: the copy keeps them alive, whatever g1 binds later.
    g1(a=c, n=7)
    weak_c = weakref.ref(c)
    step(gx, y, s)
assert stub.stub_children() == children + 1
del c
d = caijit.zeros(32)
g1(a=d, n=1)
gc.collect()
assert weak_c() is not None, "the array the copy in g2 reads was freed"

# A copy that cannot be added leaves the graph bound as it was: the next copy reads what
# the graph is bound to, not the failed call's arguments.
stub.stub_fail_children(1)
with caijit.graph() as g3:
    z = g3.input("z", caijit.zeros(32))
    try:
        g1(a=caijit.zeros(32), n=77)
    except caijit.CaijitError:
        pass
    else:
        raise AssertionError("the failing child-graph node was not reported")
    g1()
    step(z, y, 1)
copied = [stub.stub_template_param(inner, p) for p in range(3)]
assert copied == [ptr(d), ptr(b), 1], f"the copy reads {copied}, not the graph's binding"
print("OK")
"""


CHILD_TRACE_AND_CAPSULES = PRELUDE + r"""
import gc

# A replay is one entry of the launch ring, named by the graph's kernels, with the inputs
# it was given.
x, y = caijit.zeros(32), caijit.zeros(32)
with caijit.graph() as g:
    step(g.input("x", x), y, 1)
    step(x, y, 2)
g()
assert caijit.recent_launches()[0]["kernel"] == "graph[step x2]", caijit.recent_launches()[0]
assert caijit.recent_launches()[0]["arguments"] == []
g(x=caijit.zeros(32))
assert caijit.recent_launches()[0]["kernel"] == "graph[step x2]"
assert len(caijit.recent_launches()[0]["arguments"]) == 1

# An input rebound to a DLPack-only array holds its capsule (which owns the memory) while
# the graph is bound to it, not only until that replay is done.
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]
class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]
class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]
class DLManagedTensor(ctypes.Structure):
    pass
DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
api = ctypes.pythonapi
api.PyCapsule_New.restype, api.PyCapsule_New.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]

@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def capsule_destructor(capsule):
    if api.PyCapsule_IsValid(capsule, b"dltensor"):  # unconsumed: its deleter runs
        m = ctypes.cast(api.PyCapsule_GetPointer(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
        m.contents.deleter(m)

released, owned = [], {}
class Fresh:
    # Each export is a capsule owning a fresh buffer, which its deleter frees.
    def __dlpack_device__(self):
        return (2, 0)
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        buf, shape, m = caijit.zeros(32), (ctypes.c_int64 * 1)(32), DLManagedTensor()
        m.dl_tensor = DLTensor(ptr(buf), DLDevice(2, 0), 1, DLDataType(2, 32, 1), shape, None, 0)
        def deleter(_, key=id(m), at=ptr(buf)):
            released.append(at)
            owned.pop(key)
        m.deleter = DELETER(deleter)
        owned[id(m)] = (m, shape, buf, m.deleter)
        return api.PyCapsule_New(ctypes.addressof(m), b"dltensor", ctypes.cast(capsule_destructor, ctypes.c_void_p))

node = stub.stub_nodes() - 2
g(x=Fresh())
bound_to = stub.stub_node_param(node, 0)
for _ in range(3):
    step(x, y, 1)  # launches collect what has finished
gc.collect()
assert bound_to not in released, "the capsule the graph is bound to was released"
g(x=caijit.zeros(32))  # rebound: the capsule goes once this replay is done
step(x, y, 1)
gc.collect()
assert bound_to in released, "the replaced capsule was never released"
print("OK")
"""

def run_child(tmp_path: Path, script: str, *args: str) -> None:
    """Run `script` against the stand-in driver (built into `tmp_path`); it prints OK."""
    import caijit

    # Compiled here, with the real toolchain, into the run's disk cache, which the child
    # (whose driver is the stand-in) reads.
    caijit._native.compile_program(SRC, "sm_90")
    if not (tmp_path / "libcuda.so.1").exists():
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(STUB)], check=True)
        (tmp_path / "libcuda.so").symlink_to("libcuda.so.1")
    env = dict(os.environ, LD_LIBRARY_PATH=f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    out = subprocess.run([sys.executable, "-c", script, SRC, *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "OK", (out.stdout + out.stderr)[-3000:]


needs_tools = [
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (to build the stand-in driver)"),
    pytest.mark.skipif(nvrtc_missing() is not None, reason=str(nvrtc_missing())),
]


@needs_tools[0]
@needs_tools[1]
@pytest.mark.parametrize("seed", [0, 1])
def test_replays_give_each_node_exactly_its_new_arguments(tmp_path: Path, seed: int) -> None:
    run_child(tmp_path, CHILD, str(seed))


@needs_tools[0]
@needs_tools[1]
def test_what_graphs_keep_and_refuse_around_other_captures(tmp_path: Path) -> None:
    run_child(tmp_path, CHILD_CAPTURES)


@needs_tools[0]
@needs_tools[1]
def test_replays_are_traced_and_hold_their_dlpack_capsules(tmp_path: Path) -> None:
    run_child(tmp_path, CHILD_TRACE_AND_CAPSULES)
