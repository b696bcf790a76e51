"""Results in the caller's array library: a `caijit.ops` call whose first array is a CuPy
array allocates its result with CuPy (the native op asks this module; PyTorch's tensors are
made by `caijit.torch`'s operators)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence


def cupy_empty(shape: Sequence[int], dtype: str, device: int) -> Optional[Any]:
    """A new C-ordered CuPy array from CuPy's memory pool on ``device`` (stream-ordered on
    CuPy's current stream, as any CuPy allocation), or None for a dtype CuPy does not have
    (bfloat16: the result is then a caijit.DeviceArray)."""
    import cupy

    dt = _cupy_dtypes.get(dtype)
    if dt is None:
        try:
            dt = cupy.dtype(dtype)
        except TypeError:
            return None
        if dt.name != dtype:  # (a name CuPy reads as another dtype)
            return None
        _cupy_dtypes[dtype] = dt
    if cupy.cuda.runtime.getDevice() == device:
        return cupy.empty(tuple(shape), dtype=dt)
    with cupy.cuda.Device(device):
        return cupy.empty(tuple(shape), dtype=dt)


_cupy_dtypes: Dict[str, Any] = {}
