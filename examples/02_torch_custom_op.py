"""02: caijit in ordinary PyTorch code: the kernel library's ops on tensors (tensors back,
autograd, torch.compile with no graph break), and a custom kernel made a PyTorch operator
in one call (caijit.torch.op), checked by PyTorch's own torch.library.opcheck:
python examples/02_torch_custom_op.py"""

from __future__ import annotations

import sys

try:
    import torch
except ImportError:
    print("this example needs PyTorch with CUDA (pip install torch) and an NVIDIA GPU: PyTorch is not installed")
    sys.exit(0)

import caijit
import caijit.ops
import caijit.torch as ct

SCALED_ADD = r"""
extern "C" __global__ void scaled_add(const float* x, const float* y, float* out, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}
"""


def main() -> int:
    if not torch.cuda.is_available():
        print(f"this example needs an NVIDIA GPU that PyTorch can use: torch.cuda.is_available() is False (PyTorch {torch.__version__})")
        return 0
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")

    # The library's ops on tensors give tensors (from PyTorch's allocator): PyTorch applies.
    z = caijit.ops.axpy(0.5, x, y)
    torch.testing.assert_close(z * 2, (0.5 * x + y) * 2)

    # Autograd through caijit.ops (each op is the operator torch.ops.caijit.<op>).
    xg, yg = x.clone().requires_grad_(), y.clone().requires_grad_()
    caijit.ops.axpy(0.5, xg, yg).square().sum().backward()
    assert xg.grad is not None and yg.grad is not None
    torch.testing.assert_close(xg.grad, 0.5 * 2 * (0.5 * x + y))
    torch.testing.assert_close(yg.grad, 2 * (0.5 * x + y))

    # A custom kernel as an operator: arguments from the kernel's parameters, `out`
    # allocated like `x`, the fake implementation generated.
    scaled_add = ct.op(caijit.kernel(SCALED_ADD, "scaled_add"), name="caijit_examples::scaled_add", outputs={"out": ct.like("x")})
    torch.testing.assert_close(scaled_add(x, y, 0.5, x.numel()), 0.5 * x + y)
    torch.library.opcheck(scaled_add.operator, (x, y, 0.5, x.numel()))
    torch.library.opcheck(torch.ops.caijit.axpy.default, (0.5, x, y))

    # Inside a compiled graph: traced as operators, no graph break.
    def layer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(caijit.ops.softmax(scaled_add(a, b, 0.5, a.numel()).view(10, 100))) * 2

    explained = torch._dynamo.explain(layer)(x, y)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(torch.compile(layer, fullgraph=True)(x, y), layer(x, y))
    print("caijit ops and a caijit kernel as PyTorch operators (eager, autograd, opcheck, torch.compile): ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
