"""06: a small model step with a custom caijit kernel inside, trained with PyTorch:
RMSNorm forward and backward as two CUDA kernels, made PyTorch operators by
caijit.torch.op, in an nn.Module with caijit.ops beside it; run eagerly, under
torch.compile (0 graph breaks) and under torch.compile(mode="reduce-overhead") (CUDA
graphs), against the same model in plain PyTorch.

    python examples/06_torch_model.py [--steps 50]     (needs PyTorch and an NVIDIA GPU)

Prints each variant's loss after training (they agree) and its time per training step.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

try:
    import torch
    from torch import nn
except ImportError:
    print("this example needs PyTorch with CUDA (pip install torch) and an NVIDIA GPU: PyTorch is not installed")
    sys.exit(0)

import caijit
import caijit.torch as ct

RMSNORM = r"""
#include <caijit/caijit.cuh>
// One block per row: the row's sum of squares by the block, then each element.
__device__ float block_sum(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

// y = x / sqrt(mean(x^2) + eps) * w; rstd (one per row) is kept for the backward pass.
extern "C" __global__ void rms_forward(const float* x, const float* w, float* y, float* rstd, int cols, float eps) {
    __shared__ float shared[32];
    const float* xr = x + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j] * xr[j];
    float r = rsqrtf(block_sum(s, shared) / cols + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(long long)blockIdx.x * cols + j] = xr[j] * r * w[j];
}

// dx = r * w * g - x * r^3 * mean(w * g * x)
extern "C" __global__ void rms_backward(const float* x, const float* w, const float* rstd, const float* g, float* dx, int cols) {
    __shared__ float shared[32];
    long long row = (long long)blockIdx.x * cols;
    float r = rstd[blockIdx.x];
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += w[j] * g[row + j] * x[row + j];
    float m = block_sum(s, shared) / cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dx[row + j] = r * w[j] * g[row + j] - x[row + j] * r * r * r * m;
}
"""

OPS: dict[str, ct.Operator] = {}


def make_operators() -> None:
    """Each kernel as a PyTorch operator (arguments from the kernel's parameters, outputs
    allocated by PyTorch, one block per row), and the forward one's derivative."""
    rows = lambda x, *_: x.shape[0]  # noqa: E731
    OPS["forward"] = ct.op(
        caijit.kernel(RMSNORM, "rms_forward"),
        name="caijit_examples::rms_forward",
        outputs={"y": ct.like("x"), "rstd": lambda x, w, cols, eps: ((x.shape[0],), torch.float32)},
        grid=rows,
        block=256,
    )
    OPS["backward"] = ct.op(
        caijit.kernel(RMSNORM, "rms_backward"), name="caijit_examples::rms_backward", outputs={"dx": ct.like("x")}, grid=rows, block=256
    )

    def setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, w, _, _ = inputs
        ctx.save_for_backward(x, w, output[1])

    def backward(ctx: Any, gy: torch.Tensor, _grstd: Any) -> tuple:
        x, w, rstd = ctx.saved_tensors
        gy = gy.contiguous()
        dx = OPS["backward"](x, w, rstd, gy, x.shape[1])
        dw = (gy * x * rstd[:, None]).sum(0)
        return dx, dw, None, None

    OPS["forward"].register_autograd(backward, setup_context=setup)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6, caijit_kernels: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps, self.caijit_kernels = eps, caijit_kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.caijit_kernels:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return OPS["forward"](x.contiguous(), self.weight, x.shape[-1], self.eps)[0]


class Block(nn.Module):
    """Linear → RMSNorm → GELU → Linear, with a residual: caijit.ops.add joins the branches."""

    def __init__(self, dim: int, caijit_kernels: bool) -> None:
        super().__init__()
        self.up, self.norm, self.down = nn.Linear(dim, 4 * dim), RMSNorm(4 * dim, caijit_kernels=caijit_kernels), nn.Linear(4 * dim, dim)
        self.caijit_kernels = caijit_kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(nn.functional.gelu(self.norm(self.up(x))))
        return caijit.ops.add(x, h) if self.caijit_kernels else x + h


def train(model: nn.Module, step_fn: Callable[..., Any], data: torch.Tensor, target: torch.Tensor, steps: int) -> tuple[float, float]:
    """(final loss, ms per step): ``steps`` SGD steps after 3 warm-up steps."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def step() -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()  # each step is a new iteration of the CUDA graphs
        opt.zero_grad()  # (set_to_none: gradients of CUDA-graph outputs are not kept across replays)
        loss = step_fn(data, target)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    return float(loss.detach()), (time.perf_counter() - t0) / steps * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(f"this example needs an NVIDIA GPU that PyTorch can use: torch.cuda.is_available() is False (PyTorch {torch.__version__})")
        return 0
    make_operators()
    torch.manual_seed(0)
    dim, batch = 256, 512
    data, target = torch.randn(batch, dim, device="cuda"), torch.randn(batch, dim, device="cuda")
    start = nn.Sequential(Block(dim, True), Block(dim, True)).cuda()
    state = {k: v.clone() for k, v in start.state_dict().items()}

    def model(caijit_kernels: bool) -> nn.Module:
        m = nn.Sequential(Block(dim, caijit_kernels), Block(dim, caijit_kernels)).cuda()
        m.load_state_dict(state)
        return m

    def loss_of(m: nn.Module) -> Callable[..., torch.Tensor]:
        return lambda x, t: nn.functional.mse_loss(m(x), t)

    # The custom op's gradient against PyTorch's autograd of the same formula.
    x = torch.randn(8, 64, dtype=torch.float32, device="cuda", requires_grad=True)
    norm, ref = RMSNorm(64).cuda(), RMSNorm(64, caijit_kernels=False).cuda()
    (g1,) = torch.autograd.grad(norm(x).square().sum(), x)
    (g2,) = torch.autograd.grad(ref(x).square().sum(), x)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-4)

    m = model(True)
    explained = torch._dynamo.explain(loss_of(m))(data, target)
    print(f"torch.compile of the caijit model: {explained.graph_count} graph, {explained.graph_break_count} graph breaks")
    assert explained.graph_break_count == 0, explained.break_reasons

    results = []
    for label, caijit_kernels, mode in [
        ("plain PyTorch, eager", False, "eager"),
        ("caijit kernels, eager", True, "eager"),
        ("plain PyTorch, torch.compile", False, "default"),
        ("caijit kernels, torch.compile", True, "default"),
        ("plain PyTorch, reduce-overhead", False, "reduce-overhead"),
        ("caijit kernels, reduce-overhead", True, "reduce-overhead"),
    ]:
        torch._dynamo.reset()
        m = model(caijit_kernels)
        f = loss_of(m)
        if mode != "eager":
            f = torch.compile(f, fullgraph=True, mode=None if mode == "default" else mode)
        loss, ms = train(m, f, data, target, args.steps)
        results.append((label, loss, ms))
    print(f"| model step ({args.steps} steps, batch {batch}, dim {dim}) | final loss | ms per step |\n|---|---:|---:|")
    for label, loss, ms in results:
        print(f"| {label} | {loss:.5f} | {ms:.3f} |")
    losses = [loss for _, loss, _ in results]
    assert max(losses) - min(losses) < 1e-3 * max(1.0, abs(losses[0])), losses
    print("RMSNorm with caijit kernels, trained eagerly, compiled and in CUDA graphs: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
