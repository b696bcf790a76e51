"""caijit kernels inside jitted JAX programs against the same computation written in
jax.numpy, measured in the same run.

1. Per-call cost: a `lax.fori_loop` of 1,000 iterations of y = a * x + y on 4,096 float32
   elements, the body a caijit axpy (an XLA custom call served by caijit's FFI handler) or
   `a * x + y` in jax.numpy (one XLA fusion). Target: caijit ≤ 1.2x jax.numpy.
2. Bandwidth: the same loop (20 iterations) on 2^26 float32 elements (768 MiB moved per
   iteration: x and y read, the result written), far past the L2. Target: caijit ≥ 95 % of
   XLA's fused op. Two kernels: one element per thread, and four (float4 loads).
Both caijit kernels update y in place (`input_output_aliases={1: 0}`), as XLA's fusion
does with the loop-carried y: without the alias XLA copies the result back into the loop
carry each iteration, which halves the bandwidth.

Each number is the median over 30 runs of one call of the jitted loop, timed on the host
around `block_until_ready` (the loop's own time dominates: 1,000 iterations, or 20 of
~0.2 ms each).

Run on a GPU machine: python python/benchmarks/bench_jax.py
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable, Optional

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import jax.numpy as jnp
import numpy

import caijit
import caijit.jax

SOURCE = r"""
template <typename T>
__global__ void axpy(T a, const T* x, const T* y, T* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}

// Four elements per thread with 16-byte loads and stores (n4 = n / 4).
__global__ void axpy4(float a, const float4* x, const float4* y, float4* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 u = x[i], v = y[i];
        out[i] = make_float4(a * u.x + v.x, a * u.y + v.y, a * u.z + v.z, a * u.w + v.w);
    }
}

"""

A = 0.5
RUNS = 30
BLOCK = 256


def timed(fn: Callable[[], Any]) -> float:
    """Median seconds of one call of fn() (its result waited for), after two warm-ups."""
    jax.block_until_ready(fn())
    jax.block_until_ready(fn())
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def loop(body: Callable[[jax.Array, jax.Array], jax.Array], iterations: int) -> Callable[[jax.Array, jax.Array], jax.Array]:
    @jax.jit
    def run(x: jax.Array, y: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, iterations, lambda i, y: body(x, y), y)

    return run


def main() -> None:
    program = caijit.module(SOURCE)
    def scalar_axpy(command_buffer: bool) -> Callable[[jax.Array, jax.Array], jax.Array]:
        return caijit.jax.kernel_call(
            program.kernel("axpy"),
            lambda x, y: x,
            grid=lambda x, y: (x.size + BLOCK - 1) // BLOCK,
            block=BLOCK,
            input_output_aliases={1: 0},
            command_buffer=command_buffer,
            a=numpy.float32(A),
            n=lambda x, y: x.size,
        )

    axpy, axpy_direct = scalar_axpy(True), scalar_axpy(False)
    axpy4 = caijit.jax.kernel_call(
        program.kernel("axpy4"),
        lambda x, y: x,
        grid=lambda x, y: (x.size // 4 + BLOCK - 1) // BLOCK,
        block=BLOCK,
        input_output_aliases={1: 0},
        a=A,
        n4=lambda x, y: x.size // 4,
    )

    def xla(x: jax.Array, y: jax.Array) -> jax.Array:
        return A * x + y

    rng = numpy.random.default_rng(0)
    rows: list[tuple[str, str, float, Optional[float], float]] = []
    print(f"device: {jax.devices()[0].device_kind}; JAX {jax.__version__}")

    n, iters = 4096, 1000
    x = jnp.asarray(rng.standard_normal(n), jnp.float32)
    y = jnp.asarray(rng.standard_normal(n), jnp.float32)
    ours, direct, theirs = loop(axpy, iters), loop(axpy_direct, iters), loop(xla, iters)
    numpy.testing.assert_allclose(numpy.asarray(ours(x, y)), numpy.asarray(theirs(x, y)), rtol=1e-4)
    numpy.testing.assert_allclose(numpy.asarray(direct(x, y)), numpy.asarray(theirs(x, y)), rtol=1e-4)
    before = caijit.stats()
    t_ours, t_direct, t_xla = timed(lambda: ours(x, y)), timed(lambda: direct(x, y)), timed(lambda: theirs(x, y))
    after = caijit.stats()
    assert after["compiles"] == before["compiles"] and after["host_syncs"] == before["host_syncs"]
    rows.append(("fori_loop 1,000 x axpy, 4,096 float32", "caijit axpy (command buffers)", t_ours / iters * 1e6, None, t_ours / t_xla))
    rows.append(("", "caijit axpy (command_buffer=False)", t_direct / iters * 1e6, None, t_direct / t_xla))
    rows.append(("", "jnp a * x + y", t_xla / iters * 1e6, None, 1.0))

    n, iters = 1 << 26, 20
    x = jnp.asarray(rng.standard_normal(n, dtype=numpy.float32))
    y = jnp.asarray(rng.standard_normal(n, dtype=numpy.float32))
    moved = 3 * n * 4
    fused = loop(xla, iters)
    t_xla = timed(lambda: fused(x, y))
    for name, body in (("caijit axpy", axpy), ("caijit axpy4 (float4)", axpy4)):
        run = loop(body, iters)
        numpy.testing.assert_allclose(numpy.asarray(run(x, y))[:4096], numpy.asarray(fused(x, y))[:4096], rtol=1e-4)
        t = timed(lambda: run(x, y))
        rows.append(("fori_loop 20 x axpy, 2^26 float32" if name == "caijit axpy" else "", name, t / iters * 1e6, moved / (t / iters) / 1e9, t_xla / t))
    rows.append(("", "jnp a * x + y (XLA fusion)", t_xla / iters * 1e6, moved / (t_xla / iters) / 1e9, 1.0))

    print()
    print("| loop | body | µs per iteration | GB/s | vs jax.numpy |")
    print("|---|---|---|---|---|")
    for loop_name, body_name, us, gbs, ratio in rows:
        bw = f"{gbs:.0f}" if gbs is not None else ""
        # Cost rows: time ratio (lower is better); bandwidth rows: bandwidth ratio.
        print(f"| {loop_name} | {body_name} | {us:.2f} | {bw} | {ratio:.3f}x |")
    print()
    print("vs jax.numpy: time ratio for the 4,096-element loop (target <= 1.2x); bandwidth ratio for 2^26 (target >= 0.95x).")


if __name__ == "__main__":
    main()
