"""02: a PyTorch custom op written with caijit (torch.library.custom_op), usable from
ordinary PyTorch code — eager, autograd, and inside torch.compile'd graphs:
python examples/02_torch_custom_op.py"""

from __future__ import annotations

import sys
from typing import Any

try:
    import torch
except ImportError:
    print("this example needs PyTorch with CUDA (pip install torch) and an NVIDIA GPU: PyTorch is not installed")
    sys.exit(0)

import caijit.ops


@torch.library.custom_op("caijit_examples::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x + y on the GPU through caijit's kernel library. The op's gradient is
    registered below; its body sees the tensors' data (detach: a tensor that requires grad
    exports no CUDA Array Interface)."""
    out = torch.empty_like(x)
    caijit.ops.axpy(alpha, x.detach().contiguous(), y.detach().contiguous(), out=out)
    return out


@scaled_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    # What torch.compile traces with: the result's shape, dtype and device, no data.
    torch._check(x.shape == y.shape)
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.alpha = inputs[2]


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    return grad * ctx.alpha, grad, None


scaled_add.register_autograd(_backward, setup_context=_setup_context)


def main() -> int:
    if not torch.cuda.is_available():
        print(f"this example needs an NVIDIA GPU that PyTorch can use: torch.cuda.is_available() is False (PyTorch {torch.__version__})")
        return 0
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    torch.testing.assert_close(scaled_add(x, y, 0.5), 0.5 * x + y)

    # Autograd through the op.
    xg, yg = x.clone().requires_grad_(), y.clone().requires_grad_()
    scaled_add(xg, yg, 0.5).square().sum().backward()
    torch.testing.assert_close(xg.grad, 0.5 * 2 * (0.5 * x + y))
    torch.testing.assert_close(yg.grad, 2 * (0.5 * x + y))

    # PyTorch's own checks of the registration (schema, fake kernel, autograd, dispatch).
    torch.library.opcheck(scaled_add, (x, y, 0.5))
    torch.library.opcheck(scaled_add, (xg, yg, 0.5))

    # Inside a compiled graph: traced through the fake kernel, run by caijit.
    @torch.compile(fullgraph=True)
    def layer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(scaled_add(a, b, 0.5)) * 2

    torch.testing.assert_close(layer(x, y), torch.relu(0.5 * x + y) * 2)
    print("custom op (eager, autograd, opcheck, torch.compile): ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
