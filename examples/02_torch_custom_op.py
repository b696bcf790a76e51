"""02: a PyTorch custom op written with caijit (torch.library.custom_op), usable from
ordinary PyTorch code: python examples/02_torch_custom_op.py"""

from __future__ import annotations

import torch

import caijit.ops


@torch.library.custom_op("caijit_examples::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x + y on the GPU through caijit's kernel library."""
    out = torch.empty_like(x)
    caijit.ops.axpy(alpha, x.contiguous(), y.contiguous(), out=out)
    return out


@scaled_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


def main() -> None:
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    torch.testing.assert_close(scaled_add(x, y, 0.5), 0.5 * x + y)
    print("custom op: ok")


if __name__ == "__main__":
    main()
