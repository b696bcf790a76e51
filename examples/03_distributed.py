"""caijit kernels between NCCL all-reduces: one process per GPU with torch.distributed.

Each rank makes its own input on its GPU, runs a caijit kernel on it in place, all-reduces
with NCCL, runs a second caijit kernel on the sum, and checks the result against a
single-process NumPy reference. The kernels run on PyTorch's current stream of each rank,
so they are ordered with the collectives exactly as PyTorch's own ops are.

    python examples/03_distributed.py      # one process per visible GPU (needs 2 or more)
"""

from __future__ import annotations

import os
import socket
import sys

# NVLink multicast (NVLS) stays off: the GPU machines this runs on require it.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import numpy as np
import numpy.typing as npt

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    print("this example needs PyTorch with CUDA and NCCL (pip install torch) and 2 or more NVIDIA GPUs: PyTorch is not installed")
    sys.exit(0)

import caijit

N = 1 << 20
AFFINE = r"""
extern "C" __global__ void affine(float* x, float a, float b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = a * x[i] + b;
}
"""


def rank_input(rank: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(rank).standard_normal(N).astype(np.float32)


def reference(world: int) -> npt.NDArray[np.float64]:
    """What every rank must end with: 0.5 * sum_r (2 x_r + r) - 1, in float64."""
    total = np.zeros(N)
    for r in range(world):
        total += 2.0 * rank_input(r).astype(np.float64) + r
    return 0.5 * total - 1.0


def worker(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        affine = caijit.kernel(AFFINE)
        x = torch.from_numpy(rank_input(rank)).to(f"cuda:{rank}")
        stream = torch.cuda.current_stream()
        affine.forall(N, stream=stream)(x, 2.0, float(rank), N)  # on device `rank`, from x's pointer
        dist.all_reduce(x)
        affine.forall(N, stream=stream)(x, 0.5, -1.0, N)
        err = float(np.max(np.abs(x.cpu().numpy() - reference(world))))
    finally:
        dist.destroy_process_group()
    if err > 1e-4 * world:
        raise SystemExit(f"rank {rank}: max |error| = {err:.2e}")
    print(f"rank {rank} (cuda:{rank}): caijit kernel, NCCL all_reduce, caijit kernel: max |error| = {err:.1e}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    world = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if world < 2:
        print(f"this example needs 2 or more NVIDIA GPUs that PyTorch can use; {world} visible")
        return 0
    spawn = getattr(mp, "spawn")  # (untyped in PyTorch's stubs)
    spawn(worker, args=(world, free_port()), nprocs=world)
    print(f"{world} ranks agree with the single-process reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
