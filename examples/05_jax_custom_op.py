"""A fused JAX operation with its own backward kernel, trained inside jax.jit.

`affine_relu(x, gamma, beta) = relu(x * gamma + beta)` (per-feature scale and shift, then
ReLU) is one caijit kernel forward and one backward, joined into a differentiable JAX
function with `jax.custom_vjp`. A jitted SGD step fits gamma and beta; the gradients are
checked against the same function written in jax.numpy. Each kernel runs as an XLA custom
call on XLA's own stream: no Python, no host synchronisation per step.

Run: python examples/05_jax_custom_op.py  (needs JAX with CUDA and an NVIDIA GPU)
"""

from __future__ import annotations

import os
from typing import Any

# Let JAX allocate as it goes, so that it shares the GPU with other libraries.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import sys

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("this example needs JAX with CUDA (pip install 'jax[cuda13]') and an NVIDIA GPU: JAX is not installed")
    sys.exit(0)
import numpy

import caijit
import caijit.jax

SOURCE = r"""
template <typename T>
__global__ void affine_relu_fwd(const T* x, const T* gamma, const T* beta, T* y, int rows, int cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= (long long)rows * cols) return;
    int j = i % cols;
    T z = x[i] * gamma[j] + beta[j];
    y[i] = z > T(0) ? z : T(0);
}

// One thread per feature: dx for its column, and the column's sums for dgamma and dbeta.
template <typename T>
__global__ void affine_relu_bwd(const T* x, const T* gamma, const T* beta, const T* g,
                                T* dx, T* dgamma, T* dbeta, int rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    T dg = T(0), db = T(0);
    for (int r = 0; r < rows; ++r) {
        long long i = (long long)r * cols + j;
        T gi = x[i] * gamma[j] + beta[j] > T(0) ? g[i] : T(0);
        dx[i] = gi * gamma[j];
        dg += gi * x[i];
        db += gi;
    }
    dgamma[j] = dg;
    dbeta[j] = db;
}
"""

program = caijit.module(SOURCE)
BLOCK = 256

# Shapes and scalars may be functions of the inputs' shapes (jax.ShapeDtypeStruct objects):
# the forward's output is shaped like x; the backward's like x, gamma and beta.


_forward = caijit.jax.kernel_call(
    program.kernel("affine_relu_fwd"),
    lambda x, gamma, beta: x,
    grid=lambda x, gamma, beta: (x.size + BLOCK - 1) // BLOCK,
    block=BLOCK,
    rows=lambda x, gamma, beta: x.shape[0],
    cols=lambda x, gamma, beta: x.shape[1],
)

_backward = caijit.jax.kernel_call(
    program.kernel("affine_relu_bwd"),
    lambda x, gamma, beta, g: [x, gamma, beta],
    grid=lambda x, gamma, beta, g: (x.shape[1] + BLOCK - 1) // BLOCK,
    block=BLOCK,
    rows=lambda x, gamma, beta, g: x.shape[0],
    cols=lambda x, gamma, beta, g: x.shape[1],
)


@jax.custom_vjp
def affine_relu(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> jax.Array:
    y: jax.Array = _forward(x, gamma, beta)
    return y


def _fwd(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    return affine_relu(x, gamma, beta), (x, gamma, beta)


def _bwd(res: tuple[jax.Array, jax.Array, jax.Array], g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    x, gamma, beta = res
    dx, dgamma, dbeta = _backward(x, gamma, beta, g)
    return dx, dgamma, dbeta


affine_relu.defvjp(_fwd, _bwd)


def reference(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> jax.Array:
    return jnp.maximum(x * gamma + beta, 0)


Params = tuple[jax.Array, jax.Array]


def init_params(features: int = 256) -> Params:
    return jnp.full((features,), 0.5, jnp.float32), jnp.full((features,), 0.1, jnp.float32)


def loss(params: Params, x: jax.Array, target: jax.Array) -> jax.Array:
    gamma, beta = params
    return jnp.mean((affine_relu(x, gamma, beta) - target) ** 2)


def reference_loss(params: Params, x: jax.Array, target: jax.Array) -> jax.Array:
    return jnp.mean((reference(x, *params) - target) ** 2)


def sgd(loss_fn: Any, lr: float = 50.0) -> Any:
    """A jitted SGD step on ``loss_fn`` (the loss is a mean over every element, so each
    parameter's gradient is small: hence the large step)."""

    @jax.jit
    def step(params: Params, x: jax.Array, target: jax.Array) -> tuple[Params, jax.Array]:
        value, (dgamma, dbeta) = jax.value_and_grad(loss_fn)(params, x, target)
        gamma, beta = params
        return (gamma - lr * dgamma, beta - lr * dbeta), value

    return step


train_step = sgd(loss)


def missing_gpu() -> str | None:
    """None where JAX has a CUDA device, else why not."""
    try:
        jax.devices("gpu")
        return None
    except RuntimeError as e:  # no CUDA backend (a CPU-only jaxlib) or no device
        return f"JAX {jax.__version__} has no GPU ({str(e).splitlines()[0]})"


def main() -> int:
    why = missing_gpu()
    if why is not None:
        print(f"this example needs JAX with CUDA (pip install 'jax[cuda13]') and an NVIDIA GPU: {why}")
        return 0
    rng = numpy.random.default_rng(0)
    features = 256
    x = jnp.asarray(rng.standard_normal((64, features)), jnp.float32)
    true_gamma = jnp.asarray(rng.uniform(0.5, 2.0, features), jnp.float32)
    true_beta = jnp.asarray(rng.uniform(-0.5, 0.5, features), jnp.float32)
    target = reference(x, true_gamma, true_beta)

    # The kernels' gradients against jax.numpy's, on the same inputs.
    params = init_params(features)
    ours = jax.jit(jax.grad(loss))(params, x, target)
    theirs = jax.grad(reference_loss)(params, x, target)
    for a, b in zip(ours, theirs):
        numpy.testing.assert_allclose(numpy.asarray(a), numpy.asarray(b), rtol=1e-4, atol=1e-6)

    # Training with the kernels follows training with jax.numpy step for step.
    finals = []
    for step_fn, loss_fn in ((train_step, loss), (sgd(reference_loss), reference_loss)):
        params = init_params(features)
        params, first = step_fn(params, x, target)
        for _ in range(199):
            params, _ = step_fn(params, x, target)
        finals.append(float(loss_fn(params, x, target)))
    print(f"loss {float(first):.4f} -> {finals[0]:.6f} after 200 jitted steps (jax.numpy: {finals[1]:.6f})")
    assert finals[0] < 0.01 * float(first), "training did not converge"
    assert abs(finals[0] - finals[1]) < 1e-3 * float(first), "training differs from jax.numpy's"
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
